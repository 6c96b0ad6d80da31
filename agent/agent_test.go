package agent_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

const (
	cond      corev1.NodeConditionType = "SelftaintTestPressure"
	taintKey                           = "selftaint.io/test-pressure"
	probeName                          = "switch"
)

var ourTaint = corev1.Taint{Key: taintKey, Effect: corev1.TaintEffectNoSchedule}

var rules = []taints.Rule{{Condition: cond, Status: corev1.ConditionTrue, Taint: ourTaint}}

// switchProbe reports whatever status the test last set.
type switchProbe struct{ status atomic.Value }

func newSwitchProbe(s probes.Status) *switchProbe {
	p := &switchProbe{}
	p.status.Store(s)
	return p
}

func (p *switchProbe) set(s probes.Status) { p.status.Store(s) }
func (p *switchProbe) Name() string        { return probeName }
func (p *switchProbe) Probe(context.Context) probes.Result {
	s := p.status.Load().(probes.Status)
	reason := map[probes.Status]string{probes.StatusOK: "Fine", probes.StatusProblem: "Bad", probes.StatusUnknown: "Unreadable"}[s]
	return probes.Result{Status: s, Reason: reason, Message: "the switch says " + string(s)}
}

type agentOpts struct {
	damping   taints.Damping
	heartbeat time.Duration
	interval  time.Duration
	hook      func(context.Context, *corev1.Node)
}

// runAgent starts an agent for node and returns it with a stop function that
// cancels it and waits for Run to return (also registered as a cleanup).
func runAgent(t *testing.T, client kubernetes.Interface, node string, p probes.Probe, o agentOpts) (*agent.Agent, func()) {
	t.Helper()
	if o.interval == 0 {
		o.interval = 100 * time.Millisecond
	}
	return startAgent(t, agent.Options{
		NodeName: node,
		Client:   client.CoreV1(),
		Probes: []agent.ProbeSpec{{
			// The test probes answer at once: a timeout just below the
			// interval (as in every test here) is only hit when a loaded
			// machine does not schedule the probe's goroutine for that
			// long, which would turn the condition Unknown mid-test.
			Entry:     probes.Entry{Probe: p, Interval: o.interval, Timeout: o.interval * 9 / 10},
			Condition: cond,
			Damping:   o.damping,
		}},
		Rules:            rules,
		HeartbeatPeriod:  o.heartbeat,
		BeforeTaintWrite: o.hook,
	})
}

// startAgent runs an agent with opts (heartbeat 1h unless set, no start
// jitter) until the test ends (testkit.StartAgent).
func startAgent(t testing.TB, opts agent.Options) (*agent.Agent, func()) {
	t.Helper()
	if opts.HeartbeatPeriod == 0 {
		opts.HeartbeatPeriod = time.Hour
	}
	opts.Jitter = -1
	return testkit.StartAgent(t, opts)
}

func getNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	return testkit.GetNode(t, c, name)
}

// waitNode polls the Node until ok holds or timeout passes, and returns it.
func waitNode(t testing.TB, c kubernetes.Interface, name string, timeout time.Duration, what string, ok func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	return testkit.WaitNode(t, c, name, timeout, what, describe, ok)
}

func describe(n *corev1.Node) string {
	if n == nil {
		return "<nil>"
	}
	s := "taints=["
	for _, t := range n.Spec.Taints {
		s += taints.Format(t) + " "
	}
	s += "] conditions=["
	for _, c := range n.Status.Conditions {
		s += string(c.Type) + "=" + string(c.Status) + " "
	}
	return s + "] owned=" + n.Annotations[taints.OwnedTaintsAnnotation]
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func conditionIs(s corev1.ConditionStatus) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool { c := condition(n, cond); return c != nil && c.Status == s }
}

func hasTaint(n *corev1.Node, want corev1.Taint) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == want.Key && t.Effect == want.Effect && t.Value == want.Value
	})
}

// foreignTaint and foreignCondition belong to other writers.
var (
	foreignTaint     = corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	foreignCondition = corev1.NodeCondition{Type: "VendorHealthy", Status: corev1.ConditionTrue, Reason: "VendorSaysSo", Message: "set by someone else"}
)

// watchNode records every version of the Node a watch delivers from rv on.
type nodeWatch struct {
	mu     sync.Mutex // guards events
	events []*corev1.Node
	stop   func()
}

func startWatch(t *testing.T, c kubernetes.Interface, name, rv string) *nodeWatch {
	t.Helper()
	w, err := c.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: rv,
	})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	nw := &nodeWatch{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if n, ok := ev.Object.(*corev1.Node); ok {
				nw.mu.Lock()
				nw.events = append(nw.events, n)
				nw.mu.Unlock()
			}
		}
	}()
	t.Cleanup(w.Stop)
	return nw
}

func (w *nodeWatch) seen() []*corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

// everyVersion fails t unless the watch saw a version of the Node (when
// says during what) and ok holds for each; what names what ok checks.
func (w *nodeWatch) everyVersion(t *testing.T, when, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	evs := w.seen()
	if len(evs) == 0 {
		t.Fatalf("no Node version written %s: the check proves nothing", when)
	}
	for i, n := range evs {
		if !ok(n) {
			t.Errorf("version %d (rv %s) %s lost %s: %s", i, n.ResourceVersion, when, what, describe(n))
		}
	}
}

// checkForeignSurvived fails t for every watched version of the Node that
// lost the foreign taint or condition.
func checkForeignSurvived(t *testing.T, w *nodeWatch) {
	t.Helper()
	evs := w.seen()
	if len(evs) == 0 {
		t.Fatalf("the watch saw no update at all; the test proves nothing")
	}
	for i, n := range evs {
		if !hasTaint(n, foreignTaint) {
			t.Errorf("update %d (rv %s) lost the foreign taint: %s", i, n.ResourceVersion, describe(n))
		}
		if c := condition(n, foreignCondition.Type); c == nil || c.Status != foreignCondition.Status || c.Reason != foreignCondition.Reason {
			t.Errorf("update %d (rv %s) changed the foreign condition: %s", i, n.ResourceVersion, describe(n))
		}
	}
}

func withForeign(n *corev1.Node) {
	n.Spec.Taints = []corev1.Taint{foreignTaint}
	c := foreignCondition
	c.LastHeartbeatTime = metav1.Now()
	c.LastTransitionTime = metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{c}
}

// flipAndCheck sets the probe to verdict, waits for the condition to reach
// want, and checks the flip took at least hold and that its
// lastTransitionTime (stored with second precision) lies between the
// earliest allowed flip and when the flip was seen. It returns the Node and
// that transition time.
func flipAndCheck(t *testing.T, c kubernetes.Interface, node string, p *switchProbe, verdict probes.Status, want corev1.ConditionStatus, hold time.Duration) (*corev1.Node, time.Time) {
	t.Helper()
	start := time.Now()
	p.set(verdict)
	n := waitNode(t, c, node, 20*time.Second, "condition "+string(want), conditionIs(want))
	seen := time.Now()
	if got := seen.Sub(start); got < hold {
		t.Errorf("condition turned %s %s after the probe said %s, before the %s it must hold", want, got, verdict, hold)
	}
	ltt := condition(n, cond).LastTransitionTime.Time
	if earliest := start.Add(hold).Truncate(time.Second); ltt.Before(earliest) || ltt.After(seen) {
		t.Errorf("lastTransitionTime %s not within [%s, %s]", ltt, earliest, seen)
	}
	return n, ltt
}

// TestDampedFlipAndForeignSurvival walks a condition through False -> True
// -> False with damping and checks the taint follows, lastTransitionTime
// moves only on flips, and another writer's taint and condition survive
// every update.
func TestDampedFlipAndForeignSurvival(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "flip"
	created := cp.CreateNode(t, node, withForeign)
	w := startWatch(t, c, node, created.ResourceVersion)

	const forD, clearD = 2 * time.Second, 3 * time.Second
	p := newSwitchProbe(probes.StatusOK)
	runAgent(t, c, node, p, agentOpts{damping: taints.Damping{For: forD, ClearAfter: clearD}})

	n := waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))
	ltt0 := condition(n, cond).LastTransitionTime.Time
	if hasTaint(n, ourTaint) {
		t.Fatalf("tainted while healthy: %s", describe(n))
	}

	// A problem must hold for `for` before the condition turns True.
	_, ltt1 := flipAndCheck(t, c, node, p, probes.StatusProblem, corev1.ConditionTrue, forD)
	if !ltt1.After(ltt0) {
		t.Errorf("lastTransitionTime %s did not move on the flip (was %s)", ltt1, ltt0)
	}
	n = waitNode(t, c, node, 10*time.Second, "our taint", func(n *corev1.Node) bool { return hasTaint(n, ourTaint) })
	if got := n.Annotations[taints.OwnedTaintsAnnotation]; got != taints.IDOf(ourTaint).String() {
		t.Errorf("ownership annotation = %q, want %q", got, taints.IDOf(ourTaint).String())
	}

	// Recovery must hold for clearAfter before the condition clears.
	_, ltt2 := flipAndCheck(t, c, node, p, probes.StatusOK, corev1.ConditionFalse, clearD)
	n = waitNode(t, c, node, 10*time.Second, "our taint removed", func(n *corev1.Node) bool { return !hasTaint(n, ourTaint) })
	// The record stays, empty, so later writes can test it (patch.go).
	if got, ok := n.Annotations[taints.OwnedTaintsAnnotation]; !ok || got != "" {
		t.Errorf("ownership annotation = %q (present %v) with nothing owned, want \"\"", got, ok)
	}
	// While the condition stays False, its transition time stays put.
	time.Sleep(500 * time.Millisecond)
	if got := condition(getNode(t, c, node), cond).LastTransitionTime.Time; !got.Equal(ltt2) {
		t.Errorf("lastTransitionTime moved from %s to %s without a flip", ltt2, got)
	}
	checkForeignSurvived(t, w)
}

// TestConcurrentForeignTaintAndRestore makes another writer add a taint
// between the agent's read and its write (the API server must answer 409
// and the agent must re-read), then deletes the agent's taint while its
// condition holds and expects it back with an Event saying why.
func TestConcurrentForeignTaintAndRestore(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "race"
	created := cp.CreateNode(t, node, withForeign)
	w := startWatch(t, c, node, created.ResourceVersion)

	racer := corev1.Taint{Key: "example.com/maintenance", Value: "kubectl", Effect: corev1.TaintEffectNoSchedule}
	var raced atomic.Bool
	hook := func(ctx context.Context, read *corev1.Node) {
		if raced.Swap(true) {
			return
		}
		// A person runs kubectl taint now, after the agent read the Node.
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Errorf("racer get: %v", err)
			return
		}
		n.Spec.Taints = append(n.Spec.Taints, racer)
		if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Errorf("racer update: %v", err)
		}
	}
	p := newSwitchProbe(probes.StatusProblem)
	a, _ := runAgent(t, c, node, p, agentOpts{hook: hook})

	n := waitNode(t, c, node, 20*time.Second, "our taint", func(n *corev1.Node) bool { return hasTaint(n, ourTaint) })
	if !raced.Load() {
		t.Fatalf("the hook never ran; the race was not exercised")
	}
	if !hasTaint(n, racer) || !hasTaint(n, foreignTaint) {
		t.Fatalf("a foreign taint was lost: %s", describe(n))
	}
	if got := a.Stats().Conflicts; got < 1 {
		t.Errorf("conflicts = %d, want at least 1: the write after the racer must have been refused", got)
	}

	// Someone removes our taint while the condition holds: it comes back.
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taintKey })
	if _, err := c.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("removing our taint: %v", err)
	}
	n = waitNode(t, c, node, 10*time.Second, "our taint restored", func(n *corev1.Node) bool { return hasTaint(n, ourTaint) })
	if !hasTaint(n, racer) || !hasTaint(n, foreignTaint) {
		t.Fatalf("a foreign taint was lost on restore: %s", describe(n))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, err := c.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": node, "reason": "TaintRestored"}.String(),
		})
		if err == nil && len(evs.Items) > 0 {
			t.Logf("event: %s", evs.Items[0].Message)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TaintRestored event (err %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkForeignSurvived(t, w)
}

// TestRestartKeepsTaint restarts the agent while its condition holds and
// checks that no version of the Node a watch sees lacks our taint, that
// lastTransitionTime survives, and that a restart with the problem gone still
// waits clearAfter before lifting the taint.
func TestRestartKeepsTaint(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "restart"
	cp.CreateNode(t, node, withForeign)
	damping := taints.Damping{For: 2 * time.Second, ClearAfter: 3 * time.Second}

	p := newSwitchProbe(probes.StatusProblem)
	_, stop1 := runAgent(t, c, node, p, agentOpts{damping: damping, heartbeat: time.Second})
	n := waitNode(t, c, node, 20*time.Second, "our taint", func(n *corev1.Node) bool {
		return hasTaint(n, ourTaint) && conditionIs(corev1.ConditionTrue)(n)
	})
	ltt := condition(n, cond).LastTransitionTime
	stop1()

	// Restart with the problem still there. The heartbeat makes the new
	// agent write, so the watch has updates to inspect.
	w := startWatch(t, c, node, getNode(t, c, node).ResourceVersion)
	_, stop2 := runAgent(t, c, node, p, agentOpts{damping: damping, heartbeat: time.Second})
	time.Sleep(2*damping.For + time.Second)
	stop2()
	evs := w.seen()
	if len(evs) == 0 {
		t.Fatalf("the restarted agent wrote nothing in %s despite a 1s heartbeat", 2*damping.For+time.Second)
	}
	for i, n := range evs {
		if !hasTaint(n, ourTaint) {
			t.Errorf("update %d after restart lacks our taint: %s", i, describe(n))
		}
		if c := condition(n, cond); c == nil || c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&ltt) {
			t.Errorf("update %d after restart changed the condition: %+v, want True since %s", i, c, ltt)
		}
	}
	checkForeignSurvived(t, w)

	// Restart with the problem gone: the taint stays for clearAfter, then goes.
	p.set(probes.StatusOK)
	started := time.Now()
	runAgent(t, c, node, p, agentOpts{damping: damping, heartbeat: time.Second})
	waitNode(t, c, node, 20*time.Second, "our taint removed", func(n *corev1.Node) bool { return !hasTaint(n, ourTaint) })
	if got := time.Since(started); got < damping.ClearAfter {
		t.Errorf("taint lifted %s after restart, before clearAfter=%s", got, damping.ClearAfter)
	}
}

// TestAPIServerOutage takes the API server away for 20 s while the probe
// turns bad, and expects the agent to converge once it is back, without a
// restart.
func TestAPIServerOutage(t *testing.T) {
	testcp.SkipIfShort(t, "takes over 20 s")
	t.Parallel() // on a control plane of its own: it stops that API server
	cp := testcp.Start(t, testcp.Options{})
	const node = "outage"
	cp.CreateNode(t, node, withForeign)
	// The agent gets its own client: the shared one keeps working for checks.
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := newSwitchProbe(probes.StatusOK)
	a, _ := runAgent(t, client, node, p, agentOpts{})
	waitNode(t, cp.Client(), node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))

	cp.StopAPIServer()
	p.set(probes.StatusProblem)
	time.Sleep(20 * time.Second)
	syncsDuringOutage := a.Stats().Syncs
	cp.StartAPIServer()
	back := time.Now()
	n := waitNode(t, cp.Client(), node, 30*time.Second, "condition True and our taint after the outage", func(n *corev1.Node) bool {
		return conditionIs(corev1.ConditionTrue)(n) && hasTaint(n, ourTaint)
	})
	t.Logf("converged %s after the API server came back (%d syncs tried during the outage)", time.Since(back).Round(100*time.Millisecond), syncsDuringOutage)
	if !hasTaint(n, foreignTaint) {
		t.Errorf("foreign taint lost: %s", describe(n))
	}
}

// settledStats waits until the agent's write counts have not moved for a
// second and returns its stats. The agent counts a write once the API
// server has answered it, so a watch can show a write before the counter
// does: a test that counts writes from a state it saw on the Node starts
// from the settled count.
func settledStats(t *testing.T, a *agent.Agent) agent.Stats {
	t.Helper()
	last, since := a.Stats(), time.Now()
	for deadline := time.Now().Add(15 * time.Second); time.Since(since) < time.Second; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent's writes did not settle in 15s: %+v", last)
		}
		if got := a.Stats(); got.ConditionWrites != last.ConditionWrites || got.TaintWrites != last.TaintWrites {
			last, since = got, time.Now()
		}
	}
	return last
}

// TestNoWritesWhenNothingChanges checks the agent is silent between
// heartbeats: probes keep running, the Node sees no update.
func TestNoWritesWhenNothingChanges(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "quiet"
	cp.CreateNode(t, node, withForeign)
	p := newSwitchProbe(probes.StatusProblem)
	a, _ := runAgent(t, c, node, p, agentOpts{interval: 50 * time.Millisecond})
	waitNode(t, c, node, 20*time.Second, "our taint", func(n *corev1.Node) bool { return hasTaint(n, ourTaint) })
	before := settledStats(t, a)
	runsBefore := a.ProbeStats()[0].Runs
	w := startWatch(t, c, node, getNode(t, c, node).ResourceVersion)
	time.Sleep(3 * time.Second)
	after := a.Stats()
	if runs := a.ProbeStats()[0].Runs - runsBefore; runs < 10 {
		t.Fatalf("probe ran only %d times in 3s; the test proves nothing", runs)
	}
	if after.ConditionWrites != before.ConditionWrites || after.TaintWrites != before.TaintWrites {
		t.Errorf("writes while nothing changed: before %+v, after %+v", before, after)
	}
	if evs := w.seen(); len(evs) != 0 {
		t.Errorf("the Node changed %d times while nothing changed; first: %s", len(evs), describe(evs[0]))
	}
}

// newBenchAgent runs an agent whose probe runs once at start and then only
// every hour, so the benchmark drives verdicts through Observe.
func newBenchAgent(b *testing.B, c kubernetes.Interface, node string, p probes.Probe) *agent.Agent {
	a, _ := startAgent(b, agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes: []agent.ProbeSpec{{
			Entry:     probes.Entry{Probe: p, Interval: time.Hour, Timeout: time.Minute},
			Condition: cond,
		}},
		Rules:  rules,
		Logger: slog.New(slog.DiscardHandler),
	})
	return a
}
