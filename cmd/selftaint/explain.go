package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/taints"
)

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

// explainPageSize is how many pods one list request asks for.
const explainPageSize = 500

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	prog := progOf(ctx)
	fs := flag.NewFlagSet(prog+" explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), forProg(prog, `Usage: selftaint explain NODE [--taint key[=value]:Effect ...] [flags]

Lists the pods bound to NODE and says, for the node's current taints plus any
proposed with --taint, which pods the taint-eviction controller would delete
and when, and whether new pods like each could still be scheduled there.

Flags:
`))
		fs.PrintDefaults()
	}
	var proposedArgs stringsFlag
	fs.Var(&proposedArgs, "taint", "a proposed taint, key[=value]:Effect as kubectl taint takes it; repeatable. It replaces a current taint with the same key and effect")
	kf := addKubeFlags(fs, coordinatorNamespaceUsage)
	output := fs.String("output", "table", "table or json")
	configPath := fs.String("config", "", "the agents' config file: its NoExecute rules and coordinator settings, to say whether a NoExecute taint would be granted, budgeted, suspended or fall back; empty means the built-in defaults")
	comparison := fs.Bool("comparison-operators", false, "let Lt and Gt tolerations compare values, as with the TaintTolerationComparisonOperators feature gate (alpha and off by default in Kubernetes 1.35)")

	// NODE may come before, between or after the flags.
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(positional) > 1 {
		fmt.Fprintf(stderr, "%s: one NODE, not %q\n", fs.Name(), positional)
		return errUsage
	}
	var node string
	if len(positional) == 1 {
		node = positional[0]
	}
	if node == "" {
		fmt.Fprintf(stderr, "%s: missing NODE\n", fs.Name())
		fs.Usage()
		return errUsage
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("--output must be table or json, not %q", *output)
	}
	var proposed []corev1.Taint
	for _, s := range proposedArgs {
		t, err := taints.ParseTaint(s)
		if err != nil {
			return fmt.Errorf("--taint: %w", err)
		}
		proposed = append(proposed, t)
	}

	cfg, err := config.Load(*configPath)
	if err != nil {
		return err
	}
	client, leases, err := operatorClients(kf, "selftaint-explain")
	if err != nil {
		return err
	}
	n, err := client.Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting node %s: %w", node, err)
	}
	pods, err := podsOnNode(ctx, client, node)
	if err != nil {
		return err
	}
	now := time.Now()
	considered, isProposed := withProposed(n.Spec.Taints, proposed, now)
	rep := taints.ExplainWith(considered, pods, now, taints.ExplainOptions{ComparisonOperators: *comparison})
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := printExplain(stdout, node, considered, isProposed, rep, now); err != nil {
		return err
	}
	// The standing with the proposed taints' conditions counted as the
	// node's own: the guard they would trip holds them.
	st, err := readStanding(ctx, client, leases, cfg, kf.coordinatorNamespace(cfg), n, proposedStatuses(cfg.TaintRules(), n, proposed), now)
	if err != nil {
		return err
	}
	if w := st.withheld(proposed); len(w) > 0 {
		fmt.Fprintf(stdout, "\nBut %s would not go on: with this node's own condition counted, the disruption guard holds it (below); while it holds, no pod is evicted for it.\n", taintList(w))
	}
	st.print(stdout)
	return nil
}

// proposedStatuses are the condition statuses of node n's that would put
// on the proposed NoExecute taints of rules (taints.ProposedStatuses).
func proposedStatuses(rules []taints.Rule, n *corev1.Node, proposed []corev1.Taint) map[corev1.NodeConditionType]corev1.ConditionStatus {
	statuses := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	for _, c := range n.Status.Conditions {
		statuses[c.Type] = c.Status
	}
	return taints.ProposedStatuses(rules, proposed, statuses)
}

// withoutTaints is ts without those in drop (by key, effect and value).
func withoutTaints(ts, drop []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range ts {
		if !containsTaint(drop, t) {
			out = append(out, t)
		}
	}
	return out
}

// podsOnNode lists the pods bound to node in all namespaces, page by page.
func podsOnNode(ctx context.Context, client typedcorev1.PodsGetter, node string) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		Limit:         explainPageSize,
	}
	var pods []corev1.Pod
	for {
		list, err := client.Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing pods on node %s: %w", node, err)
		}
		pods = append(pods, list.Items...)
		if list.Continue == "" {
			return pods, nil
		}
		opts.Continue = list.Continue
	}
}

// withProposed returns current with proposed added, a proposed taint
// replacing a current one with the same key and effect (as kubectl taint
// --overwrite would), and which of the result are proposed. A proposed
// NoExecute taint gets TimeAdded now, as kubectl and selftaint set it.
func withProposed(current, proposed []corev1.Taint, now time.Time) ([]corev1.Taint, []bool) {
	out := make([]corev1.Taint, 0, len(current)+len(proposed))
	isProposed := make([]bool, 0, cap(out))
	for _, c := range current {
		replaced := false
		for _, p := range proposed {
			replaced = replaced || taints.IDOf(p) == taints.IDOf(c)
		}
		if !replaced {
			out, isProposed = append(out, c), append(isProposed, false)
		}
	}
	for _, p := range proposed {
		if p.Effect == corev1.TaintEffectNoExecute && p.TimeAdded == nil {
			p.TimeAdded = &metav1.Time{Time: now}
		}
		out, isProposed = append(out, p), append(isProposed, true)
	}
	return out, isProposed
}

func printExplain(w io.Writer, node string, considered []corev1.Taint, isProposed []bool, rep []taints.Eviction, now time.Time) error {
	if len(considered) == 0 {
		fmt.Fprintf(w, "Node %s has no taints.\n", node)
	} else {
		parts := make([]string, len(considered))
		for i, t := range considered {
			parts[i] = taints.Format(t)
			if isProposed[i] {
				parts[i] += " (proposed)"
			}
		}
		fmt.Fprintf(w, "Taints considered on node %s: %s\n", node, strings.Join(parts, ", "))
	}
	if len(rep) == 0 {
		fmt.Fprintln(w, "No pods are bound to it.")
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE/POD\tEVICTION\tBECAUSE\tNEW PODS LIKE IT\tNOTE")
	for _, e := range rep {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.PodName(), evictionText(e, now), becauseText(e), newPodsText(e), noteText(e))
	}
	return tw.Flush()
}

func evictionText(e taints.Eviction, now time.Time) string {
	switch e.When {
	case taints.EvictNever:
		return "never"
	case taints.EvictImmediately:
		if e.At.Before(now.Add(-time.Second)) {
			return fmt.Sprintf("immediately (due since %s)", clock(e.At))
		}
		return "immediately"
	default:
		s := fmt.Sprintf("after %s (at %s", e.After, clock(e.At))
		if e.At.Before(now) {
			s += ", overdue"
		}
		return s + ")"
	}
}

// clock writes a time of day in local time, with the date when it is not
// today.
func clock(t time.Time) string {
	t = t.Local()
	if t.Format(time.DateOnly) != time.Now().Format(time.DateOnly) {
		return t.Format(time.DateTime)
	}
	return t.Format(time.TimeOnly)
}

func becauseText(e taints.Eviction) string {
	if len(e.Because) == 0 {
		return "no NoExecute taint"
	}
	s := taintList(e.Because)
	switch {
	case e.When == taints.EvictNever:
		return "tolerates " + s + " without limit"
	case e.When == taints.EvictAfter:
		return "tolerates " + s + " for " + e.After.String()
	default:
		var untolerated, zero []corev1.Taint
		for _, t := range e.Because {
			if containsTaint(e.BlockedBy, t) {
				untolerated = append(untolerated, t)
			} else {
				zero = append(zero, t)
			}
		}
		var parts []string
		if len(untolerated) > 0 {
			parts = append(parts, "does not tolerate "+taintList(untolerated))
		}
		if len(zero) > 0 {
			parts = append(parts, "tolerates "+taintList(zero)+" for 0s")
		}
		return strings.Join(parts, "; ")
	}
}

func containsTaint(ts []corev1.Taint, t corev1.Taint) bool {
	for _, x := range ts {
		if taints.IDOf(x) == taints.IDOf(t) && x.Value == t.Value {
			return true
		}
	}
	return false
}

func newPodsText(e taints.Eviction) string {
	switch {
	case len(e.BlockedBy) > 0:
		return "blocked: " + taintList(e.BlockedBy)
	case len(e.AvoidedBy) > 0:
		return "avoided: " + taintList(e.AvoidedBy)
	default:
		return "schedule"
	}
}

func noteText(e taints.Eviction) string {
	var notes []string
	if e.Finished {
		notes = append(notes, "finished: only its object is deleted")
	}
	if e.Mirror {
		notes = append(notes, "mirror pod: the static pod keeps running, the kubelet recreates the mirror")
	}
	if len(notes) == 0 {
		return "-"
	}
	return strings.Join(notes, "; ")
}

func taintList(ts []corev1.Taint) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = taints.Format(t)
	}
	return strings.Join(parts, ", ")
}
