package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/selftaint/selftaint/agent/testcp"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// workloadReadyTimeout bounds the wait for the workloads before t=0 (or
// the drill's own timeout, when shorter).
const workloadReadyTimeout = 3 * time.Minute

// isWorkloadKind: the drill waits for the readiness of these kinds.
func isWorkloadKind(kind string) bool {
	switch kind {
	case "Deployment", "StatefulSet", "ReplicaSet", "Job", "DaemonSet":
		return true
	}
	return false
}

// appliedObject is an object the drill applied, for the cleanup.
type appliedObject struct {
	gvr       schema.GroupVersionResource
	kind      string
	namespace string // "" for a cluster-scoped object
	name      string
}

func (o appliedObject) String() string {
	if o.namespace == "" {
		return o.kind + " " + o.name
	}
	return o.kind + " " + o.namespace + "/" + o.name
}

// applyWorkloads applies every workload object (server-side), objects
// without a namespace into the drill's.
func (r *runner) applyWorkloads(ctx context.Context) error {
	if len(r.plan.objects) == 0 {
		return nil
	}
	dc := r.env.client.Discovery()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	ns := DrillNamespace(r.s.Name)
	for i, o := range r.plan.objects {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %s %s: %w", r.plan.objectFields[i], gvk.Kind, o.GetName(), err)
		}
		obj := o.DeepCopy()
		target := appliedObject{gvr: m.Resource, kind: gvk.Kind, name: obj.GetName()}
		var res dynamic.ResourceInterface = r.env.dynamic.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(ns)
			}
			target.namespace = obj.GetNamespace()
			res = r.env.dynamic.Resource(m.Resource).Namespace(target.namespace)
		}
		if _, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("%s: applying %s: %w", r.plan.objectFields[i], target, err)
		}
		r.mu.Lock()
		r.applied = append(r.applied, target)
		r.mu.Unlock()
		r.view.line("applied %s", target)
	}
	return nil
}

// workloads are the applied objects whose readiness the drill waits for.
func (r *runner) workloads() []tdrill.WorkloadRef {
	var out []tdrill.WorkloadRef
	for _, o := range r.applied {
		bare := o.kind == "Pod" && o.gvr.Group == ""
		if bare || isWorkloadKind(o.kind) && (o.gvr.Group == "apps" || o.gvr.Group == "batch") {
			out = append(out, tdrill.WorkloadRef{Kind: o.kind, Name: o.name, Namespace: o.namespace})
		}
	}
	return out
}

// waitWorkloads waits until every workload is ready; a workload that is
// not says what is not ready (a pending pod with the scheduler's reason).
func (r *runner) waitWorkloads(ctx context.Context) error {
	ws := r.workloads()
	if len(ws) == 0 {
		return nil
	}
	r.view.line("waiting for %d workload(s) to be ready", len(ws))
	var notReady tdrill.WorkloadRef
	var why string
	timeout := min(workloadReadyTimeout, r.s.Timeout.Duration)
	err := testcp.Poll(ctx, timeout, 500*time.Millisecond, func() (bool, error) {
		for _, w := range ws {
			ok, reason, err := r.workloadReady(ctx, w)
			if err != nil || !ok {
				notReady, why = w, reason
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("workload %s %s/%s is not ready: %s (%w)", notReady.Kind, notReady.Namespace, notReady.Name, why, err)
	}
	r.view.line("workloads ready")
	return nil
}

// workloadReady says whether w is ready, and if not, why.
func (r *runner) workloadReady(ctx context.Context, w tdrill.WorkloadRef) (bool, string, error) {
	if w.Namespace == "" {
		w.Namespace = DrillNamespace(r.s.Name)
	}
	apps, batch := r.env.client.AppsV1(), r.env.client.BatchV1()
	var desired, ready int32
	var selector *metav1.LabelSelector
	switch w.Kind {
	case "Deployment":
		d, err := apps.Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		desired, ready, selector = replicasOf(d.Spec.Replicas), d.Status.ReadyReplicas, d.Spec.Selector
		if d.Status.UpdatedReplicas < desired {
			ready = min(ready, d.Status.UpdatedReplicas)
		}
	case "StatefulSet":
		s, err := apps.StatefulSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		desired, ready, selector = replicasOf(s.Spec.Replicas), s.Status.ReadyReplicas, s.Spec.Selector
	case "ReplicaSet":
		s, err := apps.ReplicaSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		desired, ready, selector = replicasOf(s.Spec.Replicas), s.Status.ReadyReplicas, s.Spec.Selector
	case "DaemonSet":
		s, err := apps.DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		desired, ready, selector = s.Status.DesiredNumberScheduled, s.Status.NumberReady, s.Spec.Selector
	case "Job":
		j, err := batch.Jobs(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		desired, ready, selector = jobWant(j), ptrOr(j.Status.Ready)+j.Status.Succeeded, j.Spec.Selector
	case "Pod":
		// A bare pod (no controller): ready, or done.
		p, err := r.env.client.CoreV1().Pods(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if note := podNotReady(p); note != "" && p.Status.Phase != corev1.PodSucceeded {
			return false, note, nil
		}
		return true, "", nil
	default:
		return false, "", fmt.Errorf("not a workload kind: %s", w.Kind)
	}
	if ready >= desired {
		return true, "", nil
	}
	return false, fmt.Sprintf("%d of %d ready%s", ready, desired, r.pendingReasons(ctx, w.Namespace, selector)), nil
}

func replicasOf(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func ptrOr(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// jobWant is how many of a Job's pods must be ready (or done): its
// parallelism, at most its completions.
func jobWant(j *batchv1.Job) int32 {
	want := replicasOf(j.Spec.Parallelism)
	if j.Spec.Completions != nil {
		want = min(want, *j.Spec.Completions)
	}
	return want
}

// pendingReasons names the workload's pods that are not ready and why:
// the scheduler's reason for a pod it could not place.
func (r *runner) pendingReasons(ctx context.Context, ns string, sel *metav1.LabelSelector) string {
	if sel == nil {
		return ""
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return ""
	}
	pods, err := r.env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
	if err != nil {
		return ""
	}
	var notes []string
	for _, p := range pods.Items {
		if note := podNotReady(&p); note != "" {
			notes = append(notes, note)
		}
	}
	if len(notes) == 0 {
		return ""
	}
	if len(notes) > 3 {
		notes = append(notes[:3], fmt.Sprintf("and %d more", len(notes)-3))
	}
	return "; " + strings.Join(notes, "; ")
}

// podNotReady says why pod p is not ready ("" when it is).
func podNotReady(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return fmt.Sprintf("pod %s Pending, not scheduled: %s: %s", p.Name, c.Reason, c.Message)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return ""
		}
	}
	if p.Spec.NodeName == "" {
		return fmt.Sprintf("pod %s %s, not scheduled yet", p.Name, p.Status.Phase)
	}
	return fmt.Sprintf("pod %s %s on %s, not ready", p.Name, p.Status.Phase, p.Spec.NodeName)
}

// deleteApplied deletes what the drill applied outside its namespace (the
// namespace goes with everything in it), one by one.
func (r *runner) deleteApplied(ctx context.Context) ([]string, error) {
	ns := DrillNamespace(r.s.Name)
	var removed []string
	var errs []error
	r.mu.Lock()
	applied := slices.Clone(r.applied)
	r.mu.Unlock()
	for i := len(applied) - 1; i >= 0; i-- {
		o := applied[i]
		if o.namespace == ns {
			continue
		}
		res := r.env.dynamic.Resource(o.gvr)
		var err error
		bg := metav1.DeletePropagationBackground
		if o.namespace == "" {
			err = res.Delete(ctx, o.name, metav1.DeleteOptions{PropagationPolicy: &bg})
		} else {
			err = res.Namespace(o.namespace).Delete(ctx, o.name, metav1.DeleteOptions{PropagationPolicy: &bg})
		}
		switch {
		case err == nil:
			removed = append(removed, o.String())
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("deleting %s: %w", o, err))
		}
	}
	return removed, errors.Join(errs...)
}
