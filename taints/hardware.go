package taints

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HardwareTaintValue is the value of a special-hardware taint. Its key is
// the resource name and its effect NoSchedule, so the
// ExtendedResourceToleration admission plugin tolerates it for exactly the
// pods that request the resource.
const HardwareTaintValue = "present"

// Hardware is one kind of special hardware the node has and what selftaint
// does about it.
type Hardware struct {
	// Name is the extended resource name, e.g. example.com/fpga.
	Name corev1.ResourceName `json:"name"`
	// Count is how many the node has now.
	Count int64 `json:"count"`
	// Advertise puts Count in the Node's status capacity and allocatable.
	Advertise bool `json:"advertise"`
	// Taint keeps the taint Name=present:NoSchedule while Count > 0.
	Taint bool `json:"taint"`
	// Label keeps the label HardwareLabel(Name)=true while Count > 0.
	Label bool `json:"label"`
	// Detail says what was found, for logs and Events.
	Detail string `json:"detail,omitempty"`
}

// HardwareLabel is the label key that says a node has resource r, for pods
// that must land only there (the taint repels, the label attracts). It
// follows NVIDIA GPU feature discovery's nvidia.com/gpu.present.
func HardwareLabel(r corev1.ResourceName) string { return string(r) + ".present" }

// HardwareTaint is the taint for hardware r: its key is the resource name,
// effect NoSchedule, so the ExtendedResourceToleration admission plugin
// tolerates it for exactly the pods that request r.
func HardwareTaint(r corev1.ResourceName) corev1.Taint {
	return corev1.Taint{Key: string(r), Value: HardwareTaintValue, Effect: corev1.TaintEffectNoSchedule}
}

// HardwareTaints are the taints an inventory asks for.
func HardwareTaints(hw []Hardware) []corev1.Taint {
	var out []corev1.Taint
	for _, h := range hw {
		if h.Taint && h.Count > 0 {
			out = append(out, HardwareTaint(h.Name))
		}
	}
	return out
}

// HardwareLabels are the labels an inventory asks for.
func HardwareLabels(hw []Hardware) map[string]string {
	out := map[string]string{}
	for _, h := range hw {
		if h.Label && h.Count > 0 {
			out[HardwareLabel(h.Name)] = "true"
		}
	}
	return out
}

// Extended resources are shared ground: the kubelet rewrites status.capacity
// on restart (dropping or zeroing extended resources it does not know), and
// a device plugin or an operator may take one over. PlanResources decides,
// per resource, whether selftaint asserts its count, leaves the resource to
// another writer (yields) or withdraws it, from what the Node's managed
// fields say about who owns each entry. The rules:
//   - zeroed or removed by another writer: asserted again (what the kubelet
//     does on restart is no decision to respect);
//   - a different non-zero value that another field manager wrote (one we
//     no longer own): yielded, told once; not written again until that
//     value goes away (removed or zeroed), then resumed, told once;
//   - a non-zero value someone else wrote before we ever advertised it:
//     held by another writer, never touched;
//   - until the first inventory succeeds the resources adopted from the
//     Node are asserted with the counts they had, and nothing is withdrawn.
//
// With server-side apply, an entry left out of our apply configuration
// loses our ownership; if nobody else owns it the API server removes it,
// and with it the whole capacity or allocatable map when no other entry of
// that map has a recorded owner (a Node's registration capacity often has
// none). So an entry we still own alone is either applied (with its
// current value when we are not asserting it) or first removed with a
// patch that tests its value; it is never just left out.

// ResourceField is one entry of the Node's status.capacity or allocatable,
// as one sync sees it.
type ResourceField struct {
	// Present says the entry exists; Value is its amount.
	Present bool
	Value   int64
	// Ours says our field manager owns the entry; Others are the other
	// field managers that do, sorted.
	Ours   bool
	Others []string
}

// foreign says the entry holds a non-zero amount someone else wrote: it is
// not ours. A zero is what the kubelet writes over extended resources it
// does not know, never a decision to respect.
func (f ResourceField) foreign() bool { return f.Present && f.Value != 0 && !f.Ours }

// alone says only we own the entry: leaving it out of an apply removes it.
func (f ResourceField) alone() bool { return f.Present && f.Ours && len(f.Others) == 0 }

// ResourceSeen is one extended resource on the Node.
type ResourceSeen struct {
	Capacity, Allocatable ResourceField
}

// Status fields of a Node that hold extended resources.
const (
	FieldCapacity    = "capacity"
	FieldAllocatable = "allocatable"
)

// ResourceEntry names one entry: a resource in capacity or allocatable.
type ResourceEntry struct {
	Name  corev1.ResourceName
	Field string
}

// Yield records a resource left to another writer.
type Yield struct {
	// Field is the entry that showed their value (capacity first).
	Field string
	// Managers are the field managers that own it ("" when none is
	// recorded: a write that reset managed fields).
	Managers string
	// Theirs is their value, Ours the count we would advertise.
	Theirs, Ours int64
}

// ResourceEventKind says what a ResourceEvent tells.
type ResourceEventKind string

// The kinds of resource events.
const (
	// ResourceYielded: another field manager wrote a different non-zero
	// value; we stop writing the resource.
	ResourceYielded ResourceEventKind = "ResourceYielded"
	// ResourceResumed: the value we yielded to is gone (removed or
	// zeroed); we advertise ours again.
	ResourceResumed ResourceEventKind = "ResourceResumed"
	// ResourceReleased: the hardware of a yielded resource is gone; we
	// forget it, leaving the other writer's value alone.
	ResourceReleased ResourceEventKind = "ResourceReleased"
)

// ResourceEvent is a change in who writes a resource, told once.
type ResourceEvent struct {
	Kind     ResourceEventKind
	Resource corev1.ResourceName
	// Yield is the yield made (ResourceYielded) or ended.
	Yield Yield
	// Count is what we advertise again (ResourceResumed); Gone says how
	// their value went: "removed" or "zeroed".
	Count int64
	Gone  string
}

// ResourceInput is what PlanResources decides from.
type ResourceInput struct {
	// Wanted is the count of each resource to advertise: the inventory's,
	// or, while Known is false (no inventory has succeeded since start),
	// the resources adopted from the Node with the counts they had.
	Wanted map[corev1.ResourceName]int64
	Known  bool
	// Seen is the Node's extended resources and who owns them
	// (SeenResources).
	Seen map[corev1.ResourceName]ResourceSeen
	// Advertised are the resources we advertised before: adopted from the
	// Node at start or written since.
	Advertised map[corev1.ResourceName]bool
	// Yielded are the resources left to another writer, as of the last
	// sync.
	Yielded map[corev1.ResourceName]Yield
}

// ResourcePlan is what to do about extended resources in one sync.
type ResourcePlan struct {
	// Capacity and Allocatable are the entries our status apply holds:
	// the resources we advertise, and entries only we own that we keep as
	// they are (of resources yielded, held or not yet inventoried).
	Capacity, Allocatable map[corev1.ResourceName]int64
	// Advertise are the resources we assert, with their count (in both
	// maps above).
	Advertise map[corev1.ResourceName]int64
	// Held are resources someone else advertised before we ever did:
	// left alone.
	Held []corev1.ResourceName
	// Withdraw are the entries to remove, with a patch that tests their
	// value, before the apply: ours alone, of resources no longer wanted.
	Withdraw []ResourceEntry
	// Forget are the resources no longer ours (withdrawn or released).
	Forget []corev1.ResourceName
	// Yielded is the yield state after this sync.
	Yielded map[corev1.ResourceName]Yield
	// Resumed are the resources asserted again after a yield this sync.
	Resumed map[corev1.ResourceName]bool
	// Events tell the yields, resumptions and releases of this sync.
	Events []ResourceEvent
	// Force says the apply overrides another field manager on purpose: it
	// asserts a resource again over their zero. Without it an apply that
	// conflicts on an extended resource means another writer changed it
	// after the Node was read: decide again from the fresh Node rather
	// than write over their value.
	Force bool
}

// PlanResources decides the extended resources for one sync; see the rules
// above.
func PlanResources(in ResourceInput) ResourcePlan {
	p := ResourcePlan{
		Capacity:    map[corev1.ResourceName]int64{},
		Allocatable: map[corev1.ResourceName]int64{},
		Advertise:   map[corev1.ResourceName]int64{},
		Yielded:     map[corev1.ResourceName]Yield{},
		Resumed:     map[corev1.ResourceName]bool{},
	}
	for _, r := range resourceUniverse(in) {
		seen := in.Seen[r]
		want := in.Wanted[r]
		y, yielded := in.Yielded[r]
		switch {
		case want <= 0:
			p.notWanted(r, seen, y, yielded, in.Known)
		case yielded:
			p.whileYielded(r, seen, y, want)
		case !in.Advertised[r] && !seen.Capacity.Ours && !seen.Allocatable.Ours:
			if seen.Capacity.foreign() || seen.Allocatable.foreign() {
				p.Held = append(p.Held, r)
				continue
			}
			p.advertise(r, want, seen)
		default:
			p.advertised(r, seen, want)
		}
	}
	return p
}

// resourceUniverse is every resource PlanResources decides about, sorted:
// those wanted, advertised or yielded, and any entry we own.
func resourceUniverse(in ResourceInput) []corev1.ResourceName {
	set := map[corev1.ResourceName]bool{}
	for r := range in.Wanted {
		set[r] = true
	}
	for r := range in.Advertised {
		set[r] = true
	}
	for r := range in.Yielded {
		set[r] = true
	}
	for r, s := range in.Seen {
		if s.Capacity.Ours || s.Allocatable.Ours {
			set[r] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// notWanted handles a resource we do not (or no longer) advertise: the
// entries only we own are withdrawn once an inventory says so, kept as
// they are before; a yield ends.
func (p *ResourcePlan) notWanted(r corev1.ResourceName, seen ResourceSeen, y Yield, yielded, known bool) {
	if !known {
		p.keep(r, seen)
		if yielded {
			p.Yielded[r] = y
		}
		return
	}
	if seen.Capacity.alone() {
		p.Withdraw = append(p.Withdraw, ResourceEntry{Name: r, Field: FieldCapacity})
	}
	if seen.Allocatable.alone() {
		p.Withdraw = append(p.Withdraw, ResourceEntry{Name: r, Field: FieldAllocatable})
	}
	p.Forget = append(p.Forget, r)
	if yielded {
		p.Events = append(p.Events, ResourceEvent{Kind: ResourceReleased, Resource: r, Yield: y})
	}
}

// whileYielded keeps a yield while the other writer's value stands, and
// resumes once it is removed or zeroed.
func (p *ResourcePlan) whileYielded(r corev1.ResourceName, seen ResourceSeen, y Yield, want int64) {
	for _, field := range []string{FieldCapacity, FieldAllocatable} {
		if f := seen.field(field); f.foreign() {
			// Still theirs: the record follows their current value.
			p.Yielded[r] = Yield{Field: field, Managers: strings.Join(f.Others, ", "), Theirs: f.Value, Ours: want}
			p.keep(r, seen)
			return
		}
	}
	gone := "removed"
	if f := seen.field(y.Field); f.Present {
		gone = "zeroed"
	}
	p.advertise(r, want, seen)
	p.Resumed[r] = true
	p.Events = append(p.Events, ResourceEvent{Kind: ResourceResumed, Resource: r, Yield: y, Count: want, Gone: gone})
}

// advertised asserts a resource we advertised before, unless another
// field manager has written a different non-zero value: then it yields.
func (p *ResourcePlan) advertised(r corev1.ResourceName, seen ResourceSeen, want int64) {
	for _, field := range []string{FieldCapacity, FieldAllocatable} {
		f := seen.field(field)
		if !f.foreign() || f.Value == want {
			continue
		}
		y := Yield{Field: field, Managers: strings.Join(f.Others, ", "), Theirs: f.Value, Ours: want}
		p.Yielded[r] = y
		p.keep(r, seen)
		p.Events = append(p.Events, ResourceEvent{Kind: ResourceYielded, Resource: r, Yield: y})
		return
	}
	p.advertise(r, want, seen)
}

func (p *ResourcePlan) advertise(r corev1.ResourceName, n int64, seen ResourceSeen) {
	p.Advertise[r], p.Capacity[r], p.Allocatable[r] = n, n, n
	for _, f := range []ResourceField{seen.Capacity, seen.Allocatable} {
		if len(f.Others) > 0 && (!f.Present || f.Value != n) {
			p.Force = true
		}
	}
}

// keep applies the entries of r that only we own with their current
// value, so the apply neither changes nor prunes them.
func (p *ResourcePlan) keep(r corev1.ResourceName, seen ResourceSeen) {
	if seen.Capacity.alone() {
		p.Capacity[r] = seen.Capacity.Value
	}
	if seen.Allocatable.alone() {
		p.Allocatable[r] = seen.Allocatable.Value
	}
}

func (s ResourceSeen) field(name string) ResourceField {
	if name == FieldAllocatable {
		return s.Allocatable
	}
	return s.Capacity
}

// NeedsWrite says the Node's status differs from what the plan applies.
func (p ResourcePlan) NeedsWrite(node *corev1.Node) bool {
	differs := func(want map[corev1.ResourceName]int64, have corev1.ResourceList) bool {
		for r, n := range want {
			q, ok := have[r]
			if !ok || q.Value() != n {
				return true
			}
		}
		return false
	}
	return differs(p.Capacity, node.Status.Capacity) || differs(p.Allocatable, node.Status.Allocatable)
}

// SeenResources is the Node's entries for the resources names in
// status.capacity and allocatable, with the field managers owning each
// (from managed fields); manager is ours.
func SeenResources(node *corev1.Node, manager string, names []corev1.ResourceName) map[corev1.ResourceName]ResourceSeen {
	owners := resourceOwners(node.ManagedFields)
	out := make(map[corev1.ResourceName]ResourceSeen, len(names))
	for _, r := range names {
		out[r] = ResourceSeen{
			Capacity:    seenField(node.Status.Capacity, owners[ResourceEntry{Name: r, Field: FieldCapacity}], r, manager),
			Allocatable: seenField(node.Status.Allocatable, owners[ResourceEntry{Name: r, Field: FieldAllocatable}], r, manager),
		}
	}
	return out
}

func seenField(list corev1.ResourceList, owners []string, r corev1.ResourceName, manager string) ResourceField {
	var f ResourceField
	if q, ok := list[r]; ok {
		f.Present, f.Value = true, q.Value()
	}
	for _, m := range owners {
		if m == manager {
			f.Ours = true
		} else if !slices.Contains(f.Others, m) {
			f.Others = append(f.Others, m)
		}
	}
	slices.Sort(f.Others)
	return f
}

// ResourceNames are the extended resources in the Node's status capacity
// and allocatable, and the entries any managed fields record, sorted.
func ResourceNames(node *corev1.Node) []corev1.ResourceName {
	set := map[corev1.ResourceName]bool{}
	for _, l := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		for r := range l {
			set[r] = true
		}
	}
	for e := range resourceOwners(node.ManagedFields) {
		set[e.Name] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// resourceOwners maps each status.capacity and allocatable entry that
// managed fields record to the field managers that own it.
func resourceOwners(mfs []metav1.ManagedFieldsEntry) map[ResourceEntry][]string {
	out := map[ResourceEntry][]string{}
	for _, mf := range mfs {
		if mf.FieldsV1 == nil {
			continue
		}
		var f struct {
			Status map[string]map[string]json.RawMessage `json:"f:status"`
		}
		if json.Unmarshal(mf.FieldsV1.Raw, &f) != nil {
			continue
		}
		for _, field := range []string{FieldCapacity, FieldAllocatable} {
			for k := range f.Status["f:"+field] {
				if name, ok := strings.CutPrefix(k, "f:"); ok {
					e := ResourceEntry{Name: corev1.ResourceName(name), Field: field}
					out[e] = append(out[e], mf.Manager)
				}
			}
		}
	}
	return out
}
