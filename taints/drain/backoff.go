package drain

import "time"

// A pod the Eviction API refuses, or whose eviction fails, is tried again
// after BackoffInitial, then after twice the last wait, at most
// BackoffMax: a PodDisruptionBudget that allows nothing now is asked
// again soon, but one that stays shut is not hammered. kubectl drain
// retries every 5 s for as long as it runs.
const (
	BackoffInitial = 5 * time.Second
	BackoffMax     = 60 * time.Second
)

// Backoff is how long one pod waits before its next try.
type Backoff struct {
	// Until is when the pod may be tried again.
	Until time.Time
	// Delay is the wait Until was set with (0: never backed off).
	Delay time.Duration
}

// Next is the back-off after one more refused or failed try at now:
// BackoffInitial the first time, then twice the last delay, at most
// BackoffMax.
func (b Backoff) Next(now time.Time) Backoff {
	d := BackoffInitial
	if b.Delay > 0 {
		d = min(2*b.Delay, BackoffMax)
	}
	return Backoff{Until: now.Add(d), Delay: d}
}

// Waiting reports whether the pod must still wait at now.
func (b Backoff) Waiting(now time.Time) bool { return now.Before(b.Until) }

// Op is what a pass does to a pod that must go.
type Op int

const (
	// OpNone: nothing this pass (it backs off).
	OpNone Op = iota
	// OpEvict: a policy/v1 Eviction, with the pod's own grace period.
	OpEvict
	// OpDelete: a forced DELETE, with the pod's own grace period.
	OpDelete
)

func (o Op) String() string {
	switch o {
	case OpEvict:
		return "evict"
	case OpDelete:
		return "delete"
	}
	return "none"
}

// Outcome is how one try came out.
type Outcome int

const (
	// Evicted: the Eviction API accepted the eviction.
	Evicted Outcome = iota
	// Deleted: the forced DELETE was accepted.
	Deleted
	// Vanished: the pod was already gone (404, or its UID no longer
	// matches: a new pod took its name).
	Vanished
	// Refused: the Eviction API refused the pod for a
	// PodDisruptionBudget (429, or the budget is misconfigured).
	Refused
	// Failed: any other error; the pod is tried again after its back-off.
	Failed
)

// Result is how Outcome is counted in a pass's results (and the
// coordinator's evictions metric).
func (o Outcome) Result() string {
	switch o {
	case Evicted:
		return "evicted"
	case Deleted:
		return "deleted"
	case Vanished:
		return "gone"
	case Refused:
		return "refused"
	}
	return "failed"
}

// PodState is what a drain remembers of one pod that has not gone yet,
// between passes.
type PodState struct {
	Backoff Backoff
	// Refused: the Eviction API refused the pod's last eviction. A forced
	// pass deletes such a pod.
	Refused bool
	// Last is the op Backoff was set after.
	Last Op
	// Blocker is what the last try came to.
	Blocker *Blocker
}

// NextOp is what to do now with a pod Classify says to Evict, given what
// the drain remembers of it. Unforced: evict unless it backs off. Forced
// (the deadline passed and the request asked for force): a pod whose
// eviction was refused is deleted at once, without waiting out the
// back-off its refusal set; a failed DELETE backs off as a failed
// eviction does.
func NextOp(st PodState, force bool, now time.Time) Op {
	switch {
	case force && st.Refused && (st.Last != OpDelete || !st.Backoff.Waiting(now)):
		return OpDelete
	case st.Backoff.Waiting(now):
		return OpNone
	}
	return OpEvict
}

// After is what the drain remembers of a pod after op came out as out at
// now (b: the blocker of a refusal or failure); done says the pod needs
// nothing more (it was evicted, deleted or is gone) and is forgotten.
func (st PodState) After(op Op, out Outcome, b *Blocker, now time.Time) (next PodState, done bool) {
	switch out {
	case Evicted, Deleted, Vanished:
		return PodState{}, true
	case Refused:
		st.Refused = true
	}
	st.Backoff = st.Backoff.Next(now)
	st.Last = op
	st.Blocker = b
	return st, false
}
