// Package gpu is selftaint's NVIDIA GPU health probe. It exists so that a
// node whose GPU has failed (a critical Xid, uncorrectable memory errors, a
// row remapping failure, a GPU that fell off the bus) is tainted before more
// GPU pods are scheduled onto it to crash, and a node whose GPU is merely
// degraded (memory repairs pending a reset, hardware slowdown) can be
// drained at leisure.
//
// The product needs one condition for each, so a Monitor watches all GPUs
// through NVML and offers two probes over the same state: FatalProbe
// ("gpu") and DegradedProbe ("gpu-degraded"). Critical Xid events are
// received through an NVML event set and drained on every probe run; they
// are sticky, since a GPU that raised one needs a reset, which also restarts
// selftaint's view of it. Error counters are polled on every run. Functions
// that newer drivers added are looked up in the library before they are
// called, because calling a symbol the driver lacks aborts the process; a
// signal the driver or GPU does not offer is not checked, and not a problem.
//
// The Monitor is written against nvml.Interface (go-nvml), already
// initialized (hardware.OpenNVML), so tests use go-nvml's mocks.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/selftaint/selftaint/probes"
)

// Names of the two probes a Monitor offers.
const (
	// NameFatal is the probe of failures that make a GPU unusable.
	NameFatal = "gpu"
	// NameDegraded is the probe of conditions that degrade a GPU.
	NameDegraded = "gpu-degraded"
)

// Reasons the GPU probes report. Where a run finds several problems, the
// reason is that of the first in the order listed here; the message names
// them all.
const (
	// ReasonGPUsHealthy: the fatal probe found no failure.
	ReasonGPUsHealthy = "GPUsHealthy"
	// ReasonGPULost: an NVML call said a GPU is lost (fell off the bus),
	// or NVML sees fewer GPUs than at start.
	ReasonGPULost = "GPULost"
	// ReasonGPUResetRequired: an NVML call said a GPU must be reset.
	ReasonGPUResetRequired = "GPUResetRequired"
	// ReasonXidError: a GPU raised a critical Xid not in Config.SkipXids.
	ReasonXidError = "GPUXidError"
	// ReasonUncorrectableECC: a GPU's volatile uncorrectable ECC error
	// count is above Config.ECCUncorrectedAbove.
	ReasonUncorrectableECC = "GPUUncorrectableECC"
	// ReasonRowRemapFailure: a GPU ran out of spare memory rows.
	ReasonRowRemapFailure = "GPURowRemapFailure"

	// ReasonGPUsNotDegraded: the degraded probe found nothing.
	ReasonGPUsNotDegraded = "GPUsNotDegraded"
	// ReasonRowRemapPending: a GPU has remapped rows that take effect at
	// its next reset.
	ReasonRowRemapPending = "GPURowRemapPending"
	// ReasonRetiredPagesPending: a GPU has retired pages that take effect
	// at its next reset.
	ReasonRetiredPagesPending = "GPURetiredPagesPending"
	// ReasonHardwareSlowdown: a GPU's clocks are held down by hardware
	// (HW slowdown, HW thermal slowdown or HW power brake).
	ReasonHardwareSlowdown = "GPUHardwareSlowdown"

	// ReasonReadError: no GPU could be read, or NVML could not count them.
	ReasonReadError = probes.ReasonReadError
)

// DefaultEventWait is how long a probe run waits for the next Xid event
// when Config.EventWait is 0.
const DefaultEventWait = 10 * time.Millisecond

// maxEventsPerRun bounds the Xid events one run drains, so a storm of them
// cannot keep a run from finishing; the rest wait for the next run.
const maxEventsPerRun = 1000

// DefaultSkipXids returns the Xids that applications cause rather than GPU
// faults, as NVIDIA's device plugin skips them: 13 (graphics engine
// exception), 31 (GPU memory page fault), 43 (GPU stopped processing), 45
// (preemptive cleanup), 68 (video processor exception) and 109 (context
// switch timeout).
func DefaultSkipXids() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// Config says what makes a GPU failed or degraded. The zero value checks
// everything and skips no Xid; start from DefaultConfig.
type Config struct {
	// SkipXids are Xids that are not treated as GPU failures.
	// DefaultConfig sets DefaultSkipXids.
	SkipXids []uint64
	// ECCUncorrectedAbove: a GPU whose volatile (since the driver loaded)
	// uncorrectable ECC error count is above it has failed. 0: any error.
	ECCUncorrectedAbove uint64
	// IgnoreSlowdown turns off the hardware slowdown check.
	IgnoreSlowdown bool
	// EventWait is how long a probe run waits for the next Xid event
	// before it stops draining them: whole milliseconds, at most 1s. 0
	// means DefaultEventWait.
	EventWait time.Duration
}

// DefaultConfig returns the defaults: Xids DefaultSkipXids skipped, any
// uncorrectable ECC error fatal, hardware slowdown checked.
func DefaultConfig() Config {
	return Config{SkipXids: DefaultSkipXids(), EventWait: DefaultEventWait}
}

// Validate checks EventWait.
func (c Config) Validate() error {
	if c.EventWait < 0 || c.EventWait > time.Second || c.EventWait%time.Millisecond != 0 {
		return fmt.Errorf("gpu probe config: EventWait %v must be whole milliseconds between 0 and 1s", c.EventWait)
	}
	return nil
}

// eventWaitMillis is EventWait for nvml.EventSet.Wait.
func (c Config) eventWaitMillis() uint32 {
	if c.EventWait == 0 {
		return uint32(DefaultEventWait / time.Millisecond)
	}
	return uint32(c.EventWait / time.Millisecond)
}

// Library symbols looked up before the functions are called.
const (
	symTotalEccErrors      = "nvmlDeviceGetTotalEccErrors"
	symRetiredPagesPending = "nvmlDeviceGetRetiredPagesPendingStatus"
	symRemappedRows        = "nvmlDeviceGetRemappedRows"
	symClocksEventReasons  = "nvmlDeviceGetCurrentClocksEventReasons"    // R535+
	symClocksThrottle      = "nvmlDeviceGetCurrentClocksThrottleReasons" // before R535, deprecated
	symEventSetCreate      = "nvmlEventSetCreate"
	symSupportedEventTypes = "nvmlDeviceGetSupportedEventTypes"
	symRegisterEvents      = "nvmlDeviceRegisterEvents"
	symEventSetWait        = "nvmlEventSetWait"
	symEventSetWaitV2      = "nvmlEventSetWait_v2"
	symEventSetFree        = "nvmlEventSetFree"
)

// slowdownReason is a clock event reason that means hardware holds the
// clocks down, with its name for messages.
type slowdownReason struct {
	bit  uint64
	name string
}

// slowdownReasons lists them. It is a function so that no package-level
// table can be modified.
func slowdownReasons() []slowdownReason {
	return []slowdownReason{
		{nvml.ClocksThrottleReasonHwSlowdown, "HW slowdown"},
		{nvml.ClocksThrottleReasonHwThermalSlowdown, "HW thermal slowdown"},
		{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "HW power brake slowdown"},
	}
}

// Monitor watches the GPUs NVML sees and backs the two GPU probes. It is
// safe for concurrent use: probe runs are serialized.
type Monitor struct {
	cfg  Config
	lib  nvml.Interface
	skip map[uint64]bool
	now  func() time.Time

	// What the driver offers; set by New, then read-only.
	hasECC, hasRetired, hasRemap, hasEvents bool
	clockReasons                            func(nvml.Device) (uint64, nvml.Return) // nil: driver has neither symbol

	mu         sync.Mutex // guards the fields below, and serializes NVML calls of runs
	startCount int
	gpus       []*gpuState
	events     nvml.EventSet // nil: Xid events are not watched
	eventsErr  error         // why events is nil, when that is an error
	strayXids  xidLog        // critical Xids from devices that are none of gpus
	closed     bool
}

// gpuState is what the Monitor keeps about one GPU across runs.
type gpuState struct {
	index   int
	uuid    string      // "" until read
	handle  nvml.Device // nil until DeviceGetHandleByIndex succeeds
	watched bool        // registered for Xid events
	// watchNA says why Xid events are not available on this GPU; watchErr
	// why registering failed. Both empty while watched.
	watchNA  string
	watchErr error
	xids     xidLog // critical Xids seen, sticky
	skipped  xidLog // skipped Xids seen, for readings
}

// xidLog counts Xids in the order first seen.
type xidLog []xidRecord

type xidRecord struct {
	xid         uint64
	count       int
	first, last time.Time
}

func (l *xidLog) add(xid uint64, at time.Time) {
	for i := range *l {
		if r := &(*l)[i]; r.xid == xid {
			r.count++
			r.last = at
			return
		}
	}
	*l = append(*l, xidRecord{xid: xid, count: 1, first: at, last: at})
}

// New returns a Monitor of the GPUs lib sees. lib must be initialized and
// stay so until Close. New fails when cfg is invalid or NVML cannot count
// the GPUs; a GPU that cannot be read is reported by the probes instead.
func New(cfg Config, lib nvml.Interface) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if lib == nil {
		return nil, errors.New("gpu probe: no NVML library")
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu probe: counting GPUs: %w", ret)
	}
	m := &Monitor{
		cfg:        cfg,
		lib:        lib,
		skip:       make(map[uint64]bool, len(cfg.SkipXids)),
		now:        time.Now,
		startCount: n,
	}
	for _, x := range cfg.SkipXids {
		m.skip[x] = true
	}
	has := func(sym string) bool { return lib.Extensions().LookupSymbol(sym) == nil }
	m.hasECC = has(symTotalEccErrors)
	m.hasRetired = has(symRetiredPagesPending)
	m.hasRemap = has(symRemappedRows)
	switch {
	case has(symClocksEventReasons):
		m.clockReasons = nvml.Device.GetCurrentClocksEventReasons
	case has(symClocksThrottle):
		m.clockReasons = nvml.Device.GetCurrentClocksThrottleReasons
	}
	m.hasEvents = has(symEventSetCreate) && has(symSupportedEventTypes) && has(symRegisterEvents) &&
		has(symEventSetFree) && (has(symEventSetWaitV2) || has(symEventSetWait))

	if m.hasEvents {
		set, ret := lib.EventSetCreate()
		if ret == nvml.SUCCESS {
			m.events = set
		} else {
			m.eventsErr = fmt.Errorf("creating NVML event set: %w", ret)
		}
	}
	for i := range n {
		g := &gpuState{index: i}
		m.gpus = append(m.gpus, g)
		m.open(g) // errors are reported by the probes
	}
	return m, nil
}

// open gets g's handle and UUID, and registers it for Xid events, where
// that has not been done yet. It returns the error of getting the handle.
func (m *Monitor) open(g *gpuState) nvml.Return {
	if g.handle == nil {
		h, ret := m.lib.DeviceGetHandleByIndex(g.index)
		if ret != nvml.SUCCESS {
			return ret
		}
		g.handle = h
	}
	if g.uuid == "" {
		if uuid, ret := g.handle.GetUUID(); ret == nvml.SUCCESS {
			g.uuid = uuid
		}
	}
	if !g.watched && g.watchNA == "" {
		m.watch(g)
	}
	return nvml.SUCCESS
}

// watch registers g for critical Xid events.
func (m *Monitor) watch(g *gpuState) {
	switch {
	case !m.hasEvents:
		g.watchNA = "driver lacks NVML event functions"
		return
	case m.events == nil:
		g.watchErr = m.eventsErr
		return
	}
	types, ret := g.handle.GetSupportedEventTypes()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.SUCCESS && types&nvml.EventTypeXidCriticalError == 0:
		g.watchNA = "not supported"
		return
	case ret != nvml.SUCCESS:
		g.watchErr = fmt.Errorf("getting supported event types: %w", ret)
		return
	}
	switch ret := g.handle.RegisterEvents(nvml.EventTypeXidCriticalError, m.events); ret {
	case nvml.SUCCESS:
		g.watched, g.watchErr = true, nil
	case nvml.ERROR_NOT_SUPPORTED:
		g.watchNA = "not supported"
	default:
		g.watchErr = fmt.Errorf("registering for Xid events: %w", ret)
	}
}

// Close frees the Monitor's NVML event set. Call it before shutting NVML
// down; the probes report Unknown afterwards.
func (m *Monitor) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	if m.events == nil {
		return nil
	}
	ret := m.events.Free()
	m.events = nil
	if ret != nvml.SUCCESS {
		return fmt.Errorf("gpu probe: freeing NVML event set: %w", ret)
	}
	return nil
}

// FatalProbe returns the probe of GPU failures, named NameFatal.
func (m *Monitor) FatalProbe() probes.Probe { return &probe{m: m, name: NameFatal, judge: judgeFatal} }

// DegradedProbe returns the probe of degraded GPUs, named NameDegraded.
func (m *Monitor) DegradedProbe() probes.Probe {
	return &probe{m: m, name: NameDegraded, judge: judgeDegraded}
}

// Probes returns FatalProbe and DegradedProbe.
func (m *Monitor) Probes() []probes.Probe { return []probes.Probe{m.FatalProbe(), m.DegradedProbe()} }

type probe struct {
	m     *Monitor
	name  string
	judge func(*snapshot) probes.Result
}

func (p *probe) Name() string { return p.name }

// Probe drains pending Xid events, reads every GPU once and judges them.
func (p *probe) Probe(ctx context.Context) probes.Result {
	s, err := p.m.refresh(ctx)
	if err != nil {
		return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: err.Error()}
	}
	return p.judge(s)
}

// sameDevice reports whether a and b are the same NVML handle, without
// panicking on handle types that cannot be compared.
func sameDevice(a, b nvml.Device) bool {
	if a == nil || b == nil {
		return false
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// gpuFor returns the GPU dev is, nil if none.
func (m *Monitor) gpuFor(dev nvml.Device) *gpuState {
	if dev == nil {
		return nil
	}
	if i := slices.IndexFunc(m.gpus, func(g *gpuState) bool { return sameDevice(g.handle, dev) }); i >= 0 {
		return m.gpus[i]
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS || uuid == "" {
		return nil
	}
	if i := slices.IndexFunc(m.gpus, func(g *gpuState) bool { return g.uuid == uuid }); i >= 0 {
		return m.gpus[i]
	}
	return nil
}
