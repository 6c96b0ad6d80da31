package gpu

// Clock steps: what the Monitor saw is ordered by when it saw it, not by
// wall-clock times that a step of the clock (NTP, an operator, a VM
// restored) can reorder.

import (
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

var held94 = want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"GPU 2 ({uuid2}): Xid 94"}}

// A GPU reset observed after a clock step (between the state's write and
// the restart, or while the agent runs) clears the reset-gpu Xid raised
// before it, whichever way the clock went.
func TestResetRecoveryAcrossClockSteps(t *testing.T) {
	resets := map[string]func(t *testing.T, f *fake, m *Monitor){
		"lost and back": func(t *testing.T, f *fake, m *Monitor) {
			f.fail(2, allCalls, errLost)
			f.check(t, "lost", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPULost})
			f.fail(2, allCalls, fault{})
		},
		"recovery action": func(t *testing.T, f *fake, m *Monitor) {
			f.set(2, func(g *simGPU) { g.recovery = recoveryReset })
			f.check(t, "reset asked", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
				message: []string{"recovery action is GPU reset"}})
			f.set(2, func(g *simGPU) { g.recovery = recoveryNone })
		},
	}
	for _, tt := range []struct {
		name    string
		restart bool
		step    time.Duration
	}{
		{"back an hour across a restart", true, -time.Hour},
		{"forward an hour across a restart", true, time.Hour},
		{"back an hour while running", false, -time.Hour},
		{"back a day across a restart", true, -24 * time.Hour},
	} {
		for rname, reset := range resets {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				f := newFake(t)
				m := newMonitor(t, f, testConfig(), Env{BootID: bootID("boot-1")})
				f.push(f.xid(2, 94))
				f.waitFor(t, m, NameFatal, held94)
				if tt.restart {
					state := m.State()
					f = f.restarted(t)
					m = newMonitor(t, f, testConfig(), Env{BootID: bootID("boot-1")})
					if err := m.Restore(state); err != nil {
						t.Fatalf("Restore: %v", err)
					}
				}
				f.clk.Step(tt.step)
				f.check(t, "after the step", runProbe(m, NameFatal, runTimeout), held94)
				reset(t, f, m)
				f.waitFor(t, m, NameFatal, fatalOK)
			})
		}
	}
}

// An Xid raised after a reset that waits for the GPU to read healthy is
// not cleared by that reset, though the clock was set back in between and
// its time is before the reset's.
func TestXidAfterPendingResetStaysUnderClockStep(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.set(2, func(g *simGPU) { g.ecc = 2 }) // not healthy: a reset waits
	f.push(f.xid(2, 94))
	f.waitFor(t, m, NameFatal, held94)
	f.clk.Step(time.Minute)
	f.fail(2, allCalls, errLost)
	runProbe(m, NameFatal, runTimeout)
	f.fail(2, allCalls, fault{})
	f.clk.Step(time.Minute)
	f.check(t, "back, not healthy", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
		message: []string{"Xid 94", "2 volatile uncorrectable ECC errors"}})
	f.clk.Step(-time.Hour)
	f.push(f.xid(2, 48))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"Xid 94", "Xid 48"}})
	f.set(2, func(g *simGPU) { g.ecc = 0 })
	f.clk.Step(time.Minute)
	f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
		message: []string{"GPU 2 ({uuid2}): Xid 48"}, not: []string{"Xid 94"}})
}

// Clear says exactly what it dropped and what stays: an Xid raised after
// requestedAt (the operator's clock behind the node's) stays and is not
// called cleared; an Xid raised after the request was handled (the
// operator's clock ahead of the node's) is never dropped by it.
func TestClearSaysWhatItDrops(t *testing.T) {
	t.Run("operator's clock behind", func(t *testing.T) {
		f := newFake(t)
		m := newMonitor(t, f, testConfig(), Env{})
		f.push(f.xid(2, 94))
		f.waitFor(t, m, NameFatal, held94)
		f.clk.Step(8 * time.Minute)
		f.push(f.xid(2, 48))
		f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"Xid 94", "Xid 48"}})
		f.clk.Step(2 * time.Minute)
		got, err := m.Clear([]string{f.uuid(2)}, t0.Add(5*time.Minute))
		if err != nil {
			t.Fatalf("Clear: %v", err)
		}
		for _, w := range []string{"GPU 2 (" + f.uuid(2) + "): dropped Xid 94 x1", "kept Xid 48 x1 (last seen after requestedAt " + stamp(t0.Add(5*time.Minute)) + ")"} {
			if !strings.Contains(got, w) {
				t.Errorf("Clear said %q, want it to contain %q", got, w)
			}
		}
		if strings.Contains(got, "dropped Xid 48") || strings.Contains(got, "94 x1, 48") {
			t.Errorf("Clear said %q: Xid 48 stays, it must not be called cleared", got)
		}
		f.check(t, "after", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
			message: []string{"GPU 2 ({uuid2}): Xid 48"}, not: []string{"Xid 94"}})
	})
	t.Run("operator's clock ahead", func(t *testing.T) {
		f := newFake(t)
		m := newMonitor(t, f, testConfig(), Env{})
		f.set(2, func(g *simGPU) { g.ecc = 2 }) // not healthy: the clear waits
		f.push(f.xid(2, 94))
		f.waitFor(t, m, NameFatal, held94)
		f.clk.Step(time.Minute)
		got, err := m.Clear([]string{f.uuid(2)}, f.clk.Now().Add(10*time.Minute))
		if want := "GPU 2 (" + f.uuid(2) + "): Xid 94 x1 dropped once the GPU reads healthy"; err != nil || !strings.Contains(got, want) {
			t.Errorf("Clear: got %q, %v; want it to contain %q", got, err, want)
		}
		f.clk.Step(time.Minute)
		f.push(f.xid(2, 79))
		f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"Xid 94", "Xid 79"}})
		f.set(2, func(g *simGPU) { g.ecc = 0 })
		f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
			message: []string{"GPU 2 ({uuid2}): Xid 79"}, not: []string{"Xid 94"}})
	})
}
