package drill

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/selftaint/selftaint/taints/fleet"
)

// trippedScope is one tripped condition/scope of a guard version.
type trippedScope struct {
	cond, scope string
	s           fleet.Scope
}

func (t trippedScope) key() string { return t.cond + "/" + t.scope }

// trippedFor lists the tripped scopes of g that count for e (its
// Condition and Zone, when given), by condition, then scope.
func trippedFor(g fleet.GuardState, e *GuardExpect) []trippedScope {
	var out []trippedScope
	for cond, scopes := range g.Conditions {
		if e.Condition != "" && string(cond) != e.Condition {
			continue
		}
		for scope, s := range scopes {
			if s.Tripped && (e.Zone == "" || scope == e.Zone) {
				out = append(out, trippedScope{cond: string(cond), scope: scope, s: s})
			}
		}
	}
	slices.SortFunc(out, func(a, b trippedScope) int { return cmp.Or(cmp.Compare(a.cond, b.cond), cmp.Compare(a.scope, b.scope)) })
	return out
}

// guardWalk is the guard followed over its versions from t=0 on.
type guardWalk struct {
	e *GuardExpect
	// seen: versions judged; unreadable of them; firstErr the first
	// unreadable one and when it counted.
	seen, unreadable int
	firstErr         string
	firstErrAt       time.Time
	first            *GuardTrip
	scopes           []string
	tripped          time.Duration
	// cur are the scopes that count tripped since curAt.
	cur   []trippedScope
	curAt time.Time
}

// version takes v as the guard from at on.
func (w *guardWalk) version(v GuardVersion, at time.Time, ev *evaluator) {
	if len(w.cur) > 0 {
		w.tripped += at.Sub(w.curAt)
	}
	w.seen++
	w.cur, w.curAt = nil, at
	switch {
	case v.Error != "":
		w.unreadable++
		if w.firstErr == "" {
			w.firstErr, w.firstErrAt = v.Error, at
		}
		return
	case v.Deleted:
		return
	}
	w.cur = trippedFor(v.State, w.e)
	for _, t := range w.cur {
		if !slices.Contains(w.scopes, t.key()) {
			w.scopes = append(w.scopes, t.key())
		}
	}
	if len(w.cur) > 0 && w.first == nil {
		t := w.cur[0]
		w.first = &GuardTrip{AtSeconds: ev.at(at), Condition: t.cond, Scope: t.scope,
			Unhealthy: t.s.Unhealthy, Nodes: t.s.Nodes, ResourceVersion: v.ResourceVersion}
	}
}

// walkGuard follows the guard's versions: the last one before t=0 counts
// at t=0, every later one when seen; a scope still tripped at the end
// counts until the record's End.
func (ev *evaluator) walkGuard(e *GuardExpect) *guardWalk {
	w := &guardWalk{e: e}
	var before *GuardVersion
	for i, v := range ev.guards {
		if v.Time.Before(ev.rec.Start) {
			before = &ev.guards[i]
			continue
		}
		if before != nil {
			w.version(*before, ev.rec.Start, ev)
			before = nil
		}
		w.version(v, v.Time, ev)
	}
	if before != nil {
		w.version(*before, ev.rec.Start, ev)
	}
	if len(w.cur) > 0 && ev.rec.End.After(w.curAt) {
		w.tripped += ev.rec.End.Sub(w.curAt)
	}
	return w
}

// guard judges GuardExpect: Tripped true wants a scope that counts
// tripped at some version judged; false wants none, the guard seen, and
// every version of it readable.
func (ev *evaluator) guard(e *GuardExpect) Result {
	if e.Tripped == nil {
		return failed("guard.tripped is not set: nothing to judge")
	}
	want := *e.Tripped
	expected := "expected never tripped" + guardWhat(e)
	if want {
		expected = "expected tripped" + guardWhat(e)
	}
	w := ev.walkGuard(e)
	res := Result{Measured: Measured{
		GuardVersions: ptr(w.seen), UnreadableVersions: ptr(w.unreadable), FirstTrip: w.first,
		TrippedScopes: w.scopes, TrippedSeconds: ptr(seconds(w.tripped)),
	}}
	unread := ""
	if w.unreadable > 0 {
		unread = fmt.Sprintf("; unreadable at %d of %d versions, first at %.1fs: %s", w.unreadable, w.seen, ev.at(w.firstErrAt), w.firstErr)
	}
	switch {
	case w.seen == 0:
		res.Message = "the guard ConfigMap was never seen (no coordinator wrote it, or the drill did not watch it), " + expected
	case w.first != nil:
		f := w.first
		res.Passed = want
		res.Message = fmt.Sprintf("the guard tripped for %s %s at %.1fs (%d of %d nodes; tripped %.1fs in all), %s",
			f.Condition, scopeName(f.Scope), f.AtSeconds, f.Unhealthy, f.Nodes, seconds(w.tripped), expected)
	case want:
		res.Message = fmt.Sprintf("the guard never tripped%s over %d %s, %s%s", guardWhat(e), w.seen, plural(w.seen, "version", "versions"), expected, unread)
	case w.unreadable > 0:
		res.Message = fmt.Sprintf("the guard could not be read at %.1fs (%s; %d of %d versions), %s", ev.at(w.firstErrAt), w.firstErr, w.unreadable, w.seen, expected)
	default:
		res.Passed = true
		res.Message = fmt.Sprintf("the guard never tripped%s over %d %s, %s", guardWhat(e), w.seen, plural(w.seen, "version", "versions"), expected)
	}
	return res
}

// scopeName says "in zone a", or "fleet-wide".
func scopeName(scope string) string {
	if scope == fleet.FleetScope {
		return "fleet-wide"
	}
	return fmt.Sprintf("in zone %s", scope)
}

// guardWhat says which scopes count: " for C in zone Z", " fleet-wide", ...
func guardWhat(e *GuardExpect) string {
	s := ""
	if e.Condition != "" {
		s = " for " + e.Condition
	}
	if e.Zone != "" {
		s += " " + scopeName(e.Zone)
	}
	return s
}

// guardName is a guard expectation's default name.
func guardName(e *GuardExpect) string {
	if e.Tripped != nil && *e.Tripped {
		return "guard tripped" + guardWhat(e)
	}
	return "guard never tripped" + guardWhat(e)
}
