package logmon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// ProbeNamePrefix starts the name of a log monitor probe: the prefix and
// the condition type, or, for a file without conditions, the prefix and
// the file's base name.
const ProbeNamePrefix = "logmon-"

// Reasons the monitor reports of its own.
const (
	// ReasonLogReadError: the log could not be read (opened, or the boot
	// read); a condition that holds a problem keeps it.
	ReasonLogReadError = "LogReadError"
	// ReasonKernelLogOverrun: records were lost before they were read.
	ReasonKernelLogOverrun = "KernelLogOverrun"
	// ReasonEventsOnly is the OK reason of a file without conditions.
	ReasonEventsOnly = "EventsOnly"
)

// Options tune a Monitor.
type Options struct {
	// Host is where boot_id and uptime are read.
	Host probes.Host
	// Path is the log to read; empty means the file's logPath under
	// Host (DefaultKmsgPath for kmsg).
	Path string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Location is the time zone of filelog timestamps without one; nil
	// means time.Local, as NPD.
	Location *time.Location
	// Poll is how often a filelog source looks for more; 0 means
	// DefaultPoll.
	Poll time.Duration
	// Tap, if set, sees every line read that is not before the start
	// time (lookback, delay: what a restart must not take as new), after
	// it is matched, on the source's goroutine: how kernel Xid lines
	// reach the GPU probe (gpu.ParseNVRMXid). It must not block.
	Tap func(Line)
}

// DefaultPoll is how often a filelog source looks for appended lines, a
// rotation or a truncation.
const DefaultPoll = 100 * time.Millisecond

// Monitor runs one system-log-monitor file: one source, one Matcher, and a
// probe per condition (Probes). The source starts with the first Watch or
// Probe of any of them and stops with Close.
type Monitor struct {
	cfg  *Config
	path string
	host probes.Host
	now  func() time.Time
	loc  *time.Location
	poll time.Duration
	tap  func(Line)

	start  sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the source ended

	mu sync.Mutex // guards the fields below
	// bootID and boot are the kernel's boot, read once (bootErr if not).
	bootRead bool
	bootID   string
	boot     time.Time
	bootErr  error
	m        *Matcher // nil until the boot is known
	held     []heldState
	lines    uint64
	lastSeq  uint64
	gaps     []string // said in messages, the last few
	srcErr   error
	wakes    map[int]func()
	nextWake int

	// openJournal opens a journald file's journal directory; nil means
	// with libsystemd (tests stand in for it).
	openJournal func(dir string) (journal, error)
}

// heldState is what a probe kept across a restart (State, Restore), in
// the boot it was seen in: the problem its condition held, and, on the
// probe carrying the Events, the last line whose Events were reported.
type heldState struct {
	BootID        string          `json:"bootID"`
	Cond          *ConditionState `json:"condition,omitempty"`
	EventsThrough *Position       `json:"eventsThrough,omitempty"`
}

// New makes the monitor of cfg. opts.Path replaces a kmsg file's logPath
// only; a journald file's is read as JournalDir says.
func New(cfg *Config, opts Options) (*Monitor, error) {
	var path string
	switch cfg.Plugin {
	case PluginKmsg:
		path = opts.Path
		if path == "" {
			lp := cfg.LogPath
			if lp == "" {
				lp = DefaultKmsgPath
			}
			path = opts.Host.Path(lp)
		}
	case PluginFilelog:
		path = opts.Host.Path(cfg.LogPath)
	case PluginJournald:
		path = JournalDir(opts.Host, cfg.LogPath)
	default:
		return nil, fmt.Errorf("%s: plugin %q: selftaint reads only %q, %q and %q logs", cfg.Path, cfg.Plugin, PluginKmsg, PluginFilelog, PluginJournald)
	}
	mon := &Monitor{cfg: cfg, path: path, host: opts.Host, now: opts.Now, loc: opts.Location, poll: opts.Poll, tap: opts.Tap,
		done: make(chan struct{}), wakes: map[int]func(){}}
	if mon.now == nil {
		mon.now = time.Now
	}
	if mon.loc == nil {
		mon.loc = time.Local
	}
	if mon.poll <= 0 {
		mon.poll = DefaultPoll
	}
	mon.ctx, mon.cancel = context.WithCancel(context.Background())
	return mon, nil
}

// Probes returns the file's probes: one per condition, in file order, the
// first carrying the temporary rules' Events (and the monitor's own); a
// file without conditions gets one events-only probe named after it.
func (mon *Monitor) Probes() []*Probe {
	var ps []*Probe
	for i, c := range mon.cfg.Conditions {
		ps = append(ps, &Probe{mon: mon, cond: c.Type, events: i == 0})
	}
	if len(ps) == 0 {
		ps = append(ps, &Probe{mon: mon, events: true})
	}
	return ps
}

// Path is the log the monitor reads, under its host root.
func (mon *Monitor) Path() string { return mon.path }

// TapConfig is a kmsg file without conditions or rules named name: a
// Monitor of it only reads the kernel log for its Tap, from when it starts
// (no lookback), and reports its own read failures and overruns on its one
// events-only probe. It is how the GPU probe reads the kernel's NVRM Xid
// lines when no kmsg log monitor is configured.
func TapConfig(name string) *Config {
	return &Config{Path: name, Plugin: PluginKmsg, LogPath: DefaultKmsgPath, BufferSize: DefaultBufferSize, Source: name, MetricsReporting: true}
}

// Close stops the source.
func (mon *Monitor) Close() error {
	mon.cancel()
	return nil
}

// readBoot reads the boot id and when the kernel booted, once. mu is held.
func (mon *Monitor) readBootLocked() {
	if mon.bootRead {
		return
	}
	mon.bootRead = true
	id, err := os.ReadFile(mon.host.Proc("sys", "kernel", "random", "boot_id"))
	if err != nil {
		mon.bootErr = fmt.Errorf("reading the boot id: %w", err)
		return
	}
	up, err := os.ReadFile(mon.host.Proc("uptime"))
	if err != nil {
		mon.bootErr = fmt.Errorf("reading the uptime: %w", err)
		return
	}
	f := strings.Fields(string(up))
	secs, err := strconv.ParseFloat(strings.Join(f[:min(1, len(f))], ""), 64)
	if err != nil {
		mon.bootErr = fmt.Errorf("reading the uptime %q: %w", up, err)
		return
	}
	mon.bootID = strings.TrimSpace(string(id))
	now := mon.now()
	mon.boot = now.Add(-time.Duration(secs * float64(time.Second)))
	mon.m = NewMatcher(mon.cfg, StartTime(now, mon.boot, mon.cfg.Lookback, mon.cfg.Delay))
	for _, h := range mon.held {
		mon.holdLocked(h)
	}
	mon.held = nil
}

// holdLocked puts back a problem held, and the Events reported, before a
// restart, if they are of this boot. mu is held and the matcher is set.
func (mon *Monitor) holdLocked(h heldState) {
	if h.BootID != mon.bootID {
		return
	}
	if h.Cond != nil {
		mon.m.Hold(*h.Cond)
	}
	if h.EventsThrough != nil {
		mon.m.SetReported(*h.EventsThrough)
	}
}

// ensureStarted starts the source once.
func (mon *Monitor) ensureStarted() {
	mon.start.Do(func() {
		go func() {
			defer close(mon.done)
			err := mon.read(mon.ctx)
			mon.mu.Lock()
			mon.srcErr = err
			mon.mu.Unlock()
			mon.wake()
		}()
	})
}

// read runs the source until ctx ends or it fails.
func (mon *Monitor) read(ctx context.Context) error {
	mon.mu.Lock()
	mon.readBootLocked()
	boot, err := mon.boot, mon.bootErr
	mon.mu.Unlock()
	if err != nil {
		return err
	}
	switch mon.cfg.Plugin {
	case PluginFilelog:
		return mon.readFilelog(ctx)
	case PluginJournald:
		return mon.readJournald(ctx)
	}
	// O_NONBLOCK: opening a FIFO standing in for /dev/kmsg does not wait
	// for a writer; reads still wait in Go's poller.
	f, err := os.OpenFile(mon.path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("opening the kernel log: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.Close() })
	defer stop()
	err = ReadKmsg(ctx, f, boot, mon.line, mon.gap)
	_ = f.Close()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// readFilelog follows a filelog file until ctx ends.
func (mon *Monitor) readFilelog(ctx context.Context) error {
	line := func(text string) {
		l, err := mon.cfg.Filelog.Parse(text, mon.now(), mon.loc)
		if err != nil {
			return // not a line of the format: NPD skips it too
		}
		mon.line(l)
	}
	return ReadFilelog(ctx, mon.path, mon.poll, line, mon.note)
}

// note records something the source saw (a rotation, a truncation): in
// the messages and as an Event.
func (mon *Monitor) note(reason, msg string) {
	mon.mu.Lock()
	mon.gaps = append(mon.gaps, msg)
	if len(mon.gaps) > maxGaps {
		mon.gaps = mon.gaps[len(mon.gaps)-maxGaps:]
	}
	mon.m.Note(reason, fmt.Sprintf("%s: %s", mon.cfg.Source, msg), mon.now())
	mon.mu.Unlock()
	mon.wake()
}

// line matches one line, waking the probes when a rule matched.
func (mon *Monitor) line(l Line) {
	mon.mu.Lock()
	mon.lines++
	mon.lastSeq = l.Seq
	matched := mon.m.Push(l, mon.now())
	fresh := !l.Time.Before(mon.m.since)
	mon.mu.Unlock()
	if fresh && mon.tap != nil {
		mon.tap(l)
	}
	if matched {
		mon.wake()
	}
}

// maxGaps is how many gaps the probes' messages keep.
const maxGaps = 3

// gap records lost records: in the messages and as an Event.
func (mon *Monitor) gap(g Gap) {
	mon.note(ReasonKernelLogOverrun, fmt.Sprintf("%s: %s; reading goes on", mon.path, g.String()))
}

// wake asks every watching probe for a run.
func (mon *Monitor) wake() {
	mon.mu.Lock()
	fs := make([]func(), 0, len(mon.wakes))
	for _, f := range mon.wakes {
		fs = append(fs, f)
	}
	mon.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Probe is one of a Monitor's conditions (or its Events only) as a
// probes.Probe, probes.Waker and probes.Stateful.
type Probe struct {
	mon    *Monitor
	cond   string // "" for the events-only probe
	events bool   // it reports the monitor's Events
}

// Name is ProbeNamePrefix and the condition type, or the file's base name
// without extension for the events-only probe.
func (p *Probe) Name() string {
	if p.cond == "" {
		base := filepath.Base(p.mon.cfg.Path)
		return ProbeNamePrefix + strings.TrimSuffix(base, filepath.Ext(base))
	}
	return ProbeNamePrefix + p.cond
}

// Condition is the condition type the probe feeds; "" when events-only.
func (p *Probe) Condition() string { return p.cond }

// Watch starts the source (once per monitor) and calls wake when a line
// matched or records were lost, until ctx ends; it returns the source's
// error if it fails.
func (p *Probe) Watch(ctx context.Context, wake func()) error {
	mon := p.mon
	mon.mu.Lock()
	id := mon.nextWake
	mon.nextWake++
	mon.wakes[id] = wake
	mon.mu.Unlock()
	defer func() {
		mon.mu.Lock()
		delete(mon.wakes, id)
		mon.mu.Unlock()
	}()
	mon.ensureStarted()
	select {
	case <-ctx.Done():
		return nil
	case <-mon.done:
		mon.mu.Lock()
		defer mon.mu.Unlock()
		if mon.srcErr != nil {
			return fmt.Errorf("%s: %w", mon.path, mon.srcErr)
		}
		return nil
	}
}

// Probe reports the condition as the lines read so far have it, with the
// Events not reported yet on the probe that carries them.
func (p *Probe) Probe(context.Context) probes.Result {
	mon := p.mon
	mon.ensureStarted()
	mon.mu.Lock()
	defer mon.mu.Unlock()
	res := probes.Result{Readings: []probes.Reading{
		{Name: "log", Value: mon.path},
		{Name: "lines read", Value: strconv.FormatUint(mon.lines, 10)},
		{Name: "last sequence", Value: strconv.FormatUint(mon.lastSeq, 10)},
	}}
	var readErr error
	switch {
	case mon.bootErr != nil:
		readErr = mon.bootErr
	case mon.srcErr != nil:
		readErr = mon.srcErr
	}
	var cs ConditionState
	if mon.m != nil {
		for _, c := range mon.m.Conditions() {
			if c.Type == p.cond {
				cs = c
			}
		}
	}
	res.Status, res.Reason, res.Message = judge(p.cond, cs, readErr, mon.path)
	if len(mon.gaps) > 0 && res.Status != probes.StatusProblem {
		res.Message += "; " + strings.Join(mon.gaps, "; ")
	}
	if p.events && mon.m != nil {
		res.Events = mon.m.TakeEvents() // the matched lines: Monitor.View
	}
	return res
}

// judge is a condition's verdict: a held problem stands whatever the
// source does (a read failure is never a recovery); otherwise a read
// failure is Unknown, and the default reason and message OK.
func judge(cond string, cs ConditionState, readErr error, path string) (probes.Status, string, string) {
	switch {
	case cond != "" && cs.Problem:
		return probes.StatusProblem, cs.Reason, cs.Message
	case readErr != nil:
		return probes.StatusUnknown, ReasonLogReadError, fmt.Sprintf("reading %s: %v", path, readErr)
	case cond == "":
		return probes.StatusOK, ReasonEventsOnly, "reports Events only, reading " + path
	}
	return probes.StatusOK, cs.Reason, cs.Message
}

// State is, with the boot they were seen in, the condition's problem
// (none while healthy) and, on the probe carrying the Events, the last line
// whose Events were reported (which changes only when Events are taken);
// nil when it holds neither.
func (p *Probe) State() []byte {
	mon := p.mon
	mon.mu.Lock()
	defer mon.mu.Unlock()
	if mon.m == nil {
		return nil
	}
	h := heldState{BootID: mon.bootID}
	for _, c := range mon.m.Conditions() {
		if p.cond != "" && c.Type == p.cond && c.Problem {
			h.Cond = &c
		}
	}
	if r := mon.m.Reported(); p.events && !r.Time.IsZero() {
		h.EventsThrough = &r
	}
	if h.Cond == nil && h.EventsThrough == nil {
		return nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil
	}
	return b
}

// Restore takes back what State kept before a restart: a held problem
// stands again, and the Events of lines reported before are not recorded
// again, if they were of this boot; after a reboot both are dropped.
func (p *Probe) Restore(state []byte) error {
	if len(state) == 0 {
		return nil
	}
	var h heldState
	if err := json.Unmarshal(state, &h); err != nil {
		return fmt.Errorf("reading the held condition: %w", err)
	}
	if c := h.Cond; c != nil && (c.Type != p.cond || !c.Problem) {
		return fmt.Errorf("the state holds condition %q (problem %v), not a problem of %q", c.Type, c.Problem, p.cond)
	}
	if !p.events {
		h.EventsThrough = nil // the Events moved to another probe
	}
	mon := p.mon
	mon.mu.Lock()
	defer mon.mu.Unlock()
	if mon.m == nil {
		mon.readBootLocked()
	}
	if mon.m == nil { // the boot is unknown yet: try when it is
		mon.held = append(mon.held, h)
		return nil
	}
	mon.holdLocked(h)
	return nil
}

// Clear drops the condition's problem ("all" or the condition type); like
// a reboot, only a new matching line sets it again.
func (p *Probe) Clear(targets []string, _ time.Time) (string, error) {
	for _, t := range targets {
		if t != "all" && t != p.cond {
			return "", fmt.Errorf("unknown target %q: the log monitor probe %s holds only %s", t, p.Name(), p.cond)
		}
	}
	mon := p.mon
	mon.mu.Lock()
	defer mon.mu.Unlock()
	if mon.m == nil || !mon.m.Reset(p.cond, mon.now()) {
		return "nothing held", nil
	}
	return "cleared " + p.cond, nil
}

// Interval and Timeout of a log monitor probe's Entry: a run only copies
// what the source matched, so it is cheap; NPD reports its log monitors'
// conditions once a second. With the runner's wake-ups (probes.Waker) the
// interval is only the level-triggered resync.
const (
	Interval = time.Second
	Timeout  = 500 * time.Millisecond
)

// Entry schedules the probe.
func (p *Probe) Entry() probes.Entry {
	return probes.Entry{Probe: p, Interval: Interval, Timeout: Timeout}
}
