package taints

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Reasons of the initialization condition.
const (
	ReasonInitializing        = "Initializing"
	ReasonInitialized         = "Initialized"
	ReasonRequiredCheckFailed = "RequiredConditionUnhealthy"
)

// CloudProviderUninitializedTaint is the cloud controller manager's: it is
// reported as part of the initialization state and never removed by
// selftaint.
const CloudProviderUninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"

// InitInput is what decides a node's initialization: what the agent has
// seen since it started, the conditions it decided, and what the Node says.
type InitInput struct {
	// Continuous: the taint comes back whenever a required condition
	// fails; otherwise (bootstrap) a node once initialized stays so.
	Continuous bool
	// Required conditions must be at their healthy status.
	Required []corev1.NodeConditionType
	// Healthy is each condition's status when all is well.
	Healthy map[corev1.NodeConditionType]corev1.ConditionStatus
	// States are the conditions decided at this sync.
	States map[corev1.NodeConditionType]State
	// WaitingProbes are the probes with no verdict since start.
	WaitingProbes []string
	// HasInventory says the node has a hardware inventory; InventoryTaken
	// that it has been taken since start.
	HasInventory, InventoryTaken bool
	// Initialized: the Node records that it was initialized before.
	Initialized bool
	// CloudUninitialized: the Node carries the cloud provider's
	// uninitialized taint.
	CloudUninitialized bool
}

// InitVerdict is one sync's decision about initialization.
type InitVerdict struct {
	// Decided is false when nothing can be told yet (continuous mode,
	// after a restart, before the first full round): the taint is then
	// left as it is.
	Decided bool
	// Uninitialized says whether the node should carry the taint.
	Uninitialized bool
	// First is true when the node is found initialized for the first time.
	First bool
	// State is the initialization condition to publish: True while
	// uninitialized, with what is pending.
	State State
}

// DecideInit works out the initialization state: the node is initialized
// once every probe has given a verdict, the hardware inventory is taken and
// every required condition is healthy. In bootstrap mode a node initialized
// before stays initialized; in continuous mode it is uninitialized again
// while a required condition fails, and after a restart nothing is decided
// until the first full round (so a restart never taints).
func DecideInit(in InitInput) InitVerdict {
	var pending []string
	if n := len(in.WaitingProbes); n > 0 {
		waiting := slices.Sorted(slices.Values(in.WaitingProbes))
		pending = append(pending, "waiting for the first verdict of the "+plural(n, "probe", "probes")+" "+joinList(waiting))
	}
	if in.HasInventory && !in.InventoryTaken {
		pending = append(pending, "waiting for the hardware inventory")
	}
	firstRound := len(pending) == 0
	failing := failingRequired(in)
	if len(failing) > 0 {
		pending = append(pending, "required: "+joinList(failing))
	}
	ready := len(pending) == 0
	cloud := ""
	if in.CloudUninitialized {
		cloud = "; the cloud controller has not initialized the node yet (" + CloudProviderUninitializedTaint + ", not selftaint's to remove)"
	}

	v := InitVerdict{Decided: true}
	switch {
	case !in.Continuous && in.Initialized:
		v.Uninitialized = false
	case in.Continuous && in.Initialized && !firstRound:
		// After a restart: no verdict yet says nothing about the node.
		v.Decided = false
	default:
		v.Uninitialized = !ready
	}
	v.First = ready && !in.Initialized
	msg := strings.Join(pending, "; ") + cloud
	switch {
	case !v.Decided:
		v.State = State{Status: corev1.ConditionUnknown, Reason: ReasonInitializing, Message: msg}
	case v.Uninitialized && len(failing) > 0 && firstRound:
		v.State = State{Status: corev1.ConditionTrue, Reason: ReasonRequiredCheckFailed, Message: msg}
	case v.Uninitialized:
		v.State = State{Status: corev1.ConditionTrue, Reason: ReasonInitializing, Message: msg}
	default:
		v.State = State{Status: corev1.ConditionFalse, Reason: ReasonInitialized, Message: initializedMessage(in, ready, pending) + cloud}
	}
	return v
}

// failingRequired describes each required condition not at its healthy
// status.
func failingRequired(in InitInput) []string {
	var failing []string
	for _, c := range in.Required {
		s, ok := in.States[c]
		if ok && s.Status == in.Healthy[c] {
			continue
		}
		status := "not reported"
		if ok {
			status = fmt.Sprintf("%s (%s)", s.Status, s.Reason)
		}
		failing = append(failing, fmt.Sprintf("%s is %s", c, status))
	}
	return failing
}

// initializedMessage says why an initialized node is: what it has, or, in
// bootstrap mode, that it was initialized earlier and what is pending now.
func initializedMessage(in InitInput, ready bool, pending []string) string {
	if !ready {
		return "initialized earlier (bootstrap mode: not tainted again); now " + strings.Join(pending, "; ")
	}
	msg := "selftaint has a verdict from every probe"
	if in.HasInventory {
		msg += " and the hardware inventory"
	}
	if len(in.Required) > 0 {
		msg += ", and every required condition is healthy"
	}
	return msg
}

// joinList joins items as a sentence lists them: "a", "a and b",
// "a, b and c".
func joinList(items []string) string {
	if n := len(items); n > 1 {
		return strings.Join(items[:n-1], ", ") + " and " + items[n-1]
	}
	return strings.Join(items, "")
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
