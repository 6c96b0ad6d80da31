package taints

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/taints/fleet"
)

func TestPlanDrainRequest(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	later := t0.Add(10 * time.Minute)
	gpu := DrainRule{Condition: "GPU", Status: corev1.ConditionTrue, Deadline: 2 * time.Hour, DeleteEmptyDirData: true}
	gpuEnd := gpu
	gpuEnd.EndWhenHealthy = true
	mem := DrainRule{Condition: "Mem", Status: corev1.ConditionTrue, OnUnknown: true, Deadline: 30 * time.Minute, EvictUnreplicated: true}
	net := DrainRule{Condition: "Net", Status: corev1.ConditionTrue}

	type states = map[corev1.NodeConditionType]State
	sick := func(msg string) State { return State{Status: corev1.ConditionTrue, Reason: "Bad", Message: msg} }
	well := State{Status: corev1.ConditionFalse, Reason: "OK", Message: "fine"}
	unknown := State{Status: corev1.ConditionUnknown, Reason: "ProbeFailed", Message: "timed out"}

	// maint is the coordinator's SelftaintMaintenance condition.
	maint := func(status corev1.ConditionStatus, reason string) *corev1.NodeCondition {
		return &corev1.NodeCondition{Type: fleet.MaintenanceCondition, Status: status, Reason: reason}
	}
	node := func(ann string, c *corev1.NodeCondition) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		if ann != "" {
			n.Annotations = map[string]string{fleet.AgentRequestAnnotation: ann, "other": "x"}
		}
		if c != nil {
			n.Status.Conditions = []corev1.NodeCondition{*c}
		}
		return n
	}
	req := func(at time.Time, reason, deadline string, unrepl, emptyDir bool, conds ...corev1.NodeConditionType) string {
		return fleet.MaintenanceRequest{
			Version: fleet.MaintenanceVersion, Reason: reason, RequestedBy: "selftaint-agent/n1", RequestedAt: at,
			Deadline: deadline, EvictUnreplicated: unrepl, DeleteEmptyDirData: emptyDir, Conditions: conds,
		}.Format()
	}
	gpuReq := req(t0, "condition GPU is True: Xid 79", "2h0m0s", false, true, "GPU")

	tests := []struct {
		name       string
		node       *corev1.Node
		rules      []DrainRule
		states     states
		now        time.Time
		want       string // the annotation after the plan ("" absent)
		wantChange bool
		wantEvent  string
	}{
		{name: "no rule, none there", node: node("", nil), now: t0},
		{name: "rule does not apply, none there", node: node("", nil), rules: []DrainRule{gpu}, states: states{"GPU": well}, now: t0},
		{name: "rule applies: requested now", node: node("", nil), rules: []DrainRule{gpu}, states: states{"GPU": sick("Xid 79")}, now: t0,
			want: gpuReq, wantChange: true, wantEvent: ReasonDrainRequested},
		{name: "still applies, new message: unchanged (place in line and reason kept)", node: node(gpuReq, nil), rules: []DrainRule{gpu},
			states: states{"GPU": sick("Xid 79 again")}, now: later, want: gpuReq},
		{name: "a second rule applies: conditions grow, requestedAt kept, shortest deadline, options OR'ed",
			node: node(gpuReq, maint(corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting)), rules: []DrainRule{mem, gpu},
			states: states{"GPU": sick("Xid 79"), "Mem": sick("1% available")}, now: later,
			want: req(t0, "condition GPU is True: Xid 79", "30m0s", true, true, "GPU", "Mem"), wantChange: true},
		{name: "the first condition clears, the other holds: reason names it", node: node(req(t0, "condition GPU is True: Xid 79", "30m0s", true, true, "GPU", "Mem"), nil),
			rules: []DrainRule{mem, gpu}, states: states{"GPU": well, "Mem": unknown}, now: later,
			want: req(t0, "condition Mem is Unknown: timed out", "30m0s", true, false, "Mem"), wantChange: true},
		{name: "Unknown does not apply without OnUnknown", node: node("", nil), rules: []DrainRule{gpu}, states: states{"GPU": unknown}, now: t0},
		{name: "no deadline given: the coordinator's default", node: node("", nil), rules: []DrainRule{net}, states: states{"Net": sick("")}, now: t0,
			want: req(t0, "condition Net is True", "", false, false, "Net"), wantChange: true, wantEvent: ReasonDrainRequested},
		{name: "a rule without a deadline leaves the others' shortest", node: node("", nil), rules: []DrainRule{net, gpu},
			states: states{"Net": sick("down"), "GPU": sick("Xid 79")}, now: t0,
			want: req(t0, "condition GPU is True: Xid 79", "2h0m0s", false, true, "GPU", "Net"), wantChange: true, wantEvent: ReasonDrainRequested},
		{name: "unreadable while a rule applies: replaced, requested now", node: node(`{"version":"v1"}`, nil), rules: []DrainRule{gpu},
			states: states{"GPU": sick("Xid 79")}, now: later, want: req(later, "condition GPU is True: Xid 79", "2h0m0s", false, true, "GPU"), wantChange: true, wantEvent: ReasonDrainRequested},
		{name: "a forced request written in the agent's annotation is unreadable: replaced",
			node:  node(`{"version":"v1","reason":"x","requestedBy":"y","requestedAt":"2026-11-23T09:00:00Z","onDeadline":"force"}`, nil),
			rules: []DrainRule{gpu}, states: states{"GPU": sick("Xid 79")}, now: t0, want: gpuReq, wantChange: true, wantEvent: ReasonDrainRequested},

		// No drain rule applies any more.
		{name: "cleared, endWhenHealthy: removed even while draining", node: node(gpuReq, maint(corev1.ConditionTrue, fleet.ReasonDraining)),
			rules: []DrainRule{gpuEnd}, states: states{"GPU": well}, now: later, wantChange: true, wantEvent: ReasonDrainWithdrawn},
		{name: "cleared, endWhenHealthy: removed once drained", node: node(gpuReq, maint(corev1.ConditionTrue, fleet.ReasonDrained)),
			rules: []DrainRule{gpuEnd}, states: states{"GPU": well}, now: later, wantChange: true, wantEvent: ReasonDrainWithdrawn},
		{name: "cleared before the coordinator saw it (no condition): removed", node: node(gpuReq, nil),
			rules: []DrainRule{gpu}, states: states{"GPU": well}, now: later, wantChange: true, wantEvent: ReasonDrainWithdrawn},
		{name: "cleared while waiting for a slot: removed, the drain never starts", node: node(gpuReq, maint(corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting)),
			rules: []DrainRule{gpu}, states: states{"GPU": well}, now: later, wantChange: true, wantEvent: ReasonDrainWithdrawn},
		{name: "cleared while draining: kept until an operator ends it", node: node(gpuReq, maint(corev1.ConditionTrue, fleet.ReasonDraining)),
			rules: []DrainRule{gpu}, states: states{"GPU": well}, now: later, want: gpuReq},
		{name: "cleared once drained: kept", node: node(gpuReq, maint(corev1.ConditionTrue, fleet.ReasonDrained)),
			rules: []DrainRule{gpu}, states: states{"GPU": well}, now: later, want: gpuReq},
		{name: "cleared after it was given back blocked: kept (the request still stands)", node: node(gpuReq, maint(corev1.ConditionFalse, fleet.ReasonDrainBlocked)),
			rules: []DrainRule{gpu}, states: states{"GPU": well}, now: later, want: gpuReq},
		{name: "applies again after it was kept: requestedAt kept", node: node(gpuReq, maint(corev1.ConditionTrue, fleet.ReasonDrained)),
			rules: []DrainRule{gpu}, states: states{"GPU": sick("Xid 48")}, now: later, want: gpuReq},
		{name: "endWhenHealthy of another condition of the request counts", node: node(req(t0, "condition GPU is True: Xid 79", "30m0s", true, true, "GPU", "Mem"), maint(corev1.ConditionTrue, fleet.ReasonDraining)),
			rules: []DrainRule{mem, gpuEnd}, states: states{"GPU": well, "Mem": well}, now: later, wantChange: true, wantEvent: ReasonDrainWithdrawn},
		{name: "endWhenHealthy of a rule the request does not name does not count", node: node(req(t0, "condition Mem is True", "30m0s", true, false, "Mem"), maint(corev1.ConditionTrue, fleet.ReasonDraining)),
			rules: []DrainRule{mem, gpuEnd}, states: states{"GPU": well, "Mem": well}, now: later, want: req(t0, "condition Mem is True", "30m0s", true, false, "Mem")},
		{name: "its condition undecided (after a restart): nothing changes, endWhenHealthy or not", node: node(gpuReq, nil),
			rules: []DrainRule{gpuEnd}, states: states{}, now: later, want: gpuReq},
		{name: "unreadable and no rule applies: removed", node: node("garbage", maint(corev1.ConditionTrue, fleet.ReasonDraining)),
			rules: []DrainRule{gpu}, states: states{"GPU": well}, now: later, wantChange: true},
		{name: "no drain rule at all any more, never started: removed", node: node(gpuReq, nil), now: later, wantChange: true, wantEvent: ReasonDrainWithdrawn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanDrainRequest(tt.node, DrainInput{Rules: tt.rules, States: tt.states}, tt.now)
			got, change := p.Value, p.Change
			if p.Reason != tt.wantEvent {
				t.Errorf("event %q (%q), want %q", p.Reason, p.Message, tt.wantEvent)
			}
			if !change {
				if got != tt.node.Annotations[fleet.AgentRequestAnnotation] {
					t.Errorf("no change, but value %q differs from the annotation", got)
				}
			}
			if got != tt.want || change != tt.wantChange {
				t.Errorf("PlanDrainRequest =\n  %q, %v\nwant\n  %q, %v", got, change, tt.want, tt.wantChange)
			}
			if got != "" {
				if _, err := fleet.ParseMaintenanceRequest(fleet.AgentRequestAnnotation, got); err != nil {
					t.Errorf("the request does not parse: %v", err)
				}
			}
		})
	}
}

// TestPlanDrainRequestBounds: a long message and a long node name still
// make a request the coordinator reads.
func TestPlanDrainRequestBounds(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("n", 253)}}
	in := DrainInput{
		Rules:  []DrainRule{{Condition: "GPU", Status: corev1.ConditionTrue}},
		States: map[corev1.NodeConditionType]State{"GPU": {Status: corev1.ConditionTrue, Message: strings.Repeat("x", 1000)}},
	}
	p := PlanDrainRequest(n, in, time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	v := p.Value
	if !p.Change {
		t.Fatal("no request made")
	}
	r, err := fleet.ParseMaintenanceRequest(fleet.AgentRequestAnnotation, v)
	if err != nil {
		t.Fatalf("the request does not parse: %v", err)
	}
	if !strings.HasPrefix(r.Reason, "condition GPU is True: xxx") || !strings.HasSuffix(r.Reason, "...") || !strings.HasPrefix(r.RequestedBy, "selftaint-agent/nnn") {
		t.Errorf("reason %q, requestedBy %q: want them truncated", r.Reason, r.RequestedBy)
	}
}

// TestPlanMetadataDrainRequest: the metadata write carries the drain
// request, and PlanNode feeds it the decided conditions and drain rules.
func TestPlanMetadataDrainRequest(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	rule := DrainRule{Condition: "GPU", Status: corev1.ConditionTrue, EndWhenHealthy: true}
	p := PlanNode(Snapshot{
		Node: node, Now: t0, DrainRules: []DrainRule{rule}, HardwareKnown: true, HeartbeatPeriod: time.Minute,
		Damped: map[corev1.NodeConditionType]State{"GPU": {Status: corev1.ConditionTrue, Reason: "XidCritical", Message: "Xid 79", LastTransitionTime: t0}},
	})
	mp := PlanMetadata(p.Metadata)
	v, ok := mp.Annotations[fleet.AgentRequestAnnotation]
	if !ok || !mp.Changed || mp.Drain.Reason != ReasonDrainRequested {
		t.Fatalf("annotations %v (changed %v, drain %+v), want the drain request set and told", mp.Annotations, mp.Changed, mp.Drain)
	}
	r, err := fleet.ParseMaintenanceRequest(fleet.AgentRequestAnnotation, v)
	if err != nil || r.Reason != "condition GPU is True: Xid 79" || !slices.Equal(r.Conditions, []corev1.NodeConditionType{"GPU"}) || !r.RequestedAt.Equal(t0) {
		t.Errorf("request %+v (%v)", r, err)
	}

	node.Annotations = map[string]string{fleet.AgentRequestAnnotation: v}
	p = PlanNode(Snapshot{
		Node: node, Now: t0.Add(time.Hour), DrainRules: []DrainRule{rule}, HardwareKnown: true, HeartbeatPeriod: time.Minute,
		Damped: map[corev1.NodeConditionType]State{"GPU": {Status: corev1.ConditionFalse, Reason: "OK", LastTransitionTime: t0.Add(time.Hour)}},
	})
	mp = PlanMetadata(p.Metadata)
	if !slices.Equal(mp.RemoveAnnotations, []string{fleet.AgentRequestAnnotation}) || !mp.Changed || mp.Drain.Reason != ReasonDrainWithdrawn {
		t.Errorf("remove %v (changed %v), want the drain request removed once healthy", mp.RemoveAnnotations, mp.Changed)
	}
}
