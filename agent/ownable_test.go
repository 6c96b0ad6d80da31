package agent_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

// TestUntrustedOwnershipRecords plants ownership records that claim
// another writer's taint and labels (as anyone who can annotate the Node
// could), and checks the agent never acts on them: the foreign taint and
// labels survive every watched version of the Node, while the agent still
// removes its own taint, warns once, and drops the bogus entries from the
// records. A second plant, later, is ignored the same way.
func TestUntrustedOwnershipRecords(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "records"
	lookalike := "node-role.kubernetes.io/control-plane.present"
	created := cp.CreateNode(t, node, func(n *corev1.Node) {
		withForeign(n)
		n.Spec.Taints = append(n.Spec.Taints, ourTaint)
		n.Labels = map[string]string{"team": "infra", lookalike: "true"}
		n.Annotations = map[string]string{
			// Ours (trusted), the foreign taint, and our key under an
			// effect no rule has.
			taints.OwnedTaintsAnnotation: "dedicated:NoSchedule," + taintKey + ":NoSchedule," + taintKey + ":NoExecute",
			taints.OwnedLabelsAnnotation: "team," + lookalike,
		}
	})
	w := startWatch(t, c, node, created.ResourceVersion)
	startAgent(t, agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes: []agent.ProbeSpec{{
			Entry:     probes.Entry{Probe: newSwitchProbe(probes.StatusOK), Interval: 100 * time.Millisecond, Timeout: 90 * time.Millisecond},
			Condition: cond,
		}},
		Rules: rules,
	})

	// Our own taint, rightly recorded, goes: the condition is healthy.
	clean := func(n *corev1.Node) bool {
		return !hasTaint(n, ourTaint) && n.Annotations[taints.OwnedTaintsAnnotation] == "" && n.Annotations[taints.OwnedLabelsAnnotation] == ""
	}
	waitNode(t, c, node, 20*time.Second, "our taint removed and the records emptied", clean)
	waitEvent(t, c, node, "UntrustedOwnershipRecord", 10*time.Second, "dedicated:NoSchedule", taintKey+":NoExecute", "team", lookalike)

	// Planted again: ignored again, and dropped again.
	setAnnotations(t, c, node, map[string]any{
		taints.OwnedTaintsAnnotation: "dedicated:NoSchedule",
		taints.OwnedLabelsAnnotation: lookalike,
	})
	waitNode(t, c, node, 20*time.Second, "the planted records dropped again", clean)
	time.Sleep(time.Second) // let anything the agent would still do show

	checkForeignSurvived(t, w)
	for i, n := range w.seen() {
		if n.Labels["team"] != "infra" || n.Labels[lookalike] != "true" {
			t.Errorf("update %d (rv %s) lost a foreign label: %v", i, n.ResourceVersion, n.Labels)
		}
	}
	var warned int32
	for _, e := range nodeEvents(t, c, node, "UntrustedOwnershipRecord") {
		warned += e.Count
	}
	if warned != 2 {
		t.Errorf("warned %d times about untrusted records, want once per plant (2)", warned)
	}
}
