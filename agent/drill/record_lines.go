package drill

// The live view's lines: each says in plain words what a new version
// changed that a person watching a drill cares about. Heartbeats, status
// churn and anything else that changes nothing here make no line.

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"

	tdrill "github.com/selftaint/selftaint/taints/drill"
	"github.com/selftaint/selftaint/taints/fleet"
)

// nodeLines says what next changed on a node since prev (the zero
// version for a node first seen).
func nodeLines(prev, next tdrill.NodeVersion) []string {
	var out []string
	say := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("node %s: ", next.Name)+fmt.Sprintf(format, args...))
	}
	for _, k := range next.Taints {
		if !slices.Contains(prev.Taints, k) {
			say("taint %s on", k)
		}
	}
	for _, k := range prev.Taints {
		if !slices.Contains(next.Taints, k) {
			say("taint %s off", k)
		}
	}
	if next.Ready != prev.Ready {
		say("Ready %s", orNone(next.Ready))
	}
	if next.Unschedulable != prev.Unschedulable {
		if next.Unschedulable {
			say("cordoned")
		} else {
			say("uncordoned")
		}
	}
	if line := maintenanceLine(prev, next); line != "" {
		say("%s", line)
	}
	// Other conditions (a probe's), in a stable order; Ready and the
	// maintenance condition are said above.
	types := make([]string, 0, len(next.Conditions)+len(prev.Conditions))
	for t := range next.Conditions {
		types = append(types, t)
	}
	for t := range prev.Conditions {
		if _, ok := next.Conditions[t]; !ok {
			types = append(types, t)
		}
	}
	sort.Strings(types)
	for _, t := range types {
		if t == "Ready" || t == string(fleet.MaintenanceCondition) || next.Conditions[t] == prev.Conditions[t] {
			continue
		}
		say("%s %s", t, orNone(next.Conditions[t]))
	}
	return out
}

// maintenanceLine says how selftaint's maintenance condition changed, by
// its status and reason: a new reason while True ("maintenance
// Draining"); the condition going False, the node given back ("maintenance
// given back (SelftaintMaintenance False, DrainBlocked)": a blocked drain
// given back at its deadline keeps its reason, only the status says it);
// the condition gone ("maintenance ended"). "" when neither changed.
func maintenanceLine(prev, next tdrill.NodeVersion) string {
	mc := string(fleet.MaintenanceCondition)
	was, now := prev.Conditions[mc], next.Conditions[mc]
	if was == now && prev.Maintenance == next.Maintenance {
		return ""
	}
	switch {
	case now == "" && next.Maintenance == "":
		return "maintenance ended"
	case now == string(corev1.ConditionFalse):
		return fmt.Sprintf("maintenance given back (%s False, %s)", mc, orNone(next.Maintenance))
	case now == string(corev1.ConditionTrue) || now == "":
		return "maintenance " + orNone(next.Maintenance)
	}
	return fmt.Sprintf("maintenance %s (%s %s)", orNone(next.Maintenance), mc, now)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// podLines says what next changed on a pod since prev (nil for a pod first
// seen). name is how the line names the pod.
func podLines(name string, prev *tdrill.PodVersion, next tdrill.PodVersion) []string {
	var zero tdrill.PodVersion
	if prev == nil {
		prev = &zero
	}
	where := ""
	if next.Node != "" {
		where = " (" + next.Node + ")"
	}
	var out []string
	say := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("pod %s", name)+fmt.Sprintf(format, args...))
	}
	switch {
	case next.Disruption != "" && next.Disruption != prev.Disruption:
		say("%s: evicted (%s)", where, next.Disruption)
	case next.Deleted && next.Disruption == "":
		say("%s: deleted without eviction", where)
	case next.Deleted:
		say("%s: deleted", where)
	case next.Terminating && !prev.Terminating:
		say("%s: terminating", where)
	}
	if next.Deleted || next.Terminating {
		return out
	}
	switch {
	case next.Ready && !prev.Ready:
		say(": ready on %s", orNone(next.Node))
	case !next.Ready && prev.Ready:
		say("%s: not ready", where)
	case next.Node != "" && prev.Node == "":
		say(": scheduled on %s", next.Node)
	}
	return out
}

// pdbLines says when a PDB goes below its minimum, changes its healthy
// count while below, and comes back to it.
func pdbLines(name string, prev *tdrill.PDBVersion, next tdrill.PDBVersion) []string {
	was := prev != nil && belowMinimum(*prev)
	switch {
	case belowMinimum(next) && (!was || prev.Healthy != next.Healthy || prev.Desired != next.Desired):
		return []string{fmt.Sprintf("PDB %s: %d healthy, below its minimum %d", name, next.Healthy, next.Desired)}
	case was && !belowMinimum(next):
		return []string{fmt.Sprintf("PDB %s: %d healthy, at or above its minimum %d again", name, next.Healthy, next.Desired)}
	}
	return nil
}

// workloadLines says a workload's ready count when it or its desired
// count changed.
func workloadLines(name string, prev *tdrill.WorkloadVersion, next tdrill.WorkloadVersion) []string {
	if prev != nil && prev.Desired == next.Desired && prev.Ready == next.Ready {
		return nil
	}
	return []string{fmt.Sprintf("%s %s: %d/%d ready", next.Ref.Kind, name, next.Ready, next.Desired)}
}

// guardLines says which of the guard's scopes tripped or reset since prev
// (nil for the first version seen), that it was deleted, or that it
// cannot be read. A scope is tripped only on a readable version: one seen
// tripped again after an unreadable version or a delete is said again.
func guardLines(prev *tdrill.GuardVersion, next tdrill.GuardVersion) []string {
	switch {
	case next.Deleted:
		return []string{"guard: deleted (nothing tripped)"}
	case next.Error != "":
		if prev != nil && prev.Error == next.Error {
			return nil
		}
		return []string{"guard: unreadable: " + next.Error}
	}
	var was fleet.GuardState
	if prev != nil {
		was = prev.State
	}
	var out []string
	for _, k := range guardScopes(was, next.State) {
		before, now := was.Conditions[k.cond][k.scope], next.State.Conditions[k.cond][k.scope]
		where := fleet.ScopeWhere(k.scope)
		switch {
		case now.Tripped && !before.Tripped:
			out = append(out, fmt.Sprintf("guard: %s tripped %s (%d of %d nodes)", k.cond, where, now.Unhealthy, now.Nodes))
		case before.Tripped && !now.Tripped:
			out = append(out, fmt.Sprintf("guard: %s reset %s", k.cond, where))
		}
	}
	return out
}

type guardKey struct {
	cond  corev1.NodeConditionType
	scope string
}

// guardScopes are the condition/scopes of a and b, sorted.
func guardScopes(a, b fleet.GuardState) []guardKey {
	var keys []guardKey
	for _, g := range []fleet.GuardState{a, b} {
		for cond, scopes := range g.Conditions {
			for scope := range scopes {
				if k := (guardKey{cond, scope}); !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
	}
	slices.SortFunc(keys, func(x, y guardKey) int {
		return cmp.Or(cmp.Compare(x.cond, y.cond), cmp.Compare(x.scope, y.scope))
	})
	return keys
}
