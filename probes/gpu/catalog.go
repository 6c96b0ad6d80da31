package gpu

// This file holds NVIDIA's Xid catalog: what each Xid means and what NVIDIA
// says to do about it, shipped as data in xids.csv so that a reviewer can
// check every row against NVIDIA's own table, and config can override it.

import (
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Action is what to do about an Xid, after NVIDIA's Xid catalog.
type Action string

// The actions, mildest first.
const (
	ActionIgnore         Action = "ignore"          // nothing to do; not a GPU fault
	ActionRestartApp     Action = "restart-app"     // the application caused it or must restart; the GPU is fine
	ActionResetGPU       Action = "reset-gpu"       // the GPU must be reset before it is trusted again
	ActionReboot         Action = "reboot"          // the node must be rebooted
	ActionContactSupport Action = "contact-support" // hardware needs service (e.g. RMA / field diagnostics)
)

// Actions returns every action, mildest first (ignore, restart-app,
// reset-gpu, reboot, contact-support).
func Actions() []Action {
	return []Action{ActionIgnore, ActionRestartApp, ActionResetGPU, ActionReboot, ActionContactSupport}
}

// ParseAction parses an action name as written in config (the constants'
// values); the error lists the accepted names.
func ParseAction(s string) (Action, error) {
	for _, a := range Actions() {
		if s == string(a) {
			return a, nil
		}
	}
	names := make([]string, 0, len(Actions()))
	for _, a := range Actions() {
		names = append(names, string(a))
	}
	return "", fmt.Errorf("unknown Xid action %q: want one of %s", s, strings.Join(names, ", "))
}

// Severity orders actions, mildest 0: ignore < restart-app < reset-gpu <
// reboot < contact-support. It is -1 for a string that is no action.
func (a Action) Severity() int {
	for i, b := range Actions() {
		if a == b {
			return i
		}
	}
	return -1
}

// Fatal reports whether a GPU that raised an Xid with this action has failed
// (reset-gpu, reboot, contact-support): true; ignore and restart-app: false.
func (a Action) Fatal() bool {
	return a.Severity() >= ActionResetGPU.Severity()
}

// Reason is the NodeCondition reason for a GPU failed for this action:
// reset-gpu "GPUResetRequired", reboot "GPURebootRequired", contact-support
// "GPUFailure"; "" for the others.
func (a Action) Reason() string {
	switch a {
	case ActionResetGPU:
		return "GPUResetRequired"
	case ActionReboot:
		return "GPURebootRequired"
	case ActionContactSupport:
		return "GPUFailure"
	}
	return ""
}

// Advice is the recommended action in words, for messages.
func (a Action) Advice() string {
	switch a {
	case ActionIgnore:
		return "none"
	case ActionRestartApp:
		return "restart the application"
	case ActionResetGPU:
		return "reset the GPU"
	case ActionReboot:
		return "reboot the node"
	case ActionContactSupport:
		return "contact NVIDIA support (the GPU may need service)"
	}
	return fmt.Sprintf("unknown action %q", string(a))
}

// NameUnknown is the name of an Xid that NVIDIA's catalog does not list.
const NameUnknown = "not in NVIDIA's Xid catalog"

// XidInfo is what the catalog says about one Xid.
type XidInfo struct {
	Xid    uint64
	Name   string // NVIDIA's name, e.g. "GPU has fallen off the bus"; for unknown Xids NameUnknown
	Action Action
	// Known is false for an Xid neither the catalog nor an override names:
	// such an Xid is fatal, with Action ActionResetGPU.
	Known bool
	// Overridden is true when config set the action.
	Overridden bool
}

// String is e.g. "Xid 79 (GPU has fallen off the bus; reboot the node)".
func (i XidInfo) String() string {
	return fmt.Sprintf("Xid %d (%s; %s)", i.Xid, i.Name, i.Action.Advice())
}

// Problem is what the fatal probe ("gpu") reports for GPU number index
// after it raised this Xid once, at: the condition's reason and message,
// as the probe words them. fatal is false, and reason and message empty,
// for an Xid whose action is not fatal (ignore, restart-app): no probe
// reports one, so no condition changes.
func (i XidInfo) Problem(index int, at time.Time) (reason, message string, fatal bool) {
	if !i.Action.Fatal() {
		return "", "", false
	}
	r := xidRecord{Xid: i.Xid, Action: i.Action, Name: i.Name, Count: 1, First: at}
	reason, message = xidProblem(gpuLabel(index, ""), []xidRecord{r})
	return reason, message, true
}

// xidsCSV is NVIDIA's Xid catalog; its header comment says where the data
// comes from and how NVIDIA's resolution buckets map to actions.
//
//go:embed xids.csv
var xidsCSV string

// catalogHeader is the first record of the CSV format, and catalogFields
// the number of fields of every record.
const (
	catalogHeader = "xid,name,action,nvidia_bucket,mnemonic"
	catalogFields = 5
)

// catalogEntry is one Xid of a Catalog.
type catalogEntry struct {
	info XidInfo
	// bucket and mnemonic are NVIDIA's, as the CSV gives them; tests check
	// the actions against the buckets.
	bucket, mnemonic string
}

// Catalog maps Xids to what they mean. It is immutable, so safe for
// concurrent reads.
type Catalog struct {
	xids map[uint64]catalogEntry
}

// DefaultCatalog returns NVIDIA's catalog as shipped in xids.csv. Each call
// parses the embedded file (a few hundred lines), so callers keep the result.
// It panics only if the embedded file is malformed, which a test rules out.
func DefaultCatalog() *Catalog {
	c, err := ParseCatalog(strings.NewReader(xidsCSV))
	if err != nil {
		panic(fmt.Sprintf("gpu: embedded xids.csv: %v", err))
	}
	return c
}

// ParseCatalog parses the CSV format of xids.csv: lines starting with # are
// comments; the first record is the header xid,name,action,nvidia_bucket,mnemonic;
// each other record is one Xid with a non-empty name and an action
// ParseAction accepts. Errors name the line.
func ParseCatalog(r io.Reader) (*Catalog, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1 // counted below, to name the line in our words
	c := &Catalog{xids: make(map[uint64]catalogEntry)}
	lines := make(map[uint64]int) // line each Xid was defined on
	header := true
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parsing Xid catalog: %w", err) // a csv.ParseError names the line
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != catalogFields {
			return nil, fmt.Errorf("parsing Xid catalog: line %d: %d fields, want %d (%s)",
				line, len(rec), catalogFields, catalogHeader)
		}
		if header {
			header = false
			if got := strings.Join(rec, ","); got != catalogHeader {
				return nil, fmt.Errorf("parsing Xid catalog: line %d: header %q, want %q", line, got, catalogHeader)
			}
			continue
		}
		e, err := parseEntry(rec)
		if err != nil {
			return nil, fmt.Errorf("parsing Xid catalog: line %d: %w", line, err)
		}
		if first, dup := lines[e.info.Xid]; dup {
			return nil, fmt.Errorf("parsing Xid catalog: line %d: duplicate Xid %d (first on line %d)", line, e.info.Xid, first)
		}
		lines[e.info.Xid] = line
		c.xids[e.info.Xid] = e
	}
	if header {
		return nil, fmt.Errorf("parsing Xid catalog: no header %q", catalogHeader)
	}
	return c, nil
}

// parseEntry parses one record of the CSV format.
func parseEntry(rec []string) (catalogEntry, error) {
	xid, err := strconv.ParseUint(rec[0], 10, 64)
	if err != nil {
		return catalogEntry{}, fmt.Errorf("bad xid: %w", err)
	}
	name := strings.TrimSpace(rec[1])
	if name == "" {
		return catalogEntry{}, fmt.Errorf("empty name for Xid %d", xid)
	}
	action, err := ParseAction(rec[2])
	if err != nil {
		return catalogEntry{}, fmt.Errorf("action of Xid %d: %w", xid, err)
	}
	return catalogEntry{
		info:     XidInfo{Xid: xid, Name: name, Action: action, Known: true},
		bucket:   rec[3],
		mnemonic: rec[4],
	}, nil
}

// With returns a copy of c in which each override sets the Xid's action. It
// extends the catalog: Xids not named keep theirs; an Xid the catalog lacks
// is added with the name NameUnknown, Known and Overridden. The actions
// must be valid (from ParseAction, as config validation does); With panics
// on one that is not, as that is a bug in the caller.
func (c *Catalog) With(overrides map[uint64]Action) *Catalog {
	n := &Catalog{xids: make(map[uint64]catalogEntry, len(c.xids)+len(overrides))}
	for x, e := range c.xids {
		n.xids[x] = e
	}
	for x, a := range overrides {
		if a.Severity() < 0 {
			panic(fmt.Sprintf("gpu: Catalog.With: Xid %d: invalid action %q", x, string(a)))
		}
		e, ok := n.xids[x]
		if !ok {
			e = catalogEntry{info: XidInfo{Xid: x, Name: NameUnknown, Known: true}}
		}
		e.info.Action = a
		e.info.Overridden = true
		n.xids[x] = e
	}
	return n
}

// Lookup returns what the catalog says about xid. An Xid it does not know is
// fatal: XidInfo{Xid: xid, Name: NameUnknown, Action: ActionResetGPU}, Known
// false, since a GPU raising an Xid nobody has classified is not trusted
// until reset.
func (c *Catalog) Lookup(xid uint64) XidInfo {
	if e, ok := c.xids[xid]; ok {
		return e.info
	}
	return XidInfo{Xid: xid, Name: NameUnknown, Action: ActionResetGPU}
}

// Len is the number of Xids in the catalog.
func (c *Catalog) Len() int { return len(c.xids) }
