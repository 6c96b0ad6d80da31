package gpu

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A worker makes the NVML calls of one GPU (or of the library as a whole)
// on a goroutine of its own, one call at a time. A driver that hangs in a
// call holds up that goroutine only: the probe run waits for it until its
// deadline, then judges what the other GPUs said, and later runs find the
// worker still busy and say since when and in which call. The number of
// goroutines stays one per worker however long the driver hangs.
type worker struct {
	name string
	jobs chan func(step func(string))

	mu    sync.Mutex // guards the fields below
	busy  bool
	step  string    // the call in flight while busy
	since time.Time // when that call started (real time)
	done  bool      // closed: no more jobs
}

// startWorker starts a worker named name ("GPU 3", "NVML").
func startWorker(name string) *worker {
	w := &worker{name: name, jobs: make(chan func(func(string)))}
	go w.loop()
	return w
}

func (w *worker) loop() {
	for job := range w.jobs {
		job(w.setStep) // frees the worker (busy false) when it returns
		w.mu.Lock()
		done := w.done
		w.mu.Unlock()
		if done {
			return
		}
	}
}

// setStep records the call the running job is about to make.
func (w *worker) setStep(step string) {
	w.mu.Lock()
	w.step, w.since = step, time.Now()
	w.mu.Unlock()
}

// hungError says a worker's call has not returned.
type hungError struct {
	worker, step string
	for_         time.Duration
}

func (e *hungError) Error() string {
	return fmt.Sprintf("%s: NVML call %s has not returned after %v", e.worker, e.step, e.for_.Round(time.Millisecond))
}

// stuck returns the hung call when the worker is still busy with an
// earlier job, nil when it is free.
func (w *worker) stuck() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.busy {
		return nil
	}
	return &hungError{worker: w.name, step: w.step, for_: time.Since(w.since)}
}

// do runs job on the worker and waits until it returns or ctx ends. It
// returns a *hungError when the worker was still busy (the job does not
// run) or the job did not return in time (it goes on running; its later
// effects are the job's to guard), and an error without running the job
// when ctx has already ended. job calls step before each NVML call.
func (w *worker) do(ctx context.Context, job func(step func(string))) error {
	w.mu.Lock()
	switch {
	case w.done:
		w.mu.Unlock()
		return fmt.Errorf("%s: the GPU monitor is closed", w.name)
	case w.busy:
		err := &hungError{worker: w.name, step: w.step, for_: time.Since(w.since)}
		w.mu.Unlock()
		return err
	case ctx.Err() != nil:
		w.mu.Unlock()
		return fmt.Errorf("%s: not read: the run's time was up before its turn: %w", w.name, context.Cause(ctx))
	}
	w.busy, w.step, w.since = true, "(starting)", time.Now()
	w.mu.Unlock()
	finished := make(chan struct{})
	var panicked error
	w.jobs <- func(step func(string)) {
		defer func() {
			p := recover()
			// The worker is free before do returns, so that a run right
			// after this one does not find it busy.
			w.mu.Lock()
			if p != nil {
				panicked = fmt.Errorf("%s: NVML call %s panicked: %v", w.name, w.step, p)
			}
			w.busy, w.step = false, ""
			w.mu.Unlock()
			close(finished)
		}()
		job(step)
	}
	select {
	case <-finished:
		w.mu.Lock()
		defer w.mu.Unlock()
		return panicked
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.busy { // it finished just now
			return panicked
		}
		return &hungError{worker: w.name, step: w.step, for_: time.Since(w.since)}
	}
}

// stop ends the worker once its current job, if any, returns.
func (w *worker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.done = true
	if !w.busy {
		close(w.jobs)
	}
	// A busy worker's loop returns when its job does, if ever.
}
