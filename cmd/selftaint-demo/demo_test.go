package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/taints"
)

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestTaintTransition(t *testing.T) {
	tests := []struct {
		name                string
		st                  nodeSeen
		fallback, noExecute bool
		want                moments
	}{
		{"healthy", nodeSeen{}, false, false, moments{}},
		{"fallback lands", nodeSeen{}, true, false, moments{fallbackOn: true}},
		{"fallback stays", nodeSeen{fallbackOn: base}, true, false, moments{}},
		{"NoExecute joins", nodeSeen{fallbackOn: base}, true, true, moments{noExecuteOn: true}},
		{"both at once", nodeSeen{}, true, true, moments{fallbackOn: true, noExecuteOn: true}},
		{"NoExecute lifted, fallback stays", nodeSeen{fallbackOn: base, noExecuteOn: base}, true, false, moments{noExecuteOff: true}},
		{"all cleared", nodeSeen{fallbackOn: base, noExecuteOn: base}, false, false, moments{noExecuteOff: true, cleared: true}},
		{"fallback cleared, never granted", nodeSeen{fallbackOn: base}, false, false, moments{cleared: true}},
		{"cleared before", nodeSeen{fallbackOn: base, cleared: base}, false, false, moments{}},
	}
	for _, tt := range tests {
		if got := taintTransition(tt.st, tt.fallback, tt.noExecute); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestPodTransition(t *testing.T) {
	tests := []struct {
		name                  string
		st                    podSeen
		found, deleting       bool
		wantEvicted, wantGone bool
	}{
		{"running", podSeen{}, true, false, false, false},
		{"deletion begins", podSeen{}, true, true, true, false},
		{"still deleting", podSeen{deleting: base}, true, true, false, false},
		{"gone after deleting", podSeen{deleting: base}, false, false, false, true},
		{"gone between polls", podSeen{}, false, false, true, true},
	}
	for _, tt := range tests {
		evicted, gone := podTransition(tt.st, tt.found, tt.deleting)
		if evicted != tt.wantEvicted || gone != tt.wantGone {
			t.Errorf("%s: got %v, %v, want %v, %v", tt.name, evicted, gone, tt.wantEvicted, tt.wantGone)
		}
	}
}

func TestWaiting(t *testing.T) {
	tests := []struct {
		name string
		st   nodeSeen
		want bool
	}{
		{"asks with the fallback", nodeSeen{asks: true, fallbackOn: base}, true},
		{"asks, fallback not seen yet", nodeSeen{asks: true}, false},
		{"fallback, not asking yet", nodeSeen{fallbackOn: base}, false},
		{"granted", nodeSeen{asks: true, granted: true, fallbackOn: base}, false},
		{"NoExecute on", nodeSeen{asks: true, fallbackOn: base, noExecuteOn: base}, false},
		{"cleared", nodeSeen{asks: true, fallbackOn: base, cleared: base}, false},
	}
	for _, tt := range tests {
		if got := waiting(&tt.st); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDueAtAndMatches(t *testing.T) {
	now := taints.Eviction{When: taints.EvictImmediately}
	later := taints.Eviction{When: taints.EvictAfter, After: 20 * time.Second}
	never := taints.Eviction{When: taints.EvictNever}
	sec := func(n float64) time.Time { return base.Add(time.Duration(n * float64(time.Second))) }
	tests := []struct {
		name         string
		e            taints.Eviction
		listed       bool
		on, off      time.Time
		deleting     time.Time
		wantExpected bool
		wantMatch    bool
	}{
		{"immediately, evicted at once", now, true, sec(5), time.Time{}, sec(5.3), true, true},
		{"immediately, evicted late", now, true, sec(5), time.Time{}, sec(9), true, false},
		{"immediately, not evicted", now, true, sec(5), time.Time{}, time.Time{}, true, false},
		{"immediately, never granted, still running", now, true, time.Time{}, time.Time{}, time.Time{}, false, true},
		{"immediately, never granted, evicted", now, true, time.Time{}, time.Time{}, sec(3), false, false},
		{"after 20s, evicted on time", later, true, sec(5), sec(45), sec(25.4), true, true},
		{"after 20s, NoExecute lifted first", later, true, sec(5), sec(15), time.Time{}, false, true},
		{"never, still running", never, true, sec(5), sec(45), time.Time{}, false, true},
		{"never, evicted", never, true, sec(5), sec(45), sec(6), false, false},
		{"not listed by explain", taints.Eviction{}, false, sec(5), time.Time{}, time.Time{}, false, true},
	}
	for _, tt := range tests {
		due, expected := dueAt(tt.e, tt.listed, tt.on, tt.off)
		if expected != tt.wantExpected {
			t.Errorf("%s: dueAt expects eviction %v, want %v", tt.name, expected, tt.wantExpected)
		}
		if got := matches(due, expected, tt.deleting); got != tt.wantMatch {
			t.Errorf("%s: matches = %v, want %v", tt.name, got, tt.wantMatch)
		}
	}
}

func TestPredictionText(t *testing.T) {
	on := base.Add(5 * time.Second)
	tests := []struct {
		e      taints.Eviction
		listed bool
		on     time.Time
		want   string
	}{
		{taints.Eviction{When: taints.EvictImmediately}, true, on, "immediately once vnode-1 holds a grant (due +5.0s)"},
		{taints.Eviction{When: taints.EvictImmediately}, true, time.Time{}, "immediately once vnode-1 holds a grant"},
		{taints.Eviction{When: taints.EvictAfter, After: 20 * time.Second}, true, on, "20s after vnode-1 holds a grant (due +25.0s)"},
		{taints.Eviction{When: taints.EvictNever}, true, on, "never"},
		{taints.Eviction{}, false, on, "nothing (explain did not list it)"},
	}
	for _, tt := range tests {
		if got := predictionText(tt.e, tt.listed, "vnode-1", tt.on, base); got != tt.want {
			t.Errorf("predictionText(%+v, %v, %v): got %q, want %q", tt.e, tt.listed, tt.on, got, tt.want)
		}
	}
}

func TestShownArgs(t *testing.T) {
	got := shownArgs([]string{"fault", "inject", "vnode-1", "--config=/tmp/x/demo-config.yaml", "--message=out of memory", "--for=45s"})
	want := []string{"fault", "inject", "vnode-1", "--config=demo-config.yaml", `--message="out of memory"`, "--for=45s"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestBudgetClaim(t *testing.T) {
	tests := []struct {
		granted, carried, budget int
		want                     string
	}{
		{1, 1, 1, "NoExecute came only under the budget: at most 1 grant(s) held and 1 node(s)"},
		{1, 0, 1, "only under the budget"},
		{2, 1, 1, "BUDGET EXCEEDED"},
		{1, 2, 1, "BUDGET EXCEEDED"},
	}
	for _, tt := range tests {
		if got := budgetClaim(tt.granted, tt.carried, tt.budget); !strings.Contains(got, tt.want) {
			t.Errorf("budgetClaim(%d, %d, %d) = %q, want it to contain %q", tt.granted, tt.carried, tt.budget, got, tt.want)
		}
	}
}

func TestOrderClaim(t *testing.T) {
	sec := func(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }
	node := func(name string, asked, granted time.Time) nodeSeen {
		return nodeSeen{fault: fault{node: name}, asked: asked, grantedAt: granted}
	}
	tests := []struct {
		name  string
		nodes []nodeSeen
		want  string
	}{
		{"in order, one never granted", []nodeSeen{node("a", sec(0), sec(1)), node("b", sec(5), sec(40)), node("c", sec(6), time.Time{})},
			"in the order the nodes asked: a, then b,"},
		{"out of order", []nodeSeen{node("a", sec(0), sec(1)), node("b", sec(5), sec(41)), node("c", sec(6), sec(40))},
			"OUT OF ORDER: grants went to a, c, b, but the nodes asked in the order a, b, c."},
	}
	for _, tt := range tests {
		if got := orderClaim(tt.nodes); !strings.Contains(got, tt.want) {
			t.Errorf("%s: got %q, want it to contain %q", tt.name, got, tt.want)
		}
	}
}

func TestOutlastClaim(t *testing.T) {
	st := nodeSeen{fault: fault{node: "vnode-3"}}
	running := map[string]*podSeen{"web-3": {node: "vnode-3"}}
	if got := outlastClaim(st, []string{"web-3"}, running); !strings.Contains(got, "evicted no one") {
		t.Errorf("pod kept running: got %q", got)
	}
	evicted := map[string]*podSeen{"web-3": {node: "vnode-3", deleting: base}}
	if got := outlastClaim(st, []string{"web-3"}, evicted); !strings.HasPrefix(got, "NOT SHOWN") {
		t.Errorf("pod evicted without a grant: got %q", got)
	}
}

func TestPrinterHoldsWhileACommandRuns(t *testing.T) {
	var out bytes.Buffer
	p := &printer{out: &out, start: base}
	p.plain("before")
	p.hold()
	p.plain("seen meanwhile")
	if got := out.String(); got != "before\n" {
		t.Fatalf("while holding: got %q", got)
	}
	p.release([]string{"$ command", "  its output"})
	p.plain("after")
	want := "before\n$ command\n  its output\nseen meanwhile\nafter\n"
	if got := out.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCast(t *testing.T) {
	c := newCast(options{faultFor: 45 * time.Second, tolerateFor: 20 * time.Second})
	if got, want := c.nodes(), []string{"vnode-1", "vnode-2", "vnode-3"}; !slices.Equal(got, want) {
		t.Errorf("nodes: got %q, want %q", got, want)
	}
	first, second, third := c.faults[0].lasts, c.faults[1].lasts, c.faults[2].lasts
	if second <= first || third >= second {
		t.Errorf("faults last %s, %s, %s: the second must outlast the first (to be granted when it ends), the third end before the second (while it waits)", first, second, third)
	}
	if got := c.podsOn("vnode-1"); !slices.Equal(got, []string{"web", "batch", "monitor"}) {
		t.Errorf("pods on vnode-1: got %q", got)
	}
	if got, want := c.allNodes(), []string{"vnode-1", "vnode-2", "vnode-3", "vnode-4", "vnode-5", "vnode-6"}; !slices.Equal(got, want) {
		t.Errorf("allNodes: got %q, want %q", got, want)
	}
	if got := c.longest(); got != second {
		t.Errorf("longest: got %s, want %s", got, second)
	}
}

func TestFollowClaim(t *testing.T) {
	sec := func(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }
	node := func(name string, granted, noExecute time.Time) nodeSeen {
		return nodeSeen{fault: fault{node: name}, grantedAt: granted, noExecuteOn: noExecute}
	}
	tests := []struct {
		name  string
		nodes []nodeSeen
		want  string
	}{
		{"prompt", []nodeSeen{node("a", sec(1), sec(2)), node("b", sec(40), sec(41)), node("c", time.Time{}, time.Time{})}, "with each grant, within 1.0s"},
		{"slow", []nodeSeen{node("a", sec(1), sec(2)), node("b", sec(40), sec(68))}, "SLOW: NoExecute landed 28.0s after b's grant"},
		{"never", []nodeSeen{node("a", sec(1), time.Time{})}, "NOT SHOWN: a held a grant"},
	}
	for _, tt := range tests {
		if got := followClaim(tt.nodes); !strings.Contains(got, tt.want) {
			t.Errorf("%s: got %q, want it to contain %q", tt.name, got, tt.want)
		}
	}
}

func TestScript(t *testing.T) {
	d := &demo{cast: newCast(options{faultFor: 45 * time.Second, tolerateFor: 20 * time.Second})}
	cues := d.script()
	v := newView(d.cast)
	ready := func() []bool {
		out := make([]bool, len(cues))
		for i, c := range cues {
			out[i] = c.ready(v)
		}
		return out
	}
	steps := []struct {
		name string
		do   func()
		want []bool
	}{
		{"start: act 1 at once", func() {}, []bool{true, false, false, false}},
		{"vnode-1 has only the fallback", func() { v.nodes["vnode-1"].fallbackOn = base }, []bool{true, false, false, false}},
		{"NoExecute on vnode-1: act 2", func() { v.nodes["vnode-1"].noExecuteOn = base }, []bool{true, true, false, false}},
		{"vnode-2 asks: vnode-3's fault", func() { v.nodes["vnode-2"].asks = true }, []bool{true, true, true, false}},
		{"vnode-2 waits with the fallback", func() { v.nodes["vnode-2"].fallbackOn = base }, []bool{true, true, true, false}},
		{"vnode-3 waits too: explain", func() { v.nodes["vnode-3"].asks, v.nodes["vnode-3"].fallbackOn = true, base }, []bool{true, true, true, true}},
	}
	for _, s := range steps {
		s.do()
		if got := ready(); !slices.Equal(got, s.want) {
			t.Errorf("%s: cues ready %v, want %v", s.name, got, s.want)
		}
	}
	if f := cues[0].fault; f == nil || f.node != "vnode-1" {
		t.Errorf("act 1 injects %+v, want vnode-1's fault", f)
	}
	if cues[3].explain != "vnode-2" {
		t.Errorf("the last cue explains %q, want vnode-2", cues[3].explain)
	}
}

func TestClearedNote(t *testing.T) {
	f := fault{node: "vnode-2", lasts: 55 * time.Second}
	tests := []struct {
		name string
		st   nodeSeen
		want string
	}{
		{"had NoExecute", nodeSeen{fault: f, grantedAt: base, noExecuteOn: base}, "(it lasted 55s), condition and taints cleared, nobody acting"},
		{"never granted", nodeSeen{fault: f}, "its wait outlasted the fault: it never held a grant"},
		{"granted, NoExecute never landed", nodeSeen{fault: f, grantedAt: base}, "it held a grant, but NoExecute never landed"},
	}
	for _, tt := range tests {
		if got := clearedNote(tt.st); !strings.Contains(got, tt.want) {
			t.Errorf("%s: got %q, want it to contain %q", tt.name, got, tt.want)
		}
	}
	if got := clearedNote(tests[0].st); strings.Contains(got, ";") {
		t.Errorf("a fault that ran its course: got %q, want no remark", got)
	}
}
