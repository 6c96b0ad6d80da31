package virtual

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
		st := s.status(s.api.Status)
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
