package fleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

const (
	s   = time.Second
	ttl = time.Minute
	// nothing is Decision.Next when nothing is pending.
	nothing = time.Duration(-1 << 62)
	condA   = corev1.NodeConditionType("A")
	condB   = corev1.NodeConditionType("B")
)

func at(d time.Duration) time.Time { return t0.Add(d) }

// testConfig: a budget of 2, 2 grants a minute per zone (30s apart), a TTL
// of 1m (renewed every 20s), a guard that trips above 50% and resets at or
// below 30% for 5m, in zones of at least 4 nodes, renewed hourly (so that
// its renewal stays out of the way of Next).
func testConfig() Config {
	return Config{
		MaxNoExecute:  intstr.FromInt32(2),
		RatePerMinute: 2,
		GrantTTL:      ttl,
		Guard:         GuardConfig{Threshold: 50, ResetMargin: 20, CoolDown: 5 * time.Minute, MinNodes: 4, RenewEvery: time.Hour},
		Watched: map[corev1.NodeConditionType][]corev1.ConditionStatus{
			condA: {corev1.ConditionTrue},
			condB: {corev1.ConditionTrue},
		},
	}
}

// testMemory: a leader that started at t0 and wrote the guard then.
func testMemory() Memory {
	return Memory{Since: t0, Guard: GuardState{RenewTime: t0, Leader: "me"}, Decided: true}
}

type nodeOpt func(*Node)

func mk(name, zone string, opts ...nodeOpt) Node {
	n := Node{Name: name, Zone: zone, Ready: true}
	for _, o := range opts {
		o(&n)
	}
	return n
}

// asks: the node has asked since t0+since for conds (condA if none).
func asks(since time.Duration, conds ...corev1.NodeConditionType) nodeOpt {
	if len(conds) == 0 {
		conds = []corev1.NodeConditionType{condA}
	}
	return func(n *Node) { n.Request = &Request{Since: at(since), Conditions: conds} }
}

func notReady(n *Node) { n.Ready = false }
func carries(n *Node)  { n.CarriesNoExecute = true }

func aliveSeen(d time.Duration) nodeOpt { return func(n *Node) { n.AliveSeen = at(d) } }

func reports(conds ...corev1.NodeConditionType) nodeOpt {
	return func(n *Node) { n.Reporting = conds }
}

// held is node's grant held by it, started and renewed at those offsets.
func held(node, zone string, acquired, renewed time.Duration) Grant {
	return Grant{Node: node, Holder: node, Zone: zone, Acquired: at(acquired), Renewed: at(renewed)}
}

// freed is node's released grant.
func freed(node, zone string, acquired, renewed time.Duration) Grant {
	g := held(node, zone, acquired, renewed)
	g.Holder = ""
	return g
}

// events are Decision.Events as "node/Reason" (a Warning marked "!"),
// leaving out NoExecuteBudgetExhausted, which TestBudgetExhaustedTold
// checks.
func events(es []Event) []string {
	var out []string
	for _, e := range es {
		if e.Reason == EventBudgetExhausted {
			continue
		}
		w := ""
		if e.Warning {
			w = "!"
		}
		out = append(out, e.Node+"/"+e.Reason+w)
	}
	return out
}

func next(d Decision) time.Duration {
	if d.Next.IsZero() {
		return nothing
	}
	return d.Next.Sub(t0)
}

// decideCase is one decision and what must come out of it; nil slices and
// maps mean empty.
type decideCase struct {
	name   string
	config func(*Config)
	memory func(*Memory)
	now    time.Duration
	nodes  []Node
	grants []Grant

	wantGrant, wantRenew, wantDelete, wantWaiting []string
	wantRelease                                   map[string]string
	wantHeld, wantBudget                          int
	wantNext                                      time.Duration
	wantEvents                                    []string
	check                                         func(t *testing.T, d Decision)
}

func (tc decideCase) input() Input {
	cfg := testConfig()
	if tc.config != nil {
		tc.config(&cfg)
	}
	m := testMemory()
	if tc.memory != nil {
		tc.memory(&m)
	}
	return Input{Config: cfg, Now: at(tc.now), Leader: "me", Nodes: tc.nodes, Grants: tc.grants, Memory: m}
}

func runDecideCases(t *testing.T, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.input())
			checkList(t, "Grant", d.Grant, tc.wantGrant)
			checkList(t, "Renew", d.Renew, tc.wantRenew)
			checkList(t, "Delete", d.Delete, tc.wantDelete)
			checkList(t, "Waiting", d.Waiting, tc.wantWaiting)
			checkList(t, "Events", events(d.Events), tc.wantEvents)
			if !maps.Equal(d.Release, tc.wantRelease) {
				t.Errorf("Release: got %v, want %v", d.Release, tc.wantRelease)
			}
			if got, want := d.Held, tc.wantHeld; got != want {
				t.Errorf("Held: got %d, want %d", got, want)
			}
			if got, want := d.Budget, tc.wantBudget; got != want {
				t.Errorf("Budget: got %d, want %d", got, want)
			}
			if got, want := next(d), tc.wantNext; got != want {
				t.Errorf("Next: got %v, want %v", got, want)
			}
			if d.Held > d.Budget && len(d.Grant) > 0 {
				t.Errorf("granted %v with %d held over a budget of %d", d.Grant, d.Held, d.Budget)
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

func checkList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}

func TestBudget(t *testing.T) {
	manyNodes := func(n int) []Node {
		out := make([]Node, n)
		for i := range out {
			out[i] = mk(fmt.Sprintf("n%03d", i), "x")
		}
		return out
	}
	tests := []struct {
		name      string
		max       intstr.IntOrString
		ttl       time.Duration
		nodes     int
		want      int
		wantEvent bool
	}{
		{name: "a count", max: intstr.FromInt32(3), nodes: 10, want: 3},
		{name: "a count above the fleet", max: intstr.FromInt32(3), nodes: 2, want: 3},
		{name: "10% of 5 rounds up to 1", max: intstr.FromString("10%"), nodes: 5, want: 1},
		{name: "10% of 200 is 20", max: intstr.FromString("10%"), nodes: 200, want: 20},
		{name: "15% of 10 rounds up to 2", max: intstr.FromString("15%"), nodes: 10, want: 2},
		{name: "10% of 10 is exactly 1", max: intstr.FromString("10%"), nodes: 10, want: 1},
		{name: "0% is 0", max: intstr.FromString("0%"), nodes: 50, want: 0},
		{name: "0 is 0", max: intstr.FromInt32(0), nodes: 50, want: 0},
		{name: "a percent of no nodes is 0", max: intstr.FromString("10%"), nodes: 0, want: 0},
		{name: "a string without % is invalid", max: intstr.FromString("10"), nodes: 10, want: 0, wantEvent: true},
		{name: "garbage is invalid", max: intstr.FromString("lots"), nodes: 10, want: 0, wantEvent: true},
		{name: "a negative count is invalid", max: intstr.FromInt32(-1), nodes: 10, want: 0, wantEvent: true},
		{name: "a negative percent is invalid", max: intstr.FromString("-10%"), nodes: 10, want: 0, wantEvent: true},
		{name: "a TTL under a second grants nothing", max: intstr.FromInt32(3), ttl: 500 * time.Millisecond, nodes: 10, want: 0, wantEvent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxNoExecute = tc.max
			if tc.ttl != 0 {
				cfg.GrantTTL = tc.ttl
			}
			nodes := manyNodes(tc.nodes)
			if tc.nodes > 0 {
				nodes[0].Request = &Request{Since: t0, Conditions: []corev1.NodeConditionType{condA}}
			}
			d := Decide(Input{Config: cfg, Now: t0, Nodes: nodes, Memory: testMemory()})
			if got := d.Budget; got != tc.want {
				t.Errorf("Budget: got %d, want %d", got, tc.want)
			}
			if got, want := len(d.Grant), min(tc.want, 1); got != want {
				t.Errorf("grants: got %d, want %d", got, want)
			}
			var got []string
			for _, e := range d.Events {
				if e.Reason == EventInvalidConfig && e.Warning && e.Node == "" {
					got = append(got, e.Message)
				}
			}
			if (len(got) > 0) != tc.wantEvent {
				t.Errorf("invalid-config events: got %q, want one: %v", got, tc.wantEvent)
			}
		})
	}
}

func TestDecideGrants(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			name:  "nothing asks",
			nodes: []Node{mk("a", "x"), mk("b", "y")},
			// Only the guard's renewal is pending.
			wantBudget: 2, wantNext: time.Hour,
		},
		{
			name: "grants in the order nodes asked, then by name",
			now:  30 * s,
			nodes: []Node{
				mk("a1", "x", asks(10*s)), mk("z1", "y", asks(5*s)), mk("b1", "z", asks(5*s)),
			},
			wantGrant: []string{"b1", "z1"}, wantWaiting: []string{"a1"},
			wantHeld: 2, wantBudget: 2, wantNext: 50 * s, // the new grants' renewal
			check: func(t *testing.T, d Decision) {
				for _, n := range []string{"b1", "z1"} {
					if got, want := d.Memory.Granted[n], at(30*s); !got.Equal(want) {
						t.Errorf("Memory.Granted[%s]: got %v, want %v", n, got, want)
					}
				}
			},
		},
		{
			name:   "a percent budget rounds up: 10% of 5 nodes is one",
			config: func(c *Config) { c.MaxNoExecute = intstr.FromString("10%") },
			nodes: []Node{
				mk("a", "x", asks(0)), mk("b", "y", asks(0)), mk("c", "z"), mk("d", "z"), mk("e", "z"),
			},
			wantGrant: []string{"a"}, wantWaiting: []string{"b"},
			wantHeld: 1, wantBudget: 1, wantNext: 20 * s,
		},
		{
			name: "a holder counts against the budget",
			now:  10 * s,
			nodes: []Node{
				mk("h", "x", asks(0)), mk("w1", "y", asks(1*s)), mk("w2", "z", asks(2*s)),
			},
			grants:    []Grant{held("h", "x", 0, 0)},
			wantGrant: []string{"w1"}, wantWaiting: []string{"w2"},
			wantHeld: 2, wantBudget: 2, wantNext: 20 * s, // h's renewal
		},
		{
			name: "an uncovered NoExecute taint counts against the budget",
			now:  10 * s,
			nodes: []Node{
				mk("c", "x", carries), mk("w1", "y", asks(1*s)), mk("w2", "z", asks(2*s)),
			},
			wantGrant: []string{"w1"}, wantWaiting: []string{"w2"},
			wantHeld: 2, wantBudget: 2, wantNext: 30 * s, // w1's renewal
			check: func(t *testing.T, d Decision) {
				if got, want := d.Memory.Uncovered["c"], at(10*s); !got.Equal(want) {
					t.Errorf("Memory.Uncovered[c]: got %v, want %v", got, want)
				}
			},
		},
		{
			name:   "a full budget grants nothing, not even a node that already counts",
			config: func(c *Config) { c.MaxNoExecute = intstr.FromInt32(1) },
			now:    10 * s,
			nodes: []Node{
				mk("c", "x", carries, asks(0)), mk("w", "y", asks(1*s)),
			},
			wantWaiting: []string{"c", "w"},
			wantHeld:    1, wantBudget: 1, wantNext: 70 * s, // c's abandonment
		},
		{
			name:   "a budget of 0 grants nothing",
			config: func(c *Config) { c.MaxNoExecute = intstr.FromString("0%") },
			nodes:  []Node{mk("w", "y", asks(0))}, wantWaiting: []string{"w"},
			wantBudget: 0, wantNext: time.Hour,
		},
		{
			name: "a NotReady node waits for nothing: it is not waiting",
			nodes: []Node{
				mk("n", "x", asks(0), notReady), mk("w", "y", asks(1*s)),
			},
			wantGrant: []string{"w"}, wantHeld: 1, wantBudget: 2, wantNext: 20 * s,
		},
		{
			name: "the guard holds a node asking only for a tripped condition; others are granted",
			memory: func(m *Memory) {
				m.Guard.Conditions = map[corev1.NodeConditionType]map[string]Scope{
					condA: {"x": {Tripped: true, Since: at(-time.Minute)}},
				}
			},
			nodes: []Node{
				mk("x1", "x", asks(0, condA)), mk("x2", "x", asks(1*s, condA, condB)), mk("y1", "y", asks(2*s, condA)),
			},
			wantGrant: []string{"x2", "y1"}, wantWaiting: []string{"x1"},
			wantHeld: 2, wantBudget: 2, wantNext: 20 * s,
		},
		{
			name: "a guard tripping in this decision holds its nodes at once",
			config: func(c *Config) {
				c.MaxNoExecute = intstr.FromInt32(5)
				c.RatePerMinute = 10
			},
			nodes: []Node{
				mk("x1", "x", asks(0), reports(condA)), mk("x2", "x", asks(1*s), reports(condA)),
				mk("x3", "x", asks(2*s, condB), reports(condA)), mk("x4", "x"), mk("y1", "y", asks(3*s), reports(condA)),
			},
			// 3 of 4 in x is 75%; the fleet's 4 of 5 is 80%: A trips
			// fleet-wide, so only x3 (asking for B) is granted.
			wantGrant: []string{"x3"}, wantWaiting: []string{"x1", "x2", "y1"},
			wantHeld: 1, wantBudget: 5, wantNext: 20 * s,
			wantEvents: []string{"/DisruptionGuardTripped!", "/DisruptionGuardTripped!"},
		},
	})
}

func TestDecideRate(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			name: "two starts in the window block the zone until the older leaves it; other zones go on",
			now:  0,
			nodes: []Node{
				mk("x1", "x", asks(-time.Hour)), mk("y1", "y", asks(-time.Minute)),
			},
			grants: []Grant{freed("o1", "x", -50*s, -50*s), freed("o2", "x", -20*s, -20*s)},
			// x's slot: -50s+1m = 10s (and -20s+30s = 10s).
			wantGrant: []string{"y1"}, wantWaiting: []string{"x1"},
			wantHeld: 1, wantBudget: 2, wantNext: 10 * s,
		},
		{
			name:  "a start exactly a minute ago has left the window",
			now:   0,
			nodes: []Node{mk("x1", "x", asks(-time.Hour))},
			grants: []Grant{
				freed("o1", "x", -60*s, -60*s), freed("o2", "x", -40*s, -40*s),
			},
			wantGrant: []string{"x1"}, wantDelete: []string{"o1"},
			wantHeld: 1, wantBudget: 2, wantNext: 20 * s, // o2's deletion and x1's renewal
		},
		{
			name:   "held and released grants both count in the window",
			config: func(c *Config) { c.MaxNoExecute = intstr.FromInt32(5) },
			nodes: []Node{
				mk("h", "x", asks(-time.Hour)), mk("x1", "x", asks(-time.Hour)),
			},
			grants: []Grant{
				held("h", "x", -40*s, -10*s), freed("o", "x", -35*s, -35*s),
			},
			// Held h started at -40s: the slot is at 20s (-5s by spacing).
			wantWaiting: []string{"x1"},
			wantHeld:    1, wantBudget: 5, wantNext: 10 * s, // h's renewal
		},
		{
			name:  "spacing: a minute / RatePerMinute after the zone's latest start",
			now:   0,
			nodes: []Node{mk("x1", "x", asks(-time.Hour))},
			grants: []Grant{
				freed("o", "x", -20*s, -20*s),
			},
			wantWaiting: []string{"x1"},
			wantHeld:    0, wantBudget: 2, wantNext: 10 * s,
		},
		{
			name:   "grants made in this decision count: the second in a zone waits for the spacing",
			config: func(c *Config) { c.MaxNoExecute = intstr.FromInt32(5) },
			nodes: []Node{
				mk("x1", "x", asks(0)), mk("x2", "x", asks(1*s)), mk("y1", "y", asks(2*s)),
			},
			wantGrant: []string{"x1", "y1"}, wantWaiting: []string{"x2"},
			wantHeld: 2, wantBudget: 5, wantNext: 20 * s, // renewals before x's slot at 30s
		},
		{
			name: "zones are independent",
			config: func(c *Config) {
				c.MaxNoExecute = intstr.FromInt32(5)
				c.RatePerMinute = 1
			},
			now: 0,
			nodes: []Node{
				mk("x1", "x", asks(0)), mk("x2", "x", asks(1*s)), mk("y1", "y", asks(2*s)), mk("y2", "y", asks(3*s)),
			},
			grants:    []Grant{freed("o", "z", -10*s, -10*s)},
			wantGrant: []string{"x1", "y1"}, wantWaiting: []string{"x2", "y2"},
			wantHeld: 2, wantBudget: 5, wantNext: 20 * s,
		},
		{
			name:   "a rate of 0 grants nothing and waits for no slot",
			config: func(c *Config) { c.RatePerMinute = 0 },
			nodes:  []Node{mk("x1", "x", asks(0))}, wantWaiting: []string{"x1"},
			wantBudget: 2, wantNext: time.Hour,
		},
		{
			name: "a start in the future (another leader's clock) counts in the window",
			now:  0,
			config: func(c *Config) {
				c.RatePerMinute = 1
			},
			nodes:       []Node{mk("x1", "x", asks(-time.Hour))},
			grants:      []Grant{freed("o", "x", 30*s, 30*s)},
			wantWaiting: []string{"x1"},
			wantBudget:  2, wantNext: 90 * s,
		},
	})
}

func TestDecideRelease(t *testing.T) {
	dead := func(m *Memory) {
		m.Since = at(-time.Hour)
		m.Granted = map[string]time.Time{"n": at(-70 * s)}
	}
	runDecideCases(t, []decideCase{
		{
			name:        "node deleted: nothing of it counts",
			now:         10 * s,
			grants:      []Grant{held("gone", "x", -30*s, 0)},
			wantRelease: map[string]string{"gone": ReleaseNodeDeleted},
			wantBudget:  2, wantNext: 30 * s, // deleted a minute after it started
			wantEvents: []string{"gone/NoExecuteGrantReleased!"},
		},
		{
			name:        "node NotReady: its taint still counts",
			now:         10 * s,
			nodes:       []Node{mk("n", "x", asks(-time.Hour), notReady, carries), mk("w", "y", asks(0))},
			grants:      []Grant{held("n", "x", -30*s, 0)},
			wantRelease: map[string]string{"n": ReleaseNotReady},
			wantGrant:   []string{"w"},
			wantHeld:    2, wantBudget: 2, wantNext: 30 * s,
			wantEvents: []string{"n/NoExecuteGrantReleased!"},
		},
		{
			name:  "node NotReady that still asks counts until no agent can believe its grant",
			now:   10 * s,
			nodes: []Node{mk("n", "x", asks(-time.Hour), notReady), mk("w", "y", asks(0))},
			config: func(c *Config) {
				c.MaxNoExecute = intstr.FromInt32(1)
			},
			grants:      []Grant{held("n", "x", -30*s, 0)},
			wantRelease: map[string]string{"n": ReleaseNotReady},
			wantWaiting: []string{"w"},
			wantHeld:    1, wantBudget: 1, wantNext: 60 * s, // n's Renewed + TTL
			wantEvents: []string{"n/NoExecuteGrantReleased!"},
		},
		{
			name:        "no longer asks: no event, nothing counts",
			now:         10 * s,
			nodes:       []Node{mk("n", "x")},
			grants:      []Grant{held("n", "x", -30*s, 0)},
			wantRelease: map[string]string{"n": ReleaseNoLongerAsks},
			wantBudget:  2, wantNext: 60 * s, // deleted when no agent can believe it
		},
		{
			name:        "no longer asks but its taint is still on: it counts",
			now:         10 * s,
			nodes:       []Node{mk("n", "x", carries)},
			grants:      []Grant{held("n", "x", -30*s, 0)},
			wantRelease: map[string]string{"n": ReleaseNoLongerAsks},
			// Counted while the taint is on: a change of the Node brings
			// the next decision.
			wantHeld: 1, wantBudget: 2, wantNext: time.Hour,
		},
		{
			name:        "expired (a leader gap), then granted again as a waiting node",
			now:         2 * time.Minute,
			nodes:       []Node{mk("n", "x", asks(-time.Hour), carries)},
			grants:      []Grant{held("n", "x", -time.Minute, 0)},
			wantRelease: map[string]string{"n": ReleaseExpired},
			wantGrant:   []string{"n"},
			wantHeld:    1, wantBudget: 2, wantNext: 140 * s,
			wantEvents: []string{"n/NoExecuteGrantReleased!"},
			check: func(t *testing.T, d Decision) {
				if _, ok := d.Memory.Uncovered["n"]; ok {
					t.Errorf("Memory.Uncovered[n] kept after a new grant")
				}
			},
		},
		{
			name:   "expired and not granted again: its taint counts as uncovered",
			now:    60 * s,
			config: func(c *Config) { c.RatePerMinute = 1 },
			nodes:  []Node{mk("n", "x", asks(-time.Hour), carries)},
			// Never renewed: expired at 60s; o's start at 50s holds x's
			// rate until 110s.
			grants:      []Grant{held("n", "x", 0, 0), freed("o", "x", 50*s, 50*s)},
			wantRelease: map[string]string{"n": ReleaseExpired},
			wantWaiting: []string{"n"},
			wantHeld:    1, wantBudget: 2, wantNext: 110 * s,
			wantEvents: []string{"n/NoExecuteGrantReleased!"},
		},
		{
			name:   "agent not alive: more than a TTL since its last sign of life",
			memory: dead,
			config: func(c *Config) { c.RatePerMinute = 1 },
			now:    0,
			nodes:  []Node{mk("n", "x", asks(-time.Hour), aliveSeen(-61*s))},
			// Renewed on time, started 30s ago: no new start in x yet.
			grants:      []Grant{held("n", "x", -30*s, -5*s)},
			wantRelease: map[string]string{"n": ReleaseAgentNotAlive},
			wantWaiting: []string{"n"},
			// It still asks: it counts until Renewed+TTL = 55s; it is not
			// granted again (so x's slot at 30s wakes no one) until its
			// agent shows life.
			wantHeld: 1, wantBudget: 2, wantNext: 55 * s,
			wantEvents: []string{"n/NoExecuteGrantReleased!"},
		},
		{
			name:     "agent alive exactly a TTL ago is still alive, judged a nanosecond later",
			memory:   dead,
			now:      0,
			nodes:    []Node{mk("n", "x", asks(-time.Hour), aliveSeen(-60*s))},
			grants:   []Grant{held("n", "x", -30*s, -5*s)},
			wantHeld: 1, wantBudget: 2, wantNext: 1, // 1ns
		},
		{
			name:        "a lease whose holder is another node grants no one",
			now:         10 * s,
			nodes:       []Node{mk("n", "x", asks(-time.Hour)), mk("m", "x")},
			grants:      []Grant{{Node: "n", Holder: "m", Zone: "x", Acquired: at(0), Renewed: at(0)}},
			wantRelease: map[string]string{"n": ReleaseForeignHolder},
			wantWaiting: []string{"n"},
			// It still asks, so it counts until the lease's Renewed+TTL;
			// x's rate slot is at 30s.
			wantHeld: 1, wantBudget: 2, wantNext: 30 * s,
			wantEvents: []string{"n/NoExecuteGrantReleased!"},
		},
		{
			name: "deleted before NotReady before no longer asks before expired",
			now:  2 * time.Minute,
			nodes: []Node{
				mk("nr", "x", notReady), mk("nl", "x"), mk("ex", "x", asks(-time.Hour), notReady),
			},
			grants: []Grant{
				held("del", "x", -time.Hour, -time.Hour), held("nr", "x", -time.Hour, -time.Hour),
				held("nl", "x", -time.Hour, -time.Hour), held("ex", "x", -time.Hour, -time.Hour),
			},
			wantRelease: map[string]string{
				"del": ReleaseNodeDeleted, "nr": ReleaseNotReady, "nl": ReleaseNoLongerAsks, "ex": ReleaseNotReady,
			},
			wantBudget: 2, wantNext: time.Hour,
			wantEvents: []string{"del/NoExecuteGrantReleased!", "ex/NoExecuteGrantReleased!", "nr/NoExecuteGrantReleased!"},
		},
	})
}

func TestDecideRenewAndAdopt(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			name:     "not yet due at 19s",
			now:      19 * s,
			nodes:    []Node{mk("n", "x", asks(0))},
			grants:   []Grant{held("n", "x", 0, 0)},
			wantHeld: 1, wantBudget: 2, wantNext: 20 * s,
		},
		{
			name:      "due at a third of the TTL",
			now:       20 * s,
			nodes:     []Node{mk("n", "x", asks(0), aliveSeen(15*s))},
			grants:    []Grant{held("n", "x", 0, 0)},
			wantRenew: []string{"n"},
			wantHeld:  1, wantBudget: 2, wantNext: 40 * s,
		},
		{
			name:      "a grant renewed in the future is renewed on this clock at once",
			now:       20 * s,
			nodes:     []Node{mk("n", "x", asks(0), aliveSeen(15*s))},
			grants:    []Grant{held("n", "x", 0, 2*time.Minute)},
			wantRenew: []string{"n"},
			wantHeld:  1, wantBudget: 2, wantNext: 40 * s,
		},
		{
			name:   "a new leader adopts a live grant from its start: a full TTL to show life",
			memory: func(m *Memory) { m.Since = at(-30 * s); m.Decided = false },
			now:    0,
			nodes:  []Node{mk("n", "x", asks(-time.Hour))},
			grants: []Grant{held("n", "x", -time.Hour, -10*s)},
			// Renewal at 10s; liveness deadline 30s (+1ns).
			wantHeld: 1, wantBudget: 2, wantNext: 10 * s,
			check: func(t *testing.T, d Decision) {
				if got, want := d.Memory.Granted["n"], at(-30*s); !got.Equal(want) {
					t.Errorf("Memory.Granted[n]: got %v, want %v", got, want)
				}
			},
		},
		{
			name:     "a leader that did not say when it started starts now",
			memory:   func(m *Memory) { m.Since = time.Time{} },
			now:      0,
			nodes:    []Node{mk("n", "x", asks(-time.Hour))},
			grants:   []Grant{held("n", "x", -time.Hour, -10*s)},
			wantHeld: 1, wantBudget: 2, wantNext: 10 * s,
			check: func(t *testing.T, d Decision) {
				if got, want := d.Memory.Since, at(0); !got.Equal(want) {
					t.Errorf("Memory.Since: got %v, want %v", got, want)
				}
			},
		},
	})
}

func TestDecideDelete(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			name:       "a released grant a minute after it started",
			nodes:      []Node{mk("n", "x")},
			grants:     []Grant{freed("n", "x", -60*s, -60*s), freed("m", "x", -59*s, -59*s)},
			wantDelete: []string{"n"},
			wantBudget: 2, wantNext: 1 * s,
		},
		{
			name:       "a released grant of a deleted node, renewed recently",
			grants:     []Grant{freed("gone", "x", -90*s, -10*s)},
			wantDelete: []string{"gone"},
			wantBudget: 2, wantNext: time.Hour,
		},
		{
			name:       "kept while its node's agent may still believe it",
			nodes:      []Node{mk("n", "x")},
			grants:     []Grant{freed("n", "x", -90*s, -30*s)},
			wantBudget: 2, wantNext: 30 * s,
		},
		{
			name:      "not deleted when granted again",
			nodes:     []Node{mk("n", "x", asks(0))},
			grants:    []Grant{freed("n", "x", -2*time.Minute, -2*time.Minute)},
			wantGrant: []string{"n"},
			wantHeld:  1, wantBudget: 2, wantNext: 20 * s,
		},
		{
			name:       "a held grant is never deleted",
			nodes:      []Node{mk("n", "x", asks(0), aliveSeen(-10*s))},
			grants:     []Grant{held("n", "x", -2*time.Minute, -5*s)},
			wantHeld:   1,
			wantBudget: 2, wantNext: 15 * s,
			memory: func(m *Memory) { m.Granted = map[string]time.Time{"n": at(-2 * time.Minute)}; m.Since = at(-time.Hour) },
		},
	})
}

func TestDecideNext(t *testing.T) {
	tripped := func(below time.Duration) func(*Memory) {
		return func(m *Memory) {
			b := at(below)
			m.Guard.Conditions = map[corev1.NodeConditionType]map[string]Scope{
				condA: {"x": {Tripped: true, Since: at(-time.Hour), BelowSince: &b}},
			}
		}
	}
	runDecideCases(t, []decideCase{
		{
			name:   "zero when nothing is pending",
			config: func(c *Config) { c.Guard.RenewEvery = 0 },
			nodes:  []Node{mk("a", "x")}, wantBudget: 2, wantNext: nothing,
		},
		{
			name:   "a holder's liveness deadline before its renewal",
			memory: func(m *Memory) { m.Since = at(-50 * s) },
			nodes:  []Node{mk("n", "x", asks(-time.Hour))},
			grants: []Grant{held("n", "x", -time.Hour, -5*s)},
			// Renewal at 15s, expiry at 55s, liveness after 10s.
			wantHeld: 1, wantBudget: 2, wantNext: 10*s + 1,
		},
		{
			name:     "an uncovered taint's abandonment",
			memory:   func(m *Memory) { m.Uncovered = map[string]time.Time{"c": at(-45 * s)} },
			nodes:    []Node{mk("c", "x", carries)},
			wantHeld: 1, wantBudget: 2, wantNext: 15 * s,
		},
		{
			name:     "a rate slot, while the budget has room",
			nodes:    []Node{mk("h", "y", asks(-time.Hour)), mk("x1", "x", asks(-time.Hour))},
			grants:   []Grant{held("h", "y", -time.Hour, 0), freed("o", "x", -25*s, -25*s)},
			wantHeld: 1, wantBudget: 2, wantNext: 5 * s,
			wantWaiting: []string{"x1"},
		},
		{
			name:     "no rate slot while the budget is full",
			config:   func(c *Config) { c.MaxNoExecute = intstr.FromInt32(1) },
			nodes:    []Node{mk("h", "y", asks(-time.Hour)), mk("x1", "x", asks(-time.Hour))},
			grants:   []Grant{held("h", "y", -time.Hour, 0), freed("o", "x", -25*s, -25*s)},
			wantHeld: 1, wantBudget: 1, wantNext: 20 * s, // h's renewal
			wantWaiting: []string{"x1"},
		},
		{
			name:     "a tripped guard's reset",
			memory:   tripped(-4 * time.Minute),
			wantNext: time.Minute, wantBudget: 2,
		},
		{
			name:       "the guard's renewal",
			memory:     func(m *Memory) { m.Guard.RenewTime = at(-50 * time.Minute) },
			wantBudget: 2, wantNext: 10 * time.Minute,
		},
		{
			name:       "a released grant's deletion",
			grants:     []Grant{freed("o", "x", -45*s, -45*s)},
			wantBudget: 2, wantNext: 15 * s,
		},
	})
}

// step is one decision in a sequence; the memory carries over, or a new
// leader starts from the last written guard.
type step struct {
	at        time.Duration
	newLeader bool
	nodes     []Node
	grants    []Grant

	wantGrant     []string
	wantDelete    []string
	wantHeld      int
	wantUncovered time.Duration // nothing: none for node "c"
	wantEvents    []string
	wantNext      time.Duration
}

func TestUncovered(t *testing.T) {
	c := func(opts ...nodeOpt) []Node { return []Node{mk("c", "x", opts...)} }
	steps := []step{
		{at: 0, nodes: c(carries), wantHeld: 1, wantUncovered: 0, wantNext: 60 * s},
		{at: 59 * s, nodes: c(carries), wantHeld: 1, wantUncovered: 0, wantNext: 60 * s},
		{at: 60 * s, nodes: c(carries), wantHeld: 0, wantUncovered: 0, wantNext: time.Hour,
			wantEvents: []string{"c/NoExecuteTaintAbandoned!"}},
		{at: 90 * s, nodes: c(carries), wantHeld: 0, wantUncovered: 0, wantNext: time.Hour},
		// The taint goes: forgotten.
		{at: 100 * s, nodes: c(), wantHeld: 0, wantUncovered: nothing, wantNext: time.Hour},
		// Back: a new clock, a new event when abandoned again.
		{at: 110 * s, nodes: c(carries), wantHeld: 1, wantUncovered: 110 * s, wantNext: 170 * s},
		{at: 170 * s, nodes: c(carries), wantHeld: 0, wantUncovered: 110 * s, wantNext: time.Hour,
			wantEvents: []string{"c/NoExecuteTaintAbandoned!"}},
		// A new leader judges it afresh from its own start, and tells once.
		{at: 200 * s, newLeader: true, nodes: c(carries), wantHeld: 1, wantUncovered: 200 * s, wantNext: 260 * s},
		{at: 260 * s, nodes: c(carries), wantHeld: 0, wantUncovered: 200 * s, wantNext: time.Hour,
			wantEvents: []string{"c/NoExecuteTaintAbandoned!"}},
		// It asks and is granted: no longer uncovered.
		{at: 270 * s, nodes: c(carries, asks(265*s)), wantGrant: []string{"c"}, wantHeld: 1, wantUncovered: nothing, wantNext: 290 * s},
	}
	runSteps(t, testConfig(), steps)
}

// TestReleasedTaintCountsWhileOn: a holder goes NotReady (or its agent
// dies) with its NoExecute taint on; its grant is released, but the taint
// counts against the budget for as long as it is on, also for a new
// leader, and its released Lease (the record of the grant) is kept
// meanwhile: the waiting node is granted only once the taint is gone.
func TestReleasedTaintCountsWhileOn(t *testing.T) {
	cfg := testConfig()
	cfg.MaxNoExecute = intstr.FromInt32(1)
	n := func(opts ...nodeOpt) []Node {
		return []Node{mk("c", "x", append(opts, asks(-time.Hour), aliveSeen(0))...), mk("w", "y", asks(0))}
	}
	released := []Grant{freed("c", "x", -time.Hour, 0)}
	steps := []step{
		{at: 0, nodes: n(carries), grants: []Grant{held("c", "x", -time.Hour, 0)}, wantHeld: 1, wantUncovered: nothing, wantNext: 20 * s},
		{at: 10 * s, nodes: n(carries, notReady), grants: []Grant{held("c", "x", -time.Hour, 0)},
			wantHeld: 1, wantUncovered: nothing, wantNext: time.Hour, wantEvents: []string{"c/NoExecuteGrantReleased!"}},
		{at: 70 * s, nodes: n(carries, notReady), grants: released, wantHeld: 1, wantUncovered: nothing, wantNext: time.Hour},
		{at: 30 * time.Minute, nodes: n(carries, notReady), grants: released, wantHeld: 1, wantUncovered: nothing, wantNext: time.Hour},
		{at: 31 * time.Minute, newLeader: true, nodes: n(carries, notReady), grants: released, wantHeld: 1, wantUncovered: nothing, wantNext: time.Hour},
		// Ready again, its agent alive, still asking: it waits like w
		// (its agent, with no grant, lifts the taint).
		{at: 32 * time.Minute, nodes: n(carries), grants: released, wantHeld: 1, wantUncovered: nothing, wantNext: time.Hour},
		// The taint is lifted: the slot passes on, in the order they
		// asked (c first), and c's old Lease is its new grant's.
		{at: 33 * time.Minute, nodes: n(), grants: released, wantGrant: []string{"c"}, wantHeld: 1, wantUncovered: nothing, wantNext: 33*time.Minute + 20*s},
		// Or NotReady when lifted: w gets the slot, and c's Lease goes.
		{at: 34 * time.Minute, nodes: n(notReady), grants: released, wantGrant: []string{"w"}, wantDelete: []string{"c"}, wantHeld: 1, wantUncovered: nothing, wantNext: 34*time.Minute + 20*s},
	}
	runSteps(t, cfg, steps)
}

func runSteps(t *testing.T, cfg Config, steps []step) {
	t.Helper()
	m := testMemory()
	for _, st := range steps {
		if st.newLeader {
			m = Memory{Since: at(st.at), Guard: m.Guard}
		}
		d := Decide(Input{Config: cfg, Now: at(st.at), Leader: "me", Nodes: st.nodes, Grants: st.grants, Memory: m})
		m = d.Memory
		name := fmt.Sprintf("at %v", st.at)
		if !slices.Equal(d.Grant, st.wantGrant) {
			t.Errorf("%s: Grant: got %q, want %q", name, d.Grant, st.wantGrant)
		}
		if !slices.Equal(d.Delete, st.wantDelete) {
			t.Errorf("%s: Delete: got %q, want %q", name, d.Delete, st.wantDelete)
		}
		if got, want := d.Held, st.wantHeld; got != want {
			t.Errorf("%s: Held: got %d, want %d", name, got, want)
		}
		got := nothing
		if u, ok := m.Uncovered["c"]; ok {
			got = u.Sub(t0)
		}
		if want := st.wantUncovered; got != want {
			t.Errorf("%s: Memory.Uncovered[c]: got %v, want %v", name, got, want)
		}
		if got, want := events(d.Events), st.wantEvents; !slices.Equal(got, want) {
			t.Errorf("%s: Events: got %q, want %q", name, got, want)
		}
		if got, want := next(d), st.wantNext; got != want {
			t.Errorf("%s: Next: got %v, want %v", name, got, want)
		}
	}
}

func TestEventMessages(t *testing.T) {
	m := testMemory()
	m.Since = at(-time.Hour)
	m.Granted = map[string]time.Time{"dead": at(-90 * s)}
	m.Uncovered = map[string]time.Time{"old": at(-2 * time.Minute)}
	in := Input{
		Config: testConfig(), Now: t0, Leader: "me", Memory: m,
		Nodes: []Node{
			mk("dead", "zone-d", asks(-time.Hour), aliveSeen(-80*s)),
			mk("sick", "zone-s", asks(-time.Hour), notReady),
			mk("old", "zone-o", carries),
		},
		Grants: []Grant{
			held("dead", "zone-d", -time.Hour, -5*s), held("sick", "zone-s", -time.Hour, -5*s),
			held("gone", "zone-g", -time.Hour, -5*s), held("late", "zone-l", -time.Hour, -2*time.Minute),
		},
	}
	in.Nodes = append(in.Nodes, mk("late", "zone-l", asks(-time.Hour)))
	d := Decide(in)
	want := map[string][]string{
		"dead": {`"dead"`, `"zone-d"`, ReleaseAgentNotAlive, "1m20s", "1m0s"},
		"sick": {`"sick"`, `"zone-s"`, ReleaseNotReady, "NotReady"},
		"gone": {`"gone"`, `"zone-g"`, ReleaseNodeDeleted},
		"late": {`"late"`, `"zone-l"`, ReleaseExpired, "09:58:00"},
		"old":  {`"old"`, `"zone-o"`, "09:58:00", "1m0s", "no longer counts"},
	}
	seen := map[string]bool{}
	for _, e := range d.Events {
		if e.Reason == EventBudgetExhausted {
			continue
		}
		seen[e.Node] = true
		for _, w := range want[e.Node] {
			if !strings.Contains(e.Message, w) {
				t.Errorf("%s event %q: does not say %q", e.Node, e.Message, w)
			}
		}
	}
	for n := range want {
		if !seen[n] {
			t.Errorf("no event for %s; got %q", n, events(d.Events))
		}
	}
}

// TestDeadAgentNotRegranted: a holder released because its agent showed no
// life is not granted again while its request (which a dead agent never
// withdraws) stands unchanged, so it cannot take a slot and a rate token
// every TTL; once its liveness stamp changes (a restarted agent rewrites
// its request), it waits in line like any other.
func TestDeadAgentNotRegranted(t *testing.T) {
	const s = time.Second
	cfg := testConfig()
	cfg.MaxNoExecute = intstr.FromInt32(5)
	mem := testMemory()
	mem.Since = at(-time.Hour)
	mem.Granted = map[string]time.Time{"n": at(-70 * s)}
	in := Input{Config: cfg, Now: at(0), Memory: mem,
		Nodes:  []Node{mk("n", "x", asks(-time.Hour), aliveSeen(-61*s))},
		Grants: []Grant{held("n", "x", -70*s, -5*s)},
	}
	d := Decide(in)
	if d.Release["n"] != ReleaseAgentNotAlive || len(d.Grant) != 0 {
		t.Fatalf("release %v grant %v, want released for %q and not granted", d.Release, d.Grant, ReleaseAgentNotAlive)
	}
	// Within its back-off (one TTL after the first strike), the lease
	// released and nothing changed on the node: not granted, though the
	// budget and the rate have room; the back-off's end is the next wake.
	in.Now, in.Memory = at(30*s), d.Memory
	in.Grants = []Grant{freed("n", "x", -70*s, 0)}
	if d = Decide(in); len(d.Grant) != 0 || !slices.Contains(d.Waiting, "n") || !d.Next.Equal(at(60*s)) {
		t.Fatalf("30s later with no sign of life: grant %v waiting %v next %v, want none granted, n waiting, next at 60s", d.Grant, d.Waiting, d.Next)
	}
	// Its agent writes (the stamp changes): granted again at once.
	mem = d.Memory
	in.Nodes = []Node{mk("n", "x", asks(-time.Hour), aliveSeen(40*s))}
	in.Now, in.Memory = at(40*s), mem
	if d2 := Decide(in); !slices.Contains(d2.Grant, "n") {
		t.Fatalf("after its agent showed life: grant %v, want n granted", d2.Grant)
	}
	// Or, with no sign of life, once the back-off has passed (a stalled
	// agent that recovers must not be locked out for good).
	in.Nodes = []Node{mk("n", "x", asks(-time.Hour), aliveSeen(-61*s))}
	in.Now, in.Memory = at(60*s), mem
	if d = Decide(in); !slices.Contains(d.Grant, "n") {
		t.Fatalf("after the back-off: grant %v, want n granted", d.Grant)
	}
}

func TestNotAliveBackoffDoubles(t *testing.T) {
	d := newNoExecute(newView(Input{Config: Config{GrantTTL: time.Minute}, Now: t0}))
	for strikes, want := range map[int]time.Duration{1: time.Minute, 2: 2 * time.Minute, 3: 4 * time.Minute, 5: 16 * time.Minute, 9: 16 * time.Minute} {
		if got := d.backoff(strikes); got != want {
			t.Errorf("backoff(%d) = %v, want %v", strikes, got, want)
		}
	}
}

// TestBudgetExhaustedTold: a node that waits because the budget is full is
// told so once per wait, with the numbers; not while the budget has room,
// nor again while it keeps waiting, and again after a new wait.
func TestBudgetExhaustedTold(t *testing.T) {
	const s = time.Second
	cfg := testConfig()
	cfg.MaxNoExecute = intstr.FromInt32(1)
	told := func(d Decision) []string {
		var out []string
		for _, e := range d.Events {
			if e.Reason == EventBudgetExhausted {
				out = append(out, e.Node)
				for _, w := range []string{"1 of 1 held", "budget is full", `"w"`} {
					if !strings.Contains(e.Message, w) {
						t.Errorf("event %q does not say %q", e.Message, w)
					}
				}
			}
		}
		return out
	}
	in := Input{Config: cfg, Now: at(0), Memory: testMemory(),
		Nodes:  []Node{mk("h", "x", asks(-time.Hour)), mk("w", "x", asks(-time.Minute))},
		Grants: []Grant{held("h", "x", -time.Hour, 0)},
	}
	d := Decide(in)
	if got := told(d); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("first decision told %v, want [w]", got)
	}
	in.Now, in.Memory = at(10*s), d.Memory
	if d = Decide(in); len(told(d)) != 0 {
		t.Errorf("told again while the same wait goes on: %v", told(d))
	}
	// w stops asking, then asks again: a new wait, told again.
	in.Now, in.Memory = at(20*s), d.Memory
	in.Nodes = []Node{mk("h", "x", asks(-time.Hour)), mk("w", "x")}
	d = Decide(in)
	in.Now, in.Memory = at(30*s), d.Memory
	in.Nodes = []Node{mk("h", "x", asks(-time.Hour)), mk("w", "x", asks(30*s))}
	if d = Decide(in); !slices.Equal(told(d), []string{"w"}) {
		t.Errorf("a new wait: told %v, want [w]", told(d))
	}
	// Room in the budget: nobody is told.
	in.Grants = nil
	in.Memory = testMemory()
	in.Nodes = []Node{mk("w", "x", asks(-time.Minute))}
	if d = Decide(in); len(told(d)) != 0 {
		t.Errorf("told %v with room in the budget", told(d))
	}
}

// TestNotAliveJoinsTheBackOfTheLine: once its back-off ends, a node that
// lost its grant for no sign of life waits behind the nodes that asked
// before the back-off ended, whatever its old request says.
func TestNotAliveJoinsTheBackOfTheLine(t *testing.T) {
	const s = time.Second
	cfg := testConfig()
	cfg.MaxNoExecute = intstr.FromInt32(1)
	mem := testMemory()
	mem.NotAlive = map[string]Strikes{"dead": {Count: 1, At: at(-60 * s)}}
	d := Decide(Input{Config: cfg, Now: at(0), Memory: mem,
		Nodes: []Node{mk("dead", "x", asks(-time.Hour)), mk("idle", "x", asks(-30*s))},
	})
	if !slices.Equal(d.Grant, []string{"idle"}) || !slices.Equal(d.Waiting, []string{"dead"}) {
		t.Errorf("grant %v waiting %v, want idle granted (asked before dead's back-off ended), dead waiting", d.Grant, d.Waiting)
	}
}
