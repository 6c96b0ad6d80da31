package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	typedauthv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/selftaint/selftaint/taints/fleet"
)

const drainUsage = `Usage:
  selftaint drain NODE... --reason R [--deadline 30m] [--on-deadline release|force]
                  [--evict-unreplicated] [--delete-emptydir-data] [--renew] [--wait] [--timeout D]
  selftaint drain --selector LABELS --reason R [--max-parallel N] [flags as above]
  selftaint drain --wait NODE...                      follow requests already made
  selftaint drain --done (NODE... | --selector LABELS)

Asks selftaint's coordinator to drain nodes, by writing a maintenance request
(the annotation ` + fleet.OperatorRequestAnnotation + `) on each Node. The
coordinator serves requests in the order they were made, within its
maintenance pool (coordinator.maintenance.maxParallel): it cordons the node,
evicts its pods through the Eviction API (PodDisruptionBudgets respected;
DaemonSet and mirror pods stay) and says how it goes in the Node condition
` + string(fleet.MaintenanceCondition) + `. The deadline runs from when the drain starts (default:
the coordinator's maintenance.defaultDeadline); if pods still refuse then,
--on-deadline release gives the node back (uncordoned, DrainBlocked) and
force deletes them, each with its grace period.

A node that already carries a request keeps it and its place in line;
--renew replaces it (the new request goes to the end of the line).

--wait prints a line per node whenever its condition changes, and exits 0
once every node is Drained; 1 when one ends DrainBlocked (naming what
blocks it), is released or withdrawn by someone else, or --timeout passes.
Without --reason, --wait follows requests already made and writes nothing.

--selector with --max-parallel N is a rollout: the matching nodes are
requested one at a time in name order (those already unavailable, NotReady
or cordoned by someone else, first: the maintenance pool counts them until
they are drained), never more than N requested and not yet Drained; it
waits as --wait does, and requests no more once a node ends other than
Drained.

A Drained node stays cordoned, in maintenance, until --done removes its
request: the coordinator then uncordons it if selftaint cordoned it (never a
node someone else cordoned) and frees its slot. --done never touches a
node agent's own request (` + fleet.AgentRequestAnnotation + `).

--kubeconfig defaults to $KUBECONFIG, else ~/.kube/config, else in-cluster;
--context, --cluster, --user and --request-timeout are kubectl's. The request
records who asked as the API server knows the credentials.
`

// drainFieldManager is the field manager of drain's writes.
const drainFieldManager = "selftaint-drain"

// drainArgs is a parsed `selftaint drain` command line.
type drainArgs struct {
	nodes    []string // as given, without repeats
	selector string
	// maxParallel bounds a rollout; 0: every node at once.
	maxParallel int
	done        bool
	renew       bool
	wait        bool
	// follow: --wait without --reason, following requests already made.
	follow  bool
	timeout time.Duration // 0: none
	kube    kubeFlags
	// request is the request to write, less RequestedBy and RequestedAt.
	request fleet.MaintenanceRequest
}

// drainFlags are the flags as given, before they are checked together.
type drainFlags struct {
	reason, deadline, onDeadline, selector string
	maxParallel                            int
	timeout                                time.Duration
	evictUnreplicated, deleteEmptyDir      bool
	done, renew, wait                      bool
	kube                                   *kubeFlags
	set                                    map[string]bool // the flags given
}

// requestFlags are the flags that shape a request.
func requestFlags() []string {
	return []string{"reason", "deadline", "on-deadline", "evict-unreplicated", "delete-emptydir-data", "renew"}
}

func newDrainFlagSet(prog string, stderr io.Writer, f *drainFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(prog+" drain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, forProg(prog, drainUsage), "\nFlags:\n"); fs.PrintDefaults() }
	fs.StringVar(&f.reason, "reason", "", "why the nodes are drained, for the people who see them in maintenance (required to make a request)")
	fs.StringVar(&f.deadline, "deadline", "", "how long a drain may take once started, as 30m or 2h (default the coordinator's maintenance.defaultDeadline; at most "+fleet.MaxDeadline.String()+")")
	fs.StringVar(&f.onDeadline, "on-deadline", "", "what happens at the deadline if pods still refuse: "+fleet.OnDeadlineRelease+" (the default: give the node back) or "+fleet.OnDeadlineForce+" (delete them, each with its grace period)")
	fs.BoolVar(&f.evictUnreplicated, "evict-unreplicated", false, "evict pods no controller manages too (as kubectl drain --force); without it they stay and block the drain")
	fs.BoolVar(&f.deleteEmptyDir, "delete-emptydir-data", false, "evict pods with emptyDir volumes too, losing that data (as kubectl drain's flag); without it they stay and block the drain")
	fs.StringVar(&f.selector, "selector", "", "the nodes whose labels match this selector (as kubectl's -l), instead of NODE...")
	fs.IntVar(&f.maxParallel, "max-parallel", 0, "with --selector: a rollout with at most this many nodes requested and not yet Drained at once (implies --wait)")
	fs.BoolVar(&f.renew, "renew", false, "replace a request a node already carries (it goes to the end of the line)")
	fs.BoolVar(&f.wait, "wait", false, "follow the drains, a line per change, until every node is Drained (exit 0) or one ends otherwise (exit 1)")
	fs.DurationVar(&f.timeout, "timeout", 0, "with --wait: give up waiting after this long (exit 1); the requests stay (default: no limit)")
	fs.BoolVar(&f.done, "done", false, "end maintenance: remove the operator's request from the nodes")
	f.kube = addKubeFlags(fs, clusterScopedNamespaceUsage)
	return fs
}

// parseDrain parses `selftaint drain`'s arguments (flags before or after
// the nodes) and checks them, touching nothing; prog is the program's name
// for usage.
func parseDrain(prog string, args []string, stderr io.Writer) (drainArgs, error) {
	f := drainFlags{set: map[string]bool{}}
	fs := newDrainFlagSet(prog, stderr, &f)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return drainArgs{}, err
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if len(pos) == 0 && !f.set["selector"] {
		fmt.Fprintf(stderr, "%s: no nodes: give NODE... or --selector LABELS\n", fs.Name())
		fs.Usage()
		return drainArgs{}, errUsage
	}
	if err := checkDrainTargets(pos, f.selector, f.set); err != nil {
		return drainArgs{}, err
	}
	a := drainArgs{selector: f.selector, done: f.done, renew: f.renew, wait: f.wait, timeout: f.timeout, kube: *f.kube}
	for _, n := range pos {
		if !slices.Contains(a.nodes, n) {
			a.nodes = append(a.nodes, n)
		}
	}
	if f.done {
		return a, checkDone(f.set)
	}
	if err := checkWaitFlags(&f); err != nil {
		return drainArgs{}, err
	}
	a.maxParallel, a.timeout = f.maxParallel, f.timeout
	a.wait = f.wait || f.maxParallel > 0
	if err := checkDeadlineFlags(&f); err != nil {
		return drainArgs{}, err
	}
	if f.reason == "" {
		return followOnly(a, f.set)
	}
	req, err := drainRequest(&f)
	if err != nil {
		return drainArgs{}, err
	}
	a.request = req
	return a, nil
}

// checkDrainTargets checks that the nodes are named one way: NODE... or
// --selector.
func checkDrainTargets(pos []string, selector string, set map[string]bool) error {
	switch {
	case len(pos) > 0 && set["selector"]:
		return errors.New("give NODE... or --selector, not both")
	case set["selector"]:
		if strings.TrimSpace(selector) == "" {
			return errors.New("--selector must not be empty (to drain every node, say so with a selector that matches them)")
		}
		if _, err := labels.Parse(selector); err != nil {
			return fmt.Errorf("--selector %q: %w", selector, err)
		}
	}
	for _, n := range pos {
		if n == "" {
			return errors.New("an empty NODE name")
		}
	}
	return nil
}

// checkDone refuses, with --done, the flags that only make or follow a
// request.
func checkDone(set map[string]bool) error {
	for _, name := range append(requestFlags(), "wait", "timeout", "max-parallel") {
		if set[name] {
			return fmt.Errorf("--%s does not go with --done, which only removes the request", name)
		}
	}
	return nil
}

// checkWaitFlags checks --max-parallel and --timeout.
func checkWaitFlags(f *drainFlags) error {
	switch {
	case f.set["max-parallel"] && f.selector == "":
		return errors.New("--max-parallel needs --selector: a rollout is over the nodes a selector matches")
	case f.set["max-parallel"] && f.maxParallel < 1:
		return fmt.Errorf("--max-parallel must be at least 1, got %d", f.maxParallel)
	case f.set["timeout"] && !f.wait && f.maxParallel == 0:
		return errors.New("--timeout needs --wait (or --max-parallel): it bounds the wait")
	case f.set["timeout"] && f.timeout <= 0:
		return fmt.Errorf("--timeout must be greater than zero, got %s", f.timeout)
	}
	return nil
}

// followOnly is a command line without --reason: with --wait alone it
// follows requests already made; anything else is missing its reason.
func followOnly(a drainArgs, set map[string]bool) (drainArgs, error) {
	for _, name := range append(requestFlags(), "max-parallel") {
		if set[name] {
			return drainArgs{}, fmt.Errorf("--reason is required with --%s: say why, for the people who see the nodes in maintenance", name)
		}
	}
	if !a.wait {
		return drainArgs{}, errors.New("--reason is required: say why the nodes are drained, for the people who see them in maintenance (or --wait alone, to follow requests already made)")
	}
	a.follow = true
	return a, nil
}

// checkDeadlineFlags checks --deadline and --on-deadline.
func checkDeadlineFlags(f *drainFlags) error {
	if f.set["deadline"] {
		switch d, err := time.ParseDuration(f.deadline); {
		case err != nil:
			return fmt.Errorf("--deadline %q is not a duration such as 30m or 2h", f.deadline)
		case d <= 0:
			return fmt.Errorf("--deadline %q must be positive", f.deadline)
		case d > fleet.MaxDeadline:
			return fmt.Errorf("--deadline %q is longer than %s: a drain never waits forever", f.deadline, fleet.MaxDeadline)
		}
	}
	switch f.onDeadline {
	case "", fleet.OnDeadlineRelease, fleet.OnDeadlineForce:
		return nil
	default:
		return fmt.Errorf("--on-deadline %q is not %s or %s", f.onDeadline, fleet.OnDeadlineRelease, fleet.OnDeadlineForce)
	}
}

// drainRequest builds the request the flags ask for and checks it as the
// coordinator will.
func drainRequest(f *drainFlags) (fleet.MaintenanceRequest, error) {
	if strings.TrimSpace(f.reason) == "" {
		return fleet.MaintenanceRequest{}, errors.New("--reason must not be blank")
	}
	req := fleet.MaintenanceRequest{
		Version:            fleet.MaintenanceVersion,
		Reason:             f.reason,
		Deadline:           f.deadline,
		OnDeadline:         f.onDeadline,
		EvictUnreplicated:  f.evictUnreplicated,
		DeleteEmptyDirData: f.deleteEmptyDir,
	}
	// The rest as the coordinator will read it (the reason's length): with
	// a stand-in requester and time, as both come later.
	probe := req
	probe.RequestedBy, probe.RequestedAt = "selftaint drain", time.Now()
	if _, err := fleet.ParseMaintenanceRequest(fleet.OperatorRequestAnnotation, probe.Format()); err != nil {
		return fleet.MaintenanceRequest{}, fmt.Errorf("the coordinator would refuse this request: %w", err)
	}
	return req, nil
}

func runDrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	prog := progOf(ctx)
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, forProg(prog, drainUsage))
		return flag.ErrHelp
	}
	a, err := parseDrain(prog, args, stderr)
	if err != nil {
		return err
	}
	rc, err := a.kube.restConfig(drainFieldManager)
	if err != nil {
		return err
	}
	core, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("building API client: %w", err)
	}
	d := &drainer{nodes: core.Nodes(), rest: core.RESTClient(), out: stdout, now: time.Now}
	if !a.done && !a.follow {
		d.by = requester(ctx, rc, a.kube.contextUser())
	}
	return d.run(ctx, a)
}

// requester is who the request says asked: the user the API server
// authenticates the credentials as (a SelfSubjectReview), else, where that
// API is refused, the kubeconfig context's user name.
func requester(ctx context.Context, rc *rest.Config, fallback string) string {
	var reviewed string
	client, err := typedauthv1.NewForConfig(rc)
	if err == nil {
		var r *authenticationv1.SelfSubjectReview
		r, err = client.SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err == nil {
			reviewed = r.Status.UserInfo.Username
		}
	}
	return pickRequester(reviewed, fallback)
}

// pickRequester is the API server's name for the user where it gave one,
// else the kubeconfig's, else a name for the tool.
func pickRequester(reviewed, contextUser string) string {
	for _, s := range []string{reviewed, contextUser} {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return "selftaint drain"
}

// drainer runs one `selftaint drain`.
type drainer struct {
	nodes typedcorev1.NodeInterface
	rest  rest.Interface // for the watch
	out   io.Writer
	now   func() time.Time
	by    string // RequestedBy
	width int    // of the node column
}

// nodeEvent is a Node as a watch saw it; node is nil once it is deleted.
type nodeEvent struct {
	name string
	node *corev1.Node
}

func (d *drainer) run(ctx context.Context, a drainArgs) error {
	names, err := d.targets(ctx, a)
	if err != nil {
		return err
	}
	for _, n := range names {
		d.width = max(d.width, len(n))
	}
	if a.done {
		return d.endAll(ctx, names, a.selector)
	}
	r := newRollout(names, a.maxParallel)
	if !a.wait {
		d.requestDue(ctx, r, a)
		which := strings.Join(names, " ")
		if a.selector != "" {
			which = "--selector " + a.selector
		}
		fmt.Fprintf(d.out, "follow with: selftaint drain --wait %s (or kubectl get node NAME -o jsonpath='{.status.conditions[?(@.type==%q)]}')\n",
			which, fleet.MaintenanceCondition)
		return r.result()
	}
	if a.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan nodeEvent, 64)
	d.watch(watchCtx, a, names, events)
	return d.follow(ctx, r, a, events)
}

// targets are the nodes named, or those --selector matches, in name order;
// a rollout's (--max-parallel) in rolloutOrder.
func (d *drainer) targets(ctx context.Context, a drainArgs) ([]string, error) {
	if a.selector == "" {
		return a.nodes, nil
	}
	list, err := d.nodes.List(ctx, metav1.ListOptions{LabelSelector: a.selector})
	if err != nil {
		return nil, fmt.Errorf("listing the nodes matching %q: %w", a.selector, err)
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no node matches --selector %q", a.selector)
	}
	if a.maxParallel > 0 {
		return rolloutOrder(list.Items), nil
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names, nil
}

// rolloutOrder is the order a rollout asks for nodes in: first those
// already unavailable (NotReady, or cordoned by someone else), then the
// rest, each in name order. The coordinator counts an unavailable node
// against its maintenance pool until it is drained, and starts it even
// when the pool is full (it adds nothing); asked for after the others, such
// nodes would fill the pool while the nodes asked for first waited for a
// slot, and the rollout, which asks for no more until those are Drained,
// would never end.
func rolloutOrder(nodes []corev1.Node) []string {
	unavailable := func(n *corev1.Node) bool {
		return !fleet.IsReady(n) || (n.Spec.Unschedulable && n.Annotations[fleet.CordonAnnotation] == "")
	}
	var first, rest []string
	for i := range nodes {
		if unavailable(&nodes[i]) {
			first = append(first, nodes[i].Name)
		} else {
			rest = append(rest, nodes[i].Name)
		}
	}
	slices.Sort(first)
	slices.Sort(rest)
	return append(first, rest...)
}

// follow requests what the rollout allows and follows the nodes' events
// until every node requested has ended, or ctx ends.
func (d *drainer) follow(ctx context.Context, r *rollout, a drainArgs, events <-chan nodeEvent) error {
	for {
		d.requestDue(ctx, r, a)
		if r.finished() {
			if err := r.result(); err != nil {
				return err
			}
			fmt.Fprintf(d.out, "every node is Drained (%d); each stays cordoned, in maintenance, until: selftaint drain --done NODE...\n", len(r.order))
			return nil
		}
		select {
		case <-ctx.Done():
			return r.interrupted(ctx, a.timeout)
		case ev := <-events:
			d.take(r, ev.name, ev.node)
		}
	}
}

// take judges a version of node name (nil: deleted), showing what changed.
func (d *drainer) take(r *rollout, name string, n *corev1.Node) {
	w := r.waits[name]
	if w == nil || !w.observe(n) {
		return
	}
	d.show(name, w)
	if w.end == endFailed {
		r.fail(name, w.why())
	}
}

// requestDue writes (or, with follow, reads) the requests the rollout
// allows now.
func (d *drainer) requestDue(ctx context.Context, r *rollout, a drainArgs) {
	for _, name := range r.due() {
		w, n, err := d.request(ctx, name, a)
		if err != nil {
			fmt.Fprintf(d.out, "%-*s  %s\n", d.width, name, err)
			r.fail(name, err.Error())
			continue
		}
		r.waits[name] = w
		if a.wait {
			d.take(r, name, n)
		}
	}
}

// show prints w's state on a line.
func (d *drainer) show(name string, w *nodeWait) {
	fmt.Fprintf(d.out, "%-*s  %-9s  %s\n", d.width, name, w.reason, w.message)
}

// request makes sure node name carries an operator request (writing
// a.request unless one is there and --renew was not given; with follow,
// only reading it) and returns what to wait for and the node as written.
func (d *drainer) request(ctx context.Context, name string, a drainArgs) (*nodeWait, *corev1.Node, error) {
	var w *nodeWait
	var got *corev1.Node
	err := retry.RetryOnConflict(conflictBackoff(), func() error {
		n, err := d.nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", name, err)
		}
		plan, err := planRequest(n, a.renew, a.follow)
		if err != nil {
			return err
		}
		if !plan.write {
			fmt.Fprintf(d.out, "%-*s  %s\n", d.width, name, plan.note)
			w, got = newNodeWait(plan.value, plan.requestedAt, nil), n
			return nil
		}
		req := a.request
		req.RequestedBy, req.RequestedAt = d.by, d.now()
		value := req.Format()
		if _, err := fleet.ParseMaintenanceRequest(fleet.OperatorRequestAnnotation, value); err != nil {
			return fmt.Errorf("the coordinator would refuse this request: %w", err)
		}
		patch, err := annotationPatch(n.ResourceVersion, value)
		if err != nil {
			return err
		}
		got, err = d.nodes.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: drainFieldManager})
		if err != nil {
			return err // a conflict is retried, re-reading the node
		}
		stamped, _ := fleet.ParseMaintenanceRequest(fleet.OperatorRequestAnnotation, value)
		w = newNodeWait(value, stamped.RequestedAt, maintenanceCondition(n))
		fmt.Fprintf(d.out, "%-*s  requested maintenance (%s) by %s: %s%s\n", d.width, name,
			fleet.Maintenance{Annotation: fleet.OperatorRequestAnnotation, Request: stamped}.ID(), stamped.RequestedBy, stamped.Reason, plan.note)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("requesting maintenance of node %s: %w", name, err)
	}
	return w, got, nil
}

// conflictBackoff is how often a write that met a conflict is tried again,
// each time on the node read afresh.
func conflictBackoff() wait.Backoff {
	return wait.Backoff{Steps: 8, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1}
}

// annotationPatch is a merge patch setting (or, value nil, removing) the
// operator request, preconditioned on resourceVersion rv.
func annotationPatch(rv string, value any) ([]byte, error) {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": rv,
		"annotations":     map[string]any{fleet.OperatorRequestAnnotation: value},
	}})
	if err != nil {
		return nil, fmt.Errorf("building the patch: %w", err)
	}
	return b, nil
}

// requestPlan is what to do about the operator request on a node.
type requestPlan struct {
	write bool
	// value and requestedAt are the request kept, when not writing.
	value       string
	requestedAt time.Time
	// note is said about the node: why a request is kept, or what a new
	// one replaces.
	note string
}

// planRequest decides whether to write a request on n: not where one is
// already there (it keeps its place in line) unless renew; never with
// follow, which only follows one already made.
func planRequest(n *corev1.Node, renew, follow bool) (requestPlan, error) {
	raw, ok := n.Annotations[fleet.OperatorRequestAnnotation]
	var cur fleet.MaintenanceRequest
	var bad error
	if ok {
		cur, bad = fleet.ParseMaintenanceRequest(fleet.OperatorRequestAnnotation, raw)
	}
	switch {
	case follow && !ok:
		return requestPlan{}, fmt.Errorf("node %s carries no operator maintenance request to follow (give --reason to make one)", n.Name)
	case follow && bad != nil:
		return requestPlan{}, fmt.Errorf("node %s carries an operator request the coordinator cannot read, so does not serve: %w", n.Name, bad)
	case follow:
		return requestPlan{value: raw, requestedAt: cur.RequestedAt, note: "following its request: " + describeRequest(cur)}, nil
	case ok && !renew && bad != nil:
		return requestPlan{}, fmt.Errorf("node %s carries an operator request the coordinator cannot read, so does not serve (%w); --renew replaces it", n.Name, bad)
	case ok && !renew:
		return requestPlan{value: raw, requestedAt: cur.RequestedAt,
			note: "already requested, left as it is, keeping its place in line (--renew replaces it, at the end of the line): " + describeRequest(cur)}, nil
	case ok:
		return requestPlan{write: true, note: "; it replaces the request " + describeRequest(cur) + " (--renew)"}, nil
	}
	if _, agent := n.Annotations[fleet.AgentRequestAnnotation]; agent {
		return requestPlan{write: true, note: "; it is served instead of its agent's drain request (" + fleet.AgentRequestAnnotation + ") while it stands"}, nil
	}
	return requestPlan{write: true}, nil
}

// describeRequest says who asked for r, when and why.
func describeRequest(r fleet.MaintenanceRequest) string {
	return fmt.Sprintf("made %s by %s: %s", r.RequestedAt.UTC().Format(time.RFC3339), r.RequestedBy, r.Reason)
}

// maintenanceCondition is n's SelftaintMaintenance condition, nil if none.
func maintenanceCondition(n *corev1.Node) *corev1.NodeCondition {
	if n == nil {
		return nil
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == fleet.MaintenanceCondition {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// endKind is how a node's wait has ended.
type endKind int

const (
	endNone    endKind = iota // still going
	endDrained                // Drained
	endFailed                 // anything else: blocked, released, withdrawn, gone
)

// nodeWait follows one node's request through its condition.
type nodeWait struct {
	value       string    // the request's annotation value
	requestedAt time.Time // its requestedAt: conditions from before are an earlier maintenance's
	// baseline is the condition when the request was written (nil: none,
	// or the request was there already). A condition True then is an
	// earlier maintenance's, which ends (False) before this one begins.
	baseline *corev1.NodeCondition
	seenTrue bool   // a condition about this request has been True
	version  uint64 // the newest resourceVersion seen
	reason   string // shown: the condition's reason, or what stands in for it
	message  string
	end      endKind
}

func newNodeWait(value string, requestedAt time.Time, baseline *corev1.NodeCondition) *nodeWait {
	if baseline != nil {
		baseline = baseline.DeepCopy()
	}
	return &nodeWait{value: value, requestedAt: requestedAt, baseline: baseline}
}

// why is the end of a failed wait in a sentence.
func (w *nodeWait) why() string { return w.reason + ": " + w.message }

// observe takes in a version of the node (nil: deleted) and reports
// whether what is shown changed. Versions older than one seen are
// ignored; an ended wait stays ended.
func (w *nodeWait) observe(n *corev1.Node) bool {
	if w.end != endNone {
		return false
	}
	if n != nil {
		v, err := strconv.ParseUint(n.ResourceVersion, 10, 64)
		if err == nil && v <= w.version {
			return false
		}
		if err == nil {
			w.version = v
		}
	}
	reason, message, end := w.judge(n)
	changed := reason != w.reason || message != w.message || end != w.end
	w.reason, w.message, w.end = reason, message, end
	return changed
}

// judge reads where n's maintenance stands for this request: the reason
// and message to show, and whether the wait has ended.
func (w *nodeWait) judge(n *corev1.Node) (string, string, endKind) {
	if n == nil {
		return "Gone", "the node was deleted", endFailed
	}
	switch v, ok := n.Annotations[fleet.OperatorRequestAnnotation]; {
	case !ok:
		return "Withdrawn", "its maintenance request was removed by someone else", endFailed
	case v != w.value:
		return "Replaced", "its maintenance request was replaced by another: " + v, endFailed
	}
	c := maintenanceCondition(n)
	if !w.about(c) {
		return "Requested", "waiting for the coordinator to take the request", endNone
	}
	if c.Status != corev1.ConditionFalse {
		w.seenTrue = true
		if c.Reason == fleet.ReasonDrained && c.Status == corev1.ConditionTrue {
			return c.Reason, c.Message, endDrained
		}
		return c.Reason, c.Message, endNone
	}
	if w.baselineTrue() && !w.seenTrue {
		return "Requested", "the earlier maintenance ended (" + c.Reason + "); waiting for the coordinator to take this request", endNone
	}
	return c.Reason, c.Message, endFailed
}

// about reports whether condition c speaks of this request: it changed
// after the request was made, or, since the request was written, it shows
// a node waiting or draining (which only a standing request makes it do).
func (w *nodeWait) about(c *corev1.NodeCondition) bool {
	switch {
	case c == nil:
		return false
	case !c.LastTransitionTime.Time.Before(w.requestedAt):
		return true
	case w.seenTrue:
		return true
	case c.Status != corev1.ConditionTrue || (c.Reason != fleet.ReasonMaintenanceWaiting && c.Reason != fleet.ReasonDraining):
		return false
	}
	b := w.baseline
	return b == nil || b.Status != c.Status || b.Reason != c.Reason || b.Message != c.Message
}

// baselineTrue reports whether an earlier maintenance was under way when
// the request was written.
func (w *nodeWait) baselineTrue() bool {
	return w.baseline != nil && w.baseline.Status == corev1.ConditionTrue
}

// rollout is the nodes to drain, requested in order, at most maxParallel
// of them requested and not yet ended at once (0: all at once).
type rollout struct {
	order       []string
	maxParallel int
	next        int  // order[next] is the next to request
	stopped     bool // a node ended other than Drained: request no more
	waits       map[string]*nodeWait
	failed      map[string]string // nodes whose request could not be made, and why
}

func newRollout(order []string, maxParallel int) *rollout {
	return &rollout{order: order, maxParallel: maxParallel, waits: map[string]*nodeWait{}, failed: map[string]string{}}
}

// inFlight is how many nodes are requested and not ended.
func (r *rollout) inFlight() int {
	n := 0
	for _, w := range r.waits {
		if w.end == endNone {
			n++
		}
	}
	return n
}

// due takes the nodes to request now off the line.
func (r *rollout) due() []string {
	if r.stopped {
		return nil
	}
	n := len(r.order) - r.next
	if r.maxParallel > 0 {
		n = min(n, r.maxParallel-r.inFlight())
	}
	if n <= 0 {
		return nil
	}
	out := r.order[r.next : r.next+n]
	r.next += n
	return out
}

// fail records that node's drain will not finish: a rollout requests no
// more.
func (r *rollout) fail(node, why string) {
	if _, ok := r.waits[node]; !ok {
		r.failed[node] = why
	}
	if r.maxParallel > 0 {
		r.stopped = true
	}
}

// finished reports whether nothing is left to request or follow.
func (r *rollout) finished() bool {
	return r.inFlight() == 0 && (r.stopped || r.next >= len(r.order))
}

// problems are the nodes that did not drain, and why, in order.
func (r *rollout) problems() []string {
	var out []string
	for _, name := range r.order {
		if why, ok := r.failed[name]; ok {
			out = append(out, name+": "+why)
		} else if w := r.waits[name]; w != nil && w.end == endFailed {
			out = append(out, name+": "+w.why())
		}
	}
	return out
}

// result is the outcome: nil when every request was made and, followed,
// every node is Drained.
func (r *rollout) result() error {
	probs := r.problems()
	if len(probs) == 0 {
		return nil
	}
	msg := fmt.Sprintf("%d of %d nodes did not drain: %s", len(probs), len(r.order), strings.Join(probs, "; "))
	if rest := r.order[r.next:]; len(rest) > 0 {
		msg += fmt.Sprintf("; not requested: %s", strings.Join(rest, ", "))
	}
	return errors.New(msg)
}

// interrupted is the outcome when the wait ends before the drains: the
// timeout, or the command being stopped.
func (r *rollout) interrupted(ctx context.Context, timeout time.Duration) error {
	var going []string
	for _, name := range r.order[:r.next] {
		if w := r.waits[name]; w != nil && w.end == endNone {
			going = append(going, name+": "+w.why())
		}
	}
	what := "stopped"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		what = fmt.Sprintf("--timeout %s passed", timeout)
	}
	msg := fmt.Sprintf("%s with %d nodes not Drained (the requests stand): %s", what, len(going), strings.Join(going, "; "))
	if probs := r.problems(); len(probs) > 0 {
		msg += "; did not drain: " + strings.Join(probs, "; ")
	}
	if rest := r.order[r.next:]; len(rest) > 0 {
		msg += "; not requested: " + strings.Join(rest, ", ")
	}
	return errors.New(msg)
}

// watch sends every version of the nodes to events until ctx ends: one
// watch per node named (by metadata.name), or one on --selector.
func (d *drainer) watch(ctx context.Context, a drainArgs, names []string, events chan<- nodeEvent) {
	if a.selector != "" {
		d.watchNodes(ctx, func(o *metav1.ListOptions) { o.LabelSelector = a.selector }, events)
		return
	}
	for _, name := range names {
		sel := fields.OneTermEqualSelector("metadata.name", name).String()
		d.watchNodes(ctx, func(o *metav1.ListOptions) { o.FieldSelector = sel }, events)
	}
}

// watchNodes runs an informer on the nodes the options select, sending
// each version it sees.
func (d *drainer) watchNodes(ctx context.Context, opts func(*metav1.ListOptions), events chan<- nodeEvent) {
	send := func(name string, n *corev1.Node) {
		select {
		case events <- nodeEvent{name: name, node: n}:
		case <-ctx.Done():
		}
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.NewFilteredListWatchFromClient(d.rest, "nodes", metav1.NamespaceAll, opts),
		ObjectType:    &corev1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				if n, ok := obj.(*corev1.Node); ok {
					send(n.Name, n)
				}
			},
			UpdateFunc: func(_, obj any) {
				if n, ok := obj.(*corev1.Node); ok {
					send(n.Name, n)
				}
			},
			DeleteFunc: func(obj any) {
				if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				if n, ok := obj.(*corev1.Node); ok {
					send(n.Name, nil)
				}
			},
		},
	})
	go informer.RunWithContext(ctx)
}

// endAll removes the operator request from each node. Chosen by a
// selector, the nodes without one are passed over in silence.
func (d *drainer) endAll(ctx context.Context, names []string, selector string) error {
	var errs []error
	removed := 0
	for _, name := range names {
		ok, err := d.end(ctx, name, selector == "")
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	if selector != "" && removed == 0 && len(errs) == 0 {
		fmt.Fprintf(d.out, "no node matching %q carries an operator maintenance request\n", selector)
	}
	return errors.Join(errs...)
}

// end removes node name's operator request, and says what the coordinator
// will do; tellNone: also where there is none. It reports whether it
// removed one.
func (d *drainer) end(ctx context.Context, name string, tellNone bool) (bool, error) {
	var was *corev1.Node
	err := retry.RetryOnConflict(conflictBackoff(), func() error {
		n, err := d.nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", name, err)
		}
		if _, ok := n.Annotations[fleet.OperatorRequestAnnotation]; !ok {
			was = nil
			if tellNone {
				fmt.Fprintf(d.out, "%-*s  no operator maintenance request to remove%s\n", d.width, name, agentNote(n))
			}
			return nil
		}
		patch, err := annotationPatch(n.ResourceVersion, nil)
		if err != nil {
			return err
		}
		if _, err := d.nodes.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: drainFieldManager}); err != nil {
			return err // a conflict is retried, re-reading the node
		}
		was = n
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("ending maintenance of node %s: %w", name, err)
	}
	if was != nil {
		fmt.Fprintf(d.out, "%-*s  removed its maintenance request; %s%s\n", d.width, name, doneOutlook(was), agentNote(was))
	}
	return was != nil, nil
}

// doneOutlook says what the coordinator does once n's request is gone.
func doneOutlook(n *corev1.Node) string {
	switch id, ours := n.Annotations[fleet.CordonAnnotation]; {
	case ours:
		return "the coordinator ends its maintenance, frees its slot and uncordons it (selftaint cordoned it, for " + id + ")"
	case n.Spec.Unschedulable:
		return "the coordinator ends its maintenance and frees its slot; the node stays cordoned, as selftaint did not cordon it (kubectl uncordon " + n.Name + " when it is ready)"
	default:
		return "the coordinator ends its maintenance and frees its slot (the node is not cordoned)"
	}
}

// agentNote mentions a drain request n's own agent keeps, which --done
// leaves alone and the coordinator serves.
func agentNote(n *corev1.Node) string {
	if _, ok := n.Annotations[fleet.AgentRequestAnnotation]; !ok {
		return ""
	}
	return "; its agent's drain request (" + fleet.AgentRequestAnnotation + ") stays, and the coordinator serves it: it ends when the agent withdraws it"
}
