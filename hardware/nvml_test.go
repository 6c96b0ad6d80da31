package hardware

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/selftaint/selftaint/probes/probestest"
)

// newServer returns a mock DGX A100 whose GPUs report their PCI bus IDs
// (the stock mock leaves BusId empty).
func newServer() *dgxa100.Server {
	s := dgxa100.New()
	for _, d := range s.Devices {
		d := d.(*dgxa100.Device)
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: 0x20B010DE}
			copy(p.BusId[:], d.PciBusID)
			return p, nvml.SUCCESS
		}
	}
	return s
}

func device(s *dgxa100.Server, i int) *dgxa100.Device { return s.Devices[i].(*dgxa100.Device) }

func TestGPUsDGXA100(t *testing.T) {
	s := newServer()
	device(s, 2).MigMode = nvml.DEVICE_MIG_ENABLE
	gpus, err := GPUs(s)
	if err != nil {
		t.Fatalf("GPUs: %v", err)
	}
	if got, want := len(gpus), 8; got != want {
		t.Fatalf("got %d GPUs, want %d", got, want)
	}
	seen := map[string]bool{}
	for i, g := range gpus {
		d := device(s, i)
		want := GPU{
			Index:            i,
			UUID:             d.UUID,
			Name:             "Mock NVIDIA A100-SXM4-40GB",
			MemoryTotalBytes: 40 << 30,
			MIG:              MIGMode{Supported: true, Current: i == 2, Pending: i == 2},
			PCIBusID:         d.PciBusID,
		}
		if g != want {
			t.Errorf("got GPU %d %+v, want %+v", i, g, want)
		}
		if !strings.HasPrefix(g.UUID, "GPU-") || seen[g.UUID] {
			t.Errorf("got GPU %d UUID %q, want a unique GPU-... UUID", i, g.UUID)
		}
		seen[g.UUID] = true
	}
	if got, want := gpus[3].PCIBusID, "0000:03:00.0"; got != want {
		t.Errorf("got GPU 3 bus ID %q, want %q", got, want)
	}
}

func TestGPUsErrorOnOneGPU(t *testing.T) {
	s := newServer()
	device(s, 3).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	device(s, 3).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_UNKNOWN }
	device(s, 4).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	getHandle := s.DeviceGetHandleByIndexFunc
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 5 {
			return nil, nvml.ERROR_NO_PERMISSION
		}
		return getHandle(i)
	}
	gpus, err := GPUs(s)
	if err != nil {
		t.Fatalf("GPUs: %v", err)
	}
	if got, want := len(gpus), 8; got != want {
		t.Fatalf("got %d GPUs, want %d", got, want)
	}
	tests := []struct {
		index   int
		wantErr []string // substrings; nil: no error
		wantIs  error
	}{
		{0, nil, nil},
		{2, nil, nil},
		{3, []string{"GPU 3: reading UUID: ERROR_GPU_IS_LOST", "GPU 3: reading memory info: ERROR_UNKNOWN"}, nvml.ERROR_GPU_IS_LOST},
		{4, nil, nil}, // MIG not supported is not an error
		{5, []string{"GPU 5: getting handle: ERROR_NO_PERMISSION"}, nvml.ERROR_NO_PERMISSION},
		{7, nil, nil},
	}
	for _, tt := range tests {
		g := gpus[tt.index]
		if g.Index != tt.index {
			t.Errorf("got index %d, want %d", g.Index, tt.index)
		}
		if tt.wantErr == nil {
			if g.Err != nil || g.UUID != device(s, tt.index).UUID {
				t.Errorf("GPU %d: got UUID %q, error %v, want %q and no error", tt.index, g.UUID, g.Err, device(s, tt.index).UUID)
			}
			continue
		}
		for _, want := range tt.wantErr {
			probestest.CheckError(t, g.UUID, g.Err, want)
		}
		if !errors.Is(g.Err, tt.wantIs) {
			t.Errorf("GPU %d: got error %v, want it to wrap %v", tt.index, g.Err, tt.wantIs)
		}
	}
	// What could be read of GPU 3 still is.
	if got, want := gpus[3].Name, "Mock NVIDIA A100-SXM4-40GB"; got != want {
		t.Errorf("got GPU 3 name %q, want %q", got, want)
	}
	if got, want := gpus[4].MIG, (MIGMode{}); got != want {
		t.Errorf("got GPU 4 MIG %+v, want %+v", got, want)
	}
}

func TestGPUsMIGSymbolMissing(t *testing.T) {
	s := newServer()
	s.LookupSymbolFunc = func(name string) error {
		if name == "nvmlDeviceGetMigMode" {
			return errors.New("symbol not found")
		}
		return nil
	}
	for _, d := range s.Devices {
		d.(*dgxa100.Device).GetMigModeFunc = func() (int, int, nvml.Return) {
			t.Errorf("GetMigMode called although the driver lacks it")
			return 0, 0, nvml.ERROR_FUNCTION_NOT_FOUND
		}
	}
	gpus, err := GPUs(s)
	if err != nil {
		t.Fatalf("GPUs: %v", err)
	}
	for _, g := range gpus {
		if g.Err != nil || g.MIG.Supported {
			t.Errorf("GPU %d: got MIG %v, error %v, want not supported and no error", g.Index, g.MIG, g.Err)
		}
	}
}

func TestGPUsCountFails(t *testing.T) {
	s := newServer()
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	gpus, err := GPUs(s)
	probestest.CheckError(t, "GPUs", err, "counting NVIDIA GPUs: ERROR_UNKNOWN")
	if gpus != nil {
		t.Errorf("got GPUs %v, want none", gpus)
	}
}

func TestMIGModeString(t *testing.T) {
	tests := []struct {
		mode MIGMode
		want string
	}{
		{MIGMode{}, "not supported"},
		{MIGMode{Supported: true}, "disabled"},
		{MIGMode{Supported: true, Current: true, Pending: true}, "enabled"},
		{MIGMode{Supported: true, Pending: true}, "disabled (enabled after reset)"},
		{MIGMode{Supported: true, Current: true}, "enabled (disabled after reset)"},
	}
	for _, tt := range tests {
		if got := tt.mode.String(); got != tt.want {
			t.Errorf("got %+v.String() %q, want %q", tt.mode, got, tt.want)
		}
	}
}

func TestInitNVML(t *testing.T) {
	tests := []struct {
		name    string
		ret     nvml.Return
		wantErr string
		wantIs  []error
	}{
		{"success", nvml.SUCCESS, "", nil},
		{
			"library missing", nvml.ERROR_LIBRARY_NOT_FOUND,
			"NVIDIA management library (NVML) not found: loading /nowhere/libnvidia-ml.so.1: /nowhere/libnvidia-ml.so.1: cannot open shared object file",
			[]error{ErrNVMLNotFound, nvml.ERROR_LIBRARY_NOT_FOUND},
		},
		{
			"driver not loaded", nvml.ERROR_DRIVER_NOT_LOADED,
			"initializing NVML from /nowhere/libnvidia-ml.so.1: ERROR_DRIVER_NOT_LOADED",
			[]error{nvml.ERROR_DRIVER_NOT_LOADED},
		},
		{
			"no permission", nvml.ERROR_NO_PERMISSION,
			"initializing NVML from /nowhere/libnvidia-ml.so.1: ERROR_NO_PERMISSION",
			[]error{nvml.ERROR_NO_PERMISSION},
		},
	}
	for _, tt := range tests {
		// Only Init is mocked: any other call before a successful Init
		// panics.
		lib := &mock.Interface{InitFunc: func() nvml.Return { return tt.ret }}
		err := initNVML(lib, "/nowhere/libnvidia-ml.so.1")
		probestest.CheckError(t, tt.name, err, tt.wantErr)
		for _, want := range tt.wantIs {
			if !errors.Is(err, want) {
				t.Errorf("%s: got error %v, want it to wrap %v", tt.name, err, want)
			}
		}
		if tt.ret != nvml.ERROR_LIBRARY_NOT_FOUND && errors.Is(err, ErrNVMLNotFound) {
			t.Errorf("%s: got error %v wrapping ErrNVMLNotFound, want not", tt.name, err)
		}
	}
}

func TestShutdownNVML(t *testing.T) {
	for _, tt := range []struct {
		ret     nvml.Return
		wantErr string
	}{
		{nvml.SUCCESS, ""},
		{nvml.ERROR_UNINITIALIZED, "shutting down NVML: ERROR_UNINITIALIZED"},
	} {
		err := ShutdownNVML(&mock.Interface{ShutdownFunc: func() nvml.Return { return tt.ret }})
		probestest.CheckError(t, tt.ret.Error(), err, tt.wantErr)
	}
}
