package agent

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// NoExecuteOptions say where the coordinator's decisions are: this node's
// grant Lease and the guard ConfigMap, both read by name. Without them the
// agent never applies NoExecute (only the rules' fallbacks): fail safe.
type NoExecuteOptions struct {
	// Leases reads the grant.
	Leases typedcoordv1.LeasesGetter
	// Namespace holds the grants and the guard.
	Namespace string
	// GuardName is the guard ConfigMap's name (fleet.DefaultGuardName).
	GuardName string
	// GrantTTL is the grants' TTL: a holder refreshes its liveness stamp
	// every third of it.
	GrantTTL time.Duration
	// GuardStaleAfter is how long the guard is trusted for NoExecute
	// without a renewal.
	GuardStaleAfter time.Duration
	// ListWait is how long the first sync waits for the grant and the
	// guard to be listed (see Agent.awaitNoExecuteListed); 0 means
	// DefaultNoExecuteListWait, a negative value no wait.
	ListWait time.Duration
}

func (o *NoExecuteOptions) validate() error {
	switch {
	case o.Leases == nil:
		return fmt.Errorf("agent: NoExecute: a Lease client is required")
	case o.Namespace == "":
		return fmt.Errorf("agent: NoExecute: the coordinator's namespace is required")
	case o.GuardName == "":
		return fmt.Errorf("agent: NoExecute: the guard's name is required")
	case o.GrantTTL <= 0 || o.GuardStaleAfter <= 0:
		return fmt.Errorf("agent: NoExecute: grant TTL and guard staleness must be positive, got %s and %s", o.GrantTTL, o.GuardStaleAfter)
	}
	return nil
}

// seenGrant is the grant Lease as last seen and when (the agent's clock)
// its current version was first seen.
type seenGrant struct {
	lease      *coordinationv1.Lease
	observedAt time.Time
}

// seenGuard is the last good guard and when its current version was first
// seen; a version that cannot be read leaves it as it was (it goes stale).
type seenGuard struct {
	state      *fleet.GuardState
	version    string
	observedAt time.Time
	lastBad    string // the unreadable version last reported
	// listed: the guard's first list succeeded and its object, if there
	// was one, has been handled. Until then, or while the only version
	// seen cannot be decoded (lastBad with no state), the guard is unread:
	// it holds every new taint of the rules (taints.NoExecuteInput).
	listed bool
}

// unread reports whether the agent knows nothing of the guard: no good
// version read, and not listed yet or all it found cannot be decoded.
func (g seenGuard) unread() bool {
	return g.state == nil && (!g.listed || g.lastBad != "")
}

// noExecuteInputLocked is what the agent knows of the coordinator's
// decisions at now. a.mu is held.
func (a *Agent) noExecuteInputLocked(now time.Time) taints.NoExecuteInput {
	o := a.opts.NoExecute
	if o == nil {
		return taints.NoExecuteInput{}
	}
	in := taints.NoExecuteInput{AliveEvery: o.GrantTTL / 3}
	in.Granted, in.GrantUntil = fleet.Granted(a.grant.lease, a.opts.NodeName, a.grant.observedAt, now)
	// Only a grant first seen while the current request stood: one seen
	// before it (a release not seen yet after the node stopped asking)
	// may already have been given to another node.
	askedAt := now
	if a.asking {
		askedAt = a.askingSince
	}
	if a.grant.observedAt.Before(askedAt) {
		in.Granted, in.GrantUntil = false, time.Time{}
	}
	in.GuardUnread = a.guard.unread()
	if g := a.guard.state; g != nil {
		in.Guard = g
		in.GuardFresh, in.GuardStaleAt = g.Fresh(a.guard.observedAt, now, o.GuardStaleAfter)
	}
	return in
}

// noteAskingLocked records whether the node asks for NoExecute after a
// successful sync at now, and since when. a.mu is held.
func (a *Agent) noteAskingLocked(wanted bool, now time.Time) {
	switch {
	case wanted && !a.asking:
		a.asking, a.askingSince = true, now
	case !wanted:
		a.asking, a.askingSince = false, time.Time{}
	}
}

// runNoExecute watches this node's grant Lease and the guard ConfigMap,
// each by name, and enqueues a sync on every change.
func (a *Agent) runNoExecute(ctx context.Context) {
	o := a.opts.NoExecute
	leases := o.Leases.Leases(o.Namespace)
	grants := byName(fleet.GrantName(a.opts.NodeName),
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return leases.List(ctx, opts)
		},
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return leases.Watch(ctx, opts)
		},
		&coordinationv1.Lease{})
	cms := a.opts.Client.ConfigMaps(o.Namespace)
	guards := byName(o.GuardName,
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return cms.List(ctx, opts) },
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return cms.Watch(ctx, opts)
		},
		&corev1.ConfigMap{})
	handlers := func(set func(obj any)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    set,
			UpdateFunc: func(_, obj any) { set(obj) },
			DeleteFunc: func(any) { set(nil) },
		}
	}
	grantReg, err := grants.AddEventHandler(handlers(a.setGrant))
	if err != nil {
		a.log.Error("watching the NoExecute grant", "err", err)
		return
	}
	reg, err := guards.AddEventHandler(handlers(a.setGuard))
	if err != nil {
		a.log.Error("watching the disruption guard", "err", err)
		return
	}
	go grants.RunWithContext(ctx)
	go a.awaitGuardListed(ctx, reg.HasSynced)
	// The first sync waits for both first lists (awaitNoExecuteListed): a
	// grant not listed yet is not "no grant". A grant that cannot be
	// listed holds only NoExecute, as a missing coordinator does.
	go func() {
		if waitSynced(ctx, func() bool { return reg.HasSynced() && grantReg.HasSynced() }) {
			close(a.neListed)
		}
	}()
	guards.RunWithContext(ctx)
}

// awaitGuardListed marks the guard listed once its informer's first list
// has been handled (synced: the guard, if there is one, went through
// setGuard; if there is none, it is confirmed absent by a list that
// succeeded), and asks for a sync at once: until then the guard holds
// every new taint. A list that fails (the namespace cannot be read) never
// marks it (see waitSynced).
func (a *Agent) awaitGuardListed(ctx context.Context, synced func() bool) {
	if !waitSynced(ctx, synced) {
		return
	}
	a.mu.Lock()
	a.guard.listed = true
	unread := a.guard.unread()
	a.mu.Unlock()
	a.log.Debug("the disruption guard has been listed", "unread", unread)
	a.enqueue()
}

// waitSynced waits until synced, looking every 10ms at first, backing off
// to every second (a list that keeps failing must not cost hundreds of
// virtual nodes' agents a wake-up each 10ms); false when ctx ended first.
func waitSynced(ctx context.Context, synced func() bool) bool {
	b := wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: time.Second}
	for !synced() {
		t := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return true
}

// byName is an informer on the one object called name: a list and a watch
// with a metadata.name field selector. (A list, not a Get: a watch needs
// the resourceVersion a list returns even when the object does not exist
// yet, and a watch from none fails where the API server cannot stream
// lists.)
func byName(name string, list func(context.Context, metav1.ListOptions) (runtime.Object, error), w func(context.Context, metav1.ListOptions) (watch.Interface, error), obj runtime.Object) cache.SharedIndexInformer {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return w(ctx, o)
		},
	}, obj, 0, cache.Indexers{})
}

// setGrant records the grant Lease as seen now (nil: deleted).
func (a *Agent) setGrant(obj any) {
	l, _ := obj.(*coordinationv1.Lease)
	now := a.clock.Now()
	a.mu.Lock()
	if l == nil || a.grant.lease == nil || a.grant.lease.ResourceVersion != l.ResourceVersion {
		a.grant = seenGrant{lease: l, observedAt: now}
	}
	a.mu.Unlock()
	a.enqueue()
}

// setGuard records the guard as seen now. A deleted guard keeps its last
// state (it goes stale); one that cannot be read is reported once and
// leaves the last good state.
func (a *Agent) setGuard(obj any) {
	cm, _ := obj.(*corev1.ConfigMap)
	a.mu.Lock()
	defer a.enqueue()
	defer a.mu.Unlock()
	if cm == nil {
		// Deleted: the last good state is kept; with none, there is no
		// guard now (not an unreadable one).
		if a.guard.state == nil {
			a.guard.lastBad = ""
		}
		return
	}
	now := a.clock.Now()
	g, err := fleet.DecodeGuard(cm.Data)
	if err != nil {
		if a.guard.lastBad != cm.ResourceVersion {
			a.guard.lastBad = cm.ResourceVersion
			what := "keeping its last good state until that goes stale"
			if a.guard.state == nil {
				what = "with no good version read before, no new taint of the rules is added until one is"
			}
			a.log.Warn("the disruption guard cannot be read; "+what, "configmap", cm.Namespace+"/"+cm.Name, "err", err)
		}
		return
	}
	if a.guard.version != cm.ResourceVersion {
		a.guard = seenGuard{state: &g, version: cm.ResourceVersion, observedAt: now, listed: a.guard.listed}
	}
}

// enqueue asks for a sync, once the loop runs.
func (a *Agent) enqueue() {
	if q := a.queue; q != nil {
		q.Add(a.opts.NodeName)
	}
}

// reportNoExecute tells, once per change, why a condition's NoExecute rule
// is at its fallback, and when it is applied again.
func (a *Agent) reportNoExecute(node *corev1.Node, verdicts []taints.NoExecuteVerdict) {
	// Keyed by the message's first clause, not all of it: a tripped
	// guard's counts change with every renewal, and an Event per renewal
	// per node would be a storm of its own.
	var b strings.Builder
	for _, v := range verdicts {
		cause, _, _ := strings.Cut(v.Message, ":")
		fmt.Fprintf(&b, "%s=%v/%s/%s;", v.Condition, v.NoExecute, v.Reason, cause)
	}
	if !a.changedSince(&a.lastNoExecute, b.String()) {
		return
	}
	for _, v := range verdicts {
		if v.Reason == "" {
			continue
		}
		etype := corev1.EventTypeWarning
		if v.Reason == taints.ReasonNoExecuteWaiting {
			etype = corev1.EventTypeNormal
		}
		a.recorder.Eventf(node, etype, v.Reason, "%s: applying its NoExecute rules' fallback effect: %s", v.Condition, v.Message)
		a.log.Info("NoExecute at its fallback", "condition", v.Condition, "reason", v.Reason, "detail", v.Message)
	}
}

// reportFlapping tells when a condition starts or stops flapping.
func (a *Agent) reportFlapping(node *corev1.Node, plan taints.NodePlan) {
	for _, c := range plan.FlapStarted {
		st := plan.Conditions.States[c]
		a.recorder.Eventf(node, corev1.EventTypeWarning, "ConditionFlapping", "%s: %s", c, taints.Truncate(st.Message, 512))
		a.log.Warn("condition flapping; its taints are held on", "condition", c, "detail", st.Message)
	}
	for _, c := range plan.FlapEnded {
		st := plan.Conditions.States[c]
		a.recorder.Eventf(node, corev1.EventTypeNormal, "ConditionStable", "%s is stable again (%s, %s); its taints follow it", c, st.Status, st.Reason)
		a.log.Info("condition stable again", "condition", c, "status", st.Status)
	}
}

// reportHeld tells, once per change, about taints the disruption guard
// holds back. Those held only because the guard has not been read yet
// (moments after a start, unless the guard cannot be read) are logged, not
// told in an Event.
func (a *Agent) reportHeld(node *corev1.Node, held []corev1.Taint, gates map[corev1.NodeConditionType]taints.Gate) {
	ids := make([]taints.TaintID, 0, len(held))
	for _, t := range held {
		ids = append(ids, taints.IDOf(t))
	}
	s := taints.FormatOwned(ids)
	for _, g := range gates {
		if !g.Unread {
			continue
		}
		if s != "" && a.changedSince(&a.lastHeld, "unread:"+s) {
			a.log.Info("taints held until the disruption guard is read (it may be tripped for them); if this lasts, the coordinator's namespace or the guard cannot be read", "taints", s)
		}
		return
	}
	if !a.changedSince(&a.lastHeld, s) || s == "" {
		return
	}
	a.recorder.Eventf(node, corev1.EventTypeWarning, "TaintHeldByGuard",
		"not adding %s: the disruption guard is tripped for its condition (most of the zone or fleet reports it: a fleet problem, not this node's); taints already on stay, and removals are never held", s)
	a.log.Warn("taints held back by the disruption guard", "taints", s)
}
