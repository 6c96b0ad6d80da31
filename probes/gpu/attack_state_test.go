package gpu

// Attack tests: an operator's worst day, thrown at the GPU probe. Each test
// states what the README's GPU section promises and checks it.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/selftaint/selftaint/probes"
)

// The state stays under the 32 KiB the agent writes even on the worst
// day: otherwise the state is not written and a restart forgets the
// failures. "Xids" is only a storm of distinct critical Xids (no MIG, no
// other failure): 16 per GPU is what maxXidRecords allows.
func TestAttackStateSizeOnWorstDay(t *testing.T) {
	longest := []uint64{172, 171, 166, 50, 49, 52, 26, 5, 54, 18, 4, 16, 62, 55, 1, 2}
	for _, tt := range []struct {
		name               string
		mig, signals, xids bool
	}{
		{"Xids", false, false, true},
		{"failing signals", false, true, false},
		{"Xids and failing signals", false, true, true},
		{"everything, MIG", true, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList, BootID: bootID("boot-1")})
			f.setAll(func(g *simGPU) { g.mig = tt.mig })
			if tt.signals {
				f.setAll(func(g *simGPU) {
					g.ecc, g.remapFailed, g.remapPending, g.retired, g.inforom = 7, true, true, true, nvml.ERROR_CORRUPTED_INFOROM
					g.recovery = recoveryDrainReset
					g.width = 8
					g.fabricState = nvml.GPU_FABRIC_STATE_COMPLETED
					g.fabricStatus = nvml.ERROR_UNKNOWN
				})
			}
			runBoth(m)
			if tt.signals {
				f.setAll(func(g *simGPU) {
					g.links = make([]bool, nvLinks)
					g.eccOn = false
				})
			}
			var evs []nvml.EventData
			if tt.xids {
				for i := range 8 {
					for _, x := range longest {
						ev := f.xid(i, x)
						if tt.mig {
							ev.GpuInstanceId, ev.ComputeInstanceId = 1000000000, 1000000000
						}
						evs = append(evs, ev)
					}
				}
				stray := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }}
				for _, x := range longest {
					evs = append(evs, nvml.EventData{Device: stray, EventType: nvml.EventTypeXidCriticalError, EventData: x})
				}
			}
			f.push(evs...)
			eventually(t, "the events drained", func() bool { return f.queued() == 0 })
			f.clk.Step(time.Minute)
			runBoth(m)
			n := len(m.State())
			t.Logf("state: %d bytes (limit %d)", n, 32<<10)
			if n > 32<<10 {
				t.Errorf("state is %d bytes, above the 32 KiB the agent writes: it is not written, and a restart forgets these failures", n)
			}
		})
	}
}

// heldState is a real state holding Xid 79 on GPU 3 and Xid 94 on GPU 2.
func heldState(t *testing.T) (*fake, []byte) {
	before := newFake(t)
	state := stateWith(t, before, "boot-1", want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"Xid 79", "Xid 94"}}, before.xid(3, 79), before.xid(2, 94))
	return before, state
}

// Every truncation and many corruptions of a real state: Restore errors
// (or takes it), never panics, and a failed Restore drops nothing held.
func TestAttackRestoreTruncatedAndCorrupt(t *testing.T) {
	before, state := heldState(t)
	f := before.restarted(t)
	m := newMonitor(t, f, testConfig(), Env{BootID: bootID("boot-1")})
	if err := m.Restore(state); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	held := want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"GPU 3 ({uuid3}): Xid 79", "GPU 2 ({uuid2}): Xid 94"}}
	f.check(t, "restored", runProbe(m, NameFatal, runTimeout), held)
	// Each corruption is tried on a fresh Monitor; one that fails is also
	// tried on m, which must then keep what it holds.
	try := func(what string, data []byte, mustFail bool) {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Restore(%s) panicked: %v", what, p)
			}
		}()
		scratch := newMonitor(t, newFake(t), testConfig(), Env{})
		err := scratch.Restore(data)
		if mustFail && err == nil {
			t.Errorf("Restore(%s %q): no error", what, data)
		}
		if err != nil {
			if err2 := m.Restore(data); err2 == nil {
				t.Errorf("Restore(%s) failed on one Monitor, not on another", what)
			}
		}
	}
	for n := 1; n < len(state); n++ {
		try(fmt.Sprintf("prefix %d", n), state[:n], true)
	}
	for k := 0; k < len(state); k += 3 {
		c := append([]byte(nil), state...)
		c[k] ^= 0x5a
		try(fmt.Sprintf("byte %d flipped", k), c, false)
	}
	for _, hostile := range []string{
		strings.Repeat("[", 100000), `{"v":1,"gpus":` + strings.Repeat("[", 5000) + `}`, "null", `"x"`, `{"v":1e400}`, `{"v":1}{"v":1}`,
		"\xff\xfe\x00", `{"v":1,"gpus":[{"uuid":"GPU-x","index":0,"findings":{"x":[{"probe":"gpu","reason":"R","text":"t","since":"not a time"}]}}]}`,
	} {
		try("hostile", []byte(hostile), true)
	}
	// Whatever the failed Restores were, what is held is still held.
	f.check(t, "after failed Restores", runProbe(m, NameFatal, runTimeout), held)
}

// A state that passes decoding must not make the probe report nonsense:
// a "fatal" Xid record with a harmless action, or a finding with no
// reason, gives a failure with an empty condition reason.
func TestAttackRestoreHostileValues(t *testing.T) {
	const times = `"first":"2026-03-01T12:00:00Z","last":"2026-03-01T12:00:00Z"`
	for _, tt := range []struct{ name, state string }{
		{"fatal Xid record with action ignore", `{"v":1,"gpus":[{"uuid":"GPU-gone","index":9,"xids":[{"xid":13,"action":"ignore","count":1,` + times + `}]}]}`},
		{"stray Xid with action restart-app", `{"v":1,"stray":[{"xid":13,"action":"restart-app","count":1,` + times + `}]}`},
		{"finding without reason", `{"v":1,"gpus":[{"uuid":"GPU-gone","index":9,"findings":{"bogus":[{"probe":"gpu","reason":"","text":"x","since":"2026-03-01T12:00:00Z"}]}}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{})
			err := m.Restore([]byte(tt.state))
			got := runProbe(m, NameFatal, runTimeout)
			if err == nil && got.Status == probes.StatusProblem && got.Reason == "" {
				t.Errorf("Restore took %s; then the probe says %s with an empty reason: %q", tt.state, got.Status, got.Message)
			}
		})
	}
}

// A corrupt PCI address in the state's expected GPUs is taken, and the
// node is GPULost for a GPU that cannot exist until it reboots: Clear
// cannot name it.
func TestAttackRestoreMalformedExpectedPCI(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
	err := m.Restore([]byte(`{"v":1,"expected":["0000:0m:00.0"]}`))
	got := runProbe(m, NameFatal, runTimeout)
	_, clearErr := m.Clear([]string{"0000:0m:00.0"}, f.clk.Now().Add(time.Hour))
	if err == nil && got.Status != probes.StatusOK {
		t.Errorf("Restore took a malformed PCI address; the probe says %s/%s %q; Clear of it: %v", got.Status, got.Reason, got.Message, clearErr)
	}
}

// Two records with one UUID in a state: the first's Xid must not vanish.
func TestAttackRestoreDuplicateUUID(t *testing.T) {
	const times = `"first":"2026-03-01T12:00:00Z","last":"2026-03-01T12:00:00Z"`
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	u := f.uuid(3)
	state := `{"v":1,"gpus":[{"uuid":"` + u + `","index":3,"xids":[{"xid":79,"action":"reboot","count":1,` + times + `}]},{"uuid":"` + u + `","index":3,"eccEnabled":true}]}`
	err := m.Restore([]byte(state))
	got := runProbe(m, NameFatal, runTimeout)
	if err == nil && got.Status != probes.StatusProblem {
		t.Errorf("Restore of two records of %s took the state without error and dropped the Xid 79 of the first: got %s %q", u, got.Status, got.Message)
	}
}

// After a reboot (boot ID changed) every kept Xid is cleared once its GPU
// reads healthy; a GPU that does not come back is still reported when it
// is on the PCI bus.
func TestAttackRestoreAfterReboot(t *testing.T) {
	before, state := heldState(t)
	f := before.restarted(t)
	f.see(0, 1, 2, 4, 5, 6, 7) // GPU 3 on the bus, not in NVML
	m := newMonitor(t, f, testConfig(), Env{BootID: bootID("boot-2"), GPUsOnPCI: f.pciList})
	if err := m.Restore(state); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	got := runProbe(m, NameFatal, runTimeout)
	f.check(t, "after a reboot without GPU 3", got, want{status: probes.StatusProblem, reason: ReasonGPULost,
		message: []string{"the GPU at PCI {pci3} is on the PCI bus but NVML does not see it"}, not: []string{"Xid 94"}})
	t.Logf("%s", got.Message)
}

// Clear with unknown UUIDs is an error naming them, and clears nothing.
func TestAttackClearUnknown(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.push(f.xid(3, 79))
	f.waitFor(t, m, NameFatal, attackXid79)
	for _, targets := range [][]string{{"GPU-nope"}, {ClearAll, "GPU-nope"}, {f.uuid(3), "0000:ff:00.0"}, {"GPU-" + strings.Repeat("x", 1<<16)}} {
		if _, err := m.Clear(targets, f.clk.Now()); err == nil {
			t.Errorf("Clear(%.60v): no error", targets)
		}
		f.check(t, "after a rejected Clear", runProbe(m, NameFatal, runTimeout), attackXid79)
	}
}

// Clear of a GPU's record kept while it is not seen drops only what was
// learnt before the request (README: "only what the probe learned before
// requestedAt is cleared, so a failure seen after the request stands").
func TestAttackClearKeptRecordHonoursRequestedAt(t *testing.T) {
	f := newFake(t)
	open := func() (nvml.Interface, error) { return f.open() }
	m := newMonitor(t, f, testConfig(), Env{Lib: f, Open: open})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	requested := f.clk.Now()
	f.clk.Step(time.Minute)
	f.push(f.xid(3, 79)) // after the request
	f.waitFor(t, m, NameFatal, attackXid79)
	// The driver reloads without GPU 3: its record is kept, not seen.
	f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_DRIVER_NOT_LOADED})
	runProbe(m, NameFatal, runTimeout)
	f.failLib("DeviceGetCount", fault{})
	f.see(0, 1, 2, 4, 5, 6, 7)
	f.clk.Step(5 * time.Second)
	f.check(t, "GPU 3 gone", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPULost,
		message: []string{"GPU {uuid3} (last seen as index 3", "Xid 79"}})
	got, err := m.Clear([]string{f.uuid(3)}, requested)
	t.Logf("Clear: %q, %v", got, err)
	f.check(t, "after a Clear requested before the Xid", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPULost,
		message: []string{"GPU {uuid3} (last seen as index 3", "Xid 79"}})
}

// ---------------------------------------------------------------- re-enumeration

// A GPU lost from NVML, then the agent restarts and NVML cannot count the
// GPUs (fails or hangs) on the new agent's first runs: the lost GPU stays
// GPULost from the kept last count, until a count says otherwise.
func TestAttackLostGPUKeptAcrossRestartWhileCountFails(t *testing.T) {
	gate := make(chan struct{}) // the hung count answers when closed
	for _, tt := range []struct {
		name  string
		fault fault
	}{
		{"count fails", errUnknown},
		{"count hangs", fault{gate: gate}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := newFake(t)
			before.see(0, 1, 2, 4, 5, 6, 7)
			m1 := newMonitor(t, before, testConfig(), Env{GPUsOnPCI: before.pciList, BootID: bootID("boot-1")})
			lost := want{status: probes.StatusProblem, reason: ReasonGPULost,
				message: []string{"the GPU at PCI {pci3} is on the PCI bus but NVML does not see it"}}
			before.check(t, "GPU 3 gone", runProbe(m1, NameFatal, runTimeout), lost)
			state := m1.State()
			if !strings.Contains(string(state), `"short":`) {
				t.Fatalf("the state keeps no short count: %s", state)
			}

			f := before.restarted(t)
			f.see(0, 1, 2, 4, 5, 6, 7)
			f.failLib("DeviceGetCount", tt.fault)
			m2 := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList, BootID: bootID("boot-1")})
			if err := m2.Restore(state); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			kept := want{status: probes.StatusProblem, reason: ReasonGPULost,
				message: []string{"the GPU at PCI {pci3} is on the PCI bus but NVML does not see it (at its last count; kept while NVML cannot count the GPUs)"}}
			for run := range 2 {
				f.check(t, fmt.Sprintf("after the restart, run %d", run), runProbe(m2, NameFatal, time.Second), kept)
			}
			// The count works again and sees all 8: the GPU is back.
			f.see(0, 1, 2, 3, 4, 5, 6, 7)
			f.failLib("DeviceGetCount", fault{})
			if tt.fault.gate != nil {
				close(gate)
			}
			f.clk.Step(5 * time.Second)
			f.waitFor(t, m2, NameFatal, fatalOK)
			if st := m2.State(); strings.Contains(string(st), `"short":`) {
				t.Errorf("the state keeps a short count after a full one: %s", st)
			}
		})
	}
}
