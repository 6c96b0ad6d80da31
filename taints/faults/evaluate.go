package faults

import (
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Verdict is the judgement of one fault annotation value, made once, when
// the value is first seen.
type Verdict struct {
	Value   string
	Fault   Fault  // when Problem is empty
	Problem string // why the annotation is ignored; empty when valid
}

// Judge judges fault annotation values as an agent with this config does.
type Judge struct {
	// Disabled rejects every fault (faults.enabled: false).
	Disabled bool
	// Conditions and ProbeConditions are the fault targets.
	Conditions      map[corev1.NodeConditionType]bool
	ProbeConditions map[string]corev1.NodeConditionType
	// MaxDuration is the longest a fault may last from its start (see
	// Start).
	MaxDuration time.Duration
}

// Judge is the verdict on annotation key's value first seen at now; seen is
// an earlier time the value is known to have been on the Node (when it was
// written, WrittenAt), zero for none.
func (j Judge) Judge(key, value string, seen, now time.Time) Verdict {
	if j.Disabled {
		return Verdict{Value: value, Problem: "fault injection is disabled in this agent's config (faults.enabled: false)"}
	}
	f, err := Parse(key, value, j.Conditions, j.ProbeConditions)
	if err != nil {
		return Verdict{Value: value, Problem: err.Error()}
	}
	if problem, expired := CheckTime(f, seen, now, j.MaxDuration); problem != "" {
		if expired {
			problem += " already when the agent first saw it; left in place for you to remove"
		}
		return Verdict{Value: value, Problem: problem}
	}
	return Verdict{Value: value, Fault: f}
}

// Memory is what an agent remembers of faults between syncs: the verdict on
// each annotation's current value, and the values applied at the last sync.
type Memory struct {
	Seen    map[string]Verdict
	Applied map[string]string
	// Written is when the values on the Node at start-up were written
	// (WrittenAt), for judging those not yet in Seen from then rather than
	// from first sight. Evaluate uses it once: the memory it returns has
	// none.
	Written map[string]Written
}

// WrittenTime is when annotation key's value was written, if m.Written
// says so for that value; zero otherwise.
func (m Memory) WrittenTime(key, value string) time.Time {
	return writtenTime(m.Written, key, value)
}

// Eval is what one sync makes of the fault annotations.
type Eval struct {
	// Apply is the fault in force per condition.
	Apply map[corev1.NodeConditionType]Fault
	// Started began applying at this sync; Ended (keys) stopped.
	Started []Fault
	Ended   []string
	// Rejected are the values rejected at this sync (each value once).
	Rejected []Rejection
	// Expired applied before and have expired: to remove.
	Expired []Fault
	// Next is the earliest expiry of a fault in force.
	Next time.Time
}

// Evaluate judges each fault annotation, reusing the verdict on a value
// already seen: a fault is checked against the maximum duration and for
// being already expired once, when its value is first seen (its duration
// counted from its start, see Start), so a fault rejected stays rejected
// and one seen valid that has since expired is due for removal. It returns
// the evaluation and the memory for the next sync; mem is not changed.
func Evaluate(annotations map[string]string, mem Memory, now time.Time, j Judge) (Eval, Memory) {
	var ev Eval
	next := Memory{Seen: map[string]Verdict{}, Applied: map[string]string{}}
	var live []Fault
	for _, k := range Keys(annotations) {
		v := annotations[k]
		seen, ok := mem.Seen[k]
		if !ok || seen.Value != v {
			seen = j.Judge(k, v, mem.WrittenTime(k, v), now)
			if seen.Problem != "" {
				ev.Rejected = append(ev.Rejected, Rejection{Key: k, Value: v, Target: TargetOf(k), Problem: seen.Problem})
			}
		}
		next.Seen[k] = seen
		switch {
		case seen.Problem != "":
		case !now.Before(seen.Fault.ExpiresAt):
			ev.Expired = append(ev.Expired, seen.Fault)
		default:
			live = append(live, seen.Fault)
			if ev.Next.IsZero() || seen.Fault.ExpiresAt.Before(ev.Next) {
				ev.Next = seen.Fault.ExpiresAt
			}
		}
	}
	ev.Apply = Effective(live)
	for _, f := range ev.Apply {
		next.Applied[f.Key] = f.Value
		if v, ok := mem.Applied[f.Key]; !ok || v != f.Value {
			ev.Started = append(ev.Started, f)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(mem.Applied)) {
		if _, ok := next.Applied[k]; !ok {
			ev.Ended = append(ev.Ended, k)
		}
	}
	slices.SortFunc(ev.Started, func(x, y Fault) int { return strings.Compare(x.Key, y.Key) })
	return ev, next
}
