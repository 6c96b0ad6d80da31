package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// coordNS is the namespace of node's grant and guard: one per test (the
// tests run in parallel on one control plane, and a guard is a namespace's).
func coordNS(node string) string { return "fleet-" + node }

// ensureNamespace creates namespace ns unless it exists.
func ensureNamespace(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	_, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
}

var (
	evictTaint    = corev1.Taint{Key: "selftaint.io/test-evict", Effect: corev1.TaintEffectNoExecute}
	fallbackTaint = corev1.Taint{Key: "selftaint.io/test-evict", Effect: corev1.TaintEffectNoSchedule}
	evictRules    = []taints.Rule{{Condition: cond, Status: corev1.ConditionTrue, Taint: evictTaint, Fallback: corev1.TaintEffectNoSchedule}}
)

// startNoExecuteAgent runs an agent for node with a NoExecute rule that
// reads its grant and the guard in coordNS(node).
func startNoExecuteAgent(t *testing.T, c kubernetes.Interface, node string, p probes.Probe, limiter taints.LimiterConfig) {
	t.Helper()
	startAgent(t, agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes: []agent.ProbeSpec{{
			Entry:     probes.Entry{Probe: p, Interval: 100 * time.Millisecond, Timeout: 90 * time.Millisecond},
			Condition: cond,
		}},
		Rules:   evictRules,
		Limiter: limiter,
		NoExecute: &agent.NoExecuteOptions{
			Leases: c.CoordinationV1(), Namespace: coordNS(node), GuardName: fleet.DefaultGuardName,
			GrantTTL: 15 * time.Second, GuardStaleAfter: 20 * time.Second,
		},
	})
}

// writeGuard creates or replaces node's guard ConfigMap (in coordNS(node)).
func writeGuard(t *testing.T, c kubernetes.Interface, node string, g fleet.GuardState) {
	t.Helper()
	ensureNamespace(t, c, coordNS(node))
	ctx := context.Background()
	cms := c.CoreV1().ConfigMaps(coordNS(node))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultGuardName}, Data: fleet.EncodeGuard(g)}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err == nil {
		return
	}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("writing the guard: %v", err)
	}
}

func trippedFor(c corev1.NodeConditionType) map[corev1.NodeConditionType]map[string]fleet.Scope {
	return map[corev1.NodeConditionType]map[string]fleet.Scope{
		c: {fleet.FleetScope: {Tripped: true, Since: time.Now(), Unhealthy: 6, Nodes: 10}},
	}
}

func grantLease(t *testing.T, c kubernetes.Interface, node string, renewed time.Time) {
	t.Helper()
	ensureNamespace(t, c, coordNS(node))
	ensureNamespace(t, c, coordNS(node))
	l := fleet.NewGrant(coordNS(node), node, "", 15*time.Second, renewed)
	if _, err := c.CoordinationV1().Leases(coordNS(node)).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatalf("granting %s: %v", node, err)
	}
}

func deleteGrant(t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	if err := c.CoordinationV1().Leases(coordNS(node)).Delete(context.Background(), fleet.GrantName(node), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the grant of %s: %v", node, err)
	}
}

func request(n *corev1.Node) (fleet.Request, bool) {
	v, ok := n.Annotations[fleet.RequestAnnotation]
	if !ok {
		return fleet.Request{}, false
	}
	r, err := fleet.ParseRequest(v)
	return r, err == nil
}

// TestNoExecuteNeedsAGrant walks one agent through what the coordinator
// can say, acting as the coordinator by hand: without a guard, with a
// fresh guard and no grant, with a grant, with the guard tripped, with the
// grant deleted, and with a grant whose renewal is older than its TTL.
// NoExecute is on only with a live grant and a fresh, quiet guard; the
// fallback taint is on whenever the condition is; the request annotation
// is there while the condition is, with a liveness stamp while granted.
// A watch checks every version of the Node: never NoExecute without the
// fallback, never NoExecute while no live grant exists.
func TestNoExecuteNeedsAGrant(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "ne-node"
	created := cp.CreateNode(t, node, withForeign)
	w := startWatch(t, c, node, created.ResourceVersion)
	p := newSwitchProbe(probes.StatusProblem)
	startNoExecuteAgent(t, c, node, p, taints.LimiterConfig{})

	hasNE := func(n *corev1.Node) bool { return hasTaint(n, evictTaint) }
	n := waitNode(t, c, node, 20*time.Second, "the fallback taint", func(n *corev1.Node) bool { return hasTaint(n, fallbackTaint) })
	if hasNE(n) {
		t.Fatalf("NoExecute without any grant: %s", describe(n))
	}
	if r, ok := request(n); !ok || len(r.Conditions) != 1 || r.Conditions[0] != cond || r.Alive != nil {
		t.Errorf("request annotation = %q, want one for %s without a liveness stamp", n.Annotations[fleet.RequestAnnotation], cond)
	}
	waitEvent(t, c, node, taints.ReasonNoExecuteSuspended, 10*time.Second, "never been read")

	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now()})
	waitEvent(t, c, node, taints.ReasonNoExecuteWaiting, 10*time.Second, "grant")
	// Long enough without a grant that a watch failing on the missing
	// Lease would be deep in its relist backoff.
	time.Sleep(8 * time.Second)
	if n := getNode(t, c, node); hasNE(n) {
		t.Fatalf("NoExecute with a guard but no grant: %s", describe(n))
	}

	grantStart := time.Now()
	grantLease(t, c, node, time.Now())
	n = waitNode(t, c, node, 10*time.Second, "NoExecute with a grant", hasNE)
	if r, ok := request(n); !ok || r.Alive == nil {
		t.Errorf("a holder's request carries no liveness stamp: %q", n.Annotations[fleet.RequestAnnotation])
	}
	// Seen through the watch, not a relist: well within a second, on an
	// idle machine; 5s leaves room for a loaded one, and still tells a
	// watch from a relist's backoff (which reached 30s before getWatch).
	t.Logf("NoExecute %s after the grant", time.Since(grantStart).Round(time.Millisecond))
	if got := time.Since(grantStart); got > 5*time.Second {
		t.Errorf("NoExecute came %s after the grant", got)
	}

	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now(), Conditions: trippedFor(cond)})
	n = waitNode(t, c, node, 10*time.Second, "NoExecute lifted by the tripped guard", func(n *corev1.Node) bool { return !hasNE(n) })
	if !hasTaint(n, fallbackTaint) {
		t.Errorf("the tripped guard lifted the fallback too (it only holds back what is new): %s", describe(n))
	}
	waitEvent(t, c, node, taints.ReasonNoExecuteSuspended, 10*time.Second, "disruption guard")

	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now()})
	waitNode(t, c, node, 10*time.Second, "NoExecute back with the guard reset", hasNE)

	deleteGrant(t, c, node)
	n = waitNode(t, c, node, 10*time.Second, "NoExecute lifted with the grant gone", func(n *corev1.Node) bool { return !hasNE(n) })
	if r, ok := request(n); !ok || r.Alive != nil {
		t.Errorf("after the grant, request = %q, want one without a liveness stamp", n.Annotations[fleet.RequestAnnotation])
	}

	// A grant whose renewal is older than its TTL grants nothing.
	grantLease(t, c, node, time.Now().Add(-time.Minute))
	time.Sleep(2 * time.Second)
	if n := getNode(t, c, node); hasNE(n) {
		t.Fatalf("NoExecute under an expired grant: %s", describe(n))
	}
	deleteGrant(t, c, node)

	p.set(probes.StatusOK)
	waitNode(t, c, node, 10*time.Second, "taints and request gone", func(n *corev1.Node) bool {
		_, asks := n.Annotations[fleet.RequestAnnotation]
		return !hasTaint(n, fallbackTaint) && !hasNE(n) && !asks
	})

	checkForeignSurvived(t, w)
	for i, v := range w.seen() {
		if hasNE(v) && !hasTaint(v, fallbackTaint) {
			t.Errorf("version %d has NoExecute without its fallback: %s", i, describe(v))
		}
	}
}

// TestNoExecuteGrantExpiresWithoutRenewal: a grant nobody renews (the
// coordinator died) ends at its TTL, and the agent lifts NoExecute by
// itself, with no event from anyone.
func TestNoExecuteGrantExpiresWithoutRenewal(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "ne-expire"
	cp.CreateNode(t, node, nil)
	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now().Add(time.Minute)})
	startNoExecuteAgent(t, c, node, newSwitchProbe(probes.StatusProblem), taints.LimiterConfig{})
	// A grant counts only once the node asks (one seen before might be a
	// release the agent has not seen yet).
	waitNode(t, c, node, 10*time.Second, "the request", func(n *corev1.Node) bool { _, ok := request(n); return ok })
	granted := time.Now()
	grantLease(t, c, node, granted)
	waitNode(t, c, node, 10*time.Second, "NoExecute with a grant", func(n *corev1.Node) bool { return hasTaint(n, evictTaint) })
	waitNode(t, c, node, 30*time.Second, "NoExecute lifted at the TTL", func(n *corev1.Node) bool { return !hasTaint(n, evictTaint) })
	if got := time.Since(granted); got < 14*time.Second || got > 20*time.Second {
		t.Errorf("NoExecute lifted %s after the grant's last renewal, want at its 15s TTL", got)
	}
}

// TestGuardHoldsNewTaintsNotRemovals: with the guard tripped for the
// condition, a node that starts reporting it gets no taint at all (the
// condition is still published) and an Event says why; a taint already on
// stays; and taints come off as soon as the condition clears.
func TestGuardHoldsNewTaintsNotRemovals(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "ne-guard"
	cp.CreateNode(t, node, nil)
	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now().Add(time.Hour), Conditions: trippedFor(cond)})
	p := newSwitchProbe(probes.StatusOK)
	startNoExecuteAgent(t, c, node, p, taints.LimiterConfig{})
	waitNode(t, c, node, 10*time.Second, "condition False", conditionIs(corev1.ConditionFalse))

	p.set(probes.StatusProblem)
	waitNode(t, c, node, 10*time.Second, "condition True", conditionIs(corev1.ConditionTrue))
	waitEvent(t, c, node, "TaintHeldByGuard", 10*time.Second, "selftaint.io/test-evict:NoSchedule")
	if n := getNode(t, c, node); hasTaint(n, fallbackTaint) || hasTaint(n, evictTaint) {
		t.Fatalf("a taint was added while the guard is tripped: %s", describe(n))
	}

	// Reset: the condition still holds, so its taint follows now.
	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now().Add(time.Hour)})
	waitNode(t, c, node, 10*time.Second, "fallback taint after the reset", func(n *corev1.Node) bool { return hasTaint(n, fallbackTaint) })

	// Tripped again: what is on stays; clearing is never held.
	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now().Add(time.Hour), Conditions: trippedFor(cond)})
	time.Sleep(time.Second)
	if n := getNode(t, c, node); !hasTaint(n, fallbackTaint) {
		t.Fatalf("the guard lifted a taint already on: %s", describe(n))
	}
	p.set(probes.StatusOK)
	waitNode(t, c, node, 10*time.Second, "taint lifted while the guard is tripped", func(n *corev1.Node) bool { return !hasTaint(n, fallbackTaint) })
}

// TestFlappingProbeStaysWithinTheBucket drives, on a fake clock, a probe
// that is bad and good in turn every second for 10 minutes against the
// real API server, and counts the taint's changes in every version of the
// Node a watch sees: no more than the bucket allows (burst 3, one per 5
// minutes), the condition says Flapping, and after the probe settles the
// taint comes off once the cool-down has passed.
func TestFlappingProbeStaysWithinTheBucket(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "flapper"
	created := cp.CreateNode(t, node, withForeign)
	w := startWatch(t, c, node, created.ResourceVersion)
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	p := newSwitchProbe(probes.StatusOK)
	limiter := taints.LimiterConfig{Burst: 3, Refill: 5 * time.Minute, CoolDown: 5 * time.Minute}
	a, _ := startAgent(t, agent.Options{
		NodeName: node, Client: c.CoreV1(), Clock: clk,
		Probes: []agent.ProbeSpec{{
			Entry:     probes.Entry{Probe: p, Interval: time.Second, Timeout: 500 * time.Millisecond},
			Condition: cond,
		}},
		Rules:   rules,
		Limiter: limiter,
	})
	waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))

	// One fake second per step; each step waits for the probe run it
	// triggers and, when the verdict changed, the sync that follows. The
	// runner re-arms its timer after a run: a step that comes before that
	// fires nothing, so a step with no run after a while is taken again.
	last := probes.StatusOK
	step := func(s probes.Status) {
		t.Helper()
		p.set(s)
		runs, syncs := probeRuns(a), a.Stats().Syncs
		changed := s != last
		last = s
		ran := func() (bool, error) { return probeRuns(a) > runs, nil }
		for try := 0; ; try++ {
			clk.Step(time.Second)
			if testcp.Poll(context.Background(), time.Second, time.Millisecond, ran) == nil {
				break
			}
			if try == 5 {
				t.Fatalf("at %s: no probe run after %d steps", clk.Now().Format(time.TimeOnly), try+1)
			}
		}
		if err := testcp.Poll(context.Background(), 10*time.Second, time.Millisecond, func() (bool, error) {
			return !changed || a.Stats().Syncs > syncs, nil
		}); err != nil {
			t.Fatalf("at %s: no sync after the verdict changed: %v", clk.Now().Format(time.TimeOnly), err)
		}
	}
	for i := 0; i < 600; i++ {
		s := probes.StatusProblem
		if i%2 == 1 {
			s = probes.StatusOK
		}
		step(s)
	}
	n := waitNode(t, c, node, 10*time.Second, "condition Flapping", func(n *corev1.Node) bool {
		cd := condition(n, cond)
		return cd != nil && cd.Reason == taints.ReasonFlapping && cd.Status == corev1.ConditionTrue && hasTaint(n, ourTaint)
	})
	if cd := condition(n, cond); !strings.Contains(cd.Message, "change limiter") {
		t.Errorf("the Flapping message does not say why: %q", cd.Message)
	}
	if got, max := taintChanges(w.seen()), limiter.Burst+2; got > max || got == 0 {
		t.Errorf("the taint changed %d times in 10 minutes of flapping, want 1..%d (burst 3, one token per 5m)", got, max)
	}
	waitEvent(t, c, node, "ConditionFlapping", 10*time.Second, "change limiter")

	// Settled: healthy for the cool-down, then the last state wins.
	for i := 0; i < 5*60+5; i++ {
		step(probes.StatusOK)
	}
	waitNode(t, c, node, 10*time.Second, "taint lifted after the cool-down", func(n *corev1.Node) bool {
		cd := condition(n, cond)
		return cd != nil && cd.Status == corev1.ConditionFalse && !hasTaint(n, ourTaint)
	})
	checkForeignSurvived(t, w)
}

func probeRuns(a *agent.Agent) uint64 {
	var n uint64
	for _, s := range a.ProbeStats() {
		n += s.Runs
	}
	return n
}

// taintChanges counts how often ourTaint appears or disappears across the
// versions of a Node.
func taintChanges(versions []*corev1.Node) int {
	changes, on := 0, false
	for _, v := range versions {
		if has := hasTaint(v, ourTaint); has != on {
			changes++
			on = has
		}
	}
	return changes
}

// TestGrantSeenBeforeTheRequestIsNotHonoured: a grant Lease the agent saw
// before its node started asking may be one the coordinator has already
// released and given away (the agent has not seen the release yet), so it
// is not honoured; a renewal seen after the request is.
func TestGrantSeenBeforeTheRequestIsNotHonoured(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "ne-stale"
	cp.CreateNode(t, node, nil)
	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now().Add(time.Hour)})
	grantLease(t, c, node, time.Now())
	p := newSwitchProbe(probes.StatusOK)
	startNoExecuteAgent(t, c, node, p, taints.LimiterConfig{})
	waitNode(t, c, node, 10*time.Second, "condition False", conditionIs(corev1.ConditionFalse))
	p.set(probes.StatusProblem)
	waitNode(t, c, node, 10*time.Second, "the request", func(n *corev1.Node) bool { _, ok := request(n); return ok })
	time.Sleep(2 * time.Second)
	if n := getNode(t, c, node); hasTaint(n, evictTaint) {
		t.Fatalf("NoExecute under a grant seen before the node asked: %s", describe(n))
	}
	leases := c.CoordinationV1().Leases(coordNS(node))
	l, err := leases.Get(context.Background(), fleet.GrantName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("renewing: %v", err)
	}
	waitNode(t, c, node, 10*time.Second, "NoExecute after a renewal seen while asking", func(n *corev1.Node) bool { return hasTaint(n, evictTaint) })
}

// gatedGuardClient is a core client whose ConfigMap lists (the guard's
// informer) first wait for gate to return: nil lets the list go on, an
// error fails it. It makes the guard's first read as slow, or as broken,
// as a test needs.
type gatedGuardClient struct {
	typedcorev1.CoreV1Interface
	gate func() error
}

func (c gatedGuardClient) ConfigMaps(ns string) typedcorev1.ConfigMapInterface {
	return gatedConfigMaps{ConfigMapInterface: c.CoreV1Interface.ConfigMaps(ns), gate: c.gate}
}

type gatedConfigMaps struct {
	typedcorev1.ConfigMapInterface
	gate func() error
}

func (c gatedConfigMaps) List(ctx context.Context, o metav1.ListOptions) (*corev1.ConfigMapList, error) {
	if err := c.gate(); err != nil {
		return nil, err
	}
	return c.ConfigMapInterface.List(ctx, o)
}

// TestRestartedAgentHoldsUntilTheGuardIsRead: an agent restarted while the
// guard is tripped for its condition, whose first read of the guard comes
// seconds after its first sync (a slow list), adds no taint on any Node
// version the watch sees, before or after the read; restarted with the
// guard quiet, it adds the taint only after the read, and at once then. A
// guard that cannot be listed (forbidden) holds new taints until a list
// succeeds; a guard confirmed absent holds nothing (TestNoExecuteNeedsAGrant).
func TestRestartedAgentHoldsUntilTheGuardIsRead(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "ne-restart-guard"
	cp.CreateNode(t, node, nil)
	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now().Add(time.Hour), Conditions: trippedFor(cond)})
	p := newSwitchProbe(probes.StatusProblem)
	run := func(gate func() error) (*agent.Agent, func()) {
		return startAgent(t, agent.Options{
			NodeName: node,
			Client:   gatedGuardClient{CoreV1Interface: c.CoreV1(), gate: gate},
			Probes: []agent.ProbeSpec{{
				Entry:     probes.Entry{Probe: p, Interval: 100 * time.Millisecond, Timeout: 90 * time.Millisecond},
				Condition: cond,
			}},
			Rules: evictRules,
			NoExecute: &agent.NoExecuteOptions{
				Leases: c.CoordinationV1(), Namespace: coordNS(node), GuardName: fleet.DefaultGuardName,
				GrantTTL: 15 * time.Second, GuardStaleAfter: 20 * time.Second,
				// No wait for the lists: the first sync comes before
				// the guard is read, which is what this test holds.
				ListWait: -1,
			},
		})
	}
	noTaint := func(n *corev1.Node) bool { return !hasTaint(n, fallbackTaint) && !hasTaint(n, evictTaint) }
	// noneTainted fails t for a watched version with a taint of the rule,
	// and if the Node has one now.
	noneTainted := func(w *nodeWatch, when string) {
		t.Helper()
		for i, v := range w.seen() {
			if !noTaint(v) {
				t.Errorf("version %d (rv %s) %s has a taint of the held condition: %s", i, v.ResourceVersion, when, describe(v))
			}
		}
		if n := getNode(t, c, node); !noTaint(n) {
			t.Errorf("%s the Node has a taint of the held condition: %s", when, describe(n))
		}
	}
	syncs := func(a *agent.Agent, n int64) {
		t.Helper()
		if err := testcp.Poll(context.Background(), 20*time.Second, 10*time.Millisecond, func() (bool, error) { return a.Stats().Syncs >= n, nil }); err != nil {
			t.Fatalf("fewer than %d syncs: %v", n, err)
		}
	}

	// The first run sees the guard tripped: the condition is True, its
	// taint held.
	_, stop := run(func() error { return nil })
	waitNode(t, c, node, 10*time.Second, "condition True", conditionIs(corev1.ConditionTrue))
	waitEvent(t, c, node, "TaintHeldByGuard", 10*time.Second, fallbackTaint.Key)
	stop()

	// Restarted with the guard's first read 3s late: the condition is
	// adopted True at the first sync, long before the guard is read.
	created := getNode(t, c, node)
	w := startWatch(t, c, node, created.ResourceVersion)
	const delay = 3 * time.Second
	var listed atomic.Int64 // unix nanos of the first list that went on
	slow := func() error {
		time.Sleep(delay)
		listed.CompareAndSwap(0, time.Now().UnixNano())
		return nil
	}
	started := time.Now()
	a, stop := run(slow)
	syncs(a, 1)
	if listed.Load() != 0 {
		t.Fatalf("the guard was read before the first sync: the test proves nothing")
	}
	firstSync := time.Since(started)
	if err := testcp.Poll(context.Background(), 20*time.Second, 20*time.Millisecond, func() (bool, error) { return listed.Load() != 0, nil }); err != nil {
		t.Fatalf("the guard was never listed: %v", err)
	}
	readAt := time.Unix(0, listed.Load())
	before := a.Stats().Syncs
	syncs(a, before+1) // the read brings a sync
	time.Sleep(2 * time.Second)
	t.Logf("restarted: first sync %s after the start, the guard read %s after it, %d syncs",
		firstSync.Round(time.Millisecond), readAt.Sub(started).Round(time.Millisecond), a.Stats().Syncs)
	noneTainted(w, "after a restart with the guard tripped")
	stop()

	// Quiet guard, read late again: the taint goes on after the read, and
	// promptly.
	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now().Add(time.Hour)})
	listed.Store(0)
	started = time.Now()
	_, stop = run(slow)
	n := waitNode(t, c, node, 20*time.Second, "the fallback taint once the quiet guard is read", func(n *corev1.Node) bool { return hasTaint(n, fallbackTaint) })
	readAt = time.Unix(0, listed.Load())
	if listed.Load() == 0 {
		t.Fatalf("the taint went on before the guard was read: %s", describe(n))
	}
	tainted := time.Since(readAt)
	t.Logf("restarted with a quiet guard: guard read %s after the start, taint on within %s of the read", readAt.Sub(started).Round(time.Millisecond), tainted.Round(time.Millisecond))
	if tainted > 5*time.Second {
		t.Errorf("the taint came %s after the guard was read, want at once (the read must bring a sync)", tainted)
	}
	stop()

	// A guard that cannot be listed holds new taints until it can be.
	p.set(probes.StatusOK)
	_, stopOK := startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: []agent.ProbeSpec{{
		Entry: probes.Entry{Probe: p, Interval: 100 * time.Millisecond, Timeout: 90 * time.Millisecond}, Condition: cond,
	}}, Rules: evictRules, NoExecute: &agent.NoExecuteOptions{
		Leases: c.CoordinationV1(), Namespace: coordNS(node), GuardName: fleet.DefaultGuardName,
		GrantTTL: 15 * time.Second, GuardStaleAfter: 20 * time.Second,
	}})
	waitNode(t, c, node, 10*time.Second, "taint off, condition False", func(n *corev1.Node) bool {
		return noTaint(n) && conditionIs(corev1.ConditionFalse)(n)
	})
	stopOK()
	p.set(probes.StatusProblem)
	var forbid atomic.Bool
	forbid.Store(true)
	w3 := startWatch(t, c, node, getNode(t, c, node).ResourceVersion)
	_, stop = run(func() error {
		if forbid.Load() {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, fleet.DefaultGuardName, errors.New("test"))
		}
		return nil
	})
	waitNode(t, c, node, 10*time.Second, "condition True", conditionIs(corev1.ConditionTrue))
	time.Sleep(3 * time.Second)
	noneTainted(w3, "while the guard cannot be listed")
	forbid.Store(false)
	waitNode(t, c, node, 60*time.Second, "the fallback taint once the guard can be listed", func(n *corev1.Node) bool { return hasTaint(n, fallbackTaint) })
	stop()
}
