package main

import (
	"fmt"
	"time"

	"k8s.io/utils/ptr"
)

const (
	namespace = "demo"
	condition = "SelftaintMemoryPressure"
	taintKey  = "selftaint.io/memory-pressure"
	// coordinatorNamespace is where the grants and the guard live (the
	// config says so, so that explain and the agents agree): selftaint's
	// own, as deploy/ has it.
	coordinatorNamespace = "selftaint"
	// budget is the config's coordinator.maxNoExecute.
	budget = 1
	// shortFault is how long vnode-3's fault lasts: it ends while vnode-3
	// waits in line.
	shortFault = 15 * time.Second
	// longerBy is how much longer vnode-2's fault lasts than vnode-1's, so
	// that vnode-2 still asks when vnode-1's grant is released.
	longerBy = 30 * time.Second
)

// demoConfig is the agents' and the coordinator's config: memory pressure
// is a NoExecute rule, at NoSchedule until the node holds a grant, and one
// node at a time may hold one; a failed GPU drains its node, through the
// maintenance pool, one node at a time.
const demoConfig = `# selftaint config for the demo: memory pressure evicts, one node at a time;
# a failed GPU drains its node (the Eviction API, PodDisruptionBudgets honoured), one node at a time.
rules:
- condition: SelftaintMemoryPressure
  taint: {key: selftaint.io/memory-pressure, effect: NoExecute}
  fallback: NoSchedule      # goes on at once; NoExecute joins it only with a grant
- condition: SelftaintGPUFailure
  taint: {key: selftaint.io/gpu-failure, effect: NoSchedule}
  action: drain             # and ask the coordinator to drain the node
  drain: {deadline: 5m, endWhenHealthy: true}   # give the node back once the GPU is healthy again
coordinator:
  namespace: selftaint      # where the grant and maintenance Leases and the guard live
  maxNoExecute: 1           # the budget: one node may carry NoExecute at a time
  fleet: virtual            # count the virtual nodes (selftaint virtual --coordinator always does)
  maintenance:
    maxParallel: 1          # the pool: one node drained at a time
    defaultDeadline: 10m    # how long a drain may take where its request gives no deadline
`

// fault is one fault the drill injects.
type fault struct {
	node  string
	lasts time.Duration
	// why is what the fault is for in the drill, for the timeline.
	why string
	// target is the fault's condition, as `selftaint fault inject
	// --condition` takes it (a probe name), and message its message.
	target, message string
}

// The faults' conditions.
const (
	memoryFault   = "memory"
	memoryMessage = "demo: the node ran out of memory"
	gpuFault      = "gpu"
	gpuMessage    = "demo: GPU 0 fell off the bus"
)

// demoPod is one pod of the drill.
type demoPod struct {
	name, node, about string
	tolerate          *int64 // nil: no toleration; -1: forever
}

// cast is who plays in the drill: the nodes and their faults, in the order
// they are injected, and the pods; and in the drain part.
type cast struct {
	faults []fault
	pods   []demoPod
	maint  maintCast
}

func newCast(o options) cast {
	secs := int64(o.tolerateFor / time.Second)
	return cast{
		faults: []fault{
			{"vnode-1", o.faultFor, "act 1: a node runs out of memory", memoryFault, memoryMessage},
			{"vnode-2", o.faultFor + longerBy, "act 2: a second node, while vnode-1 holds the only grant", memoryFault, memoryMessage},
			{"vnode-3", shortFault, "act 2: a third node, briefly: its fault ends while it waits", memoryFault, memoryMessage},
		},
		pods: []demoPod{
			{"web", "vnode-1", "no toleration", nil},
			{"batch", "vnode-1", fmt.Sprintf("tolerates the taint for %ds", secs), &secs},
			{"monitor", "vnode-1", "tolerates the taint forever", ptr.To[int64](-1)},
			{"web-2", "vnode-2", "no toleration", nil},
			{"web-3", "vnode-3", "no toleration", nil},
		},
		maint: newMaintCast(),
	}
}

// nodes are the drill's node names, in order.
func (c cast) nodes() []string {
	out := make([]string, len(c.faults))
	for i, f := range c.faults {
		out[i] = f.node
	}
	return out
}

// allNodes are every virtual node's name: the drill's, then the drain
// part's.
func (c cast) allNodes() []string {
	return append(c.nodes(), c.maint.nodes()...)
}

// podsOn are the names of the pods on node.
func (c cast) podsOn(node string) []string {
	var out []string
	for _, p := range c.pods {
		if p.node == node {
			out = append(out, p.name)
		}
	}
	return out
}

// longest is the longest fault.
func (c cast) longest() time.Duration {
	var l time.Duration
	for _, f := range c.faults {
		l = max(l, f.lasts)
	}
	return l
}
