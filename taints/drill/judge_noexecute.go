package drill

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// atOnce is the most of the drill's nodes that were in some state at
// once, from t=0 on: how many, when that was first reached, which.
type atOnce struct {
	most  int
	at    time.Time
	which []string
}

// maxAtOnce counts, at t=0 (each node's latest version before it) and at
// every node version from then on, the nodes whose latest version is in
// the state in says; it returns the most at once.
func (ev *evaluator) maxAtOnce(in func(NodeVersion) bool) atOnce {
	state := map[string]bool{}
	best := atOnce{most: -1}
	check := func(at time.Time) {
		n := 0
		for _, s := range state {
			if s {
				n++
			}
		}
		if n > best.most {
			best.most, best.at = n, at
			best.which = best.which[:0]
			for name, s := range state {
				if s {
					best.which = append(best.which, name)
				}
			}
			slices.Sort(best.which)
		}
	}
	checkedStart := false
	for _, v := range ev.nodes {
		if !v.Time.Before(ev.rec.Start) && !checkedStart {
			check(ev.rec.Start)
			checkedStart = true
		}
		state[v.Name] = in(v)
		if checkedStart {
			check(v.Time)
		}
	}
	if !checkedStart {
		check(ev.rec.Start)
	}
	best.which = slices.Clone(best.which)
	return best
}

// noExecute judges NoExecuteExpect: at every node version from t=0 on
// (and at t=0), the nodes whose latest version has a NoExecute taint (of
// Keys, when given) are at most AtMost.
func (ev *evaluator) noExecute(e *NoExecuteExpect) Result {
	if len(ev.nodes) == 0 {
		return failed("no node of the drill was seen, expected at most %d with NoExecute", e.AtMost)
	}
	best := ev.maxAtOnce(func(v NodeVersion) bool {
		return slices.ContainsFunc(v.NoExecute, func(k string) bool {
			return len(e.Keys) == 0 || slices.Contains(e.Keys, k)
		})
	})
	res := Result{
		Passed: best.most <= e.AtMost,
		Measured: Measured{
			MaxNoExecuteNodes: ptr(best.most), MaxNoExecuteAtSeconds: ptr(ev.at(best.at)),
			NoExecuteNodes: best.which,
		},
	}
	res.Message = fmt.Sprintf("at most %d %s with NoExecute at once%s, expected at most %d",
		best.most, plural(best.most, "node", "nodes"), ev.onAt(best), e.AtMost)
	return res
}

// onAt says " (a, b at 12.0s)" for a count above zero.
func (ev *evaluator) onAt(best atOnce) string {
	if best.most <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%s at %.1fs)", strings.Join(best.which, ", "), ev.at(best.at))
}
