// Package logmon is selftaint's kernel- and system-log monitor: it loads
// node-problem-detector's system-log-monitor configs unchanged (plugin
// "kmsg", "filelog" or "journald"), reads the log they name, and turns
// matching lines into conditions (permanent rules) and Events (temporary
// rules) as NPD does, so an operator can drop NPD's log monitor and keep its
// files. Matching is a pure function of the lines read (see Matcher); the
// sources only deliver Lines.
package logmon

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/selftaint/selftaint/probes/strict"
)

// The system-log-monitor config file, field for field as node-problem-
// detector declares it (pkg/systemlogmonitor MonitorConfig with its
// embedded logwatchers/types WatcherConfig, pkg/systemlogmonitor/types Rule
// and pkg/types Condition), so its files decode unchanged.
type npdLogFile struct {
	Plugin           string            `json:"plugin"`
	PluginConfig     map[string]string `json:"pluginConfig"`
	SkipList         []string          `json:"skipList"`
	LogPath          string            `json:"logPath"`
	Lookback         string            `json:"lookback"`
	Delay            string            `json:"delay"`
	BufferSize       int               `json:"bufferSize"`
	Source           string            `json:"source"`
	Conditions       []npdCondition    `json:"conditions"`
	Rules            []npdRule         `json:"rules"`
	MetricsReporting *bool             `json:"metricsReporting"`
}

type npdCondition struct {
	Type       string    `json:"type"`
	Status     string    `json:"status"`
	Transition time.Time `json:"transition"`
	Reason     string    `json:"reason"`
	Message    string    `json:"message"`
}

type npdRule struct {
	Type                          string `json:"type"`
	Condition                     string `json:"condition"`
	Reason                        string `json:"reason"`
	Pattern                       string `json:"pattern"`
	PatternGeneratedMessageSuffix string `json:"patternGeneratedMessageSuffix"`
}

// Plugins NPD's system-log monitor knows.
const (
	PluginKmsg     = "kmsg"
	PluginFilelog  = "filelog"
	PluginJournald = "journald"
)

// NPD's defaults (pkg/systemlogmonitor ApplyDefaultConfiguration).
const (
	DefaultBufferSize = 10
	// DefaultKmsgPath is where the kmsg plugin reads when logPath is empty
	// (NPD's kmsg watcher always reads /dev/kmsg).
	DefaultKmsgPath = "/dev/kmsg"
)

// Config is one system-log-monitor file, checked, with NPD's defaults
// applied and its patterns compiled.
type Config struct {
	// Path is the file it was read from.
	Path string
	// Plugin is PluginKmsg, PluginFilelog or PluginJournald.
	Plugin string
	// LogPath is the device, file or journal directory to read, as the
	// file gives it (DefaultKmsgPath for kmsg when empty).
	LogPath string
	// Lookback is how far back lines still count when reading starts;
	// Delay skips lines from the first Delay after boot (NPD's
	// util.GetStartTime).
	Lookback, Delay time.Duration
	// BufferSize is how many lines a multi-line pattern can span.
	BufferSize int
	// Source is NPD's name for the monitor.
	Source string
	// SkipList: a line containing any of these is not matched.
	SkipList []string
	// Filelog is how to cut a filelog line into time and message; nil for
	// other plugins.
	Filelog *LineFormat
	// JournalSource is pluginConfig.source of a journald file: the
	// SYSLOG_IDENTIFIER to read.
	JournalSource string
	// Conditions are the file's conditions with their default (healthy)
	// reason and message, in file order.
	Conditions []Condition
	// Rules are the file's rules in file order.
	Rules []Rule
	// MetricsReporting is carried over; it does not change what
	// selftaint does.
	MetricsReporting bool
	// Warnings say what selftaint runs differently from the file's
	// wording, as NPD would; log them.
	Warnings []string
}

// LineFormat is a filelog plugin's pluginConfig.
type LineFormat struct {
	// Timestamp and Message find the time and the message in a line; the
	// last submatch is used, as NPD does.
	Timestamp, Message *regexp.Regexp
	// TimestampFormat is the Go time layout of the timestamp.
	TimestampFormat string
}

// Condition is one of the file's conditions, as it reads when healthy.
type Condition struct {
	Type, Reason, Message string
}

// Rule is one of the file's rules.
type Rule struct {
	// Permanent rules set Condition; the others are temporary and give
	// Events.
	Permanent bool
	Condition string
	Reason    string
	// Pattern is the rule's pattern as written; match compiles it
	// anchored to the end of the buffer, as NPD does.
	Pattern string
	// Suffix is patternGeneratedMessageSuffix.
	Suffix string

	match *regexp.Regexp
}

// LoadConfig reads a system-log-monitor config file (see ParseConfig).
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading NPD log config: %w", err)
	}
	return ParseConfig(data, path)
}

// ParseConfig parses a system-log-monitor config; path names it in errors.
// It loads what NPD loads (NPD's NewLogMonitorOrDie: decoding,
// ApplyDefaultConfiguration, compileRules, GetLogWatcherOrDie and the
// watchers' constructors), each error naming its JSON field:
//
//   - plugin must be "kmsg", "filelog" or "journald";
//   - every rule's pattern must compile (Go RE2 syntax, as NPD's);
//   - lookback and delay, when given, must parse as Go durations;
//   - bufferSize 0 means 10; a negative one is refused (NPD panics);
//   - a filelog file's pluginConfig timestamp and message must compile.
//
// It is stricter where NPD would load what it then cannot run or report
// (each listed in the package tests' deliberate differences): a key NPD does
// not declare (case-sensitively) or given twice is an error naming its path
// (package strict); a filelog file without logPath or with an empty
// pluginConfig timestamp, message or timestampFormat (NPD logs an error and
// then parses no line); a journald file without pluginConfig.source (NPD
// loads it and its watcher fails to start); a negative lookback or delay
// (NPD would skip every line until that time in the future); an empty
// condition type or reason, or a condition type given twice; a permanent
// rule whose condition is not one of "conditions" (NPD silently never
// applies it); a rule with an empty reason. Like NPD, it runs a rule whose
// type is neither "temporary" nor "permanent" as permanent, with a warning.
func ParseConfig(data []byte, path string) (*Config, error) {
	wrap := func(err error) error { return fmt.Errorf("NPD log config %s: %w", path, err) }
	var f npdLogFile
	if err := strict.JSON(data, &f); err != nil {
		return nil, wrap(err)
	}
	c, err := f.resolve(path)
	if err != nil {
		return nil, wrap(err)
	}
	return c, nil
}

// problems collects what is wrong with a file, in the order found.
type problems []error

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// duration parses s, when not empty, into *dst; negative values are refused.
func (p *problems) duration(field, s string, dst *time.Duration) {
	if s == "" {
		return
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.add(field, "%v", err)
	case d < 0:
		p.add(field, "%q must not be negative (NPD loads it, then skips every line until that time in the future)", s)
	default:
		*dst = d
	}
}

// compile compiles expr, recording an error against field.
func (p *problems) compile(field, expr string) *regexp.Regexp {
	re, err := regexp.Compile(expr)
	if err != nil {
		p.add(field, "%v", err)
		return nil
	}
	return re
}

func (f *npdLogFile) resolve(path string) (*Config, error) {
	c := &Config{
		Path:             path,
		Plugin:           f.Plugin,
		LogPath:          f.LogPath,
		BufferSize:       f.BufferSize,
		Source:           f.Source,
		SkipList:         f.SkipList,
		MetricsReporting: f.MetricsReporting == nil || *f.MetricsReporting,
	}
	var errs problems
	errs.duration("lookback", f.Lookback, &c.Lookback)
	errs.duration("delay", f.Delay, &c.Delay)
	switch {
	case c.BufferSize == 0:
		c.BufferSize = DefaultBufferSize
	case c.BufferSize < 0:
		errs.add("bufferSize", "%d must not be negative (NPD panics)", c.BufferSize)
	}
	f.plugin(c, &errs)
	types := f.conditions(c, &errs)
	f.rules(c, types, &errs)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// plugin checks plugin, logPath and pluginConfig.
func (f *npdLogFile) plugin(c *Config, errs *problems) {
	switch f.Plugin {
	case PluginKmsg:
		if c.LogPath == "" {
			c.LogPath = DefaultKmsgPath
		}
	case PluginFilelog:
		if c.LogPath == "" {
			errs.add("logPath", "must not be empty for plugin filelog (NPD loads it, then cannot open the log)")
		}
		c.Filelog = lineFormat(f.PluginConfig, errs)
	case PluginJournald:
		c.JournalSource = f.PluginConfig["source"]
		if c.JournalSource == "" {
			errs.add("pluginConfig.source", "must not be empty for plugin journald (NPD loads it, then its watcher fails)")
		}
	default:
		errs.add("plugin", "%q is not supported, only %q, %q or %q", f.Plugin, PluginKmsg, PluginFilelog, PluginJournald)
	}
}

// lineFormat reads a filelog pluginConfig.
func lineFormat(pc map[string]string, errs *problems) *LineFormat {
	lf := &LineFormat{TimestampFormat: pc["timestampFormat"]}
	for _, k := range []string{"timestamp", "message", "timestampFormat"} {
		if pc[k] == "" {
			errs.add("pluginConfig."+k, "must not be empty for plugin filelog (NPD loads it, then parses no line)")
		}
	}
	lf.Timestamp = errs.compile("pluginConfig.timestamp", pc["timestamp"])
	lf.Message = errs.compile("pluginConfig.message", pc["message"])
	return lf
}

// conditions checks and copies the file's conditions; it returns their
// types.
func (f *npdLogFile) conditions(c *Config, errs *problems) map[string]bool {
	types := map[string]bool{}
	for i, cond := range f.Conditions {
		field := fmt.Sprintf("conditions[%d]", i)
		switch {
		case cond.Type == "":
			errs.add(field+".type", "must not be empty")
			continue
		case types[cond.Type]:
			errs.add(field+".type", "%q is given twice", cond.Type)
			continue
		}
		if cond.Reason == "" {
			errs.add(field+".reason", "must not be empty (it is the healthy condition's reason)")
		}
		types[cond.Type] = true
		c.Conditions = append(c.Conditions, Condition{Type: cond.Type, Reason: cond.Reason, Message: cond.Message})
	}
	return types
}

// rules checks, compiles and copies the file's rules.
func (f *npdLogFile) rules(c *Config, types map[string]bool, errs *problems) {
	for i, r := range f.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		rule := Rule{
			Permanent: r.Type != "temporary",
			Condition: r.Condition,
			Reason:    r.Reason,
			Pattern:   r.Pattern,
			Suffix:    r.PatternGeneratedMessageSuffix,
		}
		if r.Type != "temporary" && r.Type != "permanent" {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s.type: %q is neither \"temporary\" nor \"permanent\"; run as permanent, as NPD does", field, r.Type))
		}
		if rule.Reason == "" {
			errs.add(field+".reason", "must not be empty")
		}
		if rule.Permanent && !types[rule.Condition] {
			errs.add(field+".condition", "%q is not one of conditions (NPD loads it, then never applies the rule)", rule.Condition)
		}
		if errs.compile(field+".pattern", rule.Pattern) != nil {
			// NPD anchors the pattern to the end of the buffer.
			rule.match = errs.compile(field+".pattern", rule.Pattern+`\z`)
		}
		c.Rules = append(c.Rules, rule)
	}
}
