package gpu

// Attack tests: an operator's worst day, thrown at the GPU probe. Each test
// states what the README's GPU section promises and checks it.

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/selftaint/selftaint/probes"
)

var (
	attackXid79 = want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 3 ({uuid3}): Xid 79 (GPU has fallen off the bus)"}}
	attackUnknown = want{status: probes.StatusUnknown, reason: ReasonReadError}
)

// workerBusy reports whether GPU i's worker has a call in flight.
func workerBusy(m *Monitor, i int) bool { return m.gpuWorker(i).stuck() != nil }

// ---------------------------------------------------------------- hangs

// A hang that ends: the GPU is Unknown while hung and OK after, with no
// new workers and no goroutine growth over many hang/recover cycles.
func TestAttackHangEndsCleanly(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	runtime.GC()
	before := runtime.NumGoroutine()
	calls := []string{"GetUUID", "GetFieldValues", "GetTotalEccErrors", "GetNvLinkState", "GetViolationStatus"}
	for cycle := range 40 {
		i, call := cycle%8, calls[cycle%len(calls)]
		gate := make(chan struct{})
		f.fail(i, call, fault{gate: gate})
		// The degraded probe judges every signal, so its run (the one that
		// waits for the hang) is never OK; later runs find the worker busy.
		for run := range 3 {
			name := NameDegraded
			if run%2 == 1 {
				name = NameFatal
			}
			got := runProbe(m, name, 300*time.Millisecond)
			if got.Status == probes.StatusOK {
				t.Fatalf("cycle %d (GPU %d hung in %s), run %d: %s got OK %q", cycle, i, call, run, name, got.Message)
			}
		}
		close(gate)
		f.fail(i, call, fault{})
		eventually(t, "the worker free", func() bool { return !workerBusy(m, i) })
		f.check(t, fmt.Sprintf("cycle %d: hang over", cycle), runProbe(m, NameFatal, runTimeout), fatalOK)
		f.check(t, fmt.Sprintf("cycle %d: hang over", cycle), runProbe(m, NameDegraded, runTimeout), degradedOK)
	}
	m.mu.Lock()
	n := len(m.gpus)
	m.mu.Unlock()
	if n != 8 {
		t.Errorf("got %d GPU workers, want 8", n)
	}
	goroutinesAtMost(t, "after 40 hangs that ended", before+2)
}

// A failure the probe reports stays while GPUs, the count or the event
// wait hang: the condition must stay True (README: a read failure is never
// a recovery; Unknown would lift the taint).
func TestAttackHangWhileTrue(t *testing.T) {
	for _, tt := range []struct {
		name string
		hang func(f *fake)
	}{
		{"the GPU hung", func(f *fake) { f.fail(3, allCalls, hang) }},
		{"another GPU hung", func(f *fake) { f.fail(0, allCalls, hang) }},
		{"everything hung", func(f *fake) { f.hangAll() }},
		{"DeviceGetCount hung", func(f *fake) { f.failLib("DeviceGetCount", hang) }},
		{"EventSetWait hung", func(f *fake) { f.failLib("EventSetWait", hang) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
			f.set(5, func(g *simGPU) { g.remapPending = true })
			f.push(f.xid(3, 79))
			f.waitFor(t, m, NameFatal, attackXid79)
			tt.hang(f)
			for run := range 3 {
				f.check(t, fmt.Sprintf("run %d", run), runProbe(m, NameFatal, time.Second), attackXid79)
				f.check(t, fmt.Sprintf("run %d", run), runProbe(m, NameDegraded, time.Second), want{status: probes.StatusProblem, reason: ReasonRowRemapPending})
			}
		})
	}
}

// An Xid raised on a GPU whose calls hang is still seen: the watcher does
// not depend on the GPU's worker.
func TestAttackXidOnHungGPU(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	f.fail(3, allCalls, hang)
	runProbe(m, NameFatal, 500*time.Millisecond)
	f.push(f.xid(3, 79))
	eventually(t, "the event handed out", func() bool { return f.queued() == 0 })
	f.check(t, "Xid on the hung GPU", runProbe(m, NameFatal, 500*time.Millisecond), attackXid79)
}

// A GPU lost from NVML (GPULost) must stay lost while NVML cannot count
// the GPUs: a count that fails or hangs is no recovery.
func TestAttackLostGPUStaysLostWhenCountFails(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault fault
	}{
		{"count fails", errUnknown},
		{"count hangs", hang},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			open := func() (nvml.Interface, error) { return f.open() }
			m := newMonitor(t, f, testConfig(), Env{Lib: f, Open: open, GPUsOnPCI: f.pciList})
			f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
			// The driver reloads without GPU 3 (it stays on the PCI bus).
			f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_DRIVER_NOT_LOADED})
			runProbe(m, NameFatal, runTimeout)
			f.failLib("DeviceGetCount", fault{})
			f.see(0, 1, 2, 4, 5, 6, 7)
			f.clk.Step(5 * time.Second)
			lost := want{status: probes.StatusProblem, reason: ReasonGPULost,
				message: []string{"the GPU at PCI {pci3} is on the PCI bus but NVML does not see it"}}
			f.check(t, "GPU 3 gone", runProbe(m, NameFatal, runTimeout), lost)

			f.failLib("DeviceGetCount", tt.fault)
			for run := range 2 {
				got := runProbe(m, NameFatal, time.Second)
				f.check(t, fmt.Sprintf("%s, run %d", tt.name, run), got, want{status: probes.StatusProblem, reason: ReasonGPULost})
			}
		})
	}
}

// A DeviceGetCount hang that ends leaks nothing: the event set the late
// job creates is used or freed.
func TestAttackCountHangEndsNoEventSetLeak(t *testing.T) {
	f := newFake(t)
	gate := make(chan struct{})
	f.failLib("DeviceGetCount", fault{gate: gate})
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "count hung", runProbe(m, NameFatal, 300*time.Millisecond), attackUnknown)
	close(gate)
	f.failLib("DeviceGetCount", fault{})
	eventually(t, "the NVML worker free", func() bool { return m.lw.stuck() == nil })
	f.waitFor(t, m, NameFatal, fatalOK)
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if made, freed := f.sets(); made != freed {
		t.Errorf("got %d event sets made, %d freed: the set created by the count that hung is never freed", made, freed)
	}
}

// The Xid event wait hangs, then returns: Unknown while hung (never OK),
// then OK, and Xids queued meanwhile are seen.
func TestAttackEventWaitHangEnds(t *testing.T) {
	f := newFake(t)
	cfg := testConfig()
	m := newMonitor(t, f, cfg, Env{})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	gate := make(chan struct{})
	f.failLib("EventSetWait", fault{gate: gate})
	time.Sleep(cfg.EventWait + 2*time.Second + 200*time.Millisecond)
	f.check(t, "wait hung", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusUnknown, reason: ReasonReadError,
		message: []string{"nvmlEventSetWait has not returned"}})
	f.push(f.xid(3, 79))
	f.failLib("EventSetWait", fault{})
	close(gate)
	f.waitFor(t, m, NameFatal, attackXid79)
}

// ---------------------------------------------------------------- errors

// Errors on each call of one GPU: GPU_IS_LOST is GPULost, any other error
// is never OK for the probe that judges the signal.
func TestAttackErrorsOnCalls(t *testing.T) {
	fatalCalls := []string{"GetUUID", "GetFieldValues", "GetTotalEccErrors", "GetRemappedRows", "GetNvLinkState", "GetNvLinkErrorCounter"}
	degradedCalls := []string{"GetRetiredPagesPendingStatus", "GetCurrPcieLinkWidth", "GetMaxPcieLinkGeneration", "GetPcieReplayCounter", "GetEccMode",
		"ValidateInforom", "GetCurrentClocksEventReasons", "GetViolationStatus"}
	for _, call := range append(append([]string{}, fatalCalls...), degradedCalls...) {
		for _, ret := range []nvml.Return{nvml.ERROR_GPU_IS_LOST, nvml.ERROR_UNKNOWN, nvml.ERROR_RESET_REQUIRED} {
			t.Run(call+"/"+ret.String(), func(t *testing.T) {
				f := newFake(t)
				m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
				f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
				f.fail(2, call, fault{ret: ret})
				fatal, degraded := runBoth(m)
				switch ret {
				case nvml.ERROR_GPU_IS_LOST:
					f.check(t, NameFatal, fatal, want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{"GPU 2 ({uuid2})"}})
				case nvml.ERROR_RESET_REQUIRED:
					f.check(t, NameFatal, fatal, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"GPU 2 ({uuid2})"}})
				case nvml.ERROR_UNKNOWN:
					if call == "GetUUID" {
						return // the UUID is no health signal: the GPU reads through its handle
					}
					fallthrough
				default:
					isFatal := false
					for _, c := range fatalCalls {
						isFatal = isFatal || c == call
					}
					if isFatal && fatal.Status == probes.StatusOK {
						t.Errorf("fatal: got OK %q with %s failing", fatal.Message, call)
					}
					if !isFatal && degraded.Status == probes.StatusOK {
						t.Errorf("degraded: got OK %q with %s failing", degraded.Message, call)
					}
				}
			})
		}
	}
}

// NVML's calls say the driver is gone (not loaded, or a version the
// library does not match) while the count still answers: README says
// GPUDriverUnavailable, and Env.Open says NVML is reopened "after Lib's
// calls say the driver went away".
func TestAttackDriverGoneOnGPUCalls(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIB_RM_VERSION_MISMATCH, nvml.ERROR_UNINITIALIZED, nvml.ERROR_DRIVER_NOT_LOADED} {
		t.Run(ret.String(), func(t *testing.T) {
			f := newFake(t)
			var opens atomic.Int32
			open := func() (nvml.Interface, error) { opens.Add(1); return f.open() }
			m := newMonitor(t, f, testConfig(), Env{Lib: f, Open: open, GPUsOnPCI: f.pciList})
			f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
			for i := range f.gpus {
				f.fail(i, allCalls, fault{ret: ret})
			}
			f.check(t, "every GPU call fails", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonDriverUnavailable,
				message: []string{"the NVIDIA driver is unavailable on a node with 8 NVIDIA GPU(s)", ret.String()},
				not:     []string{"GPU 3 ("}}) // the driver's error is told once, not per GPU
			f.clk.Step(time.Minute)
			runProbe(m, NameFatal, runTimeout)
			if opens.Load() == 0 {
				t.Errorf("NVML was never reopened although every GPU call says %s", ret)
			}
		})
	}
}

// DeviceGetHandleByIndex fails for one index: that GPU is Unknown (or
// lost), never OK, and the others' problems are still reported.
func TestAttackHandleFailsForOneIndex(t *testing.T) {
	for _, tt := range []struct {
		ret  nvml.Return
		want want
	}{
		{nvml.ERROR_UNKNOWN, want{status: probes.StatusProblem, reason: ReasonUncorrectableECC,
			message: []string{"GPU 6 ({uuid6}): 1 volatile uncorrectable", "getting the handle of GPU 5: ERROR_UNKNOWN"}}},
		{nvml.ERROR_GPU_IS_LOST, want{status: probes.StatusProblem, reason: ReasonGPULost,
			message: []string{"GPU 5: is lost", "GPU 6 ({uuid6}): 1 volatile uncorrectable"}}},
	} {
		for _, pci := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, PCI baseline %v", tt.ret, pci), func(t *testing.T) {
				f := newFake(t)
				env := Env{}
				if pci {
					env.GPUsOnPCI = f.pciList
				}
				f.fail(5, "DeviceGetHandleByIndex", fault{ret: tt.ret})
				f.set(6, func(g *simGPU) { g.ecc = 1 })
				m := newMonitor(t, f, testConfig(), env)
				for run := range 2 {
					f.check(t, fmt.Sprintf("run %d", run), runProbe(m, NameFatal, runTimeout), tt.want)
				}
				if got := runProbe(m, NameDegraded, runTimeout); got.Status == probes.StatusOK {
					t.Errorf("degraded: got OK %q with GPU 5 unreadable", got.Message)
				}
			})
		}
	}
}

// NOT_SUPPORTED on every optional signal: OK, naming them not available,
// never claiming one was checked.
func TestAttackNotSupportedEverywhere(t *testing.T) {
	optional := []string{"GetFieldValues", "GetTotalEccErrors", "GetRemappedRows", "GetGpuFabricInfo", "GetNvLinkState",
		"GetRetiredPagesPendingStatus", "GetCurrPcieLinkWidth", "GetEccMode", "ValidateInforom",
		"GetCurrentClocksEventReasons", "GetCurrentClocksThrottleReasons", "GetViolationStatus"}
	t.Run("signals", func(t *testing.T) {
		f := newFake(t)
		for i := range f.gpus {
			for _, c := range optional {
				f.fail(i, c, fault{ret: nvml.ERROR_NOT_SUPPORTED})
			}
		}
		m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
		fatal, degraded := runBoth(m)
		f.check(t, NameFatal, fatal, want{status: probes.StatusOK, reason: ReasonGPUsHealthy,
			message: []string{"8 GPUs healthy; checked: Xid events; not available: recovery action (not supported), uncorrectable ECC errors (not supported), row remapping (not supported), NVLink (not supported)"}})
		f.check(t, NameDegraded, degraded, want{status: probes.StatusOK, reason: ReasonNoSignals,
			message: []string{"8 GPUs present; the driver offers none of the signals, so nothing says whether they are degraded",
				"not available: row remapping (not supported)", "InfoROM (not supported)", "power violation (not supported)"},
			not: []string{"checked: row", "checked: retired", "checked: PCIe"}})
		t.Logf("fatal: %s", fatal.Message)
		t.Logf("degraded: %s", degraded.Message)
	})
	t.Run("signals and Xid events", func(t *testing.T) {
		f := newFake(t)
		for i := range f.gpus {
			for _, c := range append(optional, "GetSupportedEventTypes") {
				f.fail(i, c, fault{ret: nvml.ERROR_NOT_SUPPORTED})
			}
		}
		m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
		fatal := runProbe(m, NameFatal, runTimeout)
		t.Logf("fatal: %s %s %q", fatal.Status, fatal.Reason, fatal.Message)
		if fatal.Status == probes.StatusProblem {
			t.Errorf("got a failure %s %q with nothing supported", fatal.Reason, fatal.Message)
		}
		if strings.Contains(fatal.Message, "checked: ;") || strings.HasSuffix(fatal.Message, "checked: ") {
			t.Errorf("got %s %q: it says healthy with an empty 'checked:' list (nothing was checked)", fatal.Status, fatal.Message)
		}
		f.check(t, "nothing checked", fatal, want{status: probes.StatusOK, reason: ReasonNoSignals,
			message: []string{"8 GPUs present; the driver offers none of the signals, so nothing says whether they are healthy", "Xid events (Xid events not supported)"}})
	})
}

// ---------------------------------------------------------------- Xid storms

// 100,000 ignorable Xids over all GPUs, then a critical one: seen within a
// probe interval (5s).
func TestAttackXidStorm63Then79(t *testing.T) {
	const storm = 100_000
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	evs := make([]nvml.EventData, 0, storm+1)
	for k := range storm {
		evs = append(evs, f.xid(k%8, []uint64{13, 63, 43, 92, 31}[k%5]))
	}
	evs = append(evs, f.xid(3, 79))
	start := time.Now()
	f.push(evs...)
	got := f.waitFor(t, m, NameFatal, attackXid79)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Xid 79 behind %d harmless Xids seen after %v, want within a probe interval (5s)", storm, took)
	}
	if got.Reason != ReasonGPURebootRequired {
		t.Errorf("got %s", got.Reason)
	}
}

// A storm of critical Xids: counts are exact, the worst is kept and gives
// the reason, the record stays bounded.
func TestAttackCriticalXidStorm(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	evs := []nvml.EventData{f.xid(3, 79)}
	for k := range 50_000 {
		evs = append(evs, f.xid(3, 48))
		evs = append(evs, f.xid(3, uint64(1000+k))) // unknown: reset-gpu each
	}
	f.push(evs...)
	eventually(t, "the storm drained", func() bool { return f.queued() == 0 })
	got := f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"Xid 79 (GPU has fallen off the bus)"}})
	m.mu.Lock()
	n := len(m.gpus[3].rec.Xids)
	m.mu.Unlock()
	if n > maxXidRecords {
		t.Errorf("got %d Xid records on GPU 3, want at most %d", n, maxXidRecords)
	}
	if len(m.State()) > 32<<10 {
		t.Errorf("state is %d bytes, above the 32 KiB the agent writes", len(m.State()))
	}
	_ = got
}

// Config overrides: 63 ignored (as it is anyway), 999 a reboot.
func TestAttackXidOverrides(t *testing.T) {
	f := newFake(t)
	cfg := testConfig()
	cfg.Xids = map[uint64]Action{63: ActionIgnore, 999: ActionReboot}
	m := newMonitor(t, f, cfg, Env{})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	f.push(f.xid(2, 63), f.xid(2, 63))
	eventually(t, "drained", func() bool { return f.queued() == 0 })
	f.check(t, "63 ignored", runProbe(m, NameFatal, runTimeout), fatalOK)
	f.push(f.xid(2, 999))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 2 ({uuid2}): Xid 999 (not in NVIDIA's Xid catalog) at " + stamp0 + "; reboot the node"}})
}

// Xids from a device handle the Monitor does not know. Harmless ones must
// cost nothing: a storm of them must not delay a critical Xid behind it.
func TestAttackUnknownDeviceXidStorm(t *testing.T) {
	const storm = 20_000
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	var lookups atomic.Int64
	other := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) {
		lookups.Add(1)
		time.Sleep(200 * time.Microsecond) // a busy driver
		return "GPU-not-one-of-ours", nvml.SUCCESS
	}}
	evs := make([]nvml.EventData, 0, storm+1)
	for range storm {
		evs = append(evs, nvml.EventData{Device: other, EventType: nvml.EventTypeXidCriticalError, EventData: 13})
	}
	evs = append(evs, f.xid(3, 79))
	start := time.Now()
	f.push(evs...)
	deadline := time.Now().Add(5 * time.Second)
	var got probes.Result
	for time.Now().Before(deadline) {
		if got = runProbe(m, NameFatal, runTimeout); len(f.mismatches(got, attackXid79)) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("after %v: %d UUID lookups for %d harmless Xids of an unknown device; %d events still queued", time.Since(start).Round(time.Millisecond), lookups.Load(), storm, f.queued())
	f.check(t, fmt.Sprintf("Xid 79 behind %d harmless Xids of an unknown device, after 5s", storm), got, attackXid79)
}

// Critical Xids from an unknown device whose GetUUID hangs are still
// filed (stray) and fail the node.
func TestAttackUnknownDeviceHungUUID(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	other := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { <-f.released; return "", nvml.ERROR_UNKNOWN }}
	for range 3 {
		f.push(nvml.EventData{Device: other, EventType: nvml.EventTypeXidCriticalError, EventData: 48})
	}
	f.push(f.xid(3, 79))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"a GPU NVML did not identify: Xid 48 (Double Bit ECC Error) 3 times", "GPU 3 ({uuid3}): Xid 79"}})
}

// ---------------------------------------------------------------- restarts

// The driver reloads and NVML enumerates the GPUs in the reverse order:
// each failure follows its GPU's UUID, none is pinned on another GPU.
func TestAttackReenumeratedReverse(t *testing.T) {
	f := newFake(t)
	open := func() (nvml.Interface, error) { return f.open() }
	m := newMonitor(t, f, testConfig(), Env{Lib: f, Open: open, GPUsOnPCI: f.pciList, BootID: bootID("boot-1")})
	f.set(5, func(g *simGPU) { g.ecc = 2 })
	f.set(6, func(g *simGPU) { g.remapPending = true })
	f.push(f.xid(3, 79), f.xid(1, 94))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 3 ({uuid3}): Xid 79", "GPU 1 ({uuid1}): Xid 94", "GPU 5 ({uuid5}): 2 volatile"}})

	f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_DRIVER_NOT_LOADED})
	runProbe(m, NameFatal, runTimeout)
	f.failLib("DeviceGetCount", fault{})
	f.see(7, 6, 5, 4, 3, 2, 1, 0)
	// GPU 5 is read slowly after the reload, so index 2 is identified late.
	f.fail(5, "GetUUID", fault{delay: 100 * time.Millisecond})
	f.clk.Step(5 * time.Second)
	// Physical GPU p is now NVML index 7-p.
	moved := want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{
		"GPU 4 ({uuid3}): Xid 79", "GPU 6 ({uuid1}): Xid 94", "GPU 2 ({uuid5}): 2 volatile uncorrectable"},
		not: []string{"GPU 3 (", "GPU 1 (", "GPU 5 (", "not seen since"}}
	for run := range 3 {
		got := f.waitFor(t, m, NameFatal, moved)
		if run == 0 {
			t.Logf("%s", got.Message)
		}
		f.check(t, "degraded", runProbe(m, NameDegraded, runTimeout), want{status: probes.StatusProblem, reason: ReasonRowRemapPending,
			message: []string{"GPU 1 ({uuid6}): row remapping pending"}, not: []string{"GPU 6 ("}})
	}
	// And back again, the state in between written and restored.
	state := m.State()
	f2 := f.restarted(t)
	m2 := newMonitor(t, f2, testConfig(), Env{BootID: bootID("boot-1"), GPUsOnPCI: f2.pciList})
	if err := m2.Restore(state); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	f2.check(t, "restored, original order", runProbe(m2, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 3 ({uuid3}): Xid 79", "GPU 1 ({uuid1}): Xid 94"}, not: []string{"not seen since", "GPU 4 (", "GPU 6 ("}})
}

// UUIDs swap between two indices while the new index of the failed GPU is
// unreadable: the failure stays with its UUID (as a kept record), never on
// the GPU now at its old index.
func TestAttackReenumeratedSwapUnreadable(t *testing.T) {
	f := newFake(t)
	open := func() (nvml.Interface, error) { return f.open() }
	m := newMonitor(t, f, testConfig(), Env{Lib: f, Open: open, GPUsOnPCI: f.pciList})
	f.push(f.xid(3, 79))
	f.waitFor(t, m, NameFatal, attackXid79)
	f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_DRIVER_NOT_LOADED})
	runProbe(m, NameFatal, runTimeout)
	f.failLib("DeviceGetCount", fault{})
	f.see(0, 1, 2, 4, 3, 5, 6, 7)
	f.fail(3, "GetUUID", errUnknown) // physical GPU 3, now index 4
	f.clk.Step(5 * time.Second)
	got := runProbe(m, NameFatal, runTimeout)
	f.check(t, "swapped, GPU 3 unreadable", got, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"Xid 79"}, not: []string{"({uuid4}): Xid 79"}})
	f.fail(3, "GetUUID", fault{})
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 4 ({uuid3}): Xid 79"}, not: []string{"({uuid4}): Xid", "not seen since"}})
}

// ---------------------------------------------------------------- concurrency

// The fatal and degraded probes, CountGPUs, State and Clear all at once
// while GPUs flap, hang and raise Xids: no race, no deadlock, and the
// held failure is never OK.
func TestAttackConcurrent(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList, BootID: bootID("boot-1")})
	f.push(f.xid(3, 79))
	f.waitFor(t, m, NameFatal, attackXid79)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var okSeen atomic.Int32
	loop := func(fn func()) {
		wg.Go(func() {
			for ctx.Err() == nil {
				fn()
			}
		})
	}
	for range 3 {
		loop(func() {
			if got := runProbe(m, NameFatal, 500*time.Millisecond); got.Status == probes.StatusOK {
				okSeen.Add(1)
			}
		})
		loop(func() { runProbe(m, NameDegraded, 500*time.Millisecond) })
		loop(func() {
			c, cc := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cc()
			_, _, _ = m.CountGPUs(c)
			f.clk.Step(31 * time.Second) // make the next count read again
		})
	}
	loop(func() { _ = m.State(); time.Sleep(time.Millisecond) })
	loop(func() { _, _ = m.Clear([]string{f.uuid(5)}, f.clk.Now()); time.Sleep(time.Millisecond) })
	loop(func() {
		f.push(f.xid(5, 13), f.xid(2, 63))
		gate := make(chan struct{})
		f.fail(6, "GetEccMode", fault{gate: gate})
		time.Sleep(20 * time.Millisecond)
		close(gate)
		f.fail(6, "GetEccMode", fault{})
	})
	wg.Wait()
	if n := okSeen.Load(); n > 0 {
		t.Errorf("the fatal probe said OK %d times while Xid 79 was held", n)
	}
	f.check(t, "after", runProbe(m, NameFatal, runTimeout), attackXid79)
}

// One signal's call saying the driver is gone, on every GPU, while the
// GPUs' other signals read: the driver answered, so it is not
// GPUDriverUnavailable (that signal is Unknown) and NVML is not reopened.
func TestAttackDriverGoneOnOneSignalOnly(t *testing.T) {
	f := newFake(t)
	var opens atomic.Int32
	open := func() (nvml.Interface, error) { opens.Add(1); return f.open() }
	m := newMonitor(t, f, testConfig(), Env{Lib: f, Open: open, GPUsOnPCI: f.pciList})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	for i := range f.gpus {
		f.fail(i, "GetTotalEccErrors", fault{ret: nvml.ERROR_UNINITIALIZED})
	}
	f.check(t, "one signal's call fails", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusUnknown, reason: ReasonReadError,
		message: []string{"ERROR_UNINITIALIZED"}})
	f.clk.Step(time.Minute)
	runProbe(m, NameFatal, runTimeout)
	if n := opens.Load(); n != 0 {
		t.Errorf("NVML reopened %d times although every GPU's other signals read", n)
	}
}

// valueDevice is a device handle that cannot be a map key (a value type
// with a slice), as a binding other than go-nvml's pointers might have.
type valueDevice struct {
	nvml.Device
	tags  []string
	calls *atomic.Int64
}

func (d valueDevice) GetUUID() (string, nvml.Return) {
	d.calls.Add(1)
	return "GPU-not-one-of-ours", nvml.SUCCESS
}

// Xids from handles that cannot be cached: a harmless one costs no UUID
// lookup, a fatal one is looked up and filed; a cacheable handle is looked
// up once however many Xids it raises.
func TestUnknownDeviceUUIDLookups(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)

	var valueCalls atomic.Int64
	val := valueDevice{tags: []string{"x"}, calls: &valueCalls}
	for range 100 {
		f.push(nvml.EventData{Device: val, EventType: nvml.EventTypeXidCriticalError, EventData: 13})
	}
	eventually(t, "the harmless Xids drained", func() bool { return f.queued() == 0 })
	if n := valueCalls.Load(); n != 0 {
		t.Errorf("%d UUID lookups for 100 harmless Xids of an uncacheable handle, want 0", n)
	}
	f.push(nvml.EventData{Device: val, EventType: nvml.EventTypeXidCriticalError, EventData: 48})
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
		message: []string{"a GPU NVML did not identify: Xid 48"}})
	if n := valueCalls.Load(); n != 1 {
		t.Errorf("%d UUID lookups for one fatal Xid of an uncacheable handle, want 1", n)
	}

	var ptrCalls atomic.Int64
	ptr := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { ptrCalls.Add(1); return "GPU-not-one-of-ours", nvml.SUCCESS }}
	for range 50 {
		f.push(nvml.EventData{Device: ptr, EventType: nvml.EventTypeXidCriticalError, EventData: 48})
	}
	eventually(t, "the fatal Xids drained", func() bool { return f.queued() == 0 })
	if n := ptrCalls.Load(); n != 1 {
		t.Errorf("%d UUID lookups for 50 Xids of one handle, want 1", n)
	}
}
