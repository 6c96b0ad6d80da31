package virtual

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

var (
	regTaint = corev1.Taint{Key: "selftaint.io/virtual", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	gpuTaint = corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
)

func tolerating(tols ...corev1.Toleration) *corev1.Pod {
	p := testPod("p")
	p.Spec.Tolerations = tols
	return p
}

// TestOptedIn: a pod opts into virtual nodes by tolerating each
// registration taint by its key; a toleration of every taint is no opt-in.
func TestOptedIn(t *testing.T) {
	exists := corev1.TolerationOpExists
	for _, tc := range []struct {
		name         string
		pod          *corev1.Pod
		registration []corev1.Taint
		want         bool
		wantMissing  []string
	}{
		{"no registration taint: every pod", tolerating(), nil, true, nil},
		{"no toleration", tolerating(), []corev1.Taint{regTaint}, false, []string{regTaint.Key}},
		{"every taint (DaemonSets' operator: Exists)", tolerating(corev1.Toleration{Operator: exists}), []corev1.Taint{regTaint}, false, []string{regTaint.Key}},
		{"every NoSchedule taint", tolerating(corev1.Toleration{Operator: exists, Effect: corev1.TaintEffectNoSchedule}), []corev1.Taint{regTaint}, false, []string{regTaint.Key}},
		{"the key, Exists", tolerating(corev1.Toleration{Key: regTaint.Key, Operator: exists}), []corev1.Taint{regTaint}, true, nil},
		{"the key, Exists, NoSchedule", tolerating(corev1.Toleration{Key: regTaint.Key, Operator: exists, Effect: corev1.TaintEffectNoSchedule}), []corev1.Taint{regTaint}, true, nil},
		{"the key and value (Equal by default)", tolerating(corev1.Toleration{Key: regTaint.Key, Value: "true"}), []corev1.Taint{regTaint}, true, nil},
		{"the key, another value", tolerating(corev1.Toleration{Key: regTaint.Key, Value: "false"}), []corev1.Taint{regTaint}, false, []string{regTaint.Key}},
		{"the key, another effect", tolerating(corev1.Toleration{Key: regTaint.Key, Operator: exists, Effect: corev1.TaintEffectNoExecute}), []corev1.Taint{regTaint}, false, []string{regTaint.Key}},
		{"another key", tolerating(corev1.Toleration{Key: "selftaint.io/virtual-x", Operator: exists}), []corev1.Taint{regTaint}, false, []string{regTaint.Key}},
		{"a wildcard beside the key", tolerating(corev1.Toleration{Operator: exists}, corev1.Toleration{Key: regTaint.Key, Operator: exists}), []corev1.Taint{regTaint}, true, nil},
		{"two taints, the GPU one only (ExtendedResourceToleration's)", tolerating(corev1.Toleration{Key: gpuTaint.Key, Operator: exists, Effect: corev1.TaintEffectNoSchedule}),
			[]corev1.Taint{regTaint, gpuTaint}, false, []string{regTaint.Key}},
		{"two taints, both by key", tolerating(corev1.Toleration{Key: gpuTaint.Key, Operator: exists}, corev1.Toleration{Key: regTaint.Key, Operator: exists}),
			[]corev1.Taint{regTaint, gpuTaint}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, missing := OptedIn(tc.pod, tc.registration)
			var keys []string
			for _, m := range missing {
				keys = append(keys, m.Key)
			}
			if got != tc.want || !slices.Equal(keys, tc.wantMissing) {
				t.Errorf("OptedIn = %v, missing %v; want %v, missing %v", got, keys, tc.want, tc.wantMissing)
			}
		})
	}
}

// TestPodsRejectNotOptedIn: a pod that did not opt in is rejected as a
// kubelet rejects a pod at admission (Failed, a reason, no pod IP, nothing
// ready), stays Failed when deleted, and an opted-in pod runs.
func TestPodsRejectNotOptedIn(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	var reported []corev1.PodStatus
	p := newPods("vn", "10.0.0.1", podIPs(0), podAPI{
		report: func(_ context.Context, pod *corev1.Pod, status func(*corev1.Pod) corev1.PodStatus) error {
			reported = append(reported, status(pod))
			return nil
		},
		remove: func(context.Context, *corev1.Pod) error { return nil },
	}, clk)
	p.optIn = []corev1.Taint{regTaint}
	var sent []*corev1.Pod
	p.NotifyPods(context.Background(), func(pod *corev1.Pod) { sent = append(sent, pod) })
	ctx := context.Background()

	ds := tolerating(corev1.Toleration{Operator: corev1.TolerationOpExists})
	ds.Name = "ds"
	ds.Status.QOSClass = corev1.PodQOSBestEffort
	ds.Status.Conditions = []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionTrue, ""), cond("example.com/gate", corev1.ConditionFalse, "")}
	if err := p.CreatePod(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 {
		t.Fatalf("notified %d pods, want 1", len(sent))
	}
	st := sent[0].Status
	if st.Phase != corev1.PodFailed || st.Reason != ReasonNotOptedIn || st.PodIP != "" || len(st.PodIPs) != 0 || st.HostIP != "" ||
		len(st.ContainerStatuses) != 0 || st.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("rejected status %+v, want Failed %s, no pod IP, no host IP, no container, QOS class kept", st, ReasonNotOptedIn)
	}
	if want := "add the toleration {key: selftaint.io/virtual, operator: Exists}"; !strings.HasPrefix(st.Message, "Pod was rejected: ") || !strings.Contains(st.Message, want) {
		t.Errorf("message %q, want it to start as a kubelet's rejection and say %q", st.Message, want)
	}
	if got, want := condsString(st.Conditions), "example.com/gate=False()"; got != want {
		t.Errorf("conditions %s, want %s (none of the kubelet's: nothing Ready)", got, want)
	}
	if got, err := p.GetPod(ctx, "ns", "ds"); err != nil || got.Status.Phase != corev1.PodFailed {
		t.Errorf("GetPod of the rejected pod = %v, %v; want it Failed", got, err)
	}

	// Deleted (the DaemonSet controller deletes a failed pod): it stays
	// Failed, never Succeeded as a pod that ran.
	del := ds.DeepCopy()
	del.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
	if err := p.DeletePod(ctx, del); err != nil {
		t.Fatal(err)
	}
	if len(reported) != 1 || reported[0].Phase != corev1.PodFailed || reported[0].PodIP != "" {
		t.Errorf("reported on deletion %+v, want the rejection (Failed, no pod IP)", reported)
	}

	in := tolerating(corev1.Toleration{Key: regTaint.Key, Operator: corev1.TolerationOpExists})
	in.Name = "in"
	if err := p.CreatePod(ctx, in); err != nil {
		t.Fatal(err)
	}
	if st := sent[len(sent)-1].Status; st.Phase != corev1.PodRunning || st.PodIP == "" {
		t.Errorf("opted-in pod: phase %s pod IP %q, want Running with an IP", st.Phase, st.PodIP)
	}
}
