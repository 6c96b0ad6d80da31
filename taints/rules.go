package taints

import (
	"fmt"
	"slices"
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
	// Fallback is the effect a NoExecute rule's taint takes while the node
	// may not apply NoExecute (no grant, the guard, flapping): the taint
	// with this effect is on whenever the rule applies, and the NoExecute
	// one joins it only with a grant. Empty for other rules.
	Fallback corev1.TaintEffect
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
	paths := make([]*field.Path, len(rules))
	for i := range rules {
		paths[i] = path.Index(i)
	}
	return ValidateRulesAt(rules, paths, known)
}

// ValidateRulesAt is ValidateRules where rules[i] is at paths[i]: the
// taint rules of a table some of whose lines make no taint (a drain rule
// without one).
func ValidateRulesAt(rules []Rule, paths []*field.Path, known map[corev1.NodeConditionType]bool) field.ErrorList {
	var errs field.ErrorList
	values := map[TaintID]string{}
	for i, r := range rules {
		p := paths[i]
		errs = append(errs, ValidateTrigger(r.Condition, r.Status, known, p)...)
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
		errs = append(errs, validateFallback(r, tp, p.Child("fallback"))...)
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

// ValidateTrigger checks the condition and status a rule at p follows:
// the condition is one of known, the status True, False or Unknown.
func ValidateTrigger(condition corev1.NodeConditionType, status corev1.ConditionStatus, known map[corev1.NodeConditionType]bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if condition == "" {
		errs = append(errs, field.Required(p.Child("condition"), "a rule must name the condition it follows"))
	} else if !known[condition] {
		errs = append(errs, field.NotSupported(p.Child("condition"), condition, sortedTypes(known)))
	}
	switch status {
	case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
	default:
		errs = append(errs, field.NotSupported(p.Child("status"), status, []string{"True", "False", "Unknown"}))
	}
	return errs
}

// validateFallback checks a rule's fallback effect: only a NoExecute rule
// has one, and it is NoSchedule or PreferNoSchedule.
func validateFallback(r Rule, tp, fp *field.Path) field.ErrorList {
	switch {
	case r.Fallback == "":
		return nil
	case r.Taint.Effect != corev1.TaintEffectNoExecute:
		return field.ErrorList{field.Invalid(fp, r.Fallback, fmt.Sprintf(
			"only a NoExecute rule has a fallback effect; %s is %s", tp.Child("effect"), r.Taint.Effect))}
	case r.Fallback != corev1.TaintEffectNoSchedule && r.Fallback != corev1.TaintEffectPreferNoSchedule:
		return field.ErrorList{field.NotSupported(fp, r.Fallback, []string{"NoSchedule", "PreferNoSchedule"})}
	}
	return nil
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
// statuses, one per key and effect, sorted by key then effect, and those
// the guard holds back. A condition missing from statuses (not yet
// decided) implies nothing. A NoExecute rule that applies implies its
// fallback taint, and its NoExecute taint too where its condition's gate
// allows NoExecute (the zero Gate does not: no grant, no NoExecute). A
// condition whose gate holds implies only the taints already on the Node
// (present); the others are returned as held.
func Desired(rules []Rule, statuses map[corev1.NodeConditionType]corev1.ConditionStatus, gates map[corev1.NodeConditionType]Gate, present map[TaintID]bool) (desired, held []corev1.Taint) {
	seen := map[TaintID]bool{}
	heldSeen := map[TaintID]bool{}
	for _, r := range rules {
		s, ok := statuses[r.Condition]
		if !ok || !r.Applies(s) {
			continue
		}
		g := gates[r.Condition]
		for _, t := range ruleTaints(r, g.NoExecute) {
			id := IDOf(t)
			switch {
			case seen[id]:
			case g.Hold && !present[id]:
				if !heldSeen[id] {
					heldSeen[id] = true
					held = append(held, t)
				}
			default:
				seen[id] = true
				desired = append(desired, t)
			}
		}
	}
	// A taint another, unheld rule asks for is not held.
	held = slices.DeleteFunc(held, func(t corev1.Taint) bool { return seen[IDOf(t)] })
	sortTaints(desired)
	sortTaints(held)
	return desired, held
}

// ruleTaints are the taints rule r implies when it applies: its taint, or,
// for a NoExecute rule, its fallback taint and, when noExecute, its
// NoExecute taint.
func ruleTaints(r Rule, noExecute bool) []corev1.Taint {
	t := corev1.Taint{Key: r.Taint.Key, Value: r.Taint.Value, Effect: r.Taint.Effect}
	if r.Taint.Effect != corev1.TaintEffectNoExecute {
		return []corev1.Taint{t}
	}
	var out []corev1.Taint
	if r.Fallback != "" {
		out = append(out, corev1.Taint{Key: r.Taint.Key, Value: r.Taint.Value, Effect: r.Fallback})
	}
	if noExecute {
		out = append(out, t)
	}
	return out
}

func sortTaints(ts []corev1.Taint) {
	sort.Slice(ts, func(i, j int) bool { return IDOf(ts[i]).less(IDOf(ts[j])) })
}
