package taints

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Damping says how long a verdict must hold before a condition follows it.
type Damping struct {
	// For is how long a bad (True) or undecidable (Unknown) verdict must
	// hold before the condition takes it.
	For time.Duration
	// ClearAfter is how long good (False) verdicts must hold before a True
	// or Unknown condition clears.
	ClearAfter time.Duration
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

	cur    State // what the condition says now
	hasCur bool  // false until a state is adopted or decided

	obs      State     // latest verdict (LastTransitionTime unused)
	obsSince time.Time // when the verdict last changed status
	hasObs   bool
}

// NewDamper returns a Damper with no state: the condition is undecided until
// Adopt or enough observations decide it.
func NewDamper(d Damping) *Damper { return &Damper{damping: d} }

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
func (d *Damper) Observe(status corev1.ConditionStatus, reason, message string, now time.Time) bool {
	if !d.hasObs || d.obs.Status != status {
		d.obsSince = now
	}
	d.obs = State{Status: status, Reason: reason, Message: message}
	d.hasObs = true
	return d.evaluate(now)
}

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
	if d.hasCur && d.cur.Status == d.obs.Status {
		return time.Time{}, false
	}
	if !d.hasCur && d.obs.Status != corev1.ConditionTrue {
		return time.Time{}, false // decided immediately in evaluate
	}
	return d.obsSince.Add(d.hold(d.obs.Status)), true
}

// hold is how long a verdict must persist before the condition takes it.
func (d *Damper) hold(s corev1.ConditionStatus) time.Duration {
	if s == corev1.ConditionFalse {
		return d.damping.ClearAfter
	}
	return d.damping.For
}

func (d *Damper) evaluate(now time.Time) bool {
	if !d.hasObs {
		return false
	}
	if d.hasCur && d.cur.Status == d.obs.Status {
		// Same status: refresh the words, never the transition time.
		changed := d.cur.Reason != d.obs.Reason || d.cur.Message != d.obs.Message
		d.cur.Reason, d.cur.Message = d.obs.Reason, d.obs.Message
		return changed
	}
	if !d.hasCur && d.obs.Status != corev1.ConditionTrue {
		// Nothing published yet: a healthy or undecidable verdict needs no
		// proof, there is no taint it could wrongly lift.
		d.cur = State{Status: d.obs.Status, Reason: d.obs.Reason, Message: d.obs.Message, LastTransitionTime: now}
		d.hasCur = true
		return true
	}
	if now.Sub(d.obsSince) < d.hold(d.obs.Status) {
		return false
	}
	d.cur = State{Status: d.obs.Status, Reason: d.obs.Reason, Message: d.obs.Message, LastTransitionTime: now}
	d.hasCur = true
	return true
}
