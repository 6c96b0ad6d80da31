// Package custom runs the health checks users bring: executables that
// report a verdict through their exit status and a message on stdout. It
// exists so node problems selftaint has no probe for (NTP, a hung mount, a
// vendor's hardware tool) still become conditions and taints, and so the
// plugins and config files written for node-problem-detector's (NPD)
// custom plugin monitor work unchanged: checks come from NPD config files
// (LoadNPDConfig) or from selftaint's own config (Check).
//
// The protocol is NPD's: exit status 0 means OK, 1 a problem, anything else
// (2 by convention) that the plugin could not tell. The first line of
// stdout is the message, cut to Options.MaxOutputLength bytes; at most
// Options.MaxOutputBytes of stdout and of stderr are read and the rest is
// discarded, so a plugin that prints without end neither blocks nor fills
// memory.
//
// Each plugin runs in a process group of its own. When it overruns its
// timeout the whole group is killed with SIGKILL, and when it exits,
// whatever it left running in its group is killed too; the plugin is then
// reaped. Killed grandchildren are reaped by the process that inherits
// them: when selftaint is its container's PID 1 that is selftaint, which
// does not reap strangers, so run it under an init that does (the pause
// container with shareProcessNamespace, or tini).
//
// A Group runs all its checks under one concurrency limit. Each Probe
// feeds one condition from one or more rules, each with its own interval
// and timeout; the probe's Entry tells the runner how to schedule it.
package custom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/selftaint/selftaint/probes"
)

// Defaults, NPD's where NPD has one.
const (
	// DefaultInterval is how often a rule runs (NPD's invoke_interval).
	DefaultInterval = 30 * time.Second
	// DefaultTimeout bounds one run of a rule (NPD's timeout).
	DefaultTimeout = 5 * time.Second
	// DefaultMaxOutputLength caps the message, in bytes (NPD's
	// max_output_length).
	DefaultMaxOutputLength = 80
	// DefaultConcurrency is how many plugins of a Group run at once
	// (NPD's concurrency).
	DefaultConcurrency = 3
	// DefaultMaxOutputBytes is how much of a plugin's stdout, and of its
	// stderr, is read (NPD reads 4 KiB too).
	DefaultMaxOutputBytes = 4 << 10
)

// pipeGrace is how long, after a plugin's process group is gone, its
// output pipes may stay open. Only a process that left the group (setsid)
// while holding them keeps them open longer; then reading stops.
const pipeGrace = time.Second

// ProbeNamePrefix starts the name of every custom probe; the condition
// type follows.
const ProbeNamePrefix = "custom-"

// Reasons custom probes report besides the rules' and conditions' own.
const (
	// ReasonPluginUnknown: a plugin exited with a status other than 0 or
	// 1: it could not tell.
	ReasonPluginUnknown = "PluginUnknown"
	// ReasonPluginTimeout: a plugin overran its timeout and was killed.
	ReasonPluginTimeout = "PluginTimeout"
	// ReasonPluginError: a plugin could not be started (missing, not
	// executable) or was killed by a signal.
	ReasonPluginError = "PluginError"
	// ReasonCheckFailed is the problem reason of a Check without one.
	ReasonCheckFailed = "CustomCheckFailed"
	// ReasonChecksPassed is the OK reason of conditions fed by Checks.
	ReasonChecksPassed = "CustomChecksPassed"
)

// Rule is one plugin run for a condition.
type Rule struct {
	// Name labels the rule in messages and readings. Empty means the
	// path and arguments.
	Name string
	// Reason is the condition's reason while this rule reports a
	// problem.
	Reason string
	// Path is the executable: absolute, relative to the working
	// directory, or a bare name looked up in $PATH (as NPD does).
	Path string
	Args []string
	// Interval is how often the rule runs. It must be positive.
	Interval time.Duration
	// Timeout bounds one run, from its start (not counting a wait for a
	// free slot). It must be positive and below the shortest Interval of
	// the condition's rules.
	Timeout time.Duration
}

func (r Rule) label() string {
	if r.Name != "" {
		return r.Name
	}
	return strings.Join(append([]string{r.Path}, r.Args...), " ")
}

// Condition is a condition fed by rules: Problem while any rule reports a
// problem (with that rule's reason and message), else Unknown while any
// rule cannot tell, else OK with Reason and Message.
type Condition struct {
	// Type is the condition type, e.g. "NTPProblem".
	Type string
	// Reason and Message are reported while every rule passes. An empty
	// Message means the rules' own output.
	Reason  string
	Message string
	Rules   []Rule
}

// Options are shared by every check of a Group. Zero values mean the
// defaults.
type Options struct {
	// Concurrency is how many plugins run at once; 0 means
	// DefaultConcurrency.
	Concurrency int
	// MaxOutputLength caps the message in bytes; 0 means
	// DefaultMaxOutputLength.
	MaxOutputLength int
	// MaxOutputBytes is how much of stdout and of stderr is read; 0 means
	// DefaultMaxOutputBytes.
	MaxOutputBytes int
	// Clock tells when a rule is due; nil means probes.RealClock.
	Clock probes.Clock
}

// Group runs checks under one concurrency limit.
type Group struct {
	opts  Options
	slots chan struct{} // a plugin runs while holding a slot
}

// NewGroup returns a Group with opts.
func NewGroup(opts Options) (*Group, error) {
	var errs []error
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"Concurrency", &opts.Concurrency, DefaultConcurrency},
		{"MaxOutputLength", &opts.MaxOutputLength, DefaultMaxOutputLength},
		{"MaxOutputBytes", &opts.MaxOutputBytes, DefaultMaxOutputBytes},
	} {
		switch {
		case *f.v < 0:
			errs = append(errs, fmt.Errorf("%s: %d must not be negative", f.name, *f.v))
		case *f.v == 0:
			*f.v = f.def
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("custom check options: %w", err)
	}
	if opts.Clock == nil {
		opts.Clock = probes.RealClock{}
	}
	return &Group{opts: opts, slots: make(chan struct{}, opts.Concurrency)}, nil
}

// Probe feeds one condition from its rules. It is safe for concurrent use,
// though the runner never overlaps its runs.
type Probe struct {
	group    *Group
	cond     Condition
	interval time.Duration // shortest rule interval: how often the probe runs
	timeout  time.Duration // the runner's bound on one run of the probe

	mu      sync.Mutex  // guards last and started
	last    []outcome   // latest outcome per rule; zero before its first run
	started []time.Time // when each rule's latest outcome was started
}

// NewProbe validates c and returns its probe. Errors name the field.
func (g *Group) NewProbe(c Condition) (*Probe, error) {
	c.Rules = append([]Rule(nil), c.Rules...)
	var errs []error
	if c.Type == "" || strings.ContainsFunc(c.Type, unicode.IsSpace) {
		errs = append(errs, fmt.Errorf("Type: %q is not a condition type", c.Type))
	}
	if c.Reason == "" {
		errs = append(errs, errors.New("Reason: must not be empty"))
	}
	if len(c.Rules) == 0 {
		errs = append(errs, errors.New("Rules: a condition needs at least one rule"))
	}
	var interval, longest time.Duration
	for i, r := range c.Rules {
		field := fmt.Sprintf("Rules[%d]", i)
		if r.Path == "" {
			errs = append(errs, fmt.Errorf("%s.Path: must not be empty", field))
		}
		if r.Reason == "" {
			errs = append(errs, fmt.Errorf("%s.Reason: must not be empty", field))
		}
		if r.Interval <= 0 {
			errs = append(errs, fmt.Errorf("%s.Interval: %v must be positive", field, r.Interval))
		} else if interval == 0 || r.Interval < interval {
			interval = r.Interval
		}
		if r.Timeout <= 0 {
			errs = append(errs, fmt.Errorf("%s.Timeout: %v must be positive", field, r.Timeout))
		}
		longest = max(longest, r.Timeout)
	}
	for i, r := range c.Rules {
		if interval > 0 && r.Timeout >= interval {
			errs = append(errs, fmt.Errorf("Rules[%d].Timeout: %v must be below the condition's shortest interval %v, so runs never overlap", i, r.Timeout, interval))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("custom condition %q: %w", c.Type, err)
	}
	return &Probe{
		group:    g,
		cond:     c,
		interval: interval,
		// Leave room to wait for a slot, but stay below the interval.
		timeout: max(longest, interval-interval/10),
		last:    make([]outcome, len(c.Rules)),
		started: make([]time.Time, len(c.Rules)),
	}, nil
}

// NewProbes returns a probe per condition; condition types must be unique.
func (g *Group) NewProbes(conds []Condition) ([]*Probe, error) {
	var (
		ps   []*Probe
		errs []error
		seen = map[string]bool{}
	)
	for _, c := range conds {
		if seen[c.Type] {
			errs = append(errs, fmt.Errorf("custom condition %q is defined twice", c.Type))
			continue
		}
		seen[c.Type] = true
		p, err := g.NewProbe(c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ps = append(ps, p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ps, nil
}

// Name returns ProbeNamePrefix and the condition type.
func (p *Probe) Name() string { return ProbeNamePrefix + p.cond.Type }

// Condition returns the condition type the probe feeds.
func (p *Probe) Condition() string { return p.cond.Type }

// Entry schedules the probe: every shortest rule interval, with a timeout
// below it that covers the longest rule timeout.
func (p *Probe) Entry() probes.Entry {
	return probes.Entry{Probe: p, Interval: p.interval, Timeout: p.timeout}
}

// outcome is what one run of a rule found.
type outcome struct {
	status  probes.Status // empty: never run
	reason  string        // for Unknown
	message string
	reading string
}

// Probe runs the rules that are due, in parallel as the group's
// concurrency allows, and judges the condition from the latest outcome of
// every rule. A rule is due on its first run and once about its Interval
// has passed since its latest run started.
func (p *Probe) Probe(ctx context.Context) probes.Result {
	rules := p.cond.Rules
	now := p.group.opts.Clock.Now()
	outs := make([]outcome, len(rules))
	due := make([]bool, len(rules))
	p.mu.Lock()
	for i, r := range rules {
		// Half the probe's interval of slack, so a run a little early
		// does not push the rule back a whole probe interval.
		due[i] = p.last[i].status == "" || now.Sub(p.started[i]) >= r.Interval-p.interval/2
		outs[i] = p.last[i]
	}
	p.mu.Unlock()

	var wg sync.WaitGroup
	for i, r := range rules {
		if due[i] {
			wg.Go(func() { outs[i] = p.group.run(ctx, r) })
		}
	}
	wg.Wait()

	if ctx.Err() == nil { // outcomes of runs cut short are not kept
		p.mu.Lock()
		for i := range rules {
			if due[i] {
				p.last[i], p.started[i] = outs[i], now
			}
		}
		p.mu.Unlock()
	}
	return p.judge(outs)
}

// judge turns the rules' outcomes into the condition's Result.
func (p *Probe) judge(outs []outcome) probes.Result {
	rules := p.cond.Rules
	readings := make([]probes.Reading, len(rules))
	for i, o := range outs {
		readings[i] = probes.Reading{Name: rules[i].label(), Value: o.reading}
	}
	for i, o := range outs {
		if o.status == probes.StatusProblem {
			return probes.Result{Status: probes.StatusProblem, Reason: rules[i].Reason, Message: o.message, Readings: readings}
		}
	}
	var reason string
	var unknown, oks []string
	for _, o := range outs {
		switch o.status {
		case probes.StatusUnknown:
			if reason == "" {
				reason = o.reason
			}
			unknown = append(unknown, o.message)
		case probes.StatusOK:
			oks = append(oks, o.message)
		}
	}
	if len(unknown) > 0 {
		return probes.Result{Status: probes.StatusUnknown, Reason: reason, Message: strings.Join(unknown, "; "), Readings: readings}
	}
	msg := p.cond.Message
	if msg == "" {
		msg = strings.Join(oks, "; ")
	}
	return probes.Result{Status: probes.StatusOK, Reason: p.cond.Reason, Message: msg, Readings: readings}
}

// run runs one rule once, when a slot is free.
func (g *Group) run(ctx context.Context, r Rule) outcome {
	label := r.label()
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return unknown(ReasonPluginTimeout, "not started", "%s did not start: all %d slots stayed busy (%v)", label, cap(g.slots), context.Cause(ctx))
	}
	defer func() { <-g.slots }()

	rctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	res, err := execPlugin(rctx, r.Path, r.Args, g.opts.MaxOutputBytes)
	if err != nil {
		return unknown(ReasonPluginError, "cannot run", "%s: cannot run: %v", label, err)
	}
	line := firstLine(res.stdout, g.opts.MaxOutputLength)
	code := res.state.ExitCode() // -1: killed by a signal
	switch {
	case code == -1 && res.killed && ctx.Err() != nil:
		return unknown(ReasonPluginTimeout, "canceled", "%s was killed: %v", label, context.Cause(ctx))
	case code == -1 && res.killed:
		return unknown(ReasonPluginTimeout, "timed out", "%s did not finish within its timeout of %v and was killed%s", label, r.Timeout, withOutput(line))
	case code == -1:
		return unknown(ReasonPluginError, res.state.String(), "%s was killed (%v)%s", label, res.state, withOutput(line))
	case code == 0:
		if line == "" {
			return outcome{status: probes.StatusOK, message: label + " passed", reading: "OK"}
		}
		return outcome{status: probes.StatusOK, message: line, reading: "OK: " + line}
	case code == 1:
		if line == "" {
			line = label + " reported a problem without a message"
		}
		return outcome{status: probes.StatusProblem, message: line, reading: "Problem: " + line}
	}
	if line == "" {
		// A crashing interpreter says why on stderr.
		line = firstLine(res.stderr, g.opts.MaxOutputLength)
	}
	return unknown(ReasonPluginUnknown, fmt.Sprintf("exit status %d", code), "%s could not tell (exit status %d)%s", label, code, withOutput(line))
}

// execResult is what running a plugin produced.
type execResult struct {
	stdout, stderr []byte // the first MaxOutputBytes of each
	state          *os.ProcessState
	killed         bool // its process group was killed because ctx ended
}

func unknown(reason, reading, format string, args ...any) outcome {
	msg := fmt.Sprintf(format, args...)
	return outcome{status: probes.StatusUnknown, reason: reason, message: msg, reading: "Unknown: " + reading}
}

func withOutput(line string) string {
	if line == "" {
		return ""
	}
	return ": " + line
}

// firstLine returns the first non-blank line of out, trimmed, with invalid
// UTF-8 and unprintable characters replaced, cut to at most max bytes
// (never inside a character).
func firstLine(out []byte, max int) string {
	out = bytes.TrimLeftFunc(out, unicode.IsSpace)
	if i := bytes.IndexByte(out, '\n'); i >= 0 {
		out = out[:i]
	}
	s := strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case !unicode.IsPrint(r) && r != ' ':
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(strings.TrimSpace(string(out)), string(utf8.RuneError)))
	if len(s) > max {
		i := max
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = strings.TrimSpace(s[:i])
	}
	return s
}

// Check is a custom check in selftaint's own config file.
type Check struct {
	// Name identifies the check; it must be unique.
	Name string
	// Condition is the condition type the check feeds; checks naming the
	// same condition feed it together.
	Condition string
	// Reason is the condition's reason while the check fails. Empty means
	// ReasonCheckFailed.
	Reason string
	// Path and Args are the executable and its arguments.
	Path string
	Args []string
	// Interval between runs; 0 means DefaultInterval.
	Interval time.Duration
	// Timeout of one run; 0 means DefaultTimeout. It must be below the
	// shortest Interval of the condition's checks.
	Timeout time.Duration
}

// ConditionsFromChecks turns checks into conditions, one per condition
// type in order of first appearance, with reason ReasonChecksPassed while
// all pass. Errors name the check's field.
func ConditionsFromChecks(checks []Check) ([]Condition, error) {
	var (
		conds []Condition
		index = map[string]int{} // condition type -> conds index
		names = map[string]int{} // check name -> checks index
		errs  []error
	)
	for i, c := range checks {
		field := fmt.Sprintf("Checks[%d]", i)
		if c.Name == "" {
			errs = append(errs, fmt.Errorf("%s.Name: must not be empty", field))
		} else if j, dup := names[c.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.Name: %q is the name of Checks[%d] too", field, c.Name, j))
		} else {
			names[c.Name] = i
		}
		r := c.rule()
		errs = append(errs, c.fieldErrors(field, r)...)
		j, ok := index[c.Condition]
		if !ok {
			j = len(conds)
			index[c.Condition] = j
			conds = append(conds, Condition{Type: c.Condition, Reason: ReasonChecksPassed})
		}
		conds[j].Rules = append(conds[j].Rules, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("custom checks: %w", err)
	}
	if err := errors.Join(checkOverlaps(conds, names)...); err != nil {
		return nil, fmt.Errorf("custom checks: %w", err)
	}
	return conds, nil
}

// rule returns the check as a rule, with the defaults applied.
func (c Check) rule() Rule {
	r := Rule{Name: c.Name, Reason: c.Reason, Path: c.Path, Args: append([]string(nil), c.Args...), Interval: c.Interval, Timeout: c.Timeout}
	if r.Reason == "" {
		r.Reason = ReasonCheckFailed
	}
	if r.Interval == 0 {
		r.Interval = DefaultInterval
	}
	if r.Timeout == 0 {
		r.Timeout = DefaultTimeout
	}
	return r
}

// fieldErrors checks the check at field on its own, all but its name; r
// is c.rule().
func (c Check) fieldErrors(field string, r Rule) []error {
	var errs []error
	if c.Condition == "" || strings.ContainsFunc(c.Condition, unicode.IsSpace) {
		errs = append(errs, fmt.Errorf("%s.Condition: %q is not a condition type", field, c.Condition))
	}
	if c.Path == "" {
		errs = append(errs, fmt.Errorf("%s.Path: must not be empty", field))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("%s.Interval: %v must not be negative", field, c.Interval))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("%s.Timeout: %v must not be negative", field, c.Timeout))
	}
	if r.Interval > 0 && r.Timeout >= r.Interval {
		errs = append(errs, fmt.Errorf("%s.Timeout: %v must be below its interval %v", field, r.Timeout, r.Interval))
	}
	return errs
}

// checkOverlaps says, in the checks' terms, which checks' timeouts are not
// below the shortest interval of their condition's checks. names maps a
// check's name to its index in Checks.
func checkOverlaps(conds []Condition, names map[string]int) []error {
	var errs []error
	for _, c := range conds {
		shortest := shortestInterval(c.Rules)
		for _, r := range c.Rules {
			if r.Timeout >= shortest {
				errs = append(errs, fmt.Errorf("Checks[%d].Timeout: %v must be below %v, the shortest interval of the checks of condition %q", names[r.Name], r.Timeout, shortest, c.Type))
			}
		}
	}
	return errs
}

// shortestInterval returns the shortest Interval of rules, which must not
// be empty.
func shortestInterval(rules []Rule) time.Duration {
	shortest := rules[0].Interval
	for _, r := range rules {
		shortest = min(shortest, r.Interval)
	}
	return shortest
}
