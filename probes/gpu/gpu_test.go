package gpu

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// events is the event set of a fake: Wait hands out queued events, then
// fails with err if set, else times out.
type events struct {
	mu      sync.Mutex // guards the fields below
	queue   []nvml.EventData
	err     nvml.Return
	waits   []uint32 // timeouts passed to Wait
	freed   int
	created int
}

func (e *events) push(evs ...nvml.EventData) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queue = append(e.queue, evs...)
}

func (e *events) set() *mock.EventSet {
	return &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.waits = append(e.waits, ms)
			switch {
			case len(e.queue) > 0:
				ev := e.queue[0]
				e.queue = e.queue[1:]
				return ev, nvml.SUCCESS
			case e.err != 0:
				return nvml.EventData{}, e.err
			}
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		},
		FreeFunc: func() nvml.Return {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.freed++
			return nvml.SUCCESS
		},
	}
}

// fake is a DGX A100 (8 GPUs) whose every health signal reads healthy
// until a test changes it.
type fake struct {
	*dgxa100.Server
	events *events
}

func newFake() *fake {
	f := &fake{Server: dgxa100.New(), events: &events{}}
	f.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		f.events.mu.Lock()
		defer f.events.mu.Unlock()
		f.events.created++
		return f.events.set(), nvml.SUCCESS
	}
	for i := range f.Devices {
		d := f.dev(i)
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeAll, nvml.SUCCESS }
		d.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
			if types != nvml.EventTypeXidCriticalError {
				panic(fmt.Sprintf("registered for event types %#x, want only critical Xids", types))
			}
			return nvml.SUCCESS
		}
		d.GetTotalEccErrorsFunc = func(typ nvml.MemoryErrorType, counter nvml.EccCounterType) (uint64, nvml.Return) {
			if typ != nvml.MEMORY_ERROR_TYPE_UNCORRECTED || counter != nvml.VOLATILE_ECC {
				panic(fmt.Sprintf("read ECC errors of type %d, counter %d, want uncorrected volatile", typ, counter))
			}
			return 0, nvml.SUCCESS
		}
		d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksEventReasonGpuIdle, nvml.SUCCESS }
	}
	return f
}

func (f *fake) dev(i int) *dgxa100.Device { return f.Devices[i].(*dgxa100.Device) }

func (f *fake) uuid(i int) string { return f.dev(i).UUID }

// xid is a critical Xid event on GPU i.
func (f *fake) xid(i int, xid uint64) nvml.EventData {
	return nvml.EventData{Device: f.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}

// lacking makes the fake's driver lack the named symbols.
func (f *fake) lacking(syms ...string) {
	f.LookupSymbolFunc = func(name string) error {
		for _, s := range syms {
			if s == name {
				return fmt.Errorf("symbol %q not found", name)
			}
		}
		return nil
	}
}

// mustNotCall makes every call of fn an error on t.
func mustNotCall(t *testing.T, what string) func() {
	return func() { t.Errorf("%s called, want it not to be", what) }
}

func newMonitor(t *testing.T, cfg Config, lib nvml.Interface) *Monitor {
	t.Helper()
	m, err := New(cfg, lib)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	m.now = func() time.Time { return t0 }
	t.Cleanup(func() { m.Close() })
	return m
}

func run(m *Monitor) (fatal, degraded probes.Result) {
	ctx := context.Background()
	return m.FatalProbe().Probe(ctx), m.DegradedProbe().Probe(ctx)
}

// want is what a test expects of the two probes. Message lists substrings;
// {uuidN} stands for GPU N's UUID.
type want struct {
	status  probes.Status
	reason  string
	message []string
	not     []string // substrings the message must not contain
}

func check(t *testing.T, f *fake, probe string, got probes.Result, w want) {
	t.Helper()
	expand := func(s string) string {
		for i := range f.Devices {
			s = strings.ReplaceAll(s, fmt.Sprintf("{uuid%d}", i), f.uuid(i))
		}
		return s
	}
	var msg []string
	for _, m := range w.message {
		msg = append(msg, expand(m))
	}
	if got.Status != w.status || got.Reason != w.reason {
		t.Errorf("%s: got %s/%s, want %s/%s (message %q)", probe, got.Status, got.Reason, w.status, w.reason, got.Message)
	}
	for _, sub := range msg {
		if !strings.Contains(got.Message, sub) {
			t.Errorf("%s: got message %q, want it to contain %q", probe, got.Message, sub)
		}
	}
	for _, sub := range w.not {
		if strings.Contains(got.Message, expand(sub)) {
			t.Errorf("%s: got message %q, want it not to contain %q", probe, got.Message, expand(sub))
		}
	}
}

var (
	fatalOK    = want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"8 GPUs healthy: no critical Xid, uncorrectable ECC errors at most 0, no row remapping failure"}}
	degradedOK = want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"8 GPUs not degraded: no page retirement or row remapping pending, no hardware slowdown"}}
)

func TestProbes(t *testing.T) {
	stamp := "2026-03-01T12:00:00Z"
	tests := []struct {
		name         string
		cfg          *Config // nil: DefaultConfig()
		setup        func(t *testing.T, f *fake)
		fatal        want
		degraded     want
		fatalReading map[string]string // readings of the fatal probe to check, {uuidN} expanded
	}{
		{
			name:  "healthy",
			fatal: fatalOK, degraded: degradedOK,
			fatalReading: map[string]string{"gpus": "8", "gpu0": "{uuid0}: xid none, uncorrectable ECC 0, row remap failure no"},
		},
		{
			name:  "Xid 79 on GPU 3 is fatal",
			setup: func(t *testing.T, f *fake) { f.events.push(f.xid(3, 79)) },
			fatal: want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{
				"GPU 3 ({uuid3}): critical Xid 79 at " + stamp + "; the GPU needs a reset"}, not: []string{"GPU 2", "GPU 4"}},
			degraded:     degradedOK,
			fatalReading: map[string]string{"gpu3": "{uuid3}: xid 79 x1, uncorrectable ECC 0, row remap failure no", "gpu2": "{uuid2}: xid none, uncorrectable ECC 0, row remap failure no"},
		},
		{
			name: "several Xids on two GPUs",
			setup: func(t *testing.T, f *fake) {
				f.events.push(f.xid(3, 79), f.xid(6, 48), f.xid(3, 79), f.xid(3, 94))
			},
			fatal: want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{
				"GPU 3 ({uuid3}): critical Xid 79 2 times, first at " + stamp + ", last at " + stamp + ", critical Xid 94 at " + stamp,
				"GPU 6 ({uuid6}): critical Xid 48 at " + stamp}},
			degraded:     degradedOK,
			fatalReading: map[string]string{"gpu3": "{uuid3}: xid 79 x2, 94 x1, uncorrectable ECC 0, row remap failure no"},
		},
		{
			name:         "skip-listed Xid 13 is no problem",
			setup:        func(t *testing.T, f *fake) { f.events.push(f.xid(3, 13), f.xid(3, 109)) },
			fatal:        fatalOK,
			degraded:     degradedOK,
			fatalReading: map[string]string{"gpu3": "{uuid3}: xid none, skipped xid 13 x1, 109 x1, uncorrectable ECC 0, row remap failure no"},
		},
		{
			name:     "empty skip list: Xid 13 is fatal",
			cfg:      &Config{},
			setup:    func(t *testing.T, f *fake) { f.events.push(f.xid(3, 13)) },
			fatal:    want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{"GPU 3 ({uuid3}): critical Xid 13 at"}},
			degraded: want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded},
		},
		{
			name:     "configured skip list: Xid 79 skipped",
			cfg:      &Config{SkipXids: []uint64{79}},
			setup:    func(t *testing.T, f *fake) { f.events.push(f.xid(3, 79)) },
			fatal:    fatalOK,
			degraded: degradedOK,
		},
		{
			name: "events other than Xids are ignored",
			setup: func(t *testing.T, f *fake) {
				f.events.push(nvml.EventData{Device: f.Devices[3], EventType: nvml.EventTypePState, EventData: 79})
			},
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name: "Xid from a device that is none of the GPUs",
			setup: func(t *testing.T, f *fake) {
				f.events.push(nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79})
			},
			fatal:    want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{"a GPU NVML did not identify: critical Xid 79 at " + stamp}},
			degraded: degradedOK,
		},
		{
			name: "Xid from another handle of GPU 5, found by UUID",
			setup: func(t *testing.T, f *fake) {
				other := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return f.uuid(5), nvml.SUCCESS }}
				f.events.push(nvml.EventData{Device: other, EventType: nvml.EventTypeXidCriticalError, EventData: 62})
			},
			fatal:    want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{"GPU 5 ({uuid5}): critical Xid 62"}},
			degraded: degradedOK,
		},
		{
			name: "uncorrectable ECC errors on GPU 5 are fatal",
			setup: func(t *testing.T, f *fake) {
				f.dev(5).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 3, nvml.SUCCESS }
			},
			fatal: want{status: probes.StatusProblem, reason: ReasonUncorrectableECC, message: []string{
				"GPU 5 ({uuid5}): 3 volatile uncorrectable ECC errors, above 0"}, not: []string{"GPU 4"}},
			degraded:     degradedOK,
			fatalReading: map[string]string{"gpu5": "{uuid5}: xid none, uncorrectable ECC 3, row remap failure no"},
		},
		{
			name: "uncorrectable ECC errors at the threshold",
			cfg:  &Config{ECCUncorrectedAbove: 3},
			setup: func(t *testing.T, f *fake) {
				f.dev(5).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 3, nvml.SUCCESS }
			},
			fatal:    want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"uncorrectable ECC errors at most 3"}},
			degraded: degradedOK,
		},
		{
			name: "uncorrectable ECC errors above the threshold",
			cfg:  &Config{ECCUncorrectedAbove: 3},
			setup: func(t *testing.T, f *fake) {
				f.dev(5).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 4, nvml.SUCCESS }
			},
			fatal:    want{status: probes.StatusProblem, reason: ReasonUncorrectableECC, message: []string{"GPU 5 ({uuid5}): 4 volatile uncorrectable ECC errors, above 3"}},
			degraded: degradedOK,
		},
		{
			name: "ECC not supported is no problem",
			setup: func(t *testing.T, f *fake) {
				for i := range f.Devices {
					f.dev(i).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
						return 0, nvml.ERROR_NOT_SUPPORTED
					}
				}
			},
			fatal:        fatalOK,
			degraded:     degradedOK,
			fatalReading: map[string]string{"gpu0": "{uuid0}: xid none, uncorrectable ECC n/a (not supported), row remap failure no"},
		},
		{
			name: "row remapping failure is fatal, pending is degraded",
			setup: func(t *testing.T, f *fake) {
				f.dev(6).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 8, false, true, nvml.SUCCESS }
				f.dev(1).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 1, 2, true, false, nvml.SUCCESS }
			},
			fatal: want{status: probes.StatusProblem, reason: ReasonRowRemapFailure, message: []string{
				"GPU 6 ({uuid6}): row remapping failed (8 rows remapped for uncorrectable errors)"}, not: []string{"GPU 1"}},
			degraded: want{status: probes.StatusProblem, reason: ReasonRowRemapPending, message: []string{
				"GPU 1 ({uuid1}): row remapping pending (2 rows remapped for uncorrectable, 1 for correctable errors); it takes effect at the next GPU reset"}, not: []string{"GPU 6"}},
		},
		{
			name: "retired pages pending is degraded",
			setup: func(t *testing.T, f *fake) {
				f.dev(2).GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
			},
			fatal: fatalOK,
			degraded: want{status: probes.StatusProblem, reason: ReasonRetiredPagesPending, message: []string{
				"GPU 2 ({uuid2}): retired memory pages pending; they take effect at the next GPU reset"}},
		},
		{
			name: "hardware slowdown is degraded",
			setup: func(t *testing.T, f *fake) {
				f.dev(4).GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
					return nvml.ClocksThrottleReasonHwThermalSlowdown | nvml.ClocksThrottleReasonHwPowerBrakeSlowdown | nvml.ClocksEventReasonSwPowerCap, nvml.SUCCESS
				}
			},
			fatal: fatalOK,
			degraded: want{status: probes.StatusProblem, reason: ReasonHardwareSlowdown, message: []string{
				"GPU 4 ({uuid4}): clocks held down by HW thermal slowdown, HW power brake slowdown"}, not: []string{"SW", "GPU 3"}},
		},
		{
			name: "hardware slowdown ignored",
			cfg:  &Config{IgnoreSlowdown: true},
			setup: func(t *testing.T, f *fake) {
				f.dev(4).GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonHwSlowdown, nvml.SUCCESS }
			},
			fatal:    want{status: probes.StatusOK, reason: ReasonGPUsHealthy},
			degraded: want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"no page retirement or row remapping pending"}, not: []string{"slowdown"}},
		},
		{
			name: "software reasons are no slowdown",
			setup: func(t *testing.T, f *fake) {
				f.dev(4).GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
					return nvml.ClocksEventReasonSwPowerCap | nvml.ClocksEventReasonSwThermalSlowdown | nvml.ClocksEventReasonApplicationsClocksSetting, nvml.SUCCESS
				}
			},
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name: "ranked reasons: ECC and Xid on different GPUs give the Xid reason, both named",
			setup: func(t *testing.T, f *fake) {
				f.dev(1).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 1, nvml.SUCCESS }
				f.events.push(f.xid(7, 79))
			},
			fatal: want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{
				"GPU 1 ({uuid1}): 1 volatile uncorrectable ECC errors, above 0", "GPU 7 ({uuid7}): critical Xid 79"}},
			degraded: degradedOK,
		},
		{
			name: "NVML error on GPU 2 does not hide GPU 5's problem",
			setup: func(t *testing.T, f *fake) {
				f.dev(2).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
				f.dev(5).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 2, nvml.SUCCESS }
				f.dev(2).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_UNKNOWN }
				f.dev(6).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, true, false, nvml.SUCCESS }
			},
			fatal: want{status: probes.StatusProblem, reason: ReasonUncorrectableECC, message: []string{
				"GPU 5 ({uuid5}): 2 volatile uncorrectable ECC errors, above 0",
				"GPU 2 ({uuid2}): reading uncorrectable ECC errors: ERROR_UNKNOWN",
				"GPU 2 ({uuid2}): reading remapped rows: ERROR_UNKNOWN"}},
			degraded: want{status: probes.StatusProblem, reason: ReasonRowRemapPending, message: []string{
				"GPU 6 ({uuid6}): row remapping pending", "GPU 2 ({uuid2}): reading remapped rows: ERROR_UNKNOWN"}},
			fatalReading: map[string]string{"gpu2": "{uuid2}: xid none, uncorrectable ECC unreadable, row remap failure unreadable"},
		},
		{
			name: "NVML error on one GPU and no problem: OK, error named",
			setup: func(t *testing.T, f *fake) {
				f.dev(2).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
					return 0, nvml.ERROR_NO_PERMISSION
				}
			},
			fatal:    want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"8 GPUs healthy", "; GPU 2 ({uuid2}): reading uncorrectable ECC errors: ERROR_NO_PERMISSION"}},
			degraded: degradedOK,
		},
		{
			name: "every GPU unreadable",
			setup: func(t *testing.T, f *fake) {
				for i := range f.Devices {
					d := f.dev(i)
					d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_UNKNOWN }
					d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
					d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_UNKNOWN }
					d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
					d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
				}
			},
			fatal: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{
				"no GPU could be read: GPU 0 ({uuid0}): registering for Xid events: ERROR_UNKNOWN", "GPU 7 ({uuid7}): reading remapped rows: ERROR_UNKNOWN"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{
				"no GPU could be read: GPU 0 ({uuid0}): reading retired pages pending status: ERROR_UNKNOWN", "GPU 7 ({uuid7}): reading clock event reasons: ERROR_UNKNOWN"}},
		},
		{
			name: "no handle for any GPU",
			setup: func(t *testing.T, f *fake) {
				f.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
			},
			fatal:    want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"no GPU could be read: GPU 0: getting handle: ERROR_NO_PERMISSION", "GPU 7: getting handle"}},
			degraded: want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{"GPU 0: getting handle: ERROR_NO_PERMISSION"}},
		},
		{
			name: "GPU 3 lost",
			setup: func(t *testing.T, f *fake) {
				d := f.dev(3)
				d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
					return 0, nvml.ERROR_GPU_IS_LOST
				}
				d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_GPU_IS_LOST }
				d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
				d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
				f.events.push(f.xid(3, 79))
			},
			fatal: want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{
				"GPU 3 ({uuid3}) is lost (fell off the bus): reading uncorrectable ECC errors: ERROR_GPU_IS_LOST",
				"GPU 3 ({uuid3}): critical Xid 79 at"}, not: []string{"remapped rows"}},
			degraded: want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{
				"7 of 8 GPUs not degraded", "GPU 3 ({uuid3}) is lost (see the gpu probe): reading uncorrectable ECC errors: ERROR_GPU_IS_LOST"}},
			fatalReading: map[string]string{"gpu3": "{uuid3}: lost, xid 79 x1"},
		},
		{
			name: "GPU lost on the one call of the degraded probe's signals",
			setup: func(t *testing.T, f *fake) {
				f.dev(3).GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
			},
			fatal:    want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{"GPU 3 ({uuid3}) is lost (fell off the bus): reading clock event reasons: ERROR_GPU_IS_LOST"}},
			degraded: want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"GPU 3 ({uuid3}) is lost"}},
		},
		{
			name: "GPU requires a reset",
			setup: func(t *testing.T, f *fake) {
				f.dev(0).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_RESET_REQUIRED }
			},
			fatal: want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{
				"GPU 0 ({uuid0}) requires a reset: reading remapped rows: ERROR_RESET_REQUIRED"}},
			degraded: want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded},
		},
		{
			name: "lost handle",
			setup: func(t *testing.T, f *fake) {
				get := f.DeviceGetHandleByIndexFunc
				f.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
					if i == 4 {
						return nil, nvml.ERROR_GPU_IS_LOST
					}
					return get(i)
				}
			},
			fatal:    want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{"GPU 4 is lost (fell off the bus): getting handle: ERROR_GPU_IS_LOST"}},
			degraded: want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"GPU 4 is lost"}},
		},
		{
			name: "fewer GPUs than at start",
			setup: func(t *testing.T, f *fake) {
				calls := 0
				f.DeviceGetCountFunc = func() (int, nvml.Return) {
					calls++
					if calls == 1 {
						return 8, nvml.SUCCESS
					}
					return 7, nvml.SUCCESS
				}
			},
			fatal:        want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{"NVML sees 7 GPUs, 8 at start: a GPU fell off the bus"}},
			degraded:     want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded},
			fatalReading: map[string]string{"gpus": "7", "gpus_at_start": "8"},
		},
		{
			name: "counting fails: named, GPUs still judged",
			setup: func(t *testing.T, f *fake) {
				calls := 0
				f.DeviceGetCountFunc = func() (int, nvml.Return) {
					if calls++; calls == 1 {
						return 8, nvml.SUCCESS
					}
					return 0, nvml.ERROR_UNKNOWN
				}
				f.events.push(f.xid(2, 79))
			},
			fatal:        want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{"GPU 2 ({uuid2}): critical Xid 79", "counting GPUs: ERROR_UNKNOWN"}},
			degraded:     degradedOK,
			fatalReading: map[string]string{"gpus": "unreadable", "gpus_at_start": "8"},
		},
		{
			name: "counting says a GPU is lost",
			setup: func(t *testing.T, f *fake) {
				calls := 0
				f.DeviceGetCountFunc = func() (int, nvml.Return) {
					if calls++; calls == 1 {
						return 8, nvml.SUCCESS
					}
					return 0, nvml.ERROR_GPU_IS_LOST
				}
			},
			fatal:    want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{"counting GPUs: ERROR_GPU_IS_LOST"}},
			degraded: degradedOK,
		},
		{
			name: "driver lacks row remapping: signal skipped, never called",
			setup: func(t *testing.T, f *fake) {
				f.lacking(symRemappedRows)
				for i := range f.Devices {
					bad := mustNotCall(t, "GetRemappedRows")
					f.dev(i).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { bad(); return 0, 0, false, true, nvml.SUCCESS }
				}
			},
			fatal:        fatalOK,
			degraded:     degradedOK,
			fatalReading: map[string]string{"gpu0": "{uuid0}: xid none, uncorrectable ECC 0, row remap failure n/a (driver lacks nvmlDeviceGetRemappedRows)"},
		},
		{
			name: "driver lacks ECC and retired pages functions",
			setup: func(t *testing.T, f *fake) {
				f.lacking(symTotalEccErrors, symRetiredPagesPending)
				for i := range f.Devices {
					bad := mustNotCall(t, "GetTotalEccErrors or GetRetiredPagesPendingStatus")
					f.dev(i).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { bad(); return 9, nvml.SUCCESS }
					f.dev(i).GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { bad(); return nvml.FEATURE_ENABLED, nvml.SUCCESS }
				}
			},
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name: "old driver: clock throttle reasons used instead of event reasons",
			setup: func(t *testing.T, f *fake) {
				f.lacking(symClocksEventReasons)
				for i := range f.Devices {
					bad := mustNotCall(t, "GetCurrentClocksEventReasons")
					f.dev(i).GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { bad(); return 0, nvml.SUCCESS }
					f.dev(i).GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.SUCCESS }
				}
				f.dev(6).GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonHwSlowdown, nvml.SUCCESS }
			},
			fatal:    fatalOK,
			degraded: want{status: probes.StatusProblem, reason: ReasonHardwareSlowdown, message: []string{"GPU 6 ({uuid6}): clocks held down by HW slowdown"}},
		},
		{
			name: "driver lacks both clock reason functions",
			setup: func(t *testing.T, f *fake) {
				f.lacking(symClocksEventReasons, symClocksThrottle)
				for i := range f.Devices {
					bad := mustNotCall(t, "GetCurrentClocksEventReasons")
					f.dev(i).GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { bad(); return nvml.ClocksThrottleReasonHwSlowdown, nvml.SUCCESS }
				}
			},
			fatal: fatalOK, degraded: degradedOK,
		},
		{
			name: "driver lacks event functions: Xids not watched, no event set made",
			setup: func(t *testing.T, f *fake) {
				f.lacking(symRegisterEvents)
				bad := mustNotCall(t, "EventSetCreate")
				f.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { bad(); return nil, nvml.ERROR_UNKNOWN }
			},
			fatal:        fatalOK,
			degraded:     degradedOK,
			fatalReading: map[string]string{"gpu0": "{uuid0}: xid n/a (driver lacks NVML event functions), uncorrectable ECC 0, row remap failure no"},
		},
		{
			name: "Xid events not supported by GPU 1: not registered",
			setup: func(t *testing.T, f *fake) {
				f.dev(1).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypePState | nvml.EventTypeClock, nvml.SUCCESS }
				bad := mustNotCall(t, "RegisterEvents on GPU 1")
				f.dev(1).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { bad(); return nvml.SUCCESS }
			},
			fatal:        fatalOK,
			degraded:     degradedOK,
			fatalReading: map[string]string{"gpu1": "{uuid1}: xid n/a (not supported), uncorrectable ECC 0, row remap failure no"},
		},
		{
			name: "registering GPU 2 for Xid events fails: named, others judged",
			setup: func(t *testing.T, f *fake) {
				f.dev(2).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_UNKNOWN }
			},
			fatal:    want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"GPU 2 ({uuid2}): registering for Xid events: ERROR_UNKNOWN"}},
			degraded: degradedOK,
		},
		{
			name: "GPU 2 lost when registering for Xid events",
			setup: func(t *testing.T, f *fake) {
				f.dev(2).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_GPU_IS_LOST }
			},
			fatal:    want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{"GPU 2 ({uuid2}) is lost (fell off the bus): registering for Xid events: ERROR_GPU_IS_LOST"}},
			degraded: want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"7 of 8 GPUs not degraded", "GPU 2 ({uuid2}) is lost"}},
		},
		{
			name: "event set cannot be made",
			setup: func(t *testing.T, f *fake) {
				f.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_MEMORY }
			},
			fatal:    want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"GPU 0 ({uuid0}): creating NVML event set: ERROR_MEMORY"}},
			degraded: degradedOK,
		},
		{
			name: "waiting for events fails: named once, Xids seen before it still count",
			setup: func(t *testing.T, f *fake) {
				f.events.push(f.xid(5, 79))
				f.events.err = nvml.ERROR_UNKNOWN
			},
			fatal: want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{
				"GPU 5 ({uuid5}): critical Xid 79 at " + stamp + "; the GPU needs a reset; waiting for Xid events: ERROR_UNKNOWN"}, not: []string{"GPU 0"}},
			degraded: degradedOK,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.setup != nil {
				tt.setup(t, f)
			}
			cfg := DefaultConfig()
			if tt.cfg != nil {
				cfg = *tt.cfg
			}
			m := newMonitor(t, cfg, f)
			fatal, degraded := run(m)
			check(t, f, NameFatal, fatal, tt.fatal)
			check(t, f, NameDegraded, degraded, tt.degraded)
			for name, w := range tt.fatalReading {
				for i := range f.Devices {
					w = strings.ReplaceAll(w, fmt.Sprintf("{uuid%d}", i), f.uuid(i))
				}
				if got := reading(fatal.Readings, name); got != w {
					t.Errorf("got %s reading %s = %q, want %q", NameFatal, name, got, w)
				}
			}
		})
	}
}

func reading(rs []probes.Reading, name string) string {
	for _, r := range rs {
		if r.Name == name {
			return r.Value
		}
	}
	return "<missing>"
}

func TestReadings(t *testing.T) {
	f := newFake()
	f.dev(1).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, true, false, nvml.SUCCESS }
	f.dev(1).GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	f.dev(1).GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonHwSlowdown, nvml.SUCCESS }
	fatal, degraded := run(newMonitor(t, DefaultConfig(), f))
	probestest.CheckResult(t, fatal, probestest.Want{Status: probes.StatusOK, Reason: ReasonGPUsHealthy, Readings: []probes.Reading{
		{Name: "gpus", Value: "8"},
		{Name: "gpu0", Value: f.uuid(0) + ": xid none, uncorrectable ECC 0, row remap failure no"},
		{Name: "gpu1", Value: f.uuid(1) + ": xid none, uncorrectable ECC 0, row remap failure no"},
		{Name: "gpu2", Value: f.uuid(2) + ": xid none, uncorrectable ECC 0, row remap failure no"},
		{Name: "gpu3", Value: f.uuid(3) + ": xid none, uncorrectable ECC 0, row remap failure no"},
		{Name: "gpu4", Value: f.uuid(4) + ": xid none, uncorrectable ECC 0, row remap failure no"},
		{Name: "gpu5", Value: f.uuid(5) + ": xid none, uncorrectable ECC 0, row remap failure no"},
		{Name: "gpu6", Value: f.uuid(6) + ": xid none, uncorrectable ECC 0, row remap failure no"},
		{Name: "gpu7", Value: f.uuid(7) + ": xid none, uncorrectable ECC 0, row remap failure no"},
	}})
	if got, want := reading(degraded.Readings, "gpu1"), f.uuid(1)+": retired pages pending n/a (not supported), row remap pending yes, slowdown HW slowdown"; got != want {
		t.Errorf("got degraded reading gpu1 %q, want %q", got, want)
	}
	if got, want := reading(degraded.Readings, "gpu0"), f.uuid(0)+": retired pages pending no, row remap pending no, slowdown none"; got != want {
		t.Errorf("got degraded reading gpu0 %q, want %q", got, want)
	}
	if got, want := len(degraded.Readings), 9; got != want {
		t.Errorf("got %d degraded readings, want %d", got, want)
	}
}

func TestXidIsSticky(t *testing.T) {
	f := newFake()
	m := newMonitor(t, DefaultConfig(), f)
	now := t0
	m.now = func() time.Time { return now }
	fatal := m.FatalProbe()
	degraded := m.DegradedProbe()
	ctx := context.Background()

	steps := []struct {
		events  []nvml.EventData
		probe   probes.Probe
		want    want
		advance time.Duration
	}{
		{nil, fatal, fatalOK, time.Minute},
		{[]nvml.EventData{f.xid(3, 79)}, fatal, want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{"GPU 3 ({uuid3}): critical Xid 79 at 2026-03-01T12:01:00Z"}}, time.Minute},
		// No new event: still fatal, the GPU needs a reset.
		{nil, fatal, want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{"GPU 3 ({uuid3}): critical Xid 79 at 2026-03-01T12:01:00Z"}}, time.Minute},
		// An event drained by the degraded probe's run counts for the fatal one.
		{[]nvml.EventData{f.xid(3, 79)}, degraded, degradedOK, time.Minute},
		{nil, fatal, want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{
			"GPU 3 ({uuid3}): critical Xid 79 2 times, first at 2026-03-01T12:01:00Z, last at 2026-03-01T12:03:00Z"}}, 0},
	}
	for i, s := range steps {
		f.events.push(s.events...)
		got := s.probe.Probe(ctx)
		check(t, f, fmt.Sprintf("step %d %s", i, s.probe.Name()), got, s.want)
		now = now.Add(s.advance)
	}
}

func TestEventDrain(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		events    int
		wantWaits []uint32 // timeouts of the waits of the first run
		wantCount []string // message substrings after the first and second runs
	}{
		{"no events: one wait", DefaultConfig(), 0, []uint32{10}, []string{"", ""}},
		{"three events: drained until the wait times out", Config{EventWait: 50 * time.Millisecond}, 3, []uint32{50, 50, 50, 50}, []string{"Xid 79 3 times", "Xid 79 3 times"}},
		{"a storm is drained over several runs", DefaultConfig(), maxEventsPerRun + 500, nil, []string{fmt.Sprintf("Xid 79 %d times", maxEventsPerRun), fmt.Sprintf("Xid 79 %d times", maxEventsPerRun+500)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			for range tt.events {
				f.events.push(f.xid(0, 79))
			}
			m := newMonitor(t, tt.cfg, f)
			p := m.FatalProbe()
			for run, want := range tt.wantCount {
				got := p.Probe(context.Background())
				if !strings.Contains(got.Message, want) {
					t.Errorf("run %d: got message %q, want it to contain %q", run, got.Message, want)
				}
				if run == 0 && tt.wantWaits != nil && fmt.Sprint(f.events.waits) != fmt.Sprint(tt.wantWaits) {
					t.Errorf("run %d: got waits %v, want %v", run, f.events.waits, tt.wantWaits)
				}
			}
		})
	}
}

func TestEventDrainStopsWhenCanceled(t *testing.T) {
	f := newFake()
	f.events.push(f.xid(0, 79))
	m := newMonitor(t, DefaultConfig(), f)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := m.FatalProbe().Probe(ctx)
	if got.Status != probes.StatusOK || len(f.events.waits) != 0 {
		t.Errorf("canceled run: got %s %q after %d waits, want OK after none", got.Status, got.Message, len(f.events.waits))
	}
	got = m.FatalProbe().Probe(context.Background())
	check(t, f, "next run", got, want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{"GPU 0 ({uuid0}): critical Xid 79"}})
}

func TestHandleRecovers(t *testing.T) {
	f := newFake()
	available := false
	get := f.DeviceGetHandleByIndexFunc
	f.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 5 && !available {
			return nil, nvml.ERROR_UNKNOWN
		}
		return get(i)
	}
	registered := 0
	f.dev(5).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { registered++; return nvml.SUCCESS }
	m := newMonitor(t, DefaultConfig(), f)

	fatal, _ := run(m)
	check(t, f, "without GPU 5's handle", fatal, want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"7 of 8 GPUs healthy", "GPU 5: getting handle: ERROR_UNKNOWN"}})
	if got := reading(fatal.Readings, "gpu5"); got != "UUID unknown: xid unreadable, uncorrectable ECC unreadable, row remap failure unreadable" {
		t.Errorf("got reading gpu5 %q", got)
	}
	available = true
	f.events.push(f.xid(5, 48))
	fatal, _ = run(m)
	check(t, f, "with GPU 5's handle", fatal, want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{"GPU 5 ({uuid5}): critical Xid 48"}, not: []string{"getting handle"}})
	if registered != 1 {
		t.Errorf("GPU 5 registered for events %d times, want 1", registered)
	}
}

func TestNoGPUs(t *testing.T) {
	f := newFake()
	f.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	fatal, degraded := run(newMonitor(t, DefaultConfig(), f))
	probestest.CheckResult(t, fatal, probestest.Want{Status: probes.StatusOK, Reason: ReasonGPUsHealthy, Message: []string{"no NVIDIA GPUs found"}, Readings: []probes.Reading{{Name: "gpus", Value: "0"}}})
	probestest.CheckResult(t, degraded, probestest.Want{Status: probes.StatusOK, Reason: ReasonGPUsNotDegraded, Message: []string{"no NVIDIA GPUs found"}})
}

func TestNames(t *testing.T) {
	m := newMonitor(t, DefaultConfig(), newFake())
	var got []string
	for _, p := range m.Probes() {
		got = append(got, p.Name())
	}
	if want := []string{"gpu", "gpu-degraded"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got probe names %v, want %v", got, want)
	}
}

func TestClose(t *testing.T) {
	f := newFake()
	m := newMonitor(t, DefaultConfig(), f)
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if f.events.created != 1 || f.events.freed != 1 {
		t.Errorf("got event sets created %d, freed %d, want 1 and 1", f.events.created, f.events.freed)
	}
	fatal, degraded := run(m)
	for _, got := range []probes.Result{fatal, degraded} {
		probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"the GPU monitor is closed"}})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		lib     func() nvml.Interface
		wantErr string
	}{
		{"defaults", DefaultConfig(), func() nvml.Interface { return newFake() }, ""},
		{"zero config", Config{}, func() nvml.Interface { return newFake() }, ""},
		{"EventWait 1s", Config{EventWait: time.Second}, func() nvml.Interface { return newFake() }, ""},
		{"EventWait negative", Config{EventWait: -time.Millisecond}, func() nvml.Interface { return newFake() }, "EventWait -1ms must be whole milliseconds between 0 and 1s"},
		{"EventWait too long", Config{EventWait: 2 * time.Second}, func() nvml.Interface { return newFake() }, "EventWait 2s must be"},
		{"EventWait below a millisecond", Config{EventWait: time.Microsecond}, func() nvml.Interface { return newFake() }, "EventWait 1µs must be"},
		{"no library", DefaultConfig(), func() nvml.Interface { return nil }, "no NVML library"},
		{"count fails", DefaultConfig(), func() nvml.Interface {
			return &mock.Interface{DeviceGetCountFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_UNINITIALIZED }}
		}, "gpu probe: counting GPUs: ERROR_UNINITIALIZED"},
	}
	for _, tt := range tests {
		m, err := New(tt.cfg, tt.lib())
		probestest.CheckError(t, tt.name, err, tt.wantErr)
		if err == nil {
			m.Close()
		} else if m != nil {
			t.Errorf("%s: got a Monitor with the error", tt.name)
		}
	}
	if got, want := DefaultConfig().SkipXids, []uint64{13, 31, 43, 45, 68, 109}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got default SkipXids %v, want %v", got, want)
	}
}

// TestConcurrentRuns runs both probes at once, as the Runner does; run it
// with -race.
func TestConcurrentRuns(t *testing.T) {
	f := newFake()
	m := newMonitor(t, DefaultConfig(), f)
	var wg sync.WaitGroup
	for _, p := range m.Probes() {
		wg.Go(func() {
			for range 50 {
				f.events.push(f.xid(1, 79), f.xid(2, 13))
				if got := p.Probe(context.Background()); got.Status == probes.StatusUnknown {
					t.Errorf("%s: got %s %q", p.Name(), got.Status, got.Message)
				}
			}
		})
	}
	wg.Wait()
	got := m.FatalProbe().Probe(context.Background())
	check(t, f, "after concurrent runs", got, want{status: probes.StatusProblem, reason: ReasonXidError, message: []string{"GPU 1 ({uuid1}): critical Xid 79 100 times"}, not: []string{"GPU 2"}})
	if got := reading(got.Readings, "gpu2"); !strings.Contains(got, "skipped xid 13 x100") {
		t.Errorf("got reading gpu2 %q, want it to count 100 skipped Xid 13", got)
	}
}

func TestRunOnceWithRunner(t *testing.T) {
	// The probes work under the runner's timeout and naming.
	f := newFake()
	f.events.push(f.xid(3, 79))
	m := newMonitor(t, DefaultConfig(), f)
	got := probes.RunOnce(context.Background(), m.FatalProbe(), time.Minute, probestest.NewFakeClock(t0))
	if got.Probe != NameFatal || got.Status != probes.StatusProblem {
		t.Errorf("got %s %s, want %s Problem", got.Probe, got.Status, NameFatal)
	}
}
