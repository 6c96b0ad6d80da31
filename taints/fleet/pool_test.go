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

// poolConfig: testConfig with a maintenance pool of 2 and a default
// deadline of 2h (out of the way of the guard's hourly renewal in Next).
func poolConfig() Config {
	cfg := testConfig()
	cfg.Maintenance = MaintenanceConfig{MaxParallel: intstr.FromInt32(2), DefaultDeadline: 2 * time.Hour}
	return cfg
}

// operatorAsks: an operator's maintenance request made at t0+at.
func operatorAsks(at time.Duration, opts ...func(*MaintenanceRequest)) nodeOpt {
	return func(n *Node) {
		r := MaintenanceRequest{Version: MaintenanceVersion, Reason: "kernel upgrade", RequestedBy: "alice", RequestedAt: t0.Add(at)}
		for _, o := range opts {
			o(&r)
		}
		n.Maintenance = &Maintenance{Annotation: OperatorRequestAnnotation, Request: r}
	}
}

// agentAsks: a node's agent's sick-node drain request for conds, made at
// t0+at.
func agentAsks(at time.Duration, conds ...corev1.NodeConditionType) nodeOpt {
	return func(n *Node) {
		r := MaintenanceRequest{Version: MaintenanceVersion, Reason: "sick", RequestedBy: "selftaint-agent", RequestedAt: t0.Add(at), Conditions: conds}
		n.Maintenance = &Maintenance{Annotation: AgentRequestAnnotation, Request: r}
	}
}

func withDeadline(d string) func(*MaintenanceRequest) {
	return func(r *MaintenanceRequest) { r.Deadline = d }
}

func forced(r *MaintenanceRequest) { r.OnDeadline = OnDeadlineForce }

// cordonedBy: spec.unschedulable, with the cordon annotation id ("":
// cordoned by someone else).
func cordonedBy(id string) nodeOpt {
	return func(n *Node) { n.Unschedulable, n.CordonedFor = true, id }
}

// uncordoned: the cordon annotation id is there, spec.unschedulable is
// not (someone else ran kubectl uncordon).
func uncordoned(id string) nodeOpt {
	return func(n *Node) { n.Unschedulable, n.CordonedFor = false, id }
}

// opID is the ID of an operator's request made at t0+at.
// unreadable: the node carries a maintenance request that cannot be read.
func unreadable(n *Node) { n.MaintenanceUnreadable = true }

func opID(at time.Duration) string {
	return Maintenance{Annotation: OperatorRequestAnnotation, Request: MaintenanceRequest{RequestedAt: t0.Add(at)}}.ID()
}

// holds: node holds its slot for request id in phase, taken at t0+acquired.
func holds(node, id, phase string, acquired time.Duration) Slot {
	return Slot{Node: node, Holder: node, Zone: "x", RequestID: id, Phase: phase, Acquired: at(acquired)}
}

// ended: node's slot for request id was given back.
func ended(node, id string) Slot {
	return Slot{Node: node, Zone: "x", RequestID: id, Phase: PhaseEnded, Acquired: t0}
}

// poolCase is one decision about the maintenance pool; nil slices and
// maps mean empty.
type poolCase struct {
	name   string
	config func(*Config)
	memory func(*Memory)
	now    time.Duration
	nodes  []Node
	slots  []Slot

	wantStart, wantDelete, wantUnavailable, wantFrozen []string
	// wantWaiting: "node: a part of why", in line order.
	wantWaiting []string
	// wantEnd: node -> "Reason: a part of the message".
	wantEnd    map[string]string
	wantDrain  map[string]DrainOrder
	wantSize   int
	wantEvents []string
	// wantNext, when not 0.
	wantNext time.Duration
}

func runPoolCases(t *testing.T, cases []poolCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := poolConfig()
			if tc.config != nil {
				tc.config(&cfg)
			}
			mem := testMemory()
			if tc.memory != nil {
				tc.memory(&mem)
			}
			in := Input{Config: cfg, Now: at(tc.now), Leader: "me", Nodes: tc.nodes, Slots: tc.slots, Memory: mem}
			d := Decide(in)
			m := d.Maintenance
			checkList(t, "Start", m.Start, tc.wantStart)
			checkList(t, "Delete", m.Delete, tc.wantDelete)
			checkList(t, "Unavailable", m.Unavailable, tc.wantUnavailable)
			checkList(t, "Frozen", m.Frozen, tc.wantFrozen)
			checkList(t, "Events", events(d.Events), tc.wantEvents)
			checkWaiting(t, m.Waiting, tc.wantWaiting)
			checkEnd(t, m.End, tc.wantEnd)
			if !maps.Equal(m.Drain, tc.wantDrain) {
				t.Errorf("Drain: got %v, want %v", m.Drain, tc.wantDrain)
			}
			if m.Size != tc.wantSize {
				t.Errorf("Size: got %d, want %d", m.Size, tc.wantSize)
			}
			if tc.wantNext != 0 {
				if got := next(d); got != tc.wantNext {
					t.Errorf("Next: got %v, want %v", got, tc.wantNext)
				}
			}
			for _, name := range m.Start {
				if !slices.Contains(m.Unavailable, name) {
					t.Errorf("started %s, which is not counted as unavailable %v", name, m.Unavailable)
				}
			}
		})
	}
}

func checkWaiting(t *testing.T, got []Waiter, want []string) {
	t.Helper()
	var names, wantNames []string
	for _, w := range got {
		names = append(names, w.Node)
	}
	for _, w := range want {
		name, _, _ := strings.Cut(w, ": ")
		wantNames = append(wantNames, name)
	}
	if !slices.Equal(names, wantNames) {
		t.Errorf("Waiting: got %q, want %q", got, want)
		return
	}
	for i, w := range want {
		_, why, _ := strings.Cut(w, ": ")
		if !strings.Contains(got[i].Why, why) {
			t.Errorf("Waiting[%d] (%s): why %q does not say %q", i, got[i].Node, got[i].Why, why)
		}
	}
}

func checkEnd(t *testing.T, got map[string]Outcome, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("End: got %v, want %v", got, want)
		return
	}
	for node, w := range want {
		reason, msg, _ := strings.Cut(w, ": ")
		o, ok := got[node]
		if !ok || o.Reason != reason || !strings.Contains(o.Message, msg) {
			t.Errorf("End[%s]: got %+v, want reason %s and a message saying %q", node, o, reason, msg)
		}
	}
}

// drainBy: a drain order with its deadline at t0+d.
func drainBy(d time.Duration) DrainOrder { return DrainOrder{Deadline: at(d)} }

func TestPoolSlots(t *testing.T) {
	const h = time.Hour
	one := func(c *Config) { c.Maintenance.MaxParallel = intstr.FromInt32(1) }
	runPoolCases(t, []poolCase{
		{
			name:     "nothing asks",
			nodes:    []Node{mk("a", "x"), mk("b", "y")},
			wantSize: 2,
		},
		{
			name: "starts in the order asked, then by name, up to the pool; the rest wait behind the first that does not fit",
			now:  30 * s,
			nodes: []Node{
				mk("a1", "x", operatorAsks(10*s)), mk("z1", "y", operatorAsks(5*s)), mk("b1", "z", operatorAsks(5*s)), mk("d1", "x", operatorAsks(20*s)),
			},
			wantStart: []string{"b1", "z1"}, wantUnavailable: []string{"b1", "z1"}, wantSize: 2,
			wantWaiting: []string{"a1: the maintenance pool is full: 2 of 2 unavailable (b1 draining, z1 draining)", "d1: waiting behind a1"},
			wantDrain:   map[string]DrainOrder{"b1": drainBy(30*s + 2*h), "z1": drainBy(30*s + 2*h)},
			wantEvents:  []string{"b1/DrainStarted", "z1/DrainStarted", "a1/MaintenanceWaiting", "d1/MaintenanceWaiting"},
		},
		{
			name:   "a node already unavailable starts even when the pool is full, and behind the node that does not fit",
			config: one,
			nodes: []Node{
				mk("a", "x", operatorAsks(1*s)), mk("b", "x", operatorAsks(2*s)), mk("nr", "x", notReady, operatorAsks(3*s)),
				mk("c", "x", cordonedBy(""), operatorAsks(4*s)), mk("idle", "x", notReady),
			},
			// idle (NotReady, not asking) fills the pool of 1 already.
			wantStart: []string{"nr", "c"}, wantUnavailable: []string{"c", "idle", "nr"}, wantSize: 1,
			wantWaiting: []string{"a: the maintenance pool is full: 3 of 1 unavailable (c cordoned, idle NotReady, nr NotReady)", "b: waiting behind a"},
			wantDrain:   map[string]DrainOrder{"nr": drainBy(2 * h), "c": drainBy(2 * h)},
			wantEvents:  []string{"a/MaintenanceWaiting", "b/MaintenanceWaiting", "nr/DrainStarted", "c/DrainStarted"},
		},
		{
			name:   "a held node whose request turns unreadable is held as it is: counted, not drained, not given back, even past its deadline",
			config: one,
			now:    3 * h,
			nodes: []Node{
				mk("typo", "x", cordonedBy(opID(0)), unreadable), mk("done", "x", cordonedBy(opID(0)), unreadable),
				mk("a", "x", operatorAsks(s)),
			},
			slots:      []Slot{holds("typo", opID(0), PhaseDraining, 0), holds("done", opID(0), PhaseDrained, 0)},
			wantFrozen: []string{"done", "typo"}, wantUnavailable: []string{"typo"}, wantSize: 1,
			wantWaiting: []string{"a: the maintenance pool is full: 1 of 1 unavailable (typo draining)"},
			wantEvents:  []string{"a/MaintenanceWaiting"},
		},
		{
			name:   "a slot of a deleted node frees at once",
			config: one,
			nodes:  []Node{mk("a", "x", operatorAsks(s))},
			slots:  []Slot{holds("gone", opID(0), PhaseDraining, 0)},
			now:    10 * s,
			// No End: there is nothing to uncordon and no one to tell.
			wantStart: []string{"a"}, wantDelete: []string{"gone"}, wantUnavailable: []string{"a"}, wantSize: 1,
			wantDrain:  map[string]DrainOrder{"a": drainBy(10*s + 2*h)},
			wantEvents: []string{"a/DrainStarted"},
		},
		{
			name:    "a withdrawn request frees its slot at once: ended, deleted, and the next starts",
			config:  one,
			now:     10 * s,
			nodes:   []Node{mk("w", "x", cordonedBy(opID(0))), mk("a", "x", operatorAsks(s))},
			slots:   []Slot{holds("w", opID(0), PhaseDraining, 0)},
			wantEnd: map[string]string{"w": "Released: the request was withdrawn"}, wantDelete: []string{"w"},
			wantStart: []string{"a"}, wantUnavailable: []string{"a"}, wantSize: 1,
			wantDrain:  map[string]DrainOrder{"a": drainBy(10*s + 2*h)},
			wantEvents: []string{"w/MaintenanceEnded", "a/DrainStarted"},
		},
		{
			name:    "withdrawn from a node someone else had cordoned: it still counts after its slot ends",
			config:  one,
			nodes:   []Node{mk("w", "x", cordonedBy("")), mk("a", "x", operatorAsks(s))},
			slots:   []Slot{holds("w", opID(0), PhaseDrained, 0)},
			wantEnd: map[string]string{"w": "Released: the request was withdrawn"}, wantDelete: []string{"w"},
			wantUnavailable: []string{"w"}, wantSize: 1,
			wantWaiting: []string{"a: the maintenance pool is full: 1 of 1 unavailable (w cordoned)"},
			wantEvents:  []string{"w/MaintenanceEnded", "a/MaintenanceWaiting"},
		},
		{
			name:    "a replaced request: the slot is ended and deleted; the new request waits this once; the room goes to the next",
			config:  one,
			nodes:   []Node{mk("r", "x", operatorAsks(time.Minute), cordonedBy(opID(0))), mk("a", "x", operatorAsks(2*time.Minute))},
			slots:   []Slot{holds("r", opID(0), PhaseDrained, 0)},
			now:     3 * time.Minute,
			wantEnd: map[string]string{"r": "Released: replaced by a new request (" + opID(time.Minute)}, wantDelete: []string{"r"},
			wantStart: []string{"a"}, wantUnavailable: []string{"a"}, wantSize: 1,
			wantWaiting: []string{"r: the drain of its previous request is being ended first"},
			wantDrain:   map[string]DrainOrder{"a": drainBy(3*time.Minute + 2*h)},
			wantEvents:  []string{"r/MaintenanceEnded", "r/MaintenanceWaiting", "a/DrainStarted"},
		},
		{
			name:     "an ended slot is the record that its request was served: not served again",
			nodes:    []Node{mk("r", "x", operatorAsks(0))},
			slots:    []Slot{ended("r", opID(0))},
			wantSize: 2,
		},
		{
			name:      "an ended slot of a replaced request: the new request starts, taking the Lease again (not deleted)",
			nodes:     []Node{mk("r", "x", operatorAsks(time.Minute))},
			slots:     []Slot{ended("r", opID(0))},
			now:       2 * time.Minute,
			wantStart: []string{"r"}, wantUnavailable: []string{"r"}, wantSize: 2,
			wantDrain:  map[string]DrainOrder{"r": drainBy(2*time.Minute + 2*h)},
			wantEvents: []string{"r/DrainStarted"},
		},
		{
			name:       "an ended slot of a withdrawn request is deleted",
			nodes:      []Node{mk("r", "x")},
			slots:      []Slot{ended("r", opID(0))},
			wantDelete: []string{"r"}, wantSize: 2,
		},
		{
			name: "draining before its deadline: the drain runs until the deadline, when a decision is due",
			nodes: []Node{mk("d", "x", operatorAsks(0, withDeadline("30m")), cordonedBy(opID(0))),
				mk("e", "x", operatorAsks(0), cordonedBy(opID(0)))},
			slots:           []Slot{holds("d", opID(0), PhaseDraining, time.Minute), holds("e", opID(0), PhaseDraining, 0)},
			now:             10 * time.Minute,
			wantUnavailable: []string{"d", "e"}, wantSize: 2,
			wantDrain: map[string]DrainOrder{"d": drainBy(31 * time.Minute), "e": drainBy(2 * h)},
			wantNext:  31 * time.Minute,
		},
		{
			name:      "deadline passed, release: given back DrainBlocked, its room given at once, not served again",
			config:    one,
			nodes:     []Node{mk("d", "x", operatorAsks(0, withDeadline("30m")), cordonedBy(opID(0))), mk("a", "x", operatorAsks(s))},
			slots:     []Slot{holds("d", opID(0), PhaseDraining, time.Minute)},
			now:       31 * time.Minute,
			wantEnd:   map[string]string{"d": "DrainBlocked: did not finish by its deadline 2026-03-02T10:31:00Z (30m0s from its start"},
			wantStart: []string{"a"}, wantUnavailable: []string{"a"}, wantSize: 1,
			wantDrain:  map[string]DrainOrder{"a": drainBy(31*time.Minute + 2*h)},
			wantEvents: []string{"d/DrainDeadline!", "a/DrainStarted"},
		},
		{
			name:            "deadline passed, force: the drain goes on, forced, and still counts",
			config:          one,
			nodes:           []Node{mk("d", "x", operatorAsks(0, withDeadline("30m"), forced), cordonedBy(opID(0))), mk("a", "x", operatorAsks(s))},
			slots:           []Slot{holds("d", opID(0), PhaseDraining, time.Minute)},
			now:             40 * time.Minute,
			wantUnavailable: []string{"d"}, wantSize: 1,
			wantDrain:   map[string]DrainOrder{"d": {Deadline: at(31 * time.Minute), Force: true}},
			wantWaiting: []string{"a: the maintenance pool is full: 1 of 1 unavailable (d draining)"},
			wantEvents:  []string{"a/MaintenanceWaiting"},
		},
		{
			name:    "phase DrainBlocked (a forced drain left only what the request leaves): given back DrainBlocked",
			nodes:   []Node{mk("d", "x", operatorAsks(0, withDeadline("30m"), forced), cordonedBy(opID(0)))},
			slots:   []Slot{holds("d", opID(0), PhaseBlocked, time.Minute)},
			now:     40 * time.Minute,
			wantEnd: map[string]string{"d": "DrainBlocked: could not finish by its deadline 2026-03-02T10:31:00Z"}, wantSize: 2,
			wantEvents: []string{"d/DrainDeadline!"},
		},
		{
			name:      "drained: it holds its slot but no longer counts",
			config:    one,
			nodes:     []Node{mk("d", "x", operatorAsks(0), cordonedBy(opID(0))), mk("a", "x", operatorAsks(s))},
			slots:     []Slot{holds("d", opID(0), PhaseDrained, 0)},
			now:       time.Minute,
			wantStart: []string{"a"}, wantUnavailable: []string{"a"}, wantSize: 1,
			wantDrain:  map[string]DrainOrder{"a": drainBy(time.Minute + 2*h)},
			wantEvents: []string{"a/DrainStarted"},
		},
		{
			name:   "uncordoned by someone else while draining: ended, and not drained again while the request stands",
			config: one,
			nodes:  []Node{mk("u", "x", operatorAsks(0), uncordoned(opID(0))), mk("v", "x", operatorAsks(0), uncordoned(opID(0)))},
			slots:  []Slot{holds("u", opID(0), PhaseDraining, 0), holds("v", opID(0), PhaseDrained, 0)},
			now:    time.Minute,
			wantEnd: map[string]string{
				"u": "Released: uncordoned by someone else at 2026-03-02T10:01:00Z or before, while draining; not drained again while this request stands",
				"v": "Released: uncordoned by someone else at 2026-03-02T10:01:00Z or before, while drained",
			},
			wantSize: 1, wantEvents: []string{"u/MaintenanceEnded", "v/MaintenanceEnded"},
		},
		{
			name:   "a node someone else had cordoned when its slot was taken, uncordoned by them mid-drain: ended too, not cordoned again",
			config: one,
			nodes:  []Node{mk("t", "x", operatorAsks(0)), mk("k", "x", operatorAsks(0), cordonedBy(""))},
			slots: []Slot{
				func() Slot { s := holds("t", opID(0), PhaseDraining, 0); s.CordonTheirs = true; return s }(),
				func() Slot { s := holds("k", opID(0), PhaseDraining, 0); s.CordonTheirs = true; return s }(),
			},
			now: time.Minute,
			wantEnd: map[string]string{
				"t": "Released: uncordoned by someone else at 2026-03-02T10:01:00Z or before, while draining",
			},
			// k is still cordoned by them: its drain goes on.
			wantUnavailable: []string{"k"}, wantSize: 1,
			wantDrain:  map[string]DrainOrder{"k": drainBy(2 * h)},
			wantEvents: []string{"t/MaintenanceEnded"},
		},
		{
			name:            "just started, not yet cordoned: not taken for an uncordon",
			nodes:           []Node{mk("n", "x", operatorAsks(0))},
			slots:           []Slot{holds("n", opID(0), PhaseDraining, 0)},
			now:             s,
			wantUnavailable: []string{"n"}, wantSize: 2,
			wantDrain: map[string]DrainOrder{"n": drainBy(2 * h)},
		},
		{
			name:            "a slot in a phase not known is taken as Draining",
			config:          one,
			nodes:           []Node{mk("n", "x", operatorAsks(0)), mk("a", "x", operatorAsks(s))},
			slots:           []Slot{holds("n", opID(0), "Paused", 0)},
			wantUnavailable: []string{"n"}, wantSize: 1,
			wantDrain:   map[string]DrainOrder{"n": drainBy(2 * h)},
			wantWaiting: []string{"a: the maintenance pool is full"},
			wantEvents:  []string{"a/MaintenanceWaiting"},
		},
		{
			name:    "a slot Lease naming another node as holder: given back and deleted; the node is served anew",
			nodes:   []Node{mk("n", "x", operatorAsks(0))},
			slots:   []Slot{{Node: "n", Holder: "m", RequestID: opID(0), Phase: PhaseDraining, Acquired: t0}},
			wantEnd: map[string]string{"n": `Released: its slot Lease names "m" as the holder`}, wantDelete: []string{"n"},
			wantWaiting: []string{"n: its previous slot is being given back first"}, wantSize: 2,
			wantEvents: []string{"n/MaintenanceEnded", "n/MaintenanceWaiting"},
		},
		{
			name:    "a slot without an acquire time: its deadline cannot be known, given back",
			nodes:   []Node{mk("n", "x", operatorAsks(0, forced))},
			slots:   []Slot{{Node: "n", Holder: "n", RequestID: opID(0), Phase: PhaseDraining}},
			wantEnd: map[string]string{"n": "DrainBlocked: no acquireTime"}, wantSize: 2,
			wantEvents: []string{"n/DrainDeadline!"},
		},
		{
			name: "the zero default deadline falls back to an hour",
			config: func(c *Config) {
				c.Maintenance.DefaultDeadline = 0
			},
			nodes:     []Node{mk("n", "x", operatorAsks(0))},
			wantStart: []string{"n"}, wantUnavailable: []string{"n"}, wantSize: 2,
			wantDrain:  map[string]DrainOrder{"n": drainBy(FallbackDeadline)},
			wantEvents: []string{"n/DrainStarted"},
		},
	})
}

func TestPoolEligibility(t *testing.T) {
	one := func(c *Config) { c.Maintenance.MaxParallel = intstr.FromInt32(1) }
	runPoolCases(t, []poolCase{
		{
			name:      "a sick-node request whose condition has cleared does not start and keeps its place",
			config:    one,
			nodes:     []Node{mk("healed", "x", agentAsks(0, condA)), mk("op", "x", operatorAsks(s))},
			wantStart: []string{"op"}, wantUnavailable: []string{"op"}, wantSize: 1,
			wantWaiting: []string{"healed: its condition A has cleared: a sick-node drain starts only while the node reports it"},
			wantDrain:   map[string]DrainOrder{"op": drainBy(2 * time.Hour)},
			wantEvents:  []string{"healed/MaintenanceWaiting", "op/DrainStarted"},
		},
		{
			name:      "a sick-node request starts while the node reports one of its conditions",
			nodes:     []Node{mk("sick", "x", agentAsks(0, condA, condB), reports(condB))},
			wantStart: []string{"sick"}, wantUnavailable: []string{"sick"}, wantSize: 2,
			wantDrain:  map[string]DrainOrder{"sick": drainBy(2 * time.Hour)},
			wantEvents: []string{"sick/DrainStarted"},
		},
		{
			name:        "several conditions, all cleared",
			nodes:       []Node{mk("healed", "x", agentAsks(0, condA, condB))},
			wantWaiting: []string{"healed: its conditions A, B have cleared: a sick-node drain starts only while the node reports one of them"},
			wantSize:    2, wantEvents: []string{"healed/MaintenanceWaiting"},
		},
		{
			// Zone x: 3 of 4 report A, above 50%: the guard trips for A in
			// x (and fleet-wide: 3 of 5).
			name: "the disruption guard holds sick-node requests whose conditions it holds all; an operator's is not judged",
			config: func(c *Config) {
				c.Maintenance.MaxParallel = intstr.FromInt32(5)
			},
			nodes: []Node{
				mk("held", "x", agentAsks(0, condA), reports(condA)), mk("either", "x", agentAsks(s, condA, condB), reports(condA)),
				mk("op", "x", operatorAsks(2*s), reports(condA)), mk("x4", "x"), mk("y1", "y"),
			},
			wantStart: []string{"either", "op"}, wantUnavailable: []string{"either", "op"}, wantSize: 5,
			wantWaiting: []string{"held: the disruption guard holds A in zone x: the disruption guard for A is tripped"},
			wantDrain:   map[string]DrainOrder{"either": drainBy(2 * time.Hour), "op": drainBy(2 * time.Hour)},
			wantEvents:  []string{"/DisruptionGuardTripped!", "/DisruptionGuardTripped!", "held/MaintenanceWaiting", "either/DrainStarted", "op/DrainStarted"},
		},
		{
			name: "per zone: a full zone is passed over, other zones go on",
			config: func(c *Config) {
				c.Maintenance.MaxParallel = intstr.FromInt32(4)
				one := intstr.FromInt32(1)
				c.Maintenance.MaxParallelPerZone = &one
			},
			nodes: []Node{
				mk("x1", "x", operatorAsks(1*s)), mk("x2", "x", operatorAsks(2*s)), mk("y1", "y", operatorAsks(3*s)),
				mk("z1", "z", cordonedBy("")), mk("z2", "z", operatorAsks(4*s)),
			},
			wantStart: []string{"x1", "y1"}, wantUnavailable: []string{"x1", "y1", "z1"}, wantSize: 4,
			wantWaiting: []string{"x2: zone x's pool is full (1 of 1)", "z2: zone z's pool is full (1 of 1)"},
			wantDrain:   map[string]DrainOrder{"x1": drainBy(2 * time.Hour), "y1": drainBy(2 * time.Hour)},
			wantEvents:  []string{"x1/DrainStarted", "x2/MaintenanceWaiting", "y1/DrainStarted", "z2/MaintenanceWaiting"},
		},
		{
			name: "per zone in percent, rounded up: 10% of a zone of 3 is 1",
			config: func(c *Config) {
				c.Maintenance.MaxParallel = intstr.FromString("100%")
				p := intstr.FromString("10%")
				c.Maintenance.MaxParallelPerZone = &p
			},
			nodes:     []Node{mk("x1", "x", operatorAsks(1*s)), mk("x2", "x", operatorAsks(2*s)), mk("x3", "x")},
			wantStart: []string{"x1"}, wantUnavailable: []string{"x1"}, wantSize: 3,
			wantWaiting: []string{"x2: zone x's pool is full (1 of 1)"},
			wantDrain:   map[string]DrainOrder{"x1": drainBy(2 * time.Hour)},
			wantEvents:  []string{"x1/DrainStarted", "x2/MaintenanceWaiting"},
		},
		{
			name:            "a pool of 0 starts nothing, not even a node already unavailable",
			config:          func(c *Config) { c.Maintenance.MaxParallel = intstr.FromInt32(0) },
			nodes:           []Node{mk("nr", "x", notReady, operatorAsks(0))},
			wantWaiting:     []string{"nr: the maintenance pool's size is 0 (maxParallel 0 of 1 nodes)"},
			wantUnavailable: []string{"nr"},
			wantEvents:      []string{"nr/MaintenanceWaiting"},
		},
	})
}

func TestPoolSize(t *testing.T) {
	tests := []struct {
		name      string
		max       intstr.IntOrString
		perZone   *intstr.IntOrString
		nodes     int
		want      int
		wantEvent bool
	}{
		{name: "a count", max: intstr.FromInt32(3), nodes: 10, want: 3},
		{name: "15% of 10 rounds up to 2", max: intstr.FromString("15%"), nodes: 10, want: 2},
		{name: "10% of 5 rounds up to 1", max: intstr.FromString("10%"), nodes: 5, want: 1},
		{name: "10% of 10 is exactly 1", max: intstr.FromString("10%"), nodes: 10, want: 1},
		{name: "0% is 0", max: intstr.FromString("0%"), nodes: 10, want: 0},
		{name: "a percent of no nodes is 0", max: intstr.FromString("10%"), nodes: 0, want: 0},
		{name: "a string without % is invalid", max: intstr.FromString("10"), nodes: 10, want: 0, wantEvent: true},
		{name: "garbage is invalid", max: intstr.FromString("lots"), nodes: 10, want: 0, wantEvent: true},
		{name: "a negative count is invalid", max: intstr.FromInt32(-1), nodes: 10, want: 0, wantEvent: true},
		{name: "a negative percent is invalid, however few the nodes", max: intstr.FromString("-10%"), nodes: 1, want: 0, wantEvent: true},
		{name: "an invalid per-zone bound", max: intstr.FromInt32(2), perZone: ptrTo(intstr.FromString("x%")), nodes: 10, want: 2, wantEvent: true},
		{name: "a negative per-zone bound", max: intstr.FromInt32(2), perZone: ptrTo(intstr.FromInt32(-2)), nodes: 10, want: 2, wantEvent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := poolConfig()
			cfg.Maintenance.MaxParallel, cfg.Maintenance.MaxParallelPerZone = tc.max, tc.perZone
			var nodes []Node
			for i := range tc.nodes {
				nodes = append(nodes, mk(fmt.Sprintf("n%02d", i), "x"))
			}
			if tc.nodes > 0 {
				operatorAsks(0)(&nodes[0])
			}
			d := Decide(Input{Config: cfg, Now: t0, Nodes: nodes, Memory: testMemory()})
			if got := d.Maintenance.Size; got != tc.want {
				t.Errorf("Size: got %d, want %d", got, tc.want)
			}
			var got []string
			for _, e := range d.Events {
				if e.Reason == EventInvalidPool && e.Warning && e.Node == "" {
					got = append(got, e.Message)
				}
			}
			if (len(got) > 0) != tc.wantEvent {
				t.Errorf("invalid-pool events: got %q, want one: %v", got, tc.wantEvent)
			}
			if started := len(d.Maintenance.Start) > 0; started && (tc.want == 0 || tc.wantEvent) {
				t.Errorf("started %v in an unusable pool", d.Maintenance.Start)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestPoolTenNodes: 10 nodes ask at once in a pool of 2, one of them
// cordoned by someone else and one NotReady. Those two start first (they
// fill the pool already and add nothing); the others start one by one, in
// the order they asked, as each draining node becomes Drained; never more
// than 2 count.
func TestPoolTenNodes(t *testing.T) {
	cfg := poolConfig()
	var nodes []Node
	for i := range 10 {
		n := mk(fmt.Sprintf("n%d", i), "x", operatorAsks(time.Duration(i)*s))
		switch i {
		case 5:
			cordonedBy("")(&n)
		case 7:
			notReady(&n)
		}
		nodes = append(nodes, n)
	}
	slots := map[string]Slot{}
	mem := testMemory()
	var order []string
	now := t0.Add(time.Minute)
	for step := 0; step < 20 && len(order) < 10; step++ {
		var in []Slot
		for _, name := range slices.Sorted(maps.Keys(slots)) {
			in = append(in, slots[name])
		}
		d := Decide(Input{Config: cfg, Now: now, Leader: "me", Nodes: nodes, Slots: in, Memory: mem})
		mem = d.Memory
		if len(d.Maintenance.Unavailable) > 2 {
			t.Fatalf("step %d: %d unavailable %v, more than the pool of 2", step, len(d.Maintenance.Unavailable), d.Maintenance.Unavailable)
		}
		if len(d.Maintenance.End)+len(d.Maintenance.Delete) > 0 {
			t.Fatalf("step %d: end %v, delete %v: nothing should end", step, d.Maintenance.End, d.Maintenance.Delete)
		}
		for _, name := range d.Maintenance.Start {
			order = append(order, name)
			for i := range nodes {
				if nodes[i].Name == name {
					slots[name] = Slot{Node: name, Holder: name, Zone: "x", RequestID: nodes[i].Maintenance.ID(), Phase: PhaseDraining, Acquired: now}
					if !nodes[i].Unschedulable {
						cordonedBy(nodes[i].Maintenance.ID())(&nodes[i])
					}
				}
			}
		}
		// The earliest started draining node finishes.
		for _, name := range order {
			if s := slots[name]; s.Phase == PhaseDraining {
				s.Phase = PhaseDrained
				slots[name] = s
				break
			}
		}
		now = now.Add(time.Minute)
	}
	if want := []string{"n5", "n7", "n0", "n1", "n2", "n3", "n4", "n6", "n8", "n9"}; !slices.Equal(order, want) {
		t.Errorf("started in the order %v, want %v", order, want)
	}
}

// TestMaintenanceWaitingTold: a waiting node is told why once per kind of
// reason: not again while the numbers in it change, again when the reason
// does; and the memory keeps only nodes that wait.
func TestMaintenanceWaitingTold(t *testing.T) {
	cfg := poolConfig()
	cfg.Maintenance.MaxParallel = intstr.FromInt32(1)
	told := func(d Decision) []string {
		var out []string
		for _, e := range d.Events {
			if e.Reason == EventMaintenanceWaiting {
				out = append(out, e.Node)
			}
		}
		return out
	}
	mem := testMemory()
	decide := func(nodes ...Node) Decision {
		d := Decide(Input{Config: cfg, Now: t0, Nodes: nodes, Memory: mem})
		mem = d.Memory
		return d
	}
	full := []Node{mk("nr", "x", notReady), mk("w", "x", operatorAsks(0))}
	if got := told(decide(full...)); !slices.Equal(got, []string{"w"}) {
		t.Errorf("first wait: told %v, want [w]", got)
	}
	fuller := append(slices.Clone(full), mk("nr2", "x", notReady))
	if got := told(decide(fuller...)); got != nil {
		t.Errorf("the same reason, other numbers: told %v, want nothing", got)
	}
	zoned := func(c *Config) {
		c.Maintenance.MaxParallel = intstr.FromInt32(5)
		z := intstr.FromInt32(1)
		c.Maintenance.MaxParallelPerZone = &z
	}
	zoned(&cfg)
	if got := told(decide(fuller...)); !slices.Equal(got, []string{"w"}) {
		t.Errorf("another reason (its zone is full): told %v, want [w]", got)
	}
	if _, ok := mem.Maintenance.Told["w"]; !ok {
		t.Errorf("memory forgot that w was told: %v", mem.Maintenance.Told)
	}
	d := decide(mk("w", "x", operatorAsks(0)))
	if !slices.Equal(d.Maintenance.Start, []string{"w"}) || len(mem.Maintenance.Told) != 0 {
		t.Errorf("started %v, told memory %v: want w started and forgotten", d.Maintenance.Start, mem.Maintenance.Told)
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 111: "111th"} {
		if got := Ordinal(n); got != want {
			t.Errorf("Ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}
