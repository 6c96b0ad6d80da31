package gpu

// Driver reloads, dead handles and broken event sets under the rig: a job
// of an NVML session that ended must not write into the next one, nor make
// calls after Close; a GPU is tracked by who it is, not by its NVML index.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/selftaint/selftaint/probes"
)

// reload reloads the driver under m: NVML's count says the driver is gone
// (one run sees it), then the GPUs listed (physical numbers, in NVML index
// order) are what NVML will see, and the clock passes the Monitor's first
// backoff, so m's next run reopens NVML (a new session, new handles).
func (f *fake) reload(m *Monitor, visible ...int) {
	f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_DRIVER_NOT_LOADED})
	runProbe(m, NameFatal, runTimeout)
	f.failLib("DeviceGetCount", fault{})
	f.see(visible...)
	f.clk.Step(openBackoffMin)
}

// callCounts is a copy of the calls made, by name.
func (f *fake) callCounts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.calls)
}

// newCalls lists the calls in after that are not in before.
func newCalls(before, after map[string]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if n := after[k] - before[k]; n > 0 && !strings.Contains(k, ":") {
			out = append(out, fmt.Sprintf("%s x%d", k, n))
		}
	}
	return strings.Join(out, ", ")
}

// The driver is reloaded while GPU 3's worker is inside a hung call: the
// job belongs to the session that ended, so when the call returns, its
// late identification does not put the dead handle back into GPU 3's slot.
// GPU 3 is then identified with a handle of the new session and checked
// normally, not stuck Unknown ("reading the UUID of GPU 3:
// ERROR_UNINITIALIZED") until the agent restarts.
func TestReloadDuringHungCall(t *testing.T) {
	for _, call := range []string{"GetUUID", "GetPciInfo", "GetFieldValues"} {
		t.Run(call, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{Open: f.open, GPUsOnPCI: f.pciList})
			f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
			gate := make(chan struct{})
			f.fail(3, call, fault{gate: gate})
			f.check(t, "GPU 3 hung", runProbe(m, NameFatal, 300*time.Millisecond), attackUnknown)
			f.reload(m, 0, 1, 2, 3, 4, 5, 6, 7)
			f.check(t, "reopened, GPU 3 still hung", runProbe(m, NameFatal, 300*time.Millisecond), want{status: probes.StatusUnknown, reason: ReasonReadError,
				message: []string{"GPU 3: NVML call"}})
			if n := f.called("Init"); n != 1+1 {
				t.Fatalf("got %d nvmlInit calls, want 2 (the start and the reload)", n)
			}
			f.fail(3, call, fault{})
			close(gate)
			eventually(t, "GPU 3's worker free", func() bool { return !workerBusy(m, 3) })
			f.waitFor(t, m, NameFatal, fatalOK)
			f.waitFor(t, m, NameDegraded, degradedOK)
		})
	}
}

// Once Close has returned, no NVML call is made, whatever was in flight:
// a GPU's hung call, a hung count, a hung event wait that then hands out
// an Xid of a device the Monitor does not know (whose UUID it would ask).
func TestNoCallAfterClose(t *testing.T) {
	for _, tt := range []struct {
		name string
		hang func(t *testing.T, f *fake, gate chan struct{})
	}{
		{"a GPU's call", func(t *testing.T, f *fake, gate chan struct{}) { f.fail(3, "GetPciInfo", fault{gate: gate}) }},
		{"the count", func(t *testing.T, f *fake, gate chan struct{}) { f.failLib("DeviceGetCount", fault{gate: gate}) }},
		{"the event wait", func(t *testing.T, f *fake, gate chan struct{}) {
			waits := f.called("EventSetWait")
			f.failLib("EventSetWait", fault{gate: gate})
			// The next wait takes the gate; the event comes after it.
			eventually(t, "a wait at the gate", func() bool { return f.called("EventSetWait") > waits })
			stranger := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) {
				ret := f.libCall("GetUUID (unknown device)", func() nvml.Return { return nvml.SUCCESS })
				return "GPU-stranger", ret
			}}
			f.push(nvml.EventData{Device: stranger, EventType: nvml.EventTypeXidCriticalError, EventData: 79})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{Open: f.open, GPUsOnPCI: f.pciList})
			f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
			gate := make(chan struct{})
			tt.hang(t, f, gate)
			runProbe(m, NameFatal, 300*time.Millisecond)
			m.mu.Lock()
			w := m.w
			m.mu.Unlock()
			_ = m.Close() // may say the event wait has not returned
			before, n := f.callCounts(), f.totalCalls()
			close(gate)
			eventually(t, "the workers free", func() bool { return !workerBusy(m, 3) && m.lw.stuck() == nil })
			select { // all the watcher does with what its wait returns is done
			case <-w.exited:
			case <-time.After(10 * time.Second):
				t.Fatalf("the watcher's loop did not end")
			}
			if got := f.totalCalls(); got != n {
				t.Errorf("%d NVML calls after Close returned: %s", got-n, newCalls(before, f.callCounts()))
			}
		})
	}
}

// A GPU in the middle drops out of NVML (the driver reloaded without it,
// the GPUs after it shift down an index) and comes back: that is a reset
// of that GPU, which clears its reset-gpu Xid (README: "it was lost or
// missing and came back"); the GPU that sat at the last index all along
// keeps its own reset-gpu Xid, and every Xid follows its UUID meanwhile.
func TestMissingGPUInTheMiddleComesBack(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{Open: f.open, GPUsOnPCI: f.pciList})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK) // NVML opened: the handles Xids come from
	f.push(f.xid(2, 94), f.xid(7, 94), f.xid(5, 79))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 2 ({uuid2}): Xid 94", "GPU 7 ({uuid7}): Xid 94", "GPU 5 ({uuid5}): Xid 79"}})

	f.clk.Step(time.Minute)
	f.reload(m, 0, 1, 3, 4, 5, 6, 7)
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{
		"the GPU at PCI {pci2} is on the PCI bus but NVML does not see it",
		"GPU {uuid2} (last seen as index 2", "Xid 94",
		"GPU 6 ({uuid7}): Xid 94", "GPU 4 ({uuid5}): Xid 79"},
		not: []string{"{pci7}", "GPU 7 ("}})

	f.clk.Step(time.Minute)
	f.reload(m, 0, 1, 2, 3, 4, 5, 6, 7)
	got := f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 7 ({uuid7}): Xid 94", "GPU 5 ({uuid5}): Xid 79"},
		not:     []string{"{uuid2}", "GPULost", "not seen since", "PCI"}})
	if r := reading(got.Readings, "gpu2"); strings.Contains(r, "fatal xid") {
		t.Errorf("got reading gpu2 %q, want GPU 2's Xid 94 cleared by its return", r)
	}
	// The state written now says the same.
	state := string(m.State())
	if strings.Contains(state, f.uuid(2)) && strings.Contains(state, `"xid":94,"count":1,"first":"2026-03-01T12:00:00Z"}],"index":2`) {
		t.Errorf("state keeps GPU 2's Xid 94: %s", state)
	}
}

// A reset re-created GPU 2's device: its cached handle is dead (its calls
// say the GPU is lost, or that the handle is not valid). The Monitor gets
// a new handle by index at its next run, without a driver reopen (none can
// happen here: the caller owns NVML); a GPU that was lost and reads again
// was reset, which clears its reset-gpu Xid.
func TestDeadHandleReacquired(t *testing.T) {
	for _, tt := range []struct {
		ret   nvml.Return
		after want
	}{
		{nvml.ERROR_GPU_IS_LOST, fatalOK},
		{nvml.ERROR_INVALID_ARGUMENT, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
			message: []string{"GPU 2 ({uuid2}): Xid 94"}, not: []string{"INVALID_ARGUMENT"}}},
	} {
		t.Run(tt.ret.String(), func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
			f.push(f.xid(2, 94))
			f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"GPU 2 ({uuid2}): Xid 94"}})
			handles := f.called("DeviceGetHandleByIndex")
			f.resetHandle(2, tt.ret)
			f.clk.Step(time.Minute)
			runProbe(m, NameFatal, runTimeout) // the dead handle's run
			f.clk.Step(time.Minute)
			f.waitFor(t, m, NameFatal, tt.after)
			f.waitFor(t, m, NameDegraded, degradedOK)
			if n := f.called("DeviceGetHandleByIndex") - handles; n < 1 {
				t.Errorf("no new handle asked for")
			}
			// Xids of the GPU's new handle are its own.
			f.push(f.xid(2, 79))
			f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
				message: []string{"GPU 2 ({uuid2}): ", "Xid 79 (GPU has fallen off the bus)"}, not: []string{"did not identify"}})
		})
	}
}

// The event set breaks (its waits fail): it is replaced by a new one,
// every GPU registered on it, and an Xid raised after is seen (one queued
// in the broken set: TestBrokenEventSetReadOutBeforeReplaced). While
// every set's waits fail, each run may replace the set, but events are
// never trusted meanwhile: a new set proves itself first.
func TestBrokenEventSetRecreated(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)

	f.failLib("EventSetWait", errUnknown)
	unknown := want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"waiting for Xid events: ERROR_UNKNOWN"}}
	f.waitFor(t, m, NameFatal, unknown) // the first failed wait
	madeBefore, _ := f.sets()
	const runs = 30
	for run := range runs {
		if got := runProbe(m, NameFatal, runTimeout); got.Status != probes.StatusUnknown || !strings.Contains(got.Message, "waiting for Xid events: ERROR_UNKNOWN") {
			t.Fatalf("run %d with every wait failing: got %s/%s %q", run, got.Status, got.Reason, got.Message)
		}
		time.Sleep(testConfig().EventWait) // a failed wait between runs
	}
	if made, _ := f.sets(); made-madeBefore > runs {
		t.Errorf("%d event sets made in %d runs, want at most one a run", made-madeBefore, runs)
	}
	f.failLib("EventSetWait", fault{})
	f.waitFor(t, m, NameFatal, fatalOK)

	f.breakSet()
	madeBefore, _ = f.sets()
	f.waitFor(t, m, NameFatal, fatalOK) // on a new set, each GPU read again
	if made, _ := f.sets(); made == madeBefore {
		t.Errorf("no new event set made after the set broke")
	}
	f.push(f.xid(3, 79))
	f.waitFor(t, m, NameFatal, attackXid79)
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if made, freed := f.sets(); made != freed {
		t.Errorf("got %d event sets made, %d freed", made, freed)
	}
}

// NVML counts no GPU on a node whose PCI bus has 8: the fatal probe says
// GPULost, and the degraded probe does not say OK ("no NVIDIA GPUs
// found") beside it: there is nothing it could judge.
func TestNoGPUCountedProbesAgree(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  func(*Config)
		env  func(*fake, *Env)
	}{
		{"PCI baseline", nil, func(f *fake, e *Env) { e.GPUsOnPCI = f.pciList }},
		{"expectedGPUs", func(c *Config) { c.ExpectedGPUs = 8 }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.see()
			cfg := testConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			var env Env
			if tt.env != nil {
				tt.env(f, &env)
			}
			m := newMonitor(t, f, cfg, env)
			fatal, degraded := runBoth(m)
			f.check(t, NameFatal, fatal, want{status: probes.StatusProblem, reason: ReasonGPULost})
			f.check(t, NameDegraded, degraded, want{status: probes.StatusUnknown, reason: ReasonReadError,
				message: []string{"NVML sees no GPU, the node has 8"}, not: []string{"no NVIDIA GPUs found"}})
		})
	}
	t.Run("no GPU expected", func(t *testing.T) {
		f := newFake(t)
		f.see()
		m := newMonitor(t, f, testConfig(), Env{})
		fatal, degraded := runBoth(m)
		f.check(t, NameFatal, fatal, want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"no NVIDIA GPUs found"}})
		f.check(t, NameDegraded, degraded, want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"no NVIDIA GPUs found"}})
	})
}

// A read job whose session ends while it runs makes no NVML call after
// that, wherever it ends: every call goes through liveDevice (a call the
// wrapper lacks would reach the rig here).
func TestEndedSessionMakesNoCall(t *testing.T) {
	f := newFake(t)
	f.setAll(func(g *simGPU) { g.fabricState = nvml.GPU_FABRIC_STATE_COMPLETED })
	set, _ := f.EventSetCreate()
	newSpec := func(sess *session, handle nvml.Device) readSpec {
		return readSpec{index: 2, handle: handle, sess: sess, has: lookupSymbols(f), lib: f, events: set, cfg: testConfig(), fabricH: f.fabricHealth}
	}
	for _, handle := range []nvml.Device{f.Devices[2], nil} {
		var steps []string
		live := &readJob{r: gpuRead{sigs: map[string]sigRead{}}}
		spec := newSpec(newSession(f), handle)
		spec.run(live, func(s string) { steps = append(steps, s) })
		if n := len(live.r.sigs); n != len(spec.readers()) || !errorsNone(live.r.sigs) || live.r.uuid == "" || !live.r.regTried {
			t.Fatalf("live session: %d signals read (%v), UUID %q, registered %v; want every signal, the UUID, a registration", n, live.r.sigs, live.r.uuid, live.r.regTried)
		}
		for k, at := range steps {
			sess := newSession(f)
			spec := newSpec(sess, handle)
			var before map[string]int
			n, i := -1, 0
			spec.run(&readJob{r: gpuRead{sigs: map[string]sigRead{}}}, func(string) {
				if i == k {
					sess.end()
					before, n = f.callCounts(), f.totalCalls()
				}
				i++
			})
			if got := f.totalCalls(); n >= 0 && got != n {
				t.Errorf("handle cached %v, session ended at step %d (%s): %d NVML calls after: %s", handle != nil, k, at, got-n, newCalls(before, f.callCounts()))
			}
		}
	}
}

// errorsNone says every signal was read.
func errorsNone(sigs map[string]sigRead) bool {
	for _, s := range sigs {
		if !s.ok() {
			return false
		}
	}
	return true
}
