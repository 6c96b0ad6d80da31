package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/probes/strict"
)

// Maintenance: the protocol of drains. A node is asked to be drained with
// a maintenance request on its Node (an annotation, MaintenanceRequest as
// JSON); the coordinator gives it a slot from the maintenance pool (a
// Lease named SlotName(node), holder = the node, in its namespace),
// cordons it (recording CordonAnnotation on the Node in the same write, so
// it never uncordons a node someone else cordoned), evicts its pods
// through the Eviction API, and says how it goes in the Node condition
// MaintenanceCondition. The request is withdrawn by removing the
// annotation: the coordinator then uncordons what it cordoned and frees
// the slot.
//
// Two annotations carry requests, so that a node's own agent can ask for
// a sick-node drain without being able to write what an operator may:
//   - OperatorRequestAnnotation: written by `selftaint drain`, GitOps, a
//     cron job, anyone allowed to annotate Nodes; the agent's admission
//     policy keeps the agent's token off it;
//   - AgentRequestAnnotation: written by a node's agent on its own Node
//     while a rule with action: drain applies; it cannot ask for a forced
//     drain (ParseMaintenanceRequest refuses onDeadline: force there).
//
// Where both are on a Node the operator's is the one served.
const (
	// OperatorRequestAnnotation is an operator's maintenance request.
	OperatorRequestAnnotation = "maintenance.selftaint.io/request"
	// AgentRequestAnnotation is a node's agent's sick-node drain request.
	AgentRequestAnnotation = "selftaint.io/drain-request"
	// CordonAnnotation is on a Node the coordinator cordoned, written in
	// the same write as spec.unschedulable=true; its value is the ID of the
	// request it was cordoned for. Only a Node carrying it is ever
	// uncordoned by selftaint, and both are removed in one write.
	CordonAnnotation = "maintenance.selftaint.io/cordoned"
	// MaintenanceCondition is the Node condition that says how a node's
	// maintenance goes: True while it is in maintenance (waiting for a
	// slot, draining, drained), False once it has ended (Released, or
	// DrainBlocked at the deadline). Written by the coordinator.
	MaintenanceCondition corev1.NodeConditionType = "SelftaintMaintenance"
	// SlotPrefix starts every maintenance slot Lease's name (SlotName).
	SlotPrefix = "selftaint-maintenance-"
	// SlotLabel is set to "true" on every maintenance slot Lease.
	SlotLabel = "selftaint.io/maintenance"
	// SlotRequestAnnotation, on a slot Lease, is the ID of the request it
	// serves (MaintenanceRequest.ID).
	SlotRequestAnnotation = "maintenance.selftaint.io/request-id"
	// SlotPhaseAnnotation, on a slot Lease, is the drain's phase: one of
	// the Phase* values.
	SlotPhaseAnnotation = "maintenance.selftaint.io/phase"
	// SlotProgressAnnotation, on a slot Lease, is the drain's progress so
	// far (Progress as JSON), so that a new leader resumes the count.
	SlotProgressAnnotation = "maintenance.selftaint.io/progress"
	// SlotCordonAnnotation, on a slot Lease, is SlotCordonTheirs when the
	// node was already cordoned by someone else when the slot was taken:
	// selftaint then neither cordons it again nor uncordons it, and its
	// being uncordoned mid-drain ends the drain as it does for ours.
	SlotCordonAnnotation = "maintenance.selftaint.io/cordon"
	// SlotCordonTheirs is SlotCordonAnnotation's value for someone else's
	// cordon.
	SlotCordonTheirs = "theirs"
)

// The reasons of MaintenanceCondition.
const (
	// ReasonMaintenanceWaiting (True): the node waits for a slot; the
	// message says its place in line and why it waits.
	ReasonMaintenanceWaiting = "Waiting"
	// ReasonDraining (True): the node is cordoned and its pods are being
	// evicted: N of M evicted, what remains, what refuses.
	ReasonDraining = "Draining"
	// ReasonDrained (True): every pod that had to go has gone; the node
	// stays cordoned until the request is withdrawn.
	ReasonDrained = "Drained"
	// ReasonDrainBlocked: True while a drain cannot go on (which pod,
	// which PodDisruptionBudget and its disruptionsAllowed, which pod has
	// no controller or emptyDir data) and retries until its deadline;
	// False once the deadline passed and the node was given back.
	ReasonDrainBlocked = "DrainBlocked"
	// ReasonReleased (False): maintenance ended (the request was
	// withdrawn, or someone else uncordoned the node mid-drain); what
	// selftaint cordoned is uncordoned.
	ReasonReleased = "Released"
)

// The phases of a slot (SlotPhaseAnnotation).
const (
	// PhaseDraining: the slot is held and the drain runs (or is to run).
	PhaseDraining = "Draining"
	// PhaseDrained: the slot is held and the drain has finished.
	PhaseDrained = "Drained"
	// PhaseBlocked: the drain cannot finish (its deadline passed; or, in
	// a forced drain, only pods the request leaves remain): the slot is
	// to be given back as DrainBlocked.
	PhaseBlocked = "DrainBlocked"
	// PhaseEnded: the slot was given back (holder cleared); the Lease is
	// kept as the record that this request has been served, so that it is
	// not served again, until the request is withdrawn or replaced.
	PhaseEnded = "Ended"
)

// What a drain does when its deadline passes (MaintenanceRequest.OnDeadline).
const (
	// OnDeadlineRelease gives the node back: uncordon what selftaint
	// cordoned, free the slot, say DrainBlocked. The default.
	OnDeadlineRelease = "release"
	// OnDeadlineForce deletes the pods the Eviction API refused, each with
	// its grace period, and finishes the drain.
	OnDeadlineForce = "force"
)

// MaintenanceVersion is the request format's version.
const MaintenanceVersion = "v1"

// MaxDeadline is the longest deadline a request may give: a drain never
// waits forever.
const MaxDeadline = 30 * 24 * time.Hour

// MaintenanceRequest is a request to drain a node, as JSON in
// OperatorRequestAnnotation or AgentRequestAnnotation.
type MaintenanceRequest struct {
	// Version is MaintenanceVersion. Required.
	Version string `json:"version"`
	// Reason says why, for people. Required.
	Reason string `json:"reason"`
	// RequestedBy is who asked (a user, "selftaint-agent", a tool).
	// Required.
	RequestedBy string `json:"requestedBy"`
	// RequestedAt is when: requests are served in this order (then by
	// node name). Required.
	RequestedAt time.Time `json:"requestedAt"`
	// Deadline is how long the drain may take from when it starts (it
	// gets its slot), as a Go duration ("30m"); empty: the coordinator's
	// maintenance.defaultDeadline. At most MaxDeadline.
	Deadline string `json:"deadline,omitempty"`
	// OnDeadline is what happens when the deadline passes with pods the
	// Eviction API refuses: OnDeadlineRelease (the default) or
	// OnDeadlineForce.
	OnDeadline string `json:"onDeadline,omitempty"`
	// EvictUnreplicated evicts pods that no controller manages (kubectl
	// drain's --force); without it they are left and reported as blockers.
	EvictUnreplicated bool `json:"evictUnreplicated,omitempty"`
	// DeleteEmptyDirData evicts pods with emptyDir volumes, whose data is
	// lost (kubectl drain's --delete-emptydir-data); without it they are
	// left and reported as blockers.
	DeleteEmptyDirData bool `json:"deleteEmptyDirData,omitempty"`
	// Conditions, on a sick-node drain, are the conditions whose rules
	// asked for it: the drain starts only while the node still reports
	// one of them (and the disruption guard holds none of them all).
	Conditions []corev1.NodeConditionType `json:"conditions,omitempty"`
}

// Format is the annotation value.
func (r MaintenanceRequest) Format() string {
	r.RequestedAt = r.RequestedAt.UTC().Truncate(time.Second)
	if r.Version == "" {
		r.Version = MaintenanceVersion
	}
	r.Conditions = slices.Clone(r.Conditions)
	slices.Sort(r.Conditions)
	r.Conditions = slices.Compact(r.Conditions)
	b, _ := json.Marshal(r) // strings, bools and a time cannot fail
	return string(b)
}

// DeadlineIn is the request's deadline, def where it gives none. Call it
// on a request ParseMaintenanceRequest accepted.
func (r MaintenanceRequest) DeadlineIn(def time.Duration) time.Duration {
	if r.Deadline == "" {
		return def
	}
	d, err := time.ParseDuration(r.Deadline)
	if err != nil {
		return def
	}
	return d
}

// Force reports whether the request asks for a forced drain at the
// deadline.
func (r MaintenanceRequest) Force() bool { return r.OnDeadline == OnDeadlineForce }

// maxReason bounds a request's reason and requester.
const maxReason = 256

// ParseMaintenanceRequest reads the value of annotation (one of the two
// request annotations) strictly: an unknown or duplicate field, a missing
// required one or a bad value is an error naming the field, and nothing of
// the request is acted on.
func ParseMaintenanceRequest(annotation, s string) (MaintenanceRequest, error) {
	var r MaintenanceRequest
	if err := strict.JSON([]byte(s), &r); err != nil {
		return MaintenanceRequest{}, fmt.Errorf("%s: %w", annotation, err)
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	switch {
	case r.Version == "":
		bad("version", "is required (%q)", MaintenanceVersion)
	case r.Version != MaintenanceVersion:
		bad("version", "%q is not supported (supported: %q)", r.Version, MaintenanceVersion)
	}
	checkText := func(field, v string) {
		switch {
		case strings.TrimSpace(v) == "":
			bad(field, "is required")
		case len(v) > maxReason:
			bad(field, "is %d bytes long, more than %d", len(v), maxReason)
		}
	}
	checkText("reason", r.Reason)
	checkText("requestedBy", r.RequestedBy)
	if r.RequestedAt.IsZero() {
		bad("requestedAt", "is required (an RFC 3339 time)")
	}
	if r.Deadline != "" {
		switch d, err := time.ParseDuration(r.Deadline); {
		case err != nil:
			bad("deadline", "%q is not a duration such as \"30m\" or \"2h\"", r.Deadline)
		case d <= 0:
			bad("deadline", "%q must be positive", r.Deadline)
		case d > MaxDeadline:
			bad("deadline", "%q is longer than %s (a drain never waits forever)", r.Deadline, MaxDeadline)
		}
	}
	switch r.OnDeadline {
	case "", OnDeadlineRelease:
	case OnDeadlineForce:
		if annotation == AgentRequestAnnotation {
			bad("onDeadline", "%q is not allowed in a request written by a node's agent (%s); only an operator's request (%s) may force a drain", r.OnDeadline, AgentRequestAnnotation, OperatorRequestAnnotation)
		}
	default:
		bad("onDeadline", "%q is not one of %q, %q", r.OnDeadline, OnDeadlineRelease, OnDeadlineForce)
	}
	for i, c := range r.Conditions {
		if c == "" {
			bad(fmt.Sprintf("conditions[%d]", i), "is empty")
		}
	}
	if err := errors.Join(errs...); err != nil {
		return MaintenanceRequest{}, fmt.Errorf("%s: %w", annotation, err)
	}
	return r, nil
}

// Maintenance is the request a node is served by, and which annotation
// carries it.
type Maintenance struct {
	// Annotation is OperatorRequestAnnotation or AgentRequestAnnotation.
	Annotation string
	Request    MaintenanceRequest
}

// ID names the request: which annotation and when it was made. A slot
// serves one ID; a request made again (a new requestedAt) is a new one.
func (m Maintenance) ID() string {
	src := "operator"
	if m.Annotation == AgentRequestAnnotation {
		src = "agent"
	}
	return src + "/" + m.Request.RequestedAt.UTC().Format(time.RFC3339)
}

// MaintenanceOf is the request n is to be served by: the operator's when
// it is there, else its agent's; nil when neither is. Errs are the
// unreadable ones (each names its annotation and field): an unreadable
// operator request is not served, nor is the agent's in its place, so a
// typo never turns into a different drain than the one asked for.
func MaintenanceOf(n *corev1.Node) (*Maintenance, []error) {
	var errs []error
	for _, a := range []string{OperatorRequestAnnotation, AgentRequestAnnotation} {
		raw, ok := n.Annotations[a]
		if !ok {
			continue
		}
		r, err := ParseMaintenanceRequest(a, raw)
		if err != nil {
			errs = append(errs, err)
			if a == OperatorRequestAnnotation {
				return nil, errs
			}
			continue
		}
		return &Maintenance{Annotation: a, Request: r}, errs
	}
	return nil, errs
}

// SlotName is the name of node's maintenance slot Lease: SlotPrefix + the
// node's name, or, where that would be too long, a prefix of it and a
// hash.
func SlotName(node string) string { return prefixedName(SlotPrefix, node) }

// Progress is how far a drain has got, kept on its slot Lease.
type Progress struct {
	// Evicted is how many pods this drain has evicted (or, forced, deleted).
	Evicted int `json:"evicted"`
	// Total is Evicted plus the pods still to go, at the last pass.
	Total int `json:"total"`
}

// FormatProgress is the SlotProgressAnnotation value.
func FormatProgress(p Progress) string {
	b, _ := json.Marshal(p) // two ints cannot fail
	return string(b)
}

// ParseProgress reads a SlotProgressAnnotation value ("" is none yet).
func ParseProgress(s string) (Progress, error) {
	var p Progress
	if s == "" {
		return p, nil
	}
	if err := strict.JSON([]byte(s), &p); err != nil {
		return Progress{}, fmt.Errorf("%s: %w", SlotProgressAnnotation, err)
	}
	if p.Evicted < 0 || p.Total < p.Evicted {
		return Progress{}, fmt.Errorf("%s: evicted %d of %d is not a count", SlotProgressAnnotation, p.Evicted, p.Total)
	}
	return p, nil
}
