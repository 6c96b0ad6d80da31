package fleet

import (
	"time"

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
	// the request they served was withdrawn or replaced), by node.
	Delete []string
	// Waiting are the nodes that ask and hold no slot, in the order they
	// are served: a node's place in line is its index + 1.
	Waiting []Waiter
	// Unavailable are the nodes counted against the pool after this
	// decision, sorted; Size is the pool's size.
	Unavailable []string
	Size        int
}
