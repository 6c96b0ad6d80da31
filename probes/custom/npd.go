package custom

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/selftaint/selftaint/probes/strict"
)

// The NPD custom plugin monitor's config file, field for field as
// node-problem-detector declares it (pkg/custompluginmonitor/types and
// pkg/types), so its files load unchanged.
type npdFile struct {
	Plugin           string          `json:"plugin"`
	PluginConfig     npdPluginConfig `json:"pluginConfig"`
	Source           string          `json:"source"`
	Conditions       []npdCondition  `json:"conditions"`
	Rules            []npdRule       `json:"rules"`
	MetricsReporting *bool           `json:"metricsReporting"`
}

type npdPluginConfig struct {
	InvokeInterval                          *string `json:"invoke_interval"`
	Timeout                                 *string `json:"timeout"`
	MaxOutputLength                         *int    `json:"max_output_length"`
	Concurrency                             *int    `json:"concurrency"`
	EnableMessageChangeBasedConditionUpdate *bool   `json:"enable_message_change_based_condition_update"`
	SkipInitialStatus                       *bool   `json:"skip_initial_status"`
}

type npdCondition struct {
	Type         string    `json:"type"`
	Status       string    `json:"status"`
	Transition   time.Time `json:"transition"`
	Reason       string    `json:"reason"`
	Message      string    `json:"message"`
	TaintEnabled bool      `json:"taintEnabled"`
	TaintKey     string    `json:"taintKey"`
	TaintValue   string    `json:"taintValue"`
	TaintEffect  string    `json:"taintEffect"`
}

type npdRule struct {
	Type           string   `json:"type"`
	Condition      string   `json:"condition"`
	Reason         string   `json:"reason"`
	Path           string   `json:"path"`
	Args           []string `json:"args"`
	Timeout        *string  `json:"timeout"`
	InvokeInterval *string  `json:"invoke_interval"`
}

// NPD rule types.
const (
	npdTemporary = "temporary"
	npdPermanent = "permanent"
)

// NPDOptions tune how NPD config files are read.
type NPDOptions struct {
	// PluginRoot, if set, is where the host's file system is mounted: an
	// absolute plugin path is run from under it, so a config naming
	// /home/kubernetes/bin/health-checker runs
	// PluginRoot/home/kubernetes/bin/health-checker, and messages still
	// name the path the file gives. Relative paths and bare names are
	// resolved as without it. The plugin itself runs in selftaint's file
	// system all the same: what it reads or runs by absolute path must be
	// there too.
	PluginRoot string
}

// NPDConfig is an NPD custom plugin monitor config, with NPD's defaults
// applied and its rules turned into conditions.
type NPDConfig struct {
	// Path is the file it was read from.
	Path string
	// Source is NPD's name for the monitor ("source").
	Source string
	// InvokeInterval and Timeout are pluginConfig's invoke_interval and
	// timeout: the rules' defaults.
	InvokeInterval time.Duration
	Timeout        time.Duration
	// MaxOutputLength and Concurrency are pluginConfig's; Options passes
	// them on.
	MaxOutputLength int
	Concurrency     int
	// EnableMessageChangeBasedConditionUpdate is pluginConfig's; every
	// condition carries it as MessageUpdates.
	EnableMessageChangeBasedConditionUpdate bool
	// SkipInitialStatus and MetricsReporting are carried over; they do
	// not change what selftaint does.
	SkipInitialStatus bool
	MetricsReporting  bool
	// Conditions are the "conditions" that have permanent rules, in file
	// order, each with its rules in file order, marked NPD. The first
	// also carries the file's temporary rules as its Events.
	Conditions []Condition
	// EventsOnly, for a file with temporary rules and no condition to
	// carry them (NPD's network-problem-monitor.json,
	// iptables-mode-monitor.json, windows-defender-monitor.json), is an
	// events-only condition (no Type) that runs them, marked NPD. Its
	// Name is EventsOnlyName of the file's path. Nil otherwise.
	EventsOnly *Condition
	// Warnings say what of the file selftaint does not act on, or acts
	// on where NPD would not: conditions without permanent rules, NPD's
	// own tainting, rule types NPD runs as permanent, and (from
	// LoadNPDConfig) plugins that are not there. Log them.
	Warnings []string

	// plugins is every rule's path as selftaint runs it, with the field
	// of the rule, for LoadNPDConfig's check.
	plugins []pluginAt
}

// pluginAt is one rule's plugin path and where the file gives it.
type pluginAt struct {
	field, path string
}

// ProbeConditions is what to build the file's probes from: its
// Conditions, then EventsOnly if set.
func (c *NPDConfig) ProbeConditions() []Condition {
	conds := append([]Condition(nil), c.Conditions...)
	if c.EventsOnly != nil {
		conds = append(conds, *c.EventsOnly)
	}
	return conds
}

// EventsOnlyName names the events-only condition of the NPD file at path,
// and so its probe (ProbeNamePrefix + the name): "npd:" and the file's
// base name without its extension, e.g. "npd:iptables-mode-monitor". It
// is stable across restarts and edits of the file, and never the name of
// a condition's probe: no condition type has a ':'. Two files of
// temporary rules only must not share a base name.
func EventsOnlyName(path string) string {
	base := filepath.Base(path)
	return "npd:" + strings.TrimSuffix(base, filepath.Ext(base))
}

// Options returns group options with the file's concurrency and maximum
// output length.
func (c *NPDConfig) Options() Options {
	return Options{Concurrency: c.Concurrency, MaxOutputLength: c.MaxOutputLength}
}

// LoadNPDConfig reads an NPD custom plugin monitor config file (see
// ParseNPDConfig). Where NPD refuses a file whose plugin is not there,
// selftaint loads it with a warning: running the plugin fails, and its
// condition says so (Unknown, ReasonPluginError), or its events do.
func LoadNPDConfig(path string, opts NPDOptions) (*NPDConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading NPD config: %w", err)
	}
	c, err := ParseNPDConfig(data, path, opts)
	if err != nil {
		return nil, err
	}
	for _, pl := range c.plugins {
		if err := pluginThere(pl.path); err != nil {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: %v; NPD refuses the file, selftaint loads it and reports the plugin's failure to run", pl.field, err))
		}
	}
	return c, nil
}

// pluginThere checks that path names a file, as running it looks it up:
// a bare name through $PATH, anything else from the working directory.
func pluginThere(path string) error {
	if !strings.ContainsRune(path, filepath.Separator) {
		_, err := exec.LookPath(path)
		return err
	}
	_, err := os.Stat(path)
	return err
}

// ParseNPDConfig parses an NPD custom plugin monitor config; path names it
// in errors, and its events-only probe if it has one (EventsOnlyName). It
// loads what NPD loads (NPD's CustomPluginConfig
// ApplyConfiguration and Validate), field names in errors:
//
//   - plugin must be "custom";
//   - pluginConfig.invoke_interval and a rule's invoke_interval must be
//     positive durations, and timeouts durations;
//   - a rule's timeout must not be above pluginConfig.timeout (it may be
//     above any interval);
//   - a permanent rule's condition must be one of "conditions";
//   - a rule's path must not be empty (NPD refuses paths that are not
//     there; LoadNPDConfig only warns, see there).
//
// It is stricter than NPD where NPD would load what it then cannot run or
// report: a key NPD does not declare (compared case-sensitively) or a key
// given twice is an error naming it by its path (the shared decoder of
// package strict), as are a timeout, concurrency or max_output_length that
// is not positive (NPD starts no plugin, hangs, or crashes), and an empty
// condition type or reason (NPD would publish an empty reason). Like NPD,
// it runs a rule whose type is neither "temporary" nor "permanent" as
// permanent, and of two conditions of one type uses the first; both with a
// warning.
//
// Permanent rules become their condition's Rules; temporary rules the
// first condition's Events, or, in a file without a condition, those of
// its EventsOnly condition, whose probe reports them and feeds no
// condition, as NPD turns them into Events and nothing else. Plugin paths
// are kept as written, under opts.PluginRoot when absolute, and resolved
// as NPD resolves them when run: a relative path against the working
// directory (not the config file's directory), a bare name through $PATH.
func ParseNPDConfig(data []byte, path string, opts NPDOptions) (*NPDConfig, error) {
	wrap := func(err error) error { return fmt.Errorf("NPD config %s: %w", path, err) }
	if err := logMonitorFile(data); err != nil {
		return nil, wrap(err)
	}
	var f npdFile
	if err := strict.JSON(data, &f); err != nil {
		return nil, wrap(err)
	}
	c, err := f.resolve(path, opts)
	if err != nil {
		return nil, wrap(err)
	}
	return c, nil
}

// LogMonitorFileError says a file given as a custom-plugin-monitor file is
// one of NPD's system-log-monitor files, which selftaint reads elsewhere
// (package logmon), so the user is told where it goes rather than which of
// its fields a custom-plugin-monitor file lacks.
type LogMonitorFileError struct {
	// Plugin is the file's "plugin" (kmsg, filelog, journald), or empty.
	Plugin string
	// Fields are the file's top-level fields only a system-log-monitor
	// file has, of logPath, lookback, delay and bufferSize, in that order.
	Fields []string
}

func (e *LogMonitorFileError) Error() string {
	var what []string
	if e.Plugin != "" {
		what = append(what, fmt.Sprintf("plugin %q", e.Plugin))
	}
	if len(e.Fields) > 0 {
		what = append(what, strings.Join(e.Fields, ", "))
	}
	return fmt.Sprintf("this is an NPD system-log-monitor file (%s), not a custom-plugin-monitor file", strings.Join(what, "; "))
}

// logMonitorFields are the top-level fields of NPD's system-log-monitor
// files (pkg/systemlogmonitor's MonitorConfig and WatcherConfig) that a
// custom-plugin-monitor file does not have.
func logMonitorFields() []string { return []string{"logPath", "lookback", "delay", "bufferSize"} }

// logMonitorFile returns a *LogMonitorFileError when data, a JSON object,
// is an NPD system-log-monitor file: its plugin is one of that monitor's
// (kmsg, filelog, journald) or it has fields only that monitor's files
// have. Anything else, JSON or not, is left to the strict decoding.
func logMonitorFile(data []byte) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return nil
	}
	e := &LogMonitorFileError{}
	var plugin string
	if raw, ok := top["plugin"]; ok && json.Unmarshal(raw, &plugin) == nil {
		switch plugin {
		case "kmsg", "filelog", "journald":
			e.Plugin = plugin
		}
	}
	for _, f := range logMonitorFields() {
		if _, ok := top[f]; ok {
			e.Fields = append(e.Fields, f)
		}
	}
	if e.Plugin == "" && len(e.Fields) == 0 {
		return nil
	}
	return e
}

// resolve applies NPD's defaults, checks the file and builds conditions.
func (f *npdFile) resolve(path string, opts NPDOptions) (*NPDConfig, error) {
	c := &NPDConfig{
		Path:             path,
		Source:           f.Source,
		InvokeInterval:   DefaultInterval,
		Timeout:          DefaultTimeout,
		MaxOutputLength:  DefaultMaxOutputLength,
		Concurrency:      DefaultConcurrency,
		MetricsReporting: true, // NPD's default
	}
	var errs problems
	if f.Plugin != "custom" {
		errs.add("plugin", "%q is not supported, only \"custom\"", f.Plugin)
	}
	f.PluginConfig.apply(c, &errs)
	if f.MetricsReporting != nil {
		c.MetricsReporting = *f.MetricsReporting
	}
	index := f.addConditions(c, &errs)
	temporary := f.addRules(c, index, opts, &errs)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c.Conditions = dropRuleless(c.Conditions, &c.Warnings)
	for i := range c.Conditions {
		c.Conditions[i].NPD = true
		c.Conditions[i].MessageUpdates = c.EnableMessageChangeBasedConditionUpdate
	}
	c.hostTemporary(temporary)
	return c, nil
}

// problems collects what is wrong with a file, in the order found.
type problems []error

// add records that field is wrong.
func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// duration parses s, when given, into *dst. It reports whether it did; a
// value that does not parse or is not positive is recorded against field
// (with why, when not positive) and leaves *dst alone.
func (p *problems) duration(field string, s *string, dst *time.Duration, why string) bool {
	if s == nil {
		return false
	}
	d, err := time.ParseDuration(*s)
	switch {
	case err != nil:
		p.add(field, "%v", err)
	case d <= 0:
		p.add(field, "%q must be positive%s", *s, why)
	default:
		*dst = d
		return true
	}
	return false
}

// positive copies v, when given, into *dst; a value that is not positive is
// recorded against field (with why) and leaves *dst alone.
func (p *problems) positive(field string, v *int, dst *int, why string) {
	switch {
	case v == nil:
	case *v <= 0:
		p.add(field, "%d must be positive%s", *v, why)
	default:
		*dst = *v
	}
}

// Why selftaint refuses values NPD loads.
const (
	whyTimeout = " (NPD loads it, then starts no plugin)"
	whyConc    = " (NPD loads it, then hangs or crashes)"
	whyOutput  = " (NPD loads it, then crashes or reports empty messages)"
)

// apply sets c's global settings from pluginConfig.
func (pc npdPluginConfig) apply(c *NPDConfig, errs *problems) {
	errs.duration("pluginConfig.invoke_interval", pc.InvokeInterval, &c.InvokeInterval, "")
	errs.duration("pluginConfig.timeout", pc.Timeout, &c.Timeout, whyTimeout)
	errs.positive("pluginConfig.max_output_length", pc.MaxOutputLength, &c.MaxOutputLength, whyOutput)
	errs.positive("pluginConfig.concurrency", pc.Concurrency, &c.Concurrency, whyConc)
	if pc.EnableMessageChangeBasedConditionUpdate != nil {
		c.EnableMessageChangeBasedConditionUpdate = *pc.EnableMessageChangeBasedConditionUpdate
	}
	if pc.SkipInitialStatus != nil {
		c.SkipInitialStatus = *pc.SkipInitialStatus
	}
}

// addConditions appends the file's conditions, without rules, to
// c.Conditions and returns their index by type.
func (f *npdFile) addConditions(c *NPDConfig, errs *problems) map[string]int {
	index := map[string]int{} // condition type -> c.Conditions index, before pruning
	at := map[string]int{}    // condition type -> its index in the file
	for i, cond := range f.Conditions {
		field := fmt.Sprintf("conditions[%d]", i)
		if cond.Type == "" {
			errs.add(field+".type", "must not be empty")
			continue
		}
		if j, dup := at[cond.Type]; dup {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s.type: %q is also conditions[%d]; NPD uses the first, and so does selftaint", field, cond.Type, j))
			continue
		}
		if cond.Reason == "" {
			errs.add(field+".reason", "must not be empty")
		}
		if cond.TaintEnabled {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s (%s): NPD's own tainting (taintEnabled) is ignored; selftaint taints nodes through its rules", field, cond.Type))
		}
		at[cond.Type] = i
		index[cond.Type] = len(c.Conditions)
		c.Conditions = append(c.Conditions, Condition{Type: cond.Type, Reason: cond.Reason, Message: cond.Message})
	}
	return index
}

// addRules adds the file's permanent rules to the conditions they name
// (index, from addConditions) and returns its temporary rules, with their
// fields.
func (f *npdFile) addRules(c *NPDConfig, index map[string]int, opts NPDOptions, errs *problems) []ruleAt {
	var temporary []ruleAt
	for i, r := range f.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		rule := r.resolve(field, c, opts, errs)
		c.plugins = append(c.plugins, pluginAt{field: field + ".path", path: rule.Path})
		if r.Reason == "" {
			errs.add(field+".reason", "must not be empty")
		}
		j, defined := index[r.Condition]
		switch r.Type {
		case npdTemporary:
			temporary = append(temporary, ruleAt{field: field, rule: rule})
			continue
		case npdPermanent:
			if !defined {
				errs.add(field+".condition", "%q is not defined in conditions", r.Condition)
				continue
			}
		default:
			// NPD's Validate checks only "permanent" rules' conditions,
			// and its monitor treats every type but "temporary" as
			// permanent.
			if !defined {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s.type: %q is neither %q nor %q, and its condition %q is not defined; NPD runs it to no effect, selftaint does not run it", field, r.Type, npdTemporary, npdPermanent, r.Condition))
				continue
			}
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s.type: %q is neither %q nor %q; NPD runs it as permanent, and so does selftaint", field, r.Type, npdTemporary, npdPermanent))
		}
		c.Conditions[j].Rules = append(c.Conditions[j].Rules, rule)
	}
	return temporary
}

// ruleAt is a rule and the field it comes from.
type ruleAt struct {
	field string
	rule  Rule
}

// resolve builds the rule at field with the file's interval and timeout
// as defaults, checking what every rule type needs.
func (r npdRule) resolve(field string, c *NPDConfig, opts NPDOptions, errs *problems) Rule {
	rule := Rule{Reason: r.Reason, Path: r.Path, Args: r.Args, Interval: c.InvokeInterval, Timeout: c.Timeout}
	if opts.PluginRoot != "" && filepath.IsAbs(r.Path) {
		rule.Name = rule.label()
		rule.Path = filepath.Join(opts.PluginRoot, r.Path)
	}
	if errs.duration(field+".timeout", r.Timeout, &rule.Timeout, whyTimeout) && rule.Timeout > c.Timeout {
		errs.add(field+".timeout", "%v is above pluginConfig.timeout %v", rule.Timeout, c.Timeout)
	}
	errs.duration(field+".invoke_interval", r.InvokeInterval, &rule.Interval, "")
	if r.Path == "" {
		errs.add(field+".path", "must not be empty")
	}
	return rule
}

// dropRuleless returns conds without the conditions that have no rules,
// in place, adding a warning for each to *warnings.
func dropRuleless(conds []Condition, warnings *[]string) []Condition {
	kept := conds[:0]
	for _, cond := range conds {
		if len(cond.Rules) == 0 {
			*warnings = append(*warnings, fmt.Sprintf("condition %s has no permanent rule; selftaint does not report it", cond.Type))
			continue
		}
		kept = append(kept, cond)
	}
	return kept
}

// hostTemporary gives the temporary rules to the first condition, whose
// probe runs them, or, when the file reports no condition, to an
// events-only condition of their own (EventsOnly).
func (c *NPDConfig) hostTemporary(temporary []ruleAt) {
	if len(temporary) == 0 {
		return
	}
	var host *Condition
	if len(c.Conditions) > 0 {
		host = &c.Conditions[0]
	} else {
		c.EventsOnly = &Condition{Name: EventsOnlyName(c.Path), NPD: true}
		host = c.EventsOnly
	}
	for _, t := range temporary {
		host.Events = append(host.Events, t.rule)
	}
}
