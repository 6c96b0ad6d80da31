// Package faults is the format of fault annotations and their parsing and
// validation, shared by the agent (which applies faults) and the selftaint
// fault command (which writes, lists and clears them), so that both judge
// a fault with the same code. It is pure: no client, no goroutines, no
// clock of its own.
//
// An operator (or a test harness) writes one annotation per target on the
// Node,
//
//	fault.selftaint.io/<target>: {"status":"True","reason":"InjectedFault","message":"...","expiresAt":"2026-11-23T12:00:00Z"}
//
// and the agent publishes the target condition in that state, bypassing
// damping, until the fault expires; then it removes the annotation itself.
package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/selftaint/selftaint/probes/strict"
)

const (
	// AnnotationPrefix starts every fault annotation key; the rest of the
	// key is the target: a condition type the agent manages or the name of
	// a probe (meaning that probe's condition).
	AnnotationPrefix = "fault.selftaint.io/"
	// DefaultReason is a fault's reason when the annotation gives none.
	DefaultReason = "InjectedFault"
	// DefaultMessage is a fault's message when the annotation gives none.
	DefaultMessage = "fault injected with selftaint fault inject"
	// ExpirySlack is how far beyond the maximum duration an expiry may lie,
	// for clock skew between the injector and the agent and for an expiry
	// rounded up to whole seconds.
	ExpirySlack = 5 * time.Second
	// maxReasonLen and maxInjectedByLen keep the annotation's words
	// readable; the message is capped like every condition message.
	maxReasonLen     = 128
	maxInjectedByLen = 256
	// specFields are Spec's JSON field names, for the hint on a typo.
	specFields = "status, reason, message, expiresAt, injectedBy"
)

// Spec is the JSON value of a fault annotation.
type Spec struct {
	// Status the condition takes: True (the default), False or Unknown.
	Status corev1.ConditionStatus `json:"status,omitempty"`
	// Reason for the condition; default DefaultReason. CamelCase.
	Reason string `json:"reason,omitempty"`
	// Message for the condition; default DefaultMessage.
	Message string `json:"message,omitempty"`
	// ExpiresAt is required: an RFC 3339 time, at most the agent's maximum
	// fault duration ahead.
	ExpiresAt string `json:"expiresAt"`
	// InjectedBy is free text saying who or what injected the fault.
	InjectedBy string `json:"injectedBy,omitempty"`
}

// Encode returns the annotation value for s.
func (s Spec) Encode() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encoding fault: %w", err)
	}
	return string(b), nil
}

// Fault is one valid, parsed fault annotation.
type Fault struct {
	// Key and Value are the annotation as found on the Node.
	Key, Value string
	// Target is Key without AnnotationPrefix.
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
	// Fault is the parsed fault when only its time is wrong (expired, or
	// lasting too long); nil when the annotation does not parse.
	Fault *Fault
}

// AnnotationKey is the annotation key for a fault on target.
func AnnotationKey(target string) string { return AnnotationPrefix + target }

// IsAnnotation reports whether an annotation key is a fault's.
func IsAnnotation(key string) bool { return strings.HasPrefix(key, AnnotationPrefix) }

// TargetOf is the target named by a fault annotation key.
func TargetOf(key string) string { return strings.TrimPrefix(key, AnnotationPrefix) }

// Keys returns the fault annotation keys in annotations, sorted; the other
// annotations are not looked at.
func Keys(annotations map[string]string) []string {
	keys := make([]string, 0)
	for k := range annotations {
		if IsAnnotation(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// KeysFor returns, sorted, the keys of the fault annotations that target
// the same condition as target, by either of its names (the condition type
// or the probe name); an annotation naming exactly target matches even when
// target is not known.
func KeysFor(annotations map[string]string, target string, known map[corev1.NodeConditionType]bool, probeConditions map[string]corev1.NodeConditionType) []string {
	cond, resolveErr := ResolveTarget(target, known, probeConditions)
	var out []string
	for _, k := range Keys(annotations) {
		t := TargetOf(k)
		match := t == target
		if !match && resolveErr == nil {
			c, err := ResolveTarget(t, known, probeConditions)
			match = err == nil && c == cond
		}
		if match {
			out = append(out, k)
		}
	}
	return out
}

// ResolveTarget maps a target (a condition type in known, or a probe name
// in probeConditions) to its condition type.
func ResolveTarget(target string, known map[corev1.NodeConditionType]bool, probeConditions map[string]corev1.NodeConditionType) (corev1.NodeConditionType, error) {
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

// Parse decodes and checks one fault annotation without regard to time:
// strict JSON (an unknown or repeated field is an error), a known target, a
// valid status and reason, and a parseable expiresAt. Defaults are filled
// in.
func Parse(key, value string, known map[corev1.NodeConditionType]bool, probeConditions map[string]corev1.NodeConditionType) (Fault, error) {
	f := Fault{Key: key, Value: value, Target: TargetOf(key)}
	if !IsAnnotation(key) {
		return f, fmt.Errorf("annotation %s is not a fault (want the prefix %s)", key, AnnotationPrefix)
	}
	cond, err := ResolveTarget(f.Target, known, probeConditions)
	if err != nil {
		return f, err
	}
	f.Condition = cond
	spec, err := decodeSpec(value)
	if err != nil {
		return f, err
	}
	switch spec.Status {
	case "":
		// Also what "status": null decodes to: taken as the default.
		spec.Status = corev1.ConditionTrue
	case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
	default:
		return f, fmt.Errorf("status %q is not True, False or Unknown", spec.Status)
	}
	if spec.Reason == "" {
		spec.Reason = DefaultReason
	}
	if len(spec.Reason) > maxReasonLen || !validReason(spec.Reason) {
		return f, fmt.Errorf("reason %q must be CamelCase (letters, digits, '_', ',' or ':', starting with a letter) and at most %d characters", truncate(spec.Reason, 64), maxReasonLen)
	}
	if spec.Message == "" {
		spec.Message = DefaultMessage
	}
	if len(spec.InjectedBy) > maxInjectedByLen {
		return f, fmt.Errorf("injectedBy is longer than %d characters", maxInjectedByLen)
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

// validReason reports whether s has the condition reason format
// metav1.Condition enforces: CamelCase, no spaces; a letter first, then
// letters, digits, '_', ',' or ':', not ending in ',' or ':'.
func validReason(s string) bool {
	for i, r := range s {
		letter := r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z'
		word := letter || r >= '0' && r <= '9' || r == '_'
		switch {
		case i == 0 && !letter:
			return false
		case i == len(s)-1 && !word:
			return false
		case !word && r != ',' && r != ':':
			return false
		}
	}
	return s != ""
}

// decodeSpec decodes one JSON object with the shared strict decoder: field
// names are case-sensitive (encoding/json alone would accept "ExpiresAt"),
// and an unknown or repeated field is an error.
func decodeSpec(value string) (Spec, error) {
	var spec Spec
	trimmed := bytes.TrimSpace([]byte(value))
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return spec, fmt.Errorf("value is not a JSON object: %q", truncate(value, 64))
	}
	err := strict.JSON(trimmed, &spec)
	if err == nil {
		return spec, nil
	}
	var trailing *strict.TrailingDataError
	if errors.As(err, &trailing) {
		return spec, errors.New("value is not a valid fault: data after the JSON object")
	}
	var fe *strict.FieldError
	if errors.As(err, &fe) && len(fe.Unknown) > 0 {
		return spec, fmt.Errorf("value is not a valid fault: %w (%s)", err, fieldHint(fe.Unknown[0]))
	}
	return spec, fmt.Errorf("value is not a valid fault: %w", err)
}

// fieldHint suggests the field an unknown one was meant to be.
func fieldHint(unknown string) string {
	for _, f := range strings.Split(specFields, ", ") {
		if strings.EqualFold(f, unknown) {
			return fmt.Sprintf("did you mean %q?", f)
		}
	}
	return "known: " + specFields
}

// CheckTime judges a parsed fault at now: expired (problem set and expired
// true), or lasting longer than max from now (beyond ExpirySlack). An empty
// problem means the fault applies.
func CheckTime(f Fault, now time.Time, max time.Duration) (problem string, expired bool) {
	if !now.Before(f.ExpiresAt) {
		return fmt.Sprintf("expiresAt %s is in the past", f.ExpiresAt.UTC().Format(time.RFC3339)), true
	}
	if left := f.ExpiresAt.Sub(now); left > max+ExpirySlack {
		return fmt.Sprintf("expiresAt %s is %s away, beyond the maximum fault duration %s",
			f.ExpiresAt.UTC().Format(time.RFC3339), left.Round(time.Second), max), false
	}
	return "", false
}

// ParseAll reads every fault annotation in annotations (others are not
// looked at) and splits them into the faults that apply at now and the
// rejected ones, each sorted by key. known lists the condition types the
// agent manages; probeConditions maps probe names to their condition; max
// is the longest a fault may last from now.
func ParseAll(annotations map[string]string, known map[corev1.NodeConditionType]bool, probeConditions map[string]corev1.NodeConditionType, now time.Time, max time.Duration) (valid []Fault, rejected []Rejection) {
	for _, k := range Keys(annotations) {
		v := annotations[k]
		f, err := Parse(k, v, known, probeConditions)
		if err != nil {
			rejected = append(rejected, Rejection{Key: k, Value: v, Target: f.Target, Problem: err.Error()})
			continue
		}
		if problem, expired := CheckTime(f, now, max); problem != "" {
			rejected = append(rejected, Rejection{Key: k, Value: v, Target: f.Target, Problem: problem, Expired: expired, Fault: &f})
			continue
		}
		valid = append(valid, f)
	}
	return valid, rejected
}

// Effective picks the fault that applies to each condition: when two valid
// faults target the same condition (one by condition type, one by probe
// name), the one expiring last wins, ties going to the smaller key.
func Effective(valid []Fault) map[corev1.NodeConditionType]Fault {
	out := map[corev1.NodeConditionType]Fault{}
	for _, f := range valid {
		cur, ok := out[f.Condition]
		if !ok || f.ExpiresAt.After(cur.ExpiresAt) || (f.ExpiresAt.Equal(cur.ExpiresAt) && f.Key < cur.Key) {
			out[f.Condition] = f
		}
	}
	return out
}

// ValidTarget reports why target cannot be the name part of an annotation
// key (for example a condition type with a '/' in it), or nil.
func ValidTarget(target string) error {
	if msgs := validation.IsQualifiedName(AnnotationKey(target)); len(msgs) > 0 {
		return fmt.Errorf("%s is not a valid annotation key: %s", AnnotationKey(target), strings.Join(msgs, "; "))
	}
	return nil
}

// truncate cuts s to n bytes, marking the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
