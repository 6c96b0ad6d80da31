package main

// End-to-end tests of maintenance drains: one control plane with
// kube-controller-manager (the ReplicaSet, StatefulSet, DaemonSet,
// disruption and node lifecycle controllers) and kube-scheduler, virtual
// nodes (`selftaint virtual` processes, each node's agent included), the
// real `selftaint coordinator` and the real `selftaint drain` command. A
// watch on every version of the Nodes, the slot Leases and the pods checks
// the maintenance pool and the PodDisruptionBudgets at each one, not just
// the end state. The harness is in drainwatch_test.go and stormhelp_test.go.

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints/fleet"
)

// TestDrainE2E runs the drain tests in turn on one control plane and one
// coordinator (they share the maintenance pool, so one at a time; each
// deletes its nodes when it ends). LeaderKilled replaces the coordinator
// with two replicas of short leader election, so it runs last.
func TestDrainE2E(t *testing.T) {
	testcp.SkipIfShort(t, "drains virtual nodes on a control plane with kube-controller-manager and kube-scheduler")
	t.Parallel()
	cp := testcp.Start(t, testcp.Options{ControllerManager: true, Scheduler: true,
		ControllerManagerArgs: []string{"--node-monitor-grace-period=" + nodeGrace.String()}})
	e := &drainEnv{cp: cp, c: cp.Client(), cfg: writeDrainConfig(t), kc: "--kubeconfig=" + cp.KubeconfigPath}
	e.coord = startCoordinator(t, cp, e.cfg, "coord-1")
	waitLeader(t, e.c, e2eWait, e.coord)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *drainEnv)
	}{
		{"NodeDrained", testNodeDrained},
		{"PDBAllowsNone", testPDBAllowsNone},
		{"PoolOfTen", testPoolOfTen},
		{"ActionDrain", testActionDrain},
		{"LeaderKilled", testLeaderKilled},
	} {
		began := time.Now()
		t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
		t.Logf("%s took %s", tc.name, time.Since(began).Round(time.Second))
	}
}

// testNodeDrained: a node with pods of a Deployment, a DaemonSet pod, a
// bare pod, and a StatefulSet of 3 behind a PodDisruptionBudget of
// maxUnavailable 1, drained by `selftaint drain --evict-unreplicated
// --wait`: every pod but the DaemonSet's is evicted through the Eviction
// API (the Deployment's and StatefulSet's recreated on the other nodes by
// their controllers and the scheduler), a watch on the StatefulSet's pods
// never sees more than one unavailable, and the node ends Drained, cordoned
// by selftaint (spec.unschedulable, what `kubectl get nodes` shows as
// SchedulingDisabled, and the cordon record), while the command prints its
// progress and exits 0. A node cordoned by someone else, drained with the
// default request, keeps its bare pod and its condition names it as having
// no controller. `drain --done` uncordons the first and leaves the second
// cordoned.
func testNodeDrained(t *testing.T, e *drainEnv) {
	const g = "e2e-drained"
	_, nodes := e.nodes(t, g, "dr-", 4)
	target, theirs := nodes[0], nodes[3]
	ns := e.namespace(t, g)
	spec := podSpec(g, 5)
	e.cordon(t, theirs, true) // someone else's, before its drain
	e.daemonSet(t, ns, "ds", spec)
	e.only(t, nodes, target, func() {
		e.deployment(t, ns, "web", 4, spec)
		e.statefulSet(t, ns, "db", 3, spec)
		e.waitPods(t, ns, "app=web", 4, "Ready on "+target, readyOn(target))
		e.waitPods(t, ns, "app=db", 3, "Ready on "+target, readyOn(target))
	})
	one := intstr.FromInt32(1)
	e.pdb(t, ns, "db", nil, &one, 3)
	e.barePod(t, ns, "bare", target, spec)
	e.barePod(t, ns, "bare-theirs", theirs, spec)
	e.waitPods(t, ns, "app=ds", len(nodes), "Ready, one per node", readyOn(""))
	e.waitPods(t, ns, "app in (bare, bare-theirs)", 2, "Ready", readyOn(""))
	w := watchDrains(t, e.c, ns, drainPool)
	w.budget("db", 3, 1)

	// The default request leaves a pod no controller manages, and says so.
	if code, out, errs := runCLI(t, "drain", theirs, "--reason", "e2e-default", e.kc); code != 0 {
		t.Fatalf("selftaint drain %s: exit %d; stdout %q; stderr %q", theirs, code, out, errs)
	}
	leftBare := ns + "/bare-theirs has no controller (evictUnreplicated not set)"
	w.waitNode(t, theirs, e2eWait, "DrainBlocked naming its bare pod", func(s nodeSeen) bool {
		return s.is(corev1.ConditionTrue, fleet.ReasonDrainBlocked) && strings.Contains(s.cond.Message, leftBare)
	})

	began := time.Now()
	out, errs, done := startCLI(t.Context(), "drain", target, "--reason", "e2e-maintenance", "--evict-unreplicated", "--wait", "--timeout", "2m", e.kc)
	if code := waitExit(t, done); code != 0 {
		t.Fatalf("selftaint drain --wait %s: exit %d, want 0; stdout:\n%s\nstderr: %s\nits versions:%s", target, code, out, errs, w.timeline(target))
	}
	t.Logf("%s drained in %s; selftaint drain printed:\n%s", target, time.Since(began).Round(time.Millisecond), out)
	for _, want := range []string{target + "  Draining", target + "  Drained    evicted 8 of 8 pods", "every node is Drained (1)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("selftaint drain --wait printed no %q:\n%s", want, out)
		}
	}
	checkDrainedCordoned(t, w, target)

	// Every pod but the DaemonSet's was evicted through the Eviction API;
	// the controllers' pods run elsewhere, the bare pod is gone.
	e.waitPods(t, ns, "app=web", 4, "Ready off "+target, readyOff(target))
	e.waitPods(t, ns, "app=db", 3, "Ready off "+target, readyOff(target))
	e.waitPods(t, ns, "app=ds", 1, "Ready on "+target, readyOn(target))
	if _, err := e.c.CoreV1().Pods(ns).Get(t.Context(), "bare", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the bare pod on %s: %v, want it gone (evicted, --evict-unreplicated)", target, err)
	}
	checkEvicted(t, w, target, 8)
	w.check(t)

	// --done: ours is uncordoned; theirs stays cordoned.
	if code, out, errs := runCLI(t, "drain", "--done", target, theirs, e.kc); code != 0 {
		t.Fatalf("selftaint drain --done: exit %d; stdout %q; stderr %q", code, out, errs)
	}
	doneAt := time.Now()
	w.waitNode(t, target, e2eWait, "Released and uncordoned", func(s nodeSeen) bool {
		return s.is(corev1.ConditionFalse, fleet.ReasonReleased) && !s.unschedulable && s.cordonedFor == ""
	})
	w.waitNode(t, theirs, e2eWait, "Released", func(s nodeSeen) bool { return s.is(corev1.ConditionFalse, fleet.ReasonReleased) })
	for _, s := range w.since(theirs, time.Time{}) {
		if !s.unschedulable || s.cordonedFor != "" {
			t.Errorf("%s, cordoned by someone else, was changed by the drain: %s", theirs, s)
		}
	}
	if got := nodeNow(t, e.c, theirs); !got.Spec.Unschedulable {
		t.Errorf("%s is schedulable %s after --done; someone else cordoned it", theirs, time.Since(doneAt).Round(time.Millisecond))
	}
}

// checkEvicted checks what the watch saw of the pods that were on node:
// want of them evicted through the Eviction API (a version carries its
// DisruptionTarget condition), the DaemonSet's (app=ds) never deleted.
func checkEvicted(t *testing.T, w *drainWatch, node string, want int) {
	t.Helper()
	var onNode map[types.UID][]*corev1.Pod
	var evicted, other []string
	err := testcp.Poll(t.Context(), e2eWait, 50*time.Millisecond, func() (bool, error) {
		onNode = w.podsWhere(func(p *corev1.Pod) bool { return p.Spec.NodeName == node })
		evicted, other = nil, nil
		for _, vs := range onNode {
			switch p := vs[0]; {
			case p.Labels["app"] == "ds" && terminating(vs):
				t.Fatalf("the DaemonSet pod %s on %s was deleted", p.Name, node)
			case p.Labels["app"] == "ds":
			case evictedByAPI(vs):
				evicted = append(evicted, p.Name)
			default:
				other = append(other, p.Name)
			}
		}
		return len(evicted) == want, nil
	})
	if err != nil {
		t.Errorf("%d pods evicted from %s through the Eviction API (%v), want %d; not evicted: %v (of %v)", len(evicted), node, evicted, want, other, podNames(onNode))
	}
}

// checkDrainedCordoned checks what the watch saw of node's drain: Draining
// first, then Drained, and cordoned by selftaint from the start of the
// drain to Drained.
func checkDrainedCordoned(t *testing.T, w *drainWatch, node string) {
	t.Helper()
	drained := w.waitSeen(t, node, e2eWait, "Drained", func(s nodeSeen) bool { return s.is(corev1.ConditionTrue, fleet.ReasonDrained) })
	draining, ok := w.first(node, func(s nodeSeen) bool { return s.is(corev1.ConditionTrue, fleet.ReasonDraining) })
	if !ok || draining.at.After(drained.at) {
		t.Errorf("the watch did not see %s Draining before Drained:%s", node, w.timeline(node))
		return
	}
	for _, s := range w.since(node, draining.at) {
		if s.at.After(drained.at) {
			break
		}
		if !s.unschedulable || !strings.HasPrefix(s.cordonedFor, "operator/") {
			t.Errorf("%s not cordoned by selftaint while it drained: %s", node, s)
		}
	}
	if !strings.HasPrefix(drained.cond.Message, "evicted ") {
		t.Errorf("%s's Drained condition says %q, want the count evicted", node, drained.cond.Message)
	}
}

// testPDBAllowsNone: two nodes each with a pod whose PodDisruptionBudget
// allows no disruption, drained with deadlines, fill the pool of 2, and a
// third node waits. Within 10 s of its slot (so of the first refusal) the
// condition names the pod, the budget and disruptionsAllowed 0. At the
// deadline with release the node is DrainBlocked (False), uncordoned, its
// slot given back (holder cleared, phase Ended) and the waiting node
// starts at once; `drain --wait` exits 1 naming the budget. At the
// deadline with force the pod is deleted with its own grace period (never
// before the deadline) and the node ends Drained.
func testPDBAllowsNone(t *testing.T, e *drainEnv) {
	const g = "e2e-pdb"
	const forceGrace = 7
	_, nodes := e.nodes(t, g, "pdb-", 3)
	rel, frc, behind := nodes[0], nodes[1], nodes[2]
	ns := e.namespace(t, g)
	e.deployment(t, ns, "stuck-rel", 1, pinned(g, rel, 5))
	e.deployment(t, ns, "stuck-force", 1, pinned(g, frc, forceGrace))
	e.waitPods(t, ns, "app=stuck-rel", 1, "Ready on "+rel, readyOn(rel))
	forced := e.waitPods(t, ns, "app=stuck-force", 1, "Ready on "+frc, readyOn(frc))[0]
	all := intstr.FromInt32(1)
	e.pdb(t, ns, "stuck-rel", &all, nil, 1)
	e.pdb(t, ns, "stuck-force", &all, nil, 1)
	w := watchDrains(t, e.c, ns, drainPool)

	ctx := t.Context()
	relOut, relErr, relDone := startCLI(ctx, "drain", rel, "--reason", "e2e-release", "--deadline", "15s", "--wait", e.kc)
	frcOut, frcErr, frcDone := startCLI(ctx, "drain", frc, "--reason", "e2e-force", "--deadline", "25s", "--on-deadline", "force", "--wait", e.kc)
	inSlot := func(s nodeSeen) bool {
		return s.cond.Status == corev1.ConditionTrue && (s.cond.Reason == fleet.ReasonDraining || s.cond.Reason == fleet.ReasonDrainBlocked)
	}
	w.waitSeen(t, rel, e2eWait, "draining", inSlot)
	w.waitSeen(t, frc, e2eWait, "draining", inSlot)
	behindOut, behindErr, behindDone := startCLI(ctx, "drain", behind, "--reason", "e2e-behind", "--wait", e.kc)
	w.waitSeen(t, behind, e2eWait, "Waiting: the pool is full", func(s nodeSeen) bool {
		return s.is(corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting) && strings.Contains(s.cond.Message, "the maintenance pool is full")
	})

	// Within 10 s of the first refusal, the condition says who blocks.
	starts := w.startsOf(rel)
	if len(starts) != 1 {
		t.Fatalf("%s's slot started %d times, want 1", rel, len(starts))
	}
	pdb := ns + "/stuck-rel-pdb"
	told := w.waitSeen(t, rel, e2eWait, "naming the pod and its budget", func(s nodeSeen) bool {
		return strings.Contains(s.cond.Message, "refused: "+ns+"/stuck-rel-") &&
			strings.Contains(s.cond.Message, "by PodDisruptionBudget "+pdb+" (disruptionsAllowed 0: needs 1 healthy, has 1)")
	})
	if d := told.at.Sub(starts[0].acquired); d > 10*time.Second {
		t.Errorf("%s's condition named the budget %s after its slot was taken, want within 10s: %s", rel, d, told)
	} else {
		t.Logf("%s's condition named the blocking budget %s after its slot was taken: %s", rel, d.Round(time.Millisecond), told.cond.Message)
	}

	// The deadline with release: given back, uncordoned, exit 1 naming the budget.
	if code := waitExit(t, relDone); code != 1 || !strings.Contains(relErr.String(), "DrainBlocked") || !strings.Contains(relErr.String(), pdb) {
		t.Errorf("selftaint drain --wait %s: exit %d, want 1 naming DrainBlocked and the budget; stdout:\n%s\nstderr: %s", rel, code, relOut, relErr)
	}
	end := checkGivenBack(t, w, rel, pdb, starts[0].acquired.Add(15*time.Second))

	// The waiting node starts once the slot is free, while the forced
	// drain still waits for its deadline.
	if code := waitExit(t, behindDone); code != 0 {
		t.Errorf("selftaint drain --wait %s: exit %d, want 0; stdout:\n%s\nstderr: %s", behind, code, behindOut, behindErr)
	}
	behindStarts := w.startsOf(behind) // taken long before it was Drained
	frcDrained, _ := w.first(frc, func(s nodeSeen) bool { return s.is(corev1.ConditionTrue, fleet.ReasonDrained) })
	switch {
	case len(behindStarts) != 1:
		t.Errorf("%s's slot started %d times, want 1", behind, len(behindStarts))
	case behindStarts[0].at.Before(end.at):
		t.Errorf("%s started at %s, before %s's slot was given back at %s", behind, behindStarts[0].at.Format(time.StampMilli), rel, end.at.Format(time.StampMilli))
	case !frcDrained.at.IsZero() && frcDrained.at.Before(behindStarts[0].at):
		t.Errorf("%s started only after %s was Drained, not when %s's slot was given back", behind, frc, rel)
	default:
		t.Logf("%s started %s after %s's slot was given back", behind, behindStarts[0].at.Sub(end.at).Round(time.Millisecond), rel)
	}

	// The deadline with force: the refused pod deleted with its grace period.
	if code := waitExit(t, frcDone); code != 0 {
		t.Errorf("selftaint drain --wait %s (force): exit %d, want 0; stdout:\n%s\nstderr: %s", frc, code, frcOut, frcErr)
	}
	checkForced(t, w, forced, forceGrace, w.startsOf(frc))
	w.check(t)
}

// checkGivenBack checks what the watch saw of node at its deadline with
// release: its condition False DrainBlocked naming pdb, uncordoned, its
// slot given back once (holder cleared, phase Ended), not before deadline;
// it returns the slot's end.
func checkGivenBack(t *testing.T, w *drainWatch, node, pdb string, deadline time.Time) slotEvent {
	t.Helper()
	given := w.waitNode(t, node, e2eWait, "DrainBlocked (False), uncordoned", func(s nodeSeen) bool {
		return s.is(corev1.ConditionFalse, fleet.ReasonDrainBlocked) && !s.unschedulable && s.cordonedFor == ""
	})
	if !strings.Contains(given.cond.Message, pdb) {
		t.Errorf("%s given back DrainBlocked without naming the budget: %s", node, given)
	}
	var ends []slotEvent
	if err := testcp.Poll(t.Context(), e2eWait, 50*time.Millisecond, func() (bool, error) {
		ends = w.endsOf(node)
		l := w.slot(node)
		return len(ends) > 0 && l != nil && leaseHolder(l) == "" && l.Annotations[fleet.SlotPhaseAnnotation] == fleet.PhaseEnded, nil
	}); err != nil || len(ends) != 1 {
		t.Fatalf("%s's slot after the deadline: given back %d times, want 1, Lease %+v, want its holder cleared and phase %s: %v", node, len(ends), w.slot(node), fleet.PhaseEnded, err)
	}
	if ends[0].at.Before(deadline) {
		t.Errorf("%s was given back at %s, before its deadline %s", node, ends[0].at.Format(time.StampMilli), deadline.Format(time.StampMilli))
	}
	return ends[0]
}

// checkForced checks what the watch saw of pod: deleted (not evicted) with
// grace seconds, at or after its node's deadline of 25s from its slot.
func checkForced(t *testing.T, w *drainWatch, pod corev1.Pod, grace int64, starts []slotEvent) {
	t.Helper()
	var vs []*corev1.Pod
	i := -1
	if err := testcp.Poll(t.Context(), e2eWait, 50*time.Millisecond, func() (bool, error) {
		vs = w.podsWhere(func(p *corev1.Pod) bool { return p.UID == pod.UID })[pod.UID]
		i = slices.IndexFunc(vs, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
		return i >= 0, nil
	}); err != nil {
		t.Errorf("the watch never saw %s being deleted: %v", pod.Name, err)
		return
	}
	d := vs[i]
	if d.DeletionGracePeriodSeconds == nil || *d.DeletionGracePeriodSeconds != grace {
		t.Errorf("%s deleted with grace period %v, want its terminationGracePeriodSeconds %d", pod.Name, d.DeletionGracePeriodSeconds, grace)
	}
	if evictedByAPI(vs) {
		t.Errorf("%s was evicted, though its budget allows no disruption", pod.Name)
	}
	if len(starts) == 1 {
		// deletionTimestamp is when it was deleted plus the grace period.
		deleted := d.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
		if early := starts[0].acquired.Add(25 * time.Second).Sub(deleted); early > time.Second {
			t.Errorf("%s deleted %s before its drain's deadline", pod.Name, early)
		}
	}
}

// testPoolOfTen: 10 nodes, one cordoned by someone else and one NotReady
// (its process killed: the node lifecycle controller marks it), rolled out
// by `selftaint drain --selector --max-parallel 2 --wait` with a pool of
// 2, then, after --done, again with the requests written on the Nodes
// (the pool alone holding them back): a watch never sees more than 2
// unavailable through maintenance, counting those two; the two already
// unavailable start first (they add nothing), the rest in the order asked;
// all end Drained.
func testPoolOfTen(t *testing.T, e *drainEnv) {
	const g = "e2e-pool"
	const roll = "e2e.selftaint.io/roll=yes"
	_, main := e.nodes(t, g, "pool-a", 9, roll)
	lost, lostNodes := e.nodes(t, g, "pool-b", 1, roll)
	e.nodes(t, g, "pool-spare", 2) // where the pods go at the end
	theirs, notReady := main[3], lostNodes[0]
	ns := e.namespace(t, g)
	e.deployment(t, ns, "spread", 12, podSpec(g, 1))
	e.waitPods(t, ns, "app=spread", 12, "Ready", readyOn(""))
	lost.kill(t)
	killed := time.Now()
	e.cordon(t, theirs, true)
	pollNode(t, e.c, notReady, nodeGrace+time.Minute, "NotReady", func(n *corev1.Node) bool {
		return conditionStatus(n, corev1.NodeReady) != corev1.ConditionTrue
	})
	t.Logf("%s NotReady %s after its process was killed", notReady, time.Since(killed).Round(time.Millisecond))
	w := watchDrains(t, e.c, ns, drainPool)

	out, errs, done := startCLI(t.Context(), "drain", "--selector", roll, "--reason", "e2e-rollout", "--max-parallel", "2", "--wait", "--timeout", "100s", e.kc)
	if code := waitExit(t, done); code != 0 {
		t.Fatalf("selftaint drain --selector %s --max-parallel 2: exit %d, want 0; stdout:\n%s\nstderr: %s", roll, code, out, errs)
	}
	ten := append(slices.Clone(main), notReady)
	var rest []string // in name order: the order the rollout asked
	for _, n := range ten {
		if n != theirs && n != notReady {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	drained := func(since time.Time) {
		for _, n := range ten {
			w.waitSeen(t, n, e2eWait, "Drained", func(s nodeSeen) bool { return s.at.After(since) && s.is(corev1.ConditionTrue, fleet.ReasonDrained) })
		}
	}
	drained(time.Time{})
	checkStartOrder(t, w.startsOf(""), []string{theirs, notReady}, rest)

	// Again with the requests written as GitOps would, the rest asked in
	// the reverse order and before the two already unavailable: the pool,
	// full of those two, holds the rest back (Waiting) until they have
	// drained, then serves them in the order asked.
	if code, out, errs := runCLI(t, "drain", "--done", "--selector", roll, e.kc); code != 0 {
		t.Fatalf("selftaint drain --done --selector %s: exit %d; stdout %q; stderr %q", roll, code, out, errs)
	}
	for _, n := range ten {
		w.waitNode(t, n, e2eWait, "Released", func(s nodeSeen) bool { return s.is(corev1.ConditionFalse, fleet.ReasonReleased) })
	}
	before, again := len(w.startsOf("")), time.Now()
	slices.Reverse(rest)
	asked := time.Now().Add(-time.Minute)
	for i, n := range append(slices.Clone(rest), theirs, notReady) {
		r := fleet.MaintenanceRequest{Version: fleet.MaintenanceVersion, Reason: "e2e-gitops", RequestedBy: "e2e", RequestedAt: asked.Add(time.Duration(i) * time.Second)}
		patchAnnotations(t, e.c, n, map[string]string{fleet.OperatorRequestAnnotation: r.Format()})
		if i == len(rest)-1 {
			w.waitNode(t, n, e2eWait, "Waiting for the full pool", func(s nodeSeen) bool {
				return s.request != "" && s.is(corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting) && strings.Contains(s.cond.Message, "the maintenance pool is full")
			})
		}
	}
	drained(again)
	checkStartOrder(t, w.startsOf("")[before:], []string{theirs, notReady}, rest)
	w.check(t)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.worst) != drainPool {
		t.Errorf("at most %d nodes unavailable through maintenance at once, want the pool (%d) used", len(w.worst), drainPool)
	}
}

// checkStartOrder checks that the slots started once for each node: those
// of first (already unavailable) before the others, the others in order.
func checkStartOrder(t *testing.T, starts []slotEvent, first, order []string) {
	t.Helper()
	var got []string
	for _, s := range starts {
		got = append(got, s.node)
	}
	n := len(first)
	switch {
	case len(got) != n+len(order):
		t.Errorf("slots started %v, want one for each of the %d", got, n+len(order))
	case !slices.Equal(slices.Sorted(slices.Values(got[:n])), slices.Sorted(slices.Values(first))):
		t.Errorf("slots started in the order %v, want %v (already unavailable) first", got, first)
	case !slices.Equal(got[n:], order):
		t.Errorf("slots started in the order %v, want the rest in the order asked %v", got, order)
	default:
		t.Logf("slots started in the order %v", got)
	}
}

// testActionDrain: a rule with action: drain and endWhenHealthy on a
// faulted virtual node. With the pool full (a drain blocked by a budget
// and a node cordoned by someone else) the node's agent asks and the node
// waits; its fault cleared before a slot was given, the request goes and
// nothing starts when the pool frees, while a later operator request is
// served. Faulted again, it gets a slot within the pool and drains; the
// fault cleared, its maintenance ends by itself: uncordoned, Released.
func testActionDrain(t *testing.T, e *drainEnv) {
	const g = "e2e-action"
	_, nodes := e.nodes(t, g, "act-", 4)
	sick, holder, theirs, other := nodes[0], nodes[1], nodes[2], nodes[3]
	ns := e.namespace(t, g)
	e.deployment(t, ns, "hold", 1, pinned(g, holder, 1))
	e.waitPods(t, ns, "app=hold", 1, "Ready on "+holder, readyOn(holder))
	all := intstr.FromInt32(1)
	e.pdb(t, ns, "hold", &all, nil, 1)
	e.only(t, nodes, sick, func() {
		e.deployment(t, ns, "sick", 2, podSpec(g, 1))
		e.waitPods(t, ns, "app=sick", 2, "Ready on "+sick, readyOn(sick))
	})
	e.cordon(t, theirs, true)
	w := watchDrains(t, e.c, ns, drainPool)
	if code, out, errs := runCLI(t, "drain", holder, "--reason", "e2e-hold", e.kc); code != 0 {
		t.Fatalf("selftaint drain %s: exit %d; stdout %q; stderr %q", holder, code, out, errs)
	}
	w.waitNode(t, holder, e2eWait, "DrainBlocked by its budget", func(s nodeSeen) bool { return s.is(corev1.ConditionTrue, fleet.ReasonDrainBlocked) })

	// The pool is full: the sick node asks and waits; healed, it withdraws.
	injectFaults(t, e.c, []string{sick}, 10*time.Minute)
	w.waitNode(t, sick, e2eWait, "asking, Waiting for the full pool", func(s nodeSeen) bool {
		return s.agentRequest != "" && s.is(corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting) && strings.Contains(s.cond.Message, "the maintenance pool is full")
	})
	clearFaults(t, e.c, []string{sick})
	withdrawn := w.waitNode(t, sick, e2eWait, "no longer asking, its condition False", func(s nodeSeen) bool {
		return s.agentRequest == "" && s.cond.Status == corev1.ConditionFalse
	})
	t.Logf("%s withdrew its request while it waited: %s/%s: %s", sick, withdrawn.cond.Status, withdrawn.cond.Reason, withdrawn.cond.Message)
	if code, out, errs := runCLI(t, "drain", "--done", holder, e.kc); code != 0 {
		t.Fatalf("selftaint drain --done %s: exit %d; stdout %q; stderr %q", holder, code, out, errs)
	}
	w.waitNode(t, holder, e2eWait, "Released", func(s nodeSeen) bool { return s.is(corev1.ConditionFalse, fleet.ReasonReleased) })
	// A request made after the sick node's is served; the sick node's,
	// cleared, is not.
	if code, out, errs := runCLI(t, "drain", other, "--reason", "e2e-later", "--wait", "--timeout", "90s", e.kc); code != 0 {
		t.Fatalf("selftaint drain --wait %s: exit %d; stdout %q; stderr %q", other, code, out, errs)
	}
	if s := w.startsOf(sick); len(s) > 0 {
		t.Fatalf("%s got a slot though its fault cleared before one was given:%s", sick, w.timeline(sick))
	}
	if s, ok := w.first(sick, func(s nodeSeen) bool { return s.unschedulable }); ok {
		t.Fatalf("%s was cordoned though its fault cleared before it got a slot: %s", sick, s)
	}

	// Faulted again: it drains within the pool (theirs and a free slot).
	injectFaults(t, e.c, []string{sick}, 10*time.Minute)
	w.waitNode(t, sick, e2eWait, "Drained", func(s nodeSeen) bool { return s.is(corev1.ConditionTrue, fleet.ReasonDrained) })
	e.waitPods(t, ns, "app=sick", 2, "Ready off "+sick, readyOff(sick))
	if s, ok := w.first(sick, func(s nodeSeen) bool { return s.is(corev1.ConditionTrue, fleet.ReasonDrained) }); ok && (!s.unschedulable || !strings.HasPrefix(s.cordonedFor, "agent/")) {
		t.Errorf("%s Drained but not cordoned for its agent's request: %s", sick, s)
	}
	// Healed: endWhenHealthy ends its maintenance by itself.
	healed := time.Now()
	clearFaults(t, e.c, []string{sick})
	s := w.waitNode(t, sick, e2eWait, "Released, uncordoned, no longer asking", func(s nodeSeen) bool {
		return s.agentRequest == "" && s.is(corev1.ConditionFalse, fleet.ReasonReleased) && !s.unschedulable && s.cordonedFor == ""
	})
	t.Logf("%s's maintenance ended %s after its fault was cleared: %s", sick, s.at.Sub(healed).Round(time.Millisecond), s.cond.Message)
	if err := testcp.Poll(t.Context(), e2eWait, 50*time.Millisecond, func() (bool, error) { return len(w.endsOf(sick)) > 0, nil }); err != nil || len(w.endsOf(sick)) != 1 {
		t.Errorf("%s's slot was given back %d times, want 1: %v", sick, len(w.endsOf(sick)), err)
	}
	w.check(t)
}

// testLeaderKilled: two coordinator replicas; a StatefulSet of 3 behind a
// budget of maxUnavailable 1 drained off its node, where the evicted pod
// cannot be placed again yet (no other node accepts it), so the drain is
// held by the budget after one eviction. The leader is killed (SIGKILL)
// mid-drain; the other replica takes over, resumes the drain from the count
// on the slot, and, once another node accepts the pods, completes it
// (Drained, 3 of 3 evicted; `drain --wait` exits 0). The watch on the
// StatefulSet's pods never sees more than one unavailable across the
// handover.
func testLeaderKilled(t *testing.T, e *drainEnv) {
	const g = "e2e-leader"
	const accept = "e2e.selftaint.io/accept"
	e.coord.stop(t) // it releases its leader Lease
	c2 := startFastCoordinator(t, e.cp, e.cfg, "coord-2")
	c3 := startFastCoordinator(t, e.cp, e.cfg, "coord-3")
	leader := waitLeader(t, e.c, e2eWait, c2, c3)
	_, nodes := e.nodes(t, g, "lead-", 2)
	target, spare := nodes[0], nodes[1]
	e.label(t, target, accept, "yes")
	ns := e.namespace(t, g)
	spec := podSpec(g, 5)
	spec.NodeSelector[accept] = "yes"
	e.statefulSet(t, ns, "db", 3, spec)
	e.waitPods(t, ns, "app=db", 3, "Ready on "+target, readyOn(target))
	one := intstr.FromInt32(1)
	e.pdb(t, ns, "db", nil, &one, 3)
	w := watchDrains(t, e.c, ns, drainPool)
	w.budget("db", 3, 1)

	out, errs, done := startCLI(t.Context(), "drain", target, "--reason", "e2e-handover", "--wait", "--timeout", "150s", e.kc)
	held := w.waitNode(t, target, e2eWait, "held by the budget after one eviction", func(s nodeSeen) bool {
		return strings.HasPrefix(s.cond.Message, "evicted 1 of 3 pods") && strings.Contains(s.cond.Message, ns+"/db-pdb")
	})
	if err := testcp.Poll(t.Context(), e2eWait, 50*time.Millisecond, func() (bool, error) {
		l := w.slot(target)
		return l != nil && l.Annotations[fleet.SlotProgressAnnotation] == fleet.FormatProgress(fleet.Progress{Evicted: 1, Total: 3}), nil
	}); err != nil {
		t.Fatalf("the slot of %s never recorded 1 of 3 evicted: %v (%+v)", target, err, w.slot(target))
	}
	t.Logf("killing the leader %s mid-drain: %s", leader.identity, held.cond.Message)
	leader.kill(t)
	killed := time.Now()
	other := c2
	if leader == c2 {
		other = c3
	}
	waitLeader(t, e.c, e2eWait, other)
	t.Logf("%s leads %s after the kill", other.identity, time.Since(killed).Round(time.Millisecond))
	e.label(t, spare, accept, "yes")

	if code := waitExit(t, done); code != 0 {
		t.Fatalf("selftaint drain --wait %s: exit %d, want 0; stdout:\n%s\nstderr: %s\nits versions:%s", target, code, out, errs, w.timeline(target))
	}
	drained := w.waitSeen(t, target, e2eWait, "Drained", func(s nodeSeen) bool { return s.is(corev1.ConditionTrue, fleet.ReasonDrained) })
	switch {
	case drained.at.Before(killed):
		t.Errorf("%s Drained before the leader was killed: not a handover", target)
	case !strings.HasPrefix(drained.cond.Message, "evicted 3 of 3 pods"):
		t.Errorf("%s Drained saying %q, want the count resumed: evicted 3 of 3 pods", target, drained.cond.Message)
	}
	if n := len(w.startsOf(target)); n != 1 {
		t.Errorf("%s's slot started %d times, want 1 (the new leader resumes the slot)", target, n)
	}
	e.waitPods(t, ns, "app=db", 3, "Ready on "+spare, readyOn(spare))
	checkDrainedCordoned(t, w, target)
	w.check(t)
}
