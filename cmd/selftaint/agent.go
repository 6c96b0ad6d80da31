package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	admissionregistrationv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes"
)

// agentFlags are the agent subcommand's flags.
type agentFlags struct {
	nodeName   string
	kubeconfig string
	hostRoot   string
	configPath string
	logLevel   string
	qps        float64
	burst      int
	// admissionPolicy is the policy the agent checks its config against
	// at start-up.
	admissionPolicy string
	// shedStartupMemory: page out the binary's start-up-only pages once
	// the agent is in steady state (memory.go).
	shedStartupMemory bool
	observe           observeFlags
}

func (f *agentFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "the Node this agent owns (default $NODE_NAME, set from the downward API in the DaemonSet)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file; empty means in-cluster config (default $KUBECONFIG)")
	fs.StringVar(&f.hostRoot, "host-root", "/", "where the host's filesystem is mounted (e.g. /host in the DaemonSet)")
	fs.StringVar(&f.configPath, "config", "", "config file (YAML); empty means the built-in defaults")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Float64Var(&f.qps, "kube-api-qps", 5, "client-side limit on API requests per second")
	fs.IntVar(&f.burst, "kube-api-burst", 10, "client-side burst of API requests")
	fs.StringVar(&f.admissionPolicy, "admission-policy", "selftaint-own-node", "the ValidatingAdmissionPolicy that confines the agent: read at start-up to warn when its parameters do not match the config; empty skips the check")
	fs.BoolVar(&f.shedStartupMemory, "shed-startup-memory", true, "30s after the first sync, page out the binary's pages (madvise MADV_RANDOM and MADV_PAGEOUT, Linux >= 5.4) and drop them from the page cache, so that only those the steady-state loop touches become resident again: lower Rss for some hundred page reads once")
	f.observe.register(fs)
}

func runAgent(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("selftaint agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f agentFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.nodeName == "" {
		return errors.New("--node-name is required (or set $NODE_NAME)")
	}
	tuneAgentRuntime(ctx)
	logger, cfg, err := loggerAndConfig(stderr, f.logLevel, f.configPath)
	if err != nil {
		return err
	}
	rc, err := restConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = float32(f.qps), f.burst
	rc.UserAgent = "selftaint/" + f.nodeName
	obs, err := newObservability(f.observe, buildInfo(), rc)
	if err != nil {
		return err
	}
	client, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("building API client: %w", err)
	}
	leases, err := typedcoordv1.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("building API client: %w", err)
	}
	for _, w := range cfg.Warnings() {
		logger.Warn("config: " + w)
	}
	m, err := openMachine(cfg, probes.Host{Root: f.hostRoot}, logger)
	if err != nil {
		return err
	}
	defer m.close()
	if m.gpuOff != "" {
		logger.Info(m.gpuOff)
	}
	admission, err := admissionregistrationv1client.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("building API client: %w", err)
	}
	go func() {
		checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		checkAdmissionPolicy(checkCtx, admission.ValidatingAdmissionPolicies(), f.admissionPolicy, m.ownership, logger)
	}()
	a, err := agent.New(agent.Options{
		NodeName:        f.nodeName,
		Client:          client,
		Probes:          m.specs,
		Rules:           cfg.TaintRules(),
		DrainRules:      cfg.DrainRules(),
		HeartbeatPeriod: cfg.HeartbeatPeriod.D,
		Logger:          logger,
		Faults:          cfg.FaultOptions(),
		Hardware:        m.inventory,
		HardwarePeriod:  cfg.Hardware.Period.D,
		Init:            cfg.InitOptions(),
		Ownership:       m.ownership,
		Metrics:         obs.agentMetrics(),
		Limiter:         cfg.Limiter(),
		NoExecute:       cfg.NoExecuteOptions(leases, cfg.Coordinator.NamespaceOr(os.Getenv("POD_NAMESPACE"))),
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait, err := obs.serve(ctx, a, logger)
	if err != nil {
		return err
	}
	if f.shedStartupMemory {
		startShedding(ctx, a.Ready, logger)
	}
	runErr := a.Run(ctx)
	cancel()
	if err := wait(); err != nil {
		logger.Warn("metrics server stopped with an error", "err", err)
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	logger.Info("agent stopped")
	return nil
}

// defaultAgentGCPercent is the agent's GC target (GOGC) unless the operator
// sets GOGC: the heap may grow to 1.5 times what is live after a collection,
// not twice. The agent's live heap is small (about 3 MiB: the API scheme,
// the config, the Node) and it allocates little when idle, so the collector
// runs about as often as at the runtime's default: its forced collection
// every 2 minutes and the periodic writes trigger most of them. See README
// "Memory" for what it saves and costs.
const defaultAgentGCPercent = 50

// agentGCPercent returns the GC percent the agent sets at start-up, and
// whether to set one: only when the environment (getenv) sets neither GOGC
// nor GOMEMLIMIT, which are the operator's.
func agentGCPercent(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	return defaultAgentGCPercent, true
}

// restConfig loads a kubeconfig file, or the in-cluster config when path is
// empty.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	return rc, nil
}

// operatorClients are the core and coordination clients of an operator
// command that reads the NoExecute standing.
func operatorClients(k *kubeFlags, userAgent string) (typedcorev1.CoreV1Interface, typedcoordv1.LeasesGetter, error) {
	rc, err := k.restConfig(userAgent)
	if err != nil {
		return nil, nil, err
	}
	core, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("building API client: %w", err)
	}
	leases, err := typedcoordv1.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("building API client: %w", err)
	}
	return core, leases, nil
}

// operatorClient is a core client for an operator command, credentials found
// as kubeFlags.clientConfig finds them.
func operatorClient(k *kubeFlags, userAgent string) (*typedcorev1.CoreV1Client, error) {
	rc, err := k.restConfig(userAgent)
	if err != nil {
		return nil, err
	}
	client, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("building API client: %w", err)
	}
	return client, nil
}
