// Package taints decides, without talking to the API server, what selftaint
// should write on its Node: it damps raw probe verdicts into NodeCondition
// states, maps conditions to taints through a rule table, and plans changes to
// spec.taints that touch only the taints selftaint owns. Everything here is
// pure logic over API types with an injected notion of time, so the agent can
// re-run it on every reconcile and tests can drive it step by step. It also
// explains taints: which pods on a node the taint-eviction controller would
// delete, and when, and which new pods could still be scheduled there.
package taints
