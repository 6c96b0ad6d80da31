package metrics_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/metrics"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// waitSeries polls the registry until every line of want is among the
// series of the named metrics.
func waitSeries(t *testing.T, reg prometheus.Gatherer, what string, want []string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := series(t, reg, names...)
		missing := ""
		for _, w := range want {
			if !strings.Contains("\n"+got+"\n", "\n"+w+"\n") {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s after 20s; the series are\n%s", what, missing, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNoExecuteAndFlappingMetrics runs an agent with a NoExecute rule on a
// real control plane, playing the coordinator by hand, and follows its
// metrics: suspended without a guard, waiting with a fresh one, allowed
// with a grant, and suspended again when the condition flaps (a bucket of
// two: putting the taint on leaves one token, too few to lift it).
func TestNoExecuteAndFlappingMetrics(t *testing.T) {
	cp := testcp.Start(t, testcp.Options{})
	c := cp.Client()
	const node, ns = "ne-metrics", "kube-system"
	cond := corev1.NodeConditionType("SelftaintTestEvict")
	rule := taints.Rule{
		Condition: cond, Status: corev1.ConditionTrue,
		Taint:    corev1.Taint{Key: "selftaint.io/test-evict", Effect: corev1.TaintEffectNoExecute},
		Fallback: corev1.TaintEffectNoSchedule,
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.BuildInfo{Version: "v0", Revision: "r", GoVersion: "go"})
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProbe{}
	p.status.Store(probes.StatusProblem)
	cp.CreateNode(t, node, nil)
	a, err := agent.New(agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes: []agent.ProbeSpec{{
			Entry:     probes.Entry{Probe: p, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond},
			Condition: cond,
		}},
		Rules:   []taints.Rule{rule},
		Limiter: taints.LimiterConfig{Burst: 2, Refill: time.Hour, CoolDown: time.Hour},
		NoExecute: &agent.NoExecuteOptions{
			Leases: c.CoordinationV1(), Namespace: ns, GuardName: fleet.DefaultGuardName,
			GrantTTL: 15 * time.Second, GuardStaleAfter: time.Minute,
		},
		HeartbeatPeriod: time.Hour,
		Jitter:          -1,
		Logger:          slog.New(slog.DiscardHandler),
		Metrics:         m,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()
	names := []string{"selftaint_condition_flapping", "selftaint_noexecute_allowed", "selftaint_noexecute_suspended_total"}
	const (
		flapping0  = `selftaint_condition_flapping{condition="SelftaintTestEvict"} 0`
		flapping1  = `selftaint_condition_flapping{condition="SelftaintTestEvict"} 1`
		allowed0   = `selftaint_noexecute_allowed{condition="SelftaintTestEvict"} 0`
		allowed1   = `selftaint_noexecute_allowed{condition="SelftaintTestEvict"} 1`
		suspended  = `selftaint_noexecute_suspended_total{condition="SelftaintTestEvict",reason="NoExecuteSuspended"} `
		waitingFor = `selftaint_noexecute_suspended_total{condition="SelftaintTestEvict",reason="NoExecuteWaiting"} `
	)

	// No guard: NoExecute is suspended, once however many syncs.
	waitSeries(t, reg, "no guard", []string{flapping0, allowed0, suspended + "1", waitingFor + "0"}, names...)

	// A fresh guard and no grant: waiting.
	cms := c.CoreV1().ConfigMaps(ns)
	guard := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultGuardName},
		Data:       fleet.EncodeGuard(fleet.GuardState{RenewTime: time.Now()}),
	}
	if _, err := cms.Create(ctx, guard, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSeries(t, reg, "guard, no grant", []string{allowed0, suspended + "1", waitingFor + "1"}, names...)

	// A grant: allowed.
	if _, err := c.CoordinationV1().Leases(ns).Create(ctx, fleet.NewGrant(ns, node, "", 15*time.Second, time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSeries(t, reg, "granted", []string{flapping0, allowed1, suspended + "1", waitingFor + "1"}, names...)

	// The probe recovers: lifting needs two tokens, one is left, so the
	// condition flaps, is held True, and its NoExecute is suspended.
	p.status.Store(probes.StatusOK)
	waitSeries(t, reg, "flapping", []string{flapping1, allowed0, suspended + "2", waitingFor + "1"}, names...)
}
