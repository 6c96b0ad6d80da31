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
// it, not minutes later. It is the only caller of the set's Wait.
type watcher struct {
	set     nvml.EventSet
	wait    time.Duration
	onEvent func(nvml.EventData)
	quit    chan struct{}
	exited  chan struct{}

	mu      sync.Mutex // guards the fields below
	err     error      // the last wait's failure; nil after a wait that worked
	waiting bool
	since   time.Time // when the wait in flight started (real time)
	stopped bool
}

func startWatcher(set nvml.EventSet, wait time.Duration, onEvent func(nvml.EventData)) *watcher {
	w := &watcher{set: set, wait: wait, onEvent: onEvent, quit: make(chan struct{}), exited: make(chan struct{})}
	go w.loop()
	return w
}

func (w *watcher) loop() {
	defer close(w.exited)
	ms := uint32(w.wait / time.Millisecond)
	for {
		w.mu.Lock()
		if w.stopped {
			w.mu.Unlock()
			return
		}
		w.waiting, w.since = true, time.Now()
		w.mu.Unlock()
		ev, ret, perr := w.waitOnce(ms)
		w.mu.Lock()
		w.waiting = false
		switch ret {
		case nvml.SUCCESS, nvml.ERROR_TIMEOUT:
			w.err = nil
		default:
			w.err = fmt.Errorf("waiting for Xid events: %w", ret)
		}
		if perr != nil {
			w.err = perr
		}
		failed := w.err != nil
		w.mu.Unlock()
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
	if w.waiting {
		if d := time.Since(w.since); d > w.wait+2*time.Second {
			return fmt.Errorf("waiting for Xid events: nvmlEventSetWait has not returned after %v", d.Round(time.Millisecond))
		}
	}
	return nil
}

// stop ends the loop and frees the event set. A wait that hangs keeps the
// set: freeing it under a waiting call is not safe.
func (w *watcher) stop() error {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil
	}
	w.stopped = true
	close(w.quit)
	w.mu.Unlock()
	select {
	case <-w.exited:
	case <-time.After(w.wait + 2*time.Second):
		return fmt.Errorf("the Xid event wait has not returned; the event set is left allocated")
	}
	if ret := w.set.Free(); ret != nvml.SUCCESS {
		return fmt.Errorf("freeing the NVML event set: %w", ret)
	}
	return nil
}
