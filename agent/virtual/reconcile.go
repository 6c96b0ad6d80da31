package virtual

// This file keeps the pods' readiness in the API true to what the virtual
// kubelet runs, as a kubelet's status manager does: the node lifecycle
// controller marks a node's pods not ready while the node is NotReady
// (MarkPodsNotReady), and nothing else ever marks them ready again. A
// virtual kubelet that comes back (its process restarted, or a Control's
// Resume) writes its pods' statuses when it starts them, but the
// controller, still seeing the node NotReady for a moment, may mark them
// again after that write; virtual-kubelet's pod controller does not write a
// status it already wrote. So the kubelet checks, on start and every few
// seconds, whether the API's pods say what it runs, and writes them back
// once its Node is Ready again.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Pacing of the readiness reconcile: the pods are compared every
// readyCheck (from the pod informer's cache: no API call); while some
// disagree, the Node is read at most every nodeCheck, which doubles up to
// maxNodeCheck while the Node is not Ready (a long NotReady fault costs one
// read per node every maxNodeCheck, as a kubelet's status sync period).
const (
	readyCheck   = time.Second
	nodeCheck    = 2 * time.Second
	maxNodeCheck = 10 * time.Second
)

// stalePod is a pod whose status in the API disagrees with how it runs
// here, and the status to write back (podAPI.report's status: it applies
// to the pod as the API has it at the write, which may be newer than api).
type stalePod struct {
	api    *corev1.Pod
	status func(*corev1.Pod) corev1.PodStatus
}

// stale are the pods of api (the node's pods as the API has them) that run
// here and whose kubelet-owned conditions (Ready, ContainersReady, ...)
// say otherwise in the API, with the status a kubelet's status manager
// would write: the one it runs, merged onto the API's as mergeConditions
// does, a condition whose status changes moving its lastTransitionTime to
// now. A pod being deleted, in a terminal phase, or another pod under the
// name is left alone (the pod controller stops those): by stale, as api
// has it, and by the status written, as the API has it at the write (a
// conflict's re-read may find it stopped meanwhile: see readyAgain).
func (p *pods) stale(api []*corev1.Pod, now metav1.Time) []stalePod {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []stalePod
	for _, cur := range api {
		ours, ok := p.byKey[podKey(cur.Namespace, cur.Name)]
		if !ok || ours.UID != cur.UID || cur.DeletionTimestamp != nil ||
			cur.Status.Phase == corev1.PodSucceeded || cur.Status.Phase == corev1.PodFailed ||
			ours.Status.Phase != corev1.PodRunning || agrees(cur.Status.Conditions, ours.Status.Conditions) {
			continue
		}
		ran := *ours.Status.DeepCopy()
		uid := ours.UID
		out = append(out, stalePod{api: cur, status: func(api *corev1.Pod) corev1.PodStatus {
			return readyAgain(api, uid, ran, now)
		}})
	}
	return out
}

// agrees reports whether the API's conditions have each kubelet-owned
// condition of ours with the same status.
func agrees(api, ours []corev1.PodCondition) bool {
	for _, c := range ours {
		if !kubeletCondition(c.Type) {
			continue
		}
		if a := findPodCondition(api, c.Type); a == nil || a.Status != c.Status {
			return false
		}
	}
	return true
}

func findPodCondition(cs []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// readyAgain is the status the readiness reconcile writes onto api (the
// pod as the API has it at the write) for the pod uid running here with
// ran: rewritten, unless the pod stopped or is stopping in the API (a
// terminal phase, which is final; a deletionTimestamp: the pod controller
// stops it) or is another pod under the name, which keep api's status (no
// write), as terminated does.
func readyAgain(api *corev1.Pod, uid types.UID, ran corev1.PodStatus, now metav1.Time) corev1.PodStatus {
	if api.UID != uid || api.DeletionTimestamp != nil ||
		api.Status.Phase == corev1.PodSucceeded || api.Status.Phase == corev1.PodFailed {
		return api.Status
	}
	return rewritten(api.Status, ran, now)
}

// rewritten is ran (the status a pod runs with here) written over api (the
// status the API has): the kubelet's conditions ours, each whose status
// changes with its lastTransitionTime at now, the others as the API has
// them.
func rewritten(api, ran corev1.PodStatus, now metav1.Time) corev1.PodStatus {
	out := *ran.DeepCopy()
	for i := range out.Conditions {
		c := &out.Conditions[i]
		if a := findPodCondition(api.Conditions, c.Type); a != nil && a.Status != c.Status {
			c.LastTransitionTime = now
		}
	}
	out.Conditions = mergeConditions(api.Conditions, out.Conditions)
	out.NominatedNodeName = api.NominatedNodeName
	return out
}

// reconcileReady keeps the readiness of the node's pods in the API true
// to what runs here until ctx is done: every readyCheck it compares the
// pods (list: the pod informer's cache) with what runs; where some
// disagree and the Node is Ready (ready reads it; while it is not, the
// node lifecycle controller would only mark them again), it writes them
// back, status only, through p.api.report.
func (p *pods) reconcileReady(ctx context.Context, list func() []*corev1.Pod, ready func(context.Context) (bool, error), logf func(msg string, args ...any)) {
	t := time.NewTicker(readyCheck)
	defer t.Stop()
	wait := nodeCheck
	var nextNode time.Time // when the Node may be read again
	for {
		if stale := p.stale(list(), metav1.NewTime(p.clock.Now())); len(stale) == 0 {
			wait, nextNode = nodeCheck, time.Time{}
		} else if !time.Now().Before(nextNode) {
			ok, err := ready(ctx)
			switch {
			case err != nil:
				logf("not reconciling pod readiness: reading the node", "err", err, "pods", len(stale))
				nextNode = time.Now().Add(wait)
			case !ok:
				nextNode = time.Now().Add(wait)
				wait = min(2*wait, maxNodeCheck)
			default:
				wait, nextNode = nodeCheck, time.Time{}
				for _, s := range stale {
					if err := p.api.report(ctx, s.api, s.status); err != nil {
						logf("not reconciling pod readiness", "pod", s.api.Namespace+"/"+s.api.Name, "err", err)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// nodeReady reports whether Node name's Ready condition is True in the
// API.
func nodeReady(nodes interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Node, error)
}, name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("reading node %s: %w", name, err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}
}
