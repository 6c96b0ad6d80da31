package taints

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/taints/faults"
)

func TestPlanNode(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const mem corev1.NodeConditionType = "SelftaintMemoryPressure"
	fine := State{Status: corev1.ConditionFalse, Reason: "Fine", Message: "ok", LastTransitionTime: ago(time.Hour)}
	onNode := func(beat time.Duration, capacity corev1.ResourceList, managed ...metav1.ManagedFieldsEntry) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: managed},
			Status: corev1.NodeStatus{
				Conditions: []corev1.NodeCondition{{Type: mem, Status: fine.Status, Reason: fine.Reason, Message: fine.Message,
					LastTransitionTime: metav1.NewTime(fine.LastTransitionTime), LastHeartbeatTime: metav1.NewTime(ago(beat))}},
				Capacity: capacity, Allocatable: capacity,
			},
		}
	}
	ours := metav1.ManagedFieldsEntry{Manager: "selftaint", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:capacity":{"f:example.com/fpga":{}},"f:allocatable":{"f:example.com/fpga":{}}}}`)}}
	fpga := Hardware{Name: "example.com/fpga", Count: 2, Advertise: true}
	gpu := Hardware{Name: "nvidia.com/gpu", Count: 8, Advertise: true}
	base := func(mod func(*Snapshot)) Snapshot {
		s := Snapshot{
			Node: onNode(time.Minute, nil), Now: now, FieldManager: "selftaint", HeartbeatPeriod: 5 * time.Minute, MaxMessageLen: 1024,
			Damped:        map[corev1.NodeConditionType]State{mem: fine},
			Published:     map[corev1.NodeConditionType]Published{mem: {State: fine}},
			HardwareKnown: true,
		}
		mod(&s)
		return s
	}
	tests := []struct {
		name      string
		snap      Snapshot
		write     bool
		resources map[corev1.ResourceName]int64
		held      []corev1.ResourceName
		withdraw  []corev1.ResourceName
		next      time.Time
	}{
		{
			name:  "nothing changed: no write, next sync at the heartbeat",
			snap:  base(func(*Snapshot) {}),
			write: false, next: now.Add(4 * time.Minute),
		},
		{
			name:  "heartbeat due: write, next heartbeat a period from now",
			snap:  base(func(s *Snapshot) { s.Node = onNode(6*time.Minute, nil) }),
			write: true, next: now.Add(5 * time.Minute),
		},
		{
			name: "a new message alone waits for the heartbeat",
			snap: base(func(s *Snapshot) {
				s.Damped = map[corev1.NodeConditionType]State{mem: {Status: fine.Status, Reason: fine.Reason, Message: "new reading", LastTransitionTime: fine.LastTransitionTime}}
			}),
			write: false, next: now.Add(4 * time.Minute),
		},
		{
			name: "a new message of a problem with message updates: written at once",
			snap: base(func(s *Snapshot) {
				s.Node.Status.Conditions[0].Status, s.Node.Status.Conditions[0].Reason = corev1.ConditionTrue, "Low"
				s.Damped = map[corev1.NodeConditionType]State{mem: {Status: corev1.ConditionTrue, Reason: "Low", Message: "new reading", LastTransitionTime: fine.LastTransitionTime}}
				s.MessageUpdates = map[corev1.NodeConditionType]bool{mem: true}
			}),
			write: true, next: now.Add(5 * time.Minute),
		},
		{
			name: "the same message of a problem with message updates: no write",
			snap: base(func(s *Snapshot) {
				s.Node.Status.Conditions[0].Status, s.Node.Status.Conditions[0].Reason = corev1.ConditionTrue, "Low"
				s.Damped = map[corev1.NodeConditionType]State{mem: {Status: corev1.ConditionTrue, Reason: "Low", Message: fine.Message, LastTransitionTime: fine.LastTransitionTime}}
				s.MessageUpdates = map[corev1.NodeConditionType]bool{mem: true}
			}),
			write: false, next: now.Add(4 * time.Minute),
		},
		{
			name: "a new OK message with message updates waits for the heartbeat",
			snap: base(func(s *Snapshot) {
				s.Damped = map[corev1.NodeConditionType]State{mem: {Status: fine.Status, Reason: fine.Reason, Message: "new reading", LastTransitionTime: fine.LastTransitionTime}}
				s.MessageUpdates = map[corev1.NodeConditionType]bool{mem: true}
			}),
			write: false, next: now.Add(4 * time.Minute),
		},
		{
			name: "a new message of a problem without message updates waits for the heartbeat",
			snap: base(func(s *Snapshot) {
				s.Node.Status.Conditions[0].Status, s.Node.Status.Conditions[0].Reason = corev1.ConditionTrue, "Low"
				s.Damped = map[corev1.NodeConditionType]State{mem: {Status: corev1.ConditionTrue, Reason: "Low", Message: "new reading", LastTransitionTime: fine.LastTransitionTime}}
			}),
			write: false, next: now.Add(4 * time.Minute),
		},
		{
			name: "a pending flip or a fault's expiry comes first",
			snap: base(func(s *Snapshot) {
				s.Pending = now.Add(20 * time.Second)
				s.Faults = faults.Eval{Next: now.Add(10 * time.Second)}
			}),
			write: false, next: now.Add(10 * time.Second),
		},
		{
			name:  "hardware present: advertised, written",
			snap:  base(func(s *Snapshot) { s.Hardware = []Hardware{fpga} }),
			write: true, resources: map[corev1.ResourceName]int64{"example.com/fpga": 2}, next: now.Add(5 * time.Minute),
		},
		{
			name: "already advertised at that count: no write",
			snap: base(func(s *Snapshot) {
				s.Hardware, s.Advertised = []Hardware{fpga}, map[corev1.ResourceName]bool{"example.com/fpga": true}
				s.Node = onNode(time.Minute, corev1.ResourceList{"example.com/fpga": resource.MustParse("2")}, ours)
			}),
			write: false, resources: map[corev1.ResourceName]int64{"example.com/fpga": 2}, next: now.Add(4 * time.Minute),
		},
		{
			name: "zeroed by the kubelet: asserted again",
			snap: base(func(s *Snapshot) {
				s.Hardware, s.Advertised = []Hardware{fpga}, map[corev1.ResourceName]bool{"example.com/fpga": true}
				s.Node = onNode(time.Minute, corev1.ResourceList{"example.com/fpga": resource.MustParse("0")})
			}),
			write: true, resources: map[corev1.ResourceName]int64{"example.com/fpga": 2}, next: now.Add(5 * time.Minute),
		},
		{
			name: "a device plugin advertises it: held, left alone",
			snap: base(func(s *Snapshot) {
				s.Hardware = []Hardware{gpu}
				s.Node = onNode(time.Minute, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")})
			}),
			write: false, held: []corev1.ResourceName{"nvidia.com/gpu"}, next: now.Add(4 * time.Minute),
		},
		{
			name: "advertised by an earlier run (our managed fields): ours, not held",
			snap: base(func(s *Snapshot) {
				s.Hardware = []Hardware{fpga}
				s.Node = onNode(time.Minute, corev1.ResourceList{"example.com/fpga": resource.MustParse("1")}, ours)
			}),
			write: true, resources: map[corev1.ResourceName]int64{"example.com/fpga": 2}, next: now.Add(5 * time.Minute),
		},
		{
			name: "hardware gone: withdrawn",
			snap: base(func(s *Snapshot) {
				s.Hardware, s.Advertised = []Hardware{{Name: "example.com/fpga", Count: 0, Advertise: true}}, map[corev1.ResourceName]bool{"example.com/fpga": true}
				s.Node = onNode(time.Minute, corev1.ResourceList{"example.com/fpga": resource.MustParse("2")}, ours)
			}),
			write: false, withdraw: []corev1.ResourceName{"example.com/fpga"}, next: now.Add(4 * time.Minute),
		},
	}
	for _, tt := range tests {
		p := PlanNode(tt.snap)
		if p.Status.Write != tt.write {
			t.Errorf("%s: write %v, want %v", tt.name, p.Status.Write, tt.write)
		}
		if len(p.Status.Resources) != len(tt.resources) {
			t.Errorf("%s: resources %v, want %v", tt.name, p.Status.Resources, tt.resources)
		}
		for r, n := range tt.resources {
			if p.Status.Resources[r] != n {
				t.Errorf("%s: resource %s = %d, want %d", tt.name, r, p.Status.Resources[r], n)
			}
		}
		if len(p.Status.Held) != len(tt.held) || (len(tt.held) > 0 && p.Status.Held[0] != tt.held[0]) {
			t.Errorf("%s: held %v, want %v", tt.name, p.Status.Held, tt.held)
		}
		var withdraw []corev1.ResourceName
		for _, e := range p.Resources.Withdraw {
			if !slices.Contains(withdraw, e.Name) {
				withdraw = append(withdraw, e.Name)
			}
		}
		if !slices.Equal(withdraw, tt.withdraw) {
			t.Errorf("%s: withdraw %v, want %v", tt.name, p.Resources.Withdraw, tt.withdraw)
		}
		if !p.Next.Equal(tt.next) {
			t.Errorf("%s: next %v, want %v", tt.name, p.Next, tt.next)
		}
		if p.Metadata.Node != tt.snap.Node || len(p.Metadata.Statuses) != len(p.Conditions.States) {
			t.Errorf("%s: the metadata input does not carry the Node and the planned conditions", tt.name)
		}
	}
}

func TestPlanNodeConditionChanges(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	const mem, ready corev1.NodeConditionType = "SelftaintMemoryPressure", "Ready"
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: mem, Status: corev1.ConditionFalse, Reason: "Fine"},
		{Type: ready, Status: corev1.ConditionTrue, Reason: "Ready"},
	}}}
	snap := Snapshot{
		Node: node, Now: now, HeartbeatPeriod: time.Minute,
		Healthy: map[corev1.NodeConditionType]corev1.ConditionStatus{mem: corev1.ConditionFalse, ready: corev1.ConditionTrue},
		Damped: map[corev1.NodeConditionType]State{
			mem:   {Status: corev1.ConditionTrue, Reason: "Low", LastTransitionTime: now},
			ready: {Status: corev1.ConditionTrue, Reason: "StillReady", LastTransitionTime: now},
			"New": {Status: corev1.ConditionFalse, Reason: "Fine", LastTransitionTime: now},
		},
	}
	got := PlanNode(snap).Changes
	want := []ConditionChange{
		{Type: "New", State: State{Status: corev1.ConditionFalse, Reason: "Fine", LastTransitionTime: now}, Unhealthy: false},
		{Type: mem, State: State{Status: corev1.ConditionTrue, Reason: "Low", LastTransitionTime: now}, Unhealthy: true},
	}
	if len(got) != len(want) {
		t.Fatalf("changes %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Type != want[i].Type || got[i].Status != want[i].Status || got[i].Reason != want[i].Reason || got[i].Unhealthy != want[i].Unhealthy {
			t.Errorf("change %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestPlanNodeChangesTold: a change told but not written yet (the write
// failed and is retried) is not told again; one that went back before it
// was written is told again, against what was told, not the Node.
func TestPlanNodeChangesTold(t *testing.T) {
	now := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	const c corev1.NodeConditionType = "KernelDeadlock"
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: c, Status: corev1.ConditionFalse, Reason: "KernelHasNoDeadlock"}}}}
	for _, tt := range []struct {
		name string
		now  corev1.ConditionStatus
		told map[corev1.NodeConditionType]corev1.ConditionStatus
		want []corev1.ConditionStatus
	}{
		{"nothing told: against the Node", corev1.ConditionTrue, nil, []corev1.ConditionStatus{corev1.ConditionTrue}},
		{"told, not written: not again", corev1.ConditionTrue, map[corev1.NodeConditionType]corev1.ConditionStatus{c: corev1.ConditionTrue}, nil},
		{"told, then back before the write: told again", corev1.ConditionFalse, map[corev1.NodeConditionType]corev1.ConditionStatus{c: corev1.ConditionTrue}, []corev1.ConditionStatus{corev1.ConditionFalse}},
		{"nothing told, as on the Node: no change", corev1.ConditionFalse, nil, nil},
	} {
		snap := Snapshot{
			Node: node, Now: now, HeartbeatPeriod: time.Minute, Told: tt.told,
			Damped: map[corev1.NodeConditionType]State{c: {Status: tt.now, Reason: "R", LastTransitionTime: now}},
		}
		var got []corev1.ConditionStatus
		for _, ch := range PlanNode(snap).Changes {
			got = append(got, ch.Status)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: changes to %v, want %v", tt.name, got, tt.want)
		}
	}
}
