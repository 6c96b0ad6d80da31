package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/metrics"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

// switchProbe reports whatever status the test last set.
type switchProbe struct{ status atomic.Value }

func (p *switchProbe) Name() string { return "switch" }
func (p *switchProbe) Probe(context.Context) probes.Result {
	return probes.Result{Status: p.status.Load().(probes.Status), Reason: "Switch"}
}

// get fetches url and returns the status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// waitFor polls url until it answers code with a body containing want.
func waitFor(t *testing.T, url string, code int, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		gotCode, body := get(t, url)
		if gotCode == code && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %s got %d %q, want %d with %q", url, timeout, gotCode, body, code, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHealthAndReadiness runs an agent on a real control plane behind the
// metrics handler. /readyz fails until the informer has synced and the
// first sync is written (the Node does not exist at first), then passes;
// /healthz passes until the reconcile loop is wedged inside a sync (the
// BeforeTaintWrite hook blocks it), fails with the reason once the sync has
// run past the stall threshold, and passes again when the sync finishes.
func TestHealthAndReadiness(t *testing.T) {
	cp := testcp.Start(t, testcp.Options{})
	c := cp.Client()
	const node = "health"
	const stall = time.Second
	cond := corev1.NodeConditionType("SelftaintTestPressure")
	taint := corev1.Taint{Key: "selftaint.io/test-pressure", Effect: corev1.TaintEffectNoSchedule}

	p := &switchProbe{}
	p.status.Store(probes.StatusOK)
	var wedge atomic.Bool
	release := make(chan struct{})
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.BuildInfo{Version: "v0", Revision: "r", GoVersion: "go"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes: []agent.ProbeSpec{{
			Entry:     probes.Entry{Probe: p, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond},
			Condition: cond,
		}},
		Rules:           []taints.Rule{{Condition: cond, Status: corev1.ConditionTrue, Taint: taint}},
		HeartbeatPeriod: time.Hour,
		Jitter:          -1,
		Logger:          slog.New(slog.DiscardHandler),
		Metrics:         m,
		BeforeTaintWrite: func(ctx context.Context, _ *corev1.Node) {
			if wedge.Load() {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(metrics.Handler(reg, metrics.Health{
		Live:  func() error { return a.Live(stall) },
		Ready: a.Ready,
	}, nil))
	defer srv.Close()

	// Not started: alive (nothing is wedged), not ready.
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "informer has not synced") {
		t.Errorf("/readyz before Run = %d %q, want 503 naming the informer", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()

	// The informer syncs, the Node is missing: still not ready.
	waitFor(t, srv.URL+"/readyz", http.StatusServiceUnavailable, "first sync has not been written", 30*time.Second)
	waitFor(t, srv.URL+"/healthz", http.StatusOK, "ok", time.Second)
	cp.CreateNode(t, node, nil)
	waitFor(t, srv.URL+"/readyz", http.StatusOK, "ok", 30*time.Second)
	n, err := c.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == cond }) {
		t.Errorf("ready, but the Node has no %s condition: %+v", cond, n.Status.Conditions)
	}
	if code, body := get(t, srv.URL+"/metrics"); code != http.StatusOK || !strings.Contains(body, `selftaint_condition{condition="SelftaintTestPressure",status="False"} 1`) {
		t.Errorf("/metrics = %d, want the condition False:\n%s", code, body)
	}

	// Wedge the loop inside the sync that writes the taint.
	wedge.Store(true)
	p.status.Store(probes.StatusProblem)
	waitFor(t, srv.URL+"/healthz", http.StatusInternalServerError, "a sync has been running for", 10*time.Second)
	if code, _ := get(t, srv.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while wedged = %d, want 200 (readiness is not liveness)", code)
	}
	close(release)
	waitFor(t, srv.URL+"/healthz", http.StatusOK, "ok", 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := c.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		if err == nil && slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == taint.Key }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no taint after the loop was released: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
