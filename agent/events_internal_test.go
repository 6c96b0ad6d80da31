package agent

import (
	"testing"
	"time"
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
