package gpu

import (
	"fmt"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/selftaint/selftaint/probes"
)

// Each signal, judged over runs of a stepping clock.
func TestSignals(t *testing.T) {
	minute := func(c *Config) { c.Window = time.Minute }
	problem := func(reason string, msg ...string) want {
		return want{status: probes.StatusProblem, reason: reason, message: msg}
	}
	fabricOK := fatalOK
	fabricOK.message = []string{"8 GPUs healthy; checked: Xid events, recovery action, uncorrectable ECC errors (at most 0), row remapping, NVLink, fabric"}
	fabricNotDegraded := degradedOK
	fabricNotDegraded.message = []string{"8 GPUs not degraded; checked: row remapping, retired pages, NVLink, fabric, PCIe link"}
	tests := []struct {
		name  string
		cfg   func(c *Config)
		setup func(f *fake) // before the first run
		// step changes the fake before run n (0 is the first run).
		step  func(f *fake, n int)
		runs  int           // 1 when 0
		every time.Duration // clock step between runs
		// The probe results of the last run. Runs before okBefore must be
		// OK for both probes; with okAlways, every run must.
		fatal, degraded want
		okBefore        int
	}{
		{
			name: "NVLink up, then down",
			step: func(f *fake, n int) {
				if n == 1 {
					f.set(1, func(g *simGPU) { g.links[5] = false })
				}
			},
			runs: 2, okBefore: 1,
			fatal:    problem(ReasonNVLinkDown, "GPU 1 ({uuid1}): NVLink 5 down (1 of 12 links seen up are down)"),
			degraded: degradedOK,
		},
		{
			name:  "NVLink never seen up is no problem",
			setup: func(f *fake) { f.set(1, func(g *simGPU) { g.links[5] = false }) },
			runs:  2, okBefore: 2,
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name: "NVLink errors rising fast",
			cfg:  minute,
			step: func(f *fake, n int) {
				f.set(1, func(g *simGPU) { g.linkErrors[3] += 25 }) // 4 counters: 100 a run
			},
			runs: 8, every: 10 * time.Second,
			fatal:    fatalOK,
			degraded: problem(ReasonNVLinkErrors, "GPU 1 ({uuid1}): NVLink replay, recovery and CRC errors rose 600 a minute over the last 1m0s, above 60"),
		},
		{
			name: "NVLink errors rising slowly",
			cfg:  minute,
			step: func(f *fake, n int) {
				f.set(1, func(g *simGPU) { g.linkErrors[3] += 2 }) // 8 a run, 48 a minute
			},
			runs: 12, every: 10 * time.Second, okBefore: 12,
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name:     "PCIe link narrower than its maximum",
			setup:    func(f *fake) { f.set(2, func(g *simGPU) { g.width = 8 }) },
			fatal:    fatalOK,
			degraded: problem(ReasonPCIeDegraded, "GPU 2 ({uuid2}): PCIe link x8, below its maximum x16"),
		},
		{
			name:  "PCIe generation low while busy for more than half the window",
			cfg:   minute,
			setup: func(f *fake) { f.set(2, func(g *simGPU) { g.gen, g.clockReasons = 3, 0 }) },
			runs:  10, every: 5 * time.Second, okBefore: 7, // 30s of 60 is not more than half
			fatal:    fatalOK,
			degraded: problem(ReasonPCIeDegraded, "GPU 2 ({uuid2}): PCIe link at generation 3 while busy, below its maximum 4, for more than half of the last 1m0s"),
		},
		{
			name:  "PCIe generation low while idle",
			cfg:   minute,
			setup: func(f *fake) { f.set(2, func(g *simGPU) { g.gen = 1 }) },
			runs:  30, every: 5 * time.Second, okBefore: 30,
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name: "PCIe replays rising fast",
			cfg:  minute,
			step: func(f *fake, n int) { f.set(6, func(g *simGPU) { g.replays += 20 }) },
			runs: 8, every: 10 * time.Second,
			fatal:    fatalOK,
			degraded: problem(ReasonPCIeDegraded, "GPU 6 ({uuid6}): PCIe replays rose 120.0 a minute over the last 1m0s, above 8"),
		},
		{
			name: "PCIe replays rising slowly",
			cfg:  minute,
			step: func(f *fake, n int) { f.set(6, func(g *simGPU) { g.replays++ }) },
			runs: 12, every: 10 * time.Second, okBefore: 12,
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name:     "fabric registration in progress",
			setup:    func(f *fake) { f.set(4, func(g *simGPU) { g.fabricState = nvml.GPU_FABRIC_STATE_IN_PROGRESS }) },
			fatal:    problem(ReasonFabricNotReady, "GPU 4 ({uuid4}): fabric registration in progress"),
			degraded: fabricNotDegraded,
		},
		{
			name:     "fabric registration not started",
			setup:    func(f *fake) { f.set(4, func(g *simGPU) { g.fabricState = nvml.GPU_FABRIC_STATE_NOT_STARTED }) },
			fatal:    problem(ReasonFabricNotReady, "GPU 4 ({uuid4}): fabric registration has not started (is the fabric manager running?)"),
			degraded: fabricNotDegraded,
		},
		{
			name: "fabric registration failed",
			setup: func(f *fake) {
				f.set(4, func(g *simGPU) { g.fabricState, g.fabricStatus = nvml.GPU_FABRIC_STATE_COMPLETED, nvml.ERROR_UNKNOWN })
			},
			fatal:    problem(ReasonFabricNotReady, "GPU 4 ({uuid4}): fabric registration failed: ERROR_UNKNOWN"),
			degraded: fabricNotDegraded,
		},
		{
			name:  "fabric registration complete",
			setup: func(f *fake) { f.setAll(func(g *simGPU) { g.fabricState = nvml.GPU_FABRIC_STATE_COMPLETED }) },
			fatal: fabricOK, degraded: fabricNotDegraded, okBefore: 1,
		},
		{
			name: "fabric bandwidth degraded",
			setup: func(f *fake) {
				f.setAll(func(g *simGPU) { g.fabricState = nvml.GPU_FABRIC_STATE_COMPLETED })
				f.set(4, func(g *simGPU) {
					g.fabricHealth = nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE << nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW
				})
			},
			fatal:    fabricOK,
			degraded: problem(ReasonFabricDegraded, "GPU 4 ({uuid4}): the NVLink fabric reports degraded bandwidth"),
		},
		{
			name:     "InfoROM corrupted",
			setup:    func(f *fake) { f.set(0, func(g *simGPU) { g.inforom = nvml.ERROR_CORRUPTED_INFOROM }) },
			fatal:    fatalOK,
			degraded: problem(ReasonInfoROMCorrupted, "GPU 0 ({uuid0}): the InfoROM failed validation (corrupted)"),
		},
		{
			name: "ECC enabled, then disabled",
			step: func(f *fake, n int) {
				if n == 1 {
					f.set(7, func(g *simGPU) { g.eccOn, g.eccPending = false, false })
				}
			},
			runs: 2, okBefore: 1,
			fatal:    fatalOK,
			degraded: problem(ReasonECCDisabled, "GPU 7 ({uuid7}): ECC is disabled; it was enabled"),
		},
		{
			name:  "ECC never enabled is no problem",
			setup: func(f *fake) { f.set(7, func(g *simGPU) { g.eccOn, g.eccPending = false, false }) },
			runs:  2, okBefore: 2,
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name: "thermal violation above 10% of the window",
			cfg:  minute,
			step: func(f *fake, n int) { f.set(5, func(g *simGPU) { g.thermal += uint64(2 * time.Second) }) },
			runs: 6, every: 10 * time.Second, okBefore: 4, // 6s of 60 is not above 10%
			fatal:    fatalOK,
			degraded: problem(ReasonThermalViolation, "GPU 5 ({uuid5}): thermal violation 17% of the last 1m0s, above 10%"),
		},
		{
			name: "power violation above 50% of the window",
			cfg:  minute,
			step: func(f *fake, n int) { f.set(5, func(g *simGPU) { g.power += uint64(8 * time.Second) }) },
			runs: 6, every: 10 * time.Second, okBefore: 4, // 24s of 60 is not above 50%
			fatal:    fatalOK,
			degraded: problem(ReasonPowerViolation, "GPU 5 ({uuid5}): power violation 67% of the last 1m0s, above 50%"),
		},
		{
			name: "power violation below 50% of the window",
			cfg:  minute,
			step: func(f *fake, n int) { f.set(5, func(g *simGPU) { g.power += uint64(4 * time.Second) }) },
			runs: 12, every: 10 * time.Second, okBefore: 12,
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name: "hardware slowdown in half the samples over 10 minutes",
			step: func(f *fake, n int) {
				f.set(4, func(g *simGPU) {
					g.clockReasons = nvml.ClocksEventReasonGpuIdle
					if n%2 == 0 {
						g.clockReasons = nvml.ClocksThrottleReasonHwSlowdown | nvml.ClocksEventReasonSwPowerCap
					}
				})
			},
			runs: 121, every: 5 * time.Second, okBefore: 60, // 25% of 10 minutes is 30 samples on
			fatal:    fatalOK,
			degraded: problem(ReasonHardwareSlowdown, "GPU 4 ({uuid4}): clocks held down by hardware 50% of the last 10m0s, above 25% (now HW slowdown)"),
		},
		{
			name: "hardware slowdown in a single sample",
			step: func(f *fake, n int) {
				f.set(4, func(g *simGPU) {
					g.clockReasons = nvml.ClocksEventReasonGpuIdle
					if n == 10 {
						g.clockReasons = nvml.ClocksThrottleReasonHwThermalSlowdown
					}
				})
			},
			runs: 121, every: 5 * time.Second, okBefore: 121,
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name: "row remapping on a MIG GPU: the fields",
			setup: func(f *fake) {
				f.set(3, func(g *simGPU) {
					g.mig, g.remapNA, g.remapFailed, g.remapPending, g.remapUnc, g.remapCorr = true, true, true, true, 3, 1
				})
			},
			fatal:    problem(ReasonRowRemapFailure, "GPU 3 ({uuid3}): row remapping failed (3 rows remapped for uncorrectable errors)"),
			degraded: problem(ReasonRowRemapPending, "GPU 3 ({uuid3}): row remapping pending (3 rows remapped for uncorrectable, 1 for correctable errors)"),
		},
		{
			name:  "row remapping not available on any GPU",
			setup: func(f *fake) { f.setAll(func(g *simGPU) { g.mig, g.remapNA, g.remapFieldNA = true, true, true }) },
			fatal: want{status: probes.StatusOK, reason: ReasonGPUsHealthy,
				message: []string{"8 GPUs healthy; checked: Xid events, recovery action, uncorrectable ECC errors (at most 0), NVLink; not available: ", "row remapping (not supported)"}},
			degraded: want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"row remapping (not supported)"},
				not: []string{"checked: row remapping"}},
			okBefore: 1,
		},
		{
			name:  "row remapping not available on one GPU",
			setup: func(f *fake) { f.set(3, func(g *simGPU) { g.mig, g.remapNA, g.remapFieldNA = true, true, true }) },
			fatal: want{status: probes.StatusOK, reason: ReasonGPUsHealthy,
				message: []string{"8 GPUs healthy; checked: ", "not available: ", "row remapping on GPU 3 ({uuid3}) (not supported)"}},
			degraded: want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"row remapping on GPU 3 ({uuid3}) (not supported)"}},
			okBefore: 1,
		},
		{
			name:     "row remapping pending",
			setup:    func(f *fake) { f.set(1, func(g *simGPU) { g.remapPending, g.remapUnc, g.remapCorr = true, 2, 1 }) },
			fatal:    fatalOK,
			degraded: problem(ReasonRowRemapPending, "GPU 1 ({uuid1}): row remapping pending (2 rows remapped for uncorrectable, 1 for correctable errors); it takes effect at the next GPU reset"),
		},
		{
			name:     "retired pages pending",
			setup:    func(f *fake) { f.set(1, func(g *simGPU) { g.retired = true }) },
			fatal:    fatalOK,
			degraded: problem(ReasonRetiredPagesPending, "GPU 1 ({uuid1}): retired memory pages pending; they take effect at the next GPU reset"),
		},
		{
			name:     "uncorrectable ECC errors",
			setup:    func(f *fake) { f.set(5, func(g *simGPU) { g.ecc = 2 }) },
			fatal:    problem(ReasonUncorrectableECC, "GPU 5 ({uuid5}): 2 volatile uncorrectable ECC errors, above 0"),
			degraded: degradedOK,
		},
		{
			name:     "uncorrectable ECC errors at the limit",
			cfg:      func(c *Config) { c.ECCUncorrectedAbove = 2 },
			setup:    func(f *fake) { f.set(5, func(g *simGPU) { g.ecc = 2 }) },
			fatal:    want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"uncorrectable ECC errors (at most 2)"}},
			degraded: degradedOK, okBefore: 1,
		},
	}
	for _, action := range []struct {
		n      uint64
		reason string
		text   string
	}{
		{recoveryReset, ReasonGPUResetRequired, "the driver's recovery action is GPU reset"},
		{recoveryReboot, ReasonGPURebootRequired, "the driver's recovery action is node reboot"},
		{recoveryDrainP2P, ReasonGPUDrainP2P, "the driver's recovery action is drain peer-to-peer traffic"},
		{recoveryDrainReset, ReasonGPUResetRequired, "the driver's recovery action is drain the GPU's work, then reset it"},
		{9, ReasonGPUResetRequired, "the driver's recovery action is 9, unknown to this selftaint"},
	} {
		tests = append(tests, struct {
			name            string
			cfg             func(c *Config)
			setup           func(f *fake)
			step            func(f *fake, n int)
			runs            int
			every           time.Duration
			fatal, degraded want
			okBefore        int
		}{
			name:     fmt.Sprintf("recovery action %d", action.n),
			setup:    func(f *fake) { f.set(6, func(g *simGPU) { g.recovery = action.n }) },
			fatal:    problem(action.reason, "GPU 6 ({uuid6}): "+action.text),
			degraded: degradedOK,
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			cfg := testConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			if tt.setup != nil {
				tt.setup(f)
			}
			m := newMonitor(t, f, cfg, Env{})
			runs := max(tt.runs, 1)
			for n := range runs {
				if tt.step != nil {
					tt.step(f, n)
				}
				fatal, degraded := runBoth(m)
				if n < tt.okBefore && n < runs-1 {
					if fatal.Status != probes.StatusOK || degraded.Status != probes.StatusOK {
						t.Fatalf("run %d: got %s %q and %s %q, want both OK before run %d", n, fatal.Status, fatal.Message, degraded.Status, degraded.Message, tt.okBefore)
					}
				}
				if n == runs-1 {
					f.check(t, fmt.Sprintf("run %d %s", n, NameFatal), fatal, tt.fatal)
					f.check(t, fmt.Sprintf("run %d %s", n, NameDegraded), degraded, tt.degraded)
				}
				f.clk.Step(tt.every)
			}
		})
	}
}
