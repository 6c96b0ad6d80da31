package drill

// The recorder: informers on the drill's Pods, PodDisruptionBudgets,
// workloads and Nodes, and on the coordinator's guard ConfigMap, that keep
// every version the watches deliver, in the
// order seen, as a tdrill.Record for the verdicts; the latest state for the
// runner's waits; and a line in plain words for the live view each time
// something meaningful changes.

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// Scope is what a drill watches.
type Scope struct {
	// Namespaces hold the drill's pods, PodDisruptionBudgets and workloads
	// (one watch per kind per namespace); empty means every namespace.
	Namespaces []string
	// Nodes says which Nodes are the drill's (Nodes are watched cluster-wide
	// and filtered by it); nil means every Node.
	Nodes func(name string) bool
	// CoordinatorNamespace and GuardName name the disruption guard's
	// ConfigMap (the agents' config: coordinator.namespace and
	// coordinator.guard.name); the recorder watches that one ConfigMap
	// when GuardName is set.
	CoordinatorNamespace string
	GuardName            string
}

// Change is one line of the live view: a meaningful transition, said in
// plain words ("node gpu-1: cordoned").
type Change struct {
	Time time.Time
	Line string
}

// Recorder records every watched version of a drill's objects. Start it
// with StartRecorder; it records until its context ends or Stop.
type Recorder struct {
	clock     clock.Clock
	scope     Scope
	onChange  func(Change)
	cancel    context.CancelFunc
	factories []informers.SharedInformerFactory
	delivered chan struct{} // closed when the line deliverer has returned
	wake      chan struct{} // a line is pending (buffer of one)
	// handing is held while lines taken from pending are handed to
	// onChange: lines keep their order, and Flush returns once they are
	// handed on.
	handing sync.Mutex

	mu sync.Mutex // guards the fields below
	// rec holds Pods, PDBs, Nodes and Workloads in the order seen; pod
	// Owners are direct controllers until Record resolves them.
	rec tdrill.Record
	// synced: the initial lists are recorded; lines are said from then on.
	synced    bool
	pods      map[string]map[string]tdrill.PodVersion // namespace -> name -> latest (deleted: absent)
	pdbs      map[string]map[string]*pdbState         // namespace -> name -> state
	nodes     map[string]tdrill.NodeVersion
	workloads map[tdrill.WorkloadRef]tdrill.WorkloadVersion
	rsOwners  map[string]tdrill.WorkloadRef // "namespace/name" of a ReplicaSet -> its Deployment (kept after deletion)
	guard     *tdrill.GuardVersion          // the guard's latest version; nil before the first
	pending   []Change
	updated   chan struct{} // closed and replaced at each recorded version
}

// pdbState is a watched PodDisruptionBudget: its selector and status, and
// the last health version recorded.
type pdbState struct {
	health pdbHealth
	last   *tdrill.PDBVersion
}

// StartRecorder starts watching scope with client and returns once every
// watch has delivered its initial list to the recorder (those first
// versions are recorded; lines are said only for what changes after).
// onChange (may be nil) gets the live view's lines in order, one at a
// time (from the recorder's goroutine, or Flush's caller), never while the
// recorder's lock is held. It fails when ctx
// ends first, or when a watch is refused (forbidden, unauthorized).
func StartRecorder(ctx context.Context, client kubernetes.Interface, scope Scope, clk clock.Clock, onChange func(Change)) (*Recorder, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &Recorder{
		clock:     clk,
		scope:     scope,
		onChange:  onChange,
		cancel:    cancel,
		delivered: make(chan struct{}),
		wake:      make(chan struct{}, 1),
		pods:      map[string]map[string]tdrill.PodVersion{},
		pdbs:      map[string]map[string]*pdbState{},
		nodes:     map[string]tdrill.NodeVersion{},
		workloads: map[tdrill.WorkloadRef]tdrill.WorkloadVersion{},
		rsOwners:  map[string]tdrill.WorkloadRef{},
		updated:   make(chan struct{}),
	}
	refused := make(chan error, 1)
	synced, err := r.watch(client, refused)
	if err != nil {
		cancel()
		return nil, err
	}
	go r.deliver(ctx)
	for _, f := range r.factories {
		f.Start(ctx.Done())
	}
	if err := waitSynced(ctx, synced, refused); err != nil {
		r.Stop()
		return nil, err
	}
	r.mu.Lock()
	r.synced = true
	r.mu.Unlock()
	return r, nil
}

// Stop ends the watches and returns once the last line was delivered. It
// may be called more than once.
func (r *Recorder) Stop() {
	r.cancel()
	for _, f := range r.factories {
		f.Shutdown()
	}
	<-r.delivered
}

// watch makes the informers and registers the recorder's handlers; synced
// are the handlers' HasSynced.
func (r *Recorder) watch(client kubernetes.Interface, refused chan<- error) ([]cache.InformerSynced, error) {
	var synced []cache.InformerSynced
	add := func(what string, inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
		if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
				select {
				case refused <- fmt.Errorf("drill recorder: watching %s: %w", what, err):
				default:
				}
			}
		}); err != nil {
			return fmt.Errorf("drill recorder: watching %s: %w", what, err)
		}
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return fmt.Errorf("drill recorder: watching %s: %w", what, err)
		}
		synced = append(synced, reg.HasSynced)
		return nil
	}
	nodes := informers.NewSharedInformerFactory(client, 0)
	r.factories = append(r.factories, nodes)
	if err := add("nodes", nodes.Core().V1().Nodes().Informer(), handler(r.node)); err != nil {
		return nil, err
	}
	if r.scope.GuardName != "" {
		name := r.scope.GuardName
		f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(r.scope.CoordinatorNamespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}))
		r.factories = append(r.factories, f)
		what := fmt.Sprintf("the guard ConfigMap %s in %s", name, namespaceName(r.scope.CoordinatorNamespace))
		if err := add(what, f.Core().V1().ConfigMaps().Informer(), handler(r.guardMap)); err != nil {
			return nil, err
		}
	}
	namespaces := r.scope.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
		r.factories = append(r.factories, f)
		for _, w := range []struct {
			what string
			inf  cache.SharedIndexInformer
			h    cache.ResourceEventHandler
		}{
			{"pods", f.Core().V1().Pods().Informer(), handler(r.pod)},
			{"poddisruptionbudgets", f.Policy().V1().PodDisruptionBudgets().Informer(), handler(r.pdb)},
			{"deployments", f.Apps().V1().Deployments().Informer(), handler(r.workload)},
			{"statefulsets", f.Apps().V1().StatefulSets().Informer(), handler(r.workload)},
			{"replicasets", f.Apps().V1().ReplicaSets().Informer(), handler(r.workload)},
			{"daemonsets", f.Apps().V1().DaemonSets().Informer(), handler(r.workload)},
			{"jobs", f.Batch().V1().Jobs().Informer(), handler(r.workload)},
		} {
			if err := add(w.what+" in "+namespaceName(ns), w.inf, w.h); err != nil {
				return nil, err
			}
		}
	}
	return synced, nil
}

func namespaceName(ns string) string {
	if ns == metav1.NamespaceAll {
		return "all namespaces"
	}
	return "namespace " + ns
}

// handler calls on(obj, deleted) for every version a watch delivers: each
// add, each update that carries a new resourceVersion (a relist's update
// with the same version is not a new one), each delete (a tombstone's last
// known state).
func handler(on func(obj any, deleted bool)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { on(obj, false) },
		UpdateFunc: func(old, obj any) {
			if sameVersion(old, obj) {
				return
			}
			on(obj, false)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			on(obj, true)
		},
	}
}

func sameVersion(old, obj any) bool {
	a, errA := meta.Accessor(old)
	b, errB := meta.Accessor(obj)
	return errA == nil && errB == nil && a.GetResourceVersion() == b.GetResourceVersion()
}

// waitSynced waits for every handler to have seen its initial list.
func waitSynced(ctx context.Context, synced []cache.InformerSynced, refused <-chan error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		all := true
		for _, s := range synced {
			all = all && s()
		}
		if all {
			return nil
		}
		select {
		case err := <-refused:
			return err
		case <-ctx.Done():
			return fmt.Errorf("drill recorder: waiting for the watches' initial lists: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// deliver calls onChange with each pending line, in order, until ctx ends
// (and then the lines still pending).
func (r *Recorder) deliver(ctx context.Context) {
	defer close(r.delivered)
	for {
		done := false
		select {
		case <-ctx.Done():
			done = true
		case <-r.wake:
		}
		r.handOn()
		if done {
			return
		}
	}
}

// handOn gives onChange the lines pending, in order.
func (r *Recorder) handOn() {
	r.handing.Lock()
	defer r.handing.Unlock()
	r.mu.Lock()
	lines := r.pending
	r.pending = nil
	r.mu.Unlock()
	if r.onChange != nil {
		for _, c := range lines {
			r.onChange(c)
		}
	}
}

// Flush returns once every line said so far has been handed to onChange
// (from the calling goroutine, for those not yet taken).
func (r *Recorder) Flush() { r.handOn() }

// say queues lines for the live view (only once synced). r.mu is held.
func (r *Recorder) say(now time.Time, lines []string) {
	if !r.synced || len(lines) == 0 {
		return
	}
	for _, l := range lines {
		r.pending = append(r.pending, Change{Time: now, Line: l})
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// recorded wakes whoever waits on Updated. r.mu is held.
func (r *Recorder) recorded() {
	close(r.updated)
	r.updated = make(chan struct{})
}

// name is how lines name a namespaced object: without its namespace when
// the drill has one.
func (r *Recorder) name(ns, name string) string {
	if len(r.scope.Namespaces) == 1 {
		return name
	}
	return ns + "/" + name
}

func (r *Recorder) pod(obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	v := podVersion(pod)
	v.Time = r.clock.Now()
	v.Deleted = deleted
	r.mu.Lock()
	defer r.mu.Unlock()
	byName := r.pods[pod.Namespace]
	if byName == nil {
		byName = map[string]tdrill.PodVersion{}
		r.pods[pod.Namespace] = byName
	}
	prev, had := byName[pod.Name]
	if deleted {
		delete(byName, pod.Name)
	} else {
		byName[pod.Name] = v
	}
	r.rec.Pods = append(r.rec.Pods, v)
	var prevp *tdrill.PodVersion
	if had {
		prevp = &prev
	}
	r.say(v.Time, podLines(r.name(pod.Namespace, pod.Name), prevp, v))
	// Every PDB that selects the pod now, or did before this version.
	for pdbName, s := range r.pdbs[pod.Namespace] {
		if s.health.selector.Matches(labels.Set(v.Labels)) || (had && s.health.selector.Matches(labels.Set(prev.Labels))) {
			r.pdbVersion(pod.Namespace, pdbName, s, v.Time, pod.ResourceVersion, "pod "+pod.Namespace+"/"+pod.Name)
		}
	}
	r.recorded()
}

func (r *Recorder) pdb(obj any, deleted bool) {
	pdb, ok := obj.(*policyv1.PodDisruptionBudget)
	if !ok {
		return
	}
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	byName := r.pdbs[pdb.Namespace]
	if byName == nil {
		byName = map[string]*pdbState{}
		r.pdbs[pdb.Namespace] = byName
	}
	if deleted {
		delete(byName, pdb.Name)
		r.say(now, []string{fmt.Sprintf("PDB %s: deleted", r.name(pdb.Namespace, pdb.Name))})
		r.recorded()
		return
	}
	s := byName[pdb.Name]
	if s == nil {
		s = &pdbState{}
		byName[pdb.Name] = s
	}
	s.health = newPDBHealth(pdb)
	r.pdbVersion(pdb.Namespace, pdb.Name, s, now, pdb.ResourceVersion, "pdb")
	r.recorded()
}

// pdbVersion recounts a PDB's healthy pods and records the version when
// keepPDBVersion says so. r.mu is held.
func (r *Recorder) pdbVersion(ns, name string, s *pdbState, now time.Time, rv, cause string) {
	pods := make([]tdrill.PodVersion, 0, len(r.pods[ns]))
	for _, p := range r.pods[ns] {
		pods = append(pods, p)
	}
	v := tdrill.PDBVersion{
		Time:            now,
		Namespace:       ns,
		Name:            name,
		ResourceVersion: rv,
		Cause:           cause,
		Healthy:         healthyCount(s.health.selector, pods),
		Desired:         s.health.desired,
		Expected:        s.health.expected,
		Known:           s.health.known,
	}
	if !keepPDBVersion(s.last, v) {
		return
	}
	r.rec.PDBs = append(r.rec.PDBs, v)
	r.say(now, pdbLines(r.name(ns, name), s.last, v))
	s.last = &v
}

func (r *Recorder) node(obj any, deleted bool) {
	node, ok := obj.(*corev1.Node)
	if !ok || (r.scope.Nodes != nil && !r.scope.Nodes(node.Name)) {
		return
	}
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.nodes[node.Name]
	if deleted {
		delete(r.nodes, node.Name)
		r.say(now, []string{fmt.Sprintf("node %s: deleted", node.Name)})
		r.recorded()
		return
	}
	v := nodeVersion(node)
	v.Time = now
	r.nodes[node.Name] = v
	r.rec.Nodes = append(r.rec.Nodes, v)
	r.say(now, nodeLines(prev, v))
	r.recorded()
}

// guardMap records a version of the guard ConfigMap.
func (r *Recorder) guardMap(obj any, deleted bool) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != r.scope.GuardName {
		return
	}
	v := guardVersion(cm, deleted)
	v.Time = r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec.Guards = append(r.rec.Guards, v)
	r.say(v.Time, guardLines(r.guard, v))
	r.guard = &v
	r.recorded()
}

func (r *Recorder) workload(obj any, deleted bool) {
	v, ok := workloadVersion(obj)
	if !ok {
		return
	}
	v.Time = r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	top := true
	if rs, isRS := obj.(*appsv1.ReplicaSet); isRS {
		if d, owned := replicaSetOwner(rs); owned {
			r.rsOwners[rs.Namespace+"/"+rs.Name] = d
			top = false // its Deployment speaks for it
		}
	}
	name := r.name(v.Ref.Namespace, v.Ref.Name)
	if deleted {
		delete(r.workloads, v.Ref)
		if top {
			r.say(v.Time, []string{fmt.Sprintf("%s %s: deleted", v.Ref.Kind, name)})
		}
		r.recorded()
		return
	}
	prev, had := r.workloads[v.Ref]
	r.workloads[v.Ref] = v
	r.rec.Workloads = append(r.rec.Workloads, v)
	if top {
		var prevp *tdrill.WorkloadVersion
		if had {
			prevp = &prev
		}
		r.say(v.Time, workloadLines(name, prevp, v))
	}
	r.recorded()
}

// Record is a copy of what the recorder has seen so far: Pods, PDBs, Nodes,
// Workloads and Guards (Start, End, Steps and Predictions are the
// runner's). Pod
// owners are resolved to their top workload. The versions' maps and slices
// are shared: read them, do not change them.
func (r *Recorder) Record() tdrill.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	pods := make([]tdrill.PodVersion, len(r.rec.Pods))
	for i, p := range r.rec.Pods {
		p.Owner = resolveOwner(p.Owner, r.rsOwners)
		pods[i] = p
	}
	return tdrill.Record{
		Pods:      pods,
		PDBs:      append([]tdrill.PDBVersion(nil), r.rec.PDBs...),
		Nodes:     append([]tdrill.NodeVersion(nil), r.rec.Nodes...),
		Workloads: append([]tdrill.WorkloadVersion(nil), r.rec.Workloads...),
		Guards:    append([]tdrill.GuardVersion(nil), r.rec.Guards...),
	}
}

// Updated is closed at the next version the recorder records: a wait
// checks Node, Workload, Pod or PDB, and if not yet, waits on a fresh
// Updated (taken before checking).
func (r *Recorder) Updated() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.updated
}

// Node is the latest version of one of the drill's nodes.
func (r *Recorder) Node(name string) (tdrill.NodeVersion, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.nodes[name]
	return v, ok
}

// Workload is the latest version of a workload. An empty Namespace in ref
// is the drill's, when it has one.
func (r *Recorder) Workload(ref tdrill.WorkloadRef) (tdrill.WorkloadVersion, bool) {
	if ref.Namespace == "" && len(r.scope.Namespaces) == 1 {
		ref.Namespace = r.scope.Namespaces[0]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.workloads[ref]
	return v, ok
}

// Pod is the latest version of a pod that exists (its owner resolved).
func (r *Recorder) Pod(namespace, name string) (tdrill.PodVersion, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.pods[namespace][name]
	v.Owner = resolveOwner(v.Owner, r.rsOwners)
	return v, ok
}

// PDB is the last health version recorded for a PodDisruptionBudget that
// exists.
func (r *Recorder) PDB(namespace, name string) (tdrill.PDBVersion, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.pdbs[namespace][name]
	if !ok || s.last == nil {
		return tdrill.PDBVersion{}, false
	}
	return *s.last, true
}
