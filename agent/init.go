package agent

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints"
)

// InitializedAnnotation records when selftaint first found the node
// initialized (RFC 3339). In bootstrap mode its presence means the
// uninitialized taint is never put back.
const InitializedAnnotation = "selftaint.io/initialized-at"

// CloudProviderUninitializedTaint is the cloud controller manager's: it is
// reported as part of the initialization state and never removed here.
const CloudProviderUninitializedTaint = taints.CloudProviderUninitializedTaint

// Reasons of the initialization condition.
const (
	ReasonInitializing        = taints.ReasonInitializing
	ReasonInitialized         = taints.ReasonInitialized
	ReasonRequiredCheckFailed = taints.ReasonRequiredCheckFailed
)

// InitOptions configure the uninitialized taint: the node carries it until
// the agent has had a verdict from every probe, taken the hardware
// inventory, and every required condition is healthy.
type InitOptions struct {
	// Condition reports the state: True while uninitialized (the message
	// says what is pending), False once initialized.
	Condition corev1.NodeConditionType
	// Taint is the uninitialized taint. A taint with its key and effect is
	// selftaint's to remove even when someone else put it there (the
	// kubelet, with --register-with-taints): that is what it is for.
	Taint corev1.Taint
	// Continuous puts the taint back whenever a required condition turns
	// unhealthy; otherwise (bootstrap) a node once initialized is never
	// tainted again.
	Continuous bool
	// Required conditions must be at their healthy status.
	Required []corev1.NodeConditionType
}

// initState is one sync's view of initialization.
type initState struct {
	// decided is false when the agent cannot tell yet (continuous mode,
	// after a restart, before the first full round): the taint is then
	// left as it is.
	decided bool
	// uninitialized says whether the node should carry the taint.
	uninitialized bool
	// first is true when the node is initialized for the first time now.
	first bool
	// state is the condition to publish.
	state taints.State
}

// evalInitLocked works out the initialization state (taints.DecideInit)
// from what the agent has seen. a.mu is held.
func (a *Agent) evalInitLocked(node *corev1.Node, states map[corev1.NodeConditionType]taints.State, hwKnown bool) initState {
	o := a.opts.Init
	var waiting []string
	for _, p := range a.opts.Probes {
		if p.Condition != o.Condition && !a.reported[p.Entry.Probe.Name()] {
			waiting = append(waiting, p.Entry.Probe.Name())
		}
	}
	_, initialized := node.Annotations[InitializedAnnotation]
	v := taints.DecideInit(taints.InitInput{
		Continuous:     o.Continuous,
		Required:       o.Required,
		Healthy:        a.healthy,
		States:         states,
		WaitingProbes:  waiting,
		HasInventory:   a.opts.Hardware != nil,
		InventoryTaken: hwKnown,
		Initialized:    initialized,
		CloudUninitialized: slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == CloudProviderUninitializedTaint
		}),
	})
	return initState{decided: v.Decided, uninitialized: v.Uninitialized, first: v.First, state: v.State}
}

// initTaintID is the uninitialized taint's identity.
func (a *Agent) initTaintID() taints.TaintID { return taints.IDOf(a.opts.Init.Taint) }

// claimInitTaint adds the uninitialized taint to what we own when it is on
// the Node: whoever put it there (the kubelet at registration), removing it
// is our job.
func (a *Agent) claimInitTaint(node *corev1.Node, owned []taints.TaintID) []taints.TaintID {
	if a.opts.Init == nil {
		return owned
	}
	id := a.initTaintID()
	if slices.Contains(owned, id) {
		return owned
	}
	for _, t := range node.Spec.Taints {
		if taints.IDOf(t) == id {
			return append(slices.Clone(owned), id)
		}
	}
	return owned
}

// initTimestamp is the value of InitializedAnnotation.
func initTimestamp(now time.Time) string { return now.UTC().Format(time.RFC3339) }

// withInitTaint adds the uninitialized taint to desired when the node is
// uninitialized, and keeps it as it is while the state is undecided.
func (a *Agent) withInitTaint(node *corev1.Node, desired []corev1.Taint, in initState) []corev1.Taint {
	id := a.initTaintID()
	if slices.ContainsFunc(desired, func(t corev1.Taint) bool { return taints.IDOf(t) == id }) {
		return desired
	}
	switch {
	case in.decided && in.uninitialized:
		return append(desired, a.opts.Init.Taint)
	case !in.decided:
		for _, t := range node.Spec.Taints {
			if taints.IDOf(t) == id {
				return append(desired, t)
			}
		}
	}
	return desired
}
