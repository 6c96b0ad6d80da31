package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	coordinationv1 "k8s.io/api/coordination/v1"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// patchTaintsAsKubectl writes list as the Node's whole spec.taints the way
// `kubectl taint` does: a strategic merge patch of the list, without
// resourceVersion, so the API server applies it whatever changed since the
// list was read.
func patchTaintsAsKubectl(t *testing.T, c kubernetes.Interface, node string, list []corev1.Taint) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": list}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "resourceVersion") {
		t.Fatalf("the stale patch carries a resourceVersion: %s", body)
	}
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching the stale taint list: %v", err)
	}
}

// recorded reports whether the Node's ownership record names id.
func recorded(n *corev1.Node, id taints.TaintID) bool {
	owned, err := taints.ParseOwned(n.Annotations[taints.OwnedTaintsAnnotation])
	return err == nil && slices.Contains(owned, id)
}

// rvOf is a resourceVersion as a number, to order the versions of one
// object a watch delivers.
func rvOf(t *testing.T, n *corev1.Node) uint64 {
	t.Helper()
	rv, err := strconv.ParseUint(n.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", n.ResourceVersion, err)
	}
	return rv
}

// waitWatched waits until the watch has delivered a version of the Node
// newer than after for which ok holds, and returns it.
func waitWatched(t *testing.T, w *nodeWatch, after *corev1.Node, timeout time.Duration, what string, ok func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	var found *corev1.Node
	err := testcp.Poll(context.Background(), timeout, 20*time.Millisecond, func() (bool, error) {
		for _, n := range w.seen() {
			if rvOf(t, n) > rvOf(t, after) && ok(n) {
				found = n
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		evs := w.seen()
		var last *corev1.Node
		if len(evs) > 0 {
			last = evs[len(evs)-1]
		}
		t.Fatalf("the watch never saw %s: %v; last: %s", what, err, describe(last))
	}
	return found
}

// TestStaleTaintListDoesNotOrphanOurTaint recreates, on a real API server,
// the race `kubectl taint` loses against the agent: kubectl reads the Node,
// the agent then removes its taint and drops it from its ownership record,
// and kubectl's patch of the whole taint list (its new taint added to the
// stale list, no resourceVersion) puts the agent's taint back, unrecorded.
// Our key is selftaint's by key, so the agent removes it again, and keeps
// kubectl's taint and the foreign one. Then the same with the agent down:
// the stale list lands while no agent runs, the condition is True when the
// next one starts, and that agent adopts the taint (no TaintHeldByOther),
// records it, and lifts it when the condition clears.
func TestStaleTaintListDoesNotOrphanOurTaint(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "stale-list"
	created := cp.CreateNode(t, node, withForeign)
	w := startWatch(t, c, node, created.ResourceVersion)
	ourID := taints.IDOf(ourTaint)
	kubectlTaint := corev1.Taint{Key: "example.com/maintenance", Value: "kubectl", Effect: corev1.TaintEffectNoSchedule}

	p := newSwitchProbe(probes.StatusProblem)
	_, stop := runAgent(t, c, node, p, agentOpts{})
	waitNode(t, c, node, 20*time.Second, "our taint, recorded", func(n *corev1.Node) bool { return hasTaint(n, ourTaint) && recorded(n, ourID) })

	// kubectl reads the Node: its list has our taint.
	stale := getNode(t, c, node)
	// The condition clears; the agent removes its taint and its record
	// entry. kubectl's patch waits for exactly that version.
	p.set(probes.StatusOK)
	removed := waitWatched(t, w, stale, 20*time.Second, "our taint removed and un-recorded", func(n *corev1.Node) bool {
		return !hasTaint(n, ourTaint) && !recorded(n, ourID) && hasTaint(n, foreignTaint)
	})
	t.Logf("agent removed its taint at rv %s; kubectl's list is from rv %s", removed.ResourceVersion, stale.ResourceVersion)
	patchTaintsAsKubectl(t, c, node, append(slices.Clone(stale.Spec.Taints), kubectlTaint))
	back := waitWatched(t, w, removed, 10*time.Second, "our taint put back by the stale list", func(n *corev1.Node) bool {
		return hasTaint(n, ourTaint) && hasTaint(n, kubectlTaint)
	})
	if recorded(back, ourID) {
		t.Fatalf("the stale patch carried the record too; the test proves nothing: %s", describe(back))
	}

	n := waitNode(t, c, node, 10*time.Second, "our taint removed again", func(n *corev1.Node) bool { return !hasTaint(n, ourTaint) })
	if !hasTaint(n, kubectlTaint) || !hasTaint(n, foreignTaint) {
		t.Fatalf("a foreign taint was lost: %s", describe(n))
	}
	if recorded(n, ourID) {
		t.Errorf("record names a taint that is gone: %s", describe(n))
	}
	stop()

	// The agent is down: a stale list puts our taint back again, and the
	// problem returns before the next agent starts.
	stale = getNode(t, c, node)
	patchTaintsAsKubectl(t, c, node, append(slices.Clone(stale.Spec.Taints), ourTaint))
	p.set(probes.StatusProblem)
	runAgent(t, c, node, p, agentOpts{})
	n = waitNode(t, c, node, 20*time.Second, "our taint adopted and recorded by the next agent", func(n *corev1.Node) bool {
		return hasTaint(n, ourTaint) && recorded(n, ourID) && conditionIs(corev1.ConditionTrue)(n)
	})
	if got := len(slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return taints.IDOf(t) != ourID })); got != 1 {
		t.Errorf("our taint is on the Node %d times: %s", got, describe(n))
	}
	p.set(probes.StatusOK)
	n = waitNode(t, c, node, 20*time.Second, "our taint lifted when the condition clears", func(n *corev1.Node) bool { return !hasTaint(n, ourTaint) })
	if !hasTaint(n, kubectlTaint) || !hasTaint(n, foreignTaint) {
		t.Fatalf("a foreign taint was lost: %s", describe(n))
	}
	if evs := nodeEvents(t, c, node, "TaintHeldByOther"); len(evs) > 0 {
		t.Errorf("the agent called its own key another writer's: %s", evs[0].Message)
	}

	checkForeignSurvived(t, w)
	for i, v := range w.seen() {
		if rvOf(t, v) >= rvOf(t, back) && !hasTaint(v, kubectlTaint) {
			t.Errorf("update %d (rv %s) lost kubectl's taint: %s", i, v.ResourceVersion, describe(v))
		}
	}
}

// startEvictAgent runs an agent with the NoExecute rule (evictRules) that
// reads its grant and the guard in coordNS(node). and returns its stop
// function.
func startEvictAgent(t *testing.T, c kubernetes.Interface, node string, p probes.Probe) func() {
	t.Helper()
	return startEvictAgentOn(t, c, c.CoordinationV1(), node, p)
}

// startEvictAgentOn is startEvictAgent reading the grant through leases.
func startEvictAgentOn(t *testing.T, c kubernetes.Interface, leases typedcoordv1.LeasesGetter, node string, p probes.Probe) func() {
	t.Helper()
	_, stop := startAgent(t, agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes: []agent.ProbeSpec{{
			Entry:     probes.Entry{Probe: p, Interval: 100 * time.Millisecond, Timeout: 90 * time.Millisecond},
			Condition: cond,
		}},
		Rules: evictRules,
		NoExecute: &agent.NoExecuteOptions{
			Leases: leases, Namespace: coordNS(node), GuardName: fleet.DefaultGuardName,
			GrantTTL: 15 * time.Second, GuardStaleAfter: 20 * time.Second,
		},
	})
	return stop
}

// renewGrant renews node's grant Lease now, as the coordinator would.
func renewGrant(t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	leases := c.CoordinationV1().Leases(coordNS(node))
	l, err := leases.Get(context.Background(), fleet.GrantName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the grant of %s: %v", node, err)
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("renewing the grant of %s: %v", node, err)
	}
}

// withoutTaint is list without the taint of id.
func withoutTaint(list []corev1.Taint, id taints.TaintID) []corev1.Taint {
	return slices.DeleteFunc(slices.Clone(list), func(t corev1.Taint) bool { return taints.IDOf(t) == id })
}

// TestRestoredNoExecuteKeepsTimeAdded deletes the agent's NoExecute taint by
// hand (as `kubectl taint node N key:NoExecute-` does) while its condition
// holds and its grant lasts, and expects it back with the timeAdded it
// first had, from the ownership record: a new one would restart every
// tolerating pod's eviction clock. Then again with the agent down when the
// taint is deleted: the next agent restores the same timeAdded. A watch
// checks that no version of the Node ever carries the taint with another
// timeAdded.
func TestRestoredNoExecuteKeepsTimeAdded(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "ne-restore"
	created := cp.CreateNode(t, node, withForeign)
	w := startWatch(t, c, node, created.ResourceVersion)
	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now().Add(time.Minute)})
	p := newSwitchProbe(probes.StatusProblem)
	stop := startEvictAgent(t, c, node, p)
	waitNode(t, c, node, 20*time.Second, "the request", func(n *corev1.Node) bool { _, ok := request(n); return ok })
	grantLease(t, c, node, time.Now())

	id := taints.IDOf(evictTaint)
	n := waitNode(t, c, node, 10*time.Second, "NoExecute, recorded, with a grant", func(n *corev1.Node) bool {
		return hasTaint(n, evictTaint) && recorded(n, id)
	})
	first := findTaint(n, id)
	if first.TimeAdded == nil {
		t.Fatalf("the NoExecute taint has no timeAdded: %+v", first)
	}
	t0 := first.TimeAdded.UTC()
	wantEntry := id.String() + "@" + t0.Format(time.RFC3339)
	if rec := n.Annotations[taints.OwnedTaintsAnnotation]; !strings.Contains(rec, wantEntry) {
		t.Errorf("record = %q, want it to hold %q", rec, wantEntry)
	}
	// Past the second of t0: a fresh stamp would now differ.
	time.Sleep(time.Until(t0.Add(1500 * time.Millisecond)))

	patchTaintsAsKubectl(t, c, node, withoutTaint(n.Spec.Taints, id))
	waitWatched(t, w, n, 10*time.Second, "the NoExecute taint deleted by hand", func(n *corev1.Node) bool {
		return !hasTaint(n, evictTaint) && hasTaint(n, fallbackTaint)
	})
	n = waitNode(t, c, node, 10*time.Second, "NoExecute restored", func(n *corev1.Node) bool { return hasTaint(n, evictTaint) })
	if got := findTaint(n, id).TimeAdded; got == nil || !got.UTC().Equal(t0) {
		t.Errorf("restored timeAdded = %v, want the original %s", got, t0)
	}
	waitEvent(t, c, node, "TaintRestored", 10*time.Second, taints.Format(evictTaint))

	// Again with the agent down when the taint goes: only the record
	// remembers.
	stop()
	renewGrant(t, c, node)
	patchTaintsAsKubectl(t, c, node, withoutTaint(getNode(t, c, node).Spec.Taints, id))
	time.Sleep(time.Second)
	startEvictAgent(t, c, node, p)
	n = waitNode(t, c, node, 20*time.Second, "NoExecute restored by the next agent", func(n *corev1.Node) bool { return hasTaint(n, evictTaint) })
	if got := findTaint(n, id).TimeAdded; got == nil || !got.UTC().Equal(t0) {
		t.Errorf("timeAdded restored after a restart = %v, want the original %s", got, t0)
	}

	deleteGrant(t, c, node)
	p.set(probes.StatusOK)
	waitNode(t, c, node, 20*time.Second, "taints gone", func(n *corev1.Node) bool {
		return !hasTaint(n, evictTaint) && !hasTaint(n, fallbackTaint)
	})
	checkForeignSurvived(t, w)
	for i, v := range w.seen() {
		if tt := findTaint(v, id); tt != nil && (tt.TimeAdded == nil || !tt.TimeAdded.UTC().Equal(t0)) {
			t.Errorf("update %d (rv %s) carries NoExecute with timeAdded %v, want %s", i, v.ResourceVersion, tt.TimeAdded, t0)
		}
	}
}

// slowLeases lists Leases only after delay: a grant whose first list comes
// after the guard's.
type slowLeases struct {
	typedcoordv1.LeasesGetter
	delay time.Duration
}

func (s slowLeases) Leases(ns string) typedcoordv1.LeaseInterface {
	return slowLeaseList{LeaseInterface: s.LeasesGetter.Leases(ns), delay: s.delay}
}

type slowLeaseList struct {
	typedcoordv1.LeaseInterface
	delay time.Duration
}

func (s slowLeaseList) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.LeaseInterface.List(ctx, opts)
}

// TestRestartedAgentWaitsForItsGrantList: an agent restarted while its
// NoExecute taint is gone (deleted by hand), whose grant is listed half a
// second after the guard, restores the taint with its original timeAdded:
// until the grant is listed it is not "no grant" (the fallback in its
// place, and the taint back later with a new timeAdded, restarting every
// tolerating pod's eviction clock).
func TestRestartedAgentWaitsForItsGrantList(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "ne-restore-slow-grant"
	created := cp.CreateNode(t, node, withForeign)
	w := startWatch(t, c, node, created.ResourceVersion)
	writeGuard(t, c, node, fleet.GuardState{RenewTime: time.Now().Add(time.Minute)})
	p := newSwitchProbe(probes.StatusProblem)
	stop := startEvictAgent(t, c, node, p)
	waitNode(t, c, node, 20*time.Second, "the request", func(n *corev1.Node) bool { _, ok := request(n); return ok })
	grantLease(t, c, node, time.Now())
	id := taints.IDOf(evictTaint)
	n := waitNode(t, c, node, 10*time.Second, "NoExecute, recorded, with a grant", func(n *corev1.Node) bool {
		return hasTaint(n, evictTaint) && recorded(n, id)
	})
	t0 := findTaint(n, id).TimeAdded.UTC()
	time.Sleep(time.Until(t0.Add(1500 * time.Millisecond))) // a fresh stamp would now differ

	stop()
	renewGrant(t, c, node)
	patchTaintsAsKubectl(t, c, node, withoutTaint(getNode(t, c, node).Spec.Taints, id))
	startEvictAgentOn(t, c, slowLeases{LeasesGetter: c.CoordinationV1(), delay: 500 * time.Millisecond}, node, p)
	n = waitNode(t, c, node, 20*time.Second, "NoExecute restored by the next agent", func(n *corev1.Node) bool { return hasTaint(n, evictTaint) })
	if got := findTaint(n, id).TimeAdded; got == nil || !got.UTC().Equal(t0) {
		t.Errorf("timeAdded restored after a restart = %v, want the original %s", got, t0)
	}
	for i, v := range w.seen() {
		if tt := findTaint(v, id); tt != nil && (tt.TimeAdded == nil || !tt.TimeAdded.UTC().Equal(t0)) {
			t.Errorf("update %d (rv %s) carries NoExecute with timeAdded %v, want %s", i, v.ResourceVersion, tt.TimeAdded, t0)
		}
	}
}

// findTaint is the Node's taint of id, or nil.
func findTaint(n *corev1.Node, id taints.TaintID) *corev1.Taint {
	for i := range n.Spec.Taints {
		if taints.IDOf(n.Spec.Taints[i]) == id {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}
