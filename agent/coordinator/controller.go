package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/selftaint/selftaint/taints/fleet"
)

// queueKey is the workqueue's only key: every change means "decide again".
const queueKey = "fleet"

// controller is one leadership's reconcile loop. Everything below the
// informers is used by the single worker only, so it needs no lock.
type controller struct {
	opts     Options
	log      *slog.Logger
	clock    clock.WithDelayedExecution
	recorder record.EventRecorder
	state    *loopState

	nodes  corelisters.NodeLister
	leases coordinationlisters.LeaseNamespaceLister
	slots  coordinationlisters.LeaseNamespaceLister
	queue  workqueue.TypedRateLimitingInterface[string]
	// ctx is the leadership's context: the drains run under it.
	ctx context.Context

	// memory is what Decide keeps between decisions.
	memory fleet.Memory
	// guard is the guard ConfigMap as last read or written.
	guard guardObject
	// written are the grant Leases as the coordinator's own writes
	// returned them (or deleted them), until the informer catches up.
	written writtenLeases
	// alive is, per node, the last Request.Alive seen and when it changed.
	alive map[string]aliveSeen
	// badRequests is, per node, the unreadable request value already
	// reported, so each bad value gets one Event.
	badRequests map[string]string
	// slotWritten are the maintenance slot Leases as the coordinator's own
	// writes left them, until the informer catches up.
	slotWritten writtenLeases
	// badMaintenance is, per node, the unreadable maintenance request
	// already reported.
	badMaintenance map[string]string
	// conditions are the SelftaintMaintenance conditions written, by node,
	// until the informer shows them.
	conditions map[string]writtenCondition
	// drains are the drains running.
	drains drainSet
	// timer requeues at the last Decision.Next.
	timer clock.Timer
}

func newController(opts Options, log *slog.Logger, recorder record.EventRecorder, state *loopState) *controller {
	return &controller{
		opts:           opts,
		log:            log,
		clock:          opts.Clock,
		recorder:       recorder,
		state:          state,
		written:        writtenLeases{},
		alive:          map[string]aliveSeen{},
		badRequests:    map[string]string{},
		slotWritten:    writtenLeases{},
		badMaintenance: map[string]string{},
		conditions:     map[string]writtenCondition{},
	}
}

// run starts the informers, waits for them to sync and decides whenever
// anything changes, until ctx ends.
func (c *controller) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.ctx = ctx
	defer c.stopAllDrains()
	// Retries after errors and conflicts back off from 100ms to 10s on
	// real time; a decision's own deadlines (Decision.Next) are on Clock.
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "selftaint-coordinator"},
	)
	defer c.queue.ShutDown()
	c.memory = fleet.Memory{Since: c.clock.Now()}

	factories, synced, err := c.informers()
	if err != nil {
		return err
	}
	for _, f := range factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	defer cancel() // before the Shutdowns, which wait for the informers to stop

	c.log.Info("waiting for the Node and Lease informers to sync")
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	c.state.update(func(s *loopState) { s.synced = true })
	context.AfterFunc(ctx, c.queue.ShutDown)
	c.queue.Add(queueKey)
	for c.processNext(ctx) {
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	return ctx.Err()
}

// informers makes the two informers, every event of which queues a
// decision: Nodes (those NodeSelector matches) and the grant Leases in the
// namespace.
func (c *controller) informers() ([]informers.SharedInformerFactory, []cache.InformerSynced, error) {
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(c.opts.Client, 0,
		informers.WithTransform(stripManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if c.opts.NodeSelector != nil && !c.opts.NodeSelector.Empty() {
				o.LabelSelector = c.opts.NodeSelector.String()
			}
		}))
	leaseFactory := informers.NewSharedInformerFactoryWithOptions(c.opts.Client, 0,
		informers.WithNamespace(c.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{fleet.GrantLabel: "true"}.String()
		}))
	slotFactory := informers.NewSharedInformerFactoryWithOptions(c.opts.Client, 0,
		informers.WithNamespace(c.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{fleet.SlotLabel: "true"}.String()
		}))
	enqueue := func(any) { c.queue.Add(queueKey) }
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}
	// A Node outside the fleet changes no decision (a virtual node's
	// heartbeats, say), unless it joins or leaves the fleet, or is gone.
	nodeHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if c.member(obj) {
				enqueue(obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			if c.member(old) || c.member(obj) {
				enqueue(obj)
			}
		},
		DeleteFunc: enqueue,
	}
	nodes := nodeFactory.Core().V1().Nodes()
	if _, err := nodes.Informer().AddEventHandler(nodeHandler); err != nil {
		return nil, nil, fmt.Errorf("coordinator: watching nodes: %w", err)
	}
	leases := leaseFactory.Coordination().V1().Leases()
	if _, err := leases.Informer().AddEventHandler(handler); err != nil {
		return nil, nil, fmt.Errorf("coordinator: watching grant leases: %w", err)
	}
	slots := slotFactory.Coordination().V1().Leases()
	if _, err := slots.Informer().AddEventHandler(handler); err != nil {
		return nil, nil, fmt.Errorf("coordinator: watching maintenance slot leases: %w", err)
	}
	c.nodes = nodes.Lister()
	c.leases = leases.Lister().Leases(c.opts.Namespace)
	c.slots = slots.Lister().Leases(c.opts.Namespace)
	return []informers.SharedInformerFactory{nodeFactory, leaseFactory, slotFactory},
		[]cache.InformerSynced{nodes.Informer().HasSynced, leases.Informer().HasSynced, slots.Informer().HasSynced}, nil
}

// member reports whether obj, a Node from the informer, is in the fleet
// (Config.Members); anything else counts as one.
func (c *controller) member(obj any) bool {
	n, ok := obj.(*corev1.Node)
	return !ok || c.opts.Config.Members.Includes(n)
}

// stripManagedFields drops an object's managedFields before the informer
// caches it: the coordinator never reads them, and on Nodes (written by
// the kubelet, selftaint's agent and others) they are a large share of a
// fleet-sized cache.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

func (c *controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	next, err := c.sync(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		level := slog.LevelWarn
		if errors.Is(err, errStale) {
			level = slog.LevelInfo
		}
		c.log.Log(ctx, level, "decision not fully written; deciding again", "err", err, "retries", c.queue.NumRequeues(key))
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	c.schedule(next)
	return true
}

// schedule queues a decision at next (on Clock), replacing the one
// scheduled before; zero schedules none.
func (c *controller) schedule(next time.Time) {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if next.IsZero() {
		return
	}
	// A fake clock calls this with its lock held: only queue here.
	add := func() { c.queue.Add(queueKey) }
	// A timer takes a duration, so the clock moving between reading it and
	// setting the timer (a test stepping a fake clock) would make it fire
	// a step late: set it again until the clock stood still meanwhile,
	// give or take a millisecond.
	for {
		now := c.clock.Now()
		if !now.Before(next) {
			add()
			return
		}
		t := c.clock.AfterFunc(next.Sub(now), add)
		if c.clock.Since(now) < time.Millisecond {
			c.timer = t
			return
		}
		t.Stop()
	}
}

// sync decides once and writes the decision; it returns when the next
// decision is due even if nothing changes.
func (c *controller) sync(ctx context.Context) (time.Time, error) {
	c.state.update(func(s *loopState) { s.syncStarted = c.clock.Now() })
	defer c.state.update(func(s *loopState) { s.syncStarted = time.Time{} })
	if !c.guard.loaded {
		if err := c.loadGuard(ctx); err != nil {
			return time.Time{}, err
		}
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return time.Time{}, fmt.Errorf("listing nodes from the cache: %w", err)
	}
	cached, err := c.leases.List(labels.Everything())
	if err != nil {
		return time.Time{}, fmt.Errorf("listing grant leases from the cache: %w", err)
	}
	cachedSlots, err := c.slots.List(labels.Everything())
	if err != nil {
		return time.Time{}, fmt.Errorf("listing maintenance slot leases from the cache: %w", err)
	}
	now := c.clock.Now()
	leases, slots := c.mergeLeases(cached), c.slotWritten.merge(cachedSlots)
	v, d, took := c.decide(nodes, leases, slots, now)
	var unconfirmed error
	if len(d.Maintenance.Start) > 0 {
		if c.opts.beforeStart != nil {
			c.opts.beforeStart(ctx, d.Maintenance.Start)
		}
		v, d, took, unconfirmed = c.confirmStarts(ctx, v, d, took, leases, slots, now)
	}
	// Once per sync, for the decision executed.
	c.opts.Metrics.Decided(d, took)
	c.memory = d.Memory
	c.logDecision(now, d)
	err = c.execute(ctx, v, d, now)
	if !errors.Is(err, errStale) {
		err = errors.Join(err, c.executeMaintenance(ctx, v, d.Maintenance, now, unconfirmed))
	}
	c.tell(v, d.Events)
	if err != nil {
		return time.Time{}, err
	}
	c.state.update(func(s *loopState) { s.decided = true })
	return d.Next, nil
}

// decide builds the view from nodes and the Leases as the coordinator
// knows them, and asks fleet.Decide; took is how long Decide took. The
// caller reports the decision it executes to Metrics.
func (c *controller) decide(nodes []*corev1.Node, leases, slots []*coordinationv1.Lease, now time.Time) (v *view, d fleet.Decision, took time.Duration) {
	v = c.observe(nodes, leases, now)
	c.observeSlots(v, slots)
	in := fleet.Input{
		Config: c.opts.Config,
		Now:    now,
		Leader: c.opts.Identity,
		Nodes:  v.fleetNodes,
		Grants: v.grants,
		Slots:  v.slotList,
		Memory: c.memory,
	}
	start := c.clock.Now()
	d = fleet.Decide(in)
	return v, d, c.clock.Since(start)
}

// confirmStarts makes decision d, made from the caches, again from the
// fleet's Nodes read fresh from the API server, because d starts drains:
// the informer may not have seen a node someone else cordoned, or one
// gone NotReady, a moment ago, and a start decided without them could take
// the pool past maxParallel. The slot Leases need no fresh read: only the
// leader writes them, and its own writes are merged in. What the fresh
// decision starts is what the pool has room for as of that read (the
// window left is from the read to the start's cordon, see README,
// Maintenance drains). If the read fails, the cached decision stands
// without its starts (unconfirmed says why): nothing starts on a view
// that could not be confirmed. It returns the decision to execute, with
// how long Decide took for it (took is the cached decision's).
func (c *controller) confirmStarts(ctx context.Context, v *view, d fleet.Decision, took time.Duration, leases, slots []*coordinationv1.Lease, now time.Time) (*view, fleet.Decision, time.Duration, error) {
	read := c.clock.Now()
	nodes, err := c.readNodes(ctx)
	if err != nil {
		return v, d, took, fmt.Errorf("not starting the drains of %v: confirming the maintenance pool: %w", d.Maintenance.Start, err)
	}
	readTook := c.clock.Since(read)
	fv, fd, fdTook := c.decide(nodes, leases, slots, now)
	if !slices.Equal(fd.Maintenance.Start, d.Maintenance.Start) {
		c.log.Info("maintenance starts changed on a fresh read of the nodes", "cached", d.Maintenance.Start, "fresh", fd.Maintenance.Start,
			"unavailable", fd.Maintenance.Unavailable, "pool", fd.Maintenance.Size, "read", readTook)
	} else {
		c.log.Debug("maintenance starts confirmed on a fresh read of the nodes", "start", fd.Maintenance.Start, "nodes", len(nodes), "read", readTook)
	}
	return fv, fd, fdTook, nil
}

// nodePage is how many Nodes one page of readNodes holds.
const nodePage = 500

// readNodes lists the fleet's Nodes (NodeSelector) from the API server
// itself, not the informer's cache: a List without a resourceVersion is
// a consistent read (as of the moment it is served), paged, all pages from
// the same snapshot. managedFields are dropped, as the informer does.
func (c *controller) readNodes(ctx context.Context) ([]*corev1.Node, error) {
	opts := metav1.ListOptions{Limit: nodePage}
	if sel := c.opts.NodeSelector; sel != nil && !sel.Empty() {
		opts.LabelSelector = sel.String()
	}
	var out []*corev1.Node
	for {
		list, err := c.opts.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing nodes from the API server: %w", err)
		}
		for i := range list.Items {
			n := &list.Items[i]
			n.ManagedFields = nil
			out = append(out, n)
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// logDecision logs what a decision changes.
func (c *controller) logDecision(now time.Time, d fleet.Decision) {
	if len(d.Grant)+len(d.Release)+len(d.Delete) == 0 {
		c.log.Debug("decided", "now", now, "held", d.Held, "budget", d.Budget, "waiting", len(d.Waiting), "renew", len(d.Renew), "next", d.Next)
		return
	}
	c.log.Info("decided", "now", now, "grant", d.Grant, "release", d.Release, "delete", d.Delete,
		"held", d.Held, "budget", d.Budget, "waiting", d.Waiting, "renew", len(d.Renew), "next", d.Next)
}

// objectMeta names an object the coordinator writes, with its labels.
func objectMeta(name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: ownLabels()}
}

// ownLabels are the labels on everything the coordinator writes.
func ownLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "selftaint", "app.kubernetes.io/component": Component}
}

// withOwnLabels returns labels with ownLabels added (a new map).
func withOwnLabels(l map[string]string) map[string]string { return mergeMaps(l, ownLabels()) }

// leaseFor is the Lease granting node, as the coordinator now knows it
// (nil if none).
func (v *view) leaseFor(node string) *coordinationv1.Lease { return v.leases[node] }

// nodeRef is the object an Event about node is filed against.
func (v *view) nodeRef(node string) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node}
	if n, ok := v.nodes[node]; ok {
		ref.UID = n.UID
	}
	return ref
}
