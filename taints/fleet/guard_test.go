package fleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// zone is n nodes in zone, the first reporting of them reporting cond.
func zone(name string, n, reporting int, cond corev1.NodeConditionType) []Node {
	out := make([]Node, n)
	for i := range out {
		out[i] = mk(fmt.Sprintf("%s-%02d", name, i), name)
		if i < reporting {
			out[i].Reporting = []corev1.NodeConditionType{cond}
		}
	}
	return out
}

func nodes(zones ...[]Node) []Node { return slices.Concat(zones...) }

// guardString is condition c's guard, scopes sorted:
// "scope=unhealthy/nodes", then "!" when tripped and "@below" (an offset
// from t0) when a cool-down runs.
func guardString(g GuardState, c corev1.NodeConditionType) string {
	scopes := g.Conditions[c]
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(scopes)) {
		sc := scopes[name]
		p := fmt.Sprintf("%s=%d/%d", name, sc.Unhealthy, sc.Nodes)
		if sc.Tripped {
			p += "!"
		}
		if sc.BelowSince != nil {
			p += "@" + sc.BelowSince.Sub(t0).String()
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

type guardStep struct {
	at        time.Duration
	nodes     []Node
	newLeader bool

	want       string // guardString for condA
	wantWrite  bool
	wantEvents []string
	wantNext   time.Duration
	// wantSince are scopes' Since as offsets from t0.
	wantSince map[string]time.Duration
}

func runGuardSteps(t *testing.T, cfg Config, m Memory, steps []guardStep) {
	t.Helper()
	written := m.Guard
	for _, st := range steps {
		if st.newLeader {
			m = Memory{Since: at(st.at), Guard: written}
		}
		d := Decide(Input{Config: cfg, Now: at(st.at), Leader: "me", Nodes: st.nodes, Memory: m})
		m = d.Memory
		name := fmt.Sprintf("at %v", st.at)
		if got := guardString(d.Guard, condA); got != st.want {
			t.Errorf("%s: guard: got %q, want %q", name, got, st.want)
		}
		if got, want := d.WriteGuard, st.wantWrite; got != want {
			t.Errorf("%s: WriteGuard: got %v, want %v", name, got, want)
		}
		if got, want := events(d.Events), st.wantEvents; !slices.Equal(got, want) {
			t.Errorf("%s: Events: got %q, want %q", name, got, want)
		}
		if got, want := next(d), st.wantNext; got != want {
			t.Errorf("%s: Next: got %v, want %v", name, got, want)
		}
		for scope, want := range st.wantSince {
			if got := d.Guard.Conditions[condA][scope].Since.Sub(t0); got != want {
				t.Errorf("%s: %s Since: got %v, want %v", name, scope, got, want)
			}
		}
		if d.Guard.Leader != "me" {
			t.Errorf("%s: Leader: got %q, want %q", name, d.Guard.Leader, "me")
		}
		if d.WriteGuard {
			if !d.Guard.RenewTime.Equal(at(st.at)) {
				t.Errorf("%s: written with RenewTime %v, want now", name, d.Guard.RenewTime)
			}
			written = d.Guard
		} else if !d.Guard.RenewTime.Equal(written.RenewTime) {
			t.Errorf("%s: not written, but RenewTime moved from %v to %v", name, written.RenewTime, d.Guard.RenewTime)
		}
	}
}

// The guard trips strictly above the threshold (50%) and resets only at or
// below the reset line (30%) held for the cool-down (5m).
func TestGuardHysteresis(t *testing.T) {
	y := zone("y", 10, 0, condA)
	steps := []guardStep{
		{at: 0, nodes: nodes(zone("x", 10, 5, condA), y), want: "*=5/20 x=5/10", wantNext: time.Hour},
		{at: time.Minute, nodes: nodes(zone("x", 10, 6, condA), y), want: "*=6/20 x=6/10!", wantWrite: true,
			wantEvents: []string{"/DisruptionGuardTripped!"}, wantNext: 61 * time.Minute,
			wantSince: map[string]time.Duration{"x": time.Minute}},
		// 40%: above the reset line, no cool-down.
		{at: 2 * time.Minute, nodes: nodes(zone("x", 10, 4, condA), y), want: "*=4/20 x=4/10!", wantNext: 61 * time.Minute},
		// 30%: at the line, the cool-down starts.
		{at: 3 * time.Minute, nodes: nodes(zone("x", 10, 3, condA), y), want: "*=3/20 x=3/10!@3m0s", wantNext: 8 * time.Minute},
		// Back above the line: cleared.
		{at: 5 * time.Minute, nodes: nodes(zone("x", 10, 4, condA), y), want: "*=4/20 x=4/10!", wantNext: 61 * time.Minute},
		{at: 6 * time.Minute, nodes: nodes(zone("x", 10, 2, condA), y), want: "*=2/20 x=2/10!@6m0s", wantNext: 11 * time.Minute},
		{at: 10*time.Minute + 59*s, nodes: nodes(zone("x", 10, 0, condA), y), want: "x=0/10!@6m0s", wantNext: 11 * time.Minute},
		// Reset; with nothing reporting the scope is dropped.
		{at: 11 * time.Minute, nodes: nodes(zone("x", 10, 0, condA), y), want: "", wantWrite: true,
			wantEvents: []string{"/DisruptionGuardReset"}, wantNext: 71 * time.Minute},
		{at: 12 * time.Minute, nodes: nodes(zone("x", 10, 1, condA), y), want: "*=1/20 x=1/10", wantNext: 71 * time.Minute},
	}
	runGuardSteps(t, testConfig(), testMemory(), steps)
}

func TestGuardResetKeepsScopeWithReports(t *testing.T) {
	steps := []guardStep{
		{at: 0, nodes: zone("x", 10, 6, condA), want: "*=6/10! x=6/10!", wantWrite: true,
			wantEvents: []string{"/DisruptionGuardTripped!", "/DisruptionGuardTripped!"}, wantNext: time.Hour},
		{at: s, nodes: zone("x", 10, 1, condA), want: "*=1/10!@1s x=1/10!@1s", wantNext: 5*time.Minute + s},
		{at: 5*time.Minute + s, nodes: zone("x", 10, 1, condA), want: "*=1/10 x=1/10", wantWrite: true,
			wantEvents: []string{"/DisruptionGuardReset", "/DisruptionGuardReset"}, wantNext: 65*time.Minute + s,
			wantSince: map[string]time.Duration{"x": 5*time.Minute + s, FleetScope: 5*time.Minute + s}},
	}
	runGuardSteps(t, testConfig(), testMemory(), steps)
}

func TestGuardScopes(t *testing.T) {
	tests := []struct {
		name  string
		nodes []Node
		want  string
		// tripped are zones where Tripped(condA, zone) must hold; untripped
		// where it must not.
		tripped, untripped []string
	}{
		{
			name:      "exactly at the threshold does not trip",
			nodes:     nodes(zone("x", 4, 2, condA), zone("y", 4, 0, condA)),
			want:      "*=2/8 x=2/4",
			untripped: []string{"x", "y"},
		},
		{
			name:      "a zone of MinNodes is judged",
			nodes:     nodes(zone("x", 4, 3, condA), zone("y", 4, 0, condA)),
			want:      "*=3/8 x=3/4!",
			tripped:   []string{"x"},
			untripped: []string{"y"},
		},
		{
			name:      "a zone under MinNodes is not judged on its own",
			nodes:     nodes(zone("x", 3, 3, condA), zone("y", 4, 0, condA), zone("z", 4, 0, condA)),
			want:      "*=3/11",
			untripped: []string{"x", "y", "z"},
		},
		{
			name:      "a fleet under MinNodes is not judged",
			nodes:     zone("x", 3, 3, condA),
			want:      "",
			untripped: []string{"x"},
		},
		{
			name: "the fleet trips when no zone can",
			nodes: nodes(zone("a", 2, 2, condA), zone("b", 2, 2, condA), zone("c", 2, 2, condA),
				zone("d", 2, 1, condA), zone("e", 2, 0, condA), zone("f", 2, 0, condA)),
			want:    "*=7/12!",
			tripped: []string{"a", "e", "elsewhere"},
		},
		{
			name:      "a zone trips without the fleet",
			nodes:     nodes(zone("x", 4, 4, condA), zone("y", 4, 0, condA), zone("z", 4, 0, condA)),
			want:      "*=4/12 x=4/4!",
			tripped:   []string{"x"},
			untripped: []string{"y", "z"},
		},
		{
			name:      "nodes without a zone form one",
			nodes:     nodes(zone("", 4, 3, condA), zone("y", 4, 0, condA)),
			want:      "=3/4! *=3/8",
			tripped:   []string{""},
			untripped: []string{"y"},
		},
		{
			name:      "an unwatched condition is not judged",
			nodes:     nodes(zone("x", 4, 4, "C")),
			want:      "",
			untripped: []string{"x"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(Input{Config: testConfig(), Now: t0, Leader: "me", Nodes: tc.nodes, Memory: testMemory()})
			if got := guardString(d.Guard, condA); got != tc.want {
				t.Errorf("guard: got %q, want %q", got, tc.want)
			}
			if got := d.Guard.Conditions["C"]; got != nil {
				t.Errorf("unwatched C judged: %v", got)
			}
			for _, z := range tc.tripped {
				if got, _ := d.Guard.Tripped(condA, z); !got {
					t.Errorf("Tripped(A, %q): got false, want true", z)
				}
			}
			for _, z := range tc.untripped {
				if got, _ := d.Guard.Tripped(condA, z); got {
					t.Errorf("Tripped(A, %q): got true, want false", z)
				}
			}
			if got, want := d.WriteGuard, strings.Contains(tc.want, "!"); got != want {
				t.Errorf("WriteGuard: got %v, want %v", got, want)
			}
		})
	}
}

// A tripped scope that is no longer judged counts as below the line: it
// resets after the cool-down, never at once.
func TestGuardScopeGone(t *testing.T) {
	steps := []guardStep{
		{at: 0, nodes: nodes(zone("x", 4, 3, condA)), want: "*=3/4! x=3/4!", wantWrite: true,
			wantEvents: []string{"/DisruptionGuardTripped!", "/DisruptionGuardTripped!"}, wantNext: time.Hour},
		// x shrinks under MinNodes, still all reporting: not judged.
		{at: time.Minute, nodes: nodes(zone("x", 3, 3, condA)), want: "*=3/3!@1m0s x=3/3!@1m0s", wantNext: 6 * time.Minute},
		// x is gone.
		{at: 2 * time.Minute, nodes: nodes(zone("y", 5, 0, condA)), want: "*=0/5!@1m0s x=0/0!@1m0s", wantNext: 6 * time.Minute},
		{at: 6 * time.Minute, nodes: nodes(zone("y", 5, 0, condA)), want: "", wantWrite: true,
			wantEvents: []string{"/DisruptionGuardReset", "/DisruptionGuardReset"}, wantNext: 66 * time.Minute},
	}
	runGuardSteps(t, testConfig(), testMemory(), steps)
}

// A condition no longer watched is judged like a scope no longer judged.
func TestGuardUnwatched(t *testing.T) {
	cfg := testConfig()
	delete(cfg.Watched, condA)
	m := testMemory()
	m.Guard.Conditions = map[corev1.NodeConditionType]map[string]Scope{condA: {"x": {Tripped: true, Since: at(-time.Hour)}}}
	steps := []guardStep{
		{at: 0, nodes: zone("x", 4, 4, condA), want: "x=4/4!@0s", wantNext: 5 * time.Minute},
		{at: 5 * time.Minute, nodes: zone("x", 4, 4, condA), want: "", wantWrite: true,
			wantEvents: []string{"/DisruptionGuardReset"}, wantNext: 65 * time.Minute},
	}
	runGuardSteps(t, cfg, m, steps)
}

// A new leader keeps a tripped guard tripped and restarts its cool-down
// from what it sees itself, whatever BelowSince it read.
func TestGuardNewLeader(t *testing.T) {
	long := at(-time.Hour)
	m := Memory{Since: t0, Guard: GuardState{
		RenewTime: at(-time.Minute), Leader: "old",
		Conditions: map[corev1.NodeConditionType]map[string]Scope{
			condA: {"x": {Tripped: true, Since: long, BelowSince: &long, Unhealthy: 4, Nodes: 4}},
		},
	}}
	x := zone("x", 4, 0, condA)
	steps := []guardStep{
		{at: 0, nodes: x, want: "x=0/4!@0s", wantNext: 5 * time.Minute},
		{at: 4*time.Minute + 59*s, nodes: x, want: "x=0/4!@0s", wantNext: 5 * time.Minute},
		// A second change of leader: the cool-down starts again.
		{at: 4*time.Minute + 59*s, newLeader: true, nodes: x, want: "x=0/4!@4m59s", wantNext: 9*time.Minute + 59*s},
		{at: 9*time.Minute + 59*s, nodes: x, want: "", wantWrite: true,
			wantEvents: []string{"/DisruptionGuardReset"}, wantNext: 69*time.Minute + 59*s},
	}
	runGuardSteps(t, testConfig(), m, steps)
}

// The guard is written on a trip or a reset, when it never was, or when due
// for renewal; between writes its counts change only in memory.
func TestGuardWrite(t *testing.T) {
	cfg := testConfig()
	cfg.Guard.RenewEvery = 30 * s
	m := testMemory()
	m.Guard = GuardState{}
	steps := []guardStep{
		{at: 0, nodes: zone("x", 4, 0, condA), want: "", wantWrite: true, wantNext: 30 * s},
		{at: 10 * s, nodes: zone("x", 4, 1, condA), want: "*=1/4 x=1/4", wantNext: 30 * s},
		{at: 20 * s, nodes: zone("x", 4, 3, condA), want: "*=3/4! x=3/4!", wantWrite: true,
			wantEvents: []string{"/DisruptionGuardTripped!", "/DisruptionGuardTripped!"}, wantNext: 50 * s},
		{at: 49 * s, nodes: zone("x", 4, 2, condA), want: "*=2/4! x=2/4!", wantNext: 50 * s},
		{at: 50 * s, nodes: zone("x", 4, 2, condA), want: "*=2/4! x=2/4!", wantWrite: true, wantNext: 80 * s},
	}
	runGuardSteps(t, cfg, m, steps)
}

func TestGuardEventMessages(t *testing.T) {
	cfg := testConfig()
	d := Decide(Input{Config: cfg, Now: t0, Leader: "me", Memory: testMemory(),
		Nodes: nodes(zone("zone-x", 4, 3, condA), zone("zone-y", 5, 0, condA))})
	if len(d.Events) != 1 {
		t.Fatalf("events: got %q, want one trip", events(d.Events))
	}
	msg := d.Events[0].Message
	for _, w := range []string{"A", `in zone "zone-x"`, "3 of 4 nodes", "75%", "50%", "no new NoExecute grants and no new taints for A"} {
		if !strings.Contains(msg, w) {
			t.Errorf("trip event %q does not say %q", msg, w)
		}
	}
	// Reset, fleet-wide, after the zone's nodes recover.
	d = Decide(Input{Config: cfg, Now: at(time.Minute), Leader: "me", Memory: d.Memory,
		Nodes: nodes(zone("zone-x", 4, 0, condA), zone("zone-y", 5, 0, condA))})
	d = Decide(Input{Config: cfg, Now: at(6 * time.Minute), Leader: "me", Memory: d.Memory,
		Nodes: nodes(zone("zone-x", 4, 0, condA), zone("zone-y", 5, 0, condA))})
	if len(d.Events) != 1 || d.Events[0].Warning {
		t.Fatalf("events: got %q, want one reset", events(d.Events))
	}
	for _, w := range []string{"A", `in zone "zone-x"`, "0 of 4 nodes", "30%", "5m0s"} {
		if !strings.Contains(d.Events[0].Message, w) {
			t.Errorf("reset event %q does not say %q", d.Events[0].Message, w)
		}
	}
}
