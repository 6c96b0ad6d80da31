package drill

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// ready judges a ReadyExpect: back to Ready == Desired within Within of
// After's start, after having lost a ready replica (never lost: 0s).
func (ev *evaluator) ready(r *ReadyExpect) Result {
	from, ok := ev.stepStart(r.After)
	if !ok {
		return failed("step %s never ran: %s/%s not judged", r.After, r.Workload.Kind, r.Workload.Name)
	}
	ns := ev.namespace(r.Workload.Namespace)
	ref := r.Workload.Kind + "/" + r.Workload.Name
	var vs []WorkloadVersion
	for _, v := range ev.loads {
		if v.Ref.Kind == r.Workload.Kind && v.Ref.Name == r.Workload.Name && nsMatch(ns, v.Ref.Namespace) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return failed("%s was never seen", ref)
	}
	back, dropped, last := backAt(vs, from)
	m := Measured{Ready: ptr(last.Ready), Desired: ptr(last.Desired)}
	res := Result{Measured: m}
	resched := ev.reschedules(r.Workload, ns, from)
	switch {
	case !dropped:
		res.Measured.ReadyAfterSeconds = ptr(0.0)
		res.Passed = true
		res.Message = fmt.Sprintf("%s never lost a ready replica %s (%d/%d ready), expected back within %s",
			ref, since(r.After), last.Ready, last.Desired, shortDuration(r.Within.Duration))
	case back.IsZero():
		res.Message = fmt.Sprintf("%s not ready after %.1fs (ready %d/%d), expected back within %s %s",
			ref, seconds(ev.rec.End.Sub(from)), last.Ready, last.Desired, shortDuration(r.Within.Duration), since(r.After))
	default:
		took := back.Sub(from)
		res.Measured.ReadyAfterSeconds = ptr(seconds(took))
		res.Passed = took <= r.Within.Duration
		res.Message = fmt.Sprintf("%s back to %d/%d ready %.1fs %s, expected within %s",
			ref, last.Ready, last.Desired, seconds(took), since(r.After), shortDuration(r.Within.Duration))
		// Back once is not back: a workload down again at the end of the
		// drill did not come back.
		if end := vs[len(vs)-1]; end.Ready < end.Desired {
			res.Passed = false
			res.Measured.Ready, res.Measured.Desired = ptr(end.Ready), ptr(end.Desired)
			res.Message += fmt.Sprintf(", but down again from %.1fs to the end (ready %d/%d)", seconds(downAgain(vs, back).Sub(ev.rec.Start)), end.Ready, end.Desired)
		}
	}
	resched.fill(&res.Measured)
	res.Message += resched.summary()
	return res
}

// backAt finds when the workload was back to its desired ready replicas
// after having lost one, from from on (zero when never), whether it lost
// one at all, and its last version up to then (or the end).
func backAt(vs []WorkloadVersion, from time.Time) (back time.Time, dropped bool, last WorkloadVersion) {
	started := false
	for _, v := range vs {
		if v.Time.Before(from) {
			last = v
			continue
		}
		if !started && last.Ready < last.Desired {
			dropped = true // already down at from
		}
		started = true
		last = v
		if v.Ready < v.Desired {
			dropped = true
			continue
		}
		if dropped {
			return v.Time, true, v
		}
	}
	if !started && last.Ready < last.Desired {
		dropped = true
	}
	return time.Time{}, dropped, last
}

// downAgain is when the workload last went below its desired ready
// replicas after back (its versions in order).
func downAgain(vs []WorkloadVersion, back time.Time) time.Time {
	var at time.Time
	wasUp := true
	for _, v := range vs {
		if v.Time.Before(back) {
			continue
		}
		up := v.Ready >= v.Desired
		if wasUp && !up {
			at = v.Time
		}
		wasUp = up
	}
	return at
}

type rescheduled struct {
	lost int
	durs []time.Duration
}

// reschedules pairs, first in first out, each pod of the workload lost
// after from (ready, then deleted, terminating or not ready) with the next
// new pod of it that becomes ready. A lost pod ready again in place is not
// lost.
func (ev *evaluator) reschedules(w WorkloadRef, ns string, from time.Time) rescheduled {
	type podState struct{ up, everUp, lost bool }
	state := map[string]*podState{}
	var queue []string // UIDs lost, not yet replaced
	lossAt := map[string]time.Time{}
	var r rescheduled
	for _, p := range ev.pods {
		if p.Owner.Kind != w.Kind || p.Owner.Name != w.Name || !nsMatch(ns, p.Namespace) {
			continue
		}
		s := state[p.UID]
		if s == nil {
			s = &podState{}
			state[p.UID] = s
		}
		up := p.Ready && !p.Terminating && !p.Deleted
		wasUp, everUp := s.up, s.everUp
		s.up, s.everUp = up, everUp || up
		if p.Time.Before(from) {
			continue
		}
		switch {
		case wasUp && !up:
			r.lost++
			s.lost = true
			queue = append(queue, p.UID)
			lossAt[p.UID] = p.Time
		case up && s.lost: // ready again in place
			s.lost = false
			if i := slices.Index(queue, p.UID); i >= 0 {
				queue = slices.Delete(queue, i, i+1)
				r.lost--
			}
		case up && !everUp && len(queue) > 0:
			r.durs = append(r.durs, p.Time.Sub(lossAt[queue[0]]))
			queue = queue[1:]
		}
	}
	return r
}

func (r rescheduled) fill(m *Measured) {
	m.Lost = ptr(r.lost)
	m.Rescheduled = ptr(len(r.durs))
	if len(r.durs) == 0 {
		return
	}
	sorted := slices.Clone(r.durs)
	slices.Sort(sorted)
	for _, d := range r.durs {
		m.RescheduleSeconds = append(m.RescheduleSeconds, seconds(d))
	}
	m.RescheduleP50Seconds = ptr(seconds(nearestRank(sorted, 50)))
	m.RescheduleP99Seconds = ptr(seconds(nearestRank(sorted, 99)))
}

func (r rescheduled) summary() string {
	if r.lost == 0 {
		return ""
	}
	if len(r.durs) == 0 {
		return fmt.Sprintf("; %d %s lost, none replaced", r.lost, plural(r.lost, "pod", "pods"))
	}
	sorted := slices.Clone(r.durs)
	slices.Sort(sorted)
	return fmt.Sprintf("; %d of %d lost %s rescheduled, p50 %.1fs p99 %.1fs", len(r.durs), r.lost,
		plural(r.lost, "pod", "pods"), seconds(nearestRank(sorted, 50)), seconds(nearestRank(sorted, 99)))
}

// nearestRank is the p-th percentile of sorted (not empty) by nearest
// rank: the value at rank ceil(p/100 * n).
func nearestRank(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}
