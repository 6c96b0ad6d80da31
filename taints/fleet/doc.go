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
// is a fleet problem, not a node problem: no new taints for it). A drain
// (maintenance) likewise needs a slot from the maintenance pool, under the
// same guard.
//
// The NoExecute protocol, every piece readable by name so that nothing
// grows as nodes x nodes:
//   - a node asks with the annotation RequestAnnotation on its own Node
//     (Request: since when, for which conditions, and, while it holds a
//     grant, a liveness stamp the agent refreshes);
//   - a grant is a coordination.k8s.io Lease named GrantName(node) in the
//     coordinator's namespace, holder = the node, renewed by the
//     coordinator; a node applies NoExecute only while Granted says so;
//   - the guard is one ConfigMap (GuardState under GuardDataKey) that every
//     agent watches by name; Fresh says whether it may still be trusted.
//
// The maintenance protocol (maintenance.go):
//   - a node is asked to drain by a MaintenanceRequest on its Node, in
//     OperatorRequestAnnotation (an operator, `selftaint drain`) or
//     AgentRequestAnnotation (its own agent, for a rule with action: drain;
//     its Conditions say which); MaintenanceOf picks the one served;
//   - a slot is a Lease named SlotName(node), labelled SlotLabel, holder =
//     the node, acquireTime = when the drain started (its deadline runs
//     from then), annotated with the request ID it serves, its phase and
//     the drain's progress. Given back, it keeps its Lease with the holder
//     cleared (PhaseEnded) as the record that that request was served, so
//     a drain given back at its deadline or uncordoned by someone else is
//     not started again while the same request stands;
//   - the coordinator cordons the node recording CordonAnnotation, evicts
//     its pods, and says how it goes in the condition MaintenanceCondition.
//
// Decide is the coordinator's whole policy: nodes, grants, slots and its
// memory in; the disruption guard, decided once, and on it two sibling
// decisions: the grants to create, renew, release and delete
// (NoExecuteDecision, the budget) and the drains to start, run, end and
// the slots to delete (MaintenanceDecision, the pool). NodeView and SlotOf
// build its input from API objects, so that the coordinator and
// `selftaint explain` see the same fleet and ask the same function.
package fleet
