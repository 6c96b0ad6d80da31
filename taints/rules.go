package taints

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// reservedPrefixes are taint key prefixes other controllers rewrite: the node
// lifecycle controller owns node.kubernetes.io/* and the cloud controller
// manager owns node.cloudprovider.kubernetes.io/*. A rule may only use them
// with AllowReservedKey set.
var reservedPrefixes = []struct{ prefix, owner string }{
	{"node.kubernetes.io/", "the node lifecycle controller"},
	{"node.cloudprovider.kubernetes.io/", "the cloud controller manager"},
}

// ReservedPrefix returns the reserved prefix key falls under, or "".
func ReservedPrefix(key string) string {
	p, _ := reserved(key)
	return p
}

func reserved(key string) (prefix, owner string) {
	for _, r := range reservedPrefixes {
		if strings.HasPrefix(key, r.prefix) {
			return r.prefix, r.owner
		}
	}
	return "", ""
}

// Rule maps a condition in a given status to a taint.
type Rule struct {
	// Condition is the NodeCondition type the rule watches.
	Condition corev1.NodeConditionType
	// Status is the condition status that applies the taint (usually True).
	Status corev1.ConditionStatus
	// TaintOnUnknown also applies the taint while the condition is Unknown.
	TaintOnUnknown bool
	// Taint is what the rule puts on the Node. TimeAdded is ignored.
	Taint corev1.Taint
	// AllowReservedKey lets the rule use a key under a reserved prefix.
	AllowReservedKey bool
}

// Applies reports whether the rule's taint follows from a condition status.
func (r Rule) Applies(status corev1.ConditionStatus) bool {
	if status == r.Status {
		return true
	}
	return status == corev1.ConditionUnknown && r.TaintOnUnknown
}

// ValidateRules checks a rule table. known lists the condition types that
// exist; a rule naming another type is refused because it could never fire.
func ValidateRules(rules []Rule, known map[corev1.NodeConditionType]bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	values := map[TaintID]string{}
	for i, r := range rules {
		p := path.Index(i)
		if r.Condition == "" {
			errs = append(errs, field.Required(p.Child("condition"), "a rule must name the condition it follows"))
		} else if !known[r.Condition] {
			errs = append(errs, field.NotSupported(p.Child("condition"), r.Condition, sortedTypes(known)))
		}
		switch r.Status {
		case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
		default:
			errs = append(errs, field.NotSupported(p.Child("status"), r.Status, []string{"True", "False", "Unknown"}))
		}
		tp := p.Child("taint")
		if r.Taint.Key == "" {
			errs = append(errs, field.Required(tp.Child("key"), ""))
		} else {
			for _, msg := range validation.IsQualifiedName(r.Taint.Key) {
				errs = append(errs, field.Invalid(tp.Child("key"), r.Taint.Key, msg))
			}
			if pre, owner := reserved(r.Taint.Key); pre != "" && !r.AllowReservedKey {
				errs = append(errs, field.Forbidden(tp.Child("key"), fmt.Sprintf(
					"%q is under %s, which %s owns and rewrites from its own state (our taint would be overwritten, or the two would fight); use the selftaint.io/ prefix, or set allowReservedKey: true if you mean it",
					r.Taint.Key, pre, owner)))
			}
		}
		for _, msg := range validation.IsValidLabelValue(r.Taint.Value) {
			errs = append(errs, field.Invalid(tp.Child("value"), r.Taint.Value, msg))
		}
		switch r.Taint.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		case "":
			errs = append(errs, field.Required(tp.Child("effect"), "one of NoSchedule, PreferNoSchedule, NoExecute"))
		default:
			errs = append(errs, field.NotSupported(tp.Child("effect"), r.Taint.Effect, []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}))
		}
		id := IDOf(r.Taint)
		if v, ok := values[id]; ok && v != r.Taint.Value {
			errs = append(errs, field.Invalid(tp.Child("value"), r.Taint.Value,
				fmt.Sprintf("another rule sets %s to %q; rules sharing a key and effect must agree on the value", id, v)))
		} else if !ok {
			values[id] = r.Taint.Value
		}
	}
	return errs
}

func sortedTypes(m map[corev1.NodeConditionType]bool) []string {
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, string(t))
	}
	sort.Strings(out)
	return out
}

// Desired returns the taints the rules imply for the given condition
// statuses, one per key and effect, sorted by key then effect. A condition
// missing from statuses (not yet decided) implies nothing.
func Desired(rules []Rule, statuses map[corev1.NodeConditionType]corev1.ConditionStatus) []corev1.Taint {
	seen := map[TaintID]bool{}
	var out []corev1.Taint
	for _, r := range rules {
		s, ok := statuses[r.Condition]
		if !ok || !r.Applies(s) {
			continue
		}
		id := IDOf(r.Taint)
		if seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, corev1.Taint{Key: r.Taint.Key, Value: r.Taint.Value, Effect: r.Taint.Effect})
	}
	sort.Slice(out, func(i, j int) bool { return IDOf(out[i]).less(IDOf(out[j])) })
	return out
}
