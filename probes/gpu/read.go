package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Library symbols looked up before the functions are called.
const (
	symTotalEccErrors      = "nvmlDeviceGetTotalEccErrors"
	symRetiredPagesPending = "nvmlDeviceGetRetiredPagesPendingStatus"
	symRemappedRows        = "nvmlDeviceGetRemappedRows"
	symClocksEventReasons  = "nvmlDeviceGetCurrentClocksEventReasons"    // R535+
	symClocksThrottle      = "nvmlDeviceGetCurrentClocksThrottleReasons" // before R535, deprecated
	symFieldValues         = "nvmlDeviceGetFieldValues"
	symFabricInfo          = "nvmlDeviceGetGpuFabricInfo"
	symFabricInfoV         = "nvmlDeviceGetGpuFabricInfoV"
	symNvLinkState         = "nvmlDeviceGetNvLinkState"
	symNvLinkErrorCounter  = "nvmlDeviceGetNvLinkErrorCounter"
	symValidateInforom     = "nvmlDeviceValidateInforom"
	symEccMode             = "nvmlDeviceGetEccMode"
	symPcieWidth           = "nvmlDeviceGetCurrPcieLinkWidth"
	symPcieReplay          = "nvmlDeviceGetPcieReplayCounter"
	symViolationStatus     = "nvmlDeviceGetViolationStatus"
	symMigMode             = "nvmlDeviceGetMigMode"
	symEventSetCreate      = "nvmlEventSetCreate"
	symSupportedEventTypes = "nvmlDeviceGetSupportedEventTypes"
	symRegisterEvents      = "nvmlDeviceRegisterEvents"
	symEventSetWait        = "nvmlEventSetWait"
	symEventSetWaitV2      = "nvmlEventSetWait_v2"
	symEventSetFree        = "nvmlEventSetFree"
)

// NVML field IDs and values go-nvml v0.13 does not name (nvml.h).
const (
	// fieldRecoveryAction is NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: what
	// the driver says the GPU needs; it survives agent restarts and is
	// cleared by the fix.
	fieldRecoveryAction = 230
	recoveryNone        = 0 // NVML_GPU_RECOVERY_ACTION_NONE
	recoveryReset       = 1 // _GPU_RESET
	recoveryReboot      = 2 // _NODE_REBOOT
	recoveryDrainP2P    = 3 // _DRAIN_P2P
	recoveryDrainReset  = 4 // _DRAIN_AND_RESET
	// Newer drivers' actions (nvml.h after go-nvml v0.13), named by Xid
	// 154's line: 5 is recover the IMEX domain (unknown here).
	recoveryBusReset     = 6 // _BUS_RESET: reset the GPU's PCIe bus
	recoverySystemReboot = 7 // _SYSTEM_REBOOT
)

func lookupSymbols(lib nvml.Interface) symbols {
	has := func(sym string) bool { return lib.Extensions().LookupSymbol(sym) == nil }
	s := symbols{
		ecc: has(symTotalEccErrors), retired: has(symRetiredPagesPending), remap: has(symRemappedRows),
		fields: has(symFieldValues), fabric: has(symFabricInfo), fabricV: has(symFabricInfoV),
		nvlink: has(symNvLinkState), inforom: has(symValidateInforom), eccMode: has(symEccMode),
		pcie: has(symPcieWidth), replay: has(symPcieReplay), violation: has(symViolationStatus), mig: has(symMigMode),
		events: has(symEventSetCreate) && has(symSupportedEventTypes) && has(symRegisterEvents) &&
			has(symEventSetFree) && (has(symEventSetWaitV2) || has(symEventSetWait)),
	}
	switch {
	case has(symClocksEventReasons):
		s.clockReasons = nvml.Device.GetCurrentClocksEventReasons
	case has(symClocksThrottle):
		s.clockReasons = nvml.Device.GetCurrentClocksThrottleReasons
	}
	return s
}

// Signal names: the keys of readings, findings and the state.
const (
	sigRecovery = "recovery action"
	sigECC      = "uncorrectable ECC errors"
	sigRemap    = "row remapping"
	sigFabric   = "fabric"
	sigNVLink   = "NVLink"
	sigRetired  = "retired pages"
	sigPCIe     = "PCIe link"
	sigECCMode  = "ECC mode"
	sigInfoROM  = "InfoROM"
	sigClocks   = "clock event reasons"
	sigThermal  = "thermal violation"
	sigPower    = "power violation"
	sigXid      = "Xid events"
)

// sigRead is how reading one signal went: read when both are empty.
type sigRead struct {
	na  string // not available on this GPU or driver: why
	err error  // could not be read
}

func (s sigRead) ok() bool { return s.na == "" && s.err == nil }

// values are what one read of a GPU got, valid where its signal was read.
type values struct {
	recovery                  uint64
	ecc                       uint64
	remapCorr, remapUnc       int
	remapPending, remapFailed bool
	fabricState               uint8
	fabricStatus              nvml.Return
	fabricHealth              uint32
	fabricHealthRead          bool
	links                     []linkRead
	retiredPending            bool
	pcieWidth, pcieMaxWidth   int
	pcieGen, pcieMaxGen       int
	pcieReplays               uint64
	pcieReplaysRead           bool
	eccCurrent, eccPending    bool
	inforomBad                bool
	clockReasons              uint64
	clocksRead                bool
	thermal, power            uint64 // violation time, ns
	thermalRead, powerRead    bool
}

// linkRead is one NVLink.
type linkRead struct {
	link   int
	up     bool
	errors uint64 // replay + recovery + CRC counters
}

// gpuRead is what a read job found about one GPU. The job fills it as
// calls return; the run takes what is there at its deadline.
type gpuRead struct {
	// handle, uuid and pci are the GPU's identity, once read; fresh says
	// handle was got by index in this read (not the cached one).
	handle    nvml.Device
	fresh     bool
	uuid, pci string
	mig       bool
	migRead   bool  // mig was read
	openErr   error // getting the handle failed
	// staleHandle: the cached handle could not say the GPU's UUID: it may
	// be dead (the GPU was reset, the device re-created); the next read
	// gets a new one.
	staleHandle bool
	// reg is the outcome of registering for Xid events, when tried.
	regTried bool
	reg      sigRead
	sigs     map[string]sigRead
	v        values
	// hung is the call the job was in at the deadline, nil if it
	// finished.
	hung error
}

// readJob is a read in progress: the job fills r under mu as calls
// return, the run copies it at its deadline.
type readJob struct {
	mu sync.Mutex // guards r
	r  gpuRead
}

// snapshot copies the job's gpuRead under its lock.
func (j *readJob) snapshot() gpuRead {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.r
	c.sigs = maps.Clone(j.r.sigs)
	c.v.links = append([]linkRead(nil), j.r.v.links...)
	return c
}

// readSpec is what a read job needs from the Monitor, copied under its
// lock before the job starts.
type readSpec struct {
	index   int
	handle  nvml.Device // nil: get it
	sess    *session    // the session the job is bound to
	has     symbols
	lib     nvml.Interface
	events  nvml.EventSet // non-nil: register the GPU if not yet
	watched bool
	cfg     Config
	fabricH func(nvml.Device) (uint32, nvml.Return)
	// identified tells the Monitor who the GPU is before it is registered
	// for events, so that an Xid raised at once is filed under it, and
	// says whether to register it (not yet, or a new handle). nil: the
	// GPU registers unless watched.
	identified func(identity) bool
}

// readGPU reads one GPU on its worker until ctx ends.
func readGPU(ctx context.Context, w *worker, spec readSpec) gpuRead {
	j := &readJob{r: gpuRead{handle: spec.handle, sigs: map[string]sigRead{}}}
	err := w.do(ctx, func(step func(string)) { spec.run(j, step) })
	res := j.snapshot()
	res.hung = err
	return res
}

// run is the read job. Its calls go through liveDevice: none is made once
// its session has ended.
func (spec readSpec) run(j *readJob, step func(string)) {
	h := spec.handle
	if h == nil {
		step("nvmlDeviceGetHandleByIndex")
		if !spec.sess.live() {
			return
		}
		var ret nvml.Return
		h, ret = spec.lib.DeviceGetHandleByIndex(spec.index)
		if ret != nvml.SUCCESS {
			j.mu.Lock()
			j.r.openErr = fmt.Errorf("getting the handle of GPU %d: %w", spec.index, ret)
			j.mu.Unlock()
			return
		}
		j.mu.Lock()
		j.r.handle, j.r.fresh = h, true
		j.mu.Unlock()
	}
	d := liveDevice{Device: h, s: spec.sess}
	id := identity{handle: h, fresh: spec.handle == nil}
	step("nvmlDeviceGetUUID")
	if u, ret := d.GetUUID(); ret == nvml.SUCCESS {
		id.uuid = u
		j.mu.Lock()
		j.r.uuid = u
		j.mu.Unlock()
	} else {
		j.mu.Lock()
		j.r.staleHandle = !id.fresh
		if isLost(ret) || driverGone(ret) {
			j.r.openErr = fmt.Errorf("reading the UUID of GPU %d: %w", spec.index, ret)
		}
		stop := j.r.openErr != nil
		j.mu.Unlock()
		if stop {
			return
		}
	}
	step("nvmlDeviceGetPciInfo")
	if info, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
		id.pci = pciAddress(info)
		j.mu.Lock()
		j.r.pci = id.pci
		j.mu.Unlock()
	}
	if spec.has.mig {
		step("nvmlDeviceGetMigMode")
		if cur, _, ret := d.GetMigMode(); ret == nvml.SUCCESS {
			id.mig, id.migRead = cur == nvml.DEVICE_MIG_ENABLE, true
			j.mu.Lock()
			j.r.mig, j.r.migRead = id.mig, id.migRead
			j.mu.Unlock()
		}
	}
	toRegister := !spec.watched
	if spec.identified != nil {
		toRegister = spec.identified(id)
	}
	if !spec.sess.live() {
		return
	}
	if spec.events != nil && toRegister {
		step("nvmlDeviceRegisterEvents")
		reg := register(d, spec.events)
		j.mu.Lock()
		j.r.regTried, j.r.reg = true, reg
		j.mu.Unlock()
	}
	var v values
	for _, rd := range spec.readers() {
		var res sigRead
		if rd.na != "" {
			res.na = rd.na
		} else {
			step(rd.call)
			res = outcome(rd.sig, rd.read(d, &v))
		}
		j.mu.Lock()
		j.r.v = v
		j.r.v.links = append([]linkRead(nil), v.links...)
		j.r.sigs[rd.sig] = res
		j.mu.Unlock()
	}
}

// register registers h for critical Xid events on set.
func register(h nvml.Device, set nvml.EventSet) sigRead {
	types, ret := h.GetSupportedEventTypes()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.SUCCESS && types&nvml.EventTypeXidCriticalError == 0:
		return sigRead{na: "Xid events not supported"}
	case ret != nvml.SUCCESS:
		return sigRead{err: fmt.Errorf("getting supported event types: %w", ret)}
	}
	switch ret := h.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret {
	case nvml.SUCCESS:
		return sigRead{}
	case nvml.ERROR_NOT_SUPPORTED:
		return sigRead{na: "Xid events not supported"}
	default:
		return sigRead{err: fmt.Errorf("registering for Xid events: %w", ret)}
	}
}

// outcome turns a signal's NVML return into how reading it went.
func outcome(sig string, ret nvml.Return) sigRead {
	switch ret {
	case nvml.SUCCESS:
		return sigRead{}
	case nvml.ERROR_NOT_SUPPORTED:
		return sigRead{na: "not supported"}
	}
	return sigRead{err: fmt.Errorf("reading %s: %w", sig, ret)}
}

// isLost reports whether ret says the GPU is gone until reset.
func isLost(ret nvml.Return) bool {
	return ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_RESET_REQUIRED
}

// driverGone reports whether ret says NVML has no working driver under
// it: not loaded, unloaded, or another version than the library's.
func driverGone(ret nvml.Return) bool {
	switch ret {
	case nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_LIB_RM_VERSION_MISMATCH, nvml.ERROR_UNINITIALIZED, nvml.ERROR_LIBRARY_NOT_FOUND:
		return true
	}
	return false
}

// pciAddress is the PCI address of info as sysfs writes it,
// "0000:07:00.0".
func pciAddress(info nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range info.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return normalizePCI(b.String())
}

// normalizePCI writes a PCI address with a 4-digit domain in lower case:
// NVML says "00000000:07:00.0", sysfs "0000:07:00.0".
func normalizePCI(addr string) string {
	addr = strings.ToLower(strings.TrimSpace(addr))
	dom, rest, ok := strings.Cut(addr, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return addr
	}
	// NVML writes 8 digits, sysfs 4, or 5 for a VMD domain ("10000"):
	// leading zeros go down to 4 digits, no other digit does.
	dom = strings.TrimLeft(dom, "0")
	return fmt.Sprintf("%04s", dom) + ":" + rest
}

// reader reads one signal.
type reader struct {
	sig  string
	call string // the NVML function, for hang reports
	na   string // not available: why; the read is not made
	read func(h nvml.Device, v *values) nvml.Return
}

func lacks(sym string) string { return "driver lacks " + sym }

// readers lists the signals in the order they are read: the fatal ones
// first, so a call that hangs late costs the least.
func (spec readSpec) readers() []reader {
	has, cfg := spec.has, spec.cfg
	na := func(ok bool, sym string) string {
		if ok {
			return ""
		}
		return lacks(sym)
	}
	rs := []reader{
		{sigRecovery, symFieldValues, na(has.fields, symFieldValues), readRecovery},
		{sigECC, symTotalEccErrors, na(has.ecc, symTotalEccErrors), func(h nvml.Device, v *values) (ret nvml.Return) {
			v.ecc, ret = h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
			return ret
		}},
		{sigRemap, symRemappedRows, na(has.remap || has.fields, symRemappedRows), func(h nvml.Device, v *values) nvml.Return {
			return readRemap(h, v, has)
		}},
		{sigFabric, symFabricInfo, na(has.fabric, symFabricInfo), func(h nvml.Device, v *values) nvml.Return {
			return readFabric(h, v, has, spec.fabricH)
		}},
		{sigNVLink, symNvLinkState, na(has.nvlink, symNvLinkState), readNVLink},
		{sigRetired, symRetiredPagesPending, na(has.retired, symRetiredPagesPending), func(h nvml.Device, v *values) nvml.Return {
			s, ret := h.GetRetiredPagesPendingStatus()
			v.retiredPending = s == nvml.FEATURE_ENABLED
			return ret
		}},
		{sigPCIe, symPcieWidth, na(has.pcie, symPcieWidth), func(h nvml.Device, v *values) nvml.Return {
			return readPCIe(h, v, has.replay)
		}},
		{sigECCMode, symEccMode, na(has.eccMode, symEccMode), func(h nvml.Device, v *values) nvml.Return {
			cur, pend, ret := h.GetEccMode()
			v.eccCurrent, v.eccPending = cur == nvml.FEATURE_ENABLED, pend == nvml.FEATURE_ENABLED
			return ret
		}},
		{sigInfoROM, symValidateInforom, na(has.inforom, symValidateInforom), func(h nvml.Device, v *values) nvml.Return {
			ret := h.ValidateInforom()
			if ret == nvml.ERROR_CORRUPTED_INFOROM { // a finding, not a failure to read
				v.inforomBad = true
				return nvml.SUCCESS
			}
			return ret
		}},
	}
	clocks := reader{sig: sigClocks, call: symClocksEventReasons}
	switch {
	case cfg.IgnoreSlowdown:
		clocks.na = "not checked"
	case has.clockReasons == nil:
		clocks.na = lacks(symClocksEventReasons)
	default:
		clocks.read = func(h nvml.Device, v *values) (ret nvml.Return) {
			v.clockReasons, ret = has.clockReasons(h)
			v.clocksRead = ret == nvml.SUCCESS
			return ret
		}
	}
	rs = append(rs, clocks)
	for _, p := range []struct {
		sig    string
		policy nvml.PerfPolicyType
		limit  float64
		set    func(*values, uint64)
	}{
		{sigThermal, nvml.PERF_POLICY_THERMAL, cfg.ThermalViolationPercent, func(v *values, n uint64) { v.thermal, v.thermalRead = n, true }},
		{sigPower, nvml.PERF_POLICY_POWER, cfg.PowerViolationPercent, func(v *values, n uint64) { v.power, v.powerRead = n, true }},
	} {
		r := reader{sig: p.sig, call: symViolationStatus, na: na(has.violation, symViolationStatus)}
		if p.limit == 0 {
			r.na = "not checked"
		}
		r.read = func(h nvml.Device, v *values) nvml.Return {
			t, ret := h.GetViolationStatus(p.policy)
			if ret == nvml.SUCCESS {
				p.set(v, t.ViolationTime)
			}
			return ret
		}
		rs = append(rs, r)
	}
	return rs
}

// fieldValues reads NVML fields as unsigned integers, all or none.
func fieldValues(h nvml.Device, ids ...uint32) ([]uint64, nvml.Return) {
	fv := make([]nvml.FieldValue, len(ids))
	for i, id := range ids {
		fv[i].FieldId = id
	}
	if ret := h.GetFieldValues(fv); ret != nvml.SUCCESS {
		return nil, ret
	}
	out := make([]uint64, len(fv))
	for i, f := range fv {
		switch ret := nvml.Return(f.NvmlReturn); ret {
		case nvml.SUCCESS:
		case nvml.ERROR_INVALID_ARGUMENT:
			// A driver older than the field answers so: not offered.
			return nil, nvml.ERROR_NOT_SUPPORTED
		default:
			return nil, ret
		}
		out[i] = binary.NativeEndian.Uint64(f.Value[:])
		if nvml.ValueType(f.ValueType) == nvml.VALUE_TYPE_UNSIGNED_INT {
			out[i] = uint64(binary.NativeEndian.Uint32(f.Value[:4]))
		}
	}
	return out, nvml.SUCCESS
}

func readRecovery(h nvml.Device, v *values) nvml.Return {
	n, ret := fieldValues(h, fieldRecoveryAction)
	if ret == nvml.SUCCESS {
		v.recovery = n[0]
	}
	return ret
}

// readRemap reads remapped rows; on MIG GPUs and drivers where the
// function is not supported it falls back to the field values DCGM reads.
func readRemap(h nvml.Device, v *values, has symbols) nvml.Return {
	ret := nvml.ERROR_NOT_SUPPORTED
	if has.remap {
		v.remapCorr, v.remapUnc, v.remapPending, v.remapFailed, ret = h.GetRemappedRows()
	}
	if ret != nvml.ERROR_NOT_SUPPORTED || !has.fields {
		return ret
	}
	n, ret := fieldValues(h, nvml.FI_DEV_REMAPPED_COR, nvml.FI_DEV_REMAPPED_UNC, nvml.FI_DEV_REMAPPED_PENDING, nvml.FI_DEV_REMAPPED_FAILURE)
	if ret != nvml.SUCCESS {
		return ret
	}
	v.remapCorr, v.remapUnc, v.remapPending, v.remapFailed = int(n[0]), int(n[1]), n[2] != 0, n[3] != 0
	return nvml.SUCCESS
}

// readFabric reads the GPU's fabric registration, and where the driver
// has the versioned call, its health mask.
func readFabric(h nvml.Device, v *values, has symbols, health func(nvml.Device) (uint32, nvml.Return)) nvml.Return {
	info, ret := h.GetGpuFabricInfo()
	if ret != nvml.SUCCESS {
		return ret
	}
	v.fabricState, v.fabricStatus = info.State, nvml.Return(info.Status)
	if v.fabricState == nvml.GPU_FABRIC_STATE_NOT_SUPPORTED {
		return nvml.ERROR_NOT_SUPPORTED
	}
	if health != nil && has.fabricV {
		if mask, ret := withHandle(h, health); ret == nvml.SUCCESS {
			v.fabricHealth, v.fabricHealthRead = mask, true
		}
	}
	return nvml.SUCCESS
}

// fabricHealthV2 reads the fabric health mask through the versioned call.
func fabricHealthV2(h nvml.Device) (uint32, nvml.Return) {
	info, ret := h.GetGpuFabricInfoV().V2()
	return info.HealthMask, ret
}

// readNVLink reads each link's state and, for links up, its error
// counters. A link index the GPU does not have ends the list.
func readNVLink(h nvml.Device, v *values) nvml.Return {
	v.links = v.links[:0]
	for link := range nvml.NVLINK_MAX_LINKS {
		st, ret := h.GetNvLinkState(link)
		switch {
		case ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT:
			if link == 0 {
				return nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.SUCCESS
		case ret != nvml.SUCCESS:
			return ret
		}
		l := linkRead{link: link, up: st == nvml.FEATURE_ENABLED}
		if l.up {
			for _, c := range []nvml.NvLinkErrorCounter{nvml.NVLINK_ERROR_DL_REPLAY, nvml.NVLINK_ERROR_DL_RECOVERY, nvml.NVLINK_ERROR_DL_CRC_FLIT, nvml.NVLINK_ERROR_DL_CRC_DATA} {
				n, ret := h.GetNvLinkErrorCounter(link, c)
				switch {
				case ret == nvml.SUCCESS:
					l.errors += n
				case ret != nvml.ERROR_NOT_SUPPORTED:
					return ret
				}
			}
		}
		v.links = append(v.links, l)
	}
	return nvml.SUCCESS
}

// readPCIe reads the link's width and generation against their maximum
// for this GPU and slot, and the replay counter.
func readPCIe(h nvml.Device, v *values, replay bool) nvml.Return {
	var ret nvml.Return
	if v.pcieWidth, ret = h.GetCurrPcieLinkWidth(); ret != nvml.SUCCESS {
		return ret
	}
	if v.pcieMaxWidth, ret = h.GetMaxPcieLinkWidth(); ret != nvml.SUCCESS {
		return ret
	}
	if v.pcieGen, ret = h.GetCurrPcieLinkGeneration(); ret != nvml.SUCCESS {
		return ret
	}
	if v.pcieMaxGen, ret = h.GetMaxPcieLinkGeneration(); ret != nvml.SUCCESS {
		return ret
	}
	if replay {
		n, ret := h.GetPcieReplayCounter()
		switch {
		case ret == nvml.SUCCESS:
			v.pcieReplays, v.pcieReplaysRead = uint64(max(n, 0)), true
		case ret != nvml.ERROR_NOT_SUPPORTED:
			return ret
		}
	}
	return nvml.SUCCESS
}

// errLostOf returns the first error in errs that says the GPU is lost or
// needs a reset, nil if none does.
func errLostOf(errs ...error) error {
	for _, err := range errs {
		if err != nil && (errors.Is(err, nvml.ERROR_GPU_IS_LOST) || errors.Is(err, nvml.ERROR_RESET_REQUIRED)) {
			return err
		}
	}
	return nil
}
