package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/selftaint/selftaint/agent/coordinator"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// TestMaintenance runs the coordinator's maintenance pool on a real etcd
// and kube-apiserver with drains the test controls (fakeDrains): the
// slots, cordons, conditions and Events are real; the evictions are
// agent/drain's and are tested there and end to end in cmd/selftaint.
func TestMaintenance(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver")
	cp := testcp.Start(t, testcp.Options{})
	showClientGoLogs(t)
	for _, tt := range []struct {
		name string
		test func(*testing.T, *env)
	}{
		{"PoolInOrderCordonOnlyOurs", testPoolInOrderCordonOnlyOurs},
		{"UncordonedBySomeoneElse", testUncordonedBySomeoneElse},
		{"WithdrawnWhileWaiting", testWithdrawnWhileWaiting},
		{"DeadlineReleases", testDeadlineReleases},
		{"MalformedRequest", testMalformedRequest},
		{"RequestTurnsUnreadable", testRequestTurnsUnreadable},
		{"ConditionRestored", testConditionRestored},
		{"TheirCordonLifted", testTheirCordonLifted},
		{"LeaderChangeResumes", testMaintenanceLeaderChange},
		{"CordonedJustBeforeAStart", testCordonedJustBeforeAStart},
		{"StartDecidedOnce", testStartDecidedOnce},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.test(t, newEnv(t, cp))
		})
	}
}

// fakeDrains are drains the test finishes: a node's drain reports
// Draining with its pass count until the test marks it drained (or
// blocked); it records each pass's force flag and the progress it was
// resumed from.
type fakeDrains struct {
	mu      sync.Mutex
	drained map[string]bool
	blocked map[string]bool
	passes  map[string]int
	forced  map[string]bool
	resumed map[string][]int
}

func newFakeDrains() *fakeDrains {
	return &fakeDrains{drained: map[string]bool{}, blocked: map[string]bool{}, passes: map[string]int{}, forced: map[string]bool{}, resumed: map[string][]int{}}
}

func (f *fakeDrains) new(node string, _ fleet.MaintenanceRequest) (coordinator.Drainer, error) {
	return fakeDrainer{f: f, node: node}, nil
}

func (f *fakeDrains) set(node string, drained, blocked bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drained[node], f.blocked[node] = drained, blocked
}

func (f *fakeDrains) stats(node string) (passes int, forced bool, resumed []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.passes[node], f.forced[node], slices.Clone(f.resumed[node])
}

type fakeDrainer struct {
	f    *fakeDrains
	node string
}

func (d fakeDrainer) Pass(_ context.Context, force bool, before int) (coordinator.DrainPass, error) {
	f := d.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.passes[d.node] == 0 || len(f.resumed[d.node]) == 0 {
		f.resumed[d.node] = append(f.resumed[d.node], before)
	}
	f.passes[d.node]++
	f.forced[d.node] = f.forced[d.node] || force
	p := coordinator.DrainPass{Progress: fleet.Progress{Evicted: before + 1, Total: before + 3}, Results: map[string]int{"evicted": 1}, Summary: "evicting", Next: time.Now().Add(200 * time.Millisecond)}
	switch {
	case f.drained[d.node]:
		p.Progress.Total = p.Progress.Evicted
		p.Drained, p.Summary = true, fmt.Sprintf("evicted %d pods", p.Progress.Evicted)
	case f.blocked[d.node]:
		p.Results = nil
		p.Progress.Evicted = before
		p.Blocked, p.Summary = true, "refused: ns/web-0 by PodDisruptionBudget ns/web (disruptionsAllowed 0)"
	}
	return p, nil
}

// maintenanceConfig is config with a pool of size.
func maintenanceConfig(size int) fleet.Config {
	cfg := config(intstr.FromInt32(1))
	cfg.Maintenance = fleet.MaintenanceConfig{MaxParallel: intstr.FromInt32(int32(size)), DefaultDeadline: time.Hour}
	return cfg
}

// requestDrain puts an operator's maintenance request on node, made at.
func (e *env) requestDrain(node string, at time.Time, mutate func(*fleet.MaintenanceRequest)) {
	e.t.Helper()
	r := fleet.MaintenanceRequest{Version: fleet.MaintenanceVersion, Reason: "test", RequestedBy: "tester", RequestedAt: at}
	if mutate != nil {
		mutate(&r)
	}
	e.setAnnotation(node, fleet.OperatorRequestAnnotation, r.Format())
}

// setAnnotation sets (or, with value "", removes) an annotation on node.
func (e *env) setAnnotation(node, key, value string) {
	e.t.Helper()
	v := "null"
	if value != "" {
		v = fmt.Sprintf("%q", value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	if _, err := e.client.CoreV1().Nodes().Patch(e.t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("annotating node %s: %v", node, err)
	}
}

// setUnschedulable cordons or uncordons node as kubectl does.
func (e *env) setUnschedulable(node string, on bool) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := e.client.CoreV1().Nodes().Patch(e.t.Context(), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("cordoning node %s: %v", node, err)
	}
}

// maintenanceOf reads node's SelftaintMaintenance condition (nil: none)
// and the node.
func (e *env) maintenanceOf(node string) (*corev1.NodeCondition, *corev1.Node, error) {
	n, err := e.client.CoreV1().Nodes().Get(e.t.Context(), node, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	return taints.FindCondition(n, fleet.MaintenanceCondition), n, nil
}

// waitMaintenance waits until node's condition has status and reason,
// and returns it with the node.
func (e *env) waitMaintenance(node string, status corev1.ConditionStatus, reason string) (*corev1.NodeCondition, *corev1.Node) {
	e.t.Helper()
	var c *corev1.NodeCondition
	var n *corev1.Node
	err := testcp.Poll(e.t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		var err error
		c, n, err = e.maintenanceOf(node)
		return err == nil && c != nil && c.Status == status && c.Reason == reason, err
	})
	if err != nil {
		e.t.Fatalf("waiting for %s=%s reason %s on node %s: %v; last %+v", fleet.MaintenanceCondition, status, reason, node, err, c)
	}
	return c, n
}

// slot reads node's slot Lease (nil: none).
func (e *env) slot(node string) *coordinationv1.Lease {
	e.t.Helper()
	l, err := e.client.CoordinationV1().Leases(e.ns).Get(e.t.Context(), fleet.SlotName(node), metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

// watchPool fails the test if ever more than size of nodes count against
// the pool in one Node version seen by a watch: holding a slot in phase
// Draining, or NotReady or cordoned by someone else without one.
func (e *env) watchPool(size int, nodes []string) {
	e.t.Helper()
	w, err := e.client.CoreV1().Nodes().Watch(e.t.Context(), metav1.ListOptions{LabelSelector: groupLabel + "=" + e.group})
	if err != nil {
		e.t.Fatalf("watching nodes: %v", err)
	}
	e.t.Cleanup(w.Stop)
	go func() {
		last := map[string]*corev1.Node{}
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			last[n.Name] = n
			var counted []string
			for _, name := range nodes {
				m := last[name]
				if m == nil {
					continue
				}
				c := taints.FindCondition(m, fleet.MaintenanceCondition)
				draining := c != nil && c.Status == corev1.ConditionTrue && (c.Reason == fleet.ReasonDraining || c.Reason == fleet.ReasonDrainBlocked)
				notReady := !isReadyNode(m)
				theirs := m.Spec.Unschedulable && m.Annotations[fleet.CordonAnnotation] == "" && c == nil
				if draining || notReady || theirs {
					counted = append(counted, name)
				}
			}
			if len(counted) > size {
				e.t.Errorf("a Node version shows %d nodes unavailable through maintenance, more than the pool's %d: %v", len(counted), size, counted)
			}
		}
	}()
}

func isReadyNode(n *corev1.Node) bool {
	c := taints.FindCondition(n, corev1.NodeReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// testPoolInOrderCordonOnlyOurs: three requests under a pool of one are
// served in the order they came; each node is cordoned with selftaint's
// record and shows Draining, then Drained, which frees the pool for the
// next; the waiting ones say their place in line. A node someone else had
// cordoned stays cordoned when its request is withdrawn; ours are
// uncordoned, their slots deleted, their condition Released.
func testPoolInOrderCordonOnlyOurs(t *testing.T, e *env) {
	t0 := e.clock.Now()
	a, b, c := e.name("a"), e.name("b"), e.name("c")
	for _, n := range []string{a, b, c} {
		e.node(n, "z", time.Time{})
	}
	e.setUnschedulable(b, true) // someone else's cordon
	drains := newFakeDrains()
	opts := e.options("solo", maintenanceConfig(1))
	opts.NewDrainer = drains.new
	e.requestDrain(c, t0.Add(-3*time.Minute), nil)
	e.requestDrain(a, t0.Add(-2*time.Minute), nil)
	e.requestDrain(b, t0.Add(-time.Minute), nil)
	e.start(opts, false)

	// b is already unavailable (cordoned by someone else): it takes a
	// slot without waiting its turn, adding nothing, and fills the pool of
	// one; c, who asked first, and a wait in the order they asked.
	_, nb := e.waitMaintenance(b, corev1.ConditionTrue, fleet.ReasonDraining)
	if got := nb.Annotations[fleet.CordonAnnotation]; got != "" {
		t.Errorf("node %s, cordoned by someone else, got selftaint's cordon record %q", b, got)
	}
	cond, _ := e.waitMaintenance(c, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting)
	if !strings.HasPrefix(cond.Message, "1st in line of 2") {
		t.Errorf("waiting node %s: message %q, want it to start with its place, 1st in line of 2", c, cond.Message)
	}
	cond, _ = e.waitMaintenance(a, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting)
	if !strings.HasPrefix(cond.Message, "2nd in line of 2") {
		t.Errorf("waiting node %s: message %q, want it to start with its place, 2nd in line of 2", a, cond.Message)
	}
	drains.set(b, true, false)
	e.waitMaintenance(b, corev1.ConditionTrue, fleet.ReasonDrained)
	_, nc := e.waitMaintenance(c, corev1.ConditionTrue, fleet.ReasonDraining)
	if !nc.Spec.Unschedulable || nc.Annotations[fleet.CordonAnnotation] == "" {
		t.Errorf("node %s draining: unschedulable %t, cordon record %q; want cordoned with selftaint's record", c, nc.Spec.Unschedulable, nc.Annotations[fleet.CordonAnnotation])
	}
	// a's condition moves up a place in the decision after c's start:
	// wait for it (it still says 2nd of 2 when c's Draining is read).
	if err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		var err error
		cond, _, err = e.maintenanceOf(a)
		return err == nil && cond != nil && cond.Reason == fleet.ReasonMaintenanceWaiting && strings.HasPrefix(cond.Message, "1st in line of 1"), err
	}); err != nil {
		t.Errorf("waiting node %s: %v; message %+v, want Waiting, 1st in line of 1 once %s started", a, err, cond, c)
	}
	drains.set(c, true, false)
	e.waitMaintenance(c, corev1.ConditionTrue, fleet.ReasonDrained)
	_, na := e.waitMaintenance(a, corev1.ConditionTrue, fleet.ReasonDraining)
	if !na.Spec.Unschedulable {
		t.Errorf("node %s draining but not cordoned", a)
	}

	// Withdrawn: ours uncordoned, someone else's cordon kept.
	for _, n := range []string{a, b, c} {
		e.setAnnotation(n, fleet.OperatorRequestAnnotation, "")
	}
	for _, n := range []string{a, b, c} {
		_, node := e.waitMaintenance(n, corev1.ConditionFalse, fleet.ReasonReleased)
		if want := n == b; node.Spec.Unschedulable != want {
			t.Errorf("node %s after its request was withdrawn: unschedulable %t, want %t", n, node.Spec.Unschedulable, want)
		}
		if _, ok := node.Annotations[fleet.CordonAnnotation]; ok {
			t.Errorf("node %s after its request was withdrawn still has the cordon record", n)
		}
	}
	if err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		return e.slot(a) == nil && e.slot(b) == nil && e.slot(c) == nil, nil
	}); err != nil {
		t.Errorf("slot Leases still there after every request was withdrawn")
	}
	e.waitEvent("default", c, coordinator.EventCordoned)
	e.waitEvent("default", c, coordinator.EventUncordoned)
}

// testUncordonedBySomeoneElse: an admin uncordons a node mid-drain: the
// drain stops, the condition says Released, and the node is not drained
// again while the same request stands; a new request drains it.
func testUncordonedBySomeoneElse(t *testing.T, e *env) {
	n := e.name("n")
	e.node(n, "z", time.Time{})
	drains := newFakeDrains()
	opts := e.options("solo", maintenanceConfig(1))
	opts.NewDrainer = drains.new
	e.requestDrain(n, e.clock.Now(), nil)
	e.start(opts, false)
	e.waitMaintenance(n, corev1.ConditionTrue, fleet.ReasonDraining)
	e.setUnschedulable(n, false)
	cond, node := e.waitMaintenance(n, corev1.ConditionFalse, fleet.ReasonReleased)
	if !strings.Contains(cond.Message, "uncordoned") {
		t.Errorf("released message %q does not say it was uncordoned by someone else", cond.Message)
	}
	passes, _, _ := drains.stats(n)
	time.Sleep(time.Second) // a drain that went on would pass again by now
	if p, _, _ := drains.stats(n); p != passes {
		t.Errorf("the drain passed %d more times after it was released", p-passes)
	}
	if node.Spec.Unschedulable {
		t.Errorf("node %s cordoned again after someone uncordoned it", n)
	}
	if c, node, _ := e.maintenanceOf(n); c.Reason != fleet.ReasonReleased || node.Spec.Unschedulable {
		t.Errorf("node %s drained again under the same request: condition %s, unschedulable %t", n, c.Reason, node.Spec.Unschedulable)
	}
	e.requestDrain(n, e.clock.Now().Add(time.Second), nil)
	e.waitMaintenance(n, corev1.ConditionTrue, fleet.ReasonDraining)
}

// testWithdrawnWhileWaiting: a request withdrawn while it waits for a
// slot ends its node's maintenance condition (False, Released), which
// otherwise said Waiting for ever; the node was never cordoned.
func testWithdrawnWhileWaiting(t *testing.T, e *env) {
	first, waiting := e.name("first"), e.name("waiting")
	for _, n := range []string{first, waiting} {
		e.node(n, "z", time.Time{})
	}
	drains := newFakeDrains()
	opts := e.options("solo", maintenanceConfig(1))
	opts.NewDrainer = drains.new
	e.requestDrain(first, e.clock.Now().Add(-time.Minute), nil)
	e.requestDrain(waiting, e.clock.Now(), nil)
	e.start(opts, false)
	e.waitMaintenance(first, corev1.ConditionTrue, fleet.ReasonDraining)
	e.waitMaintenance(waiting, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting)
	e.setAnnotation(waiting, fleet.OperatorRequestAnnotation, "")
	cond, node := e.waitMaintenance(waiting, corev1.ConditionFalse, fleet.ReasonReleased)
	if !strings.Contains(cond.Message, "withdrawn before the drain started") {
		t.Errorf("node %s withdrawn while waiting says %q", waiting, cond.Message)
	}
	if node.Spec.Unschedulable || e.slot(waiting) != nil {
		t.Errorf("node %s withdrawn while waiting: unschedulable %t, slot %+v", waiting, node.Spec.Unschedulable, e.slot(waiting))
	}
}

// testDeadlineReleases: a blocked drain holds its slot until its deadline,
// saying what blocks it; then (release) the node is given back,
// uncordoned, DrainBlocked, and the next node gets the slot; a forced
// request's drain is told to force instead.
func testDeadlineReleases(t *testing.T, e *env) {
	t0 := e.clock.Now()
	blocked, forced, next := e.name("blocked"), e.name("forced"), e.name("next")
	for _, n := range []string{blocked, forced, next} {
		e.node(n, "z", time.Time{})
	}
	drains := newFakeDrains()
	drains.set(blocked, false, true)
	drains.set(forced, false, true)
	opts := e.options("solo", maintenanceConfig(2))
	opts.NewDrainer = drains.new
	e.requestDrain(blocked, t0.Add(-3*time.Minute), func(r *fleet.MaintenanceRequest) { r.Deadline = "10m" })
	e.requestDrain(forced, t0.Add(-2*time.Minute), func(r *fleet.MaintenanceRequest) { r.Deadline = "10m"; r.OnDeadline = fleet.OnDeadlineForce })
	e.requestDrain(next, t0.Add(-time.Minute), nil)
	e.watchPool(2, []string{blocked, forced, next})
	e.start(opts, false)
	blockedCond, _ := e.waitMaintenance(blocked, corev1.ConditionTrue, fleet.ReasonDrainBlocked)
	if !strings.Contains(blockedCond.Message, "PodDisruptionBudget ns/web") {
		t.Errorf("blocked message %q does not name the PDB", blockedCond.Message)
	}
	e.waitMaintenance(forced, corev1.ConditionTrue, fleet.ReasonDrainBlocked)
	e.waitMaintenance(next, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting)
	e.waitEvent("default", blocked, coordinator.EventDrainRefused)

	e.clock.Step(10*time.Minute + time.Second)
	cond, node := e.waitMaintenance(blocked, corev1.ConditionFalse, fleet.ReasonDrainBlocked)
	if !strings.Contains(cond.Message, "what blocked it: refused: ns/web-0 by PodDisruptionBudget ns/web (disruptionsAllowed 0)") {
		t.Errorf("node %s given back at its deadline says %q, not what blocked it", blocked, cond.Message)
	}
	if node.Spec.Unschedulable {
		t.Errorf("node %s given back at its deadline is still cordoned", blocked)
	}
	e.waitMaintenance(next, corev1.ConditionTrue, fleet.ReasonDraining)
	if err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		_, f, _ := drains.stats(forced)
		return f, nil
	}); err != nil {
		t.Errorf("the forced request's drain was never told to force after its deadline")
	}
	if c, _, _ := e.maintenanceOf(forced); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("forced node given back at the deadline: %+v; want it still draining (forced)", c)
	}
	if _, f, _ := drains.stats(blocked); f {
		t.Errorf("a release request's drain was told to force")
	}
}

// testMalformedRequest: a request with a bad field gets a Warning Event
// naming the field and is not acted on at all.
func testMalformedRequest(t *testing.T, e *env) {
	n := e.name("n")
	e.node(n, "z", time.Time{})
	drains := newFakeDrains()
	opts := e.options("solo", maintenanceConfig(1))
	opts.NewDrainer = drains.new
	e.setAnnotation(n, fleet.OperatorRequestAnnotation, `{"version":"v1","reason":"x","requestedBy":"me","requestedAt":"2026-01-01T00:00:00Z","deadline":"soon"}`)
	e.start(opts, false)
	evs := e.waitEvent("default", n, coordinator.EventInvalidMaintenanceReq)
	if !strings.Contains(evs[0].Message, "deadline") {
		t.Errorf("Event %q does not name the bad field deadline", evs[0].Message)
	}
	c, node, err := e.maintenanceOf(n)
	if err != nil || c != nil || node.Spec.Unschedulable || e.slot(n) != nil {
		t.Errorf("a malformed request was acted on: condition %+v, unschedulable %t, slot %v (err %v)", c, node.Spec.Unschedulable, e.slot(n) != nil, err)
	}
}

// testMaintenanceLeaderChange: a drain survives a leader change: the new
// leader resumes it from the count on the slot, keeps the node cordoned,
// and finishes it.
func testMaintenanceLeaderChange(t *testing.T, e *env) {
	n := e.name("n")
	e.node(n, "z", time.Time{})
	first := newFakeDrains()
	opts := e.options("first", maintenanceConfig(1))
	opts.NewDrainer = first.new
	e.requestDrain(n, e.clock.Now(), nil)
	_, stop := e.start(opts, true)
	e.waitMaintenance(n, corev1.ConditionTrue, fleet.ReasonDraining)
	if err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		l := e.slot(n)
		p, _ := fleet.ParseProgress(l.Annotations[fleet.SlotProgressAnnotation])
		return p.Evicted >= 2, nil
	}); err != nil {
		t.Fatalf("the drain's progress never reached the slot: %v", err)
	}
	if err := stop(); err != nil && !strings.Contains(err.Error(), "context canceled") {
		t.Logf("first leader stopped: %v", err)
	}
	base, _ := fleet.ParseProgress(e.slot(n).Annotations[fleet.SlotProgressAnnotation])

	second := newFakeDrains()
	second.set(n, true, false)
	opts2 := e.options("second", maintenanceConfig(1))
	opts2.NewDrainer = second.new
	e.start(opts2, true)
	cond, node := e.waitMaintenance(n, corev1.ConditionTrue, fleet.ReasonDrained)
	if !node.Spec.Unschedulable || node.Annotations[fleet.CordonAnnotation] == "" {
		t.Errorf("node %s drained across a leader change is not cordoned with our record", n)
	}
	if _, _, resumed := second.stats(n); len(resumed) == 0 || resumed[0] < base.Evicted {
		t.Errorf("the new leader's drain resumed from %v, want the slot's count %d", resumed, base.Evicted)
	}
	if !strings.Contains(cond.Message, "evicted") {
		t.Errorf("drained message %q", cond.Message)
	}
}

// testRequestTurnsUnreadable: an edit that makes a draining node's request
// unreadable holds the node as it is (cordoned, slot kept, no more
// passes) instead of ending its maintenance; fixed, the drain goes on;
// removed, maintenance ends.
func testRequestTurnsUnreadable(t *testing.T, e *env) {
	n := e.name("n")
	e.node(n, "z", time.Time{})
	drains := newFakeDrains()
	opts := e.options("solo", maintenanceConfig(1))
	opts.NewDrainer = drains.new
	at := e.clock.Now()
	e.requestDrain(n, at, nil)
	e.start(opts, false)
	e.waitMaintenance(n, corev1.ConditionTrue, fleet.ReasonDraining)
	good := fleet.MaintenanceRequest{Version: fleet.MaintenanceVersion, Reason: "test", RequestedBy: "tester", RequestedAt: at}.Format()
	e.setAnnotation(n, fleet.OperatorRequestAnnotation, strings.Replace(good, `"reason"`, `"raeson"`, 1))
	e.waitEvent("default", n, coordinator.EventInvalidMaintenanceReq)
	if err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		c, _, err := e.maintenanceOf(n)
		return err == nil && c != nil && strings.Contains(c.Message, "cannot be read"), err
	}); err != nil {
		t.Fatalf("the condition never said the request cannot be read: %v", err)
	}
	passes, _, _ := drains.stats(n)
	time.Sleep(time.Second) // a drain that went on would pass again by now
	c, node, _ := e.maintenanceOf(n)
	if p, _, _ := drains.stats(n); p != passes {
		t.Errorf("the drain passed %d more times while its request could not be read", p-passes)
	}
	if c.Status != corev1.ConditionTrue || !node.Spec.Unschedulable || node.Annotations[fleet.CordonAnnotation] == "" {
		t.Errorf("a node whose request turned unreadable was let go: condition %s/%s, unschedulable %t, cordon record %q",
			c.Status, c.Reason, node.Spec.Unschedulable, node.Annotations[fleet.CordonAnnotation])
	}
	if l := e.slot(n); l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != n {
		t.Errorf("a node whose request turned unreadable lost its slot: %+v", l)
	}
	e.setAnnotation(n, fleet.OperatorRequestAnnotation, good)
	drains.set(n, true, false)
	e.waitMaintenance(n, corev1.ConditionTrue, fleet.ReasonDrained)
	e.setAnnotation(n, fleet.OperatorRequestAnnotation, "")
	_, node = e.waitMaintenance(n, corev1.ConditionFalse, fleet.ReasonReleased)
	if node.Spec.Unschedulable {
		t.Errorf("node %s still cordoned after its request was removed", n)
	}
}

// testConditionRestored: someone else overwrites the node's maintenance
// condition; the coordinator puts its own back while the drain runs.
func testConditionRestored(t *testing.T, e *env) {
	n := e.name("n")
	e.node(n, "z", time.Time{})
	drains := newFakeDrains()
	opts := e.options("solo", maintenanceConfig(1))
	opts.NewDrainer = drains.new
	e.requestDrain(n, e.clock.Now(), nil)
	e.start(opts, false)
	e.waitMaintenance(n, corev1.ConditionTrue, fleet.ReasonDraining)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"False","reason":"Tampered","message":"not draining"}]}}`, fleet.MaintenanceCondition)
	if _, err := e.client.CoreV1().Nodes().PatchStatus(t.Context(), n, []byte(patch)); err != nil {
		t.Fatalf("overwriting the condition: %v", err)
	}
	e.waitMaintenance(n, corev1.ConditionTrue, fleet.ReasonDraining)
}

// testTheirCordonLifted: a node someone else had cordoned is drained
// without our record; when they uncordon it mid-drain the drain stops
// (Released) and selftaint does not cordon it again.
func testTheirCordonLifted(t *testing.T, e *env) {
	n := e.name("n")
	e.node(n, "z", time.Time{})
	e.setUnschedulable(n, true)
	drains := newFakeDrains()
	opts := e.options("solo", maintenanceConfig(1))
	opts.NewDrainer = drains.new
	e.requestDrain(n, e.clock.Now(), nil)
	e.start(opts, false)
	e.waitMaintenance(n, corev1.ConditionTrue, fleet.ReasonDraining)
	if l := e.slot(n); l == nil || l.Annotations[fleet.SlotCordonAnnotation] != fleet.SlotCordonTheirs {
		t.Errorf("the slot of a node someone else cordoned does not record it: %+v", l)
	}
	e.setUnschedulable(n, false)
	cond, _ := e.waitMaintenance(n, corev1.ConditionFalse, fleet.ReasonReleased)
	if !strings.Contains(cond.Message, "uncordoned") {
		t.Errorf("released message %q does not say it was uncordoned by someone else", cond.Message)
	}
	time.Sleep(time.Second) // a drain that went on would cordon it again by now
	if _, node, _ := e.maintenanceOf(n); node.Spec.Unschedulable || node.Annotations[fleet.CordonAnnotation] != "" {
		t.Errorf("node %s cordoned again by selftaint after its owner uncordoned it: unschedulable %t, record %q",
			n, node.Spec.Unschedulable, node.Annotations[fleet.CordonAnnotation])
	}
}

// testCordonedJustBeforeAStart: someone else cordons a node after the
// coordinator's caches were read for a decision that starts drains, and
// before it writes them (its informer has not seen the cordon): the pool
// is confirmed against a fresh read, so the start that no longer fits
// waits, and no Node version ever shows more nodes unavailable than the
// pool's size. Lifted, the cordon frees the place and the waiting node
// starts.
func testCordonedJustBeforeAStart(t *testing.T, e *env) {
	t0 := e.clock.Now()
	a, b, d := e.name("a"), e.name("b"), e.name("d")
	for _, n := range []string{a, b, d} {
		e.node(n, "z", time.Time{})
	}
	e.watchPool(2, []string{a, b, d})
	drains := newFakeDrains()
	var once sync.Once
	cordoned := make(chan []string, 1)
	opts := coordinator.WithBeforeStart(e.options("solo", maintenanceConfig(2)), func(ctx context.Context, starts []string) {
		once.Do(func() {
			// Someone else's cordon, written after the caches were read.
			if _, err := e.client.CoreV1().Nodes().Patch(ctx, d, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
				t.Errorf("cordoning node %s before the start: %v", d, err)
			}
			cordoned <- slices.Clone(starts)
		})
	})
	opts.NewDrainer = drains.new
	e.requestDrain(a, t0.Add(-2*time.Minute), nil)
	e.requestDrain(b, t0.Add(-time.Minute), nil)
	e.start(opts, false)

	select {
	case starts := <-cordoned:
		if !slices.Equal(starts, []string{a, b}) {
			t.Fatalf("the decision from the caches started %v, want both %s and %s (the pool of 2 was empty to the caches)", starts, a, b)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("no decision started a drain within %s", waitTimeout)
	}
	e.waitMaintenance(a, corev1.ConditionTrue, fleet.ReasonDraining)
	cond, nb := e.waitMaintenance(b, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting)
	if !strings.Contains(cond.Message, "pool is full") || !strings.Contains(cond.Message, d+" cordoned") {
		t.Errorf("waiting node %s: message %q, want the pool full with %s cordoned", b, cond.Message, d)
	}
	if nb.Spec.Unschedulable {
		t.Errorf("node %s, which does not fit the pool, was cordoned", b)
	}
	if l := e.slot(b); l != nil && l.Spec.HolderIdentity != nil {
		t.Errorf("node %s, which does not fit the pool, holds a slot: %+v", b, l.Spec)
	}

	// Their cordon lifted: b's turn.
	e.setUnschedulable(d, false)
	e.waitMaintenance(b, corev1.ConditionTrue, fleet.ReasonDraining)
}

// startMetrics counts the decisions reported that start drains; the rest
// of Metrics is ignored.
type startMetrics struct {
	mu     sync.Mutex
	starts [][]string // Maintenance.Start of each decision reported that starts drains
}

func (m *startMetrics) Decided(d fleet.Decision, _ time.Duration) {
	if len(d.Maintenance.Start) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.starts = append(m.starts, slices.Clone(d.Maintenance.Start))
}

func (m *startMetrics) reported() [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.starts)
}

func (*startMetrics) SetLeader(bool)                      {}
func (*startMetrics) GrantStarted(string)                 {}
func (*startMetrics) GrantReleased(string)                {}
func (*startMetrics) MaintenanceState(int, int, int, int) {}
func (*startMetrics) Evicted(string, int)                 {}
func (*startMetrics) DrainFinished(string, time.Duration) {}

// testStartDecidedOnce: a sync that starts a drain decides twice (from the
// caches, then confirmed on a fresh read), but reports one decision to
// Metrics, the one it executes.
func testStartDecidedOnce(t *testing.T, e *env) {
	a := e.name("a")
	e.node(a, "z", time.Time{})
	var mu sync.Mutex
	var cached [][]string // the starts of each sync's decision from the caches
	opts := coordinator.WithBeforeStart(e.options("solo", maintenanceConfig(1)), func(_ context.Context, starts []string) {
		mu.Lock()
		defer mu.Unlock()
		cached = append(cached, slices.Clone(starts))
	})
	m := &startMetrics{}
	opts.Metrics = m
	opts.NewDrainer = newFakeDrains().new
	e.requestDrain(a, e.clock.Now().Add(-time.Minute), nil)
	e.start(opts, false)
	e.waitMaintenance(a, corev1.ConditionTrue, fleet.ReasonDraining)

	mu.Lock()
	syncs := slices.Clone(cached)
	mu.Unlock()
	if got := m.reported(); len(got) != len(syncs) {
		t.Errorf("%d syncs started drains (%v), but %d decisions starting drains were reported to Metrics (%v), want one each", len(syncs), syncs, len(got), got)
	}
}
