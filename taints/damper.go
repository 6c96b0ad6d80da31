package taints

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Damping says how long a verdict must hold before a condition follows it.
type Damping struct {
	// For is how long a Problem or Unknown verdict must hold before the
	// condition takes it.
	For time.Duration
	// ClearAfter is how long OK verdicts must hold before a condition that
	// shows a problem (or Unknown) clears.
	ClearAfter time.Duration
}

// Verdict is what a probe found, before it becomes a condition status:
// damping works on verdicts, so a condition whose healthy status is True
// (a Ready-style condition) damps the same way round as one whose healthy
// status is False.
type Verdict string

// The verdicts.
const (
	VerdictOK      Verdict = "OK"
	VerdictProblem Verdict = "Problem"
	VerdictUnknown Verdict = "Unknown"
)

// StatusFor is the status of a condition whose healthy status is healthy
// (False for conditions that say "there is a problem", True for Ready)
// given verdict v: OK is healthy, a Problem the opposite, anything else
// Unknown.
func StatusFor(v Verdict, healthy corev1.ConditionStatus) corev1.ConditionStatus {
	switch {
	case v == VerdictOK:
		return healthy
	case v == VerdictProblem && healthy == corev1.ConditionTrue:
		return corev1.ConditionFalse
	case v == VerdictProblem:
		return corev1.ConditionTrue
	default:
		return corev1.ConditionUnknown
	}
}

// verdictOf is the verdict a condition status shows.
func verdictOf(s, healthy corev1.ConditionStatus) Verdict {
	switch s {
	case healthy:
		return VerdictOK
	case corev1.ConditionUnknown:
		return VerdictUnknown
	default:
		return VerdictProblem
	}
}

// State is a condition as selftaint publishes it.
type State struct {
	Status  corev1.ConditionStatus
	Reason  string
	Message string
	// LastTransitionTime is when Status last changed.
	LastTransitionTime time.Time
}

// Damper turns a stream of raw verdicts into a condition that flips only
// after the new verdict has held for the configured time, so one bad sample
// never taints a node and one good sample never untaints it. A Damper is not
// safe for concurrent use; the agent guards it.
type Damper struct {
	damping Damping
	healthy corev1.ConditionStatus // the condition's status when all is well

	cur    State // what the condition says now
	hasCur bool  // false until a state is adopted or decided

	obs      Verdict // latest verdict
	obsWords State   // its reason and message
	obsSince time.Time
	hasObs   bool
}

// NewDamper returns a Damper for a condition whose status is healthy when
// all is well (False, or True for a Ready-style condition), with no state:
// the condition is undecided until Adopt or enough observations decide it.
func NewDamper(d Damping, healthy corev1.ConditionStatus) *Damper {
	return &Damper{damping: d, healthy: healthy}
}

// Adopt sets the current state, typically from the condition selftaint
// finds on its Node at start-up, so that a restart continues where the last
// run left off instead of starting over. Observations already made are kept
// and re-evaluated against the adopted state at now.
func (d *Damper) Adopt(s State, now time.Time) {
	d.cur, d.hasCur = s, true
	d.evaluate(now)
}

// Observe records one raw verdict at now and reports whether the condition's
// state (status, reason or message) changed as a result.
func (d *Damper) Observe(v Verdict, reason, message string, now time.Time) bool {
	if !d.hasObs || d.obs != v {
		d.obsSince = now
	}
	d.obs, d.obsWords = v, State{Reason: reason, Message: message}
	d.hasObs = true
	return d.evaluate(now)
}

// curVerdict is the verdict the current state shows.
func (d *Damper) curVerdict() Verdict { return verdictOf(d.cur.Status, d.healthy) }

// Tick re-evaluates a pending flip at now (call it at NextChange) and
// reports whether the state changed.
func (d *Damper) Tick(now time.Time) bool { return d.evaluate(now) }

// State returns the current condition and whether it is decided.
func (d *Damper) State() (State, bool) { return d.cur, d.hasCur }

// NextChange returns when a pending flip will happen if the latest verdict
// keeps holding, and false if nothing is pending.
func (d *Damper) NextChange() (time.Time, bool) {
	if !d.hasObs {
		return time.Time{}, false
	}
	if d.hasCur && d.curVerdict() == d.obs {
		return time.Time{}, false
	}
	if !d.hasCur && d.obs != VerdictProblem {
		return time.Time{}, false // decided immediately in evaluate
	}
	return d.obsSince.Add(d.hold(d.obs)), true
}

// hold is how long a verdict must persist before the condition takes it.
func (d *Damper) hold(v Verdict) time.Duration {
	if v == VerdictOK {
		return d.damping.ClearAfter
	}
	return d.damping.For
}

func (d *Damper) evaluate(now time.Time) bool {
	if !d.hasObs {
		return false
	}
	if d.hasCur && d.curVerdict() == d.obs {
		// Same verdict: refresh the words, never the transition time.
		changed := d.cur.Reason != d.obsWords.Reason || d.cur.Message != d.obsWords.Message
		d.cur.Reason, d.cur.Message = d.obsWords.Reason, d.obsWords.Message
		return changed
	}
	if !d.hasCur && d.obs != VerdictProblem {
		// Nothing published yet: a healthy or undecidable verdict needs no
		// proof, there is no taint it could wrongly lift.
		d.take(now)
		return true
	}
	if now.Sub(d.obsSince) < d.hold(d.obs) {
		return false
	}
	d.take(now)
	return true
}

// take makes the latest verdict the condition's state, flipped at now.
func (d *Damper) take(now time.Time) {
	d.cur = State{Status: StatusFor(d.obs, d.healthy), Reason: d.obsWords.Reason, Message: d.obsWords.Message, LastTransitionTime: now}
	d.hasCur = true
}
