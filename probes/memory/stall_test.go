package memory

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

var t0 = time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// ms is a total= value: d of stall, in microseconds.
func ms(d time.Duration) uint64 { return uint64(d / time.Microsecond) }

func TestDecideStall(t *testing.T) {
	rule := StallRule{Stall: 100 * time.Millisecond, Window: time.Second}
	base := stallState{Base: at(0), Total: 5000}
	pressured := stallState{Pressure: true, Base: at(0), Total: 5000}
	tests := []struct {
		name         string
		prev         stallState
		in           stallSample
		wantPressure bool
		wantBase     time.Time
		wantTotal    uint64
		wantStalled  time.Duration
	}{
		{"first run, quiet: no verdict yet, a base", stallState{}, stallSample{Now: at(0), Total: 5000},
			false, at(0), 5000, 0},
		{"first run, trigger fired: pressure at once", stallState{}, stallSample{Now: at(0), Total: 5000, Fired: true},
			true, at(0), 5000, 0},
		{"fired just after the base: pressure, base moves to the fire", base, stallSample{Now: at(200 * time.Millisecond), Total: 5000 + ms(30*time.Millisecond), Fired: true},
			true, at(200 * time.Millisecond), 5000 + ms(30*time.Millisecond), 30 * time.Millisecond},
		{"a window's worth measured without a fire: pressure (a lost fire)", base, stallSample{Now: at(300 * time.Millisecond), Total: 5000 + ms(100*time.Millisecond)},
			true, at(0), 5000, 100 * time.Millisecond},
		{"short span, little stall: verdict stays (quiet)", base, stallSample{Now: at(300 * time.Millisecond), Total: 5000 + ms(99*time.Millisecond)},
			false, at(0), 5000, 99 * time.Millisecond},
		{"short span, little stall: verdict stays (pressure)", pressured, stallSample{Now: at(300 * time.Millisecond), Total: 5000},
			true, at(0), 5000, 0},
		{"one window on, stall at the rule's rate: still pressure", pressured, stallSample{Now: at(1100 * time.Millisecond), Total: 5000 + ms(110*time.Millisecond)},
			true, at(1100 * time.Millisecond), 5000 + ms(110*time.Millisecond), 110 * time.Millisecond},
		{"one window on, stall below the rate: the stall ended", pressured, stallSample{Now: at(1100 * time.Millisecond), Total: 5000 + ms(109*time.Millisecond)},
			false, at(1100 * time.Millisecond), 5000 + ms(109*time.Millisecond), 109 * time.Millisecond},
		{"one window on, no stall at all: ended", pressured, stallSample{Now: at(1100 * time.Millisecond), Total: 5000},
			false, at(1100 * time.Millisecond), 5000, 0},
		{"an interval's run, 10 windows, 1s stall in all: pressure (rate 10%)", base, stallSample{Now: at(10 * time.Second), Total: 5000 + ms(time.Second)},
			true, at(10 * time.Second), 5000 + ms(time.Second), time.Second},
		{"an interval's run, 10 windows, 0.5s stall: quiet", pressured, stallSample{Now: at(10 * time.Second), Total: 5000 + ms(500*time.Millisecond)},
			false, at(10 * time.Second), 5000 + ms(500*time.Millisecond), 500 * time.Millisecond},
		{"the total went backwards: no evidence, pressure stays, base restarts", pressured, stallSample{Now: at(2 * time.Second), Total: 10},
			true, at(2 * time.Second), 10, 0},
		{"the clock went backwards: no evidence, pressure stays, base restarts", pressured, stallSample{Now: at(-time.Second), Total: 6000},
			true, at(-time.Second), 6000, 0},
		{"fired after a long quiet spell: pressure, base at the fire", base, stallSample{Now: at(10 * time.Second), Total: 5000 + ms(120*time.Millisecond), Fired: true},
			true, at(10 * time.Second), 5000 + ms(120*time.Millisecond), 120 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decideStall(rule, tt.prev, tt.in)
			if got.Pressure != tt.wantPressure || !got.Base.Equal(tt.wantBase) || got.Total != tt.wantTotal || got.Stalled != tt.wantStalled || got.Fired != tt.in.Fired {
				t.Errorf("decideStall(%+v, %+v) = %+v, want pressure %v, base %v, total %d, stalled %v, fired %v",
					tt.prev, tt.in, got, tt.wantPressure, tt.wantBase, tt.wantTotal, tt.wantStalled, tt.in.Fired)
			}
		})
	}
}

func TestRecheckAfter(t *testing.T) {
	some := StallRule{Stall: 100 * time.Millisecond, Window: time.Second}
	full := StallRule{Stall: 500 * time.Millisecond, Window: 4 * time.Second}
	in := stallState{Pressure: true}
	tests := []struct {
		name     string
		rules    [2]StallRule
		states   [2]stallState
		unjudged [2]bool
		want     time.Duration
	}{
		{"no rules", [2]StallRule{}, [2]stallState{in, in}, [2]bool{true, true}, -1},
		{"quiet", [2]StallRule{some, full}, [2]stallState{}, [2]bool{}, -1},
		{"a fire not judged yet", [2]StallRule{some, full}, [2]stallState{}, [2]bool{false, true}, 4400 * time.Millisecond},
		{"some in pressure", [2]StallRule{some, full}, [2]stallState{in, {}}, [2]bool{}, 1100 * time.Millisecond},
		{"both: the shorter window", [2]StallRule{some, full}, [2]stallState{in, in}, [2]bool{}, 1100 * time.Millisecond},
		{"pressure left over from a rule now off", [2]StallRule{{}, full}, [2]stallState{in, {}}, [2]bool{}, -1},
	}
	for _, tt := range tests {
		if got := recheckAfter(tt.rules, tt.states, tt.unjudged); got != tt.want {
			t.Errorf("%s: recheckAfter = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestTriggers(t *testing.T) {
	some := StallRule{Stall: 100 * time.Millisecond, Window: time.Second}
	full := StallRule{Stall: 500 * time.Millisecond, Window: 2 * time.Second}
	wake := "some 100000 2000000"
	tests := []struct {
		name string
		cfg  Config
		want []string // spec -> rule index
	}{
		{"nothing but meminfo: the wake trigger", Config{}, []string{wake + " -> -1"}},
		{"averages only: the wake trigger", Config{PSIFullAvg10Above: 25}, []string{wake + " -> -1"}},
		{"availableBelow only: the wake trigger", Config{AvailableBelow: pct(5)}, []string{wake + " -> -1"}},
		{"stall rules only: their triggers", Config{PSI: StallRules{Some: some, Full: full}},
			[]string{"some 100000 1000000 -> 0", "full 500000 2000000 -> 1"}},
		{"a stall rule and availableBelow (the defaults): both", Config{AvailableBelow: pct(5), PSI: StallRules{Full: full}},
			[]string{wake + " -> -1", "full 500000 2000000 -> 1"}},
		{"a stall rule and an average: both", Config{PSISomeAvg10Above: 10, PSI: StallRules{Full: full}},
			[]string{wake + " -> -1", "full 500000 2000000 -> 1"}},
		{"the some rule is the wake trigger: armed once", Config{PSISomeAvg10Above: 10, PSI: StallRules{Some: StallRule{Stall: DefaultWakeStall, Window: WakeWindow}}},
			[]string{wake + " -> 0"}},
	}
	for _, tt := range tests {
		ts, rule := tt.cfg.triggers(DefaultWakeStall)
		var got []string
		for i, tr := range ts {
			got = append(got, fmt.Sprintf("%s -> %d", tr.spec(), rule[i]))
		}
		if strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
			t.Errorf("%s: triggers = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestStallRuleValidate(t *testing.T) {
	tests := []struct {
		rule StallRule
		want string // substring of the error; "" for none
	}{
		{StallRule{}, ""},
		{StallRule{Stall: 100 * time.Millisecond, Window: time.Second}, ""},
		{StallRule{Stall: 10 * time.Second, Window: 10 * time.Second}, ""},
		{StallRule{Stall: 100 * time.Millisecond, Window: 400 * time.Millisecond}, "PSI.Some.Window: 400ms is outside the kernel's PSI trigger windows, 500ms to 10s"},
		{StallRule{Stall: 100 * time.Millisecond, Window: 11 * time.Second}, "PSI.Some.Window: 11s is outside"},
		{StallRule{Stall: 2 * time.Second, Window: time.Second}, "PSI.Some.Stall: 2s is longer than the window 1s"},
		{StallRule{Stall: -time.Second, Window: time.Second}, "PSI.Some.Stall: -1s is negative"},
		{StallRule{Stall: 100, Window: time.Second}, "below the kernel's 1µs resolution"},
		{StallRule{Stall: time.Millisecond, Window: time.Second + 1}, "not a whole number of microseconds"},
	}
	for _, tt := range tests {
		err := Config{PSI: StallRules{Some: tt.rule}}.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: Validate = %v, want nil", tt.rule, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: Validate = %v, want an error with %q", tt.rule, err, tt.want)
		}
	}
}

// stallHost is a host root whose pressure file the test rewrites.
type stallHost struct {
	t    *testing.T
	root string
}

func newStallHost(t *testing.T) stallHost {
	root := t.TempDir()
	h := stallHost{t, root}
	meminfo, err := os.ReadFile("testdata/healthy/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "proc", "pressure"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "meminfo"), meminfo, 0o644); err != nil {
		t.Fatal(err)
	}
	h.pressure(0, 12.5)
	return h
}

// pressure writes a pressure file whose some total is some µs (full
// total half of it) with the given some avg10.
func (h stallHost) pressure(some uint64, avg10 float64) {
	h.t.Helper()
	data := fmt.Sprintf("some avg10=%.2f avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=%d\n", avg10, some, some/2)
	if err := os.WriteFile(filepath.Join(h.root, "proc", "pressure", "memory"), []byte(data), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// TestProbeStallRule walks the probe through an episode on a fake clock:
// the trigger fires (the watch's hook) and the very run it wakes is a
// problem, with no average above any threshold; the stall goes on, then
// ends and the run a window later is healthy; a read error in between
// holds the problem and changes nothing.
func TestProbeStallRule(t *testing.T) {
	h := newStallHost(t)
	p, err := New(Config{PSI: StallRules{Some: StallRule{Stall: 100 * time.Millisecond, Window: time.Second}}}, probes.Host{Root: h.root})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	p.now = func() time.Time { return now }
	fire := func() {
		p.mu.Lock()
		p.fires[lineSome]++
		p.mu.Unlock()
	}
	steps := []struct {
		name       string
		advance    time.Duration
		total      uint64
		fire       bool
		unreadable bool
		want       probes.Status
		message    string
		recheck    time.Duration
	}{
		{"quiet first run", 0, 1000, false, false, probes.StatusOK, "available memory", -1},
		{"quiet interval run", 10 * time.Second, 1000, false, false, probes.StatusOK, "available memory", -1},
		{"the trigger fires: a problem on the run it wakes", 3 * time.Second, 1000 + ms(150*time.Millisecond), true, false, probes.StatusProblem,
			"memory pressure stall: some tasks stalled 100ms within 1s (the kernel's PSI trigger fired; measured 150ms in the last 3s; some avg10 12.50%)", 1100 * time.Millisecond},
		{"a window on, still stalling", 1100 * time.Millisecond, 1000 + ms(400*time.Millisecond), false, false, probes.StatusProblem,
			"(measured 250ms in the last 1.1s; some avg10 12.50%)", 1100 * time.Millisecond},
		{"the file cannot be read: the problem holds, not a recovery", 1100 * time.Millisecond, 0, false, true, probes.StatusProblem,
			"(measured 250ms in the last 1.1s; held: not read this run); reading memory PSI", 1100 * time.Millisecond},
		{"readable again, a window of no stall: healthy", 100 * time.Millisecond, 1000 + ms(400*time.Millisecond), false, false, probes.StatusOK, "available memory", -1},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		path := filepath.Join(h.root, "proc", "pressure", "memory")
		if s.unreadable {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		} else {
			_ = os.Remove(path)
			h.pressure(s.total, 12.5)
		}
		if s.fire {
			fire()
			if got := p.recheck(); got != 1100*time.Millisecond {
				t.Errorf("%s: recheck before the run = %v, want 1.1s (a fire not judged yet)", s.name, got)
			}
		}
		res := p.Probe(t.Context())
		if res.Status != s.want || !strings.Contains(res.Message, s.message) {
			t.Errorf("%s: got %s %s %q, want %s with %q", s.name, res.Status, res.Reason, res.Message, s.want, s.message)
		}
		if got := p.recheck(); got != s.recheck {
			t.Errorf("%s: recheck = %v, want %v", s.name, got, s.recheck)
		}
	}
}

// TestProbeStallRuleHoldsOnReadFailure: a read failure is never a
// recovery. A trigger that fires before a run that cannot read the
// pressure file (or meminfo, or finds no full line) is still the kernel's
// verdict, and a rule in pressure stays there while its evidence cannot be
// read; a rule not in pressure is Unknown.
func TestProbeStallRuleHoldsOnReadFailure(t *testing.T) {
	const (
		ok = iota
		noPressureFile
		noMeminfo
		noFullLine
		gone
	)
	steps := []struct {
		name    string
		rules   StallRules
		read    []int // what each run finds, in turn
		fire    []bool
		want    []probes.Status
		message string // in the last run's message
	}{
		{"a fire, then the pressure file cannot be read", StallRules{Some: StallRule{Stall: 100 * time.Millisecond, Window: time.Second}},
			[]int{ok, noPressureFile}, []bool{false, true}, []probes.Status{probes.StatusOK, probes.StatusProblem},
			"some tasks stalled 100ms within 1s (the kernel's PSI trigger fired; held: not read this run); reading memory PSI"},
		{"in pressure, then still unreadable", StallRules{Some: StallRule{Stall: 100 * time.Millisecond, Window: time.Second}},
			[]int{ok, noPressureFile, noPressureFile}, []bool{false, true, false}, []probes.Status{probes.StatusOK, probes.StatusProblem, probes.StatusProblem},
			"held: not read this run); reading memory PSI"},
		{"a fire, then meminfo cannot be read", StallRules{Full: StallRule{Stall: 500 * time.Millisecond, Window: 2 * time.Second}},
			[]int{ok, noMeminfo}, []bool{false, true}, []probes.Status{probes.StatusOK, probes.StatusProblem},
			"full tasks stalled 500ms within 2s (the kernel's PSI trigger fired; held: not read this run); reading meminfo"},
		{"a fire, then the file has no full line", StallRules{Full: StallRule{Stall: 500 * time.Millisecond, Window: 2 * time.Second}},
			[]int{ok, noFullLine}, []bool{false, true}, []probes.Status{probes.StatusOK, probes.StatusProblem},
			`held: not read this run); parsing`},
		{"in pressure, then the pressure file is gone", StallRules{Some: StallRule{Stall: 100 * time.Millisecond, Window: time.Second}},
			[]int{ok, ok, gone}, []bool{false, true, false}, []probes.Status{probes.StatusOK, probes.StatusProblem, probes.StatusProblem},
			"held: not read this run"},
		{"no pressure, the file gone: no PSI, OK", StallRules{Some: StallRule{Stall: 100 * time.Millisecond, Window: time.Second}},
			[]int{ok, gone}, []bool{false, false}, []probes.Status{probes.StatusOK, probes.StatusOK}, "available memory"},
		{"no pressure, unreadable: Unknown", StallRules{Some: StallRule{Stall: 100 * time.Millisecond, Window: time.Second}},
			[]int{ok, noPressureFile}, []bool{false, false}, []probes.Status{probes.StatusOK, probes.StatusUnknown}, "reading memory PSI"},
	}
	for _, tt := range steps {
		h := newStallHost(t)
		p, err := New(Config{PSI: tt.rules}, probes.Host{Root: h.root})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		p.now = func() time.Time { return now }
		pressure := filepath.Join(h.root, "proc", "pressure", "memory")
		meminfo := filepath.Join(h.root, "proc", "meminfo")
		var res probes.Result
		for i, read := range tt.read {
			now = now.Add(100 * time.Millisecond)
			switch read {
			case noPressureFile:
				must(t, os.Remove(pressure))
				must(t, os.Mkdir(pressure, 0o755))
			case gone:
				must(t, os.Remove(pressure))
			case noMeminfo:
				must(t, os.Remove(meminfo))
			case noFullLine:
				must(t, os.WriteFile(pressure, []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0o644))
			}
			if tt.fire[i] {
				p.mu.Lock()
				p.fires[ruleLine(tt.rules)]++
				p.mu.Unlock()
			}
			res = p.Probe(t.Context())
			if res.Status != tt.want[i] {
				t.Errorf("%s: run %d: got %s %s %q, want %s", tt.name, i, res.Status, res.Reason, res.Message, tt.want[i])
			}
		}
		if !strings.Contains(res.Message, tt.message) {
			t.Errorf("%s: last message %q, want it to contain %q", tt.name, res.Message, tt.message)
		}
	}
}

// ruleLine is the line index of the one rule on in r.
func ruleLine(r StallRules) int {
	if r.Full.IsZero() {
		return lineSome
	}
	return lineFull
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestProbeStallRuleWatchError: a trigger that cannot be armed is shown in
// the readings, and the rule still judges the stall measured between runs.
func TestProbeStallRuleWatchError(t *testing.T) {
	h := newStallHost(t)
	p, err := New(Config{PSI: StallRules{Full: StallRule{Stall: 500 * time.Millisecond, Window: 2 * time.Second}}}, probes.Host{Root: h.root})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	p.now = func() time.Time { return now }
	if err := p.Watch(t.Context(), func() {}); err == nil || !strings.Contains(err.Error(), "not a kernel pressure file") {
		t.Fatalf("Watch on a fixture host = %v, want an error saying it is not a kernel pressure file", err)
	}
	if res := p.Probe(t.Context()); res.Status != probes.StatusOK || !hasReading(res, "psi_triggers", "not armed: ") || !hasReading(res, "psi_full_stall", "rule 500ms within 2s; not measured yet") {
		t.Errorf("first run: %s %q %v, want OK with a psi_triggers reading saying why they are not armed and the rule in psi_full_stall", res.Status, res.Message, res.Readings)
	}
	now = now.Add(10 * time.Second)
	h.pressure(ms(5200*time.Millisecond), 30) // full: 2.6s in 10s, 26% >= 500ms/2s
	if res := p.Probe(t.Context()); res.Status != probes.StatusProblem || !strings.Contains(res.Message, "full tasks stalled 500ms within 2s (measured 2.6s in the last 10s; full avg10 0.00%)") {
		t.Errorf("interval run under pressure: %s %q, want a problem from the measured stall", res.Status, res.Message)
	}
}

func hasReading(res probes.Result, name, prefix string) bool {
	for _, r := range res.Readings {
		if r.Name == name && strings.HasPrefix(r.Value, prefix) {
			return true
		}
	}
	return false
}
