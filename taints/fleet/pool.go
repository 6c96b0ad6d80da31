package fleet

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MaintenanceConfig is the maintenance pool's policy.
type MaintenanceConfig struct {
	// MaxParallel is how many nodes may be unavailable through maintenance
	// at once: a count, or a percent of the fleet's nodes (rounded up). 0:
	// no drain starts.
	MaxParallel intstr.IntOrString
	// MaxParallelPerZone, if set, bounds each zone the same way (a percent
	// of the zone's nodes, rounded up).
	MaxParallelPerZone *intstr.IntOrString
	// DefaultDeadline is a request's deadline where it gives none.
	DefaultDeadline time.Duration
}

// Slot is a maintenance slot Lease as the coordinator sees it.
type Slot struct {
	// Node is whose slot it is (from the Lease's name); Holder its
	// holderIdentity, empty once the slot was given back (PhaseEnded).
	Node, Holder string
	// Zone is the zone the node was in when the slot was taken.
	Zone string
	// RequestID is the request it serves (Maintenance.ID).
	RequestID string
	// Phase is one of the Phase* values.
	Phase string
	// Acquired is when the slot was taken: the drain's deadline runs from
	// then.
	Acquired time.Time
	// CordonTheirs: the node was already cordoned by someone else when the
	// slot was taken (SlotCordonAnnotation).
	CordonTheirs bool
}

// MaintenanceMemory is what the maintenance decision keeps between
// decisions.
type MaintenanceMemory struct {
	// Told is, per waiting node, why it was last told it waits, so each
	// reason is told once.
	Told map[string]string
}

// Outcome is how a slot is given back: ReasonReleased or
// ReasonDrainBlocked, and a sentence saying why.
type Outcome struct {
	Reason, Message string
}

// DrainOrder is what a held slot's drain is to do now.
type DrainOrder struct {
	// Deadline is when the drain's time is up (Acquired + the request's
	// deadline).
	Deadline time.Time
	// Force: the deadline has passed and the request asks for force: the
	// pods the Eviction API refuses are deleted, each with its grace
	// period.
	Force bool
}

// Waiter is a node that asks for maintenance and holds no slot, and why it
// waits (for its condition's message and Events).
type Waiter struct {
	Node, Why string
}

// MaintenanceDecision is what the coordinator does about maintenance now:
// the sibling of the NoExecute decision, made on the same view and guard.
type MaintenanceDecision struct {
	// Start are the waiting nodes given a slot now, in the order they
	// asked: the slot Lease is written (new, or an ended one taken again)
	// with PhaseDraining, then the node is cordoned and drained.
	Start []string
	// Drain are the held slots whose drain is to run (PhaseDraining), by
	// node, including those started now.
	Drain map[string]DrainOrder
	// End are the held slots to give back now, by node, with the outcome:
	// what selftaint cordoned is uncordoned, the holder cleared
	// (PhaseEnded), the condition set False with the outcome's reason.
	End map[string]Outcome
	// Delete are the slot Leases no longer needed (their node is gone, or
	// the request they served was withdrawn or replaced), by node, sorted.
	// A slot ended now for a withdrawn or replaced request is in End too:
	// give it back first (uncordon, condition), then delete it. Never a
	// node in Start: an ended slot taken again is rewritten by Start.
	Delete []string
	// Waiting are the nodes that ask and hold no slot, in the order they
	// are served: a node's place in line is its index + 1.
	Waiting []Waiter
	// Frozen are the held slots whose request cannot be read now, sorted:
	// kept as they are (cordoned, counted as their phase), no drain runs,
	// nothing is uncordoned and no deadline applies, until the request is
	// readable again (the drain goes on) or removed (maintenance ends). An
	// edit gone wrong never uncordons a node in the middle of maintenance.
	Frozen []string
	// Unavailable are the nodes counted against the pool after this
	// decision, sorted; Size is the pool's size.
	Unavailable []string
	Size        int
}

// Reasons of the maintenance pool's Events in Decision.Events.
const (
	// EventMaintenanceWaiting (Normal): a node waits for a maintenance
	// slot; told once per reason it waits for.
	EventMaintenanceWaiting = "MaintenanceWaiting"
	// EventDrainStarted (Normal): a node got a slot: it is cordoned and
	// drained.
	EventDrainStarted = "DrainStarted"
	// EventDrainDeadline (Warning): a drain did not finish by its deadline
	// and its node was given back (DrainBlocked).
	EventDrainDeadline = "DrainDeadline"
	// EventMaintenanceEnded (Normal): a node's maintenance ended (Released:
	// the request was withdrawn or replaced, or someone else uncordoned
	// the node).
	EventMaintenanceEnded = "MaintenanceEnded"
	// EventInvalidPool (Warning): maintenance.maxParallel or
	// maxParallelPerZone is unusable, so no drain starts.
	EventInvalidPool = "InvalidMaintenancePool"
)

// FallbackDeadline is a drain's deadline where neither its request nor
// MaintenanceConfig.DefaultDeadline gives one.
const FallbackDeadline = time.Hour

// Why a waiting node waits, as MaintenanceMemory.Told keeps it: a node is
// told again only when the kind changes, not each time the numbers in the
// sentence do.
const (
	waitEnding   = "ending"   // its previous slot is being given back first
	waitCleared  = "cleared"  // a sick-node request whose conditions cleared
	waitGuard    = "guard"    // the guard holds all its conditions
	waitDisabled = "disabled" // the pool (or its zone's) has size 0
	waitFull     = "full"     // the fleet's pool is full (or it is behind one that does not fit)
	waitZone     = "zone"     // its zone's pool is full
)

// maintenance is the maintenance pool's decision in the making, on the
// view and the guard it shares with the NoExecute decision.
//
// What counts against the pool (Unavailable), each node once: a node
// holding a slot in PhaseDraining (or a phase not known, taken as
// Draining); a node holding no slot that is NotReady, or cordoned by
// someone else (spec.unschedulable without CordonAnnotation). A node whose
// slot is Drained does not count (its pods have moved); a slot ended now
// stops counting now, so its room is given in the same decision.
//
// The line: the nodes with a request that hold no slot and whose request
// has not been served (an ended slot for the same request ID is the record
// that it was), by RequestedAt, then name. Walking it: a node not eligible
// (a sick-node request whose conditions the node no longer reports, or
// whose conditions the guard all holds in its zone; a node whose previous
// slot is being given back now) waits and keeps its place; a node already
// counted starts even when the pool is full, as it adds nothing; any other
// starts when the pool and its zone's have room; the first that does not
// fit the fleet's pool stops the line for all behind it but those already
// counted, while one that does not fit its zone's is passed over for the
// other zones.
type maintenance struct {
	*view
	cfg MaintenanceConfig
	// size is the fleet's pool; perZone bounds each zone (nil: no bound).
	size    int
	perZone *intstr.IntOrString
	// zoneNodes are the nodes per zone, for a percent per zone.
	zoneNodes map[string]int
	slots     []Slot // in.Slots by node, one per node

	// held are the slots held after this decision (not ended now), by
	// node.
	held map[string]Slot
	// served are the nodes whose current request has been served: its
	// slot was given back (before, or now).
	served map[string]bool
	// ending are the nodes whose held slot is ended now while they still
	// ask (a new request replaced the one it served): they wait, why.
	ending map[string]string
	// deleting are the slot Leases to delete, by node.
	deleting map[string]bool
	// counted are the nodes counted against the pool, with how they count
	// ("draining", "NotReady", "cordoned"); zoneCount per zone.
	counted   map[string]string
	zoneCount map[string]int

	mem MaintenanceMemory
	out MaintenanceDecision
}

func newMaintenance(v *view) *maintenance {
	m := &maintenance{
		view: v, cfg: v.in.Config.Maintenance,
		zoneNodes: map[string]int{},
		held:      map[string]Slot{},
		served:    map[string]bool{},
		ending:    map[string]string{},
		deleting:  map[string]bool{},
		counted:   map[string]string{},
		zoneCount: map[string]int{},
		mem:       MaintenanceMemory{Told: map[string]string{}},
	}
	for _, n := range v.nodes {
		m.zoneNodes[n.Zone]++
	}
	slots := slices.Clone(v.in.Slots)
	slices.SortStableFunc(slots, func(a, b Slot) int { return cmp.Compare(a.Node, b.Node) })
	m.slots = slices.CompactFunc(slots, func(a, b Slot) bool { return a.Node == b.Node })
	return m
}

// decideSize scales MaxParallel over the fleet's nodes, rounding a
// percent up; an invalid or negative one is 0 (no drain starts), told.
func (m *maintenance) decideSize() {
	v := m.cfg.MaxParallel
	if err := validPool(v); err != nil {
		m.event("", true, EventInvalidPool, "maintenance.maxParallel %q is invalid (%v): no drain starts", v.String(), err)
	} else {
		m.size, _ = intstr.GetScaledValueFromIntOrPercent(&v, len(m.nodes), true)
	}
	m.out.Size = m.size
	if z := m.cfg.MaxParallelPerZone; z != nil {
		zv := *z
		if err := validPool(zv); err != nil {
			m.event("", true, EventInvalidPool, "maintenance.maxParallelPerZone %q is invalid (%v): no drain starts", zv.String(), err)
			zv = intstr.FromInt32(0)
		}
		m.perZone = &zv
	}
}

// validPool: v is a count or a percent, not negative.
func validPool(v intstr.IntOrString) error {
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, true)
	switch {
	case err != nil:
		return err
	case n < 0:
		return fmt.Errorf("it is negative")
	}
	return nil
}

// zoneSize is zone's pool, and whether zones are bounded at all.
func (m *maintenance) zoneSize(zone string) (int, bool) {
	if m.perZone == nil {
		return 0, false
	}
	v := *m.perZone
	n, _ := intstr.GetScaledValueFromIntOrPercent(&v, m.zoneNodes[zone], true)
	return n, true
}

// decide makes the maintenance decision; the pool's size and the guard
// are decided before it.
func (m *maintenance) decide() {
	m.judgeSlots()
	m.count()
	m.serveLine()
	m.finish()
}

// judgeSlots keeps, ends or deletes each slot Lease.
func (m *maintenance) judgeSlots() {
	for _, s := range m.slots {
		n := m.nodes[s.Node]
		switch {
		case n == nil:
			// The node is gone: its slot frees at once (nothing to
			// uncordon, no one to tell).
			m.deleting[s.Node] = true
		case s.Holder == "":
			// The record that RequestID was served: kept while that
			// request stands.
			if n.Maintenance != nil && n.Maintenance.ID() == s.RequestID {
				m.served[n.Name] = true
			} else {
				m.deleting[n.Name] = true
			}
		case s.Holder != s.Node:
			// Only a hand-edited Lease names another node: it serves no
			// one; given back, and the node (if it asks) served anew.
			m.end(n, s, Outcome{ReasonReleased, fmt.Sprintf("its slot Lease names %q as the holder", s.Holder)})
			m.deleting[n.Name] = true
			m.ending[n.Name] = "its previous slot is being given back first"
		default:
			m.judgeHeld(s, n)
		}
	}
}

// phaseOf is s's phase, a phase not known taken as Draining (it counts,
// and its drain runs).
func phaseOf(s Slot) string {
	switch s.Phase {
	case PhaseDrained, PhaseBlocked:
		return s.Phase
	}
	return PhaseDraining
}

// judgeHeld ends, keeps or drains the slot s that n holds.
func (m *maintenance) judgeHeld(s Slot, n *Node) {
	req, phase := n.Maintenance, phaseOf(s)
	switch {
	case req == nil && n.MaintenanceUnreadable:
		m.held[n.Name] = s
		m.out.Frozen = append(m.out.Frozen, n.Name)
	case req == nil:
		m.end(n, s, Outcome{ReasonReleased, "the request was withdrawn"})
		m.deleting[n.Name] = true
	case req.ID() != s.RequestID:
		m.end(n, s, Outcome{ReasonReleased, fmt.Sprintf("replaced by a new request (%s, after %s)", req.ID(), s.RequestID)})
		m.deleting[n.Name] = true
		m.ending[n.Name] = "the drain of its previous request is being ended first"
	case phase == PhaseBlocked:
		m.end(n, s, Outcome{ReasonDrainBlocked, fmt.Sprintf(
			"the drain could not finish by its deadline %s: given back; not drained again while this request stands", stamp(m.deadline(s, req)))})
	case (n.CordonedFor == s.RequestID || (s.CordonTheirs && n.CordonedFor == "")) && !n.Unschedulable:
		m.end(n, s, Outcome{ReasonReleased, fmt.Sprintf(
			"uncordoned by someone else at %s or before, while %s; not drained again while this request stands", stamp(m.now), strings.ToLower(phase))})
	case phase == PhaseDrained:
		m.held[n.Name] = s
	default:
		m.drain(n, s, req)
	}
}

// deadline is when the drain of s for req is up: its start plus the
// request's deadline.
func (m *maintenance) deadline(s Slot, req *Maintenance) time.Time {
	def := m.cfg.DefaultDeadline
	if def <= 0 {
		def = FallbackDeadline
	}
	return s.Acquired.Add(req.Request.DeadlineIn(def))
}

// drain orders the drain of a Draining slot, or gives it back at its
// deadline (a forced one goes on, forced).
func (m *maintenance) drain(n *Node, s Slot, req *Maintenance) {
	if s.Acquired.IsZero() {
		m.end(n, s, Outcome{ReasonDrainBlocked, "its slot Lease has no acquireTime, so the drain's deadline cannot be known: given back; not drained again while this request stands"})
		return
	}
	deadline := m.deadline(s, req)
	switch {
	case m.now.Before(deadline):
		m.order(n.Name, DrainOrder{Deadline: deadline})
		m.at(deadline)
	case req.Request.Force():
		m.order(n.Name, DrainOrder{Deadline: deadline, Force: true})
	default:
		m.end(n, s, Outcome{ReasonDrainBlocked, fmt.Sprintf(
			"the drain did not finish by its deadline %s (%s from its start at %s): given back; not drained again while this request stands",
			stamp(deadline), deadline.Sub(s.Acquired), stamp(s.Acquired))})
		return
	}
	m.held[n.Name] = s
}

func (m *maintenance) order(node string, o DrainOrder) {
	if m.out.Drain == nil {
		m.out.Drain = map[string]DrainOrder{}
	}
	m.out.Drain[node] = o
}

// end gives back the slot s of n now, told; n's request is served unless
// it was withdrawn or replaced (the caller says so).
func (m *maintenance) end(n *Node, s Slot, o Outcome) {
	if m.out.End == nil {
		m.out.End = map[string]Outcome{}
	}
	m.out.End[n.Name] = o
	m.served[n.Name] = true
	if o.Reason == ReasonDrainBlocked {
		m.event(n.Name, true, EventDrainDeadline, "the drain of node %q (request %s) ended DrainBlocked: %s; what selftaint cordoned is uncordoned", n.Name, s.RequestID, o.Message)
		return
	}
	m.event(n.Name, false, EventMaintenanceEnded, "maintenance of node %q (request %s) ended, %s: %s; what selftaint cordoned is uncordoned", n.Name, s.RequestID, o.Reason, o.Message)
}

// count finds the nodes counted against the pool before any start.
func (m *maintenance) count() {
	for _, name := range slices.Sorted(maps.Keys(m.nodes)) {
		n := m.nodes[name]
		how := ""
		if s, ok := m.held[name]; ok {
			if phaseOf(s) != PhaseDrained {
				how = "draining"
			}
		} else {
			switch {
			case !n.Ready:
				how = "NotReady"
			case n.Unschedulable && n.CordonedFor == "":
				how = "cordoned"
			}
		}
		if how != "" {
			m.counted[name] = how
			m.zoneCount[n.Zone]++
		}
	}
}

// line is the nodes that wait: they ask, hold no slot and their request
// has not been served; by when they asked, then name.
func (m *maintenance) line() []*Node {
	var w []*Node
	for _, n := range m.nodes {
		if _, held := m.held[n.Name]; n.Maintenance != nil && !held && (!m.served[n.Name] || m.ending[n.Name] != "") {
			w = append(w, n)
		}
	}
	slices.SortFunc(w, func(a, b *Node) int {
		return cmp.Or(a.Maintenance.Request.RequestedAt.Compare(b.Maintenance.Request.RequestedAt), cmp.Compare(a.Name, b.Name))
	})
	return w
}

// serveLine walks the line (see maintenance), starting what fits.
func (m *maintenance) serveLine() {
	stopper := ""
	for _, n := range m.line() {
		why, kind := m.place(n, stopper)
		if why == "" {
			m.start(n)
			continue
		}
		if kind == waitFull && stopper == "" {
			stopper = n.Name
		}
		m.wait(n, why, kind)
	}
}

// place says why n waits and the kind of why ("" if it starts now);
// stopper is the first node the fleet's full pool keeps waiting so far.
func (m *maintenance) place(n *Node, stopper string) (string, string) {
	if why, ok := m.ending[n.Name]; ok {
		return why, waitEnding
	}
	if why, kind := m.ineligible(n); why != "" {
		return why, kind
	}
	zs, bounded := m.zoneSize(n.Zone)
	switch {
	case m.size == 0:
		return fmt.Sprintf("the maintenance pool's size is 0 (maxParallel %s of %d nodes): no drain starts", m.cfg.MaxParallel.String(), len(m.nodes)), waitDisabled
	case bounded && zs == 0:
		return fmt.Sprintf("%s pool's size is 0 (maxParallelPerZone %s of %d nodes): no drain starts there", zoneName(n.Zone), m.perZone.String(), m.zoneNodes[n.Zone]), waitDisabled
	case m.counted[n.Name] != "":
		// Already unavailable: starting it adds nothing.
		return "", ""
	case stopper != "":
		return fmt.Sprintf("waiting behind %s: the maintenance pool is full (%d of %d unavailable)", stopper, len(m.counted), m.size), waitFull
	case len(m.counted) >= m.size:
		return fmt.Sprintf("the maintenance pool is full: %d of %d unavailable (%s)", len(m.counted), m.size, m.unavailable()), waitFull
	case bounded && m.zoneCount[n.Zone] >= zs:
		return fmt.Sprintf("%s pool is full (%d of %d)", zoneName(n.Zone), m.zoneCount[n.Zone], zs), waitZone
	}
	return "", ""
}

// ineligible says why n's request may not start now, if it may not: a
// sick-node request (one naming conditions) starts only while the node
// reports one of them and the guard does not hold them all in its zone.
// An operator's request (no conditions) is judged by neither.
func (m *maintenance) ineligible(n *Node) (string, string) {
	conds := n.Maintenance.Request.Conditions
	if len(conds) == 0 {
		return "", ""
	}
	if !slices.ContainsFunc(conds, func(c corev1.NodeConditionType) bool { return slices.Contains(n.Reporting, c) }) {
		if len(conds) == 1 {
			return fmt.Sprintf("its condition %s has cleared: a sick-node drain starts only while the node reports it", conds[0]), waitCleared
		}
		return fmt.Sprintf("its conditions %s have cleared: a sick-node drain starts only while the node reports one of them", JoinConditions(conds)), waitCleared
	}
	var held []string
	for _, c := range conds {
		tripped, why := m.guard.Tripped(c, n.Zone)
		if !tripped {
			return "", ""
		}
		held = append(held, why)
	}
	return "the disruption guard holds " + JoinConditions(conds) + " " + zoneWhere(n.Zone) + ": " + strings.Join(held, "; "), waitGuard
}

// unavailable lists the counted nodes and how each counts, the first few.
func (m *maintenance) unavailable() string {
	const most = 5
	names := slices.Sorted(maps.Keys(m.counted))
	var parts []string
	for _, name := range names[:min(len(names), most)] {
		parts = append(parts, name+" "+m.counted[name])
	}
	s := strings.Join(parts, ", ")
	if len(names) > most {
		s += fmt.Sprintf(" and %d more", len(names)-most)
	}
	return s
}

func zoneName(zone string) string {
	if zone == "" {
		return "the zone of nodes without one"
	}
	return "zone " + zone + "'s"
}

func zoneWhere(zone string) string {
	if zone == "" {
		return "among the nodes without a zone"
	}
	return "in zone " + zone
}

// start gives n a slot now: a Draining slot, counted.
func (m *maintenance) start(n *Node) {
	req := n.Maintenance
	s := Slot{Node: n.Name, Holder: n.Name, Zone: n.Zone, RequestID: req.ID(), Phase: PhaseDraining, Acquired: m.now}
	deadline := m.deadline(s, req)
	m.out.Start = append(m.out.Start, n.Name)
	m.order(n.Name, DrainOrder{Deadline: deadline})
	m.at(deadline)
	if m.counted[n.Name] == "" {
		m.zoneCount[n.Zone]++
	}
	m.counted[n.Name] = "draining"
	m.held[n.Name] = s
	// An ended slot's Lease is taken again, not deleted.
	delete(m.deleting, n.Name)
	onDeadline := OnDeadlineRelease
	if req.Request.Force() {
		onDeadline = OnDeadlineForce
	}
	m.event(n.Name, false, EventDrainStarted,
		"node %q (zone %q) got a maintenance slot for request %s (%q, by %s): it is cordoned and drained; deadline %s (%s from now), then %s",
		n.Name, n.Zone, req.ID(), req.Request.Reason, req.Request.RequestedBy, stamp(deadline), deadline.Sub(m.now), onDeadline)
}

// wait puts n in line, telling why once per kind of reason.
func (m *maintenance) wait(n *Node, why, kind string) {
	m.out.Waiting = append(m.out.Waiting, Waiter{Node: n.Name, Why: why})
	m.mem.Told[n.Name] = kind
	if m.in.Memory.Maintenance.Told[n.Name] == kind {
		return
	}
	req := n.Maintenance
	m.event(n.Name, false, EventMaintenanceWaiting, "node %q (zone %q) waits for a maintenance slot, %s in line, for request %s (%q, by %s): %s",
		n.Name, n.Zone, Ordinal(len(m.out.Waiting)), req.ID(), req.Request.Reason, req.Request.RequestedBy, why)
}

// finish fills in the counts and the Leases to delete.
func (m *maintenance) finish() {
	slices.Sort(m.out.Frozen)
	m.out.Delete = slices.Sorted(maps.Keys(m.deleting))
	m.out.Unavailable = slices.Sorted(maps.Keys(m.counted))
	m.out.Size = m.size
}

// Ordinal is 1st, 2nd, 3rd, 4th, ...: a place in line as people say it.
func Ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}
