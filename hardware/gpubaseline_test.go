package hardware

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/selftaint/selftaint/probes"
)

// pciTree writes devices (address -> vendor, class, driver) under a fake
// host root and returns it.
func pciTree(t *testing.T, devs map[string][3]string) probes.Host {
	t.Helper()
	root := t.TempDir()
	host := probes.Host{Root: root}
	for addr, d := range devs {
		dir := host.Sys("bus", "pci", "devices", addr)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"vendor": d[0], "device": "0x20b0", "class": d[1]} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if d[2] != "" {
			drv := filepath.Join(root, "sys", "bus", "pci", "drivers", d[2])
			if err := os.MkdirAll(drv, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(drv, filepath.Join(dir, "driver")); err != nil {
				t.Fatal(err)
			}
		}
	}
	return host
}

func TestNVIDIAGPUsOnPCI(t *testing.T) {
	tests := []struct {
		name string
		devs map[string][3]string
		want []string
	}{
		{"none", map[string][3]string{"0000:00:1f.0": {"0x8086", "0x060100", ""}}, nil},
		{"3D controllers bound to nvidia or to nothing", map[string][3]string{
			"0000:07:00.0": {"0x10de", "0x030200", "nvidia"},
			"0000:0f:00.0": {"0x10de", "0x030200", ""},
			"0000:03:00.0": {"0x10de", "0x030000", "nvidia"}, // VGA
		}, []string{"0000:03:00.0", "0000:07:00.0", "0000:0f:00.0"}},
		{"passed through to a VM, NVSwitch and audio left out", map[string][3]string{
			"0000:07:00.0": {"0x10de", "0x030200", "vfio-pci"},
			"0000:c4:00.0": {"0x10de", "0x068000", "nvidia-nvswitch"},
			"0000:03:00.1": {"0x10de", "0x040300", "snd_hda_intel"},
			"0000:0f:00.0": {"0x10de", "0x030200", "nvidia"},
		}, []string{"0000:0f:00.0"}},
		{"other vendors' 3D controllers", map[string][3]string{"0000:07:00.0": {"0x1002", "0x030200", "amdgpu"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NVIDIAGPUsOnPCI(pciTree(t, tt.devs))
			if err != nil {
				t.Fatalf("NVIDIAGPUsOnPCI: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := NVIDIAGPUsOnPCI(probes.Host{Root: t.TempDir()}); err == nil {
		t.Error("no /sys/bus/pci/devices: got no error, want one")
	}
}

func TestBootID(t *testing.T) {
	root := t.TempDir()
	host := probes.Host{Root: root}
	if _, err := BootID(host); err == nil {
		t.Error("missing boot_id: got no error")
	}
	p := host.Proc("sys", "kernel", "random", "boot_id")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("  \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := BootID(host); err == nil {
		t.Error("empty boot_id: got no error")
	}
	if err := os.WriteFile(p, []byte("5d1f0c2e-7a9b-4b8e-9d0a-1c2b3d4e5f60\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := BootID(host); err != nil || got != "5d1f0c2e-7a9b-4b8e-9d0a-1c2b3d4e5f60" {
		t.Errorf("got %q, %v", got, err)
	}
}
