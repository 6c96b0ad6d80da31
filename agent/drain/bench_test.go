package drain_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	kubectldrain "k8s.io/kubectl/pkg/drain"

	"github.com/selftaint/selftaint/taints/fleet"
)

// The benchmark's workload on each drained node: benchDeployments
// Deployments of benchReplicas pods, 110 pods in all (a kubelet's default
// maxPods), each Deployment behind a PodDisruptionBudget of
// maxUnavailable 50%, so a drain is refused half the time at first and
// goes on as the moved pods become Ready elsewhere.
const (
	benchDeployments = 11
	benchReplicas    = 10
	benchPods        = benchDeployments * benchReplicas
	benchTimeout     = 5 * time.Minute
)

// BenchmarkDrainAgainstKubectl compares our drain with kubectl drain's,
// on one control plane. Four virtual nodes carry the same workload of 110
// pods each; two are drained by a Drainer (Pass in a loop until Drained,
// waiting as Report.Next says), two by kubectl drain's own library
// (k8s.io/kubectl/pkg/drain, as `kubectl drain --ignore-daemonsets
// --delete-emptydir-data` runs it: every pod evicted at once, 429s retried
// every 5 s, each pod then polled every second until it is gone), one
// after the other in the order kubectl, ours, ours, kubectl (so that
// neither gains from going first or last), each once the control plane
// is quiet after what came before. It reports the mean time each took to
// drain a node and the mean API requests each made, and their ratios
// (ours / kubectl's). Both clients have QPS 1000, burst 2000: the
// client's rate limit is not what is measured. One round is the
// measurement, so run it once:
//
//	KUBE_BIN_DIR=/work/main/bin CGO_ENABLED=1 go test -run '^$' -bench BenchmarkDrainAgainstKubectl -benchtime 1x -timeout 20m ./agent/drain/
func BenchmarkDrainAgainstKubectl(b *testing.B) {
	order := []string{"k1", "o1", "o2", "k2"} // k: kubectl drain, o: ours
	spares := []string{"spare1", "spare2"}
	e := newEnv(b, 300, append(slices.Clone(order), spares...)...)
	for _, n := range append(slices.Clone(order), spares...) {
		e.cordon(n, true)
	}
	for _, n := range order {
		e.cordon(n, false)
		e.fill(n, n)
		e.cordon(n, true)
	}
	for _, n := range spares {
		e.cordon(n, false)
	}

	b.ResetTimer()
	for range b.N {
		var ours, kubectl []drainRun
		for _, n := range order {
			e.settle()
			if strings.HasPrefix(n, "k") {
				kubectl = append(kubectl, e.drainKubectl(n))
			} else {
				ours = append(ours, e.drainOurs(n))
			}
			e.waitMoved(n)
		}
		o, k := meanRun(ours), meanRun(kubectl)
		b.ReportMetric(o.took.Seconds(), "ours-s")
		b.ReportMetric(k.took.Seconds(), "kubectl-s")
		b.ReportMetric(o.took.Seconds()/k.took.Seconds(), "time-ratio")
		b.ReportMetric(o.requests, "ours-requests")
		b.ReportMetric(k.requests, "kubectl-requests")
		b.ReportMetric(o.requests/k.requests, "requests-ratio")
		for _, r := range ours {
			if r.took > 2*time.Minute {
				b.Errorf("our drain took %v, more than 2 minutes", r.took)
			}
		}
	}
}

// drainRun is one drain of a node.
type drainRun struct {
	took     time.Duration
	requests float64
}

func meanRun(runs []drainRun) drainRun {
	var m drainRun
	for _, r := range runs {
		m.took += r.took / time.Duration(len(runs))
		m.requests += r.requests / float64(len(runs))
	}
	return m
}

// fill runs the benchmark's workload, Deployments prefix0 ... and their
// budgets, all labelled bench=prefix, on node (a short name), the only
// schedulable node of the group, and waits until every pod runs there
// and every budget's status counts them.
func (e *env) fill(prefix, node string) {
	e.t.Helper()
	ctx := context.Background()
	half := intstr.FromString("50%")
	for i := range benchDeployments {
		app := fmt.Sprintf("%s%d", prefix, i)
		tmpl := e.template(app, 30)
		tmpl.Labels["bench"] = prefix
		replicas := int32(benchReplicas)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: app},
			Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: selector(app), Template: tmpl},
		}
		if _, err := e.client.AppsV1().Deployments(e.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("creating deployment %s: %v", app, err)
		}
		p := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: app},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: selector(app), MaxUnavailable: &half},
		}
		if _, err := e.client.PolicyV1().PodDisruptionBudgets(e.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("creating PodDisruptionBudget %s: %v", app, err)
		}
	}
	e.pollWithin(benchTimeout, fmt.Sprintf("%d pods of bench=%s running on %s", benchPods, prefix, e.node(node)), func() (bool, error) {
		return e.countRunning("bench="+prefix, node) == benchPods, nil
	})
	e.pollWithin(benchTimeout, "the budgets of bench="+prefix+" to count their pods", func() (bool, error) {
		l, err := e.client.PolicyV1().PodDisruptionBudgets(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ok := 0
		for _, p := range l.Items {
			if p.Status.ObservedGeneration >= p.Generation && p.Status.CurrentHealthy == benchReplicas && p.Status.DisruptionsAllowed == benchReplicas/2 {
				ok++
			}
		}
		return ok == len(l.Items), nil
	})
}

// countRunning counts the pods matching sel running Ready on node (a
// short name).
func (e *env) countRunning(sel, node string) int {
	n := 0
	for _, p := range e.pods(sel) {
		if p.DeletionTimestamp == nil && podReady(&p) && p.Spec.NodeName == e.node(node) {
			n++
		}
	}
	return n
}

// waitMoved waits until the pods of bench=prefix run on the spare nodes,
// so that one drain's aftermath does not slow the next.
func (e *env) waitMoved(prefix string) {
	e.t.Helper()
	e.pollWithin(benchTimeout, "the pods of bench="+prefix+" running again on the spare nodes", func() (bool, error) {
		return e.countRunning("bench="+prefix, "spare1")+e.countRunning("bench="+prefix, "spare2") == benchPods, nil
	})
	if n := len(e.pods("bench="+prefix)) - benchPods; n != 0 {
		e.t.Fatalf("%d pods of bench=%s left besides those on the spare nodes", n, prefix)
	}
}

// settle waits until the control plane is quiet: the setup's or the last
// drain's aftermath (Events, the controllers' status writes, the virtual
// nodes' pod status) would otherwise slow the next drain, and whichever
// drain came first would lose by seconds. Quiet is fewer than 20 writes
// (etcd revisions) in 2 s.
func (e *env) settle() {
	e.t.Helper()
	revision := func() int64 {
		l, err := e.client.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{Limit: 1})
		if err != nil {
			e.t.Fatalf("reading the revision: %v", err)
		}
		rv, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
		if err != nil {
			e.t.Fatalf("resourceVersion %q: %v", l.ResourceVersion, err)
		}
		return rv
	}
	start := time.Now()
	last := revision()
	for time.Since(start) < benchTimeout {
		time.Sleep(2 * time.Second)
		rv := revision()
		if rv-last < 20 {
			e.t.Logf("settled in %v", time.Since(start).Round(time.Second))
			return
		}
		last = rv
	}
	e.t.Fatalf("the control plane did not settle in %v", benchTimeout)
}

func (e *env) pollWithin(d time.Duration, what string, ok func() (bool, error)) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		done, err := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("waiting %v for %s: timed out (last error: %v)", d, what, err)
		}
		time.Sleep(pollInterval)
	}
}

// drainOurs drains node with a Drainer, a pass at a time, until Drained.
func (e *env) drainOurs(node string) drainRun {
	e.t.Helper()
	rc, reqs := counting(e.cp.RESTConfig())
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	d := e.drainer(client, node, fleet.MaintenanceRequest{DeleteEmptyDirData: true}, nil)
	ctx := context.Background()
	start := time.Now()
	var timeline []string
	for passes := 1; ; passes++ {
		r, err := d.Pass(ctx, false)
		if err != nil {
			e.t.Fatalf("pass %d: %v", passes, err)
		}
		timeline = append(timeline, fmt.Sprintf("%.1fs: %v, %d remaining (%d to evict), next in %v",
			time.Since(start).Seconds(), r.Results, len(r.Remaining), r.Pending, time.Until(r.Next).Round(100*time.Millisecond)))
		if r.Drained {
			took := time.Since(start)
			e.t.Logf("ours drained %s in %v with %d requests %v (an eviction took %v on average); passes:\n%s",
				node, took.Round(time.Millisecond), reqs.total(), reqs.verbs(), reqs.mean("evict"), strings.Join(timeline, "\n"))
			return drainRun{took: took, requests: float64(reqs.total())}
		}
		if time.Since(start) > benchTimeout {
			e.t.Fatalf("not drained after %v, %d passes: %+v", benchTimeout, passes, r)
		}
		time.Sleep(max(time.Until(r.Next), 10*time.Millisecond))
	}
}

// drainKubectl drains node with kubectl drain's library, as `kubectl
// drain --ignore-daemonsets --delete-emptydir-data` would (the node is
// cordoned already).
func (e *env) drainKubectl(node string) drainRun {
	e.t.Helper()
	rc, reqs := counting(e.cp.RESTConfig())
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	h := &kubectldrain.Helper{
		Ctx:                  context.Background(),
		Client:               client,
		GracePeriodSeconds:   -1,
		IgnoreAllDaemonSets:  true,
		DeleteEmptyDirData:   true,
		Timeout:              benchTimeout,
		ChunkSize:            500,
		EvictErrorRetryDelay: 5 * time.Second, // kubectl drain's
		Out:                  io.Discard,
		ErrOut:               io.Discard,
	}
	var mu sync.Mutex
	var evicted, gone []float64 // seconds from the start
	start := time.Now()
	h.OnPodDeletionOrEvictionStarted = func(*corev1.Pod, bool) {
		mu.Lock()
		defer mu.Unlock()
		evicted = append(evicted, time.Since(start).Seconds())
	}
	h.OnPodDeletionOrEvictionFinished = func(_ *corev1.Pod, _ bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			gone = append(gone, time.Since(start).Seconds())
		}
	}
	if err := kubectldrain.RunNodeDrain(h, e.node(node)); err != nil {
		e.t.Fatalf("kubectl drain: %v", err)
	}
	took := time.Since(start)
	mu.Lock()
	e.t.Logf("kubectl drained %s in %v with %d requests %v (an eviction took %v on average); evictions tried at %s; pods gone at %s",
		node, took.Round(time.Millisecond), reqs.total(), reqs.verbs(), reqs.mean("evict"), histogram(evicted), histogram(gone))
	mu.Unlock()
	if n := len(e.podsOn(node)); n != 0 {
		e.t.Fatalf("kubectl drain returned with %d pods on the node", n)
	}
	return drainRun{took: took, requests: float64(reqs.total())}
}

// podsOn lists the pods bound to node (a short name).
func (e *env) podsOn(node string) []corev1.Pod {
	e.t.Helper()
	var out []corev1.Pod
	for _, p := range e.pods("") {
		if p.Spec.NodeName == e.node(node) {
			out = append(out, p)
		}
	}
	return out
}

// histogram counts times by the whole second: "0s:55 5s:18 ...".
func histogram(secs []float64) string {
	counts := map[int]int{}
	for _, s := range secs {
		counts[int(s)]++
	}
	keys := make([]int, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%ds:%d", k, counts[k])
	}
	return strings.Join(parts, " ")
}
