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
		s.GPUs = append(s.GPUs, cloneRecord(*g.rec))
	}
	for _, r := range m.records {
		s.GPUs = append(s.GPUs, cloneRecord(*r))
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
// the expected GPUs are seen afresh. A state that cannot be used changes
// nothing.
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
	if !rebooted {
		for _, a := range s.Expected {
			if !slices.Contains(m.expected, a) {
				m.expected = append(m.expected, a)
			}
		}
		m.stray = mergeXids(m.stray, m.judgeKept(s.Stray))
		if s.Short != nil && !m.lastCount.known {
			// What the last count found stands until a count here.
			m.lastCount = lastCount{known: true, count: s.Short.Count}
			for _, a := range s.Short.Missing {
				m.lastCount.missing = append(m.lastCount.missing, missingGPU{pci: a, onBus: slices.Contains(s.Short.OnBus, a)})
			}
		}
	}
	for _, r := range s.GPUs {
		rec := cloneRecord(r)
		rec.Xids = m.judgeKept(rec.Xids)
		if rec.empty() {
			continue
		}
		if rebooted && len(rec.Xids) > 0 {
			rec.Recovered, rec.Rebooted = now, true
		}
		m.records[rec.key()] = &rec
	}
	for _, g := range m.gpus {
		m.adopt(g)
	}
	return nil
}

// judgeKept judges kept Xids as a new occurrence would be judged: by the
// catalog with config's overrides now, whatever the state said (it does
// not keep the action, and an older state's is checked but not used).
// Config overrides extend the catalog: an Xid config now calls ignore or
// restart-app no longer fails the GPU, so a kept one goes, as the
// operator who wrote that asked; one now judged more (or less) severe
// holds with its new action. At most maxXidRecords stay, the most severe.
func (m *Monitor) judgeKept(l []xidRecord) []xidRecord {
	var out []xidRecord
	for _, x := range l {
		info := m.catalog.Lookup(x.Xid)
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
// the fatal Xids it raised before requested, once it reads healthy, and
// the problems held for signals it cannot read. A GPU not seen since the
// agent restarted (a kept record) cannot read healthy: what it held from
// before requested goes at once, and its record with it once it holds no
// failure. It returns what it cleared.
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
	var words []string
	for _, g := range m.gpus {
		if !named(g.uuid, g.pci) || g.rec == nil {
			continue
		}
		if w := clearRecord(g.rec, requested); w != "" {
			words = append(words, gpuLabel(g.index, g.uuid)+": "+w)
		}
	}
	for k, r := range m.records {
		if named(r.UUID, r.PCI) {
			words = append(words, m.clearKept(k, r, requested)...)
		}
	}
	if all && len(m.stray) > 0 {
		var kept []xidRecord
		kept, dropped := clearXids(m.stray, requested, true)
		m.stray = kept
		if len(dropped) > 0 {
			words = append(words, "unidentified GPU: "+shortXids(dropped))
		}
	}
	if len(words) == 0 {
		return "nothing was held for " + strings.Join(targets, ", "), nil
	}
	slices.Sort(words)
	return "cleared " + strings.Join(words, "; ") + " (Xids go once the GPU reads healthy; a problem still there is found again)", nil
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

// clearRecord marks rec's Xids before requested cleared and drops its
// held findings from before requested; it says what.
func clearRecord(rec *gpuRecord, requested time.Time) string {
	var parts []string
	if len(rec.Xids) > 0 {
		rec.Cleared = requested
		parts = append(parts, "Xid "+shortXids(rec.Xids))
	}
	parts = append(parts, clearFindings(rec, requested)...)
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// clearKept drops, from the kept record of a GPU not seen, its Xids last
// seen before requested and its findings from before requested, at once
// (the GPU is not there to read healthy), and the record once it holds no
// failure; it says what, or nothing when nothing went.
func (m *Monitor) clearKept(key string, rec *gpuRecord, requested time.Time) []string {
	var parts []string
	kept, dropped := clearXids(rec.Xids, requested, true)
	rec.Xids = kept
	if len(dropped) > 0 {
		parts = append(parts, "Xid "+shortXids(dropped))
	}
	parts = append(parts, clearFindings(rec, requested)...)
	slices.Sort(parts)
	w := strings.Join(parts, ", ")
	label := fmt.Sprintf("GPU %s (not seen since the agent restarted): ", rec.key())
	switch {
	case len(rec.Xids) == 0 && len(rec.Findings) == 0 && w == "":
		delete(m.records, key)
		return []string{label + "its kept record"}
	case len(rec.Xids) == 0 && len(rec.Findings) == 0:
		delete(m.records, key)
		return []string{label + w + " and its kept record"}
	case w != "":
		return []string{label + w + " (what it raised after the request stays)"}
	}
	return nil
}

// clearFindings drops rec's findings from before requested and returns
// the signals it dropped some of.
func clearFindings(rec *gpuRecord, requested time.Time) []string {
	var parts []string
	for sig, fs := range rec.Findings {
		kept := slices.DeleteFunc(slices.Clone(fs), func(f finding) bool { return !f.Since.After(requested) })
		if len(kept) < len(fs) {
			parts = append(parts, sig)
		}
		if len(kept) == 0 {
			delete(rec.Findings, sig)
		} else {
			rec.Findings[sig] = kept
		}
	}
	return parts
}

// knows reports whether t names a GPU the Monitor knows.
func (m *Monitor) knows(t string) bool {
	for _, g := range m.gpus {
		if g.uuid == t || g.pci != "" && (g.pci == normalizePCI(t)) {
			return true
		}
	}
	for _, r := range m.records {
		if r.UUID == t || r.PCI != "" && r.PCI == normalizePCI(t) {
			return true
		}
	}
	return false
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
