package virtual

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
)

// TestStale checks which pods the readiness reconcile writes back, and
// what: only the pods running here whose kubelet conditions the API has
// otherwise, with ours over the API's (a changed one's transition at now)
// and the conditions others set kept.
func TestStale(t *testing.T) {
	start := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	p := newPods("vn", "10.0.0.1", podIPs(0), podAPI{}, clk)
	ctx := context.Background()
	names := []string{"marked", "ready", "deleting", "replaced", "succeeded", "gated"}
	for _, name := range names {
		if err := p.CreatePod(ctx, testPod(name)); err != nil {
			t.Fatal(err)
		}
	}
	var api []*corev1.Pod
	for _, name := range append(names, "elsewhere") {
		pod, err := p.GetPod(ctx, "ns", name)
		if err != nil {
			pod = testPod(name) // bound here, not run here (yet)
		}
		if name != "ready" {
			// Ready False, as the node lifecycle controller marks it.
			for i := range pod.Status.Conditions {
				if pod.Status.Conditions[i].Type == corev1.PodReady {
					pod.Status.Conditions[i].Status = corev1.ConditionFalse
				}
			}
		}
		switch name {
		case "deleting":
			pod.DeletionTimestamp = &metav1.Time{Time: start}
		case "replaced":
			pod.UID = "another"
		case "succeeded":
			pod.Status.Phase = corev1.PodSucceeded
		case "gated":
			pod.Status.Conditions = append(pod.Status.Conditions, cond("example.com/gate", corev1.ConditionTrue, "Open"))
		}
		api = append(api, pod)
	}
	later := metav1.NewTime(start.Add(time.Minute))
	var got []string
	for _, s := range p.stale(api, later) {
		st := s.status(s.api)
		ready := findPodCondition(st.Conditions, corev1.PodReady)
		if ready == nil || !ready.LastTransitionTime.Equal(&later) {
			t.Errorf("pod %s: Ready %+v, want its transition at %v", s.api.Name, ready, later)
		}
		if cr := findPodCondition(st.Conditions, corev1.ContainersReady); cr == nil || !cr.LastTransitionTime.Time.Equal(start) {
			t.Errorf("pod %s: ContainersReady %+v, want its transition kept at %v (its status did not change)", s.api.Name, cr, start)
		}
		got = append(got, s.api.Name+": "+condsString(st.Conditions))
	}
	slices.Sort(got)
	want := []string{
		"gated: example.com/gate=True(Open) PodReadyToStartContainers=True() Initialized=True() ContainersReady=True() Ready=True() PodScheduled=True()",
		"marked: PodReadyToStartContainers=True() Initialized=True() ContainersReady=True() Ready=True() PodScheduled=True()",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rewritten\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRestartReadiness kills a virtual node's process (its Run ends and
// nothing of it is left) while two pods run there, waits for the node
// lifecycle controller to mark the node unreachable and the pods not
// ready, and starts a new process for the node: the pods are Ready again
// within seconds. The controller acts on its own view of the node, a
// monitor period late, so its marking can land after the restarted
// kubelet's first write of the pods (virtual-kubelet never writes a
// status twice): that marking is then made as the controller's
// MarkPodsNotReady makes it, Ready False, and the pods must be Ready again
// within seconds and stay so.
func TestRestartReadiness(t *testing.T) {
	testcp.SkipIfShort(t, "waits for the node lifecycle controller's grace period")
	const grace = 20 * time.Second
	cp := testcp.Start(t, testcp.Options{ControllerManager: true, ControllerManagerArgs: []string{"--node-monitor-grace-period=" + grace.String()}})
	c := cp.Client()
	kc, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	const node = "rst-1"
	pods := []string{"rst-a", "rst-b"}
	run := func(deleteOnExit bool) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Options{
				Names: []string{node}, Core: kc.CoreV1(), Leases: kc.CoordinationV1(),
				LeaseDuration: grace, HeartbeatPeriod: grace / 2, DeleteOnExit: deleteOnExit,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
		}()
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		}
		t.Cleanup(stop)
		return stop
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("virtual nodes' log:\n%s", logs.String())
		}
	})

	kill := run(false)
	testkit.WaitNode(t, c, node, time.Minute, "Ready and schedulable", describeNode, serving)
	for _, p := range pods {
		bindPod(t, c, p, node)
	}
	for _, p := range pods {
		waitPod(t, c, p, time.Minute, "running and ready", podReady)
	}
	kill()
	killedAt := time.Now()
	// Ready Unknown: the NoExecute taint may never come (a zone whose
	// every node is down is not tainted).
	testkit.WaitNode(t, c, node, grace+time.Minute, "Ready Unknown", describeNode, func(n *corev1.Node) bool {
		return conditionOf(n, corev1.NodeReady) == corev1.ConditionUnknown
	})
	for _, p := range pods {
		waitPod(t, c, p, time.Minute, "marked not ready by the node lifecycle controller", func(p *corev1.Pod) bool { return !podReady(p) })
	}
	t.Logf("node unreachable and its pods not ready %s after the kill", time.Since(killedAt).Round(time.Millisecond))

	run(true)
	restartedAt := time.Now()
	for _, p := range pods {
		waitPod(t, c, p, 30*time.Second, "ready again after the restart", podReady)
		t.Logf("pod %s ready %s after the restart", p, time.Since(restartedAt).Round(time.Millisecond))
	}
	testkit.WaitNode(t, c, node, time.Minute, "Ready again without the unreachable taint", describeNode, serving)
	t.Logf("node serving again %s after the restart", time.Since(restartedAt).Round(time.Millisecond))
	// The controller's late marking, as MarkPodsNotReady writes it.
	for _, p := range pods {
		markNotReady(t, c, p)
	}
	marked := time.Now()
	for _, p := range pods {
		waitPod(t, c, p, 30*time.Second, "ready again after the late marking", podReady)
		t.Logf("pod %s ready %s after it was marked not ready", p, time.Since(marked).Round(time.Millisecond))
	}
	time.Sleep(3 * time.Second)
	for _, p := range pods {
		if got := waitPod(t, c, p, 0, "", func(*corev1.Pod) bool { return true }); !podReady(got) {
			t.Errorf("pod %s not ready again 3s after being ready: %s", p, condsString(got.Status.Conditions))
		}
	}
}

// markNotReady sets pod name's Ready condition False, as the node
// lifecycle controller's MarkPodsNotReady does.
func markNotReady(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
				p.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		_, err = c.CoreV1().Pods(metav1.NamespaceDefault).UpdateStatus(t.Context(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("marking pod %s not ready: %v", name, err)
	}
}

// TestReconcileKeepsStoppedPods makes the readiness reconcile's write of
// a pod conflict (on a real control plane) with the pod stopping meanwhile,
// as a drain's eviction does just after a restart: the pod's terminal
// status is written (DeletePod's terminated), or the pod is being deleted,
// between the reconcile's read (the informer's cache) and its write. The
// write, redone on the pod read again, must leave the pod as it is: a
// terminal phase is final, and a pod being deleted is never Ready again.
func TestReconcileKeepsStoppedPods(t *testing.T) {
	cp := testcp.Start(t, testcp.Options{})
	c := cp.Client()
	const node = "recon-1"
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name string
		// stop stops the pod in the API between the reconcile's read and
		// its write.
		stop func(ctx context.Context, pods typedcorev1.PodInterface, ours *corev1.Pod) error
		want func(*corev1.Pod) string // what is wrong with the pod at the end
	}{
		{
			name: "succeeded",
			stop: func(ctx context.Context, pods typedcorev1.PodInterface, ours *corev1.Pod) error {
				cur, err := pods.Get(ctx, ours.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Status = terminated(cur.Status, ours.Status, metav1.NewTime(clk.Now()))
				_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
				return err
			},
			want: func(p *corev1.Pod) string {
				if p.Status.Phase != corev1.PodSucceeded || podReady(p) {
					return "want it Succeeded and not ready"
				}
				return ""
			},
		},
		{
			name: "deleting",
			stop: func(ctx context.Context, pods typedcorev1.PodInterface, ours *corev1.Pod) error {
				// The finalizer holds it in Terminating.
				return pods.Delete(ctx, ours.Name, metav1.DeleteOptions{})
			},
			want: func(p *corev1.Pod) string {
				if p.DeletionTimestamp == nil || podReady(p) {
					return "want it being deleted and not ready"
				}
				return ""
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			api := c.CoreV1().Pods(metav1.NamespaceDefault)
			created, err := api.Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "recon-" + tc.name, Finalizers: []string{"selftaint.io/test-hold"}},
				Spec: corev1.PodSpec{
					NodeName:   node,
					Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}},
					// Opted into virtual nodes: tolerates the registration
					// taint by its key.
					Tolerations: []corev1.Toleration{{Key: LabelVirtual, Operator: corev1.TolerationOpExists}},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// Let the pod go (the control plane is the test's own).
				_, _ = api.Patch(context.Background(), created.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
			})
			var stopped, conflicts int
			var pr *pods
			seam := beforeStatusWrite{PodsGetter: c.CoreV1(), before: func(ctx context.Context) error {
				stopped++
				if stopped > 1 {
					return nil
				}
				ours, err := pr.GetPod(ctx, metav1.NamespaceDefault, created.Name)
				if err != nil {
					return err
				}
				return tc.stop(ctx, api, ours)
			}, after: func(err error) {
				if apierrors.IsConflict(err) {
					conflicts++
				}
			}}
			pr = newPods(node, "10.0.0.1", podIPs(0), apiWith(seam, node), clk)
			if err := pr.CreatePod(ctx, created); err != nil {
				t.Fatal(err)
			}
			// The API has it running but marked not ready (the node
			// lifecycle controller, while the process was down).
			marked, err := pr.GetPod(ctx, metav1.NamespaceDefault, created.Name)
			if err != nil {
				t.Fatal(err)
			}
			marked.ResourceVersion = created.ResourceVersion
			for i := range marked.Status.Conditions {
				if marked.Status.Conditions[i].Type == corev1.PodReady {
					marked.Status.Conditions[i].Status = corev1.ConditionFalse
				}
			}
			cached, err := api.UpdateStatus(ctx, marked, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			clk.SetTime(clk.Now().Add(time.Minute))
			stale := pr.stale([]*corev1.Pod{cached}, metav1.NewTime(clk.Now()))
			if len(stale) != 1 {
				t.Fatalf("stale: %d pods, want the marked one", len(stale))
			}
			if err := pr.api.report(ctx, stale[0].api, stale[0].status); err != nil {
				t.Fatal(err)
			}
			if conflicts != 1 {
				t.Fatalf("%d conflicts on the reconcile's write, want 1 (the test's seam did not work)", conflicts)
			}
			got, err := api.Get(ctx, created.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if what := tc.want(got); what != "" {
				t.Errorf("pod after the reconcile's write: phase %s, deleting %v, %s; %s", got.Status.Phase, got.DeletionTimestamp != nil, condsString(got.Status.Conditions), what)
			}
		})
	}
}

// beforeStatusWrite is a pods client that calls before ahead of each
// status write and after with its result: a test's seam between a
// read-modify-write's read and its write.
type beforeStatusWrite struct {
	typedcorev1.PodsGetter
	before func(context.Context) error
	after  func(error)
}

func (b beforeStatusWrite) Pods(namespace string) typedcorev1.PodInterface {
	return statusWriteHook{PodInterface: b.PodsGetter.Pods(namespace), hook: b}
}

type statusWriteHook struct {
	typedcorev1.PodInterface
	hook beforeStatusWrite
}

func (s statusWriteHook) UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	if err := s.hook.before(ctx); err != nil {
		return nil, fmt.Errorf("the test's seam: %w", err)
	}
	out, err := s.PodInterface.UpdateStatus(ctx, pod, opts)
	s.hook.after(err)
	return out, err
}

// TestReconcilePacing drives the readiness reconcile's passes with a fake
// clock, a fake Node read and fake writes: the Node is read only while
// some pod is due to be written, and backs off (doubling, capped) while it
// is not Ready or cannot be read; a pod whose write fails is written again
// only after its backoff (doubling, capped), other pods are written
// meanwhile; each failure streak is logged once.
func TestReconcilePacing(t *testing.T) {
	type step struct {
		at       time.Duration // since the start
		stale    []string      // the pods that disagree
		node     string        // the Node read's answer: "ready", "notready", "error"
		failing  []string      // the pods whose write fails
		read     bool          // want the Node read
		written  []string      // want these pods written (tried), in order
		logLines int           // want this many Warn lines
	}
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "all agree: no reads", steps: []step{
			{at: 0, node: "ready"},
			{at: time.Second, node: "ready"},
		}},
		{name: "ready node: every stale pod written at once", steps: []step{
			{at: 0, stale: []string{"a", "b"}, node: "ready", read: true, written: []string{"a", "b"}},
			{at: time.Second, stale: []string{"a"}, node: "ready", read: true, written: []string{"a"}},
		}},
		{name: "not ready: reads back off 2s 4s 8s 10s 10s", steps: []step{
			{at: 0, stale: []string{"a"}, node: "notready", read: true},
			{at: time.Second, stale: []string{"a"}, node: "notready"},
			{at: 2 * time.Second, stale: []string{"a"}, node: "notready", read: true},
			{at: 5 * time.Second, stale: []string{"a"}, node: "notready"},
			{at: 6 * time.Second, stale: []string{"a"}, node: "notready", read: true},
			{at: 13 * time.Second, stale: []string{"a"}, node: "notready"},
			{at: 14 * time.Second, stale: []string{"a"}, node: "notready", read: true},
			{at: 23 * time.Second, stale: []string{"a"}, node: "notready"},
			{at: 24 * time.Second, stale: []string{"a"}, node: "notready", read: true},
			{at: 34 * time.Second, stale: []string{"a"}, node: "ready", read: true, written: []string{"a"}},
		}},
		{name: "node read errors: back off, logged once per streak", steps: []step{
			{at: 0, stale: []string{"a"}, node: "error", read: true, logLines: 1},
			{at: 2 * time.Second, stale: []string{"a"}, node: "error", read: true},
			{at: 5 * time.Second, stale: []string{"a"}, node: "error"},
			{at: 6 * time.Second, stale: []string{"a"}, node: "error", read: true},
			{at: 14 * time.Second, stale: []string{"a"}, node: "error", read: true},
			{at: 24 * time.Second, stale: []string{"a"}, node: "error", read: true},
			{at: 34 * time.Second, stale: []string{"a"}, node: "notready", read: true},
			// A new streak is logged again.
			{at: 44 * time.Second, stale: []string{"a"}, node: "error", read: true, logLines: 1},
		}},
		{name: "all agree again: the node's backoff starts over", steps: []step{
			{at: 0, stale: []string{"a"}, node: "notready", read: true},
			{at: 2 * time.Second, stale: []string{"a"}, node: "notready", read: true},
			{at: 3 * time.Second, node: "notready"},
			{at: 4 * time.Second, stale: []string{"a"}, node: "notready", read: true},
			{at: 5 * time.Second, stale: []string{"a"}, node: "notready"},
			{at: 6 * time.Second, stale: []string{"a"}, node: "ready", read: true, written: []string{"a"}},
		}},
		{name: "failed write: that pod backs off, logged once, others written", steps: []step{
			{at: 0, stale: []string{"a", "b"}, node: "ready", failing: []string{"a"}, read: true, written: []string{"a", "b"}, logLines: 1},
			{at: time.Second, stale: []string{"a", "c"}, node: "ready", failing: []string{"a"}, read: true, written: []string{"c"}},
			{at: 2 * time.Second, stale: []string{"a"}, node: "ready", failing: []string{"a"}, read: true, written: []string{"a"}},
			{at: 3 * time.Second, stale: []string{"a"}, node: "ready", failing: []string{"a"}},
			{at: 6 * time.Second, stale: []string{"a"}, node: "ready", failing: []string{"a"}, read: true, written: []string{"a"}},
			{at: 13 * time.Second, stale: []string{"a"}, node: "ready", failing: []string{"a"}},
			{at: 14 * time.Second, stale: []string{"a"}, node: "ready", read: true, written: []string{"a"}},
			// Written: a new failure streak starts at podRetry, logged.
			{at: 15 * time.Second, stale: []string{"a"}, node: "ready", failing: []string{"a"}, read: true, written: []string{"a"}, logLines: 1},
			{at: 16 * time.Second, stale: []string{"a"}, node: "ready", failing: []string{"a"}},
			{at: 17 * time.Second, stale: []string{"a"}, node: "ready", failing: []string{"a"}, read: true, written: []string{"a"}},
		}},
		{name: "failed writes back off up to a minute", steps: func() []step {
			var s []step
			at := time.Duration(0)
			for _, wait := range []time.Duration{2, 4, 8, 16, 32, 60, 60} {
				s = append(s, step{at: at, stale: []string{"a"}, node: "ready", failing: []string{"a"}, read: true, written: []string{"a"}, logLines: map[bool]int{true: 1}[at == 0]})
				s = append(s, step{at: at + wait*time.Second - time.Second, stale: []string{"a"}, node: "ready", failing: []string{"a"}})
				at += wait * time.Second
			}
			return s
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
			clk := clocktesting.NewFakePassiveClock(start)
			var cur step
			var written []string
			p := newPods("vn", "10.0.0.1", podIPs(0), podAPI{
				report: func(_ context.Context, pod *corev1.Pod, _ func(*corev1.Pod) corev1.PodStatus) error {
					written = append(written, pod.Name)
					if slices.Contains(cur.failing, pod.Name) {
						return errBoom
					}
					return nil
				},
			}, clk)
			for _, name := range []string{"a", "b", "c"} {
				if err := p.CreatePod(context.Background(), testPod(name)); err != nil {
					t.Fatal(err)
				}
			}
			list := func() []*corev1.Pod {
				var out []*corev1.Pod
				for _, name := range cur.stale {
					pod, err := p.GetPod(context.Background(), "ns", name)
					if err != nil {
						t.Fatal(err)
					}
					pod.Status.Conditions = slices.DeleteFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
					out = append(out, pod)
				}
				return out
			}
			var reads int
			ready := func(context.Context) (bool, error) {
				reads++
				switch cur.node {
				case "ready":
					return true, nil
				case "notready":
					return false, nil
				}
				return false, errBoom
			}
			var logLines int
			logf := func(string, ...any) { logLines++ }
			pace := newReadyPacing()
			for _, s := range tc.steps {
				cur, written, reads, logLines = s, nil, 0, 0
				clk.SetTime(start.Add(s.at))
				p.reconcileOnce(context.Background(), pace, list, ready, logf)
				if got := reads == 1; got != s.read || reads > 1 {
					t.Errorf("at %v: %d Node reads, want read %v", s.at, reads, s.read)
				}
				if !slices.Equal(written, s.written) {
					t.Errorf("at %v: wrote %v, want %v", s.at, written, s.written)
				}
				if logLines != s.logLines {
					t.Errorf("at %v: %d log lines, want %d", s.at, logLines, s.logLines)
				}
			}
		})
	}
}

// TestReadyAgain checks the status the readiness reconcile writes onto the
// pod as the API has it at the write: ours, unless that pod stopped, is
// being deleted or is another pod under the name (the API's kept: no
// write).
func TestReadyAgain(t *testing.T) {
	start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	p := newPods("vn", "10.0.0.1", podIPs(0), podAPI{}, clocktesting.NewFakePassiveClock(start))
	if err := p.CreatePod(context.Background(), testPod("a")); err != nil {
		t.Fatal(err)
	}
	ours, err := p.GetPod(context.Background(), "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	marked := ours.DeepCopy()
	marked.Status.Conditions = slices.DeleteFunc(marked.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
	marked.Status.Conditions = append(marked.Status.Conditions, cond(corev1.PodReady, corev1.ConditionFalse, "NodeNotReady"))
	for _, tc := range []struct {
		name      string
		mutate    func(*corev1.Pod)
		wantReady bool
	}{
		{name: "running", mutate: func(*corev1.Pod) {}, wantReady: true},
		{name: "succeeded", mutate: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }},
		{name: "failed", mutate: func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }},
		{name: "deleting", mutate: func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: start} }},
		{name: "replaced", mutate: func(p *corev1.Pod) { p.UID = "another" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := marked.DeepCopy()
			tc.mutate(api)
			got := readyAgain(api, ours.UID, ours.Status, metav1.NewTime(start.Add(time.Minute)))
			if tc.wantReady {
				if r := findPodCondition(got.Conditions, corev1.PodReady); r == nil || r.Status != corev1.ConditionTrue {
					t.Errorf("Ready %+v, want True", r)
				}
				return
			}
			if !apiequality.Semantic.DeepEqual(got, api.Status) {
				t.Errorf("status %s %s, want the API's kept: %s %s", got.Phase, condsString(got.Conditions), api.Status.Phase, condsString(api.Status.Conditions))
			}
		})
	}
}
