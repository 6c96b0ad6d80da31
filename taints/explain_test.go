package taints

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// tol builds a toleration; a nil secs means no tolerationSeconds.
func tol(key string, op corev1.TolerationOperator, value string, effect corev1.TaintEffect, secs *int64) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: op, Value: value, Effect: effect, TolerationSeconds: secs}
}

func testPod(name string, tols ...corev1.Toleration) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       corev1.PodSpec{NodeName: "n1", Tolerations: tols},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func addedAt(t corev1.Taint, at time.Time) corev1.Taint {
	t.TimeAdded = &metav1.Time{Time: at}
	return t
}

func TestExplain(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const (
		ne   = corev1.TaintEffectNoExecute
		ns   = corev1.TaintEffectNoSchedule
		pns  = corev1.TaintEffectPreferNoSchedule
		eq   = corev1.TolerationOpEqual
		ex   = corev1.TolerationOpExists
		none = corev1.TaintEffect("")
	)
	gpu := taint("selftaint.io/gpu-lost", "", ne)
	mem := taint("selftaint.io/memory-pressure", "", ne)
	ded := taint("dedicated", "ml", ne)
	noSched := taint("selftaint.io/disk-pressure", "", ns)
	prefer := taint("selftaint.io/pid-pressure", "", pns)

	tests := []struct {
		name   string
		taints []corev1.Taint
		pod    corev1.Pod
		opts   ExplainOptions
		want   Eviction // Namespace and Name are filled in
	}{
		{
			name: "no taints: stays and schedules", pod: testPod("p"),
			want: Eviction{When: EvictNever, CanScheduleNew: true},
		},
		{
			name: "no toleration: immediately", taints: []corev1.Taint{gpu}, pod: testPod("p"),
			want: Eviction{When: EvictImmediately, At: now, Because: []corev1.Taint{gpu}, BlockedBy: []corev1.Taint{gpu}},
		},
		{
			name: "tolerationSeconds 20: after 20s from now", taints: []corev1.Taint{gpu},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, ptr.To[int64](20))),
			want: Eviction{When: EvictAfter, After: 20 * time.Second, At: now.Add(20 * time.Second), Because: []corev1.Taint{gpu}, CanScheduleNew: true},
		},
		{
			name: "tolerationSeconds 20 counts from the taint's timeAdded", taints: []corev1.Taint{addedAt(gpu, now.Add(-5*time.Second))},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, ptr.To[int64](20))),
			want: Eviction{When: EvictAfter, After: 20 * time.Second, At: now.Add(15 * time.Second), Because: []corev1.Taint{addedAt(gpu, now.Add(-5*time.Second))}, CanScheduleNew: true},
		},
		{
			name: "a pod bound after the taint counts from its binding", taints: []corev1.Taint{addedAt(gpu, now.Add(-time.Minute))},
			pod: func() corev1.Pod {
				p := testPod("p", tol(gpu.Key, ex, "", ne, ptr.To[int64](20)))
				p.CreationTimestamp = metav1.Time{Time: now.Add(-10 * time.Second)}
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Time{Time: now.Add(-5 * time.Second)}}}
				return p
			}(),
			want: Eviction{When: EvictAfter, After: 20 * time.Second, At: now.Add(15 * time.Second), Because: []corev1.Taint{addedAt(gpu, now.Add(-time.Minute))}, CanScheduleNew: true},
		},
		{
			name: "toleration without seconds: never", taints: []corev1.Taint{gpu},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, nil)),
			want: Eviction{When: EvictNever, Because: []corev1.Taint{gpu}, CanScheduleNew: true},
		},
		{
			name: "two taints tolerated for 30s and 10s: after 10s", taints: []corev1.Taint{gpu, mem},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, ptr.To[int64](30)), tol(mem.Key, ex, "", ne, ptr.To[int64](10))),
			want: Eviction{When: EvictAfter, After: 10 * time.Second, At: now.Add(10 * time.Second), Because: []corev1.Taint{mem}, CanScheduleNew: true},
		},
		{
			name: "two taints tolerated for 10s each: both decide", taints: []corev1.Taint{gpu, mem},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, ptr.To[int64](10)), tol(mem.Key, ex, "", ne, ptr.To[int64](10))),
			want: Eviction{When: EvictAfter, After: 10 * time.Second, At: now.Add(10 * time.Second), Because: []corev1.Taint{gpu, mem}, CanScheduleNew: true},
		},
		{
			name: "one taint tolerated forever, one for 10s: after 10s", taints: []corev1.Taint{gpu, mem},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, nil), tol(mem.Key, ex, "", ne, ptr.To[int64](10))),
			want: Eviction{When: EvictAfter, After: 10 * time.Second, At: now.Add(10 * time.Second), Because: []corev1.Taint{mem}, CanScheduleNew: true},
		},
		{
			name: "one taint tolerated, one not: immediately", taints: []corev1.Taint{gpu, mem},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, nil)),
			want: Eviction{When: EvictImmediately, At: now, Because: []corev1.Taint{mem}, BlockedBy: []corev1.Taint{mem}},
		},
		{
			name: "Exists with empty key tolerates everything", taints: []corev1.Taint{gpu, mem, noSched, prefer, ded},
			pod:  testPod("p", tol("", ex, "", none, nil)),
			want: Eviction{When: EvictNever, Because: []corev1.Taint{gpu, mem, ded}, CanScheduleNew: true},
		},
		{
			name: "effect-less toleration matches every effect of its key", taints: []corev1.Taint{gpu, taint(gpu.Key, "", ns)},
			pod:  testPod("p", tol(gpu.Key, ex, "", none, ptr.To[int64](60))),
			want: Eviction{When: EvictAfter, After: time.Minute, At: now.Add(time.Minute), Because: []corev1.Taint{gpu}, CanScheduleNew: true},
		},
		{
			name: "a NoSchedule toleration does not tolerate NoExecute", taints: []corev1.Taint{gpu},
			pod:  testPod("p", tol(gpu.Key, ex, "", ns, nil)),
			want: Eviction{When: EvictImmediately, At: now, Because: []corev1.Taint{gpu}, BlockedBy: []corev1.Taint{gpu}},
		},
		{
			name: "Equal with the same value tolerates (empty operator means Equal)", taints: []corev1.Taint{ded},
			pod:  testPod("p", tol("dedicated", "", "ml", ne, nil)),
			want: Eviction{When: EvictNever, Because: []corev1.Taint{ded}, CanScheduleNew: true},
		},
		{
			name: "Equal with a different value does not tolerate", taints: []corev1.Taint{ded},
			pod:  testPod("p", tol("dedicated", eq, "web", ne, nil)),
			want: Eviction{When: EvictImmediately, At: now, Because: []corev1.Taint{ded}, BlockedBy: []corev1.Taint{ded}},
		},
		{
			name: "negative tolerationSeconds: immediately", taints: []corev1.Taint{gpu},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, ptr.To[int64](-5))),
			want: Eviction{When: EvictImmediately, At: now, Because: []corev1.Taint{gpu}, CanScheduleNew: true},
		},
		{
			name: "zero tolerationSeconds beats a forever toleration of another taint", taints: []corev1.Taint{gpu, mem},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, nil), tol(mem.Key, ex, "", ne, ptr.To[int64](0))),
			want: Eviction{When: EvictImmediately, At: now, Because: []corev1.Taint{mem}, CanScheduleNew: true},
		},
		{
			// The controller's GetMatchingTolerations takes, per taint,
			// the first toleration that matches; a later one with a limit
			// does not count.
			name: "the first matching toleration decides: forever first", taints: []corev1.Taint{gpu},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, nil), tol(gpu.Key, ex, "", ne, ptr.To[int64](10))),
			want: Eviction{When: EvictNever, Because: []corev1.Taint{gpu}, CanScheduleNew: true},
		},
		{
			name: "the first matching toleration decides: 10s first", taints: []corev1.Taint{gpu},
			pod:  testPod("p", tol(gpu.Key, ex, "", ne, ptr.To[int64](10)), tol(gpu.Key, ex, "", ne, nil)),
			want: Eviction{When: EvictAfter, After: 10 * time.Second, At: now.Add(10 * time.Second), Because: []corev1.Taint{gpu}, CanScheduleNew: true},
		},
		{
			name: "NoSchedule only: stays, new pods blocked", taints: []corev1.Taint{noSched}, pod: testPod("p"),
			want: Eviction{When: EvictNever, BlockedBy: []corev1.Taint{noSched}},
		},
		{
			name: "NoSchedule tolerated: new pods schedule", taints: []corev1.Taint{noSched},
			pod:  testPod("p", tol(noSched.Key, ex, "", ns, nil)),
			want: Eviction{When: EvictNever, CanScheduleNew: true},
		},
		{
			name: "PreferNoSchedule: new pods avoided but not blocked", taints: []corev1.Taint{prefer}, pod: testPod("p"),
			want: Eviction{When: EvictNever, CanScheduleNew: true, AvoidedBy: []corev1.Taint{prefer}},
		},
		{
			name: "PreferNoSchedule tolerated: not avoided", taints: []corev1.Taint{prefer},
			pod:  testPod("p", tol(prefer.Key, ex, "", pns, nil)),
			want: Eviction{When: EvictNever, CanScheduleNew: true},
		},
		{
			// The controller ignores the phase: the object of a finished
			// pod is deleted too.
			name: "succeeded pod: flagged finished, its object deleted like any", taints: []corev1.Taint{gpu},
			pod: func() corev1.Pod {
				p := testPod("p")
				p.Status.Phase = corev1.PodSucceeded
				return p
			}(),
			want: Eviction{When: EvictImmediately, At: now, Because: []corev1.Taint{gpu}, Finished: true, BlockedBy: []corev1.Taint{gpu}},
		},
		{
			name: "succeeded pod without NoExecute taints: finished, never", taints: []corev1.Taint{noSched},
			pod: func() corev1.Pod {
				p := testPod("p")
				p.Status.Phase = corev1.PodFailed
				return p
			}(),
			want: Eviction{When: EvictNever, Finished: true, BlockedBy: []corev1.Taint{noSched}},
		},
		{
			name: "mirror pod is flagged", taints: []corev1.Taint{gpu},
			pod: func() corev1.Pod {
				p := testPod("p", tol("", ex, "", ne, nil))
				p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "abc"}
				return p
			}(),
			want: Eviction{When: EvictNever, Because: []corev1.Taint{gpu}, Mirror: true, CanScheduleNew: true},
		},
		{
			// DaemonSet pods get node.kubernetes.io/* tolerations from
			// their controller, and are otherwise judged like any pod.
			name:   "DaemonSet pod: its automatic tolerations do not cover our taints",
			taints: []corev1.Taint{taint("node.kubernetes.io/unreachable", "", ne), gpu},
			pod: func() corev1.Pod {
				p := testPod("ds", tol("node.kubernetes.io/unreachable", ex, "", ne, nil), tol("node.kubernetes.io/not-ready", ex, "", ne, nil))
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", Controller: ptr.To(true)}}
				return p
			}(),
			want: Eviction{When: EvictImmediately, At: now, Because: []corev1.Taint{gpu}, BlockedBy: []corev1.Taint{gpu}},
		},
		{
			name: "Gt toleration tolerates nothing with default feature gates", taints: []corev1.Taint{taint("gpu-errors", "10", ne)},
			pod:  testPod("p", tol("gpu-errors", corev1.TolerationOpGt, "5", ne, nil)),
			want: Eviction{When: EvictImmediately, At: now, Because: []corev1.Taint{taint("gpu-errors", "10", ne)}, BlockedBy: []corev1.Taint{taint("gpu-errors", "10", ne)}},
		},
		{
			name: "Gt toleration compares with ComparisonOperators", taints: []corev1.Taint{taint("gpu-errors", "10", ne)},
			pod:  testPod("p", tol("gpu-errors", corev1.TolerationOpGt, "5", ne, nil)),
			opts: ExplainOptions{ComparisonOperators: true},
			want: Eviction{When: EvictNever, Because: []corev1.Taint{taint("gpu-errors", "10", ne)}, CanScheduleNew: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ExplainWith(tt.taints, []corev1.Pod{tt.pod}, now, tt.opts)
			want := tt.want
			want.Namespace, want.Name = tt.pod.Namespace, tt.pod.Name
			if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
				t.Errorf("got  %+v\nwant %+v", got, []Eviction{want})
			}
		})
	}
}

func TestExplainSorts(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	gpu := taint("selftaint.io/gpu-lost", "", corev1.TaintEffectNoExecute)
	secs := func(s int64) corev1.Toleration {
		return tol(gpu.Key, corev1.TolerationOpExists, "", corev1.TaintEffectNoExecute, ptr.To(s))
	}
	forever := tol(gpu.Key, corev1.TolerationOpExists, "", corev1.TaintEffectNoExecute, nil)
	pods := []corev1.Pod{
		testPod("never"), testPod("after-30", secs(30)), testPod("b-now"), testPod("after-5", secs(5)), testPod("a-now"),
	}
	pods[0].Spec.Tolerations = []corev1.Toleration{forever}
	other := testPod("a-now")
	other.Namespace = "aaa"
	pods = append(pods, other)

	var got []string
	for _, e := range Explain([]corev1.Taint{gpu}, pods, now) {
		got = append(got, e.PodName())
	}
	want := []string{"aaa/a-now", "default/a-now", "default/b-now", "default/after-5", "default/after-30", "default/never"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got order %v, want %v", got, want)
	}
}

func TestEvictionJSON(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	in := Eviction{
		Namespace: "default", Name: "p", When: EvictAfter, After: 20 * time.Second, At: now.Add(20 * time.Second),
		Because:        []corev1.Taint{taint("selftaint.io/gpu-lost", "", corev1.TaintEffectNoExecute)},
		CanScheduleNew: true,
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"when":"After"`, `"after":"20s"`, `"afterSeconds":20`, `"at":"2026-11-23T12:00:20Z"`, `"canScheduleNew":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
	var out Eviction
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}

	never, err := json.Marshal(Eviction{Namespace: "default", Name: "q", When: EvictNever})
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{`"at"`, `"after"`, `"because"`} {
		if strings.Contains(string(never), absent) {
			t.Errorf("JSON %s has %s, want it left out", never, absent)
		}
	}
	if err := json.Unmarshal([]byte(`{"when":"Sometimes"}`), &out); err == nil || !strings.Contains(err.Error(), "Sometimes") {
		t.Errorf("unmarshal bad when: got error %v, want one naming it", err)
	}
}

func TestParseTaint(t *testing.T) {
	tests := []struct {
		in      string
		want    corev1.Taint
		wantErr string // substring; empty means no error
	}{
		{in: "selftaint.io/gpu-lost:NoExecute", want: taint("selftaint.io/gpu-lost", "", corev1.TaintEffectNoExecute)},
		{in: "dedicated=ml:NoSchedule", want: taint("dedicated", "ml", corev1.TaintEffectNoSchedule)},
		{in: "dedicated=:PreferNoSchedule", want: taint("dedicated", "", corev1.TaintEffectPreferNoSchedule)},
		{in: "example.com/a_b.c=v-1.2_3:NoExecute", want: taint("example.com/a_b.c", "v-1.2_3", corev1.TaintEffectNoExecute)},
		{in: "dedicated=ml", wantErr: `taint "dedicated=ml": no effect`},
		{in: "dedicated=ml:NoExecut", wantErr: `effect "NoExecut" is not one of NoSchedule, PreferNoSchedule, NoExecute`},
		{in: "dedicated=ml:", wantErr: `effect "" is not one of`},
		{in: ":NoSchedule", wantErr: "empty key"},
		{in: "=ml:NoSchedule", wantErr: "empty key"},
		{in: "bad key:NoSchedule", wantErr: `key "bad key":`},
		{in: "a:b:NoSchedule", wantErr: `key "a:b":`},
		{in: "-bad:NoSchedule", wantErr: `key "-bad":`},
		{in: "k=a=b:NoSchedule", wantErr: `value "a=b":`},
		{in: "k=" + strings.Repeat("v", 64) + ":NoSchedule", wantErr: "must be no more than 63"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTaint(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTaint(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseTaint(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}
