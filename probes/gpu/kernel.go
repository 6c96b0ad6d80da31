package gpu

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// KernelXid is an Xid the NVIDIA kernel driver printed to the kernel log
// (an "NVRM: Xid" line), for the Monitor to judge beside NVML's Xid events
// (Monitor.KernelXid). The kernel log is the channel that still talks
// when NVML hangs: an Xid 79 (GPU fallen off the bus) is printed there
// whatever NVML does.
type KernelXid struct {
	// Time is when the line was logged; zero: when the Monitor is told.
	// ParseNVRMXid leaves it zero (a kmsg timestamp counts from boot):
	// the log reader sets it.
	Time time.Time
	// PCIBusID is the GPU's PCI address as the probe writes it
	// ("0000:3b:00.0", see normalizePCI).
	PCIBusID string
	Xid      uint64
	// Text is what the driver said after the Xid's number.
	Text string
}

// nvrmXid matches the Xid lines of NVIDIA's drivers:
//
//	NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
//	NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception ...
//	NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.   (older drivers)
//
// anywhere in the line, so kmsg and syslog prefixes ("<3>", "[12345.678] ",
// "kernel: ") do not matter. The domain is 4 hex digits, 8 as NVML writes
// it, or 5 for a VMD domain; a function, where a driver prints one, is
// kept. Anything after the number (nothing, with some drivers) is Text.
var nvrmXid = regexp.MustCompile(`NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): ([0-9]{1,20})(?:,\s*(.*?))?\s*$`)

// ParseNVRMXid parses an NVRM Xid line of the kernel log into a KernelXid
// (Time zero: the caller knows when the line was logged). It reports false
// for any other line, NVRM's other lines included, and for an Xid number
// that does not fit in 64 bits.
func ParseNVRMXid(line string) (KernelXid, bool) {
	m := nvrmXid.FindStringSubmatch(line)
	if m == nil {
		return KernelXid{}, false
	}
	xid, err := strconv.ParseUint(m[2], 10, 64)
	if err != nil {
		return KernelXid{}, false
	}
	return KernelXid{PCIBusID: kernelPCI(m[1]), Xid: xid, Text: strings.TrimSpace(m[3])}, true
}

// kernelPCI writes a bus id the driver printed ("0000:3b:00", no
// function: a GPU's Xids are its function 0's) as the probe writes PCI
// addresses.
func kernelPCI(id string) string {
	if !strings.Contains(id, ".") {
		id += ".0"
	}
	return normalizePCI(id)
}
