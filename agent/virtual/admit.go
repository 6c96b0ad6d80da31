package virtual

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/selftaint/selftaint/taints"
)

// ReasonNotOptedIn is the reason of the status a virtual node gives a pod
// it rejects at admission: one that did not opt into virtual nodes.
const ReasonNotOptedIn = "NotOptedIn"

// OptedIn reports whether pod opted into virtual nodes whose opt-in taints
// are registration (NodeTemplate.OptIn: in a shared cluster, the
// registration taints): it has, for each of them, a toleration of that
// taint's own key that tolerates it. A
// toleration with no key (operator Exists, which tolerates every taint: the
// toleration of CNI agents, log shippers and node agents' DaemonSets) is
// no opt-in: such a pod lands on a virtual node without anyone asking for
// it, and a virtual node that reported it Ready would put the address the
// virtual kubelet chose behind the pod's Services. missing is the taints
// pod does not tolerate by key. With no registration taint every pod is
// opted in: a cluster of the virtual nodes' own, such as a drill's (in a
// shared one, the admission policy lets the deployed service account
// register no Node without its registration taint, nor run a pod that did
// not opt in).
func OptedIn(pod *corev1.Pod, registration []corev1.Taint) (ok bool, missing []corev1.Taint) {
	for i := range registration {
		t := &registration[i]
		byKey := false
		for j := range pod.Spec.Tolerations {
			tol := &pod.Spec.Tolerations[j]
			// No comparison operators: the registration taint's value is
			// no number, and the admission policy does not know them.
			if tol.Key != "" && tol.Key == t.Key && tol.ToleratesTaint(klog.Background(), t, false) {
				byKey = true
				break
			}
		}
		if !byKey {
			missing = append(missing, *t)
		}
	}
	return len(missing) == 0, missing
}

// rejectedStatus is the status a virtual node gives a pod it rejects at
// admission for missing (see OptedIn), as a kubelet gives a pod it rejects
// (its rejectPod: phase Failed, a reason, "Pod was rejected: ..."): no pod
// IP, no container started, no condition of the kubelet's (api's others are
// kept, as mergeConditions keeps them). A failed pod is never in a
// Service's endpoints; its DaemonSet, if any, deletes it and creates
// another, with the DaemonSet controller's back-off, as for a pod a real
// kubelet rejects.
func rejectedStatus(node string, api corev1.PodStatus, missing []corev1.Taint) corev1.PodStatus {
	keys := make([]string, len(missing))
	for i, t := range missing {
		keys[i] = fmt.Sprintf("{key: %s, operator: Exists}", t.Key)
	}
	return corev1.PodStatus{
		Phase:  corev1.PodFailed,
		Reason: ReasonNotOptedIn,
		Message: fmt.Sprintf("Pod was rejected: virtual node %s runs only pods that opted into virtual nodes by tolerating its registration taint %s by its key "+
			"(a toleration of every taint is no opt-in); add the toleration %s", node, formatTaints(missing), strings.Join(keys, ", ")),
		QOSClass:   api.QOSClass,
		Conditions: mergeConditions(api.Conditions, nil),
	}
}

// formatTaints is ts as key[=value]:Effect, comma separated.
func formatTaints(ts []corev1.Taint) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = taints.Format(t)
	}
	return strings.Join(s, ",")
}
