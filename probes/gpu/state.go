package gpu

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/selftaint/selftaint/probes/strict"
)

// stateVersion is the version of the encoding State writes: 2 leaves out
// what can be derived (see savedState). decodeState reads it and version
// 1, which wrote those fields; an agent that reads only version 1 says it
// cannot read version 2, rather than take the missing fields for empty.
const (
	stateVersion       = 2
	oldestStateVersion = 1
)

// maxXidRecords bounds the distinct Xids kept per GPU, so a GPU that
// raises every Xid there is cannot grow the state without end. The most
// severe are kept.
const maxXidRecords = 16

// maxStateLen is the longest state the agent writes (agent.MaxStateLen,
// which this package cannot import): a longer one is not written at all,
// so encodeState sheds what matters least to stay within it (see
// shedState).
const maxStateLen = 32 << 10

// maxFindingText bounds the text of a finding as kept in the state (the
// probe's own are shorter).
const maxFindingText = 128

// savedState is what the Monitor keeps on the Node across restarts of
// the agent (see probes.Stateful): per GPU, the failures that only an
// observed recovery clears and the last problem of each signal; the GPUs
// the node is expected to have; the boot it was written in.
//
// The encoding (version 2) is compact: what can be derived is not written
// (an Xid's action and name come from the catalog, a finding's probe from
// its reason, an Xid's last time when it is its first), times are whole
// seconds in UTC. Version 1 states, with those fields, still read.
type savedState struct {
	Version int `json:"v"`
	// Boot is the host's boot ID when the state was written: a different
	// one after a restart means the node rebooted, which resets every GPU.
	Boot string `json:"boot,omitempty"`
	// Expected are the PCI addresses of the GPUs the node is expected to
	// have: a GPU that disappears stays expected.
	Expected []string    `json:"expected,omitempty"`
	GPUs     []gpuRecord `json:"gpus,omitempty"`
	// Stray are fatal Xids from a device NVML did not identify.
	Stray []xidRecord `json:"stray,omitempty"`
	// Short is the last successful count of the GPUs when it found fewer
	// than the node should have: after a restart it stands while NVML
	// cannot count the GPUs, as it does in the agent that counted.
	Short *savedCount `json:"short,omitempty"`
}

// savedCount is a count of the GPUs that found some missing.
type savedCount struct {
	Count int `json:"count"`
	// Missing are the PCI addresses of the expected GPUs NVML did not
	// see, OnBus those of them still on the PCI bus.
	Missing []string `json:"missing,omitempty"`
	OnBus   []string `json:"onBus,omitempty"`
}

// maxSavedCount bounds a saved count (no node has more GPUs).
const maxSavedCount = 1024

// gpuRecord is one GPU's kept state, keyed by UUID (or, for a GPU whose
// UUID could not be read, by PCI address).
type gpuRecord struct {
	UUID  string `json:"uuid,omitempty"`
	PCI   string `json:"pci,omitempty"`
	Index int    `json:"index"`
	// Xids are the fatal Xids raised since the last observed recovery.
	Xids []xidRecord `json:"xids,omitempty"`
	// Findings are the last problems of each signal, by signal, kept
	// until that signal reads healthy.
	Findings map[string][]finding `json:"findings,omitempty"`
	// NVLinkUp are the links seen up: one of them down is a problem.
	NVLinkUp []int `json:"nvlinkUp,omitempty"`
	// ECCEnabled is true once ECC was seen enabled.
	ECCEnabled bool `json:"eccEnabled,omitempty"`
	// Recovered is when a recovery was observed (a reset, or with
	// Rebooted a reboot) that the Xids before it wait on the GPU being
	// healthy to be cleared by. Only State and Restore use it: the
	// Monitor keeps reset and reboot.
	Recovered time.Time `json:"recovered,omitzero"`
	Rebooted  bool      `json:"rebooted,omitempty"`
	// Cleared is when an operator cleared the GPU's Xids (requestedAt),
	// while that waits for the GPU to read healthy. Only State and Restore
	// use it: the Monitor keeps clear.
	Cleared time.Time `json:"cleared,omitzero"`

	// What follows is the Monitor's, not the state's.

	// reset and reboot are a reset and a reboot observed that wait for
	// the GPU to read healthy; clear an operator's clear that does.
	reset, reboot, clear mark
	// down: the GPU was seen lost, or missing from NVML, and has not read
	// back since: its return is a reset.
	down bool
}

// mark is when the Monitor saw something. seq is its place in the order
// of what this agent saw (1, 2, ...; see Monitor.tick), 0 for what was
// restored from before the restart, which is older than all of that. at
// is the wall-clock time, which the state keeps: it orders only two
// restored things, since a clock step (back or forward, while the agent
// runs or across a restart) can reorder wall-clock times.
type mark struct {
	at  time.Time
	seq uint64
}

func (k mark) isSet() bool { return !k.at.IsZero() || k.seq > 0 }

// covers reports whether something last seen at (seq, at) was seen at or
// before k.
func (k mark) covers(seq uint64, at time.Time) bool {
	if k.seq > 0 {
		return seq <= k.seq
	}
	return seq == 0 && !at.After(k.at)
}

// persist returns r with the recoveries and clear it waits on in the
// state's fields. A reboot is written rather than a reset where both
// wait: it covers more (the reset's Xids raised between the two are then
// held until the next reset).
func (r gpuRecord) persist() gpuRecord {
	r.Recovered, r.Rebooted, r.Cleared = r.reset.at, false, r.clear.at
	if r.reboot.isSet() {
		r.Recovered, r.Rebooted = r.reboot.at, true
	}
	return r
}

// restored returns r, as decoded, with the state's recovery and clear as
// the Monitor keeps them (restored: seq 0).
func (r gpuRecord) restored() gpuRecord {
	r.reset, r.reboot, r.clear = mark{}, mark{}, mark{at: r.Cleared}
	if r.Rebooted {
		r.reboot.at = r.Recovered
	} else {
		r.reset.at = r.Recovered
	}
	r.Recovered, r.Rebooted, r.Cleared = time.Time{}, false, time.Time{}
	return r
}

// xidRecord counts one Xid on one GPU (or MIG instance).
type xidRecord struct {
	Xid uint64 `json:"xid"`
	// Action and Name are the catalog's, with config's overrides. The
	// state does not keep them: Restore looks them up again. States
	// written before have them; they are checked, then replaced.
	Action Action    `json:"action,omitempty"`
	Name   string    `json:"name,omitempty"`
	Count  int       `json:"count"`
	First  time.Time `json:"first"`
	// Last is not written when it is First.
	Last time.Time `json:"last,omitzero"`
	// GI and CI are the MIG GPU and compute instance, nil when the Xid
	// is not from one.
	GI *uint32 `json:"gi,omitempty"`
	CI *uint32 `json:"ci,omitempty"`
	// UUID is the device's UUID on a stray record, when the event's
	// device could say it: the GPU it belongs to may be identified later.
	UUID string `json:"uuid,omitempty"`
	// PCI is the GPU's PCI address on a stray record of a kernel Xid
	// (Monitor.KernelXid) whose bus id no GPU had: the GPU it belongs to
	// may be identified later.
	PCI string `json:"pci,omitempty"`
	// seq is the Monitor's order of the last occurrence (see mark): 0
	// for one restored from before the restart. Not in the state.
	seq uint64
}

// finding is one problem a signal showed.
type finding struct {
	// Probe is the probe the reason belongs to. The state does not keep
	// it: decodeState derives it from the reason. States written before
	// have it; it is checked.
	Probe  string    `json:"probe,omitempty"`
	Reason string    `json:"reason"`
	Text   string    `json:"text"`
	Since  time.Time `json:"since"`
}

// encodeState encodes s canonically (the same state always gives the same
// bytes, so the agent writes only real changes) and compactly, within
// maxStateLen.
func encodeState(s savedState) []byte {
	s = compactState(s)
	if b := marshalState(s); len(b) <= maxStateLen {
		return b
	}
	return shedState(s)
}

// marshalState encodes s, a compact state, without the actions of its
// Xids (which compactState keeps for shedState).
func marshalState(s savedState) []byte {
	s.Stray = withoutActions(s.Stray)
	s.GPUs = slices.Clone(s.GPUs)
	for i := range s.GPUs {
		s.GPUs[i].Xids = withoutActions(s.GPUs[i].Xids)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		// Only unsupported types fail, and savedState has none.
		panic(fmt.Sprintf("encoding GPU state: %v", err))
	}
	return bytes.TrimSpace(buf.Bytes())
}

// compactState returns a copy of s in its canonical, compact form: sorted,
// without what can be derived (but the Xids' actions, which shedState
// needs and marshalState leaves out), times in whole seconds (an Xid's and a
// finding's rounded up, a recovery's and a clear's down, so that a
// rounded recovery never covers an Xid it did not), texts bounded.
func compactState(s savedState) savedState {
	out := savedState{Version: stateVersion, Boot: s.Boot, Stray: compactXids(s.Stray)}
	if s.Short != nil {
		out.Short = &savedCount{Count: s.Short.Count,
			Missing: slices.Sorted(slices.Values(s.Short.Missing)), OnBus: slices.Sorted(slices.Values(s.Short.OnBus))}
	}
	out.Expected = slices.Compact(slices.Sorted(slices.Values(s.Expected)))
	for _, g := range s.GPUs {
		c := g
		c.Xids = compactXids(g.Xids)
		c.NVLinkUp = slices.Clone(g.NVLinkUp)
		c.Recovered, c.Cleared = floorSecond(g.Recovered), floorSecond(g.Cleared)
		c.Findings = nil
		if len(g.Findings) > 0 {
			c.Findings = make(map[string][]finding, len(g.Findings))
			for sig, fs := range g.Findings {
				cf := make([]finding, len(fs))
				for i, f := range fs {
					cf[i] = finding{Reason: f.Reason, Text: truncateText(f.Text, maxFindingText), Since: ceilSecond(f.Since)}
				}
				c.Findings[sig] = cf
			}
		}
		out.GPUs = append(out.GPUs, c)
	}
	slices.SortFunc(out.GPUs, func(a, b gpuRecord) int { return strings.Compare(a.key(), b.key()) })
	return out
}

// withoutActions leaves out the actions the catalog gives back, all but
// those of Xid 154, whose line named the action (kernelXidInfo).
func withoutActions(l []xidRecord) []xidRecord {
	l = slices.Clone(l)
	for i := range l {
		if l[i].Xid != xidRecoveryActionChanged {
			l[i].Action = ""
		}
	}
	return l
}

func compactXids(l []xidRecord) []xidRecord {
	if len(l) == 0 {
		return nil
	}
	out := make([]xidRecord, len(l))
	for i, x := range l {
		x.Name = ""
		x.First, x.Last = ceilSecond(x.First), ceilSecond(x.Last)
		if x.Last.Equal(x.First) {
			x.Last = time.Time{}
		}
		x.GI, x.CI = cloneInstance(x.GI), cloneInstance(x.CI)
		out[i] = x
	}
	return out
}

func cloneInstance(p *uint32) *uint32 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func floorSecond(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Second)
}

func ceilSecond(t time.Time) time.Time {
	f := floorSecond(t)
	if f.Before(t) {
		return f.Add(time.Second)
	}
	return f
}

// truncateText cuts s to at most n bytes, on a rune boundary, marking the
// cut with "...".
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// shedState returns the encoding of s (compact and canonical) without what
// matters least, so that it fits in maxStateLen: first the findings of the
// degraded probe (a read finds them again), the mildest and then the
// oldest first; then the Xids of each GPU (and the stray ones) but its
// worst, the mildest and then the oldest first. The worst Xid of each GPU
// (and of each device the stray ones name, or none), every finding of the
// fatal probe and the baselines are never dropped, and the Xids kept keep
// their counts: those fit for 16 GPUs (see TestStateWorstDayFits); should
// they not, the state is too long and the agent says so.
func shedState(s savedState) []byte {
	items := sheddable(s)
	k := sort.Search(len(items), func(k int) bool { return len(marshalState(s.without(items[:k]))) <= maxStateLen })
	return marshalState(s.without(items[:k]))
}

// shedItem is one Xid record or finding shedState may drop.
type shedItem struct {
	at    shedPlace
	key   string // the GPU's key
	rank  int    // how much it matters: the lowest goes first
	since time.Time
	xid   uint64
}

// shedPlace says where a shedItem is in a savedState.
type shedPlace struct {
	gpu int    // index in GPUs; -1 for a stray Xid
	sig string // the finding's signal; "" for an Xid
	i   int    // index in its list
}

// sheddable lists what shedState may drop from s, in the order it drops
// them: the degraded findings, the least severe reason first, then the
// Xids but the worst of each list (by device, for the stray ones), the
// mildest first; among equals the oldest first.
func sheddable(s savedState) []shedItem {
	degraded := reasonOrder(NameDegraded)
	items := xidsToShed(-1, "", s.Stray)
	for gi, g := range s.GPUs {
		items = append(items, xidsToShed(gi, g.key(), g.Xids)...)
		for sig, fs := range g.Findings {
			for i, f := range fs {
				if r := slices.Index(degraded, f.Reason); r >= 0 {
					items = append(items, shedItem{at: shedPlace{gi, sig, i}, key: g.key(), rank: len(degraded) - r, since: f.Since})
				}
			}
		}
	}
	slices.SortFunc(items, func(a, b shedItem) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), a.since.Compare(b.since), strings.Compare(a.key, b.key), cmp.Compare(a.at.gpu, b.at.gpu),
			strings.Compare(a.at.sig, b.at.sig), cmp.Compare(a.xid, b.xid), cmp.Compare(a.at.i, b.at.i))
	})
	return items
}

// xidsToShed lists the Xid records of l but the worst (of each device
// named, for stray records), ranked above every finding.
func xidsToShed(gpu int, key string, l []xidRecord) []shedItem {
	worst := map[string]int{}
	for i, x := range l {
		w, ok := worst[x.device()]
		if !ok || x.Action.Severity() > l[w].Action.Severity() ||
			x.Action.Severity() == l[w].Action.Severity() && !x.lastSeen().Before(l[w].lastSeen()) {
			worst[x.device()] = i
		}
	}
	var items []shedItem
	for i, x := range l {
		if worst[x.device()] != i {
			items = append(items, shedItem{at: shedPlace{gpu, "", i}, key: key, rank: 1000 + x.Action.Severity(), since: x.lastSeen(), xid: x.Xid})
		}
	}
	return items
}

// without returns s without the items, and without the records left
// empty.
func (s savedState) without(items []shedItem) savedState {
	drop := make(map[shedPlace]bool, len(items))
	for _, it := range items {
		drop[it.at] = true
	}
	keepXids := func(gpu int, l []xidRecord) []xidRecord {
		var out []xidRecord
		for i, x := range l {
			if !drop[shedPlace{gpu, "", i}] {
				out = append(out, x)
			}
		}
		return out
	}
	out := s
	out.Stray = keepXids(-1, s.Stray)
	out.GPUs = nil
	for gi, g := range s.GPUs {
		g.Xids = keepXids(gi, g.Xids)
		g.Findings = nil
		for sig, l := range s.GPUs[gi].Findings {
			for i, f := range l {
				if drop[shedPlace{gi, sig, i}] {
					continue
				}
				if g.Findings == nil {
					g.Findings = map[string][]finding{}
				}
				g.Findings[sig] = append(g.Findings[sig], f)
			}
		}
		if !g.empty() {
			out.GPUs = append(out.GPUs, g)
		}
	}
	return out
}

// decodeState decodes what encodeState wrote, or an encoder before it
// (with the fields now derived), strictly: an unknown field, a version
// this build does not know, or a value no encoder wrote is an error that
// names it by its JSON path. Values no encoder wrote: a record without an
// identity, two records of one GPU (or two of one Xid), a PCI address
// that is not one, a negative index, an Xid record of an action that does
// not fail a GPU or without a count or a first time, a finding without a
// reason, text or time, or of a signal or reason this build does not
// know. It fills in what the encoding leaves out but the catalog's part
// (Restore looks that up): an Xid's last time, a finding's probe; and it
// writes PCI addresses as sysfs does.
func decodeState(data []byte) (savedState, error) {
	var s savedState
	if err := strict.JSON(data, &s); err != nil {
		return savedState{}, fmt.Errorf("GPU state: %w", err)
	}
	if s.Version < oldestStateVersion || s.Version > stateVersion {
		return savedState{}, fmt.Errorf("GPU state: version %d, this selftaint reads versions %d to %d", s.Version, oldestStateVersion, stateVersion)
	}
	for i, a := range s.Expected {
		n, err := checkPCI(a)
		if err != nil {
			return savedState{}, fmt.Errorf("GPU state: expected[%d]: %w", i, err)
		}
		s.Expected[i] = n
	}
	seen := make(map[string]int, len(s.GPUs))
	for i := range s.GPUs {
		g := &s.GPUs[i]
		if g.UUID == "" && g.PCI == "" {
			return savedState{}, fmt.Errorf("GPU state: gpus[%d] has neither uuid nor pci", i)
		}
		if g.PCI != "" {
			n, err := checkPCI(g.PCI)
			if err != nil {
				return savedState{}, fmt.Errorf("GPU state: gpus[%d].pci: %w", i, err)
			}
			g.PCI = n
		}
		if g.Index < 0 {
			return savedState{}, fmt.Errorf("GPU state: gpus[%d].index: %d, want at least 0", i, g.Index)
		}
		if j, ok := seen[g.key()]; ok {
			return savedState{}, fmt.Errorf("GPU state: gpus[%d]: GPU %s again, after gpus[%d]: a GPU has one record", i, g.key(), j)
		}
		seen[g.key()] = i
		if err := checkXids(g.Xids); err != nil {
			return savedState{}, fmt.Errorf("GPU state: gpus[%d].xids%w", i, err)
		}
		if err := checkFindings(g.Findings); err != nil {
			return savedState{}, fmt.Errorf("GPU state: gpus[%d].findings%w", i, err)
		}
	}
	if err := checkXids(s.Stray); err != nil {
		return savedState{}, fmt.Errorf("GPU state: stray%w", err)
	}
	if s.Short != nil {
		if err := checkCount(s.Short); err != nil {
			return savedState{}, fmt.Errorf("GPU state: short.%w", err)
		}
	}
	return s, nil
}

// checkCount checks a saved count and normalizes its PCI addresses.
func checkCount(c *savedCount) error {
	if c.Count < 0 || c.Count > maxSavedCount {
		return fmt.Errorf("count: %d, want 0 to %d", c.Count, maxSavedCount)
	}
	for _, f := range []struct {
		name string
		l    []string
	}{{"missing", c.Missing}, {"onBus", c.OnBus}} {
		for i, a := range f.l {
			n, err := checkPCI(a)
			if err != nil {
				return fmt.Errorf("%s[%d]: %w", f.name, i, err)
			}
			if slices.Contains(f.l[:i], n) {
				return fmt.Errorf("%s[%d]: %s again", f.name, i, n)
			}
			f.l[i] = n
		}
	}
	for i, a := range c.OnBus {
		if !slices.Contains(c.Missing, a) {
			return fmt.Errorf("onBus[%d]: %s is not among missing", i, a)
		}
	}
	return nil
}

// pciAddress is a PCI address as sysfs writes it and normalizePCI returns
// it: domain:bus:device.function in lower-case hex (the domain 4 digits,
// or more for a VMD domain such as 10000), the device below 0x20 and the
// function below 8.
var pciAddr = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$`)

// checkPCI returns the PCI address a as normalizePCI writes it, or an
// error if a is not a PCI address.
func checkPCI(a string) (string, error) {
	if n := normalizePCI(a); pciAddr.MatchString(n) {
		return n, nil
	}
	return "", fmt.Errorf("%q is not a PCI address (domain:bus:device.function in hex, as sysfs writes it: \"0000:07:00.0\")", a)
}

// xidKey is what sameXid compares.
type xidKey struct {
	xid    uint64
	gi, ci int64 // -1: none
	uuid   string
	pci    string
}

func (x xidRecord) key() xidKey {
	k := xidKey{xid: x.Xid, gi: -1, ci: -1, uuid: x.UUID, pci: x.PCI}
	if x.GI != nil {
		k.gi = int64(*x.GI)
	}
	if x.CI != nil {
		k.ci = int64(*x.CI)
	}
	return k
}

// checkXids checks what a record can hold garbage in: its action (where
// it has one: an older encoder wrote it) must fail a GPU, since only those
// Xids are kept; its count, its times; no two records of one Xid. It sets
// the last time the encoding leaves out. The error starts with the
// record's index, "[2]: ...".
func checkXids(l []xidRecord) error {
	seen := make(map[xidKey]int, len(l))
	for j := range l {
		x := &l[j]
		if x.Action != "" {
			if _, err := ParseAction(string(x.Action)); err != nil {
				return fmt.Errorf("[%d]: %w", j, err)
			}
			if !x.Action.Fatal() {
				return fmt.Errorf("[%d]: action %q does not fail a GPU, and only Xids that do are kept", j, x.Action)
			}
		}
		if x.PCI != "" {
			n, err := checkPCI(x.PCI)
			if err != nil {
				return fmt.Errorf("[%d].pci: %w", j, err)
			}
			x.PCI = n
		}
		if x.Count < 1 {
			return fmt.Errorf("[%d]: count %d, want at least 1", j, x.Count)
		}
		if x.First.IsZero() {
			return fmt.Errorf("[%d]: no first time", j)
		}
		switch {
		case x.Last.IsZero():
			x.Last = x.First
		case x.Last.Before(x.First):
			return fmt.Errorf("[%d]: last %s is before first %s", j, stamp(x.Last), stamp(x.First))
		}
		if i, ok := seen[x.key()]; ok {
			return fmt.Errorf("[%d]: Xid %d again, after [%d]: one record counts one Xid", j, x.Xid, i)
		}
		seen[x.key()] = j
	}
	return nil
}

// checkFindings checks each finding's signal, reason, text and time, and
// sets its probe (from its reason). The error starts with the path below
// "findings", ".NVLink[0]: ...".
func checkFindings(fs map[string][]finding) error {
	for _, sig := range slices.Sorted(maps.Keys(fs)) {
		l := fs[sig]
		if !findingSignal(sig) {
			return fmt.Errorf(".%s: unknown signal %q", sig, sig)
		}
		if len(l) == 0 {
			return fmt.Errorf(".%s: no findings", sig)
		}
		for k := range l {
			f := &l[k]
			probe := probeOf(f.Reason)
			switch {
			case f.Reason == "":
				return fmt.Errorf(".%s[%d]: no reason", sig, k)
			case probe == "":
				return fmt.Errorf(".%s[%d]: unknown reason %q", sig, k, f.Reason)
			case f.Probe != "" && f.Probe != probe:
				return fmt.Errorf(".%s[%d]: probe %q, but reason %s is the %s probe's", sig, k, f.Probe, f.Reason, probe)
			case f.Text == "":
				return fmt.Errorf(".%s[%d]: no text", sig, k)
			case f.Since.IsZero():
				return fmt.Errorf(".%s[%d]: no since time", sig, k)
			}
			f.Probe = probe
		}
	}
	return nil
}

// findingSignal reports whether findings are kept under sig: a signal a
// probe judges (but Xid events, kept as Xid records), or "lost".
func findingSignal(sig string) bool {
	if sig == "lost" {
		return true
	}
	return sig != sigXid && (slices.Contains(signalsOf(NameFatal), sig) || slices.Contains(signalsOf(NameDegraded), sig))
}

// probeOf is the probe that reports reason, "" for none.
func probeOf(reason string) string {
	for _, p := range []string{NameFatal, NameDegraded} {
		if slices.Contains(reasonOrder(p), reason) {
			return p
		}
	}
	return ""
}

// key identifies the record: its UUID, else its PCI address.
func (g gpuRecord) key() string {
	if g.UUID != "" {
		return g.UUID
	}
	return "pci:" + g.PCI
}

// empty reports whether the record holds nothing worth keeping.
func (g gpuRecord) empty() bool {
	return len(g.Xids) == 0 && len(g.Findings) == 0 && len(g.NVLinkUp) == 0 && !g.ECCEnabled && g.Recovered.IsZero() && g.Cleared.IsZero() &&
		!g.reset.isSet() && !g.reboot.isSet() && !g.clear.isSet()
}

// lastSeen is when the Xid was last seen (in the compact encoding, Last is
// left out when it is First).
func (r xidRecord) lastSeen() time.Time {
	if r.Last.IsZero() {
		return r.First
	}
	return r.Last
}

// addXid records one occurrence of x at at (in the Monitor's order,
// x.seq), keeping at most maxXidRecords distinct Xids (dropping the
// mildest, then the oldest).
func addXid(l []xidRecord, x xidRecord, at time.Time) []xidRecord {
	for i := range l {
		r := &l[i]
		if sameXid(*r, x) {
			r.Count++
			r.Last = at
			r.seq = max(r.seq, x.seq)
			r.Name = x.Name
			if x.Action != r.Action && x.Action.Severity() > r.Action.Severity() {
				r.Action = x.Action // an Xid 154 whose line named a worse action
			}
			return l
		}
	}
	x.Count, x.First, x.Last = 1, at, at
	return capXids(append(l, x))
}

// capXids drops the mildest, then the oldest, records beyond
// maxXidRecords.
func capXids(l []xidRecord) []xidRecord {
	for len(l) > maxXidRecords {
		drop := 0
		for i, r := range l {
			d := l[drop]
			if r.Action.Severity() < d.Action.Severity() || r.Action.Severity() == d.Action.Severity() && r.Last.Before(d.Last) {
				drop = i
			}
		}
		l = slices.Delete(l, drop, drop+1)
	}
	return l
}

// mergeXids adds the records of src to dst: counts add up, the first and
// last times widen.
func mergeXids(dst, src []xidRecord) []xidRecord {
	for _, x := range src {
		i := slices.IndexFunc(dst, func(r xidRecord) bool { return sameXid(r, x) })
		if i < 0 {
			dst = capXids(append(dst, x))
			continue
		}
		r := &dst[i]
		r.Count += x.Count
		r.seq = max(r.seq, x.seq)
		if x.Action != r.Action && x.Action.Severity() > r.Action.Severity() {
			r.Action = x.Action
		}
		if x.First.Before(r.First) {
			r.First = x.First
		}
		if x.Last.After(r.Last) {
			r.Last = x.Last
		}
	}
	return dst
}

// sameXid reports whether a and b count the same Xid: of the same MIG
// instance and, on stray records, the same device.
func sameXid(a, b xidRecord) bool {
	return a.Xid == b.Xid && eqInstance(a.GI, b.GI) && eqInstance(a.CI, b.CI) && a.UUID == b.UUID && a.PCI == b.PCI
}

func eqInstance(a, b *uint32) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// recoveredXids drops the records a recovery observed at k covers: with
// rebooted, every one seen at or before k; else those whose action a GPU
// reset fixes (reset-gpu; reboot and contact-support stay). It returns
// what is left and what was dropped.
func recoveredXids(l []xidRecord, k mark, rebooted bool) (kept, dropped []xidRecord) {
	return splitXids(l, func(r xidRecord) bool {
		return k.covers(r.seq, r.lastSeen()) && (rebooted || r.Action == ActionResetGPU)
	})
}

// clearedXids drops the records an operator's clear covers: those held
// when it was handled (k.seq; restored ones, seq 0, were) and last seen at
// or before its requestedAt (k.at), so that an Xid raised after
// requestedAt stays, whatever the operator's clock said.
func clearedXids(l []xidRecord, k mark) (kept, dropped []xidRecord) {
	return splitXids(l, func(r xidRecord) bool { return k.covers(r.seq, r.lastSeen()) && !r.lastSeen().After(k.at) })
}

func splitXids(l []xidRecord, drop func(xidRecord) bool) (kept, dropped []xidRecord) {
	for _, r := range l {
		if drop(r) {
			dropped = append(dropped, r)
		} else {
			kept = append(kept, r)
		}
	}
	return kept, dropped
}

// worstAction is the most severe action of the records, "" for none.
func worstAction(l []xidRecord) Action {
	var worst Action
	for _, r := range l {
		if worst == "" || r.Action.Severity() > worst.Severity() {
			worst = r.Action
		}
	}
	return worst
}

// device is the device a stray record names: its UUID, else its PCI
// address ("" when it names none).
func (r xidRecord) device() string {
	if r.UUID != "" {
		return r.UUID
	}
	return r.PCI
}

// describe names the Xid, its count, when, and the MIG instance.
func (r xidRecord) describe() string {
	var b strings.Builder
	if r.PCI != "" {
		fmt.Fprintf(&b, "PCI %s (from the kernel log): ", r.PCI)
	}
	if r.GI != nil {
		fmt.Fprintf(&b, "MIG GI %d", *r.GI)
		if r.CI != nil {
			fmt.Fprintf(&b, " CI %d", *r.CI)
		}
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "Xid %d (%s)", r.Xid, r.Name)
	if r.Count == 1 {
		fmt.Fprintf(&b, " at %s", stamp(r.First))
	} else {
		fmt.Fprintf(&b, " %d times, first at %s, last at %s", r.Count, stamp(r.First), stamp(r.Last))
	}
	return b.String()
}
