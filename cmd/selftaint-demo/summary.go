package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/selftaint/selftaint/taints"
)

// slack is how far an eviction may be from when explain's verdict puts it
// and still match: the live view polls, and the controllers react in
// their own time.
const slack = 2 * time.Second

// promptly is how soon after its grant NoExecute should be on a node: the
// agent watches its grant.
const promptly = 5 * time.Second

// dueAt says whether explain's verdict e (ok: explain listed the pod)
// expects the pod evicted, given when NoExecute went on its node and off
// (zero: never, not yet), and when.
func dueAt(e taints.Eviction, ok bool, on, off time.Time) (time.Time, bool) {
	if !ok || e.When == taints.EvictNever || on.IsZero() {
		return time.Time{}, false
	}
	due := on.Add(e.After)
	if !off.IsZero() && off.Before(due) {
		return time.Time{}, false
	}
	return due, true
}

// matches reports whether a pod evicted at deleting (zero: it was not) is
// what explain predicted (due, expected: dueAt).
func matches(due time.Time, expected bool, deleting time.Time) bool {
	if deleting.IsZero() {
		return !expected
	}
	return expected && deleting.Sub(due).Abs() <= slack
}

// predictionText is explain's verdict e on a pod on node, with when it
// was due (relative to the first fault at t0) if NoExecute went on there
// (at on).
func predictionText(e taints.Eviction, ok bool, node string, on, t0 time.Time) string {
	var s string
	switch {
	case !ok:
		return "nothing (explain did not list it)"
	case e.When == taints.EvictNever:
		return "never"
	case e.When == taints.EvictImmediately:
		s = "immediately once " + node + " holds a grant"
	default:
		s = fmt.Sprintf("%s after %s holds a grant", e.After, node)
	}
	if on.IsZero() {
		return s
	}
	return fmt.Sprintf("%s (due +%.1fs)", s, on.Add(e.After).Sub(t0).Seconds())
}

// prediction is predictionText for pod, as the drill stands.
func (d *demo) prediction(v *view, pod string) string {
	e, ok := d.predicted[pod]
	node := v.pods[pod].node
	return predictionText(e, ok, node, v.nodes[node].noExecuteOn, v.t0)
}

// happenedText says what happened to a pod (st) that explain predicted
// would be evicted (predicted) or not.
func happenedText(v *view, st podSeen, predicted bool) string {
	n := v.nodes[st.node]
	switch {
	case !st.deleting.IsZero():
		return "evicted " + v.rel(st.deleting)
	case predicted && n.grantedAt.IsZero():
		return "still running: " + st.node + " never held a grant"
	case predicted && n.noExecuteOn.IsZero():
		return "still running: NoExecute never landed on " + st.node
	}
	return "still running"
}

// summary prints what each node and pod went through, against explain's
// predictions, and what that showed.
func (d *demo) summary(v *view) {
	d.log.plain("")
	d.log.plain(fmt.Sprintf("Times are from the first fault (+0.0s, on %s). An eviction is due when NoExecute lands on the pod's node, plus its toleration's seconds.", d.cast.faults[0].node))
	d.log.plain("")
	d.nodeTable(v)
	d.log.plain("")
	matched := d.podTable(v)
	d.log.plain("")
	d.log.plain("What this showed:")
	for _, l := range closing(v, d.cast, matched) {
		d.log.plain("  - " + l)
	}
	d.log.plain("")
}

// nodeTable prints each node's fault, and when its taints and its grant
// came and went.
func (d *demo) nodeTable(v *view) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tFAULT\tFALLBACK ON\tGRANTED\tNOEXECUTE ON\tCLEARED")
	for _, name := range sortedNodes(v) {
		st := v.nodes[name]
		fmt.Fprintf(tw, "%s\t%s for %s\t%s\t%s\t%s\t%s\n", name, v.rel(st.injected), st.fault.lasts, orNever(v, st.fallbackOn), grantedText(v, *st), orNever(v, st.noExecuteOn), orNever(v, st.cleared))
	}
	tw.Flush()
	d.log.lines(strings.Split(strings.TrimRight(b.String(), "\n"), "\n"))
}

// grantedText says when a node got its grant and how long it waited in
// line for it, or that it never did.
func grantedText(v *view, st nodeSeen) string {
	if st.grantedAt.IsZero() {
		return fmt.Sprintf("never: %s in line, then its fault ended", since(st.asked, st.cleared))
	}
	return fmt.Sprintf("%s, after %s in line", v.rel(st.grantedAt), since(st.asked, st.grantedAt))
}

func orNever(v *view, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return v.rel(t)
}

// podTable prints, for each pod, explain's prediction beside what
// happened, and returns how many matched.
func (d *demo) podTable(v *view) int {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tNODE\tEXPLAIN PREDICTED\tHAPPENED\tMATCH")
	matched := 0
	for _, p := range d.cast.pods {
		st, n := v.pods[p.name], v.nodes[p.node]
		e, ok := d.predicted[p.name]
		due, expected := dueAt(e, ok, n.noExecuteOn, n.noExecuteOff)
		match := "NO"
		if matches(due, expected, st.deleting) {
			match = "yes"
			matched++
		}
		predicted := ok && e.When != taints.EvictNever
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\n", namespace, p.name, p.node, d.prediction(v, p.name), happenedText(v, *st, predicted), match)
	}
	tw.Flush()
	d.log.lines(strings.Split(strings.TrimRight(b.String(), "\n"), "\n"))
	return matched
}

// closing says what the drill showed, each claim checked against what the
// live view saw.
func closing(v *view, c cast, matched int) []string {
	nodes := make([]nodeSeen, 0, len(v.nodes))
	for _, name := range sortedNodes(v) {
		nodes = append(nodes, *v.nodes[name])
	}
	out := []string{fallbackClaim(nodes), budgetClaim(v.mostGranted, v.mostNoExecute, budget), followClaim(nodes), orderClaim(nodes)}
	for _, st := range nodes {
		if st.grantedAt.IsZero() {
			out = append(out, outlastClaim(st, c.podsOn(st.fault.node), v.pods))
		}
	}
	out = append(out, "Every taint went away by itself when its fault expired: nobody acted.")
	if matched == len(c.pods) {
		return append(out, fmt.Sprintf("explain's predictions held for all %d pods.", matched))
	}
	return append(out, fmt.Sprintf("explain's predictions held for only %d of %d pods (see NO above).", matched, len(c.pods)))
}

// fallbackClaim checks that every faulty node got its fallback taint, and
// says how soon.
func fallbackClaim(nodes []nodeSeen) string {
	var slowest time.Duration
	for _, st := range nodes {
		if st.fallbackOn.IsZero() {
			return fmt.Sprintf("NOT SHOWN: %s never got the fallback taint.", st.fault.node)
		}
		slowest = max(slowest, st.fallbackOn.Sub(st.injected))
	}
	return fmt.Sprintf("The fallback went on at once: NoSchedule within %.1fs of each fault. New pods stayed off those nodes; running pods were left alone.", slowest.Seconds())
}

// budgetClaim checks that no more nodes held a grant (granted) or
// carried NoExecute (carried) at once than the budget allows.
func budgetClaim(granted, carried, budget int) string {
	if most := max(granted, carried); most > budget {
		return fmt.Sprintf("BUDGET EXCEEDED: %d nodes held a grant and %d carried NoExecute at once, more than maxNoExecute: %d.", granted, carried, budget)
	}
	return fmt.Sprintf("NoExecute came only under the budget: at most %d grant(s) held and %d node(s) carrying NoExecute at once (maxNoExecute: %d).", granted, carried, budget)
}

// followClaim checks that NoExecute landed on every node that got a
// grant, soon after it.
func followClaim(nodes []nodeSeen) string {
	var slowest time.Duration
	var who string
	for _, st := range nodes {
		switch {
		case st.grantedAt.IsZero():
		case st.noExecuteOn.IsZero():
			return fmt.Sprintf("NOT SHOWN: %s held a grant from %s on, but NoExecute never landed before its fault ended.", st.fault.node, st.grantedAt.Local().Format(time.TimeOnly))
		case st.noExecuteOn.Sub(st.grantedAt) > slowest:
			slowest, who = st.noExecuteOn.Sub(st.grantedAt), st.fault.node
		}
	}
	if slowest > promptly {
		return fmt.Sprintf("SLOW: NoExecute landed %.1fs after %s's grant (expected within %s).", slowest.Seconds(), who, promptly)
	}
	return fmt.Sprintf("NoExecute joined the fallback with each grant, within %.1fs.", slowest.Seconds())
}

// orderClaim checks that the nodes got their grants in the order they
// asked.
func orderClaim(nodes []nodeSeen) string {
	var asked, granted []string
	for _, st := range byTime(nodes, func(st nodeSeen) time.Time { return st.asked }) {
		if !st.grantedAt.IsZero() {
			asked = append(asked, st.fault.node)
		}
	}
	for _, st := range byTime(nodes, func(st nodeSeen) time.Time { return st.grantedAt }) {
		granted = append(granted, st.fault.node)
	}
	if !slices.Equal(asked, granted) {
		return fmt.Sprintf("OUT OF ORDER: grants went to %s, but the nodes asked in the order %s.", strings.Join(granted, ", "), strings.Join(asked, ", "))
	}
	return fmt.Sprintf("Grants passed on in the order the nodes asked: %s, each when the one before let go.", strings.Join(granted, ", then "))
}

// byTime is the nodes with a time at, earliest first.
func byTime(nodes []nodeSeen, at func(nodeSeen) time.Time) []nodeSeen {
	var out []nodeSeen
	for _, st := range nodes {
		if !at(st).IsZero() {
			out = append(out, st)
		}
	}
	slices.SortStableFunc(out, func(a, b nodeSeen) int { return at(a).Compare(at(b)) })
	return out
}

// outlastClaim checks that a node whose fault ended before it got a grant
// lost none of its pods.
func outlastClaim(st nodeSeen, pods []string, seen map[string]*podSeen) string {
	for _, p := range pods {
		if !seen[p].deleting.IsZero() {
			return fmt.Sprintf("NOT SHOWN: %s never held a grant, yet its pod %s was evicted.", st.fault.node, p)
		}
	}
	return fmt.Sprintf("A wait that outlasted its fault evicted no one: %s's fault ended while it waited in line; %s kept running.", st.fault.node, strings.Join(pods, ", "))
}

// sortedNodes are the view's node names, sorted.
func sortedNodes(v *view) []string {
	return slices.Sorted(maps.Keys(v.nodes))
}
