// Package drill is the pure half of `selftaint drill`: the scenario file's
// format (strict, versioned YAML whose errors name the field path), and the
// judgement of what a drill saw against what its scenario expected, as
// pure functions over a Record of every version the drill watched. The
// half that talks to a cluster (control plane, virtual nodes, steps,
// watches, cleanup) is agent/drill; it fills a Record and asks Evaluate.
//
// Keeping the verdicts here means each expectation (a workload back within
// T, a PodDisruptionBudget never below its minimum, pods evicted or not,
// at most K NoExecute nodes, explain's predictions) is a table-tested
// function of recorded versions, not of timing in a live test.
package drill

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// APIVersion and Kind head every scenario file.
const (
	APIVersion = "selftaint.io/v1alpha1"
	Kind       = "Drill"
)

// Duration is a time.Duration written as Go writes one ("90s", "2m30s").
// A value that is not one decodes without error and is reported by
// Validate with its field path (a decoding error could not name it).
type Duration struct {
	time.Duration
	// bad is the text as written when it is not a duration.
	bad string
}

// Scenario is one drill file.
type Scenario struct {
	APIVersion  string `json:"apiVersion"`
	Kind        string `json:"kind"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Cluster is where the drill runs and on which nodes.
	Cluster Cluster `json:"cluster"`
	// Workloads are the manifests applied (server-side) before the steps;
	// the drill starts (t=0) once every workload is ready.
	Workloads []Workload `json:"workloads,omitempty"`
	// Steps run in order; each waits for its At (time since t=0).
	Steps []Step `json:"steps"`
	// Expect are the verdicts the drill reports.
	Expect []Expectation `json:"expect"`
	// Timeout bounds the whole drill after t=0 (default 10m): a drill
	// still running then ends with the expectations judged on what was
	// seen, undecided ones failed.
	Timeout Duration `json:"timeout,omitzero"`
	// Settle is how long the drill keeps watching after its last step and
	// every fault, NotReady and pause it started have ended, for late
	// effects (default 5s). The drill also ends early once every
	// expectation is decided and nothing it started is still in force.
	Settle Duration `json:"settle,omitzero"`
}

// Cluster says where the drill runs. Without --kubeconfig the drill starts
// its own control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler on loopback) and runs Pools as virtual nodes. With
// --kubeconfig it runs Pools as virtual nodes in that cluster, and may be
// given real nodes by RealNodes; it never touches any other node.
type Cluster struct {
	// Pools of virtual nodes the drill runs.
	Pools []Pool `json:"pools,omitempty"`
	// RealNodes is a label selector of an existing cluster's nodes the
	// drill may act on (faults through their agents, drains through the
	// cluster's coordinator). Only with --kubeconfig.
	RealNodes string `json:"realNodes,omitempty"`
	// Coordinator is the virtual fleet's coordinator the drill runs.
	Coordinator Coordinator `json:"coordinator,omitzero"`
	// Config is the selftaint config (the agents' config file, YAML) the
	// virtual nodes and the coordinator read; empty means the built-in
	// defaults. Checked as the agent checks its file.
	Config string `json:"config,omitempty"`
	// NodeMonitorGracePeriod is kube-controller-manager's
	// --node-monitor-grace-period for the embedded control plane: how long
	// a node that stopped heartbeating stays Ready (default 20s here; the
	// real default is 50s).
	NodeMonitorGracePeriod Duration `json:"nodeMonitorGracePeriod,omitzero"`
}

// Pool is a set of virtual nodes alike: Name-1 ... Name-Count.
type Pool struct {
	Name     string              `json:"name"`
	Count    int                 `json:"count"`
	Labels   map[string]string   `json:"labels,omitempty"`
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// Taints the nodes register with (as the kubelet's
	// --register-with-taints), key[=value]:Effect.
	Taints []string `json:"taints,omitempty"`
}

// Coordinator is the drill's virtual-fleet coordinator.
type Coordinator struct {
	// Replicas run as processes, leader-elected (default 1; 0 runs none,
	// so NoExecute rules only ever get their fallback).
	Replicas *int `json:"replicas,omitempty"`
}

// Workload is one manifest file (a path relative to the drill file) or an
// inline manifest; either may hold several YAML documents. Objects without
// a namespace go into the drill's own namespace (created for the run and
// deleted with everything in it afterwards).
type Workload struct {
	File     string `json:"file,omitempty"`
	Manifest string `json:"manifest,omitempty"`
}

// Step is one action on the timeline: exactly one of its actions is set.
type Step struct {
	// Name names the step in the view, the report and expectations'
	// After (default "step-N", 1-based).
	Name string `json:"name,omitempty"`
	// At is when the step starts, from t=0; a step whose At has passed
	// (or without one) starts when the one before it has.
	At *Duration `json:"at,omitempty"`

	Fault       *FaultStep       `json:"fault,omitempty"`
	NotReady    *NotReadyStep    `json:"notReady,omitempty"`
	Drain       *DrainStep       `json:"drain,omitempty"`
	Coordinator *CoordinatorStep `json:"coordinator,omitempty"`
	WaitFor     *WaitStep        `json:"waitFor,omitempty"`
}

// Nodes picks nodes among the drill's own: by name, or by label selector,
// or both (the union). A selector that matches none of the drill's virtual
// nodes is refused with the file (CheckKnown); with real nodes, a pick
// that matches none of the drill's nodes is an error when the step runs.
type Nodes struct {
	Names    []string `json:"nodes,omitempty"`
	Selector string   `json:"selector,omitempty"`
}

// FaultStep injects a fault (as `selftaint fault inject`) on each node:
// on a condition or probe by name, or a GPU Xid by number, which the
// agents' GPU rules and Xid catalog turn into the condition the real probe
// would report.
type FaultStep struct {
	Nodes     `json:",inline"`
	Condition string `json:"condition,omitempty"`
	GPUXid    int    `json:"gpuXid,omitempty"`
	Status    string `json:"status,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	// For is how long the fault lasts; it expires by itself.
	For Duration `json:"for"`
}

// NotReadyStep stops each node's kubelet heartbeats (Lease and status) for
// For: the node lifecycle controller finds it NotReady and taints it
// unreachable. Virtual nodes only.
type NotReadyStep struct {
	Nodes `json:",inline"`
	For   Duration `json:"for"`
}

// DrainStep asks the coordinator to drain each node (as `selftaint drain`).
type DrainStep struct {
	Nodes  `json:",inline"`
	Reason string `json:"reason"`
	// Deadline after which a drain still blocked is given back
	// DrainBlocked; zero means the config's default.
	Deadline Duration `json:"deadline,omitzero"`
	// MaxParallel > 0 asks for a rolling drain of the picked nodes,
	// at most this many at once (as `selftaint drain --selector
	// --max-parallel`).
	MaxParallel int `json:"maxParallel,omitempty"`
	// Done ends the drains (uncordon) once each is Drained; otherwise they
	// stay until the drill ends and its cleanup ends them.
	Done bool `json:"done,omitempty"`
	// OnDeadline is what happens at the deadline to pods whose eviction is
	// still refused: "release" (the default: the node is given back
	// DrainBlocked) or "force" (they are deleted, each with its grace
	// period, PodDisruptionBudgets or not), as `selftaint drain
	// --on-deadline`.
	OnDeadline string `json:"onDeadline,omitempty"`
}

// CoordinatorStep kills or pauses the coordinator's leader process.
type CoordinatorStep struct {
	// Action is "kill" (SIGKILL; restarted after For, or never when For
	// is zero) or "pause" (SIGSTOP, SIGCONT after For).
	Action string   `json:"action"`
	For    Duration `json:"for,omitzero"`
}

// WaitStep holds the timeline until a state is reached, or fails the
// drill's run after Timeout (default 2m).
type WaitStep struct {
	// Nodes: every picked node has Condition / Taint / Maintenance
	// (inline, as in the other steps: nodes: [a-1], selector: x=y).
	Nodes       `json:",inline"`
	Condition   *ConditionState `json:"condition,omitempty"`
	Taint       *TaintState     `json:"taint,omitempty"`
	Maintenance string          `json:"maintenance,omitempty"`
	// Workload is ready (ready replicas = desired).
	Workload *WorkloadRef `json:"workload,omitempty"`
	Timeout  Duration     `json:"timeout,omitzero"`
}

// ConditionState is a node condition with a status.
type ConditionState struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// TaintState is a taint present (or, with Absent, gone).
type TaintState struct {
	Key    string `json:"key"`
	Effect string `json:"effect,omitempty"`
	Absent bool   `json:"absent,omitempty"`
}

// WorkloadRef names a workload; Namespace defaults to the drill's own.
type WorkloadRef struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// Expectation is one verdict; exactly one of its kinds is set.
type Expectation struct {
	// Name names it in the table, the report and the JUnit file (default
	// derived from its kind and target).
	Name string `json:"name,omitempty"`

	Ready       *ReadyExpect       `json:"ready,omitempty"`
	PDB         *PDBExpect         `json:"pdb,omitempty"`
	Evicted     *EvictExpect       `json:"evicted,omitempty"`
	NotEvicted  *EvictExpect       `json:"notEvicted,omitempty"`
	NoExecute   *NoExecuteExpect   `json:"noExecute,omitempty"`
	Explain     *ExplainExpect     `json:"explain,omitempty"`
	Guard       *GuardExpect       `json:"guard,omitempty"`
	Maintenance *MaintenanceExpect `json:"maintenance,omitempty"`
}

// ReadyExpect: the workload is back to its desired ready replicas within
// Within of step After's start (default t=0) and is so again at the end of
// the drill if it dropped meanwhile, and each pod it lost after then is
// replaced by a ready one (measured: reschedule p50/p99).
type ReadyExpect struct {
	Workload WorkloadRef `json:"workload"`
	Within   Duration    `json:"within"`
	After    string      `json:"after,omitempty"`
}

// PDBExpect: the PodDisruptionBudget (by name; all of the drill's when
// Name is empty) never has fewer healthy pods than it desires, on any
// watched version of it or of its pods, from t=0 on.
type PDBExpect struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// EvictExpect picks pods by label selector (in Namespace, default the
// drill's own). Evicted: at least Min (default 1) of the pods there when
// step After started are evicted (deleted with a DisruptionTarget
// condition: the Eviction API or the taint-eviction controller) after it;
// pods created since (replacements) are not counted. NotEvicted: none is
// evicted or deleted at all.
//
// With Reason (one of EvictionReasons), only evictions whose
// DisruptionTarget reason is Reason count: Evicted wants at least Min
// evicted that way, NotEvicted none evicted that way (pods that left
// otherwise, evicted for another reason or deleted, are reported but
// breach nothing).
type EvictExpect struct {
	Selector  string `json:"selector"`
	Namespace string `json:"namespace,omitempty"`
	Min       int    `json:"min,omitempty"`
	After     string `json:"after,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// NoExecuteExpect: at no watched moment do more than AtMost of the drill's
// nodes carry a NoExecute taint (any key; with Keys, only those keys).
type NoExecuteExpect struct {
	AtMost int      `json:"atMost"`
	Keys   []string `json:"keys,omitempty"`
}

// GuardExpect judges the disruption guard: the coordinator's guard
// ConfigMap (coordinator.guard.name in coordinator.namespace), every
// version of it watched. Tripped true: at some watched moment from t=0
// on, a scope of the guard was tripped; false: at none (and the guard
// was seen, and readable at every version). Condition and Zone narrow
// the scopes that count: a condition type, and a zone name, or "*"
// (fleet.FleetScope) for the fleet-wide scope.
type GuardExpect struct {
	// Tripped is required: true or false.
	Tripped   *bool  `json:"tripped"`
	Condition string `json:"condition,omitempty"`
	Zone      string `json:"zone,omitempty"`
}

// MaintenanceExpect: at no watched moment do more than AtMost of the
// drill's nodes take a slot of the maintenance pool, counted as the
// coordinator counts them against coordinator.maintenance.maxParallel:
// selftaint's maintenance condition (SelftaintMaintenance) True with
// reason Draining or DrainBlocked (a node that waits for a slot, Waiting,
// or whose drain is done, Drained, takes none; see SlotReasons).
type MaintenanceExpect struct {
	AtMost int `json:"atMost"`
}

// ExplainExpect: `selftaint explain`'s predictions, taken for each node of
// fault step Step just before it runs (for the NoExecute taints the
// agents' rules put on for that condition), hold: a pod predicted to be
// evicted at once is evicted within Tolerance of the node's NoExecute
// taint, one predicted after N seconds is evicted N seconds after it
// (±Tolerance, default 10s), one predicted to stay is not evicted.
type ExplainExpect struct {
	Step      string   `json:"step"`
	Tolerance Duration `json:"tolerance,omitzero"`
}
