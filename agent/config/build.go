package config

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/disk"
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
	return []namedProbe{{memory.Name, c.Probes.Memory.Common}, {disk.Name, c.Probes.Disk.Common}, {pid.Name, c.Probes.PID.Common}}
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
