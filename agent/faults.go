package agent

// Fault injection: an operator (or a test harness) writes one annotation per
// target on the Node,
//
//	fault.selftaint.io/<target>: {"status":"True","reason":"InjectedFault","message":"...","expiresAt":"2026-11-23T12:00:00Z"}
//
// and the agent publishes the target condition in that state, bypassing
// damping, until the fault expires; then it removes the annotation itself.
// Who may inject faults is decided by RBAC on nodes patch and recorded in the
// API server's audit log; there is no endpoint of our own. This file holds the
// annotation format with its parsing and validation (pure functions), and the
// agent's bookkeeping of the faults it sees, applies and removes.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// FaultAnnotationPrefix starts every fault annotation key; the rest of
	// the key is the target: a condition type the agent manages or the name
	// of a probe (meaning that probe's condition).
	FaultAnnotationPrefix = "fault.selftaint.io/"
	// DefaultFaultReason is a fault's reason when the annotation gives none.
	DefaultFaultReason = "InjectedFault"
	// DefaultFaultMessage is a fault's message when the annotation gives none.
	DefaultFaultMessage = "fault injected with selftaint fault inject"
	// DefaultFaultMaxDuration is the longest a fault may last when the
	// options do not say.
	DefaultFaultMaxDuration = time.Hour
	// FaultExpirySlack is how far beyond the maximum duration an expiry may
	// lie, for clock skew between the injector and the agent and for an
	// expiry rounded up to whole seconds.
	FaultExpirySlack = 5 * time.Second
	// maxFaultReasonLen and maxFaultInjectedByLen keep the annotation's
	// words readable; the message is capped like every condition message.
	maxFaultReasonLen     = 128
	maxFaultInjectedByLen = 256
)

// FaultSpec is the JSON value of a fault annotation.
type FaultSpec struct {
	// Status the condition takes: True (the default), False or Unknown.
	Status corev1.ConditionStatus `json:"status,omitempty"`
	// Reason for the condition; default DefaultFaultReason. CamelCase.
	Reason string `json:"reason,omitempty"`
	// Message for the condition; default DefaultFaultMessage.
	Message string `json:"message,omitempty"`
	// ExpiresAt is required: an RFC 3339 time, at most the agent's maximum
	// fault duration ahead.
	ExpiresAt string `json:"expiresAt"`
	// InjectedBy is free text saying who or what injected the fault.
	InjectedBy string `json:"injectedBy,omitempty"`
}

// Encode returns the annotation value for s.
func (s FaultSpec) Encode() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Fault is one valid, parsed fault annotation.
type Fault struct {
	// Key and Value are the annotation as found on the Node.
	Key, Value string
	// Target is Key without FaultAnnotationPrefix.
	Target string
	// Condition is the condition type the fault overrides.
	Condition  corev1.NodeConditionType
	Status     corev1.ConditionStatus
	Reason     string
	Message    string
	ExpiresAt  time.Time
	InjectedBy string
}

// State is the condition state the fault publishes; the caller decides its
// transition time.
func (f Fault) State() (status corev1.ConditionStatus, reason, message string) {
	return f.Status, f.Reason, f.Message
}

// Rejection is a fault annotation that is ignored, and why.
type Rejection struct {
	Key, Value string
	Target     string
	// Problem says what is wrong, for a log line, an Event and the CLI.
	Problem string
	// Expired is set when the only problem is that expiresAt has passed: a
	// fault the agent had applied is then removed, one it first sees
	// already expired is left in place for the operator to see.
	Expired bool
}

// FaultAnnotationKey is the annotation key for a fault on target.
func FaultAnnotationKey(target string) string { return FaultAnnotationPrefix + target }

// IsFaultAnnotation reports whether an annotation key is a fault's.
func IsFaultAnnotation(key string) bool { return strings.HasPrefix(key, FaultAnnotationPrefix) }

// reasonPattern is the condition reason format metav1.Condition enforces:
// CamelCase, no spaces.
var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// ResolveFaultTarget maps a target (a condition type in known, or a probe
// name in probeConditions) to its condition type.
func ResolveFaultTarget(target string, known map[corev1.NodeConditionType]bool, probeConditions map[string]corev1.NodeConditionType) (corev1.NodeConditionType, error) {
	if c, ok := probeConditions[target]; ok {
		return c, nil
	}
	if known[corev1.NodeConditionType(target)] {
		return corev1.NodeConditionType(target), nil
	}
	conds := make([]string, 0, len(known))
	for c := range known {
		conds = append(conds, string(c))
	}
	slices.Sort(conds)
	names := make([]string, 0, len(probeConditions))
	for p := range probeConditions {
		names = append(names, p)
	}
	slices.Sort(names)
	return "", fmt.Errorf("unknown target %q: this agent manages the conditions [%s] and the probes [%s]",
		target, strings.Join(conds, ", "), strings.Join(names, ", "))
}

// ParseFault decodes and checks one fault annotation without regard to time:
// strict JSON (an unknown field is an error), a known target, a valid
// status and reason, and a parseable expiresAt. Defaults are filled in.
func ParseFault(key, value string, known map[corev1.NodeConditionType]bool, probeConditions map[string]corev1.NodeConditionType) (Fault, error) {
	f := Fault{Key: key, Value: value, Target: strings.TrimPrefix(key, FaultAnnotationPrefix)}
	if !IsFaultAnnotation(key) {
		return f, fmt.Errorf("annotation %s is not a fault (want the prefix %s)", key, FaultAnnotationPrefix)
	}
	cond, err := ResolveFaultTarget(f.Target, known, probeConditions)
	if err != nil {
		return f, err
	}
	f.Condition = cond
	spec, err := decodeFaultSpec(value)
	if err != nil {
		return f, err
	}
	switch spec.Status {
	case "":
		spec.Status = corev1.ConditionTrue
	case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
	default:
		return f, fmt.Errorf("status %q is not True, False or Unknown", spec.Status)
	}
	if spec.Reason == "" {
		spec.Reason = DefaultFaultReason
	}
	if len(spec.Reason) > maxFaultReasonLen || !reasonPattern.MatchString(spec.Reason) {
		return f, fmt.Errorf("reason %q must be CamelCase (letters, digits, '_', ',' or ':', starting with a letter) and at most %d characters", truncate(spec.Reason, 64), maxFaultReasonLen)
	}
	if spec.Message == "" {
		spec.Message = DefaultFaultMessage
	}
	if len(spec.InjectedBy) > maxFaultInjectedByLen {
		return f, fmt.Errorf("injectedBy is longer than %d characters", maxFaultInjectedByLen)
	}
	if spec.ExpiresAt == "" {
		return f, errors.New(`expiresAt is required (an RFC 3339 time such as "2026-11-23T12:00:00Z"): every fault expires`)
	}
	exp, err := time.Parse(time.RFC3339, spec.ExpiresAt)
	if err != nil {
		return f, fmt.Errorf("expiresAt %q is not an RFC 3339 time such as \"2026-11-23T12:00:00Z\"", truncate(spec.ExpiresAt, 64))
	}
	f.Status, f.Reason, f.Message, f.InjectedBy, f.ExpiresAt = spec.Status, spec.Reason, spec.Message, spec.InjectedBy, exp
	return f, nil
}

// faultFields are FaultSpec's JSON field names.
var faultFields = []string{"status", "reason", "message", "expiresAt", "injectedBy"}

// decodeFaultSpec decodes one JSON object strictly: field names are
// case-sensitive (encoding/json alone would accept "ExpiresAt") and an
// unknown field is an error.
func decodeFaultSpec(value string) (FaultSpec, error) {
	var spec FaultSpec
	trimmed := bytes.TrimSpace([]byte(value))
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return spec, fmt.Errorf("value is not a JSON object: %q", truncate(value, 64))
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&fields); err != nil {
		return spec, fmt.Errorf("value is not a valid fault: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return spec, errors.New("value is not a valid fault: data after the JSON object")
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if slices.Contains(faultFields, name) {
			continue
		}
		for _, f := range faultFields {
			if strings.EqualFold(f, name) {
				return spec, fmt.Errorf("value is not a valid fault: unknown field %q (did you mean %q?)", name, f)
			}
		}
		return spec, fmt.Errorf("value is not a valid fault: unknown field %q (known: %s)", name, strings.Join(faultFields, ", "))
	}
	if err := json.Unmarshal(trimmed, &spec); err != nil {
		return spec, fmt.Errorf("value is not a valid fault: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return spec, nil
}

// CheckFaultTime judges a parsed fault at now: expired (problem set and
// expired true), or lasting longer than max from now (beyond
// FaultExpirySlack). An empty problem means the fault applies.
func CheckFaultTime(f Fault, now time.Time, max time.Duration) (problem string, expired bool) {
	if !now.Before(f.ExpiresAt) {
		return fmt.Sprintf("expiresAt %s is in the past", f.ExpiresAt.UTC().Format(time.RFC3339)), true
	}
	if left := f.ExpiresAt.Sub(now); left > max+FaultExpirySlack {
		return fmt.Sprintf("expiresAt %s is %s away, beyond the maximum fault duration %s",
			f.ExpiresAt.UTC().Format(time.RFC3339), left.Round(time.Second), max), false
	}
	return "", false
}

// ParseFaults reads every fault annotation in annotations (others are not
// looked at) and splits them into the faults that apply at now and the
// rejected ones, each sorted by key. known lists the condition types the
// agent manages; probeConditions maps probe names to their condition; max is
// the longest a fault may last from now.
func ParseFaults(annotations map[string]string, known map[corev1.NodeConditionType]bool, probeConditions map[string]corev1.NodeConditionType, now time.Time, max time.Duration) (valid []Fault, rejected []Rejection) {
	keys := make([]string, 0)
	for k := range annotations {
		if IsFaultAnnotation(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := annotations[k]
		f, err := ParseFault(k, v, known, probeConditions)
		if err != nil {
			rejected = append(rejected, Rejection{Key: k, Value: v, Target: f.Target, Problem: err.Error()})
			continue
		}
		if problem, expired := CheckFaultTime(f, now, max); problem != "" {
			rejected = append(rejected, Rejection{Key: k, Value: v, Target: f.Target, Problem: problem, Expired: expired})
			continue
		}
		valid = append(valid, f)
	}
	return valid, rejected
}

// EffectiveFaults picks the fault that applies to each condition: when two
// valid faults target the same condition (one by condition type, one by
// probe name), the one expiring last wins, ties going to the smaller key.
func EffectiveFaults(valid []Fault) map[corev1.NodeConditionType]Fault {
	out := map[corev1.NodeConditionType]Fault{}
	for _, f := range valid {
		cur, ok := out[f.Condition]
		if !ok || f.ExpiresAt.After(cur.ExpiresAt) || (f.ExpiresAt.Equal(cur.ExpiresAt) && f.Key < cur.Key) {
			out[f.Condition] = f
		}
	}
	return out
}

// ValidFaultTarget reports why target cannot be the name part of an
// annotation key (for example a condition type with a '/' in it), or nil.
func ValidFaultTarget(target string) error {
	if msgs := validation.IsQualifiedName(FaultAnnotationKey(target)); len(msgs) > 0 {
		return fmt.Errorf("%s is not a valid annotation key: %s", FaultAnnotationKey(target), strings.Join(msgs, "; "))
	}
	return nil
}

// jsonPointerEscape escapes one JSON pointer segment (RFC 6901).
func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// faultRemovalPatch is a JSON patch that removes annotation key only if it
// still holds value: a fault re-injected meanwhile is not deleted, and no
// other annotation is touched.
func faultRemovalPatch(key, value string) ([]byte, error) {
	path := "/metadata/annotations/" + jsonPointerEscape(key)
	return json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	})
}

// faultVerdict is the agent's judgement of one fault annotation value.
type faultVerdict struct {
	value   string
	fault   Fault  // when problem is empty
	problem string // why the annotation is ignored; empty when valid
}

// faultEval is what one sync makes of the fault annotations.
type faultEval struct {
	apply    map[corev1.NodeConditionType]Fault // the fault in force per condition
	started  []Fault                            // began applying at this sync
	ended    []string                           // keys that stopped applying
	rejected []Rejection                        // newly rejected
	expired  []Fault                            // applied before, expired now: to remove
	next     time.Time                          // earliest expiry of a fault in force
}

// evalFaultsLocked judges each fault annotation on the Node, reusing the
// verdict on a value already seen: a fault is checked against the maximum
// duration and for being already expired once, when its value is first seen.
// A fault seen valid that has since expired is due for removal.
func (a *Agent) evalFaultsLocked(annotations map[string]string, now time.Time) faultEval {
	var ev faultEval
	keys := make([]string, 0)
	for k := range annotations {
		if IsFaultAnnotation(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var live []Fault
	for _, k := range keys {
		v := annotations[k]
		seen, ok := a.faultsSeen[k]
		if !ok || seen.value != v {
			seen = a.judgeFault(k, v, now)
			a.faultsSeen[k] = seen
			if seen.problem != "" {
				ev.rejected = append(ev.rejected, Rejection{Key: k, Value: v, Target: strings.TrimPrefix(k, FaultAnnotationPrefix), Problem: seen.problem})
			}
		}
		switch {
		case seen.problem != "":
		case !now.Before(seen.fault.ExpiresAt):
			ev.expired = append(ev.expired, seen.fault)
		default:
			live = append(live, seen.fault)
			if ev.next.IsZero() || seen.fault.ExpiresAt.Before(ev.next) {
				ev.next = seen.fault.ExpiresAt
			}
		}
	}
	for k := range a.faultsSeen {
		if _, ok := annotations[k]; !ok {
			delete(a.faultsSeen, k)
		}
	}
	ev.apply = EffectiveFaults(live)
	applied := make(map[string]string, len(ev.apply))
	for _, f := range ev.apply {
		applied[f.Key] = f.Value
		if v, ok := a.faultsApplied[f.Key]; !ok || v != f.Value {
			ev.started = append(ev.started, f)
		}
	}
	for k := range a.faultsApplied {
		if _, ok := applied[k]; !ok {
			ev.ended = append(ev.ended, k)
		}
	}
	a.faultsApplied = applied
	slices.SortFunc(ev.started, func(x, y Fault) int { return strings.Compare(x.Key, y.Key) })
	slices.Sort(ev.ended)
	return ev
}

// judgeFault is the verdict on a fault annotation value first seen at now.
func (a *Agent) judgeFault(key, value string, now time.Time) faultVerdict {
	if a.opts.Faults.Disabled {
		return faultVerdict{value: value, problem: "fault injection is disabled in this agent's config (faults.enabled: false)"}
	}
	f, err := ParseFault(key, value, a.faultConds, a.faultProbes)
	if err != nil {
		return faultVerdict{value: value, problem: err.Error()}
	}
	if problem, expired := CheckFaultTime(f, now, a.opts.Faults.MaxDuration); problem != "" {
		if expired {
			problem += " already when the agent first saw it; left in place for you to remove"
		}
		return faultVerdict{value: value, problem: problem}
	}
	return faultVerdict{value: value, fault: f}
}

// adoptFaultsLocked recognises, at start-up, the faults a previous run was
// applying: their condition on the Node shows exactly their status, reason
// and message. They count as seen valid, so one that expired while the agent
// was down is removed rather than rejected. It returns their conditions.
func (a *Agent) adoptFaultsLocked(node *corev1.Node) map[corev1.NodeConditionType]bool {
	faulted := map[corev1.NodeConditionType]bool{}
	if a.opts.Faults.Disabled {
		return faulted
	}
	for k, v := range node.Annotations {
		if !IsFaultAnnotation(k) {
			continue
		}
		f, err := ParseFault(k, v, a.faultConds, a.faultProbes)
		if err != nil {
			continue
		}
		c := findCondition(node, f.Condition)
		if c == nil || c.Status != f.Status || c.Reason != f.Reason || c.Message != truncate(f.Message, maxMessageLen) {
			continue
		}
		a.faultsSeen[k] = faultVerdict{value: v, fault: f}
		a.faultsApplied[k] = v
		faulted[f.Condition] = true
		a.log.Info("adopted fault from node", "annotation", k, "condition", f.Condition, "status", f.Status, "expiresAt", f.ExpiresAt)
	}
	return faulted
}

// reportFaults logs and records Events for rejected faults and faults that
// started applying.
func (a *Agent) reportFaults(node *corev1.Node, ev faultEval) {
	for _, r := range ev.rejected {
		a.recorder.Eventf(node, corev1.EventTypeWarning, "FaultRejected", "ignoring fault annotation %s: %s", r.Key, truncate(r.Problem, 512))
		a.log.Warn("ignoring fault annotation", "annotation", r.Key, "problem", r.Problem, "value", truncate(r.Value, 256))
	}
	for _, f := range ev.started {
		etype := corev1.EventTypeNormal
		if f.Status != corev1.ConditionFalse {
			etype = corev1.EventTypeWarning
		}
		by := ""
		if f.InjectedBy != "" {
			by = ", injected by " + f.InjectedBy
		}
		a.recorder.Eventf(node, etype, "FaultActive", "fault %s applies until %s%s: %s is %s (%s): %s",
			f.Key, f.ExpiresAt.UTC().Format(time.RFC3339), by, f.Condition, f.Status, f.Reason, truncate(f.Message, 256))
		a.log.Info("fault applies", "annotation", f.Key, "condition", f.Condition, "status", f.Status, "reason", f.Reason,
			"expiresAt", f.ExpiresAt, "injectedBy", f.InjectedBy)
	}
	for _, k := range ev.ended {
		a.log.Info("fault no longer applies", "annotation", k)
	}
}

// removeExpiredFaults deletes the annotations of faults that expired after
// being applied, each with a JSON patch that first tests the exact value: a
// fault re-injected in the meantime fails the test (422) and is kept, and no
// other annotation is touched.
func (a *Agent) removeExpiredFaults(ctx context.Context, node *corev1.Node, expired []Fault) error {
	for _, f := range expired {
		patch, err := faultRemovalPatch(f.Key, f.Value)
		if err != nil {
			return fmt.Errorf("building fault removal patch: %w", err)
		}
		written, err := a.opts.Client.Nodes().Patch(ctx, a.opts.NodeName, types.JSONPatchType, patch,
			metav1.PatchOptions{FieldManager: a.opts.FieldManager})
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// The annotation changed or went away since we read it; the
			// informer brings the new version and we judge that.
			a.log.Debug("fault annotation changed before its removal; re-reading", "annotation", f.Key, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("removing expired fault %s: %w", f.Key, err)
		}
		a.remember(written)
		a.recorder.Eventf(written, corev1.EventTypeNormal, "FaultExpired", "fault %s expired at %s; removed it, %s follows its probe again",
			f.Key, f.ExpiresAt.UTC().Format(time.RFC3339), f.Condition)
		a.log.Info("removed expired fault", "annotation", f.Key, "condition", f.Condition, "expiredAt", f.ExpiresAt)
	}
	return nil
}
