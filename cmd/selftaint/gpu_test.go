package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/gpu"
	"github.com/selftaint/selftaint/taints"
)

func TestGPUClearArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    gpuClearArgs // by is checked only when set here
		wantErr string       // "usage": errUsage
	}{
		{name: "one GPU, flags after the node", args: []string{"n1", "--gpu", "GPU-a", "--by", "alice"},
			want: gpuClearArgs{node: "n1", targets: []string{"GPU-a"}, by: "alice"}},
		{name: "flags before the node", args: []string{"--gpu=GPU-a", "--kubeconfig=/k", "n1"},
			want: gpuClearArgs{node: "n1", targets: []string{"GPU-a"}, kube: kubeFlags{kubeconfig: "/k"}}},
		{name: "several, repeated and with commas, sorted and deduplicated", args: []string{"n1", "--gpu", "GPU-b", "--gpu", "GPU-a,GPU-c", "--gpu", "GPU-b"},
			want: gpuClearArgs{node: "n1", targets: []string{"GPU-a", "GPU-b", "GPU-c"}}},
		{name: "all", args: []string{"n1", "--all"}, want: gpuClearArgs{node: "n1", targets: []string{agent.ClearAll}}},
		{name: "wait alone is 60s", args: []string{"n1", "--all", "--wait"}, want: gpuClearArgs{node: "n1", targets: []string{agent.ClearAll}, wait: time.Minute}},
		{name: "wait before the node takes no value from it", args: []string{"--all", "--wait", "n1"}, want: gpuClearArgs{node: "n1", targets: []string{agent.ClearAll}, wait: time.Minute}},
		{name: "wait with a duration", args: []string{"n1", "--all", "--wait=2m"}, want: gpuClearArgs{node: "n1", targets: []string{agent.ClearAll}, wait: 2 * time.Minute}},
		{name: "wait=false", args: []string{"n1", "--all", "--wait=false"}, want: gpuClearArgs{node: "n1", targets: []string{agent.ClearAll}}},
		{name: "no node", args: []string{"--all"}, wantErr: "usage"},
		{name: "two nodes", args: []string{"n1", "n2", "--all"}, wantErr: "usage"},
		{name: "neither --gpu nor --all", args: []string{"n1"}, wantErr: "give the GPUs to clear with --gpu UUID"},
		{name: "both", args: []string{"n1", "--all", "--gpu", "GPU-a"}, wantErr: "not both"},
		{name: "--gpu all", args: []string{"n1", "--gpu", "all"}, wantErr: "use --all"},
		{name: "empty --gpu", args: []string{"n1", "--gpu", ""}, wantErr: "usage"},
		{name: "empty item", args: []string{"n1", "--gpu", "GPU-a,,GPU-b"}, wantErr: "usage"},
		{name: "bad wait", args: []string{"n1", "--all", "--wait=soon"}, wantErr: "usage"},
		{name: "zero wait", args: []string{"n1", "--all", "--wait=0s"}, wantErr: "usage"},
		{name: "empty by", args: []string{"n1", "--all", "--by="}, wantErr: "--by must not be empty"},
		{name: "unknown flag", args: []string{"n1", "--all", "--gpus", "x"}, wantErr: "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			var stderr bytes.Buffer
			got, err := parseGPUClear(progStandalone, tt.args, &stderr)
			switch {
			case tt.wantErr == "usage":
				if !errors.Is(err, errUsage) {
					t.Fatalf("got error %v, want a usage error", err)
				}
				if stderr.Len() == 0 {
					t.Errorf("a usage error printed nothing")
				}
				return
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatalf("got error %v (stderr %q)", err, stderr.String())
			}
			if tt.want.by == "" {
				if got.by == "" {
					t.Errorf("by is empty, want a default")
				}
				tt.want.by = got.by
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if code, _, errs := runCLI(t, "gpu"); code != 2 || !strings.Contains(errs, "selftaint gpu clear NODE") {
		t.Errorf("selftaint gpu: exit %d, stderr %q; want 2 and the usage", code, errs)
	}
	if code, out, _ := runCLI(t, "gpu", "-h"); code != 0 || !strings.Contains(out, agent.ClearAnnotationPrefix+"gpu") {
		t.Errorf("selftaint gpu -h: exit %d, stdout %q", code, out)
	}
	if code, _, _ := runCLI(t, "gpu", "clear", "-h"); code != 0 {
		t.Errorf("selftaint gpu clear -h: exit %d", code)
	}
}

// fakeGPUs is a Stateful probe named like the GPU probe: it reports a
// problem while it holds a failed GPU; Clear forgets GPUs.
type fakeGPUs struct {
	mu     sync.Mutex // guards failed
	failed map[string]bool
}

func (f *fakeGPUs) Name() string { return gpu.NameFatal }

func (f *fakeGPUs) Probe(context.Context) probes.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failed) == 0 {
		return probes.Result{Status: probes.StatusOK, Reason: "GPUsHealthy"}
	}
	return probes.Result{Status: probes.StatusProblem, Reason: "GPUNeedsReset", Message: strings.Join(slices.Sorted(maps.Keys(f.failed)), ", ")}
}

func (f *fakeGPUs) State() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failed) == 0 {
		return nil
	}
	return []byte(strings.Join(slices.Sorted(maps.Keys(f.failed)), ","))
}

func (f *fakeGPUs) Restore(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range strings.Split(string(b), ",") {
		if g != "" {
			f.failed[g] = true
		}
	}
	return nil
}

func (f *fakeGPUs) Clear(targets []string, _ time.Time) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Equal(targets, []string{agent.ClearAll}) {
		targets = slices.Sorted(maps.Keys(f.failed))
	}
	for _, g := range targets {
		if !f.failed[g] {
			return "", fmt.Errorf("no GPU %s has failed here", g)
		}
	}
	for _, g := range targets {
		delete(f.failed, g)
	}
	return "cleared " + strings.Join(targets, ", "), nil
}

// TestGPUClearCLIOnAPIServer runs selftaint gpu clear against a real API
// server, with an agent whose GPU probe is a fake Stateful probe: the
// command writes only its annotation, the agent takes it, and --wait
// prints the agent's answer (exit 1 for a rejection, or no answer).
func TestGPUClearCLIOnAPIServer(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	kc := "--kubeconfig=" + cp.KubeconfigPath
	key := agent.ClearAnnotation(gpu.NameFatal)

	// No agent on this node: the request is written, nothing else changes.
	cp.CreateNode(t, "idle", withForeignBits)
	before := nodeNow(t, c, "idle")
	code, out, errs := runCLI(t, "gpu", "clear", "idle", "--gpu", "GPU-1", "--by", "ci", "--wait=1s", kc)
	if code != 1 || !strings.Contains(errs, "did not take the request within 1s") {
		t.Errorf("waiting on a node without an agent: exit %d, stderr %q; want 1 and that nobody took it", code, errs)
	}
	if !strings.Contains(out, "asked the agent on node idle to clear what its gpu probe holds about GPU(s) GPU-1") {
		t.Errorf("stdout %q does not say what was asked", out)
	}
	after := nodeNow(t, c, "idle")
	req, at, err := agent.ParseClearRequest(after.Annotations[key])
	if err != nil || !slices.Equal(req.Targets, []string{"GPU-1"}) || req.By != "ci" || time.Since(at) > time.Minute || time.Since(at) < 0 {
		t.Errorf("request %q: %+v at %v, %v", after.Annotations[key], req, at, err)
	}
	delete(after.Annotations, key)
	if !reflect.DeepEqual(after.Annotations, before.Annotations) || !reflect.DeepEqual(after.Spec, before.Spec) || !reflect.DeepEqual(after.Status, before.Status) {
		t.Errorf("gpu clear touched more than its annotation:\nbefore %v %+v\nafter  %v %+v", before.Annotations, before.Spec, after.Annotations, after.Spec)
	}
	// A second request replaces the first, saying so.
	if code, out, _ := runCLI(t, "gpu", "clear", "idle", "--all", kc); code != 0 || !strings.Contains(out, "replacing a request the agent has not taken yet") ||
		!strings.Contains(out, "every GPU") || !strings.Contains(out, "kubectl get events") {
		t.Errorf("second request: exit %d, stdout %q", code, out)
	}
	if code, _, errs := runCLI(t, "gpu", "clear", "nosuch", "--all", kc); code != 1 || !strings.Contains(errs, "reading node nosuch") {
		t.Errorf("unknown node: exit %d, stderr %q", code, errs)
	}

	// A node whose agent holds two failed GPUs.
	const node = "gpus"
	cp.CreateNode(t, node, withForeignBits)
	const gpuCond corev1.NodeConditionType = "SelftaintGPUFailure"
	gpuTaint := corev1.Taint{Key: "selftaint.io/gpu-failure", Effect: corev1.TaintEffectNoSchedule}
	a, err := agent.New(agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes: []agent.ProbeSpec{{
			Entry:     probes.Entry{Probe: &fakeGPUs{failed: map[string]bool{"GPU-a": true, "GPU-b": true}}, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond},
			Condition: gpuCond,
		}},
		Rules:           []taints.Rule{{Condition: gpuCond, Status: corev1.ConditionTrue, Taint: gpuTaint}},
		HeartbeatPeriod: time.Hour,
		Jitter:          -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	hasGPUTaint := func(n *corev1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == gpuTaint.Key })
	}
	if _, _, err := testcp.WaitNode(context.Background(), c, node, 20*time.Second, func(n *corev1.Node) bool {
		return hasGPUTaint(n) && n.Annotations[agent.StateAnnotation(gpu.NameFatal)] == "GPU-a,GPU-b"
	}); err != nil {
		t.Fatalf("waiting for the GPU taint and state: %v", err)
	}

	code, out, errs = runCLI(t, "gpu", "clear", node, "--gpu", "GPU-a", "--by", "ci", "--wait=30s", kc)
	if code != 0 || !strings.Contains(out, agent.ReasonProbeStateCleared+": ") || !strings.Contains(out, "by ci") || !strings.Contains(out, "cleared GPU-a") {
		t.Fatalf("clear GPU-a: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	t.Logf("clear GPU-a:\n%s", out)
	code, _, errs = runCLI(t, "gpu", "clear", node, "--gpu", "GPU-z", "--wait", kc)
	if code != 1 || !strings.Contains(errs, "rejected the request") || !strings.Contains(errs, "no GPU GPU-z has failed here") {
		t.Errorf("clear GPU-z: exit %d, stderr %q; want 1 and the probe's reason", code, errs)
	}
	if code, out, errs := runCLI(t, "gpu", "clear", node, "--all", "--wait=30s", kc); code != 0 || !strings.Contains(out, "cleared GPU-b") {
		t.Fatalf("clear --all: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	n, _, err := testcp.WaitNode(context.Background(), c, node, 10*time.Second, func(n *corev1.Node) bool {
		_, state := n.Annotations[agent.StateAnnotation(gpu.NameFatal)]
		_, asked := n.Annotations[key]
		return !hasGPUTaint(n) && !state && !asked
	})
	if err != nil {
		t.Fatalf("waiting for the taint, state and request to go: %v", err)
	}
	if n.Annotations["example.com/owner"] != "team-a" || !slices.Contains(n.Spec.Taints, cliForeignTaint) {
		t.Errorf("foreign annotation or taint lost: %v %v", n.Annotations, n.Spec.Taints)
	}
}
