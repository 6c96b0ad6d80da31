package virtual

// This file keeps the pods' readiness in the API true to what the virtual
// kubelet runs, as a kubelet's status manager does: the node lifecycle
// controller marks a node's pods not ready while the node is NotReady
// (MarkPodsNotReady), and nothing else ever marks them ready again. A
// virtual kubelet that comes back (its process restarted, or a Control's
// Resume) writes its pods' statuses when it starts them, but the
// controller, still seeing the node NotReady for a moment, may mark them
// again after that write; virtual-kubelet's pod controller does not write a
// status it already wrote. So the kubelet checks, on start and every few
// seconds, whether the API's pods say what it runs, and writes them back
// once its Node is Ready again.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Pacing of the readiness reconcile: the pods are compared every
// readyCheck (from the pod informer's cache: no API call); while some
// disagree, the Node is read at most every nodeCheck, which doubles up to
// maxNodeCheck while the Node is not Ready or cannot be read (a long
// NotReady fault costs one read per node every maxNodeCheck, as a
// kubelet's status sync period). A pod whose write fails is written again
// after podRetry, doubling up to maxPodRetry while it keeps failing.
const (
	readyCheck   = time.Second
	nodeCheck    = 2 * time.Second
	maxNodeCheck = 10 * time.Second
	podRetry     = 2 * time.Second
	maxPodRetry  = time.Minute
)

// backoff paces the tries of one thing: the next is due at next; a failed
// one puts it off by wait, which doubles (up to a cap) while they fail.
type backoff struct {
	wait    time.Duration
	next    time.Time
	failing bool // the last try failed: a streak of failures is on
}

func (b backoff) due(now time.Time) bool { return !now.Before(b.next) }

// putOff puts the next try off by wait, doubling wait up to max.
func (b *backoff) putOff(now time.Time, max time.Duration) {
	b.next = now.Add(b.wait)
	b.wait = min(2*b.wait, max)
}

// readyPacing is the readiness reconcile's pacing: when it reads the Node,
// when it writes each stale pod, and which failures it logs (the first of
// each streak). Its methods decide from the time they are given; the
// reconcile loop does the I/O.
type readyPacing struct {
	node   backoff
	writes map[types.UID]*backoff // the pods whose last write failed
}

func newReadyPacing() *readyPacing {
	return &readyPacing{node: backoff{wait: nodeCheck}, writes: map[types.UID]*backoff{}}
}

// due is the stale pods (all that disagree at now) whose write is due:
// those not backing off from a failed write. It forgets the pods no longer
// stale and, when none is, the Node's backoff.
func (r *readyPacing) due(now time.Time, stale []stalePod) []stalePod {
	if len(stale) == 0 {
		r.node = backoff{wait: nodeCheck}
	}
	keep := make(map[types.UID]*backoff, len(r.writes))
	var out []stalePod
	for _, s := range stale {
		b, ok := r.writes[s.api.UID]
		if ok {
			keep[s.api.UID] = b
		}
		if !ok || b.due(now) {
			out = append(out, s)
		}
	}
	r.writes = keep
	return out
}

// readNode says whether the Node may be read at now.
func (r *readyPacing) readNode(now time.Time) bool { return r.node.due(now) }

// nodeRead records the Node read at now: Ready (pods are written, the
// next read whenever some disagree), not Ready or failed (read again
// later, backing off). It reports whether to log err: the first failure of
// a streak.
func (r *readyPacing) nodeRead(now time.Time, ready bool, err error) (logErr bool) {
	switch {
	case err != nil:
		logErr = !r.node.failing
		r.node.failing = true
		r.node.putOff(now, maxNodeCheck)
	case !ready:
		r.node.failing = false
		r.node.putOff(now, maxNodeCheck)
	default:
		r.node = backoff{wait: nodeCheck}
	}
	return logErr
}

// wrote records pod uid's write at now; a failed one is tried again after
// its backoff. It reports whether to log err: the first failure of the
// pod's streak.
func (r *readyPacing) wrote(uid types.UID, now time.Time, err error) (logErr bool) {
	if err == nil {
		delete(r.writes, uid)
		return false
	}
	b, ok := r.writes[uid]
	if !ok {
		b = &backoff{wait: podRetry}
		r.writes[uid] = b
	}
	logErr = !b.failing
	b.failing = true
	b.putOff(now, maxPodRetry)
	return logErr
}

// stalePod is a pod whose status in the API disagrees with how it runs
// here, and the status to write back (podAPI.report's status: it applies
// to the pod as the API has it at the write, which may be newer than api).
type stalePod struct {
	api    *corev1.Pod
	status func(*corev1.Pod) corev1.PodStatus
}

// stale are the pods of api (the node's pods as the API has them) that run
// here and whose kubelet-owned conditions (Ready, ContainersReady, ...)
// say otherwise in the API, with the status a kubelet's status manager
// would write: the one it runs, merged onto the API's as mergeConditions
// does, a condition whose status changes moving its lastTransitionTime to
// now. A pod being deleted, in a terminal phase, or another pod under the
// name is left alone (the pod controller stops those): by stale, as api
// has it, and by the status written, as the API has it at the write (a
// conflict's re-read may find it stopped meanwhile: see readyAgain).
func (p *pods) stale(api []*corev1.Pod, now metav1.Time) []stalePod {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []stalePod
	for _, cur := range api {
		ours, ok := p.byKey[podKey(cur.Namespace, cur.Name)]
		if !ok || ours.UID != cur.UID || cur.DeletionTimestamp != nil ||
			cur.Status.Phase == corev1.PodSucceeded || cur.Status.Phase == corev1.PodFailed ||
			ours.Status.Phase != corev1.PodRunning || agrees(cur.Status.Conditions, ours.Status.Conditions) {
			continue
		}
		ran := *ours.Status.DeepCopy()
		uid := ours.UID
		out = append(out, stalePod{api: cur, status: func(api *corev1.Pod) corev1.PodStatus {
			return readyAgain(api, uid, ran, now)
		}})
	}
	return out
}

// agrees reports whether the API's conditions have each kubelet-owned
// condition of ours with the same status.
func agrees(api, ours []corev1.PodCondition) bool {
	for _, c := range ours {
		if !kubeletCondition(c.Type) {
			continue
		}
		if a := findPodCondition(api, c.Type); a == nil || a.Status != c.Status {
			return false
		}
	}
	return true
}

func findPodCondition(cs []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// readyAgain is the status the readiness reconcile writes onto api (the
// pod as the API has it at the write) for the pod uid running here with
// ran: rewritten, unless the pod stopped or is stopping in the API (a
// terminal phase, which is final; a deletionTimestamp: the pod controller
// stops it) or is another pod under the name, which keep api's status (no
// write), as terminated does.
func readyAgain(api *corev1.Pod, uid types.UID, ran corev1.PodStatus, now metav1.Time) corev1.PodStatus {
	if api.UID != uid || api.DeletionTimestamp != nil ||
		api.Status.Phase == corev1.PodSucceeded || api.Status.Phase == corev1.PodFailed {
		return api.Status
	}
	return rewritten(api.Status, ran, now)
}

// rewritten is ran (the status a pod runs with here) written over api (the
// status the API has): the kubelet's conditions ours, each whose status
// changes with its lastTransitionTime at now, the others as the API has
// them.
func rewritten(api, ran corev1.PodStatus, now metav1.Time) corev1.PodStatus {
	out := *ran.DeepCopy()
	for i := range out.Conditions {
		c := &out.Conditions[i]
		if a := findPodCondition(api.Conditions, c.Type); a != nil && a.Status != c.Status {
			c.LastTransitionTime = now
		}
	}
	out.Conditions = mergeConditions(api.Conditions, out.Conditions)
	out.NominatedNodeName = api.NominatedNodeName
	return out
}

// reconcileReady keeps the readiness of the node's pods in the API true
// to what runs here until ctx is done: every readyCheck it compares the
// pods (list: the pod informer's cache) with what runs; where some
// disagree and the Node is Ready (ready reads it; while it is not, the
// node lifecycle controller would only mark them again), it writes them
// back, status only, through p.api.report, paced by readyPacing.
func (p *pods) reconcileReady(ctx context.Context, list func() []*corev1.Pod, ready func(context.Context) (bool, error), logf func(msg string, args ...any)) {
	tick, stop := p.ticker(readyCheck)
	defer stop()
	pace := newReadyPacing()
	for {
		p.reconcileOnce(ctx, pace, list, ready, logf)
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// reconcileOnce is one pass of reconcileReady.
func (p *pods) reconcileOnce(ctx context.Context, pace *readyPacing, list func() []*corev1.Pod, ready func(context.Context) (bool, error), logf func(msg string, args ...any)) {
	now := p.clock.Now()
	due := pace.due(now, p.stale(list(), metav1.NewTime(now)))
	if len(due) == 0 || !pace.readNode(now) {
		return
	}
	ok, err := ready(ctx)
	if pace.nodeRead(now, ok, err) {
		logf("not reconciling pod readiness until the node can be read (retrying with backoff)", "err", err, "pods", len(due))
	}
	if err != nil || !ok {
		return
	}
	for _, s := range due {
		err := p.api.report(ctx, s.api, s.status)
		if pace.wrote(s.api.UID, now, err) {
			logf("not reconciling pod readiness (retrying with backoff)", "pod", s.api.Namespace+"/"+s.api.Name, "err", err)
		}
	}
}

// ticker ticks every d by p's clock when it has timers (the agents'
// clock.WithTicker, as Run passes it), else by the real one.
func (p *pods) ticker(d time.Duration) (<-chan time.Time, func()) {
	if c, ok := p.clock.(clock.WithTicker); ok {
		t := c.NewTicker(d)
		return t.C(), t.Stop
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// nodeReady reports whether Node name's Ready condition is True in the
// API.
func nodeReady(nodes interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Node, error)
}, name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("reading node %s: %w", name, err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}
}
