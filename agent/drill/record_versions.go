package drill

// The recorder's pure parts: one watched object in, the version the drill
// records out; owner resolution; a PodDisruptionBudget's healthy count and
// whether a new health version is worth keeping.

import (
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	tdrill "github.com/selftaint/selftaint/taints/drill"
	"github.com/selftaint/selftaint/taints/fleet"
)

// The workload kinds the recorder watches, as they appear in WorkloadRef.
const (
	kindDeployment  = "Deployment"
	kindStatefulSet = "StatefulSet"
	kindReplicaSet  = "ReplicaSet"
	kindDaemonSet   = "DaemonSet"
	kindJob         = "Job"
)

// podVersion is pod as the drill records it, its Owner the pod's direct
// controller (resolveOwner lifts a ReplicaSet to its Deployment).
func podVersion(pod *corev1.Pod) tdrill.PodVersion {
	v := tdrill.PodVersion{
		Namespace:   pod.Namespace,
		Name:        pod.Name,
		UID:         string(pod.UID),
		Labels:      maps.Clone(pod.Labels),
		Node:        pod.Spec.NodeName,
		Terminating: pod.DeletionTimestamp != nil,
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		v.Owner = tdrill.WorkloadRef{Kind: ref.Kind, Name: ref.Name, Namespace: pod.Namespace}
	}
	for _, c := range pod.Status.Conditions {
		switch {
		case c.Type == corev1.PodReady:
			v.Ready = c.Status == corev1.ConditionTrue
		case c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue:
			v.Disruption = c.Reason
		}
	}
	return v
}

// resolveOwner lifts a pod's direct owner to its top workload: a
// ReplicaSet that a Deployment controls belongs to that Deployment.
// rsOwners maps "namespace/name" of each ReplicaSet seen to its
// controlling Deployment (absent: none, or not seen yet).
func resolveOwner(owner tdrill.WorkloadRef, rsOwners map[string]tdrill.WorkloadRef) tdrill.WorkloadRef {
	if owner.Kind != kindReplicaSet {
		return owner
	}
	if top, ok := rsOwners[owner.Namespace+"/"+owner.Name]; ok {
		return top
	}
	return owner
}

// replicaSetOwner is the Deployment that controls rs, if one does.
func replicaSetOwner(rs *appsv1.ReplicaSet) (tdrill.WorkloadRef, bool) {
	ref := metav1.GetControllerOf(rs)
	if ref == nil || ref.Kind != kindDeployment {
		return tdrill.WorkloadRef{}, false
	}
	return tdrill.WorkloadRef{Kind: kindDeployment, Name: ref.Name, Namespace: rs.Namespace}, true
}

// nodeVersion is node as the drill records it.
func nodeVersion(node *corev1.Node) tdrill.NodeVersion {
	v := tdrill.NodeVersion{
		Name:            node.Name,
		ResourceVersion: node.ResourceVersion,
		Unschedulable:   node.Spec.Unschedulable,
		Conditions:      make(map[string]string, len(node.Status.Conditions)),
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute {
			v.NoExecute = append(v.NoExecute, t.Key)
		}
		v.Taints = append(v.Taints, t.Key+":"+string(t.Effect))
	}
	for _, c := range node.Status.Conditions {
		v.Conditions[string(c.Type)] = string(c.Status)
		switch c.Type {
		case corev1.NodeReady:
			v.Ready = string(c.Status)
		case fleet.MaintenanceCondition:
			v.Maintenance = c.Reason
		}
	}
	return v
}

// guardVersion is a version of the guard ConfigMap as the drill records
// it: the guard it holds, or why it holds none (DecodeGuard's error), or
// deleted.
func guardVersion(cm *corev1.ConfigMap, deleted bool) tdrill.GuardVersion {
	v := tdrill.GuardVersion{ResourceVersion: cm.ResourceVersion, Deleted: deleted}
	if deleted {
		return v
	}
	g, err := fleet.DecodeGuard(cm.Data)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.State = g
	return v
}

// workloadVersion is the replica counts of obj, one of the watched
// workload kinds; ok is false for anything else.
//
// Desired is spec.replicas (1 when unset) for Deployments, StatefulSets and
// ReplicaSets; status.desiredNumberScheduled for a DaemonSet; for a Job,
// the pods it wants running now: spec.parallelism (1 when unset), no more
// than the completions still missing (spec.completions - status.succeeded)
// when completions is set, so a finished Job wants 0. Ready is
// status.readyReplicas, a DaemonSet's status.numberReady, a Job's
// status.ready.
func workloadVersion(obj any) (tdrill.WorkloadVersion, bool) {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return counts(kindDeployment, w.ObjectMeta, replicas(w.Spec.Replicas), w.Status.ReadyReplicas), true
	case *appsv1.StatefulSet:
		return counts(kindStatefulSet, w.ObjectMeta, replicas(w.Spec.Replicas), w.Status.ReadyReplicas), true
	case *appsv1.ReplicaSet:
		return counts(kindReplicaSet, w.ObjectMeta, replicas(w.Spec.Replicas), w.Status.ReadyReplicas), true
	case *appsv1.DaemonSet:
		return counts(kindDaemonSet, w.ObjectMeta, w.Status.DesiredNumberScheduled, w.Status.NumberReady), true
	case *batchv1.Job:
		return counts(kindJob, w.ObjectMeta, jobDesired(w), deref(w.Status.Ready)), true
	}
	return tdrill.WorkloadVersion{}, false
}

func counts(kind string, m metav1.ObjectMeta, desired, ready int32) tdrill.WorkloadVersion {
	return tdrill.WorkloadVersion{
		Ref:     tdrill.WorkloadRef{Kind: kind, Name: m.Name, Namespace: m.Namespace},
		Desired: desired,
		Ready:   ready,
	}
}

// replicas is spec.replicas, which the API defaults to 1.
func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// jobDesired is the pods a Job wants running now (see workloadVersion).
func jobDesired(j *batchv1.Job) int32 {
	want := replicas(j.Spec.Parallelism)
	if j.Spec.Completions != nil {
		want = min(want, max(*j.Spec.Completions-j.Status.Succeeded, 0))
	}
	return want
}

// pdbHealth is what the drill tracks of a PodDisruptionBudget: its
// selector and the disruption controller's last status.
type pdbHealth struct {
	selector labels.Selector
	desired  int32
	expected int32
	known    bool
}

// newPDBHealth reads pdb's selector and status. In policy/v1 a nil
// selector selects no pod and an empty one every pod of the namespace,
// which is what LabelSelectorAsSelector returns; an invalid one selects
// none.
func newPDBHealth(pdb *policyv1.PodDisruptionBudget) pdbHealth {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		sel = labels.Nothing()
	}
	return pdbHealth{
		selector: sel,
		desired:  pdb.Status.DesiredHealthy,
		expected: pdb.Status.ExpectedPods,
		known:    pdb.Status.ObservedGeneration > 0 || pdb.Status.DesiredHealthy != 0,
	}
}

// healthyCount is how many of pods (one namespace's latest versions)
// selector selects that are Ready and not terminating; deleted pods are
// not among them.
func healthyCount(selector labels.Selector, pods []tdrill.PodVersion) int32 {
	var n int32
	for _, p := range pods {
		if p.Ready && !p.Terminating && !p.Deleted && selector.Matches(labels.Set(p.Labels)) {
			n++
		}
	}
	return n
}

// keepPDBVersion says whether next is worth recording after prev (nil:
// the PDB's first): when its health changed, and always while it is below
// its minimum, so that every violating version counts.
func keepPDBVersion(prev *tdrill.PDBVersion, next tdrill.PDBVersion) bool {
	if belowMinimum(next) || prev == nil {
		return true
	}
	return prev.Healthy != next.Healthy || prev.Desired != next.Desired ||
		prev.Expected != next.Expected || prev.Known != next.Known
}

// belowMinimum: the PDB has fewer healthy pods than the disruption
// controller says it desires.
func belowMinimum(v tdrill.PDBVersion) bool {
	return v.Known && v.Healthy < v.Desired
}
