package gpu

import (
	"context"
	"errors"
)

// wakers are the wake functions of the fatal probe's Watch calls.
type wakers struct {
	next  int
	funcs map[int]func()
}

// Watch lets the runner run the fatal probe as soon as a fatal Xid is
// filed, from NVML's event watcher or the kernel log (KernelXid), instead
// of at its next interval: it calls wake for each (the runner coalesces
// wakes) until ctx ends, then returns nil. It fails at once when the
// Monitor is closed. It has the shape of probes.Waker.
func (p *statefulProbe) Watch(ctx context.Context, wake func()) error {
	return p.m.watch(ctx, wake)
}

func (m *Monitor) watch(ctx context.Context, wake func()) error {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return errors.New("gpu probe: watching for fatal Xids: " + errClosed.Error())
	}
	m.wakeMu.Lock()
	if m.wake.funcs == nil {
		m.wake.funcs = map[int]func(){}
	}
	id := m.wake.next
	m.wake.next++
	m.wake.funcs[id] = wake
	m.wakeMu.Unlock()
	defer func() {
		m.wakeMu.Lock()
		delete(m.wake.funcs, id)
		m.wakeMu.Unlock()
	}()
	<-ctx.Done()
	return nil
}

// wakeFatal wakes every Watch of the fatal probe. No other lock of the
// Monitor is held.
func (m *Monitor) wakeFatal() {
	m.wakeMu.Lock()
	fs := make([]func(), 0, len(m.wake.funcs))
	for _, f := range m.wake.funcs {
		fs = append(fs, f)
	}
	m.wakeMu.Unlock()
	for _, f := range fs {
		f()
	}
}
