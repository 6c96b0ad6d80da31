package gpu

import (
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
type watcher struct {
	set     nvml.EventSet
	sess    *session
	wait    time.Duration
	onEvent func(nvml.EventData)
	quit    chan struct{}
	exited  chan struct{}

	mu  sync.Mutex // guards the fields below
	err error      // the last wait's failure; nil after a wait that worked
	// unproven is why events could not be trusted before this set, until
	// a wait on it returns.
	unproven error
	waiting  bool
	since    time.Time // when the wait in flight started (real time)
	stopped  bool
	freeErr  error // freeing the set failed
}

// startWatcher starts draining set. unproven is why Xid events could not
// be trusted before (the set this one replaces broke): health says so
// until a wait on the new set has returned.
func startWatcher(set nvml.EventSet, sess *session, wait time.Duration, onEvent func(nvml.EventData), unproven error) *watcher {
	w := &watcher{set: set, sess: sess, wait: wait, onEvent: onEvent, quit: make(chan struct{}), exited: make(chan struct{}), unproven: unproven}
	go w.loop()
	return w
}

func (w *watcher) loop() {
	defer close(w.exited)
	defer w.free()
	ms := uint32(w.wait / time.Millisecond)
	for {
		w.mu.Lock()
		if w.stopped || !w.sess.live() {
			w.mu.Unlock()
			return
		}
		w.waiting, w.since = true, time.Now()
		w.mu.Unlock()
		ev, ret, perr := w.waitOnce(ms)
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
		failed, stopped := w.err != nil, w.stopped
		w.mu.Unlock()
		if stopped { // what a wait returns after stop is not the Monitor's any more
			return
		}
		if ret == nvml.SUCCESS && perr == nil {
			w.onEvent(ev)
		}
		if failed {
			// A wait that fails at once would spin: pause as long as a
			// wait would have lasted.
			select {
			case <-w.quit:
				return
			case <-time.After(w.wait):
			}
		}
	}
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
// failed, or the wait in flight has not returned long after its timeout.
// nil when they can.
func (w *watcher) health() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.unproven != nil {
		return w.unproven
	}
	if w.waiting {
		if d := time.Since(w.since); d > w.wait+2*time.Second {
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

// retire ends the loop without waiting for it: it frees the set when its
// wait returns.
func (w *watcher) retire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.quit)
	}
}

// stop ends the loop and waits for it to free the event set. A wait that
// hangs keeps the set (freeing it under a waiting call is not safe): the
// loop frees it when the wait returns, if the session is still live.
func (w *watcher) stop() error {
	w.retire()
	select {
	case <-w.exited:
	case <-time.After(w.wait + 2*time.Second):
		return fmt.Errorf("the Xid event wait has not returned; the event set is freed when it does")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.freeErr
}
