package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/virtual"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// environment is the cluster a drill runs in.
type environment struct {
	cp           *testcp.ControlPlane // nil with an existing cluster
	rc           *rest.Config
	kubeconfig   string
	client       kubernetes.Interface
	dynamic      dynamic.Interface
	startSeconds float64
}

// startEnvironment starts the embedded control plane (or connects to the
// existing cluster) and builds the clients. On error the environment it
// returns, if any, is for cleaning up.
func startEnvironment(ctx context.Context, s *tdrill.Scenario, opts Options, v *view) (*environment, error) {
	env := &environment{rc: opts.RESTConfig, kubeconfig: opts.Kubeconfig}
	if !opts.Existing {
		limit := opts.StartTimeout
		if limit <= 0 {
			limit = DefaultStartTimeout
		}
		v.line("starting the embedded control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; at most %s)", limit)
		began := time.Now()
		cp, err := testcp.New(ctx, testcp.Options{
			ControllerManager:     true,
			Scheduler:             true,
			ControllerManagerArgs: controllerManagerArgs(s),
			KubeBinDir:            opts.KubeBinDir,
			StartTimeout:          limit,
			Progress:              func(p testcp.Progress) { v.line("control plane: %s", p) },
			// A failed start's logs stay for the user: the error names them.
			KeepLogs: true,
		})
		if err != nil {
			return nil, &StartError{Limit: limit, Err: err}
		}
		env.startSeconds = time.Since(began).Seconds()
		env.cp, env.rc, env.kubeconfig = cp, cp.RESTConfig(), cp.KubeconfigPath
		v.line("control plane up in %.1fs (%s)", env.startSeconds, testcp.FormatTimes(cp.StartTimes))
	}
	if env.rc == nil {
		return nil, fmt.Errorf("no REST config for the existing cluster")
	}
	rc := rest.CopyConfig(env.rc)
	rc.UserAgent = FieldManager
	rc.QPS, rc.Burst = 50, 100
	var err error
	if env.client, err = kubernetes.NewForConfig(rc); err != nil {
		return env, fmt.Errorf("building API client: %w", err)
	}
	if env.dynamic, err = dynamic.NewForConfig(rc); err != nil {
		return env, fmt.Errorf("building API client: %w", err)
	}
	return env, nil
}

// DefaultStartTimeout bounds the embedded control plane's start when
// Options.StartTimeout is zero: generous, for two cores shared with a
// build (an idle machine takes seconds).
const DefaultStartTimeout = testcp.DefaultStartTimeout

// StartError is an embedded control plane that did not start within
// Limit (its Err a *testcp.ComponentError when a component failed). Its
// message is one line without the component's log; Line adds the log's
// line that says why.
type StartError struct {
	Limit time.Duration
	Err   error
}

func (e *StartError) Error() string { return startFailure(e.Err, e.Limit, false) }
func (e *StartError) Unwrap() error { return e.Err }

// Line is the one line a user is shown: Error's, with the line of the
// failed component's log that says why.
func (e *StartError) Line() string { return startFailure(e.Err, e.Limit, true) }

// startFailure says in one line why the control plane did not start: for
// a start that ran out of time, the component that was slow and how long
// each took; for a component that failed, which, why (withLog: with its
// log's line that says why); and where its log is kept.
func startFailure(err error, limit time.Duration, withLog bool) string {
	var ce *testcp.ComponentError
	if !errors.As(err, &ce) {
		return "the embedded control plane did not start: " + strings.TrimPrefix(err.Error(), "testcp: ")
	}
	var b strings.Builder
	if errors.Is(ce.Err, testcp.ErrStartTimeout) {
		slow := testcp.Slowest(ce.Times())
		fmt.Fprintf(&b, "the embedded control plane did not start within %s: %s was slow", limit, slow)
		var ready []string
		for _, ct := range ce.Ready {
			if ct.Component == slow {
				fmt.Fprintf(&b, " (ready after %s), then %s", round(ct.Took), ce.Component)
			} else {
				ready = append(ready, fmt.Sprintf("%s ready in %s", ct.Component, round(ct.Took)))
			}
		}
		if slow == ce.Component {
			b.WriteString(":")
		}
		fmt.Fprintf(&b, " not ready after %s", round(ce.Waited))
		if ce.LastAnswer != "" {
			fmt.Fprintf(&b, " (last answer: %s)", ce.LastAnswer)
		}
		if len(ready) > 0 {
			fmt.Fprintf(&b, "; %s", strings.Join(ready, ", "))
		}
	} else {
		fmt.Fprintf(&b, "the embedded control plane did not start: %s %v", ce.Component, ce.Err)
		if ce.LastAnswer != "" {
			fmt.Fprintf(&b, " (last answer: %s)", ce.LastAnswer)
		}
	}
	if withLog && ce.LogLine != "" {
		fmt.Fprintf(&b, "; its log says: %s", ce.LogLine)
	}
	fmt.Fprintf(&b, "; log kept: %s", ce.LogPath)
	return b.String()
}

// round rounds d for people: tenths of a second.
func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

// controllerManagerArgs are the embedded kube-controller-manager's flags:
// the scenario's grace period, and a client limit that grows with the
// virtual nodes (one request a second per node, at least its default 20):
// at its default, the node lifecycle controller lifted the not-ready taint
// of 200 new nodes at about 4.5 a second, 45 s of a storm drill's setup.
func controllerManagerArgs(s *tdrill.Scenario) []string {
	qps := max(20, len(virtualNames(s.Cluster.Pools)))
	return []string{
		"--node-monitor-grace-period=" + s.Cluster.NodeMonitorGracePeriod.Duration.String(),
		fmt.Sprintf("--kube-api-qps=%d", qps),
		fmt.Sprintf("--kube-api-burst=%d", 2*qps),
	}
}

// DrillNamespace is the namespace a drill's objects go into by default.
func DrillNamespace(name string) string { return "selftaint-drill-" + name }

// created is what the drill made that the cleanup removes.
type created struct {
	namespaces []string // namespaces it created (deleted with all in them)
	// faults: nodes it injected faults on; drains: nodes it asked to drain.
	faults, drains []string
	// nodes: virtual nodes it registered.
	nodes []string
}

func (c *created) add(list *[]string, names ...string) {
	for _, n := range names {
		if !slices.Contains(*list, n) {
			*list = append(*list, n)
		}
	}
}

// createNamespaces creates the drill namespace (refusing one that exists:
// it would be deleted at the end) and the coordinator's, where absent.
func (r *runner) createNamespaces(ctx context.Context) error {
	ns := DrillNamespace(r.s.Name)
	nsClient := r.env.client.CoreV1().Namespaces()
	_, err := nsClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": FieldManager}}}, metav1.CreateOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("namespace %s exists already (a drill of the same name running, or one that could not clean up?); the drill deletes its namespace at the end, so it does not use one it did not create", ns)
	case err != nil:
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	r.track(func(c *created) { c.add(&c.namespaces, ns) })
	if r.plan.replicas() == 0 {
		return nil
	}
	coordNS := r.coordinatorNamespace()
	_, err = nsClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: coordNS}}, metav1.CreateOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("creating the coordinator's namespace %s: %w", coordNS, err)
	}
	r.track(func(c *created) { c.add(&c.namespaces, coordNS) })
	return nil
}

// coordinatorNamespace is where the coordinator keeps its Leases.
func (r *runner) coordinatorNamespace() string {
	return r.plan.cfg.Coordinator.NamespaceOr("")
}

// track records something created, for the cleanup.
func (r *runner) track(f func(*created)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.created)
}

// resolveNodes finds the real nodes the drill was given and checks that
// no Node exists under a virtual node's name: the drill writes only
// Nodes it was given or made.
func (r *runner) resolveNodes(ctx context.Context) error {
	given := map[string]bool{}
	if sel := r.s.Cluster.RealNodes; sel != "" {
		list, err := r.env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return fmt.Errorf("listing the real nodes (cluster.realNodes %q): %w", sel, err)
		}
		for _, n := range list.Items {
			if n.Labels[virtual.LabelVirtual] == "true" {
				continue // another process's virtual node is not a real one
			}
			given[n.Name] = true
		}
		if len(given) == 0 {
			return fmt.Errorf("cluster.realNodes %q matches no real node", sel)
		}
	}
	for _, name := range virtualNames(r.s.Cluster.Pools) {
		_, err := r.env.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			return fmt.Errorf("a node named %s exists already; the drill registers its virtual nodes itself and touches no node it was not given (rename the pool)", name)
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("reading node %s: %w", name, err)
		}
	}
	r.realNodes = given
	return nil
}

// virtualNames are the pools' node names, <pool>-<i>.
func virtualNames(pools []tdrill.Pool) []string {
	var out []string
	for _, p := range pools {
		out = append(out, virtual.Names(p.Name+"-", p.Count)...)
	}
	return out
}

// drillNodes are the names of every node the drill may act on, sorted.
func (r *runner) drillNodes() []string {
	out := virtualNames(r.s.Cluster.Pools)
	for n := range r.realNodes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
