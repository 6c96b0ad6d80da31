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

func TestPlanGates(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	rules := []Rule{
		{Condition: "GPU", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "g", Effect: corev1.TaintEffectNoExecute}, Fallback: corev1.TaintEffectNoSchedule},
		{Condition: "Mem", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "m", Effect: corev1.TaintEffectNoSchedule}},
	}
	type statuses = map[corev1.NodeConditionType]corev1.ConditionStatus
	sick := statuses{"GPU": corev1.ConditionTrue, "Mem": corev1.ConditionTrue}
	guard := func(cond corev1.NodeConditionType, scope string) *fleet.GuardState {
		return &fleet.GuardState{RenewTime: t0, Conditions: map[corev1.NodeConditionType]map[string]fleet.Scope{
			cond: {scope: {Tripped: true, Since: t0, Unhealthy: 6, Nodes: 10}},
		}}
	}
	quiet := &fleet.GuardState{RenewTime: t0}
	tests := []struct {
		name       string
		statuses   statuses
		flapping   map[corev1.NodeConditionType]bool
		zone       string
		ne         NoExecuteInput
		wantNE     bool
		wantHold   map[corev1.NodeConditionType]bool
		wantReason string
		wantMsg    string
	}{
		{name: "granted, guard fresh and quiet", statuses: sick, ne: NoExecuteInput{Granted: true, Guard: quiet, GuardFresh: true}, wantNE: true},
		{name: "no grant: waiting", statuses: sick, ne: NoExecuteInput{Guard: quiet, GuardFresh: true}, wantReason: ReasonNoExecuteWaiting, wantMsg: "grant"},
		{name: "guard never read: suspended", statuses: sick, ne: NoExecuteInput{Granted: true}, wantReason: ReasonNoExecuteSuspended, wantMsg: "never been read"},
		{name: "guard stale: suspended, NoExecute only", statuses: sick, ne: NoExecuteInput{Granted: true, Guard: guard("Mem", fleet.FleetScope)},
			wantHold: map[corev1.NodeConditionType]bool{"Mem": true}, wantReason: ReasonNoExecuteSuspended, wantMsg: "stale"},
		{name: "flapping: suspended", statuses: sick, flapping: map[corev1.NodeConditionType]bool{"GPU": true},
			ne: NoExecuteInput{Granted: true, Guard: quiet, GuardFresh: true}, wantReason: ReasonNoExecuteSuspended, wantMsg: "flapping"},
		{name: "guard tripped fleet-wide", statuses: sick, ne: NoExecuteInput{Granted: true, Guard: guard("GPU", fleet.FleetScope), GuardFresh: true},
			wantHold: map[corev1.NodeConditionType]bool{"GPU": true}, wantReason: ReasonNoExecuteSuspended, wantMsg: "fleet-wide"},
		{name: "guard tripped in this zone", statuses: sick, zone: "a", ne: NoExecuteInput{Granted: true, Guard: guard("GPU", "a"), GuardFresh: true},
			wantHold: map[corev1.NodeConditionType]bool{"GPU": true}, wantReason: ReasonNoExecuteSuspended, wantMsg: `zone "a"`},
		{name: "guard tripped in another zone", statuses: sick, zone: "b", ne: NoExecuteInput{Granted: true, Guard: guard("GPU", "a"), GuardFresh: true}, wantNE: true},
		{name: "healthy: no reason even without a grant", statuses: statuses{"GPU": corev1.ConditionFalse}, ne: NoExecuteInput{}},
		{name: "guard not read yet: every condition held, suspended", statuses: sick, ne: NoExecuteInput{Granted: true, GuardUnread: true},
			wantHold: map[corev1.NodeConditionType]bool{"GPU": true, "Mem": true}, wantReason: ReasonNoExecuteSuspended, wantMsg: "never been read"},
		{name: "guard not read yet, healthy: held all the same, no reason", statuses: statuses{"GPU": corev1.ConditionFalse}, ne: NoExecuteInput{GuardUnread: true},
			wantHold: map[corev1.NodeConditionType]bool{"GPU": true, "Mem": true}},
		{name: "a guard read wins over unread", statuses: sick, ne: NoExecuteInput{Granted: true, GuardUnread: true, Guard: quiet, GuardFresh: true}, wantNE: true},
		{name: "guard read and absent: nothing held", statuses: sick, ne: NoExecuteInput{Granted: true}, wantReason: ReasonNoExecuteSuspended, wantMsg: "never been read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gates := PlanGates(rules, tt.statuses, tt.flapping, tt.zone, tt.ne)
			g := gates["GPU"]
			if g.NoExecute != tt.wantNE {
				t.Errorf("GPU NoExecute = %v, want %v", g.NoExecute, tt.wantNE)
			}
			wantMem := tt.ne.Granted && tt.ne.GuardFresh && !tt.wantHold["Mem"]
			if gates["Mem"].NoExecute != wantMem {
				t.Errorf("Mem NoExecute = %v, want %v (each condition has its own gate)", gates["Mem"].NoExecute, wantMem)
			}
			for _, c := range []corev1.NodeConditionType{"GPU", "Mem"} {
				if gates[c].Hold != tt.wantHold[c] {
					t.Errorf("%s hold = %v, want %v", c, gates[c].Hold, tt.wantHold[c])
				}
			}
			if g.Reason != tt.wantReason || !strings.Contains(g.Message, tt.wantMsg) {
				t.Errorf("GPU reason %q message %q, want %q containing %q", g.Reason, g.Message, tt.wantReason, tt.wantMsg)
			}
			if gates["Mem"].Reason != "" {
				t.Errorf("Mem has no NoExecute rule, got reason %q", gates["Mem"].Reason)
			}
		})
	}
}

func TestPlanRequest(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	every := 20 * time.Second
	node := func(v string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		if v != "" {
			n.Annotations = map[string]string{fleet.RequestAnnotation: v}
		}
		return n
	}
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	req := func(since time.Time, alive *time.Time, conds ...corev1.NodeConditionType) string {
		return fleet.Request{Since: since, Conditions: conds, Alive: alive}.Format()
	}
	tests := []struct {
		name       string
		node       *corev1.Node
		in         RequestInput
		now        time.Time
		want       string
		wantChange bool
		wantDue    time.Time
	}{
		{name: "nothing wanted, none there", node: node(""), now: t0},
		{name: "nothing wanted: removed", node: node(req(t0, nil, "GPU")), now: t0, wantChange: true},
		{name: "new request: since now", node: node(""), in: RequestInput{Wanted: []corev1.NodeConditionType{"GPU"}}, now: t0,
			want: req(t0, nil, "GPU"), wantChange: true},
		{name: "kept: since carried", node: node(req(t0, nil, "GPU")), in: RequestInput{Wanted: []corev1.NodeConditionType{"GPU"}}, now: t0.Add(time.Hour),
			want: req(t0, nil, "GPU")},
		{name: "conditions change, since kept", node: node(req(t0, nil, "GPU")), in: RequestInput{Wanted: []corev1.NodeConditionType{"GPU", "Disk"}}, now: t0.Add(time.Minute),
			want: req(t0, nil, "Disk", "GPU"), wantChange: true},
		{name: "unreadable: replaced, since now", node: node("garbage"), in: RequestInput{Wanted: []corev1.NodeConditionType{"GPU"}}, now: t0.Add(time.Minute),
			want: req(t0.Add(time.Minute), nil, "GPU"), wantChange: true},
		{name: "granted: alive stamped", node: node(req(t0, nil, "GPU")), in: RequestInput{Wanted: []corev1.NodeConditionType{"GPU"}, Granted: true, AliveEvery: every}, now: t0.Add(time.Minute),
			want: req(t0, at(time.Minute), "GPU"), wantChange: true, wantDue: t0.Add(time.Minute + every)},
		{name: "granted: alive fresh, kept", node: node(req(t0, at(time.Minute), "GPU")), in: RequestInput{Wanted: []corev1.NodeConditionType{"GPU"}, Granted: true, AliveEvery: every}, now: t0.Add(time.Minute + 10*time.Second),
			want: req(t0, at(time.Minute), "GPU"), wantDue: t0.Add(time.Minute + every)},
		{name: "granted: alive due, refreshed", node: node(req(t0, at(time.Minute), "GPU")), in: RequestInput{Wanted: []corev1.NodeConditionType{"GPU"}, Granted: true, AliveEvery: every}, now: t0.Add(time.Minute + every),
			want: req(t0, at(time.Minute+every), "GPU"), wantChange: true, wantDue: t0.Add(time.Minute + every)},
		{name: "granted: alive in the future (a skewed clock) is not trusted", node: node(req(t0, at(time.Hour), "GPU")), in: RequestInput{Wanted: []corev1.NodeConditionType{"GPU"}, Granted: true, AliveEvery: every}, now: t0,
			want: req(t0, at(0), "GPU"), wantChange: true, wantDue: t0.Add(every)},
		{name: "grant gone: alive dropped", node: node(req(t0, at(time.Minute), "GPU")), in: RequestInput{Wanted: []corev1.NodeConditionType{"GPU"}, AliveEvery: every}, now: t0.Add(2 * time.Minute),
			want: req(t0, nil, "GPU"), wantChange: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, change := PlanRequest(tt.node, tt.in, tt.now)
			if got != tt.want || change != tt.wantChange {
				t.Errorf("PlanRequest = %q, %v; want %q, %v", got, change, tt.want, tt.wantChange)
			}
			if due := AliveDue(tt.node, tt.in, tt.now); !due.Equal(tt.wantDue) {
				t.Errorf("AliveDue = %v, want %v", due, tt.wantDue)
			}
		})
	}
}

// TestGuardUnreadHoldsAdditions: until the node has read the guard (or
// found there is none), no taint of a condition the guard judges is added,
// those on stay, and removals are free; an agent that follows no guard, or
// has found none, adds as ever.
func TestGuardUnreadHoldsAdditions(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	mem := corev1.Taint{Key: "selftaint.io/mem", Effect: corev1.TaintEffectNoSchedule}
	gpu := corev1.Taint{Key: "selftaint.io/gpu", Effect: corev1.TaintEffectNoExecute}
	gpuFallback := corev1.Taint{Key: gpu.Key, Effect: corev1.TaintEffectNoSchedule}
	rules := []Rule{
		{Condition: "Mem", Status: corev1.ConditionTrue, Taint: mem},
		{Condition: "GPU", Status: corev1.ConditionTrue, Taint: gpu, Fallback: corev1.TaintEffectNoSchedule},
	}
	type statuses = map[corev1.NodeConditionType]corev1.ConditionStatus
	T, F := corev1.ConditionTrue, corev1.ConditionFalse
	unread := NoExecuteInput{GuardUnread: true}
	quiet := NoExecuteInput{Guard: &fleet.GuardState{RenewTime: t0}, GuardFresh: true}
	memTripped := NoExecuteInput{GuardFresh: true, Guard: &fleet.GuardState{RenewTime: t0, Conditions: map[corev1.NodeConditionType]map[string]fleet.Scope{
		"Mem": {fleet.FleetScope: {Tripped: true, Since: t0, Unhealthy: 6, Nodes: 10}},
	}}}
	tests := []struct {
		name     string
		ne       NoExecuteInput
		statuses statuses
		present  []corev1.Taint
		want     []corev1.Taint
		wantHeld []corev1.Taint
	}{
		{name: "not read: nothing new added", ne: unread, statuses: statuses{"Mem": T, "GPU": T},
			wantHeld: []corev1.Taint{gpuFallback, mem}},
		{name: "not read: what is on stays", ne: unread, statuses: statuses{"Mem": T, "GPU": T}, present: []corev1.Taint{mem},
			want: []corev1.Taint{mem}, wantHeld: []corev1.Taint{gpuFallback}},
		{name: "not read: removal is free", ne: unread, statuses: statuses{"Mem": F, "GPU": F}, present: []corev1.Taint{mem, gpuFallback}},
		{name: "no guard followed (no NoExecute options): added", ne: NoExecuteInput{}, statuses: statuses{"Mem": T, "GPU": T},
			want: []corev1.Taint{gpuFallback, mem}},
		{name: "read and found absent: added", ne: NoExecuteInput{GuardFresh: false}, statuses: statuses{"Mem": T, "GPU": T},
			want: []corev1.Taint{gpuFallback, mem}},
		{name: "read, quiet: added", ne: quiet, statuses: statuses{"Mem": T, "GPU": T},
			want: []corev1.Taint{gpuFallback, mem}},
		{name: "read, tripped for Mem: Mem held, GPU added", ne: memTripped, statuses: statuses{"Mem": T, "GPU": T},
			want: []corev1.Taint{gpuFallback}, wantHeld: []corev1.Taint{mem}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gates := PlanGates(rules, tt.statuses, nil, "", tt.ne)
			present := map[TaintID]bool{}
			for _, p := range tt.present {
				present[IDOf(p)] = true
			}
			got, held := Desired(rules, tt.statuses, gates, present)
			if !slices.Equal(got, tt.want) && len(got)+len(tt.want) > 0 {
				t.Errorf("desired = %v, want %v", got, tt.want)
			}
			if !slices.Equal(held, tt.wantHeld) && len(held)+len(tt.wantHeld) > 0 {
				t.Errorf("held = %v, want %v", held, tt.wantHeld)
			}
		})
	}
}
