package fleet

import (
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
)

// NodeErrors are the requests on a Node that cannot be read, each error
// naming its annotation (and field): such a request is not acted on.
type NodeErrors struct {
	// Request: its NoExecute request (RequestAnnotation).
	Request error
	// Maintenance: its maintenance requests (MaintenanceOf).
	Maintenance []error
}

// NodeView is how Decide sees n, in everything that can be read from n
// alone: its zone, readiness, NoExecute request, the conditions in watched
// it reports (in a status listed for them), its cordon and the maintenance
// request it is to be served by. The coordinator and `selftaint explain`
// both build their input with it, so both ask Decide about the same
// fleet. Two fields are left to the caller: AliveSeen (when the
// coordinator saw the request change, on its own clock) and
// CarriesNoExecute (it needs the taint ownership record of package taints:
// taints.CarriesNoExecute).
func NodeView(n *corev1.Node, watched map[corev1.NodeConditionType][]corev1.ConditionStatus) (Node, NodeErrors) {
	var errs NodeErrors
	fn := Node{
		Name:          n.Name,
		Zone:          n.Labels[ZoneLabel],
		Ready:         IsReady(n),
		Reporting:     reporting(n, watched),
		Unschedulable: n.Spec.Unschedulable,
		CordonedFor:   n.Annotations[CordonAnnotation],
	}
	if raw, ok := n.Annotations[RequestAnnotation]; ok {
		r, err := ParseRequest(raw)
		if err != nil {
			errs.Request = err
		} else {
			fn.Request = &r
		}
	}
	fn.Maintenance, errs.Maintenance = MaintenanceOf(n)
	fn.MaintenanceUnreadable = fn.Maintenance == nil && len(errs.Maintenance) > 0
	return fn, errs
}

// IsReady reports whether n's Ready condition is True.
func IsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// reporting are the watched conditions n reports, in a status listed for
// them, sorted.
func reporting(n *corev1.Node, watched map[corev1.NodeConditionType][]corev1.ConditionStatus) []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for _, cond := range n.Status.Conditions {
		if slices.Contains(watched[cond.Type], cond.Status) && !slices.Contains(out, cond.Type) {
			out = append(out, cond.Type)
		}
	}
	slices.Sort(out)
	return out
}

// LeaseNode is the node a grant or slot Lease l (named with prefix,
// GrantPrefix or SlotPrefix) is for: the node in byName (the names of the
// fleet's nodes' Leases) whose Lease name it has, else its holder if the
// name is the holder's, else the name without the prefix (a node gone from
// the fleet). ok is false for a Lease whose name is not one of prefix's.
func LeaseNode(l *coordinationv1.Lease, prefix string, byName map[string]string) (string, bool) {
	if node, ok := byName[l.Name]; ok {
		return node, true
	}
	if h := l.Spec.HolderIdentity; h != nil && prefixedName(prefix, *h) == l.Name {
		return *h, true
	}
	if node, ok := strings.CutPrefix(l.Name, prefix); ok && node != "" {
		return node, true
	}
	return "", false
}

// GrantOf is how Decide sees node's grant Lease l.
func GrantOf(node string, l *coordinationv1.Lease) Grant {
	g := Grant{Node: node, Zone: l.Annotations[GrantZoneAnnotation]}
	if h := l.Spec.HolderIdentity; h != nil {
		g.Holder = *h
	}
	if t := l.Spec.AcquireTime; t != nil {
		g.Acquired = t.Time
	}
	if t := l.Spec.RenewTime; t != nil {
		g.Renewed = t.Time
	}
	return g
}

// SlotOf is how Decide sees node's maintenance slot Lease l.
func SlotOf(node string, l *coordinationv1.Lease) Slot {
	s := Slot{
		Node:      node,
		Zone:      l.Annotations[GrantZoneAnnotation],
		RequestID: l.Annotations[SlotRequestAnnotation],
		Phase:     l.Annotations[SlotPhaseAnnotation],
		// Someone else's cordon, recorded when the slot was taken.
		CordonTheirs: l.Annotations[SlotCordonAnnotation] == SlotCordonTheirs,
	}
	if h := l.Spec.HolderIdentity; h != nil {
		s.Holder = *h
	}
	if t := l.Spec.AcquireTime; t != nil {
		s.Acquired = t.Time
	}
	return s
}
