package gpu

// The GPU edges of issue 28 (part 2), each on the fault rig over go-nvml's
// dgxa100 mock: a broken event set's queued Xid, an Xid of this boot and
// the reboot recovery when the GPUs were read before Restore, clearing a
// dead GPU's kernel-only Xid by its PCI address, the count shrinking to
// expectedGPUs, and the recovery action Xid 154's line names.

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/selftaint/selftaint/probes"
)

// xid48On2 is the fatal probe's verdict on an Xid 48 on GPU 2.
var xid48On2 = want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
	message: []string{"GPU 2 ({uuid2}): Xid 48 (Double Bit ECC Error)"}, not: []string{"Xid 79"}}

// The inventory reads the GPUs before the agent restores the probe's state
// (its first sync counts the GPUs), and an Xid 48 is seen in this boot
// before Restore: the reboot that Restore observes (the state was written
// in another boot) covers only what was restored, never the 48 seen since,
// whichever channel reported it.
func TestXidOfThisBootOutlivesTheRebootRecovery(t *testing.T) {
	for _, channel := range []string{"kernel log", "NVML"} {
		t.Run(channel, func(t *testing.T) {
			before := newFake(t)
			state := stateWith(t, before, "boot-1", held79On2, before.xid(2, 79))

			f := before.restarted(t)
			m := newMonitor(t, f, testConfig(), Env{BootID: bootID("boot-2")})
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			if n, _, err := m.CountGPUs(ctx); err != nil || n != 8 {
				t.Fatalf("CountGPUs before Restore: %d, %v", n, err)
			}
			f.clk.Step(time.Second)
			switch channel {
			case "kernel log":
				f.kernelXid(t, m, 2, 48)
			case "NVML":
				f.nvmlXids(t, 2, 48)
			}
			if err := m.Restore(state); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			for run := range 3 {
				f.check(t, fmt.Sprintf("run %d after Restore", run), runProbe(m, NameFatal, runTimeout), xid48On2)
				f.clk.Step(time.Minute)
			}
		})
	}
}

// held79On2 is the fatal probe's verdict on an Xid 79 on GPU 2 seen once.
var held79On2 = want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
	message: []string{"GPU 2 ({uuid2}): Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node"}}

// A dead GPU (NVML does not identify it; its Xid 79 is known only from the
// kernel log) is accepted as the README says: expectedGPUs set to the GPUs
// that work, and `gpu clear --gpu <its PCI address>`. The clear drops the
// kernel-only Xid held for that address, says so, and the node is no
// longer failed; the kernel-only Xid of another address stays.
func TestClearDeadGPUKernelXidByPCI(t *testing.T) {
	f := newFake(t)
	f.see(0, 1, 2, 4, 5, 6, 7) // GPU 3 (0000:4e:00.0) is dead: on the bus, not in NVML
	cfg := testConfig()
	cfg.ExpectedGPUs = 7
	m := newMonitor(t, f, cfg, Env{GPUsOnPCI: f.pciList})
	f.kernelXid(t, m, 3, 79)
	f.check(t, "before the clear", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"a GPU NVML did not identify: PCI {pci3} (from the kernel log): Xid 79"}})

	f.clk.Step(time.Minute)
	reply, err := m.Clear([]string{"0000:4E:00.0"}, f.clk.Now())
	if err != nil {
		t.Fatalf("Clear: %v", err)
	}
	for _, sub := range []string{"PCI " + f.pci(3), "dropped Xid 79 x1"} {
		if !strings.Contains(reply, sub) {
			t.Errorf("Clear said %q, want it to contain %q", reply, sub)
		}
	}
	f.check(t, "after the clear", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusOK, reason: ReasonGPUsHealthy,
		message: []string{"7 GPUs healthy"}})
	if st := string(m.State()); strings.Contains(st, f.pci(3)) && strings.Contains(st, `"xid":79`) {
		t.Errorf("state still holds the cleared Xid: %s", st)
	}

	// Only the address named: a kernel-only Xid of another one stays.
	k, _ := ParseNVRMXid("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
	m.KernelXid(k)
	f.kernelXid(t, m, 3, 79)
	f.clk.Step(time.Minute)
	reply, err = m.Clear([]string{f.pci(3)}, f.clk.Now())
	if err != nil || !strings.Contains(reply, "dropped Xid 79 x1") {
		t.Fatalf("second Clear: got %q, %v", reply, err)
	}
	f.check(t, "another address's Xid", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"PCI 0000:3b:00.0 (from the kernel log): Xid 79"}, not: []string{"{pci3}"}})
}

// expectedGPUs 7, and a driver reload without GPU 3: NVML counts 7, the
// operator's count is met, and both probes say so on every run after. The
// index NVML no longer counts (7) is not read (its handle would be
// ERROR_INVALID_ARGUMENT) and is not a GPU that could not be read.
func TestCountShrinksToExpectedGPUs(t *testing.T) {
	f := newFake(t)
	cfg := testConfig()
	cfg.ExpectedGPUs = 7
	m := newMonitor(t, f, cfg, Env{Open: f.open, GPUsOnPCI: f.pciList})
	fatal, degraded := runBoth(m)
	f.check(t, "8 GPUs", fatal, fatalOK)
	f.check(t, "8 GPUs", degraded, degradedOK)

	f.reload(m, 0, 1, 2, 4, 5, 6, 7)
	ok7 := want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"7 GPUs healthy"}, not: []string{"GPU 7"}}
	f.waitFor(t, m, NameFatal, ok7)
	handles := f.called("DeviceGetHandleByIndex")
	for run := range 10 {
		fatal, degraded := runBoth(m)
		f.check(t, fmt.Sprintf("run %d after the reload", run), fatal, ok7)
		f.check(t, fmt.Sprintf("run %d after the reload", run), degraded, want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded,
			message: []string{"7 GPUs not degraded"}})
		f.clk.Step(time.Minute)
	}
	if n := f.called("DeviceGetHandleByIndex") - handles; n > 0 {
		t.Errorf("%d handles asked for in 10 runs of 7 GPUs with their handles: an index NVML does not count is still read", n)
	}
	if n, detail, err := m.CountGPUs(context.Background()); err != nil || n != 7 || strings.Contains(detail, "7:") {
		t.Errorf("CountGPUs: %d %q %v, want 7 GPUs, indices 0 to 6", n, detail, err)
	}

	// GPU 3 returns (a reload with all 8): index 7 is read again.
	f.reload(m, 0, 1, 2, 3, 4, 5, 6, 7)
	f.waitFor(t, m, NameFatal, fatalOK)
}

// Xid 154's line names the recovery action the driver now asks for: the
// probe files the action named (a GPU reset, a reboot, ...); "None" (the
// need went away) fails nothing, and clears nothing either (the driver's
// recovery action field going back to none is the reset that does); a
// line it cannot read is taken as the catalog says (reset-gpu). The action
// a line named survives a restart.
func TestXid154RecoveryActionFromTheLine(t *testing.T) {
	line := func(to string) string {
		return "NVRM: Xid (PCI:0000:47:00): 154, GPU recovery action changed from 0x0 (None) to " + to
	}
	reset := want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"GPU 2 ({uuid2}): Xid 154 (GPU Recovery Action Changed", "reset the GPU"}}
	reboot := want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"GPU 2 ({uuid2}): Xid 154 (GPU Recovery Action Changed", "reboot the node"}}
	for _, tt := range []struct {
		line string
		want want
	}{
		{line("0x2 (Node Reboot Required)"), reboot},
		{line("0x1 (GPU Reset Required)"), reset},
		{line("0x3 (Drain P2P)"), reset},
		{line("0x4 (Drain and Reset)"), reset},
		{line("0x7 (System Reboot Required)"), reboot},
		{"NVRM: Xid (PCI:0000:47:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", fatalOK},
		{"NVRM: Xid (PCI:0000:47:00): 154, something this selftaint cannot read", reset},
		{"NVRM: Xid (PCI:0000:47:00): 154", reset},
		{line("0x99 (Something New)"), reset},
	} {
		t.Run(tt.line, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{})
			f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
			k, ok := ParseNVRMXid(tt.line)
			if !ok {
				t.Fatalf("ParseNVRMXid(%q): not an Xid", tt.line)
			}
			m.KernelXid(k)
			f.check(t, "after the line", runProbe(m, NameFatal, runTimeout), tt.want)
			if tt.want.status != probes.StatusProblem {
				return
			}
			// Restarted (same boot): the action the line named holds.
			n := f.restarted(t)
			m2 := newMonitor(t, n, testConfig(), Env{})
			if err := m2.Restore(m.State()); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			n.check(t, "restored", runProbe(m2, NameFatal, runTimeout), tt.want)
		})
	}

	// A reboot asked for by a 154 is not cleared by a GPU reset.
	t.Run("reset does not clear a reboot", func(t *testing.T) {
		f := newFake(t)
		m := newMonitor(t, f, testConfig(), Env{})
		f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
		k, _ := ParseNVRMXid(line("0x2 (Node Reboot Required)"))
		m.KernelXid(k)
		f.fail(2, allCalls, errLost)
		runProbe(m, NameFatal, runTimeout)
		f.fail(2, allCalls, fault{})
		f.clk.Step(time.Minute)
		f.check(t, "after a reset", runProbe(m, NameFatal, runTimeout), reboot)
	})

	// NVML's event of the same 154 comes first (it carries no action):
	// the kernel's line, paired with it, still raises it to the action it
	// names.
	t.Run("NVML first", func(t *testing.T) {
		f := newFake(t)
		m := newMonitor(t, f, testConfig(), Env{})
		f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
		f.nvmlXids(t, 2, 154)
		f.check(t, "NVML's 154", runProbe(m, NameFatal, runTimeout), reset)
		k, _ := ParseNVRMXid(line("0x2 (Node Reboot Required)"))
		m.KernelXid(k)
		got := runProbe(m, NameFatal, runTimeout)
		f.check(t, "and the kernel's line", got, reboot)
		if r := reading(got.Readings, "gpu2"); !strings.Contains(r, "fatal xid 154 x1") {
			t.Errorf("got reading gpu2 %q, want the 154 counted once", r)
		}
	})
}

// The event set's waits fail for a while (NVML says ERROR_UNKNOWN) while
// an Xid 79 of GPU 3 is queued in it, and work again by the time the next
// run replaces the set: the set replaced is read out before it is freed,
// so the 79 is filed, and no run says the GPUs are healthy meanwhile.
func TestBrokenEventSetReadOutBeforeReplaced(t *testing.T) {
	f := newFake(t)
	cfg := testConfig()
	cfg.EventWait = 5 * time.Second // a failed wait pauses as long: the next run comes first
	m := newMonitor(t, f, cfg, Env{GPUsOnPCI: f.pciList})
	f.waitFor(t, m, NameFatal, fatalOK)

	f.failLib("EventSetWait", errUnknown)
	f.push(f.xid(0, 13)) // a harmless Xid ends the wait in flight: the next one fails
	f.waitFor(t, m, NameFatal, want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"waiting for Xid events: ERROR_UNKNOWN"}})
	made, _ := f.sets() // the set of now (a run may have replaced the first: the fault is every set's)
	f.push(f.xid(3, 79))
	if n := f.queuedIn(made); n != 1 {
		t.Fatalf("%d events queued in the set, want the Xid 79", n)
	}
	f.failLib("EventSetWait", fault{})

	deadline := time.Now().Add(20 * time.Second)
	for {
		got := runProbe(m, NameFatal, runTimeout)
		if got.Status == probes.StatusOK {
			t.Fatalf("the set replaced, its Xid 79 not read: got %s/%s %q", got.Status, got.Reason, got.Message)
		}
		if len(f.mismatches(got, attackXid79)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			f.check(t, "after 20s", got, attackXid79)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	if now, _ := f.sets(); now == made {
		t.Errorf("the broken set was not replaced")
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if made, freed := f.sets(); made != freed {
		t.Errorf("got %d event sets made, %d freed", made, freed)
	}
}

// The set breaks for good with an Xid queued in it: it cannot be read
// out. No run says the GPUs are healthy before each GPU it covered has
// been registered on the new set and its recovery action read again
// (which is where the driver says an Xid it raised needs a recovery); a
// GPU whose recovery action cannot be read stays not trusted, by name.
func TestBrokenEventSetNotReadOutNotTrusted(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
	f.waitFor(t, m, NameFatal, fatalOK)

	f.set(3, func(g *simGPU) { g.recovery = recoveryReboot }) // the driver, as it raises the 79
	f.push(f.xid(3, 79))
	f.breakSet()
	f.fail(5, "GetFieldValues", errUnknown) // GPU 5's recovery action cannot be read
	got := f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 3 ({uuid3}): the driver's recovery action is node reboot",
			"GPU 5 ({uuid5}): the NVML event set broke and what it held could not be read"}})
	t.Logf("%s", got.Message)

	f.set(3, func(g *simGPU) { g.recovery = recoveryNone })
	f.fail(5, "GetFieldValues", fault{})
	f.waitFor(t, m, NameFatal, fatalOK)
}

// The action an Xid 154 line names, as the probe files it.
func TestRecoveryActionOfLine(t *testing.T) {
	for _, tt := range []struct {
		text string
		want Action
		ok   bool
	}{
		{"GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", ActionResetGPU, true},
		{"GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", ActionReboot, true},
		{"GPU recovery action changed from 0x1 (GPU Reset Required) to 0x3 (Drain P2P)", ActionResetGPU, true},
		{"GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", ActionResetGPU, true},
		{"GPU recovery action changed from 0x0 (None) to 0x6 (Bus Reset)", ActionResetGPU, true},
		{"GPU recovery action changed from 0x0 (None) to 0x7 (System Reboot)", ActionReboot, true},
		{"GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)", ActionIgnore, true},
		{"GPU RECOVERY ACTION CHANGED FROM 0X0 (NONE) TO 0X2 (NODE REBOOT REQUIRED)", ActionReboot, true},
		{"pid=7, name=to go, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x2 (Node Reboot Required)", ActionReboot, true},
		{"GPU recovery action changed to Node Reboot Required", ActionReboot, true},
		{"GPU recovery action changed from 0x0 (None) to 0x9 (Node Reboot Required)", ActionReboot, true}, // a number unknown here, a name known
		{"GPU recovery action changed from 0x0 (None) to 0x5 (Recover IMEX Domain)", "", false},
		{"GPU recovery action changed from 0x0 (None) to 0x99", "", false},
		{"GPU recovery action changed", "", false},
		{"", "", false},
	} {
		got, ok := recoveryActionOfLine(tt.text)
		if got != tt.want || ok != tt.ok {
			t.Errorf("recoveryActionOfLine(%q) = %q, %v; want %q, %v", tt.text, got, ok, tt.want, tt.ok)
		}
	}
}

// The GPU that leaves NVML's count holds an Xid 94 (reset the GPU): after
// the reload without it, the Xid is still reported, as a GPU not seen
// since; its return (at the index it left) is a reset, which clears it.
func TestUncountedGPUKeepsItsXidUntilItsReturn(t *testing.T) {
	f := newFake(t)
	cfg := testConfig()
	cfg.ExpectedGPUs = 7
	m := newMonitor(t, f, cfg, Env{Open: f.open, GPUsOnPCI: f.pciList})
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK)
	f.push(f.xid(7, 94))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"GPU 7 ({uuid7}): Xid 94"}})

	f.reload(m, 0, 1, 2, 3, 4, 5, 6)
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
		message: []string{"GPU {uuid7} (last seen as index 7", "Xid 94"}, not: []string{"GPU 7:", "no longer counts", "INVALID_ARGUMENT"}})
	if st := string(m.State()); !strings.Contains(st, f.uuid(7)) || !strings.Contains(st, `"xid":94`) {
		t.Errorf("state without GPU 7's Xid 94: %s", st)
	}

	f.reload(m, 0, 1, 2, 3, 4, 5, 6, 7)
	f.waitFor(t, m, NameFatal, fatalOK)
}

// The broken set's read-out hangs (its wait does not return): it is given
// up after a wait and its grace, and each GPU is trusted again once its
// state is read again on the new set, so the probe is not Unknown for
// ever; until then it is never healthy.
func TestBrokenEventSetReadOutHangs(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{GPUsOnPCI: f.pciList})
	f.waitFor(t, m, NameFatal, fatalOK)

	f.failLib("EventSetWait", errUnknown)
	f.push(f.xid(0, 13))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"waiting for Xid events: ERROR_UNKNOWN"}})
	f.hangSet() // the set of now: reading it out hangs
	f.failLib("EventSetWait", fault{})
	start := time.Now()
	got := f.waitFor(t, m, NameFatal, want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"what it held is being read out"}})
	t.Logf("%s", got.Message)
	for {
		got := runProbe(m, NameFatal, runTimeout)
		if got.Status == probes.StatusOK {
			if d := time.Since(start); d < waitGrace {
				t.Errorf("healthy after %v, before the read-out was given up (%v)", d, waitGrace)
			}
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("still %s/%s after 20s: %q", got.Status, got.Reason, got.Message)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// expectedGPUs 7, a reload without GPU 3 (NVML counts 7; index 7 is no
// longer read), then the driver goes away under the agent (unloaded, or
// upgraded): every call of the 7 GPUs says so, while NVML still counts 7,
// or cannot count (then index 7 is read, and NVML says there is no GPU
// there). The index past the count is no GPU that answered: the driver is
// unavailable, NVML is reopened after its backoff, and the new session
// reads the 7 GPUs healthy; the probe is not Unknown until the agent
// restarts.
func TestCountShrinksThenDriverGone(t *testing.T) {
	for _, count := range []fault{{}, errUnknown} {
		t.Run("count "+count.ret.String(), func(t *testing.T) {
			f := newFake(t)
			var opens atomic.Int32
			open := func() (nvml.Interface, error) { opens.Add(1); return f.open() }
			cfg := testConfig()
			cfg.ExpectedGPUs = 7
			m := newMonitor(t, f, cfg, Env{Open: open, GPUsOnPCI: f.pciList})
			f.check(t, "8 GPUs", runProbe(m, NameFatal, runTimeout), fatalOK)
			f.reload(m, 0, 1, 2, 4, 5, 6, 7)
			ok7 := want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"7 GPUs healthy"}, not: []string{"GPU 7"}}
			f.waitFor(t, m, NameFatal, ok7)

			before := opens.Load()
			f.driverGone(nvml.ERROR_DRIVER_NOT_LOADED)
			f.failLib("DeviceGetCount", count)
			f.check(t, "every counted GPU's calls say the driver is gone", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem,
				reason: ReasonDriverUnavailable, message: []string{"the NVIDIA driver is unavailable", "ERROR_DRIVER_NOT_LOADED"}, not: []string{"GPU 7"}})
			f.failLib("DeviceGetCount", fault{})
			f.clk.Step(openBackoffMin)
			f.check(t, "after the backoff", runProbe(m, NameFatal, runTimeout), ok7)
			if n := opens.Load() - before; n != 1 {
				t.Errorf("NVML reopened %d times after every call of the 7 GPUs it counts said ERROR_DRIVER_NOT_LOADED, want 1", n)
			}
		})
	}
}

// expectedGPUs 7, a reload without GPU 3, then NVML cannot count the GPUs
// (the driver still answers): the last count (7) stands, so index 7 is
// neither read nor one of the GPUs that could not be read ("1 of 8 ...:
// GPU 7: NVML no longer counts GPU 7"): the probes say the count failed,
// of 7 GPUs; once NVML counts again, the 7 are healthy.
func TestCountFailsAfterItShrank(t *testing.T) {
	f := newFake(t)
	cfg := testConfig()
	cfg.ExpectedGPUs = 7
	m := newMonitor(t, f, cfg, Env{Open: f.open, GPUsOnPCI: f.pciList})
	f.check(t, "8 GPUs", runProbe(m, NameFatal, runTimeout), fatalOK)
	f.reload(m, 0, 1, 2, 4, 5, 6, 7)
	ok7 := want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"7 GPUs healthy"}, not: []string{"GPU 7"}}
	f.waitFor(t, m, NameFatal, ok7)

	f.failLib("DeviceGetCount", errUnknown)
	handles := f.called("DeviceGetHandleByIndex")
	for run := range 3 {
		fatal, degraded := runBoth(m)
		for _, got := range []probes.Result{fatal, degraded} {
			f.check(t, fmt.Sprintf("run %d without a count", run), got, want{status: probes.StatusUnknown, reason: ReasonReadError,
				message: []string{"0 of 7 GPUs could not be read completely: counting GPUs: ERROR_UNKNOWN"}, not: []string{"GPU 7", "of 8"}})
			if r := reading(got.Readings, "gpu7"); r != "<missing>" {
				t.Errorf("run %d: reading gpu7 %q for an index NVML did not count at its last count", run, r)
			}
		}
		f.clk.Step(time.Minute)
	}
	if n := f.called("DeviceGetHandleByIndex") - handles; n > 0 {
		t.Errorf("%d handles asked for in 3 runs of 7 GPUs with their handles: the index past the last count is still read", n)
	}
	f.failLib("DeviceGetCount", fault{})
	f.check(t, "counted again", runProbe(m, NameFatal, runTimeout), ok7)
}
