package gpu

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// snapshot is what one run read: the GPUs' state at one moment, with what
// the Monitor kept from earlier runs and restarts.
type snapshot struct {
	cfg Config
	at  time.Time
	// driverErr: NVML is not usable (did not start, driver went away).
	driverErr error
	countErr  error
	pciErr    error
	// watchErr: Xid events cannot be trusted (the wait fails or hangs).
	watchErr error
	count    int
	expected int
	pciGPUs  int
	// pciScanned: the PCI bus was listed this run (onBus of missing means
	// something).
	pciScanned bool
	missing    []missingGPU
	// kept is the last successful count, when this run's failed: missing
	// is its.
	kept  *lastCount
	stray []xidRecord
	gpus  []gpuView
	// orphans are records kept from before a restart whose GPU has not
	// been seen since.
	orphans []gpuRecord
	// seq is the Monitor's seq when the read took its records: what was
	// filed after (an Xid that woke a run) is not in it.
	seq uint64
}

// missingGPU is an expected GPU NVML does not see.
type missingGPU struct {
	pci   string
	onBus bool // still on the PCI bus
}

// gpuView is one GPU in a snapshot.
type gpuView struct {
	index     int
	uuid, pci string
	mig       bool
	// unreadable: nothing could be read (no handle, hung before the first
	// signal, driver gone).
	unreadable error
	hung       error // the read's deadline passed in this call
	lost       error // a call said the GPU is lost or needs a reset
	healthy    bool
	sigs       map[string]sigRead
	v          values
	xid        sigRead
	xids       []xidRecord
	minor      []xidRecord
	findings   map[string][]finding
}

func (g gpuView) label() string { return gpuLabel(g.index, g.uuid) }

func gpuLabel(index int, uuid string) string {
	if uuid == "" {
		return fmt.Sprintf("GPU %d", index)
	}
	return fmt.Sprintf("GPU %d (%s)", index, uuid)
}

// signalsOf lists the signals each probe judges, in message order.
func signalsOf(probe string) []string {
	if probe == NameFatal {
		return []string{sigXid, sigRecovery, sigECC, sigRemap, sigNVLink, sigFabric}
	}
	return []string{sigRemap, sigRetired, sigNVLink, sigFabric, sigPCIe, sigECCMode, sigInfoROM, sigClocks, sigThermal, sigPower}
}

// reasonOrder ranks each probe's reasons, worst first.
func reasonOrder(probe string) []string {
	if probe == NameFatal {
		return []string{ReasonDriverUnavailable, ReasonGPULost, ReasonGPUFailure, ReasonGPURebootRequired, ReasonGPUResetRequired,
			ReasonGPUDrainP2P, ReasonUncorrectableECC, ReasonRowRemapFailure, ReasonNVLinkDown, ReasonFabricNotReady}
	}
	return []string{ReasonRowRemapPending, ReasonRetiredPagesPending, ReasonFabricDegraded, ReasonNVLinkErrors, ReasonPCIeDegraded,
		ReasonECCDisabled, ReasonInfoROMCorrupted, ReasonHardwareSlowdown, ReasonThermalViolation, ReasonPowerViolation}
}

// problem is one thing a probe found wrong.
type problem struct {
	reason string
	text   string
}

// verdict collects what a probe run found, and turns it into a Result.
type verdict struct {
	probe    string
	problems []problem
	unknown  []string // what could not be read
	read     int      // GPUs whose signals of this probe were all read or not available
	checked  map[string]int
	na       map[string]string
	naGPUs   map[string][]string // the GPUs a signal is not available on
	readings []probes.Reading
}

func (v *verdict) problem(reason, format string, args ...any) {
	v.problems = append(v.problems, problem{reason, fmt.Sprintf(format, args...)})
}

// judge turns a snapshot into the probe's Result.
func judge(s *snapshot, probe string) probes.Result {
	v := &verdict{probe: probe, checked: map[string]int{}, na: map[string]string{}, naGPUs: map[string][]string{}}
	v.readings = countReadings(s)
	switch {
	case probe == NameFatal:
		v.nodeLevel(s)
	case s.driverErr != nil:
		v.unknown = append(v.unknown, s.driverErr.Error())
	case s.countErr != nil:
		v.unknown = append(v.unknown, s.countErr.Error())
	case s.count == 0 && s.expected > 0:
		// The fatal probe says GPULost: "no GPUs found, none degraded"
		// beside it would be a verdict on nothing.
		v.unknown = append(v.unknown, fmt.Sprintf("NVML sees no GPU, the node has %d: nothing to judge", s.expected))
	}
	for _, g := range s.gpus {
		v.gpu(s, g)
	}
	for _, o := range s.orphans {
		v.orphan(o)
	}
	return v.result(s)
}

// nodeLevel judges what is about the node, not one GPU.
func (v *verdict) nodeLevel(s *snapshot) {
	switch {
	case s.driverErr != nil && (s.pciGPUs > 0 || s.expected > 0):
		n := max(s.pciGPUs, s.expected)
		v.problem(ReasonDriverUnavailable, "the NVIDIA driver is unavailable on a node with %d NVIDIA GPU(s): %v; retrying with backoff", n, s.driverErr)
	case s.driverErr != nil:
		v.unknown = append(v.unknown, s.driverErr.Error())
	case s.countErr != nil:
		v.unknown = append(v.unknown, s.countErr.Error())
	}
	if s.pciErr != nil {
		v.unknown = append(v.unknown, s.pciErr.Error())
	}
	if s.driverErr == nil {
		v.lost(s)
	}
	if len(s.stray) > 0 {
		a := worstAction(s.stray)
		v.problem(a.Reason(), "a GPU NVML did not identify: %s; %s", describeXids(s.stray), a.Advice())
	}
}

// lost judges the count of the GPUs against what the node should have.
// With expectedGPUs set, that count is all that matters: NVML counting
// fewer is GPULost, naming the GPUs (by PCI address) it does not see;
// else each expected GPU (on the PCI bus, or seen before) NVML does not
// see is GPULost.
func (v *verdict) lost(s *snapshot) {
	kept := ""
	n, counted, sees := s.count, s.countErr == nil, "sees"
	if s.kept != nil {
		kept = " (at its last count; kept while NVML cannot count the GPUs)"
		n, counted, sees = s.kept.count, true, "saw"
	}
	if s.cfg.ExpectedGPUs > 0 {
		if counted && n < s.cfg.ExpectedGPUs {
			v.problem(ReasonGPULost, "NVML %s %d GPUs, the node has %d (expectedGPUs)%s%s", sees, n, s.cfg.ExpectedGPUs, notSeen(s.missing), kept)
		}
		return
	}
	for _, mg := range s.missing {
		switch {
		case mg.onBus:
			v.problem(ReasonGPULost, "the GPU at PCI %s is on the PCI bus but NVML does not see it%s", mg.pci, kept)
		case s.pciScanned:
			v.problem(ReasonGPULost, "the GPU at PCI %s, seen before, is gone from NVML and the PCI bus%s", mg.pci, kept)
		default:
			v.problem(ReasonGPULost, "the GPU at PCI %s, seen before, is gone from NVML%s", mg.pci, kept)
		}
	}
	if len(s.missing) == 0 && counted && n < s.expected {
		v.problem(ReasonGPULost, "NVML %s %d GPUs, the node has %d%s", sees, n, s.expected, kept)
	}
}

// notSeen names the missing GPUs: "; not seen: PCI 0000:07:00.0 (on the
// PCI bus), ...".
func notSeen(missing []missingGPU) string {
	if len(missing) == 0 {
		return ""
	}
	parts := make([]string, len(missing))
	for i, mg := range missing {
		parts[i] = "PCI " + mg.pci
		if mg.onBus {
			parts[i] += " (on the PCI bus)"
		}
	}
	return "; not seen: " + strings.Join(parts, ", ")
}

// gpu judges one GPU.
func (v *verdict) gpu(s *snapshot, g gpuView) {
	if v.probe == NameFatal && len(g.xids) > 0 {
		reason, message := xidProblem(g.label(), g.xids)
		v.problem(reason, "%s", message)
	}
	v.findings(g.label(), g.findings, g.sigs, g.unreadable != nil)
	complete := true
	switch {
	case g.unreadable != nil:
		if g.unreadable != s.driverErr { // the driver's error is told once
			v.unknown = append(v.unknown, g.label()+": "+g.unreadable.Error())
		}
		complete = false
	default:
		for _, sig := range signalsOf(v.probe) {
			sr, read := g.sigs[sig]
			if sig == sigXid {
				sr, read = g.xid, true
			}
			switch {
			case !read:
				v.unknown = append(v.unknown, fmt.Sprintf("%s: %s not read: %v", g.label(), sig, g.hung))
				complete = false
			case sr.err != nil && sig == sigXid && s.watchErr != nil && sr.err == s.watchErr:
				complete = false // noted once below
			case sr.err != nil:
				v.unknown = append(v.unknown, g.label()+": "+sr.err.Error())
				complete = false
			case sr.na != "":
				v.na[sig] = sr.na
				v.naGPUs[sig] = append(v.naGPUs[sig], g.label())
			default:
				v.checked[sig]++
			}
		}
	}
	if complete {
		v.read++
	}
	v.readings = append(v.readings, probes.Reading{Name: "gpu" + strconv.Itoa(g.index), Value: gpuValue(g, v.probe)})
}

// findings adds the findings of this probe. A finding whose signal was not
// read this run is kept and says so.
func (v *verdict) findings(label string, fs map[string][]finding, sigs map[string]sigRead, unreadable bool) {
	keys := make([]string, 0, len(fs))
	for k := range fs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, sig := range keys {
		for _, f := range fs[sig] {
			if f.Probe != v.probe {
				continue
			}
			text := f.Text
			if sr, ok := sigs[sig]; sig != "lost" && (unreadable || !ok || !sr.ok()) {
				text += fmt.Sprintf(" (found at %s; kept while the %s cannot be read)", stamp(f.Since), sig)
			}
			v.problem(f.Reason, "%s: %s", label, text)
		}
	}
}

// orphan judges a kept record whose GPU has not been seen since the
// agent started or the driver was reloaded.
func (v *verdict) orphan(o gpuRecord) {
	label := fmt.Sprintf("GPU %s (last seen as index %d, before the agent restarted or the driver reloaded; not seen since)", o.key(), o.Index)
	if v.probe == NameFatal && len(o.Xids) > 0 {
		reason, message := xidProblem(label, o.Xids)
		v.problem(reason, "%s", message)
	}
	v.findings(label, o.Findings, nil, true)
}

// result returns the Result: Problem if anything was found; else Unknown
// if anything could not be read; else OK naming what was checked.
func (v *verdict) result(s *snapshot) probes.Result {
	res := probes.Result{Readings: v.readings}
	order := reasonOrder(v.probe)
	switch {
	case len(v.problems) > 0:
		res.Status = probes.StatusProblem
		rank := func(p problem) int {
			if i := slices.Index(order, p.reason); i >= 0 {
				return i
			}
			return len(order)
		}
		slices.SortStableFunc(v.problems, func(a, b problem) int { return cmp.Compare(rank(a), rank(b)) })
		res.Reason = v.problems[0].reason
		texts := make([]string, 0, len(v.problems)+len(v.unknown))
		for _, p := range v.problems {
			texts = append(texts, p.text)
		}
		res.Message = strings.Join(append(texts, v.unreadNotes(s)...), "; ")
	case len(v.unknown) > 0 || v.probe == NameFatal && s.watchErr != nil && len(s.gpus) > 0:
		res.Status, res.Reason = probes.StatusUnknown, ReasonReadError
		res.Message = fmt.Sprintf("no problem found, but %d of %d GPUs could not be read completely: %s",
			len(s.gpus)-v.read, len(s.gpus), strings.Join(v.unreadNotes(s), "; "))
		if len(s.gpus) == 0 {
			res.Message = "no problem found, but " + strings.Join(v.unreadNotes(s), "; ")
		}
	default:
		res.Status = probes.StatusOK
		res.Reason = ReasonGPUsHealthy
		if v.probe == NameDegraded {
			res.Reason = ReasonGPUsNotDegraded
		}
		if len(s.gpus) > 0 && !v.checkedAny() {
			res.Reason = ReasonNoSignals
		}
		res.Message = v.okMessage(s)
	}
	return res
}

// checkedAny says a signal of the probe was read on some GPU.
func (v *verdict) checkedAny() bool {
	for _, n := range v.checked {
		if n > 0 {
			return true
		}
	}
	return false
}

// unreadNotes are the reads that failed, the Xid watcher's once.
func (v *verdict) unreadNotes(s *snapshot) []string {
	notes := slices.Clone(v.unknown)
	if s.watchErr != nil && v.probe == NameFatal {
		notes = append(notes, s.watchErr.Error())
	}
	return notes
}

// okMessage names what was checked and what is not available.
func (v *verdict) okMessage(s *snapshot) string {
	if len(s.gpus) == 0 {
		return "no NVIDIA GPUs found"
	}
	what := "healthy"
	if v.probe == NameDegraded {
		what = "not degraded"
	}
	var checked, na []string
	for _, sig := range signalsOf(v.probe) {
		switch {
		case v.checked[sig] > 0:
			checked = append(checked, v.describeCheck(s, sig))
			if gpus := v.naGPUs[sig]; len(gpus) > 0 { // checked on the others only
				na = append(na, fmt.Sprintf("%s on %s (%s)", sig, strings.Join(gpus, ", "), v.na[sig]))
			}
		case v.na[sig] != "":
			na = append(na, sig+" ("+v.na[sig]+")")
		}
	}
	msg := fmt.Sprintf("%s %s; checked: %s", countGPUs(len(s.gpus)), what, strings.Join(checked, ", "))
	if len(checked) == 0 {
		about := "healthy"
		if v.probe == NameDegraded {
			about = "degraded"
		}
		msg = fmt.Sprintf("%s present; the driver offers none of the signals, so nothing says whether they are %s", countGPUs(len(s.gpus)), about)
	}
	if len(na) > 0 {
		msg += "; not available: " + strings.Join(na, ", ")
	}
	return msg
}

// describeCheck names a checked signal with its limit.
func (v *verdict) describeCheck(s *snapshot, sig string) string {
	cfg := s.cfg
	switch sig {
	case sigECC:
		return fmt.Sprintf("%s (at most %d)", sig, cfg.ECCUncorrectedAbove)
	case sigClocks:
		return fmt.Sprintf("hardware slowdown (at most %v%% of %v)", cfg.SlowdownPercent, cfg.window())
	case sigThermal:
		return fmt.Sprintf("%s (at most %v%%)", sig, cfg.ThermalViolationPercent)
	case sigPower:
		return fmt.Sprintf("%s (at most %v%%)", sig, cfg.PowerViolationPercent)
	}
	return sig
}

// countReadings are the readings on GPU counts both probes start with.
func countReadings(s *snapshot) []probes.Reading {
	switch {
	case s.driverErr != nil:
		return []probes.Reading{{Name: "gpus", Value: "driver unavailable"}, {Name: "gpus_expected", Value: strconv.Itoa(max(s.expected, s.pciGPUs))}}
	case s.countErr != nil:
		return []probes.Reading{{Name: "gpus", Value: "unreadable"}, {Name: "gpus_expected", Value: strconv.Itoa(s.expected)}}
	case s.count != s.expected:
		return []probes.Reading{{Name: "gpus", Value: strconv.Itoa(s.count)}, {Name: "gpus_expected", Value: strconv.Itoa(s.expected)}}
	}
	return []probes.Reading{{Name: "gpus", Value: strconv.Itoa(s.count)}}
}

// gpuValue is a GPU's reading for the probe: its UUID and the state of
// each signal.
func gpuValue(g gpuView, probe string) string {
	uuid := g.uuid
	if uuid == "" {
		uuid = "UUID unknown"
	}
	if g.unreadable != nil {
		return uuid + ": unreadable"
	}
	var terms []string
	for _, sig := range signalsOf(probe) {
		sr, ok := g.sigs[sig]
		if sig == sigXid {
			sr, ok = g.xid, true
		}
		switch {
		case !ok:
			terms = append(terms, sig+" not read")
		case sr.err != nil:
			terms = append(terms, sig+" unreadable")
		case sr.na != "":
			terms = append(terms, sig+" n/a")
		default:
			terms = append(terms, sig+" "+sigValue(g, sig))
		}
	}
	if probe == NameFatal {
		if len(g.xids) > 0 {
			terms = append(terms, "fatal xid "+shortXids(g.xids))
		}
		if len(g.minor) > 0 {
			terms = append(terms, "other xid "+shortXids(g.minor))
		}
	}
	return uuid + ": " + strings.Join(terms, ", ")
}

// sigValue is a read signal's value in a reading.
func sigValue(g gpuView, sig string) string {
	v := g.v
	switch sig {
	case sigXid:
		return "watched"
	case sigRecovery:
		return strconv.FormatUint(v.recovery, 10)
	case sigECC:
		return strconv.FormatUint(v.ecc, 10)
	case sigRemap:
		return fmt.Sprintf("pending %s failed %s", yesNo(v.remapPending), yesNo(v.remapFailed))
	case sigNVLink:
		up := 0
		for _, l := range v.links {
			if l.up {
				up++
			}
		}
		return fmt.Sprintf("%d/%d up", up, len(v.links))
	case sigPCIe:
		return fmt.Sprintf("gen%d x%d (max gen%d x%d)", v.pcieGen, v.pcieWidth, v.pcieMaxGen, v.pcieMaxWidth)
	case sigClocks:
		if names := slowdownNames(v.clockReasons); len(names) > 0 {
			return strings.Join(names, "+")
		}
		return "no slowdown"
	case sigRetired:
		return "pending " + yesNo(v.retiredPending)
	case sigECCMode:
		return "enabled " + yesNo(v.eccCurrent)
	case sigInfoROM:
		return "valid " + yesNo(!v.inforomBad)
	}
	return "ok"
}

// xidProblem is the fatal probe's problem for the fatal Xids a GPU (named
// by label) raised: the worst action's reason, and a message naming them
// and what to do, e.g. "GPU 0: Xid 79 (GPU has fallen off the bus) at
// 2026-11-23T12:00:00Z; reboot the node". XidInfo.Problem says the same of
// one Xid.
func xidProblem(label string, xids []xidRecord) (reason, message string) {
	a := worstAction(xids)
	return a.Reason(), fmt.Sprintf("%s: %s; %s", label, describeXids(xids), a.Advice())
}

// describeXids says which Xids were seen, how often and when.
func describeXids(l []xidRecord) string {
	parts := make([]string, len(l))
	for i, x := range l {
		parts[i] = x.describe()
	}
	return strings.Join(parts, ", ")
}

// shortXids lists Xids and counts for readings: "79 x2, 48 x1".
func shortXids(l []xidRecord) string {
	var parts []string
	for _, x := range l {
		parts = append(parts, fmt.Sprintf("%d x%d", x.Xid, x.Count))
	}
	return strings.Join(parts, ", ")
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func countGPUs(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return strconv.Itoa(n) + " GPUs"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
