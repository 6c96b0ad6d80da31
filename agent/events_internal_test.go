package agent

import (
	"bytes"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// TestEventPacer steps the pacing rule through bursts: a probe reason's
// burst, its refill, the class's burst across reasons, the agent's own
// Events apart from the probes', and the counts told when a reason is let
// through again.
func TestEventPacer(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	type step struct {
		at     time.Duration // since t0
		class  eventClass
		reason string
		n      int // the same Event n times (1 when 0); want is the last's verdict
		want   paceVerdict
	}
	rec := paceVerdict{Record: true}
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"a probe reason: a burst, then held back, then one per ReasonEvery", []step{
			{n: ReasonBurst, class: classProbe, reason: "A", want: rec},
			{class: classProbe, reason: "A", want: paceVerdict{HoldStarted: true}},
			{n: 3, class: classProbe, reason: "A", want: paceVerdict{}},
			{class: classProbe, reason: "B", want: rec}, // another reason has its own
			{at: ReasonEvery / 2, class: classProbe, reason: "A", want: paceVerdict{}},
			{at: ReasonEvery, class: classProbe, reason: "A", want: paceVerdict{Record: true, Released: 5, HeldSince: t0}},
			{at: ReasonEvery, class: classProbe, reason: "A", want: paceVerdict{HoldStarted: true}},
			{at: 100 * ReasonEvery, n: ReasonBurst, class: classProbe, reason: "A", want: rec}, // refilled to the burst, no more
			{at: 100 * ReasonEvery, class: classProbe, reason: "A", want: paceVerdict{HoldStarted: true}},
		}},
		{"the probes together: SourceBurst across reasons", []step{
			{n: ReasonBurst, class: classProbe, reason: "A", want: rec},
			{n: ReasonBurst, class: classProbe, reason: "B", want: rec},
			{n: ReasonBurst, class: classProbe, reason: "C", want: rec},
			{n: ReasonBurst, class: classProbe, reason: "D", want: rec},
			{n: ReasonBurst, class: classProbe, reason: "E", want: rec},
			{class: classProbe, reason: "F", want: paceVerdict{HoldStarted: true}},
			// The agent's own Events are not held back by the probes'.
			{class: classAgent, reason: "F", want: rec},
			{at: SourceEvery, class: classProbe, reason: "F", want: paceVerdict{Record: true, Released: 1, HeldSince: t0}},
		}},
		{"the agent's own: SourceBurst of all reasons, no bucket per reason", []step{
			{n: SourceBurst - 1, class: classAgent, reason: "TaintAdded", want: rec},
			{class: classAgent, reason: "ConditionChanged", want: rec},
			{n: 2, class: classAgent, reason: "ConditionChanged", want: paceVerdict{}},
			{class: classAgent, reason: "TaintAdded", want: paceVerdict{HoldStarted: true}},
			{at: SourceEvery, class: classAgent, reason: "ConditionChanged", want: paceVerdict{Record: true, Released: 2, HeldSince: t0}},
			{at: 2 * SourceEvery, class: classAgent, reason: "TaintAdded", want: paceVerdict{Record: true, Released: 1, HeldSince: t0}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newEventPacer()
			for i, s := range tt.steps {
				var got paceVerdict
				for range max(s.n, 1) {
					got = p.decide(t0.Add(s.at), s.class, s.reason)
				}
				if got != s.want {
					t.Errorf("step %d (%s %s at %v, x%d): got %+v, want %+v", i, s.class, s.reason, s.at, max(s.n, 1), got, s.want)
				}
			}
		})
	}
}

// heldBackCounts is a Metrics that keeps the held-back counts by reason.
type heldBackCounts struct {
	nopMetrics
	n map[string]int
}

func (m *heldBackCounts) EventsHeldBack(reason string, n int) { m.n[reason] += n }

// TestEventSinkCountsProbeHeldBack: the Events a probe counted instead of
// keeping (probes.Event.HeldBack, a flood of matched lines between two
// runs) are counted as held back by their reason, start a hold logged once
// (not once per Event), and are told in the count when one of their reason
// is let through again.
func TestEventSinkCountsProbeHeldBack(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	now := t0
	var logs bytes.Buffer
	rec := record.NewFakeRecorder(100)
	m := &heldBackCounts{n: map[string]int{}}
	s := &eventSink{recorder: rec, now: func() time.Time { return now }, metrics: m,
		log: slog.New(slog.NewTextHandler(&logs, nil)), pacer: newEventPacer()}
	ref := probeEventRef("n")
	for range ReasonBurst {
		s.record(classProbe, ref, corev1.EventTypeWarning, "OOMKilling", "a line")
	}
	s.holdBack(classProbe, "OOMKilling", 9995)
	s.holdBack(classProbe, "OOMKilling", 0)
	s.record(classProbe, ref, corev1.EventTypeWarning, "OOMKilling", "a line")
	if got, want := m.n, map[string]int{"OOMKilling": 9996}; !maps.Equal(got, want) {
		t.Errorf("held back %v, want %v", got, want)
	}
	if got := len(rec.Events); got != ReasonBurst {
		t.Errorf("%d Events recorded, want %d", got, ReasonBurst)
	}
	if got := strings.Count(logs.String(), "Events held back"); got != 1 {
		t.Errorf("the hold is logged %d times, want once; log:\n%s", got, logs.String())
	}
	now = now.Add(ReasonEvery)
	s.record(classProbe, ref, corev1.EventTypeWarning, "OOMKilling", "a line")
	if !strings.Contains(logs.String(), "Events let through again") || !strings.Contains(logs.String(), "heldBack=9996") {
		t.Errorf("let through again: the log does not tell the 9996 held back; log:\n%s", logs.String())
	}
}
