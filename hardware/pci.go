package hardware

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/selftaint/selftaint/probes"
)

// PCIRule says which PCI devices make up one extended resource. A device
// matches when its vendor ID equals Vendor and, where set, its device ID
// equals Device and its class code matches Class.
type PCIRule struct {
	// Resource is the extended resource the matching devices are counted
	// as, e.g. "example.com/fpga". It must be domain-qualified and not in
	// the kubernetes.io namespace.
	Resource string `json:"resource"`
	// Vendor is the PCI vendor ID in hex, e.g. "0x10ee" (Xilinx).
	// Required.
	Vendor string `json:"vendor"`
	// Device is the PCI device ID in hex, e.g. "0x5020". Empty matches any
	// device of the vendor.
	Device string `json:"device,omitempty"`
	// Class matches the PCI class code by prefix: 2 hex digits give the
	// base class ("0x12": processing accelerators), 4 add the subclass
	// ("0x0302": 3D controllers), 6 add the programming interface
	// ("0x120000"). Empty matches any class.
	Class string `json:"class,omitempty"`
}

// pciMatcher is a validated PCIRule.
type pciMatcher struct {
	resource  string
	vendor    uint16
	device    uint16
	anyDevice bool
	class     uint32 // compared under classMask
	classMask uint32 // 0 matches any class
}

func (m pciMatcher) matches(d PCIDevice) bool {
	return d.Vendor == m.vendor &&
		(m.anyDevice || d.Device == m.device) &&
		d.Class&m.classMask == m.class
}

// Validate reports every problem with r.
func (r PCIRule) Validate() error {
	_, err := r.compile()
	return err
}

func (r PCIRule) compile() (pciMatcher, error) {
	m := pciMatcher{resource: r.Resource, anyDevice: r.Device == ""}
	var errs []error
	if err := ValidateResourceName(r.Resource); err != nil {
		errs = append(errs, err)
	}
	if r.Vendor == "" {
		errs = append(errs, errors.New("vendor is required"))
	} else if v, err := parseHexID(r.Vendor, 4); err != nil {
		errs = append(errs, fmt.Errorf("vendor: %w", err))
	} else {
		m.vendor = uint16(v)
	}
	if r.Device != "" {
		if v, err := parseHexID(r.Device, 4); err != nil {
			errs = append(errs, fmt.Errorf("device: %w", err))
		} else {
			m.device = uint16(v)
		}
	}
	if r.Class != "" {
		digits := len(strings.TrimPrefix(strings.ToLower(r.Class), "0x"))
		if v, err := parseHexID(r.Class, 6); err != nil {
			errs = append(errs, fmt.Errorf("class: %w", err))
		} else if digits%2 != 0 {
			errs = append(errs, fmt.Errorf("class: %q must have 2, 4 or 6 hex digits (base class, subclass, programming interface)", r.Class))
		} else {
			shift := uint(4 * (6 - digits))
			m.class = uint32(v) << shift
			m.classMask = 0xffffff << shift & 0xffffff
		}
	}
	if err := errors.Join(errs...); err != nil {
		return pciMatcher{}, fmt.Errorf("PCI rule for %q: %w", r.Resource, err)
	}
	return m, nil
}

// ValidateResourceName reports whether name can be advertised as an
// extended resource (and used as the key of the matching taint): a
// domain-qualified name such as "example.com/fpga", outside the
// kubernetes.io namespace, that stays a valid qualified name with the
// "requests." prefix resource quotas add. These are the API server's rules
// for extended resource names.
func ValidateResourceName(name string) error {
	switch {
	case name == "":
		return errors.New("resource name is required")
	case !strings.Contains(name, "/"):
		return fmt.Errorf("resource name %q must be domain-qualified, e.g. example.com/%s", name, name)
	case strings.Contains(name, "kubernetes.io/"):
		return fmt.Errorf("resource name %q is in the kubernetes.io namespace, which is reserved for Kubernetes' own resources", name)
	case strings.HasPrefix(name, "requests."):
		return fmt.Errorf("resource name %q must not start with \"requests.\"", name)
	}
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		return fmt.Errorf("resource name %q: %s", name, strings.Join(errs, "; "))
	}
	if errs := validation.IsQualifiedName("requests." + name); len(errs) > 0 {
		return fmt.Errorf("resource name %q is too long for a resource quota (requests.%s): %s", name, name, strings.Join(errs, "; "))
	}
	return nil
}

// ValidatePCIRules reports every problem with rules. Several rules may name
// the same resource; a device is counted for the first rule it matches.
func ValidatePCIRules(rules []PCIRule) error {
	_, err := compileRules(rules)
	return err
}

func compileRules(rules []PCIRule) ([]pciMatcher, error) {
	ms := make([]pciMatcher, len(rules))
	var errs []error
	for i, r := range rules {
		m, err := r.compile()
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i, err))
		}
		ms[i] = m
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ms, nil
}

// parseHexID parses s, a hex number with an optional 0x prefix of at most
// maxDigits digits, the way sysfs writes PCI IDs ("0x10de").
func parseHexID(s string, maxDigits int) (uint64, error) {
	digits := strings.TrimPrefix(strings.ToLower(s), "0x")
	if digits == "" || len(digits) > maxDigits {
		return 0, fmt.Errorf("%q is not a hex number of 1 to %d digits", s, maxDigits)
	}
	v, err := strconv.ParseUint(digits, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a hex number of 1 to %d digits", s, maxDigits)
	}
	return v, nil
}

// PCIDevice is one PCI function as sysfs shows it.
type PCIDevice struct {
	// Address is the device's PCI address, e.g. "0000:3b:00.0".
	Address string `json:"address"`
	Vendor  uint16 `json:"vendor"`
	Device  uint16 `json:"device"`
	// Class is the 24-bit class code: base class, subclass, programming
	// interface.
	Class uint32 `json:"class"`
}

// String formats d like lspci -n: "0000:3b:00.0 1200: 10ee:5020".
func (d PCIDevice) String() string {
	return fmt.Sprintf("%s %04x: %04x:%04x", d.Address, d.Class>>8, d.Vendor, d.Device)
}

// Resource is one extended resource and the devices that make it up.
type Resource struct {
	Name string `json:"name"`
	// Devices are the matched devices, in address order.
	Devices []PCIDevice `json:"devices"`
}

// Count is how many of the resource the node has.
func (r Resource) Count() int { return len(r.Devices) }

// PCIScan is what ScanPCI found.
type PCIScan struct {
	// Resources has one entry per resource named by a rule, in name
	// order, including those with no devices: a count of 0 is news too.
	Resources []Resource `json:"resources"`
	// Errors are the devices that could not be read, each naming the
	// file; those devices are not counted, the others are.
	Errors []error `json:"-"`
}

// Count returns the count of the named resource, 0 when no rule names it.
func (s PCIScan) Count(resource string) int {
	for _, r := range s.Resources {
		if r.Name == resource {
			return r.Count()
		}
	}
	return 0
}

// Err joins Errors, nil when every device was read.
func (s PCIScan) Err() error { return errors.Join(s.Errors...) }

// ScanPCI reads every device in the host's /sys/bus/pci/devices and counts
// those the rules match; each device counts for the first rule it matches.
// It fails only when the rules are invalid or the directory cannot be
// listed; a device whose vendor, device or class file is missing or garbage
// is reported in the scan's Errors and the others are still counted.
func ScanPCI(host probes.Host, rules []PCIRule) (PCIScan, error) {
	ms, err := compileRules(rules)
	if err != nil {
		return PCIScan{}, err
	}
	dir := host.Sys("bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return PCIScan{}, fmt.Errorf("listing PCI devices: %w", err)
	}
	byName := make(map[string]*Resource)
	var scan PCIScan
	for _, m := range ms {
		if byName[m.resource] == nil {
			byName[m.resource] = &Resource{Name: m.resource, Devices: []PCIDevice{}}
		}
	}
	for _, e := range entries { // ReadDir sorts by name, i.e. address
		d, err := readPCIDevice(filepath.Join(dir, e.Name()))
		if err != nil {
			scan.Errors = append(scan.Errors, err)
			continue
		}
		for _, m := range ms {
			if m.matches(d) {
				r := byName[m.resource]
				r.Devices = append(r.Devices, d)
				break
			}
		}
	}
	for _, r := range byName {
		scan.Resources = append(scan.Resources, *r)
	}
	slices.SortFunc(scan.Resources, func(a, b Resource) int { return strings.Compare(a.Name, b.Name) })
	return scan, nil
}

// readPCIDevice reads the IDs of the device whose sysfs directory is dir.
func readPCIDevice(dir string) (PCIDevice, error) {
	d := PCIDevice{Address: filepath.Base(dir)}
	for _, f := range []struct {
		name   string
		digits int
		set    func(uint64)
	}{
		{"vendor", 4, func(v uint64) { d.Vendor = uint16(v) }},
		{"device", 4, func(v uint64) { d.Device = uint16(v) }},
		{"class", 6, func(v uint64) { d.Class = uint32(v) }},
	} {
		path := filepath.Join(dir, f.name)
		data, err := os.ReadFile(path)
		if err != nil {
			return PCIDevice{}, fmt.Errorf("reading PCI device %s: %w", d.Address, err)
		}
		s := strings.TrimSpace(string(data))
		if len(s) > 32 { // garbage; too long to be an ID anyway
			s = s[:32] + "..."
		}
		if !strings.HasPrefix(s, "0x") {
			return PCIDevice{}, fmt.Errorf("parsing %s: %q is not a 0x-prefixed hex number", path, s)
		}
		v, err := parseHexID(s, f.digits)
		if err != nil {
			return PCIDevice{}, fmt.Errorf("parsing %s: %w", path, err)
		}
		f.set(v)
	}
	return d, nil
}

// NVIDIAVendor is NVIDIA's PCI vendor ID.
const NVIDIAVendor = 0x10de

// NVIDIAGPUsOnPCI lists the PCI addresses of the NVIDIA GPUs on the host's
// PCI bus: devices of vendor 0x10de whose class is a display controller
// (VGA 0x0300 or 3D 0x0302), in address order. A device bound to a driver
// other than nvidia (vfio-pci for a GPU passed to a virtual machine) is
// handed to something else on purpose and is left out: NVML will not see
// it. NVSwitches (class 0x0680) are not GPUs. It is the GPU probe's
// baseline: a GPU listed here that NVML does not see is lost.
func NVIDIAGPUsOnPCI(host probes.Host) ([]string, error) {
	scan, err := ScanPCI(host, []PCIRule{
		{Resource: "nvidia.com/vga", Vendor: "0x10de", Class: "0x0300"},
		{Resource: "nvidia.com/3d", Vendor: "0x10de", Class: "0x0302"},
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range scan.Resources {
		for _, d := range r.Devices {
			driver, err := os.Readlink(host.Sys("bus", "pci", "devices", d.Address, "driver"))
			if err == nil && filepath.Base(driver) != "nvidia" {
				continue
			}
			out = append(out, d.Address)
		}
	}
	slices.Sort(out)
	// A device whose IDs are unreadable is left out (the inventory reports
	// it): one odd device must not make the GPU probe blind.
	return out, nil
}

// BootID reads the host's boot ID, which changes at every boot.
func BootID(host probes.Host) (string, error) {
	b, err := os.ReadFile(host.Proc("sys", "kernel", "random", "boot_id"))
	if err != nil {
		return "", fmt.Errorf("reading the boot ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("reading the boot ID: %s is empty", host.Proc("sys", "kernel", "random", "boot_id"))
	}
	return id, nil
}
