package config

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/hardware"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/disk"
	"github.com/selftaint/selftaint/probes/gpu"
	"github.com/selftaint/selftaint/probes/memory"
	"github.com/selftaint/selftaint/probes/pid"
)

// ProbeSpecs builds the enabled probes, reading the host under host.Root.
func (c *Config) ProbeSpecs(host probes.Host) ([]agent.ProbeSpec, error) {
	var specs []agent.ProbeSpec
	add := func(cm Common, p probes.Probe, err error) error {
		if err != nil {
			return fmt.Errorf("building probe: %w", err)
		}
		specs = append(specs, agent.ProbeSpec{
			Entry:     probes.Entry{Probe: p, Interval: cm.Interval.D, Timeout: cm.Timeout.D},
			Condition: cm.Condition,
			Damping:   cm.Damping(),
		})
		return nil
	}
	if m := c.Probes.Memory; m.IsEnabled() {
		p, err := memory.New(memory.Config{
			AvailableBelow:    m.AvailableBelow.T,
			PSISomeAvg10Above: *m.PSISomeAvg10Above,
			PSIFullAvg10Above: *m.PSIFullAvg10Above,
		}, host)
		if err := add(m.Common, p, err); err != nil {
			return nil, err
		}
	}
	if d := c.Probes.Disk; d.IsEnabled() {
		p, err := disk.New(disk.Config{Paths: d.Paths, FreeBelow: d.FreeBelow.T, InodesFreeBelow: d.InodesFreeBelow.T}, host)
		if err := add(d.Common, p, err); err != nil {
			return nil, err
		}
	}
	if pc := c.Probes.PID; pc.IsEnabled() {
		p, err := pid.New(pid.Config{UsedAbove: pc.UsedAbove.T}, host)
		if err := add(pc.Common, p, err); err != nil {
			return nil, err
		}
	}
	return specs, nil
}

// FaultOptions returns the agent's fault injection options.
func (c *Config) FaultOptions() agent.FaultOptions {
	return agent.FaultOptions{Disabled: !c.Faults.IsEnabled(), MaxDuration: c.Faults.MaxDuration.D}
}

// namedProbe is an enabled or disabled probe's name and common settings.
type namedProbe struct {
	name string
	c    Common
}

// probeList is every probe with its common settings, in a stable order.
func (c *Config) probeList() []namedProbe {
	return []namedProbe{
		{memory.Name, c.Probes.Memory.Common}, {disk.Name, c.Probes.Disk.Common}, {pid.Name, c.Probes.PID.Common},
		{gpu.NameFatal, c.Probes.GPU.Common}, {gpu.NameDegraded, c.Probes.GPU.degradedCommon()},
	}
}

// degradedCommon is the degraded GPU probe's settings: the fatal one's
// schedule, its own condition and damping.
func (g GPUProbe) degradedCommon() Common {
	d := g.Common
	d.Condition, d.For, d.ClearAfter = g.Degraded.Condition, g.Degraded.For, g.Degraded.ClearAfter
	return d
}

// GPUProbeSpecs builds the two GPU probes over an initialized NVML, or
// nothing when the GPU probe is disabled or lib is nil (no driver). The
// caller closes the Monitor, then shuts NVML down.
func (c *Config) GPUProbeSpecs(lib nvml.Interface) ([]agent.ProbeSpec, *gpu.Monitor, error) {
	g := c.Probes.GPU
	if lib == nil || !g.IsEnabled() {
		return nil, nil, nil
	}
	m, err := gpu.New(gpu.Config{SkipXids: g.SkipXids, ECCUncorrectedAbove: g.ECCUncorrectedAbove, IgnoreSlowdown: g.IgnoreSlowdown}, lib)
	if err != nil {
		return nil, nil, fmt.Errorf("building the GPU probe: %w", err)
	}
	spec := func(p probes.Probe, cm Common) agent.ProbeSpec {
		return agent.ProbeSpec{
			Entry:     probes.Entry{Probe: p, Interval: cm.Interval.D, Timeout: cm.Timeout.D},
			Condition: cm.Condition,
			Damping:   cm.Damping(),
		}
	}
	return []agent.ProbeSpec{spec(m.FatalProbe(), g.Common), spec(m.DegradedProbe(), g.degradedCommon())}, m, nil
}

// Inventory is the node's special hardware as the config asks to see it:
// NVIDIA GPUs through lib (none when lib is nil) and PCI devices by the
// rules, read under host. Devices whose sysfs files are unreadable are
// logged (once per distinct problem) and left out; the rest still count.
func (c *Config) Inventory(host probes.Host, lib nvml.Interface, log *slog.Logger) agent.Inventory {
	h := c.Hardware
	rules := make([]hardware.PCIRule, len(h.PCI))
	actions := map[string]HardwareAction{}
	for i, r := range h.PCI {
		rules[i] = hardware.PCIRule{Resource: r.Resource, Vendor: r.Vendor, Device: r.Device, Class: r.Class}
		actions[r.Resource] = r.HardwareAction
	}
	var lastProblem string
	return agent.InventoryFunc(func(context.Context) ([]agent.Resource, error) {
		var out []agent.Resource
		res := func(name string, a HardwareAction, n int, detail string) agent.Resource {
			return agent.Resource{Name: corev1.ResourceName(name), Count: int64(n), Advertise: *a.Advertise, Taint: *a.Taint, Label: *a.Label, Detail: detail}
		}
		if lib != nil {
			gpus, err := hardware.GPUs(lib)
			if err != nil {
				return nil, fmt.Errorf("counting GPUs: %w", err)
			}
			out = append(out, res(h.GPU.Resource, h.GPU, len(gpus), gpuDetail(gpus)))
		}
		if len(rules) > 0 {
			scan, err := hardware.ScanPCI(host, rules)
			if err != nil {
				return nil, fmt.Errorf("scanning PCI devices: %w", err)
			}
			if err := scan.Err(); err != nil && err.Error() != lastProblem {
				log.Warn("some PCI devices could not be read; counting the others", "err", err)
				lastProblem = err.Error()
			}
			for _, r := range scan.Resources {
				out = append(out, res(r.Name, actions[r.Name], r.Count(), pciDetail(r.Devices)))
			}
		}
		return out, nil
	})
}

func gpuDetail(gpus []hardware.GPU) string {
	names := make([]string, 0, len(gpus))
	for _, g := range gpus {
		names = append(names, fmt.Sprintf("%d:%s", g.Index, g.Name))
	}
	return strings.Join(names, ", ")
}

func pciDetail(devs []hardware.PCIDevice) string {
	addrs := make([]string, 0, len(devs))
	for _, d := range devs {
		addrs = append(addrs, d.Address)
	}
	return strings.Join(addrs, ", ")
}

// SimulatedProbeSpecs builds, for each enabled probe, a spec with the same
// name, condition, schedule and damping whose probe newProbe makes instead
// of one that reads the host. Virtual nodes use it: their conditions and
// taints follow the same config, their machine is imaginary.
func (c *Config) SimulatedProbeSpecs(newProbe func(name string) probes.Probe) []agent.ProbeSpec {
	var specs []agent.ProbeSpec
	for _, p := range c.probeList() {
		if !p.c.IsEnabled() {
			continue
		}
		specs = append(specs, agent.ProbeSpec{
			Entry:     probes.Entry{Probe: newProbe(p.name), Interval: p.c.Interval.D, Timeout: p.c.Timeout.D},
			Condition: p.c.Condition,
			Damping:   p.c.Damping(),
		})
	}
	return specs
}

// FaultTargets returns what a fault may name with this config: the
// conditions of the enabled probes, and the enabled probes by name.
func (c *Config) FaultTargets() (conditions map[corev1.NodeConditionType]bool, probeConditions map[string]corev1.NodeConditionType) {
	conditions = map[corev1.NodeConditionType]bool{}
	probeConditions = map[string]corev1.NodeConditionType{}
	for _, p := range c.probeList() {
		if p.c.IsEnabled() {
			conditions[p.c.Condition] = true
			probeConditions[p.name] = p.c.Condition
		}
	}
	return conditions, probeConditions
}
