package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/coordinator"
	"github.com/selftaint/selftaint/agent/metrics"
	"github.com/selftaint/selftaint/taints/fleet"
)

// defaultCoordinatorMetricsAddress is where the coordinator serves
// /metrics, /healthz and /readyz: the port after the agent's.
const defaultCoordinatorMetricsAddress = ":9747"

// coordinatorFlags are the coordinator subcommand's flags.
type coordinatorFlags struct {
	configPath     string
	kubeconfig     string
	namespace      string
	identity       string
	metricsAddress string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	nodeSelector   string
	logLevel       string
	qps            float64
	burst          int
	virtual        bool
}

func (f *coordinatorFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.configPath, "config", "", "config file (YAML), the agents' own; empty means the built-in defaults")
	fs.StringVar(&f.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file; empty means in-cluster config (default $KUBECONFIG)")
	fs.StringVar(&f.namespace, "namespace", "", "namespace of the grant Leases, the guard ConfigMap and the leader Lease (default: the config's coordinator.namespace, else $POD_NAMESPACE, else "+config.DefaultCoordinatorNamespace+")")
	fs.StringVar(&f.identity, "identity", os.Getenv("POD_NAME"), "this replica's leader-election identity (default $POD_NAME, else the host name with a unique suffix)")
	fs.StringVar(&f.metricsAddress, "metrics-address", defaultCoordinatorMetricsAddress, "host:port to serve /metrics, /healthz and /readyz on; empty disables them")
	fs.DurationVar(&f.leaseDuration, "leader-elect-lease-duration", coordinator.DefaultLeaseDuration, "how long a standby waits after the leader's last renewal before taking over")
	fs.DurationVar(&f.renewDeadline, "leader-elect-renew-deadline", coordinator.DefaultRenewDeadline, "how long the leader retries renewing before it gives up leading (and exits)")
	fs.DurationVar(&f.retryPeriod, "leader-elect-retry-period", coordinator.DefaultRetryPeriod, "how often replicas try to acquire or renew the leader Lease")
	fs.StringVar(&f.nodeSelector, "node-selector", "", "label selector: the fleet is the Nodes it matches (default: all Nodes)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Float64Var(&f.qps, "kube-api-qps", 20, "client-side limit on API requests per second")
	fs.IntVar(&f.burst, "kube-api-burst", 30, "client-side burst of API requests")
	fs.BoolVar(&f.virtual, "virtual", false, "be the virtual fleet's coordinator, as `selftaint virtual --coordinator` runs one in-process: count and grant only virtual Nodes (labelled "+fleet.VirtualLabel+"=true), whatever the config's coordinator.fleet says; as its own process, so that several replicas fail over (a drill kills or pauses the leader). --metrics-address defaults to none with it, so that replicas share a host")
}

// coordinatorPolicy is the coordinator's policy from the config: the virtual
// fleet's when virtual, whatever coordinator.fleet says.
func coordinatorPolicy(cfg *config.Config, virtual bool) fleet.Config {
	policy := cfg.Fleet()
	if virtual {
		policy.Members = fleet.MembersVirtual
	}
	return policy
}

// namespaceFor is the coordinator's namespace: the flag, else the
// config's, else the pod's, else config.DefaultCoordinatorNamespace.
func (f *coordinatorFlags) namespaceFor(cfg *config.Config) string {
	if f.namespace != "" {
		return f.namespace
	}
	return cfg.Coordinator.NamespaceOr(os.Getenv("POD_NAMESPACE"))
}

// identityOrHost is the leader-election identity: the flag (default
// $POD_NAME), else the host name with a unique suffix, so two replicas on
// one host never both believe they lead.
func (f *coordinatorFlags) identityOrHost() (string, error) {
	if f.identity != "" {
		return f.identity, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no --identity or $POD_NAME, and no host name: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

func runCoordinator(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("selftaint coordinator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f coordinatorFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	metricsSet := false
	fs.Visit(func(fl *flag.Flag) { metricsSet = metricsSet || fl.Name == "metrics-address" })
	if f.virtual && !metricsSet {
		f.metricsAddress = ""
	}
	selector, err := labels.Parse(f.nodeSelector)
	if err != nil {
		return fmt.Errorf("--node-selector: %w", err)
	}
	identity, err := f.identityOrHost()
	if err != nil {
		return err
	}
	logger, cfg, err := loggerAndConfig(stderr, f.logLevel, f.configPath)
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		logger.Warn("config: " + w)
	}
	c, obs, err := newCoordinator(f, cfg, identity, selector, logger)
	if err != nil {
		return err
	}
	return serveCoordinator(ctx, c, obs, logger)
}

// newCoordinator builds the API client, the metrics and the coordinator.
func newCoordinator(f coordinatorFlags, cfg *config.Config, identity string, selector labels.Selector, logger *slog.Logger) (*coordinator.Coordinator, *coordinatorObservability, error) {
	rc, err := restConfig(f.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	rc.QPS, rc.Burst = float32(f.qps), f.burst
	rc.UserAgent = "selftaint-coordinator/" + identity
	obs, err := newCoordinatorObservability(f.metricsAddress)
	if err != nil {
		return nil, nil, err
	}
	opts := coordinator.Options{
		Namespace:     f.namespaceFor(cfg),
		Identity:      identity,
		Config:        coordinatorPolicy(cfg, f.virtual),
		GuardName:     cfg.Coordinator.Guard.Name,
		LeaseDuration: f.leaseDuration,
		RenewDeadline: f.renewDeadline,
		RetryPeriod:   f.retryPeriod,
		Logger:        logger,
		NodeSelector:  selector,
	}
	if obs.metrics != nil {
		rc.Wrap(obs.metrics.WrapTransport)
		opts.Metrics = obs.metrics
	}
	if opts.Client, err = kubernetes.NewForConfig(rc); err != nil {
		obs.close()
		return nil, nil, fmt.Errorf("building API client: %w", err)
	}
	// Leader election's own client, with no client-side limit (its
	// requests are few, paced by the retry period): a renewal must never
	// wait behind the controller's requests under --kube-api-qps.
	ec := rest.CopyConfig(rc)
	ec.QPS, ec.Burst = -1, 0
	ec.UserAgent = rc.UserAgent + "/leader-election"
	if opts.ElectionClient, err = kubernetes.NewForConfig(ec); err != nil {
		obs.close()
		return nil, nil, fmt.Errorf("building the leader election's API client: %w", err)
	}
	c, err := coordinator.New(opts)
	if err != nil {
		obs.close()
		return nil, nil, err
	}
	logger.Info("coordinator configured", "namespace", opts.Namespace, "identity", identity, "guard", opts.GuardName, "fleet", opts.Config.Members,
		"maxNoExecute", opts.Config.MaxNoExecute.String(), "ratePerMinute", opts.Config.RatePerMinute, "grantTTL", opts.Config.GrantTTL,
		"nodeSelector", selector.String())
	return c, obs, nil
}

// serveCoordinator runs c, and its endpoints while it runs, until ctx
// ends (nil) or c stops on its own (its error: a lost leadership exits
// the process, and the pod restarts).
func serveCoordinator(ctx context.Context, c *coordinator.Coordinator, obs *coordinatorObservability, logger *slog.Logger) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait := obs.serve(runCtx, c, logger)
	runErr := c.Run(runCtx)
	cancel()
	if err := wait(); err != nil {
		logger.Warn("metrics server stopped with an error", "err", err)
	}
	if runErr != nil && !(errors.Is(runErr, context.Canceled) && ctx.Err() != nil) {
		return runErr
	}
	logger.Info("coordinator stopped")
	return nil
}

// coordinatorObservability is the coordinator's metrics registry and HTTP
// endpoints; with no address it does nothing.
type coordinatorObservability struct {
	reg     *prometheus.Registry
	metrics *metrics.Coordinator
	ln      net.Listener
}

// newCoordinatorObservability opens the listener (so a taken port fails at
// start-up) and builds the registry and metrics.
func newCoordinatorObservability(address string) (*coordinatorObservability, error) {
	o := &coordinatorObservability{}
	if address == "" {
		return o, nil
	}
	o.reg = prometheus.NewRegistry()
	m, err := metrics.NewCoordinator(o.reg, buildInfo())
	if err != nil {
		return nil, err
	}
	o.metrics = m
	if o.ln, err = metrics.Listen(address); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *coordinatorObservability) close() {
	if o.ln != nil {
		_ = o.ln.Close()
	}
}

// serve serves /metrics, /healthz and /readyz for c until ctx ends; the
// returned function waits for the server to stop and returns its error.
func (o *coordinatorObservability) serve(ctx context.Context, c *coordinator.Coordinator, log *slog.Logger) (wait func() error) {
	if o.ln == nil {
		return func() error { return nil }
	}
	h := metrics.Handler(o.reg, metrics.Health{Live: c.Live, Ready: c.Ready}, log)
	done := make(chan error, 1)
	go func() { done <- metrics.Serve(ctx, o.ln, h) }()
	log.Info("serving metrics and health", "address", o.ln.Addr().String())
	return func() error { return <-done }
}
