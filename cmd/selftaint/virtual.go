package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/coordinator"
	"github.com/selftaint/selftaint/agent/virtual"
	"github.com/selftaint/selftaint/hardware"
	"github.com/selftaint/selftaint/taints"
)

// virtualFlags are the virtual subcommand's flags.
type virtualFlags struct {
	nodes         int
	namePrefix    string
	kubeconfig    string
	configPath    string
	logLevel      string
	cpu, memory   string
	pods          string
	labels        string
	extended      string
	taints        string
	internalIP    string
	deleteOnExit  bool
	qps           float64
	burst         int
	leaseDuration time.Duration
	statsInterval time.Duration
	coordinator   bool
}

func (f *virtualFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.nodes, "nodes", 1, "how many virtual nodes to run")
	fs.StringVar(&f.namePrefix, "name-prefix", "vnode-", "node names are this prefix followed by 1..N")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else ~/.kube/config, else in-cluster)")
	fs.StringVar(&f.configPath, "config", "", "config file (YAML): the rules, damping and fault settings the virtual nodes follow; empty means the built-in defaults")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.cpu, "cpu", "8", "each node's CPU capacity")
	fs.StringVar(&f.memory, "memory", "32Gi", "each node's memory capacity")
	fs.StringVar(&f.pods, "pods", "110", "how many pods each node takes")
	fs.StringVar(&f.labels, "labels", "", "extra node labels, key=value,...")
	fs.StringVar(&f.extended, "extended-resources", "", "extended resources each node advertises, name=count,... (e.g. nvidia.com/gpu=8, to see how GPU workloads react; add --register-with-taints nvidia.com/gpu=present:NoSchedule to taint like a real GPU node)")
	fs.StringVar(&f.taints, "register-with-taints", "", "taints the nodes register with, key[=value]:Effect,... (as the kubelet's flag); in a shared cluster, a NoSchedule taint keeps other workloads off. They are also the opt-in: a pod bound to a node that does not tolerate each by its key (a toleration of every taint is none) is rejected (Failed, NotOptedIn), never run")
	fs.StringVar(&f.internalIP, "internal-ip", "127.0.0.1", "the nodes' InternalIP address")
	fs.BoolVar(&f.deleteOnExit, "delete-on-exit", false, "delete the Nodes when stopped (their pods are then removed by the control plane)")
	fs.DurationVar(&f.leaseDuration, "lease-duration", virtual.DefaultLeaseDuration, "the nodes' Lease duration in kube-node-lease (the kubelet's nodeLeaseDurationSeconds); renewed every quarter of it")
	fs.DurationVar(&f.statsInterval, "stats-interval", time.Minute, "how often to log the process's API request rate and memory; 0 turns it off")
	fs.Float64Var(&f.qps, "kube-api-qps", 0, "client-side limit on API requests per second for the whole process; 0 means 2 per node, at least 20")
	fs.IntVar(&f.burst, "kube-api-burst", 0, "client-side burst of API requests; 0 means twice the QPS")
	fs.BoolVar(&f.coordinator, "coordinator", false, "also run the virtual fleet's coordinator in this process (leader-elected in the coordinator namespace; it counts and grants only virtual nodes), so NoExecute rules get grants")
}

// template turns the node flags into a NodeTemplate.
func (f *virtualFlags) template() (virtual.NodeTemplate, error) {
	t := virtual.NodeTemplate{Capacity: virtual.DefaultCapacity(), InternalIP: f.internalIP}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: f.cpu, corev1.ResourceMemory: f.memory, corev1.ResourcePods: f.pods} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return t, fmt.Errorf("--%s %q: %w", name, v, err)
		}
		t.Capacity[name] = q
	}
	labels, err := parseLabels(f.labels)
	if err != nil {
		return t, err
	}
	extended, err := parseExtendedResources(f.extended)
	if err != nil {
		return t, err
	}
	maps.Copy(t.Capacity, extended)
	t.Labels = labels
	for _, s := range splitList(f.taints) {
		taint, err := taints.ParseTaint(s)
		if err != nil {
			return t, fmt.Errorf("--register-with-taints: %w", err)
		}
		t.Taints = append(t.Taints, taint)
	}
	// The taints that keep other workloads off are the opt-in: a pod that
	// does not tolerate each by its key is rejected, never run.
	t.OptIn = slices.Clone(t.Taints)
	return t, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseExtendedResources reads name=count,... and checks each name as the
// API server checks an extended resource's.
func parseExtendedResources(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, kv := range splitList(s) {
		name, count, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--extended-resources: %q is not name=count", kv)
		}
		if err := hardware.ValidateResourceName(name); err != nil {
			return nil, fmt.Errorf("--extended-resources: %w", err)
		}
		q, err := resource.ParseQuantity(count)
		if err != nil || q.Sign() < 0 || q.Value()*1000 != q.MilliValue() {
			return nil, fmt.Errorf("--extended-resources: %s=%s: the count must be a whole number", name, count)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

// parseLabels reads key=value,... and checks keys and values as the API
// server would.
func parseLabels(s string) (map[string]string, error) {
	labels := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--labels: %q is not key=value", kv)
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return nil, fmt.Errorf("--labels: key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			return nil, fmt.Errorf("--labels: value %q of %s: %s", v, k, strings.Join(msgs, "; "))
		}
		labels[k] = v
	}
	return labels, nil
}

func runVirtual(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("selftaint virtual", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f virtualFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.nodes < 1 {
		return fmt.Errorf("--nodes must be at least 1, got %d", f.nodes)
	}
	names := virtual.Names(f.namePrefix, f.nodes)
	for _, n := range names {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			return fmt.Errorf("--name-prefix %q: node name %q: %s", f.namePrefix, n, strings.Join(msgs, "; "))
		}
	}
	template, err := f.template()
	if err != nil {
		return err
	}
	logger, cfg, err := loggerAndConfig(stderr, f.logLevel, f.configPath)
	if err != nil {
		return err
	}
	rc, err := (&kubeFlags{kubeconfig: f.kubeconfig}).restConfig("selftaint-virtual")
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = float32(f.qps), f.burst
	if rc.QPS <= 0 {
		rc.QPS = float32(max(20, 2*f.nodes))
	}
	if rc.Burst <= 0 {
		rc.Burst = int(2 * rc.QPS)
	}
	var requests atomic.Int64
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &requests} })
	if f.leaseDuration < 4*time.Second {
		return fmt.Errorf("--lease-duration must be at least 4s, got %s", f.leaseDuration)
	}
	if f.statsInterval > 0 {
		go logStats(ctx, logger, f.statsInterval, f.nodes, &requests)
	}
	fleet, err := startVirtualFleet(ctx, virtualFleetOptions{
		Names:         names,
		NamePrefix:    f.namePrefix,
		Template:      template,
		Config:        cfg,
		REST:          rc,
		Logger:        logger,
		Namespace:     cfg.Coordinator.NamespaceOr(os.Getenv("POD_NAMESPACE")),
		Coordinator:   f.coordinator,
		DeleteOnExit:  f.deleteOnExit,
		LeaseDuration: f.leaseDuration,
	})
	if err != nil {
		return err
	}
	<-fleet.Done()
	if err := fleet.Err(); err != nil {
		return err
	}
	logger.Info("virtual nodes stopped")
	return nil
}

// virtualFleetOptions start virtual nodes in this process: `selftaint
// virtual` and the drill.
type virtualFleetOptions struct {
	// Names of the nodes; NamePrefix names the in-process coordinator's
	// identity.
	Names      []string
	NamePrefix string
	Template   virtual.NodeTemplate
	// Config is the agents' config: rules, damping, faults, the
	// coordinator's policy.
	Config *config.Config
	// REST is the API server and the client's limits (QPS, burst, user
	// agent), as the caller wants them.
	REST   *rest.Config
	Logger *slog.Logger
	// Namespace is the coordinator's: its grants and guard.
	Namespace string
	// Coordinator also runs the virtual fleet's coordinator in this
	// process (see inProcessCoordinator).
	Coordinator   bool
	DeleteOnExit  bool
	LeaseDuration time.Duration
}

// virtualFleet is virtual nodes running in this process, from
// startVirtualFleet.
type virtualFleet struct {
	// Control stops and resumes single nodes' kubelets.
	Control *virtual.Control
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // Run's, set before done is closed; nil for a cancel
}

// startVirtualFleet starts virtual nodes (and the coordinator, if asked)
// until ctx ends or Stop is called.
func startVirtualFleet(ctx context.Context, o virtualFleetOptions) (*virtualFleet, error) {
	core, err := typedcorev1.NewForConfig(o.REST)
	if err != nil {
		return nil, fmt.Errorf("building API client: %w", err)
	}
	leases, err := typedcoordv1.NewForConfig(o.REST)
	if err != nil {
		return nil, fmt.Errorf("building API client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stopCoordinator := func() {}
	if o.Coordinator {
		if stopCoordinator, err = inProcessCoordinator(ctx, o.REST, o.Config, o.Namespace, o.NamePrefix, o.Logger); err != nil {
			cancel()
			return nil, err
		}
	}
	cfg := o.Config
	fl := &virtualFleet{Control: virtual.NewControl(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(fl.done)
		defer stopCoordinator()
		opts := cfg.VirtualOptions(leases, o.Namespace)
		opts.Names, opts.Core, opts.Template = o.Names, core, o.Template
		opts.DeleteOnExit, opts.LeaseDuration, opts.Logger, opts.Control = o.DeleteOnExit, o.LeaseDuration, o.Logger, fl.Control
		err := virtual.Run(ctx, opts)
		if err != nil && !errors.Is(err, context.Canceled) {
			fl.err = err
		}
	}()
	return fl, nil
}

// Done is closed once the nodes (and the coordinator) have stopped.
func (f *virtualFleet) Done() <-chan struct{} { return f.done }

// Err is why the nodes stopped, once Done is closed: nil when they were
// stopped (ctx or Stop).
func (f *virtualFleet) Err() error { return f.err }

// Stop stops the nodes and the coordinator, waits for them (the Nodes are
// deleted first with DeleteOnExit) and returns Err.
func (f *virtualFleet) Stop() error {
	f.cancel()
	<-f.done
	return f.err
}

// inProcessCoordinator runs a coordinator in this process (`selftaint
// coordinator --virtual` runs the same as its own process), its identity named
// after the virtual nodes, until ctx ends or the returned function, which
// stops it and waits, is called. Losing leadership to another coordinator is logged, not fatal: the
// virtual nodes go on. It is the virtual fleet's coordinator: it counts
// and grants only virtual Nodes, whatever coordinator.fleet says.
func inProcessCoordinator(ctx context.Context, rc *rest.Config, cfg *config.Config, namespace, prefix string, logger *slog.Logger) (func(), error) {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("building API client: %w", err)
	}
	host, _ := os.Hostname()
	policy := coordinatorPolicy(cfg, true)
	log := logger.With("component", "coordinator")
	log.Info("coordinator configured", "namespace", namespace, "guard", cfg.Coordinator.Guard.Name, "fleet", policy.Members,
		"maxNoExecute", policy.MaxNoExecute.String(), "ratePerMinute", policy.RatePerMinute, "grantTTL", policy.GrantTTL)
	c, err := coordinator.New(coordinator.Options{
		Client: client, Namespace: namespace, Identity: fmt.Sprintf("virtual-%s%s-%d", prefix, host, os.Getpid()),
		Config: policy, GuardName: cfg.Coordinator.Guard.Name, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			logger.Warn("the in-process coordinator stopped; the virtual nodes go on", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// countingTransport counts the requests a client sends.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// logStats logs, every interval, the API requests the process made and its
// memory, so the cost of simulating a fleet is visible.
func logStats(ctx context.Context, logger *slog.Logger, interval time.Duration, nodes int, requests *atomic.Int64) {
	t := time.NewTicker(interval)
	defer t.Stop()
	last, lastAt := requests.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n := requests.Load()
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			attrs := []any{"nodes", nodes, "apiRequests", n, "apiRequestsPerSecond", fmt.Sprintf("%.2f", rate)}
			if rss, err := selfRSS(); err == nil {
				attrs = append(attrs, "rssMiB", fmt.Sprintf("%.1f", float64(rss)/(1<<20)))
			}
			logger.Info("virtual nodes running", attrs...)
		}
	}
}

// selfRSS is this process's resident set size in bytes.
func selfRSS() (int64, error) {
	st, err := procStatusKiB("/proc/self/status")
	if err != nil {
		return 0, err
	}
	kb, ok := st["VmRSS"]
	if !ok {
		return 0, errors.New("no VmRSS line in /proc/self/status")
	}
	return kb << 10, nil
}

// procStatusKiB reads the numeric fields of a /proc/<pid>/status file
// (VmRSS, RssAnon, RssFile, VmHWM, ..., in kB).
func procStatusKiB(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}
