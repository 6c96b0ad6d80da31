package taints

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPlanMetadata(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	const mem, ev corev1.NodeConditionType = "SelftaintMemoryPressure", "SelftaintEvict"
	memTaint := corev1.Taint{Key: "selftaint.io/memory-pressure", Effect: corev1.TaintEffectNoSchedule}
	evict := corev1.Taint{Key: "selftaint.io/evict", Effect: corev1.TaintEffectNoExecute}
	const pids, disk corev1.NodeConditionType = "SelftaintPIDPressure", "SelftaintDiskPressure"
	pidsTaint := corev1.Taint{Key: "example.com/pids", Effect: corev1.TaintEffectNoSchedule}
	reservedTaint := corev1.Taint{Key: "node.kubernetes.io/disk-pressure", Effect: corev1.TaintEffectNoSchedule}
	rules := []Rule{
		{Condition: mem, Status: corev1.ConditionTrue, Taint: memTaint},
		{Condition: ev, Status: corev1.ConditionTrue, Taint: evict},
		{Condition: pids, Status: corev1.ConditionTrue, Taint: pidsTaint},
		{Condition: disk, Status: corev1.ConditionTrue, Taint: reservedTaint, AllowReservedKey: true},
	}
	then := now.Add(-time.Hour)
	evictSince := func(at time.Time) corev1.Taint {
		t := evict
		t.TimeAdded = ptr.To(metav1.NewTime(at))
		return t
	}
	// Under our prefix, but nothing the config produces: an operator's, and
	// the one virtual nodes register with.
	maintenance := corev1.Taint{Key: "selftaint.io/maintenance", Effect: corev1.TaintEffectNoSchedule}
	virtualTaint := corev1.Taint{Key: "selftaint.io/virtual", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	dedicated := corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	fpga := Hardware{Name: "example.com/fpga", Count: 1, Advertise: true, Taint: true, Label: true}
	fpgaGone := fpga
	fpgaGone.Count = 0
	fpgaTaint := HardwareTaint(fpga.Name)
	const fpgaLabel = "example.com/fpga.present"
	initTaint := corev1.Taint{Key: "selftaint.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}
	ownable := Ownable{
		Taints: map[TaintID]bool{IDOf(memTaint): true, IDOf(evict): true, IDOf(fpgaTaint): true, IDOf(initTaint): true,
			IDOf(pidsTaint): true, IDOf(reservedTaint): true},
		Labels: map[string]bool{fpgaLabel: true},
	}
	node := func(ts []corev1.Taint, labels map[string]string, annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, Annotations: annotations}, Spec: corev1.NodeSpec{Taints: ts}}
	}
	owns := func(ids ...corev1.Taint) map[string]string {
		var out []TaintID
		for _, t := range ids {
			out = append(out, IDOf(t))
		}
		return map[string]string{OwnedTaintsAnnotation: FormatOwned(out)}
	}
	statuses := func(m, e corev1.ConditionStatus) map[corev1.NodeConditionType]corev1.ConditionStatus {
		out := map[corev1.NodeConditionType]corev1.ConditionStatus{}
		if m != "" {
			out[mem] = m
		}
		if e != "" {
			out[ev] = e
		}
		return out
	}
	initialized := InitVerdict{Decided: true, First: true}
	tests := []struct {
		name string
		in   MetadataInput
		// want: the taints and labels after the write, and the checks on
		// the plan.
		wantTaints      []corev1.Taint
		wantLabels      map[string]string
		wantOwned       string
		wantChanged     bool
		wantForeign     []corev1.Taint
		wantUntrusted   string
		wantAnnotations map[string]string
		wantBad         int
		wantClaimed     string
		wantRestored    []corev1.Taint
	}{
		{
			name:        "a rule fires: taint added after the foreign one, recorded",
			in:          MetadataInput{Node: node([]corev1.Taint{dedicated}, nil, nil), Statuses: statuses(corev1.ConditionTrue, corev1.ConditionFalse), HardwareKnown: true},
			wantTaints:  []corev1.Taint{dedicated, memTaint},
			wantOwned:   "selftaint.io/memory-pressure:NoSchedule",
			wantChanged: true,
		},
		{
			name: "NoExecute taints are stamped with timeAdded, recorded",
			in: MetadataInput{Node: node(nil, nil, nil), Statuses: statuses(corev1.ConditionFalse, corev1.ConditionTrue), HardwareKnown: true,
				Gates: map[corev1.NodeConditionType]Gate{ev: {NoExecute: true}}},
			wantTaints:  []corev1.Taint{{Key: evict.Key, Effect: evict.Effect, TimeAdded: ptr.To(metav1.NewTime(now))}},
			wantOwned:   "selftaint.io/evict:NoExecute@2026-11-23T10:00:00Z",
			wantChanged: true,
		},
		{
			name: "deleted by hand: restored with the timeAdded the record kept",
			in: MetadataInput{Node: node([]corev1.Taint{dedicated}, nil, map[string]string{OwnedTaintsAnnotation: "selftaint.io/evict:NoExecute@2026-11-23T09:00:00Z"}),
				Statuses: statuses(corev1.ConditionFalse, corev1.ConditionTrue), HardwareKnown: true, Gates: map[corev1.NodeConditionType]Gate{ev: {NoExecute: true}}},
			wantTaints:   []corev1.Taint{dedicated, evictSince(then)},
			wantOwned:    "selftaint.io/evict:NoExecute@2026-11-23T09:00:00Z",
			wantChanged:  true,
			wantRestored: []corev1.Taint{evictSince(then)},
		},
		{
			name: "a record with timeAdded, as on the Node: nothing to write",
			in: MetadataInput{Node: node([]corev1.Taint{evictSince(then)}, nil, map[string]string{OwnedTaintsAnnotation: "selftaint.io/evict:NoExecute@2026-11-23T09:00:00Z"}),
				Statuses: statuses(corev1.ConditionFalse, corev1.ConditionTrue), HardwareKnown: true, Gates: map[corev1.NodeConditionType]Gate{ev: {NoExecute: true}}},
			wantTaints: []corev1.Taint{evictSince(then)},
			wantOwned:  "selftaint.io/evict:NoExecute@2026-11-23T09:00:00Z",
		},
		{
			name: "a record of the first format: rewritten with the timeAdded on the Node",
			in: MetadataInput{Node: node([]corev1.Taint{evictSince(then)}, nil, owns(evict)),
				Statuses: statuses(corev1.ConditionFalse, corev1.ConditionTrue), HardwareKnown: true, Gates: map[corev1.NodeConditionType]Gate{ev: {NoExecute: true}}},
			wantTaints:  []corev1.Taint{evictSince(then)},
			wantOwned:   "selftaint.io/evict:NoExecute@2026-11-23T09:00:00Z",
			wantChanged: true,
		},
		{
			name: "ours by key, put back by a stale writer after we removed it: removed again",
			in: MetadataInput{Node: node([]corev1.Taint{dedicated, memTaint, evictSince(then)}, nil, nil),
				Statuses: statuses(corev1.ConditionFalse, corev1.ConditionFalse), HardwareKnown: true},
			wantTaints:  []corev1.Taint{dedicated},
			wantOwned:   "",
			wantChanged: true,
			wantClaimed: "selftaint.io/evict:NoExecute,selftaint.io/memory-pressure:NoSchedule",
		},
		{
			name: "ours by key, unrecorded, while its rule holds: adopted with its timeAdded and recorded, not held by another",
			in: MetadataInput{Node: node([]corev1.Taint{evictSince(then)}, nil, nil),
				Statuses: statuses(corev1.ConditionFalse, corev1.ConditionTrue), HardwareKnown: true, Gates: map[corev1.NodeConditionType]Gate{ev: {NoExecute: true}}},
			wantTaints:  []corev1.Taint{evictSince(then)},
			wantOwned:   "selftaint.io/evict:NoExecute@2026-11-23T09:00:00Z",
			wantChanged: true,
			wantClaimed: "selftaint.io/evict:NoExecute",
		},
		{
			name:        "ours by key, unrecorded, its condition undecided: kept and recorded",
			in:          MetadataInput{Node: node([]corev1.Taint{memTaint}, nil, nil), Statuses: statuses("", corev1.ConditionFalse), HardwareKnown: true},
			wantTaints:  []corev1.Taint{memTaint},
			wantOwned:   "selftaint.io/memory-pressure:NoSchedule",
			wantChanged: true,
			wantClaimed: "selftaint.io/memory-pressure:NoSchedule",
		},
		{
			name: "a rule's key outside the prefix is ours by key too",
			in: MetadataInput{Node: node([]corev1.Taint{dedicated, pidsTaint}, nil, nil),
				Statuses: map[corev1.NodeConditionType]corev1.ConditionStatus{pids: corev1.ConditionFalse}, HardwareKnown: true},
			wantTaints:  []corev1.Taint{dedicated},
			wantOwned:   "",
			wantChanged: true,
			wantClaimed: "example.com/pids:NoSchedule",
		},
		{
			name: "a foreign-key taint we may own but did not record (a hardware taint): kept",
			in: MetadataInput{Node: node([]corev1.Taint{fpgaTaint}, nil, nil), Statuses: statuses(corev1.ConditionFalse, ""),
				Hardware: []Hardware{fpgaGone}, HardwareKnown: true},
			wantTaints: []corev1.Taint{fpgaTaint},
			wantOwned:  "",
		},
		{
			name: "a rule's key under a reserved prefix, unrecorded: kept",
			in: MetadataInput{Node: node([]corev1.Taint{reservedTaint}, nil, nil),
				Statuses: map[corev1.NodeConditionType]corev1.ConditionStatus{disk: corev1.ConditionFalse}, HardwareKnown: true},
			wantTaints: []corev1.Taint{reservedTaint},
			wantOwned:  "",
		},
		{
			name: "selftaint.io/ taints the config cannot produce: never touched",
			in: MetadataInput{Node: node([]corev1.Taint{maintenance, virtualTaint, {Key: memTaint.Key, Effect: corev1.TaintEffectNoExecute}}, nil, nil),
				Statuses: statuses(corev1.ConditionTrue, corev1.ConditionFalse), HardwareKnown: true},
			wantTaints:  []corev1.Taint{maintenance, virtualTaint, {Key: memTaint.Key, Effect: corev1.TaintEffectNoExecute}, memTaint},
			wantOwned:   "selftaint.io/memory-pressure:NoSchedule",
			wantChanged: true,
		},
		{
			name:        "condition healthy again: our taint lifted, the foreign one kept",
			in:          MetadataInput{Node: node([]corev1.Taint{dedicated, memTaint}, nil, owns(memTaint)), Statuses: statuses(corev1.ConditionFalse, corev1.ConditionFalse), HardwareKnown: true},
			wantTaints:  []corev1.Taint{dedicated},
			wantOwned:   "",
			wantChanged: true,
		},
		{
			name:       "undecided condition: our taint stays",
			in:         MetadataInput{Node: node([]corev1.Taint{memTaint}, nil, owns(memTaint)), Statuses: statuses("", corev1.ConditionFalse), HardwareKnown: true},
			wantTaints: []corev1.Taint{memTaint},
			wantOwned:  "selftaint.io/memory-pressure:NoSchedule",
		},
		{
			name: "someone else holds a foreign-key taint we want: left alone, not claimed",
			in: MetadataInput{Node: node([]corev1.Taint{{Key: fpgaTaint.Key, Value: "present", Effect: fpgaTaint.Effect}}, nil, nil),
				Statuses: statuses(corev1.ConditionFalse, ""), Hardware: []Hardware{fpga}, HardwareKnown: true},
			wantTaints:  []corev1.Taint{{Key: fpgaTaint.Key, Value: "present", Effect: fpgaTaint.Effect}},
			wantLabels:  map[string]string{fpgaLabel: "true"},
			wantOwned:   "",
			wantChanged: true, // the label
			wantForeign: []corev1.Taint{fpgaTaint},
		},
		{
			name: "someone else set a taint ours by key, with another value: ours, value set, recorded",
			in: MetadataInput{Node: node([]corev1.Taint{{Key: memTaint.Key, Value: "theirs", Effect: memTaint.Effect}}, nil, nil),
				Statuses: statuses(corev1.ConditionTrue, ""), HardwareKnown: true},
			wantTaints:  []corev1.Taint{memTaint},
			wantOwned:   "selftaint.io/memory-pressure:NoSchedule",
			wantChanged: true,
			wantClaimed: "selftaint.io/memory-pressure:NoSchedule",
		},
		{
			name:        "hardware present: its taint and label",
			in:          MetadataInput{Node: node(nil, map[string]string{"team": "a"}, nil), Statuses: statuses(corev1.ConditionFalse, ""), Hardware: []Hardware{fpga}, HardwareKnown: true},
			wantTaints:  []corev1.Taint{fpgaTaint},
			wantLabels:  map[string]string{"team": "a", fpgaLabel: "true"},
			wantOwned:   "example.com/fpga:NoSchedule",
			wantChanged: true,
		},
		{
			name: "hardware gone: its taint and label removed",
			in: MetadataInput{Node: node([]corev1.Taint{fpgaTaint}, map[string]string{"team": "a", fpgaLabel: "true"},
				map[string]string{OwnedTaintsAnnotation: "example.com/fpga:NoSchedule", OwnedLabelsAnnotation: fpgaLabel}),
				Statuses: statuses(corev1.ConditionFalse, ""), Hardware: []Hardware{fpgaGone}, HardwareKnown: true},
			wantLabels:  map[string]string{"team": "a"},
			wantOwned:   "",
			wantChanged: true,
		},
		{
			name: "before the first inventory: hardware taint and label kept",
			in: MetadataInput{Node: node([]corev1.Taint{fpgaTaint}, map[string]string{fpgaLabel: "true"},
				map[string]string{OwnedTaintsAnnotation: "example.com/fpga:NoSchedule", OwnedLabelsAnnotation: fpgaLabel}),
				Statuses: statuses(corev1.ConditionFalse, "")},
			wantTaints: []corev1.Taint{fpgaTaint},
			wantLabels: map[string]string{fpgaLabel: "true"},
			wantOwned:  "example.com/fpga:NoSchedule",
		},
		{
			name: "records claiming foreign taints and labels: never acted on, dropped",
			in: MetadataInput{Node: node([]corev1.Taint{dedicated}, map[string]string{"team": "a"},
				map[string]string{OwnedTaintsAnnotation: "dedicated:NoSchedule", OwnedLabelsAnnotation: "team"}),
				Statuses: statuses(corev1.ConditionFalse, ""), HardwareKnown: true},
			wantTaints:    []corev1.Taint{dedicated},
			wantLabels:    map[string]string{"team": "a"},
			wantOwned:     "",
			wantChanged:   true,
			wantUntrusted: "dedicated:NoSchedule",
		},
		{
			name: "an unreadable record owns nothing: our foreign-key taint is not removed",
			in: MetadataInput{Node: node([]corev1.Taint{fpgaTaint}, nil, map[string]string{OwnedTaintsAnnotation: "no effect here"}),
				Statuses: statuses(corev1.ConditionFalse, ""), Hardware: []Hardware{fpgaGone}, HardwareKnown: true},
			wantTaints: []corev1.Taint{fpgaTaint},
			wantOwned:  "",
			wantBad:    1,
		},
		{
			name: "an unreadable record: a taint ours by key still goes",
			in: MetadataInput{Node: node([]corev1.Taint{memTaint}, nil, map[string]string{OwnedTaintsAnnotation: "no effect here"}),
				Statuses: statuses(corev1.ConditionFalse, ""), HardwareKnown: true},
			wantOwned:   "",
			wantChanged: true,
			wantBad:     1,
			wantClaimed: "selftaint.io/memory-pressure:NoSchedule",
		},
		{
			name: "an unreadable timeAdded spoils the record: the foreign-key taint stays",
			in: MetadataInput{Node: node([]corev1.Taint{fpgaTaint}, nil, map[string]string{OwnedTaintsAnnotation: "example.com/fpga:NoSchedule@soon"}),
				Statuses: statuses(corev1.ConditionFalse, ""), Hardware: []Hardware{fpgaGone}, HardwareKnown: true},
			wantTaints: []corev1.Taint{fpgaTaint},
			wantOwned:  "",
			wantBad:    1,
		},
		{
			name: "registered with the uninitialized taint, initialized now: claimed, lifted, recorded",
			in: MetadataInput{Node: node([]corev1.Taint{initTaint}, nil, nil), Statuses: statuses(corev1.ConditionFalse, ""), HardwareKnown: true,
				Init: &InitTaint{Taint: initTaint, Verdict: initialized}},
			wantOwned:       "",
			wantChanged:     true,
			wantAnnotations: map[string]string{InitializedAnnotation: "2026-11-23T10:00:00Z"},
		},
		{
			name: "initialized before: no second initialized-at",
			in: MetadataInput{Node: node(nil, nil, map[string]string{InitializedAnnotation: "2026-01-01T00:00:00Z"}), Statuses: statuses(corev1.ConditionFalse, ""), HardwareKnown: true,
				Init: &InitTaint{Taint: initTaint, Verdict: initialized}},
			wantOwned: "",
		},
		{
			name: "uninitialized: the taint is added",
			in: MetadataInput{Node: node(nil, nil, nil), Statuses: statuses(corev1.ConditionFalse, ""), HardwareKnown: true,
				Init: &InitTaint{Taint: initTaint, Verdict: InitVerdict{Decided: true, Uninitialized: true}}},
			wantTaints:  []corev1.Taint{initTaint},
			wantOwned:   "selftaint.io/uninitialized:NoSchedule",
			wantChanged: true,
		},
		{
			name: "initialization undecided after a restart: the taint stays as it is",
			in: MetadataInput{Node: node([]corev1.Taint{initTaint}, nil, owns(initTaint)), Statuses: statuses(corev1.ConditionFalse, ""), HardwareKnown: true,
				Init: &InitTaint{Taint: initTaint, Verdict: InitVerdict{}}},
			wantTaints: []corev1.Taint{initTaint},
			wantOwned:  "selftaint.io/uninitialized:NoSchedule",
		},
	}
	for _, tt := range tests {
		tt.in.Now, tt.in.Rules, tt.in.Ownable = now, rules, ownable
		p := PlanMetadata(tt.in)
		if !slices.EqualFunc(p.Taints.Taints, tt.wantTaints, taintsEqual) {
			t.Errorf("%s: taints %v, want %v", tt.name, p.Taints.Taints, tt.wantTaints)
		}
		if got := FormatOwned(p.Taints.Owned); got != tt.wantOwned {
			t.Errorf("%s: owned %q, want %q", tt.name, got, tt.wantOwned)
		}
		if p.Changed != tt.wantChanged {
			t.Errorf("%s: changed %v, want %v", tt.name, p.Changed, tt.wantChanged)
		}
		if !slices.EqualFunc(p.Taints.Foreign, tt.wantForeign, taintsEqual) {
			t.Errorf("%s: foreign %v, want %v", tt.name, p.Taints.Foreign, tt.wantForeign)
		}
		if got := FormatOwned(p.UntrustedTaints); got != tt.wantUntrusted {
			t.Errorf("%s: untrusted %q, want %q", tt.name, got, tt.wantUntrusted)
		}
		if got := FormatOwned(p.Claimed); got != tt.wantClaimed {
			t.Errorf("%s: claimed %q, want %q", tt.name, got, tt.wantClaimed)
		}
		if !slices.EqualFunc(p.Taints.Restored, tt.wantRestored, taintsEqual) {
			t.Errorf("%s: restored %v, want %v", tt.name, p.Taints.Restored, tt.wantRestored)
		}
		if len(p.BadRecords) != tt.wantBad {
			t.Errorf("%s: %d bad records, want %d", tt.name, len(p.BadRecords), tt.wantBad)
		}
		if len(p.Annotations) != len(tt.wantAnnotations) {
			t.Errorf("%s: annotations %v, want %v", tt.name, p.Annotations, tt.wantAnnotations)
		}
		for k, v := range tt.wantAnnotations {
			if p.Annotations[k] != v {
				t.Errorf("%s: annotation %s = %q, want %q", tt.name, k, p.Annotations[k], v)
			}
		}
		if got := applyLabels(tt.in.Node.Labels, p.Labels); !mapsEqual(got, tt.wantLabels) {
			t.Errorf("%s: labels %v, want %v", tt.name, got, tt.wantLabels)
		}
	}
}

func taintsEqual(a, b corev1.Taint) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect &&
		(a.TimeAdded == nil) == (b.TimeAdded == nil) && (a.TimeAdded == nil || a.TimeAdded.Equal(b.TimeAdded))
}

// applyLabels is the labels after a LabelPlan is written over current.
func applyLabels(current map[string]string, p LabelPlan) map[string]string {
	out := map[string]string{}
	for k, v := range current {
		out[k] = v
	}
	for k, v := range p.Set {
		out[k] = v
	}
	for _, k := range p.Remove {
		delete(out, k)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestPlanMetadataAnnotations checks the agent's kept annotations (a
// Stateful probe's state) and consumed requests: written or removed only
// when the Node differs, a consumed request removed only while it still
// holds the value handled, and nothing else touched.
func TestPlanMetadataAnnotations(t *testing.T) {
	const (
		state = "selftaint.io/state-gpu"
		clear = "selftaint.io/clear-gpu"
		other = "example.com/owner"
	)
	node := func(ann map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: ann}}
	}
	tests := []struct {
		name        string
		have        map[string]string
		wanted      map[string]string
		consumed    map[string]string
		wantSet     map[string]string
		wantRemove  []string
		wantChanged bool
	}{
		{name: "nothing asked", have: map[string]string{other: "a", state: "x"}},
		{name: "new state written", have: map[string]string{other: "a"}, wanted: map[string]string{state: `{"a":1}`},
			wantSet: map[string]string{state: `{"a":1}`}, wantChanged: true},
		{name: "changed state written", have: map[string]string{state: "old"}, wanted: map[string]string{state: "new"},
			wantSet: map[string]string{state: "new"}, wantChanged: true},
		{name: "same state: no write", have: map[string]string{state: "same"}, wanted: map[string]string{state: "same"}},
		{name: "empty state removes it", have: map[string]string{state: "old", other: "a"}, wanted: map[string]string{state: ""},
			wantRemove: []string{state}, wantChanged: true},
		{name: "empty state, none on the Node: no write", have: map[string]string{other: "a"}, wanted: map[string]string{state: ""}},
		{name: "an empty annotation is removed too", have: map[string]string{state: ""}, wanted: map[string]string{state: ""},
			wantRemove: []string{state}, wantChanged: true},
		{name: "consumed request removed", have: map[string]string{clear: "v1", other: "a"}, consumed: map[string]string{clear: "v1"},
			wantRemove: []string{clear}, wantChanged: true},
		{name: "a newer request stays", have: map[string]string{clear: "v2"}, consumed: map[string]string{clear: "v1"}},
		{name: "a request already gone: no write", have: map[string]string{other: "a"}, consumed: map[string]string{clear: "v1"}},
		{name: "both, sorted", have: map[string]string{clear: "v1", state: "old"}, wanted: map[string]string{state: ""}, consumed: map[string]string{clear: "v1"},
			wantRemove: []string{clear, state}, wantChanged: true},
		{name: "a state set and a request removed in one write", have: map[string]string{clear: "v1", state: "old"},
			wanted: map[string]string{state: "new"}, consumed: map[string]string{clear: "v1"},
			wantSet: map[string]string{state: "new"}, wantRemove: []string{clear}, wantChanged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanMetadata(MetadataInput{
				Node: node(tt.have), Now: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), HardwareKnown: true,
				Annotations: tt.wanted, Consumed: tt.consumed,
			})
			if got := p.Annotations; !mapsEqual(got, tt.wantSet) {
				t.Errorf("set %v, want %v", got, tt.wantSet)
			}
			if got := p.RemoveAnnotations; !slices.Equal(got, tt.wantRemove) {
				t.Errorf("remove %v, want %v", got, tt.wantRemove)
			}
			if p.Changed != tt.wantChanged {
				t.Errorf("changed %v, want %v", p.Changed, tt.wantChanged)
			}
			if slices.Contains(p.RemoveAnnotations, other) || p.Annotations[other] != "" {
				t.Errorf("touched %s: set %v remove %v", other, p.Annotations, p.RemoveAnnotations)
			}
		})
	}
}
