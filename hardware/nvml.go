// Package hardware is selftaint's inventory of the special hardware on a
// node: NVIDIA GPUs as NVML reports them, and other accelerators (FPGAs,
// inference cards, ...) found among the host's PCI devices in sysfs. It
// exists so the agent can advertise such hardware as extended resources, and
// `selftaint check` can show what is there, without either of them talking to
// NVML or sysfs. It says what is present, never whether that is healthy or
// what to do about it: health is the probes' job (probes/gpu), policy the
// agent's and the taints package's.
//
// NVML code is written against nvml.Interface, so tests use go-nvml's mocks.
// The real library is opened with OpenNVML and closed with ShutdownNVML;
// every other function here expects an Interface on which Init succeeded.
package hardware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DefaultNVMLLibrary is the NVML library OpenNVML loads when given no path;
// the dynamic loader searches its usual places for it.
const DefaultNVMLLibrary = "libnvidia-ml.so.1"

// ErrNVMLNotFound is wrapped by OpenNVML's error when the NVML library cannot
// be loaded: there is no NVIDIA driver on the host, or its libraries are not
// visible to this process (e.g. not mounted into the container).
var ErrNVMLNotFound = errors.New("NVIDIA management library (NVML) not found")

// OpenNVML loads the NVML library at libraryPath (DefaultNVMLLibrary when
// empty) and initializes it. A missing library is an error wrapping
// ErrNVMLNotFound and nvml.ERROR_LIBRARY_NOT_FOUND, never a crash; a library
// whose kernel driver is not loaded gives an error wrapping
// nvml.ERROR_DRIVER_NOT_LOADED. Call ShutdownNVML when done with the result.
func OpenNVML(libraryPath string) (nvml.Interface, error) {
	if libraryPath == "" {
		libraryPath = DefaultNVMLLibrary
	}
	lib := nvml.New(nvml.WithLibraryPath(libraryPath))
	if err := initNVML(lib, libraryPath); err != nil {
		return nil, err
	}
	return lib, nil
}

// initNVML calls lib.Init, turning a failure into an error that names
// libraryPath.
func initNVML(lib nvml.Interface, libraryPath string) error {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		// go-nvml drops the loader's reason; ask the loader again so the
		// error says why (no such file, wrong ELF class, missing
		// dependency...).
		return fmt.Errorf("%w: loading %s: %s: %w", ErrNVMLNotFound, libraryPath, dlopenError(libraryPath), ret)
	default:
		return fmt.Errorf("initializing NVML from %s: %w", libraryPath, ret)
	}
}

// dlopenError returns why the dynamic loader cannot open path.
func dlopenError(path string) string {
	lib := dl.New(path, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return err.Error()
	}
	_ = lib.Close()
	return "the library loads now, but NVML did not find it"
}

// ShutdownNVML shuts down an Interface that OpenNVML returned.
func ShutdownNVML(lib nvml.Interface) error {
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shutting down NVML: %w", ret)
	}
	return nil
}

// MIGMode is a GPU's Multi-Instance GPU mode.
type MIGMode struct {
	// Supported is false for GPUs (and drivers) without MIG; Current and
	// Pending are then false.
	Supported bool `json:"supported"`
	// Current says MIG is enabled now.
	Current bool `json:"current"`
	// Pending says MIG will be enabled after the next GPU reset.
	Pending bool `json:"pending"`
}

// String describes the mode: "not supported", "enabled", "disabled", or
// e.g. "disabled (enabled after reset)".
func (m MIGMode) String() string {
	if !m.Supported {
		return "not supported"
	}
	s := onOff(m.Current)
	if m.Pending != m.Current {
		s += " (" + onOff(m.Pending) + " after reset)"
	}
	return s
}

func onOff(enabled bool) string {
	if enabled {
		return "enabled"
	}
	return "disabled"
}

// GPU is one NVIDIA GPU as NVML reports it. Fields that could not be read
// are left zero and the reason is in Err.
type GPU struct {
	// Index is NVML's index of the GPU (as in nvidia-smi -i).
	Index int `json:"index"`
	// UUID is the GPU's UUID, e.g. "GPU-5d5ba0d6-...".
	UUID string `json:"uuid"`
	// Name is the product name, e.g. "NVIDIA A100-SXM4-40GB".
	Name string `json:"name"`
	// MemoryTotalBytes is the GPU's total framebuffer memory.
	MemoryTotalBytes uint64 `json:"memoryTotalBytes"`
	// MIG is the GPU's MIG mode.
	MIG MIGMode `json:"mig"`
	// PCIBusID is the GPU's PCI address, e.g. "00000000:07:00.0".
	PCIBusID string `json:"pciBusID"`
	// Err joins every NVML error met reading this GPU; each wraps the
	// nvml.Return, so errors.Is(Err, nvml.ERROR_GPU_IS_LOST) works.
	Err error `json:"-"`
}

// GPUs lists the GPUs NVML sees. lib must be initialized. An error reading
// one GPU is recorded on that GPU and does not hide the others; GPUs fails
// only when NVML cannot count the GPUs.
func GPUs(lib nvml.Interface) ([]GPU, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting NVIDIA GPUs: %w", ret)
	}
	migSymbol := lib.Extensions().LookupSymbol("nvmlDeviceGetMigMode") == nil
	gpus := make([]GPU, n)
	for i := range gpus {
		gpus[i] = readGPU(lib, i, migSymbol)
	}
	return gpus, nil
}

// readGPU reads GPU i. migSymbol says the driver has nvmlDeviceGetMigMode.
func readGPU(lib nvml.Interface, i int, migSymbol bool) GPU {
	g := GPU{Index: i}
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		g.Err = fmt.Errorf("GPU %d: getting handle: %w", i, ret)
		return g
	}
	var errs []error
	check := func(what string, ret nvml.Return) bool {
		if ret == nvml.SUCCESS {
			return true
		}
		errs = append(errs, fmt.Errorf("GPU %d: reading %s: %w", i, what, ret))
		return false
	}
	if uuid, ret := dev.GetUUID(); check("UUID", ret) {
		g.UUID = uuid
	}
	if name, ret := dev.GetName(); check("name", ret) {
		g.Name = name
	}
	if mem, ret := dev.GetMemoryInfo(); check("memory info", ret) {
		g.MemoryTotalBytes = mem.Total
	}
	if pci, ret := dev.GetPciInfo(); check("PCI info", ret) {
		g.PCIBusID = cString(pci.BusId[:])
	}
	if migSymbol {
		switch cur, pending, ret := dev.GetMigMode(); ret {
		case nvml.ERROR_NOT_SUPPORTED:
		default:
			if check("MIG mode", ret) {
				g.MIG = MIGMode{Supported: true, Current: cur == nvml.DEVICE_MIG_ENABLE, Pending: pending == nvml.DEVICE_MIG_ENABLE}
			}
		}
	}
	g.Err = errors.Join(errs...)
	return g
}

// cString returns the NUL-terminated string at the start of b.
func cString(b []uint8) string {
	s := string(b)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return s
}

// Counter counts the GPUs of an initialized NVML for the hardware
// inventory, each count under a deadline. A count that outlives it (a hung
// driver) is left to finish on its own goroutine, and calls meanwhile wait
// on that same count rather than start another: a hung NVML holds one
// goroutine, never more, and CountGPUs returns within the deadline.
// (Where the GPU probe runs, its Monitor counts the GPUs instead, through
// its per-GPU workers.)
type Counter struct {
	lib     nvml.Interface
	timeout time.Duration

	mu      sync.Mutex
	running *countCall // the count in flight, nil when none
}

// countCall is one count that concurrent CountGPUs calls share.
type countCall struct {
	done  chan struct{}
	start time.Time
	gpus  []GPU
	err   error
}

// DefaultCountTimeout is how long the agent's inventory waits for NVML to
// count the GPUs where no GPU probe does it.
const DefaultCountTimeout = 10 * time.Second

// NewCounter returns a Counter of lib's GPUs whose counts wait at most
// timeout.
func NewCounter(lib nvml.Interface, timeout time.Duration) *Counter {
	return &Counter{lib: lib, timeout: timeout}
}

// CountGPUs counts the GPUs (GPUs) and names them in detail
// ("0:NVIDIA A100-SXM4-40GB, ..."). It fails when NVML cannot count them,
// or does not answer within the Counter's timeout.
func (c *Counter) CountGPUs(ctx context.Context) (int, string, error) {
	c.mu.Lock()
	call := c.running
	if call == nil {
		call = &countCall{done: make(chan struct{}), start: time.Now()}
		c.running = call
		go func() {
			call.gpus, call.err = GPUs(c.lib)
			c.mu.Lock()
			c.running = nil
			c.mu.Unlock()
			close(call.done)
		}()
	}
	c.mu.Unlock()
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-call.done:
		if call.err != nil {
			return 0, "", call.err
		}
		return len(call.gpus), GPUDetail(call.gpus), nil
	case <-t.C:
		return 0, "", fmt.Errorf("counting NVIDIA GPUs: NVML has not answered in %s (a hung driver?); that count goes on in the background and no other starts until it ends",
			time.Since(call.start).Round(time.Millisecond))
	case <-ctx.Done():
		return 0, "", fmt.Errorf("counting NVIDIA GPUs: %w", ctx.Err())
	}
}

// GPUDetail names gpus as "index:name", comma-separated.
func GPUDetail(gpus []GPU) string {
	names := make([]string, 0, len(gpus))
	for _, g := range gpus {
		names = append(names, fmt.Sprintf("%d:%s", g.Index, g.Name))
	}
	return strings.Join(names, ", ")
}
