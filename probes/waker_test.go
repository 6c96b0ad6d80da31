package probes_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// wakeProbe is a FuncProbe that is also a probes.Waker.
type wakeProbe struct {
	probestest.FuncProbe
	watch func(ctx context.Context, wake func()) error
}

func (p wakeProbe) Watch(ctx context.Context, wake func()) error { return p.watch(ctx, wake) }

// handWaker returns a probe whose Watch hands its wake function to the test
// and blocks until the runner stops; run is the probe's body (OK when nil).
func handWaker(name string, run func(ctx context.Context) probes.Result) (wakeProbe, <-chan func()) {
	wakes := make(chan func(), 1)
	if run == nil {
		run = func(context.Context) probes.Result { return probes.Result{Status: probes.StatusOK} }
	}
	return wakeProbe{
		FuncProbe: probestest.FuncProbe{ProbeName: name, Func: run},
		watch: func(ctx context.Context, wake func()) error {
			wakes <- wake
			<-ctx.Done()
			return nil
		},
	}, wakes
}

func recvWake(t *testing.T, wakes <-chan func()) func() {
	t.Helper()
	select {
	case w := <-wakes:
		return w
	case <-time.After(failAfter):
		t.Fatal("Watch was not called")
		return nil
	}
}

// TestRunnerWakeRunsAtOnce: a wake runs the probe without the clock moving,
// and the interval, counted from that run, still runs it after.
func TestRunnerWakeRunsAtOnce(t *testing.T) {
	const interval = time.Hour
	p, wakes := handWaker("net", nil)
	h := start(t, []probes.Entry{{Probe: p, Interval: interval, Timeout: time.Second}},
		probes.RunnerOptions{Jitter: -1}, nil)
	wake := recvWake(t, wakes)
	if got, want := h.recv().Time, t0; !got.Equal(want) {
		t.Fatalf("first run at %v, want %v", got, want)
	}
	h.waiters(1)
	h.clock.Step(10 * time.Minute)
	h.quiet()
	wake()
	woken := t0.Add(10 * time.Minute)
	if got := h.recv().Time; !got.Equal(woken) {
		t.Fatalf("woken run at %v, want %v (at once, the clock not moved)", got, woken)
	}
	// The interval resyncs, counted from the woken run.
	h.waiters(1)
	h.clock.Step(interval - time.Nanosecond)
	h.quiet()
	h.clock.Step(time.Nanosecond)
	if got, want := h.recv().Time, woken.Add(interval); !got.Equal(want) {
		t.Errorf("interval run at %v, want %v", got, want)
	}
	if got, want := h.runner.Stats()[0].Wakes, uint64(1); got != want {
		t.Errorf("Wakes = %d, want %d", got, want)
	}
	if got := h.runner.Stats()[0].Watching; !got {
		t.Errorf("Watching = false, want true while Watch runs")
	}
}

// TestRunnerWakeCutsStartDelay: a wake during the start jitter runs the
// probe at once.
func TestRunnerWakeCutsStartDelay(t *testing.T) {
	p, wakes := handWaker("net", nil)
	h := start(t, []probes.Entry{{Probe: p, Interval: 10 * time.Second, Timeout: time.Second}},
		probes.RunnerOptions{Rand: func() float64 { return 0.5 }}, nil) // 500ms delay
	wake := recvWake(t, wakes)
	h.waiters(1)
	wake()
	if got, want := h.recv().Time, t0; !got.Equal(want) {
		t.Errorf("first run at %v, want %v: the wake must not wait for the jitter", got, want)
	}
}

// TestRunnerWakeStorm: 1000 wakes while the probe runs cost one more run,
// WakeGap after the start of the one before; then the probe is quiet again
// until its interval.
func TestRunnerWakeStorm(t *testing.T) {
	const interval = time.Hour
	var (
		mu   sync.Mutex
		runs int
	)
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	p, wakes := handWaker("net", func(context.Context) probes.Result {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		if n == 2 {
			started <- struct{}{}
			<-release
		}
		return probes.Result{Status: probes.StatusOK}
	})
	h := start(t, []probes.Entry{{Probe: p, Interval: interval, Timeout: 30 * time.Minute}},
		probes.RunnerOptions{Jitter: -1}, nil) // default WakeGap
	wake := recvWake(t, wakes)
	h.recv()
	h.waiters(1)
	h.clock.Step(time.Minute)
	woken := t0.Add(time.Minute)
	wake()
	select {
	case <-started:
	case <-time.After(failAfter):
		t.Fatal("the wake did not start a run")
	}
	var storm sync.WaitGroup
	for range 10 {
		storm.Go(func() {
			for range 100 {
				wake()
			}
		})
	}
	storm.Wait()
	close(release)
	if got := h.recv().Time; !got.Equal(woken) {
		t.Fatalf("woken run at %v, want %v", got, woken)
	}
	// The storm is one pending wake, held back by the wake gap.
	h.waiters(1)
	h.clock.Step(probes.DefaultWakeGap - time.Nanosecond)
	h.quiet()
	h.clock.Step(time.Nanosecond)
	if got, want := h.recv().Time, woken.Add(probes.DefaultWakeGap); !got.Equal(want) {
		t.Fatalf("storm's run at %v, want %v", got, want)
	}
	h.waiters(1) // the interval: nothing else is pending
	h.quiet()
	st := h.runner.Stats()[0]
	if st.Runs != 3 || st.Wakes != 2 {
		t.Errorf("runs = %d, wakes = %d; want 3 runs (first, woken, storm), 2 of them woken", st.Runs, st.Wakes)
	}
}

// TestRunnerWakeAfterIntervalRun: a wake right after a run of the
// interval runs the probe at once: only a woken run holds the next wake
// back by WakeGap.
func TestRunnerWakeAfterIntervalRun(t *testing.T) {
	const interval = time.Second
	p, wakes := handWaker("logmon", nil)
	h := start(t, []probes.Entry{{Probe: p, Interval: interval, Timeout: 500 * time.Millisecond}},
		probes.RunnerOptions{Jitter: -1}, nil) // default WakeGap
	wake := recvWake(t, wakes)
	h.recv() // the first run, not woken
	h.waiters(1)
	h.clock.Step(interval)
	if got, want := h.recv().Time, t0.Add(interval); !got.Equal(want) {
		t.Fatalf("interval run at %v, want %v", got, want)
	}
	h.waiters(1)
	h.clock.Step(10 * time.Millisecond)
	wake()
	woken := t0.Add(interval + 10*time.Millisecond)
	if got := h.recv().Time; !got.Equal(woken) {
		t.Fatalf("woken run at %v, want %v: at once, not WakeGap after the interval's run", got, woken)
	}
	// A second wake within WakeGap of the woken run waits for the gap.
	h.waiters(1)
	wake()
	h.waiters(1)
	h.clock.Step(probes.DefaultWakeGap - time.Nanosecond)
	h.quiet()
	h.clock.Step(time.Nanosecond)
	if got, want := h.recv().Time, woken.Add(probes.DefaultWakeGap); !got.Equal(want) {
		t.Errorf("the second woken run at %v, want %v", got, want)
	}
}

// TestRunnerWatchFails: a Watch that fails, panics or gives up is logged and
// recorded, and the probe keeps running on its interval.
func TestRunnerWatchFails(t *testing.T) {
	tests := []struct {
		name  string
		watch func(ctx context.Context, wake func()) error
		want  string
	}{
		{"error", func(context.Context, func()) error { return errors.New("netlink: permission denied") }, "netlink: permission denied"},
		{"panic", func(context.Context, func()) error { panic("boom") }, "watch panicked: boom"},
		{"gives up", func(context.Context, func()) error { return nil }, "watch returned before the runner stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const interval = 10 * time.Second
			var logs syncBuffer
			p := wakeProbe{FuncProbe: okFunc("net"), watch: tt.watch}
			h := start(t, []probes.Entry{{Probe: p, Interval: interval, Timeout: time.Second}},
				probes.RunnerOptions{Jitter: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
			deadline := time.Now().Add(failAfter)
			for h.runner.Stats()[0].WatchError == "" {
				if time.Now().After(deadline) {
					t.Fatal("WatchError never set")
				}
				time.Sleep(time.Millisecond)
			}
			st := h.runner.Stats()[0]
			if st.WatchError != tt.want || st.Watching {
				t.Errorf("WatchError = %q, Watching = %v; want %q, false", st.WatchError, st.Watching, tt.want)
			}
			if !strings.Contains(logs.String(), tt.want) {
				t.Errorf("log %q does not name the error %q", logs.String(), tt.want)
			}
			now := t0
			for i := range 3 {
				if got := h.recv().Time; !got.Equal(now) {
					t.Fatalf("run %d at %v, want %v", i, got, now)
				}
				h.waiters(1)
				h.clock.Step(interval)
				now = now.Add(interval)
			}
		})
	}
}

// okFunc is ok(name) as a FuncProbe, to embed in a wakeProbe.
func okFunc(name string) probestest.FuncProbe {
	return probestest.FuncProbe{ProbeName: name, Func: ok(name).Probe}
}

// TestRunnerWakeByName: Wake runs a probe that is no Waker at once, by its
// name, without the clock moving, and leaves the others to their
// intervals; an unknown name is reported.
func TestRunnerWakeByName(t *testing.T) {
	const interval = time.Hour
	h := start(t, []probes.Entry{
		{Probe: ok("cleared"), Interval: interval, Timeout: time.Second},
		{Probe: ok("other"), Interval: interval, Timeout: time.Second},
	}, probes.RunnerOptions{Jitter: -1}, nil)
	for range 2 {
		h.recv()
	}
	h.waiters(2)
	h.clock.Step(time.Minute)
	h.quiet()
	if h.runner.Wake("nosuch") {
		t.Error(`Wake("nosuch") = true, want false: there is no such probe`)
	}
	if !h.runner.Wake("cleared") {
		t.Fatal(`Wake("cleared") = false, want true`)
	}
	res := h.recv()
	if res.Probe != "cleared" || !res.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("woken run %s at %v, want cleared at %v", res.Probe, res.Time, t0.Add(time.Minute))
	}
	h.waiters(2)
	h.quiet()
	if st := h.runner.Stats(); st[0].Wakes != 1 || st[1].Wakes != 0 || st[1].Runs != 1 {
		t.Errorf("stats %+v, want one woken run of cleared and the other left alone", st)
	}
}
