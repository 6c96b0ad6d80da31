package drill

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/selftaint/selftaint/taints/faults"
)

// Known is what a drill's nodes and agents will be, known before it runs
// from its file and its agents' config (cluster.config): what CheckKnown
// checks the steps against. agent/drill fills it (it knows the labels a
// virtual node registers with and the agents' probe registry).
type Known struct {
	// NodeLabels are the labels each of the drill's virtual nodes
	// registers with, by node name; nil: not known (nothing is checked
	// against them).
	NodeLabels map[string]map[string]string
	// Conditions and ProbeConditions are the fault targets the drill's
	// agents take (faults.ResolveTarget): condition types, and probe
	// names meaning their condition. Conditions nil: not known.
	Conditions      map[corev1.NodeConditionType]bool
	ProbeConditions map[string]corev1.NodeConditionType
}

// CheckKnown finds what Validate cannot see in the file alone but what is
// known before the drill runs: a step's selector that picks none of the
// drill's nodes (only where the drill has no real nodes, whose labels are
// not known until it runs), and a fault on a condition or probe its
// agents do not have. Each error names its field path.
func (s *Scenario) CheckKnown(k Known) []FieldErr {
	var errs []FieldErr
	add := func(p *field.Path, format string, args ...any) {
		errs = append(errs, FieldErr{Path: p.String(), Msg: fmt.Sprintf(format, args...)})
	}
	for i := range s.Steps {
		st := &s.Steps[i]
		kind := st.StepKind()
		p := field.NewPath("steps").Index(i).Child(kind)
		if pick, ok := st.pick(); ok && pick.Selector != "" && s.Cluster.RealNodes == "" && k.NodeLabels != nil {
			if sel, err := labels.Parse(pick.Selector); err == nil && !matchesAny(sel, k.NodeLabels) {
				add(p.Child("selector"), "%q matches none of the drill's nodes (%s)", pick.Selector, s.poolLabels())
			}
		}
		if f := st.Fault; f != nil && f.Condition != "" && k.Conditions != nil {
			if _, err := faults.ResolveTarget(f.Condition, k.Conditions, k.ProbeConditions); err != nil {
				add(p.Child("condition"), "%q is neither a probe nor a condition the drill's agents have%s: the probes are %s; the conditions %s",
					f.Condition, suggest(f.Condition, k), strings.Join(slices.Sorted(maps.Keys(k.ProbeConditions)), ", "), conditionList(k.Conditions))
			}
		}
	}
	return errs
}

// pick is the nodes a step acts on, if it picks any.
func (st *Step) pick() (Nodes, bool) {
	switch {
	case st.Fault != nil:
		return st.Fault.Nodes, true
	case st.NotReady != nil:
		return st.NotReady.Nodes, true
	case st.Drain != nil:
		return st.Drain.Nodes, true
	case st.WaitFor != nil:
		return st.WaitFor.Nodes, true
	}
	return Nodes{}, false
}

func matchesAny(sel labels.Selector, nodes map[string]map[string]string) bool {
	for _, l := range nodes {
		if sel.Matches(labels.Set(l)) {
			return true
		}
	}
	return false
}

// poolLabels says the pools' nodes and the labels the file gives them:
// "gpu-1..gpu-4: pool=gpu; cpu-1: no labels of their own".
func (s *Scenario) poolLabels() string {
	var out []string
	for _, p := range s.Cluster.Pools {
		if p.Count < 1 {
			continue
		}
		own := "no labels of their own"
		if len(p.Labels) > 0 {
			var kv []string
			for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
				kv = append(kv, k+"="+p.Labels[k])
			}
			own = strings.Join(kv, ", ")
		}
		nodes := p.Name + "-1"
		if p.Count > 1 {
			nodes = fmt.Sprintf("%s-1..%s-%d", p.Name, p.Name, p.Count)
		}
		out = append(out, nodes+": "+own)
	}
	if len(out) == 0 {
		return "it has none"
	}
	return strings.Join(out, "; ")
}

// suggest is " (did you mean X?)" for the probe or condition name closest
// to target, when one is close.
func suggest(target string, k Known) string {
	best, bestDist := "", 3
	names := slices.Collect(maps.Keys(k.ProbeConditions))
	for c := range k.Conditions {
		names = append(names, string(c))
	}
	slices.Sort(names)
	for _, n := range names {
		if d := editDistance(strings.ToLower(n), strings.ToLower(target)); d < bestDist {
			best, bestDist = n, d
		}
	}
	if best == "" || bestDist > max(1, len(target)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func conditionList(conds map[corev1.NodeConditionType]bool) string {
	var out []string
	for c := range conds {
		out = append(out, string(c))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
