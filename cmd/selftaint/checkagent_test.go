package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/taints"
)

// TestCheckMatchesAgent runs `selftaint check` and the agent on the same
// fixture host (low memory) with the same config, and checks the taints
// check says would follow are exactly the ones the agent keeps on its Node
// once it has settled: both come from the same plan.
func TestCheckMatchesAgent(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, noNVML+"probes:\n  disk: {enabled: false}\n  network: {enabled: false}\n"+
		"  memory: {interval: 500ms, timeout: 250ms, for: 0s}\n  pid: {interval: 500ms, timeout: 250ms}\n"+
		"rules:\n- {condition: SelftaintMemoryPressure, taint: {key: selftaint.io/memory-pressure, value: low, effect: NoSchedule}}\n"+
		"- {condition: SelftaintMemoryPressure, taint: {key: selftaint.io/memory-evict, effect: NoExecute}}\n"+
		"- {condition: SelftaintPIDPressure, taint: {key: selftaint.io/pid-pressure, effect: NoSchedule}}\n")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"check", "--host-root=testdata/lowmem", "--config=" + cfg, "--output=json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("check: exit %d: %s", code, stderr.String())
	}
	var rep checkReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("check's json: %v", err)
	}
	if len(rep.Taints) != 2 {
		t.Fatalf("check says taints %v; the fixture should give the two memory ones (the NoExecute rule's at its fallback)", rep.Taints)
	}
	if len(rep.WithGrant) != 1 || rep.WithGrant[0].Key != "selftaint.io/memory-evict" || rep.WithGrant[0].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("check says %v would join with a grant, want selftaint.io/memory-evict:NoExecute", rep.WithGrant)
	}

	cp := shared.Get(t)
	const node = "check-vs-agent"
	cp.CreateNode(t, node, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var agentErr testkit.LogBuffer
	go func() {
		done <- run(ctx, []string{"agent", "--node-name=" + node, "--kubeconfig=" + cp.KubeconfigPath, "--host-root=testdata/lowmem",
			"--config=" + cfg, "--metrics-address=", "--admission-policy="}, &bytes.Buffer{}, &agentErr)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("agent exited %d:\n%s", code, agentErr.String())
		}
	}()
	id := func(ts []corev1.Taint) []string {
		var out []string
		for _, t := range ts {
			if t.Key != corev1.TaintNodeNotReady { // the API server's registration taint, not ours
				out = append(out, taints.Format(t))
			}
		}
		slices.Sort(out)
		return out
	}
	want := id(rep.Taints)
	pollNode(t, cp.Client(), node, 30*time.Second, "the agent's taints to settle on check's", func(n *corev1.Node) bool {
		return slices.Equal(id(n.Spec.Taints), want)
	})
	time.Sleep(2 * time.Second) // several probe rounds: nothing else arrives
	n, _ := pollNode(t, cp.Client(), node, time.Second, "the taints to stay", func(n *corev1.Node) bool { return true })
	if got := id(n.Spec.Taints); !slices.Equal(got, want) {
		t.Errorf("agent's taints %v, check said %v", got, want)
	}
}
