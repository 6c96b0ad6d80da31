package drain_test

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/taints/drain"
	"github.com/selftaint/selftaint/taints/fleet"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

type podOpt func(*corev1.Pod)

func pod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func owned(apiVersion, kind string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: "owner", Controller: ptr.To(true)})
	}
}

// ownerNotController: an ownerRef that is not the controller.
func ownerNotController(p *corev1.Pod) {
	p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs"})
}

var replicated = owned("apps/v1", "ReplicaSet")

func mirror(p *corev1.Pod) {
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
}

func emptyDir(p *corev1.Pod) {
	p.Spec.Volumes = append(p.Spec.Volumes,
		corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

// deleting: deletionTimestamp at t0+at, grace period grace seconds.
func deleting(at time.Duration, grace int64) podOpt {
	return func(p *corev1.Pod) {
		ts := metav1.NewTime(t0.Add(at))
		p.DeletionTimestamp = &ts
		p.DeletionGracePeriodSeconds = &grace
	}
}

func TestClassify(t *testing.T) {
	none := fleet.MaintenanceRequest{}
	both := fleet.MaintenanceRequest{EvictUnreplicated: true, DeleteEmptyDirData: true}
	noCtl := drain.Blocker{Pod: "ns/p", Kind: drain.KindNoController, Message: "the pod has no controller to recreate it (evictUnreplicated not set)"}
	noDir := drain.Blocker{Pod: "ns/p", Kind: drain.KindEmptyDir, Message: "the pod has emptyDir data that eviction would lose (deleteEmptyDirData not set)"}
	tests := []struct {
		name     string
		pod      *corev1.Pod
		req      fleet.MaintenanceRequest
		notReady bool
		now      time.Duration
		want     drain.Verdict
	}{
		{name: "replicated", pod: pod("p", replicated), want: drain.Verdict{Class: drain.Evict}},
		{name: "StatefulSet", pod: pod("p", owned("apps/v1", "StatefulSet")), want: drain.Verdict{Class: drain.Evict}},
		{name: "Job", pod: pod("p", owned("batch/v1", "Job")), want: drain.Verdict{Class: drain.Evict}},
		{name: "DaemonSet", pod: pod("p", owned("apps/v1", "DaemonSet")), want: drain.Verdict{Class: drain.Ignored}},
		{name: "DaemonSet of another version of apps", pod: pod("p", owned("apps/v1beta2", "DaemonSet")), want: drain.Verdict{Class: drain.Ignored}},
		{name: "DaemonSet of another group is not one", pod: pod("p", owned("example.com/v1", "DaemonSet")), want: drain.Verdict{Class: drain.Evict}},
		{name: "DaemonSet even with emptyDir, no request flags", pod: pod("p", owned("apps/v1", "DaemonSet"), emptyDir), want: drain.Verdict{Class: drain.Ignored}},
		{name: "DaemonSet even finished", pod: pod("p", owned("apps/v1", "DaemonSet"), phase(corev1.PodFailed)), want: drain.Verdict{Class: drain.Ignored}},
		{name: "DaemonSet even terminating", pod: pod("p", owned("apps/v1", "DaemonSet"), deleting(0, 30)), want: drain.Verdict{Class: drain.Ignored}},
		{name: "mirror", pod: pod("p", mirror), want: drain.Verdict{Class: drain.Ignored}},
		{name: "mirror with no controller, request allows nothing", pod: pod("p", mirror, emptyDir), want: drain.Verdict{Class: drain.Ignored}},
		{name: "bare", pod: pod("p"), want: drain.Verdict{Class: drain.Left, Blockers: []drain.Blocker{noCtl}}},
		{name: "owner that is not a controller is no controller", pod: pod("p", ownerNotController), want: drain.Verdict{Class: drain.Left, Blockers: []drain.Blocker{noCtl}}},
		{name: "bare, evictUnreplicated", pod: pod("p"), req: fleet.MaintenanceRequest{EvictUnreplicated: true}, want: drain.Verdict{Class: drain.Evict}},
		{name: "bare, only deleteEmptyDirData", pod: pod("p"), req: fleet.MaintenanceRequest{DeleteEmptyDirData: true}, want: drain.Verdict{Class: drain.Left, Blockers: []drain.Blocker{noCtl}}},
		{name: "emptyDir", pod: pod("p", replicated, emptyDir), want: drain.Verdict{Class: drain.Left, Blockers: []drain.Blocker{noDir}}},
		{name: "emptyDir, deleteEmptyDirData", pod: pod("p", replicated, emptyDir), req: fleet.MaintenanceRequest{DeleteEmptyDirData: true}, want: drain.Verdict{Class: drain.Evict}},
		{name: "emptyDir, only evictUnreplicated", pod: pod("p", replicated, emptyDir), req: fleet.MaintenanceRequest{EvictUnreplicated: true}, want: drain.Verdict{Class: drain.Left, Blockers: []drain.Blocker{noDir}}},
		{name: "bare with emptyDir: both reasons", pod: pod("p", emptyDir), want: drain.Verdict{Class: drain.Left, Blockers: []drain.Blocker{noCtl, noDir}}},
		{name: "bare with emptyDir, both allowed", pod: pod("p", emptyDir), req: both, want: drain.Verdict{Class: drain.Evict}},
		{name: "succeeded bare with emptyDir goes", pod: pod("p", emptyDir, phase(corev1.PodSucceeded)), req: none, want: drain.Verdict{Class: drain.Evict}},
		{name: "failed bare goes", pod: pod("p", phase(corev1.PodFailed)), want: drain.Verdict{Class: drain.Evict}},
		{name: "pending replicated goes", pod: pod("p", replicated, phase(corev1.PodPending)), want: drain.Verdict{Class: drain.Evict}},
		{name: "pending bare is left", pod: pod("p", phase(corev1.PodPending)), want: drain.Verdict{Class: drain.Left, Blockers: []drain.Blocker{noCtl}}},
		{name: "terminating", pod: pod("p", replicated, deleting(0, 30)), now: time.Hour, want: drain.Verdict{Class: drain.Terminating}},
		{name: "terminating bare is waited for, not left", pod: pod("p", emptyDir, deleting(0, 30)), want: drain.Verdict{Class: drain.Terminating}},
		{name: "NotReady, terminating within grace", pod: pod("p", replicated, deleting(0, 30)), notReady: true, now: 30 * time.Second, want: drain.Verdict{Class: drain.Terminating}},
		{name: "NotReady, terminating past deletionTimestamp+grace", pod: pod("p", replicated, deleting(0, 30)), notReady: true, now: 31 * time.Second, want: drain.Verdict{Class: drain.Gone}},
		{name: "NotReady, grace 0, past deletionTimestamp", pod: pod("p", replicated, deleting(0, 0)), notReady: true, now: time.Second, want: drain.Verdict{Class: drain.Gone}},
		{name: "NotReady, deletionTimestamp still ahead", pod: pod("p", replicated, deleting(10*time.Second, 10)), notReady: true, now: 15 * time.Second, want: drain.Verdict{Class: drain.Terminating}},
		{name: "NotReady, not terminating: evicted as usual", pod: pod("p", replicated), notReady: true, now: time.Hour, want: drain.Verdict{Class: drain.Evict}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := drain.Classify(tt.pod, tt.req, !tt.notReady, t0.Add(tt.now))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestClassString(t *testing.T) {
	for c, want := range map[drain.Class]string{drain.Ignored: "ignored", drain.Evict: "evict", drain.Terminating: "terminating", drain.Gone: "gone", drain.Left: "left", drain.Class(99): "unknown"} {
		if got := c.String(); got != want {
			t.Errorf("Class(%d).String() = %q, want %q", c, got, want)
		}
	}
}

func TestSpread(t *testing.T) {
	of := func(uid string) podOpt {
		return func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: uid, UID: types.UID(uid), Controller: ptr.To(true)}}
		}
	}
	tests := []struct {
		name string
		pods []*corev1.Pod
		want []string
	}{
		{name: "none"},
		{name: "one controller", pods: []*corev1.Pod{pod("a1", of("a")), pod("a2", of("a"))}, want: []string{"a1", "a2"}},
		{name: "interleaved, bare pods as one group", pods: []*corev1.Pod{
			pod("a1", of("a")), pod("a2", of("a")), pod("a3", of("a")), pod("b1", of("b")), pod("x1"), pod("b2", of("b")), pod("x2"), pod("c1", of("c")),
		}, want: []string{"a1", "b1", "x1", "c1", "a2", "b2", "x2", "a3"}},
		{name: "an owner that is not the controller does not group", pods: []*corev1.Pod{pod("o1", ownerNotController), pod("o2", ownerNotController), pod("a1", of("a"))},
			want: []string{"o1", "a1", "o2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range drain.Spread(tt.pods, func(p *corev1.Pod) *corev1.Pod { return p }) {
				got = append(got, p.Name)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
