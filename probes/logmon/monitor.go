package logmon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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
	// Retry is the pause before a source that failed (to open, to be
	// read, or the boot to be read) is tried again; it doubles with each
	// failure in a row up to MaxRetry. 0 means DefaultRetry.
	Retry time.Duration
	// Tap, if set, sees every line read that is not before the start
	// time (lookback, delay: what a restart must not take as new), after
	// it is matched, on the source's goroutine: how kernel Xid lines
	// reach the GPU probe (gpu.ParseNVRMXid). It must not block.
	Tap func(Line)
}

// How a failed source is tried again.
const (
	DefaultRetry = time.Second
	MaxRetry     = 30 * time.Second
)

// nextRetry is the pause after pause when the source failed again.
func nextRetry(pause time.Duration) time.Duration {
	return max(pause, min(2*pause, MaxRetry))
}

// DefaultPoll is how often a filelog source looks for appended lines, a
// rotation or a truncation.
const DefaultPoll = 100 * time.Millisecond

// Monitor runs one system-log-monitor file: one source, one Matcher, and a
// probe per condition (Probes). The source starts with the first Watch or
// Probe of any of them and stops with Close.
type Monitor struct {
	cfg   *Config
	path  string
	host  probes.Host
	now   func() time.Time
	loc   *time.Location
	poll  time.Duration
	retry time.Duration
	tap   func(Line)

	start  sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the source ended

	// The sources' state across the opens of the log, used only by the
	// source's goroutine (run): the kmsg scanner, the filelog follower,
	// the journald follower; nil before the first open.
	kscan *kmsgScanner
	fl    *filelogFollower
	jf    *journalFollower

	mu sync.Mutex // guards the fields below
	// bootID and boot are the kernel's boot, read once; bootErr is why the
	// last try failed, tried again until it succeeds.
	bootRead bool
	bootID   string
	boot     time.Time
	bootErr  error
	m        *Matcher // nil until the boot is known
	held     []heldState
	lines    uint64
	lastSeq  uint64
	gaps     []string // said in messages, the last few
	srcErr   error    // why the source last failed; nil once it opened again
	opened   bool     // the source opened since the last failure
	// skipped counts what was read but is not a line (a malformed kmsg
	// record, a filelog line not of the format, a journal entry without
	// MESSAGE); skipWhy says what was wrong with the last.
	skipped  uint64
	skipWhy  string
	wakes    map[int]func()
	nextWake int
	// started: the source was started (ensureStarted); what it found
	// since may have changed what a probe reports before its Watch
	// registered its wake.
	started bool

	// openJournal opens a journald file's journal directory; nil means
	// with libsystemd (tests stand in for it).
	openJournal func(dir string) (journal, error)
	// openKmsg opens the kernel log; nil means os.OpenFile (tests stand
	// in for it).
	openKmsg func(path string) (io.ReadCloser, error)
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
	mon := &Monitor{cfg: cfg, path: path, host: opts.Host, now: opts.Now, loc: opts.Location, poll: opts.Poll, retry: opts.Retry, tap: opts.Tap,
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
	if mon.retry <= 0 {
		mon.retry = DefaultRetry
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

// readBootLocked reads the boot id and when the kernel booted, once: a
// failure is kept in bootErr and the next call tries again. The boot time
// is now - uptime at the first read, and stays: a later clock step moves
// neither it, the kmsg lines' times nor the start time. mu is held.
func (mon *Monitor) readBootLocked() {
	if mon.bootRead {
		return
	}
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
	if strings.TrimSpace(string(id)) == "" {
		mon.bootErr = fmt.Errorf("reading the boot id %s: empty", mon.host.Proc("sys", "kernel", "random", "boot_id"))
		return
	}
	if !(secs >= 0) || math.IsInf(secs, 0) {
		mon.bootErr = fmt.Errorf("reading the uptime %q: not a number of seconds", up)
		return
	}
	mon.bootRead, mon.bootErr = true, nil
	mon.bootID = strings.TrimSpace(string(id))
	now := mon.now()
	mon.boot = now.Add(-time.Duration(secs * float64(time.Second)))
	mon.m = NewMatcher(mon.cfg, StartTime(now, mon.boot, mon.cfg.Lookback, mon.cfg.Delay))
	if !mon.boot.Add(mon.cfg.Delay).After(now.Add(-mon.cfg.Lookback)) {
		mon.m.MatchLive()
	}
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
		mon.mu.Lock()
		mon.started = true
		mon.mu.Unlock()
		go mon.run()
	})
}

// run reads the source until Close. A failure (the boot, opening the log,
// reading it) is kept for the probes, which say it (Unknown, a held
// problem standing), and the source is tried again after a pause that
// doubles from the Retry option up to MaxRetry, back to Retry once it
// opened; opened again, it goes on after what it read (see the sources).
func (mon *Monitor) run() {
	defer close(mon.done)
	pause := mon.retry
	for {
		err := mon.read(mon.ctx)
		if mon.ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the source ended")
		}
		mon.mu.Lock()
		mon.srcErr = err
		opened := mon.opened
		mon.opened = false
		mon.mu.Unlock()
		mon.wake()
		if opened {
			pause = mon.retry
		}
		select {
		case <-mon.ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = nextRetry(pause)
	}
}

// setOpened says the source opened: a failure before is over.
func (mon *Monitor) setOpened() {
	mon.mu.Lock()
	failed := mon.srcErr != nil
	mon.srcErr, mon.opened = nil, true
	mon.mu.Unlock()
	if failed {
		mon.wake()
	}
}

// bad counts what was read but is not a line, and keeps why.
func (mon *Monitor) bad(why string) {
	mon.mu.Lock()
	mon.skipped++
	mon.skipWhy = why
	mon.mu.Unlock()
}

// read runs the source until ctx ends or it fails. The boot read, when
// it is the one that learnt the boot, wakes the probes: the matcher is
// set and a problem held before a restart stands again (holdLocked).
func (mon *Monitor) read(ctx context.Context) error {
	mon.mu.Lock()
	known := mon.bootRead
	mon.readBootLocked()
	boot, err := mon.boot, mon.bootErr
	learnt := !known && mon.bootRead
	mon.mu.Unlock()
	if learnt {
		mon.wake()
	}
	if err != nil {
		return err
	}
	switch mon.cfg.Plugin {
	case PluginFilelog:
		return mon.readFilelog(ctx)
	case PluginJournald:
		return mon.readJournald(ctx)
	}
	return mon.readKmsg(ctx, boot)
}

// readKmsg opens the kernel log and reads it until ctx ends or reading
// fails. Opened again, it skips the records read before (the kernel hands
// a new reader its whole ring buffer), and counts those overwritten
// meanwhile as a Gap; the boot time is the one of the first open.
func (mon *Monitor) readKmsg(ctx context.Context, boot time.Time) error {
	// O_NONBLOCK: opening a FIFO standing in for /dev/kmsg does not wait
	// for a writer; reads still wait in Go's poller.
	open := mon.openKmsg
	if open == nil {
		open = func(path string) (io.ReadCloser, error) { return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0) }
	}
	f, err := open(mon.path)
	if err != nil {
		return fmt.Errorf("opening the kernel log: %w", err)
	}
	mon.setOpened()
	if mon.kscan == nil {
		mon.kscan = &kmsgScanner{boot: boot}
	}
	mon.kscan.reopened()
	stop := context.AfterFunc(ctx, func() { _ = f.Close() })
	defer stop()
	err = readKmsg(ctx, f, mon.kscan, mon.line, mon.gap, mon.bad, func() error { return sameFile(mon.path, f) })
	_ = f.Close()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// sameFile fails when the file at path is no longer f (a FIFO or file
// standing in for /dev/kmsg removed or replaced): it is opened again. An f
// that cannot say what it is passes.
func sameFile(path string, f io.Reader) error {
	sf, ok := f.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return nil
	}
	cur, err := sf.Stat()
	if err != nil {
		return nil
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("looking at the kernel log: %w", err)
	case !os.SameFile(st, cur):
		return fmt.Errorf("the kernel log %s was replaced: opening it again", path)
	}
	return nil
}

// readFilelog follows a filelog file until ctx ends or reading fails;
// opened again, it goes on where it was in the same file.
func (mon *Monitor) readFilelog(ctx context.Context) error {
	if mon.fl == nil {
		mon.fl = &filelogFollower{path: mon.path, line: mon.filelogLine, note: mon.note, bad: mon.bad}
	}
	return mon.fl.run(ctx, mon.poll, mon.setOpened)
}

// filelogLine parses and matches one line of a filelog file, placed by
// its file and the byte after it. A line not of the format is skipped
// (NPD skips it too) and counted; an empty one is only skipped.
func (mon *Monitor) filelogLine(text string, at filePlace) {
	if strings.TrimSpace(text) == "" {
		return
	}
	l, err := mon.cfg.Filelog.Parse(text, mon.now(), mon.loc)
	if err != nil {
		mon.bad(err.Error())
		return
	}
	l.File, l.Offset, l.Live = at.file, at.end, at.live
	mon.line(l)
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
	l.Message = strings.ToValidUTF8(l.Message, "\uFFFD")
	matched := mon.m.Push(l, mon.now())
	fresh := !mon.m.Old(l)
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

// Watch starts the source (once per monitor) and calls wake on every
// change of what the probe reports: when the boot is learnt (the matcher
// set, a held problem put back), a line matched, records were lost, the
// source failed or opened again, until ctx ends or the monitor is closed;
// and once at its start if the source was started already (by another
// probe's Watch, or by a run of this probe that came before its Watch:
// the boot read, learnt or failed, and the source's failures since woke
// no one for it), so a Watch that begins after them does not wait for the
// interval. A source that fails is tried again (see run): Watch goes on
// meanwhile, and returns nil. (A clear request is woken by the agent,
// after Clear.)
func (p *Probe) Watch(ctx context.Context, wake func()) error {
	mon := p.mon
	mon.mu.Lock()
	id := mon.nextWake
	mon.nextWake++
	mon.wakes[id] = wake
	missed := mon.started || mon.bootRead
	mon.mu.Unlock()
	if missed {
		wake()
	}
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
		return nil
	}
}

// Probe reports the condition as the lines read so far have it, with the
// Events not reported yet on the probe that carries them. A run before the
// source has read the boot reads it (as Restore does), so no verdict is
// given without it: not a healthy condition without its reason and
// message; a run that learns it wakes the monitor's probes, as the
// source's boot read does.
func (p *Probe) Probe(context.Context) probes.Result {
	mon := p.mon
	mon.ensureStarted()
	learnt := false
	defer func() {
		if learnt {
			mon.wake()
		}
	}()
	mon.mu.Lock()
	defer mon.mu.Unlock()
	if !mon.bootRead {
		mon.readBootLocked()
		learnt = mon.bootRead
	}
	res := probes.Result{Readings: []probes.Reading{
		{Name: "log", Value: mon.path},
		{Name: "lines read", Value: strconv.FormatUint(mon.lines, 10)},
		{Name: "last sequence", Value: strconv.FormatUint(mon.lastSeq, 10)},
		{Name: "lines skipped", Value: skippedReading(mon.skipped, mon.skipWhy)},
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

// skippedReading says how many things read were not lines, and what was
// wrong with the last.
func skippedReading(n uint64, why string) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (the last: %s)", n, why)
}

// judge is a condition's verdict: a held problem stands whatever the
// source does (a read failure is never a recovery); otherwise a read
// failure is Unknown, and the default reason and message OK.
func judge(cond string, cs ConditionState, readErr error, path string) (probes.Status, string, string) {
	switch {
	case cond != "" && cs.Problem:
		return probes.StatusProblem, cs.Reason, cs.Message
	case readErr != nil:
		return probes.StatusUnknown, ReasonLogReadError, fmt.Sprintf("reading %s: %v; trying again", path, readErr)
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

// Interval, Retry and Timeout of a log monitor probe's Entry. Every
// change of what a probe reports wakes it (Watch; the agent wakes it after
// a clear): the interval is only the level-triggered resync, long, so an
// idle monitor does not wake once a second for nothing (NPD syncs its
// conditions once a second). A run without a verdict (it timed out, or
// the log cannot be read) is followed by another after Retry, as often as
// NPD's sync. PollInterval is how often a probe that is not woken would
// have to run to be as quick as NPD's sync (the latency benchmark's polled
// agent).
const (
	Interval     = time.Minute
	Retry        = time.Second
	Timeout      = 500 * time.Millisecond
	PollInterval = time.Second
)

// Entry schedules the probe.
func (p *Probe) Entry() probes.Entry {
	return probes.Entry{Probe: p, Interval: Interval, Retry: Retry, Timeout: Timeout}
}
