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

// xidRecoveryActionChanged is Xid 154, "GPU Recovery Action Changed":
// its line names the recovery action the driver now asks for.
const xidRecoveryActionChanged = 154

// recoveryActionTo matches the new action in an Xid 154 line ("GPU
// recovery action changed from 0x0 (None) to 0x2 (Node Reboot
// Required)"): its number, else its name.
var recoveryActionTo = regexp.MustCompile(`(?i)\bto\s+(?:0x([0-9a-f]{1,8})\b)?\s*\(?\s*([a-z][a-z0-9 /-]*)?`)

// recoveryActionOfLine is the action for the recovery action an Xid 154
// line names, as the probe judges NVML's recovery action field: none
// (0x0) is ActionIgnore (the need went away: it fails nothing, and clears
// nothing either: the field going back to none is the reset that does);
// GPU reset (0x1), drain peer-to-peer traffic (0x3: the driver then names
// another action; held until the GPU is reset or its action is none),
// drain and reset (0x4) and PCIe bus reset (0x6) are ActionResetGPU; node
// reboot (0x2) and system reboot (0x7) ActionReboot. ok is false for a
// line that names no action this selftaint knows (the catalog's action
// then stands).
func recoveryActionOfLine(text string) (a Action, ok bool) {
	all := recoveryActionTo.FindAllStringSubmatch(text, -1)
	if len(all) == 0 {
		return "", false
	}
	m := all[len(all)-1] // "from ... to ...": the last "to" names the new one
	if m[1] != "" {
		n, err := strconv.ParseUint(m[1], 16, 32)
		if err == nil {
			switch n {
			case recoveryNone:
				return ActionIgnore, true
			case recoveryReset, recoveryDrainP2P, recoveryDrainReset, recoveryBusReset:
				return ActionResetGPU, true
			case recoveryReboot, recoverySystemReboot:
				return ActionReboot, true
			}
		}
	}
	name := strings.ToLower(strings.TrimSpace(m[2]))
	switch {
	case name == "":
		return "", false
	case strings.HasPrefix(name, "none"):
		return ActionIgnore, true
	case strings.Contains(name, "reboot"):
		return ActionReboot, true
	case strings.Contains(name, "reset") || strings.HasPrefix(name, "drain"):
		return ActionResetGPU, true
	}
	return "", false
}

// kernelXidInfo is how the Monitor judges a kernel Xid: by the catalog
// with config's overrides, but an Xid 154 whose line names the new
// recovery action (and that config does not override) by that action.
func (m *Monitor) kernelXidInfo(k KernelXid) XidInfo {
	info := m.catalog.Lookup(k.Xid)
	if k.Xid != xidRecoveryActionChanged || info.Overridden {
		return info
	}
	if a, ok := recoveryActionOfLine(k.Text); ok {
		info.Action = a
	}
	return info
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
	info := m.kernelXidInfo(k)
	if m.fileKernelXid(k, info) && info.Action.Fatal() {
		m.wakeFatal()
	}
}

// fileKernelXid files k, judged as info, and reports whether it did (not
// after Close, nor when NVML reported it: then the record NVML's event
// made takes the action k's line names where that is more severe, as NVML's
// events carry no action).
func (m *Monitor) fileKernelXid(k KernelXid, info XidInfo) bool {
	pci := normalizePCI(k.PCIBusID)
	now := m.now()
	at := now
	if !k.Time.IsZero() && !k.Time.After(now) {
		at = k.Time
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	if m.dedupe.heard(dedupeKey{pci: pci, xid: k.Xid}, fromKernel, now) {
		found, raised := m.raiseAction(pci, k.Xid, info.Action)
		if found || info.Action.Severity() <= m.catalog.Lookup(k.Xid).Action.Severity() {
			return raised
		}
		// NVML's record is gone (a recovery since): the line asks for
		// more than it did, and is filed.
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

// raiseAction gives the record of Xid xid that NVML's event made for the
// GPU at pci (held by the GPU NVML identified there, or its record kept
// since) action a where a is more severe than its own. It reports whether
// it found the record, and whether it raised its action. m.mu is held.
func (m *Monitor) raiseAction(pci string, xid uint64, a Action) (found, raised bool) {
	var lists []*[]xidRecord
	for _, g := range m.gpus {
		if g.pci == pci && g.rec != nil {
			lists = append(lists, &g.rec.Xids)
		}
	}
	for _, r := range m.records {
		if r.PCI == pci {
			lists = append(lists, &r.Xids)
		}
	}
	for _, l := range lists {
		for i := range *l {
			x := &(*l)[i]
			if x.Xid != xid {
				continue
			}
			found = true
			if a.Severity() > x.Action.Severity() {
				x.Action = a
				raised = true
			}
		}
	}
	return found, raised
}
