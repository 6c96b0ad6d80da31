package taints

import (
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type counts = map[corev1.ResourceName]int64

func TestPlanResources(t *testing.T) {
	const fpga corev1.ResourceName = "example.com/fpga"
	ours := func(v int64) ResourceField { return ResourceField{Present: true, Value: v, Ours: true} }
	theirs := func(v int64, managers ...string) ResourceField {
		return ResourceField{Present: true, Value: v, Others: managers}
	}
	both := func(f ResourceField) ResourceSeen { return ResourceSeen{Capacity: f, Allocatable: f} }
	seen := func(s ResourceSeen) map[corev1.ResourceName]ResourceSeen {
		return map[corev1.ResourceName]ResourceSeen{fpga: s}
	}
	adv := map[corev1.ResourceName]bool{fpga: true}
	yield4 := Yield{Field: FieldCapacity, Managers: "operator", Theirs: 4, Ours: 1}
	yielded := map[corev1.ResourceName]Yield{fpga: yield4}
	plan := func(capacity, allocatable, advertise counts) ResourcePlan {
		return ResourcePlan{
			Capacity: capacity, Allocatable: allocatable, Advertise: advertise,
			Yielded: map[corev1.ResourceName]Yield{}, Resumed: map[corev1.ResourceName]bool{},
		}
	}
	one := counts{fpga: 1}
	none := counts{}
	with := func(p ResourcePlan, f func(*ResourcePlan)) ResourcePlan { f(&p); return p }
	forced := func(p ResourcePlan) ResourcePlan { p.Force = true; return p }

	tests := []struct {
		name string
		in   ResourceInput
		want ResourcePlan
	}{
		{"new resource, nothing on the node: advertised",
			ResourceInput{Wanted: one, Known: true},
			plan(one, one, one)},
		{"new resource another writer already advertises (no recorded owner): held",
			ResourceInput{Wanted: one, Known: true, Seen: seen(both(theirs(8)))},
			with(plan(none, none, none), func(p *ResourcePlan) { p.Held = []corev1.ResourceName{fpga} })},
		{"new resource zeroed by the kubelet: advertised, over the kubelet's zero",
			ResourceInput{Wanted: one, Known: true, Seen: seen(both(theirs(0, "kubelet")))},
			forced(plan(one, one, one))},
		{"ours, unchanged",
			ResourceInput{Wanted: one, Known: true, Seen: seen(both(ours(1))), Advertised: adv},
			plan(one, one, one)},
		{"ours, the inventory's count changed: the new count",
			ResourceInput{Wanted: counts{fpga: 2}, Known: true, Seen: seen(both(ours(1))), Advertised: adv},
			plan(counts{fpga: 2}, counts{fpga: 2}, counts{fpga: 2})},
		{"zeroed by another writer: asserted again, over their zero",
			ResourceInput{Wanted: one, Known: true, Seen: seen(both(theirs(0, "kubelet"))), Advertised: adv},
			forced(plan(one, one, one))},
		{"allocatable zeroed by another writer: asserted again, over their zero",
			ResourceInput{Wanted: one, Known: true, Seen: seen(ResourceSeen{Capacity: ours(1), Allocatable: theirs(0, "kubelet")}), Advertised: adv},
			forced(plan(one, one, one))},
		{"removed by another writer: asserted again",
			ResourceInput{Wanted: one, Known: true, Advertised: adv},
			plan(one, one, one)},
		{"another writer wrote our value: asserted, no yield",
			ResourceInput{Wanted: one, Known: true, Seen: seen(both(theirs(1, "operator"))), Advertised: adv},
			plan(one, one, one)},
		{"another manager wrote a different capacity: yielded, our allocatable kept as it is",
			ResourceInput{Wanted: one, Known: true, Seen: seen(ResourceSeen{Capacity: theirs(4, "operator"), Allocatable: ours(1)}), Advertised: adv},
			with(plan(none, one, none), func(p *ResourcePlan) {
				p.Yielded = yielded
				p.Events = []ResourceEvent{{Kind: ResourceYielded, Resource: fpga, Yield: yield4}}
			})},
		{"another manager applied both with force: yielded, nothing applied",
			ResourceInput{Wanted: one, Known: true, Seen: seen(both(theirs(4, "operator", "plugin"))), Advertised: adv},
			with(plan(none, none, none), func(p *ResourcePlan) {
				y := Yield{Field: FieldCapacity, Managers: "operator, plugin", Theirs: 4, Ours: 1}
				p.Yielded = map[corev1.ResourceName]Yield{fpga: y}
				p.Events = []ResourceEvent{{Kind: ResourceYielded, Resource: fpga, Yield: y}}
			})},
		{"another manager changed only allocatable: yielded",
			ResourceInput{Wanted: one, Known: true, Seen: seen(ResourceSeen{Capacity: ours(1), Allocatable: theirs(3, "operator")}), Advertised: adv},
			with(plan(one, none, none), func(p *ResourcePlan) {
				y := Yield{Field: FieldAllocatable, Managers: "operator", Theirs: 3, Ours: 1}
				p.Yielded = map[corev1.ResourceName]Yield{fpga: y}
				p.Events = []ResourceEvent{{Kind: ResourceYielded, Resource: fpga, Yield: y}}
			})},
		{"yielded, their value stands: still yielded, told once",
			ResourceInput{Wanted: counts{fpga: 2}, Known: true, Seen: seen(ResourceSeen{Capacity: theirs(5, "operator"), Allocatable: ours(1)}), Advertised: adv, Yielded: yielded},
			with(plan(none, one, none), func(p *ResourcePlan) {
				p.Yielded = map[corev1.ResourceName]Yield{fpga: {Field: FieldCapacity, Managers: "operator", Theirs: 5, Ours: 2}}
			})},
		{"yielded, only their allocatable left: still yielded",
			ResourceInput{Wanted: one, Known: true, Seen: seen(ResourceSeen{Allocatable: theirs(4, "plugin")}), Advertised: adv, Yielded: yielded},
			with(plan(none, none, none), func(p *ResourcePlan) {
				p.Yielded = map[corev1.ResourceName]Yield{fpga: {Field: FieldAllocatable, Managers: "plugin", Theirs: 4, Ours: 1}}
			})},
		{"yielded, their value removed: resumed",
			ResourceInput{Wanted: one, Known: true, Advertised: adv, Yielded: yielded},
			with(plan(one, one, one), func(p *ResourcePlan) {
				p.Resumed = map[corev1.ResourceName]bool{fpga: true}
				p.Events = []ResourceEvent{{Kind: ResourceResumed, Resource: fpga, Yield: yield4, Count: 1, Gone: "removed"}}
			})},
		{"yielded, their value zeroed: resumed",
			ResourceInput{Wanted: one, Known: true, Seen: seen(both(theirs(0, "operator"))), Advertised: adv, Yielded: yielded},
			with(forced(plan(one, one, one)), func(p *ResourcePlan) {
				p.Resumed = map[corev1.ResourceName]bool{fpga: true}
				p.Events = []ResourceEvent{{Kind: ResourceResumed, Resource: fpga, Yield: yield4, Count: 1, Gone: "zeroed"}}
			})},
		{"yielded, the hardware gone: released, only our own entry withdrawn",
			ResourceInput{Known: true, Seen: seen(ResourceSeen{Capacity: theirs(4, "operator"), Allocatable: ours(1)}), Advertised: adv, Yielded: yielded},
			with(plan(none, none, none), func(p *ResourcePlan) {
				p.Withdraw = []ResourceEntry{{Name: fpga, Field: FieldAllocatable}}
				p.Forget = []corev1.ResourceName{fpga}
				p.Events = []ResourceEvent{{Kind: ResourceReleased, Resource: fpga, Yield: yield4}}
			})},
		{"the hardware gone: withdrawn",
			ResourceInput{Known: true, Seen: seen(both(ours(1))), Advertised: adv},
			with(plan(none, none, none), func(p *ResourcePlan) {
				p.Withdraw = []ResourceEntry{{Name: fpga, Field: FieldCapacity}, {Name: fpga, Field: FieldAllocatable}}
				p.Forget = []corev1.ResourceName{fpga}
			})},
		{"the hardware gone, capacity co-owned: only what we own alone is withdrawn",
			ResourceInput{Known: true, Seen: seen(ResourceSeen{Capacity: ResourceField{Present: true, Value: 1, Ours: true, Others: []string{"plugin"}}, Allocatable: ours(1)}), Advertised: adv},
			with(plan(none, none, none), func(p *ResourcePlan) {
				p.Withdraw = []ResourceEntry{{Name: fpga, Field: FieldAllocatable}}
				p.Forget = []corev1.ResourceName{fpga}
			})},
		{"an entry we own that nothing wants: withdrawn",
			ResourceInput{Known: true, Seen: seen(ResourceSeen{Capacity: theirs(2, "plugin"), Allocatable: ours(1)})},
			with(plan(none, none, none), func(p *ResourcePlan) {
				p.Withdraw = []ResourceEntry{{Name: fpga, Field: FieldAllocatable}}
				p.Forget = []corev1.ResourceName{fpga}
			})},
		{"no inventory yet: the adopted count asserted",
			ResourceInput{Wanted: one, Seen: seen(both(ours(1))), Advertised: adv},
			plan(one, one, one)},
		{"no inventory yet, zeroed by the kubelet: the adopted count asserted again",
			ResourceInput{Wanted: one, Seen: seen(both(theirs(0, "kubelet"))), Advertised: adv},
			forced(plan(one, one, one))},
		{"no inventory yet, not adopted: kept as it is, never withdrawn",
			ResourceInput{Seen: seen(both(ours(3))), Advertised: adv},
			plan(counts{fpga: 3}, counts{fpga: 3}, none)},
		{"no inventory yet, yielded: still yielded",
			ResourceInput{Seen: seen(both(theirs(4, "operator"))), Advertised: adv, Yielded: yielded},
			with(plan(none, none, none), func(p *ResourcePlan) { p.Yielded = yielded })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PlanResources(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("PlanResources() =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

func TestSeenResources(t *testing.T) {
	const fpga corev1.ResourceName = "example.com/fpga"
	mf := func(manager, raw string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}}
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
			mf("selftaint", `{"f:status":{"f:allocatable":{"f:example.com/fpga":{}},"f:conditions":{}}}`),
			mf("operator", `{"f:status":{"f:capacity":{"f:example.com/fpga":{}}}}`),
			mf("plugin", `{"f:status":{"f:capacity":{"f:example.com/fpga":{},"f:example.com/gone":{}}}}`),
			mf("garbled", `not json`),
			{Manager: "empty"},
		}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{fpga: resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("8")},
			Allocatable: corev1.ResourceList{fpga: resource.MustParse("1")},
		},
	}
	names := ResourceNames(node)
	if want := []corev1.ResourceName{corev1.ResourceCPU, "example.com/fpga", "example.com/gone"}; !slices.Equal(names, want) {
		t.Errorf("ResourceNames() = %v, want %v", names, want)
	}
	got := SeenResources(node, "selftaint", names)
	want := map[corev1.ResourceName]ResourceSeen{
		corev1.ResourceCPU: {Capacity: ResourceField{Present: true, Value: 8}},
		fpga: {
			Capacity:    ResourceField{Present: true, Value: 4, Others: []string{"operator", "plugin"}},
			Allocatable: ResourceField{Present: true, Value: 1, Ours: true},
		},
		"example.com/gone": {Capacity: ResourceField{Others: []string{"plugin"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SeenResources() =\n  %+v\nwant\n  %+v", got, want)
	}
}

// TestPlanNodeResources: PlanNode's status part follows PlanResources:
// a yielded resource is not written and keeps the heartbeat on time, a
// zeroed one is written, one in step is not, and the summary names each
// withdrawn resource once.
func TestPlanNodeResources(t *testing.T) {
	const fpga corev1.ResourceName = "example.com/fpga"
	const cond corev1.NodeConditionType = "SelftaintX"
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	st := State{Status: corev1.ConditionFalse, Reason: "Fine", LastTransitionTime: now.Add(-time.Hour)}
	owns := func(manager string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Subresource: "status", FieldsV1: &metav1.FieldsV1{
			Raw: []byte(`{"f:status":{"f:capacity":{"f:example.com/fpga":{}},"f:allocatable":{"f:example.com/fpga":{}}}}`)}}
	}
	node := func(beat time.Duration, capacity string, managers ...string) *corev1.Node {
		n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: cond, Status: st.Status, Reason: st.Reason,
			LastTransitionTime: metav1.NewTime(st.LastTransitionTime), LastHeartbeatTime: metav1.NewTime(now.Add(-beat)),
		}}}}
		if capacity != "" {
			l := corev1.ResourceList{fpga: resource.MustParse(capacity)}
			n.Status.Capacity, n.Status.Allocatable = l, l.DeepCopy()
		}
		for _, m := range managers {
			n.ManagedFields = append(n.ManagedFields, owns(m))
		}
		return n
	}
	snap := func(n *corev1.Node, count int64, yielded map[corev1.ResourceName]Yield) Snapshot {
		return Snapshot{
			Node: n, Now: now, HeartbeatPeriod: time.Hour, FieldManager: "selftaint", MaxMessageLen: 1024,
			Damped:    map[corev1.NodeConditionType]State{cond: st},
			Published: map[corev1.NodeConditionType]Published{cond: {State: st}},
			Hardware:  []Hardware{{Name: fpga, Count: count, Advertise: true}}, HardwareKnown: true,
			Advertised: map[corev1.ResourceName]bool{fpga: true}, Yielded: yielded,
		}
	}
	tests := []struct {
		name       string
		snap       Snapshot
		wantWrite  bool
		wantNext   time.Time
		advertise  map[corev1.ResourceName]int64
		withdraw   []corev1.ResourceName
		wantYields int
	}{
		{"yielded: nothing to write, the heartbeat stays due on time",
			snap(node(10*time.Minute, "4", "plugin"), 1, map[corev1.ResourceName]Yield{fpga: {Field: FieldCapacity, Managers: "plugin", Theirs: 4, Ours: 1}}),
			false, now.Add(50 * time.Minute), map[corev1.ResourceName]int64{}, nil, 1},
		{"another manager's new value: yielded now, nothing written",
			snap(node(10*time.Minute, "4", "plugin"), 1, nil),
			false, now.Add(50 * time.Minute), map[corev1.ResourceName]int64{}, nil, 1},
		{"zeroed by the kubelet: written",
			snap(node(10*time.Minute, "0", "kubelet"), 1, nil),
			true, now.Add(time.Hour), map[corev1.ResourceName]int64{fpga: 1}, nil, 0},
		{"in step: nothing to write",
			snap(node(10*time.Minute, "1", "selftaint"), 1, nil),
			false, now.Add(50 * time.Minute), map[corev1.ResourceName]int64{fpga: 1}, nil, 0},
		{"heartbeat due: written",
			snap(node(2*time.Hour, "1", "selftaint"), 1, nil),
			true, now.Add(time.Hour), map[corev1.ResourceName]int64{fpga: 1}, nil, 0},
		{"hardware gone: capacity and allocatable withdrawn, nothing to apply",
			snap(node(10*time.Minute, "1", "selftaint"), 0, nil),
			false, now.Add(50 * time.Minute), map[corev1.ResourceName]int64{}, []corev1.ResourceName{fpga, fpga}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PlanNode(tt.snap)
			if got.Status.Write != tt.wantWrite {
				t.Errorf("Write = %v, want %v", got.Status.Write, tt.wantWrite)
			}
			if !got.Next.Equal(tt.wantNext) {
				t.Errorf("Next = %v, want %v", got.Next, tt.wantNext)
			}
			if !reflect.DeepEqual(got.Status.Resources, tt.advertise) {
				t.Errorf("Resources = %v, want %v", got.Status.Resources, tt.advertise)
			}
			var withdraw []corev1.ResourceName
			for _, e := range got.Resources.Withdraw {
				withdraw = append(withdraw, e.Name)
			}
			if !slices.Equal(withdraw, tt.withdraw) {
				t.Errorf("Withdraw = %v, want %v", got.Resources.Withdraw, tt.withdraw)
			}
			if len(got.Resources.Yielded) != tt.wantYields {
				t.Errorf("Yielded = %v, want %d", got.Resources.Yielded, tt.wantYields)
			}
		})
	}
}
