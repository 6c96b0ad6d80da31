package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/virtual"
	"github.com/selftaint/selftaint/probes/custom"
	"github.com/selftaint/selftaint/taints/faults"
)

// faultUsage is `selftaint fault`'s help; its list of probes comes from
// reg, the probe registry.
func faultUsage(reg config.Registry) string {
	return `Usage:
  selftaint fault inject NODE --condition C [--status True] [--for 10m] [--reason R] [--message M]
  selftaint fault inject NODE --gpu-xid N [--for 10m]
  selftaint fault clear NODE (--condition C | --all)
  selftaint fault list [NODE]

A fault is the annotation fault.selftaint.io/<C> on the Node: the agent there
publishes condition C (a condition type or a probe name, listed below) with
the fault's status, without damping, until it expires, then removes it.
--gpu-xid N injects what the GPU probe reports after one of the node's GPUs
raised Xid N (NVIDIA's Xid catalog with --config's probes.gpu.xids
overrides): its condition, reason and message, e.g. GPURebootRequired for
Xid 79 (GPU has fallen off the bus). An Xid the probe ignores or leaves to
the application (ignore, restart-app) is refused: it changes no condition.
Every command takes kubectl's --kubeconfig (default $KUBECONFIG, else
~/.kube/config), --context, --cluster, --user and --request-timeout, and
--config (the agent's config file, for the known conditions, the default
duration and the maximum; default the built-in one). inject's -n/--namespace
is the coordinator's (default the config's coordinator.namespace).

Probes, each a fault target by its name, and the condition each feeds by
default (--config may rename a condition or disable a probe):
` + reg.FaultTargetHelp() + `A custom check's condition C is also the target ` + custom.ProbeNamePrefix + `C. On a virtual node
the kubelet's conditions (Ready, MemoryPressure, ...) are targets too.
`
}

// conditionFlagUsage is inject's --condition help, naming reg's probes.
func conditionFlagUsage(reg config.Registry) string {
	return "the condition type to fault, or a probe name (" + reg.ProbeNames() + ") meaning its condition (required)"
}

// faultFlags are the flags every fault subcommand has.
type faultFlags struct {
	kube       *kubeFlags
	configPath string
}

// register adds them to fs; namespaceUsage is -n's help.
func (f *faultFlags) register(fs *flag.FlagSet, namespaceUsage string) {
	f.kube = addKubeFlags(fs, namespaceUsage)
	fs.StringVar(&f.configPath, "config", "", "the agents' config file, for the fault targets, default duration and maximum; empty means the built-in defaults")
}

// faultEnv is what a fault subcommand works with.
type faultEnv struct {
	cfg             *config.Config
	known           map[corev1.NodeConditionType]bool
	probeConditions map[string]corev1.NodeConditionType
	kube            *kubeFlags
}

// env loads the config; connect makes the client.
func (f *faultFlags) env() (*faultEnv, error) {
	cfg, err := config.Load(f.configPath)
	if err != nil {
		return nil, err
	}
	known, probeConditions := cfg.FaultTargets()
	return &faultEnv{cfg: cfg, known: known, probeConditions: probeConditions, kube: f.kube}, nil
}

// anyVirtualNode stands for any virtual node, for what it takes faults on.
func anyVirtualNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{virtual.LabelVirtual: "true"}}}
}

// knownFor is the conditions a fault on node n may name: the config's, and
// on a virtual node also the kubelet's standard conditions, which it
// reports and takes faults on.
func (e *faultEnv) knownFor(n *corev1.Node) map[corev1.NodeConditionType]bool {
	if n.Labels[virtual.LabelVirtual] != "true" {
		return e.known
	}
	known := maps.Clone(e.known)
	for _, c := range virtual.KubeletConditions() {
		known[c] = true
	}
	return known
}

// node connects and reads node name.
func (e *faultEnv) node(ctx context.Context, name string) (typedcorev1.NodeInterface, *corev1.Node, error) {
	nodes, err := e.connect()
	if err != nil {
		return nil, nil, err
	}
	n, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	return nodes, n, nil
}

func (e *faultEnv) connect() (typedcorev1.NodeInterface, error) {
	client, err := operatorClient(e.kube, "selftaint-fault")
	if err != nil {
		return nil, err
	}
	return client.Nodes(), nil
}

// newFaultFlagSet is the flag set of "selftaint fault <sub>" with the flags
// every fault command shares. Only inject reads anything namespaced (the
// coordinator's objects, to tell what a NoExecute rule would do).
func newFaultFlagSet(ctx context.Context, sub string, stderr io.Writer) (*flag.FlagSet, *faultFlags) {
	fs := flag.NewFlagSet(progOf(ctx)+" fault "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	ff := &faultFlags{}
	nsUsage := clusterScopedNamespaceUsage
	if sub == "inject" {
		nsUsage = coordinatorNamespaceUsage
	}
	ff.register(fs, nsUsage)
	return fs, ff
}

func runFault(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	prog := progOf(ctx)
	if len(args) == 0 {
		fmt.Fprint(stderr, forProg(prog, faultUsage(config.DefaultRegistry())))
		return errUsage
	}
	switch args[0] {
	case "inject":
		return runFaultInject(ctx, args[1:], stdout, stderr)
	case "clear":
		return runFaultClear(ctx, args[1:], stdout, stderr)
	case "list":
		return runFaultList(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, forProg(prog, faultUsage(config.DefaultRegistry())))
		return flag.ErrHelp
	default:
		fmt.Fprintf(stderr, "%s fault: unknown command %q\n\n%s", prog, args[0], forProg(prog, faultUsage(config.DefaultRegistry())))
		return errUsage
	}
}

// parseInterspersed parses flags that may come before or after the
// positional arguments (`inject NODE --condition C`), which the flag
// package alone stops at, and returns the positional arguments (all of
// those after a "--").
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	args = splitShorthand(fs, args) // kubectl's -nNAMESPACE
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil // after "--", all positional
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// oneNode checks that exactly one positional argument, the node, was given.
func oneNode(fs *flag.FlagSet, pos []string) (string, error) {
	if len(pos) != 1 {
		fmt.Fprintf(fs.Output(), "%s: want exactly one NODE, got %d arguments %v\n", fs.Name(), len(pos), pos)
		return "", errUsage
	}
	return pos[0], nil
}

func defaultInjectedBy() string {
	who := os.Getenv("USER")
	if who == "" {
		who = "unknown user"
	}
	if host, err := os.Hostname(); err == nil {
		who += "@" + host
	}
	return who + " via selftaint fault inject"
}

func runFaultInject(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return faultInject(ctx, args, stdout, stderr, (*faultEnv).tellNoExecute)
}

// standingTeller says what a fault just written means for the NoExecute
// rules: (*faultEnv).tellNoExecute, or noStanding.
type standingTeller func(e *faultEnv, ctx context.Context, w io.Writer, n *corev1.Node, c corev1.NodeConditionType, st corev1.ConditionStatus, now time.Time) error

// noStanding says nothing: a drill injecting a storm on many nodes says it
// for one (it reads every Node and grant).
func noStanding(*faultEnv, context.Context, io.Writer, *corev1.Node, corev1.NodeConditionType, corev1.ConditionStatus, time.Time) error {
	return nil
}

// faultInject is `selftaint fault inject`, tell saying what the fault
// means for the NoExecute rules.
func faultInject(ctx context.Context, args []string, stdout, stderr io.Writer, tell standingTeller) error {
	fs, ff := newFaultFlagSet(ctx, "inject", stderr)
	target := fs.String("condition", "", conditionFlagUsage(config.DefaultRegistry()))
	status := fs.String("status", "True", "the status the condition takes: True, False or Unknown")
	dur := fs.Duration("for", 0, "how long the fault lasts (default the config's faults.defaultDuration, 10m; at most faults.maxDuration)")
	reason := fs.String("reason", faults.DefaultReason, "the condition's reason (CamelCase)")
	message := fs.String("message", faults.DefaultMessage, "the condition's message")
	injectedBy := fs.String("injected-by", defaultInjectedBy(), "free text recorded in the fault: who or what injected it")
	gpuXid := fs.Uint64("gpu-xid", 0, "inject what the GPU probe reports after a GPU raised this Xid (its condition, reason and message, from NVIDIA's catalog and --config's probes.gpu.xids); not with --condition, --status, --reason or --message")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	node, err := oneNode(fs, pos)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := injectTargetFlags(set, *target); err != nil {
		return err
	}
	forSet := set["for"]
	if forSet && *dur <= 0 {
		return fmt.Errorf("--for must be greater than zero, got %s", *dur)
	}
	env, err := ff.env()
	if err != nil {
		return err
	}
	if set["gpu-xid"] {
		xf, err := env.cfg.GPUXidFault(*gpuXid, 0, time.Now())
		if err != nil {
			return fmt.Errorf("--gpu-xid %d: %w", *gpuXid, err)
		}
		*target, *status, *reason, *message = xf.Target, string(xf.Status), xf.Reason, xf.Message
		fmt.Fprintf(stdout, "the GPU probe reports %s as %s on %s\n", xf.Info, xf.Reason, xf.Condition)
	}
	if !forSet {
		*dur = env.cfg.Faults.DefaultDuration.D
	}
	if max := env.cfg.Faults.MaxDuration.D; *dur > max {
		return fmt.Errorf("--for %s is longer than the maximum fault duration %s (faults.maxDuration); the agent would reject it", *dur, max)
	}
	if err := faults.ValidTarget(*target); err != nil {
		return fmt.Errorf("--condition %s: %w", *target, err)
	}
	// Injected now, expiring --for later in whole seconds (rounded up, so
	// the fault lasts at least --for); the agent counts the duration from
	// injectedAt, so a restart never makes a rejected fault apply.
	now := time.Now()
	spec := faults.Spec{
		Status:     corev1.ConditionStatus(*status),
		Reason:     *reason,
		Message:    *message,
		InjectedBy: *injectedBy,
	}.Lasting(now, *dur)
	value, err := spec.Encode()
	if err != nil {
		return err
	}
	key := faults.AnnotationKey(*target)
	// Check it as the agent will, so a fault is never written only to be
	// rejected on the node: first what can be checked without the
	// cluster, then the target against the node (only a virtual node takes
	// faults on the kubelet's conditions).
	f, err := faults.Parse(key, value, env.knownFor(anyVirtualNode()), env.probeConditions)
	if err != nil {
		return fmt.Errorf("the agent would reject this fault: %w (the known targets come from --config)", err)
	}
	if problem, _ := faults.CheckTime(f, now, now, env.cfg.Faults.MaxDuration.D); problem != "" {
		return fmt.Errorf("the agent would reject this fault: %s", problem)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return err
	}
	nodes, n, err := env.node(ctx, node)
	if err != nil {
		return err
	}
	if _, err := faults.Parse(key, value, env.knownFor(n), env.probeConditions); err != nil {
		return fmt.Errorf("the agent on node %s would reject this fault: %w (only virtual nodes take faults on the kubelet's conditions)", node, err)
	}
	if _, err := nodes.Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "selftaint-fault"}); err != nil {
		return fmt.Errorf("writing the fault on node %s: %w", node, err)
	}
	fmt.Fprintf(stdout, "injected fault on node %s: %s is %s (%s) until %s\n",
		node, f.Condition, f.Status, f.Reason, expiresIn(f.ExpiresAt, now))
	fmt.Fprintf(stdout, "annotation %s=%s\n", key, value)
	return tell(env, ctx, stdout, n, f.Condition, f.Status, now)
}

// injectTargetFlags checks that inject's flags, set, name its target one
// way: --condition (with --status, --reason, --message) or --gpu-xid;
// condition is --condition's value.
func injectTargetFlags(set map[string]bool, condition string) error {
	if !set["gpu-xid"] {
		if condition == "" {
			return errors.New("--condition is required (or --gpu-xid)")
		}
		return nil
	}
	for _, f := range []string{"condition", "status", "reason", "message"} {
		if set[f] {
			return fmt.Errorf("--gpu-xid sets the condition, status, reason and message: not with --%s", f)
		}
	}
	return nil
}

// tellNoExecute says, after a fault on condition c of node n, whether a
// NoExecute rule it triggers would be applied now, budgeted, suspended or
// fall back (nothing when the config has no NoExecute rule for c).
func (e *faultEnv) tellNoExecute(ctx context.Context, w io.Writer, n *corev1.Node, c corev1.NodeConditionType, st corev1.ConditionStatus, now time.Time) error {
	noExecute := false
	for _, r := range e.cfg.TaintRules() {
		noExecute = noExecute || (r.Condition == c && r.Taint.Effect == corev1.TaintEffectNoExecute)
	}
	if !noExecute {
		return nil
	}
	core, leases, err := operatorClients(e.kube, "selftaint-fault")
	if err != nil {
		return err
	}
	overrides := map[corev1.NodeConditionType]corev1.ConditionStatus{c: st}
	if err := printStanding(ctx, w, core, leases, e.cfg, e.kube.coordinatorNamespace(e.cfg), n, overrides, now); err != nil {
		return fmt.Errorf("the fault is written; %w", err)
	}
	return nil
}

func runFaultClear(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, ff := newFaultFlagSet(ctx, "clear", stderr)
	target := fs.String("condition", "", "clear the faults on this condition type or probe name (by either name)")
	all := fs.Bool("all", false, "clear every fault on the node")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	node, err := oneNode(fs, pos)
	if err != nil {
		return err
	}
	if (*target == "") == !*all {
		return errors.New("give exactly one of --condition or --all")
	}
	env, err := ff.env()
	if err != nil {
		return err
	}
	nodes, n, err := env.node(ctx, node)
	if err != nil {
		return err
	}
	// --condition matches the target by either of its names.
	keys := faults.Keys(n.Annotations)
	if !*all {
		keys = faults.KeysFor(n.Annotations, *target, env.knownFor(n), env.probeConditions)
	}
	if len(keys) == 0 {
		fmt.Fprintf(stdout, "no fault to clear on node %s\n", node)
		return nil
	}
	// A merge patch with null values removes exactly these keys.
	nulls := map[string]any{}
	for _, k := range keys {
		nulls[k] = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": nulls}})
	if err != nil {
		return err
	}
	if _, err := nodes.Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "selftaint-fault"}); err != nil {
		return fmt.Errorf("clearing faults on node %s: %w", node, err)
	}
	for _, k := range keys {
		fmt.Fprintf(stdout, "cleared %s on node %s\n", k, node)
	}
	return nil
}

// faultRow is one line of selftaint fault list.
type faultRow struct {
	node, target, status, reason, expires, valid string
}

// faultRows judges every fault annotation on n as an agent with env's config
// would at now.
func faultRows(env *faultEnv, n *corev1.Node, now time.Time) []faultRow {
	max := env.cfg.Faults.MaxDuration.D
	known := env.knownFor(n)
	valid, rejected := faults.ParseAll(n.Annotations, faults.WrittenAt(n), known, env.probeConditions, now, max)
	effective := faults.Effective(valid)
	byKey := map[string]faultRow{}
	for _, f := range valid {
		v := "yes"
		if e := effective[f.Condition]; e.Key != f.Key {
			v = "yes (shadowed by " + e.Key + ")"
		}
		byKey[f.Key] = faultRow{n.Name, f.Target, string(f.Status), f.Reason, expiresIn(f.ExpiresAt, now), v}
	}
	for _, r := range rejected {
		row := faultRow{n.Name, r.Target, "-", "-", "-", "no: " + r.Problem}
		if f := r.Fault; f != nil {
			row.status, row.reason, row.expires = string(f.Status), f.Reason, expiresIn(f.ExpiresAt, now)
			if r.Expired {
				row.valid = "no: expired (the agent removes a fault it applied)"
			}
		}
		byKey[r.Key] = row
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rows := make([]faultRow, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, byKey[k])
	}
	return rows
}

// expiresIn is an expiry for people: "2026-11-23T12:00:00Z (in 5m0s)",
// "... (3s ago)", or "9999-12-31T00:00:00Z (in more than 100 years)".
func expiresIn(at, now time.Time) string {
	s := at.UTC().Format(time.RFC3339)
	if at.After(now) {
		return s + " (in " + faults.Span(at.Sub(now).Truncate(time.Second)) + ")"
	}
	return s + " (" + faults.Span(now.Sub(at).Truncate(time.Second)) + " ago)"
}

func runFaultList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, ff := newFaultFlagSet(ctx, "list", stderr)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fmt.Fprintf(stderr, "%s: want at most one NODE, got %v\n", fs.Name(), pos)
		return errUsage
	}
	env, err := ff.env()
	if err != nil {
		return err
	}
	client, err := env.connect()
	if err != nil {
		return err
	}
	var nodes []corev1.Node
	if len(pos) == 1 {
		n, err := client.Get(ctx, pos[0], metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", pos[0], err)
		}
		nodes = []corev1.Node{*n}
	} else {
		l, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing nodes: %w", err)
		}
		nodes = l.Items
	}
	slices.SortFunc(nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	now := time.Now()
	var rows []faultRow
	for i := range nodes {
		rows = append(rows, faultRows(env, &nodes[i], now)...)
	}
	if len(rows) == 0 {
		fmt.Fprintln(stdout, "no faults")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tTARGET\tSTATUS\tREASON\tEXPIRES\tVALID")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.node, r.target, r.status, r.reason, r.expires, r.valid)
	}
	return tw.Flush()
}
