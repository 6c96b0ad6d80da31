package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// Integration tests of the sick-node drain request (rules with action:
// drain) against a real kube-apiserver. The coordinator is not running:
// the tests write its SelftaintMaintenance condition themselves, by
// server-side apply under its field manager, as it would.

// setMaintenance writes the coordinator's SelftaintMaintenance condition
// on node with reason (True, as while waiting or draining).
func setMaintenance(t *testing.T, c kubernetes.Interface, node, reason string) {
	t.Helper()
	now := metav1.Now()
	st := corev1ac.NodeStatus().WithConditions(corev1ac.NodeCondition().
		WithType(fleet.MaintenanceCondition).WithStatus(corev1.ConditionTrue).WithReason(reason).
		WithMessage("written by the test as the coordinator would").
		WithLastTransitionTime(now).WithLastHeartbeatTime(now))
	if _, err := c.CoreV1().Nodes().ApplyStatus(context.Background(), corev1ac.Node(node).WithStatus(st),
		metav1.ApplyOptions{FieldManager: "selftaint-coordinator", Force: true}); err != nil {
		t.Fatalf("writing %s=%s on node %s: %v", fleet.MaintenanceCondition, reason, node, err)
	}
}

// drainRequest is the agent's drain request on n, parsed ("" absent).
func drainRequest(t *testing.T, n *corev1.Node) (fleet.MaintenanceRequest, string) {
	t.Helper()
	raw, ok := n.Annotations[fleet.AgentRequestAnnotation]
	if !ok {
		return fleet.MaintenanceRequest{}, ""
	}
	r, err := fleet.ParseMaintenanceRequest(fleet.AgentRequestAnnotation, raw)
	if err != nil {
		t.Fatalf("the agent wrote a request the coordinator cannot read: %v", err)
	}
	return r, raw
}

func hasDrainRequest(n *corev1.Node) bool {
	_, ok := n.Annotations[fleet.AgentRequestAnnotation]
	return ok
}

// settled waits until the agent has finished a sync that started after
// this call (poking the Node so that one runs), so that what the Node
// shows then is what a plan made from the Node as it stands decided.
func settled(t *testing.T, c kubernetes.Interface, a *agent.Agent, node string) {
	t.Helper()
	before := a.Stats().Syncs
	setAnnotations(t, c, node, map[string]any{"example.com/poke": time.Now().Format(time.RFC3339Nano)})
	err := testcp.Poll(context.Background(), 20*time.Second, 20*time.Millisecond, func() (bool, error) {
		return a.Stats().Syncs > before && a.LoopState().SyncStarted.IsZero(), nil
	})
	if err != nil {
		t.Fatalf("the agent ran no sync after the poke: %v", err)
	}
}

// TestDrainRuleEndWhenHealthy: a drain rule with a taint and
// endWhenHealthy: while the probe reports a problem the taint is on and the
// request is on the Node with what the rule asks; once the probe reads
// healthy the request is withdrawn, no sooner than the condition's
// clearAfter, even while the coordinator says the node drains.
func TestDrainRuleEndWhenHealthy(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "drain-when-healthy"
	cp.CreateNode(t, node, withForeignAnnotation)

	p := newSwitchProbe(probes.StatusOK)
	const clearAfter = 2 * time.Second
	startAgent(t, agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes:   []agent.ProbeSpec{probeSpec(p, cond, taints.Damping{ClearAfter: clearAfter})},
		Rules:    rules,
		DrainRules: []taints.DrainRule{{
			Condition: cond, Status: corev1.ConditionTrue, Deadline: 30 * time.Minute,
			DeleteEmptyDirData: true, EndWhenHealthy: true,
		}},
	})
	waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))

	asked := time.Now()
	p.set(probes.StatusProblem)
	n := waitNode(t, c, node, 20*time.Second, "the taint and the drain request", func(n *corev1.Node) bool {
		return hasTaint(n, ourTaint) && hasDrainRequest(n)
	})
	r, _ := drainRequest(t, n)
	want := fleet.MaintenanceRequest{
		Version: fleet.MaintenanceVersion, Reason: "condition " + string(cond) + " is True: the switch says " + string(probes.StatusProblem),
		RequestedBy: "selftaint-agent/" + node, RequestedAt: r.RequestedAt, Deadline: "30m0s", DeleteEmptyDirData: true,
		Conditions: []corev1.NodeConditionType{cond},
	}
	if r.Format() != want.Format() {
		t.Errorf("request\n  %s\nwant\n  %s", r.Format(), want.Format())
	}
	if r.RequestedAt.Before(asked.Truncate(time.Second)) || r.RequestedAt.After(time.Now()) {
		t.Errorf("requestedAt %s, want the time the rule applied (after %s)", r.RequestedAt, asked)
	}
	waitEvent(t, c, node, taints.ReasonDrainRequested, 10*time.Second, "condition "+string(cond)+" is True")

	setMaintenance(t, c, node, fleet.ReasonDraining)
	healthy := time.Now()
	p.set(probes.StatusOK)
	n = waitNode(t, c, node, 20*time.Second, "the drain request withdrawn", func(n *corev1.Node) bool { return !hasDrainRequest(n) })
	if took := time.Since(healthy); took < clearAfter {
		t.Errorf("the request was withdrawn %s after the probe read healthy, before the condition's clearAfter (%s)", took, clearAfter)
	}
	if cc := condition(n, cond); cc == nil || cc.Status != corev1.ConditionFalse {
		t.Errorf("condition %+v, want False when the request goes", cc)
	}
	if hasTaint(n, ourTaint) || n.Annotations[foreignAnnotation] != "team-a" {
		t.Errorf("node after the drain: %s, annotations %v; want the taint gone and the foreign annotation kept", describe(n), n.Annotations)
	}
	waitEvent(t, c, node, taints.ReasonDrainWithdrawn, 10*time.Second, "endWhenHealthy")
}

// TestDrainRuleWithoutEndWhenHealthy: a drain rule instead of a taint,
// without endWhenHealthy. A request whose condition clears while the node
// waits for a slot is withdrawn (the drain never starts); one whose
// condition clears while the node drains stays until an operator removes
// it, and the agent does not put it back.
func TestDrainRuleWithoutEndWhenHealthy(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "drain-until-ended"
	cp.CreateNode(t, node, nil)

	p := newSwitchProbe(probes.StatusOK)
	a, _ := startAgent(t, agent.Options{
		NodeName:   node,
		Client:     c.CoreV1(),
		Probes:     []agent.ProbeSpec{probeSpec(p, cond, taints.Damping{})},
		DrainRules: []taints.DrainRule{{Condition: cond, Status: corev1.ConditionTrue, EvictUnreplicated: true}},
	})
	waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))

	// Cleared while waiting: withdrawn.
	p.set(probes.StatusProblem)
	n := waitNode(t, c, node, 20*time.Second, "the drain request", hasDrainRequest)
	r, _ := drainRequest(t, n)
	if r.Deadline != "" || !r.EvictUnreplicated || r.DeleteEmptyDirData || !slices.Equal(r.Conditions, []corev1.NodeConditionType{cond}) {
		t.Errorf("request %s, want no deadline (the coordinator's default), evictUnreplicated, conditions [%s]", r.Format(), cond)
	}
	if owned := n.Annotations[taints.OwnedTaintsAnnotation]; owned != "" || hasTaint(n, ourTaint) {
		t.Errorf("taints %v (owned %q), want none of ours: the rule drains instead of tainting", n.Spec.Taints, owned)
	}
	setMaintenance(t, c, node, fleet.ReasonMaintenanceWaiting)
	p.set(probes.StatusOK)
	waitNode(t, c, node, 20*time.Second, "the drain request withdrawn", func(n *corev1.Node) bool { return !hasDrainRequest(n) })
	waitEvent(t, c, node, taints.ReasonDrainWithdrawn, 10*time.Second, "waited for a maintenance slot")

	// Cleared while draining: kept.
	p.set(probes.StatusProblem)
	n = waitNode(t, c, node, 20*time.Second, "the drain request again", hasDrainRequest)
	_, raw := drainRequest(t, n)
	setMaintenance(t, c, node, fleet.ReasonDraining)
	p.set(probes.StatusOK)
	waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))
	settled(t, c, a, node)
	n = getNode(t, c, node)
	if _, got := drainRequest(t, n); got != raw {
		t.Fatalf("request %q after the condition cleared mid-drain, want it kept as it was: %q", got, raw)
	}

	// The operator ends it; the agent leaves it gone.
	setAnnotations(t, c, node, map[string]any{fleet.AgentRequestAnnotation: nil})
	settled(t, c, a, node)
	if n := getNode(t, c, node); hasDrainRequest(n) {
		t.Errorf("the agent put the request back after the operator removed it: %q", n.Annotations[fleet.AgentRequestAnnotation])
	}
}
