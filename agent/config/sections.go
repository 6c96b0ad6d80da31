package config

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/disk"
	"github.com/selftaint/selftaint/probes/gpu"
	"github.com/selftaint/selftaint/probes/memory"
	"github.com/selftaint/selftaint/probes/network"
	"github.com/selftaint/selftaint/probes/pid"
)

// The probe blocks' settings as registry sections (see Registry): each
// converts itself to its probe package's Config once, and both Validate
// and the build use that conversion, so validation is the package's.

// Base implements ProbeSettings.
func (m *MemoryProbe) Base() *Common { return &m.Common }

// Commons implements ProbeSettings.
func (m *MemoryProbe) Commons() []Common { return []Common{m.Common} }

// SetDefaults implements ProbeSettings.
func (m *MemoryProbe) SetDefaults() {
	defaultThreshold(&m.AvailableBelow, probes.Threshold{Value: 5, Percent: true})
	if m.PSISomeAvg10Above == nil {
		m.PSISomeAvg10Above = ptr(0.0)
	}
	if m.PSIFullAvg10Above == nil {
		m.PSIFullAvg10Above = ptr(0.0)
	}
	defaultDuration(&m.PSI.Some.Window, memory.WakeWindow)
	defaultDuration(&m.PSI.Full.Stall, 500*time.Millisecond)
	defaultDuration(&m.PSI.Full.Window, memory.WakeWindow)
}

func (m *MemoryProbe) packageConfig() memory.Config {
	return memory.Config{AvailableBelow: m.AvailableBelow.T, PSISomeAvg10Above: *m.PSISomeAvg10Above, PSIFullAvg10Above: *m.PSIFullAvg10Above,
		PSI: memory.StallRules{Some: m.PSI.Some.rule(), Full: m.PSI.Full.rule()}}
}

// psiWarnings name the stall rules whose window is not a multiple of
// memory.UnprivilegedWindowStep: valid, and armed where the agent has
// CAP_SYS_RESOURCE (selftaint check as root), but the kernel refuses it to
// the image (uid 65532, without it), which then judges the rule only on
// its interval.
func (m *MemoryProbe) psiWarnings() []string {
	if !m.IsEnabled() {
		return nil
	}
	var out []string
	for _, l := range []struct {
		name string
		s    PSIStall
	}{{"some", m.PSI.Some}, {"full", m.PSI.Full}} {
		if r := l.s.rule(); !r.IsZero() && r.Window%memory.UnprivilegedWindowStep != 0 {
			out = append(out, fmt.Sprintf("probes.memory.psi.%s.window: %v is not a multiple of %v, so the kernel arms its PSI trigger only for a process with CAP_SYS_RESOURCE, which the image (uid 65532) lacks: there the rule is judged on the probe's interval only, not on the trigger",
				l.name, r.Window, memory.UnprivilegedWindowStep))
		}
	}
	return out
}

func (s PSIStall) rule() memory.StallRule {
	return memory.StallRule{Stall: s.Stall.D, Window: s.Window.D}
}

// Validate implements ProbeSettings.
func (m *MemoryProbe) Validate(p *field.Path) field.ErrorList {
	errs := m.AvailableBelow.parseError(p.Child("availableBelow"))
	for _, l := range []struct {
		name string
		s    PSIStall
	}{{"some", m.PSI.Some}, {"full", m.PSI.Full}} {
		lp := p.Child("psi", l.name)
		errs = append(errs, l.s.Stall.parseError(lp.Child("stall"))...)
		errs = append(errs, l.s.Window.parseError(lp.Child("window"))...)
	}
	return append(errs, packageErrors(p, m, m.packageConfig().Validate())...)
}

// BuildHost implements HostBuilder.
func (m *MemoryProbe) BuildHost(env HostEnv) ([]probes.Probe, error) {
	return one(memory.New(m.packageConfig(), env.Host))
}

// Base implements ProbeSettings.
func (d *DiskProbe) Base() *Common { return &d.Common }

// Commons implements ProbeSettings.
func (d *DiskProbe) Commons() []Common { return []Common{d.Common} }

// SetDefaults implements ProbeSettings.
func (d *DiskProbe) SetDefaults() {
	defaultThreshold(&d.FreeBelow, probes.Threshold{Value: 10, Percent: true})
	defaultThreshold(&d.InodesFreeBelow, probes.Threshold{Value: 5, Percent: true})
}

func (d *DiskProbe) packageConfig() disk.Config {
	return disk.Config{Paths: d.Paths, FreeBelow: d.FreeBelow.T, InodesFreeBelow: d.InodesFreeBelow.T}
}

// Validate implements ProbeSettings.
func (d *DiskProbe) Validate(p *field.Path) field.ErrorList {
	errs := d.FreeBelow.parseError(p.Child("freeBelow"))
	errs = append(errs, d.InodesFreeBelow.parseError(p.Child("inodesFreeBelow"))...)
	return append(errs, packageErrors(p, d, d.packageConfig().Validate())...)
}

// BuildHost implements HostBuilder.
func (d *DiskProbe) BuildHost(env HostEnv) ([]probes.Probe, error) {
	return one(disk.New(d.packageConfig(), env.Host))
}

// Base implements ProbeSettings.
func (pc *PIDProbe) Base() *Common { return &pc.Common }

// Commons implements ProbeSettings.
func (pc *PIDProbe) Commons() []Common { return []Common{pc.Common} }

// SetDefaults implements ProbeSettings.
func (pc *PIDProbe) SetDefaults() {
	defaultThreshold(&pc.UsedAbove, probes.Threshold{Value: 90, Percent: true})
}

func (pc *PIDProbe) packageConfig() pid.Config { return pid.Config{UsedAbove: pc.UsedAbove.T} }

// Validate implements ProbeSettings.
func (pc *PIDProbe) Validate(p *field.Path) field.ErrorList {
	errs := pc.UsedAbove.parseError(p.Child("usedAbove"))
	return append(errs, packageErrors(p, pc, pc.packageConfig().Validate())...)
}

// BuildHost implements HostBuilder.
func (pc *PIDProbe) BuildHost(env HostEnv) ([]probes.Probe, error) {
	return one(pid.New(pc.packageConfig(), env.Host))
}

// Base implements ProbeSettings.
func (g *GPUProbe) Base() *Common { return &g.Common }

// Commons implements ProbeSettings: the fatal probe's, then the degraded
// one's (see degradedCommon).
func (g *GPUProbe) Commons() []Common { return []Common{g.Common, g.degradedCommon()} }

// SetDefaults implements ProbeSettings.
func (g *GPUProbe) SetDefaults() {
	if g.Degraded.Condition == "" {
		g.Degraded.Condition = DefaultGPUDegradedCondition
	}
	defaultDuration(&g.Degraded.For, time.Minute)
	defaultDuration(&g.Degraded.ClearAfter, 5*time.Minute)
	d := gpu.DefaultConfig()
	defaultDuration(&g.Sustained.Window, d.Window)
	for _, f := range []struct {
		p *(*float64)
		v float64
	}{
		{&g.Sustained.SlowdownPercent, d.SlowdownPercent},
		{&g.Sustained.ThermalViolationPercent, d.ThermalViolationPercent},
		{&g.Sustained.PowerViolationPercent, d.PowerViolationPercent},
		{&g.Sustained.PCIeReplaysPerMinute, d.PCIeReplaysPerMinute},
		{&g.Sustained.NVLinkErrorsPerMinute, d.NVLinkErrorsPerMinute},
	} {
		if *f.p == nil {
			v := f.v
			*f.p = &v
		}
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// PackageConfig is the probe's configuration for probes/gpu.
func (g *GPUProbe) PackageConfig() gpu.Config {
	c := gpu.DefaultConfig()
	c.Xids, c.SkipXids = g.Xids, g.SkipXids
	c.ECCUncorrectedAbove, c.IgnoreSlowdown, c.ExpectedGPUs = g.ECCUncorrectedAbove, g.IgnoreSlowdown, g.ExpectedGPUs
	c.Window = g.Sustained.Window.D
	c.SlowdownPercent, c.ThermalViolationPercent, c.PowerViolationPercent =
		deref(g.Sustained.SlowdownPercent), deref(g.Sustained.ThermalViolationPercent), deref(g.Sustained.PowerViolationPercent)
	c.PCIeReplaysPerMinute, c.NVLinkErrorsPerMinute = deref(g.Sustained.PCIeReplaysPerMinute), deref(g.Sustained.NVLinkErrorsPerMinute)
	return c
}

// Validate implements ProbeSettings.
func (g *GPUProbe) Validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for x, a := range g.Xids {
		if _, err := gpu.ParseAction(string(a)); err != nil {
			errs = append(errs, field.Invalid(p.Child("xids").Key(strconv.FormatUint(x, 10)), string(a), err.Error()))
		}
	}
	if g.ExpectedGPUs < 0 {
		errs = append(errs, field.Invalid(p.Child("expectedGPUs"), g.ExpectedGPUs, "must not be negative"))
	}
	sp := p.Child("sustained")
	if g.Sustained.Window.D <= 0 {
		errs = append(errs, field.Invalid(sp.Child("window"), g.Sustained.Window.D.String(), "must be positive"))
	}
	for _, f := range []struct {
		name string
		v    float64
		max  float64
	}{
		{"slowdownPercent", deref(g.Sustained.SlowdownPercent), 100},
		{"thermalViolationPercent", deref(g.Sustained.ThermalViolationPercent), 100},
		{"powerViolationPercent", deref(g.Sustained.PowerViolationPercent), 100},
		{"pcieReplaysPerMinute", deref(g.Sustained.PCIeReplaysPerMinute), math.MaxFloat64},
		{"nvlinkErrorsPerMinute", deref(g.Sustained.NVLinkErrorsPerMinute), math.MaxFloat64},
	} {
		if f.v < 0 || f.v > f.max || math.IsNaN(f.v) {
			errs = append(errs, field.Invalid(sp.Child(f.name), f.v, fmt.Sprintf("must be between 0 (off) and %v", f.max)))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if err := g.PackageConfig().Validate(); err != nil {
		return field.ErrorList{field.Invalid(p, field.OmitValueType{}, err.Error())}
	}
	return nil
}

// BuildNVML implements NVMLBuilder: a Monitor and its fatal and degraded
// probes over env.
func (g *GPUProbe) BuildNVML(env gpu.Env) ([]probes.Probe, io.Closer, error) {
	m, err := gpu.New(g.PackageConfig(), env)
	if err != nil {
		return nil, nil, err
	}
	return []probes.Probe{m.FatalProbe(), m.DegradedProbe()}, m, nil
}

// degradedCommon is the degraded GPU probe's settings: the fatal one's
// schedule, its own condition and damping.
func (g GPUProbe) degradedCommon() Common {
	d := g.Common
	d.Condition, d.For, d.ClearAfter = g.Degraded.Condition, g.Degraded.For, g.Degraded.ClearAfter
	return d
}

// Base implements ProbeSettings.
func (n *NetworkProbe) Base() *Common { return &n.Common }

// Commons implements ProbeSettings.
func (n *NetworkProbe) Commons() []Common { return []Common{n.Common} }

// SetDefaults implements ProbeSettings.
func (n *NetworkProbe) SetDefaults() {
	if n.DefaultRoute == "" {
		n.DefaultRoute = string(network.RouteAny)
	}
	if n.CheckCNIConfig == nil {
		n.CheckCNIConfig = ptr(true)
	}
	if n.CNIConfDir == "" {
		n.CNIConfDir = network.DefaultCNIConfDir
	}
	if n.CheckAPIServer == nil {
		n.CheckAPIServer = ptr(true)
	}
	defaultDuration(&n.TargetTimeout, network.DefaultTargetTimeout)
}

// packageConfig is the network probe's config; apiServer is the API
// server's "host:port" to check, empty for none.
func (n *NetworkProbe) packageConfig(apiServer string) network.Config {
	cfg := network.Config{
		Interfaces:    n.Interfaces,
		DefaultRoute:  network.RouteRequirement(n.DefaultRoute),
		SkipCNIConfig: !*n.CheckCNIConfig,
		CNIConfDir:    n.CNIConfDir,
		TargetTimeout: n.TargetTimeout.D,
	}
	if *n.CheckAPIServer {
		cfg.APIServer = apiServer
	}
	for _, t := range n.Targets {
		tg := network.Target{Kind: network.TargetTCP, Address: t.TCP, Timeout: t.Timeout.D}
		if t.DNS != "" {
			tg.Kind, tg.Address = network.TargetDNS, t.DNS
		}
		cfg.Targets = append(cfg.Targets, tg)
	}
	return cfg
}

// Validate implements ProbeSettings. Which of tcp and dns a target gives
// is the config file's shape, checked here; the rest is the package's.
func (n *NetworkProbe) Validate(p *field.Path) field.ErrorList {
	errs := n.TargetTimeout.validate(p.Child("targetTimeout"), false)
	for i, tg := range n.Targets {
		tp := p.Child("targets").Index(i)
		errs = append(errs, tg.Timeout.validate(tp.Child("timeout"), false)...)
		if (tg.TCP == "") == (tg.DNS == "") {
			errs = append(errs, field.Invalid(tp, fmt.Sprintf("tcp %q dns %q", tg.TCP, tg.DNS), "give exactly one of tcp and dns"))
		}
	}
	return append(errs, packageErrors(p, n, n.packageConfig("").Validate(), n.targetField)...)
}

// targetAddress is the network package's path to a target's address.
var targetAddress = regexp.MustCompile(`^Targets\[([0-9]+)\]\.Address$`)

// targetField maps the network package's Targets[i].Address to the field
// the address came from: Targets[i].TCP or Targets[i].DNS.
func (n *NetworkProbe) targetField(goPath string) string {
	m := targetAddress.FindStringSubmatch(goPath)
	if m == nil {
		return goPath
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= len(n.Targets) {
		return goPath
	}
	if n.Targets[i].DNS != "" {
		return "Targets[" + m[1] + "].DNS"
	}
	return "Targets[" + m[1] + "].TCP"
}

// BuildHost implements HostBuilder.
func (n *NetworkProbe) BuildHost(env HostEnv) ([]probes.Probe, error) {
	return one(network.New(n.packageConfig(env.APIServer), env.Host))
}

// one is a constructor's probe as a list.
func one[P probes.Probe](p P, err error) ([]probes.Probe, error) {
	if err != nil {
		return nil, err
	}
	return []probes.Probe{p}, nil
}
