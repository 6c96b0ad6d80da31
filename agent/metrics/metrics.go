// Package metrics exports what the selftaint agent sees and decides as
// Prometheus metrics, and serves them beside the agent's health and
// readiness, so a fleet watches selftaint the way it watches node_exporter
// or node-problem-detector: one scrape per node, no per-pod labels.
//
// Everything is registered on a registry the caller makes and passes in;
// nothing here touches the Prometheus default registry or client-go's
// process-global metric hooks. Metrics implements agent.Metrics (and through
// it probes.Observer), so the agent and the probes stay free of Prometheus;
// Coordinator does the same for `selftaint coordinator` (coordinator.Metrics),
// served by the same Handler.
package metrics

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

// Namespace prefixes every metric of selftaint's own.
const Namespace = "selftaint"

// BuildInfo is what selftaint_build_info reports.
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// failureKinds are the values of selftaint_probe_errors_total's kind label;
// each probe's series start at zero for all of them.
var failureKinds = []probes.FailureKind{
	probes.FailureTimeout, probes.FailurePanic, probes.FailureInvalid, probes.FailureRead, probes.FailureOther,
}

var conditionStatuses = []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}

// fallbackReasons are the values of selftaint_noexecute_suspended_total's
// reason label (the Events' reasons); each condition's series start at
// zero for both once its NoExecute rule applies.
var fallbackReasons = []string{taints.ReasonNoExecuteSuspended, taints.ReasonNoExecuteWaiting}

// Metrics holds the agent's collectors. Its methods are safe for concurrent
// use.
type Metrics struct {
	probeDuration  *prometheus.HistogramVec
	probeRuns      *prometheus.CounterVec
	probeErrors    *prometheus.CounterVec
	condition      *prometheus.GaugeVec
	taint          *prometheus.GaugeVec
	taintChanges   *prometheus.CounterVec
	detectToTaint  *prometheus.HistogramVec
	api            apiMetrics
	faultsApplied  prometheus.Counter
	faultsRejected prometheus.Counter
	extended       *prometheus.GaugeVec
	flapping       *prometheus.GaugeVec
	allowed        *prometheus.GaugeVec
	suspended      *prometheus.CounterVec
	heldBack       *prometheus.CounterVec

	seriesMu sync.Mutex              // guards series
	series   map[string]*probeSeries // each probe's series, made at its first run

	mu         sync.Mutex // guards the label sets last set, so the ones gone are deleted
	conditions map[corev1.NodeConditionType]bool
	taints     map[taints.TaintID]bool
	resources  map[corev1.ResourceName]bool
	flaps      map[corev1.NodeConditionType]bool
	noExecute  map[corev1.NodeConditionType]bool
}

var _ agent.Metrics = (*Metrics)(nil)

// New creates the agent's metrics and registers them on reg, with the build
// info and the Go runtime and process collectors.
func New(reg prometheus.Registerer, build BuildInfo) (*Metrics, error) {
	m := &Metrics{
		probeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "probe_duration_seconds",
			Help:    "How long each probe run took, failed runs included.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"probe"}),
		probeRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "probe_runs_total",
			Help: "Probe runs, with or without a verdict.",
		}, []string{"probe"}),
		probeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "probe_errors_total",
			Help: "Probe runs that gave no verdict, by kind: timeout, panic, invalid_result, read_error, unknown.",
		}, []string{"probe", "kind"}),
		condition: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "condition",
			Help: "The status of each NodeCondition the agent publishes: 1 for the current status, 0 for the other two.",
		}, []string{"condition", "status"}),
		taint: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "taint",
			Help: "1 for each taint selftaint owns that is on its Node.",
		}, []string{"key", "effect"}),
		taintChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "taint_changes_total",
			Help: "Taints the agent added (restored ones included) or removed, by direction added/removed.",
		}, []string{"key", "effect", "direction"}),
		detectToTaint: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "detect_to_taint_seconds",
			Help: "Time from a bad verdict (source probe: its first Problem result, before damping; source fault: " +
				"the sync that first applied it) to its taints being confirmed by the API server.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"source"}),
		api: newAPIMetrics(),
		faultsApplied: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "faults_applied_total",
			Help: "Injected faults that started applying.",
		}),
		faultsRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "faults_rejected_total",
			Help: "Fault annotation values the agent rejected (each value once).",
		}),
		extended: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "extended_resource_advertised",
			Help: "The count of each extended resource the agent advertises in the Node's capacity.",
		}, []string{"resource"}),
		flapping: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "condition_flapping",
			Help: "1 while the change limiter holds a condition (it flaps: its taints stay on, a NoExecute rule at its fallback), else 0.",
		}, []string{"condition"}),
		allowed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "noexecute_allowed",
			Help: "For each condition whose NoExecute rule applies: 1 while its NoExecute taint may be on, 0 while the rule is at its fallback effect.",
		}, []string{"condition"}),
		suspended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "noexecute_suspended_total",
			Help: "Times a condition's NoExecute rule went to its fallback effect, or stayed there for another reason, " +
				"by the Event's reason: NoExecuteSuspended (flapping, guard tripped or stale), NoExecuteWaiting (no grant yet).",
		}, []string{"condition", "reason"}),
		heldBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "events_held_back_total",
			Help: "Events the agent's pacing held back (did not record), by reason: a burst of 5 of each probe reason, " +
				"then one per 5 minutes; 25 of all the probes' Events, and of all the agent's own, then one per 5 minutes.",
		}, []string{"reason"}),
		series:     map[string]*probeSeries{},
		conditions: map[corev1.NodeConditionType]bool{},
		taints:     map[taints.TaintID]bool{},
		resources:  map[corev1.ResourceName]bool{},
		flaps:      map[corev1.NodeConditionType]bool{},
		noExecute:  map[corev1.NodeConditionType]bool{},
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels say which selftaint this is.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision, "goversion": build.GoVersion},
	})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{
		buildInfo, m.probeDuration, m.probeRuns, m.probeErrors, m.condition, m.taint, m.taintChanges,
		m.detectToTaint, m.api.requests, m.api.duration, m.api.conflicts, m.faultsApplied, m.faultsRejected, m.extended,
		m.flapping, m.allowed, m.suspended, m.heldBack,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return m, nil
}

// RegisterReady adds selftaint_ready, 1 while ready() returns nil.
func RegisterReady(reg prometheus.Registerer, ready func() error) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "ready",
		Help: "1 when the agent is ready (its Node informer synced and its first sync written), else 0.",
	}, func() float64 {
		if ready() == nil {
			return 1
		}
		return 0
	})
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("registering selftaint_ready: %w", err)
	}
	return nil
}

// ProbeRan counts one probe run.
func (m *Metrics) ProbeRan(probe string, d time.Duration, failure probes.FailureKind) {
	s := m.probeSeries(probe)
	s.runs.Inc()
	s.duration.Observe(d.Seconds())
	if c, ok := s.errors[failure]; ok {
		c.Inc()
	}
}

// probeSeries is one probe's series of the probe metrics.
type probeSeries struct {
	runs     prometheus.Counter
	duration prometheus.Observer
	errors   map[probes.FailureKind]prometheus.Counter // every kind, from zero
}

// probeSeries returns probe's series, made (its error series at zero for
// every kind) at its first run: a run then costs a map lookup, not seven
// label-hashing lookups.
func (m *Metrics) probeSeries(probe string) *probeSeries {
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	if s, ok := m.series[probe]; ok {
		return s
	}
	s := &probeSeries{
		runs:     m.probeRuns.WithLabelValues(probe),
		duration: m.probeDuration.WithLabelValues(probe),
		errors:   make(map[probes.FailureKind]prometheus.Counter, len(failureKinds)),
	}
	for _, k := range failureKinds {
		s.errors[k] = m.probeErrors.WithLabelValues(probe, string(k))
	}
	m.series[probe] = s
	return s
}

// SetConditions sets selftaint_condition for every condition given and
// drops the series of conditions no longer published.
func (m *Metrics) SetConditions(cs map[corev1.NodeConditionType]corev1.ConditionStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c := range m.conditions {
		if _, ok := cs[c]; !ok {
			for _, s := range conditionStatuses {
				m.condition.DeleteLabelValues(string(c), string(s))
			}
			delete(m.conditions, c)
		}
	}
	for c, status := range cs {
		for _, s := range conditionStatuses {
			v := 0.0
			if s == status {
				v = 1
			}
			m.condition.WithLabelValues(string(c), string(s)).Set(v)
		}
		m.conditions[c] = true
	}
}

// SetTaints sets selftaint_taint to exactly ids.
func (m *Metrics) SetTaints(ids []taints.TaintID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := map[taints.TaintID]bool{}
	for _, id := range ids {
		now[id] = true
		m.taint.WithLabelValues(id.Key, string(id.Effect)).Set(1)
	}
	for id := range m.taints {
		if !now[id] {
			m.taint.DeleteLabelValues(id.Key, string(id.Effect))
		}
	}
	m.taints = now
}

// TaintChanged counts a taint added or removed; both directions' series
// start at zero.
func (m *Metrics) TaintChanged(id taints.TaintID, added bool) {
	add := m.taintChanges.WithLabelValues(id.Key, string(id.Effect), "added")
	remove := m.taintChanges.WithLabelValues(id.Key, string(id.Effect), "removed")
	if added {
		add.Inc()
	} else {
		remove.Inc()
	}
}

// DetectedToTainted observes one detect-to-taint time.
func (m *Metrics) DetectedToTainted(source string, d time.Duration) {
	m.detectToTaint.WithLabelValues(source).Observe(d.Seconds())
}

// FaultApplied counts a fault that started applying.
func (m *Metrics) FaultApplied() { m.faultsApplied.Inc() }

// FaultRejected counts a rejected fault annotation value.
func (m *Metrics) FaultRejected() { m.faultsRejected.Inc() }

// SetAdvertised sets selftaint_extended_resource_advertised to exactly rs.
func (m *Metrics) SetAdvertised(rs map[corev1.ResourceName]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for r := range m.resources {
		if _, ok := rs[r]; !ok {
			m.extended.DeleteLabelValues(string(r))
			delete(m.resources, r)
		}
	}
	for r, n := range rs {
		m.extended.WithLabelValues(string(r)).Set(float64(n))
		m.resources[r] = true
	}
}

// SetFlapping sets selftaint_condition_flapping for every condition given
// and drops the series of conditions no longer published.
func (m *Metrics) SetFlapping(cs map[corev1.NodeConditionType]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flaps = setByCondition(m.flapping, m.flaps, cs)
}

// SetNoExecute sets selftaint_noexecute_allowed to exactly the conditions
// given, and starts their selftaint_noexecute_suspended_total series at
// zero.
func (m *Metrics) SetNoExecute(cs map[corev1.NodeConditionType]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.noExecute = setByCondition(m.allowed, m.noExecute, cs)
	for c := range cs {
		for _, r := range fallbackReasons {
			m.suspended.WithLabelValues(string(c), r)
		}
	}
}

// NoExecuteSuspended counts a condition's NoExecute rule going to its
// fallback effect for reason.
func (m *Metrics) NoExecuteSuspended(c corev1.NodeConditionType, reason string) {
	m.suspended.WithLabelValues(string(c), reason).Inc()
}

// EventsHeldBack counts n Events of reason the agent's pacing held back.
func (m *Metrics) EventsHeldBack(reason string, n int) {
	m.heldBack.WithLabelValues(reason).Add(float64(n))
}

// setByCondition sets g{condition} to 1 or 0 for every condition in cs,
// deletes the series of those in had that cs lacks, and returns the
// conditions it now has.
func setByCondition(g *prometheus.GaugeVec, had, cs map[corev1.NodeConditionType]bool) map[corev1.NodeConditionType]bool {
	now := make(map[corev1.NodeConditionType]bool, len(cs))
	for c, on := range cs {
		v := 0.0
		if on {
			v = 1
		}
		g.WithLabelValues(string(c)).Set(v)
		now[c] = true
	}
	for c := range had {
		if !now[c] {
			g.DeleteLabelValues(string(c))
		}
	}
	return now
}
