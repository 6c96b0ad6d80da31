package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints"
	tdrill "github.com/selftaint/selftaint/taints/drill"
	"github.com/selftaint/selftaint/taints/fleet"
)

// defaultWaitTimeout is a waitFor step's when the file gives none.
const defaultWaitTimeout = 2 * time.Minute

// timeline runs the steps in order, each at its At (or when the one before
// has, whichever is later). A failed step ends the timeline.
func (r *runner) timeline(ctx context.Context) error {
	for _, st := range r.s.Steps {
		if st.At != nil {
			if err := sleepUntil(ctx, r.t0.Add(st.At.Duration)); err != nil {
				return err
			}
		}
		if err := r.runStep(ctx, st); err != nil {
			return err
		}
	}
	return nil
}

func sleepUntil(ctx context.Context, at time.Time) error {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// runStep runs one step and records it.
func (r *runner) runStep(ctx context.Context, st tdrill.Step) error {
	rec := tdrill.StepRecord{Name: st.Name, Kind: st.StepKind(), Started: r.now()}
	r.view.line("step %s (%s) starts", st.Name, rec.Kind)
	nodes, err := r.stepNodes(ctx, st)
	rec.Nodes = nodes
	if err == nil {
		err = r.act(ctx, st, nodes)
	}
	rec.Ended = r.now()
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, errWaitTimeout) {
			rec.Error = "stopped: " + context.Cause(ctx).Error()
		} else {
			rec.Error = err.Error()
		}
	}
	r.mu.Lock()
	r.steps = append(r.steps, rec)
	r.mu.Unlock()
	if err != nil {
		r.view.line("step %s failed: %s", st.Name, rec.Error)
		return fmt.Errorf("step %s: %w", st.Name, err)
	}
	r.view.line("step %s done (%.1fs)", st.Name, rec.Ended.Sub(rec.Started).Seconds())
	return nil
}

// act does a step's action on nodes.
func (r *runner) act(ctx context.Context, st tdrill.Step, nodes []string) error {
	switch {
	case st.Fault != nil:
		return r.fault(ctx, st, nodes)
	case st.NotReady != nil:
		return r.notReady(ctx, st.NotReady, nodes)
	case st.Drain != nil:
		return r.drain(ctx, st.Drain, nodes)
	case st.Coordinator != nil:
		return r.coordinatorStep(ctx, st.Coordinator)
	case st.WaitFor != nil:
		return r.waitFor(ctx, st.WaitFor, nodes)
	}
	return errors.New("the step has no action")
}

// stepNodes are the nodes a step picks, nil for a step that picks none.
func (r *runner) stepNodes(ctx context.Context, st tdrill.Step) ([]string, error) {
	var pick *tdrill.Nodes
	switch {
	case st.Fault != nil:
		pick = &st.Fault.Nodes
	case st.NotReady != nil:
		pick = &st.NotReady.Nodes
	case st.Drain != nil:
		pick = &st.Drain.Nodes
	case st.WaitFor != nil && (len(st.WaitFor.Names) > 0 || st.WaitFor.Selector != ""):
		pick = &st.WaitFor.Nodes
	}
	if pick == nil {
		return nil, nil
	}
	return r.pickNodes(ctx, *pick)
}

// pickNodes resolves a pick among the drill's own nodes: by name, by
// selector, or both (the union).
func (r *runner) pickNodes(ctx context.Context, pick tdrill.Nodes) ([]string, error) {
	own := r.drillNodes()
	var out []string
	for _, n := range pick.Names {
		if !slices.Contains(own, n) {
			return nil, fmt.Errorf("node %s is not one of the drill's nodes (%s)", n, strings.Join(own, ", "))
		}
		out = append(out, n)
	}
	if pick.Selector != "" {
		sel, err := labels.Parse(pick.Selector)
		if err != nil {
			return nil, fmt.Errorf("selector %q: %w", pick.Selector, err)
		}
		list, err := r.env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, fmt.Errorf("listing nodes matching %q: %w", pick.Selector, err)
		}
		for _, n := range list.Items {
			if slices.Contains(own, n.Name) && !slices.Contains(out, n.Name) {
				out = append(out, n.Name)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the step picks none of the drill's nodes (names %v, selector %q)", pick.Names, pick.Selector)
	}
	slices.Sort(out)
	return out, nil
}

// fault takes explain's predictions, then injects the fault on each node.
// Both go stepConcurrency nodes at a time: a storm on a hundred nodes is
// injected within a second or two, not one node after another (each
// injection is `selftaint fault inject`: its config, a client, a read and
// a write).
func (r *runner) fault(ctx context.Context, st tdrill.Step, nodes []string) error {
	f := *st.Fault
	if err := r.predict(ctx, st.Name, f, nodes); err != nil {
		return err
	}
	r.track(func(c *created) { c.add(&c.faults, nodes...) })
	// The first node's injection says all the command says; the others
	// are summed up in one line.
	r.sayNow()
	if err := r.opts.Actions.InjectFault(ctx, r.env.kubeconfig, r.plan.configPath, nodes[0], f, true); err != nil {
		return fmt.Errorf("injecting the fault on %s: %w", nodes[0], err)
	}
	err := forEachNode(ctx, nodes[1:], stepConcurrency, func(ctx context.Context, n string) error {
		if err := r.opts.Actions.InjectFault(ctx, r.env.kubeconfig, r.plan.configPath, n, f, false); err != nil {
			return fmt.Errorf("injecting the fault on %s: %w", n, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(nodes) > 1 {
		r.view.line("the same fault injected on %d more node(s): %s", len(nodes)-1, briefNames(nodes[1:], 6))
	}
	r.mu.Lock()
	if until := r.now().Add(f.For.Duration); until.After(r.inForce) {
		r.inForce = until
	}
	r.mu.Unlock()
	return nil
}

// briefNames lists names, at most limit of them and how many more.
func briefNames(names []string, limit int) string {
	if len(names) <= limit {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:limit], ", "), len(names)-limit)
}

// stepConcurrency is how many nodes a step acts on at once.
const stepConcurrency = 16

// forEachNode calls fn for each node, at most limit at once, and returns
// the first error (by the nodes' order) once every call has returned; after
// an error no new call starts.
func forEachNode(ctx context.Context, nodes []string, limit int, fn func(context.Context, string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(nodes))
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i, n := range nodes {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, n); err != nil {
				errs[i] = err
				cancel()
			}
		}()
	}
	wg.Wait()
	// The first real error, not a cancellation it caused.
	var first error
	for _, err := range errs {
		switch {
		case err == nil:
		case !errors.Is(err, context.Canceled):
			return err
		case first == nil:
			first = err
		}
	}
	return first
}

// predict records explain's verdict on the pods of each node for the
// NoExecute taints the agents' rules put on for the fault's condition,
// stepConcurrency nodes at a time, in the nodes' order.
func (r *runner) predict(ctx context.Context, step string, f tdrill.FaultStep, nodes []string) error {
	cond, status, err := r.opts.Actions.FaultCondition(r.plan.configPath, f)
	if err != nil {
		return err
	}
	proposed := NoExecuteTaintsFor(r.plan.cfg.TaintRules(), cond, status)
	if len(proposed) == 0 {
		return nil
	}
	now := r.now()
	byNode := make([][]taints.Eviction, len(nodes))
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n] = i
	}
	err = forEachNode(ctx, nodes, stepConcurrency, func(ctx context.Context, n string) error {
		evs, err := r.opts.Actions.Explain(ctx, r.env.kubeconfig, r.plan.configPath, n, proposed, now)
		if err != nil {
			return fmt.Errorf("explain on %s: %w", n, err)
		}
		byNode[index[n]] = evs
		return nil
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, evs := range byNode {
		for _, e := range evs {
			r.preds = append(r.preds, tdrill.Prediction{Step: step, Node: nodes[i], Eviction: e})
		}
	}
	return nil
}

// NoExecuteTaintsFor are the NoExecute taints rules put on a node whose
// condition cond has status st.
func NoExecuteTaintsFor(rules []taints.Rule, cond corev1.NodeConditionType, st corev1.ConditionStatus) []corev1.Taint {
	var out []corev1.Taint
	for _, rule := range rules {
		if rule.Condition == cond && rule.Taint.Effect == corev1.TaintEffectNoExecute && rule.Applies(st) {
			t := rule.Taint
			t.TimeAdded = nil
			out = append(out, t)
		}
	}
	return out
}

// later runs fn at at in the background (unless the drill is interrupted
// first: the cleanup then undoes what fn would have), counted in pending.
func (r *runner) later(ctx context.Context, at time.Time, what string, fn func(context.Context) error) {
	r.pending.Add(1)
	go func() {
		defer r.pending.Done()
		if err := sleepUntil(ctx, at); err != nil {
			return
		}
		if err := fn(context.WithoutCancel(ctx)); err != nil {
			r.view.line("%s failed: %v", what, err)
			return
		}
		r.view.line("%s", what)
	}()
}

// notReady stops the nodes' kubelets, resuming them after For.
func (r *runner) notReady(ctx context.Context, st *tdrill.NotReadyStep, nodes []string) error {
	for _, n := range nodes {
		if r.realNodes[n] {
			return fmt.Errorf("node %s is a real node: the drill stops only its virtual nodes' kubelets", n)
		}
		c := r.virtual.control[n]
		if c == nil {
			return fmt.Errorf("node %s: this build cannot stop a virtual node's kubelet", n)
		}
		if err := c.Stop(n); err != nil {
			return err
		}
		r.later(ctx, r.now().Add(st.For.Duration), "node "+n+": kubelet resumed", func(context.Context) error { return c.Resume(n) })
	}
	return nil
}

// drain requests the drains (a rollout with MaxParallel), following them
// as `selftaint drain` does.
func (r *runner) drain(ctx context.Context, st *tdrill.DrainStep, nodes []string) error {
	r.track(func(c *created) { c.add(&c.drains, nodes...) })
	selector := ""
	if st.MaxParallel > 0 {
		// A rollout is `selftaint drain --selector`: the selector must
		// match the drill's nodes only, as it is the drain's own pick.
		selector = st.Selector
		if err := r.selectorOnlyOwn(ctx, selector, st.Names); err != nil {
			return err
		}
	}
	r.sayNow() // the command's output goes after the step's line
	return r.opts.Actions.Drain(ctx, r.env.kubeconfig, nodes, selector, *st)
}

// coordinatorStep kills or pauses the leader.
func (r *runner) coordinatorStep(ctx context.Context, st *tdrill.CoordinatorStep) error {
	p, err := r.coord.leader(ctx, r, 30*time.Second)
	if err != nil {
		return fmt.Errorf("finding the coordinator's leader: %w", err)
	}
	switch st.Action {
	case "kill":
		r.coord.kill(p)
		r.view.line("coordinator %s killed (SIGKILL)", p.identity)
		if st.For.Duration > 0 {
			r.later(ctx, r.now().Add(st.For.Duration), "a coordinator replica restarted", func(context.Context) error { return r.coord.start() })
		}
		return nil
	case "pause":
		if err := r.coord.signal(p, syscall.SIGSTOP); err != nil {
			return err
		}
		r.view.line("coordinator %s paused (SIGSTOP)", p.identity)
		r.later(ctx, r.now().Add(st.For.Duration), "coordinator "+p.identity+" continued (SIGCONT)", func(context.Context) error { return r.coord.signal(p, syscall.SIGCONT) })
		return nil
	}
	return fmt.Errorf("unknown coordinator action %q", st.Action)
}

// errWaitTimeout is a waitFor step not met within its timeout.
var errWaitTimeout = errors.New("not met")

// waitFor polls the API until the state is reached.
func (r *runner) waitFor(ctx context.Context, w *tdrill.WaitStep, nodes []string) error {
	timeout := w.Timeout.Duration
	if timeout <= 0 {
		timeout = defaultWaitTimeout
	}
	var missing string
	err := testcp.Poll(ctx, timeout, 250*time.Millisecond, func() (bool, error) {
		m, err := r.unmet(ctx, w, nodes)
		missing = m
		return err == nil && m == "", err
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%w within %s: %s", errWaitTimeout, timeout, missing)
	}
	return err
}

// unmet says what of w is not met now ("" when all is).
func (r *runner) unmet(ctx context.Context, w *tdrill.WaitStep, nodes []string) (string, error) {
	current, err := r.readNodes(ctx, nodes)
	if err != nil {
		return "nodes cannot be read", err
	}
	for _, name := range nodes {
		n := current[name]
		if n == nil {
			return "node " + name + " is not there", nil
		}
		if m := nodeUnmet(n, w); m != "" {
			return m, nil
		}
	}
	if w.Workload != nil {
		ok, why, err := r.workloadReady(ctx, *w.Workload)
		if err != nil {
			return fmt.Sprintf("%s %s cannot be read", w.Workload.Kind, w.Workload.Name), err
		}
		if !ok {
			return fmt.Sprintf("%s %s not ready: %s", w.Workload.Kind, w.Workload.Name, why), nil
		}
	}
	return "", nil
}

// readNodes reads the named nodes of the drill's: its virtual nodes in one
// List (by the pool label), a real node with a Get. A node that is not
// there is absent from the map.
func (r *runner) readNodes(ctx context.Context, names []string) (map[string]*corev1.Node, error) {
	out := make(map[string]*corev1.Node, len(names))
	var virtual int
	for _, name := range names {
		if !r.realNodes[name] {
			virtual++
			continue
		}
		n, err := r.env.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading node %s: %w", name, err)
		default:
			out[name] = n
		}
	}
	if virtual == 0 {
		return out, nil
	}
	list, err := r.env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: PoolLabel})
	if err != nil {
		return nil, fmt.Errorf("listing the virtual nodes: %w", err)
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = !r.realNodes[n]
	}
	for i := range list.Items {
		if n := &list.Items[i]; want[n.Name] {
			out[n.Name] = n
		}
	}
	return out, nil
}

// nodeUnmet says what of w node n does not have ("" when it has it all).
func nodeUnmet(n *corev1.Node, w *tdrill.WaitStep) string {
	conds := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range n.Status.Conditions {
		conds[c.Type] = c
	}
	if c := w.Condition; c != nil {
		want := c.Status
		if want == "" {
			want = string(corev1.ConditionTrue)
		}
		if got := conds[corev1.NodeConditionType(c.Type)].Status; string(got) != want {
			return fmt.Sprintf("node %s: condition %s is %q, not %s", n.Name, c.Type, got, want)
		}
	}
	if t := w.Taint; t != nil {
		has := slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool {
			return x.Key == t.Key && (t.Effect == "" || string(x.Effect) == t.Effect)
		})
		if has == t.Absent {
			state := "has no"
			if has {
				state = "still has"
			}
			return fmt.Sprintf("node %s %s taint %s:%s", n.Name, state, t.Key, t.Effect)
		}
	}
	if w.Maintenance != "" {
		got := ""
		if c, ok := conds[fleet.MaintenanceCondition]; ok {
			got = c.Reason
		}
		if got != w.Maintenance {
			return fmt.Sprintf("node %s: maintenance %q, not %s", n.Name, got, w.Maintenance)
		}
	}
	return ""
}

// settle waits until everything the drill started has ended, then Settle,
// then (up to the timeout) for the ready expectations' workloads.
func (r *runner) settle(ctx context.Context) error {
	done := make(chan struct{})
	go func() { r.pending.Wait(); close(done) }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
	}
	r.mu.Lock()
	until := r.inForce
	r.mu.Unlock()
	if err := sleepUntil(ctx, until); err != nil {
		return err
	}
	r.view.line("everything the drill started has ended; settling for %s", r.s.Settle.Duration)
	if err := sleepUntil(ctx, r.now().Add(r.s.Settle.Duration)); err != nil {
		return err
	}
	return r.waitDecidable(ctx)
}

// waitDecidable waits until each ready expectation's workload is ready or
// its deadline (its step's start + Within) has passed.
func (r *runner) waitDecidable(ctx context.Context) error {
	for _, e := range r.s.Expect {
		if e.Ready == nil {
			continue
		}
		start := r.stepStart(e.Ready.After)
		deadline := start.Add(e.Ready.Within.Duration)
		for {
			ok, _, err := r.workloadReady(ctx, e.Ready.Workload)
			if (err == nil && ok) || !r.now().Before(deadline) {
				break
			}
			if err := sleepUntil(ctx, r.now().Add(500*time.Millisecond)); err != nil {
				return err
			}
		}
	}
	return nil
}

// stepStart is when the named step started (t=0 for "" or a step that did
// not run).
func (r *runner) stepStart(name string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.steps {
		if s.Name == name {
			return s.Started
		}
	}
	return r.t0
}

// selectorOnlyOwn checks that a rollout's selector matches only the
// drill's nodes, and names no node besides.
func (r *runner) selectorOnlyOwn(ctx context.Context, selector string, names []string) error {
	if selector == "" || len(names) > 0 {
		return errors.New("a rollout (maxParallel) picks its nodes by selector alone")
	}
	list, err := r.env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("listing nodes matching %q: %w", selector, err)
	}
	own := r.drillNodes()
	for _, n := range list.Items {
		if !slices.Contains(own, n.Name) {
			return fmt.Errorf("selector %q matches node %s, which is not the drill's: a rollout drains every node its selector matches", selector, n.Name)
		}
	}
	return nil
}
