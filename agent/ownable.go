package agent

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints"
)

// Ownership is everything an agent may own on its Node under its config:
// the taints (key and effect) its rules, hardware and initialization can
// produce, the
// hardware labels it can set, its condition types and the extended
// resources it can advertise. agent/config derives it from the config; the
// admission policy in deploy/ takes the same lists as its parameters
// (`selftaint policy-params`), so what the agent believes it owns and what
// the API server lets it change come from one file the operator controls.
type Ownership struct {
	Taints     []taints.TaintID
	Labels     []string
	Conditions []corev1.NodeConditionType
	Resources  []corev1.ResourceName
}

// Merge returns o with everything in p added, each list sorted and without
// duplicates.
func (o Ownership) Merge(p Ownership) Ownership {
	return Ownership{
		Taints:     sortedIDs(slices.Concat(o.Taints, p.Taints)),
		Labels:     sortedUnion(o.Labels, p.Labels),
		Conditions: sortedUnion(o.Conditions, p.Conditions),
		Resources:  sortedUnion(o.Resources, p.Resources),
	}
}

func sortedUnion[T ~string](a, b []T) []T {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Clip(slices.Compact(out))
}

func sortedIDs(ids []taints.TaintID) []taints.TaintID {
	slices.SortFunc(ids, func(x, y taints.TaintID) int { return strings.Compare(x.String(), y.String()) })
	return slices.Clip(slices.Compact(ids))
}

// ownableFor is the taints and labels whose ownership records an agent with opts
// trusts before its first inventory: opts.Ownership, its rules' taints (a
// NoExecute rule's at its fallback effect too) and
// its initialization taint.
func ownableFor(opts Options) taints.Ownable {
	o := taints.Ownable{Taints: map[taints.TaintID]bool{}, Labels: map[string]bool{}}
	for _, id := range opts.Ownership.Taints {
		o.Taints[id] = true
	}
	for _, k := range opts.Ownership.Labels {
		o.Labels[k] = true
	}
	for _, r := range opts.Rules {
		o.Taints[taints.IDOf(r.Taint)] = true
		if r.Fallback != "" {
			o.Taints[taints.TaintID{Key: r.Taint.Key, Effect: r.Fallback}] = true
		}
	}
	if opts.Init != nil {
		o.Taints[taints.IDOf(opts.Init.Taint)] = true
	}
	return o
}

// addOwnableHardware trusts records for the taint and label of each
// resource the inventory reported: the inventory is built from the config,
// so it reports only hardware the config names. The caller holds a.mu.
func (a *Agent) addOwnableHardwareLocked(rs []Resource) {
	for _, r := range rs {
		if id := taints.IDOf(HardwareTaint(r.Name)); r.Taint && !a.ownable.Taints[id] {
			a.ownable.Taints = maps.Clone(a.ownable.Taints)
			a.ownable.Taints[id] = true
		}
		if l := HardwareLabel(r.Name); r.Label && !a.ownable.Labels[l] {
			a.ownable.Labels = maps.Clone(a.ownable.Labels)
			a.ownable.Labels[l] = true
		}
	}
}

// reportRecords tells about ownership records the plan could not read
// (each counts as owning nothing: we may fail to remove something of ours,
// but never remove someone else's) and, once per change, about record
// entries outside what the config could have produced: they were not
// written by this agent (the records are annotations, which anyone who can
// annotate the Node can edit), are never acted on, and are dropped by the
// plan's write.
func (a *Agent) reportRecords(node *corev1.Node, p taints.MetadataPlan) {
	for _, err := range p.BadRecords {
		a.log.Warn("ignoring unreadable ownership annotation", "err", err)
		a.recorder.Eventf(node, corev1.EventTypeWarning, "BadOwnershipRecord", "%v; treating it as empty", err)
	}
	var parts []string
	if len(p.UntrustedTaints) > 0 {
		parts = append(parts, "taints "+taints.FormatOwned(p.UntrustedTaints))
	}
	if len(p.UntrustedLabels) > 0 {
		parts = append(parts, "labels "+taints.FormatOwnedLabels(p.UntrustedLabels))
	}
	what := strings.Join(parts, " and ")
	if !a.changedSince(&a.lastUntrusted, what) {
		return
	}
	a.recorder.Eventf(node, corev1.EventTypeWarning, "UntrustedOwnershipRecord",
		"the ownership records claim %s, which selftaint's config could not have produced; ignoring them (never removing them) and dropping them from the records", what)
	a.log.Warn("ownership records claim keys outside the config; ignoring them and dropping them from the records",
		"claimed", what)
}
