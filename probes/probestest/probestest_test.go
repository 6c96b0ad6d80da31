package probestest

import (
	"context"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func fired(tm probes.Timer) (time.Time, bool) {
	select {
	case at := <-tm.C():
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestFakeClockStep(t *testing.T) {
	c := NewFakeClock(t0)
	a := c.NewTimer(time.Second)
	b := c.NewTimer(3 * time.Second)
	stopped := c.NewTimer(2 * time.Second)
	if got, want := c.WaiterCount(), 3; got != want {
		t.Fatalf("WaiterCount() = %d, want %d", got, want)
	}
	if got, want := stopped.Stop(), true; got != want {
		t.Errorf("Stop() of an armed timer = %v, want %v", got, want)
	}
	if got, want := stopped.Stop(), false; got != want {
		t.Errorf("second Stop() = %v, want %v", got, want)
	}

	steps := []struct {
		step          time.Duration
		wantNow       time.Time
		wantA, wantB  bool
		wantWaiters   int
		wantFiredTime time.Time
	}{
		{999 * time.Millisecond, t0.Add(999 * time.Millisecond), false, false, 2, time.Time{}},
		{time.Millisecond, t0.Add(time.Second), true, false, 1, t0.Add(time.Second)},
		{5 * time.Second, t0.Add(6 * time.Second), false, true, 0, t0.Add(6 * time.Second)},
	}
	for i, s := range steps {
		c.Step(s.step)
		if got := c.Now(); !got.Equal(s.wantNow) {
			t.Errorf("step %d: Now() = %v, want %v", i, got, s.wantNow)
		}
		atA, gotA := fired(a)
		atB, gotB := fired(b)
		if gotA != s.wantA || gotB != s.wantB {
			t.Errorf("step %d: fired a=%v b=%v, want a=%v b=%v", i, gotA, gotB, s.wantA, s.wantB)
		}
		for _, at := range []time.Time{atA, atB} {
			if !at.IsZero() && !at.Equal(s.wantFiredTime) {
				t.Errorf("step %d: timer sent %v, want %v", i, at, s.wantFiredTime)
			}
		}
		if got := c.WaiterCount(); got != s.wantWaiters {
			t.Errorf("step %d: WaiterCount() = %d, want %d", i, got, s.wantWaiters)
		}
	}
	if got, want := a.Stop(), false; got != want {
		t.Errorf("Stop() of a fired timer = %v, want %v", got, want)
	}
	if _, ok := fired(stopped); ok {
		t.Errorf("stopped timer fired")
	}
}

func TestFakeClockNonPositiveTimerFiresAtOnce(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		c := NewFakeClock(t0)
		tm := c.NewTimer(d)
		if at, ok := fired(tm); !ok || !at.Equal(t0) {
			t.Errorf("NewTimer(%v): fired=%v at %v, want fired at %v", d, ok, at, t0)
		}
		if got, want := c.WaiterCount(), 0; got != want {
			t.Errorf("NewTimer(%v): WaiterCount() = %d, want %d", d, got, want)
		}
	}
}

func TestBlockUntilWaiters(t *testing.T) {
	c := NewFakeClock(t0)
	done := make(chan struct{})
	go func() { c.BlockUntilWaiters(2); close(done) }()
	c.NewTimer(time.Second)
	select {
	case <-done:
		t.Fatal("BlockUntilWaiters(2) returned with one timer armed")
	default:
	}
	c.NewTimer(time.Second)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("BlockUntilWaiters(2) did not return with two timers armed")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.BlockUntilWaitersContext(ctx, 5); err == nil {
		t.Errorf("BlockUntilWaitersContext(canceled, 5) = nil, want an error")
	}
}

func TestProbes(t *testing.T) {
	want := probes.Result{Status: probes.StatusOK, Reason: "Fine", Readings: []probes.Reading{{Name: "a", Value: "1"}}}
	s := StaticProbe{ProbeName: "static", Result: want}
	got := s.Probe(context.Background())
	got.Readings[0].Value = "changed"
	if s.Name() != "static" || s.Result.Readings[0].Value != "1" {
		t.Errorf("StaticProbe: name %q, readings %v after caller mutated a result; want %q, %v", s.Name(), s.Result.Readings, "static", want.Readings)
	}
	f := FuncProbe{ProbeName: "func", Func: func(context.Context) probes.Result { return want }}
	if got := f.Probe(context.Background()); f.Name() != "func" || got.Reason != want.Reason {
		t.Errorf("FuncProbe: name %q, result %+v; want %q, %+v", f.Name(), got, "func", want)
	}
}
