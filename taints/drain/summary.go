package drain

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/selftaint/selftaint/taints/fleet"
)

// Bounds of Summary: a Node condition's message is read by people in
// `kubectl describe node`, and a node with hundreds of stuck pods must not
// write kilobytes into every Node update.
const (
	// MaxSummary is the longest Summary, in bytes.
	MaxSummary = 1024
	// maxNamed is how many pods each part of Summary names; the rest are
	// counted ("+N more").
	maxNamed = 5
	// maxGroups is how many refusing budgets Summary names.
	maxGroups = 3
	// maxName is the longest pod or budget name Summary writes whole.
	maxName = 100
	// maxDetail is the longest message of a failure Summary quotes.
	maxDetail = 120
)

// Summary is the message of the maintenance condition while a node
// drains: how many pods went, which remain, which the Eviction API
// refuses and by which PodDisruptionBudget, which the request leaves and
// why, which failed; for example
//
//	evicted 3 of 7 pods; remaining: ns/a, ns/b; refused: ns/c by
//	PodDisruptionBudget ns/web-pdb (disruptionsAllowed 0: needs 2 healthy,
//	has 2); left: ns/d has no controller (evictUnreplicated not set)
//
// remaining is every pod still to go (as a pass reports it); those a
// blocker names are named in its part, not again under "remaining". Each
// part names at most a few pods and counts the rest; the whole is at most
// MaxSummary bytes.
func Summary(progress fleet.Progress, remaining []string, blockers []Blocker) string {
	parts := []string{fmt.Sprintf("evicted %d of %d pods", progress.Evicted, progress.Total)}
	blockers = slices.Clone(blockers)
	slices.SortStableFunc(blockers, func(a, b Blocker) int { return cmp.Compare(a.Pod, b.Pod) })
	named := map[string]bool{}
	for _, b := range blockers {
		named[b.Pod] = true
	}
	var others []string
	for _, p := range remaining {
		if !named[p] {
			others = append(others, p)
		}
	}
	if len(others) > 0 {
		parts = append(parts, "remaining: "+list(others, shortName))
	}
	if s := refusedPart(blockers); s != "" {
		parts = append(parts, "refused: "+s)
	}
	var left, failed []Blocker
	for _, b := range blockers {
		switch {
		case b.Left():
			left = append(left, b)
		case b.Kind == KindError:
			failed = append(failed, b)
		}
	}
	if len(left) > 0 {
		parts = append(parts, "left: "+list(left, leftText))
	}
	if len(failed) > 0 {
		parts = append(parts, "failed: "+list(failed, func(b Blocker) string {
			return shortName(b.Pod) + ": " + truncate(b.Message, maxDetail)
		}))
	}
	return truncate(strings.Join(parts, "; "), MaxSummary)
}

// refusedPart names the pods refused by each budget, a budget at a time.
func refusedPart(blockers []Blocker) string {
	type group struct {
		why  string
		pods []string
	}
	var groups []*group
	byWhy := map[string]*group{}
	for _, b := range blockers {
		if b.Kind != KindPDB {
			continue
		}
		why := refusalText(b)
		g := byWhy[why]
		if g == nil {
			g = &group{why: why}
			byWhy[why] = g
			groups = append(groups, g)
		}
		g.pods = append(g.pods, b.Pod)
	}
	if len(groups) == 0 {
		return ""
	}
	texts := make([]string, 0, min(len(groups), maxGroups))
	for _, g := range groups[:min(len(groups), maxGroups)] {
		texts = append(texts, list(g.pods, shortName)+g.why)
	}
	s := strings.Join(texts, ", ")
	if n := len(groups) - maxGroups; n > 0 {
		s += fmt.Sprintf(" (+%d more budgets)", n)
	}
	return s
}

// refusalText is what follows the refused pods' names: the budget and
// what it allows.
func refusalText(b Blocker) string {
	switch {
	case b.PDB == "":
		return ": " + truncate(b.Message, maxDetail)
	case b.Counted:
		return fmt.Sprintf(" by PodDisruptionBudget %s (disruptionsAllowed %d: needs %d healthy, has %d)",
			shortName(b.PDB), b.DisruptionsAllowed, b.DesiredHealthy, b.CurrentHealthy)
	}
	return fmt.Sprintf(" by PodDisruptionBudget %s (disruptionsAllowed %d: %s)",
		shortName(b.PDB), b.DisruptionsAllowed, truncate(b.Message, maxDetail))
}

// leftText says why the request leaves a pod.
func leftText(b Blocker) string {
	if b.Kind == KindEmptyDir {
		return shortName(b.Pod) + " has emptyDir data (deleteEmptyDirData not set)"
	}
	return shortName(b.Pod) + " has no controller (evictUnreplicated not set)"
}

// list writes the first maxNamed items, comma separated, and counts the
// rest.
func list[T any](items []T, text func(T) string) string {
	n := min(len(items), maxNamed)
	texts := make([]string, n)
	for i, it := range items[:n] {
		texts[i] = text(it)
	}
	s := strings.Join(texts, ", ")
	if more := len(items) - n; more > 0 {
		s += fmt.Sprintf(" (+%d more)", more)
	}
	return s
}

func shortName(s string) string { return truncate(s, maxName) }
