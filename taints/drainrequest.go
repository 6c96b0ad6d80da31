package taints

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/fleet"
)

// DrainRule is a rule with action: drain: while its condition is in a
// status that applies it, the node's agent asks for a sick-node drain of
// its own Node (fleet.AgentRequestAnnotation), which the coordinator
// serves within the maintenance pool and the disruption guard. It applies
// as a taint rule does (Rule.Applies), at the conditions decided after
// damping, faults and the change limiter.
type DrainRule struct {
	// Condition is the NodeCondition type the rule watches.
	Condition corev1.NodeConditionType
	// Status is the condition status that applies the rule (usually
	// True); OnUnknown applies it while the condition is Unknown too.
	Status    corev1.ConditionStatus
	OnUnknown bool
	// Deadline is how long the drain may take once it has started; zero
	// leaves it to the coordinator's maintenance.defaultDeadline.
	Deadline time.Duration
	// EvictUnreplicated and DeleteEmptyDirData are the request's pod
	// options (fleet.MaintenanceRequest).
	EvictUnreplicated, DeleteEmptyDirData bool
	// EndWhenHealthy withdraws the request once no drain rule applies any
	// more, drained or not. Without it a drain that has started keeps the
	// node in maintenance until an operator removes the request.
	EndWhenHealthy bool
}

// Applies reports whether the rule asks for a drain at a condition status.
func (r DrainRule) Applies(status corev1.ConditionStatus) bool {
	return status == r.Status || (status == corev1.ConditionUnknown && r.OnUnknown)
}

// DrainInput decides the node's sick-node drain request (PlanDrainRequest).
type DrainInput struct {
	// Rules are the drain rules.
	Rules []DrainRule
	// States are the conditions decided at this sync; a rule whose
	// condition is absent is undecided.
	States map[corev1.NodeConditionType]State
}

// drainRequester prefixes RequestedBy in the agent's requests.
const drainRequester = "selftaint-agent/"

// maxDrainText bounds the reason and requester the agent writes: the bound
// fleet.ParseMaintenanceRequest holds every request to.
const maxDrainText = 256

// Reasons of the Events that tell a sick-node drain request made or
// withdrawn.
const (
	// ReasonDrainRequested: a drain rule applies and the node asks the
	// coordinator to drain it.
	ReasonDrainRequested = "DrainRequested"
	// ReasonDrainWithdrawn: no drain rule applies any more and the request
	// is withdrawn (the coordinator uncordons what it cordoned).
	ReasonDrainWithdrawn = "DrainRequestWithdrawn"
)

// DrainPlan is the sick-node drain request's plan.
type DrainPlan struct {
	// Value is the annotation's value ("" to remove); Change says whether
	// it changes.
	Value  string
	Change bool
	// Reason and Message tell a request made or withdrawn now (Reason
	// empty: neither), for an Event once written.
	Reason, Message string
}

// PlanDrainRequest decides the fleet.AgentRequestAnnotation value on node
// (fleet.MaintenanceRequest as JSON).
//
// While any drain rule applies, the request stands: its conditions are
// the applying rules' conditions; its deadline the shortest they give
// (zero deadlines are the coordinator's default, used only where no rule
// gives one) and its pod options theirs OR'ed; requestedAt is kept from
// the annotation while it stands, so the node keeps its place in line and
// the request its ID (now for a new or unreadable one, which is replaced);
// its reason names the first applying condition, its status and message,
// and is kept while the conditions stay the same (messages carry live
// readings: they would rewrite the Node at every probe run).
//
// Once no drain rule applies, the request is withdrawn when
//   - a drain rule of one of its conditions has EndWhenHealthy, or
//   - the drain never started: the Node's fleet.MaintenanceCondition is
//     absent or Waiting (a sick-node drain whose condition cleared before
//     it got its slot does not start), or the annotation is unreadable
//     (the coordinator serves none);
//
// else it is kept: the node stays in maintenance until an operator
// removes the annotation. While one of its conditions with a drain rule is
// undecided (after a restart, before its probe reports) nothing changes:
// a read failure is never a recovery.
//
// EndWhenHealthy honours the condition's clearAfter because the
// conditions are damped: the damper turns a condition healthy only after
// its probe has read healthy for clearAfter (taints.Damper). A fault
// decides its condition outright, so its end clears the condition at once
// where the probe underneath has read healthy that long.
func PlanDrainRequest(node *corev1.Node, in DrainInput, now time.Time) DrainPlan {
	raw, had := node.Annotations[fleet.AgentRequestAnnotation]
	var old fleet.MaintenanceRequest
	readable := false
	if had {
		r, err := fleet.ParseMaintenanceRequest(fleet.AgentRequestAnnotation, raw)
		old, readable = r, err == nil
	}
	applying := applyingDrains(in)
	if len(applying) == 0 {
		if !had {
			return DrainPlan{}
		}
		if !readable {
			return DrainPlan{Change: true}
		}
		keep, why := keepDrain(node, old, in)
		if keep {
			return DrainPlan{Value: raw}
		}
		return DrainPlan{Change: true, Reason: ReasonDrainWithdrawn, Message: "withdrew the drain request: " + why}
	}
	r := drainRequest(node.Name, applying, in.States, now)
	if readable {
		r.RequestedAt = old.RequestedAt
		if slices.Equal(old.Conditions, r.Conditions) {
			r.Reason = old.Reason
		}
	}
	p := DrainPlan{Value: r.Format()}
	p.Change = !had || p.Value != raw
	if !readable {
		p.Reason, p.Message = ReasonDrainRequested, "asked the coordinator to drain this node: "+r.Reason
	}
	return p
}

// applyingDrains are the drain rules that apply at in.States, sorted by
// condition.
func applyingDrains(in DrainInput) []DrainRule {
	var out []DrainRule
	for _, r := range in.Rules {
		if s, ok := in.States[r.Condition]; ok && r.Applies(s.Status) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b DrainRule) int {
		switch {
		case a.Condition < b.Condition:
			return -1
		case a.Condition > b.Condition:
			return 1
		}
		return 0
	})
	return out
}

// drainRequest is the request the applying rules make (applying is not
// empty), requested now.
func drainRequest(node string, applying []DrainRule, states map[corev1.NodeConditionType]State, now time.Time) fleet.MaintenanceRequest {
	first := applying[0]
	st := states[first.Condition]
	reason := fmt.Sprintf("condition %s is %s", first.Condition, st.Status)
	if st.Message != "" {
		reason += ": " + st.Message
	}
	r := fleet.MaintenanceRequest{
		Version:     fleet.MaintenanceVersion,
		Reason:      Truncate(reason, maxDrainText),
		RequestedBy: Truncate(drainRequester+node, maxDrainText),
		RequestedAt: now.UTC().Truncate(time.Second),
	}
	var deadline time.Duration
	conds := map[corev1.NodeConditionType]bool{}
	for _, d := range applying {
		conds[d.Condition] = true
		if d.Deadline > 0 && (deadline == 0 || d.Deadline < deadline) {
			deadline = d.Deadline
		}
		r.EvictUnreplicated = r.EvictUnreplicated || d.EvictUnreplicated
		r.DeleteEmptyDirData = r.DeleteEmptyDirData || d.DeleteEmptyDirData
	}
	if deadline > 0 {
		r.Deadline = deadline.String()
	}
	r.Conditions = slices.Sorted(maps.Keys(conds))
	return r
}

// keepDrain says whether a readable request old stays once no drain rule
// applies (see PlanDrainRequest), and if not, why it goes.
func keepDrain(node *corev1.Node, old fleet.MaintenanceRequest, in DrainInput) (bool, string) {
	for _, r := range in.Rules {
		if !slices.Contains(old.Conditions, r.Condition) {
			continue
		}
		if _, decided := in.States[r.Condition]; !decided {
			return true, ""
		}
	}
	for _, r := range in.Rules {
		if r.EndWhenHealthy && slices.Contains(old.Conditions, r.Condition) {
			return false, fmt.Sprintf("%s is %s and its drain rule ends the maintenance when healthy (endWhenHealthy)", r.Condition, in.States[r.Condition].Status)
		}
	}
	switch c := FindCondition(node, fleet.MaintenanceCondition); {
	case c == nil:
		return false, "no drain rule applies any more, before the coordinator took the request up"
	case c.Reason == fleet.ReasonMaintenanceWaiting:
		return false, "no drain rule applies any more while the node still waited for a maintenance slot: the drain does not start"
	}
	return true, ""
}
