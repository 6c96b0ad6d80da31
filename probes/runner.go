package probes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Waker is a Probe that can tell when what it watches has changed (a
// netlink message, a PSI trigger, a driver event, a kernel-log line), so the
// runner need not wait for the interval to run it. The runner calls Watch
// once, in its own goroutine, after the probe's Start gate opens; Watch calls
// wake whenever the probe should run now, and returns when ctx ends (nil) or
// when it cannot watch any more (an error saying why). The runner coalesces
// wakes: one run of a probe at a time, at most one more pending however many
// wakes arrive meanwhile, and no two wake-driven runs closer than
// RunnerOptions.WakeGap. The interval still runs the probe as a
// level-triggered resync, because every event source can drop events; after
// Watch returns an error the probe keeps only its interval, and the error is
// logged and kept in the probe's ProbeStats. wake is safe for concurrent use,
// never blocks, and may be called after Watch returned.
type Waker interface {
	Watch(ctx context.Context, wake func()) error
}

// Reasons the runner sets on a Result when the probe itself could not.
const (
	// ReasonProbeTimeout: the probe did not finish within its timeout.
	ReasonProbeTimeout = "ProbeTimeout"
	// ReasonProbePanic: the probe panicked.
	ReasonProbePanic = "ProbePanic"
	// ReasonProbeError: the probe returned a Result without a valid Status.
	ReasonProbeError = "ProbeError"
	// ReasonProbeCanceled: the caller's context ended before the probe
	// finished. The Runner never reports such results.
	ReasonProbeCanceled = "ProbeCanceled"
	// ReasonReadError is the reason probes use when they cannot read or
	// parse their source; probe packages re-export it.
	ReasonReadError = "ReadError"
)

// Clock is the runner's view of time, so tests can step it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C returns the channel the time is sent on when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped
	// the timer, false if it had already fired or been stopped.
	Stop() bool
}

// RealClock is the Clock of the time package.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer wrapped as a Timer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// Entry schedules one probe.
type Entry struct {
	Probe Probe
	// Interval is the time from when one run was due to when the next is
	// (the start of a run, but for the timer's latency). It must be
	// positive.
	Interval time.Duration
	// Timeout bounds one run. It must be positive and below Interval, so
	// runs of one probe never overlap.
	Timeout time.Duration
	// Retry, if positive and shorter than Interval, is the time from the
	// start of a run without a verdict (Unknown: it timed out, panicked,
	// or could not read) to the start of the next: a Waker whose Interval
	// is only a long level-triggered resync still gets over a run that
	// failed without an event to wake it. 0 means Interval.
	Retry time.Duration
	// Start, if set, gates the probe's first run: it waits until Start is
	// closed (the agent closes it once a Stateful probe's state has been
	// restored), then for its start jitter. nil means start at once.
	Start <-chan struct{}
}

// RunnerOptions tune a Runner. The zero value is ready to use.
type RunnerOptions struct {
	// Clock defaults to RealClock.
	Clock Clock
	// Jitter is the fraction of a probe's interval over which its first
	// run is spread at random, so nodes started together do not all read
	// their hosts, and write their Nodes, at the same instant. One draw
	// serves every probe of the runner (each delayed by the same fraction
	// of its interval): probes with the same interval run together, and
	// stay together, so an idle process wakes once for them rather than
	// once for each. 0 means 0.1; a negative value means no start delay.
	// It must be at most 1.
	Jitter float64
	// Rand returns a number in [0, 1); it defaults to math/rand/v2.Float64.
	// Run calls it once.
	Rand func() float64
	// Logger receives transitions into and out of Unknown; it defaults to
	// discarding everything.
	Logger *slog.Logger
	// Observer, if set, is told about every result the runner reports
	// (metrics live on the other side of this interface).
	Observer Observer
	// WakeGap is the least time from the start of one woken run of a
	// probe to the start of a run a wake asked for (see Waker), so an
	// event storm costs at most one run per WakeGap; the first wake after
	// a quiet spell, or after a run of the interval, runs the probe at
	// once. 0 means 100ms; a negative value
	// means no gap.
	WakeGap time.Duration
}

// DefaultWakeGap is the WakeGap a zero RunnerOptions gives.
const DefaultWakeGap = 100 * time.Millisecond

// Observer is told about each probe run. It is called from the probes'
// goroutines, concurrently, and must return promptly.
type Observer interface {
	// ProbeRan reports one run of probe: how long it took and, for a run
	// that gave no verdict, why (FailureNone for a verdict).
	ProbeRan(probe string, d time.Duration, failure FailureKind)
}

// FailureKind classifies a run that gave no verdict.
type FailureKind string

// The kinds of failed runs; FailureNone is a run with a verdict.
const (
	FailureNone FailureKind = ""
	// FailureTimeout: the probe did not finish within its timeout.
	FailureTimeout FailureKind = "timeout"
	// FailurePanic: the probe panicked.
	FailurePanic FailureKind = "panic"
	// FailureInvalid: the probe returned no or an invalid status.
	FailureInvalid FailureKind = "invalid_result"
	// FailureRead: the probe could not read or parse its source.
	FailureRead FailureKind = "read_error"
	// FailureOther: the probe reported Unknown for a reason of its own.
	FailureOther FailureKind = "unknown"
)

// Failure classifies a result: FailureNone for a verdict (OK or Problem),
// else why there was none, from the reasons runOnce and the probes set.
func Failure(r Result) FailureKind {
	if r.Status == StatusOK || r.Status == StatusProblem {
		return FailureNone
	}
	switch r.Reason {
	case ReasonProbeTimeout:
		return FailureTimeout
	case ReasonProbePanic:
		return FailurePanic
	case ReasonProbeError:
		return FailureInvalid
	case ReasonReadError:
		return FailureRead
	}
	return FailureOther
}

// ProbeStats counts one probe's runs.
type ProbeStats struct {
	Name string
	// Runs is how many results the probe produced.
	Runs uint64
	// Failures is how many of them were Unknown.
	Failures uint64
	// LastStatus and LastDuration describe the latest result.
	LastStatus   Status
	LastDuration time.Duration
	// Wakes is how many runs a wake (see Waker) started: coalesced
	// wakes count once.
	Wakes uint64
	// Watching says the probe is a Waker whose Watch is running.
	Watching bool
	// WatchError is why the probe's Watch stopped before the runner did
	// ("" while it runs, or for a probe that is not a Waker); the probe
	// then runs only on its interval.
	WatchError string
}

// Runner runs a fixed set of probes, each on its own interval, with a
// timeout per run, a random start delay, and panic recovery, so that one
// slow, broken or panicking probe never stops or delays the others.
type Runner struct {
	entries []Entry
	clock   Clock
	jitter  float64
	wakeGap time.Duration
	rand    func() float64
	log     *slog.Logger
	obs     Observer // nil: none
	// pending holds each entry's one pending wake (see Waker and Wake):
	// wakes that find it full are coalesced.
	pending []chan struct{}

	mu    sync.Mutex   // guards stats and last
	stats []ProbeStats // indexed like entries
	last  []Result     // latest result per entry, for transition logging; zero Status before the first
}

// NewRunner validates entries and returns a Runner for them. Every probe
// must be non-nil with a unique, non-empty name, and 0 < Timeout < Interval.
// All problems found are reported together.
func NewRunner(entries []Entry, opts RunnerOptions) (*Runner, error) {
	names, err := validateEntries(entries, opts)
	if err != nil {
		return nil, fmt.Errorf("invalid probe configuration: %w", err)
	}

	r := &Runner{
		entries: append([]Entry(nil), entries...),
		clock:   opts.Clock,
		jitter:  opts.Jitter,
		rand:    opts.Rand,
		log:     opts.Logger,
		obs:     opts.Observer,
		stats:   make([]ProbeStats, len(entries)),
		last:    make([]Result, len(entries)),
		pending: make([]chan struct{}, len(entries)),
	}
	for i := range r.pending {
		r.pending[i] = make(chan struct{}, 1)
	}
	if r.clock == nil {
		r.clock = RealClock{}
	}
	switch {
	case r.jitter == 0:
		r.jitter = 0.1
	case r.jitter < 0:
		r.jitter = 0
	}
	switch {
	case opts.WakeGap == 0:
		r.wakeGap = DefaultWakeGap
	case opts.WakeGap > 0:
		r.wakeGap = opts.WakeGap
	}
	if r.rand == nil {
		r.rand = rand.Float64
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	for i, name := range names {
		r.stats[i].Name = name
	}
	return r, nil
}

// validateEntries checks NewRunner's entries and options, returning every
// problem found together, and the probes' names by entry.
func validateEntries(entries []Entry, opts RunnerOptions) ([]string, error) {
	var errs []error
	seen := make(map[string]int, len(entries))
	names := make([]string, len(entries))
	for i, e := range entries {
		if e.Probe == nil {
			errs = append(errs, fmt.Errorf("probe entry %d: probe is nil", i))
			continue
		}
		name := e.Probe.Name()
		names[i] = name
		what := fmt.Sprintf("probe %q", name)
		if name == "" {
			what = fmt.Sprintf("probe entry %d (%T)", i, e.Probe)
			errs = append(errs, fmt.Errorf("%s: name is empty", what))
		} else if j, dup := seen[name]; dup {
			errs = append(errs, fmt.Errorf("%s: name is used by entries %d and %d", what, j, i))
		} else {
			seen[name] = i
		}
		if e.Interval <= 0 {
			errs = append(errs, fmt.Errorf("%s: interval %v must be positive", what, e.Interval))
		}
		switch {
		case e.Timeout <= 0:
			errs = append(errs, fmt.Errorf("%s: timeout %v must be positive", what, e.Timeout))
		case e.Interval > 0 && e.Timeout >= e.Interval:
			errs = append(errs, fmt.Errorf("%s: timeout %v must be less than interval %v", what, e.Timeout, e.Interval))
		}
		if e.Retry < 0 || (e.Retry > 0 && e.Retry <= e.Timeout) {
			errs = append(errs, fmt.Errorf("%s: retry %v must be 0 or more than timeout %v", what, e.Retry, e.Timeout))
		}
	}
	if math.IsNaN(opts.Jitter) || opts.Jitter > 1 {
		errs = append(errs, fmt.Errorf("jitter %v must be at most 1", opts.Jitter))
	}
	return names, errors.Join(errs...)
}

// Run runs every probe in its own goroutine until ctx is done, and returns
// once all of them have stopped. A probe first runs once its Start gate is
// closed (if it has one) and after a random delay in [0, Jitter*Interval),
// the same fraction of its interval for every probe, then every Interval
// measured from when its previous run was due (see loop); if a run
// (with the sink) took longer than Interval, the next starts right away.
// Runs of one probe never overlap. A probe that is a Waker also runs when
// its Watch asks (see Waker), and the interval then counts from that run
// (brought onto the shortest interval's instants where it is a multiple
// of it: see loop).
//
// sink receives every result. Calls to sink are serialized, so it need not
// be safe for concurrent use, but it should return promptly: a slow sink
// delays the other probes' results, and Run waits for it to return. Results
// of runs cut short by ctx ending are dropped, not passed to sink. A run
// that timed out is reported as ProbeTimeout; if its probe returns later
// with Events, those come with a later result of the probe (see
// lateEvents), not lost.
//
// A probe that ignores its context and never returns leaks the goroutine
// running it (see RunOnce); Run itself still returns. Run does wait for
// every Waker's Watch to return, which it must do when ctx ends. Call Run once per
// Runner: concurrent Runs would share its Stats.
func (r *Runner) Run(ctx context.Context, sink func(Result)) {
	var (
		sinkMu sync.Mutex // serializes sink calls
		wg     sync.WaitGroup
	)
	emit := func(res Result) {
		sinkMu.Lock()
		defer sinkMu.Unlock()
		if ctx.Err() != nil || sink == nil {
			return
		}
		sink(res)
	}
	phase := r.phase()
	ref := r.clock.Now()
	g := r.grid(ref, phase)
	for i, e := range r.entries {
		delay := time.Duration(phase * float64(e.Interval))
		wg.Go(func() { r.loop(ctx, i, ref, delay, g, emit) })
	}
	<-ctx.Done()
	wg.Wait()
}

// loop runs entry i, first once its Start gate is open and then after
// delay (or a wake), until ctx is done. A Waker's Watch runs beside it.
//
// The runs are due on a grid: delay after ref (after the gate opened, for
// a gated entry), then each Interval (or Retry) after the time the last
// run was due, not after the instant it started, which lags by the
// timer's and the scheduler's latency, different for each probe: probes of
// one interval (and phase) stay due at the very same instants, their
// timers fire together, and an idle process wakes once for all of them. A
// woken run, or one that started an interval or more late (the previous
// run overran), puts the grid at its start.
//
// Probes of different intervals share one grid too, where they can: an
// interval that is a multiple of the runner's shortest (the 1-minute
// resync of the log monitors, the 10-second probes) is brought onto the
// shortest interval's instants after its first run, and again after a
// woken or late run, or after runs of Retry (the next run then comes up to
// one shortest interval sooner than an Interval after it), so its runs fall
// on instants the process wakes for anyway (see grid).
func (r *Runner) loop(ctx context.Context, i int, ref time.Time, delay time.Duration, g grid, emit func(Result)) {
	e := r.entries[i]
	if e.Start != nil {
		if !gateOpen(ctx, e.Start) {
			return
		}
		ref = r.clock.Now()
	}
	pending := r.pending[i]
	// A run given up on at its timeout that returns with Events wakes the
	// loop: they reach the sink then, not with the run an interval later.
	wakeLate := func() {
		select {
		case pending <- struct{}{}:
		default:
		}
	}
	if w, ok := e.Probe.(Waker); ok {
		var watchers sync.WaitGroup
		defer watchers.Wait()
		watchers.Go(func() { r.watch(ctx, i, w, pending) })
	}
	// The runs given up on at their timeout whose probe has not returned
	// yet: the events their results carry come with a later result.
	var late []<-chan outcome
	due := ref.Add(delay)
	// snap: the next due time is to be brought onto the shared grid (after
	// the first run, a woken one, a late one or a Retry).
	snap := true
	woke, ok := r.wait(ctx, due.Sub(r.clock.Now()), pending)
	for ok {
		if woke {
			r.countWake(i)
		}
		// This run sees everything that happened before it starts.
		select {
		case <-pending:
		default:
		}
		start := r.clock.Now()
		if woke || start.Sub(due) >= e.Interval {
			due, snap = start, true
		}
		res, stack, l := runOnce(ctx, e.Probe, e.Timeout, r.clock, wakeLate)
		if ctx.Err() != nil {
			return
		}
		res.Events = append(lateEvents(&late), res.Events...)
		if l != nil && len(late) < maxLate {
			late = append(late, l)
		}
		r.record(i, res, stack)
		emit(res)
		ranWoken := woke
		next := e.next(res)
		due = due.Add(next)
		switch {
		case next != e.Interval:
			// A Retry puts the grid off the shared one: the run of the
			// interval after it is brought back.
			snap = true
		case snap:
			due = g.floor(due, e.Interval)
			snap = false
		}
		woke, ok = r.wait(ctx, due.Sub(r.clock.Now()), pending)
		if woke && ok && ranWoken {
			// A storm costs one run per WakeGap at most. A wake after a
			// run of the interval runs at once: the interval is no storm,
			// and an event must not wait because a run happened to be
			// due just before it.
			ok = r.sleep(ctx, start.Add(r.wakeGap).Sub(r.clock.Now()))
		}
	}
}

// grid is the instants the runner's probes of the shortest interval run
// at: anchor plus whole steps.
type grid struct {
	anchor time.Time
	step   time.Duration // 0: no shared grid
}

// grid returns the runner's shared grid: the shortest interval, anchored
// where the probes of that interval first run (ref plus the phase of it).
func (r *Runner) grid(ref time.Time, phase float64) grid {
	var step time.Duration
	for _, e := range r.entries {
		if step == 0 || e.Interval < step {
			step = e.Interval
		}
	}
	return grid{anchor: ref.Add(time.Duration(phase * float64(step))), step: step}
}

// floor returns the last instant of the grid at or before t, for a probe
// of the given interval; t itself where the interval is not a whole
// number of steps (its runs could not stay on the grid).
func (g grid) floor(t time.Time, interval time.Duration) time.Time {
	if g.step <= 0 || interval%g.step != 0 {
		return t
	}
	d := t.Sub(g.anchor)
	k := d / g.step
	if d < 0 && d%g.step != 0 {
		k--
	}
	return g.anchor.Add(k * g.step)
}

// next is the time from the start of a run that gave res to the start of
// the next run: Interval, or Retry after a run without a verdict.
func (e Entry) next(res Result) time.Duration {
	if res.Status == StatusUnknown && e.Retry > 0 && e.Retry < e.Interval {
		return e.Retry
	}
	return e.Interval
}

// Wake asks for a run of the probe named name now, as its Watch would (see
// Waker: coalesced, at most one pending, WakeGap after a woken run): what
// the agent does once a probe's state was cleared, so the way back does
// not wait for the interval. It never blocks, and reports whether the
// runner has such a probe.
func (r *Runner) Wake(name string) bool {
	for i, e := range r.entries {
		if e.Probe.Name() == name {
			select {
			case r.pending[i] <- struct{}{}:
			default:
			}
			return true
		}
	}
	return false
}

// wait waits for d on the runner's clock or for a wake on pending,
// whichever comes first; it reports whether a wake ended it and whether ctx
// is still live. A wake pending already ends it at once.
func (r *Runner) wait(ctx context.Context, d time.Duration, pending <-chan struct{}) (woke, live bool) {
	select {
	case <-pending:
		return true, ctx.Err() == nil
	default:
	}
	if d <= 0 {
		return false, ctx.Err() == nil
	}
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C():
		return false, true
	case <-pending:
		return true, ctx.Err() == nil
	}
}

// watch runs entry i's Watch until ctx ends, its wakes feeding pending, and
// records why it stopped early. A panic in Watch is recovered and reported
// like an error, so one broken watcher never takes the runner down.
func (r *Runner) watch(ctx context.Context, i int, w Waker, pending chan<- struct{}) {
	name := r.entries[i].Probe.Name()
	wake := func() {
		select {
		case pending <- struct{}{}:
		default:
		}
	}
	r.setWatch(i, true, "")
	err := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("watch panicked: %v", v)
				r.log.Error("probe watch panicked", "probe", name, "panic", v, "stack", string(debug.Stack()))
			}
		}()
		return w.Watch(ctx, wake)
	}()
	if ctx.Err() != nil {
		r.setWatch(i, false, "")
		return
	}
	if err == nil {
		err = errors.New("watch returned before the runner stopped")
	}
	// Logged before it is recorded: whoever sees WatchError also finds the log line.
	r.log.Warn("probe cannot watch for changes; it runs only on its interval", "probe", name, "error", err)
	r.setWatch(i, false, err.Error())
}

// setWatch records whether entry i's Watch runs and why it stopped.
func (r *Runner) setWatch(i int, watching bool, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats[i].Watching = watching
	r.stats[i].WatchError = why
}

// countWake counts one wake-driven run of entry i.
func (r *Runner) countWake(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats[i].Wakes++
}

// gateOpen waits until start is closed (at once for a nil start) and
// reports whether ctx is still live.
func gateOpen(ctx context.Context, start <-chan struct{}) bool {
	if start == nil {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-start:
		return ctx.Err() == nil
	}
}

// phase draws the fraction of its interval each probe waits before its
// first run: one draw for all (see RunnerOptions.Jitter).
func (r *Runner) phase() float64 {
	f := r.rand()
	if !(f >= 0 && f < 1) { // also catches NaN
		f = 0
	}
	return f * r.jitter
}

// sleep waits for d on the runner's clock and reports whether ctx is still
// live. It returns at once for d <= 0.
func (r *Runner) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// record updates entry i's stats and logs transitions into, within and out
// of Unknown. Steady states are not logged.
func (r *Runner) record(i int, res Result, stack []byte) {
	r.mu.Lock()
	prev := r.last[i]
	r.last[i] = res
	s := &r.stats[i]
	s.Runs++
	if res.Status == StatusUnknown {
		s.Failures++
	}
	s.LastStatus = res.Status
	s.LastDuration = res.Duration
	r.mu.Unlock()
	if r.obs != nil {
		r.obs.ProbeRan(res.Probe, res.Duration, Failure(res))
	}

	switch {
	case res.Status == StatusUnknown && (prev.Status != StatusUnknown || prev.Reason != res.Reason):
		attrs := []any{"probe", res.Probe, "reason", res.Reason, "message", res.Message, "duration", res.Duration}
		if stack != nil {
			attrs = append(attrs, "stack", string(stack))
		}
		r.log.Warn("probe cannot tell host health", attrs...)
	case res.Status != StatusUnknown && prev.Status == StatusUnknown:
		r.log.Info("probe works again", "probe", res.Probe, "status", res.Status, "reason", res.Reason)
	}
}

// Stats returns each probe's counters, in the order of the entries.
func (r *Runner) Stats() []ProbeStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ProbeStats(nil), r.stats...)
}

// RunOnce runs p once and returns its Result with Probe, Time (when it
// finished) and Duration filled in from clock (RealClock when nil). Failures
// of the probe itself become StatusUnknown results:
//
//   - it did not return within timeout: ReasonProbeTimeout;
//   - it panicked: ReasonProbePanic, with the panic value in the message;
//   - it returned no or an invalid Status: ReasonProbeError;
//   - ctx ended first: ReasonProbeCanceled.
//
// The probe's context is canceled at the timeout (with the real clock it
// also carries the deadline). RunOnce returns at the timeout even if the
// probe ignores its context: the probe keeps running in a goroutine that
// exits whenever the probe returns, and leaks until then. A timeout <= 0
// means no timeout beyond ctx.
func RunOnce(ctx context.Context, p Probe, timeout time.Duration, clock Clock) Result {
	res, _, _ := runOnce(ctx, p, timeout, clock, nil)
	return res
}

// maxLate bounds the runs one probe's loop keeps waiting on for their
// late events: past it, a probe that never returns is not waited on.
const maxLate = 4

// lateEvents returns the events of the late runs in *late whose probe has
// returned by now, oldest first, and drops those runs from *late. A run
// given up on at its timeout may still have reported events (the custom
// probe takes them from its pacing as it returns): they happened, and
// they reach the sink with the next result instead of being lost.
func lateEvents(late *[]<-chan outcome) []Event {
	var events []Event
	kept := (*late)[:0]
	for _, c := range *late {
		select {
		case o := <-c:
			events = append(events, o.res.Events...)
		default:
			kept = append(kept, c)
		}
	}
	*late = kept
	return events
}

// outcome is what the goroutine running a probe sends back.
type outcome struct {
	res   Result
	stack []byte // set when the probe panicked
}

// States of a run in runOnce, between the probe's goroutine and runOnce:
// whoever moves it from runRunning first decides whether the outcome is
// the run's (runReturned) or a late one (runGivenUp).
const (
	runRunning int32 = iota
	runReturned
	runGivenUp
)

// probeContext is the context a run gives its probe: with a deadline it
// can pass on (e.g. to exec) on the real clock, else only cancelled.
func probeContext(ctx context.Context, clock Clock, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, real := clock.(RealClock); real && timeout > 0 {
		return context.WithTimeout(ctx, timeout)
	}
	return context.WithCancel(ctx)
}

// startProbe runs p in a goroutine of its own and returns the channel its
// outcome comes on (buffered, so a probe that returns after the run gave
// up can still send and its goroutine exit; a panic is an outcome with its
// stack) and the run's state (runRunning, runReturned or runGivenUp):
// whoever moves it from runRunning first decides whose the outcome is.
// lateEvents, if set, is called when a probe given up on returns with
// Events.
func startProbe(pctx context.Context, p Probe, name string, lateEvents func()) (<-chan outcome, *atomic.Int32) {
	done := make(chan outcome, 1)
	state := new(atomic.Int32)
	send := func(o outcome) {
		done <- o
		if !state.CompareAndSwap(runRunning, runReturned) && lateEvents != nil && len(o.res.Events) > 0 {
			lateEvents()
		}
	}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				send(outcome{
					res: Result{
						Status:  StatusUnknown,
						Reason:  ReasonProbePanic,
						Message: fmt.Sprintf("probe %q panicked: %v", name, v),
					},
					stack: debug.Stack(),
				})
			}
		}()
		send(outcome{res: p.Probe(pctx)})
	}()
	return done, state
}

// runOnce is RunOnce, also returning the stack of a panic for logging and,
// when it gave up on the probe before it returned, the channel its
// outcome will come on (see lateEvents). lateEvents, if set, is called
// when a probe given up on returns with Events, once they are on that
// channel: the loop wakes to report them, not an interval later.
func runOnce(ctx context.Context, p Probe, timeout time.Duration, clock Clock, lateEvents func()) (Result, []byte, <-chan outcome) {
	if clock == nil {
		clock = RealClock{}
	}
	start := clock.Now()
	if p == nil {
		return finish(Result{Status: StatusUnknown, Reason: ReasonProbeError, Message: "probe is nil"}, "", start, clock), nil, nil
	}
	name := p.Name()

	pctx, cancel := probeContext(ctx, clock, timeout)
	defer cancel()

	// Arm the timer before starting the probe, so a probe that has
	// started always runs under its timeout (tests rely on this order).
	var expired <-chan time.Time
	if timeout > 0 {
		t := clock.NewTimer(timeout)
		defer t.Stop()
		expired = t.C()
	}

	done, state := startProbe(pctx, p, name, lateEvents)

	// Formatted only when a run times out, not on every run. The events
	// of a result it replaces are kept: they happened.
	timedOut := func(events []Event) Result {
		return Result{
			Status:  StatusUnknown,
			Reason:  ReasonProbeTimeout,
			Message: fmt.Sprintf("probe %q did not finish within its timeout of %v", name, timeout),
			Events:  events,
		}
	}
	// failed says the probe returned a failure of its own (not a panic).
	failed := func(o outcome) bool {
		return o.stack == nil && o.res.Status != StatusOK && o.res.Status != StatusProblem
	}
	var (
		o    outcome
		late <-chan outcome
	)
	select {
	case o = <-done:
		// A probe that gave up because its deadline passed reports its
		// own error; say plainly that it timed out.
		if failed(o) && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
			o.res = timedOut(o.res.Events)
		}
	case <-expired:
		if state.CompareAndSwap(runRunning, runGivenUp) {
			o.res = timedOut(nil)
			late = done
			break
		}
		// Finished at the same instant (its outcome is sent before it
		// says so): keep a verdict, but a failure is most likely the
		// probe giving up on its deadline.
		o = <-done
		if failed(o) {
			o.res = timedOut(o.res.Events)
		}
	case <-ctx.Done():
		select {
		case o = <-done:
		default:
			o.res = Result{
				Status:  StatusUnknown,
				Reason:  ReasonProbeCanceled,
				Message: fmt.Sprintf("probe %q canceled: %v", name, context.Cause(ctx)),
			}
		}
	}
	return finish(validate(name, o.res), name, start, clock), o.stack, late
}

// validate turns a result without a valid Status into a ProbeError.
func validate(name string, res Result) Result {
	switch res.Status {
	case StatusOK, StatusProblem, StatusUnknown:
		return res
	}
	msg := fmt.Sprintf("probe %q returned no status", name)
	if res.Status != "" {
		msg = fmt.Sprintf("probe %q returned invalid status %q", name, res.Status)
	}
	if res.Reason != "" || res.Message != "" {
		msg += fmt.Sprintf(" (reason %q, message %q)", res.Reason, res.Message)
	}
	return Result{
		Status:   StatusUnknown,
		Reason:   ReasonProbeError,
		Message:  msg,
		Readings: res.Readings,
	}
}

// finish stamps a result with the probe's name, end time and duration.
func finish(res Result, name string, start time.Time, clock Clock) Result {
	res.Probe = name
	res.Time = clock.Now()
	res.Duration = res.Time.Sub(start)
	return res
}
