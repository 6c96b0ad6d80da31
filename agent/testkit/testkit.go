// Package testkit holds the helpers that the integration tests of several
// packages share (agent, agent/coordinator, deploy, cmd/selftaint):
// running an agent for the length of a test, reading and waiting for a
// Node on the test's control plane, and collecting logs written from many
// goroutines. One copy of each, so that a fix to one (a race in a wait, a
// Run that never returns) reaches every test that uses it. It is for tests
// only: nothing outside a _test.go file imports it.
package testkit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
)

// runTimeout is how long an agent may take to return from Run once its
// context is canceled.
const runTimeout = 30 * time.Second

// StartAgent runs agent.New(opts) until the returned stop is called, also
// at the end of the test. stop cancels Run, waits for it to return and
// fails t if it returned an error other than the cancelation, or did not
// return within 30 s.
func StartAgent(t testing.TB, opts agent.Options) (*agent.Agent, func()) {
	t.Helper()
	a, err := agent.New(opts)
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("agent.Run returned %v", err)
				}
			case <-time.After(runTimeout):
				t.Errorf("agent.Run did not return within %v of cancel", runTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

// GetNode reads Node name, failing t if it cannot.
func GetNode(t testing.TB, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading node %s: %v", name, err)
	}
	return n
}

// WaitNode polls Node name until ok holds and returns it; it fails t,
// saying what it waited for and how the Node last looked (describe, when
// not nil), if ok does not hold within timeout.
func WaitNode(t testing.TB, c kubernetes.Interface, name string, timeout time.Duration, what string, describe func(*corev1.Node) string, ok func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	n, _, err := testcp.WaitNode(context.Background(), c, name, timeout, ok)
	if err != nil {
		last := ""
		if describe != nil {
			last = "; last node: " + describe(n)
		}
		t.Fatalf("waiting for %s on node %s: %v%s", what, name, err, last)
	}
	return n
}

// LogBuffer collects what many goroutines write (a logger, client-go's
// klog, a child process's output) for a test to read.
type LogBuffer struct {
	mu  sync.Mutex // guards buf
	buf strings.Builder
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
