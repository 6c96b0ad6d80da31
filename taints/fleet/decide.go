package fleet

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Config is the coordinator's policy.
type Config struct {
	// MaxNoExecute is how many nodes may hold a grant at once: a count, or
	// a percent of the fleet's nodes, rounded up (so that a small fleet
	// can use NoExecute at all; 10% of 5 nodes is 1).
	MaxNoExecute intstr.IntOrString
	// RatePerMinute is how many new grants may start per minute in one
	// zone: fewer than RatePerMinute started in the last minute, and at
	// least a minute / RatePerMinute after the zone's last start.
	RatePerMinute int
	// GrantTTL is a grant's lease duration; the coordinator renews it every
	// third of that, and a holder whose agent has not shown it is alive
	// (Node.AliveSeen) for a TTL loses it.
	GrantTTL time.Duration
	// Guard is the disruption guard.
	Guard GuardConfig
	// Watched are the conditions the guard judges, each with the statuses
	// that count as reporting it (those that apply its rules' taints).
	Watched map[corev1.NodeConditionType][]corev1.ConditionStatus
	// Members are the Nodes that are the fleet ("": MembersReal). Decide
	// is given only those: the caller picks them with Members.Includes.
	Members Membership
	// Maintenance is the maintenance pool's policy.
	Maintenance MaintenanceConfig
}

// GuardConfig is the disruption guard's policy.
type GuardConfig struct {
	// Threshold: the guard for a condition trips in a scope (a zone, or the
	// fleet) when more than Threshold percent of its nodes report it.
	Threshold int
	// ResetMargin: it resets once the share has stayed at or below
	// Threshold - ResetMargin percent for CoolDown.
	ResetMargin int
	CoolDown    time.Duration
	// MinNodes: a scope with fewer nodes is never judged on its own (a
	// zone of two nodes with one sick is not a storm); the fleet as a whole
	// still is, when it has at least MinNodes.
	MinNodes int
	// RenewEvery is how often the guard object is rewritten when nothing
	// changed, so agents can tell it is current.
	RenewEvery time.Duration
}

// Node is one node as the coordinator sees it.
type Node struct {
	Name string
	// Zone is its topology.kubernetes.io/zone label ("" if none: the
	// nodes without one form one zone).
	Zone string
	// Ready: its Ready condition is True. A NotReady holder loses its
	// grant; a NotReady node is not granted.
	Ready bool
	// Request is its ask (nil: none, or unreadable, which the caller
	// reports).
	Request *Request
	// AliveSeen is when the coordinator (its clock) last saw the request
	// change (its agent wrote it: a holder refreshes Alive every third of
	// the TTL); zero: not since this leader started.
	AliveSeen time.Time
	// Reporting are the watched conditions the node reports (in a status
	// listed in Config.Watched).
	Reporting []corev1.NodeConditionType
	// CarriesNoExecute: one of selftaint's NoExecute taints (by its
	// ownership record) is on the node.
	CarriesNoExecute bool
	// Unschedulable: spec.unschedulable (cordoned, by anyone).
	Unschedulable bool
	// CordonedFor is the request ID in its CordonAnnotation ("": selftaint
	// did not cordon it).
	CordonedFor string
	// Maintenance is the request it is to be served by (nil: none, or
	// unreadable, which the caller reports).
	Maintenance *Maintenance
	// MaintenanceUnreadable: it carries a maintenance request that cannot
	// be read (and none that can): a node holding a slot is then held as
	// it is, neither drained further nor given back, until the request is
	// fixed or removed.
	MaintenanceUnreadable bool
}

// Grant is a grant Lease as the coordinator sees it.
type Grant struct {
	// Node is whose grant it is (from the Lease's name); Holder is its
	// holderIdentity, empty once released.
	Node, Holder string
	// Zone is the zone it was started in.
	Zone string
	// Acquired is when it started, Renewed when last renewed (the
	// coordinator's clock).
	Acquired, Renewed time.Time
}

// Memory is what the coordinator keeps between decisions, and a new
// leader rebuilds conservatively.
type Memory struct {
	// Since is when this leader started deciding: a node's liveness and an
	// unlisted NoExecute taint are judged from then at the earliest.
	Since time.Time
	// Guard is the last guard decided (a new leader starts from the guard
	// object, so a tripped guard stays tripped across a leader change).
	Guard GuardState
	// Granted is when this leader saw each node's current grant start or
	// adopted it (at Since), for liveness; only holders of a live grant
	// have an entry.
	Granted map[string]time.Time
	// Uncovered is since when each node has carried a NoExecute taint with
	// no live grant (its agent has not yet removed it, or is dead).
	Uncovered map[string]time.Time
	// Abandoned is when each uncovered NoExecute taint was abandoned (it
	// no longer counts against the budget; its Event has been told). A new
	// leader tells again, a TTL after it first sees the taint.
	Abandoned map[string]time.Time
	// NotAlive are the nodes that lost a grant because their agent showed
	// no sign of life: such a node is not granted again until its request
	// changes (its agent writes), or its back-off ends: a GrantTTL after
	// the first such release, doubling with each one after (up to 16
	// TTLs), so a dead agent's request, which never goes away, takes a
	// slot and a rate token ever more rarely, and a stalled one that
	// recovers is granted again.
	NotAlive map[string]Strikes
	// Exhausted are the waiting nodes told that the budget keeps them
	// waiting (once per wait).
	Exhausted map[string]bool
	// Decided is set by Decide: this Memory is a previous decision's, so
	// the BelowSince times in Guard are this leader's own observations. A
	// new leader leaves it false, and every tripped guard's cool-down
	// starts afresh from what it sees itself.
	Decided bool
	// Maintenance is the maintenance decision's memory.
	Maintenance MaintenanceMemory
}

// Input is everything one decision is made from.
type Input struct {
	Config Config
	Now    time.Time
	// Leader is the deciding replica's identity, written into the guard.
	Leader string
	Nodes  []Node
	Grants []Grant
	// Slots are the maintenance slot Leases.
	Slots  []Slot
	Memory Memory
}

// Decision is what the coordinator does now: the disruption guard,
// decided once, and two sibling decisions made on the same view of the
// fleet and the same guard: the NoExecute budget (NoExecuteDecision,
// embedded, so its fields read as d.Grant, d.Waiting, ...) and the
// maintenance pool (Maintenance).
type Decision struct {
	NoExecuteDecision
	// Maintenance is the maintenance pool's decision.
	Maintenance MaintenanceDecision
	// Guard is the guard now; WriteGuard says it changed or is due for
	// renewal.
	Guard      GuardState
	WriteGuard bool
	// Events are what to tell (guard trips and resets, grants released for
	// any reason but the node no longer asking, abandoned NoExecute taints,
	// an unusable budget or pool, maintenance waits, starts and ends), each
	// with one of the Event* reasons.
	Events []Event
	// Memory is what to keep for the next decision.
	Memory Memory
	// Next is when a decision is due even if nothing changes: a renewal,
	// an expiry, a liveness deadline, an abandonment, a rate slot for a
	// waiting node while the budget has room, a guard cool-down, the
	// guard's renewal, a released grant's deletion, a drain's deadline.
	// Always after Now; zero when nothing is pending. A decision's own
	// writes are expected to bring the next one (the coordinator watches
	// its grants and slots), so what falls due by them is not repeated
	// here.
	Next time.Time
}

// NoExecuteDecision is what the coordinator does about NoExecute grants.
// Grants are named by their node (the Lease is GrantName(node)).
type NoExecuteDecision struct {
	// Grant are the nodes to grant now, in the order they asked: a new
	// Lease, or a released one taken again (NewGrant). A node may also be
	// in Release (its grant expired, say): the new grant replaces it.
	Grant []string
	// Renew are held grants due for renewal (renewTime = now), by node
	// name.
	Renew []string
	// Release are held grants to release (holder cleared, renewTime kept;
	// the Lease stays for the rate window), each with why: one of the
	// Release* constants. Nil when none.
	Release map[string]string
	// Delete are released grants whose Lease is no longer needed (see
	// Decide), by node name.
	Delete []string
	// Waiting are the nodes that ask, are Ready and hold no live grant,
	// and were not granted now, in the order they asked (then by name);
	// Held how many nodes count against the budget after this decision
	// (see Decide) and Budget the budget now. Held may exceed Budget (a
	// percent budget shrank with the fleet, or a new leader counts every
	// NoExecute taint it finds for a TTL): then nothing is granted.
	Waiting []string
	Held    int
	Budget  int
}

// Strikes are a node's consecutive grants lost for no sign of life, and
// when the last was lost.
type Strikes struct {
	Count int
	At    time.Time
}

// Event is something the coordinator tells, about a node ("" : the
// fleet).
type Event struct {
	Node    string
	Warning bool
	Reason  string
	Message string
}

// Decide is the coordinator's policy, a pure function of in (the nodes,
// the grants, the maintenance slots, its memory and the time): the
// disruption guard and whether to write it, decided once; on the same view
// and guard, two sibling decisions: the NoExecute grants to make, renew,
// release and delete (NoExecuteDecision; the noExecute type, budget.go)
// and the drains to start, run and end and the slot Leases to delete
// (MaintenanceDecision; the maintenance type, pool.go, says what counts
// against the pool and how its line is served); the Events to tell, the
// memory for the next decision and when that is due.
//
// The maintenance decision's invariant: a drain starts for a node not
// already unavailable only while fewer nodes count against the pool than
// its size allows (and its zone's), and a slot given back (its node gone,
// its request withdrawn, replaced or past its deadline) stops counting in
// the same decision, so its room is given at once.
//
// The NoExecute decision's invariant, everything rests on: no grant is
// made while as many nodes count against the budget (Decision.Held) as the
// budget allows. What counts, per node:
//   - a live grant (held by the node, renewed less than a GrantTTL ago)
//     that is not released now;
//   - a NoExecute taint on a node whose grant was released (its Lease is
//     there, holder cleared), for as long as the taint is on: its agent
//     may be dead (it stopped refreshing its liveness stamp, or its node
//     went NotReady), and nothing but its agent, a person or the Node's
//     deletion lifts it. The released Lease is the record that the
//     coordinator granted that taint, so it is kept while the taint is on
//     (a new leader counts it too). Passing the slot on after a TTL would
//     let budget + dead nodes carry NoExecute at once;
//   - a NoExecute taint on the node without a live grant and without a
//     released one (never granted by this coordinator: put on by hand, or
//     left from before its Lease was deleted), until this leader has seen
//     it so for a GrantTTL (Memory.Uncovered); then it is abandoned, and
//     told once (Memory.Abandoned);
//   - a released grant (now or before) of a node that still asks, until
//     the grant's Renewed + GrantTTL: Granted lets an agent that has not
//     seen the release apply NoExecute until then, and the coordinator may
//     not see that taint before it gives the slot away. This goes beyond
//     the uncovered rule, which counts only taints already seen.
//
// One race is left to the agents: a node whose grant was released because
// it no longer asked, and that asks again before it sees the release, could
// apply NoExecute under the old grant after its slot was given away. So an
// agent honours only a grant it first saw while its current request stood
// (agent/noexecute.go).
//
// A node may be released and granted again in one decision (in Release and
// in Grant): the new grant replaces the released one. A released grant's
// Lease is deleted once its start has left the RateWindow and, while its
// node exists, its Renewed + GrantTTL has passed (so that the last rule
// above still holds after this decision) and the node carries no NoExecute
// taint (the second rule).
//
// Where the inputs are odd, Decide errs toward fewer NoExecute taints: an
// invalid budget or a TTL under a second gives budget 0; a grant renewed in
// the future (another leader's clock running ahead) is renewed on this
// clock at once; a grant start in the future counts in the rate window; a
// zero Memory.Since is taken as now (a new leader: every holder gets a full
// TTL to show it is alive).
func Decide(in Input) Decision {
	v := newView(in)
	ne := newNoExecute(v)
	mt := newMaintenance(v)
	// The policies' sizes first (their Events before the guard's), then
	// the guard once, for both decisions.
	ne.decideBudget()
	mt.decideSize()
	v.decideGuard()
	ne.decide()
	mt.decide()
	v.at(v.guard.RenewTime.Add(in.Config.Guard.RenewEvery))
	mem := ne.mem
	mem.Guard = v.guard
	mem.Maintenance = mt.mem
	return Decision{
		NoExecuteDecision: ne.out,
		Maintenance:       mt.out,
		Guard:             v.guard,
		WriteGuard:        v.writeGuard,
		Events:            v.events,
		Memory:            mem,
		Next:              v.next,
	}
}

// view is what the sibling decisions share: the input, the nodes by name,
// the guard (decided once, for both), and the Events and the next decision
// time they collect.
type view struct {
	in  Input
	now time.Time
	// nodes are the fleet's nodes by name (a node listed twice counts
	// once: the last of them).
	nodes map[string]*Node

	guard      GuardState
	writeGuard bool
	events     []Event
	next       time.Time
}

func newView(in Input) *view {
	v := &view{in: in, now: in.Now, nodes: make(map[string]*Node, len(in.Nodes))}
	for i := range in.Nodes {
		v.nodes[in.Nodes[i].Name] = &in.Nodes[i]
	}
	return v
}

// at makes t a candidate for Decision.Next, if it is still to come.
func (v *view) at(t time.Time) {
	if t.After(v.now) && (v.next.IsZero() || t.Before(v.next)) {
		v.next = t
	}
}

func (v *view) event(node string, warning bool, reason, format string, args ...any) {
	v.events = append(v.events, Event{Node: node, Warning: warning, Reason: reason, Message: fmt.Sprintf(format, args...)})
}
