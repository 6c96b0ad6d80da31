package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/agent/coordinator"
	"github.com/selftaint/selftaint/agent/metrics"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints/fleet"
)

// TestCoordinator runs coordinators on a real etcd and kube-apiserver, each
// subtest with its own fleet (a node label, the NodeSelector), namespace
// and fake clock for the decisions; leader election runs on real time.
func TestCoordinator(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver")
	cp := testcp.Start(t, testcp.Options{})
	showClientGoLogs(t)
	for _, tt := range []struct {
		name string
		test func(*testing.T, *env)
	}{
		{"GrantsInOrderUnderBudget", testGrantsInOrderUnderBudget},
		{"DeadAgentLosesGrant", testDeadAgentLosesGrant},
		{"GuardTripsAndResets", testGuardTripsAndResets},
		{"BadRequest", testBadRequest},
		{"SquattedGrantName", testSquattedGrantName},
		{"LeaderChangeKeepsGrants", testLeaderChangeKeepsGrants},
		{"LostLeadership", testLostLeadership},
		{"VirtualNodesOutsideTheFleet", testVirtualNodesOutsideTheFleet},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.test(t, newEnv(t, cp))
		})
	}
}

// testGrantsInOrderUnderBudget: of three nodes asking under a budget of
// two, the two that asked first get grants, one per rate slot; the third
// waits until one of them stops asking (its grant is released, its Lease
// kept with its acquireTime); holders are renewed every third of the TTL.
// A watch that sees every Lease version checks the budget throughout.
func testGrantsInOrderUnderBudget(t *testing.T, e *env) {
	t0 := e.clock.Now()
	first, second, third := e.name("second-asked"), e.name("first-asked"), e.name("third-asked")
	// Asked in the order second, first, third, by Request.Since.
	e.node(first, "a", t0.Add(-2*time.Minute))
	e.node(second, "a", t0.Add(-3*time.Minute))
	e.node(third, "a", t0.Add(-time.Minute))
	for i := range 3 {
		e.node(e.name(fmt.Sprint("idle-", i)), "a", time.Time{})
	}
	e.watchBudget(2)
	reg := prometheus.NewRegistry()
	m, err := metrics.NewCoordinator(reg, metrics.BuildInfo{Version: "v0"})
	if err != nil {
		t.Fatal(err)
	}
	opts := e.options("solo", config(intstr.FromInt32(2)))
	opts.Metrics = m
	e.start(opts, false)

	// The earliest asker at once; the next one a rate slot (1s) later.
	grants := e.waitHolders(second)
	checkGrant(t, grants[second], second, "a", t0, t0)
	e.clock.Step(time.Second)
	grants = e.waitHolders(second, first)
	checkGrant(t, grants[first], first, "a", t0.Add(time.Second), t0.Add(time.Second))

	// The second stops asking: released, kept for the rate window, and the
	// third gets its grant at the next rate slot.
	e.annotate(second, "")
	grants = e.waitGrants("the released grant kept", func(l map[string]coordinationv1.Lease) bool {
		g, ok := l[second]
		return ok && g.Spec.HolderIdentity == nil
	})
	if got := grants[second].Spec.AcquireTime; got == nil || !got.Time.Equal(t0) {
		t.Errorf("released grant's acquireTime = %v, want %v kept (the rate window survives a leader change)", got, t0)
	}
	e.clock.Step(time.Second)
	e.waitHolders(first, third)

	// A third of the TTL later both holders are renewed.
	e.clock.Step(10 * time.Second)
	now := e.clock.Now()
	grants = e.waitGrants("both renewed", func(l map[string]coordinationv1.Lease) bool {
		return renewedAt(l[first], now) && renewedAt(l[third], now)
	})
	checkGrant(t, grants[first], first, "a", t0.Add(time.Second), now)

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"selftaint_noexecute_budget", nil, 2},
		{"selftaint_noexecute_held", nil, 2},
		{"selftaint_noexecute_waiting", nil, 0},
		{"selftaint_noexecute_grants_started_total", map[string]string{"zone": "a"}, 3},
		{"selftaint_noexecute_grants_released_total", map[string]string{"reason": "no_longer_asks"}, 1},
		{"selftaint_noexecute_grants_released_total", map[string]string{"reason": "agent_not_alive"}, 0},
		{"selftaint_coordinator_leader", nil, 1},
	} {
		if got, ok := gather(t, reg, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
}

// checkGrant checks a grant Lease: held by node, started in zone at
// acquired, renewed at renewed, the TTL as its duration, labelled as the
// coordinator's.
func checkGrant(t *testing.T, l coordinationv1.Lease, node, zone string, acquired, renewed time.Time) {
	t.Helper()
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity != node {
		t.Errorf("grant %s: holder %v, want %s", l.Name, s.HolderIdentity, node)
	}
	if s.LeaseDurationSeconds == nil || *s.LeaseDurationSeconds != 30 {
		t.Errorf("grant %s: leaseDurationSeconds %v, want 30", l.Name, s.LeaseDurationSeconds)
	}
	if s.AcquireTime == nil || !s.AcquireTime.Time.Equal(acquired) {
		t.Errorf("grant %s: acquireTime %v, want %v", l.Name, s.AcquireTime, acquired)
	}
	if !renewedAt(l, renewed) {
		t.Errorf("grant %s: renewTime %v, want %v", l.Name, s.RenewTime, renewed)
	}
	if got := l.Annotations[fleet.GrantZoneAnnotation]; got != zone {
		t.Errorf("grant %s: zone annotation %q, want %q", l.Name, got, zone)
	}
	for k, want := range map[string]string{fleet.GrantLabel: "true", "app.kubernetes.io/name": "selftaint", "app.kubernetes.io/component": "coordinator"} {
		if got := l.Labels[k]; got != want {
			t.Errorf("grant %s: label %s=%q, want %q", l.Name, k, got, want)
		}
	}
	if granted, _ := fleet.Granted(&l, node, time.Time{}, renewed); !granted {
		t.Errorf("grant %s: fleet.Granted says it grants %s nothing at %v", l.Name, node, renewed)
	}
}

func renewedAt(l coordinationv1.Lease, t time.Time) bool {
	return l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Equal(t)
}

// gather finds the value of the metric name with labels (a gauge or a
// counter) in reg.
func gather(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				if g := m.GetGauge(); g != nil {
					return g.GetValue(), true
				}
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// testDeadAgentLosesGrant: a holder whose agent never refreshes its
// liveness stamp loses its grant once a TTL has passed, with a Warning
// Event on its Node saying why.
func testDeadAgentLosesGrant(t *testing.T, e *env) {
	node := e.name("silent")
	e.node(node, "a", e.clock.Now().Add(-time.Minute))
	e.start(e.options("solo", config(intstr.FromString("100%"))), false)
	e.waitHolders(node)
	// Renewed every 10s; no sign of life from the agent.
	for range 3 {
		e.clock.Step(10 * time.Second)
		now := e.clock.Now()
		e.waitGrants("the grant renewed", func(l map[string]coordinationv1.Lease) bool {
			return renewedAt(l[node], now) || l[node].Spec.HolderIdentity == nil
		})
	}
	e.clock.Step(time.Second)
	e.waitHolders()
	evs := e.waitEvent(metav1.NamespaceDefault, node, fleet.EventGrantReleased)
	if evs[0].Type != corev1.EventTypeWarning || evs[0].InvolvedObject.Kind != "Node" || !strings.Contains(evs[0].Message, fleet.ReleaseAgentNotAlive) {
		t.Errorf("Event %s %s about %s: %q, want a Warning about the Node saying %q", evs[0].Type, evs[0].Reason, evs[0].InvolvedObject.Kind, evs[0].Message, fleet.ReleaseAgentNotAlive)
	}
}

// testGuardTripsAndResets: when more than 55% of a zone reports the
// watched condition the guard trips (zone and fleet), the guard ConfigMap
// says so and an Event on it tells; a node asking for that condition gets
// no grant; a new coordinator starts from the tripped guard; once the share
// has stayed at or below 45% for the cool-down the guard resets and the
// node gets its grant.
func testGuardTripsAndResets(t *testing.T, e *env) {
	var nodes []string
	for i := range 5 {
		nodes = append(nodes, e.name(fmt.Sprint("n", i)))
		e.node(nodes[i], "a", time.Time{})
	}
	stop := tripGuard(t, e, nodes[:3])

	// A healthy node asks for the tripped condition: it waits, through a
	// guard renewal.
	asker := nodes[4]
	e.annotate(asker, request(e.clock.Now()))
	e.clock.Step(30 * time.Second)
	e.waitGuard("renewed while tripped", func(g fleet.GuardState) bool {
		return g.Conditions[testCondition]["a"].Tripped && g.RenewTime.Equal(e.clock.Now())
	})
	if l, err := e.grants(); err != nil || len(holders(l)) != 0 {
		t.Errorf("grants held by %v (%v) while the guard is tripped, want none", holders(l), err)
	}

	// A new coordinator starts from the tripped guard.
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("RunWithoutElection returned %v, want context.Canceled", err)
	}
	e.start(e.options("second", config(intstr.FromString("100%"))), false)
	e.clock.Step(30 * time.Second)
	e.waitGuard("rewritten by the new coordinator, still tripped", func(g fleet.GuardState) bool {
		return g.Conditions[testCondition]["a"].Tripped && g.Leader == "second"
	})

	// Down to 1 of 5 (20%): below the reset line; reset after the cool-down.
	for _, n := range nodes[1:3] {
		e.report(n, corev1.ConditionFalse)
	}
	g := e.stepGuard("below the reset line", config(intstr.FromInt32(0)).Guard.RenewEvery, func(g fleet.GuardState) bool {
		a := g.Conditions[testCondition]["a"]
		return a.Unhealthy == 1 && a.BelowSince != nil
	})
	if l, err := e.grants(); err != nil || len(holders(l)) != 0 {
		t.Errorf("grants held by %v (%v) during the cool-down, want none", holders(l), err)
	}
	e.clock.SetTime(latest(e.clock.Now(), g.Conditions[testCondition]["a"].BelowSince.Add(5*time.Minute)))
	e.waitGuard("reset", func(g fleet.GuardState) bool { return !g.Conditions[testCondition]["a"].Tripped })
	e.waitEvent(e.ns, fleet.DefaultGuardName, fleet.EventGuardReset)
	e.waitHolders(asker)
}

// tripGuard starts a coordinator (returning its stop) on e's fleet, waits
// for its first guard, and makes the nodes report the condition until the
// guard trips in zone a and fleet-wide; it checks the guard's labels, its
// Event and its metric.
func tripGuard(t *testing.T, e *env, reporting []string) func() error {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewCoordinator(reg, metrics.BuildInfo{Version: "v0"})
	if err != nil {
		t.Fatal(err)
	}
	opts := e.options("first", config(intstr.FromString("100%")))
	opts.Metrics = m
	_, stop := e.start(opts, false)
	_, cm := e.waitGuard("written", func(g fleet.GuardState) bool { return g.Leader == "first" && g.RenewTime.Equal(e.clock.Now()) })
	for k, want := range map[string]string{"app.kubernetes.io/name": "selftaint", "app.kubernetes.io/component": "coordinator"} {
		if got := cm.Labels[k]; got != want {
			t.Errorf("guard label %s=%q, want %q", k, got, want)
		}
	}
	for _, n := range reporting {
		e.report(n, corev1.ConditionTrue)
	}
	e.waitGuard("tripped", func(g fleet.GuardState) bool {
		scopes := g.Conditions[testCondition]
		return scopes["a"].Tripped && scopes[fleet.FleetScope].Tripped
	})
	ev := e.waitEvent(e.ns, fleet.DefaultGuardName, fleet.EventGuardTripped)[0]
	if ev.InvolvedObject.Kind != "ConfigMap" || ev.Type != corev1.EventTypeWarning {
		t.Errorf("guard Event %s about a %s, want a Warning about the ConfigMap", ev.Type, ev.InvolvedObject.Kind)
	}
	if got, _ := gather(t, reg, "selftaint_disruption_guard_tripped", map[string]string{"condition": string(testCondition), "scope": "a"}); got != 1 {
		t.Errorf("selftaint_disruption_guard_tripped{scope=a} = %v, want 1", got)
	}
	return stop
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// testBadRequest: an unreadable request annotation gets one Warning Event
// on the Node per value and no grant; once readable, the node is granted.
func testBadRequest(t *testing.T, e *env) {
	bad, good := e.name("bad"), e.name("good")
	e.node(bad, "a", time.Time{})
	e.annotate(bad, "not json")
	e.node(good, "a", e.clock.Now().Add(-time.Minute))
	e.start(e.options("solo", config(intstr.FromString("100%"))), false)
	e.waitHolders(good)
	e.waitEvent(metav1.NamespaceDefault, bad, "InvalidNoExecuteRequest")
	// More decisions (a renewal): still one Event, counted once.
	e.clock.Step(10 * time.Second)
	now := e.clock.Now()
	e.waitGrants("the good node's grant renewed", func(l map[string]coordinationv1.Lease) bool { return renewedAt(l[good], now) })
	if n := eventCount(t, e, bad); n != 1 {
		t.Errorf("%d InvalidNoExecuteRequest Events for one bad value, want 1", n)
	}
	if l, _ := e.grants(); slices.Contains(holders(l), bad) {
		t.Errorf("the node with a bad request holds a grant")
	}
	// Another bad value: another Event.
	e.annotate(bad, `{"since":"2025-01-01T00:00:00Z","conditions":[]}`)
	if err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) { return eventCount(t, e, bad) == 2, nil }); err != nil {
		t.Errorf("waiting for a second Event for a second bad value: %v (have %d)", err, eventCount(t, e, bad))
	}
	e.annotate(bad, request(e.clock.Now()))
	e.clock.Step(time.Second) // the next rate slot
	e.waitHolders(good, bad)
}

// eventCount is how many InvalidNoExecuteRequest Events about node there
// have been, counting repeats.
func eventCount(t *testing.T, e *env, node string) int {
	t.Helper()
	evs, err := e.events(metav1.NamespaceDefault, node, "InvalidNoExecuteRequest")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		n += int(max(ev.Count, 1))
	}
	return n
}

// testSquattedGrantName: a Lease that is not a grant (no label, so not in
// the coordinator's informer) already has a node's grant name. The create
// fails with AlreadyExists; the coordinator re-reads it and takes it over
// with an update carrying its resourceVersion, never a blind overwrite.
func testSquattedGrantName(t *testing.T, e *env) {
	node := e.name("squatted")
	squat := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: fleet.GrantName(node), Namespace: e.ns, Labels: map[string]string{"example.com/owner": "someone"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone"), LeaseDurationSeconds: ptr.To[int32](1)},
	}
	created, err := e.client.CoordinationV1().Leases(e.ns).Create(t.Context(), squat, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.node(node, "a", e.clock.Now().Add(-time.Minute))
	e.start(e.options("solo", config(intstr.FromString("100%"))), false)
	e.clock.Step(time.Second) // the retry decides again; a rate slot is free either way
	grants := e.waitHolders(node)
	l := grants[node]
	if l.UID != created.UID || l.Labels["example.com/owner"] != "someone" || l.Labels[fleet.GrantLabel] != "true" {
		t.Errorf("the squatted Lease was not updated in place: uid %s (was %s), labels %v", l.UID, created.UID, l.Labels)
	}
}

// testLeaderChangeKeepsGrants: two replicas elect a leader; the leader
// grants up to the budget and stops (its context cancelled): it releases
// the leader Lease, the other takes over well within the lease duration,
// keeps the existing grants (same holders, same acquireTime) and renews
// them, and the budget is never exceeded.
func testLeaderChangeKeepsGrants(t *testing.T, e *env) {
	const budget = 2
	var askers []string
	for i := range 4 {
		askers = append(askers, e.name(fmt.Sprint("ask-", i)))
		e.node(askers[i], "a", e.clock.Now().Add(-time.Duration(10-i)*time.Minute))
	}
	e.node(e.name("idle"), "a", time.Time{})
	e.watchBudget(budget)
	cfg := config(intstr.FromInt32(budget))
	a, stopA := e.start(e.options("replica-a", cfg), true)
	e.waitLeader("replica-a")
	b, _ := e.start(e.options("replica-b", cfg), true)
	e.waitHolders(askers[0])
	e.clock.Step(time.Second)
	before := e.waitHolders(askers[0], askers[1])
	if !a.Leading() || b.Leading() {
		t.Errorf("leading: a %v, b %v; want only a", a.Leading(), b.Leading())
	}

	stopped := time.Now()
	if err := stopA(); !errors.Is(err, context.Canceled) {
		t.Errorf("the old leader's Run returned %v, want context.Canceled", err)
	}
	e.waitLeader("replica-b")
	if took, limit := time.Since(stopped), e.options("", cfg).LeaseDuration; took > limit {
		t.Errorf("the new leader took over after %s, want within the lease duration %s (the old one released it)", took, limit)
	}
	if err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) { return b.Leading() && b.Ready() == nil, nil }); err != nil {
		t.Fatalf("the new leader is not leading and ready: %v", err)
	}
	// It keeps the grants, renews them, and lets no one else in.
	e.clock.Step(10 * time.Second)
	now := e.clock.Now()
	after := e.waitGrants("the grants renewed by the new leader", func(l map[string]coordinationv1.Lease) bool {
		return renewedAt(l[askers[0]], now) && renewedAt(l[askers[1]], now)
	})
	if got, want := holders(after), holders(before); !slices.Equal(got, want) {
		t.Errorf("holders after the leader change %v, want %v", got, want)
	}
	for _, n := range askers[:2] {
		if got, want := after[n].Spec.AcquireTime, before[n].Spec.AcquireTime; got == nil || !got.Equal(want) {
			t.Errorf("%s: acquireTime %v after the leader change, want %v", n, got, want)
		}
	}
}

// testLostLeadership: a leader whose Lease is taken from it stops leading
// and Run returns ErrLostLeadership (the process exits and restarts).
func testLostLeadership(t *testing.T, e *env) {
	a, stop := e.start(e.options("victim", config(intstr.FromString("100%"))), true)
	e.waitLeader("victim")
	if err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) { return a.Leading(), nil }); err != nil {
		t.Fatal(err)
	}
	leases := e.client.CoordinationV1().Leases(e.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(t.Context(), fleet.DefaultLeaderLease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr.To("thief")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		_, err = leases.Update(t.Context(), l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("taking the leader Lease: %v", err)
	}
	if err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) { return !a.Leading(), nil }); err != nil {
		t.Fatalf("still leading after the lease was taken: %v", err)
	}
	if err := stop(); !errors.Is(err, coordinator.ErrLostLeadership) {
		t.Errorf("Run returned %v, want ErrLostLeadership", err)
	}
}

// waitLeader waits until the leader Lease names identity.
func (e *env) waitLeader(identity string) {
	e.t.Helper()
	err := testcp.Poll(e.t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		l, err := e.client.CoordinationV1().Leases(e.ns).Get(e.t.Context(), fleet.DefaultLeaderLease, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == identity, err
	})
	if err != nil {
		e.t.Fatalf("waiting for %s to lead: %v", identity, err)
	}
}

// watchBudget fails the test if, at any version a watch sees, more than
// max grant Leases in e's namespace have a holder.
func (e *env) watchBudget(max int) {
	e.t.Helper()
	leases := e.client.CoordinationV1().Leases(e.ns)
	opts := metav1.ListOptions{LabelSelector: fleet.GrantLabel + "=true"}
	list, err := leases.List(e.t.Context(), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	opts.ResourceVersion = list.ResourceVersion
	w, err := leases.Watch(context.Background(), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		held := map[string]bool{}
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			held[l.Name] = ev.Type != watch.Deleted && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
			if n := countTrue(held); n > max {
				e.t.Errorf("%d grants held at resourceVersion %s, more than the budget %d", n, l.ResourceVersion, max)
			}
		}
	}()
	e.t.Cleanup(func() {
		w.Stop()
		<-done
	})
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// otherCondition is a condition nodes ask NoExecute for in
// testVirtualNodesOutsideTheFleet, which the guard does not hold.
const otherCondition corev1.NodeConditionType = "SelftaintOtherFailure"

// testVirtualNodesOutsideTheFleet: 7 real nodes, 5 of them failing, and 20
// healthy virtual nodes (the numbers). The real fleet's
// coordinator (the default) counts the 7 only: its guard trips (5 of 7,
// not 5 of 27) and its budget is 10% of 7 = 1 (not of 27 = 3): of two
// real nodes asking for another condition one gets the grant, and of the
// virtual nodes asking, earlier, none. A virtual fleet's coordinator, in
// its own namespace, counts the 20 virtual nodes only: 2 failing of 20,
// a budget of 2, grants for virtual nodes alone. Each guard says which
// fleet it judged.
func testVirtualNodesOutsideTheFleet(t *testing.T, e *env) {
	t0 := e.clock.Now()
	otherRequest := func(since time.Time) string {
		return fleet.Request{Since: since, Conditions: []corev1.NodeConditionType{otherCondition}}.Format()
	}
	addNode := func(name string, virtual bool, asksSince time.Time) {
		e.cp.CreateNode(t, name, func(n *corev1.Node) {
			n.Labels = map[string]string{groupLabel: e.group, corev1.LabelTopologyZone: "a"}
			if virtual {
				n.Labels[fleet.VirtualLabel] = "true"
			}
			if !asksSince.IsZero() {
				n.Annotations = map[string]string{fleet.RequestAnnotation: otherRequest(asksSince)}
			}
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		})
	}
	var realNodes, virtualNodes []string
	for i := range 7 {
		realNodes = append(realNodes, e.name(fmt.Sprint("real-", i)))
	}
	for i := range 20 {
		virtualNodes = append(virtualNodes, e.name(fmt.Sprint("vnode-", i)))
	}
	// Real: 0-4 fail, 5 and 6 ask. Virtual: 0-2 ask before them, 3-4 fail.
	for i, n := range realNodes {
		var since time.Time
		if i >= 5 {
			since = t0.Add(-time.Duration(10-i) * time.Minute)
		}
		addNode(n, false, since)
		if i < 5 {
			e.report(n, corev1.ConditionTrue)
		}
	}
	for i, n := range virtualNodes {
		var since time.Time
		if i < 3 {
			since = t0.Add(-time.Hour + time.Duration(i)*time.Minute)
		}
		addNode(n, true, since)
		if i == 3 || i == 4 {
			e.report(n, corev1.ConditionTrue)
		}
	}

	startWithMetrics := func(opts coordinator.Options) *prometheus.Registry {
		reg := prometheus.NewRegistry()
		m, err := metrics.NewCoordinator(reg, metrics.BuildInfo{Version: "v0"})
		if err != nil {
			t.Fatal(err)
		}
		opts.Metrics = m
		e.start(opts, false)
		return reg
	}
	waitMetric := func(reg *prometheus.Registry, fleetName, name string, want float64) {
		t.Helper()
		var got float64
		err := testcp.Poll(t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
			got, _ = gather(t, reg, name, nil)
			return got == want, nil
		})
		if err != nil {
			t.Errorf("%s fleet: %s = %v, want %v", fleetName, name, got, want)
		}
	}
	checkFleet := func(v *env, fleetName string, reg *prometheus.Registry, unhealthy, nodes int, tripped bool, budget, waiting float64, holders ...string) {
		t.Helper()
		_, cm := v.waitGuard(fmt.Sprintf("judging %d of %d nodes", unhealthy, nodes), func(g fleet.GuardState) bool {
			s := g.Conditions[testCondition][fleet.FleetScope]
			return s.Unhealthy == unhealthy && s.Nodes == nodes && s.Tripped == tripped
		})
		if got := cm.Annotations[fleet.FleetAnnotation]; got != fleetName {
			t.Errorf("%s fleet: guard annotation %s = %q, want %q", fleetName, fleet.FleetAnnotation, got, fleetName)
		}
		v.waitHolders(holders...)
		waitMetric(reg, fleetName, "selftaint_noexecute_budget", budget)
		waitMetric(reg, fleetName, "selftaint_noexecute_waiting", waiting)
	}

	// The real fleet (the default): 5 of 7 trip the guard; a budget of 1
	// goes to the real node that asked first, none to the virtual ones
	// that asked before it.
	realReg := startWithMetrics(e.options("real", config(intstr.FromString("10%"))))
	checkFleet(e, "real", realReg, 5, 7, true, 1, 1, realNodes[5])
	// Rate slots pass: still the one grant.
	e.clock.Step(2 * time.Second)
	checkFleet(e, "real", realReg, 5, 7, true, 1, 1, realNodes[5])

	// The virtual fleet, in a namespace of its own: 2 of 20, a budget of
	// 2, for the virtual nodes that asked, one per rate slot.
	v := *e
	v.ns = e.ns + "-virtual"
	if _, err := e.client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := v.options("virtual", config(intstr.FromString("10%")))
	opts.Config.Members = fleet.MembersVirtual
	virtualReg := startWithMetrics(opts)
	checkFleet(&v, "virtual", virtualReg, 2, 20, false, 2, 2, virtualNodes[0])
	e.clock.Step(time.Second)
	checkFleet(&v, "virtual", virtualReg, 2, 20, false, 2, 1, virtualNodes[0], virtualNodes[1])
	// The real fleet's grant is untouched by it.
	checkFleet(e, "real", realReg, 5, 7, true, 1, 1, realNodes[5])
}
