package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/hardware"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/custom"
	"github.com/selftaint/selftaint/probes/gpu"
	"github.com/selftaint/selftaint/probes/logmon"
)

// ProbeSpecs builds the enabled probes that read the host (memory, disk,
// PID, network: every registry section whose settings are a HostBuilder),
// reading the host under host.Root. apiServer is the API server's
// "host:port" for the network probe to check, empty for none.
func (c *Config) ProbeSpecs(host probes.Host, apiServer string) ([]agent.ProbeSpec, error) {
	var specs []agent.ProbeSpec
	for _, s := range c.registry() {
		set := s.Settings(&c.Probes)
		b, ok := set.(HostBuilder)
		if !ok || !set.Base().IsEnabled() {
			continue
		}
		ps, err := b.BuildHost(HostEnv{Host: host, APIServer: apiServer})
		if err != nil {
			return nil, fmt.Errorf("building probe: %w", err)
		}
		specs = append(specs, probeSpecs(ps, set.Commons())...)
	}
	return specs, nil
}

// probeSpecs pairs probes with their settings, in order.
func probeSpecs(ps []probes.Probe, commons []Common) []agent.ProbeSpec {
	specs := make([]agent.ProbeSpec, 0, len(ps))
	for i, p := range ps {
		cm := commons[i]
		specs = append(specs, agent.ProbeSpec{
			Entry:     probes.Entry{Probe: p, Interval: cm.Interval.D, Timeout: cm.Timeout.D},
			Condition: cm.Condition,
			Damping:   cm.Damping(),
		})
	}
	return specs
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

// probeList is every probe in the registry with its common settings, in
// the registry's order.
func (c *Config) probeList() []namedProbe {
	var out []namedProbe
	for _, cp := range c.registry().configured(&c.Probes) {
		out = append(out, namedProbe{cp.target.Name, cp.c})
	}
	return out
}

// CheckProbeSpecs builds the checks users bring: the custom checks, sharing
// one concurrency limit, and each NPD config's rules (permanent rules feed
// conditions, temporary rules make Events), with the file's own limits as
// NPD runs them. A file of temporary rules only becomes an events-only
// spec (no Condition) whose probe is named after the file: two such files
// must not share a base name. An NPD condition with
// enable_message_change_based_condition_update gets MessageUpdates. What
// an NPD file asks that selftaint does not do (NPD's own tainting) or does
// differently is logged.
//
// The NPD system-log-monitor files (checks.npdLogConfigs) are built too,
// with their logs under the root "/"; their sources start only when the
// probes first run or watch, so this is enough to know their probes and
// conditions. CheckProbeSpecsOn builds them to run.
func (c *Config) CheckProbeSpecs(log *slog.Logger) ([]agent.ProbeSpec, error) {
	specs, _, err := c.CheckProbeSpecsOn(probes.Host{}, log)
	return specs, err
}

// CheckProbeSpecsOn is CheckProbeSpecs with the system-log monitors
// reading host's kernel log and boot (or checks.kmsgPath); closing what it
// returns stops their sources. Hand it to GPUProbeSpecsOn for the GPU
// probe to take the kernel's Xid lines from them.
func (c *Config) CheckProbeSpecsOn(host probes.Host, log *slog.Logger) ([]agent.ProbeSpec, *LogMonitors, error) {
	sb := specBuilder{fed: map[corev1.NodeConditionType]string{}, named: map[string]string{}}
	if err := c.customSpecs(&sb, log); err != nil {
		return nil, nil, err
	}
	logs := &LogMonitors{host: host, kmsgPath: c.Checks.KmsgPath, xids: map[string]*kernelXids{}}
	for i, path := range c.Checks.NPDLogConfigs {
		from := fmt.Sprintf("checks.npdLogConfigs[%d] (%s)", i, path)
		ps, mon, err := c.logMonitorSpecs(path, host, logs, log)
		if err != nil {
			_ = logs.Close()
			return nil, nil, fmt.Errorf("%s: %w", from, err)
		}
		logs.closers = append(logs.closers, mon)
		for _, p := range ps {
			if err := sb.add(p, from); err != nil {
				_ = logs.Close()
				return nil, nil, err
			}
		}
	}
	if err := c.rulesFedByFiles(sb.fed); err != nil {
		_ = logs.Close()
		return nil, nil, err
	}
	return sb.specs, logs, nil
}

// rulesFedByFiles refuses a rule whose condition the config took on trust
// from the NPD files (Config.fromFiles) when none of them feeds it (fed:
// the checks' conditions, by who feeds them).
func (c *Config) rulesFedByFiles(fed map[corev1.NodeConditionType]string) error {
	var missing []string
	for cond, rule := range c.fromFiles {
		if _, ok := fed[cond]; !ok {
			missing = append(missing, fmt.Sprintf("%s: condition %q is fed by no probe, check or NPD file (checks.npdConfigs, checks.npdLogConfigs)", rule, cond))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return errors.New(strings.Join(missing, "; "))
}

// LogMonitors are the system-log monitors CheckProbeSpecsOn built, reading
// one host. Close stops their sources.
type LogMonitors struct {
	host     probes.Host
	kmsgPath string // checks.kmsgPath
	// xids hands the NVRM Xid lines of each kmsg log read to the GPU
	// probe: one feed per log, on the first monitor that reads it, so a
	// line two monitors read is filed once.
	xids    map[string]*kernelXids
	closers closeAll
}

// Close implements io.Closer.
func (l *LogMonitors) Close() error { return l.closers.Close() }

// addFeed keeps k, the Xid feed of a kmsg monitor reading path, unless
// another monitor's already feeds from path (k then never feeds).
func (l *LogMonitors) addFeed(path string, k *kernelXids) {
	if k != nil && l.xids[path] == nil {
		l.xids[path] = k
	}
}

// kernelPath is the kernel log the GPU probe reads: checks.kmsgPath, else
// the host's /dev/kmsg, as the kmsg log monitors resolve it.
func (l *LogMonitors) kernelPath() string {
	if l.kmsgPath != "" {
		return l.kmsgPath
	}
	return l.host.Path(logmon.DefaultKmsgPath)
}

// kernelXids hands the NVRM Xid lines of a kernel log to the GPU probe
// (gpu.ParseNVRMXid, then KernelXid), once it is built: the log monitors
// are built first, and their sources start only when the agent runs.
type kernelXids struct {
	to atomic.Pointer[kernelXidSink]
}

// kernelXidSink is what takes kernel Xids: the GPU monitor.
type kernelXidSink interface {
	KernelXid(gpu.KernelXid)
}

// tap is a log monitor's Tap: it files an NVRM Xid line, stamped with the
// line's time, with the GPU probe. It does not block (KernelXid makes no
// NVML call).
func (k *kernelXids) tap(l logmon.Line) {
	to := k.to.Load()
	if to == nil || !strings.Contains(l.Message, "NVRM: Xid") {
		return
	}
	x, ok := gpu.ParseNVRMXid(l.Message)
	if !ok {
		return
	}
	x.Time = l.Time
	(*to).KernelXid(x)
}

// specBuilder gathers the checks' specs, each condition fed from one
// place and each events-only probe named once.
type specBuilder struct {
	specs []agent.ProbeSpec
	fed   map[corev1.NodeConditionType]string // condition -> where it comes from
	named map[string]string                   // events-only probe -> where it comes from
}

// add adds s, from where it is configured, unless its condition or
// events-only name is taken.
func (sb *specBuilder) add(s agent.ProbeSpec, from string) error {
	if s.EventsOnly() {
		name := s.Entry.Probe.Name()
		if prev, dup := sb.named[name]; dup {
			return fmt.Errorf("%s: its events-only probe %s, named after the file, is also %s's: give the files different names", from, name, prev)
		}
		sb.named[name] = from
	} else {
		if prev, dup := sb.fed[s.Condition]; dup {
			return fmt.Errorf("%s: condition %s is also fed by %s", from, s.Condition, prev)
		}
		sb.fed[s.Condition] = from
	}
	sb.specs = append(sb.specs, s)
	return nil
}

// customSpecs adds the custom checks' and the NPD custom-plugin files'
// specs.
func (c *Config) customSpecs(sb *specBuilder, log *slog.Logger) error {
	// npd: the conditions are an NPD file's, whose change Events carry
	// their reasons as NPD's do (ProbeSpec.NPDReasons).
	add := func(g *custom.Group, conds []custom.Condition, from string, npd bool) error {
		ps, err := g.NewProbes(conds)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		for _, p := range ps {
			// NPD updates a permanent condition as soon as a plugin
			// reports: no damping.
			s := agent.ProbeSpec{Entry: p.Entry(), Condition: corev1.NodeConditionType(p.Condition()), MessageUpdates: p.MessageUpdates(), NPDReasons: npd}
			if err := sb.add(s, from); err != nil {
				return err
			}
		}
		return nil
	}
	if len(c.Checks.Custom) > 0 {
		conds, err := custom.ConditionsFromChecks(c.Checks.customChecks())
		if err != nil {
			return fmt.Errorf("checks.custom: %w", err)
		}
		g, err := custom.NewGroup(custom.Options{Concurrency: c.Checks.Concurrency, MaxOutputLength: c.Checks.MaxOutputLength})
		if err != nil {
			return fmt.Errorf("checks: %w", err)
		}
		if err := add(g, conds, "checks.custom", false); err != nil {
			return err
		}
	}
	for i, path := range c.Checks.NPDConfigs {
		from := fmt.Sprintf("checks.npdConfigs[%d] (%s)", i, path)
		npd, err := custom.LoadNPDConfig(path, custom.NPDOptions{PluginRoot: c.Checks.NPDPluginRoot})
		if lm := (*custom.LogMonitorFileError)(nil); errors.As(err, &lm) {
			return fmt.Errorf("%s: %w: put it under checks.npdLogConfigs", from, err)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		for _, w := range npd.Warnings {
			log.Warn("NPD config: read differently from NPD", "file", path, "warning", w)
		}
		for _, cond := range npd.Conditions {
			for _, msg := range validateConditionType(field.NewPath(from), corev1.NodeConditionType(cond.Type)) {
				return fmt.Errorf("condition %q: %s", cond.Type, msg.Error())
			}
		}
		g, err := custom.NewGroup(npd.Options())
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		if err := add(g, npd.ProbeConditions(), from, true); err != nil {
			return err
		}
	}
	return nil
}

// logMonitorSpecs builds one system-log-monitor file's probes: one per
// condition, the first carrying the file's Events, or one events-only
// probe for a file without conditions. NPD sets a log monitor's
// conditions as soon as a line matches: no damping.
func (c *Config) logMonitorSpecs(path string, host probes.Host, logs *LogMonitors, log *slog.Logger) ([]agent.ProbeSpec, *logmon.Monitor, error) {
	cfg, err := logmon.LoadConfig(path)
	if err != nil {
		return nil, nil, err
	}
	for _, w := range cfg.Warnings {
		log.Warn("NPD log config: read differently from NPD", "file", path, "warning", w)
	}
	for _, cond := range cfg.Conditions {
		if msgs := validateConditionType(field.NewPath("conditions"), corev1.NodeConditionType(cond.Type)); len(msgs) > 0 {
			return nil, nil, fmt.Errorf("condition %q: %s", cond.Type, msgs[0].Error())
		}
	}
	opts := logmon.Options{Host: host, Path: c.Checks.KmsgPath}
	var xids *kernelXids
	if cfg.Plugin == logmon.PluginKmsg {
		xids = &kernelXids{}
		opts.Tap = xids.tap
	}
	mon, err := logmon.New(cfg, opts)
	if err != nil {
		return nil, nil, err
	}
	logs.addFeed(mon.Path(), xids)
	var specs []agent.ProbeSpec
	for _, p := range mon.Probes() {
		specs = append(specs, agent.ProbeSpec{Entry: p.Entry(), Condition: corev1.NodeConditionType(p.Condition()), NPDReasons: true})
	}
	return specs, mon, nil
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

// GPUProbeSpecs builds the probes that read NVML (the two GPU probes:
// every registry section whose settings are an NVMLBuilder) over NVML as
// env reaches it, or nothing when they are disabled. The caller closes
// what is returned (nil when nothing is); with env.Open set that shuts
// NVML down too.
func (c *Config) GPUProbeSpecs(env gpu.Env) ([]agent.ProbeSpec, io.Closer, error) {
	return c.GPUProbeSpecsOn(env, nil)
}

// GPUKernelLogName names the GPU probe's own kernel-log reader: its
// events-only probe is logmon-gpu-kernel-log.
const GPUKernelLogName = "gpu-kernel-log"

// GPUProbeSpecsOn is GPUProbeSpecs with the GPU probe also taking Xids
// from the kernel's NVRM lines (probes.gpu.kernelLog, default on): from the
// kmsg log monitor of logs that reads the kernel log (checks.kmsgPath or
// the host's /dev/kmsg), else from a reader of its own on logs' host. That
// reader is a log monitor without rules whose events-only probe
// (logmon-gpu-kernel-log) is among the specs returned: it says when the
// kernel log cannot be read (Unknown, LogReadError) or overran, while
// NVML's Xid events count all the same. With logs nil, or kernelLog
// false, the probe hears NVML's Xid events only.
func (c *Config) GPUProbeSpecsOn(env gpu.Env, logs *LogMonitors) ([]agent.ProbeSpec, io.Closer, error) {
	var specs []agent.ProbeSpec
	var closers closeAll
	for _, s := range c.registry() {
		set := s.Settings(&c.Probes)
		b, ok := set.(NVMLBuilder)
		if !ok || !set.Base().IsEnabled() {
			continue
		}
		ps, closer, err := b.BuildNVML(env)
		if err != nil {
			_ = closers.Close()
			return nil, nil, fmt.Errorf("building the %s probe: %w", s.Key, err)
		}
		specs = append(specs, probeSpecs(ps, set.Commons())...)
		if kl := c.Probes.GPU.KernelLog; kl != nil && !*kl {
			// NVML's Xid events only.
		} else if sink, ok := closer.(kernelXidSink); ok && logs != nil {
			spec, reader, err := logs.feedGPU(sink, kl != nil)
			if err != nil {
				_ = closer.Close()
				_ = closers.Close()
				return nil, nil, fmt.Errorf("the %s probe's kernel log: %w", s.Key, err)
			}
			if reader != nil {
				specs = append(specs, spec)
				closer = withKernelReader(closer, reader)
			}
		}
		if closer != nil {
			closers = append(closers, closer)
		}
	}
	switch len(closers) {
	case 0:
		return specs, nil, nil
	case 1:
		return specs, closers[0], nil // the GPU monitor itself, which counts GPUs for the inventory
	}
	return specs, closers, nil
}

// feedGPU hands the kernel's NVRM Xid lines to sink: from the kmsg log
// monitor that reads the kernel log, or else, if own, from a reader of its
// own, returned with its events-only spec for the caller to run and close.
func (l *LogMonitors) feedGPU(sink kernelXidSink, own bool) (agent.ProbeSpec, io.Closer, error) {
	if k := l.xids[l.kernelPath()]; k != nil {
		k.to.Store(&sink)
		return agent.ProbeSpec{}, nil, nil
	}
	if !own {
		return agent.ProbeSpec{}, nil, nil
	}
	k := &kernelXids{}
	k.to.Store(&sink)
	mon, err := logmon.New(logmon.TapConfig(GPUKernelLogName), logmon.Options{Host: l.host, Path: l.kmsgPath, Tap: k.tap})
	if err != nil {
		return agent.ProbeSpec{}, nil, err
	}
	return agent.ProbeSpec{Entry: mon.Probes()[0].Entry()}, mon, nil
}

// kernelReaderCloser is the GPU monitor with its own kernel-log reader: it
// counts GPUs as the monitor does, and closing it stops both.
type kernelReaderCloser struct {
	GPUCounter
	io.Closer
}

// withKernelReader is closer (the GPU monitor) that also closes reader,
// still a GPUCounter where closer is one.
func withKernelReader(closer, reader io.Closer) io.Closer {
	both := closeAll{closer, reader}
	if counter, ok := closer.(GPUCounter); ok {
		return kernelReaderCloser{GPUCounter: counter, Closer: both}
	}
	return both
}

// closeAll closes each, in reverse order.
type closeAll []io.Closer

// Close implements io.Closer.
func (cs closeAll) Close() error {
	var errs []error
	for i := len(cs) - 1; i >= 0; i-- {
		errs = append(errs, cs[i].Close())
	}
	return errors.Join(errs...)
}

// GPUCounter counts the node's NVIDIA GPUs for the inventory: how many,
// a detail naming them, or an error (the last good inventory is then
// kept). gpu.Monitor and hardware.Counter are GPUCounters; both bound how
// long a count may wait on NVML.
type GPUCounter interface {
	CountGPUs(ctx context.Context) (n int, detail string, err error)
}

// Inventory is the node's special hardware as the config asks to see it:
// NVIDIA GPUs as gpus counts them (none when gpus is nil) and PCI devices
// by the rules, read under host. Devices whose sysfs files are unreadable
// are logged (once per distinct problem) and left out; the rest still
// count.
func (c *Config) Inventory(host probes.Host, gpus GPUCounter, log *slog.Logger) agent.Inventory {
	h := c.Hardware
	rules := make([]hardware.PCIRule, len(h.PCI))
	actions := map[string]HardwareAction{}
	for i, r := range h.PCI {
		rules[i] = hardware.PCIRule{Resource: r.Resource, Vendor: r.Vendor, Device: r.Device, Class: r.Class}
		actions[r.Resource] = r.HardwareAction
	}
	var lastProblem string
	return agent.InventoryFunc(func(ctx context.Context) ([]agent.Resource, error) {
		var out []agent.Resource
		res := func(name string, a HardwareAction, n int, detail string) agent.Resource {
			return agent.Resource{Name: corev1.ResourceName(name), Count: int64(n), Advertise: *a.Advertise, Taint: *a.Taint, Label: *a.Label, Detail: detail}
		}
		if gpus != nil {
			n, detail, err := gpus.CountGPUs(ctx)
			if err != nil {
				return nil, err
			}
			out = append(out, res(h.GPU.Resource, h.GPU, n, detail))
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
