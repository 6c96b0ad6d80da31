package config

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/disk"
	"github.com/selftaint/selftaint/probes/gpu"
	"github.com/selftaint/selftaint/probes/memory"
	"github.com/selftaint/selftaint/probes/network"
	"github.com/selftaint/selftaint/probes/pid"
)

// Registry is the probe registry: every block under probes: in the config
// file, in the order its probes are listed, built and given default rules.
// Everything that lists probes derives from it: defaults, validation, the
// probes built on a host and simulated on virtual nodes, fault targets,
// default rules, ownership, `selftaint fault --help`, and (by a test) the
// README. DefaultRegistry builds the one selftaint uses; a test may append
// a section of its own.
type Registry []ProbeSection

// ProbeSection is one block under probes: and the probes it configures.
type ProbeSection struct {
	// Key is the block's key under probes: ("memory"); its settings'
	// field paths start probes.<Key>.
	Key string
	// Probes are the probes the block configures, the first fed by the
	// block's own Common; each is a fault target by its name.
	Probes []ProbeTarget
	// Defaults are the block's Common defaults: schedule and damping. Its
	// condition defaults to Probes[0].Condition.
	Defaults Schedule
	// Settings is the block's settings inside ps.
	Settings func(ps *Probes) ProbeSettings
}

// ProbeTarget is one probe as the rest of selftaint names it.
type ProbeTarget struct {
	// Name is the probe's name: a fault target (`fault inject --condition
	// <Name>`), its name in `selftaint check` and in metrics.
	Name string
	// Condition is the condition type it feeds by default.
	Condition corev1.NodeConditionType
	// Taint is the default rule's taint while Condition is True.
	Taint TaintSpec
	// Field is where the probe's condition and damping are set, below the
	// block ("degraded" for probes.gpu.degraded); empty for the block's
	// own Common.
	Field string
}

// Schedule is a probe's default schedule and damping.
type Schedule struct {
	Interval, Timeout, For, ClearAfter time.Duration
}

// hostSchedule is the memory, disk, PID and network probes' schedule.
func hostSchedule() Schedule {
	return Schedule{Interval: 10 * time.Second, Timeout: 5 * time.Second, For: 30 * time.Second, ClearAfter: 2 * time.Minute}
}

// ProbeSettings is one block's settings in the config.
type ProbeSettings interface {
	// Base is the block's Common: enabled, schedule, and the first
	// probe's condition and damping. It is defaulted and validated from
	// the section.
	Base() *Common
	// SetDefaults fills in the block's own settings the file left out.
	SetDefaults()
	// Validate checks the block's own settings, delegating to the probe
	// package's validation of its Config (see packageErrors); p is
	// probes.<key>.
	Validate(p *field.Path) field.ErrorList
	// Commons are the settings of each probe, in ProbeSection.Probes order.
	Commons() []Common
}

// HostEnv is what probes that read the host are built with.
type HostEnv struct {
	// Host is the host root.
	Host probes.Host
	// APIServer is the API server's "host:port" for the network probe to
	// check, empty for none.
	APIServer string
}

// HostBuilder is ProbeSettings of probes that read the host.
type HostBuilder interface {
	// BuildHost builds the block's probes, in ProbeSection.Probes order.
	BuildHost(env HostEnv) ([]probes.Probe, error)
}

// NVMLBuilder is ProbeSettings of probes that read NVML (the GPU's).
type NVMLBuilder interface {
	// BuildNVML builds the block's probes, in ProbeSection.Probes order,
	// over NVML as env reaches it, and what to close when they are no
	// longer run.
	BuildNVML(env gpu.Env) ([]probes.Probe, io.Closer, error)
}

// DefaultRegistry is selftaint's probe registry. A new probe goes here:
// one line naming its block, probes, schedule and settings (a field of
// Probes whose type implements ProbeSettings and HostBuilder or
// NVMLBuilder), and a section in the README.
func DefaultRegistry() Registry {
	rule := func(key string, effect corev1.TaintEffect) TaintSpec { return TaintSpec{Key: key, Effect: effect} }
	ns, pns := corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule
	return Registry{
		{Key: "memory", Defaults: hostSchedule(), Settings: func(ps *Probes) ProbeSettings { return &ps.Memory },
			Probes: []ProbeTarget{{Name: memory.Name, Condition: DefaultMemoryCondition, Taint: rule("selftaint.io/memory-pressure", ns)}}},
		{Key: "disk", Defaults: hostSchedule(), Settings: func(ps *Probes) ProbeSettings { return &ps.Disk },
			Probes: []ProbeTarget{{Name: disk.Name, Condition: DefaultDiskCondition, Taint: rule("selftaint.io/disk-pressure", ns)}}},
		{Key: "pid", Defaults: hostSchedule(), Settings: func(ps *Probes) ProbeSettings { return &ps.PID },
			Probes: []ProbeTarget{{Name: pid.Name, Condition: DefaultPIDCondition, Taint: rule("selftaint.io/pid-pressure", ns)}}},
		// A GPU that fell off the bus must stop taking pods in seconds.
		{Key: "gpu", Defaults: Schedule{Interval: 5 * time.Second, Timeout: 3 * time.Second, ClearAfter: 5 * time.Minute},
			Settings: func(ps *Probes) ProbeSettings { return &ps.GPU },
			Probes: []ProbeTarget{
				{Name: gpu.NameFatal, Condition: DefaultGPUCondition, Taint: rule("selftaint.io/gpu-failure", ns)},
				{Name: gpu.NameDegraded, Condition: DefaultGPUDegradedCondition, Taint: rule("selftaint.io/gpu-degraded", pns), Field: "degraded"},
			}},
		{Key: "network", Defaults: hostSchedule(), Settings: func(ps *Probes) ProbeSettings { return &ps.Network },
			Probes: []ProbeTarget{{Name: network.Name, Condition: DefaultNetworkCondition, Taint: rule("selftaint.io/network-unavailable", ns)}}},
	}
}

// Targets is every probe of every section, in order.
func (r Registry) Targets() []ProbeTarget {
	var out []ProbeTarget
	for _, s := range r {
		out = append(out, s.Probes...)
	}
	return out
}

// DefaultRules taints while each probe's default condition is True, with
// the probe's default taint.
func (r Registry) DefaultRules() []Rule {
	var out []Rule
	for _, t := range r.Targets() {
		rl := Rule{Condition: t.Condition, Status: corev1.ConditionTrue}
		rl.Taint.Key, rl.Taint.Value, rl.Taint.Effect = t.Taint.Key, t.Taint.Value, t.Taint.Effect
		out = append(out, rl)
	}
	return out
}

// FaultTargetHelp lists the probes as fault targets, one a line with the
// condition each feeds by default ("  memory  SelftaintMemoryPressure"),
// for `selftaint fault --help`.
func (r Registry) FaultTargetHelp() string {
	width := 0
	for _, t := range r.Targets() {
		width = max(width, len(t.Name))
	}
	var b strings.Builder
	for _, t := range r.Targets() {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, t.Name, t.Condition)
	}
	return b.String()
}

// ProbeNames is the probes' names, comma-separated, for help text.
func (r Registry) ProbeNames() string {
	var names []string
	for _, t := range r.Targets() {
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}

// setDefaults fills in every block's settings.
func (r Registry) setDefaults(ps *Probes) {
	for _, s := range r {
		set := s.Settings(ps)
		d := s.Defaults
		defaultCommon(set.Base(), commonDefaults{condition: s.Probes[0].Condition, interval: d.Interval, timeout: d.Timeout, forD: d.For, clearAfter: d.ClearAfter})
		set.SetDefaults()
	}
}

// configuredProbe is one probe of a block as configured.
type configuredProbe struct {
	target ProbeTarget
	c      Common
	// path is where its condition and damping are set.
	path *field.Path
}

// configured is every probe of every block as configured in ps, in order.
func (r Registry) configured(ps *Probes) []configuredProbe {
	var out []configuredProbe
	for _, s := range r {
		p := field.NewPath("probes", s.Key)
		for i, c := range s.Settings(ps).Commons() {
			cp := configuredProbe{target: s.Probes[i], c: c, path: p}
			if f := s.Probes[i].Field; f != "" {
				cp.path = p.Child(f)
			}
			out = append(out, cp)
		}
	}
	return out
}

// validate checks every block: its schedule, each probe's condition (also
// against conds, which it adds them to) and damping, and the block's own
// settings. A probe's condition is added to known even when the probe is
// disabled: a rule may name it, and just never fires.
func (r Registry) validate(ps *Probes, conds map[corev1.NodeConditionType]*field.Path, known map[corev1.NodeConditionType]bool) field.ErrorList {
	var errs field.ErrorList
	for _, s := range r {
		set := s.Settings(ps)
		p := field.NewPath("probes", s.Key)
		errs = append(errs, set.Base().validateSchedule(p)...)
		errs = append(errs, set.Validate(p)...)
	}
	for _, cp := range r.configured(ps) {
		errs = append(errs, cp.c.For.validate(cp.path.Child("for"), true)...)
		errs = append(errs, cp.c.ClearAfter.validate(cp.path.Child("clearAfter"), true)...)
		cond := cp.path.Child("condition")
		errs = append(errs, validateConditionType(cond, cp.c.Condition)...)
		if prev, dup := conds[cp.c.Condition]; dup {
			errs = append(errs, field.Duplicate(cond, fmt.Sprintf("%s (also %s)", cp.c.Condition, prev)))
		}
		conds[cp.c.Condition] = cond
		known[cp.c.Condition] = true
	}
	return errs
}

// validateSchedule checks interval and timeout.
func (c Common) validateSchedule(p *field.Path) field.ErrorList {
	errs := c.Interval.validate(p.Child("interval"), false)
	errs = append(errs, c.Timeout.validate(p.Child("timeout"), false)...)
	if c.Interval.err == nil && c.Timeout.err == nil && c.Interval.D > 0 && c.Timeout.D >= c.Interval.D {
		errs = append(errs, field.Invalid(p.Child("timeout"), c.Timeout.D.String(),
			fmt.Sprintf("must be below interval (%s), so runs never overlap", c.Interval.D)))
	}
	return errs
}

// packageErrors reports err, what a probe package's Config.Validate
// returned for settings (a pointer to the block's settings struct, at p),
// with field paths: each of a *probes.ConfigError's fields is found in
// settings by its Go field name, so a block's fields that a probe
// package validates must have the Go names of the package's Config fields,
// or rename, when given, must map the package's Go path to the block's
// ("Targets[0].Address" to "Targets[0].TCP"). What cannot be found keeps
// its Go name in the message; a test keeps every reachable one found.
func packageErrors(p *field.Path, settings any, err error, rename ...func(goPath string) string) field.ErrorList {
	if err == nil {
		return nil
	}
	var ce *probes.ConfigError
	if !errors.As(err, &ce) {
		return field.ErrorList{field.Invalid(p, field.OmitValueType{}, err.Error())}
	}
	var errs field.ErrorList
	for _, f := range ce.Fields {
		goPath := f.Field
		for _, r := range rename {
			goPath = r(goPath)
		}
		fp, rest := yamlPath(p, reflect.TypeOf(settings), goPath)
		detail := f.Detail
		if rest != "" {
			detail = rest + ": " + detail
		}
		errs = append(errs, field.Invalid(fp, field.OmitValueType{}, detail))
	}
	return errs
}

// yamlPath follows goPath ("Targets[0].Address") through t's fields by
// their Go names and returns the path by their JSON names, and what of
// goPath it could not follow.
func yamlPath(p *field.Path, t reflect.Type, goPath string) (*field.Path, string) {
	rest := goPath
	for rest != "" {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if strings.HasPrefix(rest, "[") {
			end := strings.Index(rest, "]")
			i, err := strconv.Atoi(rest[1:max(end, 1)])
			if end < 0 || err != nil || t.Kind() != reflect.Slice {
				return p, rest
			}
			p, t, rest = p.Index(i), t.Elem(), strings.TrimPrefix(rest[end+1:], ".")
			continue
		}
		name, tail := rest, ""
		if i := strings.IndexAny(rest, ".["); i >= 0 {
			name, tail = rest[:i], strings.TrimPrefix(rest[i:], ".")
		}
		if t.Kind() != reflect.Struct {
			return p, rest
		}
		sf, ok := t.FieldByName(name)
		jsonName, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if !ok || jsonName == "" || jsonName == "-" {
			return p, rest
		}
		p, t, rest = p.Child(jsonName), sf.Type, tail
	}
	return p, ""
}

// checkRef is a custom check as the custom package names it: Checks[3].
var checkRef = regexp.MustCompile(`\bChecks\[([0-9]+)\]`)

// customCheckErrors reports err, what custom.ConditionsFromChecks returned
// for the checks at cp, one error per problem at its field. The custom
// package names fields by custom.Check's Go names ("Checks[0].Timeout:
// ..."), which CustomCheck shares, so each maps onto the file's names
// (checks.custom[0].timeout), a check named in a message as well. A
// problem at a path already in have (the config's own checks found it)
// is not repeated.
func customCheckErrors(cp *field.Path, err error, have field.ErrorList) field.ErrorList {
	custom := cp.Child("custom")
	seen := map[string]bool{}
	for _, e := range have {
		seen[e.Field] = true
	}
	var errs field.ErrorList
	for _, leaf := range leafErrors(err) {
		msg := leaf.Error()
		fp, detail := custom, msg
		if goPath, rest, ok := strings.Cut(msg, ": "); ok && checkRef.MatchString(goPath) {
			if p, left := yamlPath(cp, reflect.TypeOf(Checks{}), "Custom"+strings.TrimPrefix(goPath, "Checks")); left == "" {
				fp, detail = p, rest
			}
		}
		if seen[fp.String()] {
			continue
		}
		detail = checkRef.ReplaceAllString(detail, custom.String()+"[$1]")
		errs = append(errs, field.Invalid(fp, field.OmitValueType{}, detail))
	}
	return errs
}

// leafErrors is the errors err is made of: those errors.Join joined, and
// for an error wrapping one other, what that one is made of (the wrapper
// only adds context the field path gives).
func leafErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	if u := errors.Unwrap(err); u != nil {
		return leafErrors(u)
	}
	return []error{err}
}
