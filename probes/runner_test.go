package probes_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// failAfter bounds how long a test waits for something that must happen; it
// only turns a hang into a failure and never decides an assertion.
const failAfter = 10 * time.Second

func ok(name string) probestest.StaticProbe {
	return probestest.StaticProbe{ProbeName: name, Result: probes.Result{Status: probes.StatusOK, Reason: "Fine"}}
}

// harness runs a Runner in the background and collects its results.
type harness struct {
	t       *testing.T
	clock   *probestest.FakeClock
	runner  *probes.Runner
	results chan probes.Result
	cancel  context.CancelFunc
	done    chan struct{}
}

func start(t *testing.T, entries []probes.Entry, opts probes.RunnerOptions, sink func(*probestest.FakeClock, probes.Result)) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		clock:   probestest.NewFakeClock(t0),
		results: make(chan probes.Result, 100),
		done:    make(chan struct{}),
	}
	if opts.Clock == nil {
		opts.Clock = h.clock // h.clock stands still unless opts has a clock of its own
	}
	r, err := probes.NewRunner(entries, opts)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	h.runner = r
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		r.Run(ctx, func(res probes.Result) {
			if sink != nil {
				sink(h.clock, res)
			}
			h.results <- res
		})
	}()
	t.Cleanup(h.stop)
	return h
}

// stop cancels Run and waits for it to return.
func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(failAfter):
		h.t.Fatalf("Run did not return within %v of cancel", failAfter)
	}
}

func (h *harness) recv() probes.Result {
	h.t.Helper()
	select {
	case res := <-h.results:
		return res
	case <-time.After(failAfter):
		h.t.Fatalf("no result within %v", failAfter)
		return probes.Result{}
	}
}

// waiters blocks until n timers are armed on the fake clock.
func (h *harness) waiters(n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if err := h.clock.BlockUntilWaitersContext(ctx, n); err != nil {
		h.t.Fatalf("waiting for %d armed timers (have %d): %v", n, h.clock.WaiterCount(), err)
	}
}

// quiet asserts that no result is pending. It is only meaningful when every
// probe goroutine is known to be blocked on the fake clock.
func (h *harness) quiet() {
	h.t.Helper()
	select {
	case res := <-h.results:
		h.t.Fatalf("unexpected result %+v", res)
	default:
	}
}

func TestRunnerJitterDelaysFirstRunThenInterval(t *testing.T) {
	const interval = 10 * time.Second
	h := start(t, []probes.Entry{{Probe: ok("a"), Interval: interval, Timeout: time.Second}},
		probes.RunnerOptions{Rand: func() float64 { return 0.5 }}, nil) // default jitter 0.1: delay 500ms

	h.waiters(1)
	h.clock.Step(499 * time.Millisecond)
	if got, want := h.clock.WaiterCount(), 1; got != want {
		t.Fatalf("after 499ms: armed timers = %d, want %d (first run must wait for its jitter)", got, want)
	}
	h.quiet()
	h.clock.Step(time.Millisecond)
	res := h.recv()
	if got, want := res.Time, t0.Add(500*time.Millisecond); !got.Equal(want) {
		t.Errorf("first run at %v, want %v", got, want)
	}
	if got, want := res.Probe, "a"; got != want {
		t.Errorf("Probe = %q, want %q", got, want)
	}

	// The next run is one interval after the start of the first.
	h.waiters(1)
	h.clock.Step(interval - time.Nanosecond)
	if got, want := h.clock.WaiterCount(), 1; got != want {
		t.Fatalf("before the interval: armed timers = %d, want %d", got, want)
	}
	h.quiet()
	h.clock.Step(time.Nanosecond)
	res = h.recv()
	if got, want := res.Time, t0.Add(500*time.Millisecond+interval); !got.Equal(want) {
		t.Errorf("second run at %v, want %v", got, want)
	}
	h.waiters(1)
	h.clock.Step(interval)
	res = h.recv()
	if got, want := res.Time, t0.Add(500*time.Millisecond+2*interval); !got.Equal(want) {
		t.Errorf("third run at %v, want %v", got, want)
	}
}

// TestRunnerRunsOnAGrid: a run that starts late (its timer fired late,
// the process was busy) does not push the later runs back: they stay due
// each Interval after the first, so probes of one interval keep firing
// together (one wake-up of an idle process for all of them). The old
// runner counted each interval from the late start, and probes drifted
// apart by their latencies.
func TestRunnerRunsOnAGrid(t *testing.T) {
	const interval, late = 10 * time.Second, 5 * time.Millisecond
	h := start(t, []probes.Entry{{Probe: ok("a"), Interval: interval, Timeout: time.Second}},
		probes.RunnerOptions{Jitter: -1}, nil)
	if res := h.recv(); !res.Time.Equal(t0) {
		t.Fatalf("first run at %v, want %v", res.Time, t0)
	}
	h.waiters(1)
	h.clock.Step(interval + late)
	if res := h.recv(); !res.Time.Equal(t0.Add(interval + late)) {
		t.Fatalf("second run at %v, want %v", res.Time, t0.Add(interval+late))
	}
	h.waiters(1)
	h.clock.Step(interval - late)
	if res := h.recv(); !res.Time.Equal(t0.Add(2 * interval)) {
		t.Errorf("third run at %v, want %v (two intervals after the first, whatever the second's lateness)", res.Time, t0.Add(2*interval))
	}
}

// TestRunnerLongerIntervalsJoinTheGrid: a probe whose interval is a
// multiple of the runner's shortest runs on the shortest interval's
// instants after its first run and after a woken run, so an idle process
// wakes once for both; the old runner kept each probe on a grid of its
// own (b at 1.5 s, 31.5 s; woken at 33.5 s, then 63.5 s), a wake-up of its
// own each time.
func TestRunnerLongerIntervalsJoinTheGrid(t *testing.T) {
	const short, long = 10 * time.Second, 30 * time.Second
	h := start(t, []probes.Entry{
		{Probe: ok("a"), Interval: short, Timeout: time.Second},
		{Probe: ok("b"), Interval: long, Timeout: time.Second},
	}, probes.RunnerOptions{Rand: func() float64 { return 0.5 }}, nil) // default jitter 0.1: a first at 0.5 s, b at 1.5 s
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// step moves the clock by d once both probes wait, and returns the
	// results of runs due by then (n of them).
	step := func(d time.Duration, n int) map[string][]time.Time {
		t.Helper()
		h.waiters(2)
		h.clock.Step(d)
		got := map[string][]time.Time{}
		for range n {
			res := h.recv()
			got[res.Probe] = append(got[res.Probe], res.Time)
		}
		return got
	}
	step(ms(500), 1)  // a at 0.5 s
	step(ms(1000), 1) // b at 1.5 s
	step(short-ms(1000), 1)
	step(short, 1) // a at 20.5 s
	// a at 30.5 s, and b with it: waited for without moving the clock (as
	// before, b would be due at 31.5 s and never come).
	withA := func(what string, want time.Time) {
		t.Helper()
		h.waiters(2)
		h.clock.Step(short)
		got := map[string]time.Time{}
		deadline := time.After(failAfter)
		for len(got) < 2 {
			select {
			case res := <-h.results:
				got[res.Probe] = res.Time
			case <-deadline:
				t.Fatalf("%s: runs %v, want a and b at %v", what, got, want)
			}
		}
		if !got["a"].Equal(want) || !got["b"].Equal(want) {
			t.Fatalf("%s: runs %v, want a and b at %v", what, got, want)
		}
	}
	withA("b's second run", at(ms(30500)))

	// A woken run at 33.5 s: the next is due on a's grid at 60.5 s, not
	// a whole interval later at 63.5 s.
	h.waiters(2)
	h.clock.Step(3 * time.Second)
	h.runner.Wake("b")
	if res := h.recv(); res.Probe != "b" || !res.Time.Equal(at(ms(33500))) {
		t.Fatalf("woken run: %s at %v, want b at %v", res.Probe, res.Time, at(ms(33500)))
	}
	step(7*time.Second, 1) // a at 40.5 s
	step(short, 1)         // a at 50.5 s
	withA("the run after the woken one", at(ms(60500)))
}

// TestRunnerRetryAfterUnknown: a probe with a Retry shorter than its
// Interval runs again after Retry when a run gave no verdict (Unknown),
// and at the interval when it did (on the grid of its first run, which the
// retry left: see TestRunnerRetryRejoinsTheGrid); the old runner waited
// the interval after both.
func TestRunnerRetryAfterUnknown(t *testing.T) {
	const interval, retry = time.Minute, time.Second
	var runs atomic.Int32
	p := probestest.FuncProbe{ProbeName: "a", Func: func(context.Context) probes.Result {
		if runs.Add(1) == 1 {
			return probes.Result{Status: probes.StatusUnknown, Reason: "ReadError"}
		}
		return probes.Result{Status: probes.StatusOK, Reason: "Fine"}
	}}
	h := start(t, []probes.Entry{{Probe: p, Interval: interval, Timeout: 500 * time.Millisecond, Retry: retry}},
		probes.RunnerOptions{Jitter: -1}, nil)
	if res := h.recv(); res.Status != probes.StatusUnknown || !res.Time.Equal(t0) {
		t.Fatalf("first run: got %s at %v, want Unknown at %v", res.Status, res.Time, t0)
	}
	h.waiters(1)
	h.clock.Step(retry)
	if res := h.recv(); res.Status != probes.StatusOK || !res.Time.Equal(t0.Add(retry)) {
		t.Fatalf("after the Unknown: got %s at %v, want OK at %v (Retry later)", res.Status, res.Time, t0.Add(retry))
	}
	h.waiters(1)
	h.clock.Step(interval - retry - time.Nanosecond)
	h.waiters(1)
	h.quiet()
	h.clock.Step(time.Nanosecond)
	if res := h.recv(); !res.Time.Equal(t0.Add(interval)) {
		t.Errorf("after the OK: run at %v, want %v (the interval's, back on the first run's grid)", res.Time, t0.Add(interval))
	}
}

// TestRunnerRetryRejoinsTheGrid: a probe that ran again after Retry (its
// run gave no verdict) is off the shared grid by the retries; its next run
// of the interval is brought back onto the shortest interval's instants,
// as after its first run. The old runner snapped only the first run's
// successor: one failed run left b off a's grid for good (b at 31 s, 61 s,
// ... beside a at 30 s, 60 s: a wake-up of its own each time).
func TestRunnerRetryRejoinsTheGrid(t *testing.T) {
	const short, long, retry = 10 * time.Second, 30 * time.Second, time.Second
	var runs atomic.Int32
	b := probestest.FuncProbe{ProbeName: "b", Func: func(context.Context) probes.Result {
		if runs.Add(1) == 1 {
			return probes.Result{Status: probes.StatusUnknown, Reason: "ReadError"}
		}
		return probes.Result{Status: probes.StatusOK, Reason: "Fine"}
	}}
	h := start(t, []probes.Entry{
		{Probe: ok("a"), Interval: short, Timeout: 500 * time.Millisecond},
		{Probe: b, Interval: long, Timeout: 500 * time.Millisecond, Retry: retry},
	}, probes.RunnerOptions{Jitter: -1}, nil)
	// step moves the clock by d once both probes wait, and returns the
	// times of the n runs due by then, by probe.
	step := func(what string, d time.Duration, n int) map[string]time.Time {
		t.Helper()
		h.waiters(2)
		h.clock.Step(d)
		got := map[string]time.Time{}
		deadline := time.After(failAfter)
		for len(got) < n {
			select {
			case res := <-h.results:
				got[res.Probe] = res.Time
			case <-deadline:
				t.Fatalf("%s: runs %v, want %d of them", what, got, n)
			}
		}
		return got
	}
	if got := step("the first runs", 0, 2); !got["a"].Equal(t0) || !got["b"].Equal(t0) {
		t.Fatalf("the first runs: %v, want a and b at %v", got, t0)
	}
	if got := step("b's retry", retry, 1); !got["b"].Equal(t0.Add(retry)) {
		t.Fatalf("b's retry: %v, want b at %v", got, t0.Add(retry))
	}
	step("a at 10 s", short-retry, 1)
	step("a at 20 s", short, 1)
	if got := step("a at 30 s", short, 2); !got["a"].Equal(t0.Add(long)) || !got["b"].Equal(t0.Add(long)) {
		t.Fatalf("the run after b's retry: %v, want a and b at %v", got, t0.Add(long))
	}
}

// TestRunnerOneDrawForAllProbes: the start jitter is drawn once per
// runner, and each probe waits that fraction of its own interval: probes of
// one interval start together (the process wakes once for them), and each
// probe's delay stays within its Jitter*Interval.
func TestRunnerOneDrawForAllProbes(t *testing.T) {
	var mu sync.Mutex
	draws := []float64{0.5, 0.9, 0.1}
	calls := 0
	rnd := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return draws[(calls-1)%len(draws)]
	}
	h := start(t, []probes.Entry{
		{Probe: ok("a"), Interval: 10 * time.Second, Timeout: time.Second},
		{Probe: ok("b"), Interval: 10 * time.Second, Timeout: time.Second},
		{Probe: ok("c"), Interval: 20 * time.Second, Timeout: time.Second},
	}, probes.RunnerOptions{Rand: rnd}, nil) // default jitter 0.1

	h.waiters(3)
	h.clock.Step(500 * time.Millisecond) // 0.5 * 0.1 * 10s: a and b
	got := map[string]time.Time{}
	for range 2 {
		res := h.recv()
		got[res.Probe] = res.Time
	}
	h.waiters(3) // a and b wait for their next run, c for its first
	h.quiet()
	h.clock.Step(500 * time.Millisecond) // 0.5 * 0.1 * 20s: c
	res := h.recv()
	got[res.Probe] = res.Time
	want := map[string]time.Time{"a": t0.Add(500 * time.Millisecond), "b": t0.Add(500 * time.Millisecond), "c": t0.Add(time.Second)}
	for name, at := range want {
		if !got[name].Equal(at) {
			t.Errorf("probe %s first ran at %v, want %v", name, got[name], at)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("Rand called %d times, want once", calls)
	}
}

func TestRunnerJitterOptions(t *testing.T) {
	const interval = 10 * time.Second
	tests := []struct {
		name   string
		jitter float64
		rand   float64
		want   time.Duration
	}{
		{"default 10%", 0, 0.9, 900 * time.Millisecond},
		{"half", 0.5, 0.5, 2500 * time.Millisecond},
		{"full", 1, 0.25, 2500 * time.Millisecond},
		{"negative disables", -1, 0.9, 0},
		{"rand zero", 0.1, 0, 0},
		{"out-of-range rand treated as zero", 0.1, 1.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, []probes.Entry{{Probe: ok("a"), Interval: interval, Timeout: time.Second}},
				probes.RunnerOptions{Jitter: tt.jitter, Rand: func() float64 { return tt.rand }}, nil)
			if tt.want > 0 {
				h.waiters(1)
				h.clock.Step(tt.want)
			}
			if got, want := h.recv().Time, t0.Add(tt.want); !got.Equal(want) {
				t.Errorf("first run at %v, want %v", got, want)
			}
		})
	}
}

func TestRunnerOverrunRunsAgainAtOnce(t *testing.T) {
	const interval = 10 * time.Second
	var once sync.Once
	// The first sink call takes two intervals of (fake) time.
	h := start(t, []probes.Entry{{Probe: ok("a"), Interval: interval, Timeout: time.Second}},
		probes.RunnerOptions{Jitter: -1}, func(c *probestest.FakeClock, _ probes.Result) {
			once.Do(func() { c.Step(2 * interval) })
		})
	if got, want := h.recv().Time, t0; !got.Equal(want) {
		t.Errorf("first run at %v, want %v", got, want)
	}
	// No Step: the overdue run starts without waiting on the clock.
	if got, want := h.recv().Time, t0.Add(2*interval); !got.Equal(want) {
		t.Errorf("second run at %v, want %v", got, want)
	}
	h.waiters(1)
	h.clock.Step(interval)
	if got, want := h.recv().Time, t0.Add(3*interval); !got.Equal(want) {
		t.Errorf("third run at %v, want %v", got, want)
	}
}

func TestRunnerTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	for _, honoursCtx := range []bool{true, false} {
		name := map[bool]string{true: "honours ctx", false: "ignores ctx"}[honoursCtx]
		t.Run(name, func(t *testing.T) {
			started := make(chan struct{}, 10)
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			p := probestest.FuncProbe{ProbeName: "slow", Func: func(ctx context.Context) probes.Result {
				started <- struct{}{}
				if honoursCtx {
					<-ctx.Done()
				} else {
					<-release
				}
				return probes.Result{Status: probes.StatusOK}
			}}
			h := start(t, []probes.Entry{{Probe: p, Interval: 10 * time.Second, Timeout: timeout}},
				probes.RunnerOptions{Jitter: -1}, nil)
			select {
			case <-started: // the timeout timer is armed before the probe starts
			case <-time.After(failAfter):
				t.Fatal("probe did not start")
			}
			h.clock.Step(timeout - time.Nanosecond)
			h.quiet()
			h.clock.Step(time.Nanosecond)
			res := h.recv()
			if got, want := res.Status, probes.StatusUnknown; got != want {
				t.Errorf("Status = %q, want %q", got, want)
			}
			if got, want := res.Reason, probes.ReasonProbeTimeout; got != want {
				t.Errorf("Reason = %q, want %q", got, want)
			}
			for _, want := range []string{`"slow"`, "2s"} {
				if !strings.Contains(res.Message, want) {
					t.Errorf("Message = %q, want it to contain %q", res.Message, want)
				}
			}
			if got, want := res.Duration, timeout; got != want {
				t.Errorf("Duration = %v, want %v", got, want)
			}
		})
	}
}

// TestRunnerKeepsTheEventsOfALateResult: a probe that returns after its
// timeout, with events it took from its own pacing (the custom probe's),
// has its result replaced by ProbeTimeout; its events still reach the
// sink, once, with a later result.
func TestRunnerKeepsTheEventsOfALateResult(t *testing.T) {
	const timeout, interval = time.Second, 10 * time.Second
	started := make(chan struct{}, 100)
	release := make(chan struct{})
	var calls int
	p := probestest.FuncProbe{ProbeName: "late", Func: func(ctx context.Context) probes.Result {
		calls++ // runs are serial but for the late one, which ends before the next starts only if released
		first := calls == 1
		started <- struct{}{}
		if first {
			<-release // ignores ctx: returns late
			return probes.Result{Status: probes.StatusProblem, Reason: "Full", Events: []probes.Event{{Reason: "ConntrackFull", Message: "late"}}}
		}
		return probes.Result{Status: probes.StatusOK, Reason: "Fine"}
	}}
	h := start(t, []probes.Entry{{Probe: p, Interval: interval, Timeout: timeout}}, probes.RunnerOptions{Jitter: -1}, nil)
	<-started
	h.clock.Step(timeout)
	if res := h.recv(); res.Reason != probes.ReasonProbeTimeout || len(res.Events) != 0 {
		t.Fatalf("the first run gave %s %v, want a ProbeTimeout without events yet", res.Reason, res.Events)
	}
	close(release)
	// The late result comes back whenever its goroutine runs: look at the
	// next runs until its event has come, and count it.
	var seen int
	for i := 0; i < 50 && seen == 0; i++ {
		h.waiters(1)
		h.clock.Step(interval - timeout)
		<-started
		res := h.recv()
		for _, e := range res.Events {
			if e.Reason != "ConntrackFull" || e.Message != "late" {
				t.Errorf("run %d: event %+v, want the late run's", i+2, e)
			}
			seen++
		}
		h.clock.Step(timeout) // back to a whole interval
		time.Sleep(10 * time.Millisecond)
	}
	if seen != 1 {
		t.Fatalf("the late run's event reached the sink %d times, want once", seen)
	}
}

// TestRunnerReportsLateEventsAtOnce: a run given up on at its timeout
// that returns with Events wakes its loop: the Events reach the sink as
// soon as they are back, not with the next run of the interval (a minute
// later for a log monitor's probe, whose run after the timeout's Retry can
// be over before the late one returns). The old runner kept them until
// the next run: here the clock never reaches it.
func TestRunnerReportsLateEventsAtOnce(t *testing.T) {
	const timeout, retry, interval = 500 * time.Millisecond, time.Second, time.Minute
	release := make(chan struct{})
	firstStarted := make(chan struct{})
	var calls atomic.Int32
	p := probestest.FuncProbe{ProbeName: "late", Func: func(context.Context) probes.Result {
		if calls.Add(1) == 1 {
			close(firstStarted)
			<-release // ignores ctx: returns late
			return probes.Result{Status: probes.StatusOK, Reason: "Fine", Events: []probes.Event{{Reason: "TaskHung", Message: "late"}}}
		}
		return probes.Result{Status: probes.StatusOK, Reason: "Fine"}
	}}
	h := start(t, []probes.Entry{{Probe: p, Interval: interval, Timeout: timeout, Retry: retry}}, probes.RunnerOptions{Jitter: -1}, nil)
	// The first call must be the one that hangs: step the clock only once
	// its goroutine is in the probe, or the retry could take the first call.
	<-firstStarted
	h.waiters(1)
	h.clock.Step(timeout)
	if res := h.recv(); res.Reason != probes.ReasonProbeTimeout || len(res.Events) != 0 {
		t.Fatalf("the first run gave %s %v, want a ProbeTimeout without events yet", res.Reason, res.Events)
	}
	h.waiters(1)
	h.clock.Step(retry - timeout)
	if res := h.recv(); res.Status != probes.StatusOK || len(res.Events) != 0 {
		t.Fatalf("the retry gave %s %v, want OK without events (the late run has not returned)", res.Status, res.Events)
	}
	h.waiters(1)
	close(release)
	res := h.recv() // the clock stands: only a wake runs the probe
	if len(res.Events) != 1 || res.Events[0].Message != "late" {
		t.Fatalf("the run after the late one returned: events %+v, want the late run's one", res.Events)
	}
}

// syncBuffer is a bytes.Buffer safe for the runner's goroutines.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRunnerPanicIsolated(t *testing.T) {
	const interval = 10 * time.Second
	var logs syncBuffer
	panicky := probestest.FuncProbe{ProbeName: "panicky", Func: func(context.Context) probes.Result {
		panic("boom")
	}}
	h := start(t, []probes.Entry{
		{Probe: panicky, Interval: interval, Timeout: time.Second},
		{Probe: ok("steady"), Interval: interval, Timeout: time.Second},
	}, probes.RunnerOptions{Jitter: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)

	for round := range 3 {
		if round > 0 {
			h.waiters(2)
			h.clock.Step(interval)
		}
		got := map[string]probes.Result{}
		for range 2 {
			res := h.recv()
			got[res.Probe] = res
		}
		p := got["panicky"]
		if p.Status != probes.StatusUnknown || p.Reason != probes.ReasonProbePanic {
			t.Errorf("round %d: panicky = %q/%q, want %q/%q", round, p.Status, p.Reason, probes.StatusUnknown, probes.ReasonProbePanic)
		}
		if !strings.Contains(p.Message, "boom") {
			t.Errorf("round %d: panicky message = %q, want it to contain the panic value", round, p.Message)
		}
		if s := got["steady"]; s.Status != probes.StatusOK {
			t.Errorf("round %d: steady = %q, want %q", round, s.Status, probes.StatusOK)
		}
	}
	h.stop()

	want := []probes.ProbeStats{
		{Name: "panicky", Runs: 3, Failures: 3, LastStatus: probes.StatusUnknown},
		{Name: "steady", Runs: 3, Failures: 0, LastStatus: probes.StatusOK},
	}
	got := h.runner.Stats()
	if len(got) != len(want) {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Stats()[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	// Logged once on the transition into Unknown, with the stack.
	if got, want := strings.Count(logs.String(), "probe cannot tell host health"), 1; got != want {
		t.Errorf("transition logged %d times, want %d; logs:\n%s", got, want, logs.String())
	}
	if !strings.Contains(logs.String(), "runtime/debug.Stack") {
		t.Errorf("panic log has no stack; logs:\n%s", logs.String())
	}
}

func TestRunnerCancelStopsRun(t *testing.T) {
	tests := []struct {
		name  string
		probe probes.Probe
	}{
		{"idle", ok("a")},
		{"probe stuck ignoring ctx", probestest.FuncProbe{ProbeName: "stuck", Func: func(context.Context) probes.Result {
			select {} // leaks, as documented
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, []probes.Entry{{Probe: tt.probe, Interval: time.Minute, Timeout: time.Second}},
				probes.RunnerOptions{Rand: func() float64 { return 0 }}, nil)
			h.waiters(1) // waiting for the interval, or for the stuck probe's timeout
			h.stop()
			if tt.probe.Name() == "stuck" {
				h.quiet() // the canceled run is not reported
			}
		})
	}
}

func TestRunnerNoEntriesRunsUntilCanceled(t *testing.T) {
	r, err := probes.NewRunner(nil, probes.RunnerOptions{})
	if err != nil {
		t.Fatalf("NewRunner(nil): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, nil); close(done) }()
	select {
	case <-done:
		t.Fatal("Run returned before ctx was canceled")
	default:
	}
	cancel()
	select {
	case <-done:
	case <-time.After(failAfter):
		t.Fatal("Run did not return after cancel")
	}
}

func TestNewRunnerValidation(t *testing.T) {
	s := time.Second
	tests := []struct {
		name     string
		entries  []probes.Entry
		opts     probes.RunnerOptions
		wantErrs []string // empty: valid
	}{
		{"valid", []probes.Entry{{Probe: ok("a"), Interval: 10 * s, Timeout: s}, {Probe: ok("b"), Interval: 2 * s, Timeout: s}}, probes.RunnerOptions{}, nil},
		{"nil probe", []probes.Entry{{Probe: nil, Interval: 10 * s, Timeout: s}}, probes.RunnerOptions{}, []string{"probe entry 0: probe is nil"}},
		{"empty name", []probes.Entry{{Probe: ok(""), Interval: 10 * s, Timeout: s}}, probes.RunnerOptions{}, []string{"probe entry 0 (probestest.StaticProbe): name is empty"}},
		{"duplicate name", []probes.Entry{{Probe: ok("a"), Interval: 10 * s, Timeout: s}, {Probe: ok("a"), Interval: 10 * s, Timeout: s}}, probes.RunnerOptions{}, []string{`probe "a": name is used by entries 0 and 1`}},
		{"zero interval", []probes.Entry{{Probe: ok("a"), Interval: 0, Timeout: s}}, probes.RunnerOptions{}, []string{`probe "a": interval 0s must be positive`}},
		{"negative interval", []probes.Entry{{Probe: ok("a"), Interval: -s, Timeout: s}}, probes.RunnerOptions{}, []string{`probe "a": interval -1s must be positive`}},
		{"zero timeout", []probes.Entry{{Probe: ok("a"), Interval: 10 * s, Timeout: 0}}, probes.RunnerOptions{}, []string{`probe "a": timeout 0s must be positive`}},
		{"timeout equals interval", []probes.Entry{{Probe: ok("a"), Interval: 10 * s, Timeout: 10 * s}}, probes.RunnerOptions{}, []string{`probe "a": timeout 10s must be less than interval 10s`}},
		{"timeout above interval", []probes.Entry{{Probe: ok("a"), Interval: s, Timeout: 2 * s}}, probes.RunnerOptions{}, []string{`probe "a": timeout 2s must be less than interval 1s`}},
		{"retry", []probes.Entry{{Probe: ok("a"), Interval: time.Minute, Timeout: s, Retry: 2 * s}}, probes.RunnerOptions{}, nil},
		{"retry at timeout", []probes.Entry{{Probe: ok("a"), Interval: time.Minute, Timeout: s, Retry: s}}, probes.RunnerOptions{}, []string{`probe "a": retry 1s must be 0 or more than timeout 1s`}},
		{"negative retry", []probes.Entry{{Probe: ok("a"), Interval: time.Minute, Timeout: s, Retry: -s}}, probes.RunnerOptions{}, []string{`probe "a": retry -1s must be 0 or more than timeout 1s`}},
		{"jitter above 1", []probes.Entry{{Probe: ok("a"), Interval: 10 * s, Timeout: s}}, probes.RunnerOptions{Jitter: 1.5}, []string{"jitter 1.5 must be at most 1"}},
		{"all reported", []probes.Entry{{Probe: ok("a"), Interval: 0, Timeout: 0}, {Probe: nil, Interval: s, Timeout: s}}, probes.RunnerOptions{}, []string{
			`probe "a": interval 0s must be positive`, `probe "a": timeout 0s must be positive`, "probe entry 1: probe is nil",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := probes.NewRunner(tt.entries, tt.opts)
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("NewRunner: got error %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("NewRunner: got nil error, want %q", tt.wantErrs)
			}
			for _, want := range tt.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("NewRunner: got error %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestRunOnce(t *testing.T) {
	readings := []probes.Reading{{Name: "x", Value: "1"}}
	tests := []struct {
		name        string
		probe       probes.Probe
		wantStatus  probes.Status
		wantReason  string
		wantMessage string
	}{
		{"ok", probestest.StaticProbe{ProbeName: "p", Result: probes.Result{Probe: "wrong", Status: probes.StatusOK, Reason: "Fine", Readings: readings}},
			probes.StatusOK, "Fine", ""},
		{"problem", probestest.StaticProbe{ProbeName: "p", Result: probes.Result{Status: probes.StatusProblem, Reason: "Bad", Message: "bad"}},
			probes.StatusProblem, "Bad", "bad"},
		{"unknown passes through", probestest.StaticProbe{ProbeName: "p", Result: probes.Result{Status: probes.StatusUnknown, Reason: "ReadError", Message: "no file"}},
			probes.StatusUnknown, "ReadError", "no file"},
		{"empty status", probestest.StaticProbe{ProbeName: "p", Result: probes.Result{Reason: "Fine"}},
			probes.StatusUnknown, probes.ReasonProbeError, `probe "p" returned no status (reason "Fine"`},
		{"invalid status", probestest.StaticProbe{ProbeName: "p", Result: probes.Result{Status: "True"}},
			probes.StatusUnknown, probes.ReasonProbeError, `probe "p" returned invalid status "True"`},
		{"panic", probestest.FuncProbe{ProbeName: "p", Func: func(context.Context) probes.Result { panic(errors.New("kaboom")) }},
			probes.StatusUnknown, probes.ReasonProbePanic, `probe "p" panicked: kaboom`},
		{"nil probe", nil, probes.StatusUnknown, probes.ReasonProbeError, "probe is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := probestest.NewFakeClock(t0)
			res := probes.RunOnce(context.Background(), tt.probe, time.Second, clock)
			if res.Status != tt.wantStatus || res.Reason != tt.wantReason {
				t.Errorf("got %q/%q, want %q/%q (message %q)", res.Status, res.Reason, tt.wantStatus, tt.wantReason, res.Message)
			}
			if !strings.Contains(res.Message, tt.wantMessage) {
				t.Errorf("Message = %q, want it to contain %q", res.Message, tt.wantMessage)
			}
			wantName := ""
			if tt.probe != nil {
				wantName = tt.probe.Name()
			}
			if got, want := res.Probe, wantName; got != want {
				t.Errorf("Probe = %q, want %q", got, want)
			}
			if got, want := res.Time, t0; !got.Equal(want) {
				t.Errorf("Time = %v, want %v", got, want)
			}
			if got, want := clock.WaiterCount(), 0; got != want {
				t.Errorf("armed timers after RunOnce = %d, want %d (timeout timer not stopped)", got, want)
			}
		})
	}
}

func TestRunOnceCanceled(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	p := probestest.FuncProbe{ProbeName: "p", Func: func(context.Context) probes.Result {
		close(started)
		<-release
		return probes.Result{Status: probes.StatusOK}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan probes.Result, 1)
	go func() { got <- probes.RunOnce(ctx, p, time.Second, probestest.NewFakeClock(t0)) }()
	<-started
	cancel()
	select {
	case res := <-got:
		if res.Status != probes.StatusUnknown || res.Reason != probes.ReasonProbeCanceled {
			t.Errorf("got %q/%q, want %q/%q", res.Status, res.Reason, probes.StatusUnknown, probes.ReasonProbeCanceled)
		}
	case <-time.After(failAfter):
		t.Fatal("RunOnce did not return after cancel")
	}
}

// With the real clock the probe's context carries the deadline, and a probe
// that gives up because of it is reported as a timeout.
func TestRunOnceRealClockDeadline(t *testing.T) {
	hadDeadline := make(chan bool, 1)
	p := probestest.FuncProbe{ProbeName: "p", Func: func(ctx context.Context) probes.Result {
		_, ok := ctx.Deadline()
		hadDeadline <- ok
		<-ctx.Done()
		return probes.Result{Status: probes.StatusUnknown, Reason: "ReadError", Message: ctx.Err().Error()}
	}}
	res := probes.RunOnce(context.Background(), p, 5*time.Millisecond, nil)
	if got, want := res.Reason, probes.ReasonProbeTimeout; got != want {
		t.Errorf("Reason = %q, want %q (message %q)", got, want, res.Message)
	}
	select {
	case ok := <-hadDeadline:
		if !ok {
			t.Errorf("probe context had no deadline")
		}
	case <-time.After(failAfter):
		t.Fatal("probe never ran")
	}
}

// TestRunnerStartGate checks a gated probe never runs before its gate is
// closed, however much time passes, while an ungated probe beside it keeps
// its schedule; once the gate closes the probe runs after its start jitter,
// counted from the opening.
func TestRunnerStartGate(t *testing.T) {
	const interval = 10 * time.Second
	tests := []struct {
		name   string
		open   bool          // the gate is closed before Run starts
		jitter float64       // with Rand 0.5
		delay  time.Duration // the start delay that jitter gives
	}{
		{"open before Run, no jitter", true, -1, 0},
		{"open before Run, jitter after the gate", true, 0.1, 500 * time.Millisecond},
		{"opened later, no jitter", false, -1, 0},
		{"opened later, jitter counted from the opening", false, 0.1, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gate := make(chan struct{})
			if tt.open {
				close(gate)
			}
			h := start(t, []probes.Entry{
				{Probe: ok("gated"), Interval: interval, Timeout: time.Second, Start: gate},
				{Probe: ok("free"), Interval: interval, Timeout: time.Second},
			}, probes.RunnerOptions{Jitter: tt.jitter, Rand: func() float64 { return 0.5 }}, nil)

			if tt.open {
				if tt.delay > 0 {
					h.waiters(2)
					h.clock.Step(tt.delay)
				}
				got := map[string]time.Time{}
				for range 2 {
					res := h.recv()
					got[res.Probe] = res.Time
				}
				for _, name := range []string{"gated", "free"} {
					if want := t0.Add(tt.delay); !got[name].Equal(want) {
						t.Errorf("%s first ran at %v, want %v", name, got[name], want)
					}
				}
				return
			}

			// Only the free probe runs, however long the gate stays shut.
			if tt.delay > 0 {
				h.waiters(1)
				h.clock.Step(tt.delay)
			}
			now := t0.Add(tt.delay)
			for i := range 5 {
				if res := h.recv(); res.Probe != "free" || !res.Time.Equal(now) {
					t.Fatalf("run %d: %s at %v, want only free at %v while the gate is shut", i, res.Probe, res.Time, now)
				}
				h.waiters(1) // free waits for its next interval; gated for its gate
				h.clock.Step(interval)
				now = now.Add(interval)
			}
			if got := h.recv(); got.Probe != "free" {
				t.Fatalf("got %s, want free", got.Probe)
			}

			// Open the gate: gated starts its jitter now.
			opened := now
			close(gate)
			if tt.delay > 0 {
				h.waiters(2) // free's interval, gated's start delay
				h.clock.Step(tt.delay)
			}
			res := h.recv()
			if got, want := res.Probe, "gated"; got != want {
				t.Fatalf("after opening the gate got %s, want %s", got, want)
			}
			if got, want := res.Time, opened.Add(tt.delay); !got.Equal(want) {
				t.Errorf("gated first ran at %v, want %v (the opening plus its jitter)", got, want)
			}
			if got := h.runner.Stats()[0].Runs; got != 1 {
				t.Errorf("gated runs = %d, want 1", got)
			}
		})
	}
}

// TestRunnerStartGateCancel checks Run returns while a probe still waits on
// its gate, without running it.
func TestRunnerStartGateCancel(t *testing.T) {
	gate := make(chan struct{})
	h := start(t, []probes.Entry{{Probe: ok("gated"), Interval: time.Second, Timeout: time.Millisecond, Start: gate}},
		probes.RunnerOptions{Jitter: -1}, nil)
	h.clock.Step(time.Hour)
	h.stop()
	h.quiet()
	if got := h.runner.Stats()[0].Runs; got != 0 {
		t.Errorf("runs = %d, want 0: the gate was never opened", got)
	}
}
