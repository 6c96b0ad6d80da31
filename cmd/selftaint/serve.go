package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/metrics"
)

// defaultMetricsAddress is where the agent serves /metrics, /healthz and
// /readyz. The DaemonSet runs with hostNetwork, so this is a port on the
// node: 9746 is not in Prometheus' list of allocated exporter ports.
const defaultMetricsAddress = ":9746"

// observeFlags configure the agent's metrics and health endpoints.
type observeFlags struct {
	address    string
	stallAfter time.Duration
}

func (f *observeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.address, "metrics-address", defaultMetricsAddress, "host:port to serve /metrics, /healthz and /readyz on; empty disables them")
	fs.DurationVar(&f.stallAfter, "healthz-stall-after", 2*time.Minute, "/healthz fails when a sync has run, or a queued reconcile has waited, longer than this")
}

// observability is the agent's metrics registry and HTTP endpoints; the
// zero value (address empty) does nothing.
type observability struct {
	flags   observeFlags
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	ln      net.Listener
}

// newObservability opens the listener (so a taken port fails at start-up),
// builds the registry and metrics, and instruments rc's transport.
func newObservability(f observeFlags, build metrics.BuildInfo, rc *rest.Config) (*observability, error) {
	o := &observability{flags: f}
	if f.address == "" {
		return o, nil
	}
	o.reg = prometheus.NewRegistry()
	m, err := metrics.New(o.reg, build)
	if err != nil {
		return nil, err
	}
	o.metrics = m
	rc.Wrap(m.WrapTransport)
	if o.ln, err = metrics.Listen(f.address); err != nil {
		return nil, err
	}
	return o, nil
}

// agentMetrics is the sink for agent.Options.Metrics: nil when disabled.
func (o *observability) agentMetrics() agent.Metrics {
	if o.metrics == nil {
		return nil
	}
	return o.metrics
}

// serve serves the endpoints for a until ctx ends; the returned function
// waits for the server to stop and returns its error.
func (o *observability) serve(ctx context.Context, a *agent.Agent, log *slog.Logger) (wait func() error, err error) {
	if o.ln == nil {
		return func() error { return nil }, nil
	}
	if err := metrics.RegisterReady(o.reg, a.Ready); err != nil {
		_ = o.ln.Close()
		return nil, err
	}
	var h http.Handler = metrics.Handler(o.reg, metrics.Health{
		Live:  func() error { return a.Live(o.flags.stallAfter) },
		Ready: a.Ready,
	}, log)
	done := make(chan error, 1)
	go func() { done <- metrics.Serve(ctx, o.ln, h) }()
	log.Info("serving metrics and health", "address", o.ln.Addr().String())
	return func() error { return <-done }, nil
}
