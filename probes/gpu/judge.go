package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/selftaint/selftaint/probes"
)

// snapshot is what one probe run read: the GPUs' state at one moment.
type snapshot struct {
	startCount int
	count      int   // GPUs NVML sees now; valid when countErr is nil
	countErr   error // counting failed
	strayXids  xidLog
	eventsErr  error // draining Xid events failed; the xid signal of every watched GPU carries it
	gpus       []gpuReading
	cfg        Config
}

// signal is how reading one health signal of one GPU went: read when both
// fields are empty.
type signal struct {
	na  string // not available on this GPU or driver: why
	err error  // could not be read
}

func (s signal) read() bool { return s.na == "" && s.err == nil }

// value describes the signal for readings: ok when it was read.
func (s signal) value(ok string) string {
	switch {
	case s.err != nil:
		return "unreadable"
	case s.na != "":
		return "n/a (" + s.na + ")"
	}
	return ok
}

// gpuReading is one GPU's state in a snapshot.
type gpuReading struct {
	index int
	uuid  string
	// lost is the error of the call that found the GPU lost or needing a
	// reset; nil when none did.
	lost error

	xid           signal
	xids, skipped xidLog

	ecc      signal
	eccCount uint64

	retired        signal
	retiredPending bool

	remap                     signal
	remapCorr, remapUnc       int
	remapPending, remapFailed bool

	clocks       signal
	clockReasons uint64
}

// label names the GPU in messages: "GPU 3 (GPU-5d5b...)".
func (r gpuReading) label() string { return gpuLabel(r.index, r.uuid) }

func gpuLabel(index int, uuid string) string {
	if uuid == "" {
		return fmt.Sprintf("GPU %d", index)
	}
	return fmt.Sprintf("GPU %d (%s)", index, uuid)
}

// isLost reports whether ret says the GPU is gone until reset.
func isLost(ret nvml.Return) bool {
	return ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_RESET_REQUIRED
}

// refresh drains pending Xid events and reads every GPU once.
func (m *Monitor) refresh(ctx context.Context) (*snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("the GPU monitor is closed")
	}
	s := &snapshot{startCount: m.startCount, cfg: m.cfg}
	// Retry what failed before first, so events find their GPU.
	opened := make([]nvml.Return, len(m.gpus))
	for i, g := range m.gpus {
		opened[i] = m.open(g)
	}
	s.eventsErr = m.drain(ctx)
	n, ret := m.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		s.countErr = fmt.Errorf("counting GPUs: %w", ret)
	}
	s.count = n
	for i, g := range m.gpus {
		s.gpus = append(s.gpus, m.poll(g, opened[i], s.eventsErr))
	}
	s.strayXids = slices.Clone(m.strayXids)
	return s, nil
}

// drain records the Xid events that are waiting, until a wait times out.
// It returns the error of a wait that failed otherwise.
func (m *Monitor) drain(ctx context.Context) error {
	if m.events == nil {
		return nil
	}
	ms := m.cfg.eventWaitMillis()
	for range maxEventsPerRun {
		if ctx.Err() != nil {
			return nil // the run is over; the events wait for the next
		}
		ev, ret := m.events.Wait(ms)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			return nil
		default:
			return fmt.Errorf("waiting for Xid events: %w", ret)
		}
		if ev.EventType&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		at, g := m.now(), m.gpuFor(ev.Device)
		switch {
		case m.skip[ev.EventData] && g != nil:
			g.skipped.add(ev.EventData, at)
		case m.skip[ev.EventData]:
		case g == nil:
			m.strayXids.add(ev.EventData, at)
		default:
			g.xids.add(ev.EventData, at)
		}
	}
	return nil
}

// poll reads g's counters. opened is what opening g returned this run,
// eventsErr the error of draining events.
func (m *Monitor) poll(g *gpuState, opened nvml.Return, eventsErr error) gpuReading {
	r := gpuReading{index: g.index, uuid: g.uuid, xids: slices.Clone(g.xids), skipped: slices.Clone(g.skipped)}
	if opened != nvml.SUCCESS {
		r.failOpen(opened)
		return r
	}
	r.xid, r.lost = xidSignal(g, eventsErr)
	m.readCounters(&r, g.handle)
	return r
}

// failOpen marks every signal of r unreadable because opening the GPU
// returned ret, and the GPU lost when ret says so.
func (r *gpuReading) failOpen(ret nvml.Return) {
	err := fmt.Errorf("getting handle: %w", ret)
	if isLost(ret) {
		r.lost = err
	}
	r.xid.err, r.ecc.err, r.retired.err, r.remap.err, r.clocks.err = err, err, err, err, err
}

// xidSignal says whether g's Xid events can be trusted this run: they
// cannot when draining failed (eventsErr) or g is not watched. It also
// returns the registration error when that found the GPU lost.
func xidSignal(g *gpuState, eventsErr error) (sig signal, lost error) {
	switch {
	case g.watched && eventsErr != nil:
		return signal{err: eventsErr}, nil
	case g.watched:
		return signal{}, nil
	case g.watchNA != "":
		return signal{na: g.watchNA}, nil
	}
	if errors.Is(g.watchErr, nvml.ERROR_GPU_IS_LOST) || errors.Is(g.watchErr, nvml.ERROR_RESET_REQUIRED) {
		lost = g.watchErr
	}
	return signal{err: g.watchErr}, lost
}

// check records in sig how reading what went, and in r.lost the first
// call that found the GPU lost, and reports success.
func (r *gpuReading) check(sig *signal, what string, ret nvml.Return) bool {
	switch ret {
	case nvml.SUCCESS:
		return true
	case nvml.ERROR_NOT_SUPPORTED:
		sig.na = "not supported"
	default:
		sig.err = fmt.Errorf("reading %s: %w", what, ret)
		if isLost(ret) && r.lost == nil {
			r.lost = sig.err
		}
	}
	return false
}

// lacks is the reason a signal is not available when the driver does not
// have the function sym.
func lacks(sym string) string { return "driver lacks " + sym }

// readCounters reads the ECC, retired page, remapped row and clock
// signals of the GPU h into r.
func (m *Monitor) readCounters(r *gpuReading, h nvml.Device) {
	if !m.hasECC {
		r.ecc.na = lacks(symTotalEccErrors)
	} else if v, ret := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); r.check(&r.ecc, "uncorrectable ECC errors", ret) {
		r.eccCount = v
	}
	if !m.hasRetired {
		r.retired.na = lacks(symRetiredPagesPending)
	} else if v, ret := h.GetRetiredPagesPendingStatus(); r.check(&r.retired, "retired pages pending status", ret) {
		r.retiredPending = v == nvml.FEATURE_ENABLED
	}
	if !m.hasRemap {
		r.remap.na = lacks(symRemappedRows)
	} else if corr, unc, pending, failed, ret := h.GetRemappedRows(); r.check(&r.remap, "remapped rows", ret) {
		r.remapCorr, r.remapUnc, r.remapPending, r.remapFailed = corr, unc, pending, failed
	}
	switch {
	case m.cfg.IgnoreSlowdown:
		r.clocks.na = "not checked"
	case m.clockReasons == nil:
		r.clocks.na = lacks(symClocksEventReasons)
	default:
		if v, ret := m.clockReasons(h); r.check(&r.clocks, "clock event reasons", ret) {
			r.clockReasons = v
		}
	}
}

// problem is one thing a probe found wrong.
type problem struct {
	reason string
	text   string
}

// verdict collects what a probe run found, and turns it into a Result.
type verdict struct {
	problems   []problem
	notes      []string // signals that could not be read
	unreadable int      // GPUs none of whose signals could be read
	gpus       int      // GPUs judged
	shared     error    // an error many GPUs' signals carry, noted once rather than per GPU
	readings   []probes.Reading
}

func (v *verdict) problem(reason, format string, args ...any) {
	v.problems = append(v.problems, problem{reason, fmt.Sprintf(format, args...)})
}

// noteUnread notes the signals of r that could not be read, and counts r
// as unreadable when none of them was read.
func (v *verdict) noteUnread(r gpuReading, sigs ...signal) {
	read, failed := false, false
	for _, s := range sigs {
		read = read || s.read()
		if s.err != nil {
			failed = true
			if s.err == v.shared {
				continue
			}
			if !slices.Contains(v.notes, r.label()+": "+s.err.Error()) {
				v.notes = append(v.notes, r.label()+": "+s.err.Error())
			}
		}
	}
	if failed && !read {
		v.unreadable++
	}
}

// result returns the Result: Problem if anything was found, Unknown if no
// GPU could be read, else OK with okMessage, in which %s stands for the
// GPUs judged ("8 GPUs", "7 of 8 GPUs"). order ranks the reasons.
func (v *verdict) result(order []string, okReason, okMessage string) probes.Result {
	res := probes.Result{Readings: v.readings}
	switch {
	case len(v.problems) > 0:
		res.Status = probes.StatusProblem
		best := len(order)
		var texts []string
		for _, p := range v.problems {
			if i := slices.Index(order, p.reason); i >= 0 && i < best {
				best = i
			}
			texts = append(texts, p.text)
		}
		res.Reason = order[min(best, len(order)-1)]
		res.Message = strings.Join(append(texts, v.notes...), "; ")
	case v.gpus > 0 && v.unreadable == v.gpus:
		res.Status, res.Reason = probes.StatusUnknown, ReasonReadError
		res.Message = "no GPU could be read: " + strings.Join(v.notes, "; ")
	default:
		res.Status, res.Reason = probes.StatusOK, okReason
		judged := countGPUs(v.gpus)
		if v.unreadable > 0 {
			judged = fmt.Sprintf("%d of %d GPUs", v.gpus-v.unreadable, v.gpus)
		}
		if v.gpus == 0 {
			okMessage = "no NVIDIA GPUs found"
		}
		res.Message = strings.Join(append([]string{fmt.Sprintf(okMessage, judged)}, v.notes...), "; ")
	}
	return res
}

// fatalOrder ranks the fatal probe's reasons.
func fatalOrder() []string {
	return []string{ReasonGPULost, ReasonGPUResetRequired, ReasonXidError, ReasonUncorrectableECC, ReasonRowRemapFailure}
}

// degradedOrder ranks the degraded probe's reasons.
func degradedOrder() []string {
	return []string{ReasonRowRemapPending, ReasonRetiredPagesPending, ReasonHardwareSlowdown}
}

func judgeFatal(s *snapshot) probes.Result {
	v := &verdict{gpus: len(s.gpus), shared: s.eventsErr}
	v.readings = countReadings(s)
	if s.eventsErr != nil {
		v.notes = append(v.notes, s.eventsErr.Error())
	}
	switch {
	case s.countErr != nil && errors.Is(s.countErr, nvml.ERROR_GPU_IS_LOST):
		v.problem(ReasonGPULost, "%v", s.countErr)
	case s.countErr != nil:
		v.notes = append(v.notes, s.countErr.Error())
		if len(s.gpus) == 0 {
			return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: s.countErr.Error(), Readings: v.readings}
		}
	case s.count < s.startCount:
		v.problem(ReasonGPULost, "NVML sees %d GPUs, %d at start: a GPU fell off the bus", s.count, s.startCount)
	}
	if len(s.strayXids) > 0 {
		v.problem(ReasonXidError, "a GPU NVML did not identify: %s", describeXids(s.strayXids, "critical "))
	}
	for _, r := range s.gpus {
		var summary []string
		if r.lost != nil {
			reason, what := ReasonGPULost, "is lost (fell off the bus)"
			if errors.Is(r.lost, nvml.ERROR_RESET_REQUIRED) {
				reason, what = ReasonGPUResetRequired, "requires a reset"
			}
			v.problem(reason, "%s %s: %v", r.label(), what, r.lost)
			summary = append(summary, "lost")
		}
		if len(r.xids) > 0 {
			v.problem(ReasonXidError, "%s: %s; the GPU needs a reset", r.label(), describeXids(r.xids, "critical "))
			summary = append(summary, "xid "+shortXids(r.xids))
		} else {
			summary = append(summary, "xid "+r.xid.value("none"))
		}
		if len(r.skipped) > 0 {
			summary = append(summary, "skipped xid "+shortXids(r.skipped))
		}
		if r.lost != nil {
			v.readings = append(v.readings, probes.Reading{Name: "gpu" + strconv.Itoa(r.index), Value: gpuValue(r, summary)})
			continue // its counters are unreadable, and say nothing new
		}
		if r.ecc.read() && r.eccCount > s.cfg.ECCUncorrectedAbove {
			v.problem(ReasonUncorrectableECC, "%s: %d volatile uncorrectable ECC errors, above %d", r.label(), r.eccCount, s.cfg.ECCUncorrectedAbove)
		}
		if r.remap.read() && r.remapFailed {
			v.problem(ReasonRowRemapFailure, "%s: row remapping failed (%d rows remapped for uncorrectable errors); the GPU has no spare rows left", r.label(), r.remapUnc)
		}
		summary = append(summary,
			"uncorrectable ECC "+r.ecc.value(strconv.FormatUint(r.eccCount, 10)),
			"row remap failure "+r.remap.value(yesNo(r.remapFailed)))
		v.readings = append(v.readings, probes.Reading{Name: "gpu" + strconv.Itoa(r.index), Value: gpuValue(r, summary)})
		v.noteUnread(r, r.xid, r.ecc, r.remap)
	}
	ok := "%s healthy: no critical Xid, uncorrectable ECC errors at most " + strconv.FormatUint(s.cfg.ECCUncorrectedAbove, 10) + ", no row remapping failure"
	return v.result(fatalOrder(), ReasonGPUsHealthy, ok)
}

func judgeDegraded(s *snapshot) probes.Result {
	v := &verdict{gpus: len(s.gpus)}
	v.readings = countReadings(s)
	if s.countErr != nil && len(s.gpus) == 0 {
		return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: s.countErr.Error(), Readings: v.readings}
	}
	for _, r := range s.gpus {
		name := "gpu" + strconv.Itoa(r.index)
		if r.lost != nil {
			v.notes = append(v.notes, fmt.Sprintf("%s is lost (see the %s probe): %v", r.label(), NameFatal, r.lost))
			v.unreadable++
			v.readings = append(v.readings, probes.Reading{Name: name, Value: gpuValue(r, []string{"lost"})})
			continue
		}
		if r.remap.read() && r.remapPending {
			v.problem(ReasonRowRemapPending, "%s: row remapping pending (%d rows remapped for uncorrectable, %d for correctable errors); it takes effect at the next GPU reset", r.label(), r.remapUnc, r.remapCorr)
		}
		if r.retired.read() && r.retiredPending {
			v.problem(ReasonRetiredPagesPending, "%s: retired memory pages pending; they take effect at the next GPU reset", r.label())
		}
		slowdown := "none"
		if r.clocks.read() {
			var names []string
			for _, sr := range slowdownReasons() {
				if r.clockReasons&sr.bit != 0 {
					names = append(names, sr.name)
				}
			}
			if len(names) > 0 {
				slowdown = strings.Join(names, ", ")
				v.problem(ReasonHardwareSlowdown, "%s: clocks held down by %s", r.label(), slowdown)
			}
		}
		v.readings = append(v.readings, probes.Reading{Name: name, Value: gpuValue(r, []string{
			"retired pages pending " + r.retired.value(yesNo(r.retiredPending)),
			"row remap pending " + r.remap.value(yesNo(r.remapPending)),
			"slowdown " + r.clocks.value(slowdown),
		})})
		sigs := []signal{r.retired, r.remap}
		if !s.cfg.IgnoreSlowdown {
			sigs = append(sigs, r.clocks)
		}
		v.noteUnread(r, sigs...)
	}
	ok := "%s not degraded: no page retirement or row remapping pending"
	if !s.cfg.IgnoreSlowdown {
		ok += ", no hardware slowdown"
	}
	return v.result(degradedOrder(), ReasonGPUsNotDegraded, ok)
}

// countReadings are the readings on GPU counts both probes start with.
func countReadings(s *snapshot) []probes.Reading {
	switch {
	case s.countErr != nil:
		return []probes.Reading{{Name: "gpus", Value: "unreadable"}, {Name: "gpus_at_start", Value: strconv.Itoa(s.startCount)}}
	case s.count != s.startCount:
		return []probes.Reading{{Name: "gpus", Value: strconv.Itoa(s.count)}, {Name: "gpus_at_start", Value: strconv.Itoa(s.startCount)}}
	}
	return []probes.Reading{{Name: "gpus", Value: strconv.Itoa(s.count)}}
}

// gpuValue is a GPU's reading: its UUID and the summary terms.
func gpuValue(r gpuReading, terms []string) string {
	uuid := r.uuid
	if uuid == "" {
		uuid = "UUID unknown"
	}
	return uuid + ": " + strings.Join(terms, ", ")
}

// describeXids says which Xids were seen, how often and when.
func describeXids(l xidLog, kind string) string {
	var parts []string
	for _, x := range l {
		if x.count == 1 {
			parts = append(parts, fmt.Sprintf("%sXid %d at %s", kind, x.xid, stamp(x.first)))
			continue
		}
		parts = append(parts, fmt.Sprintf("%sXid %d %d times, first at %s, last at %s", kind, x.xid, x.count, stamp(x.first), stamp(x.last)))
	}
	return strings.Join(parts, ", ")
}

// shortXids lists Xids and counts for readings: "79 x2, 48 x1".
func shortXids(l xidLog) string {
	var parts []string
	for _, x := range l {
		parts = append(parts, fmt.Sprintf("%d x%d", x.xid, x.count))
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
