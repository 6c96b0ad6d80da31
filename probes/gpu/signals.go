package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// slowdownReason is a clock event reason that means hardware holds the
// clocks down, with its name for messages.
type slowdownReason struct {
	bit  uint64
	name string
}

// slowdownReasons lists them. It is a function so that no package-level
// table can be modified.
func slowdownReasons() []slowdownReason {
	return []slowdownReason{
		{nvml.ClocksThrottleReasonHwSlowdown, "HW slowdown"},
		{nvml.ClocksThrottleReasonHwThermalSlowdown, "HW thermal slowdown"},
		{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "HW power brake slowdown"},
	}
}

func slowdownNames(reasons uint64) []string {
	var names []string
	for _, sr := range slowdownReasons() {
		if reasons&sr.bit != 0 {
			names = append(names, sr.name)
		}
	}
	return names
}

// mk makes findings of one probe at one time.
type mk func(reason, format string, args ...any) finding

func maker(probe string, now time.Time) mk {
	return func(reason, format string, args ...any) finding {
		return finding{Probe: probe, Reason: reason, Text: fmt.Sprintf(format, args...), Since: now}
	}
}

// judgeSignal returns what a successful read of sig shows about g, and
// keeps the signal's history and baselines. m.mu is held.
func (m *Monitor) judgeSignal(g *gpuState, sig string, v values, now time.Time) []finding {
	fatal, degraded := maker(NameFatal, now), maker(NameDegraded, now)
	switch sig {
	case sigRecovery:
		return recoveryFindings(v.recovery, fatal)
	case sigECC, sigRemap, sigRetired:
		return memoryFindings(sig, v, m.cfg.ECCUncorrectedAbove, fatal, degraded)
	case sigFabric:
		return fabricFindings(v, fatal, degraded)
	case sigNVLink:
		return m.nvlinkFindings(g, g.record(), v, now, fatal, degraded)
	case sigPCIe:
		return m.pcieFindings(g, v, now, degraded)
	case sigECCMode, sigInfoROM:
		return deviceFindings(sig, v, g.record(), degraded)
	case sigClocks, sigThermal, sigPower:
		return m.sustainedFindings(g, sig, v, now, degraded)
	}
	return nil
}

// recoveryFindings judges the driver's recovery action.
func recoveryFindings(action uint64, fatal mk) []finding {
	switch action {
	case recoveryNone:
		return nil
	case recoveryReset:
		return []finding{fatal(ReasonGPUResetRequired, "the driver's recovery action is GPU reset")}
	case recoveryReboot:
		return []finding{fatal(ReasonGPURebootRequired, "the driver's recovery action is node reboot")}
	case recoveryDrainP2P:
		return []finding{fatal(ReasonGPUDrainP2P, "the driver's recovery action is drain peer-to-peer traffic")}
	case recoveryDrainReset:
		return []finding{fatal(ReasonGPUResetRequired, "the driver's recovery action is drain the GPU's work, then reset it")}
	}
	return []finding{fatal(ReasonGPUResetRequired, "the driver's recovery action is %d, unknown to this selftaint", action)}
}

// memoryFindings judges the GPU memory's error counters and repairs.
func memoryFindings(sig string, v values, eccAbove uint64, fatal, degraded mk) []finding {
	var out []finding
	switch sig {
	case sigECC:
		if v.ecc > eccAbove {
			out = append(out, fatal(ReasonUncorrectableECC, "%d volatile uncorrectable ECC errors, above %d", v.ecc, eccAbove))
		}
	case sigRemap:
		if v.remapFailed {
			out = append(out, fatal(ReasonRowRemapFailure, "row remapping failed (%d rows remapped for uncorrectable errors); the GPU has no spare rows left", v.remapUnc))
		}
		if v.remapPending {
			out = append(out, degraded(ReasonRowRemapPending, "row remapping pending (%d rows remapped for uncorrectable, %d for correctable errors); it takes effect at the next GPU reset", v.remapUnc, v.remapCorr))
		}
	case sigRetired:
		if v.retiredPending {
			out = append(out, degraded(ReasonRetiredPagesPending, "retired memory pages pending; they take effect at the next GPU reset"))
		}
	}
	return out
}

// deviceFindings judges ECC mode against the baseline and the InfoROM.
func deviceFindings(sig string, v values, rec *gpuRecord, degraded mk) []finding {
	switch {
	case sig == sigECCMode && v.eccCurrent:
		rec.ECCEnabled = true
	case sig == sigECCMode && rec.ECCEnabled:
		after := ""
		if v.eccPending {
			after = " (enabled again after the next reset)"
		}
		return []finding{degraded(ReasonECCDisabled, "ECC is disabled%s; it was enabled", after)}
	case sig == sigInfoROM && v.inforomBad:
		return []finding{degraded(ReasonInfoROMCorrupted, "the InfoROM failed validation (corrupted)")}
	}
	return nil
}

// sustainedFindings judges the signals held over the window: hardware
// slowdown by time, thermal and power violation by NVML's counters.
func (m *Monitor) sustainedFindings(g *gpuState, sig string, v values, now time.Time, degraded mk) []finding {
	cfg, win := m.cfg, m.cfg.window()
	if sig == sigClocks {
		names := slowdownNames(v.clockReasons)
		g.hist[sig] = g.hist[sig].add(point{at: now, on: len(names) > 0}, win)
		share := 100 * g.hist[sig].onFraction(now, win)
		if share <= cfg.SlowdownPercent {
			return nil
		}
		current := "none now"
		if len(names) > 0 {
			current = "now " + strings.Join(names, ", ")
		}
		return []finding{degraded(ReasonHardwareSlowdown, "clocks held down by hardware %.0f%% of the last %v, above %v%% (%s)", share, win, cfg.SlowdownPercent, current)}
	}
	n := v.thermal
	reason, limit, what := ReasonThermalViolation, cfg.ThermalViolationPercent, "thermal"
	if sig == sigPower {
		n, reason, limit, what = v.power, ReasonPowerViolation, cfg.PowerViolationPercent, "power"
	}
	g.hist[sig] = g.hist[sig].add(point{at: now, n: n}, win)
	share := 100 * float64(g.hist[sig].rise(now, win)) / float64(win)
	if share <= limit {
		return nil
	}
	return []finding{degraded(reason, "%s violation %.0f%% of the last %v, above %v%%", what, share, win, limit)}
}

// fabricFindings judges the GPU's registration with the NVLink fabric.
func fabricFindings(v values, fatal, degraded mk) []finding {
	var out []finding
	switch v.fabricState {
	case nvml.GPU_FABRIC_STATE_NOT_STARTED:
		out = append(out, fatal(ReasonFabricNotReady, "fabric registration has not started (is the fabric manager running?)"))
	case nvml.GPU_FABRIC_STATE_IN_PROGRESS:
		out = append(out, fatal(ReasonFabricNotReady, "fabric registration in progress"))
	case nvml.GPU_FABRIC_STATE_COMPLETED:
		if v.fabricStatus != nvml.SUCCESS {
			out = append(out, fatal(ReasonFabricNotReady, "fabric registration failed: %v", v.fabricStatus))
		}
	}
	if v.fabricHealthRead {
		field := func(shift uint32) uint32 { return v.fabricHealth >> shift & 0x3 }
		if field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW) == nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE {
			out = append(out, degraded(ReasonFabricDegraded, "the NVLink fabric reports degraded bandwidth"))
		}
		if field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY) == nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE {
			out = append(out, degraded(ReasonFabricDegraded, "the NVLink fabric reports an unhealthy route"))
		}
	}
	return out
}

// nvlinkFindings: a link seen up before that is down now is fatal; error
// counters rising faster than the limit degrade.
func (m *Monitor) nvlinkFindings(g *gpuState, rec *gpuRecord, v values, now time.Time, fatal, degraded mk) []finding {
	var down []string
	var errs uint64
	for _, l := range v.links {
		if l.up {
			if !slices.Contains(rec.NVLinkUp, l.link) {
				rec.NVLinkUp = append(rec.NVLinkUp, l.link)
				slices.Sort(rec.NVLinkUp)
			}
			errs += l.errors
		} else if slices.Contains(rec.NVLinkUp, l.link) {
			down = append(down, strconv.Itoa(l.link))
		}
	}
	var out []finding
	if len(down) > 0 {
		out = append(out, fatal(ReasonNVLinkDown, "NVLink %s down (%d of %d links seen up are down)", strings.Join(down, ", "), len(down), len(rec.NVLinkUp)))
	}
	win := m.cfg.window()
	g.hist[sigNVLink] = g.hist[sigNVLink].add(point{at: now, n: errs}, win)
	if limit := m.cfg.NVLinkErrorsPerMinute; limit > 0 {
		if rate := g.hist[sigNVLink].perMinute(now, win); rate > limit {
			out = append(out, degraded(ReasonNVLinkErrors, "NVLink replay, recovery and CRC errors rose %.0f a minute over the last %v, above %v", rate, win, limit))
		}
	}
	return out
}

// pcieFindings: a link narrower than its maximum, a generation below its
// maximum while the GPU is busy for half the window (an idle GPU lowers
// its generation to save power; without clock reasons busy is not known
// and the generation is not judged), or replays faster than the limit.
func (m *Monitor) pcieFindings(g *gpuState, v values, now time.Time, degraded mk) []finding {
	var out []finding
	win := m.cfg.window()
	if v.pcieMaxWidth > 0 && v.pcieWidth < v.pcieMaxWidth {
		out = append(out, degraded(ReasonPCIeDegraded, "PCIe link x%d, below its maximum x%d", v.pcieWidth, v.pcieMaxWidth))
	}
	busy := v.clocksRead && v.clockReasons&nvml.ClocksEventReasonGpuIdle == 0
	low := v.pcieMaxGen > 0 && v.pcieGen < v.pcieMaxGen && busy
	g.hist["pcie-gen"] = g.hist["pcie-gen"].add(point{at: now, on: low}, win)
	if g.hist["pcie-gen"].onFraction(now, win) > 0.5 {
		out = append(out, degraded(ReasonPCIeDegraded, "PCIe link at generation %d while busy, below its maximum %d, for more than half of the last %v", v.pcieGen, v.pcieMaxGen, win))
	}
	if v.pcieReplaysRead {
		g.hist["pcie-replays"] = g.hist["pcie-replays"].add(point{at: now, n: v.pcieReplays}, win)
		if limit := m.cfg.PCIeReplaysPerMinute; limit > 0 {
			if rate := g.hist["pcie-replays"].perMinute(now, win); rate > limit {
				out = append(out, degraded(ReasonPCIeDegraded, "PCIe replays rose %.1f a minute over the last %v, above %v", rate, win, limit))
			}
		}
	}
	return out
}
