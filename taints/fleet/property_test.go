package fleet

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestDecideProperties simulates fleets: nodes that start and stop asking,
// go NotReady and back, report conditions in storms; agents that apply or
// remove their NoExecute taint on what they last saw of their grant Lease
// (they read it only half the time), before or after the coordinator
// decides, some of which die and never remove it; a coordinator that
// applies every decision, goes away, and comes back as a new leader with
// fresh memory and the last guard it wrote; time in random steps, some
// longer than a grant's TTL. At every step:
//   - the nodes carrying NoExecute are at most the budget, those whose
//     agent died with it on included (a released grant's taint counts for
//     as long as it is on);
//   - no zone starts more than RatePerMinute grants in any minute;
//   - a grant goes only to a waiting node (asking, Ready, no live grant),
//     and is made only while the budget has room;
//   - Decide is deterministic;
//   - the maintenance pool (simulated beside, with a random source of its
//     own so that the NoExecute scenarios stay as they were: operators'
//     and agents' drain requests made, withdrawn and replaced, nodes
//     cordoned and uncordoned by someone else, drains that finish or, past
//     a forced deadline, end blocked) never makes more nodes unavailable
//     than its size: after a decision, the nodes it counts exceed its size
//     only where every one of them was unavailable before it (NotReady,
//     cordoned, or draining); what it counts is what the world shows; a
//     drain starts only for a node that asks, holds no slot, has not been
//     served for that request, and, for a sick-node request, reports one
//     of its conditions that the guard does not hold.
//
// The agents follow two rules the budget depends on: NoExecute only while
// Granted says so, and only under a grant first seen while the current
// request stood (a grant seen before the agent withdrew and asked again is
// void: the coordinator may have released it, for "no longer asks", and
// given the slot away without the agent seeing the release).
func TestDecideProperties(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			newSim(t, seed).run(300)
		})
	}
}

type simNode struct {
	name, zone string
	ready      bool
	// dead: the agent does nothing any more; its taint and request stay.
	dead      bool
	request   *Request
	carries   bool
	reporting []corev1.NodeConditionType
	// seen is the agent's last view of its grant Lease, at seenAt;
	// firstSeen is when it first saw that grant (by its acquire time).
	seen      *coordinationv1.Lease
	seenAt    time.Time
	firstSeen time.Time

	// Maintenance: its request, spec.unschedulable and the cordon
	// annotation (the request ID it was cordoned for, "" for none).
	maint         *Maintenance
	unschedulable bool
	cordonedFor   string
}

type sim struct {
	t      *testing.T
	rng    *rand.Rand
	cfg    Config
	budget int
	now    time.Time
	nodes  []*simNode
	leases map[string]*coordinationv1.Lease // by node
	storm  bool

	// The coordinator.
	leaderUp  bool
	leader    int
	mem       Memory
	written   GuardState
	lastAlive map[string]time.Time // the liveness stamp it last saw
	aliveSeen map[string]time.Time // when it saw it change

	// The harness's own records.
	starts map[string][]time.Time // grant starts by zone
	grants int

	// The maintenance pool: its own random source, the slot Leases by
	// node, the pool's size as the harness works it out, the request IDs
	// each node was served for while its current request stands, the
	// drains ordered forced, and how many drains started.
	mrng     *rand.Rand
	slots    map[string]*Slot
	poolSize int
	served   map[string]map[string]bool
	forced   map[string]bool
	drains   int
}

func newSim(t *testing.T, seed uint64) *sim {
	rng := rand.New(rand.NewPCG(seed, 0x5e1f7a1))
	sm := &sim{
		t: t, rng: rng, now: t0, leases: map[string]*coordinationv1.Lease{},
		leaderUp: true, lastAlive: map[string]time.Time{}, aliveSeen: map[string]time.Time{},
		starts: map[string][]time.Time{},
	}
	zones := 1 + rng.IntN(3)
	n := 4 + rng.IntN(13)
	for i := range n {
		sm.nodes = append(sm.nodes, &simNode{name: fmt.Sprintf("n%02d", i), zone: fmt.Sprintf("z%d", i%zones), ready: true})
	}
	sm.cfg = testConfig()
	sm.cfg.RatePerMinute = 1 + rng.IntN(3)
	sm.cfg.GrantTTL = time.Duration(15+rng.IntN(46)) * time.Second
	sm.cfg.Guard = GuardConfig{Threshold: 50, ResetMargin: 20, CoolDown: 2 * time.Minute, MinNodes: 3, RenewEvery: 30 * time.Second}
	if rng.IntN(2) == 0 {
		sm.budget = 1 + rng.IntN(3)
		sm.cfg.MaxNoExecute = intstr.FromInt(sm.budget)
	} else {
		pct := 10 + rng.IntN(31)
		sm.cfg.MaxNoExecute = intstr.FromString(fmt.Sprintf("%d%%", pct))
		sm.budget = (pct*n + 99) / 100
	}
	sm.mem = Memory{Since: t0}
	sm.newPool(seed, n, zones)
	return sm
}

// newPool sets the maintenance pool up: a count or a percent of the
// nodes, sometimes a bound per zone.
func (sm *sim) newPool(seed uint64, n, zones int) {
	sm.mrng = rand.New(rand.NewPCG(seed, 0xd2a1))
	sm.slots, sm.served, sm.forced = map[string]*Slot{}, map[string]map[string]bool{}, map[string]bool{}
	mc := MaintenanceConfig{DefaultDeadline: time.Duration(1+sm.mrng.IntN(3)) * time.Minute}
	if sm.mrng.IntN(2) == 0 {
		sm.poolSize = 1 + sm.mrng.IntN(3)
		mc.MaxParallel = intstr.FromInt(sm.poolSize)
	} else {
		pct := 10 + sm.mrng.IntN(31)
		mc.MaxParallel = intstr.FromString(fmt.Sprintf("%d%%", pct))
		sm.poolSize = (pct*n + 99) / 100
	}
	if zones > 1 && sm.mrng.IntN(2) == 0 {
		one := intstr.FromInt(1)
		mc.MaxParallelPerZone = &one
	}
	sm.cfg.Maintenance = mc
}

func (sm *sim) run(steps int) {
	for i := range steps {
		sm.advance()
		// Agents and the coordinator run side by side: each agent acts
		// before or after this step's decision.
		first := sm.rng.Uint64()
		sm.agentsAct(first, true)
		sm.world()
		if sm.leaderUp {
			sm.decide()
		}
		sm.agentsAct(first, false)
		sm.agentsSee()
		sm.checkBudget()
		sm.drainsProgress()
		if sm.t.Failed() {
			sm.t.Fatalf("step %d at %v: %s", i, sm.now.Sub(t0), sm.describe())
		}
	}
	if sm.grants == 0 && sm.budget > 0 {
		sm.t.Errorf("no grant in %d steps: the simulation tests nothing", steps)
	}
	if sm.drains == 0 && sm.poolSize > 0 {
		sm.t.Errorf("no drain started in %d steps: the simulation tests nothing of the pool", steps)
	}
}

func (sm *sim) chance(p float64) bool { return sm.rng.Float64() < p }

func (sm *sim) advance() {
	if sm.chance(0.05) {
		sm.now = sm.now.Add(time.Duration(60+sm.rng.IntN(140)) * time.Second)
		return
	}
	sm.now = sm.now.Add(time.Duration(1+sm.rng.IntN(15000)) * time.Millisecond)
}

// agentsAct: each live agent keeps NoExecute on exactly while it asks and
// its last view of its grant says granted (on its own clock, now), under a
// grant it first saw while its current request stood; it refreshes its
// liveness stamp while it holds one. The agents whose bit in
// first is set act when before is true, the others when it is false.
func (sm *sim) agentsAct(first uint64, before bool) {
	for i, n := range sm.nodes {
		if n.dead || (first>>i&1 == 1) != before {
			continue
		}
		granted, _ := Granted(n.seen, n.name, n.seenAt, sm.now)
		n.carries = n.request != nil && granted && !n.firstSeen.Before(n.request.Since)
		if n.carries && (n.request.Alive == nil || sm.now.Sub(*n.request.Alive) >= sm.cfg.GrantTTL/3) {
			alive := sm.now
			n.request.Alive = &alive
		}
	}
}

// world changes: requests, readiness, reports, deaths, the leader.
func (sm *sim) world() {
	if sm.chance(0.03) {
		sm.storm = !sm.storm
	}
	for _, n := range sm.nodes {
		sm.nodeChanges(n)
		sm.maintenanceChanges(n)
	}
	if sm.chance(0.01) {
		sm.nodes[sm.rng.IntN(len(sm.nodes))].dead = true
	}
	switch {
	case sm.leaderUp && sm.chance(0.03):
		sm.leaderUp = false
	case !sm.leaderUp && sm.chance(0.3):
		sm.leaderUp = true
		sm.leader++
		sm.mem = Memory{Since: sm.now, Guard: sm.written}
		sm.lastAlive, sm.aliveSeen = map[string]time.Time{}, map[string]time.Time{}
	}
}

// nodeChanges: a live agent starts or stops asking; the node goes
// NotReady or back; it reports condition A, mostly during a storm.
func (sm *sim) nodeChanges(n *simNode) {
	if !n.dead {
		switch {
		case n.request == nil && sm.chance(0.15):
			n.request = &Request{Since: sm.now, Conditions: sm.conditions()}
		case n.request != nil && sm.chance(0.08):
			n.request = nil
		}
	}
	if sm.chance(0.05) {
		n.ready = !n.ready
	}
	if sm.chance(0.2) {
		n.reporting = nil
		if p := map[bool]float64{false: 0.1, true: 0.8}[sm.storm]; sm.chance(p) {
			n.reporting = []corev1.NodeConditionType{condA}
		}
	}
}

func (sm *sim) conditions() []corev1.NodeConditionType {
	switch sm.rng.IntN(3) {
	case 0:
		return []corev1.NodeConditionType{condA}
	case 1:
		return []corev1.NodeConditionType{condB}
	}
	return []corev1.NodeConditionType{condA, condB}
}

// input is what the coordinator sees: the nodes (their requests through
// the annotation's format) and the grant Leases.
func (sm *sim) input() Input {
	in := Input{Config: sm.cfg, Now: sm.now, Leader: fmt.Sprintf("leader-%d", sm.leader), Memory: sm.mem}
	for _, n := range sm.nodes {
		node := Node{Name: n.name, Zone: n.zone, Ready: n.ready, Reporting: n.reporting, CarriesNoExecute: n.carries}
		if n.request != nil {
			r, err := ParseRequest(n.request.Format())
			if err != nil {
				sm.t.Fatalf("request of %s: %v", n.name, err)
			}
			node.Request = &r
			sm.watchAlive(n.name, r.Alive)
		}
		node.AliveSeen = sm.aliveSeen[n.name]
		node.Unschedulable, node.CordonedFor = n.unschedulable, n.cordonedFor
		if n.maint != nil {
			r, err := ParseMaintenanceRequest(n.maint.Annotation, n.maint.Request.Format())
			if err != nil {
				sm.t.Fatalf("maintenance request of %s: %v", n.name, err)
			}
			node.Maintenance = &Maintenance{Annotation: n.maint.Annotation, Request: r}
		}
		in.Nodes = append(in.Nodes, node)
	}
	for _, name := range slices.Sorted(maps.Keys(sm.slots)) {
		in.Slots = append(in.Slots, *sm.slots[name])
	}
	for _, name := range slices.Sorted(maps.Keys(sm.leases)) {
		l := sm.leases[name]
		g := Grant{Node: name, Zone: l.Annotations[GrantZoneAnnotation], Acquired: l.Spec.AcquireTime.Time, Renewed: l.Spec.RenewTime.Time}
		if l.Spec.HolderIdentity != nil {
			g.Holder = *l.Spec.HolderIdentity
		}
		in.Grants = append(in.Grants, g)
	}
	return in
}

// watchAlive is the coordinator noticing a liveness stamp change.
func (sm *sim) watchAlive(node string, alive *time.Time) {
	if alive == nil {
		return
	}
	if last, ok := sm.lastAlive[node]; ok && !last.Equal(*alive) {
		sm.aliveSeen[node] = sm.now
	}
	sm.lastAlive[node] = *alive
}

func (sm *sim) decide() {
	in := sm.input()
	sm.decideWith(in, Decide(in))
}

func (sm *sim) decideWith(in Input, d Decision) {
	if again := Decide(in); !reflect.DeepEqual(again, d) {
		sm.t.Errorf("Decide is not deterministic:\n%+v\n%+v", d, again)
	}
	sm.checkDecision(in, d)
	for node := range d.Release {
		sm.leases[node].Spec.HolderIdentity = nil
	}
	for _, node := range d.Renew {
		sm.leases[node].Spec.RenewTime = &metav1.MicroTime{Time: sm.now}
	}
	for _, node := range d.Delete {
		delete(sm.leases, node)
	}
	for _, node := range d.Grant {
		zone := sm.node(node).zone
		sm.leases[node] = NewGrant("ns", node, zone, sm.cfg.GrantTTL, sm.now)
		sm.starts[zone] = append(sm.starts[zone], sm.now)
		sm.grants++
		sm.checkRate(zone)
	}
	sm.applyMaintenance(in, d)
	if d.WriteGuard {
		g, err := DecodeGuard(EncodeGuard(d.Guard))
		if err != nil {
			sm.t.Fatalf("guard: %v", err)
		}
		sm.written = g
	}
	sm.mem = d.Memory
}

// checkDecision: grants go to waiting nodes only, while the budget has
// room, in the budget the harness expects.
func (sm *sim) checkDecision(in Input, d Decision) {
	if d.Budget != sm.budget {
		sm.t.Errorf("Budget: got %d, want %d", d.Budget, sm.budget)
	}
	if len(d.Grant) > 0 && d.Held > d.Budget {
		sm.t.Errorf("granted %v with %d held over a budget of %d", d.Grant, d.Held, d.Budget)
	}
	for _, name := range d.Grant {
		var n Node
		for _, x := range in.Nodes {
			if x.Name == name {
				n = x
			}
		}
		if n.Request == nil || !n.Ready {
			sm.t.Errorf("granted %s, which does not wait (request %v, ready %v)", name, n.Request, n.Ready)
		}
		if l := sm.leases[name]; l != nil && d.Release[name] == "" {
			if ok, _ := Granted(l, name, time.Time{}, sm.now); ok {
				sm.t.Errorf("granted %s, which holds a live grant", name)
			}
		}
	}
}

// checkRate: no more than RatePerMinute starts in (now-1m, now].
func (sm *sim) checkRate(zone string) {
	n := 0
	for _, t := range sm.starts[zone] {
		if t.After(sm.now.Add(-time.Minute)) {
			n++
		}
	}
	if n > sm.cfg.RatePerMinute {
		sm.t.Errorf("zone %s: %d grants started in the minute to %v, more than %d", zone, n, sm.now.Sub(t0), sm.cfg.RatePerMinute)
	}
}

// agentsSee: a live agent reads its grant Lease, most of the time.
func (sm *sim) agentsSee() {
	for _, n := range sm.nodes {
		if n.dead || !sm.chance(0.5) {
			continue
		}
		old := n.seen
		n.seen, n.seenAt = nil, sm.now
		if l := sm.leases[n.name]; l != nil {
			n.seen = l.DeepCopy()
			if old == nil || !old.Spec.AcquireTime.Equal(l.Spec.AcquireTime) {
				n.firstSeen = sm.now
			}
		}
	}
}

// checkBudget: the nodes carrying NoExecute are at most the budget, every
// one of them, dead agents' included: each taint in the simulation was put
// on under a grant, and one whose agent died counts for as long as it is
// on (it is not passed on after a TTL).
func (sm *sim) checkBudget() {
	var carrying []string
	for _, n := range sm.nodes {
		if n.carries {
			carrying = append(carrying, n.name)
		}
	}
	if len(carrying) > sm.budget {
		sm.t.Errorf("%d nodes carry NoExecute (%v), over the budget of %d", len(carrying), carrying, sm.budget)
	}
}

func (sm *sim) node(name string) *simNode {
	for _, n := range sm.nodes {
		if n.name == name {
			return n
		}
	}
	sm.t.Fatalf("no node %s", name)
	return nil
}

func (sm *sim) describe() string {
	s := fmt.Sprintf("budget %d, rate %d, ttl %v, leader up %v\n", sm.budget, sm.cfg.RatePerMinute, sm.cfg.GrantTTL, sm.leaderUp)
	for _, n := range sm.nodes {
		s += fmt.Sprintf("  %s %s ready=%v dead=%v asks=%v carries=%v", n.name, n.zone, n.ready, n.dead, n.request != nil, n.carries)
		if l := sm.leases[n.name]; l != nil {
			h := ""
			if l.Spec.HolderIdentity != nil {
				h = *l.Spec.HolderIdentity
			}
			s += fmt.Sprintf(" lease(holder=%q acquired=%v renewed=%v)", h, l.Spec.AcquireTime.Sub(t0), l.Spec.RenewTime.Sub(t0))
		}
		s += "\n"
	}
	return s
}

// maintenanceChanges: an operator or the node's agent asks for a drain,
// withdraws or replaces the request; someone else cordons or uncordons
// the node (kubectl leaves the cordon annotation as it is).
func (sm *sim) maintenanceChanges(n *simNode) {
	r := sm.mrng
	switch {
	case n.maint == nil && r.Float64() < 0.04:
		n.maint = sm.newRequest()
		delete(sm.served, n.name)
	case n.maint != nil && r.Float64() < 0.03:
		n.maint = nil
		delete(sm.served, n.name)
	case n.maint != nil && r.Float64() < 0.01:
		n.maint = sm.newRequest()
		delete(sm.served, n.name)
	}
	switch {
	case !n.unschedulable && r.Float64() < 0.01:
		n.unschedulable = true
	case n.unschedulable && r.Float64() < 0.02:
		n.unschedulable = false
	}
}

func (sm *sim) newRequest() *Maintenance {
	r := sm.mrng
	req := MaintenanceRequest{Version: MaintenanceVersion, Reason: "r", RequestedBy: "sim", RequestedAt: sm.now}
	if r.IntN(2) == 0 {
		req.Conditions = []corev1.NodeConditionType{[]corev1.NodeConditionType{condA, condB}[r.IntN(2)]}
		return &Maintenance{Annotation: AgentRequestAnnotation, Request: req}
	}
	req.Deadline = []string{"", "30s", "2m"}[r.IntN(3)]
	if r.IntN(2) == 0 {
		req.OnDeadline = OnDeadlineForce
	}
	return &Maintenance{Annotation: OperatorRequestAnnotation, Request: req}
}

// drainsProgress: a draining node's drain finishes now and then; a forced
// one past its deadline may end with only what its request leaves.
func (sm *sim) drainsProgress() {
	for _, name := range slices.Sorted(maps.Keys(sm.slots)) {
		sl := sm.slots[name]
		if sl.Holder == "" || sl.Phase != PhaseDraining {
			continue
		}
		switch p := sm.mrng.Float64(); {
		case sm.forced[name] && p < 0.3:
			sl.Phase = PhaseBlocked
		case p < 0.15:
			sl.Phase = PhaseDrained
		}
	}
}

// unavailable are the nodes the pool counts in the world now (the
// harness's own reading of the rules), sorted; inFact those unavailable
// in fact: NotReady, cordoned, or draining.
func (sm *sim) unavailable() (counted []string, inFact map[string]bool) {
	inFact = map[string]bool{}
	for _, n := range sm.nodes {
		sl := sm.slots[n.name]
		held := sl != nil && sl.Holder == n.name
		draining := held && sl.Phase != PhaseDrained
		if !n.ready || n.unschedulable || draining {
			inFact[n.name] = true
		}
		if draining || (!held && (!n.ready || (n.unschedulable && n.cordonedFor == ""))) {
			counted = append(counted, n.name)
		}
	}
	slices.Sort(counted)
	return counted, inFact
}

// applyMaintenance writes the maintenance decision as the coordinator
// would (end: uncordon what it cordoned, clear the holder; delete; start:
// take the slot, cordon a schedulable node recording the request), and
// checks it.
func (sm *sim) applyMaintenance(in Input, d Decision) {
	m := d.Maintenance
	_, before := sm.unavailable()
	sm.checkStarts(in, d)
	for _, name := range slices.Sorted(maps.Keys(m.End)) {
		sl, n := sm.slots[name], sm.node(name)
		if sl == nil || sl.Holder == "" {
			sm.t.Errorf("ended %s, which holds no slot", name)
			continue
		}
		if sm.served[name] == nil {
			sm.served[name] = map[string]bool{}
		}
		sm.served[name][sl.RequestID] = true
		sl.Holder, sl.Phase = "", PhaseEnded
		if n.cordonedFor != "" {
			n.unschedulable, n.cordonedFor = false, ""
		}
	}
	for _, name := range m.Delete {
		delete(sm.slots, name)
	}
	for _, name := range m.Start {
		n := sm.node(name)
		id := n.maint.ID()
		sm.slots[name] = &Slot{Node: name, Holder: name, Zone: n.zone, RequestID: id, Phase: PhaseDraining, Acquired: sm.now}
		if !n.unschedulable {
			n.unschedulable, n.cordonedFor = true, id
		}
		sm.drains++
	}
	for name, o := range m.Drain {
		sm.forced[name] = o.Force
	}
	after, _ := sm.unavailable()
	if m.Size != sm.poolSize {
		sm.t.Errorf("pool size: got %d, want %d", m.Size, sm.poolSize)
	}
	if !slices.Equal(m.Unavailable, after) {
		sm.t.Errorf("the decision counts %v unavailable, the world shows %v", m.Unavailable, after)
	}
	var newly []string
	for _, name := range after {
		if !before[name] {
			newly = append(newly, name)
		}
	}
	if len(newly) > 0 && len(after) > m.Size {
		sm.t.Errorf("made %v unavailable, leaving %d unavailable %v over the pool of %d", newly, len(after), after, m.Size)
	}
}

// checkStarts: a drain starts only for a node that asks, holds no slot,
// was not served for that request, and, asking for its conditions,
// reports one the guard does not hold.
func (sm *sim) checkStarts(in Input, d Decision) {
	for _, name := range d.Maintenance.Start {
		var n Node
		for _, x := range in.Nodes {
			if x.Name == name {
				n = x
			}
		}
		if n.Maintenance == nil {
			sm.t.Errorf("started %s, which does not ask", name)
			continue
		}
		if sl := sm.slots[name]; sl != nil && sl.Holder != "" {
			sm.t.Errorf("started %s, which holds a slot", name)
		}
		if sm.served[name][n.Maintenance.ID()] {
			sm.t.Errorf("started %s again for request %s, which was served", name, n.Maintenance.ID())
		}
		conds := n.Maintenance.Request.Conditions
		if len(conds) == 0 {
			continue
		}
		reported, free := false, false
		for _, c := range conds {
			tripped, _ := d.Guard.Tripped(c, n.Zone)
			reported, free = reported || slices.Contains(n.Reporting, c), free || !tripped
		}
		if !reported || !free {
			sm.t.Errorf("started %s for %v, reporting %v, guard %+v: none reported, or the guard holds them all", name, conds, n.Reporting, d.Guard.Conditions)
		}
	}
}
