package gpu

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestWorker(t *testing.T) {
	w := startWorker("GPU 3")
	defer w.stop()
	ctx := context.Background()

	ran := false
	if err := w.do(ctx, func(step func(string)) { step("nvmlA"); ran = true }); err != nil || !ran {
		t.Fatalf("do: got %v, ran %v; want nil, true", err, ran)
	}

	// A job that does not return in time: the call is named, and the
	// worker is busy until it returns.
	release := make(chan struct{})
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err := w.do(short, func(step func(string)) { step("nvmlDeviceGetHung"); <-release })
	var hung *hungError
	if !errors.As(err, &hung) || !strings.Contains(err.Error(), "GPU 3: NVML call nvmlDeviceGetHung has not returned after") {
		t.Fatalf("hung job: got %v, want a hungError naming nvmlDeviceGetHung", err)
	}
	ran = false
	err = w.do(ctx, func(step func(string)) { ran = true })
	if !errors.As(err, &hung) || !strings.Contains(err.Error(), "nvmlDeviceGetHung") || ran {
		t.Errorf("busy worker: got %v, ran %v; want a hungError naming the hung call and the job not run", err, ran)
	}
	if err := w.stuck(); err == nil || !strings.Contains(err.Error(), "nvmlDeviceGetHung") {
		t.Errorf("stuck: got %v, want the hung call", err)
	}
	close(release)
	eventually(t, "the worker free", func() bool { return w.stuck() == nil })
	if err := w.do(ctx, func(step func(string)) {}); err != nil {
		t.Errorf("after the hung job returned: got %v", err)
	}

	// A job that panics is an error, and the worker goes on.
	err = w.do(ctx, func(step func(string)) { step("nvmlDeviceGetBoom"); panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "GPU 3: NVML call nvmlDeviceGetBoom panicked: boom") {
		t.Errorf("panicking job: got %v, want the panic named", err)
	}
	ran = false
	if err := w.do(ctx, func(step func(string)) { ran = true }); err != nil || !ran {
		t.Errorf("after a panic: got %v, ran %v; want nil, true", err, ran)
	}
}

// A run that follows another at once finds the worker free: the worker is
// free before do returns.
func TestWorkerFreeWhenDoReturns(t *testing.T) {
	w := startWorker("GPU 0")
	defer w.stop()
	for i := range 20000 {
		if err := w.do(context.Background(), func(step func(string)) { step("nvmlQuick") }); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

func TestWorkerStop(t *testing.T) {
	before := runtime.NumGoroutine()
	w := startWorker("GPU 1")
	w.stop()
	w.stop()
	if err := w.do(context.Background(), func(step func(string)) { t.Errorf("a job ran after stop") }); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("do after stop: got %v, want an error saying the monitor is closed", err)
	}
	goroutinesAtMost(t, "after stop", before)

	// Stopped while busy: the worker ends once its job returns.
	w = startWorker("GPU 2")
	release := make(chan struct{})
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = w.do(short, func(step func(string)) { <-release })
	w.stop()
	close(release)
	goroutinesAtMost(t, "after a busy worker was stopped and its job returned", before)
}
