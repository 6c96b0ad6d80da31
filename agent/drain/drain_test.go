package drain_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/selftaint/selftaint/agent/drain"
	taintsdrain "github.com/selftaint/selftaint/taints/drain"
	"github.com/selftaint/selftaint/taints/fleet"
)

// TestDrainMovesDeploymentLeavesDaemonSet: a Deployment's pods are evicted
// and recreated on the other node; the DaemonSet's pod stays, and is never
// counted nor named.
func TestDrainMovesDeploymentLeavesDaemonSet(t *testing.T) {
	e := newEnv(t, 0, "a", "b")
	ctx := context.Background()
	e.cordon("b", true)
	e.deployment("web", 3, nil)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "agent"},
		Spec:       appsv1.DaemonSetSpec{Selector: selector("agent"), Template: e.template("agent", 30)},
	}
	if _, err := e.client.AppsV1().DaemonSets(e.ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := e.waitRunning("web", 3, "a")
	dsPod := e.waitRunning("agent", 1, "a")[0]
	e.waitRunning("agent", 1, "b") // a DaemonSet's pods tolerate the cordon
	e.cordon("a", true)
	e.cordon("b", false)

	d := e.drainer(e.client, "a", fleet.MaintenanceRequest{}, nil)
	reports := passUntil(t, d, false, "drained", drained)
	checkMoved(t, reports, taintsdrain.PodName(&dsPod), 3)
	after := e.waitRunning("web", 3, "b")
	for _, p := range after {
		for _, b := range before {
			if p.UID == b.UID {
				t.Errorf("pod %s was not recreated", p.Name)
			}
		}
	}
	got, err := e.client.CoreV1().Pods(e.ns).Get(ctx, dsPod.Name, metav1.GetOptions{})
	if err != nil || got.UID != dsPod.UID || got.DeletionTimestamp != nil {
		t.Errorf("the DaemonSet's pod on the drained node: %v, %v; want it untouched", got, err)
	}
}

// TestDrainLeavesBareAndEmptyDirPods: a pod with no controller and a pod
// with emptyDir data are blockers, and the drain evicts nothing else and
// says only left pods remain; a request with evictUnreplicated lets the
// bare pod go, one with deleteEmptyDirData too lets the emptyDir pods go.
func TestDrainLeavesBareAndEmptyDirPods(t *testing.T) {
	e := newEnv(t, 0, "a")
	e.deployment("scratch", 1, withEmptyDir)
	scratch := e.waitRunning("scratch", 1, "a")[0]
	e.cordon("a", true)
	bare := e.barePod("bare", "a", nil)
	both := e.barePod("bare-scratch", "a", func(p *corev1.Pod) { withEmptyDir(&p.Spec) })
	e.waitRunning("bare", 1, "a")
	e.waitRunning("bare-scratch", 1, "a")
	name := taintsdrain.PodName

	r := pass(t, e.drainer(e.client, "a", fleet.MaintenanceRequest{}, nil), false)
	want := map[string]taintsdrain.Kind{
		name(bare):     taintsdrain.KindNoController,
		name(&scratch): taintsdrain.KindEmptyDir,
		name(both):     taintsdrain.KindNoController + taintsdrain.KindEmptyDir,
	}
	if got := blockerKinds(r.Blockers); !mapsEqual(got, want) || r.Evicted != 0 || len(r.Results) != 0 || !r.OnlyLeft || r.Drained || r.Pending != 3 || len(r.Remaining) != 3 {
		t.Errorf("no flags: got %+v (blockers %v), want blockers %v, nothing evicted, only left", r, got, want)
	}
	msg := taintsdrain.Summary(r.Progress(fleet.Progress{}), r.Remaining, r.Blockers)
	if !strings.Contains(msg, name(both)+" has no controller (evictUnreplicated not set), "+name(both)+" has emptyDir data") {
		t.Errorf("summary: %s", msg)
	}

	d := e.drainer(e.client, "a", fleet.MaintenanceRequest{EvictUnreplicated: true}, nil)
	reports := passUntil(t, d, false, "only left pods remaining", func(r drain.Report) bool { return r.OnlyLeft })
	want = map[string]taintsdrain.Kind{name(&scratch): taintsdrain.KindEmptyDir, name(both): taintsdrain.KindEmptyDir}
	if got := blockerKinds(reports[len(reports)-1].Blockers); !mapsEqual(got, want) || reports[0].Evicted != 1 {
		t.Errorf("evictUnreplicated: got blockers %v, first pass %+v; want blockers %v, the bare pod evicted", got, reports[0], want)
	}

	d = e.drainer(e.client, "a", fleet.MaintenanceRequest{EvictUnreplicated: true, DeleteEmptyDirData: true}, nil)
	reports = passUntil(t, d, false, "drained", drained)
	if reports[0].Evicted != 2 || len(reports[0].Blockers) != 0 {
		t.Errorf("both flags: first pass %+v, want the two emptyDir pods evicted", reports[0])
	}
}

// checkMoved checks the reports of a drain that evicted n pods with
// nothing in its way, and never named ignored (a DaemonSet's pod).
func checkMoved(t *testing.T, reports []drain.Report, ignored string, n int) {
	t.Helper()
	evicted := 0
	for i, r := range reports {
		evicted += r.Evicted
		if slices.Contains(r.Remaining, ignored) {
			t.Errorf("pass %d names the DaemonSet's pod as remaining: %v", i, r.Remaining)
		}
		if len(r.Blockers) > 0 || r.OnlyLeft {
			t.Errorf("pass %d has blockers or says only left pods remain: %+v", i, r)
		}
	}
	if first := reports[0]; first.Evicted != n || first.Results["evicted"] != n || len(first.Remaining) != n || first.Pending != 0 || first.Next.IsZero() {
		t.Errorf("first pass: got %+v, want %d evicted, the %d remaining as they terminate, none pending, a next pass", first, n, n)
	}
	if evicted != n {
		t.Errorf("evicted %d pods in all, want %d", evicted, n)
	}
	if last := reports[len(reports)-1]; !last.Next.IsZero() || last.OnlyLeft || len(last.Remaining) != 0 {
		t.Errorf("last pass: %+v", last)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestDrainStatefulSetBehindPDB: a StatefulSet of three behind a budget
// of maxUnavailable 1 is drained by repeated passes, and a watch of its
// pods never sees more than one of them unavailable (the Eviction API
// refuses the rest until the moved pod is Ready again).
func TestDrainStatefulSetBehindPDB(t *testing.T) {
	e := newEnv(t, 0, "a", "b")
	ctx := context.Background()
	e.cordon("b", true)
	const replicas = 3
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptrTo[int32](replicas), Selector: selector("db"), Template: e.template("db", 30),
			ServiceName: "db", PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
	if _, err := e.client.AppsV1().StatefulSets(e.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning("db", replicas, "a")
	one := intstr.FromInt32(1)
	e.pdb("db", nil, &one, replicas)
	e.cordon("a", true)
	e.cordon("b", false)

	var mu sync.Mutex
	available := map[string]bool{} // pod name -> Ready and not terminating
	worst, seen := 0, 0
	var history []string
	stop := e.watchPods("app=db", func(p *corev1.Pod, deleted bool) {
		mu.Lock()
		defer mu.Unlock()
		available[p.Name] = !deleted && p.DeletionTimestamp == nil && podReady(p)
		n := 0
		for _, ok := range available {
			if ok {
				n++
			}
		}
		seen++
		if len(available) >= replicas { // past the initial list
			worst = max(worst, replicas-n)
		}
		history = append(history, fmt.Sprintf("%s %s uid %.8s node %q ready %t deleting %t deleted %t: %d unavailable",
			time.Now().Format("15:04:05.000"), p.Name, p.UID, p.Spec.NodeName, podReady(p), p.DeletionTimestamp != nil, deleted, replicas-n))
	})
	rc, reqs := counting(e.cp.RESTConfig())
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	d := e.drainer(client, "a", fleet.MaintenanceRequest{}, nil)
	first := pass(t, d, false)
	tried := reqs.verbs()["evict"]
	reports := append([]drain.Report{first}, passUntil(t, d, false, "drained", drained)...)
	e.waitRunning("db", replicas, "b")
	stop()

	refused, evicted := 0, 0
	for _, r := range reports {
		refused += r.Results["refused"]
		evicted += r.Evicted
		for _, b := range r.Blockers {
			if b.Kind != taintsdrain.KindPDB || b.PDB != e.ns+"/db-pdb" {
				t.Errorf("blocker %+v, want refusals by %s/db-pdb", b, e.ns)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d passes, %d evictions, %d refused; the watch saw %d pod versions, at worst %d unavailable", len(reports), evicted, refused, seen, worst)
	if worst > 1 {
		t.Errorf("the watch saw %d pods of the StatefulSet unavailable at once; the budget allows 1; what it saw:\n%s", worst, strings.Join(history, "\n"))
	}
	if worst == 0 {
		t.Errorf("the watch never saw a pod unavailable: it did not follow the drain")
	}
	if tried != replicas {
		t.Errorf("the first pass asked to evict %d pods, want all %d at once: the budget was not put to the test", tried, replicas)
	}
	if evicted != replicas {
		t.Errorf("evicted %d, want %d", evicted, replicas)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestDrainRefusedBacksOffThenForce: a budget that allows no disruption
// refuses its pod, and the Blocker names it and disruptionsAllowed 0; the
// other pods go in the same pass; a pass within 5 s does not ask again for
// the refused pod but evicts a new one; at 5 s it asks again. Forced, as
// an identity that may not delete pods, the refusal becomes a blocker
// saying so; once pods delete is granted the refused pod is DELETEd, and
// terminates with its own grace period. The drainer's identity has only
// what the shared design gives the coordinator: nodes get, pods list,
// pods/eviction create (and pods delete for force).
func TestDrainRefusedBacksOffThenForce(t *testing.T) {
	c := newRefusal(t)
	c.refused()
	c.backsOff()
	c.forced()
}

// refusal is TestDrainRefusedBacksOffThenForce's world: a pod "web" on
// node a behind a budget that allows no disruption, two other pods, and
// a Drainer of node a with a fake clock and a restricted identity.
type refusal struct {
	t       *testing.T
	e       *env
	d       *drain.Drainer
	clk     *testingclock.FakeClock
	reqs    *requests
	role    string
	web     corev1.Pod
	webName string
	blocker taintsdrain.Blocker // the refusal of web
}

// grace is web's terminationGracePeriodSeconds.
const grace = 17

func newRefusal(t *testing.T) *refusal {
	e := newEnv(t, 0, "a", "b")
	e.cordon("b", true)
	e.deployment("web", 1, func(s *corev1.PodSpec) { s.TerminationGracePeriodSeconds = ptrTo[int64](grace) })
	e.deployment("free", 2, nil)
	web := e.waitRunning("web", 1, "a")[0]
	e.waitRunning("free", 2, "a")
	minOne := intstr.FromInt32(1)
	e.pdb("web", &minOne, nil, 1)
	e.cordon("a", true)
	e.cordon("b", false)

	const user = "selftaint-drain-test"
	role := e.grant(user, false)
	rc, reqs := counting(e.cp.RESTConfig())
	rc.Impersonate.UserName = user
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// The API server's authorizer learns of the new binding from a watch.
	e.poll("the grant to "+user+" in force", func() (bool, error) {
		_, err := client.CoreV1().Nodes().Get(context.Background(), e.node("a"), metav1.GetOptions{})
		return err == nil, err
	})
	clk := testingclock.NewFakeClock(time.Now())
	webName := taintsdrain.PodName(&web)
	return &refusal{t: t, e: e, clk: clk, reqs: reqs, role: role, web: web, webName: webName,
		d: e.drainer(client, "a", fleet.MaintenanceRequest{EvictUnreplicated: true}, clk),
		blocker: taintsdrain.Blocker{Pod: webName, Kind: taintsdrain.KindPDB, PDB: e.ns + "/web-pdb", DisruptionsAllowed: 0,
			Counted: true, DesiredHealthy: 1, CurrentHealthy: 1, Message: "The disruption budget web-pdb needs 1 healthy pods and has 1 currently"},
	}
}

// refused: the refusal names the budget, the other pods go in the same
// pass.
func (c *refusal) refused() {
	t, e := c.t, c.e
	t0 := c.clk.Now()
	r := pass(t, c.d, false)
	if len(r.Blockers) != 1 || r.Blockers[0] != c.blocker {
		t.Errorf("pass 1: blockers %+v, want %+v", r.Blockers, c.blocker)
	}
	if r.Results["refused"] != 1 || r.Results["evicted"] != 2 || r.Evicted != 2 || r.Pending != 1 || r.OnlyLeft || r.Drained {
		t.Errorf("pass 1: %+v, want the 2 free pods evicted, web refused", r)
	}
	if r.Next.IsZero() || r.Next.After(t0.Add(taintsdrain.BackoffInitial)) {
		t.Errorf("pass 1: next pass at %v, want by t0+5s (%v)", r.Next, t0.Add(taintsdrain.BackoffInitial))
	}
	msg := taintsdrain.Summary(r.Progress(fleet.Progress{}), r.Remaining, r.Blockers)
	if want := "refused: " + c.webName + " by PodDisruptionBudget " + e.ns + "/web-pdb (disruptionsAllowed 0: needs 1 healthy, has 1)"; !strings.Contains(msg, want) || !strings.HasPrefix(msg, "evicted 2 of 3 pods") {
		t.Errorf("summary %q, want it to start %q and contain %q", msg, "evicted 2 of 3 pods", want)
	}
}

// backsOff: within 5 s the refused pod is not asked for again while a
// new pod is evicted; at 5 s it is asked for again.
func (c *refusal) backsOff() {
	t, e := c.t, c.e
	late := e.barePod("late", "a", nil)
	e.waitRunning("late", 1, "a")
	c.clk.Step(4 * time.Second)
	r := pass(t, c.d, false)
	if n := c.reqs.evictions(c.webName); n != 1 {
		t.Errorf("pass 2, 4s after the refusal: %d evictions of %s asked for in all, want 1", n, c.webName)
	}
	if n := c.reqs.evictions(taintsdrain.PodName(late)); n != 1 || r.Results["evicted"] != 1 || r.Results["refused"] != 0 {
		t.Errorf("pass 2: %+v, %d evictions of the new pod; want it evicted once, nothing refused", r, n)
	}
	if len(r.Blockers) != 1 || r.Blockers[0] != c.blocker {
		t.Errorf("pass 2: blockers %+v, want the refusal still there", r.Blockers)
	}

	c.clk.Step(time.Second)
	r = pass(t, c.d, false)
	if n := c.reqs.evictions(c.webName); n != 2 || r.Results["refused"] != 1 {
		t.Errorf("pass 3, 5s after the refusal: %+v, %d evictions of %s in all; want a second, refused", r, n, c.webName)
	}
}

// forced: without pods delete a blocker says so; granted it, the refused
// pod is DELETEd (once the failed DELETE's back-off is over, and never
// evicted again) and terminates with its own grace period.
func (c *refusal) forced() {
	t := c.t
	r := pass(t, c.d, true)
	if r.Results["failed"] != 1 || len(r.Blockers) != 1 || r.Blockers[0].Kind != taintsdrain.KindError ||
		!strings.HasPrefix(r.Blockers[0].Message, "no permission to delete pods (a forced drain needs RBAC pods delete") {
		t.Errorf("forced, no pods delete: %+v, want a failed DELETE and a blocker saying why", r)
	}

	c.e.grantDelete(c.role)
	deletion := c.e.firstDeletion(c.web)
	c.clk.Step(taintsdrain.BackoffMax)
	reports := passUntil(t, c.d, true, "drained", func(r drain.Report) bool {
		if r.Results["failed"] > 0 {
			c.clk.Step(taintsdrain.BackoffMax) // the grant is not in force yet
		}
		return r.Drained
	})
	deleted := 0
	for _, r := range reports {
		deleted += r.Results["deleted"]
	}
	if deleted != 1 {
		t.Errorf("forced passes deleted %d pods, want 1: %+v", deleted, reports)
	}
	if g := deletion().DeletionGracePeriodSeconds; g == nil || *g != grace {
		t.Errorf("the forced DELETE gave deletionGracePeriodSeconds %v, want the pod's terminationGracePeriodSeconds %d", g, grace)
	}
	if n := c.reqs.evictions(c.webName); n != 2 {
		t.Errorf("%d evictions of %s in all, want 2 (a refused pod is deleted when forced, not evicted again)", n, c.webName)
	}
	t.Logf("requests: %v", c.reqs.verbs())
}

// firstDeletion watches pod; the returned func waits for the first
// version of it with a deletionTimestamp and returns it.
func (e *env) firstDeletion(pod corev1.Pod) func() *corev1.Pod {
	var mu sync.Mutex
	var first *corev1.Pod
	e.watchPods("app="+pod.Labels["app"], func(p *corev1.Pod, _ bool) {
		mu.Lock()
		defer mu.Unlock()
		if p.UID == pod.UID && p.DeletionTimestamp != nil && first == nil {
			first = p.DeepCopy()
		}
	})
	return func() *corev1.Pod {
		e.t.Helper()
		e.poll("the watch to see the deletion of "+pod.Name, func() (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return first != nil, nil
		})
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// grant makes a ClusterRole of what a drain needs (pods delete only when
// del) and binds it to user; it returns the role's name.
func (e *env) grant(user string, del bool) string {
	e.t.Helper()
	ctx := context.Background()
	name := e.ns + "-drain"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: drainRules(del)}
	if _, err := e.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := e.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = e.client.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func (e *env) grantDelete(role string) {
	e.t.Helper()
	r, err := e.client.RbacV1().ClusterRoles().Get(context.Background(), role, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	r.Rules = drainRules(true)
	if _, err := e.client.RbacV1().ClusterRoles().Update(context.Background(), r, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func drainRules(del bool) []rbacv1.PolicyRule {
	pods := []string{"get", "list"}
	if del {
		pods = append(pods, "delete")
	}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: pods},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
	}
}
