package gpu

import (
	"encoding/csv"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDefaultCatalogParses(t *testing.T) {
	c, err := ParseCatalog(strings.NewReader(xidsCSV))
	if err != nil {
		t.Fatalf("ParseCatalog(xids.csv): %v", err)
	}

	// Every data record is one Xid: none is lost to a duplicate.
	r := csv.NewReader(strings.NewReader(xidsCSV))
	r.Comment = '#'
	records := -1 // the header
	for {
		if _, err := r.Read(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading xids.csv: %v", err)
		}
		records++
	}
	if got, want := c.Len(), records; got != want {
		t.Errorf("Len() = %d, want %d (one per record of xids.csv)", got, want)
	}

	// NVIDIA's catalog lists every Xid from 1 to 172.
	for x := uint64(1); x <= 172; x++ {
		if !c.Lookup(x).Known {
			t.Errorf("Lookup(%d).Known = false, want true: NVIDIA's catalog lists Xids 1 to 172", x)
		}
	}
	if got, want := DefaultCatalog().Len(), c.Len(); got != want {
		t.Errorf("DefaultCatalog().Len() = %d, want %d", got, want)
	}
}

func TestDefaultCatalogRows(t *testing.T) {
	c := DefaultCatalog()
	for x, e := range c.xids {
		info := e.info
		if got, want := info.Xid, x; got != want {
			t.Errorf("Xid %d: info.Xid = %d, want %d", x, got, want)
		}
		if _, err := ParseAction(string(info.Action)); err != nil {
			t.Errorf("Xid %d: action: %v", x, err)
		}
		if strings.TrimSpace(info.Name) == "" || info.Name == NameUnknown {
			t.Errorf("Xid %d: name %q, want NVIDIA's", x, info.Name)
		}
		if !info.Known || info.Overridden {
			t.Errorf("Xid %d: Known %v, Overridden %v; want true, false", x, info.Known, info.Overridden)
		}
		if e.bucket == "" || e.mnemonic == "" {
			t.Errorf("Xid %d: bucket %q, mnemonic %q; want both set (\"-\" for no bucket)", x, e.bucket, e.mnemonic)
		}
	}
}

// TestDefaultCatalogBuckets holds the data to the mapping in the header of
// xids.csv: an Xid with one of NVIDIA's plain buckets has that bucket's action.
// The workflow buckets are decided row by row, with a comment in the file.
func TestDefaultCatalogBuckets(t *testing.T) {
	want := map[string]Action{
		"IGNORE":            ActionIgnore,
		"RESTART_APP":       ActionRestartApp,
		"RESET_GPU":         ActionResetGPU,
		"RESTART_BM":        ActionReboot,
		"RESTART_VM":        ActionReboot,
		"CONTACT_SUPPORT":   ActionContactSupport,
		"CHECK_MECHANICALS": ActionContactSupport,
		"UPDATE_SWFW":       ActionContactSupport,
	}
	// selftaint's deliberate deviations, each explained in xids.csv.
	deviations := map[uint64]Action{94: ActionResetGPU}
	for x, e := range DefaultCatalog().xids {
		a, plain := want[e.bucket]
		if d, ok := deviations[x]; ok {
			a = d
		}
		if !plain {
			continue
		}
		if got := e.info.Action; got != a {
			t.Errorf("Xid %d: bucket %s, action %s; want %s", x, e.bucket, got, a)
		}
	}
}

func TestDefaultCatalogFacts(t *testing.T) {
	tests := []struct {
		xid    uint64
		action Action
		name   string // "" for any
	}{
		// Routine on large fleets: NVIDIA says IGNORE.
		{xid: 63, action: ActionIgnore, name: "GPU memory remapping event"},
		{xid: 92, action: ActionIgnore, name: "High single-bit ECC error rate"},
		// Caused by the application.
		{xid: 13, action: ActionRestartApp, name: "Graphics Engine Exception"},
		{xid: 31, action: ActionRestartApp, name: "GPU memory page fault"},
		{xid: 43, action: ActionIgnore},
		{xid: 45, action: ActionIgnore},
		{xid: 68, action: ActionRestartApp},
		// NVIDIA: contained to one application, which must restart; reset
		// the GPU "when convenient". selftaint asks for the reset (see
		// xids.csv): the bad memory stays until it.
		{xid: 94, action: ActionResetGPU, name: "Contained memory error"},
		// Fatal.
		{xid: 48, action: ActionResetGPU, name: "Double Bit ECC Error"},
		{xid: 74, action: ActionResetGPU, name: "NVLINK Error"},
		{xid: 79, action: ActionReboot, name: "GPU has fallen off the bus"},
		{xid: 95, action: ActionResetGPU, name: "Uncontained memory error"},
		{xid: 109, action: ActionResetGPU, name: "Context Switch Timeout Error"},
		{xid: 119, action: ActionResetGPU, name: "GSP RPC Timeout"},
		{xid: 120, action: ActionResetGPU, name: "GSP Error"},
		{xid: 140, action: ActionResetGPU, name: "ECC Unrecovered Error"},
		{xid: 143, action: ActionResetGPU},
		{xid: 149, action: ActionResetGPU},
		{xid: 154, action: ActionResetGPU},
		{xid: 151, action: ActionReboot},
		{xid: 54, action: ActionContactSupport},
		{xid: 122, action: ActionContactSupport},
		{xid: 123, action: ActionContactSupport},
	}
	c := DefaultCatalog()
	for _, tt := range tests {
		got := c.Lookup(tt.xid)
		if got.Action != tt.action {
			t.Errorf("Lookup(%d).Action = %s, want %s", tt.xid, got.Action, tt.action)
		}
		if tt.name != "" && got.Name != tt.name {
			t.Errorf("Lookup(%d).Name = %q, want %q", tt.xid, got.Name, tt.name)
		}
		if !got.Known {
			t.Errorf("Lookup(%d).Known = false, want true", tt.xid)
		}
	}

	for _, x := range []uint64{48, 74, 79, 95, 109, 119, 120} {
		if a := c.Lookup(x).Action; !a.Fatal() {
			t.Errorf("Xid %d: action %s is not fatal, want fatal", x, a)
		}
	}
	for _, x := range []uint64{13, 31, 43, 45, 63, 68, 92} {
		if a := c.Lookup(x).Action; a.Fatal() {
			t.Errorf("Xid %d: action %s is fatal, want not", x, a)
		}
	}
}

func TestCatalogLookupUnknown(t *testing.T) {
	c := DefaultCatalog()
	for _, x := range []uint64{0, 173, 999, 1 << 40} {
		got := c.Lookup(x)
		want := XidInfo{Xid: x, Name: NameUnknown, Action: ActionResetGPU}
		if got != want {
			t.Errorf("Lookup(%d) = %+v, want %+v", x, got, want)
		}
		if !got.Action.Fatal() {
			t.Errorf("Lookup(%d): unknown Xid not fatal", x)
		}
	}
}

func TestCatalogWith(t *testing.T) {
	base := DefaultCatalog()
	c := base.With(map[uint64]Action{63: ActionReboot, 999: ActionIgnore})

	tests := []struct {
		xid  uint64
		want XidInfo
	}{
		{63, XidInfo{Xid: 63, Name: "GPU memory remapping event", Action: ActionReboot, Known: true, Overridden: true}},
		{999, XidInfo{Xid: 999, Name: NameUnknown, Action: ActionIgnore, Known: true, Overridden: true}},
		{79, XidInfo{Xid: 79, Name: "GPU has fallen off the bus", Action: ActionReboot, Known: true}},
		{1000, XidInfo{Xid: 1000, Name: NameUnknown, Action: ActionResetGPU}},
	}
	for _, tt := range tests {
		if got := c.Lookup(tt.xid); got != tt.want {
			t.Errorf("With: Lookup(%d) = %+v, want %+v", tt.xid, got, tt.want)
		}
	}
	if got, want := c.Len(), base.Len()+1; got != want {
		t.Errorf("With: Len() = %d, want %d", got, want)
	}

	// The catalog it was made from is unchanged.
	if got, want := base.Lookup(63), (XidInfo{Xid: 63, Name: "GPU memory remapping event", Action: ActionIgnore, Known: true}); got != want {
		t.Errorf("base after With: Lookup(63) = %+v, want %+v", got, want)
	}
	if got := base.Lookup(999); got.Known {
		t.Errorf("base after With: Lookup(999).Known = true, want false")
	}

	if got, want := base.With(nil).Len(), base.Len(); got != want {
		t.Errorf("With(nil).Len() = %d, want %d", got, want)
	}
}

func TestCatalogWithInvalidActionPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("With({63: \"explode\"}) did not panic")
		}
	}()
	DefaultCatalog().With(map[uint64]Action{63: "explode"})
}

func TestParseCatalog(t *testing.T) {
	const in = `# a comment
xid,name,action,nvidia_bucket,mnemonic
# another
7,"Fell off, badly",reboot,RESTART_BM,FELL

8,Fine,ignore,-,FINE
`
	c, err := ParseCatalog(strings.NewReader(in))
	if err != nil {
		t.Fatalf("ParseCatalog: %v", err)
	}
	if got, want := c.Len(), 2; got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
	if got, want := c.Lookup(7), (XidInfo{Xid: 7, Name: "Fell off, badly", Action: ActionReboot, Known: true}); got != want {
		t.Errorf("Lookup(7) = %+v, want %+v", got, want)
	}
	if got, want := c.xids[7].bucket, "RESTART_BM"; got != want {
		t.Errorf("bucket of 7 = %q, want %q", got, want)
	}
	if got, want := c.Lookup(8).Action, ActionIgnore; got != want {
		t.Errorf("Lookup(8).Action = %s, want %s", got, want)
	}
}

func TestParseCatalogErrors(t *testing.T) {
	const header = "xid,name,action,nvidia_bucket,mnemonic\n"
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		{
			name: "bad xid",
			in:   header + "1,One,ignore,IGNORE,ONE\nx2,Two,ignore,IGNORE,TWO\n",
			want: []string{"line 3", "bad xid", `"x2"`},
		},
		{
			name: "negative xid",
			in:   "# c\n" + header + "-1,One,ignore,IGNORE,ONE\n",
			want: []string{"line 3", "bad xid"},
		},
		{
			name: "unknown action",
			in:   header + "5,Five,explode,IGNORE,FIVE\n",
			want: []string{"line 2", "Xid 5", `"explode"`, "ignore, restart-app, reset-gpu, reboot, contact-support"},
		},
		{
			name: "too few columns",
			in:   header + "1,One,ignore,IGNORE,ONE\n2,Two,ignore,IGNORE\n",
			want: []string{"line 3", "4 fields, want 5"},
		},
		{
			name: "too many columns",
			in:   header + "2,Two,ignore,IGNORE,TWO,extra\n",
			want: []string{"line 2", "6 fields, want 5"},
		},
		{
			name: "duplicate",
			in:   header + "7,Seven,ignore,IGNORE,SEVEN\n# between\n7,Again,reboot,RESTART_BM,SEVEN\n",
			want: []string{"line 4", "duplicate Xid 7", "first on line 2"},
		},
		{
			name: "empty name",
			in:   header + "9, ,ignore,IGNORE,NINE\n",
			want: []string{"line 2", "empty name for Xid 9"},
		},
		{
			name: "wrong header",
			in:   "# c\nxid,action,name,nvidia_bucket,mnemonic\n",
			want: []string{"line 2", "header"},
		},
		{
			name: "no header",
			in:   "# only a comment\n",
			want: []string{"no header"},
		},
		{
			name: "bad quoting",
			in:   header + "1,\"One,ignore,IGNORE,ONE\n",
			want: []string{"line 2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseCatalog(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("ParseCatalog = %d Xids, nil error; want an error with %q", c.Len(), tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParseCatalog error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestParseAction(t *testing.T) {
	for _, a := range Actions() {
		got, err := ParseAction(string(a))
		if err != nil || got != a {
			t.Errorf("ParseAction(%q) = %q, %v; want %q, nil", string(a), got, err, a)
		}
	}
	for _, s := range []string{"", "junk", "Ignore", "REBOOT", " reboot", "reset_gpu", "reset"} {
		got, err := ParseAction(s)
		if err == nil {
			t.Errorf("ParseAction(%q) = %q, nil; want an error", s, got)
			continue
		}
		if want := "ignore, restart-app, reset-gpu, reboot, contact-support"; !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAction(%q) error = %q, want it to list %q", s, err, want)
		}
	}
}

func TestActions(t *testing.T) {
	tests := []struct {
		action   Action
		severity int
		fatal    bool
		reason   string
		advice   string
	}{
		{ActionIgnore, 0, false, "", "none"},
		{ActionRestartApp, 1, false, "", "restart the application"},
		{ActionResetGPU, 2, true, "GPUResetRequired", "reset the GPU"},
		{ActionReboot, 3, true, "GPURebootRequired", "reboot the node"},
		{ActionContactSupport, 4, true, "GPUFailure", "contact NVIDIA support (the GPU may need service)"},
		{Action("junk"), -1, false, "", `unknown action "junk"`},
	}
	for _, tt := range tests {
		if got := tt.action.Severity(); got != tt.severity {
			t.Errorf("%q.Severity() = %d, want %d", tt.action, got, tt.severity)
		}
		if got := tt.action.Fatal(); got != tt.fatal {
			t.Errorf("%q.Fatal() = %v, want %v", tt.action, got, tt.fatal)
		}
		if got := tt.action.Reason(); got != tt.reason {
			t.Errorf("%q.Reason() = %q, want %q", tt.action, got, tt.reason)
		}
		if got := tt.action.Advice(); got != tt.advice {
			t.Errorf("%q.Advice() = %q, want %q", tt.action, got, tt.advice)
		}
	}

	got := Actions()
	if len(got) != 5 {
		t.Fatalf("Actions() = %q, want 5 actions", got)
	}
	for i, a := range got {
		if a.Severity() != i {
			t.Errorf("Actions()[%d] = %q with severity %d, want mildest first", i, a, a.Severity())
		}
	}
}

func TestXidInfoString(t *testing.T) {
	c := DefaultCatalog()
	tests := []struct {
		info XidInfo
		want string
	}{
		{c.Lookup(79), "Xid 79 (GPU has fallen off the bus; reboot the node)"},
		{c.Lookup(63), "Xid 63 (GPU memory remapping event; none)"},
		{c.Lookup(999), "Xid 999 (not in NVIDIA's Xid catalog; reset the GPU)"},
	}
	for _, tt := range tests {
		if got := tt.info.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.info, got, tt.want)
		}
	}
}
