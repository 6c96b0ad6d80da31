package memory

import (
	"fmt"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// The kernel's bounds on a PSI trigger (kernel/sched/psi.c).
const (
	// MinTriggerWindow and MaxTriggerWindow bound a trigger's window.
	MinTriggerWindow = 500 * time.Millisecond
	MaxTriggerWindow = 10 * time.Second
	// UnprivilegedWindowStep: without CAP_SYS_RESOURCE the kernel accepts
	// only windows that are a multiple of it.
	UnprivilegedWindowStep = 2 * time.Second
)

// StallRule flags memory pressure when tasks stalled on memory for Stall
// or more within Window: the verdict of a PSI trigger "<line> <stall>
// <window>" the probe arms on the pressure file. A zero Stall turns the
// rule off.
type StallRule struct {
	Stall  time.Duration
	Window time.Duration
}

// IsZero reports whether the rule is off.
func (r StallRule) IsZero() bool { return r.Stall == 0 }

// String is the rule in words: "100ms within 1s".
func (r StallRule) String() string { return fmt.Sprintf("%v within %v", r.Stall, r.Window) }

// StallRules are the PSI trigger rules, one per line of the pressure file.
type StallRules struct {
	// Some: at least one task stalled on memory.
	Some StallRule
	// Full: all non-idle tasks stalled on memory at once.
	Full StallRule
}

// validate checks that the rule is one the kernel takes (except the 2s
// step, which depends on the agent's privileges and is reported when the
// trigger is armed). field is the rule's Go field path.
func (r StallRule) validate(field string) []probes.FieldError {
	if r.IsZero() {
		return nil
	}
	var errs []probes.FieldError
	if r.Window < MinTriggerWindow || r.Window > MaxTriggerWindow {
		errs = append(errs, probes.FieldError{Field: field + ".Window", Detail: fmt.Sprintf("%v is outside the kernel's PSI trigger windows, %v to %v (a multiple of %v without CAP_SYS_RESOURCE)", r.Window, MinTriggerWindow, MaxTriggerWindow, UnprivilegedWindowStep)})
	}
	if r.Window%time.Microsecond != 0 {
		errs = append(errs, probes.FieldError{Field: field + ".Window", Detail: fmt.Sprintf("%v is not a whole number of microseconds", r.Window)})
	}
	switch {
	case r.Stall < 0:
		errs = append(errs, probes.FieldError{Field: field + ".Stall", Detail: fmt.Sprintf("%v is negative (0 turns the rule off)", r.Stall)})
	case r.Stall > r.Window:
		errs = append(errs, probes.FieldError{Field: field + ".Stall", Detail: fmt.Sprintf("%v is longer than the window %v", r.Stall, r.Window)})
	case r.Stall < time.Microsecond:
		errs = append(errs, probes.FieldError{Field: field + ".Stall", Detail: fmt.Sprintf("%v is below the kernel's 1µs resolution", r.Stall)})
	}
	return errs
}

// stallState is what the probe knows of one line's stall rule between
// runs.
type stallState struct {
	// Pressure is the verdict so far.
	Pressure bool
	// Base is when Total was read; zero before the first read.
	Base time.Time
	// Total is the line's cumulative stall ("total=", µs) at Base.
	Total uint64
	// Stalled is the stall measured over Span at the last decision (both
	// 0 when it measured nothing), for the message.
	Stalled, Span time.Duration
	// Fired says the last decision had the kernel's verdict: the rule's
	// trigger fired since the one before.
	Fired bool
}

// stallSample is one run's evidence for a line's stall rule.
type stallSample struct {
	// Now is when Total was read.
	Now time.Time
	// Total is the line's cumulative stall ("total=", µs).
	Total uint64
	// Fired: the rule's trigger fired since the last decision. The kernel
	// fires it when tasks stalled Stall or more within Window, at most
	// once per Window while the stall goes on.
	Fired bool
}

// decideStall is the stall rule's state machine. The kernel's verdict (a
// trigger fired) is pressure at once. Otherwise the probe measures the
// stall itself from the cumulative total since Base: over a span of at
// least Window, pressure holds while the stall's share of the span is
// at least Stall's share of Window (the trigger's rate), and the base
// moves on to now; over a shorter span a stall of Stall or more is
// pressure, and less says nothing of the part of the window before Base,
// so the verdict stays. A total that went backwards is no evidence: the
// verdict stays and the base restarts. While in pressure the probe is run
// about once per Window (see Probe.Watch), so the end of a stall is seen
// within about two windows.
func decideStall(r StallRule, s stallState, in stallSample) stallState {
	next := stallState{Pressure: s.Pressure, Base: s.Base, Total: s.Total, Fired: in.Fired}
	if s.Base.IsZero() || in.Total < s.Total || !in.Now.After(s.Base) {
		next.Base, next.Total = in.Now, in.Total
		if in.Fired {
			next.Pressure = true
		}
		return next
	}
	span := in.Now.Sub(s.Base)
	stalled := time.Duration(in.Total-s.Total) * time.Microsecond
	next.Stalled, next.Span = stalled, span
	switch {
	case in.Fired:
		next.Pressure = true
	case span >= r.Window:
		// stalled/span >= Stall/Window, as products (no division).
		next.Pressure = float64(stalled)*float64(r.Window) >= float64(r.Stall)*float64(span)
	case stalled >= r.Stall:
		next.Pressure = true
	}
	if in.Fired || span >= r.Window {
		next.Base, next.Total = in.Now, in.Total
	}
	return next
}

// recheckAfter is how long the PSI watch waits, with no trigger firing,
// before it runs the probe again: while any rule is in pressure (or has
// a fire the probe has not judged yet), a little over the shortest such
// rule's window, so the probe sees the stall end without polling when
// there is none; otherwise forever (-1).
func recheckAfter(rules [2]StallRule, states [2]stallState, unjudged [2]bool) time.Duration {
	d := time.Duration(-1)
	for i, r := range rules {
		if r.IsZero() || !(states[i].Pressure || unjudged[i]) {
			continue
		}
		if w := r.Window + r.Window/10; d < 0 || w < d {
			d = w
		}
	}
	return d
}
