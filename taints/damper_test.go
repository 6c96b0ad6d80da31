package taints

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	T = corev1.ConditionTrue
	F = corev1.ConditionFalse
	U = corev1.ConditionUnknown
	// The verdicts a probe reports.
	O = VerdictOK
	P = VerdictProblem
	X = VerdictUnknown
)

// step is one thing that happens to a damper at an offset from t0, and what
// the condition must look like right after.
type step struct {
	at      time.Duration
	observe Verdict // "" means Tick
	reason  string

	wantDecided bool
	wantStatus  corev1.ConditionStatus
	wantReason  string
	wantLTT     time.Duration // offset from t0
	wantChanged bool
	wantNext    time.Duration // -1: nothing pending
}

func TestDamper(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	d := Damping{For: 30 * time.Second, ClearAfter: 2 * time.Minute}
	s := time.Second
	tests := []struct {
		name    string
		damping Damping
		healthy corev1.ConditionStatus // "" means False
		adopt   *State                 // adopted at t0 before the steps
		steps   []step
	}{
		{
			name: "healthy start is decided at once", damping: d,
			steps: []step{
				{at: 0, observe: O, reason: "OK", wantDecided: true, wantStatus: F, wantReason: "OK", wantLTT: 0, wantChanged: true, wantNext: -1},
				{at: 10 * s, observe: O, reason: "OK", wantDecided: true, wantStatus: F, wantReason: "OK", wantLTT: 0, wantNext: -1},
			},
		},
		{
			name: "bad start waits for `for`", damping: d,
			steps: []step{
				{at: 0, observe: P, reason: "Low", wantNext: 30 * s},
				{at: 29 * s, observe: P, reason: "Low", wantNext: 30 * s},
				{at: 30 * s, wantDecided: true, wantStatus: T, wantReason: "Low", wantLTT: 30 * s, wantChanged: true, wantNext: -1},
			},
		},
		{
			name: "flip to True after for, back to False after clearAfter", damping: d,
			steps: []step{
				{at: 0, observe: O, reason: "OK", wantDecided: true, wantStatus: F, wantReason: "OK", wantChanged: true, wantNext: -1},
				{at: 10 * s, observe: P, reason: "Low", wantDecided: true, wantStatus: F, wantReason: "OK", wantNext: 40 * s},
				{at: 39 * s, observe: P, reason: "Low", wantDecided: true, wantStatus: F, wantReason: "OK", wantNext: 40 * s},
				{at: 40 * s, observe: P, reason: "Low", wantDecided: true, wantStatus: T, wantReason: "Low", wantLTT: 40 * s, wantChanged: true, wantNext: -1},
				{at: 50 * s, observe: O, reason: "OK", wantDecided: true, wantStatus: T, wantReason: "Low", wantLTT: 40 * s, wantNext: 170 * s},
				{at: 169 * s, wantDecided: true, wantStatus: T, wantReason: "Low", wantLTT: 40 * s, wantNext: 170 * s},
				{at: 170 * s, wantDecided: true, wantStatus: F, wantReason: "OK", wantLTT: 170 * s, wantChanged: true, wantNext: -1},
			},
		},
		{
			name: "a blip shorter than for does not flip and restarts the clock", damping: d,
			steps: []step{
				{at: 0, observe: O, reason: "OK", wantDecided: true, wantStatus: F, wantReason: "OK", wantChanged: true, wantNext: -1},
				{at: 10 * s, observe: P, reason: "Low", wantDecided: true, wantStatus: F, wantReason: "OK", wantNext: 40 * s},
				{at: 20 * s, observe: O, reason: "OK", wantDecided: true, wantStatus: F, wantReason: "OK", wantNext: -1},
				{at: 25 * s, observe: P, reason: "Low", wantDecided: true, wantStatus: F, wantReason: "OK", wantNext: 55 * s},
				{at: 40 * s, wantDecided: true, wantStatus: F, wantReason: "OK", wantNext: 55 * s},
			},
		},
		{
			name: "same status with new reason updates words, not transition time", damping: d,
			adopt: &State{Status: T, Reason: "Low", Message: "m", LastTransitionTime: t0.Add(-time.Hour)},
			steps: []step{
				{at: 5 * s, observe: P, reason: "Stall", wantDecided: true, wantStatus: T, wantReason: "Stall", wantLTT: -time.Hour, wantChanged: true, wantNext: -1},
			},
		},
		{
			name: "adopted True survives a restart with the problem still there", damping: d,
			adopt: &State{Status: T, Reason: "Low", Message: "msg Low", LastTransitionTime: t0.Add(-time.Hour)},
			steps: []step{
				{at: 0, observe: P, reason: "Low", wantDecided: true, wantStatus: T, wantReason: "Low", wantLTT: -time.Hour, wantNext: -1},
			},
		},
		{
			name: "adopted True needs clearAfter of good readings after restart", damping: d,
			adopt: &State{Status: T, Reason: "Low", LastTransitionTime: t0.Add(-time.Hour)},
			steps: []step{
				{at: 0, observe: O, reason: "OK", wantDecided: true, wantStatus: T, wantReason: "Low", wantLTT: -time.Hour, wantNext: 120 * s},
				{at: 120 * s, observe: O, reason: "OK", wantDecided: true, wantStatus: F, wantReason: "OK", wantLTT: 120 * s, wantChanged: true, wantNext: -1},
			},
		},
		{
			name: "Unknown from True is damped like a problem", damping: d,
			adopt: &State{Status: T, Reason: "Low", LastTransitionTime: t0},
			steps: []step{
				{at: 0, observe: X, reason: "ReadError", wantDecided: true, wantStatus: T, wantReason: "Low", wantNext: 30 * s},
				{at: 30 * s, wantDecided: true, wantStatus: U, wantReason: "ReadError", wantLTT: 30 * s, wantChanged: true, wantNext: -1},
			},
		},
		{
			name: "Ready-style: a healthy start is decided at once, True", damping: d, healthy: T,
			steps: []step{
				{at: 0, observe: O, reason: "Ready", wantDecided: true, wantStatus: T, wantReason: "Ready", wantChanged: true, wantNext: -1},
			},
		},
		{
			name: "Ready-style: a problem waits for `for` before False, recovery clearAfter before True", damping: d, healthy: T,
			steps: []step{
				{at: 0, observe: O, reason: "Ready", wantDecided: true, wantStatus: T, wantReason: "Ready", wantChanged: true, wantNext: -1},
				{at: 10 * s, observe: P, reason: "Down", wantDecided: true, wantStatus: T, wantReason: "Ready", wantNext: 40 * s},
				{at: 39 * s, wantDecided: true, wantStatus: T, wantReason: "Ready", wantNext: 40 * s},
				{at: 40 * s, wantDecided: true, wantStatus: F, wantReason: "Down", wantLTT: 40 * s, wantChanged: true, wantNext: -1},
				{at: 50 * s, observe: O, reason: "Ready", wantDecided: true, wantStatus: F, wantReason: "Down", wantLTT: 40 * s, wantNext: 170 * s},
				{at: 169 * s, wantDecided: true, wantStatus: F, wantReason: "Down", wantLTT: 40 * s, wantNext: 170 * s},
				{at: 170 * s, wantDecided: true, wantStatus: T, wantReason: "Ready", wantLTT: 170 * s, wantChanged: true, wantNext: -1},
			},
		},
		{
			name: "Ready-style: a bad start waits for `for`", damping: d, healthy: T,
			steps: []step{
				{at: 0, observe: P, reason: "Down", wantNext: 30 * s},
				{at: 30 * s, wantDecided: true, wantStatus: F, wantReason: "Down", wantLTT: 30 * s, wantChanged: true, wantNext: -1},
			},
		},
		{
			name: "Ready-style: adopted False needs clearAfter of good readings after restart", damping: d, healthy: T,
			adopt: &State{Status: F, Reason: "Down", LastTransitionTime: t0.Add(-time.Hour)},
			steps: []step{
				{at: 0, observe: O, reason: "Ready", wantDecided: true, wantStatus: F, wantReason: "Down", wantLTT: -time.Hour, wantNext: 120 * s},
				{at: 120 * s, wantDecided: true, wantStatus: T, wantReason: "Ready", wantLTT: 120 * s, wantChanged: true, wantNext: -1},
			},
		},
		{
			name: "zero damping follows every verdict", damping: Damping{},
			steps: []step{
				{at: 0, observe: P, reason: "Low", wantDecided: true, wantStatus: T, wantReason: "Low", wantChanged: true, wantNext: -1},
				{at: s, observe: O, reason: "OK", wantDecided: true, wantStatus: F, wantReason: "OK", wantLTT: s, wantChanged: true, wantNext: -1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			healthy := tt.healthy
			if healthy == "" {
				healthy = F
			}
			dm := NewDamper(tt.damping, healthy)
			if tt.adopt != nil {
				dm.Adopt(*tt.adopt, t0)
			}
			for i, st := range tt.steps {
				now := t0.Add(st.at)
				var changed bool
				if st.observe == "" {
					changed = dm.Tick(now)
				} else {
					changed = dm.Observe(st.observe, st.reason, "msg "+st.reason, now)
				}
				got, decided := dm.State()
				if decided != st.wantDecided {
					t.Fatalf("step %d: decided = %v, want %v", i, decided, st.wantDecided)
				}
				if changed != st.wantChanged {
					t.Errorf("step %d: changed = %v, want %v", i, changed, st.wantChanged)
				}
				if decided {
					if got.Status != st.wantStatus || got.Reason != st.wantReason {
						t.Errorf("step %d: got %s/%s, want %s/%s", i, got.Status, got.Reason, st.wantStatus, st.wantReason)
					}
					if want := t0.Add(st.wantLTT); !got.LastTransitionTime.Equal(want) {
						t.Errorf("step %d: lastTransitionTime = %v, want %v", i, got.LastTransitionTime, want)
					}
				}
				next, pending := dm.NextChange()
				if st.wantNext < 0 {
					if pending {
						t.Errorf("step %d: NextChange = %v, want nothing pending", i, next)
					}
				} else if !pending || !next.Equal(t0.Add(st.wantNext)) {
					t.Errorf("step %d: NextChange = %v (pending %v), want %v", i, next, pending, t0.Add(st.wantNext))
				}
			}
		})
	}
}
