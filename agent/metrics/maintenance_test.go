package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/selftaint/selftaint/agent/metrics"
	"github.com/selftaint/selftaint/taints/fleet"
)

// TestMaintenanceMetrics steps the coordinator's maintenance metrics: every
// state's gauge and every result's counter exist from the start at zero,
// the gauges follow the last decision, the counters add up, and each
// drain's duration lands in its outcome's histogram, in the bucket its
// length says.
func TestMaintenanceMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewCoordinator(reg, metrics.BuildInfo{Version: "v0", Revision: "r", GoVersion: "go"})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"selftaint_maintenance_nodes", "selftaint_maintenance_evictions_total"}
	check := func(step string, want ...string) {
		t.Helper()
		if got := series(t, reg, names...); got != strings.Join(want, "\n") {
			t.Errorf("%s: got\n%s\nwant\n%s", step, got, strings.Join(want, "\n"))
		}
	}
	check("at start",
		`selftaint_maintenance_evictions_total{result="deleted"} 0`,
		`selftaint_maintenance_evictions_total{result="evicted"} 0`,
		`selftaint_maintenance_evictions_total{result="failed"} 0`,
		`selftaint_maintenance_evictions_total{result="refused"} 0`,
		`selftaint_maintenance_nodes{state="blocked"} 0`,
		`selftaint_maintenance_nodes{state="drained"} 0`,
		`selftaint_maintenance_nodes{state="draining"} 0`,
		`selftaint_maintenance_nodes{state="waiting"} 0`,
	)

	m.MaintenanceState(3, 2, 1, 0)
	m.Evicted(metrics.EvictionEvicted, 5)
	m.Evicted(metrics.EvictionRefused, 1)
	m.Evicted(metrics.EvictionRefused, 2)
	m.Evicted(metrics.EvictionFailed, 0)
	check("draining",
		`selftaint_maintenance_evictions_total{result="deleted"} 0`,
		`selftaint_maintenance_evictions_total{result="evicted"} 5`,
		`selftaint_maintenance_evictions_total{result="failed"} 0`,
		`selftaint_maintenance_evictions_total{result="refused"} 3`,
		`selftaint_maintenance_nodes{state="blocked"} 0`,
		`selftaint_maintenance_nodes{state="drained"} 1`,
		`selftaint_maintenance_nodes{state="draining"} 2`,
		`selftaint_maintenance_nodes{state="waiting"} 3`,
	)

	m.MaintenanceState(0, 0, 2, 1)
	m.Evicted(metrics.EvictionDeleted, 1)
	check("one blocked at its deadline",
		`selftaint_maintenance_evictions_total{result="deleted"} 1`,
		`selftaint_maintenance_evictions_total{result="evicted"} 5`,
		`selftaint_maintenance_evictions_total{result="failed"} 0`,
		`selftaint_maintenance_evictions_total{result="refused"} 3`,
		`selftaint_maintenance_nodes{state="blocked"} 1`,
		`selftaint_maintenance_nodes{state="drained"} 2`,
		`selftaint_maintenance_nodes{state="draining"} 0`,
		`selftaint_maintenance_nodes{state="waiting"} 0`,
	)

	m.DrainFinished(fleet.ReasonDrained, 90*time.Second)
	m.DrainFinished(fleet.ReasonDrained, 3*time.Second)
	m.DrainFinished(fleet.ReasonDrainBlocked, time.Hour)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	type hist struct {
		count uint64
		sum   float64
		le    map[float64]uint64 // cumulative count at each bound
	}
	got := map[string]hist{}
	for _, f := range fams {
		if f.GetName() != "selftaint_maintenance_drain_duration_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			h := hist{count: s.GetHistogram().GetSampleCount(), sum: s.GetHistogram().GetSampleSum(), le: map[float64]uint64{}}
			for _, b := range s.GetHistogram().GetBucket() {
				h.le[b.GetUpperBound()] = b.GetCumulativeCount()
			}
			got[s.GetLabel()[0].GetValue()] = h
		}
	}
	if len(got) != 3 {
		t.Fatalf("drain duration series %v, want Drained, DrainBlocked and Released from the start", got)
	}
	for _, w := range []struct {
		outcome string
		count   uint64
		sum     float64
		le      map[float64]uint64
	}{
		{fleet.ReasonDrained, 2, 93, map[float64]uint64{5: 1, 60: 1, 120: 2, 14400: 2}},
		{fleet.ReasonDrainBlocked, 1, 3600, map[float64]uint64{1800: 0, 3600: 1, 14400: 1}},
		{fleet.ReasonReleased, 0, 0, map[float64]uint64{5: 0, 14400: 0}},
	} {
		h := got[w.outcome]
		if h.count != w.count || h.sum != w.sum {
			t.Errorf("%s: count %d sum %g, want %d and %g", w.outcome, h.count, h.sum, w.count, w.sum)
		}
		for le, n := range w.le {
			if c, ok := h.le[le]; !ok || c != n {
				t.Errorf("%s: bucket le=%g holds %d (present %v), want %d", w.outcome, le, c, ok, n)
			}
		}
	}
}
