package fleet

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// RateWindow is the window of the per-zone grant rate: a released grant's
// Lease is kept at least this long after it started, so that its start
// still counts after a leader change.
const RateWindow = time.Minute

// Why a held grant is released: the values of Decision.Release.
const (
	// ReleaseNodeDeleted: the node is gone.
	ReleaseNodeDeleted = "node deleted"
	// ReleaseNotReady: the node's Ready condition is not True.
	ReleaseNotReady = "node NotReady"
	// ReleaseNoLongerAsks: the node has withdrawn its Request (the normal
	// end of a grant; no Event).
	ReleaseNoLongerAsks = "no longer asks"
	// ReleaseForeignHolder: the Lease names another node as its holder, so
	// it grants no one (only a hand-edited Lease does that).
	ReleaseForeignHolder = "holder is another node"
	// ReleaseExpired: it was not renewed within its TTL (a coordinator gap).
	ReleaseExpired = "expired"
	// ReleaseAgentNotAlive: the holder's agent has not refreshed its
	// Request's liveness stamp for a TTL.
	ReleaseAgentNotAlive = "agent not alive"
)

// Reasons of the Events in Decision.Events.
const (
	// EventGuardTripped (Warning): a condition's guard tripped in a scope.
	EventGuardTripped = "DisruptionGuardTripped"
	// EventGuardReset (Normal): a tripped guard reset after its cool-down.
	EventGuardReset = "DisruptionGuardReset"
	// EventTaintAbandoned (Warning): a NoExecute taint has been on a node
	// without a grant for a TTL; it no longer counts against the budget.
	EventTaintAbandoned = "NoExecuteTaintAbandoned"
	// EventGrantReleased (Warning): a grant was released for a reason other
	// than the node no longer asking.
	EventGrantReleased = "NoExecuteGrantReleased"
	// EventBudgetExhausted (Warning): a node asks and waits because the
	// budget is full; told once per wait.
	EventBudgetExhausted = "NoExecuteBudgetExhausted"
	// EventInvalidConfig (Warning): the budget or the TTL is unusable, so
	// no grants are made.
	EventInvalidConfig = "InvalidNoExecuteBudget"
)

// minTTL is the shortest usable GrantTTL: a Lease's duration is in whole
// seconds, so anything shorter would grant nothing an agent can see.
const minTTL = time.Second

// noExecute is the NoExecute decision in the making: the budget, the
// rate and the grants, on the view and the guard it shares with the
// maintenance decision.
type noExecute struct {
	*view
	ttl   time.Duration
	since time.Time // this leader's start (Memory.Since, or now when unset)

	grants []Grant // in.Grants sorted by node

	// live are the grants live after this decision (kept, renewed or new),
	// by node, with Renewed as it will be written.
	live map[string]Grant
	// released are the grants released in this decision, freed those
	// released before it, by node.
	released, freed map[string]Grant
	// granted are the nodes granted in this decision.
	granted map[string]bool
	// occupied are the nodes that count against the budget.
	occupied map[string]bool
	// starts are the grant starts by zone (for the rate).
	starts map[string][]time.Time
	// blocked are the zones whose rate kept an eligible waiting node
	// waiting.
	blocked map[string]bool

	// mem is the memory for the next decision (but the guard's and the
	// maintenance pool's, which Decide adds).
	mem Memory
	out NoExecuteDecision
}

func newNoExecute(v *view) *noExecute {
	in := v.in
	d := &noExecute{
		view: v, ttl: in.Config.GrantTTL, since: in.Memory.Since,
		grants:   slices.Clone(in.Grants),
		live:     map[string]Grant{},
		released: map[string]Grant{},
		freed:    map[string]Grant{},
		granted:  map[string]bool{},
		occupied: map[string]bool{},
		starts:   map[string][]time.Time{},
		blocked:  map[string]bool{},
	}
	if d.since.IsZero() {
		// A leader that did not say when it started: it starts now, which
		// gives every holder a full TTL to show it is alive.
		d.since = d.now
	}
	slices.SortStableFunc(d.grants, func(a, b Grant) int { return cmp.Compare(a.Node, b.Node) })
	for _, g := range d.grants {
		d.starts[g.Zone] = append(d.starts[g.Zone], g.Acquired)
		if g.Holder == "" {
			d.freed[g.Node] = g
		}
	}
	d.mem = Memory{
		Since:     d.since,
		Granted:   map[string]time.Time{},
		Uncovered: map[string]time.Time{},
		Abandoned: map[string]time.Time{},
		NotAlive:  map[string]Strikes{},
		Exhausted: map[string]bool{},
		Decided:   true,
	}
	for name, st := range in.Memory.NotAlive {
		// Kept while the node asks and has shown no life since.
		if n := d.nodes[name]; n != nil && n.Request != nil && !n.AliveSeen.After(st.At) {
			d.mem.NotAlive[name] = st
		}
	}
	return d
}

// decide makes the NoExecute decision; the budget (decideBudget) and the
// guard are decided before it.
func (d *noExecute) decide() {
	d.judgeHolders()
	d.countOccupancy()
	d.grantWaiting()
	d.deleteReleased()
	d.finish()
}

// decideBudget scales MaxNoExecute over the nodes (by name: a node listed
// twice counts once), rounding a percent up.
func (d *noExecute) decideBudget() {
	v := d.in.Config.MaxNoExecute
	b, err := intstr.GetScaledValueFromIntOrPercent(&v, len(d.nodes), true)
	switch {
	case err != nil:
		d.event("", true, EventInvalidConfig, "maxNoExecute %q is invalid (%v): no NoExecute grants are made", v.String(), err)
		b = 0
	case b < 0:
		d.event("", true, EventInvalidConfig, "maxNoExecute %q is negative: no NoExecute grants are made", v.String())
		b = 0
	}
	if d.ttl < minTTL && b > 0 {
		d.event("", true, EventInvalidConfig, "the grant TTL %s is shorter than a second (a Lease's duration is in seconds): no NoExecute grants are made", d.ttl)
		b = 0
	}
	d.out.Budget = b
}

// judgeHolders releases or renews each held grant.
func (d *noExecute) judgeHolders() {
	for _, g := range d.grants {
		if g.Holder == "" {
			continue
		}
		if reason, why := d.releaseReason(g); reason != "" {
			d.release(g, reason, why)
			continue
		}
		if !d.now.Before(g.Renewed.Add(d.ttl/3)) || g.Renewed.After(d.now) {
			d.out.Renew = append(d.out.Renew, g.Node)
			g.Renewed = d.now
		}
		d.live[g.Node] = g
		d.mem.Granted[g.Node] = d.grantedAt(g.Node)
	}
}

// grantedAt is when this leader saw node's current grant start or adopted
// it: a live grant without an entry is adopted at Memory.Since.
func (d *noExecute) grantedAt(node string) time.Time {
	if t, ok := d.in.Memory.Granted[node]; ok {
		return t
	}
	return d.since
}

// aliveSince is the latest sign of life of n's agent: its grant's start
// or adoption (granted), the coordinator seeing its liveness stamp change,
// or this leader's start.
func (d *noExecute) aliveSince(n *Node, granted time.Time) time.Time {
	return latest(granted, n.AliveSeen, d.since)
}

func latest(ts ...time.Time) time.Time {
	var t time.Time
	for _, u := range ts {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// releaseReason says why held grant g must be released ("" if it must not)
// and, for the Event, a sentence of detail.
func (d *noExecute) releaseReason(g Grant) (string, string) {
	n := d.nodes[g.Node]
	switch {
	case n == nil:
		return ReleaseNodeDeleted, "the node no longer exists"
	case !n.Ready:
		return ReleaseNotReady, "the node is NotReady"
	case n.Request == nil:
		return ReleaseNoLongerAsks, ""
	case g.Holder != g.Node:
		return ReleaseForeignHolder, fmt.Sprintf("its Lease names %q as the holder", g.Holder)
	case !d.now.Before(g.Renewed.Add(d.ttl)):
		return ReleaseExpired, fmt.Sprintf("it was last renewed at %s and expired at %s (the coordinator was away longer than the TTL %s)",
			stamp(g.Renewed), stamp(g.Renewed.Add(d.ttl)), d.ttl)
	}
	if last := d.aliveSince(n, d.grantedAt(n.Name)); d.now.Sub(last) > d.ttl {
		return ReleaseAgentNotAlive, fmt.Sprintf("its agent has shown no sign of life since %s (%s, longer than the grant TTL %s)",
			stamp(last), d.now.Sub(last), d.ttl)
	}
	return "", ""
}

// release frees g, telling why unless the node merely stopped asking.
func (d *noExecute) release(g Grant, reason, why string) {
	if d.out.Release == nil {
		d.out.Release = map[string]string{}
	}
	d.out.Release[g.Node] = reason
	d.released[g.Node] = g
	if reason == ReleaseAgentNotAlive {
		d.mem.NotAlive[g.Node] = Strikes{Count: d.mem.NotAlive[g.Node].Count + 1, At: d.now}
	}
	if reason == ReleaseNoLongerAsks {
		return
	}
	msg := "a NoExecute taint still on it counts against the fleet's budget for as long as it is on (until its agent lifts it, someone removes it, or the Node is deleted)"
	if reason == ReleaseNodeDeleted {
		msg = "nothing of it counts against the budget any more"
	}
	d.event(g.Node, true, EventGrantReleased, "released the NoExecute grant of node %q (zone %q), reason %q: %s; %s",
		g.Node, g.Zone, reason, why, msg)
}

// countOccupancy finds the nodes that count against the budget before any
// new grant, and keeps the uncovered NoExecute taints' clocks.
func (d *noExecute) countOccupancy() {
	for _, name := range slices.Sorted(maps.Keys(d.nodes)) {
		n := d.nodes[name]
		if _, ok := d.live[name]; ok {
			d.occupied[name] = true
			continue
		}
		if n.CarriesNoExecute && d.grantedBefore(name) {
			// Counted while the taint is on, whether or not its agent
			// lives (see Decide).
			d.occupied[name] = true
			continue
		}
		if n.CarriesNoExecute {
			d.uncovered(n)
		}
		d.lingering(n)
	}
}

// grantedBefore reports whether node holds a released grant: released in
// this decision or before (its Lease is there, holder cleared).
func (d *noExecute) grantedBefore(node string) bool {
	if _, ok := d.released[node]; ok {
		return true
	}
	_, ok := d.freed[node]
	return ok
}

// uncovered judges a NoExecute taint on n without a live grant: it counts
// for a GrantTTL from when this leader first saw it so, then it is
// abandoned (told once).
func (d *noExecute) uncovered(n *Node) {
	since, ok := d.in.Memory.Uncovered[n.Name]
	if !ok || since.IsZero() {
		since = d.now
	}
	d.mem.Uncovered[n.Name] = since
	end := since.Add(d.ttl)
	if d.now.Before(end) {
		d.occupied[n.Name] = true
		d.at(end)
		return
	}
	if t, told := d.in.Memory.Abandoned[n.Name]; told {
		d.mem.Abandoned[n.Name] = t
		return
	}
	d.mem.Abandoned[n.Name] = d.now
	d.event(n.Name, true, EventTaintAbandoned,
		"node %q (zone %q) has carried a NoExecute taint without a grant since %s, longer than the grant TTL %s: its agent is presumably dead; the taint no longer counts against the fleet's NoExecute budget, remove it by hand if the node is healthy",
		n.Name, n.Zone, stamp(since), d.ttl)
}

// lingering counts n while a released grant of its own may still be
// believed by its agent: n still asks (so its agent would apply NoExecute
// if it has not seen the release) and now < the grant's Renewed + GrantTTL,
// the latest that Granted lets any agent hold it.
func (d *noExecute) lingering(n *Node) {
	if n.Request == nil {
		return
	}
	g, ok := d.released[n.Name]
	if !ok {
		g, ok = d.freed[n.Name]
	}
	if !ok {
		return
	}
	if end := g.Renewed.Add(d.ttl); d.now.Before(end) {
		d.occupied[n.Name] = true
		d.at(end)
	}
}

// waiting are the nodes that ask, are Ready and hold no live grant, in the
// order they asked (then by name; see asked).
func (d *noExecute) waiting() []*Node {
	var w []*Node
	for _, n := range d.nodes {
		if _, live := d.live[n.Name]; !live && n.Request != nil && n.Ready {
			w = append(w, n)
		}
	}
	slices.SortFunc(w, func(a, b *Node) int {
		return cmp.Or(d.asked(a).Compare(d.asked(b)), cmp.Compare(a.Name, b.Name))
	})
	return w
}

// asked is n's place in line: when it asked, or, after it lost a grant for
// no sign of life, the end of its back-off (it joins the back of the line
// then, so a dead agent's old request does not jump the nodes that waited).
func (d *noExecute) asked(n *Node) time.Time {
	if st, ok := d.mem.NotAlive[n.Name]; ok {
		return latest(n.Request.Since, st.At.Add(d.backoff(st.Count)))
	}
	return n.Request.Since
}

// grantWaiting grants waiting nodes in order while the budget has room,
// skipping those the guard holds for every condition they ask for and
// those their zone's rate keeps waiting.
func (d *noExecute) grantWaiting() {
	for _, n := range d.waiting() {
		// Occupancy only grows here: once full, nothing more is granted.
		if len(d.occupied) >= d.out.Budget || !d.eligible(n) {
			d.out.Waiting = append(d.out.Waiting, n.Name)
			if len(d.occupied) >= d.out.Budget && d.eligible(n) {
				d.exhausted(n)
			}
			continue
		}
		if slot := d.rateSlot(n.Zone); !slot.valid || d.now.Before(slot.at) {
			d.blocked[n.Zone] = true
			d.out.Waiting = append(d.out.Waiting, n.Name)
			continue
		}
		d.grant(n)
	}
	if len(d.occupied) >= d.out.Budget {
		return
	}
	for zone := range d.blocked {
		if slot := d.rateSlot(zone); slot.valid {
			d.at(slot.at)
		}
	}
}

// maxBackoff caps the back-off of a node whose agent shows no life, in
// grant TTLs.
const maxBackoff = 16

// backoff is how long a node that lost strikes grants for no sign of life
// waits before it may be granted again: a TTL, doubling per strike.
func (d *noExecute) backoff(strikes int) time.Duration {
	return d.ttl * time.Duration(min(1<<max(strikes-1, 0), maxBackoff))
}

// exhausted tells, once per wait, that n waits because the budget is full.
func (d *noExecute) exhausted(n *Node) {
	d.mem.Exhausted[n.Name] = true
	if d.in.Memory.Exhausted[n.Name] {
		return
	}
	d.event(n.Name, true, EventBudgetExhausted,
		"node %q (zone %q) asks for NoExecute for %s since %s and waits: the fleet's NoExecute budget is full (%d of %d held, maxNoExecute %s of %d nodes); it has its rules' fallback taints meanwhile, and is granted in the order nodes asked as holders clear",
		n.Name, n.Zone, JoinConditions(n.Request.Conditions), stamp(n.Request.Since), len(d.occupied), d.out.Budget, d.in.Config.MaxNoExecute.String(), len(d.nodes))
}

// eligible: n's agent has shown life since it last lost a grant for not
// doing so, and one of the conditions n asks for is not held by the guard
// in its zone.
func (d *noExecute) eligible(n *Node) bool {
	if st, dead := d.mem.NotAlive[n.Name]; dead {
		if end := st.At.Add(d.backoff(st.Count)); d.now.Before(end) {
			d.at(end)
			return false
		}
	}
	for _, c := range n.Request.Conditions {
		if tripped, _ := d.guard.Tripped(c, n.Zone); !tripped {
			return true
		}
	}
	return false
}

func (d *noExecute) grant(n *Node) {
	d.out.Grant = append(d.out.Grant, n.Name)
	d.granted[n.Name] = true
	d.occupied[n.Name] = true
	d.starts[n.Zone] = append(d.starts[n.Zone], d.now)
	d.live[n.Name] = Grant{Node: n.Name, Holder: n.Name, Zone: n.Zone, Acquired: d.now, Renewed: d.now}
	d.mem.Granted[n.Name] = d.now
	delete(d.mem.Uncovered, n.Name)
	delete(d.mem.Abandoned, n.Name)
}

// slot is the earliest time a new grant may start in a zone; !valid: never
// (RatePerMinute <= 0).
type slot struct {
	at    time.Time
	valid bool
}

// rateSlot: fewer than RatePerMinute starts in (at-RateWindow, at], and at
// least RateWindow/RatePerMinute after the zone's latest start. Starts in
// the future count as in the window.
func (d *noExecute) rateSlot(zone string) slot {
	r := d.in.Config.RatePerMinute
	if r <= 0 {
		return slot{}
	}
	var inWindow []time.Time
	var s slot
	s.valid = true
	for _, t := range d.starts[zone] {
		if t.After(d.now.Add(-RateWindow)) {
			inWindow = append(inWindow, t)
		}
		if spaced := t.Add(RateWindow / time.Duration(r)); spaced.After(s.at) {
			s.at = spaced
		}
	}
	if len(inWindow) >= r {
		slices.SortFunc(inWindow, time.Time.Compare)
		if t := inWindow[len(inWindow)-r].Add(RateWindow); t.After(s.at) {
			s.at = t
		}
	}
	return s
}

// deleteReleased deletes the released grants that no longer matter, and
// are not granted again now: their start has left the rate window and,
// fail-safe, while their node exists, no agent can believe them any more
// (Renewed + GrantTTL has passed), so that a node that asks again within
// that time still counts (see lingering) after this decision.
func (d *noExecute) deleteReleased() {
	for _, g := range d.grants {
		_, releasedNow := d.released[g.Node]
		if d.granted[g.Node] || (g.Holder != "" && !releasedNow) {
			continue
		}
		n := d.nodes[g.Node]
		if n != nil && n.CarriesNoExecute {
			// The record that this coordinator granted the taint on it:
			// kept while it is on (a change of the Node brings the next
			// decision).
			continue
		}
		until := g.Acquired.Add(RateWindow)
		if n != nil {
			until = latest(until, g.Renewed.Add(d.ttl))
		}
		if g.Holder == "" && !d.now.Before(until) {
			d.out.Delete = append(d.out.Delete, g.Node)
			continue
		}
		// A grant released now whose time has come is deleted by the next
		// decision, which writing the release itself brings about.
		d.at(until)
	}
}

// finish fills in what is known once the grants are made: the holders'
// deadlines, the count.
func (d *noExecute) finish() {
	for _, name := range slices.Sorted(maps.Keys(d.live)) {
		g := d.live[name]
		d.at(g.Renewed.Add(d.ttl / 3))
		d.at(g.Renewed.Add(d.ttl))
		if n := d.nodes[name]; n != nil {
			// The agent is judged dead once more than a TTL has passed: the
			// first instant that is so is a nanosecond after the deadline.
			d.at(d.aliveSince(n, d.mem.Granted[name]).Add(d.ttl + time.Nanosecond))
		}
	}
	d.out.Held = len(d.occupied)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// JoinConditions lists condition types for a message: "A, B".
func JoinConditions(cs []corev1.NodeConditionType) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return strings.Join(out, ", ")
}
