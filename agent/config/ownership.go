package config

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/taints"
)

// The admission policy's parameters: annotations on the
// ValidatingAdmissionPolicy object itself (deploy/admission-policy.yaml),
// one name per line. The policy is its own parameter object (paramKind
// ValidatingAdmissionPolicy, paramRef naming itself), so it can never be in
// force without them: a separate parameter object that went missing would
// make the API server deny every Node write in the cluster, kubelets'
// included, before it even looked at who was asking. The policy reads them
// to decide what the agent's service account may change on its Node, so
// what the agent may own comes from the object the operator controls, never
// from one the agent can write.
const (
	ParamTaints     = "agent.selftaint.io/owned-taints"
	ParamLabels     = "agent.selftaint.io/owned-labels"
	ParamConditions = "agent.selftaint.io/owned-conditions"
	ParamResources  = "agent.selftaint.io/owned-resources"
)

// ParamKeys are the parameter keys, in the order they are printed.
func ParamKeys() []string {
	return []string{ParamTaints, ParamLabels, ParamConditions, ParamResources}
}

// Ownership is what this config lets the agent own on its Node:
//   - taints, by key and effect: the rules' (a NoExecute rule's at its
//     fallback effect too), the hardware taints (the
//     resources with taint: true) and, with initialization on, the
//     uninitialized taint under both keys (the default and the cluster
//     autoscaler's startup key), so that switching between them never
//     strands the other;
//   - labels: <resource>.present for hardware with label: true;
//   - conditions: every enabled probe's, the checks' (custom and NPD) and
//     the initialization condition;
//   - resources: hardware with advertise: true.
//
// checkConditions are the conditions the checks feed; CheckConditions reads
// them (NPD files name theirs).
func (c *Config) Ownership(checkConditions []corev1.NodeConditionType) agent.Ownership {
	var o agent.Ownership
	taint := func(key string, effect corev1.TaintEffect) {
		o.Taints = append(o.Taints, taints.TaintID{Key: key, Effect: effect})
	}
	for _, r := range c.TaintRules() {
		taint(r.Taint.Key, r.Taint.Effect)
		if r.Fallback != "" {
			taint(r.Taint.Key, r.Fallback)
		}
	}
	for _, p := range c.probeList() {
		if p.c.IsEnabled() {
			o.Conditions = append(o.Conditions, p.c.Condition)
		}
	}
	o.Conditions = append(o.Conditions, checkConditions...)
	if in := c.Initialization; in.IsEnabled() {
		for _, k := range []string{in.Taint.Key, DefaultInitTaintKey, AutoscalerStartupTaintKey} {
			taint(k, in.Taint.Effect)
		}
		o.Conditions = append(o.Conditions, in.Condition)
	}
	actions := []HardwareAction{c.Hardware.GPU}
	for _, r := range c.Hardware.PCI {
		actions = append(actions, r.HardwareAction)
	}
	for _, a := range actions {
		if *a.Taint {
			o.Taints = append(o.Taints, taints.IDOf(agent.HardwareTaint(corev1.ResourceName(a.Resource))))
		}
		if *a.Label {
			o.Labels = append(o.Labels, agent.HardwareLabel(corev1.ResourceName(a.Resource)))
		}
		if *a.Advertise {
			o.Resources = append(o.Resources, corev1.ResourceName(a.Resource))
		}
	}
	return o.Merge(agent.Ownership{})
}

// CheckConditions is the conditions the config's checks feed: the custom
// checks' and those of every NPD file's permanent rules (the files are
// read, so they must be there). Files of temporary rules only feed none.
func (c *Config) CheckConditions(log *slog.Logger) ([]corev1.NodeConditionType, error) {
	specs, err := c.CheckProbeSpecs(log)
	if err != nil {
		return nil, err
	}
	out := make([]corev1.NodeConditionType, 0, len(specs))
	for _, s := range specs {
		if !s.EventsOnly() {
			out = append(out, s.Condition)
		}
	}
	return out, nil
}

// PolicyParams is o as the admission policy's parameters: each list one
// name per line.
func PolicyParams(o agent.Ownership) map[string]string {
	lines := func(xs []string) string {
		if len(xs) == 0 {
			return ""
		}
		return strings.Join(xs, "\n") + "\n"
	}
	return map[string]string{
		ParamTaints:     lines(idStrings(o.Taints)),
		ParamLabels:     lines(o.Labels),
		ParamConditions: lines(toStrings(o.Conditions)),
		ParamResources:  lines(toStrings(o.Resources)),
	}
}

func idStrings(ids []taints.TaintID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

func toStrings[T ~string](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

// paramList reads one parameter as the policy does: one name per line,
// surrounding space trimmed, blank lines skipped.
func paramList(v string) []string {
	var out []string
	for _, l := range strings.Split(v, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// CheckPolicyParams compares the admission policy's parameters (have, its
// annotations) with what the config needs (want, PolicyParams of
// Ownership). Each problem names the parameter and the names: missing ones
// mean the API server will deny the agent's writes of them; extra ones
// mean a stolen agent token may change more than the agent needs.
func CheckPolicyParams(want, have map[string]string) (missing, extra []string) {
	for _, k := range ParamKeys() {
		w, h := paramList(want[k]), paramList(have[k])
		if d := difference(w, h); len(d) > 0 {
			missing = append(missing, fmt.Sprintf("%s lacks %s", k, strings.Join(d, ", ")))
		}
		if d := difference(h, w); len(d) > 0 {
			extra = append(extra, fmt.Sprintf("%s also allows %s", k, strings.Join(d, ", ")))
		}
	}
	return missing, extra
}

// difference is the elements of a not in b, sorted.
func difference(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

// FormatPolicyParams writes params as YAML annotations (to go under the
// policy's metadata.annotations), keys in ParamKeys order.
func FormatPolicyParams(params map[string]string) string {
	var b strings.Builder
	for _, k := range ParamKeys() {
		v := paramList(params[k])
		if len(v) == 0 {
			fmt.Fprintf(&b, "%s: \"\"\n", k)
			continue
		}
		fmt.Fprintf(&b, "%s: |\n", k)
		for _, l := range v {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	return b.String()
}
