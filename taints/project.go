package taints

import (
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/taints/fleet"
)

// ProjectNoExecute asks the coordinator's policy (fleet.Project, which
// asks fleet.Decide) about node as its agent will publish it once its
// conditions have statuses (its own, with a fault just injected or a
// proposed taint's condition in place: ProposedStatuses): each condition
// with that status, and a grant asked for the conditions whose NoExecute
// rules then apply (Wanted, as PlanRequest writes the request: a request
// already made keeps its place in line). in is the fleet as the
// coordinator sees it now (fleet.NodeView of each Node); a condition node
// already reports is counted once.
func ProjectNoExecute(in fleet.Input, node *corev1.Node, rules []Rule, statuses map[corev1.NodeConditionType]corev1.ConditionStatus, flapping map[corev1.NodeConditionType]bool, now time.Time) fleet.Projection {
	pending := PendingNode(node, rules, statuses, flapping, now)
	fn, _ := fleet.NodeView(pending, in.Config.Watched)
	fn.CarriesNoExecute, _ = CarriesNoExecute(pending) // unreadable: counted, as the coordinator does
	for _, n := range in.Nodes {
		if n.Name == node.Name {
			fn.AliveSeen = n.AliveSeen
		}
	}
	return fleet.Project(in, fn)
}

// PendingNode is a copy of node with its conditions at statuses and its
// NoExecute request as its agent will write it for them (PlanRequest for
// Wanted; no request when nothing is wanted). node is not changed.
func PendingNode(node *corev1.Node, rules []Rule, statuses map[corev1.NodeConditionType]corev1.ConditionStatus, flapping map[corev1.NodeConditionType]bool, now time.Time) *corev1.Node {
	n := node.DeepCopy()
	for _, c := range slices.Sorted(maps.Keys(statuses)) {
		i := slices.IndexFunc(n.Status.Conditions, func(nc corev1.NodeCondition) bool { return nc.Type == c })
		if i < 0 {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, LastTransitionTime: metav1.NewTime(now)})
			i = len(n.Status.Conditions) - 1
		}
		n.Status.Conditions[i].Status = statuses[c]
	}
	v, _ := PlanRequest(node, RequestInput{Wanted: Wanted(rules, statuses, flapping)}, now)
	switch {
	case v != "":
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[fleet.RequestAnnotation] = v
	default:
		delete(n.Annotations, fleet.RequestAnnotation)
	}
	return n
}

// ProposedStatuses are the condition statuses that would put on the
// proposed NoExecute taints of rules (a NoExecute rule whose taint has the
// proposed taint's key and value): each such rule's condition at the
// status it applies at, unless statuses already has it at a status that
// applies the rule. Other proposed taints imply nothing.
func ProposedStatuses(rules []Rule, proposed []corev1.Taint, statuses map[corev1.NodeConditionType]corev1.ConditionStatus) map[corev1.NodeConditionType]corev1.ConditionStatus {
	out := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	for _, t := range proposed {
		if t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		for _, r := range rules {
			if r.Taint.Effect != corev1.TaintEffectNoExecute || r.Taint.Key != t.Key || r.Taint.Value != t.Value {
				continue
			}
			if st, ok := statuses[r.Condition]; ok && r.Applies(st) {
				continue
			}
			if _, ok := out[r.Condition]; !ok {
				out[r.Condition] = r.Status
			}
		}
	}
	return out
}

// Withheld are the taints of proposed that a node in zone does not put on
// while guard is as it is: the NoExecute taints of rules whose condition
// the guard holds there (PlanGates' Hold: no grant and no new taint for
// it), each once.
func Withheld(rules []Rule, proposed []corev1.Taint, guard fleet.GuardState, zone string) []corev1.Taint {
	gates := PlanGates(rules, nil, nil, zone, NoExecuteInput{Guard: &guard})
	var out []corev1.Taint
	for _, t := range proposed {
		if t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		for _, r := range rules {
			if r.Taint.Effect == corev1.TaintEffectNoExecute && r.Taint.Key == t.Key && r.Taint.Value == t.Value && gates[r.Condition].Hold {
				out = append(out, t)
				break
			}
		}
	}
	return out
}
