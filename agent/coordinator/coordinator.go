// Package coordinator is `selftaint coordinator`: the one place that sees
// the whole fleet and so can decide what no node may decide alone — which
// nodes may carry NoExecute now (grants, under a fleet budget and a rate)
// and whether a condition is a fleet problem rather than a node problem
// (the disruption guard).
//
// The policy is the pure fleet.Decide; this package is only its I/O, in
// the sample-controller shape: one informer on the Nodes, one on the grant
// Leases, a workqueue holding a single key, and a sync that builds a
// fleet.Input from the caches and what it remembers, asks Decide, and
// writes what the Decision says (grant Leases, the guard ConfigMap, Events).
// Every write carries a resourceVersion precondition or is a create, so a
// stale view costs a conflict and a fresh decision, never a blind
// overwrite.
//
// Replicas elect a leader with a Lease (client-go's leaderelection); only
// the leader runs the controller. A replica that loses leadership stops:
// Run returns an error and the process exits, as kube components do, so a
// fresh process (and a fresh memory) is the only way back to leading.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/selftaint/selftaint/taints/fleet"
)

// Component is the Event source and the app.kubernetes.io/component label
// of what the coordinator writes.
const Component = "coordinator"

// Defaults for leader election, as kube components have them.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultStallAfter is how long one sync may run before Live fails.
	DefaultStallAfter = 2 * time.Minute
)

// ErrLostLeadership is what Run returns when this replica stops being the
// leader while its context is still alive.
var ErrLostLeadership = errors.New("coordinator: lost leadership")

// Options configure a Coordinator.
type Options struct {
	// Client talks to the API server.
	Client kubernetes.Interface
	// ElectionClient renews the leader Lease; nil means Client. Give it a
	// rate limiter of its own (as kube-controller-manager does): sharing
	// Client's, a renewal queues behind the controller's own requests, and
	// a leader busy writing loses its leadership and exits.
	ElectionClient kubernetes.Interface
	// Namespace holds the grant Leases, the guard ConfigMap and the leader
	// Lease. Required.
	Namespace string
	// Identity is this replica's leader-election identity (the pod's
	// name). Required.
	Identity string
	// Config is the fleet policy.
	Config fleet.Config
	// GuardName is the guard ConfigMap's name (default
	// fleet.DefaultGuardName).
	GuardName string
	// LeaderLease is the leader-election Lease's name (default
	// fleet.DefaultLeaderLease).
	LeaderLease string
	// LeaseDuration, RenewDeadline and RetryPeriod are leader election's
	// timing (defaults 15s, 10s, 2s). Leader election runs on real time.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Clock is the decisions' clock: grant times, the rate window, the
	// guard's cool-down, liveness, Decision.Next (default real time).
	// Retries after API errors back off on real time.
	Clock clock.WithDelayedExecution
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// NodeSelector, if set, makes the fleet the Nodes it matches (and
	// Config.Members includes).
	NodeSelector labels.Selector
	// Metrics, if set, hears what the coordinator decides and does.
	Metrics Metrics
	// StallAfter: Live fails while one sync has run longer than this
	// (default DefaultStallAfter).
	StallAfter time.Duration
	// NewDrainer makes a node's drain (default: through the Eviction API
	// with Client, agent/drain).
	NewDrainer NewDrainer

	// beforeStart, if set (tests only, through export_test.go), is called
	// when a decision made from the caches starts maintenance slots,
	// before anything of it is confirmed or written: a test's seam for a
	// change the informer has not seen yet.
	beforeStart func(ctx context.Context, starts []string)
}

// Metrics is what the coordinator reports for monitoring (see
// agent/metrics.Coordinator). Its methods must be safe for concurrent use.
type Metrics interface {
	// SetLeader says whether this replica leads.
	SetLeader(leading bool)
	// Decided reports one decision and how long Decide took.
	Decided(d fleet.Decision, took time.Duration)
	// GrantStarted counts a grant written, by the zone it started in.
	GrantStarted(zone string)
	// GrantReleased counts a grant released, by why (one of fleet's
	// Release reasons, such as fleet.ReleaseNotReady).
	GrantReleased(reason string)
	// MaintenanceState says how many nodes wait for a maintenance slot,
	// are being drained, are drained, and were given back DrainBlocked
	// while their request still stands.
	MaintenanceState(waiting, draining, drained, blocked int)
	// Evicted counts n evictions of one result: evicted, refused (429),
	// failed, deleted (forced).
	Evicted(result string, n int)
	// DrainFinished observes how long a drain took to its outcome
	// (Drained, DrainBlocked, Released).
	DrainFinished(outcome string, took time.Duration)
}

type nopMetrics struct{}

func (nopMetrics) SetLeader(bool)                        {}
func (nopMetrics) Decided(fleet.Decision, time.Duration) {}
func (nopMetrics) GrantStarted(string)                   {}
func (nopMetrics) GrantReleased(string)                  {}
func (nopMetrics) MaintenanceState(int, int, int, int)   {}
func (nopMetrics) Evicted(string, int)                   {}
func (nopMetrics) DrainFinished(string, time.Duration)   {}

// Coordinator elects a leader among replicas and, while leading, hands out
// grants and keeps the guard.
type Coordinator struct {
	opts     Options
	log      *slog.Logger
	watchdog *leaderelection.HealthzAdaptor

	leading atomic.Bool
	state   loopState // what the running controller is doing, for Live and Ready

	mu   sync.Mutex // guards term
	term *term      // the controller running for this leadership, nil if none
}

// term is one leadership's controller run.
type term struct {
	done chan struct{}
	err  error // set before done is closed
}

// New checks opts, fills in the defaults and returns a Coordinator.
func New(opts Options) (*Coordinator, error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	return &Coordinator{
		opts: opts,
		log:  opts.Logger.With("identity", opts.Identity),
		// The watchdog fails /healthz once the leader has missed renewing
		// its lease for a while past the lease duration.
		watchdog: leaderelection.NewLeaderHealthzAdaptor(opts.LeaseDuration),
	}, nil
}

// complete validates opts and sets the defaults.
func (o *Options) complete() error {
	var errs []error
	if o.Client == nil {
		errs = append(errs, errors.New("a client is required"))
	}
	if o.ElectionClient == nil {
		o.ElectionClient = o.Client
	}
	for _, msg := range validation.IsDNS1123Label(o.Namespace) {
		errs = append(errs, fmt.Errorf("namespace %q: %s", o.Namespace, msg))
	}
	if o.Identity == "" {
		errs = append(errs, errors.New("an identity is required"))
	}
	if o.Config.GrantTTL <= 0 {
		errs = append(errs, fmt.Errorf("the grant TTL must be positive, got %s", o.Config.GrantTTL))
	}
	if _, err := fleet.ParseMembership(string(o.Config.Members)); err != nil {
		errs = append(errs, err)
	}
	setDefault(&o.GuardName, fleet.DefaultGuardName)
	setDefault(&o.LeaderLease, fleet.DefaultLeaderLease)
	setDefault(&o.LeaseDuration, DefaultLeaseDuration)
	setDefault(&o.RenewDeadline, DefaultRenewDeadline)
	setDefault(&o.RetryPeriod, DefaultRetryPeriod)
	setDefault(&o.StallAfter, DefaultStallAfter)
	if o.LeaseDuration <= o.RenewDeadline || o.RenewDeadline <= o.RetryPeriod {
		errs = append(errs, fmt.Errorf("leader election needs lease duration (%s) > renew deadline (%s) > retry period (%s)",
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = nopMetrics{}
	}
	if o.NewDrainer == nil && o.Client != nil {
		o.NewDrainer = evictingDrainers(o.Client, o.Logger.With("component", "drain"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	return nil
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// Leading reports whether this replica leads now.
func (c *Coordinator) Leading() bool { return c.leading.Load() }

// Run campaigns for leadership until ctx ends and, while leading, runs the
// controller. It returns ErrLostLeadership (wrapped) when leadership is
// lost, the controller's error if it fails, or ctx's error once ctx ends.
// On ctx's end the controller stops first and the leader Lease is then
// released, so the next leader need not wait out the lease. A Coordinator
// runs once: after Run returns, the process is meant to exit.
func (c *Coordinator) Run(ctx context.Context) error {
	recorder, stop := c.newRecorder(ctx)
	defer stop()
	// Leader election runs on a context of its own, cancelled only once the
	// controller has stopped: it releases the Lease when cancelled, and
	// nothing may still be writing for this leader then.
	leCtx, leCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer leCancel()
	le, err := leaderelection.NewLeaderElector(c.electionConfig(ctx, leCancel, recorder))
	if err != nil {
		return fmt.Errorf("coordinator: leader election: %w", err)
	}
	c.watchdog.SetLeaderElection(le)
	stopWatching := context.AfterFunc(ctx, func() {
		c.waitTerm()
		leCancel()
	})
	defer stopWatching()
	c.log.Info("campaigning for leadership", "lease", c.opts.Namespace+"/"+c.opts.LeaderLease)
	le.Run(leCtx)
	c.waitTerm()
	c.mu.Lock()
	t := c.term
	c.mu.Unlock()
	switch {
	case t != nil && t.err != nil && !errors.Is(t.err, context.Canceled):
		return t.err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("%w (lease %s/%s)", ErrLostLeadership, c.opts.Namespace, c.opts.LeaderLease)
}

// electionConfig is leader election's configuration: a LeaseLock in the
// namespace, released on cancel, the controller run while leading.
func (c *Coordinator) electionConfig(ctx context.Context, leCancel context.CancelFunc, recorder record.EventRecorder) leaderelection.LeaderElectionConfig {
	return leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta: objectMeta(c.opts.LeaderLease, c.opts.Namespace),
			Client:    c.opts.ElectionClient.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{
				Identity:      c.opts.Identity,
				EventRecorder: recorder,
			},
			Labels: ownLabels(),
		},
		LeaseDuration:   c.opts.LeaseDuration,
		RenewDeadline:   c.opts.RenewDeadline,
		RetryPeriod:     c.opts.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        c.watchdog,
		Name:            "selftaint-coordinator",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { c.lead(ctx, lctx, leCancel, recorder) },
			// Run says why it returns; there is nothing to undo here.
			OnStoppedLeading: func() { c.log.Debug("leader election stopped") },
			OnNewLeader: func(id string) {
				if id != c.opts.Identity {
					c.log.Info("another replica leads", "leader", id)
				}
			},
		},
	}
}

// lead runs the controller for one leadership, until either the leadership
// (lctx) or the process (ctx) ends. A controller that fails gives the
// leadership up.
func (c *Coordinator) lead(ctx, lctx context.Context, leCancel context.CancelFunc, recorder record.EventRecorder) {
	c.mu.Lock()
	if ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	t := &term{done: make(chan struct{})}
	c.term = t
	c.mu.Unlock()
	defer close(t.done)

	cctx, cancel := context.WithCancel(lctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	c.log.Info("started leading")
	t.err = c.runTerm(cctx, recorder)
	if t.err != nil && !errors.Is(t.err, context.Canceled) {
		c.log.Error("the controller failed; giving up leadership", "err", t.err)
		leCancel()
	}
}

// waitTerm waits for the running controller, if any, to stop.
func (c *Coordinator) waitTerm() {
	c.mu.Lock()
	t := c.term
	c.mu.Unlock()
	if t != nil {
		<-t.done
	}
}

// RunWithoutElection runs the controller as if this replica led, until ctx
// ends: for tests and single-replica setups. It returns ctx's error, or
// the controller's.
func (c *Coordinator) RunWithoutElection(ctx context.Context) error {
	recorder, stop := c.newRecorder(ctx)
	defer stop()
	return c.runTerm(ctx, recorder)
}

// runTerm runs a controller with a fresh memory, reporting leadership
// while it runs.
func (c *Coordinator) runTerm(ctx context.Context, recorder record.EventRecorder) error {
	c.leading.Store(true)
	c.opts.Metrics.SetLeader(true)
	defer func() {
		c.leading.Store(false)
		c.opts.Metrics.SetLeader(false)
		c.state.reset()
	}()
	return newController(c.opts, c.log, recorder, &c.state).run(ctx)
}

// newRecorder is an Event recorder writing to the API server until stop,
// even after ctx ends (leader election tells of its release after that).
// Node Events land in "default" (a Node has no namespace), the guard's
// and the leader Lease's in the coordinator's namespace.
func (c *Coordinator) newRecorder(ctx context.Context) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.opts.Client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "selftaint-" + Component, Host: c.opts.Identity}), b.Shutdown
}

// Live reports whether the coordinator is alive: nil, or why not. It
// fails when, leading, it has not renewed its leader Lease in time, or a
// sync has run for longer than StallAfter.
func (c *Coordinator) Live() error {
	if err := c.watchdog.Check(nil); err != nil {
		return err
	}
	return c.state.live(c.opts.Clock.Now(), c.opts.StallAfter)
}

// Ready reports whether the coordinator is ready: a standby replica is;
// the leader once its informers have synced and its first decision is
// written.
func (c *Coordinator) Ready() error {
	if !c.Leading() {
		return nil
	}
	return c.state.ready()
}

// loopState is what the running controller is doing.
type loopState struct {
	mu          sync.Mutex // guards the fields below
	synced      bool       // the informers have synced
	decided     bool       // a decision has been made and written
	syncStarted time.Time  // when the running sync began; zero if none runs
}

func (s *loopState) update(f func(*loopState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *loopState) reset() {
	s.update(func(s *loopState) { s.synced, s.decided, s.syncStarted = false, false, time.Time{} })
}

func (s *loopState) live(now time.Time, stallAfter time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.syncStarted.IsZero() && now.Sub(s.syncStarted) > stallAfter {
		return fmt.Errorf("a sync has been running for %s, more than %s", now.Sub(s.syncStarted).Round(time.Millisecond), stallAfter)
	}
	return nil
}

func (s *loopState) ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.synced:
		return errors.New("leading, but the Node and Lease informers have not synced yet")
	case !s.decided:
		return errors.New("leading, but the first decision has not been written yet")
	}
	return nil
}
