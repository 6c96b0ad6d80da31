package drill

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Result is the verdict on one expectation.
type Result struct {
	Name string `json:"name"`
	// Kind is the expectation's kind: ready, pdb, evicted, notEvicted,
	// noExecute, explain.
	Kind   string `json:"kind"`
	Passed bool   `json:"passed"`
	// Message says in one line what was expected and what was measured.
	Message  string   `json:"message"`
	Measured Measured `json:"measured"`
}

// Measured holds the figures behind a verdict; each kind fills its own
// (the others stay nil and are left out of the JSON). Times are seconds:
// durations, or, for ...AtSeconds, since t=0 (Record.Start).
type Measured struct {
	// ready: seconds from After's start until the workload was back to
	// its desired ready replicas (0 when it never lost one; nil when it
	// was not back by the end), and its last ready/desired replicas.
	ReadyAfterSeconds *float64 `json:"readyAfterSeconds,omitempty"`
	Ready             *int32   `json:"ready,omitempty"`
	Desired           *int32   `json:"desired,omitempty"`
	// ready: Lost pods (ready ones deleted, terminating or made not ready
	// after After, and not ready again in place); Rescheduled of them
	// replaced by a new ready pod (paired first lost, first replaced),
	// each taking RescheduleSeconds; p50 and p99 by nearest rank.
	Lost                 *int      `json:"lost,omitempty"`
	Rescheduled          *int      `json:"rescheduled,omitempty"`
	RescheduleSeconds    []float64 `json:"rescheduleSeconds,omitempty"`
	RescheduleP50Seconds *float64  `json:"rescheduleP50Seconds,omitempty"`
	RescheduleP99Seconds *float64  `json:"rescheduleP99Seconds,omitempty"`

	// pdb: the PDBs judged; seconds they spent below their minimum
	// (summed over the PDBs), how many times one went below, the fewest
	// healthy pods seen, and the first violation.
	PDBs             []string      `json:"pdbs,omitempty"`
	ViolationSeconds *float64      `json:"violationSeconds,omitempty"`
	Violations       *int          `json:"violations,omitempty"`
	MinHealthy       *int32        `json:"minHealthy,omitempty"`
	FirstViolation   *PDBViolation `json:"firstViolation,omitempty"`

	// evicted, notEvicted: the pods the selector matched (not gone before
	// After), how many were evicted, and every one that left: evicted
	// (Reason: its DisruptionTarget reason) or deleted without eviction.
	Matched   *int         `json:"matched,omitempty"`
	Evictions *int         `json:"evictions,omitempty"`
	Pods      []PodRemoval `json:"pods,omitempty"`

	// noExecute: the most nodes with a NoExecute taint at once, when that
	// was first reached and which nodes.
	MaxNoExecuteNodes     *int     `json:"maxNoExecuteNodes,omitempty"`
	MaxNoExecuteAtSeconds *float64 `json:"maxNoExecuteAtSeconds,omitempty"`
	NoExecuteNodes        []string `json:"noExecuteNodes,omitempty"`

	// explain: the predictions judged, how many held, and those that
	// did not.
	Predictions *int       `json:"predictions,omitempty"`
	Held        *int       `json:"held,omitempty"`
	Mismatches  []Mismatch `json:"mismatches,omitempty"`
}

// PDBViolation is the version at which a PDB went below its minimum.
type PDBViolation struct {
	AtSeconds float64 `json:"atSeconds"`
	// PDB is namespace/name.
	PDB string `json:"pdb"`
	// Cause is what changed: "pdb", or "pod namespace/name".
	Cause           string `json:"cause"`
	ResourceVersion string `json:"resourceVersion"`
	Healthy         int32  `json:"healthy"`
	Desired         int32  `json:"desired"`
}

// PodRemoval is one pod that left: evicted, or deleted without eviction.
type PodRemoval struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node,omitempty"`
	// Reason is the DisruptionTarget reason (EvictionByEvictionAPI,
	// DeletionByTaintManager, ...), or "deleted without eviction".
	Reason    string  `json:"reason"`
	AtSeconds float64 `json:"atSeconds"`
}

// ReasonDeleted is PodRemoval.Reason for a pod deleted without a
// DisruptionTarget condition (a plain or forced delete).
const ReasonDeleted = "deleted without eviction"

// Mismatch is an explain prediction that did not hold.
type Mismatch struct {
	// Pod is namespace/name.
	Pod       string `json:"pod"`
	Node      string `json:"node"`
	Predicted string `json:"predicted"`
	Observed  string `json:"observed"`
}

// Evaluate judges each expectation of s on what rec saw, in order: one
// Result each, named (ExpectationName) and with a one-line message giving
// the expected and the measured value.
func Evaluate(s *Scenario, rec *Record) []Result {
	ev := newEvaluator(rec)
	results := make([]Result, 0, len(s.Expect))
	for i := range s.Expect {
		e := &s.Expect[i]
		r := ev.judge(e)
		r.Kind = e.ExpectKind()
		r.Name = ExpectationName(e)
		results = append(results, r)
	}
	return results
}

func (ev *evaluator) judge(e *Expectation) Result {
	switch {
	case e.Ready != nil:
		return ev.ready(e.Ready)
	case e.PDB != nil:
		return ev.pdb(e.PDB)
	case e.Evicted != nil:
		return ev.evicted(e.Evicted)
	case e.NotEvicted != nil:
		return ev.notEvicted(e.NotEvicted)
	case e.NoExecute != nil:
		return ev.noExecute(e.NoExecute)
	case e.Explain != nil:
		return ev.explain(e.Explain)
	}
	return Result{Message: "no expectation set"}
}

// ExpectationName is e's Name, or one made from its kind and target, such
// as "ready Deployment/web within 2m after xid79".
func ExpectationName(e *Expectation) string {
	if e.Name != "" {
		return e.Name
	}
	switch {
	case e.Ready != nil:
		return fmt.Sprintf("ready %s/%s within %s%s", e.Ready.Workload.Kind, e.Ready.Workload.Name,
			shortDuration(e.Ready.Within.Duration), afterName(e.Ready.After))
	case e.PDB != nil && e.PDB.Name != "":
		return fmt.Sprintf("pdb %s never below its minimum", e.PDB.Name)
	case e.PDB != nil:
		return "no pdb below its minimum"
	case e.Evicted != nil:
		n := fmt.Sprintf("evicted %s%s", e.Evicted.Selector, afterName(e.Evicted.After))
		if e.Evicted.Min > 1 {
			n += fmt.Sprintf(" (at least %d)", e.Evicted.Min)
		}
		return n
	case e.NotEvicted != nil:
		return fmt.Sprintf("not evicted %s%s", e.NotEvicted.Selector, afterName(e.NotEvicted.After))
	case e.NoExecute != nil:
		n := fmt.Sprintf("at most %d NoExecute %s", e.NoExecute.AtMost, plural(e.NoExecute.AtMost, "node", "nodes"))
		if len(e.NoExecute.Keys) > 0 {
			n += " (" + strings.Join(e.NoExecute.Keys, ", ") + ")"
		}
		return n
	case e.Explain != nil:
		return "explain holds for " + e.Explain.Step
	}
	return "expectation"
}

func afterName(step string) string {
	if step == "" {
		return ""
	}
	return " after " + step
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// evaluator holds the record's versions sorted by time (stable: versions
// seen at the same time keep the order seen).
type evaluator struct {
	rec   *Record
	pods  []PodVersion
	pdbs  []PDBVersion
	nodes []NodeVersion
	loads []WorkloadVersion
}

func newEvaluator(rec *Record) *evaluator {
	ev := &evaluator{
		rec:   rec,
		pods:  slices.Clone(rec.Pods),
		pdbs:  slices.Clone(rec.PDBs),
		nodes: slices.Clone(rec.Nodes),
		loads: slices.Clone(rec.Workloads),
	}
	slices.SortStableFunc(ev.pods, func(a, b PodVersion) int { return a.Time.Compare(b.Time) })
	slices.SortStableFunc(ev.pdbs, func(a, b PDBVersion) int { return a.Time.Compare(b.Time) })
	slices.SortStableFunc(ev.nodes, func(a, b NodeVersion) int { return a.Time.Compare(b.Time) })
	slices.SortStableFunc(ev.loads, func(a, b WorkloadVersion) int { return a.Time.Compare(b.Time) })
	return ev
}

// stepStart is when step name started (t=0 for ""); false when it never
// ran.
func (ev *evaluator) stepStart(name string) (time.Time, bool) {
	if name == "" {
		return ev.rec.Start, true
	}
	for _, st := range ev.rec.Steps {
		if st.Name == name && !st.Started.IsZero() {
			return st.Started, true
		}
	}
	return time.Time{}, false
}

// namespace is want, or the drill's own namespace when want is empty;
// "" matches every namespace.
func (ev *evaluator) namespace(want string) string {
	return cmp.Or(want, ev.rec.Namespace)
}

func nsMatch(want, got string) bool { return want == "" || want == got }

// at is t as seconds since t=0, to the millisecond.
func (ev *evaluator) at(t time.Time) float64 { return seconds(t.Sub(ev.rec.Start)) }

func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

func ptr[T any](v T) *T { return &v }

func failed(format string, args ...any) Result {
	return Result{Message: fmt.Sprintf(format, args...)}
}

// since says "after STEP" or "after t=0".
func since(step string) string {
	if step == "" {
		return "after t=0"
	}
	return "after " + step
}
