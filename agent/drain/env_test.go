package drain_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/agent/drain"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/agent/virtual"
	taintsdrain "github.com/selftaint/selftaint/taints/drain"
	"github.com/selftaint/selftaint/taints/fleet"
)

// groupLabel puts each test's virtual nodes in a group of their own; its
// pods select the group, so tests sharing the control plane never place
// pods on each other's nodes.
const groupLabel = "selftaint.test/drain-group"

// virtualTaint is the taint every virtual node registers with; the test
// workloads tolerate it.
var virtualTaint = corev1.Taint{Key: fleet.VirtualLabel, Value: "true", Effect: corev1.TaintEffectNoSchedule}

const (
	waitTimeout  = 90 * time.Second
	pollInterval = 200 * time.Millisecond
)

// env is one test's world: virtual nodes of its own group, a namespace.
type env struct {
	t      testing.TB
	cp     *testcp.ControlPlane
	client kubernetes.Interface
	ns     string
	group  string
	logs   *testkit.LogBuffer
	logger *slog.Logger
}

// newEnv makes a namespace named after the test and runs virtual nodes
// group-<name> for each name, Ready and schedulable, until the test ends.
func newEnv(t testing.TB, capacityPods int, names ...string) *env {
	t.Helper()
	cp := shared.Get(t)
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	name = strings.Trim(name, "-")
	logs := &testkit.LogBuffer{}
	e := &env{t: t, cp: cp, client: cp.Client(), ns: name, group: name, logs: logs,
		logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if _, err := e.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", e.ns, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	nodes := make([]string, len(names))
	for i, n := range names {
		nodes[i] = e.node(n)
	}
	capacity := virtual.DefaultCapacity()
	if capacityPods > 0 {
		capacity[corev1.ResourcePods] = *resource.NewQuantity(int64(capacityPods), resource.DecimalSI)
	}
	opts := virtual.Options{
		Names:           nodes,
		Core:            e.client.CoreV1(),
		Leases:          e.client.CoordinationV1(),
		Template:        virtual.NodeTemplate{Labels: map[string]string{groupLabel: e.group}, Taints: []corev1.Taint{virtualTaint}, Capacity: capacity},
		PodSyncWorkers:  8,
		HeartbeatPeriod: time.Minute,
		DeleteOnExit:    true,
		Logger:          e.logger.With("component", "virtual"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	var runErr error
	go func() {
		defer close(finished)
		runErr = virtual.Run(ctx, opts)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
			if runErr != nil && !errors.Is(runErr, context.Canceled) {
				t.Errorf("virtual.Run: %v", runErr)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("virtual.Run did not return within 60s of cancel")
		}
	})
	for _, n := range nodes {
		e.poll("node "+n+" Ready and schedulable", func() (bool, error) {
			select {
			case <-finished:
				t.Fatalf("virtual.Run returned: %v", runErr)
			default:
			}
			node, err := e.client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return nodeReady(node), nil
		})
	}
	return e
}

// nodeReady: n is Ready and its not-ready taint is gone.
func nodeReady(n *corev1.Node) bool {
	for _, tn := range n.Spec.Taints {
		if tn.Key == corev1.TaintNodeNotReady {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// node is the full name of the test's node n.
func (e *env) node(n string) string { return e.group + "-" + n }

// cordon sets node n's spec.unschedulable.
func (e *env) cordon(n string, on bool) {
	e.t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	if _, err := e.client.CoreV1().Nodes().Patch(context.Background(), e.node(n), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("cordoning %s (%t): %v", e.node(n), on, err)
	}
}

// podSpec runs in the test's group, tolerating the virtual nodes' taint.
func (e *env) podSpec(grace int64) corev1.PodSpec {
	return corev1.PodSpec{
		NodeSelector:                  map[string]string{groupLabel: e.group},
		Tolerations:                   []corev1.Toleration{{Key: virtualTaint.Key, Operator: corev1.TolerationOpEqual, Value: virtualTaint.Value, Effect: virtualTaint.Effect}},
		TerminationGracePeriodSeconds: &grace,
		Containers:                    []corev1.Container{{Name: "app", Image: "example.invalid/app"}},
	}
}

func (e *env) template(app string, grace int64) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: e.podSpec(grace)}
}

func selector(app string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

func (e *env) deployment(app string, replicas int32, mutate func(*corev1.PodSpec)) {
	e.t.Helper()
	tmpl := e.template(app, 30)
	if mutate != nil {
		mutate(&tmpl.Spec)
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: app},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: selector(app), Template: tmpl},
	}
	if _, err := e.client.AppsV1().Deployments(e.ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating deployment %s: %v", app, err)
	}
}

// pdb makes a PodDisruptionBudget app-pdb over app's pods and waits
// until the disruption controller has computed its status for want pods.
func (e *env) pdb(app string, minAvailable, maxUnavailable *intstr.IntOrString, pods int32) {
	e.t.Helper()
	p := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: app + "-pdb"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: selector(app), MinAvailable: minAvailable, MaxUnavailable: maxUnavailable},
	}
	if _, err := e.client.PolicyV1().PodDisruptionBudgets(e.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating PodDisruptionBudget %s: %v", p.Name, err)
	}
	e.poll("the status of PodDisruptionBudget "+p.Name, func() (bool, error) {
		got, err := e.client.PolicyV1().PodDisruptionBudgets(e.ns).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration >= got.Generation && got.Status.ExpectedPods == pods && got.Status.CurrentHealthy == pods, nil
	})
}

// poll waits up to waitTimeout for ok.
func (e *env) poll(what string, ok func() (bool, error)) {
	e.t.Helper()
	if err := testcp.Poll(context.Background(), waitTimeout, pollInterval, ok); err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// pods lists the namespace's pods matching sel ("" for all).
func (e *env) pods(sel string) []corev1.Pod {
	e.t.Helper()
	l, err := e.client.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		e.t.Fatalf("listing pods: %v", err)
	}
	return l.Items
}

// waitRunning waits until n pods of app run Ready on node (a short
// name), none terminating, and returns them.
func (e *env) waitRunning(app string, n int, node string) []corev1.Pod {
	e.t.Helper()
	var got []corev1.Pod
	e.poll(fmt.Sprintf("%d pods of %s running on %s", n, app, e.node(node)), func() (bool, error) {
		got = got[:0]
		for _, p := range e.pods(labels.Set{"app": app}.String()) {
			if p.Spec.NodeName == e.node(node) && p.DeletionTimestamp == nil && podReady(&p) {
				got = append(got, p)
			}
		}
		return len(got) == n, nil
	})
	return got
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// barePod makes a pod with no controller, bound to node (a short name).
func (e *env) barePod(name, node string, mutate func(*corev1.Pod)) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name, Labels: map[string]string{"app": name}}, Spec: e.podSpec(30)}
	p.Spec.NodeName = e.node(node)
	if mutate != nil {
		mutate(p)
	}
	got, err := e.client.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
	return got
}

func withEmptyDir(spec *corev1.PodSpec) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
}

// drainer drains node (a short name) for req, as client.
func (e *env) drainer(client kubernetes.Interface, node string, req fleet.MaintenanceRequest, c interface{ Now() time.Time }) *drain.Drainer {
	e.t.Helper()
	opts := drain.Options{Client: client, Node: e.node(node), Request: req, Logger: e.logger.With("component", "drain")}
	if c != nil {
		opts.Clock = clockOf{c}
	}
	d, err := drain.New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// pass runs one pass, failing the test if it errs.
func pass(t testing.TB, d *drain.Drainer, force bool) drain.Report {
	t.Helper()
	r, err := d.Pass(context.Background(), force)
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	return r
}

// passUntil runs passes, waiting between them as Report.Next says (at
// most a second, and on the real clock), until done holds of a report;
// it returns every report.
func passUntil(t testing.TB, d *drain.Drainer, force bool, what string, done func(drain.Report) bool) []drain.Report {
	t.Helper()
	var reports []drain.Report
	deadline := time.Now().Add(waitTimeout)
	for {
		r := pass(t, d, force)
		reports = append(reports, r)
		if done(r) {
			return reports
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d passes in %v, still not %s; last report %+v", len(reports), waitTimeout, what, r)
		}
		wait := time.Second
		if !r.Next.IsZero() {
			wait = min(max(time.Until(r.Next), 50*time.Millisecond), wait)
		}
		time.Sleep(wait)
	}
}

func drained(r drain.Report) bool { return r.Drained }

// clockOf makes a clock.PassiveClock of anything that tells the time
// (the fake clocks of k8s.io/utils are already one).
type clockOf struct{ c interface{ Now() time.Time } }

func (c clockOf) Now() time.Time                  { return c.c.Now() }
func (c clockOf) Since(t time.Time) time.Duration { return c.c.Now().Sub(t) }

func blockerKinds(bs []taintsdrain.Blocker) map[string]taintsdrain.Kind {
	out := map[string]taintsdrain.Kind{}
	for _, b := range bs {
		out[b.Pod] += b.Kind
	}
	return out
}

// requests counts a client's API requests, by verb ("get", "list",
// "watch", "create", "evict", "update", "patch", "delete") and by verb
// and path.
type requests struct {
	mu     sync.Mutex // guards the maps
	byVerb map[string]int
	byPath map[string]int
	took   map[string]time.Duration // by verb, in all
}

// counting returns a copy of rc whose requests r counts.
func counting(rc *rest.Config) (*rest.Config, *requests) {
	r := &requests{byVerb: map[string]int{}, byPath: map[string]int{}, took: map[string]time.Duration{}}
	rc = rest.CopyConfig(rc)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			v := verb(req)
			r.mu.Lock()
			r.byVerb[v]++
			r.byPath[v+" "+req.URL.Path]++
			r.mu.Unlock()
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			r.mu.Lock()
			r.took[v] += time.Since(start)
			r.mu.Unlock()
			return resp, err
		})
	})
	return rc, r
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// verb is the Kubernetes verb of an API request.
func verb(req *http.Request) string {
	segs := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		segs = segs[3:]
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			return "watch"
		case len(segs) <= 1:
			return "list"
		}
		return "get"
	case http.MethodPost:
		if len(segs) == 3 && segs[2] == "eviction" {
			return "evict"
		}
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(req.Method)
}

// evictions is how many evictions of pod (namespace/name) were asked for.
func (r *requests) evictions(pod string) int {
	ns, name, _ := strings.Cut(pod, "/")
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byPath[fmt.Sprintf("evict /api/v1/namespaces/%s/pods/%s/eviction", ns, name)]
}

// verbs is a copy of the counts by verb.
func (r *requests) verbs() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.byVerb))
	for k, v := range r.byVerb {
		out[k] = v
	}
	return out
}

// mean is the mean time of a request of verb v.
func (r *requests) mean(v string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byVerb[v] == 0 {
		return 0
	}
	return (r.took[v] / time.Duration(r.byVerb[v])).Round(time.Millisecond)
}

func (r *requests) total() int {
	n := 0
	for _, v := range r.verbs() {
		n += v
	}
	return n
}

// watchPods follows the namespace's pods matching sel from now on,
// calling seen with every version of each (deleted: the last one), until
// the returned stop is called.
func (e *env) watchPods(sel string, seen func(p *corev1.Pod, deleted bool)) (stop func()) {
	e.t.Helper()
	l, err := e.client.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		e.t.Fatalf("listing pods: %v", err)
	}
	for i := range l.Items {
		seen(&l.Items[i], false)
	}
	w, err := e.client.CoreV1().Pods(e.ns).Watch(context.Background(), metav1.ListOptions{LabelSelector: sel, ResourceVersion: l.ResourceVersion})
	if err != nil {
		e.t.Fatalf("watching pods: %v", err)
	}
	done := make(chan struct{})
	var stopping atomic.Bool
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				if !stopping.Load() {
					e.t.Errorf("the pod watch broke: %v", ev.Object)
				}
				return
			}
			seen(p, ev.Type == "DELETED")
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			stopping.Store(true)
			w.Stop()
			<-done
		})
	}
	e.t.Cleanup(stop)
	return stop
}
