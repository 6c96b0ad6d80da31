package logmon

import (
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// chanKmsg is one open of /dev/kmsg fed by the test: each read takes one
// item, a record or an error, and blocks until there is one or it is
// closed.
type chanKmsg struct {
	items  <-chan any
	closed chan struct{}
	once   sync.Once
}

func (k *chanKmsg) Read(p []byte) (int, error) {
	select {
	case it := <-k.items:
		if err, ok := it.(error); ok {
			return 0, err
		}
		return copy(p, it.(string)+"\n"), nil
	case <-k.closed:
		return 0, os.ErrClosed
	}
}

func (k *chanKmsg) Close() error {
	k.once.Do(func() { close(k.closed) })
	return nil
}

// wokenRun runs the monitor's probes through a Runner whose clock never
// moves: their first run waits half an interval and each later one an
// interval (or Retry) on that clock, so every run is one a wake asked
// for. It returns the results, in order, as the runner's sink got them,
// and the runner.
func wokenRun(t *testing.T, mon *Monitor) (<-chan probes.Result, *probes.Runner) {
	t.Helper()
	var entries []probes.Entry
	for _, p := range mon.Probes() {
		entries = append(entries, p.Entry())
	}
	r, err := probes.NewRunner(entries, probes.RunnerOptions{
		Clock: probestest.NewFakeClock(t0), Jitter: 1, Rand: func() float64 { return 0.5 }, WakeGap: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan probes.Result, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, func(res probes.Result) { results <- res })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return results, r
}

// nextResult waits (30 s at most) for a result of probe for which ok
// holds, skipping the others.
func nextResult(t *testing.T, results <-chan probes.Result, probe, what string, ok func(probes.Result) bool) probes.Result {
	t.Helper()
	deadline := time.After(30 * time.Second)
	var last []probes.Result
	for {
		select {
		case res := <-results:
			if res.Probe != probe {
				continue
			}
			if ok(res) {
				return res
			}
			last = append(last, res)
		case <-deadline:
			t.Fatalf("%s: no run of %s reported it in 30 s (its interval never came: only a wake runs it); its runs meanwhile: %+v", what, probe, last)
		}
	}
}

// TestMonitorWakesOnEveryChange: a log monitor probe's interval is only a
// long resync (Interval), so every change of what it reports must wake it:
// here its runner's clock never moves, and each change still reaches the
// runner's sink. The boot read (the first verdict); a matched line; a
// clear (the agent wakes the probe after Clear); a read failure; the
// reopen; an overrun. The old code woke on none of the boot read, and its
// probes ran once a second whether anything changed or not.
func TestMonitorWakesOnEveryChange(t *testing.T) {
	mon, err := New(mustLoad(t, "testdata/npd/kernel-monitor.json"), Options{Host: fixtureHost(t, "boot-1"), Path: "/dev/kmsg",
		Now: func() time.Time { return t0 }, Retry: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	items := make(chan any, 10)
	opens := make(chan struct{}, 10)
	mon.openKmsg = func(string) (io.ReadCloser, error) {
		opens <- struct{}{}
		return &chanKmsg{items: items, closed: make(chan struct{})}, nil
	}
	p := byCondition(mon.Probes())["KernelDeadlock"]
	results, r := wokenRun(t, mon)
	is := func(s probes.Status, reason string) func(probes.Result) bool {
		return func(res probes.Result) bool { return res.Status == s && res.Reason == reason }
	}

	nextResult(t, results, p.Name(), "the boot read", is(probes.StatusOK, "KernelHasNoDeadlock"))

	items <- rec(1, 0, "eth0: link up")
	items <- rec(2, 0, hungDocker)
	res := nextResult(t, results, p.Name(), "the matched line", is(probes.StatusProblem, "DockerHung"))
	if len(res.Events) != 1 || res.Events[0].Reason != "TaskHung" {
		t.Errorf("the matched line's run: got Events %+v, want its one TaskHung Event", res.Events)
	}

	if words, err := p.Clear([]string{"KernelDeadlock"}, t0); err != nil || words != "cleared KernelDeadlock" {
		t.Fatalf("Clear: got %q, %v", words, err)
	}
	if !r.Wake(p.Name()) {
		t.Fatalf("the runner has no probe %s", p.Name())
	}
	nextResult(t, results, p.Name(), "the clear", is(probes.StatusOK, "KernelHasNoDeadlock"))

	<-opens
	items <- syscall.EIO
	res = nextResult(t, results, p.Name(), "the read failure", is(probes.StatusUnknown, ReasonLogReadError))
	if !strings.Contains(res.Message, "input/output error") {
		t.Errorf("the read failure: got %q, want the error named", res.Message)
	}
	<-opens
	nextResult(t, results, p.Name(), "the reopen", is(probes.StatusOK, "KernelHasNoDeadlock"))

	items <- syscall.EPIPE
	nextResult(t, results, p.Name(), "the overrun", func(res probes.Result) bool {
		return res.Status == probes.StatusOK && strings.Contains(res.Message, "overran")
	})
}

// TestMonitorWakesOnRestore: a problem held before a restart stands again
// at once, without waiting for the interval: restored before the source
// starts (Watch starts after the boot was read: it wakes its probe), and
// restored while the boot cannot be read yet (put back at the boot read,
// which wakes the probes).
func TestMonitorWakesOnRestore(t *testing.T) {
	held := []byte(`{"bootID":"boot-1","condition":{"Type":"ReadonlyFilesystem","Problem":true,"Reason":"FilesystemIsReadOnly","Message":"m"}}`)
	for _, later := range []bool{false, true} {
		name := "boot known"
		if later {
			name = "boot read later"
		}
		t.Run(name, func(t *testing.T) {
			host := fixtureHost(t, "boot-1")
			id := host.Proc("sys", "kernel", "random", "boot_id")
			if later {
				if err := os.Rename(id, id+".later"); err != nil {
					t.Fatal(err)
				}
			}
			mon, err := New(mustLoad(t, "testdata/npd/readonly-monitor.json"), Options{Host: host, Path: fifo(t),
				Now: func() time.Time { return t0 }, Retry: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mon.Close() })
			p := mon.Probes()[0]
			if err := p.Restore(held); err != nil {
				t.Fatal(err)
			}
			results, _ := wokenRun(t, mon)
			if later {
				nextResult(t, results, p.Name(), "the boot read failing", func(res probes.Result) bool { return res.Status == probes.StatusUnknown })
				if err := os.Rename(id+".later", id); err != nil {
					t.Fatal(err)
				}
			}
			nextResult(t, results, p.Name(), "the held problem", func(res probes.Result) bool {
				return res.Status == probes.StatusProblem && res.Reason == "FilesystemIsReadOnly"
			})
		})
	}
}

// TestWatchAfterSourceFailedWakes: a probe's first run can come before its
// Watch registers its wake (the runner starts both together; with no start
// delay the run goes first), and that run starts the source. When the boot
// cannot be read, the source fails before anyone is watching: its wakes
// reach no one, and the run's verdict (taken before the source read
// anything) stood for the whole interval. The Watch that registers after
// the source started wakes its probe. The old code woke only when the boot
// was known, so a failed boot read waited for the 1-minute resync.
func TestWatchAfterSourceFailedWakes(t *testing.T) {
	host := fixtureHost(t, "boot-1")
	if err := os.Remove(host.Proc("sys", "kernel", "random", "boot_id")); err != nil {
		t.Fatal(err)
	}
	mon, err := New(mustLoad(t, "testdata/npd/kernel-monitor.json"), Options{Host: host, Path: fifo(t),
		Now: func() time.Time { return t0 }, Retry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	p := byCondition(mon.Probes())["KernelDeadlock"]
	_ = p.Probe(context.Background()) // the first run, before the Watch: it starts the source
	deadline := time.Now().Add(30 * time.Second)
	for {
		mon.mu.Lock()
		failed := mon.srcErr != nil
		mon.mu.Unlock()
		if failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the source did not fail on the missing boot id in 30 s")
		}
		time.Sleep(time.Millisecond)
	}

	woken := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan error, 1)
	go func() { watched <- p.Watch(ctx, func() { woken <- struct{}{} }) }()
	t.Cleanup(func() {
		cancel()
		<-watched
	})
	select {
	case <-woken:
	case <-time.After(30 * time.Second):
		t.Fatal("the Watch begun after the source failed did not wake its probe in 30 s: its failure waits for the interval")
	}
	if res := p.Probe(context.Background()); res.Status != probes.StatusUnknown || res.Reason != ReasonLogReadError {
		t.Errorf("the woken run: got %s %s (%s), want Unknown %s", res.Status, res.Reason, res.Message, ReasonLogReadError)
	}
}

// TestFirstRunHasTheBoot: a probe's first run can come before the source
// (which it starts) has read the boot. The run reads it itself: its verdict
// is the condition's default with its reason and message, never a healthy
// condition without them. The old run found no matcher yet and reported OK
// with an empty reason and message, which stood until a wake (the source's
// boot read, which reached no one before the Watch) or the 1-minute resync.
func TestFirstRunHasTheBoot(t *testing.T) {
	for i := range 20 {
		mon, err := New(mustLoad(t, "testdata/npd/kernel-monitor.json"), Options{Host: fixtureHost(t, "boot-1"), Path: fifo(t),
			Now: func() time.Time { return t0 }, Retry: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		p := byCondition(mon.Probes())["KernelDeadlock"]
		res := p.Probe(context.Background())
		_ = mon.Close()
		if res.Status != probes.StatusOK || res.Reason != "KernelHasNoDeadlock" || res.Message == "" {
			t.Fatalf("monitor %d: the first run gave %s %q %q, want OK KernelHasNoDeadlock with its message", i, res.Status, res.Reason, res.Message)
		}
	}
}
