package virtual

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes"
)

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "i"}},
			Containers:     []corev1.Container{{Name: "a", Image: "x"}, {Name: "b", Image: "y"}},
		},
	}
}

// TestPodsLifecycle drives the pod provider through create, update and
// delete and checks what it reports back.
func TestPodsLifecycle(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	var removed []string
	var reported []corev1.PodStatus
	p := newPods("vn", "10.0.0.1", podIPs(3), podAPI{
		report: func(_ context.Context, pod *corev1.Pod, status func(*corev1.Pod) corev1.PodStatus) error {
			reported = append(reported, status(pod))
			return nil
		},
		remove: func(_ context.Context, pod *corev1.Pod) error {
			removed = append(removed, pod.Name)
			return nil
		},
	}, clk)
	var sent []*corev1.Pod
	p.NotifyPods(context.Background(), func(pod *corev1.Pod) { sent = append(sent, pod) })
	ctx := context.Background()

	if err := p.CreatePod(ctx, testPod("p1")); err != nil {
		t.Fatal(err)
	}
	got, err := p.GetPod(ctx, "ns", "p1")
	if err != nil {
		t.Fatal(err)
	}
	st := got.Status
	if st.Phase != corev1.PodRunning || st.PodIP != "10.64.3.1" || st.HostIP != "10.0.0.1" {
		t.Errorf("phase %s podIP %s hostIP %s, want Running 10.64.3.1 10.0.0.1", st.Phase, st.PodIP, st.HostIP)
	}
	if len(st.ContainerStatuses) != 2 || st.ContainerStatuses[0].State.Running == nil || !st.ContainerStatuses[1].Ready {
		t.Errorf("container statuses %+v, want two running and ready", st.ContainerStatuses)
	}
	if len(st.InitContainerStatuses) != 1 || st.InitContainerStatuses[0].State.Terminated == nil {
		t.Errorf("init container statuses %+v, want one terminated", st.InitContainerStatuses)
	}
	if !slices.ContainsFunc(st.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue }) {
		t.Errorf("conditions %+v lack Ready=True", st.Conditions)
	}
	if len(sent) != 1 || sent[0].Status.Phase != corev1.PodRunning {
		t.Fatalf("notified %d pods, want one Running", len(sent))
	}

	upd := testPod("p1")
	upd.Spec.ActiveDeadlineSeconds = new(int64)
	if err := p.UpdatePod(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.GetPod(ctx, "ns", "p1"); got.Spec.ActiveDeadlineSeconds == nil || got.Status.Phase != corev1.PodRunning {
		t.Errorf("after UpdatePod: spec not taken or status lost: %+v", got)
	}
	if err := p.UpdatePod(ctx, testPod("nope")); !errdefs.IsNotFound(err) {
		t.Errorf("UpdatePod of an unknown pod = %v, want NotFound", err)
	}

	// A deletion in the API: stopped, reported terminated (with the
	// eviction's condition kept), removed.
	del := testPod("p1")
	del.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
	del.Status = sent[len(sent)-1].Status
	del.Status.Conditions = append(del.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"})
	clk.SetTime(clk.Now().Add(time.Minute))
	if err := p.DeletePod(ctx, del); err != nil {
		t.Fatal(err)
	}
	if len(reported) != 1 {
		t.Fatalf("reported %d statuses, want 1", len(reported))
	}
	last := reported[0]
	if last.Phase != corev1.PodSucceeded {
		t.Errorf("phase after delete %s, want Succeeded", last.Phase)
	}
	if !slices.ContainsFunc(last.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue
	}) {
		t.Errorf("conditions after delete %+v lack the API's DisruptionTarget", last.Conditions)
	}
	for _, cs := range last.ContainerStatuses {
		if cs.State.Terminated == nil || cs.Ready || cs.State.Terminated.FinishedAt.Time != clk.Now() {
			t.Errorf("container %s after delete: %+v, want terminated at %v and not ready", cs.Name, cs.State, clk.Now())
		}
	}
	if !slices.Equal(removed, []string{"p1"}) {
		t.Errorf("removed %v, want [p1]", removed)
	}
	if _, err := p.GetPod(ctx, "ns", "p1"); !errdefs.IsNotFound(err) {
		t.Errorf("GetPod after delete = %v, want NotFound", err)
	}
	if pods, _ := p.GetPods(ctx); len(pods) != 0 {
		t.Errorf("GetPods after delete: %d pods, want 0", len(pods))
	}

	// Deleting a pod that is not running here but is being deleted in the
	// API (say, after a restart) still finishes the deletion.
	if err := p.DeletePod(ctx, del); err != nil {
		t.Errorf("DeletePod of a pod being deleted but not running: %v", err)
	}
	if len(removed) != 2 {
		t.Errorf("removed %v, want p1 twice", removed)
	}
	// A pod the API no longer has and we do not run: NotFound.
	if err := p.DeletePod(ctx, testPod("gone")); !errdefs.IsNotFound(err) {
		t.Errorf("DeletePod of an unknown pod = %v, want NotFound", err)
	}
}

func TestPodsRemoveError(t *testing.T) {
	p := newPods("vn", "10.0.0.1", podIPs(0), podAPI{
		report: func(context.Context, *corev1.Pod, func(*corev1.Pod) corev1.PodStatus) error { return nil },
		remove: func(context.Context, *corev1.Pod) error { return errors.New("boom") },
	}, clocktesting.NewFakePassiveClock(time.Now()))
	ctx := context.Background()
	if err := p.CreatePod(ctx, testPod("p")); err != nil {
		t.Fatal(err)
	}
	del := testPod("p")
	del.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if err := p.DeletePod(ctx, del); err == nil || err.Error() != "boom" {
		t.Errorf("DeletePod = %v, want the removal's error so the pod controller retries", err)
	}
}

func TestNamesAndAddresses(t *testing.T) {
	if got, want := Names("vnode-", 3), []string{"vnode-1", "vnode-2", "vnode-3"}; !slices.Equal(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
	tests := []struct {
		index int
		cidr  string
	}{{0, "10.64.0.0/24"}, {255, "10.64.255.0/24"}, {256, "10.65.0.0/24"}, {99, "10.64.99.0/24"}}
	for _, tt := range tests {
		if got := podCIDR(tt.index); got != tt.cidr {
			t.Errorf("podCIDR(%d) = %s, want %s", tt.index, got, tt.cidr)
		}
	}
	next := podIPs(1)
	var ips []string
	for range 256 {
		ips = append(ips, next())
	}
	if ips[0] != "10.64.1.1" || ips[253] != "10.64.1.254" || ips[254] != "10.64.1.1" {
		t.Errorf("pod IPs %v ... %v, want .1 to .254 round robin", ips[:2], ips[252:])
	}
}

func TestNewNode(t *testing.T) {
	tmpl := NodeTemplate{
		Labels: map[string]string{"team": "ml"},
		Taints: []corev1.Taint{{Key: "virtual", Effect: corev1.TaintEffectNoSchedule}},
	}
	n := tmpl.newNode("vnode-7", 6)
	if n.Labels[LabelVirtual] != "true" || n.Labels[corev1.LabelHostname] != "vnode-7" || n.Labels["team"] != "ml" || n.Labels[LabelType] != LabelTypeValue {
		t.Errorf("labels %v", n.Labels)
	}
	wantTaints := []corev1.Taint{{Key: "virtual", Effect: corev1.TaintEffectNoSchedule}, {Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	if !slices.EqualFunc(n.Spec.Taints, wantTaints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) }) {
		t.Errorf("taints %v, want %v", n.Spec.Taints, wantTaints)
	}
	if len(n.Status.Conditions) != 0 {
		t.Errorf("registered with conditions %v; the agent writes them", n.Status.Conditions)
	}
	// The virtual label cannot be overridden: it keeps the node out of a
	// real fleet's budget and guard.
	tmpl.Labels[LabelVirtual] = "false"
	if got := tmpl.newNode("vnode-8", 7).Labels[LabelVirtual]; got != "true" {
		t.Errorf("with --labels %s=false: label %q, want true", LabelVirtual, got)
	}
	if q := n.Status.Allocatable[corev1.ResourcePods]; q.String() != "110" {
		t.Errorf("allocatable pods %s, want 110", q.String())
	}
	if n.Status.Addresses[0].Address != "127.0.0.1" || n.Spec.PodCIDR != "10.64.6.0/24" {
		t.Errorf("address %v podCIDR %s", n.Status.Addresses, n.Spec.PodCIDR)
	}
}

// TestKubeletConditionSpecs checks the standard conditions' polarity: only
// Ready is True when healthy.
func TestKubeletConditionSpecs(t *testing.T) {
	want := map[corev1.NodeConditionType]corev1.ConditionStatus{
		corev1.NodeReady: corev1.ConditionTrue, corev1.NodeMemoryPressure: corev1.ConditionFalse,
		corev1.NodeDiskPressure: corev1.ConditionFalse, corev1.NodePIDPressure: corev1.ConditionFalse,
	}
	specs := KubeletConditionSpecs()
	if len(specs) != len(want) {
		t.Fatalf("%d specs, want %d", len(specs), len(want))
	}
	for _, s := range specs {
		r := s.Entry.Probe.Probe(context.Background())
		if got := agent.ConditionStatus(r.Status, s.HealthyStatus()); got != want[s.Condition] {
			t.Errorf("%s when healthy = %s, want %s", s.Condition, got, want[s.Condition])
		}
		if got := agent.ConditionStatus(probes.StatusProblem, s.HealthyStatus()); got == want[s.Condition] {
			t.Errorf("%s with a problem = %s, the healthy status", s.Condition, got)
		}
		if r.Reason == "" || r.Message == "" {
			t.Errorf("%s: empty reason or message %+v", s.Condition, r)
		}
	}
}
