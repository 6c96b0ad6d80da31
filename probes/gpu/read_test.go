package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestNormalizePCI(t *testing.T) {
	tests := []struct{ in, want string }{
		{"00000000:07:00.0", "0000:07:00.0"}, // NVML
		{"0000:07:00.0", "0000:07:00.0"},     // sysfs
		{"0000:B7:00.0", "0000:b7:00.0"},
		{"00000001:BD:00.0", "0001:bd:00.0"},
		{" 0000:07:00.0\n", "0000:07:00.0"},
		{"1:07:00.0", "0001:07:00.0"},
		{"00010000:3b:00.0", "10000:3b:00.0"}, // a VMD domain, as NVML writes it
		{"10000:3b:00.0", "10000:3b:00.0"},    // and as sysfs does
		{"00000000:3b:00.0", "0000:3b:00.0"},  // not the same GPU as the VMD one
		{"07:00.0", "07:00.0"},                // no domain: left as it is
		{"", ""},
	}
	for _, tt := range tests {
		if got := normalizePCI(tt.in); got != tt.want {
			t.Errorf("normalizePCI(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPCIAddress(t *testing.T) {
	var info nvml.PciInfo
	copy(info.BusId[:], "00000000:4E:00.0")
	if got, want := pciAddress(info), "0000:4e:00.0"; got != want {
		t.Errorf("pciAddress = %q, want %q", got, want)
	}
}

func TestBackoff(t *testing.T) {
	for _, tt := range []struct {
		failures int
		want     string
	}{{1, "5s"}, {2, "10s"}, {3, "20s"}, {7, "5m0s"}, {100, "5m0s"}} {
		if got := backoff(tt.failures).String(); got != tt.want {
			t.Errorf("backoff(%d) = %s, want %s", tt.failures, got, tt.want)
		}
	}
}
