package taints

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// EvictWhen says whether and when the taint-eviction controller deletes a
// pod. Its order is the order Explain sorts by: soonest first.
type EvictWhen int

const (
	// EvictImmediately: a NoExecute taint is not tolerated, or a matching
	// toleration has tolerationSeconds <= 0.
	EvictImmediately EvictWhen = iota
	// EvictAfter: every NoExecute taint is tolerated and the tolerations
	// used limit how long; the pod goes after the shortest limit.
	EvictAfter
	// EvictNever: there is no NoExecute taint, or every one is tolerated
	// without a time limit.
	EvictNever
)

var evictWhenNames = [...]string{EvictImmediately: "Immediately", EvictAfter: "After", EvictNever: "Never"}

func (w EvictWhen) String() string {
	if w < 0 || int(w) >= len(evictWhenNames) {
		return fmt.Sprintf("EvictWhen(%d)", int(w))
	}
	return evictWhenNames[w]
}

// MarshalText writes the name ("Immediately", "After", "Never").
func (w EvictWhen) MarshalText() ([]byte, error) {
	if w < 0 || int(w) >= len(evictWhenNames) {
		return nil, fmt.Errorf("invalid EvictWhen %d", int(w))
	}
	return []byte(evictWhenNames[w]), nil
}

// UnmarshalText reads what MarshalText writes.
func (w *EvictWhen) UnmarshalText(b []byte) error {
	for i, n := range evictWhenNames {
		if string(b) == n {
			*w = EvictWhen(i)
			return nil
		}
	}
	return fmt.Errorf("invalid EvictWhen %q: want one of %s", b, strings.Join(evictWhenNames[:], ", "))
}

// Eviction explains what a Node's taints mean for one pod bound to it: when
// the taint-eviction controller would delete it, and whether a new pod like
// it (same tolerations) could still be scheduled there.
type Eviction struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`

	When EvictWhen `json:"when"`
	// After is the delay for EvictAfter: the smallest tolerationSeconds
	// among the tolerations the controller uses. Zero otherwise.
	After time.Duration `json:"-"`
	// At is when the deletion is due (zero for EvictNever). The controller
	// starts its clock when it sees the taint on the pod's node, or the pod
	// on the tainted node, whichever is later: At is the later of the
	// deciding taints' TimeAdded (now when none has one) and the time the
	// pod was bound, plus After. An At in the past means the deletion is
	// overdue (the controller is not running, or the taint was replaced).
	At time.Time `json:"at,omitzero"`
	// Because holds the deciding taints: for EvictImmediately the NoExecute
	// taints the pod does not tolerate (or whose tolerations have
	// tolerationSeconds <= 0); for EvictAfter the NoExecute taints whose
	// tolerations set After; for EvictNever the NoExecute taints, all
	// tolerated without a limit (none when the node has no NoExecute
	// taint).
	Because []corev1.Taint `json:"because,omitempty"`
	// Finished is set for a pod in phase Succeeded or Failed. The
	// controller does not look at the phase: it deletes such a pod's
	// object like any other, but nothing running is disrupted.
	Finished bool `json:"finished,omitempty"`
	// Mirror is set for a static pod's mirror. Deleting the mirror does not
	// stop the static pod; the kubelet creates the mirror again.
	Mirror bool `json:"mirror,omitempty"`

	// CanScheduleNew says whether the scheduler's TaintToleration filter
	// would let a new pod with this pod's tolerations onto the node.
	CanScheduleNew bool `json:"canScheduleNew"`
	// BlockedBy are the NoSchedule and NoExecute taints such a pod does not
	// tolerate: any one keeps it off the node.
	BlockedBy []corev1.Taint `json:"blockedBy,omitempty"`
	// AvoidedBy are the PreferNoSchedule taints it does not tolerate: the
	// scheduler scores the node down for each but may still use it.
	AvoidedBy []corev1.Taint `json:"avoidedBy,omitempty"`
}

// PodName is namespace/name.
func (e Eviction) PodName() string { return e.Namespace + "/" + e.Name }

// evictionJSON is Eviction's JSON form: After as a Go duration string
// ("20s") and in whole seconds.
type evictionJSON struct {
	eviction
	After        string `json:"after,omitempty"`
	AfterSeconds int64  `json:"afterSeconds,omitempty"`
}

// eviction has Eviction's fields without its JSON methods.
type eviction Eviction

// MarshalJSON writes After as "after": "20s" and "afterSeconds": 20 (both
// left out when zero).
func (e Eviction) MarshalJSON() ([]byte, error) {
	j := evictionJSON{eviction: eviction(e)}
	if e.After != 0 {
		j.After = e.After.String()
		j.AfterSeconds = int64(e.After / time.Second)
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Eviction) UnmarshalJSON(b []byte) error {
	var j evictionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Eviction(j.eviction)
	if j.After != "" {
		d, err := time.ParseDuration(j.After)
		if err != nil {
			return fmt.Errorf("after: %w", err)
		}
		e.After = d
	}
	return nil
}

// ExplainOptions tune Explain.
type ExplainOptions struct {
	// ComparisonOperators makes Lt and Gt tolerations compare integer
	// values, as with the TaintTolerationComparisonOperators feature gate
	// (alpha, off by default in Kubernetes 1.35). When false, as in a
	// cluster with default feature gates, such tolerations tolerate nothing.
	ComparisonOperators bool
	// Logger receives the complaints of toleration matching about Lt/Gt
	// values that are not integers. The zero Logger discards them.
	Logger klog.Logger
}

// Explain says, for each pod bound to a Node with nodeTaints, whether and
// when the taint-eviction controller deletes it and whether new pods like it
// could still be scheduled there, with default feature gates. The result is
// sorted by When, After, namespace and name. See ExplainWith.
func Explain(nodeTaints []corev1.Taint, pods []corev1.Pod, now time.Time) []Eviction {
	return ExplainWith(nodeTaints, pods, now, ExplainOptions{})
}

// ExplainWith is Explain with options.
//
// It follows the taint-eviction controller (pkg/controller/tainteviction)
// exactly: only NoExecute taints count; each is matched to the first of the
// pod's tolerations that tolerates it; if one is tolerated by none the pod
// is deleted at once; otherwise the delay is the smallest tolerationSeconds
// among the matched tolerations (<= 0 meaning at once), and without any
// tolerationSeconds the pod stays. Like the controller it ignores the pod's
// phase, owner and priority: DaemonSet pods carry the tolerations their
// controller added, and are judged by them like any pod. Toleration matching
// itself is k8s.io/api's Toleration.ToleratesTaint and
// k8s.io/component-helpers, as in the controller and the scheduler.
func ExplainWith(nodeTaints []corev1.Taint, pods []corev1.Pod, now time.Time, opts ExplainOptions) []Eviction {
	var noExecute []corev1.Taint
	for _, t := range nodeTaints {
		if t.Effect == corev1.TaintEffectNoExecute {
			noExecute = append(noExecute, t)
		}
	}
	out := make([]Eviction, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		e := Eviction{
			Namespace: p.Namespace,
			Name:      p.Name,
			Finished:  p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
		}
		_, e.Mirror = p.Annotations[corev1.MirrorPodAnnotationKey]
		opts.evict(&e, noExecute, p, now)
		opts.schedule(&e, nodeTaints, p.Spec.Tolerations)
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.When != b.When {
			return a.When < b.When
		}
		if a.After != b.After {
			return a.After < b.After
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out
}

// evict fills e's eviction verdict from the node's NoExecute taints.
func (o ExplainOptions) evict(e *Eviction, noExecute []corev1.Taint, p *corev1.Pod, now time.Time) {
	tolerations := p.Spec.Tolerations
	// Untolerated taints: all of them, where the controller stops at the
	// first; the verdict is the same.
	var untolerated []corev1.Taint
	for i := range noExecute {
		if !corev1helpers.TolerationsTolerateTaint(o.Logger, tolerations, &noExecute[i], o.ComparisonOperators) {
			untolerated = append(untolerated, noExecute[i])
		}
	}
	if len(untolerated) > 0 {
		e.When, e.Because = EvictImmediately, untolerated
		e.At = clockStart(untolerated, p, now)
		return
	}
	// All tolerated. The controller (GetMatchingTolerations) uses, for
	// each taint, the first toleration in the pod's order that tolerates
	// it, then getMinTolerationTime over those.
	limited := false
	var minSeconds int64
	var deciding []corev1.Taint
	for i := range noExecute {
		tol := o.firstTolerating(tolerations, &noExecute[i])
		if tol.TolerationSeconds == nil {
			continue
		}
		s := max(*tol.TolerationSeconds, 0)
		switch {
		case !limited || s < minSeconds:
			limited, minSeconds, deciding = true, s, []corev1.Taint{noExecute[i]}
		case s == minSeconds:
			deciding = append(deciding, noExecute[i])
		}
	}
	switch {
	case !limited:
		e.When, e.Because = EvictNever, noExecute
	case minSeconds == 0:
		e.When, e.Because = EvictImmediately, deciding
		e.At = clockStart(deciding, p, now)
	default:
		e.When, e.Because = EvictAfter, deciding
		e.After = time.Duration(minSeconds) * time.Second
		e.At = clockStart(deciding, p, now).Add(e.After)
	}
}

// firstTolerating returns the first toleration that tolerates t; the caller
// has checked that there is one.
func (o ExplainOptions) firstTolerating(tolerations []corev1.Toleration, t *corev1.Taint) corev1.Toleration {
	for _, tol := range tolerations {
		if tol.ToleratesTaint(o.Logger, t, o.ComparisonOperators) {
			return tol
		}
	}
	return corev1.Toleration{}
}

// clockStart is when the controller's clock for the pod started: when it
// saw the deciding taints (the earliest TimeAdded among them; now when none
// has one) or, if later, when the pod was bound to the node.
func clockStart(deciding []corev1.Taint, p *corev1.Pod, now time.Time) time.Time {
	var start time.Time
	for _, t := range deciding {
		if t.TimeAdded != nil && !t.TimeAdded.IsZero() && (start.IsZero() || t.TimeAdded.Time.Before(start)) {
			start = t.TimeAdded.Time
		}
	}
	if start.IsZero() {
		start = now
	}
	if b := boundAt(p); b.After(start) {
		start = b
	}
	return start
}

// boundAt is when the pod was bound to its node, as far as the object tells:
// the later of its creation and its PodScheduled condition turning True.
func boundAt(p *corev1.Pod) time.Time {
	t := p.CreationTimestamp.Time
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	return t
}

// schedule fills e's verdict for a new pod with these tolerations, as the
// scheduler's TaintToleration plugin sees it: NoSchedule and NoExecute taints
// filter the node out, PreferNoSchedule ones score it down.
func (o ExplainOptions) schedule(e *Eviction, nodeTaints []corev1.Taint, tolerations []corev1.Toleration) {
	for i := range nodeTaints {
		t := &nodeTaints[i]
		if corev1helpers.TolerationsTolerateTaint(o.Logger, tolerations, t, o.ComparisonOperators) {
			continue
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute:
			e.BlockedBy = append(e.BlockedBy, *t)
		case corev1.TaintEffectPreferNoSchedule:
			e.AvoidedBy = append(e.AvoidedBy, *t)
		}
	}
	e.CanScheduleNew = len(e.BlockedBy) == 0
}

// ParseTaint reads a taint the way kubectl taint writes one:
// key[=value]:Effect, with Effect one of NoSchedule, PreferNoSchedule and
// NoExecute. The key must be a qualified name and the value a label value,
// as the API server requires. TimeAdded is left unset.
func ParseTaint(s string) (corev1.Taint, error) {
	kv, effect, ok := cutLast(s, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("taint %q: no effect: want key[=value]:Effect with Effect one of %s", s, effectList)
	}
	t := corev1.Taint{Effect: corev1.TaintEffect(effect)}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return corev1.Taint{}, fmt.Errorf("taint %q: effect %q is not one of %s", s, effect, effectList)
	}
	t.Key, t.Value, _ = strings.Cut(kv, "=")
	if t.Key == "" {
		return corev1.Taint{}, fmt.Errorf("taint %q: empty key: want key[=value]:Effect", s)
	}
	if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
		return corev1.Taint{}, fmt.Errorf("taint %q: key %q: %s", s, t.Key, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
		return corev1.Taint{}, fmt.Errorf("taint %q: value %q: %s", s, t.Value, strings.Join(errs, "; "))
	}
	return t, nil
}

const effectList = "NoSchedule, PreferNoSchedule, NoExecute"

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
