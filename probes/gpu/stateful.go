package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// State returns what the Monitor keeps across restarts of the agent
// (probes.Stateful): fatal Xids, the last problem of each signal, the
// GPUs the node should have, the boot they were seen in.
func (m *Monitor) State() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := savedState{Boot: m.boot, Expected: slices.Clone(m.expected), Stray: slices.Clone(m.stray)}
	for _, g := range m.gpus {
		if g.rec == nil || g.rec.key() == "pci:" || g.rec.empty() {
			continue
		}
		s.GPUs = append(s.GPUs, cloneRecord(g.rec.persist()))
	}
	for _, r := range m.records {
		s.GPUs = append(s.GPUs, cloneRecord(r.persist()))
	}
	s.Short = m.shortCount()
	return encodeState(s)
}

// shortCount is the last successful count when it found GPUs missing,
// for the state; nil otherwise. m.mu is held.
func (m *Monitor) shortCount() *savedCount {
	lc := m.lastCount
	if !lc.known || len(lc.missing) == 0 && lc.count >= m.expectedCount() {
		return nil
	}
	c := &savedCount{Count: lc.count}
	for _, mg := range lc.missing {
		c.Missing = append(c.Missing, mg.pci)
		if mg.onBus {
			c.OnBus = append(c.OnBus, mg.pci)
		}
	}
	return c
}

func cloneRecord(r gpuRecord) gpuRecord {
	r.Xids = slices.Clone(r.Xids)
	r.NVLinkUp = slices.Clone(r.NVLinkUp)
	if r.Findings != nil {
		fs := make(map[string][]finding, len(r.Findings))
		for k, v := range r.Findings {
			fs[k] = slices.Clone(v)
		}
		r.Findings = fs
	}
	return r
}

// Restore takes back what State returned before a restart. A different
// boot ID means the node rebooted since: that is a recovery for every
// kept Xid (applied once the GPU reads healthy), the stray Xids go, and
// the expected GPUs are seen afresh. What was restored is older than
// anything this agent sees (see mark), whatever the clock says now: a
// time in the state after now (the clock went back since it was written)
// is taken as now. A GPU the state says was lost or missing was down: its
// return is a reset. A state that cannot be used changes nothing.
func (m *Monitor) Restore(data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.restored = true
	if len(data) == 0 {
		return nil
	}
	s, err := decodeState(data)
	if err != nil {
		return err
	}
	now := m.now()
	rebooted := s.Boot != "" && m.boot != "" && s.Boot != m.boot
	m.rebooted = rebooted
	var missing []string
	if !rebooted {
		m.restoreBaselines(s, now)
		if s.Short != nil {
			missing = s.Short.Missing
		}
	}
	// The reboot happened before this agent started: it covers what was
	// restored (seq 0) and nothing this agent saw, even where the GPUs
	// were read, and Xids seen, before Restore (the inventory's first
	// count): a restored mark is before everything seen since.
	var reboot mark
	if rebooted {
		reboot = mark{at: now}
	}
	for _, r := range s.GPUs {
		rec := notAfter(cloneRecord(r), now).restored()
		rec.Xids = m.judgeKept(rec.Xids)
		if rec.empty() {
			continue
		}
		if rebooted && len(rec.Xids) > 0 {
			rec.reboot = reboot
		}
		rec.down = !rebooted && (len(rec.Findings["lost"]) > 0 || rec.PCI != "" && slices.Contains(missing, rec.PCI))
		m.records[rec.key()] = &rec
	}
	for _, g := range m.gpus {
		m.adopt(g)
	}
	return nil
}

// restoreBaselines takes back, from a state written in this boot, the
// GPUs the node should have, the stray Xids and the last count that found
// GPUs missing. m.mu is held.
func (m *Monitor) restoreBaselines(s savedState, now time.Time) {
	for _, a := range s.Expected {
		if !slices.Contains(m.expected, a) {
			m.expected = append(m.expected, a)
		}
	}
	m.stray = mergeXids(m.stray, m.judgeKept(notAfterXids(s.Stray, now)))
	if s.Short != nil && !m.lastCount.known {
		// What the last count found stands until a count here.
		m.lastCount = lastCount{known: true, count: s.Short.Count}
		for _, a := range s.Short.Missing {
			m.lastCount.missing = append(m.lastCount.missing, missingGPU{pci: a, onBus: slices.Contains(s.Short.OnBus, a)})
		}
	}
}

// notAfter returns r with its times after now (written under a clock
// that has gone back since) taken as now.
func notAfter(r gpuRecord, now time.Time) gpuRecord {
	r.Xids = notAfterXids(r.Xids, now)
	for sig, fs := range r.Findings {
		for i := range fs {
			fs[i].Since = earliest(fs[i].Since, now)
		}
		r.Findings[sig] = fs
	}
	if !r.Recovered.IsZero() {
		r.Recovered = earliest(r.Recovered, now)
	}
	if !r.Cleared.IsZero() {
		r.Cleared = earliest(r.Cleared, now)
	}
	return r
}

func notAfterXids(l []xidRecord, now time.Time) []xidRecord {
	l = slices.Clone(l)
	for i := range l {
		l[i].First, l[i].Last = earliest(l[i].First, now), earliest(l[i].Last, now)
	}
	return l
}

func earliest(a, b time.Time) time.Time {
	if a.After(b) {
		return b
	}
	return a
}

// judgeKept judges kept Xids as a new occurrence would be judged: by the
// catalog with config's overrides now, whatever the state said (it does
// not keep the action, and an older state's is checked but not used),
// but an Xid 154 by the action its line named, which the state keeps
// (unless config overrides 154).
// Config overrides extend the catalog: an Xid config now calls ignore or
// restart-app no longer fails the GPU, so a kept one goes, as the
// operator who wrote that asked; one now judged more (or less) severe
// holds with its new action. At most maxXidRecords stay, the most severe.
func (m *Monitor) judgeKept(l []xidRecord) []xidRecord {
	var out []xidRecord
	for _, x := range l {
		info := m.catalog.Lookup(x.Xid)
		if x.Xid == xidRecoveryActionChanged && !info.Overridden && x.Action.Fatal() {
			info.Action = x.Action // the action its line named, which the state keeps
		}
		if !info.Action.Fatal() {
			continue
		}
		x.Action, x.Name = info.Action, info.Name
		out = append(out, x)
	}
	return capXids(out)
}

// ClearAll is the target of Clear that means every GPU.
const ClearAll = "all"

// Clear drops, for each target GPU (a UUID, a PCI address, or ClearAll),
// what it held when the request is handled and learnt before requested:
// its fatal Xids last seen at or before requested (an Xid raised after
// requestedAt stays, however the operator's clock and the node's differ,
// and one raised after the request is handled is never dropped by it),
// and the problems held for signals since before requested. Xids go at
// once where the GPU's last read was healthy, else once it reads healthy.
// A GPU not seen since the agent restarted (a kept record) cannot read
// healthy: what it held goes at once, and its record with it once it
// holds no failure. A PCI address NVML does not see (a dead GPU, one gone
// from the bus) is forgotten as expected: with expectedGPUs set, or once
// it is off the PCI bus, the node is no longer short of it; the Xids held
// for it as a device NVML did not identify (a kernel line naming its PCI
// address, an event of a device that said its UUID) go at once too. It
// returns what it dropped and what it kept, and why.
func (m *Monitor) Clear(targets []string, requested time.Time) (string, error) {
	if len(targets) == 0 {
		return "", errors.New("no GPU named: give GPU UUIDs, PCI addresses or \"all\"")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	all := slices.Contains(targets, ClearAll)
	if unknown := m.unknownTargets(targets); len(unknown) > 0 {
		return "", fmt.Errorf("no GPU %s on this node (known: %s)", strings.Join(unknown, ", "), strings.Join(m.knownGPUs(), ", "))
	}
	named := func(uuid, pci string) bool {
		return all || slices.ContainsFunc(targets, func(t string) bool {
			return uuid != "" && t == uuid || pci != "" && normalizePCI(t) == pci
		})
	}
	k := mark{at: requested, seq: m.tick()}
	var words []string
	for _, g := range m.gpus {
		if !named(g.uuid, g.pci) || g.rec == nil {
			continue
		}
		if w := clearGPU(g, k); w != "" {
			words = append(words, gpuLabel(g.index, g.uuid)+": "+w)
		}
	}
	for key, r := range m.records {
		if named(r.UUID, r.PCI) {
			if w := m.clearKept(key, r, k); w != "" {
				words = append(words, fmt.Sprintf("GPU %s (not seen since the agent restarted): %s", r.key(), w))
			}
		}
	}
	if !all {
		words = append(words, m.forgetMissing(targets)...)
	}
	words = append(words, m.clearStray(all, named, k)...)
	if len(words) == 0 {
		return "nothing was held for " + strings.Join(targets, ", "), nil
	}
	slices.Sort(words)
	return "cleared " + strings.Join(words, "; ") + " (a problem still there is found again)", nil
}

// clearStray clears the stray Xids (of devices NVML did not identify)
// held before k: every one for all, else those of the devices named (a
// kernel Xid names its PCI address, an NVML event its device's UUID where
// the device said it), and says what, per device.
func (m *Monitor) clearStray(all bool, named func(uuid, pci string) bool, k mark) []string {
	var words []string
	if all {
		kept, dropped := clearedXids(m.stray, k)
		m.stray = kept
		if w := clearWords(dropped, nil, false, kept, k.at); w != "" {
			words = append(words, "unidentified GPU: "+w)
		}
		return words
	}
	var devices []xidRecord // one stray record of each device named
	for _, x := range m.stray {
		if x.device() != "" && named(x.UUID, x.PCI) && !slices.ContainsFunc(devices, func(d xidRecord) bool { return d.device() == x.device() }) {
			devices = append(devices, x)
		}
	}
	for _, d := range devices {
		var mine, others []xidRecord
		for _, x := range m.stray {
			if x.device() == d.device() {
				mine = append(mine, x)
			} else {
				others = append(others, x)
			}
		}
		kept, dropped := clearedXids(mine, k)
		m.stray = append(others, kept...)
		label := "GPU at PCI " + d.PCI + " (NVML does not identify it; from the kernel log)"
		if d.UUID != "" {
			label = "GPU " + d.UUID + " (NVML did not identify it)"
		}
		if w := clearWords(dropped, nil, false, kept, k.at); w != "" {
			words = append(words, label+": "+w)
		}
	}
	return words
}

// clearGPU clears what GPU g, which NVML sees, held before k (see Clear),
// and says what.
func clearGPU(g *gpuState, k mark) string {
	rec := g.rec
	kept, dropped := clearedXids(rec.Xids, k)
	pending := len(dropped) > 0 && !g.healthy
	switch {
	case pending:
		rec.clear = k
	case len(dropped) > 0:
		rec.Xids = kept
	}
	return clearWords(dropped, clearFindings(rec, k.at), pending, kept, k.at)
}

// clearKept clears the kept record of a GPU not seen (see Clear): what it
// held from before k goes at once (the GPU is not there to read healthy),
// and the record once it holds no failure. It says what.
func (m *Monitor) clearKept(key string, rec *gpuRecord, k mark) string {
	kept, dropped := clearedXids(rec.Xids, k)
	rec.Xids = kept
	findings := clearFindings(rec, k.at)
	if len(rec.Xids) == 0 && len(rec.Findings) == 0 {
		delete(m.records, key)
		findings = append(findings, "its kept record")
	}
	return clearWords(dropped, findings, false, kept, k.at)
}

// clearWords says what a clear dropped (Xids, then the other things
// named), whether the Xids wait for the GPU to read healthy, and what it
// kept: "dropped Xid 94 x1 and the NVLink finding; kept Xid 48 x1 (last
// seen after requestedAt ...)".
func clearWords(dropped []xidRecord, others []string, pending bool, kept []xidRecord, requested time.Time) string {
	var gone []string
	if len(dropped) > 0 {
		gone = append(gone, "Xid "+shortXids(dropped))
	}
	gone = append(gone, others...)
	var parts []string
	switch {
	case pending && len(gone) > 1:
		parts = append(parts, "Xid "+shortXids(dropped)+" dropped once the GPU reads healthy", "dropped "+joinAnd(gone[1:]))
	case pending:
		parts = append(parts, "Xid "+shortXids(dropped)+" dropped once the GPU reads healthy")
	case len(gone) > 0:
		parts = append(parts, "dropped "+joinAnd(gone))
	}
	if len(kept) > 0 {
		parts = append(parts, fmt.Sprintf("kept Xid %s (last seen after requestedAt %s)", shortXids(kept), stamp(requested)))
	}
	return strings.Join(parts, "; ")
}

// joinAnd joins "a", "b", "c" as "a, b and c".
func joinAnd(l []string) string {
	if len(l) < 2 {
		return strings.Join(l, "")
	}
	return strings.Join(l[:len(l)-1], ", ") + " and " + l[len(l)-1]
}

// unknownTargets are the targets that name no GPU the Monitor knows.
func (m *Monitor) unknownTargets(targets []string) []string {
	var unknown []string
	for _, t := range targets {
		if t != ClearAll && !m.knows(t) {
			unknown = append(unknown, t)
		}
	}
	return unknown
}

// clearFindings drops rec's findings from before requested and names
// them ("the NVLink finding").
func clearFindings(rec *gpuRecord, requested time.Time) []string {
	var sigs []string
	for sig, fs := range rec.Findings {
		kept := slices.DeleteFunc(slices.Clone(fs), func(f finding) bool { return !f.Since.After(requested) })
		if len(kept) < len(fs) {
			sigs = append(sigs, sig)
		}
		if len(kept) == 0 {
			delete(rec.Findings, sig)
		} else {
			rec.Findings[sig] = kept
		}
	}
	if len(sigs) == 0 {
		return nil
	}
	slices.Sort(sigs)
	if len(sigs) == 1 {
		return []string{"the " + sigs[0] + " finding"}
	}
	return []string{"the " + joinAnd(sigs) + " findings"}
}

// forgetMissing forgets, as expected, each PCI address among targets that
// no GPU NVML sees has, and says so.
func (m *Monitor) forgetMissing(targets []string) []string {
	var words []string
	for _, t := range targets {
		a := normalizePCI(t)
		seen := slices.ContainsFunc(m.gpus, func(g *gpuState) bool {
			return g.pci == a && (!m.lastCount.known || g.index < m.lastCount.count)
		})
		if !pciAddr.MatchString(a) || seen {
			continue
		}
		expected := slices.Contains(m.expected, a)
		m.expected = slices.DeleteFunc(m.expected, func(e string) bool { return e == a })
		m.lastCount.missing = slices.DeleteFunc(m.lastCount.missing, func(mg missingGPU) bool { return mg.pci == a })
		w := fmt.Sprintf("GPU at PCI %s (NVML does not see it): ", a)
		switch {
		case !expected:
			w += "was not expected"
		case m.cfg.ExpectedGPUs > 0:
			w += fmt.Sprintf("no longer expected (expectedGPUs: %d says how many GPUs the node has)", m.cfg.ExpectedGPUs)
		case slices.Contains(m.lastPCI, a):
			w += "no longer expected, but it is still on the PCI bus, which the baseline counts: set probes.gpu.expectedGPUs to the number of GPUs this node should have"
		default:
			w += "no longer expected"
		}
		words = append(words, w)
	}
	return words
}

// knows reports whether t names a GPU the Monitor knows: one NVML saw, a
// kept record, a PCI address it expects or saw on the PCI bus, or a device
// a stray Xid names.
func (m *Monitor) knows(t string) bool {
	a := normalizePCI(t)
	for _, g := range m.gpus {
		if g.uuid == t || g.pci != "" && g.pci == a {
			return true
		}
	}
	for _, r := range m.records {
		if r.UUID == t || r.PCI != "" && r.PCI == a {
			return true
		}
	}
	return slices.Contains(m.expected, a) || slices.Contains(m.lastPCI, a) ||
		slices.ContainsFunc(m.lastCount.missing, func(mg missingGPU) bool { return mg.pci == a }) ||
		slices.ContainsFunc(m.stray, func(x xidRecord) bool { return x.UUID != "" && x.UUID == t || x.PCI != "" && x.PCI == a })
}

func (m *Monitor) knownGPUs() []string {
	var out []string
	for _, g := range m.gpus {
		if g.uuid != "" {
			out = append(out, g.uuid)
		}
	}
	for _, r := range m.records {
		out = append(out, r.key())
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	slices.Sort(out)
	return out
}
