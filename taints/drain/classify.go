// Package drain decides, for the drain of one node, what becomes of each
// of its pods: which must go and may go now through the Eviction API,
// which the request leaves (and so block the drain), which are waited for
// and which are not the drain's business at all; how long a refused pod
// backs off; what a refusal of the Eviction API says (which
// PodDisruptionBudget, how many disruptions it allows); and the message of
// the node's maintenance condition.
//
// It exists so that every decision of a drain is a pure function with
// table tests: agent/drain does the I/O (list, evict, delete) and asks
// this package what to do. The pod filters follow kubectl drain's
// (k8s.io/kubectl/pkg/drain, filters.go), so a node drains here as it
// would with `kubectl drain --ignore-daemonsets` and, where the request
// asks, --force (EvictUnreplicated) and --delete-emptydir-data
// (DeleteEmptyDirData). Like the rest of taints it imports API types and
// no client.
package drain

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/selftaint/selftaint/taints/fleet"
)

// Class is what a drain does with one pod.
type Class int

const (
	// Ignored: a DaemonSet's pod or a mirror (static) pod. The drain
	// leaves it where it is and does not count it: the DaemonSet
	// controller would put it back (it tolerates the cordon), and a
	// static pod is the kubelet's own.
	Ignored Class = iota
	// Evict: the pod must go and may be evicted now.
	Evict
	// Terminating: the pod is being deleted (deletionTimestamp set); the
	// drain waits for it to go.
	Terminating
	// Gone: the pod is being deleted on a node that is not Ready, and its
	// deletionTimestamp plus its grace period has passed: no kubelet is
	// there to confirm it stopped, so it counts as gone (as kubectl
	// drain's --skip-wait-for-delete-timeout).
	Gone
	// Left: the request does not let the drain evict it (no controller
	// without EvictUnreplicated, emptyDir data without
	// DeleteEmptyDirData); its Blockers say why.
	Left
)

func (c Class) String() string {
	switch c {
	case Ignored:
		return "ignored"
	case Evict:
		return "evict"
	case Terminating:
		return "terminating"
	case Gone:
		return "gone"
	case Left:
		return "left"
	}
	return "unknown"
}

// Verdict is what becomes of one pod.
type Verdict struct {
	Class Class
	// Blockers, for Left, say why the request leaves the pod: one per
	// reason (a pod with no controller and emptyDir data has two).
	Blockers []Blocker
}

// Kind is what keeps a pod on a draining node.
type Kind string

const (
	// KindPDB: the Eviction API refused the pod (429): a
	// PodDisruptionBudget allows no disruption now.
	KindPDB Kind = "pdb"
	// KindNoController: the pod has no controller and the request does
	// not set evictUnreplicated.
	KindNoController Kind = "noController"
	// KindEmptyDir: the pod has emptyDir data and the request does not set
	// deleteEmptyDirData.
	KindEmptyDir Kind = "emptyDir"
	// KindError: evicting (or, forced, deleting) the pod failed otherwise;
	// it is retried with back-off.
	KindError Kind = "error"
)

// Blocker is one reason a pod has not gone.
type Blocker struct {
	// Pod is namespace/name.
	Pod  string
	Kind Kind
	// PDB, for KindPDB, is the PodDisruptionBudget that refused the pod,
	// namespace/name; empty where the refusal did not name one.
	PDB string
	// DisruptionsAllowed, for KindPDB, is how many more pods the budget
	// lets go: CurrentHealthy - DesiredHealthy, at least 0.
	DisruptionsAllowed int
	// Counted says the refusal gave DesiredHealthy and CurrentHealthy
	// ("needs D healthy pods and has C currently").
	Counted                        bool
	DesiredHealthy, CurrentHealthy int
	// Message is the API server's word (KindPDB, KindError) or ours.
	Message string
}

// Left is true for the kinds of blocker the request itself leaves (no
// controller, emptyDir data), as opposed to refusals and failures that a
// later try may get past.
func (b Blocker) Left() bool { return b.Kind == KindNoController || b.Kind == KindEmptyDir }

// PodName is a pod's namespace/name, as Blocker.Pod and a drain's lists
// of remaining pods name it.
func PodName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// Classify decides what becomes of pod in the drain of a node asked for
// by req. nodeReady is whether the node's Ready condition is True; now is
// the time of the pass. The order follows kubectl drain's filters:
// mirror and DaemonSet pods first (left alone whatever their state), then
// pods being deleted (waited for), then finished pods (evicted whatever
// else holds: they already stopped), then the request's two permissions.
func Classify(pod *corev1.Pod, req fleet.MaintenanceRequest, nodeReady bool, now time.Time) Verdict {
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return Verdict{Class: Ignored}
	}
	ref := metav1.GetControllerOf(pod)
	if ref != nil && isDaemonSet(ref) {
		return Verdict{Class: Ignored}
	}
	if pod.DeletionTimestamp != nil {
		if !nodeReady && pastGrace(pod, now) {
			return Verdict{Class: Gone}
		}
		return Verdict{Class: Terminating}
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return Verdict{Class: Evict}
	}
	var blockers []Blocker
	if ref == nil && !req.EvictUnreplicated {
		blockers = append(blockers, Blocker{Pod: PodName(pod), Kind: KindNoController,
			Message: "the pod has no controller to recreate it (evictUnreplicated not set)"})
	}
	if hasEmptyDir(pod) && !req.DeleteEmptyDirData {
		blockers = append(blockers, Blocker{Pod: PodName(pod), Kind: KindEmptyDir,
			Message: "the pod has emptyDir data that eviction would lose (deleteEmptyDirData not set)"})
	}
	if len(blockers) > 0 {
		return Verdict{Class: Left, Blockers: blockers}
	}
	return Verdict{Class: Evict}
}

// isDaemonSet: the controller is an apps DaemonSet (any version of the
// group, where kubectl checks apps/v1 only).
func isDaemonSet(ref *metav1.OwnerReference) bool {
	if ref.Kind != "DaemonSet" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == "apps"
}

func hasEmptyDir(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil {
			return true
		}
	}
	return false
}

// pastGrace: now is past the pod's deletionTimestamp plus its deletion
// grace period. The API server already sets deletionTimestamp to the end
// of the grace period, so this waits one grace period more than a kubelet
// would take: a pod is counted gone only well after it should have
// stopped.
func pastGrace(pod *corev1.Pod, now time.Time) bool {
	var grace time.Duration
	if g := pod.DeletionGracePeriodSeconds; g != nil && *g > 0 {
		grace = time.Duration(*g) * time.Second
	}
	return now.After(pod.DeletionTimestamp.Add(grace))
}

// Spread orders pods so that pods of one controller are as far apart as
// can be: the first of each controller, then the second of each, and so
// on (controllers, and pods within one, in the order given). Evictions
// made in this order, a few at a time, seldom hit one
// PodDisruptionBudget at once: the API server serializes evictions under
// one budget (each updates its status, and a conflict is retried after
// 500 ms), so a drain that evicted a Deployment's pods side by side
// would spend its time in those retries.
func Spread[P any](pods []P, pod func(P) *corev1.Pod) []P {
	var keys []string
	groups := map[string][]P{}
	for _, p := range pods {
		key := ""
		if ref := metav1.GetControllerOf(pod(p)); ref != nil {
			key = string(ref.UID)
		}
		if _, ok := groups[key]; !ok {
			keys = append(keys, key)
		}
		groups[key] = append(groups[key], p)
	}
	out := make([]P, 0, len(pods))
	for i := 0; len(out) < len(pods); i++ {
		for _, k := range keys {
			if g := groups[k]; i < len(g) {
				out = append(out, g[i])
			}
		}
	}
	return out
}
