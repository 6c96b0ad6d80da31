package hardware

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestCounter: the inventory's count where no GPU probe runs. A hung
// driver makes each count fail within the timeout, asks meanwhile share
// the one count in flight (one goroutine held, never more), and the next
// ask after the driver answers again counts afresh.
func TestCounter(t *testing.T) {
	s := newServer()
	c := NewCounter(s, 50*time.Millisecond)
	n, detail, err := c.CountGPUs(context.Background())
	if err != nil || n != 8 || !strings.HasPrefix(detail, "0:Mock NVIDIA A100-SXM4-40GB, 1:") {
		t.Fatalf("healthy: CountGPUs = %d, %q, %v; want 8 named", n, detail, err)
	}

	release := make(chan struct{})
	var calls atomic.Int32
	s.DeviceGetCountFunc = func() (int, nvml.Return) {
		calls.Add(1)
		<-release
		return 7, nvml.SUCCESS
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	runtime.GC()
	before := runtime.NumGoroutine()
	for i := range 20 {
		start := time.Now()
		n, _, err := c.CountGPUs(context.Background())
		if took := time.Since(start); took > time.Second {
			t.Fatalf("ask %d on a hung driver took %s (timeout 50ms)", i, took)
		}
		if err == nil || !strings.Contains(err.Error(), "NVML has not answered") {
			t.Fatalf("ask %d on a hung driver: %d, %v; want an error saying NVML has not answered", i, n, err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("20 asks on a hung driver made %d counts, want 1 (shared)", got)
	}
	if got := runtime.NumGoroutine(); got > before+1 {
		t.Errorf("%d goroutines after 20 asks on a hung driver, want at most %d", got, before+1)
	}

	// A caller's context ending ends its wait too.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := c.CountGPUs(ctx); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("cancelled ask: %v, want context canceled", err)
	}

	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, _, err = c.CountGPUs(context.Background())
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The hung count's own answer (7) or a fresh one: the driver answers.
	if err != nil || n != 7 {
		t.Fatalf("after the driver answers: %d, %v; want 7", n, err)
	}

	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	for {
		_, _, err = c.CountGPUs(context.Background())
		if err != nil || time.Now().After(deadline) {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "counting NVIDIA GPUs: ERROR_UNKNOWN") {
		t.Errorf("count failing: %v, want counting NVIDIA GPUs: ERROR_UNKNOWN", err)
	}
}
