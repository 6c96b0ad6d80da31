package drill

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// noExecute judges NoExecuteExpect: at every node version from t=0 on
// (and at t=0), the nodes whose latest version has a NoExecute taint (of
// Keys, when given) are at most AtMost.
func (ev *evaluator) noExecute(e *NoExecuteExpect) Result {
	if len(ev.nodes) == 0 {
		return failed("no node of the drill was seen, expected at most %d with NoExecute", e.AtMost)
	}
	tainted := map[string]bool{}
	best, bestAt := -1, time.Time{}
	var which []string
	check := func(at time.Time) {
		n := 0
		for _, t := range tainted {
			if t {
				n++
			}
		}
		if n > best {
			best, bestAt = n, at
			which = which[:0]
			for name, t := range tainted {
				if t {
					which = append(which, name)
				}
			}
			slices.Sort(which)
		}
	}
	checkedStart := false
	for _, v := range ev.nodes {
		if !v.Time.Before(ev.rec.Start) && !checkedStart {
			check(ev.rec.Start)
			checkedStart = true
		}
		tainted[v.Name] = slices.ContainsFunc(v.NoExecute, func(k string) bool {
			return len(e.Keys) == 0 || slices.Contains(e.Keys, k)
		})
		if checkedStart {
			check(v.Time)
		}
	}
	if !checkedStart {
		check(ev.rec.Start)
	}
	res := Result{
		Passed: best <= e.AtMost,
		Measured: Measured{
			MaxNoExecuteNodes: ptr(best), MaxNoExecuteAtSeconds: ptr(ev.at(bestAt)),
			NoExecuteNodes: slices.Clone(which),
		},
	}
	on := ""
	if best > 0 {
		on = fmt.Sprintf(" (%s at %.1fs)", strings.Join(which, ", "), ev.at(bestAt))
	}
	res.Message = fmt.Sprintf("at most %d %s with NoExecute at once%s, expected at most %d",
		best, plural(best, "node", "nodes"), on, e.AtMost)
	return res
}
