package hardware

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestOpenNVMLBadLibrary runs everywhere: loading a library that is not
// there, or is not a library, must be an error and never take the process
// down.
func TestOpenNVMLBadLibrary(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.so")
	if err := os.WriteFile(garbage, []byte("not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "libnvidia-ml.so.1")
	tests := []struct {
		name    string
		path    string
		wantErr []string
	}{
		{"missing", missing, []string{"NVIDIA management library (NVML) not found: loading " + missing + ": " + missing + ": cannot open shared object file: No such file or directory"}},
		{"not a library", garbage, []string{"loading " + garbage + ": " + garbage + ": ", "ERROR_LIBRARY_NOT_FOUND"}},
	}
	for _, tt := range tests {
		lib, err := OpenNVML(tt.path)
		if err == nil {
			t.Fatalf("%s: OpenNVML(%s) succeeded, want an error", tt.name, tt.path)
		}
		for _, want := range tt.wantErr {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: got error %q, want it to contain %q", tt.name, err, want)
			}
		}
		if !errors.Is(err, ErrNVMLNotFound) || !errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
			t.Errorf("%s: got error %v, want it to wrap ErrNVMLNotFound and ERROR_LIBRARY_NOT_FOUND", tt.name, err)
		}
		if lib != nil {
			t.Errorf("%s: got a library with the error, want nil", tt.name)
		}
	}
}

// notRunWithoutGPU skips: a GPU is hardware, not something CI can install.
// A GPU runner sets SELFTAINT_EXPECT_GPU=1, and then no GPU is a failure.
func notRunWithoutGPU(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("SELFTAINT_EXPECT_GPU") == "1" {
		t.Fatalf("SELFTAINT_EXPECT_GPU=1 but %s", why)
	}
	t.Skipf("not run: %s (set SELFTAINT_EXPECT_GPU=1 on a GPU machine to make this a failure)", why)
}

// TestRealNVML reads the real GPUs where there are some.
func TestRealNVML(t *testing.T) {
	lib, err := OpenNVML("")
	if errors.Is(err, ErrNVMLNotFound) || errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
		notRunWithoutGPU(t, fmt.Sprintf("no NVIDIA driver library / GPU on this machine (%v)", err))
	}
	if err != nil {
		t.Fatalf("OpenNVML: %v", err)
	}
	gpus, gpusErr := GPUs(lib)
	if gpusErr != nil {
		t.Errorf("GPUs: %v", gpusErr)
	}
	if err := ShutdownNVML(lib); err != nil {
		t.Errorf("ShutdownNVML: %v", err)
	}
	if gpusErr == nil && len(gpus) == 0 {
		notRunWithoutGPU(t, "the NVIDIA driver sees no GPU on this machine")
	}
	for _, g := range gpus {
		t.Logf("GPU %d: %s %s, %d bytes, bus %s, MIG %s", g.Index, g.UUID, g.Name, g.MemoryTotalBytes, g.PCIBusID, g.MIG)
		if g.Err != nil {
			t.Errorf("GPU %d: %v", g.Index, g.Err)
		}
		if !strings.HasPrefix(g.UUID, "GPU-") || g.Name == "" || g.MemoryTotalBytes == 0 || g.PCIBusID == "" {
			t.Errorf("GPU %d: got %+v, want a GPU- UUID, a name, memory and a bus ID", g.Index, g)
		}
	}
}
