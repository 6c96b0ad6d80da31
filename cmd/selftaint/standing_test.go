package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

func TestStandingDescribe(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	rule := taints.Rule{Condition: "Mem", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoExecute}, Fallback: corev1.TaintEffectNoSchedule}
	plain := taints.Rule{Condition: "Disk", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "selftaint.io/disk", Effect: corev1.TaintEffectNoSchedule}}
	req := fleet.Request{Since: now.Add(-time.Minute), Conditions: []corev1.NodeConditionType{"Mem"}}.Format()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{fleet.RequestAnnotation: req}}}
	fresh := &fleet.GuardState{RenewTime: now.Add(-10 * time.Second)}
	stale := &fleet.GuardState{RenewTime: now.Add(-10 * time.Minute)}
	tripped := &fleet.GuardState{RenewTime: now, Conditions: map[corev1.NodeConditionType]map[string]fleet.Scope{
		"Mem": {fleet.FleetScope: {Tripped: true, Since: now, Unhealthy: 6, Nodes: 10}},
	}}
	grant := fleet.NewGrant(config.DefaultCoordinatorNamespace, "n1", "", time.Minute, now.Add(-5*time.Second))
	sick := map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionTrue}
	base := standing{node: node, rules: []taints.Rule{rule, plain}, statuses: sick, namespace: config.DefaultCoordinatorNamespace, now: now,
		staleAfter: 2 * time.Minute, budget: 2, max: intstr.FromString("10%"), nodes: 20, held: 2, waiting: []string{"n0", "n1"}}
	with := func(f func(*standing)) standing { s := base; f(&s); return s }
	tests := []struct {
		name string
		s    standing
		want []string
	}{
		{name: "waiting for a grant", s: with(func(s *standing) { s.guard = fresh }),
			want: []string{"2 of 2 grants held (maxNoExecute 10% of 20 nodes, fleet real); 2 node(s) waiting", "fresh", "no grant: 2nd of 2 waiting",
				"selftaint.io/mem:NoSchedule applies; selftaint.io/mem:NoExecute falls back to it (NoExecuteWaiting", "budget is full (2 of 2 held)"}},
		{name: "waiting with room in the budget", s: with(func(s *standing) { s.guard, s.held = fresh, 1 }),
			want: []string{"the budget has room (1 of 2 held)"}},
		{name: "a fault just injected: about to ask", s: with(func(s *standing) {
			s.guard = fresh
			s.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		}), want: []string{"this node: about to ask"}},
		{name: "granted", s: with(func(s *standing) { s.guard, s.grant, s.waiting = fresh, grant, nil }),
			want: []string{"holds a grant until", "selftaint.io/mem:NoExecute applies (granted)"}},
		{name: "no guard: suspended", s: with(func(s *standing) { s.grant = grant }),
			want: []string{"guard: not found", "NoExecuteSuspended"}},
		{name: "unreadable guard", s: with(func(s *standing) { s.guardErr = errors.New("guard: renewTime is required") }),
			want: []string{"cannot be read (guard: renewTime is required)"}},
		{name: "stale guard", s: with(func(s *standing) { s.guard, s.grant = stale, grant }),
			want: []string{"STALE", "NoExecuteSuspended", "stale"}},
		{name: "tripped guard", s: with(func(s *standing) { s.guard, s.grant = tripped, grant }),
			want: []string{"tripped for: Mem (fleet-wide, 6 of 10 nodes)", "no new taint for it is added while the guard holds"}},
		{name: "tripped among the nodes without a zone: named, not an empty zone", s: with(func(s *standing) {
			s.guard = &fleet.GuardState{RenewTime: now, Conditions: map[corev1.NodeConditionType]map[string]fleet.Scope{
				"Mem": {"": {Tripped: true, Since: now, Unhealthy: 2, Nodes: 3}},
			}}
		}), want: []string{"tripped for: Mem (among the nodes without a zone, 2 of 3 nodes)"}},
		{name: "its own condition trips the guard", s: with(func(s *standing) {
			// The guard read is calm; with n1's Mem counted, 2 of 3 report.
			s.guard, s.held, s.budget, s.waiting = fresh, 1, 1, []string{"n1"}
			s.projected = &fleet.GuardState{RenewTime: now, Conditions: map[corev1.NodeConditionType]map[string]fleet.Scope{
				"Mem": {fleet.FleetScope: {Tripped: true, Since: now, Unhealthy: 2, Nodes: 3}, "": {Tripped: true, Since: now, Unhealthy: 2, Nodes: 3}},
			}}
			for _, scope := range []string{fleet.FleetScope, ""} {
				s.holds = append(s.holds, fleet.GuardHold{Condition: "Mem", Scope: scope, State: s.projected.Conditions["Mem"][scope], ByThisNode: true,
					Threshold: 55, ResetAt: 1, CoolDown: 5 * time.Minute, Off: []string{"n0"}})
			}
		}), want: []string{
			"tripped for: none",
			"guard, projected: with this node's Mem counted, the disruption guard trips fleet-wide: 2 of 3 nodes (66.67%) would report it, more than the threshold 55%",
			"guard, projected: with this node's Mem counted, the disruption guard trips among the nodes without a zone",
			"the NoExecute taints held for it come off (n0); it resets once at most 1 of 3 nodes report it, for 5m0s",
			"Mem is True: NoExecuteSuspended (the disruption guard for Mem is tripped fleet-wide: 2 of 3 nodes report it",
			"no new taint for it is added while the guard holds",
		}},
		{name: "condition healthy", s: with(func(s *standing) {
			s.guard = fresh
			s.statuses = map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionFalse}
		}), want: []string{"Mem is False: the rule does not apply"}},
		{name: "a grant for another node grants nothing", s: with(func(s *standing) {
			s.guard = fresh
			other := fleet.NewGrant(config.DefaultCoordinatorNamespace, "n9", "", time.Minute, now)
			other.Name = fleet.GrantName("n1")
			s.grant = other
		}), want: []string{"no grant: 2nd of 2 waiting"}},
		{name: "a virtual node outside a real fleet", s: with(func(s *standing) {
			s.guard = fresh
			s.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{fleet.VirtualLabel: "true"}}}
		}), want: []string{"not in that coordinator's fleet (fleet real: real Nodes only", "gets no grant from it", "virtual --coordinator"}},
		{name: "a virtual node in a virtual fleet", s: with(func(s *standing) {
			s.guard, s.members = fresh, fleet.MembersVirtual
			s.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{fleet.VirtualLabel: "true"}, Annotations: node.Annotations}}
		}), want: []string{"of 20 nodes, fleet virtual)", "no grant: 2nd of 2 waiting"}},
		{name: "a real node outside a virtual fleet", s: with(func(s *standing) { s.guard, s.members = fresh, fleet.MembersVirtual }),
			want: []string{"not in that coordinator's fleet (fleet virtual: virtual Nodes only"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(tt.s.describe(), "\n")
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("describe does not say %q:\n%s", w, got)
				}
			}
		})
	}
	if got := with(func(s *standing) { s.rules = []taints.Rule{plain} }).describe(); got != nil {
		t.Errorf("without a NoExecute rule, describe = %q, want nothing", got)
	}
}

func TestMaintenanceDescribe(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	op := &fleet.Maintenance{Annotation: fleet.OperatorRequestAnnotation, Request: fleet.MaintenanceRequest{
		Version: fleet.MaintenanceVersion, Reason: "kernel upgrade", RequestedBy: "alice", RequestedAt: now.Add(-time.Hour), Deadline: "30m", OnDeadline: fleet.OnDeadlineForce,
	}}
	sick := &fleet.Maintenance{Annotation: fleet.AgentRequestAnnotation, Request: fleet.MaintenanceRequest{
		Version: fleet.MaintenanceVersion, Reason: "GPU lost", RequestedBy: "selftaint-agent", RequestedAt: now.Add(-time.Hour), Conditions: []corev1.NodeConditionType{"GPULost"},
	}}
	slot := func(holder, id, phase, progress string) *coordinationv1.Lease {
		acquired := metav1.NewMicroTime(now.Add(-10 * time.Minute))
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: fleet.SlotName("n1"), Annotations: map[string]string{
				fleet.SlotRequestAnnotation: id, fleet.SlotPhaseAnnotation: phase, fleet.SlotProgressAnnotation: progress,
			}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &acquired},
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	withCond := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: fleet.MaintenanceCondition, Status: corev1.ConditionFalse, Reason: fleet.ReasonReleased, Message: "the request was withdrawn",
		LastTransitionTime: metav1.NewTime(now.Add(-time.Minute)),
	}}}}
	pool := fleet.MaintenanceDecision{Size: 2, Unavailable: []string{"n0", "n2"}}
	with := func(f func(*fleet.MaintenanceDecision)) fleet.MaintenanceDecision {
		d := pool
		f(&d)
		return d
	}
	tests := []struct {
		name string
		node *corev1.Node
		m    maintenanceStanding
		want []string
	}{
		{name: "waiting, a sick-node request", node: node, m: maintenanceStanding{request: sick, decision: with(func(d *fleet.MaintenanceDecision) {
			d.Waiting = []fleet.Waiter{{Node: "n0", Why: "x"}, {Node: "n1", Why: "its condition GPULost has cleared"}}
		})}, want: []string{
			"Maintenance of n1: a drain takes a slot from the coordinator's maintenance pool (namespace ns)",
			"request: its agent's (selftaint.io/drain-request, id agent/2026-11-23T09:00:00Z): \"GPU lost\", by selftaint-agent at", "deadline the default (maintenance.defaultDeadline) from the drain's start, then release",
			"a sick-node drain for GPULost", "slot: none", "place: 2nd of 2 waiting: its condition GPULost has cleared",
			"pool: 2 of 2 unavailable (n0, n2); maxParallel 0", "condition SelftaintMaintenance: not set",
		}},
		{name: "draining, with its deadline and progress", node: node, m: maintenanceStanding{
			request: op, slot: slot("n1", op.ID(), fleet.PhaseDraining, `{"evicted":3,"total":10}`), maxParallel: intstr.FromInt32(2),
			decision: with(func(d *fleet.MaintenanceDecision) {
				d.Drain = map[string]fleet.DrainOrder{"n1": {Deadline: now.Add(20 * time.Minute)}}
			}),
		}, want: []string{
			"request: an operator's (maintenance.selftaint.io/request, id operator/2026-11-23T09:00:00Z): \"kernel upgrade\", by alice", "deadline 30m from the drain's start, then force",
			"slot: Draining since", "(request operator/2026-11-23T09:00:00Z), deadline", "(in 20m0s); evicted 3 of 10 pods", "place: holds its slot", "maxParallel 2",
		}},
		{name: "past a forced deadline", node: node, m: maintenanceStanding{
			request: op, slot: slot("n1", op.ID(), fleet.PhaseDraining, ""),
			decision: with(func(d *fleet.MaintenanceDecision) {
				d.Drain = map[string]fleet.DrainOrder{"n1": {Deadline: now.Add(-time.Minute), Force: true}}
			}),
		}, want: []string{"(passed: forced, the pods the Eviction API refuses are deleted"}},
		{name: "to be given back", node: node, m: maintenanceStanding{
			request: op, slot: slot("n1", op.ID(), fleet.PhaseBlocked, ""),
			decision: with(func(d *fleet.MaintenanceDecision) {
				d.End = map[string]fleet.Outcome{"n1": {Reason: fleet.ReasonDrainBlocked, Message: "the drain could not finish"}}
			}),
		}, want: []string{"slot: DrainBlocked since", "given back at the coordinator's next decision, DrainBlocked: the drain could not finish"}},
		{name: "given back: not served again", node: withCond, m: maintenanceStanding{request: op, slot: slot("", op.ID(), fleet.PhaseEnded, ""), decision: pool},
			want: []string{"slot: given back (Ended) for request operator/2026-11-23T09:00:00Z: the record that it was served", "place: not in line: its request has been served",
				"condition SelftaintMaintenance: False, Released since", ": the request was withdrawn"}},
		{name: "withdrawn: the record of an earlier request", node: withCond, m: maintenanceStanding{slot: slot("", "operator/2026-01-01T00:00:00Z", fleet.PhaseEnded, ""), decision: pool},
			want: []string{"request: none (neither maintenance.selftaint.io/request nor selftaint.io/drain-request", "given back for an earlier request operator/2026-01-01T00:00:00Z; its Lease is deleted", "place: not in line (no request)"}},
		{name: "about to start", node: node, m: maintenanceStanding{request: op, decision: with(func(d *fleet.MaintenanceDecision) { d.Start = []string{"n1"} })},
			want: []string{"place: first: the coordinator gives it a slot at its next decision"}},
		{name: "unreadable", node: node, m: maintenanceStanding{requestErrs: []error{errors.New("maintenance.selftaint.io/request: reason: is required")}, decision: pool},
			want: []string{"request: cannot be read, so none is served: maintenance.selftaint.io/request: reason: is required"}},
		{name: "only the condition is left", node: withCond, m: maintenanceStanding{decision: pool},
			want: []string{"request: none", "slot: none", "condition SelftaintMaintenance: False, Released"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(tt.m.describe(tt.node, "ns", now), "\n")
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("describe does not say %q:\n%s", w, got)
				}
			}
		})
	}
	if got := (maintenanceStanding{decision: pool}).describe(node, "ns", now); got != nil {
		t.Errorf("without a request, a slot or the condition, describe = %q, want nothing", got)
	}
}
