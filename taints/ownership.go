package taints

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OwnedTaintsAnnotation records, on the Node, the taints selftaint owns
// there: key:Effect entries, comma separated, each followed by
// @<timeAdded> (RFC 3339, UTC) when the taint carries a timeAdded (NoExecute
// taints do), e.g.
//
//	selftaint.io/disk-pressure:NoSchedule,selftaint.io/gpu-failure:NoExecute@2026-11-23T10:00:00Z
//
// spec.taints has no per-entry ownership, so this record is what lets
// selftaint remove its own taints and nothing else (for the keys it does
// not own by key, see OwnedByKey), and put back a taint someone deleted
// with the timeAdded it had: a NoExecute taint that came back with a new
// one would restart every tolerating pod's eviction clock. The first
// format, without timeAdded, is read as before.
const OwnedTaintsAnnotation = "selftaint.io/owned-taints"

// KeyPrefix is selftaint's own taint key prefix: its default rules', its
// uninitialized taint's. See OwnedByKey for what it means for ownership.
const KeyPrefix = "selftaint.io/"

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

// entry makes id a record entry without a timeAdded.
func (id TaintID) entry() OwnedTaint { return OwnedTaint{TaintID: id} }

// OwnedTaint is one entry of the ownership record: a taint selftaint owns
// and the timeAdded it carries on the Node (nil: none), which a restored
// taint gets back.
type OwnedTaint struct {
	TaintID
	TimeAdded *metav1.Time
}

// OwnedOf is the record entry for a taint of ours as it is on the Node.
func OwnedOf(t corev1.Taint) OwnedTaint {
	o := OwnedTaint{TaintID: IDOf(t)}
	if t.TimeAdded != nil {
		at := metav1.NewTime(t.TimeAdded.UTC().Truncate(time.Second))
		o.TimeAdded = &at
	}
	return o
}

// String is the entry as the record writes it: key:Effect, then
// @timeAdded when there is one.
func (o OwnedTaint) String() string {
	if o.TimeAdded == nil {
		return o.TaintID.String()
	}
	return o.TaintID.String() + "@" + o.TimeAdded.UTC().Format(time.RFC3339)
}

func (o OwnedTaint) entry() OwnedTaint { return o }

// RecordEntry is what FormatOwned writes: bare taint identities, or record
// entries with their timeAdded.
type RecordEntry interface {
	TaintID | OwnedTaint
	entry() OwnedTaint
}

// IDs are the taint identities of record entries, in their order.
func IDs(entries []OwnedTaint) []TaintID {
	out := make([]TaintID, len(entries))
	for i, e := range entries {
		out[i] = e.TaintID
	}
	return out
}

// ParseRecord reads the ownership annotation, in either format. An empty
// value owns nothing; a malformed entry makes the whole record unreadable.
func ParseRecord(s string) ([]OwnedTaint, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []OwnedTaint
	for _, part := range strings.Split(s, ",") {
		e, err := parseEntry(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", OwnedTaintsAnnotation, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// parseEntry reads one record entry: key:Effect, optionally @timeAdded.
// A key has no '@' (it is a qualified name), and the time has colons of
// its own, so the time is cut off first.
func parseEntry(part string) (OwnedTaint, error) {
	var e OwnedTaint
	id, at, timed := strings.Cut(part, "@")
	i := strings.LastIndex(id, ":")
	if i <= 0 || i == len(id)-1 {
		return e, fmt.Errorf("entry %q is not key:Effect or key:Effect@timeAdded", part)
	}
	e.TaintID = TaintID{Key: id[:i], Effect: corev1.TaintEffect(id[i+1:])}
	switch e.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return e, fmt.Errorf("entry %q has unknown effect %q", part, e.Effect)
	}
	if timed {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return e, fmt.Errorf("entry %q: timeAdded is not an RFC 3339 time: %w", part, err)
		}
		mt := metav1.NewTime(t.UTC())
		e.TimeAdded = &mt
	}
	return e, nil
}

// ParseOwned reads the ownership annotation's taint identities (either
// format; the times are dropped). An empty value owns nothing.
func ParseOwned(s string) ([]TaintID, error) {
	r, err := ParseRecord(s)
	if err != nil || r == nil {
		return nil, err
	}
	return IDs(r), nil
}

// CarriesNoExecute reports whether one of selftaint's NoExecute taints is
// on n, by its ownership record: what the coordinator counts against the
// NoExecute budget (fleet.Node.CarriesNoExecute). An unreadable record
// cannot say, so any NoExecute taint counts (the safe side), and the error
// says why.
func CarriesNoExecute(n *corev1.Node) (bool, error) {
	owned, err := ParseOwned(n.Annotations[OwnedTaintsAnnotation])
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute && (err != nil || slices.Contains(owned, IDOf(t))) {
			return true, err
		}
	}
	return false, err
}

// FormatOwned writes the ownership annotation value, sorted so equal sets
// format equally: from bare identities (the first format), or from record
// entries, with their timeAdded.
func FormatOwned[E RecordEntry](entries []E) string {
	sorted := make([]OwnedTaint, len(entries))
	for i, e := range entries {
		sorted[i] = e.entry()
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].less(sorted[j].TaintID) })
	parts := make([]string, len(sorted))
	for i, e := range sorted {
		parts[i] = e.String()
	}
	return strings.Join(parts, ",")
}

// OwnedByKey reports whether a taint is selftaint's by its key alone,
// whoever put it on the Node: removed when nothing selftaint decides asks
// for it, adopted (and recorded) when something does, never reported as
// held by another writer. That is so when both hold:
//   - its key and effect are ones selftaint's config can produce (ownable:
//     a rule's taint or a NoExecute rule's fallback, the uninitialized
//     taint, a hardware taint), which are also what the admission policy
//     lets the agent change;
//   - its key is selftaint's: under KeyPrefix, or named by one of the
//     rules without being under a reserved prefix (node.kubernetes.io/,
//     node.cloudprovider.kubernetes.io/: other controllers write those).
//
// The rest of what selftaint may own is its only while the ownership
// record names it: hardware taints, whose key is the resource's name
// (nvidia.com/gpu: GPU node pools often carry one from their provider),
// and rules' keys under a reserved prefix. A taint under KeyPrefix that the
// config cannot produce (selftaint.io/virtual on virtual nodes, an
// operator's selftaint.io/maintenance) is never touched: use your own
// prefix for taints of your own.
//
// Without this, a writer that sends the whole list from a stale read
// (kubectl taint: a patch without resourceVersion) could put back a taint
// selftaint had just removed and dropped from its record, and selftaint
// would leave it there for good, draining the node under a NoExecute rule.
func OwnedByKey(id TaintID, ownable Ownable, rules []Rule) bool {
	if !ownable.Taints[id] {
		return false
	}
	if strings.HasPrefix(id.Key, KeyPrefix) {
		return true
	}
	if ReservedPrefix(id.Key) != "" {
		return false
	}
	return slices.ContainsFunc(rules, func(r Rule) bool { return r.Taint.Key == id.Key })
}

// Plan is the result of merging what selftaint wants into a Node's taints.
type Plan struct {
	// Taints is the full new spec.taints: every taint selftaint does not own,
	// untouched and in its original order, then ours.
	Taints []corev1.Taint
	// Owned is the new ownership record (FormatOwned writes it), sorted,
	// each entry with the timeAdded its taint carries.
	Owned []OwnedTaint
	// Added, Updated and Removed are the changes to our own taints.
	Added, Updated, Removed []corev1.Taint
	// Restored are taints we owned and still want that someone removed; they
	// are in Added too, with the timeAdded the record kept.
	Restored []corev1.Taint
	// Foreign are taints we want whose key and effect someone else already
	// holds; we leave theirs in place and do not claim it.
	Foreign []corev1.Taint
	// Changed says whether spec.taints or the ownership record must be
	// written.
	Changed bool
}

// PlanTaints merges desired into current. owned is what the ownership record
// says we put there (with what the caller claims besides: see
// PlanMetadata). A NoExecute taint we add is stamped with now as its
// timeAdded, as kubectl does, so the taint-eviction controller counts
// tolerationSeconds from the moment the taint appeared; a taint we restore
// gets back the timeAdded its record entry kept (never one after now), so
// deleting it by hand restarts no pod's eviction clock.
func PlanTaints(current []corev1.Taint, owned []OwnedTaint, desired []corev1.Taint, now time.Time) Plan {
	ownedSet := map[TaintID]OwnedTaint{}
	for _, o := range owned {
		ownedSet[o.TaintID] = o
	}
	want := map[TaintID]corev1.Taint{}
	for _, t := range desired {
		want[IDOf(t)] = t
	}

	var p Plan
	present := map[TaintID]bool{}
	newOwned := map[TaintID]OwnedTaint{}
	for _, t := range current {
		id := IDOf(t)
		present[id] = true
		if _, ours := ownedSet[id]; !ours {
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
		if d.Value != t.Value {
			t = *t.DeepCopy()
			t.Value = d.Value
			p.Updated = append(p.Updated, t)
		}
		newOwned[id] = OwnedOf(t)
		p.Taints = append(p.Taints, t)
	}
	for _, d := range desired {
		id := IDOf(d)
		if present[id] {
			continue
		}
		rec, restored := ownedSet[id]
		t := corev1.Taint{Key: d.Key, Value: d.Value, Effect: d.Effect, TimeAdded: timeAdded(d.Effect, rec.TimeAdded, now)}
		p.Taints = append(p.Taints, t)
		p.Added = append(p.Added, t)
		if restored {
			p.Restored = append(p.Restored, t)
		}
		newOwned[id] = OwnedOf(t)
	}
	for _, o := range newOwned {
		p.Owned = append(p.Owned, o)
	}
	sort.Slice(p.Owned, func(i, j int) bool { return p.Owned[i].less(p.Owned[j].TaintID) })
	p.Changed = len(p.Added)+len(p.Updated)+len(p.Removed) > 0 || FormatOwned(owned) != FormatOwned(p.Owned)
	return p
}

// timeAdded is the timeAdded of a taint we add: the one its record entry
// kept (a restore), capped at now; else now for NoExecute, which the
// taint-eviction controller counts tolerationSeconds from; else none.
func timeAdded(effect corev1.TaintEffect, recorded *metav1.Time, now time.Time) *metav1.Time {
	var at metav1.Time
	switch {
	case recorded != nil && recorded.Time.After(now):
		at = metav1.NewTime(now)
	case recorded != nil:
		at = *recorded.DeepCopy()
	case effect == corev1.TaintEffectNoExecute:
		at = metav1.NewTime(now)
	default:
		return nil
	}
	return &at
}

// Format writes a taint the way kubectl taint takes it: key=value:Effect, or
// key:Effect when the value is empty.
func Format(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}
