package drill

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	tdrill "github.com/selftaint/selftaint/taints/drill"
	"github.com/selftaint/selftaint/taints/fleet"
)

func TestResolveOwner(t *testing.T) {
	web := tdrill.WorkloadRef{Kind: "Deployment", Name: "web", Namespace: "ns"}
	owners := map[string]tdrill.WorkloadRef{"ns/web-5d8f": web}
	for _, tc := range []struct {
		name  string
		owner tdrill.WorkloadRef
		want  tdrill.WorkloadRef
	}{
		{"replicaset of a deployment", tdrill.WorkloadRef{Kind: "ReplicaSet", Name: "web-5d8f", Namespace: "ns"}, web},
		{"bare replicaset", tdrill.WorkloadRef{Kind: "ReplicaSet", Name: "lone", Namespace: "ns"}, tdrill.WorkloadRef{Kind: "ReplicaSet", Name: "lone", Namespace: "ns"}},
		{"same name, other namespace", tdrill.WorkloadRef{Kind: "ReplicaSet", Name: "web-5d8f", Namespace: "other"}, tdrill.WorkloadRef{Kind: "ReplicaSet", Name: "web-5d8f", Namespace: "other"}},
		{"statefulset", tdrill.WorkloadRef{Kind: "StatefulSet", Name: "train", Namespace: "ns"}, tdrill.WorkloadRef{Kind: "StatefulSet", Name: "train", Namespace: "ns"}},
		{"bare pod", tdrill.WorkloadRef{}, tdrill.WorkloadRef{}},
	} {
		if got := resolveOwner(tc.owner, owners); got != tc.want {
			t.Errorf("%s: resolveOwner(%v) = %v, want %v", tc.name, tc.owner, got, tc.want)
		}
	}
}

func TestReplicaSetOwner(t *testing.T) {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", OwnerReferences: []metav1.OwnerReference{
		{Kind: "Deployment", Name: "web", Controller: ptr.To(true)},
	}}}
	if got, ok := replicaSetOwner(rs); !ok || got != (tdrill.WorkloadRef{Kind: "Deployment", Name: "web", Namespace: "ns"}) {
		t.Errorf("replicaSetOwner = %v, %v; want Deployment web", got, ok)
	}
	rs.OwnerReferences[0].Controller = nil // an owner, not the controller
	if got, ok := replicaSetOwner(rs); ok {
		t.Errorf("replicaSetOwner without a controller = %v, want none", got)
	}
}

func TestPodVersion(t *testing.T) {
	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "train"},
			DeletionTimestamp: &now,
			OwnerReferences:   []metav1.OwnerReference{{Kind: "StatefulSet", Name: "train", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "gpu-1"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"},
		}},
	}
	want := tdrill.PodVersion{Namespace: "ns", Name: "train-0", UID: "u1", Labels: map[string]string{"app": "train"},
		Owner: tdrill.WorkloadRef{Kind: "StatefulSet", Name: "train", Namespace: "ns"},
		Node:  "gpu-1", Ready: true, Terminating: true, Disruption: "EvictionByEvictionAPI"}
	if got := podVersion(pod); !reflect.DeepEqual(got, want) {
		t.Errorf("podVersion = %+v, want %+v", got, want)
	}
	// A DisruptionTarget that is False is no disruption; Ready False is not ready.
	pod.DeletionTimestamp = nil
	pod.Status.Conditions[0].Status = corev1.ConditionFalse
	pod.Status.Conditions[1].Status = corev1.ConditionFalse
	got := podVersion(pod)
	if got.Ready || got.Terminating || got.Disruption != "" {
		t.Errorf("podVersion with False conditions = %+v, want not ready, not terminating, no disruption", got)
	}
}

func TestNodeVersion(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", ResourceVersion: "7"},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: "selftaint.io/gpu-failure", Effect: corev1.TaintEffectNoExecute},
			{Key: "selftaint.io/gpu-degraded", Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute},
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown},
			{Type: fleet.MaintenanceCondition, Status: corev1.ConditionTrue, Reason: fleet.ReasonDraining},
		}},
	}
	want := tdrill.NodeVersion{Name: "gpu-1", ResourceVersion: "7",
		NoExecute: []string{"selftaint.io/gpu-failure", "node.kubernetes.io/unreachable"},
		Taints:    []string{"selftaint.io/gpu-failure:NoExecute", "selftaint.io/gpu-degraded:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"},
		Ready:     "Unknown", Unschedulable: true,
		Conditions:  map[string]string{"Ready": "Unknown", string(fleet.MaintenanceCondition): "True"},
		Maintenance: "Draining"}
	if got := nodeVersion(node); !reflect.DeepEqual(got, want) {
		t.Errorf("nodeVersion = %+v, want %+v", got, want)
	}
}

func TestWorkloadVersion(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "w", Namespace: "ns"}
	for _, tc := range []struct {
		name          string
		obj           any
		kind          string
		desired, read int32
	}{
		{"deployment", &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)}, Status: appsv1.DeploymentStatus{ReadyReplicas: 2}}, "Deployment", 3, 2},
		{"deployment, replicas unset", &appsv1.Deployment{ObjectMeta: meta}, "Deployment", 1, 0},
		{"statefulset", &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0)}}, "StatefulSet", 0, 0},
		{"replicaset", &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2)}, Status: appsv1.ReplicaSetStatus{ReadyReplicas: 2}}, "ReplicaSet", 2, 2},
		{"daemonset", &appsv1.DaemonSet{ObjectMeta: meta, Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 4, NumberReady: 3}}, "DaemonSet", 4, 3},
		{"job, parallelism", &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4)}, Status: batchv1.JobStatus{Ready: ptr.To[int32](4)}}, "Job", 4, 4},
		{"job, defaults", &batchv1.Job{ObjectMeta: meta}, "Job", 1, 0},
		{"job, few completions left", &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](5)}, Status: batchv1.JobStatus{Succeeded: 3, Ready: ptr.To[int32](2)}}, "Job", 2, 2},
		{"job, done", &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Completions: ptr.To[int32](1)}, Status: batchv1.JobStatus{Succeeded: 1}}, "Job", 0, 0},
	} {
		got, ok := workloadVersion(tc.obj)
		want := tdrill.WorkloadVersion{Ref: tdrill.WorkloadRef{Kind: tc.kind, Name: "w", Namespace: "ns"}, Desired: tc.desired, Ready: tc.read}
		if !ok || got != want {
			t.Errorf("%s: workloadVersion = %+v, %v; want %+v", tc.name, got, ok, want)
		}
	}
	if _, ok := workloadVersion(&corev1.Pod{}); ok {
		t.Errorf("workloadVersion(pod) ok, want not a workload")
	}
}

func TestHealthyCount(t *testing.T) {
	pods := []tdrill.PodVersion{
		{Name: "ready", Labels: map[string]string{"app": "a"}, Ready: true},
		{Name: "not-ready", Labels: map[string]string{"app": "a"}},
		{Name: "terminating", Labels: map[string]string{"app": "a"}, Ready: true, Terminating: true},
		{Name: "deleted", Labels: map[string]string{"app": "a"}, Ready: true, Deleted: true},
		{Name: "other app", Labels: map[string]string{"app": "b"}, Ready: true},
		{Name: "ready 2", Labels: map[string]string{"app": "a", "x": "y"}, Ready: true},
	}
	for _, tc := range []struct {
		name     string
		selector *metav1.LabelSelector
		want     int32
	}{
		{"app a", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}, 2},
		{"nil selects none", nil, 0},
		{"empty selects all", &metav1.LabelSelector{}, 3},
		{"invalid selects none", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}, 0},
	} {
		h := newPDBHealth(&policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{Selector: tc.selector}})
		if got := healthyCount(h.selector, pods); got != tc.want {
			t.Errorf("%s: healthyCount = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestNewPDBHealthKnown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status policyv1.PodDisruptionBudgetStatus
		want   bool
	}{
		{"not yet written", policyv1.PodDisruptionBudgetStatus{}, false},
		{"observed", policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1}, true},
		{"desired set", policyv1.PodDisruptionBudgetStatus{DesiredHealthy: 2}, true},
	} {
		if got := newPDBHealth(&policyv1.PodDisruptionBudget{Status: tc.status}).known; got != tc.want {
			t.Errorf("%s: known = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestKeepPDBVersion(t *testing.T) {
	ok := tdrill.PDBVersion{Healthy: 3, Desired: 2, Expected: 3, Known: true}
	below := tdrill.PDBVersion{Healthy: 1, Desired: 2, Expected: 3, Known: true}
	unknown := tdrill.PDBVersion{Healthy: 1}
	with := func(v tdrill.PDBVersion, f func(*tdrill.PDBVersion)) tdrill.PDBVersion { f(&v); return v }
	for _, tc := range []struct {
		name string
		prev *tdrill.PDBVersion
		next tdrill.PDBVersion
		want bool
	}{
		{"first", nil, ok, true},
		{"unchanged", &ok, ok, false},
		{"healthy changed", &ok, with(ok, func(v *tdrill.PDBVersion) { v.Healthy = 2 }), true},
		{"desired changed", &ok, with(ok, func(v *tdrill.PDBVersion) { v.Desired = 3 }), true},
		{"expected changed", &ok, with(ok, func(v *tdrill.PDBVersion) { v.Expected = 4 }), true},
		{"became known", &unknown, with(unknown, func(v *tdrill.PDBVersion) { v.Known = true }), true},
		{"below, unchanged: every violating version counts", &below, below, true},
		{"unknown, unchanged", &unknown, unknown, false},
	} {
		if got := keepPDBVersion(tc.prev, tc.next); got != tc.want {
			t.Errorf("%s: keepPDBVersion = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNodeLines(t *testing.T) {
	healthy := tdrill.NodeVersion{Name: "gpu-1", Ready: "True", Conditions: map[string]string{"Ready": "True", "SelftaintGPU": "False"}}
	with := func(f func(*tdrill.NodeVersion)) tdrill.NodeVersion {
		v := healthy
		v.Conditions = map[string]string{"Ready": "True", "SelftaintGPU": "False"}
		f(&v)
		return v
	}
	maintenance := func(status, reason string, cordoned bool) tdrill.NodeVersion {
		return with(func(v *tdrill.NodeVersion) {
			v.Maintenance, v.Unschedulable = reason, cordoned
			v.Conditions[string(fleet.MaintenanceCondition)] = status
		})
	}
	for _, tc := range []struct {
		name       string
		prev, next tdrill.NodeVersion
		want       []string
	}{
		{"heartbeat", healthy, healthy, nil},
		{"taint on", healthy, with(func(v *tdrill.NodeVersion) { v.Taints = []string{"selftaint.io/gpu-failure:NoExecute"} }),
			[]string{"node gpu-1: taint selftaint.io/gpu-failure:NoExecute on"}},
		{"taint off", with(func(v *tdrill.NodeVersion) { v.Taints = []string{"selftaint.io/gpu-failure:NoExecute"} }), healthy,
			[]string{"node gpu-1: taint selftaint.io/gpu-failure:NoExecute off"}},
		{"fallback on", healthy, with(func(v *tdrill.NodeVersion) { v.Taints = []string{"selftaint.io/memory-pressure:NoSchedule"} }),
			[]string{"node gpu-1: taint selftaint.io/memory-pressure:NoSchedule on"}},
		{"not ready", healthy, with(func(v *tdrill.NodeVersion) { v.Ready = "Unknown"; v.Conditions["Ready"] = "Unknown" }),
			[]string{"node gpu-1: Ready Unknown"}},
		{"cordoned", healthy, with(func(v *tdrill.NodeVersion) { v.Unschedulable = true }), []string{"node gpu-1: cordoned"}},
		{"uncordoned", with(func(v *tdrill.NodeVersion) { v.Unschedulable = true }), healthy, []string{"node gpu-1: uncordoned"}},
		{"draining", healthy, with(func(v *tdrill.NodeVersion) {
			v.Maintenance = "Draining"
			v.Conditions[string(fleet.MaintenanceCondition)] = "True"
		}), []string{"node gpu-1: maintenance Draining"}},
		{"maintenance gone", with(func(v *tdrill.NodeVersion) { v.Maintenance = "Released" }), healthy, []string{"node gpu-1: maintenance ended"}},
		// A blocked drain given back at its deadline: the reason stays
		// DrainBlocked, the status goes False, and the uncordon is a
		// write of its own.
		{"drain given back", maintenance("True", "DrainBlocked", true), maintenance("False", "DrainBlocked", true),
			[]string{"node gpu-1: maintenance given back (SelftaintMaintenance False, DrainBlocked)"}},
		{"drain given back and uncordoned at once", maintenance("True", "DrainBlocked", true), maintenance("False", "DrainBlocked", false),
			[]string{"node gpu-1: uncordoned", "node gpu-1: maintenance given back (SelftaintMaintenance False, DrainBlocked)"}},
		{"released", maintenance("True", "Drained", true), maintenance("False", "Released", true),
			[]string{"node gpu-1: maintenance given back (SelftaintMaintenance False, Released)"}},
		{"blocked while draining", maintenance("True", "Draining", true), maintenance("True", "DrainBlocked", true),
			[]string{"node gpu-1: maintenance DrainBlocked"}},
		{"asked again after given back", maintenance("False", "DrainBlocked", false), maintenance("True", "Waiting", false),
			[]string{"node gpu-1: maintenance Waiting"}},
		{"unknown", maintenance("True", "Draining", true), maintenance("Unknown", "Draining", true),
			[]string{"node gpu-1: maintenance Draining (SelftaintMaintenance Unknown)"}},
		{"given back, then the condition removed", maintenance("False", "DrainBlocked", false), healthy, []string{"node gpu-1: maintenance ended"}},
		{"probe condition", healthy, with(func(v *tdrill.NodeVersion) { v.Conditions["SelftaintGPU"] = "True" }), []string{"node gpu-1: SelftaintGPU True"}},
		{"condition removed", healthy, with(func(v *tdrill.NodeVersion) { delete(v.Conditions, "SelftaintGPU") }), []string{"node gpu-1: SelftaintGPU none"}},
		{"first seen", tdrill.NodeVersion{}, healthy, []string{"node gpu-1: Ready True", "node gpu-1: SelftaintGPU False"}},
	} {
		if got := nodeLines(tc.prev, tc.next); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: nodeLines = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPodLines(t *testing.T) {
	running := tdrill.PodVersion{Name: "train-0", Node: "gpu-1", Ready: true}
	with := func(f func(*tdrill.PodVersion)) tdrill.PodVersion { v := running; f(&v); return v }
	pending := tdrill.PodVersion{Name: "train-0"}
	for _, tc := range []struct {
		name string
		prev *tdrill.PodVersion
		next tdrill.PodVersion
		want []string
	}{
		{"status churn", &running, running, nil},
		{"created pending", nil, pending, nil},
		{"scheduled", &pending, with(func(v *tdrill.PodVersion) { v.Ready = false }), []string{"pod train-0: scheduled on gpu-1"}},
		{"ready", ptr.To(with(func(v *tdrill.PodVersion) { v.Ready = false })), running, []string{"pod train-0: ready on gpu-1"}},
		{"not ready", &running, with(func(v *tdrill.PodVersion) { v.Ready = false }), []string{"pod train-0 (gpu-1): not ready"}},
		{"evicted", &running, with(func(v *tdrill.PodVersion) { v.Disruption = "EvictionByEvictionAPI"; v.Terminating = true }),
			[]string{"pod train-0 (gpu-1): evicted (EvictionByEvictionAPI)"}},
		{"evicted, then gone", ptr.To(with(func(v *tdrill.PodVersion) { v.Disruption = "DeletionByTaintManager"; v.Terminating = true })),
			with(func(v *tdrill.PodVersion) {
				v.Disruption = "DeletionByTaintManager"
				v.Terminating = true
				v.Deleted = true
			}),
			[]string{"pod train-0 (gpu-1): deleted"}},
		{"force deleted", &running, with(func(v *tdrill.PodVersion) { v.Deleted = true }), []string{"pod train-0 (gpu-1): deleted without eviction"}},
		{"terminating", &running, with(func(v *tdrill.PodVersion) { v.Terminating = true }), []string{"pod train-0 (gpu-1): terminating"}},
		{"terminating, status churn", ptr.To(with(func(v *tdrill.PodVersion) { v.Terminating = true })), with(func(v *tdrill.PodVersion) { v.Terminating = true; v.Ready = false }), nil},
	} {
		if got := podLines("train-0", tc.prev, tc.next); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: podLines = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPDBLines(t *testing.T) {
	at := func(healthy int32) tdrill.PDBVersion {
		return tdrill.PDBVersion{Healthy: healthy, Desired: 2, Expected: 3, Known: true}
	}
	for _, tc := range []struct {
		name string
		prev *tdrill.PDBVersion
		next tdrill.PDBVersion
		want []string
	}{
		{"healthy", ptr.To(at(3)), at(2), nil},
		{"goes below", ptr.To(at(2)), at(1), []string{"PDB train: 1 healthy, below its minimum 2"}},
		{"below at first", nil, at(1), []string{"PDB train: 1 healthy, below its minimum 2"}},
		{"further below", ptr.To(at(1)), at(0), []string{"PDB train: 0 healthy, below its minimum 2"}},
		{"still below, same count", ptr.To(at(1)), at(1), nil},
		{"back", ptr.To(at(1)), at(2), []string{"PDB train: 2 healthy, at or above its minimum 2 again"}},
		{"unknown is never below", nil, tdrill.PDBVersion{Healthy: 0, Desired: 2}, nil},
	} {
		if got := pdbLines("train", tc.prev, tc.next); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: pdbLines = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestWorkloadLines(t *testing.T) {
	v := tdrill.WorkloadVersion{Ref: tdrill.WorkloadRef{Kind: "Deployment", Name: "web"}, Desired: 3, Ready: 3}
	if got, want := workloadLines("web", nil, v), []string{"Deployment web: 3/3 ready"}; !reflect.DeepEqual(got, want) {
		t.Errorf("first: workloadLines = %q, want %q", got, want)
	}
	if got := workloadLines("web", &v, v); got != nil {
		t.Errorf("unchanged: workloadLines = %q, want none", got)
	}
	prev := v
	prev.Ready = 2
	if got, want := workloadLines("web", &prev, v), []string{"Deployment web: 3/3 ready"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ready changed: workloadLines = %q, want %q", got, want)
	}
}

// TestHandlerVersions: every new version reaches the recorder once; a
// relist's or resync's update with the same resourceVersion does not; a
// tombstone's last known state is a delete.
func TestHandlerVersions(t *testing.T) {
	type call struct {
		rv      string
		deleted bool
	}
	var got []call
	h := handler(func(obj any, deleted bool) {
		got = append(got, call{obj.(*corev1.Pod).ResourceVersion, deleted})
	})
	v := func(rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: rv}}
	}
	h.OnAdd(v("1"), true)
	h.OnUpdate(v("1"), v("2"))
	h.OnUpdate(v("2"), v("2"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: v("2")})
	want := []call{{"1", false}, {"2", false}, {"2", true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("handler calls = %v, want %v", got, want)
	}
}
