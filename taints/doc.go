// Package taints decides, without talking to the API server, what selftaint
// should write on its Node. Everything here is pure logic over API types with
// the time passed in, so the agent re-runs it on every reconcile and tests
// drive it step by step with a fake clock.
//
// The plan is the centre: PlanNode takes a Snapshot (the Node as read, the
// damped conditions, the faults in force, the hardware inventory,
// initialization, the config and now) and returns a NodePlan: the conditions
// to publish with their transition times (PlanConditions, DecideInit), the
// extended resources to advertise or withdraw and whether the status needs
// writing, what decides the taints, labels and ownership records
// (PlanMetadata, re-run by the agent's write loop after a conflict), and when
// the next sync is due. The agent only gathers the snapshot and writes the
// plan; `selftaint check` uses the same plan.
//
// A new policy goes into the plan, as a pure function with table tests:
// never into the agent's I/O. A new probe goes into the probe registry in
// agent/config, not here.
//
// Around the plan: the Damper turns raw probe verdicts into condition states
// that flip only after holding; rules map conditions to taints; PlanTaints
// changes spec.taints touching only the taints selftaint owns: by the
// ownership record (trusted only for what the config could produce, and
// keeping each taint's timeAdded for a restore), and by key
// (OwnedByKey: its own keys, whoever wrote them); and
// Explain tells which pods on a node the taint-eviction controller would
// delete, and when, and which new pods could still be scheduled there.
// Fault annotations' format is the sub-package faults.
package taints
