package taints

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OwnedTaintsAnnotation records, on the Node, the taints selftaint put there
// (key:Effect, comma separated). spec.taints has no per-entry ownership, so
// this record is what lets selftaint remove its own taints and nothing else.
const OwnedTaintsAnnotation = "selftaint.io/owned-taints"

// TaintID identifies a taint the way the API server does: a Node may carry
// one taint per key and effect.
type TaintID struct {
	Key    string
	Effect corev1.TaintEffect
}

// IDOf returns the identity of a taint.
func IDOf(t corev1.Taint) TaintID { return TaintID{Key: t.Key, Effect: t.Effect} }

func (id TaintID) String() string { return id.Key + ":" + string(id.Effect) }

func (id TaintID) less(o TaintID) bool {
	if id.Key != o.Key {
		return id.Key < o.Key
	}
	return id.Effect < o.Effect
}

// ParseOwned reads the ownership annotation. An empty value owns nothing.
func ParseOwned(s string) ([]TaintID, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []TaintID
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		i := strings.LastIndex(part, ":")
		if i <= 0 || i == len(part)-1 {
			return nil, fmt.Errorf("annotation %s: entry %q is not key:Effect", OwnedTaintsAnnotation, part)
		}
		eff := corev1.TaintEffect(part[i+1:])
		switch eff {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("annotation %s: entry %q has unknown effect %q", OwnedTaintsAnnotation, part, eff)
		}
		out = append(out, TaintID{Key: part[:i], Effect: eff})
	}
	return out, nil
}

// FormatOwned writes the ownership annotation value, sorted so equal sets
// format equally.
func FormatOwned(ids []TaintID) string {
	sorted := append([]TaintID(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].less(sorted[j]) })
	parts := make([]string, len(sorted))
	for i, id := range sorted {
		parts[i] = id.String()
	}
	return strings.Join(parts, ",")
}

// Plan is the result of merging what selftaint wants into a Node's taints.
type Plan struct {
	// Taints is the full new spec.taints: every taint selftaint does not own,
	// untouched and in its original order, then ours.
	Taints []corev1.Taint
	// Owned is the new ownership record.
	Owned []TaintID
	// Added, Updated and Removed are the changes to our own taints.
	Added, Updated, Removed []corev1.Taint
	// Restored are taints we owned and still want that someone removed; they
	// are in Added too.
	Restored []corev1.Taint
	// Foreign are taints we want whose key and effect someone else already
	// holds; we leave theirs in place and do not claim it.
	Foreign []corev1.Taint
	// Changed says whether spec.taints or the ownership record must be
	// written.
	Changed bool
}

// PlanTaints merges desired into current. owned is what the ownership record
// says we put there. now stamps TimeAdded on NoExecute taints we add, as
// kubectl does, so the taint-eviction controller counts tolerationSeconds
// from the moment the taint appeared.
func PlanTaints(current []corev1.Taint, owned []TaintID, desired []corev1.Taint, now time.Time) Plan {
	ownedSet := map[TaintID]bool{}
	for _, id := range owned {
		ownedSet[id] = true
	}
	want := map[TaintID]corev1.Taint{}
	for _, t := range desired {
		want[IDOf(t)] = t
	}

	var p Plan
	present := map[TaintID]bool{}
	newOwned := map[TaintID]bool{}
	for _, t := range current {
		id := IDOf(t)
		present[id] = true
		if !ownedSet[id] {
			p.Taints = append(p.Taints, t)
			if d, ok := want[id]; ok {
				p.Foreign = append(p.Foreign, d)
			}
			continue
		}
		d, ok := want[id]
		if !ok {
			p.Removed = append(p.Removed, t)
			continue
		}
		newOwned[id] = true
		if d.Value != t.Value {
			t = *t.DeepCopy()
			t.Value = d.Value
			p.Updated = append(p.Updated, t)
		}
		p.Taints = append(p.Taints, t)
	}
	for _, d := range desired {
		id := IDOf(d)
		if present[id] {
			continue
		}
		t := corev1.Taint{Key: d.Key, Value: d.Value, Effect: d.Effect}
		if t.Effect == corev1.TaintEffectNoExecute {
			ts := metav1.NewTime(now)
			t.TimeAdded = &ts
		}
		p.Taints = append(p.Taints, t)
		p.Added = append(p.Added, t)
		if ownedSet[id] {
			p.Restored = append(p.Restored, t)
		}
		newOwned[id] = true
	}
	for id := range newOwned {
		p.Owned = append(p.Owned, id)
	}
	sort.Slice(p.Owned, func(i, j int) bool { return p.Owned[i].less(p.Owned[j]) })
	p.Changed = len(p.Added)+len(p.Updated)+len(p.Removed) > 0 || FormatOwned(owned) != FormatOwned(p.Owned)
	return p
}

// Format writes a taint the way kubectl taint takes it: key=value:Effect, or
// key:Effect when the value is empty.
func Format(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}
