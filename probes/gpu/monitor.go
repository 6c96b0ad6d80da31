package gpu

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Backoff of NVML start-up attempts: from openBackoffMin, doubling to
// openBackoffMax.
const (
	openBackoffMin = 5 * time.Second
	openBackoffMax = 5 * time.Minute
)

// gpuState is what the Monitor keeps about one GPU (by NVML index) across
// runs; rec is the part kept across restarts, and what follows the GPU
// (by UUID, else PCI address) when NVML's indices change.
type gpuState struct {
	index  int
	w      *worker
	handle nvml.Device // nil until got
	// reacquire: handle is dead or may be (a call on it failed to name
	// the GPU, or said it is lost): the next read gets a new one by index.
	reacquire bool
	uuid      string
	pci       string
	mig       bool
	// watched: registered for Xid events; else watch says why not.
	watched bool
	watch   sigRead
	rec     *gpuRecord
	// minor are the Xids seen that need no action on the GPU.
	minor []xidRecord
	hist  map[string]history
	// actionSeen: the driver's recovery action was not none.
	actionSeen bool
	// gap: the GPU was registered on an event set that was replaced, and
	// that set may not have been read out: its Xids are not trusted until
	// it is (closeGap).
	gap bool
	// healthy: the GPU's last read was complete and found no failure but
	// its Xids (see healthyRead).
	healthy bool
}

// read reads every GPU once and returns what the probes judge.
func (m *Monitor) read(ctx context.Context) (*snapshot, error) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	rctx, cancel := m.readContext(ctx)
	defer cancel()
	now := m.now()

	run := runInput{at: now}
	run.pci, run.pciErr = m.scanPCI()
	run.driverErr = m.ensureNVML(rctx, now)
	if run.driverErr == nil {
		// A count that hangs may take half the run's time, not all of
		// it: the GPUs already known are read in the other half.
		cctx, ccancel := halfContext(rctx)
		run.count, run.countErr = m.count(cctx, now)
		ccancel()
		if errors.Is(run.countErr, errDriverGone) {
			run.driverErr, run.countErr = run.countErr, nil
		}
	}
	if errors.Is(run.driverErr, errClosed) || errors.Is(run.countErr, errClosed) {
		return nil, errClosed
	}
	specs, counted, err := m.prepare(run)
	if err != nil {
		return nil, err
	}
	run.reads = make([]gpuRead, len(specs))
	if run.driverErr == nil {
		var wg sync.WaitGroup
		for i, sp := range specs {
			if counted.counted && i >= counted.count {
				continue // NVML does not count the index (or did not at its last count): there is no GPU to read
			}
			wg.Go(func() { run.reads[i] = readGPU(rctx, m.gpuWorker(i), sp) })
		}
		wg.Wait()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	if run.driverErr == nil {
		if err := driverGoneInReads(readsCounted(run.reads, counted)); err != nil {
			run.driverErr = m.driverGoneLocked(fmt.Errorf("every GPU's calls say so: %w", err), now)
		}
	}
	s := m.integrate(run)
	s.seq = m.seq
	return s, nil
}

// driverGoneLocked notes that NVML's calls say the driver went away
// (unloaded, upgraded under the library): where the Monitor opened NVML it
// reopens it, with backoff. It returns err marked errDriverGone. m.mu is
// held.
func (m *Monitor) driverGoneLocked(err error, now time.Time) error {
	err = fmt.Errorf("%w: %w", errDriverGone, err)
	if m.env.Open != nil {
		m.nv.err = err
		m.nv.failures++
		m.nv.retryAt = now.Add(backoff(m.nv.failures))
	}
	return err
}

// readsCounted are the reads of the indices NVML counts (by this run's
// count, or while NVML cannot count, by the last: counted is
// withLastCount's): an index past the count is not read, and its zero
// gpuRead, which holds no error, does not say the driver answered.
func readsCounted(reads []gpuRead, counted runInput) []gpuRead {
	if !counted.counted {
		return reads
	}
	return reads[:min(len(reads), counted.count)]
}

// driverGoneInReads returns the first error that says the driver is gone
// when every GPU's read has one (NVML may still count the GPUs from what
// it knew), nil otherwise: one GPU that answers, hangs or is lost says the
// driver is there.
func driverGoneInReads(reads []gpuRead) error {
	var first error
	for _, r := range reads {
		err := goneError(r)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// goneError is the first of r's errors that says the driver is gone, nil
// when r has none or read a signal (then the driver answered).
func goneError(r gpuRead) error {
	errs := []error{r.openErr}
	for _, sig := range slices.Sorted(maps.Keys(r.sigs)) {
		if r.sigs[sig].ok() {
			return nil
		}
		errs = append(errs, r.sigs[sig].err)
	}
	for _, err := range errs {
		var ret nvml.Return
		if err != nil && errors.As(err, &ret) && driverGone(ret) {
			return err
		}
	}
	return nil
}

// lastCount is what the last successful count of the GPUs found.
type lastCount struct {
	known   bool
	count   int
	missing []missingGPU
}

// halfContext ends ctx's descendant halfway to ctx's deadline.
func halfContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, dl.Add(-time.Until(dl)/2))
}

// runInput is what one run read before it is integrated.
type runInput struct {
	at        time.Time
	pci       []string
	pciErr    error
	driverErr error
	count     int
	countErr  error
	reads     []gpuRead
	// counted: count is NVML's count, this run's or, while NVML cannot
	// count the GPUs, the last one (integrate sets it).
	counted bool
}

var (
	errDriverGone = errors.New("the NVIDIA driver is not usable")
	// errClosed: Close was called, maybe while the run was under way.
	errClosed = errors.New("the GPU monitor is closed")
)

// scanPCI lists the NVIDIA GPUs on the host's PCI bus.
func (m *Monitor) scanPCI() ([]string, error) {
	if m.env.GPUsOnPCI == nil {
		return nil, nil
	}
	addrs, err := m.env.GPUsOnPCI()
	if err != nil {
		return nil, fmt.Errorf("listing NVIDIA GPUs on the PCI bus: %w", err)
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = normalizePCI(a)
	}
	return out, nil
}

// ensureNVML opens NVML when it is not open and an attempt is due, and
// returns why it is not usable (nil when it is). Reopening ends the old
// session first: its jobs still in flight (a call hung across the driver
// reload) make no more calls and report nothing (see session).
func (m *Monitor) ensureNVML(ctx context.Context, now time.Time) error {
	m.mu.Lock()
	nv := m.nv
	if nv.lib != nil && nv.err == nil {
		m.mu.Unlock()
		return nil
	}
	if m.env.Open == nil || now.Before(nv.retryAt) {
		m.mu.Unlock()
		return nv.err
	}
	w := m.w
	m.w = nil
	gpus := slices.Clone(m.gpus)
	m.mu.Unlock()
	// The old library's event set and handles go with it.
	if w != nil {
		_ = w.stop()
	}
	nv.sess.end()
	var lib nvml.Interface
	var err error
	werr := m.lw.do(ctx, func(step func(string)) {
		if nv.lib != nil && nv.owned {
			step("nvmlShutdown")
			_ = nv.lib.Shutdown()
		}
		step("nvmlInit")
		lib, err = m.env.Open()
	})
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		if werr == nil && err == nil && lib != nil {
			_ = lib.Shutdown()
		}
		return errClosed
	}
	defer m.mu.Unlock()
	if werr != nil {
		err = werr
	}
	clear(m.handleUUIDs) // the old library's handles
	for _, g := range gpus {
		g.handle, g.reacquire, g.watched, g.watch = nil, false, false, sigRead{}
	}
	if err != nil {
		m.nv.lib, m.nv.sess, m.nv.owned = nil, nil, false
		m.nv.failures++
		m.nv.err = fmt.Errorf("%w: NVML did not start: %w", errDriverGone, err)
		m.nv.retryAt = now.Add(backoff(m.nv.failures))
		return m.nv.err
	}
	m.nv = nvmlState{lib: lib, sess: newSession(lib), owned: true, has: lookupSymbols(lib)}
	return nil
}

func backoff(failures int) time.Duration {
	d := openBackoffMin
	for i := 1; i < failures && d < openBackoffMax; i++ {
		d *= 2
	}
	return min(d, openBackoffMax)
}

// count asks NVML how many GPUs it sees, and starts the Xid watcher when
// it is not running, or replaces it when its event set broke (its waits
// fail): every GPU registers on the new set. A count that says the driver
// went away schedules a reopen.
func (m *Monitor) count(ctx context.Context, now time.Time) (int, error) {
	m.mu.Lock()
	if m.w != nil && m.w.failing() {
		m.eventsErr = fmt.Errorf("the NVML event set broke (%w); replacing it", m.w.health())
		m.w.retire() // it reads the set out, filing what it held
		m.retired = m.w
		m.w = nil
		for _, g := range m.gpus {
			g.gap = g.gap || g.watched
			g.watched, g.watch = false, sigRead{}
		}
	}
	lib, sess, has, needWatch := m.nv.lib, m.nv.sess, m.nv.has, m.w == nil && m.nv.has.events
	m.mu.Unlock()
	var n int
	ret := dead
	h := setHandoff{sess: sess}
	err := m.lw.do(ctx, func(step func(string)) {
		step("nvmlDeviceGetCount")
		if !sess.live() {
			return
		}
		n, ret = lib.DeviceGetCount()
		if needWatch && ret == nvml.SUCCESS {
			step("nvmlEventSetCreate")
			if sess.live() {
				h.deliver(lib.EventSetCreate())
			}
		}
	})
	if err != nil {
		h.abandon()
		return 0, fmt.Errorf("counting GPUs: %w", err)
	}
	set, setRet := h.set, h.ret
	m.mu.Lock()
	if m.closed { // while counting: the event set would outlive the Monitor
		m.mu.Unlock()
		freeSet(sess, set, setRet)
		return 0, errClosed
	}
	defer m.mu.Unlock()
	if needWatch && has.events && ret == nvml.SUCCESS {
		if setRet == nvml.SUCCESS {
			m.w = startWatcher(set, sess, m.cfg.eventWait(), func(ev nvml.EventData) { m.recordEvent(sess, ev) }, m.eventsErr, m.retired)
			m.retired = nil
			m.nv.err = nil
			m.eventsErr = nil
		} else {
			m.eventsErr = fmt.Errorf("creating the NVML event set: %w", setRet)
		}
	}
	switch {
	case ret == nvml.SUCCESS:
		m.nv.failures = 0
		return n, nil
	case driverGone(ret):
		return 0, m.driverGoneLocked(fmt.Errorf("counting GPUs: %w", ret), now)
	}
	return 0, fmt.Errorf("counting GPUs: %w", ret)
}

// setHandoff hands an event set from a count's job to the count. A job
// that outlives the count's wait must not leave its set behind: whichever
// of deliver and abandon comes second frees it (while the session is live:
// an ended session's library freed it, and no call is made after Close).
type setHandoff struct {
	sess      *session
	mu        sync.Mutex
	set       nvml.EventSet
	ret       nvml.Return
	abandoned bool
}

// deliver is the job's: the set EventSetCreate returned, and its Return.
func (h *setHandoff) deliver(set nvml.EventSet, ret nvml.Return) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.abandoned {
		freeSet(h.sess, set, ret)
		return
	}
	h.set, h.ret = set, ret
}

// abandon is the count's when it stops waiting for the job.
func (h *setHandoff) abandon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.abandoned = true
	freeSet(h.sess, h.set, h.ret)
	h.set = nil
}

// freeSet frees a set EventSetCreate made in sess, unless sess has ended.
func freeSet(sess *session, set nvml.EventSet, ret nvml.Return) {
	if ret == nvml.SUCCESS && set != nil && sess.live() {
		_ = set.Free()
	}
}

// prepare adds GPUs NVML sees for the first time and returns what each
// GPU's read needs, and run as withLastCount marks it: the count in force.
func (m *Monitor) prepare(run runInput) (_ []readSpec, counted runInput, _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed { // new workers would outlive the Monitor
		return nil, run, errClosed
	}
	counted, _ = m.withLastCount(run)
	for i := len(m.gpus); i < run.count; i++ {
		m.gpus = append(m.gpus, &gpuState{index: i, w: startWorker(fmt.Sprintf("GPU %d", i)), hist: map[string]history{}})
	}
	var set nvml.EventSet
	if m.w != nil {
		set = m.w.set
	}
	sess := m.nv.sess
	specs := make([]readSpec, len(m.gpus))
	for i, g := range m.gpus {
		handle := g.handle
		if g.reacquire {
			handle = nil
		}
		specs[i] = readSpec{index: i, handle: handle, sess: sess, has: m.nv.has, lib: m.nv.lib, events: set,
			watched: g.watched || g.watch.na != "", cfg: m.cfg, fabricH: m.fabricHealth,
			identified: func(id identity) bool {
				m.mu.Lock()
				defer m.mu.Unlock()
				if sess != m.nv.sess || !sess.live() { // a job of a session that ended
					return false
				}
				m.identify(g, id)
				return !g.watched && g.watch.na == ""
			}}
	}
	return specs, counted, nil
}

// identity is who a read found a GPU is: its handle (fresh: got by index
// in this read, not the cached one), UUID, PCI address and MIG mode (where
// read).
type identity struct {
	handle    nvml.Device
	fresh     bool
	uuid, pci string
	mig       bool
	migRead   bool
}

// identify records who GPU g is, as its read found. A kept record follows
// its UUID: when NVML's index g now names another GPU (the driver was
// reloaded without one), g's record is kept for its own GPU and g takes
// the record of the GPU it is now. A read made with a cached handle that
// is no longer g's (a late job; g got a new handle since) tells nothing.
// m.mu is held.
func (m *Monitor) identify(g *gpuState, id identity) {
	if !id.fresh && id.handle != nil && g.handle != nil && !sameDevice(id.handle, g.handle) {
		return
	}
	if id.uuid != "" && id.uuid != g.uuid {
		if g.uuid != "" {
			m.park(g)
		}
		for _, o := range m.gpus {
			if o != g && o.uuid == id.uuid {
				m.park(o)
			}
		}
	}
	if id.handle != nil {
		if id.fresh {
			if g.handle != nil && !sameDevice(id.handle, g.handle) {
				g.watched, g.watch = false, sigRead{} // the new handle registers for events
			}
			g.reacquire = false
		}
		g.handle = id.handle
	}
	if id.uuid != "" {
		g.uuid = id.uuid
	}
	if id.pci != "" {
		g.pci = id.pci
	}
	if id.migRead {
		g.mig = id.mig
	}
	m.adopt(g)
}

// park keeps g's record among the records of GPUs not matched to an index,
// and forgets what g knew of its GPU. m.mu is held.
func (m *Monitor) park(g *gpuState) {
	if g.rec != nil && g.rec.key() != "pci:" && !g.rec.empty() {
		m.records[g.rec.key()] = g.rec
	}
	g.rec, g.uuid, g.pci, g.minor = nil, "", "", nil
	g.hist = map[string]history{}
	g.actionSeen, g.healthy = false, false
}

func (m *Monitor) gpuWorker(i int) *worker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gpus[i].w
}

// sameDevice reports whether a and b are the same NVML handle, without
// panicking on handle types that cannot be compared.
func sameDevice(a, b nvml.Device) bool {
	if a == nil || b == nil {
		return false
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// recordEvent is the sink of sess's watcher: it files a critical Xid
// under its GPU. Its GPU is found by handle, else by UUID (eventGPU). An
// event of a session that ended is not the Monitor's any more.
func (m *Monitor) recordEvent(sess *session, ev nvml.EventData) {
	if ev.EventType&nvml.EventTypeXidCriticalError == 0 || !sess.live() {
		return
	}
	at := m.now()
	info := m.catalog.Lookup(ev.EventData)
	g, uuid := m.eventGPU(sess, ev.Device, info.Action.Fatal())
	if m.fileEvent(sess, ev, info, g, uuid, at) && info.Action.Fatal() {
		m.wakeFatal()
	}
}

// fileEvent files the Xid of recordEvent's event and reports whether it
// did (not when its session ended, nor when the kernel log reported it).
func (m *Monitor) fileEvent(sess *session, ev nvml.EventData, info XidInfo, g *gpuState, uuid string, at time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sess != m.nv.sess {
		return false
	}
	if g != nil && g.pci != "" && m.dedupe.heard(dedupeKey{pci: g.pci, xid: ev.EventData}, fromNVML, at) {
		return false // the kernel log reported it (KernelXid)
	}
	x := xidRecord{Xid: ev.EventData, Action: info.Action, Name: info.Name, seq: m.tick()}
	if g != nil && g.mig && ev.GpuInstanceId != 0xFFFFFFFF {
		gi, ci := ev.GpuInstanceId, ev.ComputeInstanceId
		x.GI = &gi
		if ci != 0xFFFFFFFF {
			x.CI = &ci
		}
	}
	switch {
	case !info.Action.Fatal() && g != nil:
		g.minor = addXid(g.minor, x, at)
	case !info.Action.Fatal():
	case g == nil:
		x.UUID = uuid // filed under its GPU once that is identified
		m.stray = addXid(m.stray, x, at)
	default:
		g.record().Xids = addXid(g.record().Xids, x, at)
	}
	return true
}

// eventGPU finds the GPU an event's device is: by handle, else by UUID,
// with uuid the device's UUID where it was asked. An unknown handle's UUID
// is asked once per handle (one NVML call, made without the lock; a storm
// from one device costs one call); a handle that cannot be cached is asked
// only for a fatal Xid.
func (m *Monitor) eventGPU(sess *session, dev nvml.Device, fatal bool) (_ *gpuState, uuid string) {
	m.mu.Lock()
	g := m.gpuByHandle(dev)
	cached := false
	if g == nil && cacheable(dev) {
		uuid, cached = m.handleUUIDs[dev]
	}
	m.mu.Unlock()
	if g != nil || dev == nil {
		return g, ""
	}
	if !cached && (cacheable(dev) || fatal) {
		uuid = m.uuidOf(liveDevice{Device: dev, s: sess})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if uuid == "" {
		return nil, ""
	}
	if !cached && cacheable(dev) {
		if len(m.handleUUIDs) >= maxHandleUUIDs {
			clear(m.handleUUIDs)
		}
		m.handleUUIDs[dev] = uuid
	}
	if i := slices.IndexFunc(m.gpus, func(g *gpuState) bool { return g.uuid == uuid }); i >= 0 {
		return m.gpus[i], uuid
	}
	return nil, uuid
}

// maxHandleUUIDs bounds the UUIDs kept for handles the Monitor did not
// open (recordEvent).
const maxHandleUUIDs = 64

// cacheable says dev can be a map key (NVML's handles are pointers).
func cacheable(dev nvml.Device) bool {
	return dev != nil && reflect.TypeOf(dev).Comparable()
}

// uuidLookupTimeout bounds the watcher's wait for the UUID of an event's
// unknown device.
const uuidLookupTimeout = time.Second

// uuidOf asks dev its UUID for the watcher, which must not hang on one
// GPU: the call runs on a goroutine of its own and is given up after
// uuidLookupTimeout; while one is still out, no other is made ("" then).
func (m *Monitor) uuidOf(dev nvml.Device) string {
	if !m.uuidLookup.CompareAndSwap(false, true) {
		return ""
	}
	ch := make(chan string, 1)
	go func() {
		defer m.uuidLookup.Store(false)
		u, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			u = ""
		}
		ch <- u
	}()
	select {
	case u := <-ch:
		return u
	case <-time.After(uuidLookupTimeout):
		return ""
	}
}

func (m *Monitor) gpuByHandle(dev nvml.Device) *gpuState {
	if i := slices.IndexFunc(m.gpus, func(g *gpuState) bool { return sameDevice(g.handle, dev) }); i >= 0 {
		return m.gpus[i]
	}
	return nil
}

// record returns the GPU's kept record, making one (adopting a restored
// one for its UUID or PCI address) when it has none.
func (g *gpuState) record() *gpuRecord {
	if g.rec == nil {
		g.rec = &gpuRecord{UUID: g.uuid, PCI: g.pci, Index: g.index}
	}
	return g.rec
}

// adopt matches the GPU to a record kept from before a restart once its
// identity is known, merging what it gathered since.
func (m *Monitor) adopt(g *gpuState) {
	key := g.uuid
	if key == "" && g.pci != "" {
		key = "pci:" + g.pci
	}
	if key == "" {
		return
	}
	kept, ok := m.records[key]
	if !ok {
		if g.rec != nil {
			g.rec.UUID, g.rec.PCI, g.rec.Index = g.uuid, g.pci, g.index
		}
		return
	}
	delete(m.records, key)
	if g.rec != nil {
		mergeRecord(kept, g.rec)
	}
	kept.UUID, kept.PCI, kept.Index = g.uuid, g.pci, g.index
	g.rec = kept
	if len(kept.Findings[sigRecovery]) > 0 {
		g.actionSeen = true
	}
}

// mergeRecord merges into kept, a record restored from before a restart,
// what the GPU's record gathered in this agent before it was matched (the
// GPUs were read before Restore): its Xids, and what it saw that is newer
// than the restored record (the findings of the signals it read, the
// recoveries and clear it observed).
func mergeRecord(kept, fresh *gpuRecord) {
	kept.Xids = mergeXids(kept.Xids, fresh.Xids)
	for sig, fs := range fresh.Findings {
		if kept.Findings == nil {
			kept.Findings = map[string][]finding{}
		}
		kept.Findings[sig] = fs
	}
	for _, p := range []struct{ kept, fresh *mark }{{&kept.reset, &fresh.reset}, {&kept.reboot, &fresh.reboot}, {&kept.clear, &fresh.clear}} {
		if p.fresh.isSet() {
			*p.kept = *p.fresh
		}
	}
	kept.down = kept.down || fresh.down
}

// integrate folds one run's reads into the Monitor's state and returns
// the snapshot the probes judge. m.mu is held.
func (m *Monitor) integrate(run runInput) *snapshot {
	s := &snapshot{cfg: m.cfg, at: run.at, driverErr: run.driverErr, countErr: run.countErr, count: run.count, pciErr: run.pciErr}
	counted := run.driverErr == nil && run.countErr == nil
	run, s.kept = m.withLastCount(run)
	if run.pciErr == nil && m.env.GPUsOnPCI != nil {
		m.lastPCI = run.pci
	}
	if m.w != nil {
		s.watchErr = m.w.health()
	} else if m.nv.lib != nil && m.nv.has.events {
		s.watchErr = m.eventsErr
	}
	seenPCI := map[string]bool{}
	for i, r := range run.reads {
		g := m.gpus[i]
		if run.counted && g.index >= run.count { // by this run's count, or while NVML cannot count, the last
			m.uncounted(g) // the indices past the count are the tail: s.gpus[i] stays m.gpus[i]
			continue
		}
		v := m.integrateGPU(g, r, run, s.watchErr)
		if g.pci != "" {
			seenPCI[g.pci] = true
		}
		s.gpus = append(s.gpus, v)
	}
	s.pciGPUs, s.pciScanned = len(run.pci), m.env.GPUsOnPCI != nil && run.pciErr == nil
	m.countGPUs(s, run, counted, seenPCI)
	// After a reboot, a kept record whose GPU is not among a complete set
	// of identified GPUs belongs to hardware that is gone.
	if m.rebooted && len(m.records) > 0 && counted && len(s.missing) == 0 &&
		!slices.ContainsFunc(m.gpus, func(g *gpuState) bool { return g.index < run.count && g.uuid == "" }) {
		clear(m.records)
	}
	m.attributeStrayTo(s)
	for _, rec := range m.records {
		s.orphans = append(s.orphans, *rec)
	}
	slices.SortFunc(s.orphans, func(a, b gpuRecord) int { return strings.Compare(a.key(), b.key()) })
	return s
}

// uncounted forgets, at an index NVML's count no longer reaches (a driver
// reload without a GPU), the GPU that was there: it is missing, so its
// return, at whatever index, is a reset; its record is kept among those
// not matched to an index (and judged as such) until a GPU is identified
// with it. The index is not in the snapshot: there is no GPU there to be
// unreadable. m.mu is held.
func (m *Monitor) uncounted(g *gpuState) {
	if g.rec != nil && (g.uuid != "" || g.pci != "") {
		g.rec.down = true
	}
	m.park(g)
	g.handle, g.reacquire, g.watched, g.watch = nil, false, false, sigRead{}
}

// countGPUs sets what s says of the GPUs' count: how many the node should
// have and which NVML does not see (by this run's count, or while NVML
// cannot count, by the last), and keeps the count. m.mu is held.
func (m *Monitor) countGPUs(s *snapshot, run runInput, counted bool, seenPCI map[string]bool) {
	if counted {
		m.maxCount = max(m.maxCount, run.count)
		m.expect(run.pci, seenPCI)
	}
	s.expected = m.expectedCount()
	switch {
	case counted:
		s.missing = m.missing(run, seenPCI)
		m.markMissing(s.missing)
		if m.cfg.ExpectedGPUs > 0 && run.count >= m.cfg.ExpectedGPUs {
			s.missing = nil // the operator's count is met: the others are not expected
		}
		m.lastCount = lastCount{known: true, count: run.count, missing: s.missing}
	case s.kept != nil:
		s.missing = s.kept.missing
	}
	slices.SortFunc(s.missing, func(a, b missingGPU) int { return strings.Compare(a.pci, b.pci) })
}

// markMissing marks the kept records of the GPUs NVML does not see (by
// PCI address) down: their return is a reset. m.mu is held.
func (m *Monitor) markMissing(missing []missingGPU) {
	for _, mg := range missing {
		for _, r := range m.records {
			if r.PCI == mg.pci {
				r.down = true
			}
		}
	}
}

// withLastCount marks run counted when NVML counted the GPUs; when it
// could not (but the driver is there), what its last count found (GPUs it
// no longer saw) stands until a count says otherwise: run takes that
// count, and kept is it. m.mu is held.
func (m *Monitor) withLastCount(run runInput) (_ runInput, kept *lastCount) {
	run.counted = run.driverErr == nil && run.countErr == nil
	if !run.counted && run.driverErr == nil && m.lastCount.known {
		run.count, run.counted = m.lastCount.count, true
		k := m.lastCount
		kept = &k
	}
	return run, kept
}

// attributeStrayTo files stray Xids under their GPUs now identified
// (attributeStray) and puts what is left stray in s. m.mu is held.
func (m *Monitor) attributeStrayTo(s *snapshot) {
	if m.attributeStray() {
		// The views were taken before: they show what was just filed
		// under their GPU, so no run shows the Xid nowhere.
		for i := range s.gpus {
			s.gpus[i].xids = slices.Clone(m.gpus[i].record().Xids)
		}
	}
	s.stray = slices.Clone(m.stray)
}

// attributeStray files stray Xids whose device said its UUID (or whose
// kernel line named its PCI address) under the GPU now identified by it
// (an Xid can arrive between a GPU's registration for events and the end
// of the run that learnt its handle). It reports whether it filed any.
func (m *Monitor) attributeStray() (moved bool) {
	m.stray = slices.DeleteFunc(m.stray, func(x xidRecord) bool {
		if x.UUID == "" && x.PCI == "" {
			return false
		}
		i := slices.IndexFunc(m.gpus, func(g *gpuState) bool {
			return x.UUID != "" && g.uuid == x.UUID || x.UUID == "" && g.pci == x.PCI
		})
		if i < 0 {
			return false
		}
		rec := m.gpus[i].record()
		x.UUID, x.PCI = "", ""
		rec.Xids = mergeXids(rec.Xids, []xidRecord{x})
		moved = true
		return true
	})
	return moved
}

// expect adds the GPUs on the PCI bus and those NVML identified to the
// expected ones.
func (m *Monitor) expect(pci []string, seen map[string]bool) {
	for _, a := range slices.Concat(pci, slices.Collect(maps.Keys(seen))) {
		if !slices.Contains(m.expected, a) {
			m.expected = append(m.expected, a)
		}
	}
}

// missing lists the expected GPUs NVML did not identify this run, unless
// GPUs NVML counts but could not identify may be them: those are Unknown,
// not lost.
func (m *Monitor) missing(run runInput, seen map[string]bool) []missingGPU {
	var out []missingGPU
	for _, a := range m.expected {
		if !seen[a] {
			out = append(out, missingGPU{pci: a, onBus: slices.Contains(run.pci, a)})
		}
	}
	unidentified := 0
	for _, g := range m.gpus {
		if g.index < run.count && g.pci == "" {
			unidentified++
		}
	}
	if len(out) <= unidentified {
		return nil
	}
	return out
}

// expectedCount is how many GPUs the node should have: config, else the
// PCI baseline, else the most NVML ever saw.
func (m *Monitor) expectedCount() int {
	if m.cfg.ExpectedGPUs > 0 {
		return m.cfg.ExpectedGPUs
	}
	return max(len(m.expected), m.maxCount)
}

// integrateGPU folds one GPU's read into its state and returns its view.
func (m *Monitor) integrateGPU(g *gpuState, r gpuRead, run runInput, watchErr error) gpuView {
	now := run.at
	m.identify(g, identity{handle: r.handle, fresh: r.fresh, uuid: r.uuid, pci: r.pci, mig: r.mig, migRead: r.migRead})
	if r.regTried {
		g.watched, g.watch = r.reg.ok(), r.reg
	}
	rec := g.record()
	g.healthy = false
	if run.driverErr != nil {
		return m.view(g, rec, gpuView{unreadable: run.driverErr})
	}
	view := gpuView{sigs: r.sigs, v: r.v}
	errs := []error{r.openErr, r.hung}
	for _, sr := range r.sigs {
		errs = append(errs, sr.err)
	}
	view.lost = errLostOf(errs...)
	if r.staleHandle || view.lost != nil {
		g.reacquire = true // a reset may have re-created the device
	}
	switch {
	case r.openErr != nil:
		view.unreadable = r.openErr
	case r.hung != nil && len(r.sigs) == 0:
		view.unreadable = r.hung
	}
	view.hung = r.hung
	view.xid = xidHealth(g, m.nv.has.events, watchErr, view.unreadable)
	if err := m.closeGap(g, r); err != nil && view.xid.ok() {
		view.xid = sigRead{err: err}
	}
	back := m.noteResets(g, rec, r, view, now)
	for sig, sr := range r.sigs {
		if !sr.ok() {
			continue
		}
		setFindings(rec, sig, m.judgeSignal(g, sig, r.v, now))
	}
	view.healthy = back && healthyRead(r, rec)
	g.healthy = view.healthy
	m.recover(rec, view.healthy)
	return m.view(g, rec, view)
}

// noteResets records what this read says about the GPU being reset: the
// GPU (its record, which follows it across NVML indices) was lost or
// missing and is back, or the driver's recovery action went back to none.
// It keeps the "lost" finding and reports whether the GPU is back (read
// without being lost, missing, unreadable or hung).
func (m *Monitor) noteResets(g *gpuState, rec *gpuRecord, r gpuRead, view gpuView, now time.Time) bool {
	down := view.lost != nil
	back := !down && view.unreadable == nil && r.hung == nil
	identified := g.uuid != "" || g.pci != ""
	switch {
	case down && identified:
		rec.down = true
	case back && rec.down:
		rec.down = false
		rec.reset = mark{at: now, seq: m.tick()}
	}
	if view.lost != nil {
		setFindings(rec, "lost", []finding{{Probe: NameFatal, Reason: lostReason(view.lost), Text: lostText(view.lost), Since: now}})
	} else if back {
		setFindings(rec, "lost", nil)
	}
	if sr, ok := r.sigs[sigRecovery]; ok && sr.ok() {
		switch {
		case r.v.recovery != recoveryNone:
			g.actionSeen = true
		case g.actionSeen:
			g.actionSeen = false
			rec.reset = mark{at: now, seq: m.tick()}
		}
	}
	return back
}

// closeGap closes g's gap (see gpuState) when the set replaced was read
// out (everything it held was filed), or else when NVML's state of the
// GPU has been read again since it registered on the new set: this read
// has the GPU registered and read its recovery action (or found it not
// available), which says whether an Xid it missed asked for a recovery.
// It returns why g's Xids are not trusted yet, nil when they are (or
// the watcher's health says why). m.mu is held.
func (m *Monitor) closeGap(g *gpuState, r gpuRead) error {
	if !g.gap || m.w == nil {
		return nil
	}
	done, err := m.w.readOutResult()
	if !done {
		return nil // health says so
	}
	rec, read := r.sigs[sigRecovery]
	if err == nil || g.watched && read && rec.err == nil {
		g.gap = false
		return nil
	}
	return fmt.Errorf("the NVML event set broke and what it held could not be read (%w): an Xid of this GPU may be missed until its state is read again", err)
}

// xidHealth says whether the GPU's Xid events can be trusted this run.
func xidHealth(g *gpuState, events bool, watchErr, unreadable error) sigRead {
	switch {
	case !events:
		return sigRead{na: "driver lacks NVML event functions"}
	case g.watch.na != "":
		return g.watch
	case g.watch.err != nil:
		return g.watch
	case !g.watched && unreadable != nil:
		return sigRead{err: unreadable}
	case !g.watched:
		return sigRead{err: errors.New("not registered for Xid events yet")}
	case watchErr != nil:
		return sigRead{err: watchErr}
	}
	return sigRead{}
}

// healthyRead reports whether the GPU read completely (no signal failed)
// and no fatal problem is on record but its Xids.
func healthyRead(r gpuRead, rec *gpuRecord) bool {
	for _, sr := range r.sigs {
		if sr.err != nil {
			return false
		}
	}
	for _, fs := range rec.Findings {
		for _, f := range fs {
			if f.Probe == NameFatal {
				return false
			}
		}
	}
	return true
}

// recover drops, once the GPU is healthy, the fatal Xids the recoveries
// and the operator's clear it waits on cover: a reboot covers every Xid
// seen before it, a reset those that need a reset, a clear those held
// when it was handled and seen before its requestedAt. Each is then done:
// an Xid seen after it waits for the next.
func (m *Monitor) recover(rec *gpuRecord, healthy bool) {
	if !healthy {
		return
	}
	if rec.clear.isSet() {
		rec.Xids, _ = clearedXids(rec.Xids, rec.clear)
	}
	if rec.reboot.isSet() {
		rec.Xids, _ = recoveredXids(rec.Xids, rec.reboot, true)
	}
	if rec.reset.isSet() {
		rec.Xids, _ = recoveredXids(rec.Xids, rec.reset, false)
	}
	rec.clear, rec.reboot, rec.reset = mark{}, mark{}, mark{}
}

// setFindings replaces what sig found on rec, keeping the time a finding
// with the same reason has held since.
func setFindings(rec *gpuRecord, sig string, fs []finding) {
	if len(fs) == 0 {
		delete(rec.Findings, sig)
		return
	}
	for i := range fs {
		for _, old := range rec.Findings[sig] {
			if old.Reason == fs[i].Reason && old.Probe == fs[i].Probe {
				fs[i].Since = old.Since
			}
		}
	}
	if rec.Findings == nil {
		rec.Findings = map[string][]finding{}
	}
	rec.Findings[sig] = fs
}

func lostReason(err error) string {
	if errors.Is(err, nvml.ERROR_RESET_REQUIRED) {
		return ReasonGPUResetRequired
	}
	return ReasonGPULost
}

func lostText(err error) string {
	if errors.Is(err, nvml.ERROR_RESET_REQUIRED) {
		return "requires a reset: " + err.Error()
	}
	return "is lost (fell off the bus): " + err.Error()
}

// view completes v with what the GPU's state says.
func (m *Monitor) view(g *gpuState, rec *gpuRecord, v gpuView) gpuView {
	v.index, v.uuid, v.pci, v.mig = g.index, g.uuid, g.pci, g.mig
	v.xids = slices.Clone(rec.Xids)
	v.minor = slices.Clone(g.minor)
	v.findings = map[string][]finding{}
	for sig, fs := range rec.Findings {
		v.findings[sig] = slices.Clone(fs)
	}
	return v
}
