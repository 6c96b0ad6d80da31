package fleet

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Projection is Decide's answer about one node once that node's own
// pending change is counted: the fleet as the coordinator will see it
// after the node's agent has published its conditions and asked for
// NoExecute. `selftaint explain` and `selftaint fault inject` ask it, so
// that what they say about a node includes the guard its own condition
// trips.
type Projection struct {
	// Decision is Decide's on the fleet with the node as projected.
	Decision Decision
	// Holds are the guard's scopes that hold a condition the node asks
	// for, in the projected decision, by condition then scope (the fleet
	// first).
	Holds []GuardHold
}

// GuardHold is one scope of the guard that holds a condition a node asks
// NoExecute for: no grant for it is made there, no new taint for it goes
// on, and the NoExecute taints held for it come off, until it resets.
type GuardHold struct {
	Condition corev1.NodeConditionType
	// Scope is FleetScope or the node's zone; State its judgement.
	Scope string
	State Scope
	// ByThisNode: it trips only with the node's change counted (Decide on
	// the fleet as it is leaves it untripped).
	ByThisNode bool
	// Threshold is the guard's threshold (percent); ResetAt how many of
	// the scope's nodes at most may report the condition for it to reset,
	// once that has lasted CoolDown.
	Threshold int
	ResetAt   int
	CoolDown  time.Duration
	// Off are the nodes of the scope (this one included) that carry one of
	// selftaint's NoExecute taints and report the condition: their agents
	// take NoExecute for it off while the guard holds.
	Off []string
}

// Project asks Decide about in's fleet with node in place of the node of
// that name (added when in has none): the node as its agent will publish
// it (NodeView of the Node with its pending conditions and request). A
// condition the node already reported, or a request it already made, is
// in both views alike: nothing is counted twice. It also asks Decide about
// in as it is, to tell which of the guard's trips the node's change makes.
func Project(in Input, node Node) Projection {
	before := Decide(in)
	pin := in
	pin.Nodes = make([]Node, 0, len(in.Nodes)+1)
	replaced := false
	for _, n := range in.Nodes {
		if n.Name == node.Name {
			if !replaced {
				pin.Nodes = append(pin.Nodes, node)
			}
			replaced = true
			continue
		}
		pin.Nodes = append(pin.Nodes, n)
	}
	if !replaced {
		pin.Nodes = append(pin.Nodes, node)
	}
	p := Projection{Decision: Decide(pin)}
	if node.Request == nil {
		return p
	}
	cfg := in.Config.Guard
	resetPct := max(cfg.Threshold-cfg.ResetMargin, 0)
	conds := slices.Clone(node.Request.Conditions)
	slices.Sort(conds)
	for _, c := range slices.Compact(conds) {
		for _, scope := range []string{FleetScope, node.Zone} {
			st, ok := p.Decision.Guard.Conditions[c][scope]
			if !ok || !st.Tripped || slices.ContainsFunc(p.Holds, func(h GuardHold) bool { return h.Condition == c && h.Scope == scope }) {
				continue
			}
			h := GuardHold{
				Condition: c, Scope: scope, State: st,
				ByThisNode: !before.Guard.Conditions[c][scope].Tripped,
				Threshold:  cfg.Threshold, ResetAt: resetPct * st.Nodes / 100, CoolDown: cfg.CoolDown,
			}
			for _, n := range pin.Nodes {
				if n.CarriesNoExecute && slices.Contains(n.Reporting, c) && (scope == FleetScope || n.Zone == scope) && !slices.Contains(h.Off, n.Name) {
					h.Off = append(h.Off, n.Name)
				}
			}
			slices.Sort(h.Off)
			p.Holds = append(p.Holds, h)
		}
	}
	return p
}

// Describe says what the hold means for the node, in one sentence: where
// the guard trips (or is tripped) and on how many nodes, that no grant is
// made there, which NoExecute taints come off, and when it would reset.
func (h GuardHold) Describe() string {
	var b strings.Builder
	t := tally{reporting: h.State.Unhealthy, nodes: h.State.Nodes}
	if h.ByThisNode {
		fmt.Fprintf(&b, "with this node's %s counted, the disruption guard trips %s: %d of %d nodes (%s) would report it, more than the threshold %d%%",
			h.Condition, ScopeWhere(h.Scope), t.reporting, t.nodes, t.share(), h.Threshold)
	} else {
		fmt.Fprintf(&b, "the disruption guard for %s is tripped %s: %d of %d nodes (%s) report it, this node counted, more than the threshold %d%%",
			h.Condition, ScopeWhere(h.Scope), t.reporting, t.nodes, t.share(), h.Threshold)
	}
	fmt.Fprintf(&b, "; while it holds, no NoExecute grant and no new taint for %s are made there", h.Condition)
	if len(h.Off) > 0 {
		fmt.Fprintf(&b, ", and the NoExecute taints held for it come off (%s)", strings.Join(h.Off, ", "))
	}
	fmt.Fprintf(&b, "; it resets once at most %d of %d nodes report it, for %s", h.ResetAt, h.State.Nodes, h.CoolDown)
	return b.String()
}

// ScopeWhere names a guard scope in a sentence: "fleet-wide", "in zone
// a", or, for the nodes without a zone label (which the guard judges
// together, as one zone), "among the nodes without a zone".
func ScopeWhere(scope string) string {
	switch scope {
	case FleetScope:
		return "fleet-wide"
	case "":
		return "among the nodes without a zone"
	}
	return "in zone " + scope
}
