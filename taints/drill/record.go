package drill

import (
	"time"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// Record is everything a drill saw: every watched version of the objects
// its expectations judge, in the order seen, with the time it saw each.
// agent/drill fills it; Evaluate judges it.
type Record struct {
	// Start is t=0: the workloads were ready and the first step may run.
	Start time.Time
	// End is when the drill stopped watching.
	End time.Time
	// Namespace is the drill's own namespace: where expectations without
	// a namespace look ("" matches every namespace).
	Namespace string
	Steps     []StepRecord
	// Pods are every version of every pod in the drill's namespaces.
	Pods []PodVersion
	// PDBs are every version of each PodDisruptionBudget's health: one
	// each time the PDB or one of the pods it selects changed.
	PDBs []PDBVersion
	// Nodes are every version of the drill's nodes.
	Nodes []NodeVersion
	// Workloads are every version of each workload's replica counts.
	Workloads []WorkloadVersion
	// Predictions are explain's verdicts taken before fault steps.
	Predictions []Prediction
	// Guards are every version of the coordinator's guard ConfigMap.
	Guards []GuardVersion
}

// StepRecord is when a step ran and on which nodes.
type StepRecord struct {
	Name    string
	Kind    string // fault, notReady, drain, coordinator, waitFor
	Started time.Time
	Ended   time.Time // when its action returned (a wait: when met)
	Nodes   []string
	// Error is why the step failed; the drill stops its timeline there.
	Error string
}

// PodVersion is one watched version of a pod.
type PodVersion struct {
	Time      time.Time
	Namespace string
	Name      string
	UID       string
	Labels    map[string]string
	// Owner is the workload the pod belongs to (a ReplicaSet's pods
	// belong to its Deployment); empty for a bare pod.
	Owner WorkloadRef
	Node  string
	Ready bool
	// Terminating: the pod has a deletionTimestamp.
	Terminating bool
	// Deleted: the watch's delete event (the object is gone).
	Deleted bool
	// Disruption is the reason of the pod's DisruptionTarget condition
	// when True (EvictionByEvictionAPI, DeletionByTaintManager, ...).
	Disruption string
}

// PDBVersion is a PodDisruptionBudget's health at one watched version of
// it or of a pod it selects.
type PDBVersion struct {
	Time            time.Time
	Namespace, Name string
	// ResourceVersion is the version of the object that changed (the PDB
	// or the pod); Cause says which ("pdb" or "pod namespace/name").
	ResourceVersion string
	Cause           string
	// Healthy is the pods it selects that are Ready and not terminating,
	// counted by the drill from the pods it watches at this version.
	Healthy int32
	// Desired is the PDB's status.desiredHealthy (its minimum), Expected
	// its status.expectedPods, as last written by the disruption
	// controller; Known is false until the controller has written them.
	Desired  int32
	Expected int32
	Known    bool
}

// NodeVersion is one watched version of one of the drill's nodes.
type NodeVersion struct {
	Time            time.Time
	Name            string
	ResourceVersion string
	// NoExecute are the keys of its NoExecute taints.
	NoExecute []string
	// Taints are all its taints as key:Effect (for the live view).
	Taints []string
	// Ready is the Ready condition's status ("" when absent).
	Ready         string
	Unschedulable bool
	// Conditions by type: status.
	Conditions map[string]string
	// Maintenance is the state of selftaint's maintenance condition
	// (its reason: Draining, Drained, DrainBlocked, ...), "" when none.
	Maintenance string
}

// WorkloadVersion is one watched version of a workload's replicas.
type WorkloadVersion struct {
	Time    time.Time
	Ref     WorkloadRef
	Desired int32
	Ready   int32
}

// Prediction is explain's verdict on one pod for a fault step's node,
// taken just before the step ran.
type Prediction struct {
	Step string
	Node string
	taints.Eviction
}

// GuardVersion is one watched version of the disruption guard's
// ConfigMap: the guard it holds (fleet.DecodeGuard), or why it holds
// none.
type GuardVersion struct {
	Time            time.Time
	ResourceVersion string
	// State is the decoded guard; the zero GuardState when Deleted or
	// Error.
	State fleet.GuardState
	// Deleted: the watch's delete event (no guard: nothing is tripped).
	Deleted bool
	// Error is why the ConfigMap's data is not a guard (DecodeGuard's
	// error); the guard is unknown at this version.
	Error string
}
