package taints

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/fleet"
)

// InitializedAnnotation records when selftaint first found the node
// initialized (RFC 3339). In bootstrap mode its presence means the
// uninitialized taint is never put back.
const InitializedAnnotation = "selftaint.io/initialized-at"

// MetadataInput is what decides the taints, labels and annotations
// selftaint keeps on its Node.
type MetadataInput struct {
	// Node is the Node as read (taints, labels, annotations and the
	// ownership records in them).
	Node *corev1.Node
	Now  time.Time
	// Rules map conditions to taints.
	Rules []Rule
	// Statuses are the conditions decided at this sync. A rule whose
	// condition is absent is undecided: its taint is never lifted.
	Statuses map[corev1.NodeConditionType]corev1.ConditionStatus
	// Hardware is the inventory; HardwareKnown is false until the first
	// one is taken, and until then no hardware taint or label is lifted.
	Hardware      []Hardware
	HardwareKnown bool
	// Init, if set, manages the uninitialized taint.
	Init *InitTaint
	// Ownable is what the ownership records are trusted for.
	Ownable Ownable
	// Gates say what each condition's rules may do now (PlanGates): the
	// zero Gate allows no NoExecute.
	Gates map[corev1.NodeConditionType]Gate
	// Request decides the NoExecute request annotation (PlanRequest).
	Request RequestInput
	// Drain decides the sick-node drain request annotation
	// (PlanDrainRequest).
	Drain DrainInput
	// Annotations are annotations the agent keeps on the Node besides the
	// ones above (each Stateful probe's state): key -> the value wanted,
	// "" meaning absent. One is set or removed only when the Node's value
	// differs; keys not named here are left alone.
	Annotations map[string]string
	// Consumed are request annotations the agent has handled (an
	// operator's request to clear a probe's state): key -> the value
	// handled. One is removed only while the Node still holds that value,
	// so a newer request written meanwhile stays, for the next sync.
	Consumed map[string]string
}

// InitTaint is the uninitialized taint and this sync's verdict on it.
type InitTaint struct {
	Taint   corev1.Taint
	Verdict InitVerdict
}

// MetadataPlan is what to write to the Node's metadata and spec.taints.
type MetadataPlan struct {
	Taints Plan
	Labels LabelPlan
	// Annotations to set besides the ownership records (initialized-at,
	// the NoExecute request, the drain request, the Input's Annotations),
	// and to remove (also the requests Consumed).
	Annotations       map[string]string
	RemoveAnnotations []string
	// Held are taints the rules ask for that the disruption guard holds
	// back (not on the Node, and not added).
	Held []corev1.Taint
	// Drain is the sick-node drain request's plan, whose annotation
	// Annotations or RemoveAnnotations carry.
	Drain DrainPlan
	// Claimed are taints on the Node that are ours by key (OwnedByKey)
	// and that the record did not name: put back by a writer that sent the
	// whole list from a stale read, or the record lost or edited. They are
	// planned as ours: removed if nothing asks for them, else kept and
	// recorded (never reported as held by another writer).
	Claimed []TaintID
	// UntrustedTaints and UntrustedLabels are ownership record entries
	// outside Ownable: ignored, and dropped by this write.
	UntrustedTaints []TaintID
	UntrustedLabels []string
	// BadRecords are ownership records that could not be read; each counts
	// as owning nothing.
	BadRecords []error
	// Changed says whether anything needs writing.
	Changed bool
}

// PlanMetadata decides the Node's taints, selftaint's labels, the
// ownership records and initialized-at:
//   - the taints the rules imply for the decided conditions, the hardware
//     taints, and the uninitialized taint while the node is uninitialized;
//   - what must not be lifted yet: the owned taint of a rule whose condition
//     is undecided (no verdict since start and nothing on the Node to
//     adopt), owned taints no rule makes before the first inventory, and the
//     uninitialized taint while initialization is undecided;
//   - only taints we own are removed: those the trusted record names, those
//     ours by key (OwnedByKey) whoever put them there, and the
//     uninitialized taint whoever put it there; labels only by the record;
//   - a taint we restore gets back the timeAdded its record entry kept.
func PlanMetadata(in MetadataInput) MetadataPlan {
	var p MetadataPlan
	node := in.Node
	record, err := ParseRecord(node.Annotations[OwnedTaintsAnnotation])
	if err != nil {
		p.BadRecords = append(p.BadRecords, err)
		record = nil
	}
	ownedLabels, err := ParseOwnedLabels(node.Annotations[OwnedLabelsAnnotation])
	if err != nil {
		p.BadRecords = append(p.BadRecords, err)
		ownedLabels = nil
	}
	owned, untrusted := partition(record, func(o OwnedTaint) bool { return in.Ownable.Taints[o.TaintID] })
	p.UntrustedTaints = IDs(untrusted)
	ownedLabels, p.UntrustedLabels = in.Ownable.TrustOwnedLabels(ownedLabels)
	if in.Init != nil {
		owned = claimInitTaint(node, owned, IDOf(in.Init.Taint))
	}
	owned, p.Claimed = claimByKey(node, owned, in.Ownable, in.Rules)
	desired, held := desiredTaints(in, IDs(owned))
	p.Held = held
	p.Annotations = map[string]string{}
	v, change := PlanRequest(node, in.Request, in.Now)
	p.planAnnotation(fleet.RequestAnnotation, v, change)
	p.Drain = PlanDrainRequest(node, in.Drain, in.Now)
	p.planAnnotation(fleet.AgentRequestAnnotation, p.Drain.Value, p.Drain.Change)
	if in.Init != nil {
		desired = withInitTaint(node, desired, *in.Init)
		if _, done := node.Annotations[InitializedAnnotation]; in.Init.Verdict.First && !done {
			p.Annotations[InitializedAnnotation] = in.Now.UTC().Format(time.RFC3339)
		}
	}
	planAnnotations(&p, node.Annotations, in.Annotations, in.Consumed)
	p.Taints = PlanTaints(node.Spec.Taints, owned, desired, in.Now)
	p.Labels = PlanLabels(node.Labels, ownedLabels, desiredLabels(node, ownedLabels, in))
	if len(p.UntrustedTaints)+len(p.UntrustedLabels) > 0 {
		// Rewrite the records without the entries ignored.
		p.Taints.Changed, p.Labels.Changed = true, true
	}
	if keepsAny(p.Taints.Owned, p.Claimed) {
		// Record what we claimed and keep: the coordinator counts NoExecute
		// taints by the record.
		p.Taints.Changed = true
	}
	p.Changed = p.Taints.Changed || p.Labels.Changed || len(p.Annotations)+len(p.RemoveAnnotations) > 0
	return p
}

// planAnnotation sets annotation key to v where it changes, or removes it
// for "".
func (p *MetadataPlan) planAnnotation(key, v string, change bool) {
	switch {
	case !change:
	case v != "":
		p.Annotations[key] = v
	default:
		p.RemoveAnnotations = append(p.RemoveAnnotations, key)
	}
}

// claimByKey adds to owned the taints on the Node that are ours by key
// (OwnedByKey) and that owned does not name yet, with their timeAdded, and
// returns them as claimed too.
func claimByKey(node *corev1.Node, owned []OwnedTaint, ownable Ownable, rules []Rule) ([]OwnedTaint, []TaintID) {
	var claimed []TaintID
	for _, t := range node.Spec.Taints {
		id := IDOf(t)
		if !OwnedByKey(id, ownable, rules) || slices.ContainsFunc(owned, func(o OwnedTaint) bool { return o.TaintID == id }) {
			continue
		}
		owned = append(slices.Clip(owned), OwnedOf(t))
		claimed = append(claimed, id)
	}
	return owned, claimed
}

// keepsAny reports whether the record owned names any of ids.
func keepsAny(owned []OwnedTaint, ids []TaintID) bool {
	return slices.ContainsFunc(owned, func(o OwnedTaint) bool { return slices.Contains(ids, o.TaintID) })
}

// planAnnotations adds to p the annotations of wanted that differ from
// have (set, or removed for "") and the consumed requests have still holds
// unchanged (removed), sorted by key.
func planAnnotations(p *MetadataPlan, have, wanted, consumed map[string]string) {
	var remove []string
	for k, v := range wanted {
		cur, ok := have[k]
		switch {
		case v == "" && ok:
			remove = append(remove, k)
		case v != "" && (!ok || cur != v):
			p.Annotations[k] = v
		}
	}
	for k, v := range consumed {
		if cur, ok := have[k]; ok && cur == v && !slices.Contains(remove, k) {
			remove = append(remove, k)
		}
	}
	slices.Sort(remove)
	p.RemoveAnnotations = append(p.RemoveAnnotations, remove...)
}

// desiredTaints is what the rules and the hardware ask for, plus the owned
// taints that must not be lifted yet (see PlanMetadata), and what the guard
// holds back.
func desiredTaints(in MetadataInput, owned []TaintID) (desired, held []corev1.Taint) {
	present := map[TaintID]bool{}
	for _, t := range in.Node.Spec.Taints {
		present[IDOf(t)] = true
	}
	desired, held = Desired(in.Rules, in.Statuses, in.Gates, present)
	have := map[TaintID]bool{}
	for _, t := range desired {
		have[IDOf(t)] = true
	}
	for _, t := range HardwareTaints(in.Hardware) {
		if id := IDOf(t); !have[id] {
			desired = append(desired, t)
			have[id] = true
		}
	}
	for _, t := range in.Node.Spec.Taints {
		id := IDOf(t)
		if have[id] || !slices.Contains(owned, id) || (in.Init != nil && id == IDOf(in.Init.Taint)) {
			continue // the uninitialized taint: withInitTaint decides it
		}
		if keepUndecided(in, id) {
			desired = append(desired, t)
			have[id] = true
		}
	}
	return desired, held
}

// keepUndecided says whether an owned taint no rule or hardware asks for
// now must stay because what would lift it is not decided yet: a rule's
// condition without a state, or, before the first inventory, a taint no
// rule makes (a hardware taint).
func keepUndecided(in MetadataInput, id TaintID) bool {
	ruled := false
	for _, r := range in.Rules {
		if IDOf(r.Taint) != id && (r.Fallback == "" || (TaintID{Key: r.Taint.Key, Effect: r.Fallback}) != id) {
			continue
		}
		ruled = true
		if _, decided := in.Statuses[r.Condition]; !decided {
			return true
		}
	}
	return !in.HardwareKnown && !ruled
}

// desiredLabels is what the hardware inventory asks for; before the first
// inventory, the labels we own stay as they are.
func desiredLabels(node *corev1.Node, owned []string, in MetadataInput) map[string]string {
	if in.HardwareKnown {
		return HardwareLabels(in.Hardware)
	}
	keep := map[string]string{}
	for _, k := range owned {
		if v, ok := node.Labels[k]; ok {
			keep[k] = v
		}
	}
	return keep
}

// claimInitTaint adds the uninitialized taint to what we own when it is on
// the Node: whoever put it there (the kubelet at registration), removing it
// is our job.
func claimInitTaint(node *corev1.Node, owned []OwnedTaint, id TaintID) []OwnedTaint {
	if slices.ContainsFunc(owned, func(o OwnedTaint) bool { return o.TaintID == id }) {
		return owned
	}
	for _, t := range node.Spec.Taints {
		if IDOf(t) == id {
			return append(slices.Clone(owned), OwnedOf(t))
		}
	}
	return owned
}

// withInitTaint adds the uninitialized taint to desired when the node is
// uninitialized, and keeps it as it is while the state is undecided.
func withInitTaint(node *corev1.Node, desired []corev1.Taint, it InitTaint) []corev1.Taint {
	id := IDOf(it.Taint)
	if slices.ContainsFunc(desired, func(t corev1.Taint) bool { return IDOf(t) == id }) {
		return desired
	}
	switch {
	case it.Verdict.Decided && it.Verdict.Uninitialized:
		return append(desired, it.Taint)
	case !it.Verdict.Decided:
		for _, t := range node.Spec.Taints {
			if IDOf(t) == id {
				return append(desired, t)
			}
		}
	}
	return desired
}
