// Package memory is selftaint's memory probe. It exists so a node that is
// running out of memory, or stalling on memory reclaim, is tainted before the
// kernel's OOM killer or the kubelet's eviction manager start killing pods at
// random. It reads MemTotal and MemAvailable from the host's /proc/meminfo
// and, where the kernel has pressure stall information (PSI, Linux 4.20+ with
// CONFIG_PSI), /proc/pressure/memory.
package memory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// Name is the memory probe's name.
const Name = "memory"

// Reasons the memory probe reports.
const (
	// ReasonMemoryAvailable: enough memory is available and nothing stalls.
	ReasonMemoryAvailable = "MemoryAvailable"
	// ReasonLowMemory: MemAvailable is below Config.AvailableBelow.
	ReasonLowMemory = "LowMemory"
	// ReasonMemoryPressureStall: a PSI stall rule holds (the kernel's
	// trigger fired, or the stall the probe measured is at its rate), or
	// a PSI avg10 is above its threshold.
	ReasonMemoryPressureStall = "MemoryPressureStall"
	// ReasonReadError: meminfo (or, with PSI checks on, the pressure file)
	// is missing, unreadable or garbage.
	ReasonReadError = probes.ReasonReadError
)

// Config says when memory is a problem. Zero values disable checks.
type Config struct {
	// AvailableBelow flags memory as low when MemAvailable is below it:
	// a percentage of MemTotal, or an amount of bytes.
	AvailableBelow probes.Threshold
	// PSISomeAvg10Above flags a stall when the share of the last 10s in
	// which at least one task waited on memory, in percent, is above it.
	// 0 disables the check.
	PSISomeAvg10Above float64
	// PSIFullAvg10Above flags a stall when the share of the last 10s in
	// which all non-idle tasks waited on memory, in percent, is above it.
	// 0 disables the check.
	PSIFullAvg10Above float64
	// PSI are the stall rules decided on the kernel's PSI triggers: a
	// problem as soon as the kernel says tasks stalled Stall or more
	// within Window, and until the stall the probe measures from the
	// pressure file's totals falls below that rate (see decideStall).
	PSI StallRules
}

// Validate checks that thresholds are in range.
// A problem is a *probes.ConfigError naming each field.
func (c Config) Validate() error {
	var errs []probes.FieldError
	if err := c.AvailableBelow.Validate(); err != nil {
		errs = append(errs, probes.FieldError{Field: "AvailableBelow", Detail: err.Error()})
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"PSISomeAvg10Above", c.PSISomeAvg10Above}, {"PSIFullAvg10Above", c.PSIFullAvg10Above}} {
		if !(f.v >= 0 && f.v <= 100) {
			errs = append(errs, probes.FieldError{Field: f.name, Detail: fmt.Sprintf("%v is not a percentage between 0 and 100 (0 turns the check off)", f.v)})
		}
	}
	errs = append(errs, c.PSI.Some.validate("PSI.Some")...)
	errs = append(errs, c.PSI.Full.validate("PSI.Full")...)
	return probes.NewConfigError(Name, errs)
}

// rules are the stall rules by line index (lineSome, lineFull).
func (c Config) rules() [2]StallRule { return [2]StallRule{c.PSI.Some, c.PSI.Full} }

// The pressure file's lines, as indexes into the stall rules and states.
const (
	lineSome = iota
	lineFull
)

var lineNames = [2]string{"some", "full"}

// psiTrigger is one PSI trigger: the kernel signals it when tasks stalled
// (on Line, "some" or "full") for Stall or more within Window.
type psiTrigger struct {
	Line          string
	Stall, Window time.Duration
}

// spec is what is written to the pressure file to arm the trigger.
func (t psiTrigger) spec() string {
	return fmt.Sprintf("%s %d %d", t.Line, t.Stall.Microseconds(), t.Window.Microseconds())
}

// String is the trigger in words: "some 100ms within 1s".
func (t psiTrigger) String() string { return fmt.Sprintf("%s %v within %v", t.Line, t.Stall, t.Window) }

// psiHooks are what watchPSI tells, and asks, the probe.
type psiHooks struct {
	// fired: trigger i fired.
	fired func(i int)
	// recheck: how long to wait for a fire before calling tick;
	// negative waits for a fire only.
	recheck func() time.Duration
	// tick: recheck's time passed with no fire, or the triggers were
	// re-armed.
	tick func()
	// armed, if not nil: the triggers are first in place.
	armed func()
}

// triggers are the PSI triggers the probe arms, and for each the line
// index of the stall rule it decides (-1: it only wakes the probe). One
// per stall rule; and the wake trigger (some wakeStall within WakeWindow)
// for the checks that are not stall rules (the averages, and
// AvailableBelow, since memory running low stalls tasks first) or when no
// check is on at all, unless the some rule is that very trigger.
func (c Config) triggers(wakeStall time.Duration) (ts []psiTrigger, rule []int) {
	rules := c.rules()
	wake := StallRule{Stall: wakeStall, Window: WakeWindow}
	others := c.PSISomeAvg10Above > 0 || c.PSIFullAvg10Above > 0 || !c.AvailableBelow.IsZero()
	if (others || (rules[lineSome].IsZero() && rules[lineFull].IsZero())) && rules[lineSome] != wake {
		ts, rule = append(ts, psiTrigger{Line: "some", Stall: wake.Stall, Window: wake.Window}), append(rule, -1)
	}
	for i, r := range rules {
		if !r.IsZero() {
			ts, rule = append(ts, psiTrigger{Line: lineNames[i], Stall: r.Stall, Window: r.Window}), append(rule, i)
		}
	}
	return ts, rule
}

// Defaults of the PSI trigger that wakes the probe (see Probe.Watch).
const (
	// DefaultWakeStall is how long tasks must stall on memory within
	// WakeWindow for the kernel to wake the probe: 5% of it.
	DefaultWakeStall = 100 * time.Millisecond
	// WakeWindow is the trigger's window: the least the kernel allows
	// without CAP_SYS_RESOURCE (a multiple of 2s).
	WakeWindow = 2 * time.Second
)

// Probe is the memory probe. It is safe for concurrent use.
type Probe struct {
	cfg  Config
	host probes.Host
	// wakeStall is the PSI trigger's stall time (DefaultWakeStall).
	wakeStall time.Duration
	// armed, if set, is called once Watch's trigger is armed; tests wait
	// for it before squeezing memory.
	armed func()
	// now is the probe's clock (time.Now).
	now func() time.Time

	// mu guards the fields below: the stall rules' state, shared by runs
	// and the PSI watch.
	mu sync.Mutex
	// states are the stall rules' states by line index.
	states [2]stallState
	// fires counts each rule's trigger fires; judged is fires as the
	// last run saw them.
	fires, judged [2]uint64
	// watchErr is why Watch cannot arm the triggers (nil while it runs
	// or before it started).
	watchErr error
}

// New returns a memory probe that reads the host under host.Root.
func New(cfg Config, host probes.Host) (*Probe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Probe{cfg: cfg, host: host, wakeStall: DefaultWakeStall, now: time.Now}, nil
}

// Name returns "memory".
func (p *Probe) Name() string { return Name }

// Watch implements probes.Waker: it arms the PSI triggers of the stall
// rules on the host's /proc/pressure/memory (and, for the averages, one
// of tasks stalled on memory for DefaultWakeStall within WakeWindow; see
// Config.triggers) and wakes the probe each time the kernel fires one;
// while a stall rule is in pressure it also wakes the probe a little over
// once per window, so the probe sees the stall end. Where the kernel
// cannot (no CONFIG_PSI, psi=0, a window it refuses, not Linux) it
// returns an error saying so, the probe shows it in its readings, and the
// probe runs only on its interval, judging its stall rules on the stall
// it measures between runs.
func (p *Probe) Watch(ctx context.Context, wake func()) error {
	ts, rule := p.cfg.triggers(p.wakeStall)
	err := watchPSI(ctx, p.host.Proc("pressure", "memory"), ts, psiHooks{
		fired: func(i int) {
			if l := rule[i]; l >= 0 {
				p.mu.Lock()
				p.fires[l]++
				p.mu.Unlock()
			}
			wake()
		},
		recheck: p.recheck,
		tick:    wake,
		armed: func() {
			p.setWatchErr(nil)
			if p.armed != nil {
				p.armed()
			}
		},
	})
	if err != nil && ctx.Err() == nil {
		p.setWatchErr(err)
	}
	return err
}

func (p *Probe) setWatchErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watchErr = err
}

// recheck is psiHooks.recheck: see recheckAfter.
func (p *Probe) recheck() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var unjudged [2]bool
	for i := range unjudged {
		unjudged[i] = p.fires[i] != p.judged[i]
	}
	return recheckAfter(p.cfg.rules(), p.states, unjudged)
}

// Probe reads meminfo and PSI once and judges them against the config.
func (p *Probe) Probe(ctx context.Context) probes.Result {
	path := p.host.Proc("meminfo")
	data, err := probes.ReadFile(path)
	if err != nil {
		return p.readFailure(fmt.Errorf("reading meminfo: %w", err))
	}
	m, err := parseMeminfo(data)
	if err != nil {
		return p.readFailure(fmt.Errorf("parsing %s: %w", path, err))
	}

	total, avail := float64(m.TotalBytes), float64(m.AvailableBytes)
	pct := avail / total * 100
	readings := []probes.Reading{
		{Name: "available", Value: probes.FormatBytes(avail)},
		{Name: "total", Value: probes.FormatBytes(total)},
		{Name: "available_percent", Value: fmt.Sprintf("%.1f%%", pct)},
	}
	summary := fmt.Sprintf("available memory %s (%.1f%% of %s)", probes.FormatBytes(avail), pct, probes.FormatBytes(total))

	var reason string
	var problems []string
	if t := p.cfg.AvailableBelow; !t.IsZero() && avail < t.Of(total) {
		reason = ReasonLowMemory
		problems = append(problems, fmt.Sprintf("%s is below %s", summary, probes.FormatThreshold(t)))
	}

	psiPath := p.host.Proc("pressure", "memory")
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, available, err := readPSI(psiPath)
	now := p.now()
	psiReadings, stalls, psiErr := p.cfg.judgePSI(psiPath, pr, available, err)
	readings = append(readings, psiReadings...)
	if available && err == nil {
		ruleReadings, ruleStalls, ruleErr := p.judgeStallRules(psiPath, pr, now)
		readings = append(readings, ruleReadings...)
		stalls = append(ruleStalls, stalls...)
		if psiErr == nil {
			psiErr = ruleErr
		}
	} else {
		// The pressure file cannot be read, or is gone (a kernel without
		// PSI never has a rule in pressure): the stall rules hold.
		stalls = append(p.holdStallRules(), stalls...)
	}
	if w := p.watchErr; w != nil && p.stallRulesOn() {
		readings = append(readings, probes.Reading{Name: "psi_triggers", Value: "not armed: " + w.Error()})
	}
	if reason == "" && len(stalls) > 0 {
		reason = ReasonMemoryPressureStall
	}
	problems = append(problems, stalls...)

	if len(problems) > 0 {
		// A PSI read error does not hide a problem we did see.
		if psiErr != nil {
			problems = append(problems, psiErr.Error())
		}
		return probes.Result{Status: probes.StatusProblem, Reason: reason, Message: strings.Join(problems, "; "), Readings: readings}
	}
	if psiErr != nil {
		return readError(readings, psiErr)
	}
	msg := summary
	if t := p.cfg.AvailableBelow; !t.IsZero() {
		msg += " is at or above " + probes.FormatThreshold(t)
	}
	return probes.Result{Status: probes.StatusOK, Reason: ReasonMemoryAvailable, Message: msg, Readings: readings}
}

// readFailure is the result of a run that cannot read meminfo: Unknown,
// but a problem while a stall rule holds (holdStallRules).
func (p *Probe) readFailure(err error) probes.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	if stalls := p.holdStallRules(); len(stalls) > 0 {
		return probes.Result{Status: probes.StatusProblem, Reason: ReasonMemoryPressureStall, Message: strings.Join(append(stalls, err.Error()), "; ")}
	}
	return readError(nil, err)
}

// holdStallRules judges the stall rules on a run that cannot read the
// pressure file (or meminfo): a read failure is never a recovery. A
// trigger fired since the last run is still the kernel's verdict, so its
// rule is in pressure; a rule in pressure stays there; the rest stay as
// they are, their base kept for the next read. It returns the stalls of
// the rules in pressure. p.mu is held.
func (p *Probe) holdStallRules() (stalls []string) {
	for i, r := range p.cfg.rules() {
		if !r.IsZero() {
			stalls = append(stalls, p.holdStallRule(i)...)
		}
	}
	return stalls
}

// holdStallRule is holdStallRules for rule i alone. p.mu is held.
func (p *Probe) holdStallRule(i int) (stalls []string) {
	s := p.states[i]
	s.Fired = p.fires[i] != p.judged[i]
	p.judged[i] = p.fires[i]
	s.Pressure = s.Pressure || s.Fired
	p.states[i] = s
	if s.Pressure {
		stalls = append(stalls, stallMessage(lineNames[i], p.cfg.rules()[i], s, -1))
	}
	return stalls
}

// stallRulesOn reports whether a stall rule is on.
func (p *Probe) stallRulesOn() bool { return !p.cfg.PSI.Some.IsZero() || !p.cfg.PSI.Full.IsZero() }

// judgeStallRules runs each stall rule's state machine on what the
// pressure file pr (read at now) shows and the triggers fired since the
// last run, and returns its readings and the stalls it finds. p.mu is
// held. A rule on a line the file lacks is an error, and holds
// (holdStallRule).
func (p *Probe) judgeStallRules(path string, pr psi, now time.Time) (readings []probes.Reading, stalls []string, err error) {
	lines := [2]psiLine{pr.Some, pr.Full}
	for i, r := range p.cfg.rules() {
		if r.IsZero() {
			continue
		}
		if i == lineFull && !pr.HasFull {
			err = fmt.Errorf("parsing %s: no \"full\" line for the full stall rule", path)
			stalls = append(stalls, p.holdStallRule(i)...)
			continue
		}
		fired := p.fires[i] != p.judged[i]
		p.judged[i] = p.fires[i]
		s := decideStall(r, p.states[i], stallSample{Now: now, Total: lines[i].Total, Fired: fired})
		p.states[i] = s
		readings = append(readings, probes.Reading{Name: "psi_" + lineNames[i] + "_stall", Value: stallReading(r, s)})
		if s.Pressure {
			stalls = append(stalls, stallMessage(lineNames[i], r, s, lines[i].Avg10))
		}
	}
	return readings, stalls, err
}

// stallReading is a stall rule and its last measure, so a single run
// (selftaint check) shows the rule in force: "rule 500ms within 2s;
// measured 340ms in 1.02s".
func stallReading(r StallRule, s stallState) string {
	if s.Span == 0 {
		return "rule " + r.String() + "; not measured yet"
	}
	return fmt.Sprintf("rule %v; measured %v in %v", r, s.Stalled.Round(time.Millisecond), s.Span.Round(time.Millisecond))
}

// stallMessage says why a stall rule is in pressure; avg10 below 0: the
// pressure file could not be read this run.
func stallMessage(line string, r StallRule, s stallState, avg10 float64) string {
	msg := fmt.Sprintf("memory pressure stall: %s tasks stalled %s within %v", line, r.Stall, r.Window)
	var why []string
	if s.Fired {
		why = append(why, "the kernel's PSI trigger fired")
	}
	if s.Span > 0 {
		why = append(why, fmt.Sprintf("measured %v in the last %v", s.Stalled.Round(time.Millisecond), s.Span.Round(time.Millisecond)))
	}
	if avg10 >= 0 {
		why = append(why, fmt.Sprintf("%s avg10 %.2f%%", line, avg10))
	} else {
		why = append(why, "held: not read this run")
	}
	return msg + " (" + strings.Join(why, "; ") + ")"
}

// judgePSI judges what readPSI returned against the PSI thresholds. It
// returns the PSI readings, the stalls found and, when a PSI check is on
// but cannot be done, why.
func (c Config) judgePSI(path string, pr psi, available bool, err error) (readings []probes.Reading, stalls []string, psiErr error) {
	psiOn := c.PSISomeAvg10Above > 0 || c.PSIFullAvg10Above > 0 || !c.PSI.Some.IsZero() || !c.PSI.Full.IsZero()
	switch {
	case !available:
		return []probes.Reading{{Name: "psi", Value: "not available"}}, nil, nil
	case err != nil && psiOn:
		return nil, nil, err
	case err != nil:
		// No PSI check depends on it: show it, but judge meminfo alone.
		return []probes.Reading{{Name: "psi", Value: "unreadable: " + err.Error()}}, nil, nil
	}
	readings = append(readings, probes.Reading{Name: "psi_some_avg10", Value: fmt.Sprintf("%.2f%%", pr.Some.Avg10)})
	if pr.HasFull {
		readings = append(readings, probes.Reading{Name: "psi_full_avg10", Value: fmt.Sprintf("%.2f%%", pr.Full.Avg10)})
	}
	stalls, psiErr = c.psiStalls(path, pr)
	return readings, stalls, psiErr
}

// psiStalls returns the stalls pr shows above the thresholds, and an
// error when the full check is on but the file at path has no "full" line.
func (c Config) psiStalls(path string, pr psi) (stalls []string, err error) {
	if t := c.PSISomeAvg10Above; t > 0 && pr.Some.Avg10 > t {
		stalls = append(stalls, fmt.Sprintf("memory pressure stall: some avg10 %.2f%% is above %g%%", pr.Some.Avg10, t))
	}
	if t := c.PSIFullAvg10Above; t > 0 {
		if !pr.HasFull {
			err = fmt.Errorf("parsing %s: no \"full\" line for PSIFullAvg10Above", path)
		} else if pr.Full.Avg10 > t {
			stalls = append(stalls, fmt.Sprintf("memory pressure stall: full avg10 %.2f%% is above %g%%", pr.Full.Avg10, t))
		}
	}
	return stalls, err
}

// readPSI reads and parses the pressure file at path. It reports the
// kernel has no memory PSI (available false, no error) when the file does
// not exist (no CONFIG_PSI, or booted with psi=0 on kernels that then hide
// it) or refuses reads with EOPNOTSUPP (psi=0 on older kernels).
func readPSI(path string) (p psi, available bool, err error) {
	data, err := probes.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP) {
		return psi{}, false, nil
	}
	if err != nil {
		return psi{}, true, fmt.Errorf("reading memory PSI: %w", err)
	}
	p, err = parsePSI(data)
	if err != nil {
		return psi{}, true, fmt.Errorf("parsing %s: %w", path, err)
	}
	return p, true, nil
}

func readError(readings []probes.Reading, err error) probes.Result {
	return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: err.Error(), Readings: readings}
}

// finitePercent reports whether v is a sane percentage.
func finitePercent(v float64) bool {
	return !math.IsNaN(v) && v >= 0 && v <= 100
}
