package gpu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/selftaint/selftaint/probes/strict"
)

// stateVersion is the version of the encoding State writes.
const stateVersion = 1

// maxXidRecords bounds the distinct Xids kept per GPU, so a GPU that
// raises every Xid there is cannot grow the state without end. The most
// severe are kept.
const maxXidRecords = 16

// savedState is what the Monitor keeps on the Node across restarts of
// the agent (see probes.Stateful): per GPU, the failures that only an
// observed recovery clears and the last problem of each signal; the GPUs
// the node is expected to have; the boot it was written in.
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
}

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
	// healthy to be cleared by.
	Recovered time.Time `json:"recovered,omitzero"`
	Rebooted  bool      `json:"rebooted,omitempty"`
	// Cleared is when an operator cleared the GPU's Xids.
	Cleared time.Time `json:"cleared,omitzero"`
}

// xidRecord counts one Xid on one GPU (or MIG instance).
type xidRecord struct {
	Xid    uint64    `json:"xid"`
	Action Action    `json:"action"`
	Name   string    `json:"name,omitempty"`
	Count  int       `json:"count"`
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	// GI and CI are the MIG GPU and compute instance, nil when the Xid
	// is not from one.
	GI *uint32 `json:"gi,omitempty"`
	CI *uint32 `json:"ci,omitempty"`
	// UUID is the device's UUID on a stray record, when the event's
	// device could say it: the GPU it belongs to may be identified later.
	UUID string `json:"uuid,omitempty"`
}

// finding is one problem a signal showed.
type finding struct {
	Probe  string    `json:"probe"`
	Reason string    `json:"reason"`
	Text   string    `json:"text"`
	Since  time.Time `json:"since"`
}

// encodeState encodes s canonically (the same state always gives the same
// bytes, so the agent writes only real changes).
func encodeState(s savedState) []byte {
	s.Version = stateVersion
	slices.Sort(s.Expected)
	slices.SortFunc(s.GPUs, func(a, b gpuRecord) int { return strings.Compare(a.key(), b.key()) })
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		// Only unsupported types fail, and savedState has none.
		panic(fmt.Sprintf("encoding GPU state: %v", err))
	}
	return bytes.TrimSpace(buf.Bytes())
}

// decodeState decodes what encodeState wrote, strictly: an unknown field,
// a version this build does not know or a record without an identity is
// an error that names it.
func decodeState(data []byte) (savedState, error) {
	var s savedState
	if err := strict.JSON(data, &s); err != nil {
		return savedState{}, fmt.Errorf("GPU state: %w", err)
	}
	if s.Version != stateVersion {
		return savedState{}, fmt.Errorf("GPU state: version %d, this selftaint reads version %d", s.Version, stateVersion)
	}
	for i, g := range s.GPUs {
		if g.UUID == "" && g.PCI == "" {
			return savedState{}, fmt.Errorf("GPU state: gpus[%d] has neither uuid nor pci", i)
		}
		if err := checkXids(g.Xids); err != nil {
			return savedState{}, fmt.Errorf("GPU state: gpus[%d].xids%w", i, err)
		}
	}
	if err := checkXids(s.Stray); err != nil {
		return savedState{}, fmt.Errorf("GPU state: stray%w", err)
	}
	return s, nil
}

// checkXids checks what a record can only hold garbage in: its action and
// its count. The error starts with the record's index, "[2]: ...".
func checkXids(l []xidRecord) error {
	for j, x := range l {
		if _, err := ParseAction(string(x.Action)); err != nil {
			return fmt.Errorf("[%d]: %w", j, err)
		}
		if x.Count < 1 {
			return fmt.Errorf("[%d]: count %d, want at least 1", j, x.Count)
		}
	}
	return nil
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
	return len(g.Xids) == 0 && len(g.Findings) == 0 && len(g.NVLinkUp) == 0 && !g.ECCEnabled && g.Recovered.IsZero() && g.Cleared.IsZero()
}

// addXid records one occurrence of x at at, keeping at most maxXidRecords
// distinct Xids (dropping the mildest, then the oldest).
func addXid(l []xidRecord, x xidRecord, at time.Time) []xidRecord {
	for i := range l {
		r := &l[i]
		if sameXid(*r, x) {
			r.Count++
			r.Last = at
			r.Action, r.Name = x.Action, x.Name
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
	return a.Xid == b.Xid && eqInstance(a.GI, b.GI) && eqInstance(a.CI, b.CI) && a.UUID == b.UUID
}

func eqInstance(a, b *uint32) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// clearXids drops the records the recovery covers: with rebooted, every
// one older than at; else the records whose action a GPU reset fixes
// (reset-gpu; reboot and contact-support stay). It returns what is left
// and what was dropped.
func clearXids(l []xidRecord, at time.Time, rebooted bool) (kept, dropped []xidRecord) {
	for _, r := range l {
		covered := !r.Last.After(at) && (rebooted || r.Action == ActionResetGPU)
		if covered {
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

// describe names the Xid, its count, when, and the MIG instance.
func (r xidRecord) describe() string {
	var b strings.Builder
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
