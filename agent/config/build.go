package config

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/hardware"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/custom"
	"github.com/selftaint/selftaint/probes/disk"
	"github.com/selftaint/selftaint/probes/gpu"
	"github.com/selftaint/selftaint/probes/memory"
	"github.com/selftaint/selftaint/probes/network"
	"github.com/selftaint/selftaint/probes/pid"
)

// ProbeSpecs builds the enabled host probes (memory, disk, PID, network),
// reading the host under host.Root. apiServer is the API server's
// "host:port" for the network probe to check, empty for none.
func (c *Config) ProbeSpecs(host probes.Host, apiServer string) ([]agent.ProbeSpec, error) {
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
	if n := c.Probes.Network; n.IsEnabled() {
		p, err := network.New(c.networkConfig(apiServer), host)
		if err := add(n.Common, p, err); err != nil {
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
		{network.Name, c.Probes.Network.Common},
	}
}

// CheckProbeSpecs builds the checks users bring: the custom checks, sharing
// one concurrency limit, and each NPD config's permanent rules, with the
// file's own limits as NPD runs them. What an NPD file asks that selftaint
// does not do (temporary rules, NPD's own tainting) is logged.
func (c *Config) CheckProbeSpecs(log *slog.Logger) ([]agent.ProbeSpec, error) {
	var specs []agent.ProbeSpec
	fed := map[string]string{}
	add := func(g *custom.Group, conds []custom.Condition, from string) error {
		ps, err := g.NewProbes(conds)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		for _, p := range ps {
			if prev, dup := fed[p.Condition()]; dup {
				return fmt.Errorf("%s: condition %s is also fed by %s", from, p.Condition(), prev)
			}
			fed[p.Condition()] = from
			// NPD updates a permanent condition as soon as a plugin
			// reports: no damping.
			specs = append(specs, agent.ProbeSpec{Entry: p.Entry(), Condition: corev1.NodeConditionType(p.Condition())})
		}
		return nil
	}
	if len(c.Checks.Custom) > 0 {
		conds, err := custom.ConditionsFromChecks(c.customChecks())
		if err != nil {
			return nil, fmt.Errorf("checks.custom: %w", err)
		}
		g, err := custom.NewGroup(custom.Options{Concurrency: c.Checks.Concurrency, MaxOutputLength: c.Checks.MaxOutputLength})
		if err != nil {
			return nil, fmt.Errorf("checks: %w", err)
		}
		if err := add(g, conds, "checks.custom"); err != nil {
			return nil, err
		}
	}
	for i, path := range c.Checks.NPDConfigs {
		from := fmt.Sprintf("checks.npdConfigs[%d] (%s)", i, path)
		npd, err := custom.LoadNPDConfig(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		for _, w := range npd.Warnings {
			log.Warn("NPD config: not acted on", "file", path, "warning", w)
		}
		for _, cond := range npd.Conditions {
			for _, msg := range validateConditionType(field.NewPath(from), corev1.NodeConditionType(cond.Type)) {
				return nil, fmt.Errorf("condition %q: %s", cond.Type, msg.Error())
			}
		}
		g, err := custom.NewGroup(npd.Options())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		if err := add(g, npd.Conditions, from); err != nil {
			return nil, err
		}
	}
	return specs, nil
}

// InitOptions is the agent's initialization settings, or nil when off.
func (c *Config) InitOptions() *agent.InitOptions {
	in := c.Initialization
	if !in.IsEnabled() {
		return nil
	}
	return &agent.InitOptions{
		Condition:  in.Condition,
		Taint:      corev1.Taint{Key: in.Taint.Key, Value: in.Taint.Value, Effect: in.Taint.Effect},
		Continuous: in.Mode == InitContinuous,
		Required:   in.RequiredConditions,
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
	seen := map[corev1.NodeConditionType]bool{}
	for _, ck := range c.Checks.Custom {
		if seen[ck.Condition] {
			continue
		}
		seen[ck.Condition] = true
		specs = append(specs, agent.ProbeSpec{
			Entry:     probes.Entry{Probe: newProbe(custom.ProbeNamePrefix + string(ck.Condition)), Interval: ck.Interval.D, Timeout: ck.Timeout.D},
			Condition: ck.Condition,
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
	for _, ck := range c.Checks.Custom {
		conditions[ck.Condition] = true
		probeConditions[custom.ProbeNamePrefix+string(ck.Condition)] = ck.Condition
	}
	return conditions, probeConditions
}
