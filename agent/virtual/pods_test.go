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
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
)

func cond(t corev1.PodConditionType, s corev1.ConditionStatus, reason string) corev1.PodCondition {
	return corev1.PodCondition{Type: t, Status: s, Reason: reason}
}

func condsString(cs []corev1.PodCondition) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s=%s(%s) ", c.Type, c.Status, c.Reason)
	}
	return strings.TrimSpace(b.String())
}

// TestTerminated checks the terminal status a stopped pod reports: the
// kubelet's conditions ours, the others as the API has them.
func TestTerminated(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	ran := corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReady, corev1.ConditionTrue, ""), cond(corev1.ContainersReady, corev1.ConditionTrue, ""),
			cond(corev1.PodScheduled, corev1.ConditionTrue, ""),
			cond("stale.example.com/gate", corev1.ConditionTrue, "ours"), // a foreign condition we once copied
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	evicted := cond(corev1.DisruptionTarget, corev1.ConditionTrue, "EvictionByEvictionAPI")
	for _, tc := range []struct {
		name      string
		api       corev1.PodStatus
		wantPhase corev1.PodPhase
		want      string
	}{
		{
			name:      "evicted: DisruptionTarget kept, the kubelet's conditions ours",
			api:       corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse, "NodeNotReady"), evicted}},
			wantPhase: corev1.PodSucceeded,
			want:      "DisruptionTarget=True(EvictionByEvictionAPI) Ready=False(PodCompleted) ContainersReady=False(PodCompleted) PodScheduled=True()",
		},
		{
			name:      "deleted: no foreign condition, the stale copy dropped",
			api:       corev1.PodStatus{Phase: corev1.PodRunning},
			wantPhase: corev1.PodSucceeded,
			want:      "Ready=False(PodCompleted) ContainersReady=False(PodCompleted) PodScheduled=True()",
		},
		{
			name:      "already terminal: the API's status as it is",
			api:       corev1.PodStatus{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{evicted}},
			wantPhase: corev1.PodFailed,
			want:      "DisruptionTarget=True(EvictionByEvictionAPI)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := terminated(tc.api, ran, now)
			if got.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", got.Phase, tc.wantPhase)
			}
			if s := condsString(got.Conditions); s != tc.want {
				t.Errorf("conditions\n got %s\nwant %s", s, tc.want)
			}
			if tc.wantPhase == corev1.PodSucceeded {
				if cs := got.ContainerStatuses[0]; cs.Ready || cs.State.Terminated == nil || !cs.State.Terminated.FinishedAt.Equal(&now) {
					t.Errorf("container status %+v, want terminated at %v, not ready", cs, now)
				}
			}
		})
	}
	if ran.Phase != corev1.PodRunning || ran.Conditions[0].Status != corev1.ConditionTrue || ran.ContainerStatuses[0].State.Running == nil {
		t.Errorf("terminated changed the running status it was given: %+v", ran)
	}
}

// TestResend checks what a kubelet started again reports: its running
// pods, each with the conditions others set as the API has them, but not
// the pods the API deleted, is deleting, or replaced meanwhile.
func TestResend(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	var api []corev1.Pod
	p := newPods("vn", "10.0.0.1", podIPs(0), podAPI{list: func(context.Context) ([]corev1.Pod, error) { return api, nil }}, clk)
	ctx := context.Background()
	if err := p.CreatePod(ctx, testPod("plain")); err != nil {
		t.Fatal(err)
	}
	p.resend(ctx) // not notified yet: nothing sent, nothing read
	var sent []string
	p.NotifyPods(ctx, func(pod *corev1.Pod) {
		sent = append(sent, pod.Name+": "+condsString(pod.Status.Conditions))
	})
	for _, name := range []string{"gated", "deleting", "replaced", "gone"} {
		if err := p.CreatePod(ctx, testPod(name)); err != nil {
			t.Fatal(err)
		}
	}
	sent = nil
	for _, name := range []string{"plain", "gated", "deleting", "replaced"} {
		pod, err := p.GetPod(ctx, "ns", name)
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.Conditions[3].Status = corev1.ConditionFalse // Ready, as the node lifecycle controller marks it
		switch name {
		case "gated":
			pod.Status.Conditions = append(pod.Status.Conditions, cond("example.com/gate", corev1.ConditionTrue, "Open"))
		case "deleting":
			pod.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
		case "replaced":
			pod.UID = "another"
		}
		api = append(api, *pod)
	}
	p.resend(ctx)
	slices.Sort(sent)
	want := []string{
		"gated: example.com/gate=True(Open) PodReadyToStartContainers=True() Initialized=True() ContainersReady=True() Ready=True() PodScheduled=True()",
		"plain: PodReadyToStartContainers=True() Initialized=True() ContainersReady=True() Ready=True() PodScheduled=True()",
	}
	if !slices.Equal(sent, want) {
		t.Errorf("resent\n%s\nwant\n%s", strings.Join(sent, "\n"), strings.Join(want, "\n"))
	}
}

// TestEvictionKeepsDisruptionTarget evicts a virtual node's pods through
// the Eviction API on a real control plane and watches every version of
// each pod from then on: each keeps the DisruptionTarget condition the
// Eviction API set, the pod's terminal status (Succeeded) is among them,
// and the pod is gone at the end. One pod is held by a finalizer (as a
// Job's pods are) until its terminal status shows, so every status write
// of the virtual kubelet lands before the pod goes.
func TestEvictionKeepsDisruptionTarget(t *testing.T) {
	cp := testcp.Start(t, testcp.Options{ControllerManager: true})
	c := cp.Client()
	kc, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Names: []string{"evict-1"}, Core: kc.CoreV1(), Leases: kc.CoordinationV1(), DeleteOnExit: true, HeartbeatPeriod: 10 * time.Second,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
		got := logs.String()
		t.Logf("virtual node's log (warnings and errors):\n%s", got)
		if strings.Contains(got, `\n\t`) {
			t.Errorf("the virtual node's log has a stack trace")
		}
	})
	testkit.WaitNode(t, c, "evict-1", time.Minute, "Ready and schedulable", describeNode, serving)
	hold := "selftaint.io/test-hold"
	for _, tc := range []struct {
		name      string
		finalizer string
		grace     *int64 // the eviction's grace period
	}{
		{name: "evictee"},
		{name: "held", finalizer: hold},
		{name: "held-at-once", finalizer: hold, grace: ptr.To[int64](0)},
	} {
		t.Run(tc.name, func(t *testing.T) { evictAndWatch(t, c, tc.name, "evict-1", tc.finalizer, tc.grace) })
	}
}

// evictAndWatch runs pod name on node, evicts it (with grace period grace,
// if not nil) and checks every version of it from the eviction on; a
// finalizer holds the pod until it is reported Succeeded.
func evictAndWatch(t *testing.T, c kubernetes.Interface, name, node, finalizer string, grace *int64) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
	}
	if finalizer != "" {
		pod.Finalizers = []string{finalizer}
	}
	pods := c.CoreV1().Pods(metav1.NamespaceDefault)
	if _, err := pods.Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	running := waitPod(t, c, name, time.Minute, "running and ready", podReady)

	wctx, stopWatch := context.WithTimeout(t.Context(), 2*time.Minute)
	defer stopWatch()
	w, err := pods.Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: running.ResourceVersion,
	})
	if err != nil {
		t.Fatalf("watching the pod: %v", err)
	}
	defer w.Stop()
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name}}
	if grace != nil {
		ev.DeleteOptions = &metav1.DeleteOptions{GracePeriodSeconds: grace}
	}
	if err := pods.EvictV1(t.Context(), ev); err != nil {
		t.Fatalf("evicting the pod: %v", err)
	}
	checkEvicted(t, w, func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if _, err := pods.Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("removing the finalizer: %v", err)
		}
	})
}

// checkEvicted reads w, a pod's watch, until the pod is deleted: every
// version from the first with the Eviction API's DisruptionTarget on must
// have it, and one must be Succeeded; release removes the pod's finalizers
// once it is.
func checkEvicted(t *testing.T, w watch.Interface, release func()) {
	var (
		versions  []string
		evicted   bool // a version with DisruptionTarget was seen
		succeeded bool
		gone      bool
	)
	for e := range w.ResultChan() {
		p, ok := e.Object.(*corev1.Pod)
		if e.Type == watch.Error || !ok {
			t.Fatalf("watch error: %s %v", e.Type, apierrors.FromObject(e.Object))
		}
		versions = append(versions, fmt.Sprintf("%s %s phase=%s deleting=%t finalizers=%v %s", e.Type, p.ResourceVersion, p.Status.Phase, p.DeletionTimestamp != nil, p.Finalizers, condsString(p.Status.Conditions)))
		dt := podCondition(p, corev1.DisruptionTarget)
		marked := dt != nil && dt.Status == corev1.ConditionTrue && dt.Reason == "EvictionByEvictionAPI"
		if !evicted && !marked {
			continue // before the eviction
		}
		evicted = true
		if !marked {
			t.Errorf("version %s after the eviction lacks DisruptionTarget=True (EvictionByEvictionAPI)", p.ResourceVersion)
		}
		if e.Type == watch.Deleted {
			gone = true
			break
		}
		if p.Status.Phase == corev1.PodSucceeded && !succeeded && len(p.Finalizers) > 0 {
			release() // reported stopped: let it go
		}
		succeeded = succeeded || p.Status.Phase == corev1.PodSucceeded
	}
	t.Logf("pod versions:\n%s", strings.Join(versions, "\n"))
	if !gone {
		t.Fatalf("the watch ended before the pod was deleted")
	}
	if !succeeded {
		t.Errorf("no version reported the pod stopped (phase Succeeded)")
	}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestEvictionWhileStopped evicts a virtual node's pod while the node's
// kubelet is stopped, then resumes it: the kubelet started again writes its
// running pods' statuses back, but not over the eviction: every version of
// the pod from the eviction on keeps DisruptionTarget, one is Succeeded,
// and the pod is gone at the end.
func TestEvictionWhileStopped(t *testing.T) {
	cp := testcp.Start(t, testcp.Options{ControllerManager: true})
	c := cp.Client()
	kc, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	ctl := NewControl()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Names: []string{"stopped-1"}, Core: kc.CoreV1(), Leases: kc.CoordinationV1(), DeleteOnExit: true, HeartbeatPeriod: 10 * time.Second, Control: ctl,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
		t.Logf("virtual node's log (warnings and errors):\n%s", logs.String())
	})
	testkit.WaitNode(t, c, "stopped-1", time.Minute, "Ready and schedulable", describeNode, serving)
	bindPod(t, c, "evictee", "stopped-1")
	running := waitPod(t, c, "evictee", time.Minute, "running and ready", podReady)

	w, err := c.CoreV1().Pods(metav1.NamespaceDefault).Watch(t.Context(), metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", "evictee").String(),
		ResourceVersion: running.ResourceVersion,
		TimeoutSeconds:  ptr.To[int64](120),
	})
	if err != nil {
		t.Fatalf("watching the pod: %v", err)
	}
	defer w.Stop()
	if err := ctl.Stop("stopped-1"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "evictee"}}
	if err := c.CoreV1().Pods(metav1.NamespaceDefault).EvictV1(t.Context(), ev); err != nil {
		t.Fatalf("evicting the pod: %v", err)
	}
	waitPod(t, c, "evictee", time.Minute, "marked for deletion", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	if err := ctl.Resume("stopped-1"); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	checkEvicted(t, w, func() {})
}
