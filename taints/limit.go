package taints

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ReasonFlapping is the reason of a condition the change limiter holds.
const ReasonFlapping = "Flapping"

// LimiterConfig is the change limiter: a token bucket per condition on the
// changes of its taints (the condition going from a status that applies
// none of its rules to one that applies some, or back). Burst 0 turns it
// off.
type LimiterConfig struct {
	// Burst is the bucket's size: how many changes may happen back to back.
	Burst int
	// Refill is how long one token takes to come back.
	Refill time.Duration
	// CoolDown is how long a flapping condition must be stable before its
	// taints follow it again.
	CoolDown time.Duration
}

// LimitState is one condition's limiter between syncs. The zero value is a
// full bucket.
type LimitState struct {
	// Tokens in the bucket at At.
	Tokens float64
	At     time.Time
	// Input is the condition's status as decided before the limiter, and
	// InputSince since when it has had it (its stability).
	Input      corev1.ConditionStatus
	InputSince time.Time
	// Flapping: the condition is held on the side that applies its taints
	// until it is stable for the cool-down; FlappingSince is since when.
	Flapping      bool
	FlappingSince time.Time
}

// Limited is one condition after the limiter.
type Limited struct {
	// State is what to publish: the input, or, while flapping, the status
	// that applies the condition's rules with reason Flapping.
	State State
	// Next is the limiter's state after this sync: kept only if the sync's
	// writes succeed.
	Next LimitState
	// Started and Ended say the condition started or stopped flapping at
	// this sync.
	Started, Ended bool
	// Wake is when the limiter next needs a sync (zero: none).
	Wake time.Time
}

// Limit passes one condition's state through its change limiter. rules are
// the condition's rules; published is what was last published (nil: never).
//
// A change that puts the condition's taints on takes one token; one that
// lifts them takes one too but needs two in the bucket, so a token is
// always left to put them back on: a condition that flaps stops on the
// side that protects new pods, and the changes never exceed the bucket.
// Out of tokens, the condition is held there (reason Flapping) until its
// input has been stable for the cool-down and the bucket allows the change
// back; then its last state wins. Nothing is lost: the limiter only delays.
func Limit(cfg LimiterConfig, st LimitState, rules []Rule, in State, published *Published, now time.Time) Limited {
	if cfg.Burst <= 0 || len(rules) == 0 {
		return Limited{State: in, Next: st}
	}
	st = refill(cfg, st, now)
	if st.InputSince.IsZero() || in.Status != st.Input {
		st.Input, st.InputSince = in.Status, now
	}
	on := applies(rules, in.Status)
	if st.Flapping {
		return release(cfg, st, rules, in, on, now)
	}
	was := published != nil && applies(rules, published.Status)
	if on == was {
		return Limited{State: in, Next: st}
	}
	if st.Tokens+epsilon >= tokensFor(on) {
		st.Tokens--
		return Limited{State: in, Next: st}
	}
	st.Flapping, st.FlappingSince = true, now
	out := held(cfg, st, rules, in, on, now)
	out.Started = true
	return out
}

// release ends flapping once the input has been stable for the cool-down
// and the bucket allows the change the input asks for.
func release(cfg LimiterConfig, st LimitState, rules []Rule, in State, on bool, now time.Time) Limited {
	stable := !now.Before(st.InputSince.Add(cfg.CoolDown))
	if stable && (on || st.Tokens+epsilon >= tokensFor(false)) {
		if !on {
			st.Tokens--
		}
		st.Flapping, st.FlappingSince = false, time.Time{}
		return Limited{State: in, Next: st, Ended: true}
	}
	return held(cfg, st, rules, in, on, now)
}

// held is the flapping state: the input's status if it applies the rules,
// else the first rule's status; reason Flapping; a message that says what
// the input is and when it may be followed again.
func held(cfg LimiterConfig, st LimitState, rules []Rule, in State, on bool, now time.Time) Limited {
	status := in.Status
	if !on {
		status = rules[0].Status
	}
	wake := st.InputSince.Add(cfg.CoolDown)
	if !on {
		wake = latest(wake, tokensAt(cfg, st, tokensFor(false)))
	}
	msg := fmt.Sprintf("its taints changed more than the change limiter allows (%d back to back, one more every %s); held %s since %s until stable for %s; now %s",
		cfg.Burst, cfg.Refill, status, st.FlappingSince.UTC().Format(time.RFC3339), cfg.CoolDown, in.Status)
	if in.Reason != "" {
		msg += " (" + in.Reason + ")"
	}
	if in.Message != "" {
		msg += ": " + in.Message
	}
	return Limited{
		State: State{Status: status, Reason: ReasonFlapping, Message: msg, LastTransitionTime: in.LastTransitionTime},
		Next:  st, Wake: wake,
	}
}

// epsilon absorbs float rounding in the bucket: a token due at a time is
// there at that time.
const epsilon = 1e-6

// tokensFor is how many tokens must be in the bucket for a change that
// puts the taints on (1) or lifts them (2: one stays for putting them back).
func tokensFor(on bool) float64 {
	if on {
		return 1
	}
	return 2
}

// refill adds the tokens earned since st.At, up to the burst.
func refill(cfg LimiterConfig, st LimitState, now time.Time) LimitState {
	if st.At.IsZero() {
		st.Tokens, st.At = float64(cfg.Burst), now
		return st
	}
	if now.After(st.At) && cfg.Refill > 0 {
		st.Tokens = min(float64(cfg.Burst), st.Tokens+float64(now.Sub(st.At))/float64(cfg.Refill))
	}
	if now.After(st.At) {
		st.At = now
	}
	return st
}

// tokensAt is when the bucket holds n tokens.
func tokensAt(cfg LimiterConfig, st LimitState, n float64) time.Time {
	if st.Tokens+epsilon >= n || cfg.Refill <= 0 {
		return st.At
	}
	return st.At.Add(time.Duration((n - st.Tokens) * float64(cfg.Refill)))
}

// applies reports whether any of rules applies at status s.
func applies(rules []Rule, s corev1.ConditionStatus) bool {
	for _, r := range rules {
		if r.Applies(s) {
			return true
		}
	}
	return false
}

// latest is the later of two times.
func latest(x, y time.Time) time.Time {
	if y.After(x) {
		return y
	}
	return x
}
