package metrics_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent/metrics"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

// series renders the registry's series of the named metric families, one
// `name{label="value",...} value` line each, sorted.
func series(t *testing.T, reg prometheus.Gatherer, names ...string) string {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range fams {
		if !slices.Contains(names, f.GetName()) {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			v := s.GetGauge().GetValue() + s.GetCounter().GetValue()
			lines = append(lines, f.GetName()+"{"+strings.Join(labels, ",")+"} "+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestFlappingAndNoExecute steps the agent's flapping and NoExecute
// metrics through a few syncs: series for exactly the conditions given,
// dropped when a condition is no longer given, and the suspension counter
// starting at zero for both reasons and kept.
func TestFlappingAndNoExecute(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.BuildInfo{Version: "v0", Revision: "r", GoVersion: "go"})
	if err != nil {
		t.Fatal(err)
	}
	const mem, disk = corev1.NodeConditionType("Mem"), corev1.NodeConditionType("Disk")
	names := []string{"selftaint_condition_flapping", "selftaint_noexecute_allowed", "selftaint_noexecute_suspended_total"}
	steps := []struct {
		name      string
		flapping  map[corev1.NodeConditionType]bool
		noExecute map[corev1.NodeConditionType]bool
		suspended map[corev1.NodeConditionType]string
		want      []string
	}{{
		name:     "healthy: no NoExecute rule applies",
		flapping: map[corev1.NodeConditionType]bool{mem: false, disk: false},
		want: []string{
			`selftaint_condition_flapping{condition="Disk"} 0`,
			`selftaint_condition_flapping{condition="Mem"} 0`,
		},
	}, {
		name:      "Mem applies and waits for a grant",
		flapping:  map[corev1.NodeConditionType]bool{mem: false, disk: false},
		noExecute: map[corev1.NodeConditionType]bool{mem: false},
		suspended: map[corev1.NodeConditionType]string{mem: taints.ReasonNoExecuteWaiting},
		want: []string{
			`selftaint_condition_flapping{condition="Disk"} 0`,
			`selftaint_condition_flapping{condition="Mem"} 0`,
			`selftaint_noexecute_allowed{condition="Mem"} 0`,
			`selftaint_noexecute_suspended_total{condition="Mem",reason="NoExecuteSuspended"} 0`,
			`selftaint_noexecute_suspended_total{condition="Mem",reason="NoExecuteWaiting"} 1`,
		},
	}, {
		name:      "Mem granted; Disk flaps and is suspended",
		flapping:  map[corev1.NodeConditionType]bool{mem: false, disk: true},
		noExecute: map[corev1.NodeConditionType]bool{mem: true, disk: false},
		suspended: map[corev1.NodeConditionType]string{disk: taints.ReasonNoExecuteSuspended},
		want: []string{
			`selftaint_condition_flapping{condition="Disk"} 1`,
			`selftaint_condition_flapping{condition="Mem"} 0`,
			`selftaint_noexecute_allowed{condition="Disk"} 0`,
			`selftaint_noexecute_allowed{condition="Mem"} 1`,
			`selftaint_noexecute_suspended_total{condition="Disk",reason="NoExecuteSuspended"} 1`,
			`selftaint_noexecute_suspended_total{condition="Disk",reason="NoExecuteWaiting"} 0`,
			`selftaint_noexecute_suspended_total{condition="Mem",reason="NoExecuteSuspended"} 0`,
			`selftaint_noexecute_suspended_total{condition="Mem",reason="NoExecuteWaiting"} 1`,
		},
	}, {
		name:     "all healthy, Disk no longer published: gauges gone, counters kept",
		flapping: map[corev1.NodeConditionType]bool{mem: false},
		want: []string{
			`selftaint_condition_flapping{condition="Mem"} 0`,
			`selftaint_noexecute_suspended_total{condition="Disk",reason="NoExecuteSuspended"} 1`,
			`selftaint_noexecute_suspended_total{condition="Disk",reason="NoExecuteWaiting"} 0`,
			`selftaint_noexecute_suspended_total{condition="Mem",reason="NoExecuteSuspended"} 0`,
			`selftaint_noexecute_suspended_total{condition="Mem",reason="NoExecuteWaiting"} 1`,
		},
	}}
	for _, s := range steps {
		m.SetFlapping(s.flapping)
		m.SetNoExecute(s.noExecute)
		for c, r := range s.suspended {
			m.NoExecuteSuspended(c, r)
		}
		if got, want := series(t, reg, names...), strings.Join(s.want, "\n"); got != want {
			t.Errorf("%s: got\n%s\nwant\n%s", s.name, got, want)
		}
	}
}

// TestProbeRuns: each probe's runs are counted, its failed runs by kind,
// and every kind's series starts at zero from its first run.
func TestProbeRuns(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.BuildInfo{Version: "v0", Revision: "r", GoVersion: "go"})
	if err != nil {
		t.Fatal(err)
	}
	m.ProbeRan("memory", time.Millisecond, probes.FailureNone)
	m.ProbeRan("memory", time.Millisecond, probes.FailureRead)
	m.ProbeRan("memory", time.Millisecond, probes.FailureRead)
	m.ProbeRan("pid", time.Second, probes.FailureTimeout)
	m.ProbeRan("pid", time.Second, probes.FailureNone)
	want := []string{
		`selftaint_probe_errors_total{kind="invalid_result",probe="memory"} 0`,
		`selftaint_probe_errors_total{kind="invalid_result",probe="pid"} 0`,
		`selftaint_probe_errors_total{kind="panic",probe="memory"} 0`,
		`selftaint_probe_errors_total{kind="panic",probe="pid"} 0`,
		`selftaint_probe_errors_total{kind="read_error",probe="memory"} 2`,
		`selftaint_probe_errors_total{kind="read_error",probe="pid"} 0`,
		`selftaint_probe_errors_total{kind="timeout",probe="memory"} 0`,
		`selftaint_probe_errors_total{kind="timeout",probe="pid"} 1`,
		`selftaint_probe_errors_total{kind="unknown",probe="memory"} 0`,
		`selftaint_probe_errors_total{kind="unknown",probe="pid"} 0`,
		`selftaint_probe_runs_total{probe="memory"} 3`,
		`selftaint_probe_runs_total{probe="pid"} 2`,
	}
	if got := series(t, reg, "selftaint_probe_runs_total", "selftaint_probe_errors_total"); got != strings.Join(want, "\n") {
		t.Errorf("series:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range fams {
		if f.GetName() == "selftaint_probe_duration_seconds" {
			for _, s := range f.GetMetric() {
				counts[s.GetLabel()[0].GetValue()] = s.GetHistogram().GetSampleCount()
			}
		}
	}
	if counts["memory"] != 3 || counts["pid"] != 2 {
		t.Errorf("probe_duration_seconds counts %v, want memory 3, pid 2", counts)
	}
}

// TestEventsHeldBack: each Event the agent's pacing holds back counts by
// its reason.
func TestEventsHeldBack(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.BuildInfo{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"OOMKilling", "OOMKilling", "TaintAdded"} {
		m.EventsHeldBack(r, 1)
	}
	got := series(t, reg, "selftaint_events_held_back_total")
	want := `selftaint_events_held_back_total{reason="OOMKilling"} 2` + "\n" + `selftaint_events_held_back_total{reason="TaintAdded"} 1`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
