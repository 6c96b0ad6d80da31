package gpu

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// A session is one NVML session: from the library's start (Env.Lib, or an
// Env.Open that worked) to its end (the reopen that replaces it after a
// driver reload, or Close). Handles and event sets belong to the session
// they came from.
//
// Every job is bound to the session it started in. A job can outlive its
// session (a call that hangs across a driver reload or Close): once the
// session has ended it makes no further NVML call, and what it learnt is
// dropped (the Monitor takes a job's findings only while the job's
// session is its current one), so a late job never puts a dead handle
// back into a GPU's slot. Each call checks the session just before it is
// made (liveDevice, and the checks before the library's calls): the only
// calls that can reach NVML once the session has ended are one already in
// it (hung) and one whose check passed as the session ended.
type session struct {
	lib nvml.Interface

	mu    sync.Mutex // guards ended
	ended bool
}

func newSession(lib nvml.Interface) *session { return &session{lib: lib} }

// live reports whether the session has not ended; a nil session has.
func (s *session) live() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// end ends the session: its jobs make no NVML call from now on.
func (s *session) end() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
}

// liveDevice is a GPU's handle as a job of session s uses it: each call
// the Monitor makes is made only while s is live, and says
// ERROR_UNINITIALIZED (as NVML does after its shutdown) without calling
// once s has ended. The other methods go straight to the handle; the
// Monitor does not call them.
type liveDevice struct {
	nvml.Device
	s *session
}

// dead is what a call of a handle of an ended session returns.
const dead = nvml.ERROR_UNINITIALIZED

func (d liveDevice) GetUUID() (string, nvml.Return) {
	if !d.s.live() {
		return "", dead
	}
	return d.Device.GetUUID()
}

func (d liveDevice) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	if !d.s.live() {
		return nvml.PciInfo{}, dead
	}
	return d.Device.GetPciInfo()
}

func (d liveDevice) GetMigMode() (int, int, nvml.Return) {
	if !d.s.live() {
		return 0, 0, dead
	}
	return d.Device.GetMigMode()
}

func (d liveDevice) GetSupportedEventTypes() (uint64, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetSupportedEventTypes()
}

func (d liveDevice) RegisterEvents(types uint64, set nvml.EventSet) nvml.Return {
	if !d.s.live() {
		return dead
	}
	return d.Device.RegisterEvents(types, set)
}

func (d liveDevice) GetFieldValues(values []nvml.FieldValue) nvml.Return {
	if !d.s.live() {
		return dead
	}
	return d.Device.GetFieldValues(values)
}

func (d liveDevice) GetTotalEccErrors(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetTotalEccErrors(t, c)
}

func (d liveDevice) GetRemappedRows() (int, int, bool, bool, nvml.Return) {
	if !d.s.live() {
		return 0, 0, false, false, dead
	}
	return d.Device.GetRemappedRows()
}

func (d liveDevice) GetGpuFabricInfo() (nvml.GpuFabricInfo, nvml.Return) {
	if !d.s.live() {
		return nvml.GpuFabricInfo{}, dead
	}
	return d.Device.GetGpuFabricInfo()
}

func (d liveDevice) GetNvLinkState(link int) (nvml.EnableState, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetNvLinkState(link)
}

func (d liveDevice) GetNvLinkErrorCounter(link int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetNvLinkErrorCounter(link, c)
}

func (d liveDevice) GetRetiredPagesPendingStatus() (nvml.EnableState, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetRetiredPagesPendingStatus()
}

func (d liveDevice) GetCurrPcieLinkWidth() (int, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetCurrPcieLinkWidth()
}

func (d liveDevice) GetMaxPcieLinkWidth() (int, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetMaxPcieLinkWidth()
}

func (d liveDevice) GetCurrPcieLinkGeneration() (int, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetCurrPcieLinkGeneration()
}

func (d liveDevice) GetMaxPcieLinkGeneration() (int, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetMaxPcieLinkGeneration()
}

func (d liveDevice) GetPcieReplayCounter() (int, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetPcieReplayCounter()
}

func (d liveDevice) GetEccMode() (nvml.EnableState, nvml.EnableState, nvml.Return) {
	if !d.s.live() {
		return 0, 0, dead
	}
	return d.Device.GetEccMode()
}

func (d liveDevice) ValidateInforom() nvml.Return {
	if !d.s.live() {
		return dead
	}
	return d.Device.ValidateInforom()
}

func (d liveDevice) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetCurrentClocksEventReasons()
}

func (d liveDevice) GetCurrentClocksThrottleReasons() (uint64, nvml.Return) {
	if !d.s.live() {
		return 0, dead
	}
	return d.Device.GetCurrentClocksThrottleReasons()
}

func (d liveDevice) GetViolationStatus(p nvml.PerfPolicyType) (nvml.ViolationTime, nvml.Return) {
	if !d.s.live() {
		return nvml.ViolationTime{}, dead
	}
	return d.Device.GetViolationStatus(p)
}

// withHandle calls f with d's own handle (f is a function of the handle
// that liveDevice cannot wrap, such as the versioned fabric call), unless
// d's session has ended.
func withHandle[T any](h nvml.Device, f func(nvml.Device) (T, nvml.Return)) (T, nvml.Return) {
	if d, ok := h.(liveDevice); ok {
		if !d.s.live() {
			var zero T
			return zero, dead
		}
		h = d.Device
	}
	return f(h)
}
