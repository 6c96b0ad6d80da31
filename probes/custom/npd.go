package custom

import (
	"errors"
	"fmt"
	"os"
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

// NPDConfig is an NPD custom plugin monitor config, with NPD's defaults
// applied and its permanent rules turned into conditions.
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
	// EnableMessageChangeBasedConditionUpdate, SkipInitialStatus and
	// MetricsReporting are carried over for the agent to honour or
	// ignore; they do not change how checks run.
	EnableMessageChangeBasedConditionUpdate bool
	SkipInitialStatus                       bool
	MetricsReporting                        bool
	// Conditions are the "conditions" that have permanent rules, in file
	// order, each with its rules in file order.
	Conditions []Condition
	// Warnings say what of the file selftaint does not act on: temporary
	// rules (NPD turns them into events; selftaint makes conditions
	// only), conditions without permanent rules, and NPD's own tainting.
	// Log them.
	Warnings []string
}

// Options returns group options with the file's concurrency and maximum
// output length.
func (c *NPDConfig) Options() Options {
	return Options{Concurrency: c.Concurrency, MaxOutputLength: c.MaxOutputLength}
}

// LoadNPDConfig reads an NPD custom plugin monitor config file.
func LoadNPDConfig(path string) (*NPDConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading NPD config: %w", err)
	}
	return ParseNPDConfig(data, path)
}

// ParseNPDConfig parses an NPD custom plugin monitor config; path names it
// in errors. It is strict where NPD is lenient: a key NPD does not declare
// (compared case-sensitively) or a key given twice is an error naming it
// by its path (the shared decoder of package strict), as are a rule type
// other than "temporary" or "permanent", a permanent rule without a path,
// a reason or a defined condition, a rule timeout above the global one
// (NPD's own check) and timeouts not below the intervals they run at.
//
// Plugin paths are kept as written and resolved as NPD resolves them when
// it runs them: a relative path against the working directory (not the
// config file's directory), a bare name through $PATH. Paths are not
// checked here: a missing plugin makes its condition Unknown, naming it.
func ParseNPDConfig(data []byte, path string) (*NPDConfig, error) {
	wrap := func(err error) error { return fmt.Errorf("NPD config %s: %w", path, err) }
	var f npdFile
	if err := strict.JSON(data, &f); err != nil {
		return nil, wrap(err)
	}
	c, err := f.resolve(path)
	if err != nil {
		return nil, wrap(err)
	}
	return c, nil
}

// resolve applies NPD's defaults, checks the file and builds conditions.
func (f *npdFile) resolve(path string) (*NPDConfig, error) {
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
	rulesOf := f.addRules(c, index, &errs)
	checkRuleOverlaps(c.Conditions, rulesOf, &errs)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c.Conditions = dropRuleless(c.Conditions, &c.Warnings)
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
// and leaves *dst alone.
func (p *problems) duration(field string, s *string, dst *time.Duration) bool {
	if s == nil {
		return false
	}
	d, err := time.ParseDuration(*s)
	switch {
	case err != nil:
		p.add(field, "%v", err)
	case d <= 0:
		p.add(field, "%q must be positive", *s)
	default:
		*dst = d
		return true
	}
	return false
}

// positive copies v, when given, into *dst; a value that is not positive is
// recorded against field and leaves *dst alone.
func (p *problems) positive(field string, v *int, dst *int) {
	switch {
	case v == nil:
	case *v <= 0:
		p.add(field, "%d must be positive", *v)
	default:
		*dst = *v
	}
}

// apply sets c's global settings from pluginConfig.
func (pc npdPluginConfig) apply(c *NPDConfig, errs *problems) {
	errs.duration("pluginConfig.invoke_interval", pc.InvokeInterval, &c.InvokeInterval)
	errs.duration("pluginConfig.timeout", pc.Timeout, &c.Timeout)
	errs.positive("pluginConfig.max_output_length", pc.MaxOutputLength, &c.MaxOutputLength)
	errs.positive("pluginConfig.concurrency", pc.Concurrency, &c.Concurrency)
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
	for i, cond := range f.Conditions {
		field := fmt.Sprintf("conditions[%d]", i)
		if cond.Type == "" {
			errs.add(field+".type", "must not be empty")
			continue
		}
		if j, dup := index[cond.Type]; dup {
			errs.add(field+".type", "%q is also conditions[%d]", cond.Type, j)
			continue
		}
		if cond.Reason == "" {
			errs.add(field+".reason", "must not be empty")
		}
		if cond.TaintEnabled {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s (%s): NPD's own tainting (taintEnabled) is ignored; selftaint taints nodes through its rules", field, cond.Type))
		}
		index[cond.Type] = len(c.Conditions)
		c.Conditions = append(c.Conditions, Condition{Type: cond.Type, Reason: cond.Reason, Message: cond.Message})
	}
	return index
}

// ruleAt says where a condition's rule came from.
type ruleAt struct {
	i            int
	timeoutField string // the field its timeout comes from
}

// addRules adds the file's permanent rules to the conditions they name
// (index, from addConditions) and returns, for each condition, where its
// rules came from.
func (f *npdFile) addRules(c *NPDConfig, index map[string]int, errs *problems) [][]ruleAt {
	rulesOf := make([][]ruleAt, len(c.Conditions))
	for i, r := range f.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		rule, timeoutField := r.resolve(field, c.InvokeInterval, c.Timeout, errs)
		switch r.Type {
		case npdTemporary:
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s (reason %s, path %s): temporary rules only make events in NPD; selftaint makes conditions only, so it does not run this rule", field, r.Reason, r.Path))
			continue
		case npdPermanent:
		default:
			errs.add(field+".type", "%q is not %q or %q", r.Type, npdTemporary, npdPermanent)
			continue
		}
		if r.Reason == "" {
			errs.add(field+".reason", "must not be empty")
		}
		j, ok := index[r.Condition]
		if !ok {
			errs.add(field+".condition", "%q is not defined in conditions", r.Condition)
			continue
		}
		c.Conditions[j].Rules = append(c.Conditions[j].Rules, rule)
		rulesOf[j] = append(rulesOf[j], ruleAt{i: i, timeoutField: timeoutField})
	}
	return rulesOf
}

// resolve builds the rule at field with the global interval and timeout
// as defaults, checking what every rule type needs. It returns the rule
// and the field its timeout comes from.
func (r npdRule) resolve(field string, interval, timeout time.Duration, errs *problems) (Rule, string) {
	rule := Rule{Reason: r.Reason, Path: r.Path, Args: r.Args, Interval: interval, Timeout: timeout}
	timeoutField := "pluginConfig.timeout"
	if errs.duration(field+".timeout", r.Timeout, &rule.Timeout) {
		timeoutField = field + ".timeout"
		if rule.Timeout > timeout {
			errs.add(field+".timeout", "%v is above pluginConfig.timeout %v", rule.Timeout, timeout)
		}
	}
	errs.duration(field+".invoke_interval", r.InvokeInterval, &rule.Interval)
	if r.Path == "" {
		errs.add(field+".path", "must not be empty")
	}
	return rule, timeoutField
}

// checkRuleOverlaps records each rule whose runs could overlap the next
// run of its condition: its timeout must be below the shortest interval
// of the condition's rules. rulesOf is from addRules.
func checkRuleOverlaps(conds []Condition, rulesOf [][]ruleAt, errs *problems) {
	for j, cond := range conds {
		if len(cond.Rules) == 0 {
			continue
		}
		shortest := shortestInterval(cond.Rules)
		for k, r := range cond.Rules {
			if r.Timeout >= shortest {
				errs.add(rulesOf[j][k].timeoutField, "%v (for rules[%d]) must be below %v, the shortest invoke_interval of the rules of condition %q", r.Timeout, rulesOf[j][k].i, shortest, cond.Type)
			}
		}
	}
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
