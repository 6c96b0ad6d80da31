package gpu

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// countWithin calls m.CountGPUs with a context that ends after d and fails
// the test if it takes much longer than d.
func countWithin(t *testing.T, m *Monitor, d time.Duration) (int, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	n, detail, err := m.CountGPUs(ctx)
	if took := time.Since(start); took > d+time.Second {
		t.Fatalf("CountGPUs took %s with a %s deadline", took, d)
	}
	return n, detail, err
}

// TestCountGPUs: the inventory's count of GPUs through the Monitor, under
// each of NVML's bad days: it never hangs, a GPU NVML counts but cannot
// read still counts, and a count NVML cannot give is an error (the agent
// then keeps the last good inventory).
func TestCountGPUs(t *testing.T) {
	all := func(f *fake) string {
		var names []string
		for i := range 8 {
			names = append(names, fmt.Sprintf("%d:%s", i, f.uuid(i)))
		}
		return strings.Join(names, ", ")
	}
	tests := []struct {
		name    string
		setup   func(f *fake)
		n       int
		detail  func(f *fake) string // nil: not checked
		wantErr string
	}{
		{name: "healthy", setup: func(*fake) {}, n: 8, detail: all},
		{name: "one GPU sick (Xid 79's lost GPU) still counts",
			setup: func(f *fake) { f.fail(5, allCalls, errLost) }, n: 8,
			detail: func(f *fake) string { return strings.Replace(all(f), "5:"+f.uuid(5), "5", 1) }},
		{name: "one GPU hung still counts, within the deadline",
			setup: func(f *fake) { f.fail(2, allCalls, hang) }, n: 8,
			detail: func(f *fake) string { return strings.Replace(all(f), "2:"+f.uuid(2), "2", 1) }},
		{name: "7 of 8 seen", setup: func(f *fake) { f.see(0, 1, 2, 3, 4, 5, 6) }, n: 7},
		{name: "the count hangs", setup: func(f *fake) { f.failLib("DeviceGetCount", hang) },
			wantErr: "nvmlDeviceGetCount has not returned"},
		{name: "the count fails", setup: func(f *fake) { f.failLib("DeviceGetCount", errUnknown) },
			wantErr: "counting GPUs: ERROR_UNKNOWN"},
		{name: "the driver is gone", setup: func(f *fake) { f.failLib("DeviceGetCount", fault{ret: nvml.ERROR_LIB_RM_VERSION_MISMATCH}) },
			wantErr: "counting GPUs"},
		{name: "everything hangs", setup: func(f *fake) { f.hangAll() },
			wantErr: "has not returned"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{})
			tt.setup(f)
			n, detail, err := countWithin(t, m, time.Second)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CountGPUs = %d, %q, %v; want an error with %q", n, detail, err, tt.wantErr)
				}
				return
			}
			if err != nil || n != tt.n {
				t.Fatalf("CountGPUs = %d, %q, %v; want %d", n, detail, err, tt.n)
			}
			if tt.detail != nil && detail != tt.detail(f) {
				t.Errorf("detail %q, want %q", detail, tt.detail(f))
			}
		})
	}
}

// TestCountGPUsSharesTheProbesRead: a read of the probes at most
// InventoryFresh old is the inventory's too (no NVML call of its own); an
// older one is read again.
func TestCountGPUsSharesTheProbesRead(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "probe", runProbe(m, NameFatal, runTimeout), fatalOK)
	counts, uuids := f.called("DeviceGetCount"), f.called("GetUUID")
	f.clk.Step(InventoryFresh)
	if n, _, err := countWithin(t, m, runTimeout); err != nil || n != 8 {
		t.Fatalf("CountGPUs = %d, %v; want 8", n, err)
	}
	if c, u := f.called("DeviceGetCount"), f.called("GetUUID"); c != counts || u != uuids {
		t.Errorf("CountGPUs on a read %s old called NVML: DeviceGetCount %d -> %d, GetUUID %d -> %d", InventoryFresh, counts, c, uuids, u)
	}
	f.see(0, 1, 2, 3, 4, 5, 6)
	f.clk.Step(time.Second)
	if n, _, err := countWithin(t, m, runTimeout); err != nil || n != 7 {
		t.Fatalf("CountGPUs on a stale read = %d, %v; want a new read saying 7", n, err)
	}
	if c := f.called("DeviceGetCount"); c != counts+1 {
		t.Errorf("DeviceGetCount called %d times, want %d", c, counts+1)
	}
}

// TestCountGPUsUnderAHungDriver: the inventory asking again and again while
// every NVML call hangs, beside the probes, holds no more goroutines than
// the hung calls themselves, and each ask returns within its deadline.
func TestCountGPUsUnderAHungDriver(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "probe", runProbe(m, NameFatal, runTimeout), fatalOK)
	f.hangAll()
	f.clk.Step(InventoryFresh + time.Second)
	if _, _, err := countWithin(t, m, 500*time.Millisecond); err == nil {
		t.Fatal("CountGPUs with every call hung: no error")
	}
	runProbe(m, NameFatal, 500*time.Millisecond)
	runtime.GC()
	before := runtime.NumGoroutine()
	for i := range 30 {
		f.clk.Step(time.Second)
		if _, _, err := countWithin(t, m, 200*time.Millisecond); err == nil {
			t.Fatalf("ask %d: no error with every call hung", i)
		}
		if i%3 == 0 {
			runProbe(m, NameDegraded, 200*time.Millisecond)
		}
	}
	goroutinesAtMost(t, "after 30 inventory counts and 10 probe runs on a hung driver", before+2)
}
