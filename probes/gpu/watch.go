package gpu

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// A watcher drains the NVML event set on a goroutine of its own, all the
// time, so a storm of harmless Xids is consumed as fast as NVML hands them
// out and a critical Xid behind them is seen within the run that follows
// it, not minutes later. It is the only caller of the set's Wait, and it
// frees the set when its loop ends (while the set's session is live: an
// ended session's library freed it).
//
// A set whose waits fail is replaced (retire), but what NVML queued in it
// is not lost with it: the retired watcher reads the set out (waits that
// do not block, until the set says it is empty) before it frees it, and
// files what it reads; the watcher of the new set is not trusted until
// that read-out is over (see readOutResult for when it could not be done).
// Both sets are registered for a while, so an Xid raised then may be
// counted twice, never lost.
type watcher struct {
	set     nvml.EventSet
	sess    *session
	wait    time.Duration
	onEvent func(nvml.EventData)
	quit    chan struct{}
	exited  chan struct{}
	// prev is the watcher of the set this one replaced, nil for none, and
	// replaced why that set was replaced.
	prev     *watcher
	replaced error

	mu  sync.Mutex // guards the fields below
	err error      // the last wait's failure; nil after a wait that worked
	// unproven is why events could not be trusted before this set, until
	// a wait on it returns.
	unproven error
	waiting  bool
	since    time.Time // when the wait in flight started (real time)
	stopped  bool
	// readOut: stopped by retire, the set is read out before it is freed;
	// retiredAt is when (real time).
	readOut   bool
	retiredAt time.Time
	// readOutDone and readOutErr: the read-out is over, and why it could
	// not show the set empty (nil: every event it held was filed).
	readOutDone bool
	readOutErr  error
	freeErr     error // freeing the set failed
}

// startWatcher starts draining set. unproven is why Xid events could not
// be trusted before (the set this one replaces broke): health says so
// until a wait on the new set has returned, and prev (the watcher of the
// set replaced, or nil) has read its set out.
func startWatcher(set nvml.EventSet, sess *session, wait time.Duration, onEvent func(nvml.EventData), unproven error, prev *watcher) *watcher {
	w := &watcher{set: set, sess: sess, wait: wait, onEvent: onEvent, quit: make(chan struct{}), exited: make(chan struct{}), unproven: unproven, prev: prev, replaced: unproven}
	go w.loop()
	return w
}

func (w *watcher) loop() {
	defer close(w.exited)
	defer w.free()
	ms := uint32(w.wait / time.Millisecond)
	first := true
	for {
		w.mu.Lock()
		if w.stopped || !w.sess.live() {
			w.mu.Unlock()
			w.readOutIfRetired()
			return
		}
		w.waiting, w.since = true, time.Now()
		w.mu.Unlock()
		wait := ms
		if first { // a first wait that does not block proves the set at once
			wait, first = 0, false
		}
		ev, ret, perr := w.waitOnce(wait)
		w.mu.Lock()
		w.waiting, w.unproven = false, nil
		switch ret {
		case nvml.SUCCESS, nvml.ERROR_TIMEOUT:
			w.err = nil
		default:
			w.err = fmt.Errorf("waiting for Xid events: %w", ret)
		}
		if perr != nil {
			w.err = perr
		}
		failed, stopped, readOut := w.err != nil, w.stopped, w.readOut
		w.mu.Unlock()
		if stopped && !readOut { // what a wait returns after stop is not the Monitor's any more
			return
		}
		if ret == nvml.SUCCESS && perr == nil {
			w.onEvent(ev) // after retire too: the set's events are the Monitor's
		}
		if stopped {
			w.readOutIfRetired()
			return
		}
		if failed {
			// A wait that fails at once would spin: pause as long as a
			// wait would have lasted.
			select {
			case <-w.quit:
				w.readOutIfRetired()
				return
			case <-time.After(w.wait):
			}
		}
	}
}

// waitGrace is how long past its timeout a wait may take before it counts
// as hung.
const waitGrace = 2 * time.Second

// Bounds of a read-out: how many events it reads at most (a set that
// never says it is empty is not read for ever), and how many failed waits
// it takes before it gives up, readOutPause apart.
const (
	maxReadOut      = 4096
	readOutAttempts = 3
	readOutPause    = 10 * time.Millisecond
)

// readOutIfRetired reads the set out when retire stopped the loop: it
// waits without blocking, filing each event, until the set says it is
// empty (ERROR_TIMEOUT), and records how that went.
func (w *watcher) readOutIfRetired() {
	w.mu.Lock()
	readOut := w.readOut
	w.mu.Unlock()
	if !readOut {
		return
	}
	err := w.drain()
	w.mu.Lock()
	w.readOutDone, w.readOutErr = true, err
	w.mu.Unlock()
}

// drain reads the set out; nil when it said it is empty.
func (w *watcher) drain() error {
	failures := 0
	for range maxReadOut {
		if !w.sess.live() {
			return errors.New("the NVML session ended first")
		}
		ev, ret, perr := w.waitOnce(0)
		switch {
		case perr == nil && ret == nvml.SUCCESS:
			w.onEvent(ev)
			continue
		case perr == nil && ret == nvml.ERROR_TIMEOUT:
			return nil
		}
		if failures++; failures >= readOutAttempts {
			if perr != nil {
				return perr
			}
			return fmt.Errorf("waiting for Xid events: %w", ret)
		}
		time.Sleep(readOutPause)
	}
	return fmt.Errorf("it still held events after %d", maxReadOut)
}

// readOutResult says whether the set this watcher replaced has been read
// out, and why not all it held could be read (nil: it was, or there was
// no set before). done is false while the read-out is under way, until it
// has taken longer than a wait and its grace (a wait of the broken set
// that hangs): then it is given up, and the GPUs are checked again instead
// (see Monitor.closeGap); what it reads if its wait returns is still filed.
func (w *watcher) readOutResult() (done bool, err error) {
	if w.prev == nil {
		return true, nil
	}
	p := w.prev
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.readOutDone {
		if d := time.Since(p.retiredAt); d > p.wait+waitGrace {
			return true, fmt.Errorf("reading it out has not returned after %v", d.Round(time.Millisecond))
		}
	}
	return p.readOutDone, p.readOutErr
}

// free frees the set when the loop ends, unless its session has ended.
func (w *watcher) free() {
	if !w.sess.live() {
		return
	}
	if ret := w.set.Free(); ret != nvml.SUCCESS {
		w.mu.Lock()
		w.freeErr = fmt.Errorf("freeing the NVML event set: %w", ret)
		w.mu.Unlock()
	}
}

// waitOnce waits for one event, turning a panic in NVML (or its mock)
// into an error rather than a crash of the agent.
func (w *watcher) waitOnce(ms uint32) (ev nvml.EventData, ret nvml.Return, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("waiting for Xid events: nvmlEventSetWait panicked: %v", p)
		}
	}()
	ev, ret = w.set.Wait(ms)
	return ev, ret, nil
}

// health returns why Xid events cannot be trusted now: the last wait
// failed, or the wait in flight has not returned long after its timeout,
// or the set this one replaced is still being read out. nil when they can.
func (w *watcher) health() error {
	if done, _ := w.readOutResult(); !done {
		if w.replaced != nil {
			return fmt.Errorf("%w; what it held is being read out", w.replaced)
		}
		return errors.New("the NVML event set was replaced; what it held is being read out")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.unproven != nil {
		return w.unproven
	}
	if w.waiting {
		if d := time.Since(w.since); d > w.wait+waitGrace {
			return fmt.Errorf("waiting for Xid events: nvmlEventSetWait has not returned after %v", d.Round(time.Millisecond))
		}
	}
	return nil
}

// failing reports whether the last wait that returned failed: the set is
// broken, and is replaced (a wait that hangs from the start is not
// failing: it is reported, and the set kept).
func (w *watcher) failing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err != nil
}

// retire ends the loop, in the same session, without waiting for it: it
// reads the set out (filing what it held) and frees it, once its wait in
// flight returns.
func (w *watcher) retire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped, w.readOut, w.retiredAt = true, true, time.Now()
		close(w.quit)
	}
}

// stop ends the loop and waits for it to free the event set; what the set
// still holds is dropped (the session ends, or the Monitor closes). A
// wait that hangs keeps the set (freeing it under a waiting call is not
// safe): the loop frees it when the wait returns, if the session is still
// live.
func (w *watcher) stop() error {
	w.mu.Lock()
	if !w.stopped {
		w.stopped = true
		close(w.quit)
	}
	w.mu.Unlock()
	select {
	case <-w.exited:
	case <-time.After(w.wait + waitGrace):
		return fmt.Errorf("the Xid event wait has not returned; the event set is freed when it does")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.freeErr
}
