package gpu

// The fault rig: a DGX A100 (go-nvml's dgxa100 mock, 8 A100s) whose every
// signal reads healthy until a test changes it, with faults per call (an
// error, a hang until the test ends, a slow answer), event sets that hand
// out the events queued in them (as in NVML, an event is queued in the set
// its GPU is registered with, and dropped when that set is freed), and a
// stepping clock.
//
// It has NVML's sessions: Shutdown ends the session (every call then says
// ERROR_UNINITIALIZED, the handles of that session too), and open (a
// test's Env.Open) starts a new one with new handles, as a driver reload
// does. A GPU's handle can also die alone (resetHandle), as after a reset
// that re-created the device. Every call is counted (totalCalls).

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// t0 is when every fake clock starts.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// stamp0 is t0 as messages write it.
const stamp0 = "2026-03-01T12:00:00Z"

// busIDs are the PCI bus numbers of a DGX A100's GPUs.
var busIDs = [8]int{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd}

// nvLinks is how many NVLinks an A100 has.
const nvLinks = 12

// queuedEvent is an event NVML has not handed out, and the event set it
// is queued in: set 0 while its GPU is registered with none (it goes to
// the set the GPU registers with next), or for a device that is none of
// the GPUs (any set hands it out).
type queuedEvent struct {
	ev  nvml.EventData
	set int
}

// fault is what a call does instead of answering at once.
type fault struct {
	ret   nvml.Return   // not SUCCESS: the call returns it
	hang  bool          // the call blocks until the test ends
	delay time.Duration // the call answers after delay
	// gate: the call blocks until gate is closed (or the test ends),
	// then answers.
	gate chan struct{}
}

// Faults that tests use often.
var (
	hang       = fault{hang: true}
	errUnknown = fault{ret: nvml.ERROR_UNKNOWN}
	errLost    = fault{ret: nvml.ERROR_GPU_IS_LOST}
)

// allCalls is the call name of a fault on every call of a GPU, or of the
// library (DeviceGetCount, DeviceGetHandleByIndex, EventSetCreate,
// EventSetWait).
const allCalls = "*"

// simGPU is the state one fake GPU reports.
type simGPU struct {
	uuid  string
	busID string // as NVML writes it: "00000000:07:00.0"

	recovery     uint64 // field 230
	recoveryNA   bool   // field 230 not supported
	ecc          uint64 // volatile uncorrectable
	remapCorr    int
	remapUnc     int
	remapPending bool
	remapFailed  bool
	remapNA      bool // GetRemappedRows not supported (as on MIG)
	remapFieldNA bool // fields 142-145 not supported
	fabricState  uint8
	fabricStatus nvml.Return
	fabricHealth uint32
	links        []bool   // NVLink up, per link
	linkErrors   []uint64 // each error counter of each link
	retired      bool
	width        int
	maxWidth     int
	gen          int
	maxGen       int
	replays      int
	eccOn        bool
	eccPending   bool
	inforom      nvml.Return
	clockReasons uint64
	thermal      uint64 // violation time, ns
	power        uint64
	mig          bool
	events       uint64 // supported event types

	faults map[string]fault // by call name, allCalls for every call
}

// fake is a DGX A100 whose every health signal reads healthy until a test
// changes it. Tests change it through its methods, never the mock's
// functions, so that calls in flight do not race with them.
type fake struct {
	*dgxa100.Server
	clk *probestest.FakeClock

	released    chan struct{} // closed when the test ends: hung calls return
	releaseOnce sync.Once

	mu        sync.Mutex // guards the fields below
	gpus      [8]*simGPU
	visible   []int            // the GPUs NVML sees, in index order
	onBus     []int            // the GPUs on the PCI bus
	lib       map[string]fault // faults of library calls
	lacks     map[string]bool  // symbols the driver lacks
	calls     map[string]int   // calls made, by name
	total     int              // every call made, of any kind
	queue     []queuedEvent    // events not handed out yet
	changed   chan struct{}    // closed and replaced when queue or registered change
	reg       map[int]bool     // GPUs registered with the current event set
	setsMade  int
	setsFreed int
	broken    map[int]bool // event sets whose waits fail
	hungSets  map[int]bool // event sets whose waits hang until the test ends
	// handles are every handle made, to its GPU; dead the handles no
	// longer valid, with what their calls return.
	handles map[nvml.Device]int
	dead    map[nvml.Device]nvml.Return
	down    bool // shut down and not opened since
	session int  // sessions opened: Open starts the next
}

func newFake(t testing.TB) *fake {
	f := &fake{
		Server:   dgxa100.New(),
		clk:      probestest.NewFakeClock(t0),
		released: make(chan struct{}),
		lib:      map[string]fault{},
		lacks:    map[string]bool{},
		calls:    map[string]int{},
		changed:  make(chan struct{}),
		reg:      map[int]bool{},
		broken:   map[int]bool{},
		hungSets: map[int]bool{},
		handles:  map[nvml.Device]int{},
		dead:     map[nvml.Device]nvml.Return{},
	}
	t.Cleanup(f.release)
	for i := range f.Devices {
		f.gpus[i] = &simGPU{
			uuid:         f.dev(i).UUID,
			busID:        fmt.Sprintf("00000000:%02X:00.0", busIDs[i]),
			fabricState:  nvml.GPU_FABRIC_STATE_NOT_SUPPORTED,
			links:        []bool{true, true, true, true, true, true, true, true, true, true, true, true},
			linkErrors:   make([]uint64, nvLinks),
			width:        16,
			maxWidth:     16,
			gen:          4,
			maxGen:       4,
			eccOn:        true,
			eccPending:   true,
			clockReasons: nvml.ClocksEventReasonGpuIdle,
			events:       nvml.EventTypeAll,
			faults:       map[string]fault{},
		}
		f.visible = append(f.visible, i)
		f.onBus = append(f.onBus, i)
		f.handles[f.Devices[i]] = i
		f.setDevice(i, f.dev(i))
	}
	f.LookupSymbolFunc = func(sym string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls["LookupSymbol"]++
		f.total++
		if f.lacks[sym] {
			return fmt.Errorf("symbol %s not found", sym)
		}
		return nil
	}
	f.DeviceGetCountFunc = func() (n int, ret nvml.Return) {
		ret = f.libCall("DeviceGetCount", func() nvml.Return { n = len(f.visible); return nvml.SUCCESS })
		return n, ret
	}
	f.DeviceGetHandleByIndexFunc = func(index int) (d nvml.Device, ret nvml.Return) {
		ret = f.libCall("DeviceGetHandleByIndex", func() nvml.Return {
			if index < 0 || index >= len(f.visible) {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			if fl, ok := f.gpus[f.visible[index]].faults["DeviceGetHandleByIndex"]; ok && fl.ret != nvml.SUCCESS {
				return fl.ret
			}
			d = f.Devices[f.visible[index]]
			return nvml.SUCCESS
		})
		if ret != nvml.SUCCESS {
			d = nil
		}
		return d, ret
	}
	f.EventSetCreateFunc = func() (set nvml.EventSet, ret nvml.Return) {
		ret = f.libCall("EventSetCreate", func() nvml.Return {
			f.setsMade++
			clear(f.reg)
			set = &eventSet{f: f, n: f.setsMade, session: f.session}
			return nvml.SUCCESS
		})
		return set, ret
	}
	f.ShutdownFunc = func() nvml.Return {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls["Shutdown"]++
		f.total++
		f.down = true
		for _, d := range f.Devices {
			f.dead[d] = nvml.ERROR_UNINITIALIZED
		}
		return nvml.SUCCESS
	}
	return f
}

// open starts a new NVML session, as nvmlInit after a driver reload: new
// handles for every GPU (the old ones stay dead). It is a test's Env.Open.
func (f *fake) open() (nvml.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["Init"]++
	f.total++
	if fl, ok := f.lib["Init"]; ok && fl.ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvmlInit: %w", fl.ret)
	}
	f.down = false
	f.session++
	for i := range f.Devices {
		if _, dead := f.dead[f.Devices[i]]; !dead {
			f.dead[f.Devices[i]] = nvml.ERROR_UNINITIALIZED
		}
		f.newHandleLocked(i)
	}
	return f, nil
}

// newHandleLocked gives GPU i a new handle. f.mu is held.
func (f *fake) newHandleLocked(i int) {
	d := dgxa100.NewDevice(i)
	f.setDevice(i, d)
	f.Devices[i] = d
	f.handles[d] = i
}

// resetHandle kills GPU i's handle alone, as a reset that re-created the
// device does: its calls return ret from now on, and NVML hands out a new
// handle for the GPU.
func (f *fake) resetHandle(i int, ret nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead[f.Devices[i]] = ret
	f.newHandleLocked(i)
}

// driverGone makes the driver go away under the session (unloaded, or
// upgraded under the library): every handle of the session says ret from
// now on, while NVML still counts the GPUs and hands out those handles.
// Only a new session (open) has working handles.
func (f *fake) driverGone(ret nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.Devices {
		f.dead[d] = ret
	}
}

// breakSet makes the waits of the current event set fail (ERROR_UNKNOWN)
// from now on; a set created later works.
func (f *fake) breakSet() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.broken[f.setsMade] = true
	f.changedLocked()
}

// hangSet makes the waits of the current event set hang (until the test
// ends) from now on; a set created later works.
func (f *fake) hangSet() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hungSets[f.setsMade] = true
}

// totalCalls is how many calls were made, of any kind.
func (f *fake) totalCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

func (f *fake) dev(i int) *dgxa100.Device { return f.Devices[i].(*dgxa100.Device) }

func (f *fake) uuid(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gpus[i].uuid
}

// pci is GPU i's PCI address as sysfs writes it.
func (f *fake) pci(i int) string { return fmt.Sprintf("0000:%02x:00.0", busIDs[i]) }

// release makes every hung call return. It runs when the test ends.
func (f *fake) release() { f.releaseOnce.Do(func() { close(f.released) }) }

// set changes GPU i's state.
func (f *fake) set(i int, change func(g *simGPU)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f.gpus[i])
}

// setAll changes every GPU's state.
func (f *fake) setAll(change func(g *simGPU)) {
	for i := range f.gpus {
		f.set(i, change)
	}
}

// fail makes call (allCalls: every call) of GPU i do fl; the zero fault
// removes it.
func (f *fake) fail(i int, call string, fl fault) {
	f.set(i, func(g *simGPU) {
		if fl == (fault{}) {
			delete(g.faults, call)
		} else {
			g.faults[call] = fl
		}
	})
}

// failLib makes the library call (allCalls: every one) do fl.
func (f *fake) failLib(call string, fl fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl == (fault{}) {
		delete(f.lib, call)
	} else {
		f.lib[call] = fl
	}
}

// hangAll makes every NVML call hang, the event wait's included.
func (f *fake) hangAll() {
	f.failLib(allCalls, hang)
	for i := range f.gpus {
		f.fail(i, allCalls, hang)
	}
}

// see makes NVML see the GPUs listed, in index order.
func (f *fake) see(gpus ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.visible = gpus
}

// lacking makes the driver lack the symbols.
func (f *fake) lacking(syms ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range syms {
		f.lacks[s] = true
	}
}

// called is how many times call was made: "GetUUID" on any GPU, "3:GetUUID"
// on GPU 3.
func (f *fake) called(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

// pciList lists the GPUs on the PCI bus, for Env.GPUsOnPCI.
func (f *fake) pciList() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, i := range f.onBus {
		out = append(out, f.pci(i))
	}
	return out, nil
}

// apply does what fl says; SUCCESS means the call goes on.
func (f *fake) apply(fl fault) nvml.Return {
	if fl.hang {
		<-f.released
		return nvml.ERROR_UNKNOWN
	}
	if fl.gate != nil {
		select {
		case <-fl.gate:
		case <-f.released:
			return nvml.ERROR_UNKNOWN
		}
	}
	if fl.delay > 0 {
		timer := time.NewTimer(fl.delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-f.released:
			return nvml.ERROR_UNKNOWN
		}
	}
	return fl.ret
}

// call is one call of GPU i through handle d: what a dead handle says,
// else its fault, else answer under the lock. A call that entered before
// its handle died answers as it would have.
func (f *fake) call(d nvml.Device, i int, name string, answer func(g *simGPU) nvml.Return) nvml.Return {
	f.mu.Lock()
	f.calls[name]++
	f.calls[fmt.Sprintf("%d:%s", i, name)]++
	f.total++
	if ret, dead := f.dead[d]; dead {
		f.mu.Unlock()
		return ret
	}
	fl, ok := f.gpus[i].faults[name]
	if !ok {
		fl = f.gpus[i].faults[allCalls]
	}
	f.mu.Unlock()
	if ret := f.apply(fl); ret != nvml.SUCCESS {
		return ret
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return answer(f.gpus[i])
}

// libCall is one call of the library.
func (f *fake) libCall(name string, answer func() nvml.Return) nvml.Return {
	f.mu.Lock()
	f.calls[name]++
	f.total++
	if f.down {
		f.mu.Unlock()
		return nvml.ERROR_UNINITIALIZED
	}
	fl, ok := f.lib[name]
	if !ok {
		fl = f.lib[allCalls]
	}
	f.mu.Unlock()
	if ret := f.apply(fl); ret != nvml.SUCCESS {
		return ret
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return answer()
}

// setDevice makes every function of handle d of GPU i the Monitor calls
// answer from its simGPU.
func (f *fake) setDevice(i int, d *dgxa100.Device) {
	call := func(name string, answer func(g *simGPU) nvml.Return) nvml.Return { return f.call(d, i, name, answer) }
	d.GetUUIDFunc = func() (s string, ret nvml.Return) {
		ret = call("GetUUID", func(g *simGPU) nvml.Return { s = g.uuid; return nvml.SUCCESS })
		return s, ret
	}
	d.GetPciInfoFunc = func() (p nvml.PciInfo, ret nvml.Return) {
		ret = call("GetPciInfo", func(g *simGPU) nvml.Return {
			p.PciDeviceId = 0x20B010DE
			for k, c := range []byte(g.busID) {
				p.BusId[k] = c
			}
			return nvml.SUCCESS
		})
		return p, ret
	}
	d.GetMigModeFunc = func() (cur, pend int, ret nvml.Return) {
		ret = call("GetMigMode", func(g *simGPU) nvml.Return {
			if g.mig {
				cur, pend = nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE
			}
			return nvml.SUCCESS
		})
		return cur, pend, ret
	}
	d.GetSupportedEventTypesFunc = func() (types uint64, ret nvml.Return) {
		ret = call("GetSupportedEventTypes", func(g *simGPU) nvml.Return { types = g.events; return nvml.SUCCESS })
		return types, ret
	}
	d.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
		return call("RegisterEvents", func(g *simGPU) nvml.Return {
			if types != nvml.EventTypeXidCriticalError {
				panic(fmt.Sprintf("registered for event types %#x, want only critical Xids", types))
			}
			if s, ok := set.(*eventSet); !ok || s.n != f.setsMade {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			f.reg[i] = true
			f.changedLocked()
			return nvml.SUCCESS
		})
	}
	d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		return call("GetFieldValues", func(g *simGPU) nvml.Return {
			for k := range values {
				fv := &values[k]
				var n uint64
				ret, typ := nvml.SUCCESS, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG
				switch fv.FieldId {
				case fieldRecoveryAction:
					n = g.recovery
					if g.recoveryNA {
						ret = nvml.ERROR_NOT_SUPPORTED
					}
				case nvml.FI_DEV_REMAPPED_COR, nvml.FI_DEV_REMAPPED_UNC, nvml.FI_DEV_REMAPPED_PENDING, nvml.FI_DEV_REMAPPED_FAILURE:
					typ = nvml.VALUE_TYPE_UNSIGNED_INT
					n = map[uint32]uint64{
						nvml.FI_DEV_REMAPPED_COR: uint64(g.remapCorr), nvml.FI_DEV_REMAPPED_UNC: uint64(g.remapUnc),
						nvml.FI_DEV_REMAPPED_PENDING: b2u(g.remapPending), nvml.FI_DEV_REMAPPED_FAILURE: b2u(g.remapFailed),
					}[fv.FieldId]
					if g.remapFieldNA {
						ret = nvml.ERROR_NOT_SUPPORTED
					}
				default:
					ret = nvml.ERROR_NOT_SUPPORTED
				}
				fv.NvmlReturn, fv.ValueType = uint32(ret), uint32(typ)
				fv.Value = [8]byte{}
				if typ == nvml.VALUE_TYPE_UNSIGNED_INT {
					binary.NativeEndian.PutUint32(fv.Value[:4], uint32(n))
				} else {
					binary.NativeEndian.PutUint64(fv.Value[:], n)
				}
			}
			return nvml.SUCCESS
		})
	}
	d.GetTotalEccErrorsFunc = func(typ nvml.MemoryErrorType, counter nvml.EccCounterType) (n uint64, ret nvml.Return) {
		if typ != nvml.MEMORY_ERROR_TYPE_UNCORRECTED || counter != nvml.VOLATILE_ECC {
			panic(fmt.Sprintf("read ECC errors of type %d, counter %d, want uncorrected volatile", typ, counter))
		}
		ret = call("GetTotalEccErrors", func(g *simGPU) nvml.Return { n = g.ecc; return nvml.SUCCESS })
		return n, ret
	}
	d.GetRemappedRowsFunc = func() (corr, unc int, pending, failed bool, ret nvml.Return) {
		ret = call("GetRemappedRows", func(g *simGPU) nvml.Return {
			if g.remapNA {
				return nvml.ERROR_NOT_SUPPORTED
			}
			corr, unc, pending, failed = g.remapCorr, g.remapUnc, g.remapPending, g.remapFailed
			return nvml.SUCCESS
		})
		return corr, unc, pending, failed, ret
	}
	d.GetGpuFabricInfoFunc = func() (info nvml.GpuFabricInfo, ret nvml.Return) {
		ret = call("GetGpuFabricInfo", func(g *simGPU) nvml.Return {
			info.State, info.Status = g.fabricState, uint32(g.fabricStatus)
			return nvml.SUCCESS
		})
		return info, ret
	}
	d.GetNvLinkStateFunc = func(link int) (st nvml.EnableState, ret nvml.Return) {
		ret = call("GetNvLinkState", func(g *simGPU) nvml.Return {
			if link < 0 || link >= len(g.links) {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			if g.links[link] {
				st = nvml.FEATURE_ENABLED
			}
			return nvml.SUCCESS
		})
		return st, ret
	}
	d.GetNvLinkErrorCounterFunc = func(link int, c nvml.NvLinkErrorCounter) (n uint64, ret nvml.Return) {
		ret = call("GetNvLinkErrorCounter", func(g *simGPU) nvml.Return {
			if link < 0 || link >= len(g.links) {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			n = g.linkErrors[link]
			return nvml.SUCCESS
		})
		return n, ret
	}
	d.GetRetiredPagesPendingStatusFunc = func() (st nvml.EnableState, ret nvml.Return) {
		ret = call("GetRetiredPagesPendingStatus", func(g *simGPU) nvml.Return {
			if g.retired {
				st = nvml.FEATURE_ENABLED
			}
			return nvml.SUCCESS
		})
		return st, ret
	}
	d.GetCurrPcieLinkWidthFunc = func() (n int, ret nvml.Return) {
		ret = call("GetCurrPcieLinkWidth", func(g *simGPU) nvml.Return { n = g.width; return nvml.SUCCESS })
		return n, ret
	}
	d.GetMaxPcieLinkWidthFunc = func() (n int, ret nvml.Return) {
		ret = call("GetMaxPcieLinkWidth", func(g *simGPU) nvml.Return { n = g.maxWidth; return nvml.SUCCESS })
		return n, ret
	}
	d.GetCurrPcieLinkGenerationFunc = func() (n int, ret nvml.Return) {
		ret = call("GetCurrPcieLinkGeneration", func(g *simGPU) nvml.Return { n = g.gen; return nvml.SUCCESS })
		return n, ret
	}
	d.GetMaxPcieLinkGenerationFunc = func() (n int, ret nvml.Return) {
		ret = call("GetMaxPcieLinkGeneration", func(g *simGPU) nvml.Return { n = g.maxGen; return nvml.SUCCESS })
		return n, ret
	}
	d.GetPcieReplayCounterFunc = func() (n int, ret nvml.Return) {
		ret = call("GetPcieReplayCounter", func(g *simGPU) nvml.Return { n = g.replays; return nvml.SUCCESS })
		return n, ret
	}
	d.GetEccModeFunc = func() (cur, pend nvml.EnableState, ret nvml.Return) {
		ret = call("GetEccMode", func(g *simGPU) nvml.Return {
			if g.eccOn {
				cur = nvml.FEATURE_ENABLED
			}
			if g.eccPending {
				pend = nvml.FEATURE_ENABLED
			}
			return nvml.SUCCESS
		})
		return cur, pend, ret
	}
	d.ValidateInforomFunc = func() nvml.Return {
		return call("ValidateInforom", func(g *simGPU) nvml.Return { return g.inforom })
	}
	clocks := func(name string) func() (uint64, nvml.Return) {
		return func() (r uint64, ret nvml.Return) {
			ret = call(name, func(g *simGPU) nvml.Return { r = g.clockReasons; return nvml.SUCCESS })
			return r, ret
		}
	}
	d.GetCurrentClocksEventReasonsFunc = clocks("GetCurrentClocksEventReasons")
	d.GetCurrentClocksThrottleReasonsFunc = clocks("GetCurrentClocksThrottleReasons")
	d.GetViolationStatusFunc = func(policy nvml.PerfPolicyType) (v nvml.ViolationTime, ret nvml.Return) {
		ret = call("GetViolationStatus", func(g *simGPU) nvml.Return {
			v.ReferenceTime = uint64(f.clk.Now().UnixNano())
			switch policy {
			case nvml.PERF_POLICY_THERMAL:
				v.ViolationTime = g.thermal
			case nvml.PERF_POLICY_POWER:
				v.ViolationTime = g.power
			default:
				panic(fmt.Sprintf("violation status of policy %d", policy))
			}
			return nvml.SUCCESS
		})
		return v, ret
	}
}

// fabricHealth stands in for the versioned fabric call, which only works
// on real NVML.
func (f *fake) fabricHealth(h nvml.Device) (mask uint32, ret nvml.Return) {
	if i := f.index(h); i >= 0 {
		ret = f.call(h, i, "GetGpuFabricInfoV", func(g *simGPU) nvml.Return { mask = g.fabricHealth; return nvml.SUCCESS })
		return mask, ret
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// index is the fake GPU handle d is (any handle ever made), -1 for a
// device that is none of them.
func (f *fake) index(d nvml.Device) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.indexLocked(d)
}

// indexLocked is index. f.mu is held.
func (f *fake) indexLocked(d nvml.Device) int {
	if d == nil || !reflect.TypeOf(d).Comparable() {
		return -1
	}
	if i, ok := f.handles[d]; ok {
		return i
	}
	return -1
}

// changedLocked wakes the waits. f.mu is held.
func (f *fake) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// push queues events. As in NVML, an event of a GPU registered with the
// current event set is queued in that set: only a wait on it hands it out,
// and freeing the set drops it. An event of a GPU not registered yet waits
// for its registration; one of a device that is none of the GPUs goes out
// at once.
func (f *fake) push(evs ...nvml.EventData) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range evs {
		q := queuedEvent{ev: ev}
		if i := f.indexLocked(ev.Device); i >= 0 && f.reg[i] {
			q.set = f.setsMade
		}
		f.queue = append(f.queue, q)
	}
	f.changedLocked()
}

// queued is how many events have not been handed out.
func (f *fake) queued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue)
}

// xid is a critical Xid event on GPU i.
func (f *fake) xid(i int, xid uint64) nvml.EventData {
	return nvml.EventData{Device: f.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid,
		GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
}

// popLocked takes the first event a wait on set n can hand out. f.mu is
// held.
func (f *fake) popLocked(n int) (nvml.EventData, bool) {
	for k, q := range f.queue {
		ev := q.ev
		i := f.indexLocked(ev.Device)
		if q.set == n || q.set == 0 && (i < 0 || n == f.setsMade && f.reg[i]) {
			if k == 0 {
				f.queue = f.queue[1:]
			} else {
				f.queue = append(f.queue[:k:k], f.queue[k+1:]...)
			}
			return ev, true
		}
	}
	return nvml.EventData{}, false
}

// eventSet is the fake's NVML event set.
type eventSet struct {
	f       *fake
	n       int // which set the fake made
	session int // the session it was made in
}

// Wait hands out the next event, or blocks up to ms for one; the library
// fault of EventSetWait (or allCalls) makes it fail or hang instead.
func (s *eventSet) Wait(ms uint32) (nvml.EventData, nvml.Return) {
	f := s.f
	f.mu.Lock()
	f.calls["EventSetWait"]++
	f.total++
	if f.down || s.session != f.session {
		f.mu.Unlock()
		return nvml.EventData{}, nvml.ERROR_UNINITIALIZED
	}
	fl, ok := f.lib["EventSetWait"]
	if !ok {
		fl = f.lib[allCalls]
	}
	if f.hungSets[s.n] {
		fl = hang
	}
	f.mu.Unlock()
	if ret := f.apply(fl); ret != nvml.SUCCESS {
		return nvml.EventData{}, ret
	}
	var timer *time.Timer // made when the wait first blocks
	for {
		f.mu.Lock()
		if f.broken[s.n] {
			f.mu.Unlock()
			return nvml.EventData{}, nvml.ERROR_UNKNOWN
		}
		ev, ok := f.popLocked(s.n)
		changed := f.changed
		f.mu.Unlock()
		if ok {
			return ev, nvml.SUCCESS
		}
		if timer == nil {
			timer = time.NewTimer(time.Duration(ms) * time.Millisecond)
			defer timer.Stop()
		}
		select {
		case <-changed:
		case <-timer.C:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		case <-f.released:
			return nvml.EventData{}, nvml.ERROR_UNKNOWN
		}
	}
}

// Free counts the set freed, and drops the events queued in it.
func (s *eventSet) Free() nvml.Return {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.calls["EventSetFree"]++
	s.f.total++
	s.f.setsFreed++
	s.f.queue = slices.DeleteFunc(s.f.queue, func(q queuedEvent) bool { return q.set == s.n })
	return nvml.SUCCESS
}

// queuedIn is how many events are queued in set n.
func (f *fake) queuedIn(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := 0
	for _, q := range f.queue {
		if q.set == n {
			k++
		}
	}
	return k
}

// sets is how many event sets were made and freed.
func (f *fake) sets() (made, freed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.setsMade, f.setsFreed
}

// testConfig is DefaultConfig with waits short enough for tests.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.EventWait = 20 * time.Millisecond
	return cfg
}

// newMonitor makes a Monitor on f: env's Lib defaults to f (unless Open is
// set), its clock to f's. The test's end releases f's hung calls, then
// closes the Monitor.
func newMonitor(t testing.TB, f *fake, cfg Config, env Env) *Monitor {
	t.Helper()
	if env.Lib == nil && env.Open == nil {
		env.Lib = f
	}
	if env.Now == nil {
		env.Now = f.clk.Now
	}
	m, err := New(cfg, env)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	m.fabricHealth = f.fabricHealth
	t.Cleanup(func() {
		f.release()
		m.Close()
	})
	return m
}

// runTimeout is the deadline of a probe run that nothing hangs in: reads
// end as soon as every GPU is read, so it is only a bound.
const runTimeout = 10 * time.Second

// runProbe runs one probe of m with a context that ends after d.
func runProbe(m *Monitor, name string, d time.Duration) probes.Result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	p := m.FatalProbe()
	if name == NameDegraded {
		p = m.DegradedProbe()
	}
	return p.Probe(ctx)
}

// runBoth runs the fatal probe, then the degraded one.
func runBoth(m *Monitor) (fatal, degraded probes.Result) {
	return runProbe(m, NameFatal, runTimeout), runProbe(m, NameDegraded, runTimeout)
}

// want is what a test expects of a probe's result. Message and not are
// substrings, with {uuidN} and {pciN} standing for GPU N's UUID and PCI
// address.
type want struct {
	status  probes.Status
	reason  string
	message []string
	not     []string // substrings the message must not contain
}

// expand replaces {uuidN} and {pciN}.
func (f *fake) expand(s string) string {
	for i := range f.Devices {
		s = strings.ReplaceAll(s, fmt.Sprintf("{uuid%d}", i), f.uuid(i))
		s = strings.ReplaceAll(s, fmt.Sprintf("{pci%d}", i), f.pci(i))
	}
	return s
}

// mismatches says how got differs from w.
func (f *fake) mismatches(got probes.Result, w want) []string {
	var out []string
	if got.Status != w.status || got.Reason != w.reason {
		out = append(out, fmt.Sprintf("got %s/%s, want %s/%s (message %q)", got.Status, got.Reason, w.status, w.reason, got.Message))
	}
	for _, sub := range w.message {
		if sub = f.expand(sub); !strings.Contains(got.Message, sub) {
			out = append(out, fmt.Sprintf("got message %q, want it to contain %q", got.Message, sub))
		}
	}
	for _, sub := range w.not {
		if sub = f.expand(sub); strings.Contains(got.Message, sub) {
			out = append(out, fmt.Sprintf("got message %q, want it not to contain %q", got.Message, sub))
		}
	}
	return out
}

// check reports how got differs from w.
func (f *fake) check(t testing.TB, what string, got probes.Result, w want) {
	t.Helper()
	for _, m := range f.mismatches(got, w) {
		t.Errorf("%s: %s", what, m)
	}
}

// waitFor runs probe name until its result is w, for up to 10 seconds
// (a loaded machine is slow), and reports the last result if it never is.
func (f *fake) waitFor(t testing.TB, m *Monitor, name string, w want) probes.Result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := runProbe(m, name, runTimeout)
		bad := f.mismatches(got, w)
		if len(bad) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			for _, b := range bad {
				t.Errorf("%s after 10s: %s", name, b)
			}
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventually polls cond until it holds, for up to 10 seconds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// reading is the value of the named reading, "<missing>" if none.
func reading(rs []probes.Reading, name string) string {
	for _, r := range rs {
		if r.Name == name {
			return r.Value
		}
	}
	return "<missing>"
}

// The results of a healthy DGX A100.
var (
	fatalOK    = want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"8 GPUs healthy; checked: Xid events, recovery action, uncorrectable ECC errors (at most 0), row remapping, NVLink"}}
	degradedOK = want{status: probes.StatusOK, reason: ReasonGPUsNotDegraded, message: []string{"8 GPUs not degraded; checked: row remapping, retired pages, NVLink, PCIe link, ECC mode, InfoROM, hardware slowdown"}}
)
