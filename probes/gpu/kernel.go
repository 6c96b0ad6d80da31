package gpu

import (
	"regexp"
	"slices"
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

// XidDedupeWindow is how far apart the kernel's line and NVML's event of
// one Xid may reach the Monitor and still count as one Xid.
//
// The driver prints the line and posts the event for the same error, from
// the same handler, within microseconds; what parts them here is how each
// reaches the agent: the NVML event waits up to Config.EventWait (at most
// 5s) in the watcher's wait, the line waits for the log reader, and both
// for the scheduler of a loaded node. 30s covers that with room to spare.
// A longer window costs little: occurrences pair one to one (one line
// with one event, never one line with two events), so two real
// occurrences of the same Xid on the same GPU that both channels report
// still count two; only an occurrence that one channel missed and the
// other reported can pair with a later one of the other channel within
// the window, and then the count is short by one, never the Xid lost (a
// fatal Xid is held until a recovery whatever its count).
const XidDedupeWindow = 30 * time.Second

// maxPendingXids bounds the occurrences a dedupe keeps per GPU, Xid and
// channel, and maxDedupeKeys the (GPU, Xid) pairs it keeps, so a storm
// costs bounded memory (beyond them the oldest pairs are forgotten: an
// Xid may then count twice, never zero times).
const (
	maxPendingXids = 64
	maxDedupeKeys  = 1024
)

// xidChannel is where an Xid was heard.
type xidChannel int

const (
	fromNVML xidChannel = iota
	fromKernel
)

// dedupeKey is one Xid on one GPU (by PCI address).
type dedupeKey struct {
	pci string
	xid uint64
}

// xidDedupe pairs the Xids one channel reports with those the other
// reported within XidDedupeWindow, so an Xid both report counts once.
// Its times are the Monitor's clock when each was heard. Guarded by the
// Monitor's mu.
type xidDedupe struct {
	// pending are the occurrences not paired yet, oldest first, by
	// channel.
	pending map[dedupeKey]*[2][]time.Time
}

// heard says whether the occurrence of k heard on ch at now is one the
// other channel already reported (it pairs with the oldest of those still
// in the window, which is then used up); else it waits for its pair.
func (d *xidDedupe) heard(k dedupeKey, ch xidChannel, now time.Time) (dup bool) {
	if d.pending == nil {
		d.pending = map[dedupeKey]*[2][]time.Time{}
	}
	p := d.pending[k]
	if p == nil {
		if len(d.pending) >= maxDedupeKeys {
			d.expire(now)
		}
		if len(d.pending) >= maxDedupeKeys {
			clear(d.pending)
		}
		p = &[2][]time.Time{}
		d.pending[k] = p
	}
	for c := range p {
		p[c] = inWindow(p[c], now)
	}
	other := 1 - ch
	if len(p[other]) > 0 {
		p[other] = p[other][1:]
		if len(p[0]) == 0 && len(p[1]) == 0 {
			delete(d.pending, k)
		}
		return true
	}
	if len(p[ch]) >= maxPendingXids {
		p[ch] = p[ch][1:]
	}
	p[ch] = append(p[ch], now)
	return false
}

// expire forgets the occurrences out of the window.
func (d *xidDedupe) expire(now time.Time) {
	for k, p := range d.pending {
		p[0], p[1] = inWindow(p[0], now), inWindow(p[1], now)
		if len(p[0]) == 0 && len(p[1]) == 0 {
			delete(d.pending, k)
		}
	}
}

// inWindow drops the times older than XidDedupeWindow before now (a time
// after now, from a clock stepped back, is kept).
func inWindow(ts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) > XidDedupeWindow {
		i++
	}
	return ts[i:]
}

// KernelXid files an Xid the kernel log reported (see ParseNVRMXid), as
// recordEvent files NVML's: judged by the same catalog with config's
// overrides (Xids, SkipXids), a fatal one held under its GPU until a
// recovery, another one noted in the GPU's readings. Its GPU is the one
// with its PCI address, else a record kept from before a restart with it;
// when none has it, the Xid is the node's (a stray record naming the PCI
// address, filed under its GPU once one is identified with it). An Xid
// NVML also reported for the same GPU within XidDedupeWindow counts once.
//
// It makes no NVML call and waits for none, so it files the Xid, and the
// fatal probe reports it, while NVML hangs: the kernel's Xid 79 is not
// hidden by the hang it causes. A fatal Xid it files wakes the fatal
// probe (see Watch). Safe for concurrent use; after Close it does
// nothing.
func (m *Monitor) KernelXid(k KernelXid) {
	if m.fileKernelXid(k) && m.catalog.Lookup(k.Xid).Action.Fatal() {
		m.wakeFatal()
	}
}

// fileKernelXid files k and reports whether it did (not after Close, nor
// when NVML reported it).
func (m *Monitor) fileKernelXid(k KernelXid) bool {
	info := m.catalog.Lookup(k.Xid)
	pci := normalizePCI(k.PCIBusID)
	now := m.now()
	at := now
	if !k.Time.IsZero() && !k.Time.After(now) {
		at = k.Time
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.dedupe.heard(dedupeKey{pci: pci, xid: k.Xid}, fromKernel, now) {
		return false
	}
	x := xidRecord{Xid: k.Xid, Action: info.Action, Name: info.Name, seq: m.tick()}
	var g *gpuState
	if i := slices.IndexFunc(m.gpus, func(g *gpuState) bool { return g.pci == pci }); i >= 0 && pci != "" {
		g = m.gpus[i]
	}
	switch {
	case !info.Action.Fatal() && g != nil:
		g.minor = addXid(g.minor, x, at)
	case !info.Action.Fatal():
	case g != nil:
		g.record().Xids = addXid(g.record().Xids, x, at)
	default:
		for _, rec := range m.records {
			if rec.PCI == pci {
				rec.Xids = addXid(rec.Xids, x, at)
				return true
			}
		}
		x.PCI = pci
		m.stray = addXid(m.stray, x, at)
	}
	return true
}
