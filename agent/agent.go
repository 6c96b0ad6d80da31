// Package agent is selftaint's reconcile loop: it feeds probe results through
// per-condition dampers, publishes the resulting NodeConditions with
// server-side apply under its own field manager, and keeps the taints the
// rule table implies on its own Node, touching only the taints it owns.
//
// The loop follows sample-controller: one informer on the agent's own Node
// (a field selector on metadata.name), one rate-limited workqueue holding a
// single key, one sync function that reads the cache, takes a snapshot under
// the lock, lets the pure plan in package taints (taints.PlanNode) decide,
// and writes what the plan says. Policy belongs in the plan, not here: this
// package keeps only state (dampers, fault verdicts, what it published) and
// I/O. Everything that can change the
// outcome — a probe verdict, a damping deadline, the heartbeat, a fault's
// expiry, anyone else editing the Node — just enqueues the key.
//
// Faults injected through Node annotations (see faults.go) override a
// condition's damped state while they last. Probes whose findings must
// outlive the agent (probes.Stateful) keep their state in an annotation on
// the Node, restored before their first run (see state.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/faults"
	"github.com/selftaint/selftaint/taints/fleet"
)

// DefaultFieldManager is the server-side apply field manager selftaint
// writes conditions under.
const DefaultFieldManager = "selftaint"

// maxMessageLen caps a condition message; the API server accepts more, but
// a condition is read by humans in kubectl describe.
const maxMessageLen = 1024

// maxConflicts is how many 409s one taint write tolerates before the sync
// gives up and the workqueue retries it with backoff.
const maxConflicts = 5

// ProbeSpec is one probe, how it is scheduled, and the condition it feeds.
type ProbeSpec struct {
	Entry probes.Entry
	// Condition is the condition the probe feeds. Empty makes the probe
	// events-only (NPD's files of temporary rules only): the agent runs
	// it and records the Events its results carry (events.go), and
	// nothing else: it has no damper, condition, taint, fault target or
	// ownership, and initialization does not wait for it. The fields
	// below are then ignored.
	Condition corev1.NodeConditionType
	Damping   taints.Damping
	// Healthy is the condition's status when the probe finds no problem.
	// Empty means False: selftaint's own conditions, like the kubelet's
	// pressure conditions, say "there is a problem". A virtual node's Ready
	// condition is the one that says True when all is well.
	Healthy corev1.ConditionStatus
	// MessageUpdates writes a new message of the condition to the Node as
	// soon as it changes while the condition reports a problem
	// (taints.MessageIsNews), as NPD does with
	// enable_message_change_based_condition_update. Without it a new
	// message alone rides the next write (a status or reason change, or
	// the heartbeat): leave it off where messages carry live readings, or
	// every reading costs a write.
	MessageUpdates bool
	// NPDReasons gives the condition's change Events the condition's
	// reason (the rule's when it goes True, its default one going back),
	// as node-problem-detector records them, instead of ConditionChanged:
	// the conditions of NPD files.
	NPDReasons bool
}

// EventsOnly reports whether the probe feeds no condition, only Events
// (see Condition).
func (p ProbeSpec) EventsOnly() bool { return p.Condition == "" }

// HealthyStatus is the status the spec's condition has when all is well.
func (p ProbeSpec) HealthyStatus() corev1.ConditionStatus {
	if p.Healthy == "" {
		return corev1.ConditionFalse
	}
	return p.Healthy
}

// Options configure an Agent.
type Options struct {
	// NodeName is the Node the agent owns conditions and taints on.
	NodeName string
	// Client talks to the API server. Only the core group is needed, which
	// keeps the agent's binary and memory small.
	Client typedcorev1.CoreV1Interface
	// Probes to run; may be empty.
	Probes []ProbeSpec
	// Rules map conditions to taints.
	Rules []taints.Rule
	// DrainRules ask for a sick-node drain of the Node while they apply:
	// the agent keeps the request (fleet.AgentRequestAnnotation) on it
	// (taints.PlanDrainRequest), and the coordinator serves it.
	DrainRules []taints.DrainRule
	// HeartbeatPeriod is how often conditions are re-written when nothing
	// changed.
	HeartbeatPeriod time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// FieldManager defaults to DefaultFieldManager.
	FieldManager string
	// Jitter is the probe start jitter (see probes.RunnerOptions).
	Jitter float64
	// BeforeTaintWrite, if set, runs between reading the Node and writing
	// its taints. Tests use it to make another writer race the agent.
	BeforeTaintWrite func(ctx context.Context, read *corev1.Node)
	// Faults configures fault injection. The zero value enables it with
	// DefaultFaultMaxDuration.
	Faults FaultOptions
	// Hardware, if set, is the node's special hardware: resources to
	// advertise, taint for and label for.
	Hardware Inventory
	// HardwarePeriod is how often the inventory is taken; default
	// DefaultHardwarePeriod.
	HardwarePeriod time.Duration
	// Init, if set, manages the uninitialized taint.
	Init *InitOptions
	// Metrics, if set, receives probe runs, conditions, taints and their
	// changes, for monitoring (see observe.go). nil means none.
	Metrics Metrics
	// Limiter is the change limiter on each condition's taints; the zero
	// value is off.
	Limiter taints.LimiterConfig
	// NoExecute, if set, is where the coordinator's grants and guard are.
	// Without it no NoExecute taint is ever applied: NoExecute rules apply
	// their fallback effect.
	NoExecute *NoExecuteOptions
	// Ownership is what the config lets the agent own on its Node. The
	// ownership records on the Node are trusted only for these keys, the
	// keys of Rules and Init, and the hardware the inventory reports (see
	// ownable.go).
	Ownership Ownership
}

// FaultOptions configure fault injection through Node annotations.
type FaultOptions struct {
	// Disabled makes the agent ignore every fault annotation (each is
	// reported once as rejected, saying so).
	Disabled bool
	// MaxDuration is the longest a fault may last, counted from when the
	// agent first sees it. Zero means DefaultFaultMaxDuration.
	MaxDuration time.Duration
}

// Stats counts the agent's API writes, for tests and benchmarks.
type Stats struct {
	ConditionWrites int64
	TaintWrites     int64
	Conflicts       int64
	Syncs           int64
}

// Agent runs probes and keeps its Node's conditions and taints in step.
type Agent struct {
	opts  Options
	log   *slog.Logger
	clock clock.WithTicker
	// neListed is closed once the NoExecute grant and the guard have been
	// listed (awaitGuardListed); nil without NoExecute.
	neListed chan struct{}
	runner   *probes.Runner
	byProbe  map[string]ProbeSpec
	ruleFor  map[taints.TaintID][]taints.Rule
	queue    workqueue.TypedRateLimitingInterface[string]
	// recorder records the agent's own Events through events, which
	// paces them (events.go); both are made by Run.
	recorder record.EventRecorder
	events   *eventSink
	lister   corelisters.NodeLister

	conditionWrites, taintWrites, conflicts, syncs atomic.Int64

	// obs is the loop's health and the detect-to-taint clocks (observe.go).
	obs observations

	// faultConds and faultProbes are the fault targets: the conditions the
	// agent manages and its probes' names. Read-only after New.
	faultConds  map[corev1.NodeConditionType]bool
	faultProbes map[string]corev1.NodeConditionType
	// healthy is each condition's status when all is well. Read-only after
	// New.
	healthy map[corev1.NodeConditionType]corev1.ConditionStatus
	// npdReasons are the conditions whose change Events carry their
	// reason (ProbeSpec.NPDReasons). Read-only after New.
	npdReasons map[corev1.NodeConditionType]bool
	// stateful is the Stateful probes by name (state.go). The map is
	// read-only after New; the records' fields are guarded by mu.
	stateful map[string]*statefulProbe

	mu          sync.Mutex // guards the fields below
	dampers     map[corev1.NodeConditionType]*taints.Damper
	adopted     bool         // conditions on the Node were adopted
	lastWritten *corev1.Node // newest Node returned by our own writes
	lastForeign string       // the taint conflicts last reported
	// lastForeignLabels and lastHeldResources are the label and resource
	// conflicts last reported.
	lastForeignLabels, lastHeldResources string
	// ownable is the keys whose ownership records are trusted; the
	// inventory adds the hardware it reports. lastUntrusted is the
	// untrusted record entries last reported.
	ownable       taints.Ownable
	lastUntrusted string
	// hardware is the last good inventory; haveHardware is false until
	// the first one (or when there is no inventory at all).
	hardware     []Resource
	haveHardware bool
	// advertised is the extended resources our last status write (or the
	// Node's managed fields at start) says we advertise.
	advertised map[corev1.ResourceName]bool
	// res is the adopted counts and yields of extended resources
	// (hardware.go).
	res resourceMemory
	// reported is the probes that have given a verdict since start.
	reported map[string]bool
	// published is the last state of each condition written to (or adopted
	// from) the Node; its transition time is carried while the status holds.
	published map[corev1.NodeConditionType]taints.Published
	// told is the status each condition's change Event told since the
	// last status write (taints.Snapshot.Told); emptied by the write.
	told map[corev1.NodeConditionType]corev1.ConditionStatus
	// faultMem is the verdict on each fault annotation's current value
	// and the faults applied at the last sync (faults.Evaluate), so a
	// rejection is reported once and an expiry is told apart from a fault
	// that was already stale when first seen.
	faultMem faults.Memory
	// limits are the change limiters' states, as of the last successful
	// sync.
	limits map[corev1.NodeConditionType]taints.LimitState
	// grant and guard are the coordinator's decisions as last seen.
	grant seenGrant
	guard seenGuard
	// asking says the node asked for NoExecute at the last sync, since
	// askingSince (zero: since before this agent started); only a grant
	// seen after that is honoured.
	asking      bool
	askingSince time.Time
	// lastNoExecute and lastHeld are the NoExecute verdicts and held
	// taints last reported.
	lastNoExecute, lastHeld string
	// clearSeen is each clear annotation's value already handled (state.go),
	// so a request is acted on once, not at every retry of its removal.
	clearSeen map[string]string
}

// New checks the options and builds an Agent; Run starts it.
func New(opts Options) (*Agent, error) {
	if opts.NodeName == "" {
		return nil, errors.New("agent: node name is required")
	}
	if opts.Client == nil {
		return nil, errors.New("agent: client is required")
	}
	if opts.HeartbeatPeriod <= 0 {
		return nil, fmt.Errorf("agent: heartbeat period must be positive, got %s", opts.HeartbeatPeriod)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FieldManager == "" {
		opts.FieldManager = DefaultFieldManager
	}
	if opts.Faults.MaxDuration < 0 {
		return nil, fmt.Errorf("agent: maximum fault duration must not be negative, got %s", opts.Faults.MaxDuration)
	}
	if opts.Faults.MaxDuration == 0 {
		opts.Faults.MaxDuration = DefaultFaultMaxDuration
	}
	if opts.Metrics == nil {
		opts.Metrics = nopMetrics{}
	}
	a := &Agent{
		opts:        opts,
		log:         opts.Logger.With("node", opts.NodeName),
		clock:       opts.Clock,
		byProbe:     map[string]ProbeSpec{},
		dampers:     map[corev1.NodeConditionType]*taints.Damper{},
		faultConds:  map[corev1.NodeConditionType]bool{},
		faultProbes: map[string]corev1.NodeConditionType{},
		healthy:     map[corev1.NodeConditionType]corev1.ConditionStatus{},
		npdReasons:  map[corev1.NodeConditionType]bool{},
		published:   map[corev1.NodeConditionType]taints.Published{},
		told:        map[corev1.NodeConditionType]corev1.ConditionStatus{},
		faultMem:    faults.Memory{Seen: map[string]faults.Verdict{}, Applied: map[string]string{}},
		advertised:  map[corev1.ResourceName]bool{},
		reported:    map[string]bool{},
		limits:      map[corev1.NodeConditionType]taints.LimitState{},
		stateful:    map[string]*statefulProbe{},
		clearSeen:   map[string]string{},
	}
	if opts.NoExecute != nil {
		a.neListed = make(chan struct{})
		if err := opts.NoExecute.validate(); err != nil {
			return nil, err
		}
	}
	if opts.HardwarePeriod <= 0 {
		a.opts.HardwarePeriod = DefaultHardwarePeriod
	}
	entries, err := a.addProbes(opts.Probes)
	if err != nil {
		return nil, err
	}
	if in := opts.Init; in != nil {
		if in.Condition == "" {
			return nil, errors.New("agent: the initialization condition is required")
		}
		if _, dup := a.dampers[in.Condition]; dup {
			return nil, fmt.Errorf("agent: condition %s is fed by a probe; it cannot also report initialization", in.Condition)
		}
		a.healthy[in.Condition] = corev1.ConditionFalse
	}
	runner, err := probes.NewRunner(entries, probes.RunnerOptions{
		Clock:    probeClock{opts.Clock},
		Jitter:   opts.Jitter,
		Logger:   a.log,
		Observer: opts.Metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.runner = runner
	a.ruleFor = rulesByTaint(opts.Rules)
	a.ownable = ownableFor(opts)
	return a, nil
}

// addProbes gives each probe spec its damper, fault targets and healthy
// status, and returns the runner's entries. An events-only spec gets none
// of these: only its entry, and its place in byProbe for Observe.
func (a *Agent) addProbes(specs []ProbeSpec) ([]probes.Entry, error) {
	entries := make([]probes.Entry, 0, len(specs))
	for _, p := range specs {
		if p.Entry.Probe == nil {
			return nil, errors.New("agent: probe spec without a probe")
		}
		if p.EventsOnly() {
			a.byProbe[p.Entry.Probe.Name()] = p
			entries = append(entries, a.addStateful(p.Entry))
			continue
		}
		if _, dup := a.dampers[p.Condition]; dup {
			return nil, fmt.Errorf("agent: condition %s is fed by two probes", p.Condition)
		}
		switch h := p.HealthyStatus(); h {
		case corev1.ConditionTrue, corev1.ConditionFalse:
			a.healthy[p.Condition] = h
		default:
			return nil, fmt.Errorf("agent: condition %s: healthy status must be True or False, got %q", p.Condition, h)
		}
		a.byProbe[p.Entry.Probe.Name()] = p
		a.dampers[p.Condition] = taints.NewDamper(p.Damping, p.HealthyStatus())
		a.faultConds[p.Condition] = true
		a.faultProbes[p.Entry.Probe.Name()] = p.Condition
		a.npdReasons[p.Condition] = p.NPDReasons
		entries = append(entries, a.addStateful(p.Entry))
	}
	return entries, nil
}

// rulesByTaint indexes rules by the taints they put on: their own, and a
// NoExecute rule's fallback too.
func rulesByTaint(rules []taints.Rule) map[taints.TaintID][]taints.Rule {
	out := map[taints.TaintID][]taints.Rule{}
	for _, r := range rules {
		id := taints.IDOf(r.Taint)
		out[id] = append(out[id], r)
		if r.Fallback != "" {
			fb := taints.TaintID{Key: r.Taint.Key, Effect: r.Fallback}
			out[fb] = append(out[fb], r)
		}
	}
	return out
}

// probeClock adapts a Kubernetes clock to the probe runner's.
type probeClock struct{ c clock.WithTicker }

func (p probeClock) Now() time.Time                        { return p.c.Now() }
func (p probeClock) NewTimer(d time.Duration) probes.Timer { return p.c.NewTimer(d) }

var _ probes.Clock = probeClock{}

// Stats returns the write counters.
func (a *Agent) Stats() Stats {
	return Stats{
		ConditionWrites: a.conditionWrites.Load(),
		TaintWrites:     a.taintWrites.Load(),
		Conflicts:       a.conflicts.Load(),
		Syncs:           a.syncs.Load(),
	}
}

// ProbeStats returns the probe runner's per-probe counters.
func (a *Agent) ProbeStats() []probes.ProbeStats { return a.runner.Stats() }

// Run probes and reconciles until ctx is cancelled. It keeps probing while
// the API server is unreachable and converges once it is back.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	a.queue = trackedQueue{workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedMaxOfRateLimiter(
			// Retries back off from 100ms to 10s: an API server that comes
			// back is noticed within seconds, a broken one is not hammered.
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
		),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "selftaint", Clock: a.clock},
	), a, a.clock}
	defer a.queue.ShutDown()

	// One informer on our own Node only.
	selector := fields.OneTermEqualSelector("metadata.name", a.opts.NodeName).String()
	nodeClient := a.opts.Client.Nodes()
	back := func() { a.queue.Add(a.opts.NodeName) }
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return untilReachable(ctx, a.clock, retryUnreachableEvery, back, func() (runtime.Object, error) { return nodeClient.List(ctx, o) })
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return untilReachable(ctx, a.clock, retryUnreachableEvery, back, func() (watch.Interface, error) { return nodeClient.Watch(ctx, o) })
		},
	}, &corev1.Node{}, 0, cache.Indexers{})
	a.lister = corelisters.NewNodeLister(informer.GetIndexer())
	enqueue := func(any) { a.queue.Add(a.opts.NodeName) }
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("agent: watching node %s: %w", a.opts.NodeName, err)
	}

	// The correlator never drops: Events are paced in one place, the
	// agent's (events.go), which counts what it holds back.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(neverDrop()))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.opts.Client.Events("")})
	defer broadcaster.Shutdown()
	a.events = &eventSink{
		recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "selftaint", Host: a.opts.NodeName}),
		now:      a.clock.Now, metrics: a.opts.Metrics, log: a.log, pacer: newEventPacer(),
	}
	a.recorder = pacedRecorder{a.events}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { a.runner.Run(ctx, a.Observe) })
	if a.opts.Hardware != nil {
		wg.Go(func() { a.runInventory(ctx) })
	}
	if a.opts.NoExecute != nil {
		wg.Go(func() { a.runNoExecute(ctx) })
	}
	wg.Go(func() { informer.RunWithContext(ctx) })

	a.log.Info("agent starting", "probes", len(a.opts.Probes), "rules", len(a.opts.Rules))
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	a.updateLoop(func(s *LoopState) { s.CacheSynced = true })
	a.awaitNoExecuteListed(ctx)
	wg.Go(func() {
		<-ctx.Done()
		a.queue.ShutDown()
	})
	a.queue.Add(a.opts.NodeName)
	for a.processNext(ctx) {
	}
	return ctx.Err()
}

// DefaultNoExecuteListWait is how long the first sync waits for the
// NoExecute grant and the guard to be listed (NoExecuteOptions.ListWait).
const DefaultNoExecuteListWait = time.Second

// awaitNoExecuteListed holds the first sync until the grant and the guard
// have been listed, for at most NoExecuteOptions.ListWait: a grant not listed yet
// is not "no grant", and a restarted agent that took it for one would put
// the fallback in its NoExecute taint's place, forget the taint's
// timeAdded, and restore it later with a new one (restarting every
// tolerating pod's eviction clock). Past the wait it syncs anyway: the
// guard, unread, holds every new taint.
func (a *Agent) awaitNoExecuteListed(ctx context.Context) {
	if a.neListed == nil {
		return
	}
	wait := a.opts.NoExecute.ListWait
	switch {
	case wait < 0:
		return
	case wait == 0:
		wait = DefaultNoExecuteListWait
	}
	t := a.clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-a.neListed:
	case <-t.C():
		a.log.Warn("the NoExecute grant or the disruption guard is not listed yet; syncing without them", "waited", wait)
	case <-ctx.Done():
	}
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	next, err := a.sync(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		a.log.Warn("reconcile failed; will retry", "err", err, "retries", a.queue.NumRequeues(key))
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	if !next.IsZero() {
		a.queue.AddAfter(key, max(next.Sub(a.clock.Now()), 0))
	}
	return true
}

// Verdict is the damper's verdict for a probe status: anything but OK or
// Problem is Unknown.
func Verdict(s probes.Status) taints.Verdict {
	switch s {
	case probes.StatusOK:
		return taints.VerdictOK
	case probes.StatusProblem:
		return taints.VerdictProblem
	default:
		return taints.VerdictUnknown
	}
}

// ConditionStatus maps a probe verdict to the status of a condition whose
// healthy status is healthy (False for conditions that say "there is a
// problem", True for Ready): OK is healthy, a problem the opposite, anything
// else Unknown.
func ConditionStatus(s probes.Status, healthy corev1.ConditionStatus) corev1.ConditionStatus {
	return taints.StatusFor(Verdict(s), healthy)
}

// Observe records the Events one probe result carries and feeds it to its
// condition's damper. It enqueues a reconcile when the condition's status
// or reason changed, or its message while that is news (the spec's
// MessageUpdates), or a Stateful probe's state differs from the one on the
// Node, or schedules one for when a pending flip is due. An events-only
// probe's result stops at its Events. It is the probe runner's sink.
func (a *Agent) Observe(r probes.Result) {
	spec, ok := a.byProbe[r.Probe]
	if !ok {
		a.log.Warn("result from an unknown probe dropped", "probe", r.Probe)
		return
	}
	a.recordProbeEvents(r)
	if spec.EventsOnly() {
		return
	}
	now := a.clock.Now()
	a.mu.Lock()
	d := a.dampers[spec.Condition]
	firstVerdict := !a.reported[r.Probe]
	a.reported[r.Probe] = true
	before, hadBefore := d.State()
	d.Observe(Verdict(r.Status), r.Reason, r.Message, now)
	after, hasAfter := d.State()
	next, pending := d.NextChange()
	stateChanged := a.stateChangedLocked(r.Probe)
	a.mu.Unlock()
	a.noteVerdict(spec.Condition, r)

	if a.queue == nil {
		return // not running yet; the first sync picks the state up
	}
	news := spec.MessageUpdates && before.Message != after.Message && taints.MessageIsNews(after.Status, spec.HealthyStatus())
	if firstVerdict || stateChanged || hadBefore != hasAfter || before.Status != after.Status || before.Reason != after.Reason || news {
		a.queue.Add(a.opts.NodeName)
	}
	if pending {
		a.queue.AddAfter(a.opts.NodeName, max(next.Sub(now), 0))
	}
}

// newer returns whichever of the cached Node and the one our last write
// returned is more recent. Right after a write the informer may not have
// caught up; planning from the stale copy would cost a 409 every time.
func newer(cached, written *corev1.Node) *corev1.Node {
	if written == nil || written.UID != cached.UID {
		return cached
	}
	c, err1 := strconv.ParseUint(cached.ResourceVersion, 10, 64)
	w, err2 := strconv.ParseUint(written.ResourceVersion, 10, 64)
	if err1 == nil && err2 == nil && w > c {
		return written
	}
	return cached
}

// sync reconciles once and returns when it next needs to run (zero: only
// when something changes): read the Node, take what the agent knows under
// the lock, plan (taints.PlanNode), write what the plan says.
func (a *Agent) sync(ctx context.Context) (time.Time, error) {
	a.syncs.Add(1)
	cached, err := a.lister.Get(a.opts.NodeName)
	if apierrors.IsNotFound(err) {
		a.log.Info("node not found; waiting for it to be registered")
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reading node from cache: %w", err)
	}
	a.mu.Lock()
	snap := a.snapshotLocked(newer(cached, a.lastWritten), a.clock.Now())
	states := a.statePassLocked(snap.Node)
	a.mu.Unlock()
	a.reportStatePass(snap.Node, states)
	if len(states.cleared) > 0 {
		// The probe's next run publishes what was cleared; look again then
		// too, whatever this sync's fate.
		a.queue.Add(a.opts.NodeName)
	}
	plan := taints.PlanNode(snap)
	plan.Metadata.Annotations, plan.Metadata.Consumed = states.wanted, states.consumed
	a.mu.Lock()
	a.keepResourcesLocked(plan.Resources) // extended resources: hardware.go
	a.mu.Unlock()
	a.reportResourceEvents(snap.Node, plan.Resources.Events)

	node, err := a.write(ctx, snap, plan)
	if err != nil {
		return time.Time{}, err
	}
	a.mu.Lock()
	final := newer(node, a.lastWritten)
	a.noteStatesSyncedLocked(states.current)
	a.mu.Unlock()
	a.observeSync(syncOutcome{
		node: final, states: plan.Conditions.States, fromFault: plan.Conditions.FromFault, faults: snap.Faults, resources: plan.Status.Resources,
		flapping: plan.Flapping, noExecute: plan.NoExecute,
	})
	return plan.Next, nil
}

// snapshotLocked takes what the agent knows at now: the dampers, the fault
// annotations judged, what it published, the hardware and its config (the
// conditions with message updates among it), adopting the Node's state
// first after a start. a.mu is held.
func (a *Agent) snapshotLocked(node *corev1.Node, now time.Time) taints.Snapshot {
	if !a.adopted {
		a.adoptLocked(node, now)
	}
	snap := taints.Snapshot{
		Node: node, Now: now,
		Faults:          a.evalFaultsLocked(node.Annotations, now),
		Published:       maps.Clone(a.published),
		Told:            maps.Clone(a.told),
		Rules:           a.opts.Rules,
		DrainRules:      a.opts.DrainRules,
		Ownable:         a.ownable,
		Hardware:        a.hardware,
		HardwareKnown:   a.haveHardware || a.opts.Hardware == nil,
		Advertised:      maps.Clone(a.advertised),
		Adopted:         maps.Clone(a.res.adopted),
		Yielded:         maps.Clone(a.res.yielded),
		FieldManager:    a.opts.FieldManager,
		HeartbeatPeriod: a.opts.HeartbeatPeriod,
		MaxMessageLen:   maxMessageLen,
		Healthy:         a.healthy,
		Limiter:         a.opts.Limiter,
		Limits:          maps.Clone(a.limits),
		NoExecute:       a.noExecuteInputLocked(now),
	}
	snap.Damped, snap.Pending = a.dampedLocked(now)
	for _, p := range a.byProbe {
		if p.MessageUpdates && !p.EventsOnly() {
			if snap.MessageUpdates == nil {
				snap.MessageUpdates = map[corev1.NodeConditionType]bool{}
			}
			snap.MessageUpdates[p.Condition] = true
		}
	}
	if in := a.opts.Init; in != nil {
		snap.InitCondition, snap.InitTaint = in.Condition, in.Taint
		snap.Init = a.initInputLocked(node, snap.HardwareKnown)
	}
	return snap
}

// dampedLocked ticks every damper at now and returns the conditions they
// have decided and when the next pending flip is due. a.mu is held.
func (a *Agent) dampedLocked(now time.Time) (map[corev1.NodeConditionType]taints.State, time.Time) {
	states := map[corev1.NodeConditionType]taints.State{}
	var next time.Time
	for t, d := range a.dampers {
		d.Tick(now)
		if s, ok := d.State(); ok {
			states[t] = s
		}
		if at, ok := d.NextChange(); ok {
			next = taints.Earliest(next, at)
		}
	}
	return states, next
}

// write does what plan says to the Node: withdraws resources, then writes
// conditions and advertised resources (status), then taints, labels and
// records (metadata), then removes expired faults. It returns the newest
// Node it wrote or read.
func (a *Agent) write(ctx context.Context, snap taints.Snapshot, plan taints.NodePlan) (*corev1.Node, error) {
	res := plan.Resources
	node, now := snap.Node, snap.Now
	a.tellChanges(node, plan.Changes)
	a.reportFaults(node, snap.Faults)
	a.reportHeldResources(node, plan.Status.Held)
	node, err := a.removeResources(ctx, node, res)
	if err != nil {
		return nil, err
	}
	states := plan.Conditions.States
	if plan.Status.Write {
		if node, err = a.applyStatus(ctx, node, states, res, now); err != nil {
			return nil, err
		}
	}
	a.mu.Lock()
	for t, s := range states {
		a.published[t] = taints.Published{State: s, Fault: plan.Conditions.FromFault[t]}
	}
	a.limits = plan.Limits
	a.mu.Unlock()
	a.reportFlapping(node, plan)
	a.reportNoExecute(node, plan.NoExecute)
	hw := hardwareState{resources: snap.Hardware, known: snap.HardwareKnown}
	if err := a.reconcileMetadata(ctx, node, plan.Metadata, states, hw, plan.Conditions.Init); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.noteAskingLocked(len(plan.Metadata.Request.Wanted) > 0, now)
	a.mu.Unlock()
	if err := a.removeExpiredFaults(ctx, node, snap.Faults.Expired); err != nil {
		return nil, err
	}
	return node, nil
}

// adoptLocked takes over the conditions a previous run left on the Node, so
// a restart neither drops a taint whose condition still holds nor resets
// lastTransitionTime.
//
// A condition that shows a fault (one whose annotation is still there, or
// whose own words say a fault set it, faults.SetByFault: a fault cleared
// while the agent was down leaves no annotation) is not adopted into its
// damper: it says nothing about the machine, so the probe decides afresh.
// Its transition time is still carried while the published status holds.
func (a *Agent) adoptLocked(node *corev1.Node, now time.Time) {
	faulted := a.adoptFaultsLocked(node)
	// A request left by the previous run stands: any grant seen from now
	// on is honoured.
	_, a.asking = node.Annotations[fleet.RequestAnnotation]
	a.adoptResourcesLocked(node)
	if in := a.opts.Init; in != nil {
		// Kept while the state is undecided after a restart, so the
		// condition does not flap to Unknown.
		if c := taints.FindCondition(node, in.Condition); c != nil {
			a.published[in.Condition] = taints.Published{State: taints.State{
				Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime.Time,
			}}
		}
	}
	for t, d := range a.dampers {
		c := taints.FindCondition(node, t)
		if c == nil {
			continue
		}
		s := taints.State{
			Status: c.Status, Reason: c.Reason, Message: c.Message,
			LastTransitionTime: c.LastTransitionTime.Time,
		}
		fault := faulted[t] || faults.SetByFault(*c)
		a.published[t] = taints.Published{State: s, Fault: fault}
		if fault {
			a.log.Info("condition on node shows an injected fault; the probe decides it afresh", "condition", t, "status", c.Status, "reason", c.Reason)
			continue
		}
		d.Adopt(s, now)
		a.log.Info("adopted condition from node", "condition", t, "status", c.Status, "reason", c.Reason)
	}
	// Last: a restored probe may run at once, and its results find the
	// dampers adopted.
	a.restoreLocked(node)
	a.adopted = true
}

// applyStatus writes all our decided conditions and the extended resources
// we advertise with server-side apply on the status subresource.
// Conditions are a map keyed by type and capacity a map keyed by resource,
// so our field manager owns exactly our entries and nobody else's are
// touched. The resource entries are res's (taints.PlanResources): one we
// alone own is never just left out, as the API server would remove it; the
// apply forces only where res says (applyNodeStatus).
func (a *Agent) applyStatus(ctx context.Context, old *corev1.Node, states map[corev1.NodeConditionType]taints.State, res taints.ResourcePlan, now time.Time) (*corev1.Node, error) {
	types := make([]corev1.NodeConditionType, 0, len(states))
	for t := range states {
		types = append(types, t)
	}
	slices.Sort(types)
	status := corev1ac.NodeStatus()
	for _, t := range types {
		s := states[t]
		status.WithConditions(corev1ac.NodeCondition().
			WithType(t).
			WithStatus(s.Status).
			WithReason(s.Reason).
			WithMessage(taints.Truncate(s.Message, maxMessageLen)).
			WithLastTransitionTime(metav1.NewTime(s.LastTransitionTime)).
			WithLastHeartbeatTime(metav1.NewTime(now)))
	}
	withResources(status, res)
	written, err := a.applyNodeStatus(ctx, corev1ac.Node(a.opts.NodeName).WithStatus(status), res)
	if err != nil {
		return nil, fmt.Errorf("applying conditions and resources: %w", err)
	}
	a.conditionWrites.Add(1)
	a.remember(written)
	a.mu.Lock()
	clear(a.told) // the Node now says what was told
	a.mu.Unlock()
	a.reportResources(written, old, res)
	return written, nil
}

// ReasonConditionChanged is the reason of a condition change's Event,
// but for the conditions of NPD files (ProbeSpec.NPDReasons), whose
// Events carry the condition's reason as NPD's do.
const ReasonConditionChanged = "ConditionChanged"

// tellChanges records an Event for each condition change the plan decided
// (taints.NodePlan.Changes), as soon as it is decided and before the
// status write, as node-problem-detector and the kubelet record theirs:
// the Event does not wait for the write. A change is told once: should
// the write fail, the sync is retried with the change remembered as told
// (taints.Snapshot.Told), and should the condition go back before a write
// succeeds, that is a change told in its turn. Damped and held conditions
// are changes only once the plan decides them, so no Event tells a change
// the agent does not mean to write.
func (a *Agent) tellChanges(node *corev1.Node, changes []taints.ConditionChange) {
	for _, c := range changes {
		etype := corev1.EventTypeNormal
		if c.Unhealthy {
			etype = corev1.EventTypeWarning
		}
		reason := ReasonConditionChanged
		if a.npdReasons[c.Type] && c.Reason != "" {
			reason = c.Reason
		}
		a.recorder.Eventf(node, etype, reason, "%s is now %s (%s): %s", c.Type, c.Status, c.Reason, taints.Truncate(c.Message, 256))
		a.log.Info("condition changed", "condition", c.Type, "status", c.Status, "reason", c.Reason, "message", c.Message)
		a.mu.Lock()
		a.told[c.Type] = c.Status
		a.mu.Unlock()
	}
}

func (a *Agent) remember(n *corev1.Node) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastWritten = n
}

// reconcileMetadata brings the Node's taints and our labels in line with
// the conditions and the hardware inventory, in one compare-and-swap patch.
func (a *Agent) reconcileMetadata(ctx context.Context, node *corev1.Node, mi taints.MetadataInput, states map[corev1.NodeConditionType]taints.State, hw hardwareState, in *initState) error {
	forceMerge := false
	for attempt := 0; ; attempt++ {
		mi.Node = node
		p := taints.PlanMetadata(mi)
		a.reportRecords(node, p)
		a.reportForeign(node, p.Taints.Foreign)
		a.reportForeignLabels(node, p.Labels.Foreign)
		a.reportHeld(node, p.Held, mi.Gates)
		if !p.Changed {
			return nil
		}
		if a.opts.BeforeTaintWrite != nil {
			a.opts.BeforeTaintWrite(ctx, node)
		}
		patch, pt, err := metadataPatch(node, p, mi.Consumed)
		if forceMerge {
			patch, err = mergeMetadataPatch(node.ResourceVersion, p.Taints, p.Labels, p.Annotations, p.RemoveAnnotations)
			pt = types.MergePatchType
		}
		if err != nil {
			return fmt.Errorf("building taint patch: %w", err)
		}
		written, err := a.opts.Client.Nodes().Patch(ctx, a.opts.NodeName, pt, patch,
			metav1.PatchOptions{FieldManager: a.opts.FieldManager})
		// A JSON patch whose test failed comes back 422 with no detail: it
		// is a conflict unless what it tested has not changed.
		testFailed := pt == types.JSONPatchType && apierrors.IsInvalid(err)
		if (apierrors.IsConflict(err) || testFailed) && attempt < maxConflicts {
			a.conflicts.Add(1)
			a.log.Debug("node changed under us; re-reading", "attempt", attempt+1)
			old := node
			if node, err = a.opts.Client.Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("re-reading node after conflict: %w", err)
			}
			// Nothing tested changed: the patch itself was refused; the
			// merge patch says why.
			forceMerge = testFailed && sameTested(old, node)
			continue
		}
		if err != nil {
			return fmt.Errorf("writing taints and labels: %w", err)
		}
		a.taintWrites.Add(1)
		a.remember(written)
		a.reportPlan(written, p.Taints, states, hw)
		a.reportLabels(written, p.Labels)
		a.reportDrain(written, p.Drain)
		if _, ok := p.Annotations[InitializedAnnotation]; ok {
			a.recorder.Eventf(written, corev1.EventTypeNormal, "NodeInitialized", "%s", in.State.Message)
			a.log.Info("node initialized", "detail", in.State.Message)
		}
		return nil
	}
}

// reportDrain tells a sick-node drain request made or withdrawn by the
// write just done (taints.PlanDrainRequest).
func (a *Agent) reportDrain(node *corev1.Node, d taints.DrainPlan) {
	switch d.Reason {
	case "":
		return
	case taints.ReasonDrainRequested:
		a.recorder.Eventf(node, corev1.EventTypeWarning, d.Reason, "%s", d.Message)
	default:
		a.recorder.Eventf(node, corev1.EventTypeNormal, d.Reason, "%s", d.Message)
	}
	a.log.Info("drain request", "reason", d.Reason, "detail", d.Message)
}

// why names the condition or hardware behind a taint of ours, for Events.
func (a *Agent) why(t corev1.Taint, states map[corev1.NodeConditionType]taints.State, hw hardwareState) string {
	if why, ok := hardwareWhy(t, hw.resources); ok {
		return why
	}
	if a.opts.Init != nil && taints.IDOf(t) == a.initTaintID() {
		return "the node is not initialized yet: " + states[a.opts.Init.Condition].Message
	}
	for _, r := range a.ruleFor[taints.IDOf(t)] {
		if s, ok := states[r.Condition]; ok && r.Applies(s.Status) {
			if t.Effect != r.Taint.Effect {
				return fmt.Sprintf("%s is %s (%s); the fallback of its NoExecute rule, on whether or not the node holds a NoExecute grant", r.Condition, s.Status, s.Reason)
			}
			return fmt.Sprintf("%s is %s (%s)", r.Condition, s.Status, s.Reason)
		}
	}
	return "its condition has not been decided since start-up"
}

func (a *Agent) reportPlan(node *corev1.Node, p taints.Plan, states map[corev1.NodeConditionType]taints.State, hw hardwareState) {
	restored := map[taints.TaintID]bool{}
	for _, t := range p.Restored {
		restored[taints.IDOf(t)] = true
		a.recorder.Eventf(node, corev1.EventTypeWarning, "TaintRestored",
			"taint %s was removed by someone else while %s; restored it", taints.Format(t), a.why(t, states, hw))
		a.log.Warn("taint restored", a.causeOf(t, states, hw).attrs(t)...)
		a.opts.Metrics.TaintChanged(taints.IDOf(t), true)
	}
	for _, t := range p.Added {
		if restored[taints.IDOf(t)] {
			continue
		}
		a.recorder.Eventf(node, corev1.EventTypeWarning, "TaintAdded", "added taint %s because %s", taints.Format(t), a.why(t, states, hw))
		a.log.Info("taint added", a.causeOf(t, states, hw).attrs(t)...)
		a.opts.Metrics.TaintChanged(taints.IDOf(t), true)
	}
	for _, t := range p.Updated {
		a.recorder.Eventf(node, corev1.EventTypeNormal, "TaintUpdated", "set taint %s because %s", taints.Format(t), a.why(t, states, hw))
		a.log.Info("taint updated", a.causeOf(t, states, hw).attrs(t)...)
	}
	for _, t := range p.Removed {
		a.recorder.Eventf(node, corev1.EventTypeNormal, "TaintRemoved", "removed taint %s: no rule or hardware asks for it any more", taints.Format(t))
		a.log.Info("taint removed", a.causeOf(t, states, hw).attrs(t)...)
		a.opts.Metrics.TaintChanged(taints.IDOf(t), false)
	}
}

// reportForeign tells, once per change, about taints we want that someone
// else already holds under the same key and effect.
func (a *Agent) reportForeign(node *corev1.Node, foreign []corev1.Taint) {
	ids := make([]taints.TaintID, 0, len(foreign))
	for _, t := range foreign {
		ids = append(ids, taints.IDOf(t))
	}
	s := taints.FormatOwned(ids)
	if !a.changedSince(&a.lastForeign, s) {
		return
	}
	a.recorder.Eventf(node, corev1.EventTypeWarning, "TaintHeldByOther",
		"wanted taint(s) %s, but another writer already set the same key and effect; leaving theirs in place and not claiming it", s)
	a.log.Warn("taint held by another writer; not claiming it", "taints", s)
}
