package virtual

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
)

func conditionOf(n *corev1.Node, t corev1.NodeConditionType) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func hasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == effect })
}

// serving: Ready True and neither the registration's not-ready taint nor
// the unreachable taint.
func serving(n *corev1.Node) bool {
	return conditionOf(n, corev1.NodeReady) == corev1.ConditionTrue &&
		!hasTaint(n, corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule) &&
		!hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule)
}

func unreachable(n *corev1.Node) bool {
	return conditionOf(n, corev1.NodeReady) == corev1.ConditionUnknown &&
		hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule) &&
		hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
}

func describeNode(n *corev1.Node) string {
	if n == nil {
		return "none read"
	}
	return "conditions " + conditionsString(n) + " taints " + taintsString(n.Spec.Taints)
}

func conditionsString(n *corev1.Node) string {
	s := ""
	for _, c := range n.Status.Conditions {
		s += string(c.Type) + "=" + string(c.Status) + " "
	}
	return s
}

func taintsString(ts []corev1.Taint) string {
	s := ""
	for _, t := range ts {
		s += t.ToString() + " "
	}
	return s
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return p.Status.Phase == corev1.PodRunning && c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// bindPod creates a pod bound to node (no scheduler), tolerating the
// unreachable taint so the taint-eviction controller leaves it there.
func bindPod(t *testing.T, c kubernetes.Interface, name, node string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Containers:  []corev1.Container{{Name: "c", Image: "example.invalid/app"}},
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := c.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

func waitPod(t *testing.T, c kubernetes.Interface, name string, timeout time.Duration, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := testcp.Poll(t.Context(), timeout, 100*time.Millisecond, func() (bool, error) {
		p, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s to be %s: %v; last status %+v", name, what, err, last)
	}
	return last
}

func leaseRenewed(t *testing.T, c kubernetes.Interface, node string) time.Time {
	t.Helper()
	l, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading %s's lease: %v", node, err)
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// watchServing watches every version of Node name from resourceVersion rv
// until stop is called, and returns the versions that were not serving.
func watchServing(t *testing.T, c kubernetes.Interface, name, rv string) (stop func() []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: rv,
	})
	if err != nil {
		t.Fatalf("watching node %s: %v", name, err)
	}
	var (
		mu       sync.Mutex
		bad      []string
		stopping bool // what comes after stop was called is the watch ending
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			mu.Lock()
			switch {
			case stopping:
			case ev.Type == watch.Error || !ok:
				bad = append(bad, fmt.Sprintf("watch error: %s %v", ev.Type, apierrors.FromObject(ev.Object)))
			case ev.Type == watch.Deleted || !serving(n):
				bad = append(bad, string(ev.Type)+" version "+n.ResourceVersion+": "+describeNode(n))
			}
			mu.Unlock()
		}
	})
	return func() []string {
		mu.Lock()
		stopping = true
		mu.Unlock()
		w.Stop()
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return bad
	}
}

// TestControlStopResume runs two virtual nodes in one Run on a real
// control plane with the node lifecycle controller: stopping one's kubelet
// makes the controller mark it Unknown and unreachable-tainted (its Lease
// no longer renewed, a pod bound to it meanwhile left Pending, its running
// pod marked not ready); resuming it brings Ready back, lifts the taint,
// starts the pending pod and makes the running one ready again. The other
// node is Ready in every version the API server holds throughout.
func TestControlStopResume(t *testing.T) {
	testcp.SkipIfShort(t, "waits for the node lifecycle controller's grace period")
	const grace = 20 * time.Second
	cp := testcp.Start(t, testcp.Options{ControllerManager: true, ControllerManagerArgs: []string{"--node-monitor-grace-period=" + grace.String()}})
	c := cp.Client()
	rc := cp.RESTConfig()
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	ctl := NewControl()
	if err := ctl.Stop("ctl-1"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Stop before Run = %v, want ErrNotRunning", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Names: []string{"ctl-1", "ctl-2"}, Core: kc.CoreV1(), Leases: kc.CoordinationV1(),
			LeaseDuration: grace, HeartbeatPeriod: grace / 2, DeleteOnExit: true, Control: ctl,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
	}()
	ran := false
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
		if t.Failed() || !ran {
			t.Logf("virtual nodes' log:\n%s", logs.String())
		}
	})

	for _, n := range []string{"ctl-1", "ctl-2"} {
		testkit.WaitNode(t, c, n, time.Minute, "Ready and schedulable", describeNode, serving)
	}
	other := testkit.GetNode(t, c, "ctl-2")
	stopWatch := watchServing(t, c, "ctl-2", other.ResourceVersion)
	bindPod(t, c, "before", "ctl-1")
	waitPod(t, c, "before", time.Minute, "running and ready", podReady)

	if err := ctl.Stop("nope"); err == nil {
		t.Errorf("Stop of a node the run does not serve succeeded")
	}
	stopping := time.Now()
	if err := ctl.Stop("ctl-1"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stoppedAt := time.Now()
	t.Logf("Stop returned in %s", stoppedAt.Sub(stopping).Round(time.Millisecond))
	if stopped, err := ctl.Stopped("ctl-1"); err != nil || !stopped {
		t.Errorf("Stopped = %v, %v after Stop, want true", stopped, err)
	}
	if err := ctl.Stop("ctl-1"); err != nil {
		t.Errorf("a second Stop: %v, want nil", err)
	}
	renewed := leaseRenewed(t, c, "ctl-1")
	bindPod(t, c, "meanwhile", "ctl-1")

	testkit.WaitNode(t, c, "ctl-1", grace+time.Minute, "Ready Unknown and the unreachable taints", describeNode, unreachable)
	t.Logf("ctl-1 unreachable %s after Stop", time.Since(stoppedAt).Round(time.Millisecond))
	if got := leaseRenewed(t, c, "ctl-1"); !got.Equal(renewed) {
		t.Errorf("ctl-1's lease was renewed after Stop: %v, then %v", renewed, got)
	}
	waitPod(t, c, "before", time.Minute, "marked not ready by the node lifecycle controller", func(p *corev1.Pod) bool { return !podReady(p) })
	if p := waitPod(t, c, "meanwhile", 0, "", func(*corev1.Pod) bool { return true }); p.Status.Phase != corev1.PodPending || p.Status.HostIP != "" {
		t.Errorf("pod bound to the stopped node: phase %s hostIP %q, want Pending and no host IP", p.Status.Phase, p.Status.HostIP)
	}

	if err := ctl.Resume("ctl-1"); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	resumedAt := time.Now()
	if stopped, err := ctl.Stopped("ctl-1"); err != nil || stopped {
		t.Errorf("Stopped = %v, %v after Resume, want false", stopped, err)
	}
	testkit.WaitNode(t, c, "ctl-1", time.Minute, "Ready again without the unreachable taint", describeNode, serving)
	t.Logf("ctl-1 serving again %s after Resume", time.Since(resumedAt).Round(time.Millisecond))
	waitPod(t, c, "meanwhile", time.Minute, "started after Resume", podReady)
	waitPod(t, c, "before", time.Minute, "ready again after Resume", podReady)
	if got := leaseRenewed(t, c, "ctl-1"); !got.After(renewed) {
		t.Errorf("ctl-1's lease not renewed after Resume: %v", got)
	}

	if bad := stopWatch(); len(bad) > 0 {
		t.Errorf("ctl-2 stopped serving while ctl-1 was stopped, in %d versions: %v", len(bad), bad)
	}
	ran = true

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
	done <- context.Canceled // for the cleanup
	if err := ctl.Resume("ctl-1"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Resume after Run = %v, want ErrNotRunning", err)
	}
}
