package main

import (
	"errors"
	"strings"
	"testing"
	"time"

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

func TestWaitingOrder(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	asking := func(name string, since time.Duration) corev1.Node {
		r := fleet.Request{Since: now.Add(since), Conditions: []corev1.NodeConditionType{"Mem"}}.Format()
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{fleet.RequestAnnotation: r}}}
	}
	nodes := []corev1.Node{
		asking("b", -time.Minute), asking("a", -time.Minute), asking("c", -2*time.Minute), asking("held", -time.Hour),
		{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "garbled", Annotations: map[string]string{fleet.RequestAnnotation: "{"}}},
	}
	got := strings.Join(waitingOrder(nodes, map[string]bool{"held": true}), " ")
	if want := "c a b"; got != want {
		t.Errorf("waitingOrder = %q, want %q (since, then name; holders, quiet and unreadable left out)", got, want)
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 111: "111th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}
