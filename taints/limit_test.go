package taints

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestLimit(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	cfg := LimiterConfig{Burst: 3, Refill: 5 * time.Minute, CoolDown: 5 * time.Minute}
	rules := []Rule{{Condition: "C", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoSchedule}}}
	bad := State{Status: corev1.ConditionTrue, Reason: "Bad", Message: "it broke"}
	good := State{Status: corev1.ConditionFalse, Reason: "Good"}
	pub := func(s State) *Published { return &Published{State: s} }
	tests := []struct {
		name        string
		cfg         LimiterConfig
		st          LimitState
		rules       []Rule
		in          State
		published   *Published
		now         time.Time
		wantStatus  corev1.ConditionStatus
		wantReason  string
		wantTokens  float64
		wantFlap    bool
		wantStarted bool
		wantEnded   bool
		wantWake    time.Time
	}{
		{name: "off passes through", cfg: LimiterConfig{}, rules: rules, in: bad, published: pub(good), now: t0,
			wantStatus: corev1.ConditionTrue, wantReason: "Bad"},
		{name: "no rules pass through", cfg: cfg, in: bad, published: pub(good), now: t0,
			wantStatus: corev1.ConditionTrue, wantReason: "Bad"},
		{name: "first change takes a token from a full bucket", cfg: cfg, rules: rules, in: bad, published: pub(good), now: t0,
			wantStatus: corev1.ConditionTrue, wantReason: "Bad", wantTokens: 2},
		{name: "no change, no token", cfg: cfg, rules: rules, in: bad, published: pub(bad), now: t0,
			wantStatus: corev1.ConditionTrue, wantReason: "Bad", wantTokens: 3},
		{name: "Unknown without taintOnUnknown is the untainted side", cfg: cfg, rules: rules, in: State{Status: corev1.ConditionUnknown}, published: pub(good), now: t0,
			wantStatus: corev1.ConditionUnknown, wantTokens: 3},
		{name: "putting taints on needs one token", cfg: cfg, rules: rules, st: LimitState{Tokens: 1, At: t0}, in: bad, published: pub(good), now: t0,
			wantStatus: corev1.ConditionTrue, wantReason: "Bad", wantTokens: 0},
		{name: "lifting needs two: with one it is held on, flapping", cfg: cfg, rules: rules, st: LimitState{Tokens: 1, At: t0}, in: good, published: pub(bad), now: t0,
			wantStatus: corev1.ConditionTrue, wantReason: ReasonFlapping, wantTokens: 1, wantFlap: true, wantStarted: true,
			wantWake: t0.Add(5 * time.Minute)},
		{name: "out of tokens a new problem is still tainted, flapping", cfg: cfg, rules: rules, st: LimitState{Tokens: 0, At: t0}, in: bad, published: pub(good), now: t0,
			wantStatus: corev1.ConditionTrue, wantReason: ReasonFlapping, wantTokens: 0, wantFlap: true, wantStarted: true,
			wantWake: t0.Add(5 * time.Minute)},
		{name: "tokens refill over time", cfg: cfg, rules: rules, st: LimitState{Tokens: 0, At: t0}, in: good, published: pub(bad), now: t0.Add(10 * time.Minute),
			wantStatus: corev1.ConditionFalse, wantReason: "Good", wantTokens: 1},
		{name: "refill stops at the burst", cfg: cfg, rules: rules, st: LimitState{Tokens: 2, At: t0}, in: bad, published: pub(bad), now: t0.Add(time.Hour),
			wantStatus: corev1.ConditionTrue, wantReason: "Bad", wantTokens: 3},
		{name: "flapping holds while the input is not stable", cfg: cfg, rules: rules,
			st: LimitState{Tokens: 3, At: t0, Input: corev1.ConditionFalse, InputSince: t0, Flapping: true, FlappingSince: t0},
			in: good, published: pub(State{Status: corev1.ConditionTrue, Reason: ReasonFlapping}), now: t0.Add(4 * time.Minute),
			wantStatus: corev1.ConditionTrue, wantReason: ReasonFlapping, wantTokens: 3, wantFlap: true, wantWake: t0.Add(5 * time.Minute)},
		{name: "a change of input restarts the cool-down", cfg: cfg, rules: rules,
			st: LimitState{Tokens: 3, At: t0, Input: corev1.ConditionFalse, InputSince: t0, Flapping: true, FlappingSince: t0},
			in: bad, published: pub(State{Status: corev1.ConditionTrue, Reason: ReasonFlapping}), now: t0.Add(4 * time.Minute),
			wantStatus: corev1.ConditionTrue, wantReason: ReasonFlapping, wantTokens: 3, wantFlap: true, wantWake: t0.Add(9 * time.Minute)},
		{name: "stable for the cool-down: released, the last state wins", cfg: cfg, rules: rules,
			st: LimitState{Tokens: 3, At: t0, Input: corev1.ConditionFalse, InputSince: t0, Flapping: true, FlappingSince: t0},
			in: good, published: pub(State{Status: corev1.ConditionTrue, Reason: ReasonFlapping}), now: t0.Add(5 * time.Minute),
			wantStatus: corev1.ConditionFalse, wantReason: "Good", wantTokens: 2, wantEnded: true},
		{name: "stable but the bucket is short: held until it refills", cfg: cfg, rules: rules,
			st: LimitState{Tokens: 0, At: t0.Add(5 * time.Minute), Input: corev1.ConditionFalse, InputSince: t0, Flapping: true, FlappingSince: t0},
			in: good, published: pub(State{Status: corev1.ConditionTrue, Reason: ReasonFlapping}), now: t0.Add(5 * time.Minute),
			wantStatus: corev1.ConditionTrue, wantReason: ReasonFlapping, wantTokens: 0, wantFlap: true, wantWake: t0.Add(15 * time.Minute)},
		{name: "stable on the tainted side: released without a token", cfg: cfg, rules: rules,
			st: LimitState{Tokens: 0, At: t0.Add(5 * time.Minute), Input: corev1.ConditionTrue, InputSince: t0, Flapping: true, FlappingSince: t0},
			in: bad, published: pub(State{Status: corev1.ConditionTrue, Reason: ReasonFlapping}), now: t0.Add(5 * time.Minute),
			wantStatus: corev1.ConditionTrue, wantReason: "Bad", wantTokens: 0, wantEnded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Limit(tt.cfg, tt.st, tt.rules, tt.in, tt.published, tt.now)
			if got.State.Status != tt.wantStatus || got.State.Reason != tt.wantReason {
				t.Errorf("state = %s/%s, want %s/%s", got.State.Status, got.State.Reason, tt.wantStatus, tt.wantReason)
			}
			if tt.cfg.Burst > 0 && len(tt.rules) > 0 && (got.Next.Tokens < tt.wantTokens-1e-9 || got.Next.Tokens > tt.wantTokens+1e-9) {
				t.Errorf("tokens = %v, want %v", got.Next.Tokens, tt.wantTokens)
			}
			if got.Next.Flapping != tt.wantFlap || got.Started != tt.wantStarted || got.Ended != tt.wantEnded {
				t.Errorf("flapping, started, ended = %v %v %v, want %v %v %v", got.Next.Flapping, got.Started, got.Ended, tt.wantFlap, tt.wantStarted, tt.wantEnded)
			}
			if !got.Wake.Equal(tt.wantWake) {
				t.Errorf("wake = %v, want %v", got.Wake, tt.wantWake)
			}
			if got.State.Reason == ReasonFlapping && !strings.Contains(got.State.Message, "change limiter") {
				t.Errorf("flapping message %q does not say why", got.State.Message)
			}
		})
	}
}

// TestLimitFlappingProbe drives a condition that is bad and good in turn
// every second for 10 minutes through PlanConditions with the default
// limiter, as the agent does on every sync, and counts the changes of its
// taint: they stay within the bucket, and the condition says Flapping. Once
// the probe settles, the last state wins after the cool-down.
func TestLimitFlappingProbe(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	cfg := LimiterConfig{Burst: 3, Refill: 5 * time.Minute, CoolDown: 5 * time.Minute}
	rules := []Rule{{Condition: "C", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoExecute}, Fallback: corev1.TaintEffectNoSchedule}}
	published := map[corev1.NodeConditionType]Published{}
	limits := map[corev1.NodeConditionType]LimitState{}
	tainted, changes := false, 0
	step := func(now time.Time, s corev1.ConditionStatus) ConditionsPlan {
		p := PlanConditions(ConditionsInput{
			Now: now, Damped: map[corev1.NodeConditionType]State{"C": {Status: s, Reason: "Probe", LastTransitionTime: now}},
			Published: published, Limiter: cfg, Limits: limits, Rules: rules,
		})
		limits = p.Limits
		published["C"] = Published{State: p.States["C"]}
		desired, _ := Desired(rules, map[corev1.NodeConditionType]corev1.ConditionStatus{"C": p.States["C"].Status}, nil, nil)
		if on := len(desired) > 0; on != tainted {
			changes++
			tainted = on
		}
		return p
	}
	end := t0.Add(10 * time.Minute)
	var last ConditionsPlan
	for now, i := t0, 0; now.Before(end); now, i = now.Add(time.Second), i+1 {
		s := corev1.ConditionFalse
		if i%2 == 0 {
			s = corev1.ConditionTrue
		}
		last = step(now, s)
	}
	if max := cfg.Burst + int(10*time.Minute/cfg.Refill); changes > max {
		t.Errorf("taint changed %d times in 10 minutes, want at most %d (burst %d, one per %s)", changes, max, cfg.Burst, cfg.Refill)
	}
	if changes == 0 {
		t.Errorf("taint never changed: the limiter let nothing through")
	}
	if got := last.States["C"]; got.Reason != ReasonFlapping || got.Status != corev1.ConditionTrue || !tainted {
		t.Errorf("after 10 minutes of flapping: %s/%s, tainted %v; want True/Flapping, tainted", got.Status, got.Reason, tainted)
	}
	// Settled healthy: held for the cool-down, then released.
	now := end
	for ; now.Before(end.Add(cfg.CoolDown)); now = now.Add(10 * time.Second) {
		if p := step(now, corev1.ConditionFalse); p.States["C"].Reason != ReasonFlapping {
			t.Fatalf("released at %s, before the cool-down", now.Sub(end))
		}
	}
	if p := step(now.Add(time.Second), corev1.ConditionFalse); p.States["C"].Status != corev1.ConditionFalse || len(p.FlapEnded) != 1 || tainted {
		t.Errorf("after the cool-down: %s/%s ended %v tainted %v; want False, ended, untainted", p.States["C"].Status, p.States["C"].Reason, p.FlapEnded, tainted)
	}
}
