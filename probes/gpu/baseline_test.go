package gpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/probes"
)

// expectedGPUs, where set, is how many GPUs the node has: it wins over
// the PCI baseline (and over the GPUs seen before). A node whose bus has
// 8 NVIDIA functions, one of them dead, is not GPULost with
// expectedGPUs: 7; fewer than 7 is, naming the addresses NVML does not
// see; and `gpu clear` of the dead GPU's address is accepted.
func TestExpectedGPUsWinsOverPCI(t *testing.T) {
	cfg7 := testConfig()
	cfg7.ExpectedGPUs = 7
	t.Run("dead from the start", func(t *testing.T) {
		f := newFake(t)
		f.see(0, 1, 2, 4, 5, 6, 7)
		m := newMonitor(t, f, cfg7, Env{GPUsOnPCI: f.pciList})
		fatal, degraded := runBoth(m)
		f.check(t, NameFatal, fatal, want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"7 GPUs healthy"}})
		f.check(t, NameDegraded, degraded, want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"7 GPUs not degraded"}})
		if got, want := fmt.Sprint(fatal.Readings[:1]), "[{gpus 7}]"; got != want {
			t.Errorf("got readings %s, want %s", got, want)
		}
		got, err := m.Clear([]string{f.pci(3)}, f.clk.Now())
		if err != nil || !strings.Contains(got, f.pci(3)) {
			t.Errorf("Clear(%s): got %q, %v; want it accepted, naming the address", f.pci(3), got, err)
		}
		f.check(t, "after the clear", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusOK, reason: ReasonGPUsHealthy})
	})
	t.Run("fewer than expected", func(t *testing.T) {
		f := newFake(t)
		f.see(0, 1, 2, 4, 5, 6)
		m := newMonitor(t, f, cfg7, Env{GPUsOnPCI: f.pciList})
		f.check(t, NameFatal, runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPULost,
			message: []string{"NVML sees 6 GPUs, the node has 7", "{pci3}", "{pci7}"}})
	})
	t.Run("died with an Xid, accepted after a restart", func(t *testing.T) {
		f := newFake(t)
		m := newMonitor(t, f, testConfig(), Env{Open: f.open, GPUsOnPCI: f.pciList})
		f.check(t, "healthy", runProbe(m, NameFatal, runTimeout), fatalOK) // NVML opened: the handles Xids come from
		f.push(f.xid(3, 79))
		f.waitFor(t, m, NameFatal, attackXid79)
		f.reload(m, 0, 1, 2, 4, 5, 6, 7)
		f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{"{pci3}"}})
		state := m.State()

		// The operator accepts the dead GPU: expectedGPUs 7, and a clear.
		f2 := f.restarted(t)
		f2.see(0, 1, 2, 4, 5, 6, 7)
		m2 := newMonitor(t, f2, cfg7, Env{GPUsOnPCI: f2.pciList})
		if err := m2.Restore(state); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		f2.check(t, "restored", runProbe(m2, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
			message: []string{"GPU {uuid3} (last seen as index 3", "Xid 79"}, not: []string{"GPULost", "NVML does not see"}})
		got, err := m2.Clear([]string{f2.pci(3)}, f2.clk.Now())
		if err != nil || !strings.Contains(got, "dropped Xid 79 x1") {
			t.Errorf("Clear(%s): got %q, %v; want its Xid 79 dropped", f2.pci(3), got, err)
		}
		f2.check(t, "cleared", runProbe(m2, NameFatal, runTimeout), want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"7 GPUs healthy"}})
	})
}
