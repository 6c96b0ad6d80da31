// Package gpu is selftaint's NVIDIA GPU health probe. It exists so that a
// node whose GPU has failed (an Xid that needs a reset or a reboot,
// uncorrectable memory errors, a row remapping failure, a GPU that fell off
// the bus, an NVLink down, a driver that will not start) is tainted before
// more GPU pods are scheduled onto it to crash, and a node whose GPU is
// merely degraded (memory repairs pending a reset, clocks held down,
// a PCIe or NVLink link losing bandwidth) can be drained at leisure.
//
// The product needs one condition for each, so a Monitor watches all GPUs
// through NVML and offers two probes over the same state: FatalProbe
// ("gpu") and DegradedProbe ("gpu-degraded").
//
// It is written for the moments a GPU fleet is sick, when NVML itself is
// at its worst:
//   - A read failure is never a recovery. Each GPU is read by a worker of
//     its own with its own deadline, so a GPU whose calls hang or crawl is
//     Unknown for its own signals and hides nothing about the others; a
//     problem a signal showed is kept while that signal cannot be read;
//     only a successful read of a healthy GPU clears it. At most one NVML
//     call is in flight per GPU, so a hung driver leaks nothing.
//   - Failures outlive the agent. The Monitor is a probes.Stateful: what
//     it holds (fatal Xids, the last problem of each signal, the GPUs the
//     node should have) is kept on the Node and restored after a restart.
//     A fatal Xid is held until a recovery is observed (see Recovery).
//   - A GPU is who it is, not its NVML index: what the Monitor holds
//     about a GPU follows its UUID (else its PCI address) when a driver
//     reload renumbers the GPUs.
//   - A driver reload leaves nothing behind. Every NVML call is bound to
//     the NVML session it started in (session.go): a call that hung across
//     a reload or Close makes no further call once it returns, and what it
//     found is dropped, so a dead handle never comes back into a GPU's
//     slot, and after Close returns no call is made but one that was
//     already under way. A handle that dies
//     alone (a reset re-created the device) is got again by index; an
//     event set whose waits fail is replaced, once read out (watch.go).
//   - Xids are judged by NVIDIA's Xid catalog (catalog.go, xids.csv),
//     which config extends. Xid events are drained continuously by a
//     watcher goroutine, so a storm of harmless Xids cannot hide a
//     critical one.
//   - The node's expected GPUs come from config (Config.ExpectedGPUs,
//     which wins over everything else) or its PCI bus, so a GPU NVML no
//     longer sees is named, and a driver that does not start is a failure
//     (retried with backoff), not silence.
//
// Functions that newer drivers added are looked up in the library before
// they are called, because calling a symbol the driver lacks aborts the
// process; a signal the driver or GPU does not offer is not checked and
// the message says so.
//
// # Recovery
//
// A fatal Xid is cleared when the GPU is readable and healthy, its
// driver-reported recovery action (where the driver has one) is none, and
// one of these was observed after the Xid: the node rebooted (the host's
// boot ID changed), which clears every Xid; the GPU was reset, which
// clears Xids whose action is a GPU reset but not those that need a
// reboot or service; or an operator cleared it (Clear, `selftaint gpu
// clear`), which clears the Xids it held that were last seen by the
// request's requestedAt. A reset is observed when the GPU was lost (a
// call said GPU_IS_LOST or RESET_REQUIRED) or missing from NVML's count
// and reads again, whatever its index now, or when its recovery action
// went from an action back to none. A GPU that was merely unreadable (a
// call failed or hung) and reads again was not reset: a read failure is
// never a recovery.
//
// "After" is in the order the Monitor saw things, not by wall-clock
// times, which a clock step reorders: what was restored from before a
// restart is before everything seen since (see mark in state.go).
//
// The Monitor is written against nvml.Interface (go-nvml), so tests use
// go-nvml's mocks.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// ReasonNoSignals: the GPUs are there (and counted against the
	// baseline), but the driver offers none of the probe's signals on
	// any of them, so nothing says whether they are healthy (status OK:
	// nothing is wrong that can be seen).
	ReasonNoSignals = "GPUSignalsNotAvailable"
	// ReasonDriverUnavailable: NVML does not start, or every call says
	// the driver is not loaded or does not match the library, while the
	// node has NVIDIA GPUs on its PCI bus.
	ReasonDriverUnavailable = "GPUDriverUnavailable"
	// ReasonGPULost: a GPU fell off the bus, or NVML sees fewer GPUs
	// than the node has.
	ReasonGPULost = "GPULost"
	// ReasonGPURebootRequired: an Xid or the driver's recovery action
	// says the node must be rebooted.
	ReasonGPURebootRequired = "GPURebootRequired"
	// ReasonGPUFailure: an Xid NVIDIA's catalog sends to support (the GPU
	// may need service).
	ReasonGPUFailure = "GPUFailure"
	// ReasonGPUResetRequired: an NVML call, an Xid or the driver's
	// recovery action says the GPU must be reset.
	ReasonGPUResetRequired = "GPUResetRequired"
	// ReasonGPUDrainP2P: the driver's recovery action asks to drain
	// peer-to-peer traffic.
	ReasonGPUDrainP2P = "GPUDrainP2PRequired"
	// ReasonUncorrectableECC: a GPU's volatile uncorrectable ECC error
	// count is above Config.ECCUncorrectedAbove.
	ReasonUncorrectableECC = "GPUUncorrectableECC"
	// ReasonRowRemapFailure: a GPU ran out of spare memory rows.
	ReasonRowRemapFailure = "GPURowRemapFailure"
	// ReasonNVLinkDown: an NVLink that was up is down.
	ReasonNVLinkDown = "GPUNVLinkDown"
	// ReasonFabricNotReady: the GPU's registration with the NVLink fabric
	// (fabric manager, NVSwitch) is not complete or failed.
	ReasonFabricNotReady = "GPUFabricNotReady"

	// ReasonGPUsNotDegraded: the degraded probe found nothing.
	ReasonGPUsNotDegraded = "GPUsNotDegraded"
	// ReasonRowRemapPending: a GPU has remapped rows that take effect at
	// its next reset.
	ReasonRowRemapPending = "GPURowRemapPending"
	// ReasonRetiredPagesPending: a GPU has retired pages that take effect
	// at its next reset.
	ReasonRetiredPagesPending = "GPURetiredPagesPending"
	// ReasonFabricDegraded: the NVLink fabric reports degraded bandwidth.
	ReasonFabricDegraded = "GPUFabricDegraded"
	// ReasonNVLinkErrors: NVLink error counters rise faster than
	// Config.NVLinkErrorsPerMinute.
	ReasonNVLinkErrors = "GPUNVLinkErrors"
	// ReasonPCIeDegraded: the PCIe link runs below its width or
	// generation, or replays faster than Config.PCIeReplaysPerMinute.
	ReasonPCIeDegraded = "GPUPCIeDegraded"
	// ReasonECCDisabled: ECC was enabled and is not any more.
	ReasonECCDisabled = "GPUECCDisabled"
	// ReasonInfoROMCorrupted: the GPU's InfoROM failed validation.
	ReasonInfoROMCorrupted = "GPUInfoROMCorrupted"
	// ReasonHardwareSlowdown: a GPU's clocks were held down by hardware
	// for more than Config.SlowdownPercent of the window.
	ReasonHardwareSlowdown = "GPUHardwareSlowdown"
	// ReasonThermalViolation: thermal violation time above
	// Config.ThermalViolationPercent of the window.
	ReasonThermalViolation = "GPUThermalViolation"
	// ReasonPowerViolation: power violation time above
	// Config.PowerViolationPercent of the window.
	ReasonPowerViolation = "GPUPowerViolation"

	// ReasonReadError: the GPUs could not be read and nothing is known
	// to be wrong with them.
	ReasonReadError = probes.ReasonReadError
)

// Defaults.
const (
	// DefaultEventWait is how long one wait for Xid events blocks.
	DefaultEventWait = time.Second
	// DefaultReadTimeout bounds one run's reads when its context has no
	// deadline.
	DefaultReadTimeout = 2 * time.Second
	// DefaultWindow is the window sustained signals are judged over.
	DefaultWindow = 10 * time.Minute
)

// Config says what makes a GPU failed or degraded. Start from
// DefaultConfig.
type Config struct {
	// Xids set the action of Xids, over NVIDIA's catalog: an override
	// extends the catalog, it never replaces it.
	Xids map[uint64]Action
	// SkipXids are Xids to ignore, as if Xids said ActionIgnore for
	// each. Kept for older configs.
	SkipXids []uint64
	// ECCUncorrectedAbove: a GPU whose volatile (since the driver loaded)
	// uncorrectable ECC error count is above it has failed. 0: any error.
	ECCUncorrectedAbove uint64
	// IgnoreSlowdown turns off the hardware slowdown check.
	IgnoreSlowdown bool
	// EventWait is how long one wait for Xid events blocks: whole
	// milliseconds, 1ms to 5s. 0 means DefaultEventWait.
	EventWait time.Duration
	// ReadTimeout bounds one run's reads when the run has no deadline;
	// with one, reads end at 80% of it. 0 means DefaultReadTimeout.
	ReadTimeout time.Duration
	// ExpectedGPUs is how many GPUs the node has. Where set, it is the
	// whole baseline: the node is short (GPULost) exactly when NVML counts
	// fewer, whatever the PCI bus has or NVML saw before (those only name
	// the GPUs NVML does not see). An operator who accepts a dead GPU sets
	// it to the GPUs that work. 0: the NVIDIA GPUs on its PCI bus
	// (Env.GPUsOnPCI) and those NVML saw, else the most NVML ever counted.
	ExpectedGPUs int
	// Window is what sustained signals are judged over. 0 means
	// DefaultWindow.
	Window time.Duration
	// SlowdownPercent: degraded when hardware held the clocks down for
	// more than this share of the window.
	SlowdownPercent float64
	// ThermalViolationPercent and PowerViolationPercent: degraded when
	// NVML's thermal or power violation time is above this share of the
	// window. 0 turns the check off.
	ThermalViolationPercent, PowerViolationPercent float64
	// PCIeReplaysPerMinute: degraded when the PCIe replay counter rises
	// faster than this over the window. 0 turns the check off.
	PCIeReplaysPerMinute float64
	// NVLinkErrorsPerMinute: degraded when a GPU's NVLink replay,
	// recovery and CRC error counters together rise faster than this over
	// the window. 0 turns the check off.
	NVLinkErrorsPerMinute float64
}

// DefaultConfig returns the defaults: NVIDIA's catalog, any uncorrectable
// ECC error fatal, slowdown checked (25% of 10 minutes), thermal violation
// 10%, power violation 50%, PCIe replays 8 a minute (DCGM's limit), NVLink
// errors 60 a minute.
func DefaultConfig() Config {
	return Config{
		EventWait:               DefaultEventWait,
		Window:                  DefaultWindow,
		SlowdownPercent:         25,
		ThermalViolationPercent: 10,
		PowerViolationPercent:   50,
		PCIeReplaysPerMinute:    8,
		NVLinkErrorsPerMinute:   60,
	}
}

// Validate checks the durations, shares and overrides.
func (c Config) Validate() error {
	var errs []error
	if c.EventWait < 0 || c.EventWait > 5*time.Second || c.EventWait%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("EventWait %v must be whole milliseconds between 0 and 5s", c.EventWait))
	}
	if c.ReadTimeout < 0 {
		errs = append(errs, fmt.Errorf("ReadTimeout %v must not be negative", c.ReadTimeout))
	}
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("Window %v must not be negative", c.Window))
	}
	if c.ExpectedGPUs < 0 {
		errs = append(errs, fmt.Errorf("ExpectedGPUs %d must not be negative", c.ExpectedGPUs))
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"SlowdownPercent", c.SlowdownPercent}, {"ThermalViolationPercent", c.ThermalViolationPercent}, {"PowerViolationPercent", c.PowerViolationPercent}} {
		if p.v < 0 || p.v > 100 {
			errs = append(errs, fmt.Errorf("%s %v must be between 0 and 100", p.name, p.v))
		}
	}
	if c.PCIeReplaysPerMinute < 0 || c.NVLinkErrorsPerMinute < 0 {
		errs = append(errs, errors.New("PCIeReplaysPerMinute and NVLinkErrorsPerMinute must not be negative"))
	}
	for x, a := range c.Xids {
		if _, err := ParseAction(string(a)); err != nil {
			errs = append(errs, fmt.Errorf("Xids[%d]: %w", x, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gpu probe config: %w", err)
	}
	return nil
}

func (c Config) eventWait() time.Duration {
	if c.EventWait == 0 {
		return DefaultEventWait
	}
	return c.EventWait
}

func (c Config) window() time.Duration {
	if c.Window == 0 {
		return DefaultWindow
	}
	return c.Window
}

// Catalog is NVIDIA's catalog with the config's overrides (Xids, then
// SkipXids where Xids does not name the Xid), as the probe judges Xids.
func (c Config) Catalog() *Catalog { return c.catalog() }

// catalog is NVIDIA's catalog with the config's overrides.
func (c Config) catalog() *Catalog {
	over := make(map[uint64]Action, len(c.Xids)+len(c.SkipXids))
	for _, x := range c.SkipXids {
		over[x] = ActionIgnore
	}
	for x, a := range c.Xids {
		over[x] = a
	}
	return DefaultCatalog().With(over)
}

// Env is how a Monitor reaches NVML and the host.
type Env struct {
	// Lib is an initialized NVML, or nil when it is not (yet) available.
	Lib nvml.Interface
	// Open loads and initializes NVML. With Lib nil it is called, with
	// backoff, until it succeeds; with Lib set it is called again after
	// Lib's calls say the driver went away (unloaded, upgraded). With Open
	// set the Monitor owns NVML: it shuts Lib (and what Open returned)
	// down on Close. nil: never (and Lib is the caller's to shut down).
	Open func() (nvml.Interface, error)
	// GPUsOnPCI lists the PCI addresses of the NVIDIA GPUs on the host's
	// PCI bus ("0000:07:00.0"). nil: no PCI baseline.
	GPUsOnPCI func() ([]string, error)
	// BootID returns the host's boot ID. nil: reboots are not observed.
	BootID func() (string, error)
	// Now is the clock for what the Monitor records and judges over
	// windows. nil: time.Now. Deadlines of NVML calls use real time.
	Now func() time.Time
}

// Monitor watches the GPUs NVML sees and backs the two GPU probes. It is
// safe for concurrent use.
type Monitor struct {
	cfg     Config
	catalog *Catalog
	env     Env
	now     func() time.Time
	// fabricHealth reads a GPU's fabric health mask (fabricHealthV2; a
	// test replaces it, as the versioned call only works on real NVML).
	fabricHealth func(nvml.Device) (uint32, nvml.Return)

	// uuidLookup: the watcher has a UUID lookup out (uuidOf).
	uuidLookup atomic.Bool

	// testAfterRead and testJoined, set by tests only, are called when a
	// read ended (before it is shared no more) and when a caller joins a
	// read under way.
	testAfterRead, testJoined func()

	flightMu sync.Mutex // guards flight and last
	flight   *refreshCall
	// last is the latest read that completed, for CountGPUs.
	last *snapshot

	lw *worker // NVML-wide calls: Init, DeviceGetCount, event set creation

	wakeMu sync.Mutex // guards wake
	// wake are the fatal probe's Watch calls, woken by a fatal Xid.
	wake wakers

	mu sync.Mutex // guards the fields below
	nv nvmlState
	// gpus are the GPUs by NVML index.
	gpus []*gpuState
	// records are kept records of GPUs not (yet) matched to a GPU this
	// run has opened, by key.
	records map[string]*gpuRecord
	// expected are the PCI addresses of the GPUs the node should have
	// (with ExpectedGPUs set, only to name those NVML does not see).
	expected []string
	// lastPCI are the NVIDIA GPUs on the PCI bus at the last scan.
	lastPCI  []string
	maxCount int
	// seq orders what the Monitor sees (Xids, recoveries, clears): see
	// mark and tick.
	seq uint64
	// handleUUIDs are the UUIDs of handles events came from that are no
	// GPU's handle (recordEvent), at most maxHandleUUIDs.
	handleUUIDs map[nvml.Device]string
	// lastCount is what the last successful count found, kept while NVML
	// cannot count the GPUs.
	lastCount lastCount
	stray     []xidRecord
	// dedupe pairs the Xids NVML and the kernel log both report.
	dedupe   xidDedupe
	boot     string
	restored bool
	// rebooted: the state restored was written in an earlier boot.
	rebooted bool
	closed   bool
	w        *watcher
	// retired is the watcher of the set replaced, until a new set's
	// watcher takes it as its prev (see watcher).
	retired *watcher
	// eventsErr is why no event set could be created.
	eventsErr error
}

// nvmlState is how far NVML got.
type nvmlState struct {
	lib nvml.Interface
	// sess is lib's session, nil while there is none.
	sess     *session
	owned    bool      // opened by env.Open: shut down on Close or reopen
	err      error     // why NVML is not usable, nil when it is
	failures int       // consecutive failures to open
	retryAt  time.Time // next open attempt
	has      symbols
}

// symbols says which functions the driver has.
type symbols struct {
	ecc, retired, remap, fields, fabric, fabricV, nvlink, inforom, eccMode,
	pcie, replay, violation, mig, events bool
	clockReasons func(nvml.Device) (uint64, nvml.Return) // nil: driver has neither symbol
}

// New returns a Monitor. It fails only when cfg is invalid; NVML that
// cannot be used yet is reported by the probes and retried.
func New(cfg Config, env Env) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if env.Lib == nil && env.Open == nil {
		return nil, errors.New("gpu probe: neither an NVML library nor a way to open one")
	}
	m := &Monitor{cfg: cfg, catalog: cfg.catalog(), env: env, now: env.Now, fabricHealth: fabricHealthV2, records: map[string]*gpuRecord{}, handleUUIDs: map[nvml.Device]string{}, lw: startWorker("NVML")}
	if m.now == nil {
		m.now = time.Now
	}
	if env.Lib != nil {
		m.nv = nvmlState{lib: env.Lib, sess: newSession(env.Lib), owned: env.Open != nil, has: lookupSymbols(env.Lib)}
	}
	if env.BootID != nil {
		if id, err := env.BootID(); err == nil {
			m.boot = strings.TrimSpace(id)
		}
	}
	return m, nil
}

// tick returns the next place in the order of what the Monitor sees.
// m.mu is held.
func (m *Monitor) tick() uint64 {
	m.seq++
	return m.seq
}

// Lib returns the NVML library once it is initialized, nil before.
func (m *Monitor) Lib() nvml.Interface {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.nv.err != nil {
		return nil
	}
	return m.nv.lib
}

// Close stops the Monitor: its Xid watcher, its workers, its event set,
// and NVML where the Monitor opened it. It ends the NVML session, so no
// NVML call is made after it returns, not even by a call that was hung in
// it and returns later (see session). The probes report Unknown
// afterwards.
func (m *Monitor) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	w := m.w
	m.w = nil
	gpus := slices.Clone(m.gpus)
	nv := m.nv
	m.mu.Unlock()
	var errs []error
	if w != nil {
		errs = append(errs, w.stop()) // frees the event set while the session is live
	}
	nv.sess.end()
	for _, g := range gpus {
		g.w.stop()
	}
	if nv.owned && nv.lib != nil {
		if ret := nv.lib.Shutdown(); ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("shutting NVML down: %w", ret))
		}
	}
	m.lw.stop()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gpu probe: %w", err)
	}
	return nil
}

// FatalProbe returns the probe of GPU failures, named NameFatal. It is
// the Monitor's probes.Stateful: its state is the Monitor's.
func (m *Monitor) FatalProbe() probes.Probe { return &statefulProbe{probe{m: m, name: NameFatal}} }

// DegradedProbe returns the probe of degraded GPUs, named NameDegraded.
func (m *Monitor) DegradedProbe() probes.Probe { return &probe{m: m, name: NameDegraded} }

// Probes returns FatalProbe and DegradedProbe.
func (m *Monitor) Probes() []probes.Probe { return []probes.Probe{m.FatalProbe(), m.DegradedProbe()} }

type probe struct {
	m    *Monitor
	name string
}

func (p *probe) Name() string { return p.name }

// Probe reads every GPU (sharing a read already under way) and judges
// what this probe is about.
func (p *probe) Probe(ctx context.Context) probes.Result {
	s, err := p.m.refresh(ctx)
	if err != nil {
		return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: err.Error()}
	}
	return judge(s, p.name)
}

// statefulProbe is the fatal probe, which carries the Monitor's state.
type statefulProbe struct{ probe }

var (
	_ probes.Stateful = (*statefulProbe)(nil)
	_ probes.Waker    = (*statefulProbe)(nil)
)

// State implements probes.Stateful.
func (p *statefulProbe) State() []byte { return p.m.State() }

// Restore implements probes.Stateful.
func (p *statefulProbe) Restore(state []byte) error { return p.m.Restore(state) }

// Clear implements probes.Stateful.
func (p *statefulProbe) Clear(targets []string, requested time.Time) (string, error) {
	return p.m.Clear(targets, requested)
}

// InventoryFresh is how old a read CountGPUs takes as it is; an older one
// (the GPU probes read every few seconds) is read again.
const InventoryFresh = 30 * time.Second

// CountGPUs counts the GPUs NVML sees, for the node's hardware inventory,
// and names them in detail ("0:GPU-5d5b..., 1:GPU-..."). It takes the
// Monitor's latest read when it is at most InventoryFresh old and reads
// the GPUs otherwise (sharing a read under way), so the inventory makes no
// NVML call of its own: every call goes through the GPU's worker, one in
// flight per GPU, under the read's deadline, and a hung driver makes
// CountGPUs fail within that deadline instead of blocking it. It fails
// when NVML has not started or the driver is gone (NVML could not count
// the GPUs); a GPU NVML counts but cannot read still counts, as NVML's own
// count does.
func (m *Monitor) CountGPUs(ctx context.Context) (int, string, error) {
	m.flightMu.Lock()
	s := m.last
	m.flightMu.Unlock()
	if s == nil || m.now().Sub(s.at) > InventoryFresh {
		var err error
		if s, err = m.refresh(ctx); err != nil {
			return 0, "", fmt.Errorf("counting GPUs: %w", err)
		}
	}
	return inventoryOf(s)
}

// inventoryOf is the GPU count in s and its detail.
func inventoryOf(s *snapshot) (int, string, error) {
	switch {
	case s.driverErr != nil:
		return 0, "", fmt.Errorf("counting GPUs: %w", s.driverErr)
	case s.countErr != nil:
		return 0, "", s.countErr
	}
	names := make([]string, 0, s.count)
	for _, g := range s.gpus {
		if g.index >= s.count {
			continue
		}
		name := strconv.Itoa(g.index)
		if g.uuid != "" {
			name += ":" + g.uuid
		}
		names = append(names, name)
	}
	return s.count, strings.Join(names, ", "), nil
}

// refreshCall is one read of all GPUs that concurrent probe runs share.
type refreshCall struct {
	done chan struct{}
	snap *snapshot
	err  error
}

// refresh reads all GPUs once, or waits for the read already under way
// and shares it, so the fatal and degraded probes never queue behind one
// another on a hung GPU. A shared read that took its records before
// something was filed that this caller may have been woken for (a fatal
// Xid filed as the read ended) is not shared: the GPUs are read again.
func (m *Monitor) refresh(ctx context.Context) (*snapshot, error) {
	m.flightMu.Lock()
	if c := m.flight; c != nil {
		m.flightMu.Unlock()
		m.mu.Lock()
		seen := m.seq
		m.mu.Unlock()
		if m.testJoined != nil {
			m.testJoined()
		}
		select {
		case <-c.done:
			if c.err == nil && c.snap.seq < seen {
				return m.refresh(ctx)
			}
			return c.snap, c.err
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the GPUs to be read: %w", ctx.Err())
		}
	}
	c := &refreshCall{done: make(chan struct{})}
	m.flight = c
	m.flightMu.Unlock()
	c.snap, c.err = m.read(ctx)
	if m.testAfterRead != nil {
		m.testAfterRead()
	}
	m.flightMu.Lock()
	m.flight = nil
	if c.err == nil {
		m.last = c.snap
	}
	m.flightMu.Unlock()
	close(c.done)
	return c.snap, c.err
}

// readContext bounds one run's reads: 80% of the run's time, so the
// verdict is in before the runner's timeout, or ReadTimeout.
func (m *Monitor) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithTimeout(ctx, time.Until(dl)*8/10)
	}
	d := m.cfg.ReadTimeout
	if d == 0 {
		d = DefaultReadTimeout
	}
	return context.WithTimeout(ctx, d)
}
