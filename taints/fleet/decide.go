package fleet

import (
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

// Decision is what the coordinator does now. Grants are named by their
// node (the Lease is GrantName(node)).
type Decision struct {
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
	// Guard is the guard now; WriteGuard says it changed or is due for
	// renewal.
	Guard      GuardState
	WriteGuard bool
	// Events are what to tell (guard trips and resets, grants released for
	// any reason but the node no longer asking, abandoned NoExecute taints,
	// an unusable budget), each with one of the Event* reasons.
	Events []Event
	// Waiting are the nodes that ask, are Ready and hold no live grant,
	// and were not granted now, in the order they asked (then by name);
	// Held how many nodes count against the budget after this decision
	// (see Decide) and Budget the budget now. Held may exceed Budget (a
	// percent budget shrank with the fleet, or a new leader counts every
	// NoExecute taint it finds for a TTL): then nothing is granted.
	Waiting []string
	Held    int
	Budget  int
	// Maintenance is the maintenance pool's decision, the sibling of the
	// NoExecute one above.
	Maintenance MaintenanceDecision
	// Memory is what to keep for the next decision.
	Memory Memory
	// Next is when a decision is due even if nothing changes: a renewal,
	// an expiry, a liveness deadline, an abandonment, a rate slot for a
	// waiting node while the budget has room, a guard cool-down, the
	// guard's renewal, a released grant's deletion. Always after Now; zero
	// when nothing is pending. A decision's own writes are expected to
	// bring the next one (the coordinator watches its grants), so what
	// falls due by them is not repeated here.
	Next time.Time
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
