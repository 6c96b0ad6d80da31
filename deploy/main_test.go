package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
)

// The control planes tests share (see testcp.Shared). Tests that install
// versions of the same cluster-scoped objects (an overlay keeps their
// names) do not share one; a test that changes an API server flag or
// needs every Node to be its own starts its own with testcp.Start.
var (
	// installed has deploy/ and deploy/virtual installed as their files
	// are, the agents' policy parameters set for the test agents and every
	// policy in force (installedControlPlane): TestOnControlPlane and
	// TestVirtualPolicyOnControlPlane. kube-controller-manager runs only
	// the controller that type-checks admission policies' CEL against the
	// API's schema (it writes the policies' status.typeChecking); nothing
	// else, so no DaemonSet or Deployment controller creates pods from the
	// manifests and no node lifecycle controller writes the tests' Nodes.
	installed = &installedCP{shared: testcp.NewShared(testcp.Options{
		ControllerManager:     true,
		ControllerManagerArgs: []string{"--controllers=validatingadmissionpolicy-status-controller"},
	})}
	// overlayAndPrefix is a bare control plane for deploy/ through a
	// namespace overlay (TestPolicyNamespaceOverlay) and deploy/virtual as
	// it is (TestVirtualPolicyOnControlPlane/PrefixMissing): their objects
	// have different names, neither's policies match the other's service
	// accounts, and the former writes no Lease, which the latter's deleted
	// policy denies everyone for a moment.
	overlayAndPrefix = testcp.NewShared(testcp.Options{})
	// kubeSystemOverlays is a bare control plane for deploy/ through an
	// overlay into kube-system (TestCoordinatorPolicyKubeSystemOverlay),
	// deploy/virtual through a namespace overlay
	// (TestVirtualPolicyNamespaceOverlay) and the Helm chart with another
	// namespace and name (TestChartOverridesOnControlPlane), whose objects
	// all have names of their own.
	kubeSystemOverlays = testcp.NewShared(testcp.Options{})
	// clientGoLogs takes klog's output (client-go's reflectors, leader
	// election, event broadcasters) for the tests' log buffers.
	clientGoLogs = &logRouter{}
)

func TestMain(m *testing.M) {
	// klog's logger is set once, before any goroutine that logs starts, and
	// never cleared: setting it is not safe while others log, and an event
	// broadcaster's goroutines may outlive the code that started them.
	klog.SetSlogLogger(slog.New(slog.NewTextHandler(clientGoLogs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	code := m.Run()
	// Each takes a second or more to stop: all at once.
	var wg sync.WaitGroup
	for _, s := range []*testcp.Shared{installed.shared, overlayAndPrefix, kubeSystemOverlays} {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "closing a shared control plane: %v\n", err)
			}
		})
	}
	wg.Wait()
	os.Exit(code)
}

// installedCP is a shared control plane with deploy/ and deploy/virtual
// installed once, by the first test that asks.
type installedCP struct {
	shared *testcp.Shared

	mu    sync.Mutex // guards the fields below; held while installing
	tried bool
	ok    bool
}

// get returns the control plane, installing the manifests on the first
// call. If that failed, every later call fails its test.
func (i *installedCP) get(t *testing.T) *testcp.ControlPlane {
	t.Helper()
	cp := i.shared.Get(t)
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.tried {
		i.tried = true
		installAll(t, cp) // t.Fatal leaves ok false
		i.ok = true
	}
	if !i.ok {
		t.Fatal("installing the manifests on the shared control plane failed (see the first test that used it)")
	}
	return cp
}

// installAll creates every manifest of deploy/ and deploy/virtual, waits
// until the API server enforces each admission policy (it loads them
// asynchronously) and has type-checked its CEL with no warning, and sets
// the agents' policy parameters for what the test agents own, as an
// operator does after a config change.
func installAll(t *testing.T, cp *testcp.ControlPlane) {
	t.Helper()
	var all []manifest
	for _, dir := range manifestDirs {
		all = append(all, readManifests(t, dir)...)
	}
	createManifests(t, cp.Client(), all)
	waitPolicyActive(t, cp)
	setPolicyParams(t, cp, namespace, testParams(t), true)
	// The type check first: a policy whose CEL does not check may never
	// come into force.
	checkPolicyTypes(t, cp.Client(), append(slices.Clone(virtualPolicies), virtualConfigMapsPolicy, virtualEvictionsPolicy)...)
	waitVirtualPolicies(t, cp, tokenConfig(t, cp, virtualNamespace, virtualSA), virtualNamespace)
}

// logRouter copies what klog writes to every buffer registered with it,
// or to stderr while there is none.
type logRouter struct {
	mu    sync.Mutex // guards sinks
	sinks map[*testkit.LogBuffer]bool
}

func (r *logRouter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sinks) == 0 {
		return os.Stderr.Write(p)
	}
	for b := range r.sinks {
		_, _ = b.Write(p)
	}
	return len(p), nil
}

// add registers b until the returned function is called.
func (r *logRouter) add(b *testkit.LogBuffer) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sinks == nil {
		r.sinks = map[*testkit.LogBuffer]bool{}
	}
	r.sinks[b] = true
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.sinks, b)
	}
}

// captureLogs returns a logger writing to a buffer that also gets klog's
// output until the test ends; on failure the logs are shown. klog is one
// per process: while tests run in parallel, each buffer also holds the
// client-go logs of the others' code, so a refusal anywhere fails every
// test that checks its logs then (checkNotRefused) — none is missed.
func captureLogs(t *testing.T) (*slog.Logger, *testkit.LogBuffer) {
	t.Helper()
	buf := &testkit.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	remove := clientGoLogs.add(buf)
	t.Cleanup(func() {
		remove()
		if t.Failed() {
			t.Logf("logs:\n%s", buf.String())
		}
	})
	return logger, buf
}

// running is code under test run in the background, a function or a
// process, until stopped (at the end of its test at the latest).
type running struct {
	name      string
	interrupt func()           // asks it to return: cancels its context, or sends SIGTERM
	kill      func()           // when it did not return within within of interrupt; may be nil
	within    time.Duration    // how long it has to return once interrupted
	accept    func(error) bool // what it may return when stopped
	done      chan struct{}    // closed when it returned
	err       error            // what it returned; set before done is closed

	stopOnce, checkOnce sync.Once
	stopErr             error
}

// runFunc runs run in the background until stopped: stopping cancels its
// context, and it must then return within within something accept takes.
func runFunc(t *testing.T, name string, within time.Duration, accept func(error) bool, run func(context.Context) error) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{name: name, interrupt: cancel, within: within, accept: accept, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = run(ctx)
	}()
	t.Cleanup(func() { r.check(t) })
	return r
}

// stoppedByCancel accepts what a Run function returns when cancelled.
func stoppedByCancel(err error) bool { return err == nil || errors.Is(err, context.Canceled) }

// runProcess runs bin with args (and the extra environment) until stopped:
// stopping sends SIGTERM, and it must exit 0 within 60s. Its output is
// collected, and shown if the test fails.
func runProcess(t *testing.T, bin string, args []string, env ...string) (*running, *testkit.LogBuffer) {
	t.Helper()
	logs := &testkit.LogBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &running{
		name:      filepath.Base(bin),
		interrupt: func() { _ = cmd.Process.Signal(syscall.SIGTERM) },
		kill:      func() { _ = cmd.Process.Kill() },
		within:    60 * time.Second,
		accept:    func(err error) bool { return err == nil },
		done:      make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		r.err = cmd.Wait()
	}()
	t.Cleanup(func() {
		r.check(t)
		if t.Failed() {
			t.Logf("%s %s:\n%s", r.name, strings.Join(args, " "), logs.String())
		}
	})
	return r, logs
}

// wait returns true and what it returned once it returned, or false after
// timeout.
func (r *running) wait(timeout time.Duration) (returned bool, err error) {
	select {
	case <-r.done:
		return true, r.err
	case <-time.After(timeout):
		return false, nil
	}
}

// stop interrupts it and returns what it returned, or an error if it did
// not return in time (a process is then killed). Later calls return the
// same.
func (r *running) stop() error {
	r.stopOnce.Do(func() {
		r.interrupt()
		if ok, err := r.wait(r.within); ok {
			r.stopErr = err
			return
		}
		if r.kill != nil {
			r.kill()
		}
		r.stopErr = fmt.Errorf("still running %s after it was told to stop", r.within)
	})
	return r.stopErr
}

// check stops it and fails t, once, if it did not return what it may.
func (r *running) check(t *testing.T) {
	t.Helper()
	r.checkOnce.Do(func() {
		if err := r.stop(); !r.accept(err) {
			t.Errorf("%s when stopped: %v", r.name, err)
		}
	})
}
