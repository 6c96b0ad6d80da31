package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/selftaint/selftaint/taints/fleet"
)

// maintSummary prints what each node and pod of the drain part went
// through, and what that showed.
func (d *demo) maintSummary(v *view) {
	mv, m := v.maint, d.cast.maint
	d.log.plain("")
	d.log.plain(fmt.Sprintf("Times are from the part's first fault (+0.0s, on %s).", m.sick.node))
	d.log.plain("")
	d.log.lines(maintNodeTable(mv, m.nodes()))
	d.log.plain("")
	d.log.lines(partPodTable(mv))
	d.log.plain("")
	d.log.plain("What this showed:")
	for _, l := range maintClosing(mv, m) {
		d.log.plain("  - " + l)
	}
	d.log.plain("")
}

// tableLines lays rows out in columns.
func tableLines(rows [][]string) []string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
	return strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
}

// maintNodeTable is each node's maintenance: who asked, when it got the
// slot, when it was drained, how it ended.
func maintNodeTable(mv *maintView, nodes []string) []string {
	rows := [][]string{{"NODE", "ASKED BY", "ASKED", "GOT THE SLOT", "DRAINED", "ENDED"}}
	for _, name := range nodes {
		st := mv.nodes[name]
		rows = append(rows, []string{name, orText(st.by, "nobody"), relOr(mv, st.asked, "never"), slotText(mv, *st), relOr(mv, st.drained, "never"), endedText(mv, *st)})
	}
	return tableLines(rows)
}

func relOr(mv *maintView, t time.Time, none string) string {
	if t.IsZero() {
		return none
	}
	return mv.rel(t)
}

func orText(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// slotText says when a node got the slot, and how long after it asked.
func slotText(mv *maintView, st maintSeen) string {
	switch {
	case st.draining.IsZero():
		return "never"
	case st.waiting.IsZero():
		return fmt.Sprintf("%s, %s after it asked", mv.rel(st.draining), since(st.asked, st.draining))
	}
	return fmt.Sprintf("%s, after %s Waiting", mv.rel(st.draining), since(st.waiting, st.draining))
}

// endedText says how a node's maintenance ended, or that it goes on.
func endedText(mv *maintView, st maintSeen) string {
	switch {
	case !st.ended.IsZero():
		return fmt.Sprintf("%s %s", mv.rel(st.ended), st.endReason)
	case !st.drained.IsZero():
		return "not yet: Drained, cordoned until the request is withdrawn"
	}
	return "not yet"
}

// partPodTable is every pod of the drain part's workloads: where it ran,
// when it was evicted, and the new ones their controllers made.
func partPodTable(mv *maintView) []string {
	pods := slices.Collect(maps.Values(mv.pods))
	slices.SortStableFunc(pods, func(a, b *partPod) int {
		if c := strings.Compare(a.owner, b.owner); c != 0 {
			return c
		}
		if a.original != b.original {
			if a.original {
				return -1
			}
			return 1
		}
		if c := a.seen.Compare(b.seen); c != 0 && !a.original {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	rows := [][]string{{"POD", "OF", "NODE", "EVICTED"}}
	for _, p := range pods {
		name := p.name
		if !p.original {
			name += " (new)"
		}
		rows = append(rows, []string{namespace + "/" + name, p.owner, p.node, relOr(mv, p.evicted, "no: running")})
	}
	return tableLines(rows)
}

// maintClosing says what the drain part showed, each claim checked
// against what the live view saw.
func maintClosing(mv *maintView, m maintCast) []string {
	sick, second, blocked := mv.nodes[m.sick.node], mv.nodes[m.second.node], mv.nodes[m.blocked]
	g := m.guarded()
	_, most := mv.avail.now()
	return []string{
		drainedClaim(m.sick.node, *sick, mv.pods, second.draining),
		pdbClaim(g, most, mv.avail.failed()),
		poolClaim(mv.mostSlots, m.second.node, *second, m.blocked, *blocked),
		blockedClaim(m.blocked, *blocked, m.refusing().name, m.deadline, mv.followDone, mv.followCode, mv.followOut),
		healthyClaim(m.sick.node, *sick),
	}
}

// drainedClaim checks that the sick node was drained, cordoned by us, and
// that its pods were evicted and made again elsewhere: new pods seen before
// until, when the next drain that moved pods began (zero: no such drain).
func drainedClaim(node string, st maintSeen, pods map[types.UID]*partPod, until time.Time) string {
	switch {
	case st.asked.IsZero():
		return fmt.Sprintf("NOT SHOWN: %s's agent never asked for a drain.", node)
	case st.drained.IsZero():
		return fmt.Sprintf("NOT SHOWN: %s was never Drained.", node)
	case st.cordoned.IsZero():
		return fmt.Sprintf("NOT SHOWN: %s was drained but never seen cordoned by selftaint.", node)
	}
	evicted, replaced := 0, map[string]int{}
	var elsewhere []string
	for _, p := range pods {
		switch {
		case p.original && p.node == node && !p.evicted.IsZero():
			evicted++
			replaced[p.owner]--
		case p.original && p.node == node:
			return fmt.Sprintf("NOT SHOWN: %s was Drained, yet its pod %s was never evicted.", node, p.name)
		case !p.original && p.node != node && (until.IsZero() || p.seen.Before(until)):
			replaced[p.owner]++
			if !slices.Contains(elsewhere, p.node) {
				elsewhere = append(elsewhere, p.node)
			}
		}
	}
	for owner, n := range replaced {
		if n < 0 {
			return fmt.Sprintf("NOT SHOWN: %d pod(s) of %s evicted from %s were not seen made again on another node.", -n, owner, node)
		}
	}
	slices.Sort(elsewhere)
	return fmt.Sprintf("A sick-node drain: %s's agent asked %s after the GPU fault; the coordinator cordoned it (SchedulingDisabled, recorded as ours) and evicted its %d pods through the Eviction API: Drained %s after it asked. Their controllers made them again and kube-scheduler put them on %s.",
		node, since(st.injected, st.asked), evicted, since(st.asked, st.drained), strings.Join(elsewhere, ", "))
}

// pdbClaim checks that the PDB-guarded workload never had more pods
// unavailable than its budget allows (most: the most seen at once by a
// watch on every version of its pods; err: the watch's).
func pdbClaim(w workload, most int, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("NOT SHOWN: the watch on %s %s's pods failed: %v.", w.kind, w.name, err)
	case most > w.maxUnavailable:
		return fmt.Sprintf("PDB VIOLATED: %s %s had %d of %d pods unavailable at once; its PodDisruptionBudget allows %d.", w.kind, w.name, most, w.replicas, w.maxUnavailable)
	case most == 0:
		return fmt.Sprintf("NOT SHOWN: no pod of %s %s was ever unavailable: the drain did not move it.", w.kind, w.name)
	}
	return fmt.Sprintf("%s %s never had more than %d of its %d pods unavailable (a watch saw every version of its pods): the drain evicted them one at a time, as PodDisruptionBudget %s (maxUnavailable: %d) allows.",
		w.kind, w.name, most, w.replicas, w.name, w.maxUnavailable)
}

// poolClaim checks that no more than one drain ran at once and that the
// second node waited for the slot the blocked node held, and got it when
// it was given back.
func poolClaim(mostSlots int, second string, w maintSeen, blocked string, b maintSeen) string {
	switch {
	case mostSlots > 1:
		return fmt.Sprintf("POOL EXCEEDED: %d drains held a slot at once (maxParallel: 1).", mostSlots)
	case w.waiting.IsZero():
		return fmt.Sprintf("NOT SHOWN: %s was never seen Waiting for the slot.", second)
	case w.draining.IsZero():
		return fmt.Sprintf("NOT SHOWN: %s never got the slot.", second)
	case b.ended.IsZero() || w.draining.Before(b.ended):
		return fmt.Sprintf("NOT SHOWN: %s got the slot before %s gave it back.", second, blocked)
	}
	return fmt.Sprintf("One drain at a time (maxParallel: 1, at most %d slot held at once): %s waited %s (%q) while %s held the slot, and got it %s after %s's was given back.",
		mostSlots, second, since(w.waiting, w.draining), withoutRequest(w.waitMsg), blocked, since(b.ended, w.draining), blocked)
}

// blockedClaim checks that the blocked drain named its PDB while it ran,
// ended DrainBlocked at its deadline still naming it, uncordoned, and
// that `drain --wait` (done, exit code, output out) failed with an error
// naming the PDB.
func blockedClaim(node string, st maintSeen, pdb string, deadline time.Duration, done bool, code int, out []string) string {
	names := func(s string) bool { return strings.Contains(s, "PodDisruptionBudget") && strings.Contains(s, pdb) }
	closing := ""
	if len(out) > 0 {
		closing = out[len(out)-1]
	}
	switch {
	case !names(st.refusal):
		return fmt.Sprintf("NOT SHOWN: %s's condition never named PodDisruptionBudget %s.", node, pdb)
	case st.ended.IsZero() || st.endReason != fleet.ReasonDrainBlocked:
		return fmt.Sprintf("NOT SHOWN: %s's drain did not end DrainBlocked (ended: %q).", node, st.endReason)
	case st.uncordoned.IsZero():
		return fmt.Sprintf("NOT SHOWN: %s was not uncordoned when its drain was given back.", node)
	case !names(st.endMsg):
		return fmt.Sprintf("NOT SHOWN: %s was given back DrainBlocked, but its condition then no longer named what blocked it (PodDisruptionBudget %s): %q.", node, pdb, st.endMsg)
	case !done || code == 0:
		return fmt.Sprintf("NOT SHOWN: selftaint drain --wait %s did not fail (exit code %d).", node, code)
	case !names(closing):
		return fmt.Sprintf("NOT SHOWN: selftaint drain --wait %s exited %d, but its error did not name PodDisruptionBudget %s: %q.", node, code, pdb, closing)
	}
	return fmt.Sprintf("A drain that cannot finish says why, and ends: %s's was refused by PodDisruptionBudget %s; %s after it started (deadline %s) it was given back DrainBlocked and uncordoned, and selftaint drain --wait exited %d naming the PDB.",
		node, pdb, since(st.draining, st.ended), deadline, code)
}

// healthyClaim checks that the sick node was given back once its fault
// ended (endWhenHealthy).
func healthyClaim(node string, st maintSeen) string {
	if st.ended.IsZero() || st.endReason != fleet.ReasonReleased || st.uncordoned.IsZero() {
		return fmt.Sprintf("NOT SHOWN: %s's maintenance did not end Released and uncordoned once its GPU fault expired.", node)
	}
	return fmt.Sprintf("%s's GPU fault expired after %s: its agent withdrew the request (endWhenHealthy) and the coordinator uncordoned it (Released), nobody acting.", node, st.fault.lasts)
}
