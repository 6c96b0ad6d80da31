package drill

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// podFate is what became of one pod (by UID) from a moment on.
type podFate struct {
	ns, name, node string
	// matched: some version of it matched the selector.
	matched bool
	// firstSeen is the time of its first version: a pod first seen after
	// the moment was created after it (a replacement).
	firstSeen time.Time
	// goneBefore: it was deleted or terminating before the moment.
	goneBefore bool
	disruption string
	left       bool
	leftAt     time.Time
}

// fates follows each pod from from on: whether it left (terminating or
// deleted), and whether it was evicted (a DisruptionTarget reason seen on
// it before or as it left). sel nil matches every pod; ns "" every
// namespace.
func (ev *evaluator) fates(sel labels.Selector, ns string, from time.Time) []*podFate {
	byUID := map[string]*podFate{}
	var order []*podFate
	for _, p := range ev.pods {
		if !nsMatch(ns, p.Namespace) {
			continue
		}
		f := byUID[p.UID]
		if f == nil {
			f = &podFate{ns: p.Namespace, name: p.Name, firstSeen: p.Time}
			byUID[p.UID] = f
			order = append(order, f)
		}
		if sel == nil || sel.Matches(labels.Set(p.Labels)) {
			f.matched = true
		}
		if p.Node != "" {
			f.node = p.Node
		}
		if f.left || f.goneBefore {
			continue
		}
		if p.Disruption != "" {
			f.disruption = p.Disruption
		}
		if p.Terminating || p.Deleted {
			if p.Time.Before(from) {
				f.goneBefore = true
				continue
			}
			f.left, f.leftAt = true, p.Time
		}
	}
	var out []*podFate
	for _, f := range order {
		if f.matched && !f.goneBefore {
			out = append(out, f)
		}
	}
	return out
}

// removals lists the pods that left, in the order they left, and how many
// of them were evicted (for reason want only, when given).
func (ev *evaluator) removals(fates []*podFate, want string) ([]PodRemoval, int) {
	var out []PodRemoval
	evicted := 0
	for _, f := range fates {
		if !f.left {
			continue
		}
		reason := cmp.Or(f.disruption, ReasonDeleted)
		if f.disruption != "" && (want == "" || f.disruption == want) {
			evicted++
		}
		out = append(out, PodRemoval{Namespace: f.ns, Name: f.name, Node: f.node, Reason: reason, AtSeconds: ev.at(f.leftAt)})
	}
	slices.SortStableFunc(out, func(a, b PodRemoval) int {
		switch {
		case a.AtSeconds < b.AtSeconds:
			return -1
		case a.AtSeconds > b.AtSeconds:
			return 1
		}
		return 0
	})
	return out, evicted
}

func (ev *evaluator) evictScope(e *EvictExpect) (labels.Selector, string, time.Time, string) {
	sel, err := labels.Parse(e.Selector)
	if err != nil {
		return nil, "", time.Time{}, fmt.Sprintf("selector %q: %v", e.Selector, err)
	}
	from, ok := ev.stepStart(e.After)
	if !ok {
		return nil, "", time.Time{}, fmt.Sprintf("step %s never ran: pods %s not judged", e.After, e.Selector)
	}
	return sel, ev.namespace(e.Namespace), from, ""
}

// existedAt splits fates into the pods that existed at from (first seen
// then or before) and those created after it (replacements).
func existedAt(fates []*podFate, from time.Time) (existed, created []*podFate) {
	for _, f := range fates {
		if f.firstSeen.After(from) {
			created = append(created, f)
		} else {
			existed = append(existed, f)
		}
	}
	return existed, created
}

// evicted judges EvictExpect as Evicted: at least Min of the matching
// pods that existed when step After started evicted after it. Pods
// created since (a workload's replacements) are not the expectation's
// pods: neither counted nor evicted by it; those evicted too are said.
func (ev *evaluator) evicted(e *EvictExpect) Result {
	sel, ns, from, msg := ev.evictScope(e)
	if msg != "" {
		return failed("%s", msg)
	}
	fates, created := existedAt(ev.fates(sel, ns, from), from)
	pods, n := ev.removals(fates, e.Reason)
	res := Result{Passed: n >= e.Min, Measured: Measured{Matched: ptr(len(fates)), Evictions: ptr(n), Pods: pods}}
	seen := ""
	if e.Reason == "" {
		seen = reasons(pods, "")
	}
	res.Message = fmt.Sprintf("%d of %d %s %s%s evicted%s %s%s, expected at least %d",
		n, len(fates), plural(len(fates), "pod", "pods"), e.Selector, inNamespace(ns), byReason(e.Reason), since(e.After), seen, e.Min)
	if others := evictedOtherwise(pods, e.Reason); others > 0 {
		res.Message += fmt.Sprintf("; %d evicted otherwise%s", others, reasons(pods, e.Reason))
	}
	if d := deletedCount(pods); d > 0 {
		res.Message += fmt.Sprintf("; %d deleted without eviction", d)
	}
	if _, later := ev.removals(created, e.Reason); later > 0 {
		res.Message += fmt.Sprintf("; %d %s created %s evicted too (not counted)", later, plural(later, "pod", "pods"), since(e.After))
	}
	return res
}

// notEvicted judges EvictExpect as NotEvicted: no matching pod evicted or
// deleted after After (a force delete shows as deleted without eviction).
func (ev *evaluator) notEvicted(e *EvictExpect) Result {
	sel, ns, from, msg := ev.evictScope(e)
	if msg != "" {
		return failed("%s", msg)
	}
	fates := ev.fates(sel, ns, from)
	pods, n := ev.removals(fates, e.Reason)
	if e.Reason != "" {
		return ev.notEvictedFor(e, ns, fates, pods, n)
	}
	res := Result{Passed: len(fates) > 0 && len(pods) == 0, Measured: Measured{Matched: ptr(len(fates)), Evictions: ptr(n), Pods: pods}}
	switch {
	case len(fates) == 0:
		res.Message = fmt.Sprintf("no pod matches %s%s: nothing to keep", e.Selector, inNamespace(ns))
	case len(pods) == 0:
		res.Message = fmt.Sprintf("none of %d %s %s evicted or deleted %s", len(fates), plural(len(fates), "pod", "pods"), e.Selector, since(e.After))
	default:
		p := pods[0]
		how := "evicted (" + p.Reason + ")"
		if p.Reason == ReasonDeleted {
			how = ReasonDeleted
		}
		res.Message = fmt.Sprintf("pod %s/%s %s at %.1fs on %s, expected none of %s evicted", p.Namespace, p.Name, how, p.AtSeconds, p.Node, e.Selector)
		if len(pods) > 1 {
			res.Message += fmt.Sprintf("; %d more left", len(pods)-1)
		}
	}
	return res
}

// notEvictedFor judges NotEvicted with a Reason: no matching pod evicted
// for that reason after After (n of them were); pods that left otherwise
// are reported, not counted.
func (ev *evaluator) notEvictedFor(e *EvictExpect, ns string, fates []*podFate, pods []PodRemoval, n int) Result {
	res := Result{Passed: len(fates) > 0 && n == 0, Measured: Measured{Matched: ptr(len(fates)), Evictions: ptr(n), Pods: pods}}
	otherwise := ""
	if len(pods) > n {
		otherwise = fmt.Sprintf("; %d left otherwise%s", len(pods)-n, reasons(pods, e.Reason))
		if d := deletedCount(pods); d > 0 {
			otherwise += fmt.Sprintf(", %d deleted without eviction", d)
		}
	}
	switch {
	case len(fates) == 0:
		res.Message = fmt.Sprintf("no pod matches %s%s: nothing to keep", e.Selector, inNamespace(ns))
	case n == 0:
		res.Message = fmt.Sprintf("none of %d %s %s evicted%s %s%s", len(fates), plural(len(fates), "pod", "pods"), e.Selector, byReason(e.Reason), since(e.After), otherwise)
	default:
		i := slices.IndexFunc(pods, func(p PodRemoval) bool { return p.Reason == e.Reason })
		p := pods[i]
		res.Message = fmt.Sprintf("pod %s/%s evicted (%s) at %.1fs on %s, expected none of %s evicted%s", p.Namespace, p.Name, p.Reason, p.AtSeconds, p.Node, e.Selector, byReason(e.Reason))
		if n > 1 {
			res.Message += fmt.Sprintf("; %d more evicted so", n-1)
		}
		res.Message += otherwise
	}
	return res
}

// deletedCount is how many of pods were deleted without eviction.
func deletedCount(pods []PodRemoval) int {
	n := 0
	for _, p := range pods {
		if p.Reason == ReasonDeleted {
			n++
		}
	}
	return n
}

// evictedOtherwise is how many of pods were evicted for a reason other
// than want (none when want is empty).
func evictedOtherwise(pods []PodRemoval, want string) int {
	if want == "" {
		return 0
	}
	n := 0
	for _, p := range pods {
		if p.Reason != ReasonDeleted && p.Reason != want {
			n++
		}
	}
	return n
}

// reasons lists the eviction reasons seen but except, " (A, B)".
func reasons(pods []PodRemoval, except string) string {
	var rs []string
	for _, p := range pods {
		if p.Reason != ReasonDeleted && p.Reason != except && !slices.Contains(rs, p.Reason) {
			rs = append(rs, p.Reason)
		}
	}
	if len(rs) == 0 {
		return ""
	}
	return " (" + strings.Join(rs, ", ") + ")"
}
