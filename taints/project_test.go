package taints

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/selftaint/selftaint/taints/fleet"
)

func TestProjectNoExecute(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	mem := Rule{Condition: "Mem", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoExecute}, Fallback: corev1.TaintEffectNoSchedule}
	rules := []Rule{mem}
	watched := map[corev1.NodeConditionType][]corev1.ConditionStatus{"Mem": {corev1.ConditionTrue}}
	// node is a Ready Node without a zone; sick ones report Mem True and
	// ask since asked.
	node := func(name string, sick bool, asked time.Time) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		if sick {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "Mem", Status: corev1.ConditionTrue})
			n.Annotations[fleet.RequestAnnotation] = fleet.Request{Since: asked, Conditions: []corev1.NodeConditionType{"Mem"}}.Format()
		}
		return n
	}
	// a-1 asked a minute ago, holds the grant and carries NoExecute.
	a1 := node("a-1", true, now.Add(-time.Minute))
	a1.Spec.Taints = []corev1.Taint{{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoExecute}}
	a1.Annotations[OwnedTaintsAnnotation] = FormatOwned([]TaintID{{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoExecute}})
	grant := fleet.Grant{Node: "a-1", Holder: "a-1", Acquired: now.Add(-50 * time.Second), Renewed: now}
	guard := fleet.GuardState{RenewTime: now.Add(-10 * time.Second), Leader: "coordinator"}
	cfg := fleet.Config{
		MaxNoExecute: intstr.FromInt32(1), RatePerMinute: 6, GrantTTL: time.Minute, Watched: watched,
		Guard: fleet.GuardConfig{Threshold: 55, ResetMargin: 10, CoolDown: 5 * time.Minute, MinNodes: 3, RenewEvery: 30 * time.Second},
	}
	input := func(ns ...*corev1.Node) fleet.Input {
		in := fleet.Input{Config: cfg, Now: now, Leader: "selftaint-explain", Grants: []fleet.Grant{grant},
			Memory: fleet.Memory{Since: now, Guard: guard, Decided: true}}
		for _, n := range ns {
			fn, _ := fleet.NodeView(n, watched)
			fn.CarriesNoExecute, _ = CarriesNoExecute(n)
			in.Nodes = append(in.Nodes, fn)
		}
		return in
	}
	sick := map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionTrue}
	tests := []struct {
		name     string
		in       fleet.Input
		node     *corev1.Node
		statuses map[corev1.NodeConditionType]corev1.ConditionStatus
		flapping map[corev1.NodeConditionType]bool

		wantHolds   []string
		wantWaiting bool
	}{
		{
			// The drill: a-1 granted, then a fault on b-1. Its own
			// condition makes 2 of 3 report: the guard trips, a-1's
			// NoExecute comes off, and b-1 gets no grant.
			name: "a fault on b-1 trips the guard its standing must show",
			in:   input(a1, node("b-1", false, now), node("c-1", false, now)), node: node("b-1", false, now), statuses: sick,
			wantHolds:   []string{"Mem */2/3 new off=[a-1]", "Mem /2/3 new off=[a-1]"},
			wantWaiting: true,
		},
		{
			name: "b-1's condition already published: counted once",
			in:   input(a1, node("b-1", true, now.Add(-5*time.Second)), node("c-1", false, now)), node: node("b-1", true, now.Add(-5*time.Second)), statuses: sick,
			wantHolds:   []string{"Mem */2/3 off=[a-1]", "Mem /2/3 off=[a-1]"},
			wantWaiting: true,
		},
		{
			name: "asked about a-1, the holder: nothing changes, nothing holds",
			in:   input(a1, node("b-1", false, now), node("c-1", false, now)), node: a1, statuses: sick,
		},
		{
			name: "the condition healthy: no request, no hold",
			in:   input(a1, node("b-1", false, now), node("c-1", false, now)), node: node("b-1", false, now),
			statuses: map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionFalse},
		},
		{
			// A flapping condition asks for no grant; it is still counted.
			name: "flapping: counted, but asks for nothing",
			in:   input(a1, node("b-1", false, now), node("c-1", false, now)), node: node("b-1", false, now),
			statuses: sick, flapping: map[corev1.NodeConditionType]bool{"Mem": true},
		},
		{
			name: "four healthy nodes more: below the threshold, the budget keeps it waiting",
			in: input(a1, node("b-1", false, now), node("c-1", false, now), node("d-1", false, now), node("e-1", false, now),
				node("f-1", false, now)),
			node: node("b-1", false, now), statuses: sick, wantWaiting: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ProjectNoExecute(tt.in, tt.node, rules, tt.statuses, tt.flapping, now)
			var got []string
			for _, h := range p.Holds {
				s := fmt.Sprintf("%s %s/%d/%d", h.Condition, h.Scope, h.State.Unhealthy, h.State.Nodes)
				if h.ByThisNode {
					s += " new"
				}
				if len(h.Off) > 0 {
					s += fmt.Sprintf(" off=%v", h.Off)
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tt.wantHolds) {
				t.Errorf("holds = %q, want %q", got, tt.wantHolds)
			}
			if w := slices.Contains(p.Decision.Waiting, tt.node.Name); w != tt.wantWaiting {
				t.Errorf("waiting = %v, want %v (waiting %v, grant %v)", w, tt.wantWaiting, p.Decision.Waiting, p.Decision.Grant)
			}
			if slices.Contains(p.Decision.Grant, tt.node.Name) {
				t.Errorf("%s granted: the budget of one is a-1's", tt.node.Name)
			}
		})
	}
}

func TestPendingNode(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	rules := []Rule{{Condition: "Mem", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "m", Effect: corev1.TaintEffectNoExecute}, Fallback: corev1.TaintEffectNoSchedule}}
	asked := fleet.Request{Since: now.Add(-time.Hour), Conditions: []corev1.NodeConditionType{"Mem"}}.Format()
	tests := []struct {
		name     string
		node     *corev1.Node
		statuses map[corev1.NodeConditionType]corev1.ConditionStatus
		want     corev1.ConditionStatus
		since    time.Time // zero: no request
	}{
		{name: "a new condition asks from now", node: &corev1.Node{},
			statuses: map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionTrue}, want: corev1.ConditionTrue, since: now},
		{name: "a request already made keeps its place", node: &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{fleet.RequestAnnotation: asked}},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: "Mem", Status: corev1.ConditionTrue}}},
		}, statuses: map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionTrue}, want: corev1.ConditionTrue, since: now.Add(-time.Hour)},
		{name: "healthy again: the request goes", node: &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{fleet.RequestAnnotation: asked}},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: "Mem", Status: corev1.ConditionTrue}}},
		}, statuses: map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionFalse}, want: corev1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.node.DeepCopy()
			got := PendingNode(tt.node, rules, tt.statuses, nil, now)
			var st corev1.ConditionStatus
			for _, c := range got.Status.Conditions {
				if c.Type == "Mem" {
					st = c.Status
				}
			}
			if st != tt.want {
				t.Errorf("Mem is %q, want %q", st, tt.want)
			}
			raw, has := got.Annotations[fleet.RequestAnnotation]
			switch r, err := fleet.ParseRequest(raw); {
			case tt.since.IsZero() && has:
				t.Errorf("request %q, want none", raw)
			case !tt.since.IsZero() && (err != nil || !r.Since.Equal(tt.since)):
				t.Errorf("request %q (%v), want one since %s", raw, err, tt.since)
			}
			if len(before.Status.Conditions) != len(tt.node.Status.Conditions) || before.Annotations[fleet.RequestAnnotation] != tt.node.Annotations[fleet.RequestAnnotation] {
				t.Errorf("PendingNode changed its input")
			}
		})
	}
}

func TestProposedStatuses(t *testing.T) {
	mem := Rule{Condition: "Mem", Status: corev1.ConditionTrue, TaintOnUnknown: true, Taint: corev1.Taint{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoExecute}, Fallback: corev1.TaintEffectNoSchedule}
	disk := Rule{Condition: "Disk", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "selftaint.io/disk", Effect: corev1.TaintEffectNoSchedule}}
	rules := []Rule{mem, disk}
	noExec := corev1.Taint{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoExecute}
	tests := []struct {
		name     string
		proposed []corev1.Taint
		statuses map[corev1.NodeConditionType]corev1.ConditionStatus
		want     map[corev1.NodeConditionType]corev1.ConditionStatus
	}{
		{name: "a rule's NoExecute taint: its condition at its status", proposed: []corev1.Taint{noExec},
			want: map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionTrue}},
		{name: "already at a status that applies it: kept", proposed: []corev1.Taint{noExec},
			statuses: map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionUnknown}, want: map[corev1.NodeConditionType]corev1.ConditionStatus{}},
		{name: "healthy now: the rule's status", proposed: []corev1.Taint{noExec},
			statuses: map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionFalse}, want: map[corev1.NodeConditionType]corev1.ConditionStatus{"Mem": corev1.ConditionTrue}},
		{name: "another effect, key or value implies nothing", proposed: []corev1.Taint{
			{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoSchedule},
			{Key: "selftaint.io/disk", Effect: corev1.TaintEffectNoExecute},
			{Key: "selftaint.io/mem", Value: "x", Effect: corev1.TaintEffectNoExecute},
		}, want: map[corev1.NodeConditionType]corev1.ConditionStatus{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ProposedStatuses(rules, tt.proposed, tt.statuses)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("ProposedStatuses = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWithheld(t *testing.T) {
	mem := Rule{Condition: "Mem", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoExecute}, Fallback: corev1.TaintEffectNoSchedule}
	gpu := Rule{Condition: "GPU", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "selftaint.io/gpu", Effect: corev1.TaintEffectNoExecute}, Fallback: corev1.TaintEffectNoSchedule}
	rules := []Rule{mem, gpu}
	memNE, gpuNE := corev1.Taint{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoExecute}, corev1.Taint{Key: "selftaint.io/gpu", Effect: corev1.TaintEffectNoExecute}
	tripped := func(scope string) fleet.GuardState {
		return fleet.GuardState{Conditions: map[corev1.NodeConditionType]map[string]fleet.Scope{"Mem": {scope: {Tripped: true, Unhealthy: 2, Nodes: 3}}}}
	}
	tests := []struct {
		name  string
		guard fleet.GuardState
		zone  string
		want  []corev1.Taint
	}{
		{name: "untripped: nothing withheld"},
		{name: "tripped fleet-wide: Mem's NoExecute withheld, GPU's not", guard: tripped(fleet.FleetScope), zone: "z", want: []corev1.Taint{memNE}},
		{name: "tripped among the nodes without a zone", guard: tripped(""), want: []corev1.Taint{memNE}},
		{name: "tripped in another zone", guard: tripped("y"), zone: "z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Withheld(rules, []corev1.Taint{memNE, gpuNE, {Key: "other", Effect: corev1.TaintEffectNoExecute}}, tt.guard, tt.zone)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Withheld = %v, want %v", got, tt.want)
			}
		})
	}
}
