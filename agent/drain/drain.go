// Package drain empties one cordoned node of its pods through the Eviction
// API, a pass at a time: the coordinator's leader runs one Drainer per
// draining node, calls Pass until the node is drained (or its deadline
// passes), and writes what each pass reports into the node's slot Lease
// and maintenance condition.
//
// It exists to keep the I/O of a drain (list the node's pods, evict them,
// delete them when a drain is forced) apart from its decisions, which are
// pure functions in taints/drain: which pods go, which are left, which are
// waited for, how a refused pod backs off, what a refusal says. A pass
// never waits for anything: it does what can be done now and says when
// another pass is worth making (Report.Next), so one goroutine per node
// costs nothing while a PodDisruptionBudget holds a pod.
//
// Evictions go through policy/v1 Eviction with the pod's own grace period
// and a UID precondition (a pod recreated under the same name elsewhere is
// never evicted by mistake); the API server enforces PodDisruptionBudgets,
// so the drainer needs no PDB RBAC and nothing breaks when a new leader
// takes over with a fresh Drainer. A forced pass DELETEs, again with the
// pod's grace period and a UID precondition, only the pods the Eviction
// API refused.
package drain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/selftaint/selftaint/taints/drain"
	"github.com/selftaint/selftaint/taints/fleet"
)

// Timing of passes.
const (
	// DefaultParallel is how many evictions a pass has in flight at once.
	DefaultParallel = 16
	// TerminatingRecheck is how soon another pass is useful while pods
	// terminate (kubectl drain polls each pod every second).
	TerminatingRecheck = time.Second
	// LeftRecheck is how soon another pass is useful when only pods the
	// request leaves remain (someone may delete them).
	LeftRecheck = 30 * time.Second
)

// Options configure a Drainer.
type Options struct {
	// Client talks to the API server: it needs nodes get, pods list,
	// pods/eviction create and, for a forced drain, pods delete.
	Client kubernetes.Interface
	// Node is the node to drain (cordoned already).
	Node string
	// Request is the maintenance request the drain serves: it says
	// whether pods with no controller and pods with emptyDir data go.
	Request fleet.MaintenanceRequest
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Parallel is how many evictions (or deletions) a pass has in flight
	// at once; default DefaultParallel.
	Parallel int
}

// Drainer drains one node. Its passes are serialized.
type Drainer struct {
	client   kubernetes.Interface
	node     string
	req      fleet.MaintenanceRequest
	clock    clock.PassiveClock
	log      *slog.Logger
	parallel int

	mu   sync.Mutex                   // serializes Pass; guards pods
	pods map[types.UID]drain.PodState // what was tried on pods still to go
}

// New returns a Drainer of opts.Node.
func New(opts Options) (*Drainer, error) {
	if opts.Client == nil {
		return nil, errors.New("drain: a client is required")
	}
	if opts.Node == "" {
		return nil, errors.New("drain: a node is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultParallel
	}
	return &Drainer{
		client:   opts.Client,
		node:     opts.Node,
		req:      opts.Request,
		clock:    opts.Clock,
		log:      opts.Logger.With("node", opts.Node),
		parallel: opts.Parallel,
		pods:     map[types.UID]drain.PodState{},
	}, nil
}

// Report says what one pass did and where the drain stands.
type Report struct {
	// Evicted is how many pods this pass evicted (or, forced, deleted).
	Evicted int
	// Results counts this pass's tries by how they came out: "evicted",
	// "refused" (by a PodDisruptionBudget), "failed", "deleted".
	Results map[string]int
	// Remaining is namespace/name of every pod still to go (to evict,
	// backing off, refused, left, terminating), sorted.
	Remaining []string
	// Pending is how many of Remaining are not yet evicted (all but the
	// terminating ones): the drain's total is what it evicted plus these
	// (see Progress).
	Pending int
	// Blockers say why pods have not gone: refusals, failures, and the
	// pods the request leaves.
	Blockers []drain.Blocker
	// Drained: nothing is left to go.
	Drained bool
	// OnlyLeft: what remains are only pods the request leaves (blockers
	// of kind noController or emptyDir).
	OnlyLeft bool
	// Next is when another pass is useful: the earliest end of a
	// back-off, TerminatingRecheck after the pass began while pods
	// terminate, LeftRecheck while only pods the request leaves remain;
	// zero once Drained. It may be past already (a long pass).
	Next time.Time
}

// Progress is the drain's progress after this pass, given its progress
// before it: what it evicted so far, out of that plus what is still to
// evict.
func (r Report) Progress(before fleet.Progress) fleet.Progress {
	evicted := before.Evicted + r.Evicted
	return fleet.Progress{Evicted: evicted, Total: evicted + r.Pending}
}

// Pass does one pass: it reads whether the node is Ready, lists its pods,
// evicts every pod that must go and may go now (and is not backing off)
// or, with force, deletes the pods the Eviction API refused, and reports
// where the drain stands. An error means the pass could not read the node
// or its pods, or ctx ended; a failed eviction is not an error but a
// Blocker.
func (d *Drainer) Pass(ctx context.Context, force bool) (Report, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ready, err := d.nodeReady(ctx)
	if err != nil {
		return Report{}, err
	}
	list, err := d.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", d.node).String(),
	})
	if err != nil {
		return Report{}, fmt.Errorf("drain %s: listing its pods: %w", d.node, err)
	}
	now := d.clock.Now()
	p := d.plan(list.Items, ready, force, now)
	done := d.run(ctx, p.jobs, force, now)
	if err := ctx.Err(); err != nil {
		return Report{}, fmt.Errorf("drain %s: %w", d.node, err)
	}
	return d.report(p, done, now), nil
}

// nodeReady reads the node's Ready condition.
func (d *Drainer) nodeReady(ctx context.Context) (bool, error) {
	n, err := d.client.CoreV1().Nodes().Get(ctx, d.node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("drain %s: reading the node: %w", d.node, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}

// job is one pod a pass tries to evict or delete.
type job struct {
	pod *corev1.Pod
	st  drain.PodState
	op  drain.Op
}

// tried is how a job came out.
type tried struct {
	job
	outcomes []drain.Outcome // one per op made (a forced pass may evict, then delete)
	done     bool            // the pod needs nothing more
}

// plan is what a pass found before it acted.
type plan struct {
	jobs        []job
	remaining   []string // pods still to go that no job tries this pass
	terminating bool     // some pod is terminating
	onlyLeft    bool     // every pod in remaining is left by the request
	pending     int      // pods in remaining that are not terminating
	blockers    []drain.Blocker
	next        time.Time // the earliest back-off end among pods not tried
}

// plan classifies the node's pods and forgets what it knew of pods that
// no longer need it.
func (d *Drainer) plan(pods []corev1.Pod, ready, force bool, now time.Time) plan {
	p := plan{onlyLeft: true}
	seen := make(map[types.UID]bool, len(pods))
	for i := range pods {
		pod := &pods[i]
		v := drain.Classify(pod, d.req, ready, now)
		name := drain.PodName(pod)
		switch v.Class {
		case drain.Ignored, drain.Gone:
			continue
		case drain.Terminating:
			p.remaining = append(p.remaining, name)
			p.terminating, p.onlyLeft = true, false
			continue
		case drain.Left:
			p.remaining = append(p.remaining, name)
			p.blockers = append(p.blockers, v.Blockers...)
			p.pending++
			continue
		}
		seen[pod.UID] = true
		st := d.pods[pod.UID]
		op := drain.NextOp(st, force, now)
		if op != drain.OpNone {
			p.jobs = append(p.jobs, job{pod: pod, st: st, op: op})
			continue
		}
		p.remaining = append(p.remaining, name)
		p.pending++
		p.onlyLeft = false
		if st.Blocker != nil {
			p.blockers = append(p.blockers, *st.Blocker)
		}
		p.next = earliest(p.next, st.Backoff.Until)
	}
	for uid := range d.pods {
		if !seen[uid] {
			delete(d.pods, uid)
		}
	}
	return p
}

// run makes the jobs' API calls, d.parallel at a time, pods of one
// controller spread apart (drain.Spread), and remembers how each came out.
func (d *Drainer) run(ctx context.Context, jobs []job, force bool, now time.Time) []tried {
	jobs = drain.Spread(jobs, func(j job) *corev1.Pod { return j.pod })
	out := make([]tried, len(jobs))
	sem := make(chan struct{}, d.parallel)
	var wg sync.WaitGroup
	for i, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i] = d.try(ctx, j, force, now)
		})
	}
	wg.Wait()
	for _, t := range out {
		if t.done {
			delete(d.pods, t.pod.UID)
		} else {
			d.pods[t.pod.UID] = t.st
		}
	}
	return out
}

// try evicts (or deletes) one pod; in a forced pass a pod the Eviction API
// refuses is deleted at once.
func (d *Drainer) try(ctx context.Context, j job, force bool, now time.Time) tried {
	t := tried{job: j}
	name := drain.PodName(j.pod)
	op := j.op
	for {
		err := d.do(ctx, op, j.pod)
		out, b := drain.ClassifyError(op, name, err)
		t.outcomes = append(t.outcomes, out)
		t.st, t.done = t.st.After(op, out, b, now)
		d.logTry(op, name, out, err)
		// At most one more op: a refused eviction's DELETE, forced.
		if t.done || op != drain.OpEvict || drain.NextOp(t.st, force, now) != drain.OpDelete {
			return t
		}
		op = drain.OpDelete
	}
}

// do makes op's request for pod.
func (d *Drainer) do(ctx context.Context, op drain.Op, pod *corev1.Pod) error {
	pre := metav1.NewUIDPreconditions(string(pod.UID))
	if op == drain.OpDelete {
		return d.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: pre})
	}
	return d.client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: pre},
	})
}

func (d *Drainer) logTry(op drain.Op, pod string, out drain.Outcome, err error) {
	switch out {
	case drain.Evicted, drain.Deleted:
		d.log.Info("drain: "+out.Result()+" pod", "pod", pod)
	case drain.Failed:
		d.log.Warn("drain: "+op.String()+" failed", "pod", pod, "err", err)
	default:
		d.log.Debug("drain: "+op.String(), "pod", pod, "result", out.Result(), "err", err)
	}
}

// report puts together what the pass found and did.
func (d *Drainer) report(p plan, done []tried, now time.Time) Report {
	r := Report{Results: map[string]int{}, Remaining: p.remaining, Pending: p.pending, Blockers: p.blockers}
	terminating, onlyLeft, next := p.terminating, p.onlyLeft, p.next
	for _, t := range done {
		for _, out := range t.outcomes {
			if out != drain.Vanished {
				r.Results[out.Result()]++
			}
			if out == drain.Evicted || out == drain.Deleted {
				r.Evicted++
			}
		}
		if slices.Contains(t.outcomes, drain.Vanished) {
			continue
		}
		r.Remaining = append(r.Remaining, drain.PodName(t.pod))
		onlyLeft = false
		if t.done {
			terminating = true // evicted or deleted: it terminates now
			continue
		}
		r.Pending++
		if t.st.Blocker != nil {
			r.Blockers = append(r.Blockers, *t.st.Blocker)
		}
		next = earliest(next, t.st.Backoff.Until)
	}
	slices.Sort(r.Remaining)
	slices.SortStableFunc(r.Blockers, func(a, b drain.Blocker) int { return cmp.Compare(a.Pod, b.Pod) })
	r.Drained = len(r.Remaining) == 0
	r.OnlyLeft = !r.Drained && onlyLeft
	switch {
	case r.Drained:
		next = time.Time{}
	case terminating:
		next = earliest(next, now.Add(TerminatingRecheck))
	case r.OnlyLeft:
		next = now.Add(LeftRecheck)
	}
	r.Next = next
	return r
}

// earliest is the earlier of a and b, a zero time being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
