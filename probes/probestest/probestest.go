// Package probestest provides test doubles for the probes package: a
// FakeClock that tests step by hand, so runner behaviour (jitter, intervals,
// timeouts) is checked deterministically without sleeping, simple Probe
// implementations, and the checks that the probes' own tests share
// (CheckResult, CheckRealHost, CheckParse and friends).
package probestest

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// FakeClock is a probes.Clock whose time moves only when Step is called.
// It is safe for concurrent use.
type FakeClock struct {
	mu      sync.Mutex    // guards the fields below
	now     time.Time     // current fake time
	timers  []*fakeTimer  // armed timers, in no particular order
	changed chan struct{} // closed and replaced whenever timers changes
}

// NewFakeClock returns a FakeClock reading t0.
func NewFakeClock(t0 time.Time) *FakeClock {
	return &FakeClock{now: t0, changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when Step moves the clock d or more
// past the current time. A timer for d <= 0 has fired already.
func (c *FakeClock) NewTimer(d time.Duration) probes.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, c: make(chan time.Time, 1), deadline: c.now.Add(d)}
	if d <= 0 {
		t.c <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.notifyLocked()
	return t
}

// Step moves the clock forward by d and fires, in deadline order, every
// timer whose deadline is now reached. It does not wait for the goroutines
// receiving from those timers to run.
func (c *FakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	var due, keep []*fakeTimer
	for _, t := range c.timers {
		if t.deadline.After(c.now) {
			keep = append(keep, t)
		} else {
			due = append(due, t)
		}
	}
	if len(due) == 0 {
		return
	}
	sort.SliceStable(due, func(i, j int) bool { return due[i].deadline.Before(due[j].deadline) })
	for _, t := range due {
		t.c <- c.now // capacity 1 and fired once, never blocks
	}
	c.timers = keep
	c.notifyLocked()
}

// WaiterCount returns how many timers are armed: created, not yet fired
// and not stopped.
func (c *FakeClock) WaiterCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntilWaiters blocks until at least n timers are armed. Use it to wait
// until the goroutines under test have reached the point where they wait on
// the clock, before calling Step.
func (c *FakeClock) BlockUntilWaiters(n int) {
	_ = c.BlockUntilWaitersContext(context.Background(), n)
}

// BlockUntilWaitersContext is BlockUntilWaiters that gives up, returning
// ctx's error, when ctx is done.
func (c *FakeClock) BlockUntilWaitersContext(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		got, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notifyLocked wakes BlockUntilWaiters callers. c.mu must be held.
func (c *FakeClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type fakeTimer struct {
	clock    *FakeClock
	c        chan time.Time
	deadline time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, armed := range c.timers {
		if armed == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.notifyLocked()
			return true
		}
	}
	return false
}

// StaticProbe is a probe that always returns the same Result.
type StaticProbe struct {
	ProbeName string
	Result    probes.Result
}

// Name returns ProbeName.
func (p StaticProbe) Name() string { return p.ProbeName }

// Probe returns a copy of Result.
func (p StaticProbe) Probe(context.Context) probes.Result {
	res := p.Result
	res.Readings = append([]probes.Reading(nil), p.Result.Readings...)
	return res
}

// FuncProbe is a probe that calls Func.
type FuncProbe struct {
	ProbeName string
	Func      func(ctx context.Context) probes.Result
}

// Name returns ProbeName.
func (p FuncProbe) Name() string { return p.ProbeName }

// Probe returns Func(ctx).
func (p FuncProbe) Probe(ctx context.Context) probes.Result { return p.Func(ctx) }
