package main

// The harness of the drain e2e tests (drain_e2e_test.go): virtual nodes
// in groups of their own, the workloads on them, and a watch that sees
// every version of the virtual Nodes, the maintenance slot Leases and a
// namespace's pods, checking the maintenance pool and the
// PodDisruptionBudgets at each one.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints/fleet"
)

const (
	// e2eGroupLabel puts each drain test's virtual nodes in a group of
	// their own; its workloads select the group.
	e2eGroupLabel = "e2e.selftaint.io/group"
	// drainPool is maintenance.maxParallel in the drain tests' config.
	drainPool = 2
	// nodeGrace is kube-controller-manager's node-monitor-grace-period in
	// the drain tests: a virtual node whose process is killed is NotReady
	// this long after its last heartbeat; nodeLease is the virtual nodes'
	// Lease duration (renewed every quarter of it), well inside it, so a
	// loaded machine does not make a live node NotReady.
	nodeGrace = 20 * time.Second
	nodeLease = 8 * time.Second
	// e2eWait bounds each wait of the drain tests.
	e2eWait = 90 * time.Second
)

// virtualToleration tolerates the taint the drain tests' virtual nodes
// register with (--register-with-taints).
var virtualToleration = corev1.Toleration{Key: fleet.VirtualLabel, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}

// writeDrainConfig writes the config of the drain tests' virtual nodes
// and coordinators: a rule with action: drain on stormCond that ends
// maintenance when healthy, a maintenance pool of drainPool, a virtual
// fleet, and the disruption guard out of the way.
func writeDrainConfig(t *testing.T) string {
	t.Helper()
	return writeFile(t, fmt.Sprintf(`rules:
- condition: %s
  action: drain
  drain: {endWhenHealthy: true}
changeLimiter: {burst: 100, refill: 1s}
coordinator:
  namespace: %s
  fleet: virtual
  guard: {%s}
  maintenance: {maxParallel: %d, defaultDeadline: 1h}
`, stormCond, coordNS, guardOff, drainPool))
}

// drainEnv is the drain tests' control plane, config and coordinator.
type drainEnv struct {
	cp    *testcp.ControlPlane
	c     kubernetes.Interface
	cfg   string
	kc    string // the --kubeconfig flag for `selftaint drain`
	coord *coordProc
}

// nodes runs n virtual nodes prefix1..prefixN in a process of their own,
// in group (and with the extra labels, key=value), registered with the
// virtual taint, and waits until they are Ready for pods. When the test
// ends the process stops, deleting them, and the test waits until every
// one is gone (a node left behind, e.g. by a killed process, is deleted):
// the next test's pool must not count them.
func (e *drainEnv) nodes(t *testing.T, group, prefix string, n int, extra ...string) (*proc, []string) {
	t.Helper()
	names := nodeNames(prefix, n)
	t.Cleanup(func() { e.deleteNodes(t, names) })
	lbls := strings.Join(append([]string{e2eGroupLabel + "=" + group}, extra...), ",")
	p := startZone(t, e.cp, e.cfg, prefix, "", n, "--labels="+lbls, "--delete-on-exit",
		"--register-with-taints="+fleet.VirtualLabel+"=true:NoSchedule", "--lease-duration="+nodeLease.String())
	for _, name := range names {
		pollNode(t, e.c, name, e2eWait, "Ready for pods", readyForPods)
	}
	return p, names
}

func (e *drainEnv) deleteNodes(t *testing.T, names []string) {
	for _, n := range names {
		if err := e.c.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", n, err)
		}
	}
	err := testcp.Poll(context.Background(), e2eWait, 200*time.Millisecond, func() (bool, error) {
		for _, n := range names {
			if _, err := e.c.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("the test's nodes %v are not all gone: %v", names, err)
	}
}

// namespace makes a namespace for the test.
func (e *drainEnv) namespace(t *testing.T, name string) string {
	t.Helper()
	if _, err := e.c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// cordon sets node's spec.unschedulable as `kubectl cordon` does
// (someone else's cordon: no selftaint record).
func (e *drainEnv) cordon(t *testing.T, node string, on bool) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	if _, err := e.c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("cordoning %s (%t): %v", node, on, err)
	}
}

// label sets a label on node.
func (e *drainEnv) label(t *testing.T, node, key, value string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := e.c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling %s: %v", node, err)
	}
}

// only runs place (which creates workloads and waits for their pods) with
// every node of nodes but target cordoned, so the scheduler puts the pods
// on target; it uncordons what it cordoned afterwards.
func (e *drainEnv) only(t *testing.T, nodes []string, target string, place func()) {
	t.Helper()
	var cordoned []string
	for _, n := range nodes {
		if n != target && !nodeNow(t, e.c, n).Spec.Unschedulable {
			e.cordon(t, n, true)
			cordoned = append(cordoned, n)
		}
	}
	place()
	for _, n := range cordoned {
		e.cordon(t, n, false)
	}
}

// podSpec runs on group's nodes, tolerating their taint.
func podSpec(group string, grace int64) corev1.PodSpec {
	return corev1.PodSpec{
		NodeSelector:                  map[string]string{e2eGroupLabel: group},
		Tolerations:                   []corev1.Toleration{virtualToleration},
		TerminationGracePeriodSeconds: &grace,
		Containers:                    []corev1.Container{{Name: "app", Image: "example.invalid/app"}},
	}
}

// pinned is podSpec on node alone.
func pinned(group, node string, grace int64) corev1.PodSpec {
	s := podSpec(group, grace)
	s.NodeSelector[corev1.LabelHostname] = node
	return s
}

func appSelector(app string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

func appTemplate(app string, spec corev1.PodSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: spec}
}

func (e *drainEnv) deployment(t *testing.T, ns, app string, replicas int32, spec corev1.PodSpec) {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: appSelector(app), Template: appTemplate(app, spec)},
	}
	if _, err := e.c.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment %s: %v", app, err)
	}
}

func (e *drainEnv) statefulSet(t *testing.T, ns, app string, replicas int32, spec corev1.PodSpec) {
	t.Helper()
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, Selector: appSelector(app), Template: appTemplate(app, spec),
			ServiceName: app, PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
	if _, err := e.c.AppsV1().StatefulSets(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating statefulset %s: %v", app, err)
	}
}

func (e *drainEnv) daemonSet(t *testing.T, ns, app string, spec corev1.PodSpec) {
	t.Helper()
	d := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec:       appsv1.DaemonSetSpec{Selector: appSelector(app), Template: appTemplate(app, spec)},
	}
	if _, err := e.c.AppsV1().DaemonSets(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating daemonset %s: %v", app, err)
	}
}

// barePod makes a pod no controller manages, bound to node.
func (e *drainEnv) barePod(t *testing.T, ns, name, node string, spec corev1.PodSpec) {
	t.Helper()
	spec.NodeName = node
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}}, Spec: spec}
	if _, err := e.c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

// pdb makes the PodDisruptionBudget app-pdb over app's pods and waits
// until the disruption controller counts pods of them healthy.
func (e *drainEnv) pdb(t *testing.T, ns, app string, minAvailable, maxUnavailable *intstr.IntOrString, pods int32) {
	t.Helper()
	p := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app + "-pdb"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: appSelector(app), MinAvailable: minAvailable, MaxUnavailable: maxUnavailable},
	}
	if _, err := e.c.PolicyV1().PodDisruptionBudgets(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PodDisruptionBudget %s: %v", p.Name, err)
	}
	err := testcp.Poll(t.Context(), e2eWait, 200*time.Millisecond, func() (bool, error) {
		got, err := e.c.PolicyV1().PodDisruptionBudgets(ns).Get(t.Context(), p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration >= got.Generation && got.Status.ExpectedPods == pods && got.Status.CurrentHealthy == pods, nil
	})
	if err != nil {
		t.Fatalf("waiting for the status of PodDisruptionBudget %s/%s over %d healthy pods: %v", ns, p.Name, pods, err)
	}
}

// waitPods waits until exactly n of the pods matching sel in ns satisfy
// ok (none of them terminating), and returns them.
func (e *drainEnv) waitPods(t *testing.T, ns, sel string, n int, what string, ok func(*corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var got []corev1.Pod
	err := testcp.Poll(t.Context(), e2eWait, 200*time.Millisecond, func() (bool, error) {
		l, err := e.c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		got = got[:0]
		for i := range l.Items {
			if p := &l.Items[i]; p.DeletionTimestamp == nil && ok(p) {
				got = append(got, *p)
			}
		}
		return len(got) == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d pods %s %s in %s: %d are: %v", n, sel, what, ns, len(got), err)
	}
	return got
}

// readyOn: the pod runs Ready on node ("" any node).
func readyOn(node string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return podRunning(p) && (node == "" || p.Spec.NodeName == node) }
}

// readyOff: the pod runs Ready on a node other than node.
func readyOff(node string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return podRunning(p) && p.Spec.NodeName != node }
}

// stop interrupts the process (SIGINT) and waits for it to exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("interrupting %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30s of SIGINT", p.name)
	}
}

// nodeSeen is one Node version as the drain watch saw it: the parts that
// matter to maintenance.
type nodeSeen struct {
	at            time.Time
	rv            string
	gone          bool
	cond          corev1.NodeCondition // SelftaintMaintenance (zero: none)
	unschedulable bool
	cordonedFor   string // the CordonAnnotation ("" none)
	ready         bool
	request       string // the operator's request
	agentRequest  string // the agent's
}

func (s nodeSeen) same(o nodeSeen) bool {
	return s.gone == o.gone && s.cond.Status == o.cond.Status && s.cond.Reason == o.cond.Reason && s.cond.Message == o.cond.Message &&
		s.unschedulable == o.unschedulable && s.cordonedFor == o.cordonedFor && s.ready == o.ready &&
		s.request == o.request && s.agentRequest == o.agentRequest
}

// is reports whether the condition has status and reason.
func (s nodeSeen) is(status corev1.ConditionStatus, reason string) bool {
	return s.cond.Status == status && s.cond.Reason == reason
}

func (s nodeSeen) String() string {
	return fmt.Sprintf("%s rv=%s gone=%t ready=%t unschedulable=%t cordonedFor=%q request=%t agentRequest=%t %s %s/%s: %s",
		s.at.Format(time.StampMilli), s.rv, s.gone, s.ready, s.unschedulable, s.cordonedFor, s.request != "", s.agentRequest != "",
		fleet.MaintenanceCondition, s.cond.Status, s.cond.Reason, s.cond.Message)
}

// slotEvent is a slot taken (held by its node with a new acquireTime) or
// given back (holder cleared, or the Lease deleted), as the watch saw it.
type slotEvent struct {
	node     string
	acquired time.Time
	at       time.Time
}

// budgetTrack follows one budget's pods (label app) at every pod version.
type budgetTrack struct {
	app                      string
	replicas, maxUnavailable int
	full                     bool // all replicas were seen available
	worst                    int  // most unavailable at once, once full
	history                  []string
	broken                   []string
}

// drainWatch sees every version of the virtual Nodes, the maintenance slot
// Leases and one namespace's pods, each stream from its list's
// resourceVersion (re-established from the last version seen), and checks
// at each version: the maintenance pool (at most pool nodes unavailable
// through maintenance, counted as the coordinator counts them: a slot held
// and not Drained; else NotReady, or cordoned by someone else) and each
// budget (at most maxUnavailable of its pods not Ready, terminating or
// deleted).
type drainWatch struct {
	pool int

	mu       sync.Mutex // guards the fields below
	nodes    map[string]*corev1.Node
	slots    map[string]*coordv1.Lease // by node
	pods     map[types.UID]*corev1.Pod // live
	podLog   map[types.UID][]*corev1.Pod
	nodeLog  map[string][]nodeSeen
	starts   []slotEvent
	ends     []slotEvent
	budgets  []*budgetTrack
	worst    []string // the most nodes unavailable at once, and how
	overPool []string // the versions where the pool was broken
	versions int
	fatal    []error
}

// watchDrains starts a drainWatch on ns's pods until the test ends.
func watchDrains(t *testing.T, c kubernetes.Interface, ns string, pool int) *drainWatch {
	t.Helper()
	w := &drainWatch{pool: pool, nodes: map[string]*corev1.Node{}, slots: map[string]*coordv1.Lease{},
		pods: map[types.UID]*corev1.Pod{}, podLog: map[types.UID][]*corev1.Pod{}, nodeLog: map[string][]nodeSeen{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	now := time.Now()
	nodeSel := fleet.VirtualLabel + "=true"
	nl, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeSel})
	if err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	for i := range nl.Items {
		w.apply(&nl.Items[i], false, now)
	}
	slotSel := fleet.SlotLabel + "=true"
	ll, err := c.CoordinationV1().Leases(coordNS).List(ctx, metav1.ListOptions{LabelSelector: slotSel})
	if err != nil {
		t.Fatalf("listing slot Leases: %v", err)
	}
	for i := range ll.Items {
		w.apply(&ll.Items[i], false, now)
	}
	pl, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing pods: %v", err)
	}
	for i := range pl.Items {
		w.apply(&pl.Items[i], false, now)
	}
	w.follow(ctx, &wg, nl.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = nodeSel
		return c.CoreV1().Nodes().Watch(ctx, o)
	})
	w.follow(ctx, &wg, ll.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = slotSel
		return c.CoordinationV1().Leases(coordNS).Watch(ctx, o)
	})
	w.follow(ctx, &wg, pl.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return c.CoreV1().Pods(ns).Watch(ctx, o)
	})
	return w
}

// follow applies every event of a watch from rv until ctx ends.
func (w *drainWatch) follow(ctx context.Context, wg *sync.WaitGroup, rv string, watchFn cache.WatchFuncWithContext) {
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: watchFn})
	if err != nil {
		w.fail(err)
		return
	}
	wg.Go(func() {
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-rw.ResultChan():
				if !ok {
					if ctx.Err() == nil {
						w.fail(errors.New("a watch ended"))
					}
					return
				}
				switch ev.Type {
				case watch.Error:
					w.fail(fmt.Errorf("a watch failed: %w", apierrors.FromObject(ev.Object)))
					return
				case watch.Added, watch.Modified, watch.Deleted:
					w.apply(ev.Object, ev.Type == watch.Deleted, time.Now())
				}
			}
		}
	})
}

func (w *drainWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fatal = append(w.fatal, err)
}

// apply records one version of a Node, slot Lease or pod, and checks the
// pool and the budgets after it.
func (w *drainWatch) apply(obj runtime.Object, deleted bool, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.versions++
	switch o := obj.(type) {
	case *corev1.Node:
		w.applyNode(o, deleted, at)
	case *coordv1.Lease:
		w.applySlot(o, deleted, at)
	case *corev1.Pod:
		w.applyPod(o, deleted)
	default:
		return
	}
	w.checkPool(obj, at)
}

func (w *drainWatch) applyNode(n *corev1.Node, deleted bool, at time.Time) {
	s := nodeSeen{at: at, rv: n.ResourceVersion, gone: deleted, unschedulable: n.Spec.Unschedulable,
		cordonedFor: n.Annotations[fleet.CordonAnnotation], ready: conditionStatus(n, corev1.NodeReady) == corev1.ConditionTrue,
		request: n.Annotations[fleet.OperatorRequestAnnotation], agentRequest: n.Annotations[fleet.AgentRequestAnnotation]}
	if c := nodeCondition(n, fleet.MaintenanceCondition); c != nil {
		s.cond = *c
	}
	if deleted {
		delete(w.nodes, n.Name)
	} else {
		w.nodes[n.Name] = n
	}
	if log := w.nodeLog[n.Name]; len(log) == 0 || !log[len(log)-1].same(s) {
		w.nodeLog[n.Name] = append(log, s)
	}
}

func leaseHolder(l *coordv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func leaseAcquired(l *coordv1.Lease) time.Time {
	if l == nil || l.Spec.AcquireTime == nil {
		return time.Time{}
	}
	return l.Spec.AcquireTime.Time
}

func (w *drainWatch) applySlot(l *coordv1.Lease, deleted bool, at time.Time) {
	node := strings.TrimPrefix(l.Name, fleet.SlotPrefix)
	old := w.slots[node]
	heldBefore := leaseHolder(old) == node
	heldNow := !deleted && leaseHolder(l) == node
	switch {
	case heldNow && (!heldBefore || !leaseAcquired(old).Equal(leaseAcquired(l))):
		w.starts = append(w.starts, slotEvent{node: node, acquired: leaseAcquired(l), at: at})
	case heldBefore && !heldNow:
		w.ends = append(w.ends, slotEvent{node: node, acquired: leaseAcquired(old), at: at})
	}
	if deleted {
		delete(w.slots, node)
	} else {
		w.slots[node] = l
	}
}

func (w *drainWatch) applyPod(p *corev1.Pod, deleted bool) {
	if deleted {
		delete(w.pods, p.UID)
	} else {
		w.pods[p.UID] = p
	}
	w.podLog[p.UID] = append(w.podLog[p.UID], p)
	for _, b := range w.budgets {
		if p.Labels["app"] == b.app {
			w.judge(b, p, deleted)
		}
	}
}

// available is how many of app's pods are Ready and not terminating.
func (w *drainWatch) available(app string) int {
	n := 0
	for _, p := range w.pods {
		if p.Labels["app"] == app && p.DeletionTimestamp == nil && podRunning(p) {
			n++
		}
	}
	return n
}

func (w *drainWatch) judge(b *budgetTrack, p *corev1.Pod, deleted bool) {
	unavailable := max(0, b.replicas-w.available(b.app))
	if unavailable == 0 {
		b.full = true
	}
	line := fmt.Sprintf("%s %s uid %.8s node %q ready %t terminating %t deleted %t: %d unavailable",
		time.Now().Format(time.StampMilli), p.Name, p.UID, p.Spec.NodeName, podRunning(p), p.DeletionTimestamp != nil, deleted, unavailable)
	b.history = append(b.history, line)
	if !b.full {
		return
	}
	b.worst = max(b.worst, unavailable)
	if unavailable > b.maxUnavailable {
		b.broken = append(b.broken, line)
	}
}

// budget follows app's pods from now: replicas of them, at most
// maxUnavailable unavailable at once.
func (w *drainWatch) budget(app string, replicas, maxUnavailable int) *budgetTrack {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := &budgetTrack{app: app, replicas: replicas, maxUnavailable: maxUnavailable}
	b.full = w.available(app) >= replicas
	w.budgets = append(w.budgets, b)
	return b
}

// unavailable are the nodes the pool counts now, and how each counts.
func (w *drainWatch) unavailable() []string {
	var out []string
	for name, n := range w.nodes {
		if l := w.slots[name]; leaseHolder(l) == name {
			if phase := l.Annotations[fleet.SlotPhaseAnnotation]; phase != fleet.PhaseDrained {
				out = append(out, name+" (slot "+phase+")")
			}
			continue
		}
		switch {
		case conditionStatus(n, corev1.NodeReady) != corev1.ConditionTrue:
			out = append(out, name+" (NotReady)")
		case n.Spec.Unschedulable && n.Annotations[fleet.CordonAnnotation] == "":
			out = append(out, name+" (cordoned by someone else)")
		}
	}
	slices.Sort(out)
	return out
}

func (w *drainWatch) checkPool(obj runtime.Object, at time.Time) {
	u := w.unavailable()
	if len(u) > len(w.worst) {
		w.worst = u
	}
	if len(u) > w.pool && len(w.overPool) < 5 {
		m, _ := metaAccessor(obj)
		w.overPool = append(w.overPool, fmt.Sprintf("%s after %T %s rv %s: %d unavailable, pool %d: %v",
			at.Format(time.StampMilli), obj, m.GetName(), m.GetResourceVersion(), len(u), w.pool, u))
	}
}

// check fails the test if a watch failed, the pool was broken at any
// version or a budget at any pod version; it logs what the watch saw.
func (w *drainWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, err := range w.fatal {
		t.Errorf("the drain watch cannot vouch for every version: %v", err)
	}
	t.Logf("drain watch: %d versions seen; at most %d nodes unavailable through maintenance at once (pool %d): %v", w.versions, len(w.worst), w.pool, w.worst)
	for _, v := range w.overPool {
		t.Errorf("the maintenance pool was broken at %s", v)
	}
	for _, b := range w.budgets {
		t.Logf("budget over %s: at most %d of %d pods unavailable at once (maxUnavailable %d), %d pod versions", b.app, b.worst, b.replicas, b.maxUnavailable, len(b.history))
		if len(b.broken) > 0 {
			t.Errorf("the budget over %s was broken: %d versions with more than %d unavailable; what the watch saw:\n%s", b.app, len(b.broken), b.maxUnavailable, strings.Join(b.history, "\n"))
		}
		if b.worst == 0 {
			t.Errorf("the watch never saw a pod of %s unavailable: it did not follow a drain of them", b.app)
		}
	}
}

// last is the latest version of node seen (false if none).
func (w *drainWatch) last(node string) (nodeSeen, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.nodeLog[node]
	if len(log) == 0 {
		return nodeSeen{}, false
	}
	return log[len(log)-1], true
}

// timeline is every version of node seen, for failure messages.
func (w *drainWatch) timeline(node string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, s := range w.nodeLog[node] {
		b.WriteString("\n  " + s.String())
	}
	return b.String()
}

// first is the first version of node seen for which ok holds.
func (w *drainWatch) first(node string, ok func(nodeSeen) bool) (nodeSeen, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.nodeLog[node] {
		if ok(s) {
			return s, true
		}
	}
	return nodeSeen{}, false
}

// since are the versions of node seen at or after from.
func (w *drainWatch) since(node string, from time.Time) []nodeSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []nodeSeen
	for _, s := range w.nodeLog[node] {
		if !s.at.Before(from) {
			out = append(out, s)
		}
	}
	return out
}

// waitNode waits until the latest version of node seen satisfies ok, and
// returns it.
func (w *drainWatch) waitNode(t *testing.T, node string, timeout time.Duration, what string, ok func(nodeSeen) bool) nodeSeen {
	t.Helper()
	var got nodeSeen
	err := testcp.Poll(t.Context(), timeout, 50*time.Millisecond, func() (bool, error) {
		s, seen := w.last(node)
		got = s
		return seen && ok(s), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s to be %s: %v; its versions:%s", node, what, err, w.timeline(node))
	}
	return got
}

// waitSeen waits until a version of node seen satisfies ok, and returns
// the first that does.
func (w *drainWatch) waitSeen(t *testing.T, node string, timeout time.Duration, what string, ok func(nodeSeen) bool) nodeSeen {
	t.Helper()
	var got nodeSeen
	err := testcp.Poll(t.Context(), timeout, 50*time.Millisecond, func() (bool, error) {
		s, seen := w.first(node, ok)
		got = s
		return seen, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s to be %s: %v; its versions:%s", node, what, err, w.timeline(node))
	}
	return got
}

// startsOf are the slot starts the watch saw, in order; of node alone
// when node is not "".
func (w *drainWatch) startsOf(node string) []slotEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []slotEvent
	for _, s := range w.starts {
		if node == "" || s.node == node {
			out = append(out, s)
		}
	}
	return out
}

// endsOf are the slot ends of node the watch saw, in order.
func (w *drainWatch) endsOf(node string) []slotEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []slotEvent
	for _, s := range w.ends {
		if s.node == node {
			out = append(out, s)
		}
	}
	return out
}

// slot is node's slot Lease as last seen (nil if none).
func (w *drainWatch) slot(node string) *coordv1.Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.slots[node]
}

// podsWhere are the pods (every version of each) one of whose versions
// satisfies ok, by UID.
func (w *drainWatch) podsWhere(ok func(*corev1.Pod) bool) map[types.UID][]*corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[types.UID][]*corev1.Pod{}
	for uid, vs := range w.podLog {
		if slices.ContainsFunc(vs, ok) {
			out[uid] = slices.Clone(vs)
		}
	}
	return out
}

// evictedByAPI reports whether a version of a pod carries the condition
// the Eviction API sets before it deletes the pod.
func evictedByAPI(vs []*corev1.Pod) bool {
	return slices.ContainsFunc(vs, func(p *corev1.Pod) bool {
		return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.DisruptionTarget && c.Reason == "EvictionByEvictionAPI"
		})
	})
}

// terminating reports whether a version of a pod was being deleted.
func terminating(vs []*corev1.Pod) bool {
	return slices.ContainsFunc(vs, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// podNames are the pods' names, sorted.
func podNames(pods map[types.UID][]*corev1.Pod) []string {
	var out []string
	for _, vs := range pods {
		out = append(out, vs[0].Name)
	}
	slices.Sort(out)
	return out
}
