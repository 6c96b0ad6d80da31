package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// maintenanceStanding is a node's maintenance as an operator command shows
// it: its request, its slot Lease, and what the pool's decision
// (fleet.Decide, as the coordinator would decide now) says of it.
type maintenanceStanding struct {
	// request is the request the node is served by (nil: none);
	// requestErrs the unreadable ones.
	request     *fleet.Maintenance
	requestErrs []error
	// slot is the node's slot Lease (nil: none).
	slot        *coordinationv1.Lease
	decision    fleet.MaintenanceDecision
	maxParallel intstr.IntOrString
}

// describe says how node's maintenance stands: nothing when it has no
// request, no slot and no maintenance condition.
func (m maintenanceStanding) describe(node *corev1.Node, namespace string, now time.Time) []string {
	cond := taints.FindCondition(node, fleet.MaintenanceCondition)
	if m.request == nil && len(m.requestErrs) == 0 && m.slot == nil && cond == nil {
		return nil
	}
	return []string{
		fmt.Sprintf("Maintenance of %s: a drain takes a slot from the coordinator's maintenance pool (namespace %s).", node.Name, namespace),
		"  " + m.requestLine(),
		"  " + m.slotLine(node.Name, now),
		"  " + m.placeLine(node.Name),
		"  " + m.poolLine(),
		"  " + conditionLine(cond),
	}
}

func (m maintenanceStanding) requestLine() string {
	if m.request == nil {
		if len(m.requestErrs) > 0 {
			return fmt.Sprintf("request: cannot be read, so none is served: %v", errors.Join(m.requestErrs...))
		}
		return fmt.Sprintf("request: none (neither %s nor %s is on the node)", fleet.OperatorRequestAnnotation, fleet.AgentRequestAnnotation)
	}
	r := m.request.Request
	who := "an operator's"
	if m.request.Annotation == fleet.AgentRequestAnnotation {
		who = "its agent's"
	}
	deadline := r.Deadline
	if deadline == "" {
		deadline = "the default (maintenance.defaultDeadline)"
	}
	onDeadline := r.OnDeadline
	if onDeadline == "" {
		onDeadline = fleet.OnDeadlineRelease
	}
	line := fmt.Sprintf("request: %s (%s, id %s): %q, by %s at %s; deadline %s from the drain's start, then %s",
		who, m.request.Annotation, m.request.ID(), r.Reason, r.RequestedBy, clock(r.RequestedAt), deadline, onDeadline)
	if len(r.Conditions) > 0 {
		line += fmt.Sprintf("; a sick-node drain for %s (it starts only while the node reports one of them)", fleet.JoinConditions(r.Conditions))
	}
	return line
}

func (m maintenanceStanding) slotLine(node string, now time.Time) string {
	l := m.slot
	if l == nil {
		return "slot: none"
	}
	s := fleet.SlotOf(node, l)
	if s.Holder == "" {
		if m.request != nil && m.request.ID() == s.RequestID {
			return fmt.Sprintf("slot: given back (%s) for request %s: the record that it was served; it is not drained again while that request stands", s.Phase, s.RequestID)
		}
		return fmt.Sprintf("slot: given back for an earlier request %s; its Lease is deleted at the coordinator's next decision", s.RequestID)
	}
	line := fmt.Sprintf("slot: %s since %s (request %s)", s.Phase, clock(s.Acquired), s.RequestID)
	if o, ok := m.decision.Drain[node]; ok {
		line += fmt.Sprintf(", deadline %s", clock(o.Deadline))
		if o.Force {
			line += " (passed: forced, the pods the Eviction API refuses are deleted, each with its grace period)"
		} else {
			line += fmt.Sprintf(" (in %s)", o.Deadline.Sub(now).Round(time.Second))
		}
	}
	if p, err := fleet.ParseProgress(l.Annotations[fleet.SlotProgressAnnotation]); err != nil {
		line += fmt.Sprintf("; progress unreadable (%v)", err)
	} else if p.Total > 0 {
		line += fmt.Sprintf("; evicted %d of %d pods", p.Evicted, p.Total)
	}
	if o, ok := m.decision.End[node]; ok {
		line += fmt.Sprintf("; given back at the coordinator's next decision, %s: %s", o.Reason, o.Message)
	}
	return line
}

func (m maintenanceStanding) placeLine(node string) string {
	if i := slices.IndexFunc(m.decision.Waiting, func(w fleet.Waiter) bool { return w.Node == node }); i >= 0 {
		return fmt.Sprintf("place: %s of %d waiting: %s", fleet.Ordinal(i+1), len(m.decision.Waiting), m.decision.Waiting[i].Why)
	}
	switch {
	case slices.Contains(m.decision.Start, node):
		return "place: first: the coordinator gives it a slot at its next decision"
	case m.slot != nil && m.slot.Spec.HolderIdentity != nil && *m.slot.Spec.HolderIdentity == node:
		return "place: holds its slot"
	case m.request == nil:
		return "place: not in line (no request)"
	}
	return "place: not in line: its request has been served"
}

func (m maintenanceStanding) poolLine() string {
	const most = 10
	u := m.decision.Unavailable
	names := strings.Join(u[:min(len(u), most)], ", ")
	if len(u) > most {
		names += fmt.Sprintf(" and %d more", len(u)-most)
	}
	if names != "" {
		names = " (" + names + ")"
	}
	return fmt.Sprintf("pool: %d of %d unavailable%s; maxParallel %s (draining, NotReady and cordoned-by-others nodes count)", len(u), m.decision.Size, names, m.maxParallel.String())
}

func conditionLine(c *corev1.NodeCondition) string {
	if c == nil {
		return fmt.Sprintf("condition %s: not set", fleet.MaintenanceCondition)
	}
	return fmt.Sprintf("condition %s: %s, %s since %s: %s", fleet.MaintenanceCondition, c.Status, c.Reason, clock(c.LastTransitionTime.Time), c.Message)
}
