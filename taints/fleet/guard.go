package fleet

import (
	"maps"
	"math"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// tally is one scope's count for one condition.
type tally struct {
	reporting, nodes int
}

// share is the tally's share of nodes reporting, for messages.
func (t tally) share() string {
	if t.nodes == 0 {
		return "no nodes"
	}
	v := math.Round(10000*float64(t.reporting)/float64(t.nodes)) / 100
	return strconv.FormatFloat(v, 'f', -1, 64) + "%"
}

// above reports whether more than pct percent of the nodes report (in
// whole numbers, so no rounding decides a trip).
func (t tally) above(pct int) bool { return 100*t.reporting > pct*t.nodes }

// decideGuard judges every watched condition in every zone and in the
// fleet, from the nodes as they are now, and decides the guard and whether
// to write it. A condition no longer watched is judged like a scope no
// longer judged: what is tripped resets after its cool-down, never at once.
func (v *view) decideGuard() {
	prev := v.in.Memory.Guard
	g := GuardState{RenewTime: prev.RenewTime, Leader: v.in.Leader}
	changed := false
	conds := slices.Collect(maps.Keys(v.in.Config.Watched))
	for c := range prev.Conditions {
		if _, ok := v.in.Config.Watched[c]; !ok {
			conds = append(conds, c)
		}
	}
	slices.Sort(conds)
	for _, c := range conds {
		scopes, ch := v.judgeCondition(c, prev.Conditions[c])
		changed = changed || ch
		if len(scopes) > 0 {
			if g.Conditions == nil {
				g.Conditions = map[corev1.NodeConditionType]map[string]Scope{}
			}
			g.Conditions[c] = scopes
		}
	}
	renewAt := prev.RenewTime.Add(v.in.Config.Guard.RenewEvery)
	v.writeGuard = changed || prev.RenewTime.IsZero() || !v.now.Before(renewAt)
	if v.writeGuard {
		g.RenewTime = v.now
	}
	v.guard = g
}

// tallies counts condition c's reporting nodes in every zone and in the
// fleet (FleetScope).
func (v *view) tallies(c corev1.NodeConditionType) map[string]tally {
	ts := map[string]tally{}
	for _, n := range v.nodes {
		r := 0
		if slices.Contains(n.Reporting, c) {
			r = 1
		}
		for _, s := range []string{n.Zone, FleetScope} {
			t := ts[s]
			t.nodes++
			t.reporting += r
			ts[s] = t
		}
	}
	return ts
}

// judgeCondition judges c in every scope that is judged now or was
// tripped, and returns the scopes to keep (tripped, or with nodes
// reporting) and whether one tripped or reset.
func (v *view) judgeCondition(c corev1.NodeConditionType, prev map[string]Scope) (map[string]Scope, bool) {
	ts := v.tallies(c)
	_, watched := v.in.Config.Watched[c]
	minNodes := max(v.in.Config.Guard.MinNodes, 1)
	judged := map[string]bool{}
	if watched {
		for s, t := range ts {
			judged[s] = t.nodes >= minNodes
		}
	}
	names := map[string]bool{}
	for s, ok := range judged {
		names[s] = ok
	}
	for s, sc := range prev {
		names[s] = names[s] || sc.Tripped
	}
	out := map[string]Scope{}
	changed := false
	for _, s := range slices.Sorted(maps.Keys(names)) {
		if !names[s] {
			continue
		}
		sc, keep, ch := v.judgeScope(c, s, prev[s], ts[s], judged[s])
		changed = changed || ch
		if keep {
			out[s] = sc
		}
	}
	return out, changed
}

// judgeScope is one condition's guard in one scope: it trips when more
// than Threshold percent report; a tripped one resets once the share has
// stayed at or below Threshold - ResetMargin (or the scope has not been
// judged) for CoolDown. It returns the new scope, whether to keep it in the
// state, and whether it tripped or reset.
func (v *view) judgeScope(c corev1.NodeConditionType, name string, prev Scope, t tally, judged bool) (Scope, bool, bool) {
	cfg := v.in.Config.Guard
	s := prev
	s.Unhealthy, s.Nodes = t.reporting, t.nodes
	if !v.in.Memory.Decided {
		// A new leader: a cool-down counts only what it has seen itself.
		s.BelowSince = nil
	}
	if !s.Tripped {
		s.BelowSince = nil
		if !judged || !t.above(cfg.Threshold) {
			return s, t.reporting > 0, false
		}
		s.Tripped, s.Since = true, v.now
		v.event("", true, EventGuardTripped,
			"the disruption guard for %s tripped %s: %d of %d nodes (%s) report it, more than the threshold %d%%; no new NoExecute grants and no new taints for %s will be made there until it resets (after the share stays at or below %d%% for %s)",
			c, where(name), t.reporting, t.nodes, t.share(), cfg.Threshold, c, cfg.Threshold-cfg.ResetMargin, cfg.CoolDown)
		return s, true, true
	}
	if judged && t.above(cfg.Threshold-cfg.ResetMargin) {
		s.BelowSince = nil
		return s, true, false
	}
	if s.BelowSince == nil {
		now := v.now
		s.BelowSince = &now
	}
	resetAt := s.BelowSince.Add(cfg.CoolDown)
	if v.now.Before(resetAt) {
		v.at(resetAt)
		return s, true, false
	}
	below := *s.BelowSince
	s.Tripped, s.Since, s.BelowSince = false, v.now, nil
	v.event("", false, EventGuardReset,
		"the disruption guard for %s reset %s: %d of %d nodes (%s) report it, at or below %d%% since %s%s (the cool-down is %s); new grants and taints for %s may be made there again",
		c, where(name), t.reporting, t.nodes, t.share(), cfg.Threshold-cfg.ResetMargin, stamp(below), unjudged(judged, cfg.MinNodes), cfg.CoolDown, c)
	return s, judged && t.reporting > 0, true
}

// where names a scope in a sentence, a zone's name quoted (ScopeWhere
// for the fleet and the nodes without a zone).
func where(scope string) string {
	if scope == FleetScope || scope == "" {
		return ScopeWhere(scope)
	}
	return "in zone " + strconv.Quote(scope)
}

func unjudged(judged bool, minNodes int) string {
	if judged {
		return ""
	}
	return " or not judged (fewer than " + strconv.Itoa(max(minNodes, 1)) + " nodes there, or the condition is no longer watched)"
}
