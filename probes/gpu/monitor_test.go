package gpu

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/selftaint/selftaint/probes"
)

func TestHealthy(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
	fatal, degraded := runBoth(m)
	f.check(t, NameFatal, fatal, fatalOK)
	f.check(t, NameDegraded, degraded, degradedOK)
	if got, want := reading(fatal.Readings, "gpus"), "8"; got != want {
		t.Errorf("got reading gpus %q, want %q", got, want)
	}
	if got, want := reading(fatal.Readings, "gpu2"), f.uuid(2)+": Xid events watched, recovery action 0, uncorrectable ECC errors 0, row remapping pending no failed no, NVLink 12/12 up, fabric n/a"; got != want {
		t.Errorf("got reading gpu2 %q, want %q", got, want)
	}
	if got, want := reading(degraded.Readings, "gpu2"), f.uuid(2)+": row remapping pending no failed no, retired pages pending no, NVLink 12/12 up, fabric n/a, PCIe link gen4 x16 (max gen4 x16), ECC mode enabled yes, InfoROM valid yes, clock event reasons no slowdown, thermal violation ok, power violation ok"; got != want {
		t.Errorf("got degraded reading gpu2 %q, want %q", got, want)
	}
}

func TestProbeNames(t *testing.T) {
	m := newMonitor(t, newFake(t), testConfig(), Env{})
	var got []string
	for _, p := range m.Probes() {
		got = append(got, p.Name())
	}
	if want := []string{NameFatal, NameDegraded}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got probe names %v, want %v", got, want)
	}
	if _, ok := m.FatalProbe().(probes.Stateful); !ok {
		t.Errorf("the fatal probe is not a probes.Stateful")
	}
}

// NVML that hangs from the start is never OK.
func TestEverythingHungFromTheStart(t *testing.T) {
	f := newFake(t)
	f.hangAll()
	m := newMonitor(t, f, testConfig(), Env{})
	for run := range 2 {
		fatal, degraded := runProbe(m, NameFatal, time.Second), runProbe(m, NameDegraded, time.Second)
		for _, got := range []probes.Result{fatal, degraded} {
			f.check(t, fmt.Sprintf("run %d", run), got, want{status: probes.StatusUnknown, reason: ReasonReadError,
				message: []string{"counting GPUs: NVML: NVML call nvmlDeviceGetCount has not returned"}})
		}
	}
	// With the PCI baseline, the GPUs the node has are expected.
	f2 := newFake(t)
	f2.hangAll()
	m2 := newMonitor(t, f2, testConfig(), Env{GPUsOnPCI: f2.pciList})
	if got := runProbe(m2, NameFatal, time.Second); got.Status == probes.StatusOK {
		t.Errorf("with a PCI baseline: got %s %q, want not OK", got.Status, got.Message)
	}
}

// A problem found stays while the GPU, or NVML as a whole, hangs: a hang is
// never a recovery.
func TestHangKeepsProblem(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	xid79 := want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 3 ({uuid3}): Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node"}}
	f.push(f.xid(3, 79))
	f.waitFor(t, m, NameFatal, xid79)

	f.fail(3, allCalls, hang)
	hung := xid79
	hung.message = append(hung.message, "GPU 3 ({uuid3}): GPU 3: NVML call nvmlDeviceGetUUID has not returned")
	for run := range 3 {
		got := runProbe(m, NameFatal, time.Second)
		f.check(t, fmt.Sprintf("GPU 3 hung, run %d", run), got, hung)
		if got, want := reading(got.Readings, "gpu3"), f.uuid(3)+": unreadable"; got != want {
			t.Errorf("GPU 3 hung, run %d: got reading gpu3 %q, want %q", run, got, want)
		}
		got = runProbe(m, NameDegraded, time.Second)
		f.check(t, fmt.Sprintf("GPU 3 hung, run %d", run), got, want{status: probes.StatusUnknown, reason: ReasonReadError,
			message: []string{"GPUs could not be read completely", "GPU 3 ({uuid3}): GPU 3: NVML call nvmlDeviceGetUUID has not returned"}})
	}

	f.hangAll()
	all := xid79
	all.message = append(all.message, "counting GPUs: NVML: NVML call nvmlDeviceGetCount has not returned")
	for run := range 3 {
		f.check(t, fmt.Sprintf("every call hung, run %d", run), runProbe(m, NameFatal, time.Second), all)
		if got := runProbe(m, NameDegraded, time.Second); got.Status != probes.StatusUnknown {
			t.Errorf("every call hung, run %d: got degraded %s %q, want Unknown", run, got.Status, got.Message)
		}
	}
}

// A signal's problem is kept, and says so, while the signal cannot be
// read; only a successful read of a healthy GPU clears it.
func TestSignalProblemKeptWhileUnreadable(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault fault
		note  string // what the message says about the read
	}{
		{"error", errUnknown, "GPU 2 ({uuid2}): reading uncorrectable ECC errors: ERROR_UNKNOWN"},
		{"hang", hang, "GPU 2: NVML call nvmlDeviceGetTotalEccErrors has not returned"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{})
			f.set(2, func(g *simGPU) { g.ecc = 3 })
			ecc := want{status: probes.StatusProblem, reason: ReasonUncorrectableECC, message: []string{"GPU 2 ({uuid2}): 3 volatile uncorrectable ECC errors, above 0"},
				not: []string{"kept while"}}
			f.check(t, "ECC errors", runProbe(m, NameFatal, time.Second), ecc)

			f.clk.Step(time.Minute)
			f.set(2, func(g *simGPU) { g.ecc = 0 })
			f.fail(2, "GetTotalEccErrors", tt.fault)
			kept := want{status: probes.StatusProblem, reason: ReasonUncorrectableECC, message: []string{
				"GPU 2 ({uuid2}): 3 volatile uncorrectable ECC errors, above 0 (found at " + stamp0 + "; kept while the uncorrectable ECC errors cannot be read)",
				tt.note}}
			for run := range 2 {
				f.check(t, fmt.Sprintf("ECC unreadable, run %d", run), runProbe(m, NameFatal, time.Second), kept)
			}
			if tt.fault.hang {
				return // the worker stays busy until the test ends
			}
			f.fail(2, "GetTotalEccErrors", fault{})
			f.check(t, "ECC read again, healthy", runProbe(m, NameFatal, time.Second), fatalOK)
		})
	}
}

// A GPU that crawls delays nothing about the others: the run ends by its
// deadline with the other GPU's failure.
func TestSlowGPUHidesNothing(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.fail(0, allCalls, fault{delay: time.Second})
	f.set(5, func(g *simGPU) { g.remapFailed, g.remapUnc = true, 8 })
	start := time.Now()
	got := runProbe(m, NameFatal, 3*time.Second)
	took := time.Since(start)
	if took >= 3*time.Second {
		t.Errorf("the run took %v, want it within its 3s deadline", took)
	}
	f.check(t, "GPU 0 slow", got, want{status: probes.StatusProblem, reason: ReasonRowRemapFailure, message: []string{
		"GPU 5 ({uuid5}): row remapping failed (8 rows remapped for uncorrectable errors); the GPU has no spare rows left",
		"GPU 0", "has not returned after"}})
	if got := reading(got.Readings, "gpu0"); !strings.HasSuffix(got, ": unreadable") {
		t.Errorf("got reading gpu0 %q, want it unreadable", got)
	}
	t.Logf("run with GPU 0 answering each call after 1s took %v", took)
}

// Reads that all fail are never OK.
func TestAllCallsFailingIsNeverOK(t *testing.T) {
	type env struct {
		pci  bool // Env.GPUsOnPCI lists the 8 GPUs
		open func(f *fake) func() (nvml.Interface, error)
	}
	tests := []struct {
		name     string
		env      env
		setup    func(f *fake)
		fatal    want
		degraded want
	}{
		{
			name:     "counting fails",
			setup:    func(f *fake) { f.failLib("DeviceGetCount", errUnknown) },
			fatal:    want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"counting GPUs: ERROR_UNKNOWN"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"counting GPUs: ERROR_UNKNOWN"}},
		},
		{
			name: "every device call fails",
			setup: func(f *fake) {
				for i := range f.gpus {
					f.fail(i, allCalls, errUnknown)
				}
			},
			fatal:    want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"8 of 8 GPUs could not be read completely", "GPU 0: reading uncorrectable ECC errors: ERROR_UNKNOWN", "GPU 7: reading NVLink: ERROR_UNKNOWN"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"8 of 8 GPUs could not be read completely", "GPU 0: reading PCIe link: ERROR_UNKNOWN"}},
		},
		{
			name: "every handle fails",
			setup: func(f *fake) {
				for i := range f.gpus {
					f.fail(i, "DeviceGetHandleByIndex", errUnknown)
				}
			},
			fatal:    want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"8 of 8 GPUs", "GPU 0: getting the handle of GPU 0: ERROR_UNKNOWN"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"8 of 8 GPUs", "GPU 7: getting the handle of GPU 7: ERROR_UNKNOWN"}},
		},
		{
			name:     "driver not loaded, GPUs on the bus",
			env:      env{pci: true},
			setup:    func(f *fake) { f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_DRIVER_NOT_LOADED}) },
			fatal:    want{status: probes.StatusProblem, reason: ReasonDriverUnavailable, message: []string{"the NVIDIA driver is unavailable on a node with 8 NVIDIA GPU(s)", "counting GPUs: ERROR_DRIVER_NOT_LOADED"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"ERROR_DRIVER_NOT_LOADED"}},
		},
		{
			name:     "driver of another version, GPUs on the bus",
			env:      env{pci: true},
			setup:    func(f *fake) { f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_LIB_RM_VERSION_MISMATCH}) },
			fatal:    want{status: probes.StatusProblem, reason: ReasonDriverUnavailable, message: []string{"counting GPUs: ERROR_LIB_RM_VERSION_MISMATCH"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"ERROR_LIB_RM_VERSION_MISMATCH"}},
		},
		{
			name: "NVML does not start, GPUs on the bus",
			env: env{pci: true, open: func(f *fake) func() (nvml.Interface, error) {
				return func() (nvml.Interface, error) {
					return nil, fmt.Errorf("nvmlInit: %w", nvml.ERROR_LIB_RM_VERSION_MISMATCH)
				}
			}},
			fatal:    want{status: probes.StatusProblem, reason: ReasonDriverUnavailable, message: []string{"NVML did not start: nvmlInit: ERROR_LIB_RM_VERSION_MISMATCH; retrying with backoff"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"NVML did not start"}},
		},
		{
			name:     "driver not loaded, no PCI baseline",
			setup:    func(f *fake) { f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_DRIVER_NOT_LOADED}) },
			fatal:    want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"counting GPUs: ERROR_DRIVER_NOT_LOADED"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"ERROR_DRIVER_NOT_LOADED"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			if tt.setup != nil {
				tt.setup(f)
			}
			var e Env
			if tt.env.pci {
				e.GPUsOnPCI = f.pciList
			}
			if tt.env.open != nil {
				e.Open = tt.env.open(f)
			}
			m := newMonitor(t, f, testConfig(), e)
			for run := range 2 {
				fatal, degraded := runBoth(m)
				f.check(t, fmt.Sprintf("run %d %s", run, NameFatal), fatal, tt.fatal)
				f.check(t, fmt.Sprintf("run %d %s", run, NameDegraded), degraded, tt.degraded)
			}
		})
	}
}

// A wait for Xid events that fails makes the Xid signal unknown: the fatal
// probe cannot say the GPUs are healthy. The degraded probe does not judge
// Xids.
func TestEventWaitFails(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_GPU_IS_LOST, nvml.ERROR_UNKNOWN, nvml.ERROR_UNINITIALIZED} {
		t.Run(ret.String(), func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{})
			f.failLib("EventSetWait", fault{ret: ret})
			note := "waiting for Xid events: " + ret.String()
			got := f.waitFor(t, m, NameFatal, want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{note}})
			if got, want := reading(got.Readings, "gpu0"), "Xid events unreadable"; !strings.Contains(got, want) {
				t.Errorf("got reading gpu0 %q, want it to contain %q", got, want)
			}
			f.check(t, NameDegraded, runProbe(m, NameDegraded, runTimeout), degradedOK)

			// A problem is still a problem, and the wait's failure named.
			f.set(1, func(g *simGPU) { g.ecc = 1 })
			f.check(t, "ECC error", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonUncorrectableECC,
				message: []string{"GPU 1 ({uuid1}): 1 volatile uncorrectable ECC errors", note}})

			// Waits that work again: healthy.
			f.set(1, func(g *simGPU) { g.ecc = 0 })
			f.failLib("EventSetWait", fault{})
			f.waitFor(t, m, NameFatal, fatalOK)
		})
	}
}

// One GPU that cannot be read makes the probe Unknown, never "8 GPUs
// healthy".
func TestOneGPUUnreadable(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(f *fake)
		fatal    want
		degraded want
	}{
		{
			name:     "ECC unreadable",
			setup:    func(f *fake) { f.fail(6, "GetTotalEccErrors", errUnknown) },
			fatal:    want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"no problem found, but 1 of 8 GPUs could not be read completely: GPU 6 ({uuid6}): reading uncorrectable ECC errors: ERROR_UNKNOWN"}, not: []string{"healthy"}},
			degraded: degradedOK,
		},
		{
			name:     "no handle",
			setup:    func(f *fake) { f.fail(4, "DeviceGetHandleByIndex", errUnknown) },
			fatal:    want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"1 of 8 GPUs could not be read completely: GPU 4: getting the handle of GPU 4: ERROR_UNKNOWN"}, not: []string{"healthy"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"GPU 4: getting the handle of GPU 4: ERROR_UNKNOWN"}},
		},
		{
			name:     "lost",
			setup:    func(f *fake) { f.fail(4, "GetRemappedRows", errLost) },
			fatal:    want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{"GPU 4 ({uuid4}): is lost (fell off the bus): reading row remapping: ERROR_GPU_IS_LOST"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"GPU 4 ({uuid4}): reading row remapping: ERROR_GPU_IS_LOST"}},
		},
		{
			name:     "needs a reset",
			setup:    func(f *fake) { f.fail(0, "GetUUID", fault{ret: nvml.ERROR_RESET_REQUIRED}) },
			fatal:    want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"GPU 0: requires a reset: reading the UUID of GPU 0: ERROR_RESET_REQUIRED"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"GPU 0: reading the UUID of GPU 0: ERROR_RESET_REQUIRED"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			tt.setup(f)
			m := newMonitor(t, f, testConfig(), Env{})
			fatal, degraded := runBoth(m)
			f.check(t, NameFatal, fatal, tt.fatal)
			f.check(t, NameDegraded, degraded, tt.degraded)
		})
	}
}

// goroutinesAtMost waits until at most n goroutines run, and reports how
// many there are if that never happens.
func goroutinesAtMost(t *testing.T, what string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := runtime.NumGoroutine()
		if got <= n {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%s: got %d goroutines, want at most %d:\n%s", what, got, n, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A hung driver leaks nothing: the GPU's worker stays busy in its one call
// and later runs do not queue more behind it.
func TestNoGoroutineLeakUnderHang(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.fail(1, allCalls, hang)
	runProbe(m, NameFatal, time.Second) // waits for GPU 1 until its deadline
	runtime.GC()
	before := runtime.NumGoroutine()
	for run := range 50 {
		name := NameFatal
		if run%2 == 1 {
			name = NameDegraded
		}
		got := runProbe(m, name, time.Second) // GPU 1's worker is busy: no wait
		f.check(t, fmt.Sprintf("run %d", run), got, want{status: probes.StatusUnknown, reason: ReasonReadError,
			message: []string{"GPUs could not be read completely", "GPU 1: GPU 1: NVML call nvmlDeviceGetUUID has not returned"}})
	}
	goroutinesAtMost(t, "after 50 runs with GPU 1 hung", before+2)
	if got, want := f.called("1:GetUUID"), 1; got != want {
		t.Errorf("got %d GetUUID calls on GPU 1, want %d: runs queued calls behind the hung one", got, want)
	}
}

// The node's GPUs come from its PCI bus or config: a GPU NVML does not see
// is named.
func TestExpectedGPUs(t *testing.T) {
	t.Run("PCI baseline", func(t *testing.T) {
		f := newFake(t)
		f.see(0, 1, 2, 4, 5, 6, 7)
		m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
		fatal, degraded := runBoth(m)
		f.check(t, NameFatal, fatal, want{status: probes.StatusProblem, reason: ReasonGPULost,
			message: []string{"the GPU at PCI {pci3} is on the PCI bus but NVML does not see it"}, not: []string{"{pci2}", "{pci4}"}})
		f.check(t, NameDegraded, degraded, want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"7 GPUs not degraded"}})
		if got, want := fmt.Sprint(fatal.Readings[:2]), "[{gpus 7} {gpus_expected 8}]"; got != want {
			t.Errorf("got readings %s, want %s", got, want)
		}
	})
	t.Run("config", func(t *testing.T) {
		f := newFake(t)
		f.see(0, 1, 2, 3, 4, 5, 6)
		cfg := testConfig()
		cfg.ExpectedGPUs = 8
		m := newMonitor(t, f, cfg, Env{})
		f.check(t, NameFatal, runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPULost,
			message: []string{"NVML sees 7 GPUs, the node has 8"}})
	})
	t.Run("NVML counts fewer than it saw", func(t *testing.T) {
		f := newFake(t)
		m := newMonitor(t, f, testConfig(), Env{})
		f.check(t, "8 GPUs", runProbe(m, NameFatal, runTimeout), fatalOK)
		f.see(0, 1, 2, 3, 4, 5, 6)
		f.check(t, "7 GPUs", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPULost,
			message: []string{"the GPU at PCI {pci7}, seen before, is gone from NVML"}, not: []string{"GPU 7:", "no longer counts"}})
	})
	t.Run("a GPU that appears is polled and its Xids are its own", func(t *testing.T) {
		f := newFake(t)
		f.see(0, 1, 2, 3, 4, 5, 6)
		m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
		f.check(t, "7 GPUs", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPULost,
			message: []string{"the GPU at PCI {pci7} is on the PCI bus but NVML does not see it"}})
		f.see(0, 1, 2, 3, 4, 5, 6, 7)
		// The Xid comes as soon as GPU 7 is registered for events, while
		// the run still reads it.
		f.fail(7, "GetFieldValues", fault{delay: 50 * time.Millisecond})
		f.push(f.xid(7, 79))
		got := f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
			message: []string{"GPU 7 ({uuid7}): Xid 79 (GPU has fallen off the bus)"}, not: []string{"did not identify", "PCI"}})
		if got, want := reading(got.Readings, "gpu7"), "fatal xid 79 x1"; !strings.Contains(got, want) {
			t.Errorf("got reading gpu7 %q, want it to contain %q", got, want)
		}
	})
}

// NVML that does not start is retried with backoff, and not before.
func TestNVMLStartRetried(t *testing.T) {
	f := newFake(t)
	var mu sync.Mutex
	opens := 0
	open := func() (nvml.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		opens++
		if opens <= 2 {
			return nil, fmt.Errorf("nvmlInit: %w", nvml.ERROR_DRIVER_NOT_LOADED)
		}
		return f.open()
	}
	m := newMonitor(t, f, testConfig(), Env{Open: open, GPUsOnPCI: f.pciList})
	unavailable := want{status: probes.StatusProblem, reason: ReasonDriverUnavailable,
		message: []string{"the NVIDIA driver is unavailable on a node with 8 NVIDIA GPU(s)", "NVML did not start: nvmlInit: ERROR_DRIVER_NOT_LOADED"}}
	steps := []struct {
		step  time.Duration // clock step before the run
		opens int           // Open calls after the run
		want  want
	}{
		{0, 1, unavailable},
		{0, 1, unavailable},
		{4 * time.Second, 1, unavailable},
		{time.Second, 2, unavailable}, // t0+5s: the first backoff is over
		{9 * time.Second, 2, unavailable},
		{time.Second, 3, fatalOK}, // t0+15s: the second (10s) is over
		{time.Minute, 3, fatalOK},
	}
	for i, s := range steps {
		f.clk.Step(s.step)
		got := runProbe(m, NameFatal, runTimeout)
		f.check(t, fmt.Sprintf("step %d", i), got, s.want)
		mu.Lock()
		if opens != s.opens {
			t.Errorf("step %d: got %d Open calls, want %d", i, opens, s.opens)
		}
		mu.Unlock()
		if got, want := m.Lib() != nil, s.want.status == probes.StatusOK; got != want {
			t.Errorf("step %d: got Lib() set %v, want %v", i, got, want)
		}
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if got, want := len(f.ShutdownCalls()), 1; got != want {
		t.Errorf("got %d Shutdown calls after Close, want %d (the Monitor opened NVML)", got, want)
	}
}

// A driver that goes away is reopened after the backoff.
func TestDriverGoneReopened(t *testing.T) {
	f := newFake(t)
	opens := 0
	open := func() (nvml.Interface, error) { opens++; return f.open() }
	m := newMonitor(t, f, testConfig(), Env{Lib: f, Open: open, GPUsOnPCI: f.pciList})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_DRIVER_NOT_LOADED})
	f.check(t, "driver gone", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonDriverUnavailable})
	f.failLib("DeviceGetCount", fault{})
	f.check(t, "before the backoff", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonDriverUnavailable})
	if opens != 0 {
		t.Errorf("got %d Open calls before the backoff, want 0", opens)
	}
	f.clk.Step(5 * time.Second)
	f.waitFor(t, m, NameFatal, fatalOK)
	if opens != 1 {
		t.Errorf("got %d Open calls after the backoff, want 1", opens)
	}
	if made, freed := f.sets(); made != 2 || freed != 1 {
		t.Errorf("got %d event sets made, %d freed; want 2 and 1 (the old library's set freed)", made, freed)
	}
}

func TestClose(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "before Close", runProbe(m, NameFatal, runTimeout), fatalOK)
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if made, freed := f.sets(); made != 1 || freed != 1 {
		t.Errorf("got %d event sets made, %d freed; want 1 and 1", made, freed)
	}
	goroutinesAtMost(t, "after Close", before)
	fatal, degraded := runBoth(m)
	for _, got := range []probes.Result{fatal, degraded} {
		f.check(t, "after Close", got, want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"the GPU monitor is closed"}})
	}
	if got := len(f.ShutdownCalls()); got != 0 {
		t.Errorf("got %d Shutdown calls, want none: the Monitor did not open NVML", got)
	}
}

// Close does not wait for ever on an event wait that hangs.
func TestCloseWithHungWait(t *testing.T) {
	f := newFake(t)
	cfg := testConfig()
	m := newMonitor(t, f, cfg, Env{})
	f.failLib("EventSetWait", hang)
	f.check(t, "before Close", runProbe(m, NameFatal, runTimeout), fatalOK)
	eventually(t, "the wait hangs", func() bool { return f.called("EventSetWait") >= 1 })
	time.Sleep(2 * cfg.EventWait) // the wait in flight, if any, times out and the next hangs
	start := time.Now()
	err := m.Close()
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "the Xid event wait has not returned") {
		t.Errorf("Close with a hung wait: got error %v, want one saying the wait has not returned", err)
	}
	if limit := cfg.EventWait + 2*time.Second + time.Second; took > limit {
		t.Errorf("Close took %v, want at most %v", took, limit)
	}
	if _, freed := f.sets(); freed != 0 {
		t.Errorf("got %d event sets freed, want none under a hung wait", freed)
	}
}

// Close while a run is under way: what the run starts after Close is
// stopped too.
func TestCloseDuringRun(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	gate := make(chan struct{})
	f.failLib("DeviceGetCount", fault{gate: gate})
	done := make(chan probes.Result)
	go func() { done <- runProbe(m, NameFatal, runTimeout) }()
	eventually(t, "the run counts GPUs", func() bool { return f.called("DeviceGetCount") == 1 })
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	close(gate)
	got := <-done
	if got.Status == probes.StatusOK {
		t.Errorf("run closed under it: got %s %q, want not OK", got.Status, got.Message)
	}
	if made, freed := f.sets(); made != freed {
		t.Errorf("got %d event sets made, %d freed; want all freed", made, freed)
	}
	goroutinesAtMost(t, "after a run closed under it", before)
}

// A driver without the event functions has no Xid signal: not available,
// never a read error.
func TestDriverLacksEvents(t *testing.T) {
	f := newFake(t)
	f.lacking(symRegisterEvents)
	m := newMonitor(t, f, testConfig(), Env{})
	fatal := runProbe(m, NameFatal, runTimeout)
	f.check(t, NameFatal, fatal, want{status: probes.StatusOK, reason: ReasonGPUsHealthy,
		message: []string{"8 GPUs healthy", "not available: Xid events (driver lacks NVML event functions)"}})
	if got := f.called("EventSetCreate"); got != 0 {
		t.Errorf("got %d EventSetCreate calls, want none", got)
	}
	if got := f.called("RegisterEvents"); got != 0 {
		t.Errorf("got %d RegisterEvents calls, want none", got)
	}
}

// Functions the driver lacks are never called, and the signal is not
// available.
func TestDriverLacksSymbols(t *testing.T) {
	tests := []struct {
		sym   string
		call  string
		probe string
		na    string
	}{
		{symTotalEccErrors, "GetTotalEccErrors", NameFatal, "uncorrectable ECC errors (driver lacks " + symTotalEccErrors + ")"},
		{symFieldValues, "GetFieldValues", NameFatal, "recovery action (driver lacks " + symFieldValues + ")"},
		{symNvLinkState, "GetNvLinkState", NameFatal, "NVLink (driver lacks " + symNvLinkState + ")"},
		{symRetiredPagesPending, "GetRetiredPagesPendingStatus", NameDegraded, "retired pages (driver lacks " + symRetiredPagesPending + ")"},
		{symValidateInforom, "ValidateInforom", NameDegraded, "InfoROM (driver lacks " + symValidateInforom + ")"},
		{symViolationStatus, "GetViolationStatus", NameDegraded, "thermal violation (driver lacks " + symViolationStatus + ")"},
	}
	for _, tt := range tests {
		t.Run(tt.sym, func(t *testing.T) {
			f := newFake(t)
			f.lacking(tt.sym)
			m := newMonitor(t, f, testConfig(), Env{})
			got := runProbe(m, tt.probe, runTimeout)
			if got.Status != probes.StatusOK || !strings.Contains(got.Message, "not available: ") || !strings.Contains(got.Message, tt.na) {
				t.Errorf("got %s %q, want OK with %q not available", got.Status, got.Message, tt.na)
			}
			if n := f.called(tt.call); n != 0 {
				t.Errorf("got %d %s calls, want none", n, tt.call)
			}
		})
	}
	t.Run("old clock reasons", func(t *testing.T) {
		f := newFake(t)
		f.lacking(symClocksEventReasons)
		f.set(4, func(g *simGPU) { g.clockReasons = nvml.ClocksThrottleReasonHwSlowdown })
		m := newMonitor(t, f, testConfig(), Env{})
		runProbe(m, NameDegraded, runTimeout)
		if got, old := f.called("GetCurrentClocksEventReasons"), f.called("GetCurrentClocksThrottleReasons"); got != 0 || old != 8 {
			t.Errorf("got %d event reason and %d throttle reason calls, want 0 and 8", got, old)
		}
	})
}

// Whether every GPU's read says the driver is gone, judged on the reads of
// the indices NVML counts only (this run's count, or while NVML cannot
// count, the last): a read skipped past the count (the zero gpuRead) is no
// GPU that answered.
func TestDriverGoneInCountedReads(t *testing.T) {
	gone := gpuRead{openErr: fmt.Errorf("reading the UUID: %w", nvml.ERROR_DRIVER_NOT_LOADED)}
	answered := gpuRead{sigs: map[string]sigRead{sigECC: {}}}
	noGPU := gpuRead{openErr: fmt.Errorf("getting the handle: %w", nvml.ERROR_INVALID_ARGUMENT)}
	for _, tt := range []struct {
		name string
		run  runInput
		gone bool
	}{
		{"every counted read gone, a skipped read past the count", runInput{counted: true, count: 2, reads: []gpuRead{gone, gone, {}}}, true},
		{"every read gone, NVML cannot count and no count is known", runInput{reads: []gpuRead{gone, gone}}, true},
		{"by the last count, index 2 had no GPU", runInput{counted: true, count: 2, reads: []gpuRead{gone, gone, noGPU}}, true},
		{"one counted GPU answered", runInput{counted: true, count: 2, reads: []gpuRead{gone, answered, {}}}, false},
		{"a counted GPU has no handle for another reason", runInput{counted: true, count: 3, reads: []gpuRead{gone, gone, noGPU}}, false},
		{"a counted GPU's read hung", runInput{counted: true, count: 2, reads: []gpuRead{gone, {hung: fmt.Errorf("GPU 1 hung in nvmlDeviceGetUUID")}}}, false},
		{"no GPU counted", runInput{counted: true, count: 0, reads: []gpuRead{{}}}, false},
		{"count above the GPUs known", runInput{counted: true, count: 3, reads: []gpuRead{gone, gone}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := driverGoneInReads(readsCounted(tt.run.reads, tt.run)) != nil; got != tt.gone {
				t.Errorf("driver gone = %v, want %v", got, tt.gone)
			}
		})
	}
}
