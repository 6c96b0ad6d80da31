package gpu

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// TestFatalXidWakesProbe: under a Runner with an hour's interval, a fatal
// Xid from the NVML mock's event set runs the fatal probe at once, and the
// run sees the Xid.
func TestFatalXidWakesProbe(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	r, err := probes.NewRunner([]probes.Entry{{Probe: m.FatalProbe(), Interval: time.Hour, Timeout: runTimeout}}, probes.RunnerOptions{Jitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan probes.Result, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, func(res probes.Result) { results <- res })
	}()
	t.Cleanup(func() { cancel(); <-done })
	next := func() probes.Result {
		t.Helper()
		select {
		case res := <-results:
			return res
		case <-time.After(30 * time.Second):
			t.Fatal("no run within 30s (the interval is an hour)")
			return probes.Result{}
		}
	}
	if got := next(); got.Status != probes.StatusOK {
		t.Fatalf("first run: %s %s: %s, want OK", got.Status, got.Reason, got.Message)
	}
	f.push(f.xid(3, 79))
	got := next()
	if got.Status != probes.StatusProblem || !strings.Contains(got.Message, "79") {
		t.Errorf("woken run: %s %s: %s, want a Problem naming Xid 79", got.Status, got.Reason, got.Message)
	}
	if st := r.Stats()[0]; st.Wakes != 1 {
		t.Errorf("Wakes = %d, want 1", st.Wakes)
	}
}

// TestOnlyFatalXidsWake: a Xid the catalog does not call fatal wakes no
// one; the fatal one behind it wakes every Watch once.
func TestOnlyFatalXidsWake(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	if info := m.catalog.Lookup(13); info.Action.Fatal() {
		t.Fatalf("Xid 13 is %v in the catalog; the test needs one that is not fatal", info.Action)
	}
	var (
		mu    sync.Mutex
		woken [2]int
	)
	ctx, cancel := context.WithCancel(context.Background())
	var watches sync.WaitGroup
	for i := range woken {
		watches.Go(func() {
			_ = m.FatalProbe().(probes.Waker).Watch(ctx, func() { mu.Lock(); woken[i]++; mu.Unlock() })
		})
	}
	t.Cleanup(func() { cancel(); watches.Wait() })
	runProbe(m, NameFatal, runTimeout) // starts the event watcher
	deadline := time.Now().Add(30 * time.Second)
	for {
		m.wakeMu.Lock()
		n := len(m.wake.funcs)
		m.wakeMu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Watches never registered")
		}
		time.Sleep(time.Millisecond)
	}
	f.push(f.xid(3, 13), f.xid(3, 79))
	for {
		mu.Lock()
		w := woken
		mu.Unlock()
		// The watcher files events in order: once 79 woke, 13 was filed.
		if w[0] > 0 && w[1] > 0 {
			if w != [2]int{1, 1} {
				t.Errorf("wakes per Watch = %v, want [1 1]: only the fatal Xid wakes", w)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("wakes per Watch = %v: the fatal Xid woke no one", w)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWokenRunNotServedAStaleRead: a fatal Xid filed after a read under
// way took its records, and before that read is shared no more, wakes a
// run that joins the read; the run reads the GPUs again instead of
// reporting the read that does not have the Xid.
func TestWokenRunNotServedAStaleRead(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	if got := runProbe(m, NameFatal, runTimeout); got.Status != probes.StatusOK {
		t.Fatalf("first run: %s %s: %s, want OK", got.Status, got.Reason, got.Message)
	}
	joined, wokenDone := make(chan struct{}), make(chan struct{})
	var once, joinOnce sync.Once
	m.testJoined = func() { joinOnce.Do(func() { close(joined) }) }
	m.testAfterRead = func() {
		once.Do(func() {
			// The first read has taken its records: the kernel's Xid
			// 79 comes now, and a woken run joins the read.
			m.KernelXid(KernelXid{Time: time.Now(), PCIBusID: f.pci(3), Xid: 79, Text: "GPU has fallen off the bus."})
			woken := make(chan probes.Result, 1)
			go func() { woken <- runProbe(m, NameFatal, runTimeout) }()
			select {
			case <-joined:
			case <-time.After(30 * time.Second):
				t.Error("the woken run never joined the read under way")
			}
			go func() {
				got := <-woken
				if got.Status != probes.StatusProblem || !strings.Contains(got.Message, "79") {
					t.Errorf("woken run: %s %s: %s, want a Problem naming Xid 79", got.Status, got.Reason, got.Message)
				}
				close(wokenDone)
			}()
		})
	}
	if got := runProbe(m, NameDegraded, runTimeout); got.Status == probes.StatusUnknown {
		t.Fatalf("the read under way: %s %s: %s", got.Status, got.Reason, got.Message)
	}
	select {
	case <-wokenDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the woken run never ended")
	}
}
