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
// and timeout, which may be longer than the interval (a rule never runs
// twice at once); the probe's Entry tells the runner how to schedule it.
// A probe may also run events rules (NPD's temporary rules), whose
// findings become probes.Events, paced per reason by the group; an
// events-only probe runs nothing else and feeds no condition.
package custom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
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
// type follows, or an events-only probe's Condition.Name.
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
	// ReasonPluginRunning: a rule's first run has not ended within its
	// probe's run (it may take up to its timeout, which may be longer
	// than the interval); the condition is Unknown until it does.
	ReasonPluginRunning = "PluginRunning"
	// ReasonCheckFailed is the problem reason of a Check without one.
	ReasonCheckFailed = "CustomCheckFailed"
	// ReasonChecksPassed is the OK reason of conditions fed by Checks.
	ReasonChecksPassed = "CustomChecksPassed"
	// ReasonEventsOnly is the reason of every result of an events-only
	// probe (see Condition.Name): it feeds no condition, so its result is
	// always OK, and what its rules find is its Events.
	ReasonEventsOnly = "EventsOnly"
)

// Rule is one plugin run for a condition.
type Rule struct {
	// Name labels the rule in messages and readings. Empty means the
	// path and arguments.
	Name string
	// Reason is the condition's reason while this rule reports a
	// problem, or the reason of the Events an events rule yields.
	Reason string
	// Path is the executable: absolute, relative to the working
	// directory, or a bare name looked up in $PATH (as NPD does).
	Path string
	Args []string
	// Interval is how often the rule runs. It must be positive.
	Interval time.Duration
	// Timeout bounds one run, from the moment its process started (not
	// counting a wait for a free slot, nor the fork and exec a loaded
	// machine makes slow). It must be positive. It may be longer than Interval,
	// as in NPD's health checkers (every 10s, 3m timeout): a rule never
	// has two runs at once, and a run that outlasts its probe's run goes
	// on in the background (see Probe.Probe).
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
//
// A Condition without a Type is events-only: it has Events and no Rules,
// and its probe, named after Name, feeds no condition. It runs NPD's
// temporary rules of a file that has no condition to carry them.
type Condition struct {
	// Type is the condition type, e.g. "NTPProblem"; empty for an
	// events-only condition.
	Type string
	// Name names an events-only condition's probe: ProbeNamePrefix +
	// Name. It is set exactly when Type is empty; give it a character no
	// condition type has (NPD files use "npd:" and the file's base name),
	// so it never names the probe of a condition.
	Name string
	// Reason and Message are reported while every rule passes. An empty
	// Message means the rules' own output.
	Reason  string
	Message string
	Rules   []Rule
	// Events are rules whose findings are events, not this condition's
	// status: NPD's temporary rules, run by the probe of a condition of
	// their file. A run that reports a problem or cannot tell yields a
	// probes.Event with the rule's Reason and the run's message, as NPD
	// records an Event for every exit status but 0.
	Events []Rule
	// NPD makes the condition report as NPD's permanent rules do where
	// that differs from selftaint's own checks. While the condition
	// stays in a problem, a new reason is told by an Event (NPD's "Node
	// condition X is now: True, reason: R, message: ..."), and so is a
	// new message when MessageUpdates is set; without MessageUpdates the
	// message the problem started with is kept, as NPD keeps it. Checks
	// without NPD report the latest message and tell no such change.
	NPD bool
	// MessageUpdates is NPD's enable_message_change_based_condition_update;
	// it matters only with NPD.
	MessageUpdates bool
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
	// Clock tells when a rule is due and bounds how long a probe run
	// waits for its rules; nil means probes.RealClock.
	Clock probes.Clock
}

// Group runs checks under one concurrency limit.
type Group struct {
	opts  Options
	slots chan struct{} // a plugin runs while holding a slot
	// beforeStart, if set, is called before each plugin's process is
	// started; tests set it to stand for a slow fork and exec.
	beforeStart func()
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
	return &Group{
		opts:  opts,
		slots: make(chan struct{}, opts.Concurrency),
	}, nil
}

// Probe feeds one condition from its rules, and runs the condition's
// events rules. It is safe for concurrent use, though the runner never
// overlaps its runs.
type Probe struct {
	group    *Group
	cond     Condition
	rules    []Rule        // cond.Rules, then cond.Events
	interval time.Duration // shortest rule interval: how often the probe runs
	timeout  time.Duration // the runner's bound on one run of the probe
	wait     time.Duration // how long one run of the probe waits for its rules

	mu       sync.Mutex    // guards state and reported
	state    []ruleState   // per rule, indexed like rules
	reported probes.Result // status, reason and message last reported
}

// ruleState is what a probe knows of one rule's runs.
type ruleState struct {
	last    outcome   // latest outcome kept; zero before the first
	started time.Time // when the run that gave last started
	running *run      // the run in flight; nil when none
	// An events rule's failing outcomes not reported yet, oldest first,
	// maxUnreported at most (more are counted in lost): a run that ends
	// after its probe run stopped waiting, and another that ends before
	// the next probe run reports, each give their Event.
	unreported []outcome
	lost       int // failing outcomes dropped as unreported was full
	// heldBack is lost since the last report: counted on its last Event
	// (probes.Event.HeldBack), so the agent counts them as held back.
	heldBack int
}

// keepUnreported keeps an events rule's failing outcome until it is
// reported, or counts it (lost, heldBack) when maxUnreported wait.
func (st *ruleState) keepUnreported(out outcome) {
	if len(st.unreported) < maxUnreported {
		st.unreported = append(st.unreported, out)
		return
	}
	st.lost++
	st.heldBack++
}

// maxUnreported bounds an events rule's unreported failing outcomes: as
// many as the agent's Event pacing lets one reason through at once
// (agent.ReasonBurst). Normally a probe run reports one at most; more
// queue only while probe runs lag.
const maxUnreported = 5

// run is one run of a rule. It may outlive the probe run that started it.
type run struct {
	started time.Time
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed once out is set
	out     outcome
}

// NewProbe validates c and returns its probe. Errors name the field.
func (g *Group) NewProbe(c Condition) (*Probe, error) {
	c.Rules = append([]Rule(nil), c.Rules...)
	c.Events = append([]Rule(nil), c.Events...)
	errs := c.fieldErrors()
	errs = append(errs, ruleErrors("Rules", c.Rules)...)
	errs = append(errs, ruleErrors("Events", c.Events)...)
	if err := errors.Join(errs...); err != nil {
		if c.Type == "" {
			return nil, fmt.Errorf("custom events-only probe %q: %w", c.Name, err)
		}
		return nil, fmt.Errorf("custom condition %q: %w", c.Type, err)
	}
	rules := append(append([]Rule(nil), c.Rules...), c.Events...)
	interval := shortestInterval(rules)
	return &Probe{
		group:    g,
		cond:     c,
		rules:    rules,
		interval: interval,
		timeout:  interval - interval/10,
		// Well below the runner's timeout, so the probe reports what
		// it knows before the runner gives up on it.
		wait:  interval * 7 / 10,
		state: make([]ruleState, len(rules)),
	}, nil
}

// fieldErrors checks c's own fields, not its rules': a condition needs a
// valid Type, a Reason and a rule; an events-only one (no Type) a Name,
// events rules and no other rules.
func (c Condition) fieldErrors() []error {
	var errs []error
	if c.Type == "" {
		if c.Name == "" {
			errs = append(errs, errors.New("Name: an events-only condition (no Type) needs a name"))
		}
		if len(c.Rules) > 0 {
			errs = append(errs, errors.New("Rules: an events-only condition (no Type) has no condition to feed"))
		}
		if len(c.Events) == 0 {
			errs = append(errs, errors.New("Events: an events-only condition (no Type) needs at least one events rule"))
		}
		return errs
	}
	if strings.ContainsFunc(c.Type, unicode.IsSpace) {
		errs = append(errs, fmt.Errorf("Type: %q is not a condition type", c.Type))
	}
	if c.Name != "" {
		errs = append(errs, fmt.Errorf("Name: %q names events-only probes; a condition's probe is named after its Type", c.Name))
	}
	if c.Reason == "" {
		errs = append(errs, errors.New("Reason: must not be empty"))
	}
	if len(c.Rules) == 0 {
		errs = append(errs, errors.New("Rules: a condition needs at least one rule"))
	}
	return errs
}

// ruleErrors checks the rules of the list named field on their own.
func ruleErrors(field string, rules []Rule) []error {
	var errs []error
	for i, r := range rules {
		at := fmt.Sprintf("%s[%d]", field, i)
		if r.Path == "" {
			errs = append(errs, fmt.Errorf("%s.Path: must not be empty", at))
		}
		if r.Reason == "" {
			errs = append(errs, fmt.Errorf("%s.Reason: must not be empty", at))
		}
		if r.Interval <= 0 {
			errs = append(errs, fmt.Errorf("%s.Interval: %v must be positive", at, r.Interval))
		}
		if r.Timeout <= 0 {
			errs = append(errs, fmt.Errorf("%s.Timeout: %v must be positive", at, r.Timeout))
		}
	}
	return errs
}

// NewProbes returns a probe per condition; condition types, and the names
// of events-only conditions, must be unique.
func (g *Group) NewProbes(conds []Condition) ([]*Probe, error) {
	var (
		ps   []*Probe
		errs []error
		seen = map[string]bool{} // probe names
	)
	for _, c := range conds {
		name := c.probeName()
		if seen[name] {
			if c.Type == "" {
				errs = append(errs, fmt.Errorf("custom events-only probe %q is defined twice", c.Name))
			} else {
				errs = append(errs, fmt.Errorf("custom condition %q is defined twice", c.Type))
			}
			continue
		}
		seen[name] = true
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

// probeName is the name of c's probe: ProbeNamePrefix and the condition
// type, or an events-only condition's Name.
func (c Condition) probeName() string {
	if c.Type == "" {
		return ProbeNamePrefix + c.Name
	}
	return ProbeNamePrefix + c.Type
}

// Name returns ProbeNamePrefix and the condition type, or, for an
// events-only probe, its condition's Name.
func (p *Probe) Name() string { return p.cond.probeName() }

// Condition returns the condition type the probe feeds; empty for an
// events-only probe, which feeds none.
func (p *Probe) Condition() string { return p.cond.Type }

// MessageUpdates reports whether the probe's condition is an NPD
// condition with enable_message_change_based_condition_update: a new
// message while it stays in a problem is news, to be published at once.
func (p *Probe) MessageUpdates() bool { return p.cond.NPD && p.cond.MessageUpdates }

// Entry schedules the probe: every shortest rule interval, with a timeout
// of nine tenths of it. A rule's own timeout may be longer (see Probe).
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

// Probe starts the rules that are due, in parallel as the group's
// concurrency allows, and judges the condition from the latest outcome of
// every rule. A rule is due on its first run and once about its Interval
// has passed since the start of its latest run, unless that run is still
// going: a rule never has two runs at once.
//
// Probe waits for the runs in flight for seven tenths of the probe's
// interval at most (on the group's clock), below the Entry's timeout. A
// run that takes longer, as a rule whose timeout is longer than the
// interval may, goes on in the background under its own timeout and
// counts once it ends: until then the rule's previous outcome stands, or,
// before its first, the rule is Unknown with ReasonPluginRunning. So a
// plugin that runs long is run again by the first probe run after it
// ends, never alongside itself, much as NPD's ticker runs it (right after
// the run ends, ticks missed meanwhile dropped).
//
// When ctx ends first (the agent stopping), every run in flight is killed
// and its outcome is not kept. A run left in the background while no
// probe run waits for it ends at its own timeout at the latest.
//
// The Result carries the events of the events rules' runs that ended
// since the last report, every failing run's (up to maxUnreported per
// rule; more are counted in a reading), and, for an NPD condition, those
// telling its updates: every one, as the agent paces them.
func (p *Probe) Probe(ctx context.Context) probes.Result {
	runs := p.start(ctx, p.group.opts.Clock.Now())
	if !p.await(ctx, runs) {
		for _, r := range runs {
			r.cancel(context.Cause(ctx))
		}
		for _, r := range runs {
			<-r.done
		}
		return p.judge(p.cutShort(runs))
	}
	return p.report()
}

// start starts a run of every rule that is due at now and returns the
// runs in flight, indexed like p.rules (nil: none).
func (p *Probe) start(ctx context.Context, now time.Time) []*run {
	p.mu.Lock()
	defer p.mu.Unlock()
	runs := make([]*run, len(p.rules))
	for i, r := range p.rules {
		st := &p.state[i]
		// Half the probe's interval of slack, so a run a little early
		// does not push the rule back a whole probe interval.
		if st.running == nil && (st.last.status == "" || now.Sub(st.started) >= r.Interval-p.interval/2) {
			st.running = p.launch(ctx, i, now)
		}
		runs[i] = st.running
	}
	return runs
}

// launch starts a run of rule i in the background and returns it; p.mu is
// held. The run ends with its own timeout or its cancel, not with ctx: it
// may outlive the probe run that started it.
func (p *Probe) launch(ctx context.Context, i int, now time.Time) *run {
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	r := &run{started: now, cancel: cancel, done: make(chan struct{})}
	go func() {
		out := p.group.run(rctx, p.rules[i])
		p.mu.Lock()
		st := &p.state[i]
		if rctx.Err() == nil { // the outcome of a run cut short is not kept
			st.last, st.started = out, r.started
			if i >= len(p.cond.Rules) && (out.status == probes.StatusProblem || out.status == probes.StatusUnknown) {
				st.keepUnreported(out)
			}
		}
		st.running = nil
		r.out = out
		p.mu.Unlock()
		cancel(nil)
		close(r.done)
	}()
	return r
}

// await waits for the runs in flight to end, for p.wait at most. It
// reports false when ctx ended first.
func (p *Probe) await(ctx context.Context, runs []*run) bool {
	t := p.group.opts.Clock.NewTimer(p.wait)
	defer t.Stop()
	for _, r := range runs {
		if r == nil {
			continue
		}
		select {
		case <-r.done:
		case <-t.C():
			return true
		case <-ctx.Done():
			return false
		}
	}
	return ctx.Err() == nil
}

// cutShort returns the outcomes of the condition's rules after the runs
// in flight were killed: theirs, else the latest kept.
func (p *Probe) cutShort(runs []*run) []outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	outs := make([]outcome, len(p.cond.Rules))
	for i := range outs {
		outs[i] = p.state[i].last
		if runs[i] != nil {
			outs[i] = runs[i].out
		}
	}
	return outs
}

// report judges the condition from the rules' latest outcomes and adds
// the events not reported yet.
func (p *Probe) report() probes.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	outs := make([]outcome, len(p.cond.Rules))
	for i, r := range p.cond.Rules {
		outs[i] = p.state[i].last
		if outs[i].status == "" { // its first run is still going
			outs[i] = unknown(ReasonPluginRunning, "running", "%s has not finished its first run yet (its timeout is %v)", r.label(), r.Timeout)
		}
	}
	res := p.judge(outs)
	var events []probes.Event
	for i, r := range p.cond.Events {
		st := &p.state[len(p.cond.Rules)+i]
		for _, o := range st.unreported {
			events = append(events, probes.Event{Reason: r.Reason, Message: o.message})
		}
		if len(st.unreported) > 0 {
			events[len(events)-1].HeldBack, st.heldBack = st.heldBack, 0
		}
		st.unreported = st.unreported[:0]
		res.Readings = append(res.Readings, probes.Reading{Name: "event " + r.label(), Value: st.last.reading})
		if st.lost > 0 {
			res.Readings = append(res.Readings, probes.Reading{Name: "event " + r.label() + " lost",
				Value: fmt.Sprintf("%d failing runs ended while %d were waiting to be reported", st.lost, maxUnreported)})
		}
	}
	res, update := p.npdLocked(res)
	if update != nil {
		events = append(events, *update)
	}
	res.Events = events
	return res
}

// npdLocked applies NPD's update rules to res, the condition's new
// result, and returns it with the Event NPD would record, if any (see
// Condition.NPD). p.mu is held.
func (p *Probe) npdLocked(res probes.Result) (probes.Result, *probes.Event) {
	prev := p.reported
	var update *probes.Event
	if p.cond.NPD && prev.Status == probes.StatusProblem && res.Status == probes.StatusProblem {
		switch {
		case prev.Reason != res.Reason || (p.cond.MessageUpdates && prev.Message != res.Message):
			update = &probes.Event{Reason: res.Reason, Message: fmt.Sprintf("Node condition %s is now: True, reason: %s, message: %q", p.cond.Type, res.Reason, res.Message)}
		case prev.Message != res.Message:
			res.Message = prev.Message // NPD keeps the message the problem started with
		}
	}
	p.reported = probes.Result{Status: res.Status, Reason: res.Reason, Message: res.Message}
	return res, update
}

// judge turns the outcomes of the condition's rules into its Result; an
// events-only probe's is OK with ReasonEventsOnly.
func (p *Probe) judge(outs []outcome) probes.Result {
	rules := p.cond.Rules
	if p.cond.Type == "" {
		return probes.Result{Status: probes.StatusOK, Reason: ReasonEventsOnly,
			Message: fmt.Sprintf("no condition: what its %d events rules find is recorded as Events", len(p.cond.Events))}
	}
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

	res, err := execPlugin(ctx, execSpec{path: r.Path, args: r.Args, maxBytes: g.opts.MaxOutputBytes, timeout: r.Timeout, beforeStart: g.beforeStart})
	if err != nil {
		return unknown(ReasonPluginError, "cannot run", "%s: cannot run: %v", label, err)
	}
	line := firstLine(res.stdout, g.opts.MaxOutputLength)
	code := res.state.ExitCode() // -1: killed by a signal
	switch {
	case code == -1 && res.killed:
		return unknown(ReasonPluginTimeout, "canceled", "%s was killed: %v", label, context.Cause(ctx))
	case code == -1 && res.timedOut:
		return unknown(ReasonPluginTimeout, "timed out", "%s did not finish within its timeout of %v and was killed%s (%s)", label, r.Timeout, withOutput(line), res.timing(r.Timeout))
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

// execSpec is one run of a plugin.
type execSpec struct {
	path     string
	args     []string
	maxBytes int           // how much of stdout and of stderr is read
	timeout  time.Duration // from the moment the process started
	// beforeStart, if set, is called just before the process is started
	// (tests: a fork and exec slowed by a loaded machine).
	beforeStart func()
}

// execResult is what running a plugin produced.
type execResult struct {
	stdout, stderr []byte // the first MaxOutputBytes of each
	state          *os.ProcessState
	killed         bool          // its process group was killed because ctx ended
	timedOut       bool          // its process group was killed at its timeout
	started        time.Time     // when the process started
	startTook      time.Duration // from the call to the process's start: fork and exec
	ran            time.Duration // from its start until it exited or was killed
	cpuWait        time.Duration // how long it waited for a CPU, when it timed out; 0: unknown
}

// loadedShare: a plugin that spent at least 1/loadedShare of its timeout
// being started, or waiting for a CPU, timed out on a loaded machine.
const loadedShare = 4

// timing tells a timed-out run's own times, which the probe run that
// reports it may not share (see Probe): when the process started and how
// long it ran before it was killed, and, when the machine was loaded
// enough to matter, how long starting it took and how long it waited for
// a CPU.
func (res execResult) timing(timeout time.Duration) string {
	s := fmt.Sprintf("its run started at %s and was killed after %v", res.started.UTC().Format("15:04:05.000Z"), res.ran.Round(time.Millisecond))
	var load []string
	if res.startTook >= timeout/loadedShare {
		load = append(load, fmt.Sprintf("starting its process took %v before that", res.startTook.Round(time.Millisecond)))
	}
	if res.cpuWait >= timeout/loadedShare {
		load = append(load, fmt.Sprintf("it waited %v of its run for a CPU", res.cpuWait.Round(time.Millisecond)))
	}
	if len(load) > 0 {
		s += "; the machine is loaded: " + strings.Join(load, " and ")
	}
	return s
}

// runDelay returns the run-queue wait in a /proc/<pid>/schedstat line
// (nanoseconds on a CPU, nanoseconds waiting for one, time slices), or 0
// when the line is not one.
func runDelay(schedstat []byte) time.Duration {
	f := strings.Fields(string(schedstat))
	if len(f) != 3 {
		return 0
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || ns < 0 {
		return 0
	}
	return time.Duration(ns)
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
