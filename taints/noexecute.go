package taints

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/fleet"
)

// Reasons of the Events that say why a NoExecute rule's taint is at its
// fallback effect.
const (
	// ReasonNoExecuteSuspended: the condition flaps, the disruption guard
	// is tripped for it, or the coordinator has not been heard from.
	ReasonNoExecuteSuspended = "NoExecuteSuspended"
	// ReasonNoExecuteWaiting: the node asked the coordinator for a grant
	// and has none yet (the coordinator tells NoExecuteBudgetExhausted
	// when the budget is why: only it knows).
	ReasonNoExecuteWaiting = "NoExecuteWaiting"
)

// NoExecuteInput is what this node knows of the coordinator's decisions.
type NoExecuteInput struct {
	// Granted: the node holds a NoExecute grant now, until GrantUntil.
	Granted    bool
	GrantUntil time.Time
	// Guard is the disruption guard last read (nil: never read).
	// GuardFresh says it has been renewed recently enough to trust for
	// NoExecute; GuardStaleAt is when it stops being.
	Guard        *fleet.GuardState
	GuardFresh   bool
	GuardStaleAt time.Time
	// GuardUnread: the node follows a guard but has neither read it nor
	// found that there is none (a Guard read wins) (the agent has just started, the
	// coordinator's namespace cannot be read, or the guard there cannot be
	// decoded and no good version was read before). The guard may be
	// tripped for anything, so it holds every condition's taints that are
	// not on yet, as a tripped guard would; removals stay free. False for
	// a node that follows no guard (no NoExecute options), and once the
	// guard has been read or found absent by a successful read.
	GuardUnread bool
	// AliveEvery is how often a holder refreshes its request's liveness
	// stamp (a third of the grant's TTL).
	AliveEvery time.Duration
}

// Gate is what one condition's rules may do now.
type Gate struct {
	// NoExecute: its NoExecute rules' taints may be on (else only their
	// fallbacks).
	NoExecute bool
	// Hold: the disruption guard is tripped for it here, or has not been
	// read yet: none of its taints that is not already on the Node is
	// added.
	Hold bool
	// Unread: it holds because the guard has not been read yet
	// (NoExecuteInput.GuardUnread), not because it is tripped.
	Unread bool
	// Reason and Message say why a NoExecute rule that applies is at its
	// fallback (empty when none is).
	Reason, Message string
}

// NoExecuteVerdict is a gate for the report: the condition, whether one of
// its NoExecute rules applies, and the gate.
type NoExecuteVerdict struct {
	Condition corev1.NodeConditionType
	Gate
}

// PlanGates decides each condition's gate: NoExecute only while the node
// holds a grant, the guard is fresh and not tripped for the condition in
// the node's zone, and the condition is not flapping; the guard, fresh or
// not (its last state is kept), holds what it trips, and a guard not read
// yet (GuardUnread) holds every condition (it judges each condition a rule
// taints for). statuses are the conditions decided now.
func PlanGates(rules []Rule, statuses map[corev1.NodeConditionType]corev1.ConditionStatus, flapping map[corev1.NodeConditionType]bool, zone string, ne NoExecuteInput) map[corev1.NodeConditionType]Gate {
	gates := map[corev1.NodeConditionType]Gate{}
	for c, rs := range RulesByCondition(rules) {
		var g Gate
		var why string
		switch {
		case ne.Guard != nil:
			g.Hold, why = ne.Guard.Tripped(c, zone)
		case ne.GuardUnread:
			g.Hold, g.Unread = true, true
		}
		g.NoExecute = ne.Granted && ne.GuardFresh && !g.Hold && !flapping[c]
		if s, ok := statuses[c]; ok && !g.NoExecute && noExecuteApplies(rs, s) {
			g.Reason, g.Message = suspension(c, why, flapping[c], ne)
		}
		gates[c] = g
	}
	return gates
}

// suspension says why condition c's NoExecute rule is at its fallback.
func suspension(c corev1.NodeConditionType, guardWhy string, flapping bool, ne NoExecuteInput) (string, string) {
	switch {
	case flapping:
		return ReasonNoExecuteSuspended, fmt.Sprintf("%s is flapping: NoExecute waits until it is stable", c)
	case guardWhy != "":
		return ReasonNoExecuteSuspended, guardWhy + "; NoExecute is suspended for it"
	case ne.Guard == nil:
		return ReasonNoExecuteSuspended, "the disruption guard has never been read (no coordinator running, or it cannot be read): NoExecute needs a current word from the coordinator"
	case !ne.GuardFresh:
		return ReasonNoExecuteSuspended, fmt.Sprintf("the disruption guard was last renewed at %s and is stale (the coordinator is absent or cut off): NoExecute needs a current word from the coordinator",
			ne.Guard.RenewTime.UTC().Format(time.RFC3339))
	default:
		return ReasonNoExecuteWaiting, "asked the coordinator for a NoExecute grant and holds none yet"
	}
}

// noExecuteApplies reports whether one of rules is a NoExecute rule that
// applies at status s.
func noExecuteApplies(rules []Rule, s corev1.ConditionStatus) bool {
	for _, r := range rules {
		if r.Taint.Effect == corev1.TaintEffectNoExecute && r.Applies(s) {
			return true
		}
	}
	return false
}

// Wanted is the conditions for which the node asks for a NoExecute grant:
// those whose NoExecute rule applies and that are not flapping, sorted.
func Wanted(rules []Rule, statuses map[corev1.NodeConditionType]corev1.ConditionStatus, flapping map[corev1.NodeConditionType]bool) []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for c, rs := range RulesByCondition(rules) {
		if s, ok := statuses[c]; ok && !flapping[c] && noExecuteApplies(rs, s) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// RequestInput decides the node's NoExecute request annotation.
type RequestInput struct {
	// Wanted are the conditions asking for NoExecute (none: no request).
	Wanted []corev1.NodeConditionType
	// Granted: the node holds a grant, so the request carries a liveness
	// stamp refreshed every AliveEvery.
	Granted    bool
	AliveEvery time.Duration
}

// PlanRequest decides the fleet.RequestAnnotation value on node: absent
// when nothing is wanted; else since when the node has asked (kept from
// the annotation, now for a new or unreadable one), the conditions, and
// while granted a liveness stamp refreshed every AliveEvery. It returns the
// value ("" to remove) and whether it changes.
func PlanRequest(node *corev1.Node, in RequestInput, now time.Time) (string, bool) {
	raw, had := node.Annotations[fleet.RequestAnnotation]
	if len(in.Wanted) == 0 {
		return "", had
	}
	old, err := fleet.ParseRequest(raw)
	r := fleet.Request{Since: now, Conditions: in.Wanted}
	if had && err == nil {
		r.Since = old.Since
	}
	if in.Granted {
		alive := now
		if err == nil && old.Alive != nil && now.Before(old.Alive.Add(in.AliveEvery)) && !old.Alive.After(now) {
			alive = *old.Alive
		}
		r.Alive = &alive
	}
	v := r.Format()
	return v, !had || v != raw
}

// AliveDue is when a holder must refresh its request's liveness stamp
// (zero: it need not).
func AliveDue(node *corev1.Node, in RequestInput, now time.Time) time.Time {
	if !in.Granted || len(in.Wanted) == 0 {
		return time.Time{}
	}
	r, err := fleet.ParseRequest(node.Annotations[fleet.RequestAnnotation])
	if err != nil || r.Alive == nil || r.Alive.After(now) {
		return now.Add(in.AliveEvery)
	}
	return r.Alive.Add(in.AliveEvery)
}
