package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/taints/fleet"
)

func sec(n float64) time.Time { return base.Add(time.Duration(n * float64(time.Second))) }

func maintCondition(status corev1.ConditionStatus, reason, message string) *corev1.NodeCondition {
	return &corev1.NodeCondition{Type: fleet.MaintenanceCondition, Status: status, Reason: reason, Message: message}
}

func TestMarkMaint(t *testing.T) {
	const refused = "evicted 0 of 1 pods; refused: demo/ledger-x by PodDisruptionBudget demo/ledger (disruptionsAllowed 0)"
	steps := []struct {
		c     *corev1.NodeCondition
		check func(st maintSeen) bool
		what  string
	}{
		{maintCondition(corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, "1st in line of 1"), func(st maintSeen) bool {
			return st.waiting.Equal(sec(1)) && st.waitMsg == "1st in line of 1" && st.draining.IsZero()
		}, "Waiting: waiting and its message"},
		{maintCondition(corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, "1st in line of 2"), func(st maintSeen) bool {
			return st.waiting.Equal(sec(1)) && st.waitMsg == "1st in line of 1"
		}, "still Waiting: the first moment kept"},
		{maintCondition(corev1.ConditionTrue, fleet.ReasonDraining, "cordoned; evicting its pods"), func(st maintSeen) bool {
			return st.draining.Equal(sec(3)) && st.blocked.IsZero() && st.refusal == ""
		}, "Draining: got the slot"},
		{maintCondition(corev1.ConditionTrue, fleet.ReasonDrainBlocked, refused), func(st maintSeen) bool {
			return st.draining.Equal(sec(3)) && st.blocked.Equal(sec(4)) && st.blockMsg == refused && st.refusal == refused
		}, "DrainBlocked True: blocked now, the refusal kept"},
		{maintCondition(corev1.ConditionFalse, fleet.ReasonDrainBlocked, "the drain did not finish by its deadline"), func(st maintSeen) bool {
			return st.ended.Equal(sec(5)) && st.endReason == fleet.ReasonDrainBlocked && st.drained.IsZero() && st.refusal == refused
		}, "DrainBlocked False: given back"},
		{maintCondition(corev1.ConditionFalse, fleet.ReasonReleased, "the request was withdrawn"), func(st maintSeen) bool {
			return st.ended.Equal(sec(5)) && st.endReason == fleet.ReasonDrainBlocked
		}, "Released after: the first end kept"},
	}
	st := maintSeen{asked: base}
	for i, s := range steps {
		markMaint(&st, s.c, sec(float64(i+1)))
		if !s.check(st) {
			t.Errorf("step %d (%s): got %+v", i, s.what, st)
		}
	}

	drained := maintSeen{asked: base}
	markMaint(&drained, maintCondition(corev1.ConditionTrue, fleet.ReasonDrained, "evicted 4 of 4 pods"), sec(2))
	if !drained.draining.Equal(sec(2)) || !drained.drained.Equal(sec(2)) {
		t.Errorf("Drained at once: got draining %v, drained %v, want both %v", drained.draining, drained.drained, sec(2))
	}
	unasked := maintSeen{}
	markMaint(&unasked, maintCondition(corev1.ConditionFalse, fleet.ReasonReleased, "left from before"), sec(1))
	if !unasked.ended.IsZero() {
		t.Errorf("a False condition before any request: got ended %v, want none", unasked.ended)
	}
}

func TestCordonOf(t *testing.T) {
	node := func(unschedulable bool, annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
	}
	ours := map[string]string{fleet.CordonAnnotation: "agent/2026-03-01T12:00:00Z"}
	tests := []struct {
		name string
		n    *corev1.Node
		was  string
		want string
		line string
	}{
		{"schedulable", node(false, nil), "", "", "schedulable again (uncordoned by someone else)"},
		{"cordoned by us", node(true, ours), "", "ours", "cordoned by selftaint: Ready,SchedulingDisabled"},
		{"cordoned by someone else", node(true, nil), "", "theirs", "cordoned by someone else"},
		{"uncordoned by us", node(false, nil), "ours", "", "uncordoned by selftaint"},
		{"stale record on a schedulable node", node(false, ours), "ours", "", "uncordoned by selftaint"},
	}
	for _, tt := range tests {
		got := cordonOf(tt.n)
		if got != tt.want {
			t.Errorf("%s: cordonOf = %q, want %q", tt.name, got, tt.want)
		}
		if line := cordonLine(tt.n, got, tt.was); !strings.HasPrefix(line, tt.line) {
			t.Errorf("%s: cordonLine = %q, want it to start %q", tt.name, line, tt.line)
		}
	}
}

func TestRequestOf(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	agent := fleet.MaintenanceRequest{Reason: "condition SelftaintGPUFailure is True", RequestedBy: "selftaint-agent/vnode-4", RequestedAt: at,
		Deadline: "5m", Conditions: []corev1.NodeConditionType{gpuCondition}}.Format()
	operator := fleet.MaintenanceRequest{Reason: "kernel upgrade", RequestedBy: "alice", RequestedAt: at, Deadline: "20s"}.Format()
	node := func(annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
	}
	tests := []struct {
		name    string
		n       *corev1.Node
		wantKey string
		line    string
		by      string
	}{
		{"none", node(nil), "", "no maintenance request any more", ""},
		{"the agent's", node(map[string]string{fleet.AgentRequestAnnotation: agent}), fleet.AgentRequestAnnotation + "=" + agent,
			`asks for a drain: its agent wrote selftaint.io/drain-request (for SelftaintGPUFailure; reason "condition SelftaintGPUFailure is True"; deadline 5m)`, "its agent (SelftaintGPUFailure)"},
		{"the operator's wins", node(map[string]string{fleet.AgentRequestAnnotation: agent, fleet.OperatorRequestAnnotation: operator}), fleet.OperatorRequestAnnotation + "=" + operator,
			`maintenance requested by alice: maintenance.selftaint.io/request (reason "kernel upgrade"; deadline 20s, then release)`, "an operator (kernel upgrade)"},
		{"unreadable", node(map[string]string{fleet.OperatorRequestAnnotation: "{"}), "", "carries a maintenance request the coordinator cannot read", ""},
	}
	for _, tt := range tests {
		key, line := requestOf(tt.n)
		if tt.wantKey != "" && key != tt.wantKey {
			t.Errorf("%s: key %q, want %q", tt.name, key, tt.wantKey)
		}
		if tt.name == "unreadable" && key == "" {
			t.Errorf("%s: key empty: an unreadable request must not read as none", tt.name)
		}
		if !strings.HasPrefix(line, tt.line) {
			t.Errorf("%s: line %q, want it to start %q", tt.name, line, tt.line)
		}
		if by := requesterOf(tt.n); by != tt.by {
			t.Errorf("%s: requesterOf = %q, want %q", tt.name, by, tt.by)
		}
	}
}

func TestDrainingSlots(t *testing.T) {
	slot := func(holder, phase string) coordinationv1.Lease {
		l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{fleet.SlotPhaseAnnotation: phase}}}
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		return l
	}
	leases := []coordinationv1.Lease{
		slot("vnode-4", fleet.PhaseDrained),
		slot("vnode-6", fleet.PhaseBlocked),
		slot("vnode-5", fleet.PhaseDraining),
		slot("", fleet.PhaseEnded),
	}
	if got := drainingSlots(leases); got != 2 {
		t.Errorf("got %d, want 2 (Draining and DrainBlocked held; Drained and given back do not count)", got)
	}
}

func readyPod(uid string, ready, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: uid}}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: base}
	}
	return p
}

func TestAvailability(t *testing.T) {
	a := &availability{replicas: 2, pods: map[types.UID]*corev1.Pod{}}
	steps := []struct {
		ev                watch.Event
		wantCur, wantMost int
		what              string
	}{
		{watch.Event{Type: watch.Added, Object: readyPod("db-0", true, false)}, 1, 0, "coming up: not counted before all were available"},
		{watch.Event{Type: watch.Added, Object: readyPod("db-1", false, false)}, 1, 0, "db-1 not Ready yet"},
		{watch.Event{Type: watch.Modified, Object: readyPod("db-1", true, false)}, 0, 0, "all available: counting starts"},
		{watch.Event{Type: watch.Modified, Object: readyPod("db-0", true, true)}, 1, 1, "db-0 evicted: terminating"},
		{watch.Event{Type: watch.Deleted, Object: readyPod("db-0", true, true)}, 1, 1, "db-0 gone"},
		{watch.Event{Type: watch.Added, Object: readyPod("db-0b", false, false)}, 1, 1, "db-0 made again, not Ready"},
		{watch.Event{Type: watch.Modified, Object: readyPod("db-1", false, false)}, 2, 2, "db-1 not Ready too: two down"},
		{watch.Event{Type: watch.Modified, Object: readyPod("db-0b", true, false)}, 1, 2, "db-0 Ready: the most stays"},
	}
	for i, s := range steps {
		a.take(s.ev)
		if cur, most := a.now(); cur != s.wantCur || most != s.wantMost {
			t.Errorf("step %d (%s): unavailable %d, most %d; want %d, %d", i, s.what, cur, most, s.wantCur, s.wantMost)
		}
	}
	a.take(watch.Event{Type: watch.Error, Object: &metav1.Status{Message: "too old"}})
	if a.failed() == nil {
		t.Errorf("a watch error: failed() = nil, want the error")
	}
}

// claimView is a drain part that went as the demo means it to, times in
// seconds from its first fault.
func claimView() (maintSeen, maintSeen, maintSeen, map[types.UID]*partPod) {
	gpu := fault{node: "vnode-4", lasts: 30 * time.Second}
	sick := maintSeen{fault: &gpu, injected: sec(0), asked: sec(0.3), draining: sec(0.3), cordoned: sec(0.3), drained: sec(7), ended: sec(30), endReason: fleet.ReasonReleased, uncordoned: sec(30)}
	second := maintSeen{asked: sec(8), waiting: sec(8.1), waitMsg: "1st in line of 1 for a maintenance slot (request agent/x)", draining: sec(28), drained: sec(29)}
	blocked := maintSeen{asked: sec(7.5), draining: sec(7.6), refusal: "refused: demo/ledger-x by PodDisruptionBudget demo/ledger", ended: sec(27.6), endReason: fleet.ReasonDrainBlocked, uncordoned: sec(27.6),
		endMsg: "the drain did not finish by its deadline: refused: demo/ledger-x by PodDisruptionBudget demo/ledger"}
	pods := map[types.UID]*partPod{
		"1": {name: "web-a", owner: "Deployment web", node: "vnode-4", original: true, evicted: sec(0.5)},
		"2": {name: "db-0", owner: "StatefulSet db", node: "vnode-4", original: true, evicted: sec(0.5)},
		"3": {name: "web-b", owner: "Deployment web", node: "vnode-2", seen: sec(0.6)},
		"4": {name: "db-0", owner: "StatefulSet db", node: "vnode-3", seen: sec(1)},
		"6": {name: "db-0", owner: "StatefulSet db", node: "vnode-1", seen: sec(29)}, // moved by the second node's drain
		"5": {name: "ledger-x", owner: "Deployment ledger", node: "vnode-6", original: true},
	}
	return sick, second, blocked, pods
}

func TestMaintClaims(t *testing.T) {
	sick, second, blocked, pods := claimView()
	db := workload{kind: "StatefulSet", name: "db", replicas: 2, maxUnavailable: 1}
	out := []string{"vnode-6  DrainBlocked  refused: demo/ledger-x by PodDisruptionBudget demo/ledger",
		"selftaint drain: 1 of 1 nodes did not drain: vnode-6: DrainBlocked: refused: demo/ledger-x by PodDisruptionBudget demo/ledger"}
	good := []struct {
		name, got, want string
	}{
		{"drained", drainedClaim("vnode-4", sick, pods, sec(28)), "evicted its 2 pods through the Eviction API: Drained 6.7s after it asked. Their controllers made them again and kube-scheduler put them on vnode-2, vnode-3."},
		{"pdb", pdbClaim(db, 1, nil), "StatefulSet db never had more than 1 of its 2 pods unavailable"},
		{"pool", poolClaim(1, "vnode-5", second, "vnode-6", blocked), `vnode-5 waited 19.9s ("1st in line of 1 for a maintenance slot") while vnode-6 held the slot, and got it 0.4s after`},
		{"blocked", blockedClaim("vnode-6", blocked, "ledger", 20*time.Second, true, 1, out), "refused by PodDisruptionBudget ledger; 20.0s after it started (deadline 20s) it was given back DrainBlocked and uncordoned, and selftaint drain --wait exited 1"},
		{"healthy", healthyClaim("vnode-4", sick), "its agent withdrew the request (endWhenHealthy)"},
	}
	for _, tt := range good {
		if !strings.Contains(tt.got, tt.want) {
			t.Errorf("%s: got %q, want it to contain %q", tt.name, tt.got, tt.want)
		}
	}

	notEvicted := map[types.UID]*partPod{"1": {name: "web-a", owner: "Deployment web", node: "vnode-4", original: true}}
	notRemade := map[types.UID]*partPod{"1": {name: "web-a", owner: "Deployment web", node: "vnode-4", original: true, evicted: sec(1)}}
	neverCordoned := sick
	neverCordoned.cordoned = time.Time{}
	tooSoon := second
	tooSoon.draining = sec(20)
	noWait := second
	noWait.waiting = time.Time{}
	released := blocked
	released.endReason = fleet.ReasonReleased
	noPDB := blocked
	noPDB.refusal = ""
	forgot := blocked
	forgot.endMsg = "the drain did not finish by its deadline: given back"
	stillCordoned := sick
	stillCordoned.uncordoned = time.Time{}
	bad := []struct {
		name, got, want string
	}{
		{"pod left on the drained node", drainedClaim("vnode-4", sick, notEvicted, time.Time{}), "NOT SHOWN: vnode-4 was Drained, yet its pod web-a was never evicted"},
		{"pod not made again", drainedClaim("vnode-4", sick, notRemade, time.Time{}), "NOT SHOWN: 1 pod(s) of Deployment web"},
		{"never cordoned by us", drainedClaim("vnode-4", neverCordoned, pods, sec(28)), "NOT SHOWN: vnode-4 was drained but never seen cordoned"},
		{"two unavailable", pdbClaim(db, 2, nil), "PDB VIOLATED: StatefulSet db had 2 of 2 pods unavailable"},
		{"never moved", pdbClaim(db, 0, nil), "NOT SHOWN: no pod of StatefulSet db"},
		{"two slots", poolClaim(2, "vnode-5", second, "vnode-6", blocked), "POOL EXCEEDED"},
		{"never waited", poolClaim(1, "vnode-5", noWait, "vnode-6", blocked), "NOT SHOWN: vnode-5 was never seen Waiting"},
		{"slot before it was given back", poolClaim(1, "vnode-5", tooSoon, "vnode-6", blocked), "NOT SHOWN: vnode-5 got the slot before vnode-6 gave it back"},
		{"PDB never named", blockedClaim("vnode-6", noPDB, "ledger", 20*time.Second, true, 1, out), "NOT SHOWN: vnode-6's condition never named PodDisruptionBudget ledger"},
		{"ended otherwise", blockedClaim("vnode-6", released, "ledger", 20*time.Second, true, 1, out), "NOT SHOWN: vnode-6's drain did not end DrainBlocked"},
		{"drain --wait succeeded", blockedClaim("vnode-6", blocked, "ledger", 20*time.Second, true, 0, out), "NOT SHOWN: selftaint drain --wait vnode-6 did not fail"},
		{"given back without naming it", blockedClaim("vnode-6", forgot, "ledger", 20*time.Second, true, 1, out), "NOT SHOWN: vnode-6 was given back DrainBlocked, but its condition then no longer named"},
		{"drain --wait's error did not name it", blockedClaim("vnode-6", blocked, "ledger", 20*time.Second, true, 1, []string{out[0], "selftaint drain: 1 of 1 nodes did not drain: vnode-6: DrainBlocked: given back"}),
			"NOT SHOWN: selftaint drain --wait vnode-6 exited 1, but its error did not name PodDisruptionBudget ledger"},
		{"not given back", healthyClaim("vnode-4", stillCordoned), "NOT SHOWN: vnode-4's maintenance did not end Released"},
	}
	for _, tt := range bad {
		if !strings.Contains(tt.got, tt.want) {
			t.Errorf("%s: got %q, want it to contain %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestMaintScript(t *testing.T) {
	d := &demo{cast: newCast(options{faultFor: 45 * time.Second, tolerateFor: 20 * time.Second})}
	m := d.cast.maint
	cues := d.maintScript()
	v := &view{maint: &maintView{nodes: map[string]*maintSeen{m.sick.node: {fault: &m.sick}, m.second.node: {fault: &m.second}, m.blocked: {}}}}
	ready := func() []bool {
		out := make([]bool, len(cues))
		for i, c := range cues {
			out[i] = c.ready(v)
		}
		return out
	}
	nodes := v.maint.nodes
	steps := []struct {
		name string
		do   func()
		want []bool
	}{
		{"start: act 3 at once", func() {}, []bool{true, false, false, false, true, true, false}},
		{"the sick node drains", func() { nodes["vnode-4"].draining = base }, []bool{true, false, false, false, true, true, false}},
		{"Drained: the operator's drain", func() { nodes["vnode-4"].drained = base }, []bool{true, true, false, false, true, true, false}},
		{"it holds the slot: the second fault", func() { nodes["vnode-6"].draining = base }, []bool{true, true, true, false, true, true, false}},
		{"the second waits: the nodes, explain, drain --wait", func() { nodes["vnode-5"].waiting = base }, []bool{true, true, true, true, true, true, false}},
		{"given back: drain --done", func() { nodes["vnode-6"].ended = base }, []bool{true, true, true, true, true, true, true}},
	}
	for _, s := range steps {
		s.do()
		if got := ready(); !slices.Equal(got, s.want) {
			t.Errorf("%s: cues ready %v, want %v", s.name, got, s.want)
		}
	}
	if f := cues[0].fault; f == nil || f.node != "vnode-4" || f.target != gpuFault {
		t.Errorf("act 3 injects %+v, want a GPU fault on vnode-4", f)
	}
	if got, want := cues[1].args, []string{"drain", "vnode-6", "--reason=kernel upgrade", "--deadline=20s"}; !slices.Equal(got, want) {
		t.Errorf("act 4 runs %q, want %q", got, want)
	}
	if f := cues[2].fault; f == nil || f.node != "vnode-5" || f.lasts <= m.deadline+sickFault {
		t.Errorf("the second fault is %+v: want vnode-5's, lasting past the blocked drain's deadline and the sick node's fault", f)
	}
	if cues[4].explain != "vnode-5" || !slices.Equal(cues[5].follow, []string{"drain", "--wait", "vnode-6"}) || !slices.Equal(cues[6].args, []string{"drain", "--done", "vnode-6"}) {
		t.Errorf("cues 4-6: explain %q, follow %q, args %q", cues[4].explain, cues[5].follow, cues[6].args)
	}
	over := maintOver(m)
	if over(v) {
		t.Errorf("over before the second node drained and the sick one was given back")
	}
	nodes["vnode-5"].drained, nodes["vnode-4"].ended = base, base
	if !over(v) {
		t.Errorf("not over once all three are done")
	}
}
