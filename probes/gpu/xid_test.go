package gpu

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/selftaint/selftaint/probes"
)

// Xids are judged by NVIDIA's catalog, as config extends it.
func TestXidCatalogActions(t *testing.T) {
	ok := want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"8 GPUs healthy"}, not: []string{"Xid 6", "Xid 7", "Xid 9", "Xid 1"}}
	tests := []struct {
		name    string
		cfg     func(c *Config)
		setup   func(f *fake) // before the first run
		events  func(f *fake) []nvml.EventData
		want    want
		reading string // in GPU 3's reading of the fatal probe
	}{
		{name: "63 is ignored", events: xids(3, 63), want: ok, reading: "other xid 63 x1"},
		{name: "92 is ignored", events: xids(3, 92), want: ok, reading: "other xid 92 x1"},
		{name: "13 restarts the application", events: xids(3, 13, 13), want: ok, reading: "other xid 13 x2"},
		{name: "79 needs a reboot", events: xids(3, 79), want: want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
			message: []string{"GPU 3 ({uuid3}): Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node"}, not: []string{"GPU 2", "GPU 4"}},
			reading: "fatal xid 79 x1"},
		{name: "48 needs a reset", events: xids(3, 48), want: want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
			message: []string{"GPU 3 ({uuid3}): Xid 48 (Double Bit ECC Error) at " + stamp0 + "; reset the GPU"}}},
		{name: "an Xid not in the catalog is fatal", events: xids(3, 999), want: want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
			message: []string{"GPU 3 ({uuid3}): Xid 999 (not in NVIDIA's Xid catalog) at " + stamp0 + "; reset the GPU"}}},
		{name: "the worst action gives the reason, all named", events: xids(3, 48, 79, 48), want: want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
			message: []string{"GPU 3 ({uuid3}): Xid 48 (Double Bit ECC Error) 2 times, first at " + stamp0 + ", last at " + stamp0 + ", Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node"}},
			reading: "fatal xid 48 x2, 79 x1"},
		{name: "config makes 63 fatal", cfg: func(c *Config) { c.Xids = map[uint64]Action{63: ActionReboot} }, events: xids(3, 63),
			want: want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"GPU 3 ({uuid3}): Xid 63 (GPU memory remapping event) at " + stamp0 + "; reboot the node"}}},
		{name: "SkipXids extends the catalog", cfg: func(c *Config) { c.SkipXids = []uint64{79} }, events: xids(3, 79, 13),
			want: ok, reading: "other xid 79 x1, 13 x1"},
		{name: "config sends one to support", cfg: func(c *Config) { c.Xids = map[uint64]Action{48: ActionContactSupport} }, events: xids(3, 48, 79),
			want: want{status: probes.StatusProblem, reason: ReasonGPUFailure, message: []string{"Xid 48 (Double Bit ECC Error) at " + stamp0 + ", Xid 79", "contact NVIDIA support (the GPU may need service)"}}},
		{name: "events other than Xids are no Xids", events: func(f *fake) []nvml.EventData {
			return []nvml.EventData{{Device: f.Devices[3], EventType: nvml.EventTypePState, EventData: 79}}
		}, want: ok},
		{name: "MIG instance named", setup: func(f *fake) { f.set(3, func(g *simGPU) { g.mig = true }) }, events: func(f *fake) []nvml.EventData {
			ev := f.xid(3, 79)
			ev.GpuInstanceId, ev.ComputeInstanceId = 1, 0
			return []nvml.EventData{ev}
		}, want: want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
			message: []string{"GPU 3 ({uuid3}): MIG GI 1 CI 0: Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node"}}},
		{name: "MIG GPU, Xid of no instance", setup: func(f *fake) { f.set(3, func(g *simGPU) { g.mig = true }) }, events: xids(3, 79),
			want: want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
				message: []string{"GPU 3 ({uuid3}): Xid 79 (GPU has fallen off the bus)"}, not: []string{"MIG"}}},
		{name: "instance ids of a GPU without MIG mean nothing", events: func(f *fake) []nvml.EventData {
			ev := f.xid(3, 79)
			ev.GpuInstanceId, ev.ComputeInstanceId = 0, 0
			return []nvml.EventData{ev}
		}, want: want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"GPU 3 ({uuid3}): Xid 79"}, not: []string{"MIG"}}},
		{name: "a device that is none of the GPUs", events: func(f *fake) []nvml.EventData {
			other := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }}
			return []nvml.EventData{{Device: other, EventType: nvml.EventTypeXidCriticalError, EventData: 79}}
		}, want: want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
			message: []string{"a GPU NVML did not identify: Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node"}}},
		{name: "another handle of GPU 5, found by UUID", events: func(f *fake) []nvml.EventData {
			uuid := f.uuid(5)
			other := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS }}
			return []nvml.EventData{{Device: other, EventType: nvml.EventTypeXidCriticalError, EventData: 48}}
		}, want: want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"GPU 5 ({uuid5}): Xid 48"}, not: []string{"did not identify"}}},
	}
	for _, tt := range tests {
		for _, when := range []string{"after the first run", "before the first run"} {
			t.Run(tt.name+", "+when, func(t *testing.T) {
				f := newFake(t)
				cfg := testConfig()
				if tt.cfg != nil {
					tt.cfg(&cfg)
				}
				if tt.setup != nil {
					tt.setup(f)
				}
				m := newMonitor(t, f, cfg, Env{})
				if when == "after the first run" {
					f.check(t, "first run", runProbe(m, NameFatal, runTimeout), fatalOK)
				} else {
					// The Xids come as soon as the GPUs are registered,
					// while the run still reads them.
					for i := range f.gpus {
						f.fail(i, "GetFieldValues", fault{delay: 20 * time.Millisecond})
					}
				}
				f.push(tt.events(f)...)
				if when == "before the first run" {
					runProbe(m, NameFatal, runTimeout)
					for i := range f.gpus {
						f.fail(i, "GetFieldValues", fault{})
					}
				}
				eventually(t, "the events handed out", func() bool { return f.queued() == 0 })
				got := f.waitFor(t, m, NameFatal, tt.want)
				if tt.reading != "" {
					if r := reading(got.Readings, "gpu3"); !strings.Contains(r, tt.reading) {
						t.Errorf("got reading gpu3 %q, want it to contain %q", r, tt.reading)
					}
				}
				f.check(t, NameDegraded, runProbe(m, NameDegraded, runTimeout), degradedOK)
			})
		}
	}
}

// xids returns Xid events of GPU i.
func xids(i int, xs ...uint64) func(f *fake) []nvml.EventData {
	return func(f *fake) []nvml.EventData {
		var evs []nvml.EventData
		for _, x := range xs {
			evs = append(evs, f.xid(i, x))
		}
		return evs
	}
}

// The same Xid on two GPUs before either is identified stays each GPU's
// own.
func TestSameXidOnTwoGPUsInTheFirstRun(t *testing.T) {
	f := newFake(t)
	for i := range f.gpus {
		f.fail(i, "GetFieldValues", fault{delay: 20 * time.Millisecond})
	}
	m := newMonitor(t, f, testConfig(), Env{})
	f.push(f.xid(3, 79), f.xid(5, 79), f.xid(5, 79))
	runProbe(m, NameFatal, runTimeout)
	for i := range f.gpus {
		f.fail(i, "GetFieldValues", fault{})
	}
	eventually(t, "the events handed out", func() bool { return f.queued() == 0 })
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{
		"GPU 3 ({uuid3}): Xid 79 (GPU has fallen off the bus) at " + stamp0,
		"GPU 5 ({uuid5}): Xid 79 (GPU has fallen off the bus) 2 times"}, not: []string{"did not identify"}})
}

// An Xid is filed under the GPU it was raised on, which stays true when
// the driver is reloaded with a GPU gone and NVML's indices shift.
func TestXidStaysWithItsGPUWhenIndicesShift(t *testing.T) {
	f := newFake(t)
	open := func() (nvml.Interface, error) { return f.open() }
	m := newMonitor(t, f, testConfig(), Env{Lib: f, Open: open})
	f.push(f.xid(3, 79))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"GPU 3 ({uuid3}): Xid 79"}})

	// The driver goes away; when it is back GPU 3 is gone and GPU 4 is
	// NVML's index 3.
	f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_DRIVER_NOT_LOADED})
	f.check(t, "driver gone", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonDriverUnavailable})
	f.failLib("DeviceGetCount", fault{})
	f.see(0, 1, 2, 4, 5, 6, 7)
	f.clk.Step(5 * time.Second)
	got := runProbe(m, NameFatal, runTimeout)
	f.check(t, "GPU 3 gone", got, want{status: probes.StatusProblem, reason: ReasonGPULost,
		message: []string{"GPU {uuid3} (last seen as index 3", "Xid 79 (GPU has fallen off the bus)", "the GPU at PCI {pci3}, seen before, is gone from NVML;"},
		not:     []string{"GPU 3 ({uuid4})", "({uuid4}): Xid", "GPU 4 ({uuid5})"}})
	if r := reading(got.Readings, "gpu3"); !strings.HasPrefix(r, f.uuid(4)) || strings.Contains(r, "xid") {
		t.Errorf("got reading gpu3 %q, want GPU 4's UUID and no Xid", r)
	}
}

// A storm of harmless Xids does not hide a critical one behind it.
func TestXidStorm(t *testing.T) {
	const storm = 100_000
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "first run", runProbe(m, NameFatal, runTimeout), fatalOK)
	evs := make([]nvml.EventData, 0, storm+1)
	for range storm {
		evs = append(evs, f.xid(0, 13))
	}
	evs = append(evs, f.xid(0, 79))
	start := time.Now()
	f.push(evs...)
	xid79 := want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"GPU 0 ({uuid0}): Xid 79"}}
	var got probes.Result
	for {
		got = runProbe(m, NameFatal, runTimeout)
		if len(f.mismatches(got, xid79)) == 0 || time.Since(start) > 5*time.Second {
			break
		}
		time.Sleep(25 * time.Millisecond) // runs take CPU from the drain
	}
	took := time.Since(start)
	f.check(t, fmt.Sprintf("%d Xid 13 then one 79, %v later", storm, took.Round(time.Millisecond)), got, xid79)
	t.Logf("Xid 79 behind %d Xid 13 reported after %v", storm, took)
	if r, want := reading(got.Readings, "gpu0"), fmt.Sprintf("other xid 13 x%d", storm); !strings.Contains(r, want) {
		t.Errorf("got reading gpu0 %q, want it to contain %q", r, want)
	}
}

// BenchmarkXidStorm measures draining a storm of 100,000 Xid events.
func BenchmarkXidStorm(b *testing.B) {
	const storm = 100_000
	f := newFake(b)
	m := newMonitor(b, f, testConfig(), Env{})
	if got := runProbe(m, NameFatal, runTimeout); got.Status != probes.StatusOK {
		b.Fatalf("first run: %s %q", got.Status, got.Message)
	}
	evs := make([]nvml.EventData, 0, storm+1)
	for range storm {
		evs = append(evs, f.xid(0, 13))
	}
	evs = append(evs, f.xid(0, 48))
	fatal48 := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		if rec := m.gpus[0].rec; rec != nil && len(rec.Xids) > 0 {
			return rec.Xids[0].Count
		}
		return 0
	}
	b.ResetTimer()
	for n := 1; b.Loop(); n++ {
		f.push(evs...)
		for fatal48() < n {
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(storm+1), "ns/event")
}
