package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/probes/strict"
)

// Names and labels of the protocol's objects.
const (
	// RequestAnnotation is the Node annotation an agent sets while one of
	// its NoExecute rules applies (a Request, as JSON).
	RequestAnnotation = "selftaint.io/noexecute-request"
	// GrantPrefix starts every grant Lease's name (GrantName).
	GrantPrefix = "selftaint-grant-"
	// GrantLabel is set to "true" on every grant Lease, so the coordinator
	// watches only those.
	GrantLabel = "selftaint.io/grant"
	// GrantZoneAnnotation records the zone a grant was started in, so the
	// per-zone rate holds across a leader change even after the node is
	// gone.
	GrantZoneAnnotation = "selftaint.io/zone"
	// DefaultGuardName is the guard ConfigMap's name.
	DefaultGuardName = "selftaint-guard"
	// GuardDataKey is the ConfigMap data key that holds the GuardState.
	GuardDataKey = "guard.json"
	// DefaultLeaderLease is the Lease the coordinator's replicas elect a
	// leader with.
	DefaultLeaderLease = "selftaint-coordinator"
	// FleetScope is the scope name of the whole fleet in a ConditionGuard
	// (zone names are label values, which cannot start with '*').
	FleetScope = "*"
	// ZoneLabel is the node label that names its zone.
	ZoneLabel = "topology.kubernetes.io/zone"
)

// Request is a node's ask for a NoExecute grant, kept in
// RequestAnnotation on its own Node.
type Request struct {
	// Since is when the node started asking (the agent's clock): grants go
	// to waiting nodes in this order. It is kept while the node asks.
	Since time.Time `json:"since"`
	// Conditions are the conditions whose NoExecute rules apply.
	Conditions []corev1.NodeConditionType `json:"conditions"`
	// Alive is refreshed by the agent while it holds a grant (every third
	// of the grant's TTL). The coordinator judges it by when it sees the
	// value change, on its own clock: a holder whose agent stops
	// refreshing loses its grant.
	Alive *time.Time `json:"alive,omitempty"`
}

// Format is the annotation value.
func (r Request) Format() string {
	r.Since = r.Since.UTC().Truncate(time.Second)
	if r.Alive != nil {
		a := r.Alive.UTC().Truncate(time.Second)
		r.Alive = &a
	}
	r.Conditions = slices.Clone(r.Conditions)
	slices.Sort(r.Conditions)
	r.Conditions = slices.Compact(r.Conditions)
	b, _ := json.Marshal(r) // a struct of strings and times cannot fail
	return string(b)
}

// ParseRequest reads a RequestAnnotation value, strictly.
func ParseRequest(s string) (Request, error) {
	var r Request
	if err := strict.JSON([]byte(s), &r); err != nil {
		return Request{}, fmt.Errorf("%s: %w", RequestAnnotation, err)
	}
	if r.Since.IsZero() {
		return Request{}, fmt.Errorf("%s: since is required", RequestAnnotation)
	}
	if len(r.Conditions) == 0 {
		return Request{}, fmt.Errorf("%s: conditions must name at least one condition", RequestAnnotation)
	}
	for i, c := range r.Conditions {
		if c == "" {
			return Request{}, fmt.Errorf("%s: conditions[%d] is empty", RequestAnnotation, i)
		}
	}
	return r, nil
}

// maxName is the longest object name the API server takes.
const maxName = 253

// GrantName is the name of node's grant Lease: GrantPrefix + the node's
// name, or, where that would be too long, a prefix of it and a hash.
func GrantName(node string) string { return prefixedName(GrantPrefix, node) }

// prefixedName is prefix + node, or, where that would be longer than an
// object name may be, a prefix of it and a hash of node.
func prefixedName(prefix, node string) string {
	name := prefix + node
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(node))
	h := hex.EncodeToString(sum[:8])
	return name[:maxName-len(h)-1] + "-" + h
}

// NewGrant is the Lease granting node NoExecute from now, for ttl, started
// in zone.
func NewGrant(namespace, node, zone string, ttl time.Duration, now time.Time) *coordinationv1.Lease {
	secs := int32(ttl / time.Second)
	t := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        GrantName(node),
			Namespace:   namespace,
			Labels:      map[string]string{GrantLabel: "true", "app.kubernetes.io/managed-by": "selftaint-coordinator"},
			Annotations: map[string]string{GrantZoneAnnotation: zone},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &node,
			LeaseDurationSeconds: &secs,
			AcquireTime:          &t,
			RenewTime:            &t,
		},
	}
}

// Granted reports whether lease grants node NoExecute at now, and until
// when. observedAt is when the reader saw this version of the lease, on its
// own clock: the grant ends a TTL after the earlier of that and the
// coordinator's renewTime, so neither a coordinator whose clock runs ahead
// nor a reader that has stopped seeing renewals keeps a grant alive. A
// released lease (no holder, or an empty one, even asked about node ""),
// another node's, or one without a renew time or duration grants nothing.
func Granted(lease *coordinationv1.Lease, node string, observedAt, now time.Time) (bool, time.Time) {
	if lease == nil {
		return false, time.Time{}
	}
	s := lease.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || *s.HolderIdentity != node || s.RenewTime == nil || s.LeaseDurationSeconds == nil || *s.LeaseDurationSeconds <= 0 {
		return false, time.Time{}
	}
	from := s.RenewTime.Time
	if !observedAt.IsZero() && observedAt.Before(from) {
		from = observedAt
	}
	until := from.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)
	return now.Before(until), until
}

// GuardState is the disruption guard as the coordinator last decided it:
// the guard ConfigMap's content.
type GuardState struct {
	// RenewTime is when the coordinator last wrote it: an agent that sees
	// no renewal for its staleAfter stops trusting it for NoExecute.
	RenewTime time.Time `json:"renewTime"`
	// Leader is the coordinator replica that wrote it.
	Leader string `json:"leader,omitempty"`
	// Conditions are the guarded conditions that are tripped, or were
	// judged, by scope: FleetScope or a zone name.
	Conditions map[corev1.NodeConditionType]map[string]Scope `json:"conditions,omitempty"`
}

// Scope is one condition's guard in one zone or the whole fleet.
type Scope struct {
	// Tripped: no new grants and no new taints for the condition here.
	Tripped bool `json:"tripped"`
	// Since is when it tripped (or last reset).
	Since time.Time `json:"since"`
	// Unhealthy of Nodes report the condition, at the last judgement.
	Unhealthy int `json:"unhealthy"`
	Nodes     int `json:"nodes"`
	// BelowSince, while tripped, is since when the share has been below the
	// reset line: it resets a cool-down after that.
	BelowSince *time.Time `json:"belowSince,omitempty"`
}

// Tripped reports whether the guard for condition c holds on a node in
// zone, and a sentence saying why.
func (g GuardState) Tripped(c corev1.NodeConditionType, zone string) (bool, string) {
	scopes := g.Conditions[c]
	if s, ok := scopes[FleetScope]; ok && s.Tripped {
		return true, fmt.Sprintf("the disruption guard for %s is tripped fleet-wide: %d of %d nodes report it (since %s)", c, s.Unhealthy, s.Nodes, s.Since.UTC().Format(time.RFC3339))
	}
	if s, ok := scopes[zone]; ok && s.Tripped {
		return true, fmt.Sprintf("the disruption guard for %s is tripped %s: %d of %d nodes report it (since %s)", c, where(zone), s.Unhealthy, s.Nodes, s.Since.UTC().Format(time.RFC3339))
	}
	return false, ""
}

// Fresh reports whether a guard read at observedAt (the reader's clock) may
// still be trusted at now: the coordinator renewed it within staleAfter, by
// the earlier of its renewTime and observedAt. It also returns when it goes
// stale.
func (g GuardState) Fresh(observedAt, now time.Time, staleAfter time.Duration) (bool, time.Time) {
	if g.RenewTime.IsZero() {
		return false, time.Time{}
	}
	from := g.RenewTime
	if !observedAt.IsZero() && observedAt.Before(from) {
		from = observedAt
	}
	until := from.Add(staleAfter)
	return now.Before(until), until
}

// EncodeGuard is the guard ConfigMap's data.
func EncodeGuard(g GuardState) map[string]string {
	b, _ := json.Marshal(g) // maps of strings, ints and times cannot fail
	return map[string]string{GuardDataKey: string(b)}
}

// DecodeGuard reads the guard ConfigMap's data, strictly.
func DecodeGuard(data map[string]string) (GuardState, error) {
	raw, ok := data[GuardDataKey]
	if !ok {
		return GuardState{}, fmt.Errorf("guard: no %s in the ConfigMap's data", GuardDataKey)
	}
	var g GuardState
	if err := strict.JSON([]byte(raw), &g); err != nil {
		return GuardState{}, fmt.Errorf("guard: %s: %w", GuardDataKey, err)
	}
	if g.RenewTime.IsZero() {
		return GuardState{}, errors.New("guard: renewTime is required")
	}
	return g, nil
}
