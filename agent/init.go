package agent

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints"
)

// InitializedAnnotation records when selftaint first found the node
// initialized (RFC 3339). In bootstrap mode its presence means the
// uninitialized taint is never put back.
const InitializedAnnotation = taints.InitializedAnnotation

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

// initState is one sync's decision about initialization.
type initState = taints.InitVerdict

// initInputLocked is what decides initialization (taints.DecideInit) from
// what the agent has seen; the plan fills in the conditions. a.mu is held.
func (a *Agent) initInputLocked(node *corev1.Node, hwKnown bool) *taints.InitInput {
	o := a.opts.Init
	var waiting []string
	for _, p := range a.opts.Probes {
		// An events-only probe decides nothing initialization waits for.
		if !p.EventsOnly() && p.Condition != o.Condition && !a.reported[p.Entry.Probe.Name()] {
			waiting = append(waiting, p.Entry.Probe.Name())
		}
	}
	_, initialized := node.Annotations[InitializedAnnotation]
	return &taints.InitInput{
		Continuous:     o.Continuous,
		Required:       o.Required,
		Healthy:        a.healthy,
		WaitingProbes:  waiting,
		HasInventory:   a.opts.Hardware != nil,
		InventoryTaken: hwKnown,
		Initialized:    initialized,
		CloudUninitialized: slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == CloudProviderUninitializedTaint
		}),
	}
}

// initTaintID is the uninitialized taint's identity.
func (a *Agent) initTaintID() taints.TaintID { return taints.IDOf(a.opts.Init.Taint) }
