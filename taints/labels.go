package taints

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// OwnedLabelsAnnotation records the label keys selftaint set on a Node, so
// it removes only those. Labels are a map, so a merge patch of our keys
// never touches anyone else's; the record is what tells our label from an
// identical one another writer set first.
const OwnedLabelsAnnotation = "selftaint.io/owned-labels"

// ParseOwnedLabels reads the ownership record: label keys separated by
// commas.
func ParseOwnedLabels(s string) ([]string, error) {
	var keys []string
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return nil, fmt.Errorf("%s: %q is not a label key: %s", OwnedLabelsAnnotation, k, strings.Join(msgs, "; "))
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// FormatOwnedLabels writes the ownership record, sorted.
func FormatOwnedLabels(keys []string) string {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	return strings.Join(slices.Compact(keys), ",")
}

// LabelPlan is what to change in a Node's labels.
type LabelPlan struct {
	// Set are labels to add or change.
	Set map[string]string
	// Remove are our labels no longer wanted.
	Remove []string
	// Owned is the new ownership record.
	Owned []string
	// Foreign are wanted keys that another writer already set (to any
	// value) and we do not own: left alone, not claimed.
	Foreign []string
	// Changed reports whether anything needs writing.
	Changed bool
}

// PlanLabels works out the label changes that give desired, touching only
// keys we own or that nobody has set.
func PlanLabels(current map[string]string, owned []string, desired map[string]string) LabelPlan {
	p := LabelPlan{Set: map[string]string{}}
	isOwned := map[string]bool{}
	for _, k := range owned {
		isOwned[k] = true
	}
	keep := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(desired)) {
		v := desired[k]
		cur, exists := current[k]
		switch {
		case exists && !isOwned[k]:
			p.Foreign = append(p.Foreign, k)
			continue
		case !exists || cur != v:
			p.Set[k] = v
		}
		keep[k] = true
	}
	for _, k := range owned {
		if keep[k] {
			continue
		}
		if _, exists := current[k]; exists {
			p.Remove = append(p.Remove, k)
		}
	}
	p.Owned = slices.Sorted(maps.Keys(keep))
	p.Changed = len(p.Set) > 0 || len(p.Remove) > 0 || FormatOwnedLabels(owned) != FormatOwnedLabels(p.Owned)
	return p
}
