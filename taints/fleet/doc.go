// Package fleet is what the coordinator decides for the whole fleet, and
// the small objects through which those decisions reach each node's agent.
// Like the rest of package taints it is pure: API types in, decisions out,
// the time passed in; no client, no goroutines.
//
// No single node may decide whether it can evict its pods, because one bad
// probe, config or shared outage makes every node decide the same thing at
// once. So a NoExecute taint needs a grant, and the coordinator hands out
// grants under a budget (at most so many nodes at once, at most so many new
// ones per minute per zone, in the order nodes asked) and a disruption
// guard (when most of a zone or of the fleet reports the same condition, it
// is a fleet problem, not a node problem: no new taints for it).
//
// The protocol, every piece readable by name so that nothing grows as nodes
// x nodes:
//   - a node asks with the annotation RequestAnnotation on its own Node
//     (Request: since when, for which conditions, and, while it holds a
//     grant, a liveness stamp the agent refreshes);
//   - a grant is a coordination.k8s.io Lease named GrantName(node) in the
//     coordinator's namespace, holder = the node, renewed by the
//     coordinator; a node applies NoExecute only while Granted says so;
//   - the guard is one ConfigMap (GuardState under GuardDataKey) that every
//     agent watches by name; Fresh says whether it may still be trusted.
//
// Decide is the coordinator's whole policy: nodes, grants and its memory
// in, the grants to create, renew, release and delete and the guard out.
package fleet
