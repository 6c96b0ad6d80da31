package hardware

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// counts renders a scan as "name=count[addr,addr]" terms, in order.
func counts(s PCIScan) string {
	var terms []string
	for _, r := range s.Resources {
		var addrs []string
		for _, d := range r.Devices {
			addrs = append(addrs, d.Address)
		}
		terms = append(terms, fmt.Sprintf("%s=%d%v", r.Name, r.Count(), addrs))
	}
	return strings.Join(terms, " ")
}

func TestScanPCI(t *testing.T) {
	fpga := PCIRule{Resource: "example.com/fpga", Vendor: "0x10ee", Class: "0x12"}
	tests := []struct {
		name    string
		fixture string
		rules   []PCIRule
		want    string   // counts(scan)
		wantErr []string // substrings of each device error, {root} for the host root; nil: none
	}{
		{
			name: "FPGAs counted by vendor and class, other Xilinx function, NIC and GPU not", fixture: "pci-mixed",
			rules: []PCIRule{fpga},
			want:  "example.com/fpga=2[0000:3b:00.0 0000:3c:00.0]",
		},
		{
			name: "device ID narrows the match", fixture: "pci-mixed",
			rules: []PCIRule{{Resource: "example.com/u50", Vendor: "0x10ee", Device: "0x5020"}},
			want:  "example.com/u50=1[0000:3b:00.0]",
		},
		{
			name: "vendor alone matches every function of the vendor", fixture: "pci-mixed",
			rules: []PCIRule{{Resource: "example.com/xilinx", Vendor: "10EE"}},
			want:  "example.com/xilinx=3[0000:3b:00.0 0000:3c:00.0 0000:3d:00.1]",
		},
		{
			name: "full class code", fixture: "pci-mixed",
			rules: []PCIRule{{Resource: "example.com/other", Vendor: "0x10ee", Class: "0x058000"}},
			want:  "example.com/other=1[0000:3d:00.1]",
		},
		{
			name: "class and subclass: 3D controller", fixture: "pci-mixed",
			rules: []PCIRule{{Resource: "example.com/gpu", Vendor: "0x10de", Class: "0x0302"}},
			want:  "example.com/gpu=1[0000:af:00.0]",
		},
		{
			name: "device behind a sysfs symlink", fixture: "pci-mixed",
			rules: []PCIRule{{Resource: "example.com/bridge", Vendor: "0x8086", Device: "0x1237", Class: "0x06"}},
			want:  "example.com/bridge=1[0000:00:00.0]",
		},
		{
			name: "first matching rule wins; every named resource listed, 0 included", fixture: "pci-mixed",
			rules: []PCIRule{
				{Resource: "example.com/u50", Vendor: "0x10ee", Device: "0x5020"},
				fpga,
				{Resource: "example.com/nic", Vendor: "0x15b3", Class: "0x03"}, // a NIC is not class 0x03
				{Resource: "example.com/fpga", Vendor: "0x10ee", Class: "0x05"},
			},
			want: "example.com/fpga=2[0000:3c:00.0 0000:3d:00.1] example.com/nic=0[] example.com/u50=1[0000:3b:00.0]",
		},
		{
			name: "garbage and missing files: errors name the file, good devices counted", fixture: "pci-garbage",
			rules: []PCIRule{fpga},
			want:  "example.com/fpga=1[0000:3b:00.0]",
			wantErr: []string{
				`parsing {root}/sys/bus/pci/devices/0000:3c:00.0/vendor: "banana" is not a 0x-prefixed hex number`,
				`reading PCI device 0000:3d:00.0: open {root}/sys/bus/pci/devices/0000:3d:00.0/class: no such file`,
				`parsing {root}/sys/bus/pci/devices/0000:3e:00.0/vendor: "" is not a 0x-prefixed hex number`,
			},
		},
		{
			name: "no PCI devices", fixture: "pci-empty",
			rules: []PCIRule{fpga},
			want:  "example.com/fpga=0[]",
		},
		{
			name: "no rules", fixture: "pci-mixed",
			want: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := loadFixture(t, tt.fixture)
			got, err := ScanPCI(host, tt.rules)
			if err != nil {
				t.Fatalf("ScanPCI: %v", err)
			}
			if c := counts(got); c != tt.want {
				t.Errorf("got %s, want %s", c, tt.want)
			}
			if len(got.Errors) != len(tt.wantErr) {
				t.Fatalf("got errors %v, want %d", got.Errors, len(tt.wantErr))
			}
			for i, want := range tt.wantErr {
				want = strings.ReplaceAll(want, "{root}", host.Root)
				if !strings.Contains(got.Errors[i].Error(), want) {
					t.Errorf("got error %d %q, want it to contain %q", i, got.Errors[i], want)
				}
			}
			if tt.wantErr != nil {
				if err := got.Err(); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("got Err() %v, want it to wrap fs.ErrNotExist for the missing class file", err)
				}
			}
		})
	}
}

func TestScanPCIDevices(t *testing.T) {
	got, err := ScanPCI(loadFixture(t, "pci-mixed"), []PCIRule{{Resource: "example.com/u50", Vendor: "0x10ee", Device: "0x5020"}})
	if err != nil {
		t.Fatal(err)
	}
	want := PCIDevice{Address: "0000:3b:00.0", Vendor: 0x10ee, Device: 0x5020, Class: 0x120000}
	if len(got.Resources) != 1 || len(got.Resources[0].Devices) != 1 || got.Resources[0].Devices[0] != want {
		t.Fatalf("got %+v, want one resource with device %+v", got.Resources, want)
	}
	if got, want := want.String(), "0000:3b:00.0 1200: 10ee:5020"; got != want {
		t.Errorf("got String() %q, want %q", got, want)
	}
	if got, want := got.Count("example.com/u50"), 1; got != want {
		t.Errorf("got Count(u50) %d, want %d", got, want)
	}
	if got, want := got.Count("example.com/other"), 0; got != want {
		t.Errorf("got Count(other) %d, want %d", got, want)
	}
}

func TestScanPCIFails(t *testing.T) {
	tests := []struct {
		name    string
		host    probes.Host
		rules   []PCIRule
		wantErr string
	}{
		{"no sysfs", probes.Host{Root: "testdata/does-not-exist"}, nil, "listing PCI devices: open testdata/does-not-exist/sys/bus/pci/devices: no such file"},
		{"invalid rule", loadFixture(t, "pci-mixed"), []PCIRule{{Resource: "fpga", Vendor: "0x10ee"}}, `rule 0: PCI rule for "fpga": resource name "fpga" must be domain-qualified`},
	}
	for _, tt := range tests {
		got, err := ScanPCI(tt.host, tt.rules)
		probestest.CheckError(t, tt.name, err, tt.wantErr)
		if err != nil && (got.Resources != nil || got.Errors != nil) {
			t.Errorf("%s: got scan %+v with the error, want none", tt.name, got)
		}
	}
}

func TestPCIRuleValidate(t *testing.T) {
	long := strings.Repeat("a", 63)
	// A valid domain of 250 bytes, too long with "requests." in front.
	domain250 := long + "." + long + "." + long + "." + strings.Repeat("a", 54) + ".com"
	tests := []struct {
		name    string
		rule    PCIRule
		wantErr string // "" for valid
	}{
		{"valid, vendor only", PCIRule{Resource: "example.com/fpga", Vendor: "0x10ee"}, ""},
		{"valid, all fields", PCIRule{Resource: "example.com/fpga", Vendor: "10ee", Device: "0x5020", Class: "0x120000"}, ""},
		{"valid, base class", PCIRule{Resource: "example.com/fpga", Vendor: "0x10ee", Class: "0x12"}, ""},
		{"valid, class and subclass", PCIRule{Resource: "example.com/fpga", Vendor: "0x10ee", Class: "0x1200"}, ""},
		{"resource missing", PCIRule{Vendor: "0x10ee"}, "resource name is required"},
		{"resource not qualified", PCIRule{Resource: "fpga", Vendor: "0x10ee"}, `"fpga" must be domain-qualified`},
		{"resource in kubernetes.io", PCIRule{Resource: "kubernetes.io/fpga", Vendor: "0x10ee"}, "reserved for Kubernetes"},
		{"resource in a kubernetes.io subdomain", PCIRule{Resource: "fpga.kubernetes.io/x", Vendor: "0x10ee"}, "reserved for Kubernetes"},
		{"resource with requests. prefix", PCIRule{Resource: "requests.example.com/fpga", Vendor: "0x10ee"}, `must not start with "requests."`},
		{"resource bad characters", PCIRule{Resource: "example.com/f pga", Vendor: "0x10ee"}, "name part must consist of alphanumeric characters"},
		{"resource bad domain", PCIRule{Resource: "Example_com/fpga", Vendor: "0x10ee"}, "prefix part"},
		{"resource name part too long", PCIRule{Resource: "example.com/" + long + "a", Vendor: "0x10ee"}, "name part must be no more than 63 bytes"},
		{"resource too long for quota", PCIRule{Resource: domain250 + "/x", Vendor: "0x10ee"}, "too long for a resource quota"},
		{"vendor missing", PCIRule{Resource: "example.com/fpga"}, "vendor is required"},
		{"vendor not hex", PCIRule{Resource: "example.com/fpga", Vendor: "xilinx"}, `vendor: "xilinx" is not a hex number of 1 to 4 digits`},
		{"vendor too long", PCIRule{Resource: "example.com/fpga", Vendor: "0x10ee0"}, "vendor: "},
		{"vendor just 0x", PCIRule{Resource: "example.com/fpga", Vendor: "0x"}, "vendor: "},
		{"device not hex", PCIRule{Resource: "example.com/fpga", Vendor: "0x10ee", Device: "0xzz"}, `device: "0xzz"`},
		{"class odd digits", PCIRule{Resource: "example.com/fpga", Vendor: "0x10ee", Class: "0x120"}, "must have 2, 4 or 6 hex digits"},
		{"class too long", PCIRule{Resource: "example.com/fpga", Vendor: "0x10ee", Class: "0x12000000"}, "class: "},
		{"all problems reported", PCIRule{Resource: "fpga", Vendor: "x", Device: "y", Class: "z"}, "e.g. example.com/fpga\nvendor: \"x\" is not a hex number of 1 to 4 digits\ndevice: \"y\" is not a hex number of 1 to 4 digits\nclass: \"z\""},
	}
	for _, tt := range tests {
		probestest.CheckError(t, tt.name, tt.rule.Validate(), tt.wantErr)
	}
}

func TestValidatePCIRules(t *testing.T) {
	ok := PCIRule{Resource: "example.com/fpga", Vendor: "0x10ee"}
	probestest.CheckError(t, "valid, resource named twice", ValidatePCIRules([]PCIRule{ok, ok}), "")
	probestest.CheckError(t, "none", ValidatePCIRules(nil), "")
	err := ValidatePCIRules([]PCIRule{ok, {Resource: "fpga", Vendor: "0x10ee"}, {Resource: "example.com/x"}})
	probestest.CheckError(t, "second and third invalid", err, `rule 1: PCI rule for "fpga"`)
	probestest.CheckError(t, "second and third invalid", err, `rule 2: PCI rule for "example.com/x": vendor is required`)
}
