// Package faults is the format of fault annotations and their parsing and
// validation, shared by the agent (which applies faults) and the selftaint
// fault command (which writes, lists and clears them), so that both judge
// a fault with the same code. It is pure: no client, no goroutines, no
// clock of its own.
//
// An operator (or a test harness) writes one annotation per target on the
// Node,
//
//	fault.selftaint.io/<target>: {"status":"True","reason":"InjectedFault","message":"...","injectedAt":"2026-11-23T11:50:00Z","expiresAt":"2026-11-23T12:00:00Z"}
//
// and the agent publishes the target condition in that state, bypassing
// damping, until the fault expires; then it removes the annotation itself.
//
// A fault may last at most the agent's maximum duration, counted from its
// start: the earliest of its injectedAt, the time the API server recorded
// for the annotation's write (its managed fields, WrittenAt, which the
// agent reads when it starts) and when the agent first saw it. The first
// two survive an agent restart, so a fault rejected for lasting too long
// stays rejected after one. A fault with neither (no injectedAt, as an
// older selftaint or a hand-written annotation leaves it, and no
// managed-fields time for its annotation) can only be judged from when
// the agent first saw it.
package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	specFields = "status, reason, message, expiresAt, injectedAt, injectedBy"
	// rfc3339Example is an RFC 3339 time for messages.
	rfc3339Example = `"2026-11-23T12:00:00Z"`
)

// Spec is the JSON value of a fault annotation. A field left out takes its
// default; a field given as null is an error.
type Spec struct {
	// Status the condition takes: True (the default), False or Unknown.
	Status corev1.ConditionStatus `json:"status,omitempty"`
	// Reason for the condition; default DefaultReason. CamelCase.
	Reason string `json:"reason,omitempty"`
	// Message for the condition; default DefaultMessage.
	Message string `json:"message,omitempty"`
	// InjectedAt is when the fault was injected, an RFC 3339 time before
	// ExpiresAt: the fault's duration counts from it (or from a time the
	// agent knows to be earlier), across agent restarts. Optional; the
	// selftaint fault command always writes it.
	InjectedAt string `json:"injectedAt,omitempty"`
	// ExpiresAt is required: an RFC 3339 time, at most the agent's maximum
	// fault duration after the fault's start.
	ExpiresAt string `json:"expiresAt"`
	// InjectedBy is free text saying who or what injected the fault.
	InjectedBy string `json:"injectedBy,omitempty"`
}

// Lasting returns s injected at now and expiring d later, as the selftaint
// fault command writes it: injectedAt is now rounded down to whole seconds
// and expiresAt now+d rounded up, so the fault lasts at least d and its
// written duration is at most d plus two seconds, within ExpirySlack.
func (s Spec) Lasting(now time.Time, d time.Duration) Spec {
	s.InjectedAt = now.Truncate(time.Second).UTC().Format(time.RFC3339)
	s.ExpiresAt = ceilSecond(now.Add(d)).UTC().Format(time.RFC3339)
	return s
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if f := t.Truncate(time.Second); !f.Equal(t) {
		return f.Add(time.Second)
	}
	return t
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
	Condition corev1.NodeConditionType
	Status    corev1.ConditionStatus
	Reason    string
	Message   string
	ExpiresAt time.Time
	// InjectedAt is zero when the annotation does not say.
	InjectedAt time.Time
	InjectedBy string
}

// State is the condition state the fault publishes (its message marked,
// ConditionMessage); the caller decides its transition time.
func (f Fault) State() (status corev1.ConditionStatus, reason, message string) {
	return f.Status, f.Reason, f.ConditionMessage()
}

// ConditionMessage is the message of the condition the fault sets: its
// message behind a mark naming its annotation, "[fault.selftaint.io/memory]
// drill". The mark opens the message, so no cap on its length cuts it,
// and it is written with the condition itself: an agent that starts after
// the fault is gone still knows that a fault set the condition (SetByFault),
// whatever its reason.
func (f Fault) ConditionMessage() string { return "[" + f.Key + "] " + f.Message }

// MarkedBy returns the fault annotation key named by the mark opening a
// condition message (ConditionMessage), and whether there is one.
func MarkedBy(message string) (string, bool) {
	rest, ok := strings.CutPrefix(message, "["+AnnotationPrefix)
	if !ok {
		return "", false
	}
	target, _, ok := strings.Cut(rest, "] ")
	if !ok || target == "" || strings.ContainsAny(target, "[]") {
		return "", false
	}
	return AnnotationKey(target), true
}

// SetByFault reports whether a condition found on the Node when an agent
// starts was set by a fault rather than by its probe: its message carries
// a fault's mark (ConditionMessage), or its reason is DefaultReason (all an
// older agent's faults left to tell). Such a condition says nothing about
// the machine: the probe decides it afresh, whether or not the fault is
// still there (one still there applies again by its annotation).
func SetByFault(c corev1.NodeCondition) bool {
	_, marked := MarkedBy(c.Message)
	return marked || c.Reason == DefaultReason
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

// Parse decodes and checks one fault annotation without regard to the
// present time: strict JSON (an unknown, repeated or null field is an
// error), a known target, a valid status and reason, a parseable expiresAt,
// and an injectedAt, when given, before it. Defaults are filled in.
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
	if err := spec.check(); err != nil {
		return f, err
	}
	f.Status, f.Reason, f.Message, f.InjectedBy = spec.Status, spec.Reason, spec.Message, spec.InjectedBy
	if f.ExpiresAt, f.InjectedAt, err = spec.times(); err != nil {
		return f, err
	}
	return f, nil
}

// check fills in the defaults of status, reason and message and checks
// them and injectedBy.
func (spec *Spec) check() error {
	switch spec.Status {
	case "":
		// Left out (an explicit null is refused by decodeSpec).
		spec.Status = corev1.ConditionTrue
	case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
	default:
		return fmt.Errorf("status %q is not True, False or Unknown", truncate(string(spec.Status), 64))
	}
	if spec.Reason == "" {
		spec.Reason = DefaultReason
	}
	if len(spec.Reason) > maxReasonLen || !validReason(spec.Reason) {
		return fmt.Errorf("reason %q must be CamelCase (letters, digits, '_', ',' or ':', starting with a letter) and at most %d characters", truncate(spec.Reason, 64), maxReasonLen)
	}
	if spec.Message == "" {
		spec.Message = DefaultMessage
	}
	if len(spec.InjectedBy) > maxInjectedByLen {
		return fmt.Errorf("injectedBy is longer than %d characters", maxInjectedByLen)
	}
	return nil
}

// times parses expiresAt (required) and injectedAt (optional; zero when
// left out), which must come before expiresAt.
func (spec Spec) times() (expires, injected time.Time, err error) {
	if spec.ExpiresAt == "" {
		return expires, injected, fmt.Errorf("expiresAt is required (an RFC 3339 time such as %s): every fault expires", rfc3339Example)
	}
	expires, err = time.Parse(time.RFC3339, spec.ExpiresAt)
	if err != nil {
		return expires, injected, fmt.Errorf("expiresAt %q is not an RFC 3339 time such as %s", truncate(spec.ExpiresAt, 64), rfc3339Example)
	}
	if spec.InjectedAt == "" {
		return expires, injected, nil
	}
	injected, err = time.Parse(time.RFC3339, spec.InjectedAt)
	if err != nil {
		return expires, injected, fmt.Errorf("injectedAt %q is not an RFC 3339 time such as %s", truncate(spec.InjectedAt, 64), rfc3339Example)
	}
	if !injected.Before(expires) {
		return expires, injected, fmt.Errorf("injectedAt %s is not before expiresAt %s", stamp(injected), stamp(expires))
	}
	return expires, injected, nil
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
// and an unknown or repeated field is an error. So is a field given as
// null, which the decoder would take as left out: a fault says what it
// means or leaves the field to its default.
func decodeSpec(value string) (Spec, error) {
	var spec Spec
	trimmed := bytes.TrimSpace([]byte(value))
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return spec, fmt.Errorf("value is not a JSON object: %q", truncate(value, 64))
	}
	err := strict.JSON(trimmed, &spec)
	if err == nil {
		return spec, nullField(trimmed)
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

// nullField reports the first field, in specFields order, that obj (a JSON
// object the strict decoder accepted) gives as null.
func nullField(obj []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(obj, &raw); err != nil {
		return fmt.Errorf("value is not a valid fault: %w", err)
	}
	for _, f := range strings.Split(specFields, ", ") {
		if v, ok := raw[f]; !ok || string(bytes.TrimSpace(v)) != "null" {
			continue
		}
		if f == "status" {
			return errors.New(`status is null: give "True", "False" or "Unknown", or leave the field out for True`)
		}
		return fmt.Errorf("%s is null: give a string or leave the field out", f)
	}
	return nil
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

// Start is when f's duration counts from: the earliest of its injectedAt,
// seen (a time its value is known to have been on the Node: when the agent
// first saw it, or when the API server recorded its write, WrittenAt; zero
// for none) and now.
func Start(f Fault, seen, now time.Time) time.Time {
	start := now
	for _, t := range []time.Time{f.InjectedAt, seen} {
		if !t.IsZero() && t.Before(start) {
			start = t
		}
	}
	return start
}

// CheckTime judges a parsed fault at now: expired (problem set and expired
// true), or lasting longer than max (beyond ExpirySlack) from its start
// (see Start; seen may be zero). An empty problem means the fault applies.
// A fault judged from its injectedAt or from when it was written is judged
// the same at every later time, so a restarted agent judges it as the one
// that first saw it.
func CheckTime(f Fault, seen, now time.Time, max time.Duration) (problem string, expired bool) {
	if !now.Before(f.ExpiresAt) {
		return fmt.Sprintf("expiresAt %s is in the past", stamp(f.ExpiresAt)), true
	}
	start := Start(f, seen, now)
	lasts := f.ExpiresAt.Sub(start)
	if lasts <= addSaturating(max, ExpirySlack) {
		return "", false
	}
	beyond := fmt.Sprintf("beyond the maximum fault duration %s", Span(max))
	switch {
	case start.Equal(now):
		return fmt.Sprintf("expiresAt %s is %s away, %s", stamp(f.ExpiresAt), Span(lasts), beyond), false
	case start.Equal(f.InjectedAt):
		return fmt.Sprintf("the fault lasts %s, from injectedAt %s to expiresAt %s, %s", Span(lasts), stamp(start), stamp(f.ExpiresAt), beyond), false
	default:
		return fmt.Sprintf("the fault lasts %s, from when its annotation was written (%s) to expiresAt %s, %s", Span(lasts), stamp(start), stamp(f.ExpiresAt), beyond), false
	}
}

// addSaturating is a+b for non-negative durations, at most the largest
// Duration.
func addSaturating(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// stamp formats t for a message: RFC 3339 in UTC.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Span says how long d is, for a message: Go's form ("1h30m0s") up to a
// week, whole days up to a hundred years, and beyond that only "more than
// 100 years" (time.Duration saturates at 292 years, and its form, such as
// "2562047h47m16.854775807s", says nothing to a reader). Print a date
// beside it where the precise time matters.
func Span(d time.Duration) string {
	const day, week, century = 24 * time.Hour, 7 * 24 * time.Hour, 36525 * 24 * time.Hour
	switch {
	case d < 0:
		return "-" + Span(-max(d, -math.MaxInt64))
	case d <= week:
		return d.Round(time.Second).String()
	case d <= century:
		return fmt.Sprintf("about %d days", (d+day/2)/day)
	default:
		return "more than 100 years"
	}
}

// Written is when the API server recorded an annotation's value being
// written.
type Written struct {
	Value string
	At    time.Time
}

// WrittenAt returns, for each fault annotation on node, when its current
// value was written, as the Node's managed fields record it: the time of
// the entry that owns the annotation (the earliest, when several share
// it). The time is the owner's last change to the Node, so it is never
// earlier than the annotation's write. Annotations no entry with a time
// owns are left out.
func WrittenAt(node *corev1.Node) map[string]Written {
	out := map[string]Written{}
	for _, mf := range node.ManagedFields {
		if mf.FieldsV1 == nil || mf.Time == nil {
			continue
		}
		for k := range ownedAnnotations(mf) {
			v, ok := node.Annotations[k]
			if !IsAnnotation(k) || !ok {
				continue
			}
			if w, seen := out[k]; !seen || mf.Time.Time.Before(w.At) {
				out[k] = Written{Value: v, At: mf.Time.Time}
			}
		}
	}
	return out
}

// ownedAnnotations lists the annotation keys a managed-fields entry owns.
func ownedAnnotations(mf metav1.ManagedFieldsEntry) map[string]bool {
	var f struct {
		Metadata struct {
			Annotations map[string]json.RawMessage `json:"f:annotations"`
		} `json:"f:metadata"`
	}
	if json.Unmarshal(mf.FieldsV1.Raw, &f) != nil {
		return nil
	}
	out := map[string]bool{}
	for k := range f.Metadata.Annotations {
		if name, ok := strings.CutPrefix(k, "f:"); ok {
			out[name] = true
		}
	}
	return out
}

// ParseAll reads every fault annotation in annotations (others are not
// looked at) and splits them into the faults that apply at now and the
// rejected ones, each sorted by key. written is when each annotation's
// value was written (WrittenAt; nil for unknown); known lists the
// condition types the agent manages; probeConditions maps probe names to
// their condition; max is the longest a fault may last.
func ParseAll(annotations map[string]string, written map[string]Written, known map[corev1.NodeConditionType]bool, probeConditions map[string]corev1.NodeConditionType, now time.Time, max time.Duration) (valid []Fault, rejected []Rejection) {
	for _, k := range Keys(annotations) {
		v := annotations[k]
		f, err := Parse(k, v, known, probeConditions)
		if err != nil {
			rejected = append(rejected, Rejection{Key: k, Value: v, Target: f.Target, Problem: err.Error()})
			continue
		}
		if problem, expired := CheckTime(f, writtenTime(written, k, v), now, max); problem != "" {
			rejected = append(rejected, Rejection{Key: k, Value: v, Target: f.Target, Problem: problem, Expired: expired, Fault: &f})
			continue
		}
		valid = append(valid, f)
	}
	return valid, rejected
}

// writtenTime is when annotation key's value was written, if written says
// so for that value; zero otherwise.
func writtenTime(written map[string]Written, key, value string) time.Time {
	if w, ok := written[key]; ok && w.Value == value {
		return w.At
	}
	return time.Time{}
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
