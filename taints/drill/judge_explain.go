package drill

import (
	"fmt"
	"slices"
	"time"

	"github.com/selftaint/selftaint/taints"
)

// explain judges ExplainExpect: each prediction for Step holds (see
// judgePrediction).
func (ev *evaluator) explain(e *ExplainExpect) Result {
	from, ok := ev.stepStart(e.Step)
	if !ok {
		return failed("step %s never ran: explain's predictions not judged", e.Step)
	}
	var preds []Prediction
	for _, p := range ev.rec.Predictions {
		if p.Step == e.Step {
			preds = append(preds, p)
		}
	}
	if len(preds) == 0 {
		return failed("no prediction was taken for step %s (no pod on its nodes?)", e.Step)
	}
	var mismatches []Mismatch
	for _, p := range preds {
		if mm, held := ev.judgePrediction(p, from, e.Tolerance.Duration); !held {
			mismatches = append(mismatches, mm)
		}
	}
	held := len(preds) - len(mismatches)
	res := Result{
		Passed:   len(mismatches) == 0,
		Measured: Measured{Predictions: ptr(len(preds)), Held: ptr(held), Mismatches: mismatches},
	}
	if res.Passed {
		res.Message = fmt.Sprintf("%d of %d predictions held for step %s (tolerance %s)", held, len(preds), e.Step, shortDuration(e.Tolerance.Duration))
		return res
	}
	m := mismatches[0]
	res.Message = fmt.Sprintf("%d of %d predictions held for step %s, expected all; %s on %s: predicted %s, observed %s",
		held, len(preds), e.Step, m.Pod, m.Node, m.Predicted, m.Observed)
	if len(mismatches) > 1 {
		res.Message += fmt.Sprintf("; %d more", len(mismatches)-1)
	}
	return res
}

// judgePrediction compares a prediction with what happened: Immediately,
// evicted within tol of its node first carrying the deciding NoExecute
// taint after from; After(N), evicted N±tol after that (or not, if the
// taint went before N); Never, not evicted before the end.
func (ev *evaluator) judgePrediction(p Prediction, from time.Time, tol time.Duration) (Mismatch, bool) {
	mm := Mismatch{Pod: p.Namespace + "/" + p.Name, Node: p.Node, Predicted: predicted(p.Eviction)}
	evictedAt, reason := ev.podLeft(p.Namespace, p.Name, from)
	evicted := !evictedAt.IsZero()
	if p.When == taints.EvictNever {
		if evicted {
			mm.Observed = fmt.Sprintf("%s at %.1fs", reason, ev.at(evictedAt))
			return mm, false
		}
		return mm, true
	}
	taintAt, goneAt := ev.taintSpan(p, from)
	due := time.Duration(0)
	if p.When == taints.EvictAfter {
		due = p.After
	}
	switch {
	case taintAt.IsZero() && evicted:
		mm.Observed = fmt.Sprintf("%s at %.1fs, but its node never carried the NoExecute taint", reason, ev.at(evictedAt))
		return mm, false
	case taintAt.IsZero():
		mm.Observed = "its node never carried the NoExecute taint"
		return mm, false
	case evicted:
		d := evictedAt.Sub(taintAt)
		mm.Observed = fmt.Sprintf("%s %.1fs after the taint", reason, seconds(d))
		return mm, d >= due-tol && d <= due+tol
	case !goneAt.IsZero() && goneAt.Before(taintAt.Add(due)):
		return mm, true // the taint went before the eviction was due
	}
	mm.Observed = fmt.Sprintf("not evicted (tainted %.1fs before the end)", seconds(ev.rec.End.Sub(taintAt)))
	return mm, false
}

func predicted(e taints.Eviction) string {
	switch e.When {
	case taints.EvictImmediately:
		return "evicted at once"
	case taints.EvictAfter:
		return "evicted after " + shortDuration(e.After)
	}
	return "never evicted"
}

// podLeft is when the pod ns/name was first evicted (a DisruptionTarget
// reason), terminating or deleted at or after from, and how ("evicted
// (reason)" or "deleted without eviction"); zero when it was not.
func (ev *evaluator) podLeft(ns, name string, from time.Time) (time.Time, string) {
	for _, v := range ev.pods {
		if v.Namespace != ns || v.Name != name || v.Time.Before(from) {
			continue
		}
		switch {
		case v.Disruption != "":
			return v.Time, "evicted (" + v.Disruption + ")"
		case v.Terminating || v.Deleted:
			return v.Time, ReasonDeleted
		}
	}
	return time.Time{}, ""
}

// taintSpan is when p's node first carried the prediction's deciding
// NoExecute taint (any NoExecute taint when it names none) at or after
// from (from itself when it already did), and when it next carried none
// of them (zero when it still did at the end).
func (ev *evaluator) taintSpan(p Prediction, from time.Time) (on, gone time.Time) {
	var keys []string
	for _, t := range p.Because {
		keys = append(keys, t.Key)
	}
	has := func(v NodeVersion) bool {
		return slices.ContainsFunc(v.NoExecute, func(k string) bool { return len(keys) == 0 || slices.Contains(keys, k) })
	}
	before := false
	for _, v := range ev.nodes {
		if v.Name != p.Node {
			continue
		}
		if v.Time.Before(from) {
			before = has(v)
			continue
		}
		switch {
		case on.IsZero() && before:
			on = from
			fallthrough
		case !on.IsZero():
			if !has(v) {
				return on, v.Time
			}
		case has(v):
			on = v.Time
		}
	}
	if on.IsZero() && before {
		on = from
	}
	return on, time.Time{}
}
