package agent

// Observability of the agent: the Metrics sink the agent reports its
// decisions to, the reconcile loop's health and readiness, and the
// detect-to-taint measurement. The decisions (CheckLive, CheckReady) are pure
// functions of a LoopState snapshot; the HTTP side lives in agent/metrics.

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

// Where a bad verdict came from, for Metrics.DetectedToTainted.
const (
	// SourceProbe: the first Problem result of a probe's bad run.
	SourceProbe = "probe"
	// SourceFault: an injected fault, from the sync that first applied it.
	SourceFault = "fault"
)

// Metrics receives what the agent sees and decides, for monitoring.
// Options.Metrics nil means none. Implementations must be safe for
// concurrent use: probe runs are reported from the probes' goroutines.
type Metrics interface {
	// ProbeRan is called after every probe run.
	probes.Observer
	// SetConditions gives the current status of every condition the agent
	// publishes, after each successful sync.
	SetConditions(map[corev1.NodeConditionType]corev1.ConditionStatus)
	// SetTaints gives the taints the agent owns that are on its Node, after
	// each successful sync.
	SetTaints([]taints.TaintID)
	// TaintChanged is called once per taint the agent added (added true,
	// restored ones included) or removed, after the API server took it.
	TaintChanged(id taints.TaintID, added bool)
	// DetectedToTainted reports the time from a bad verdict (source is
	// SourceProbe or SourceFault) to its taints being confirmed in the API.
	DetectedToTainted(source string, d time.Duration)
	// FaultApplied is called when a fault starts applying; FaultRejected
	// when a fault annotation's value is rejected (once per value).
	FaultApplied()
	FaultRejected()
	// SetAdvertised gives the extended resources the agent advertises and
	// their counts, after each successful sync.
	SetAdvertised(map[corev1.ResourceName]int64)
	// SetFlapping gives, for every condition the agent publishes, whether
	// its change limiter holds it (taints.NodePlan.Flapping), after each
	// successful sync.
	SetFlapping(map[corev1.NodeConditionType]bool)
	// SetNoExecute gives, for every condition whose NoExecute rule applies,
	// whether its NoExecute taint may be on (false: the rule is at its
	// fallback effect), after each successful sync.
	SetNoExecute(map[corev1.NodeConditionType]bool)
	// NoExecuteSuspended is called when a condition's NoExecute rule goes to
	// its fallback effect for reason (taints.ReasonNoExecuteSuspended or
	// taints.ReasonNoExecuteWaiting): once when it gets there, and again
	// each time the reason changes while it stays there.
	NoExecuteSuspended(c corev1.NodeConditionType, reason string)
	// EventsHeldBack counts n Events the agent's pacing holds back (not
	// recorded), by their reason (events.go).
	EventsHeldBack(reason string, n int)
}

// nopMetrics is the Metrics of an agent built without any.
type nopMetrics struct{}

func (nopMetrics) ProbeRan(string, time.Duration, probes.FailureKind)                {}
func (nopMetrics) SetConditions(map[corev1.NodeConditionType]corev1.ConditionStatus) {}
func (nopMetrics) SetTaints([]taints.TaintID)                                        {}
func (nopMetrics) TaintChanged(taints.TaintID, bool)                                 {}
func (nopMetrics) DetectedToTainted(string, time.Duration)                           {}
func (nopMetrics) FaultApplied()                                                     {}
func (nopMetrics) FaultRejected()                                                    {}
func (nopMetrics) SetAdvertised(map[corev1.ResourceName]int64)                       {}
func (nopMetrics) SetFlapping(map[corev1.NodeConditionType]bool)                     {}
func (nopMetrics) SetNoExecute(map[corev1.NodeConditionType]bool)                    {}
func (nopMetrics) NoExecuteSuspended(corev1.NodeConditionType, string)               {}
func (nopMetrics) EventsHeldBack(string, int)                                        {}

// LoopState is a snapshot of the reconcile loop, for health checks.
type LoopState struct {
	// CacheSynced: the Node informer has synced.
	CacheSynced bool
	// FirstSync: a sync has found the Node and written all it had to.
	FirstSync bool
	// SyncStarted is when the running sync started; zero when none runs.
	SyncStarted time.Time
	// QueuedSince is when a reconcile was queued that the loop has not
	// taken yet; zero when none waits. Delayed retries and scheduled
	// re-syncs count once they are due and queued by the agent itself.
	QueuedSince time.Time
}

// CheckLive decides whether the reconcile loop is alive: nil, or why not.
// A sync running, or a queued reconcile waiting, for longer than stallAfter
// means the loop is wedged. A loop still waiting for its first informer
// sync is alive: a restart would not bring the API server back.
func CheckLive(s LoopState, now time.Time, stallAfter time.Duration) error {
	if !s.SyncStarted.IsZero() {
		if d := now.Sub(s.SyncStarted); d > stallAfter {
			return fmt.Errorf("a sync has been running for %s, more than %s", d.Round(time.Millisecond), stallAfter)
		}
	}
	if !s.QueuedSince.IsZero() {
		if d := now.Sub(s.QueuedSince); d > stallAfter {
			return fmt.Errorf("a queued reconcile has not been picked up for %s, more than %s", d.Round(time.Millisecond), stallAfter)
		}
	}
	return nil
}

// CheckReady decides whether the agent is ready: its Node informer has
// synced and its first sync has been written. nil, or why not.
func CheckReady(s LoopState) error {
	switch {
	case !s.CacheSynced:
		return fmt.Errorf("the Node informer has not synced yet")
	case !s.FirstSync:
		return fmt.Errorf("the first sync has not been written yet (is the Node registered?)")
	}
	return nil
}

// observations is the agent's monitoring state.
type observations struct {
	mu   sync.Mutex // guards the fields below
	loop LoopState
	// detect is the pending bad verdict per condition: when it was seen,
	// from where, and whether its taints have been confirmed.
	detect map[corev1.NodeConditionType]detection
	// fallback is why each condition's NoExecute rule was at its fallback
	// effect after the last sync (absent: it was not).
	fallback map[corev1.NodeConditionType]string
}

type detection struct {
	at     time.Time
	source string
	done   bool
}

// LoopState returns a snapshot of the reconcile loop's state.
func (a *Agent) LoopState() LoopState {
	a.obs.mu.Lock()
	defer a.obs.mu.Unlock()
	return a.obs.loop
}

// Live reports whether the reconcile loop is alive (see CheckLive).
func (a *Agent) Live(stallAfter time.Duration) error {
	return CheckLive(a.LoopState(), a.clock.Now(), stallAfter)
}

// Ready reports whether the agent is ready (see CheckReady).
func (a *Agent) Ready() error { return CheckReady(a.LoopState()) }

func (a *Agent) updateLoop(f func(*LoopState)) {
	a.obs.mu.Lock()
	defer a.obs.mu.Unlock()
	f(&a.obs.loop)
}

// trackedQueue is the agent's workqueue, recording when a reconcile is
// queued and when the loop takes and finishes it, for CheckLive.
type trackedQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	a     *Agent
	clock clock.PassiveClock
}

func (q trackedQueue) Add(key string) {
	now := q.clock.Now()
	q.a.updateLoop(func(s *LoopState) {
		if s.QueuedSince.IsZero() {
			s.QueuedSince = now
		}
	})
	q.TypedRateLimitingInterface.Add(key)
}

func (q trackedQueue) Get() (string, bool) {
	key, quit := q.TypedRateLimitingInterface.Get()
	now := q.clock.Now()
	q.a.updateLoop(func(s *LoopState) {
		s.QueuedSince = time.Time{}
		if !quit {
			s.SyncStarted = now
		}
	})
	return key, quit
}

func (q trackedQueue) Done(key string) {
	q.a.updateLoop(func(s *LoopState) { s.SyncStarted = time.Time{} })
	q.TypedRateLimitingInterface.Done(key)
}

// noteVerdict starts the detect-to-taint clock at the first Problem result
// of a bad run, before damping, and stops it when the probe is OK again.
func (a *Agent) noteVerdict(c corev1.NodeConditionType, r probes.Result) {
	a.obs.mu.Lock()
	defer a.obs.mu.Unlock()
	d, pending := a.obs.detect[c]
	switch {
	case r.Status == probes.StatusProblem && !pending:
		at := r.Time
		if at.IsZero() {
			at = a.clock.Now()
		}
		if a.obs.detect == nil {
			a.obs.detect = map[corev1.NodeConditionType]detection{}
		}
		a.obs.detect[c] = detection{at: at, source: SourceProbe}
	case r.Status == probes.StatusOK && pending && d.source == SourceProbe:
		delete(a.obs.detect, c)
	}
}

// syncOutcome is what one successful sync leaves, for observeSync.
type syncOutcome struct {
	node      *corev1.Node // the newest Node we read or wrote
	states    map[corev1.NodeConditionType]taints.State
	fromFault map[corev1.NodeConditionType]bool
	faults    faultEval
	resources map[corev1.ResourceName]int64
	// flapping are the conditions the change limiter holds; noExecute the
	// verdicts of the conditions whose NoExecute rule applies.
	flapping  map[corev1.NodeConditionType]bool
	noExecute []taints.NoExecuteVerdict
}

// observeSync reports a successful sync to Metrics, marks the agent ready,
// and confirms pending bad verdicts whose taints the Node now shows.
func (a *Agent) observeSync(o syncOutcome) {
	m := a.opts.Metrics
	reportSync(m, o)
	now := a.clock.Now()

	a.obs.mu.Lock()
	defer a.obs.mu.Unlock()
	a.obs.loop.FirstSync = true
	var fell []taints.NoExecuteVerdict
	fell, a.obs.fallback = fallbacks(a.obs.fallback, o.noExecute)
	for _, v := range fell {
		m.NoExecuteSuspended(v.Condition, v.Reason)
	}
	if a.obs.detect == nil {
		a.obs.detect = map[corev1.NodeConditionType]detection{}
	}
	for _, f := range o.faults.Started {
		if d, ok := a.obs.detect[f.Condition]; !ok || d.done {
			a.obs.detect[f.Condition] = detection{at: now, source: SourceFault}
		}
	}
	for c, d := range a.obs.detect {
		if d.source == SourceFault && !o.fromFault[c] {
			delete(a.obs.detect, c)
			continue
		}
		s, ok := o.states[c]
		if d.done || !ok {
			continue
		}
		if want := a.ruleTaintsFor(c, s.Status); len(want) > 0 && allOnNode(o.node, want) {
			m.DetectedToTainted(d.source, now.Sub(d.at))
			d.done = true
			a.obs.detect[c] = d
		}
	}
}

// reportSync gives Metrics the state a sync leaves: conditions, flapping,
// NoExecute, taints and extended resources, and the faults it started and
// rejected.
func reportSync(m Metrics, o syncOutcome) {
	statuses := make(map[corev1.NodeConditionType]corev1.ConditionStatus, len(o.states))
	flapping := make(map[corev1.NodeConditionType]bool, len(o.states))
	for t, s := range o.states {
		statuses[t] = s.Status
		flapping[t] = o.flapping[t]
	}
	allowed := make(map[corev1.NodeConditionType]bool, len(o.noExecute))
	for _, v := range o.noExecute {
		allowed[v.Condition] = v.NoExecute
	}
	m.SetConditions(statuses)
	m.SetFlapping(flapping)
	m.SetNoExecute(allowed)
	m.SetTaints(ownedOnNode(o.node))
	m.SetAdvertised(o.resources)
	for range o.faults.Started {
		m.FaultApplied()
	}
	for range o.faults.Rejected {
		m.FaultRejected()
	}
}

// fallbacks compares a sync's NoExecute verdicts with why their conditions'
// NoExecute rules were at their fallback effect after the last sync
// (prev): it returns the verdicts whose rule went to its fallback now, or
// stays there for another reason, and why each is at its fallback now, for
// the next sync.
func fallbacks(prev map[corev1.NodeConditionType]string, verdicts []taints.NoExecuteVerdict) ([]taints.NoExecuteVerdict, map[corev1.NodeConditionType]string) {
	var fell []taints.NoExecuteVerdict
	now := map[corev1.NodeConditionType]string{}
	for _, v := range verdicts {
		if v.NoExecute || v.Reason == "" {
			continue
		}
		now[v.Condition] = v.Reason
		if prev[v.Condition] != v.Reason {
			fell = append(fell, v)
		}
	}
	return fell, now
}

// ruleTaintsFor is the taints the rules put on the Node while condition c
// has status s.
func (a *Agent) ruleTaintsFor(c corev1.NodeConditionType, s corev1.ConditionStatus) []taints.TaintID {
	var out []taints.TaintID
	for _, r := range a.opts.Rules {
		if r.Condition == c && r.Applies(s) {
			out = append(out, taints.IDOf(r.Taint))
		}
	}
	return out
}

func allOnNode(n *corev1.Node, ids []taints.TaintID) bool {
	for _, id := range ids {
		found := false
		for _, t := range n.Spec.Taints {
			if taints.IDOf(t) == id {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// ownedOnNode is the taints our ownership record names that are on n.
func ownedOnNode(n *corev1.Node) []taints.TaintID {
	owned, err := taints.ParseOwned(n.Annotations[taints.OwnedTaintsAnnotation])
	if err != nil {
		return nil
	}
	var out []taints.TaintID
	for _, id := range owned {
		if allOnNode(n, []taints.TaintID{id}) {
			out = append(out, id)
		}
	}
	return out
}

// cause is the condition or rule behind a taint decision, for log lines.
type cause struct {
	condition corev1.NodeConditionType
	status    corev1.ConditionStatus
	reason    string
	rule      string
	why       string
}

// attrs are the log attributes of a taint decision.
func (c cause) attrs(t corev1.Taint) []any {
	out := []any{"taint", taints.Format(t), "key", t.Key, "effect", t.Effect, "rule", c.rule}
	if c.condition != "" {
		out = append(out, "condition", c.condition, "status", c.status, "reason", c.reason)
	}
	return append(out, "why", c.why)
}

// causeOf names what is behind taint t, given the conditions and hardware of
// this sync: for a taint we hold, what asks for it; for one we removed, the
// rule that no longer applies.
func (a *Agent) causeOf(t corev1.Taint, states map[corev1.NodeConditionType]taints.State, hw hardwareState) cause {
	id := taints.IDOf(t)
	if why, ok := hardwareWhy(t, hw.resources); ok {
		return cause{rule: "hardware", why: why}
	}
	if a.opts.Init != nil && id == a.initTaintID() {
		c := a.opts.Init.Condition
		s := states[c]
		return cause{condition: c, status: s.Status, reason: s.Reason, rule: "initialization", why: a.why(t, states, hw)}
	}
	var first *cause
	for _, r := range a.ruleFor[id] {
		s, ok := states[r.Condition]
		if !ok {
			continue
		}
		c := cause{condition: r.Condition, status: s.Status, reason: s.Reason, rule: ruleName(r)}
		if r.Applies(s.Status) {
			c.why = fmt.Sprintf("%s is %s (%s)", r.Condition, s.Status, s.Reason)
			return c
		}
		if first == nil {
			c.why = fmt.Sprintf("%s is %s (%s): the rule no longer applies", r.Condition, s.Status, s.Reason)
			first = &c
		}
	}
	if first != nil {
		return *first
	}
	if a.ruleTaint(id) {
		return cause{rule: ruleName(a.ruleFor[id][0]), why: "its condition has not been decided since start-up"}
	}
	return cause{rule: "none", why: "no rule or hardware asks for it any more"}
}

// ruleName is how a rule is named in log lines: the condition status it
// fires on.
func ruleName(r taints.Rule) string {
	s := fmt.Sprintf("%s=%s", r.Condition, r.Status)
	if r.TaintOnUnknown {
		s += "|Unknown"
	}
	return s
}
