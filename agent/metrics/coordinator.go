package metrics

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/selftaint/selftaint/agent/coordinator"
	"github.com/selftaint/selftaint/taints/fleet"
)

// releaseReasons are fleet's release reasons; each one's series of
// selftaint_noexecute_grants_released_total starts at zero.
var releaseReasons = []string{
	fleet.ReleaseNodeDeleted, fleet.ReleaseNotReady, fleet.ReleaseNoLongerAsks,
	fleet.ReleaseForeignHolder, fleet.ReleaseExpired, fleet.ReleaseAgentNotAlive,
}

// The label values of the maintenance metrics.
const (
	// MaintenanceWaiting and its siblings are selftaint_maintenance_nodes'
	// states.
	MaintenanceWaiting  = "waiting"
	MaintenanceDraining = "draining"
	MaintenanceDrained  = "drained"
	MaintenanceBlocked  = "blocked"
	// EvictionEvicted and its siblings are
	// selftaint_maintenance_evictions_total's results: the Eviction API
	// took it; refused it (429: a PodDisruptionBudget); failed otherwise;
	// the pod was deleted instead (a forced drain past its deadline).
	EvictionEvicted = "evicted"
	EvictionRefused = "refused"
	EvictionFailed  = "failed"
	EvictionDeleted = "deleted"
)

// drainOutcomes are the ends of a drain (fleet's condition reasons); each
// one's series of selftaint_maintenance_drain_duration_seconds starts at
// zero.
var drainOutcomes = []string{fleet.ReasonDrained, fleet.ReasonDrainBlocked, fleet.ReasonReleased}

// evictionResults are selftaint_maintenance_evictions_total's results.
var evictionResults = []string{EvictionEvicted, EvictionRefused, EvictionFailed, EvictionDeleted}

// Coordinator holds the coordinator's collectors. Its methods are safe for
// concurrent use.
type Coordinator struct {
	leader      prometheus.Gauge
	budget      prometheus.Gauge
	held        prometheus.Gauge
	waiting     prometheus.Gauge
	guard       *prometheus.GaugeVec
	started     *prometheus.CounterVec
	released    *prometheus.CounterVec
	decision    prometheus.Histogram
	maintenance *prometheus.GaugeVec
	evictions   *prometheus.CounterVec
	drains      *prometheus.HistogramVec
	api         apiMetrics

	mu     sync.Mutex // guards scopes
	scopes map[[2]string]bool
}

var _ coordinator.Metrics = (*Coordinator)(nil)

// NewCoordinator creates the coordinator's metrics and registers them on
// reg, with the build info, the API client's and the Go runtime and
// process collectors.
func NewCoordinator(reg prometheus.Registerer, build BuildInfo) (*Coordinator, error) {
	m := &Coordinator{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "coordinator_leader",
			Help: "1 while this coordinator replica leads (hands out grants and keeps the guard), else 0.",
		}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "noexecute_budget",
			Help: "How many nodes may carry NoExecute at once now (maxNoExecute over the fleet's nodes), at the last decision.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "noexecute_held",
			Help: "Nodes counting against the NoExecute budget (live grants, and NoExecute taints not yet removed), at the last decision.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "noexecute_waiting",
			Help: "Nodes asking for a NoExecute grant and waiting (budget, rate or disruption guard), at the last decision.",
		}),
		guard: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "disruption_guard_tripped",
			Help: "1 while the disruption guard for a condition is tripped in a scope (a zone, or \"*\" for the fleet), 0 when judged and not tripped.",
		}, []string{"condition", "scope"}),
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "noexecute_grants_started_total",
			Help: "NoExecute grants written, by the zone they started in.",
		}, []string{"zone"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "noexecute_grants_released_total",
			Help: "NoExecute grants released, by reason: no_longer_asks (the normal end), node_notready, agent_not_alive, expired, node_deleted, holder_is_another_node.",
		}, []string{"reason"}),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "coordinator_decision_duration_seconds",
			Help:    "How long one fleet decision (the policy alone, without the writes) took.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1},
		}),
		maintenance: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "maintenance_nodes",
			Help: "Nodes in maintenance by state, at the last decision: waiting for a slot, draining, drained (cordoned, pods gone), blocked (given back DrainBlocked at its deadline while its request still stands).",
		}, []string{"state"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "maintenance_evictions_total",
			Help: "Pods a drain tried to move, by result: evicted (the Eviction API took it), refused (429: a PodDisruptionBudget), failed (any other error), deleted (a forced drain past its deadline).",
		}, []string{"result"}),
		drains: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "maintenance_drain_duration_seconds",
			Help: "How long a drain took from its start (its slot taken) to its end, by outcome: Drained, DrainBlocked (given back at its deadline), Released (the request withdrawn, or the node uncordoned by someone else).",
			// 5s to 4h: one pod's grace period to a long drain's deadline.
			Buckets: []float64{5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400},
		}, []string{"outcome"}),
		api:    newAPIMetrics(),
		scopes: map[[2]string]bool{},
	}
	for _, r := range releaseReasons {
		m.released.WithLabelValues(ReasonLabel(r))
	}
	for _, r := range evictionResults {
		m.evictions.WithLabelValues(r)
	}
	for _, o := range drainOutcomes {
		m.drains.WithLabelValues(o)
	}
	m.MaintenanceState(0, 0, 0, 0)
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels say which selftaint this is.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision, "goversion": build.GoVersion},
	})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{
		buildInfo, m.leader, m.budget, m.held, m.waiting, m.guard, m.started, m.released, m.decision,
		m.maintenance, m.evictions, m.drains,
		m.api.requests, m.api.duration, m.api.conflicts,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering coordinator metrics: %w", err)
		}
	}
	return m, nil
}

// ReasonLabel is a release reason as a label value: lower case, words
// joined by underscores ("agent not alive" is agent_not_alive).
func ReasonLabel(reason string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(reason)), " ", "_")
}

// WrapTransport instruments the coordinator's API client (see
// Metrics.WrapTransport).
func (m *Coordinator) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{next: rt, m: m.api, now: time.Now}
}

// SetLeader sets selftaint_coordinator_leader.
func (m *Coordinator) SetLeader(leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	m.leader.Set(v)
}

// Decided sets the budget gauges and the guard's series from a decision
// (dropping the series of scopes no longer judged) and observes its
// duration.
func (m *Coordinator) Decided(d fleet.Decision, took time.Duration) {
	m.decision.Observe(took.Seconds())
	m.budget.Set(float64(d.Budget))
	m.held.Set(float64(d.Held))
	m.waiting.Set(float64(len(d.Waiting)))
	m.mu.Lock()
	defer m.mu.Unlock()
	now := map[[2]string]bool{}
	for cond, scopes := range d.Guard.Conditions {
		for scope, s := range scopes {
			v := 0.0
			if s.Tripped {
				v = 1
			}
			key := [2]string{string(cond), scope}
			now[key] = true
			m.guard.WithLabelValues(key[0], key[1]).Set(v)
		}
	}
	for key := range m.scopes {
		if !now[key] {
			m.guard.DeleteLabelValues(key[0], key[1])
		}
	}
	m.scopes = now
}

// GrantStarted counts a grant written in zone.
func (m *Coordinator) GrantStarted(zone string) { m.started.WithLabelValues(zone).Inc() }

// GrantReleased counts a grant released for reason (one of fleet's).
func (m *Coordinator) GrantReleased(reason string) {
	m.released.WithLabelValues(ReasonLabel(reason)).Inc()
}

// MaintenanceState sets selftaint_maintenance_nodes: how many nodes in
// maintenance wait for a slot, are draining, are drained, and were given
// back DrainBlocked while their request still stands.
func (m *Coordinator) MaintenanceState(waiting, draining, drained, blocked int) {
	for state, n := range map[string]int{
		MaintenanceWaiting: waiting, MaintenanceDraining: draining, MaintenanceDrained: drained, MaintenanceBlocked: blocked,
	} {
		m.maintenance.WithLabelValues(state).Set(float64(n))
	}
}

// Evicted counts n pods a drain tried to move with result (one of the
// Eviction* values).
func (m *Coordinator) Evicted(result string, n int) {
	if n > 0 {
		m.evictions.WithLabelValues(result).Add(float64(n))
	}
}

// DrainFinished observes how long a drain took, by its outcome (one of
// fleet.ReasonDrained, ReasonDrainBlocked, ReasonReleased).
func (m *Coordinator) DrainFinished(outcome string, took time.Duration) {
	m.drains.WithLabelValues(outcome).Observe(took.Seconds())
}
