package fleet

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// VirtualLabel marks a virtual Node (`selftaint virtual`): set to "true",
// the Node is simulated, and counts in a virtual fleet only.
const VirtualLabel = "selftaint.io/virtual"

// FleetAnnotation, on the guard ConfigMap, says which Nodes the
// coordinator that writes it counts (a Membership), so that a reader such
// as `selftaint explain` counts the same ones.
const FleetAnnotation = "selftaint.io/fleet"

// Membership says which Nodes are a coordinator's fleet: those it counts
// in the budget, the rate and the disruption guard, and the only ones it
// grants. A Node outside it is neither counted nor granted, and its grant
// Lease, if one is there, is left alone (another fleet's coordinator may
// hold it).
type Membership string

// The memberships.
const (
	// MembersReal is the fleet of real Nodes: every Node not labelled
	// VirtualLabel=true. The default ("" means it too): simulated nodes
	// must never dilute a real fleet's budget or guard.
	MembersReal Membership = "real"
	// MembersVirtual is the fleet of virtual Nodes: those labelled
	// VirtualLabel=true (the coordinator of `selftaint virtual
	// --coordinator`).
	MembersVirtual Membership = "virtual"
	// MembersAll is every Node.
	MembersAll Membership = "all"
)

// Memberships are the valid values, in the order they are documented.
func Memberships() []Membership { return []Membership{MembersReal, MembersVirtual, MembersAll} }

// IsVirtual reports whether n is labelled a virtual Node.
func IsVirtual(n *corev1.Node) bool { return n.Labels[VirtualLabel] == "true" }

// Includes reports whether node n is in the fleet m. An unknown value
// includes nothing (ParseMembership refuses it first).
func (m Membership) Includes(n *corev1.Node) bool {
	switch m {
	case MembersReal, "":
		return !IsVirtual(n)
	case MembersVirtual:
		return IsVirtual(n)
	case MembersAll:
		return true
	}
	return false
}

// OrDefault is m, or MembersReal for "".
func (m Membership) OrDefault() Membership {
	if m == "" {
		return MembersReal
	}
	return m
}

// Describe says in words which Nodes m counts.
func (m Membership) Describe() string {
	switch m.OrDefault() {
	case MembersReal:
		return "real Nodes only (not labelled " + VirtualLabel + "=true)"
	case MembersVirtual:
		return "virtual Nodes only (labelled " + VirtualLabel + "=true)"
	case MembersAll:
		return "every Node"
	}
	return fmt.Sprintf("no Node (unknown fleet %q)", string(m))
}

// ParseMembership reads a Membership, "" being the default (real).
func ParseMembership(s string) (Membership, error) {
	m := Membership(s).OrDefault()
	all := Memberships()
	if slices.Contains(all, m) {
		return m, nil
	}
	names := make([]string, len(all))
	for i, v := range all {
		names[i] = string(v)
	}
	return "", fmt.Errorf("fleet %q: must be one of %s", s, strings.Join(names, ", "))
}
