package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Health is what /healthz and /readyz ask: nil, or why not.
type Health struct {
	// Live reports whether the process and its reconcile loop are alive.
	Live func() error
	// Ready reports whether the agent is ready.
	Ready func() error
}

// Handler serves /metrics from g, /healthz (200, or 500 with the reason)
// and /readyz (200, or 503 with the reason). log, if set, hears about
// each failed health check.
func Handler(g prometheus.Gatherer, h Health, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", check("healthz", h.Live, http.StatusInternalServerError, log))
	mux.HandleFunc("GET /readyz", check("readyz", h.Ready, http.StatusServiceUnavailable, log))
	return mux
}

func check(name string, f func() error, failCode int, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		var err error
		if f != nil {
			err = f()
		}
		if err != nil {
			log.Warn("health check failed", "check", name, "reason", err.Error())
			w.WriteHeader(failCode)
			fmt.Fprintf(w, "%s failed: %v\n", name, err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// Listen opens addr (host:port; port 0 picks a free one).
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for metrics and health on %s: %w", addr, err)
	}
	return ln, nil
}

// Serve serves h on ln until ctx ends, then shuts down gracefully.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serving metrics and health: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down the metrics server: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving metrics and health: %w", err)
	}
	return nil
}
