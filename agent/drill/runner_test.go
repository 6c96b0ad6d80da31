package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints"
	tdrill "github.com/selftaint/selftaint/taints/drill"
	"github.com/selftaint/selftaint/taints/faults"
	"github.com/selftaint/selftaint/taints/fleet"
)

// shared is the "existing cluster" of the tests that run a drill with
// --kubeconfig: each drill has a name (namespace, pool) of its own. A
// short node-monitor grace period makes nodes without a kubelet settle
// (Unknown, tainted unreachable) within seconds.
var shared = testcp.NewShared(testcp.Options{
	ControllerManager: true, Scheduler: true,
	ControllerManagerArgs: []string{"--node-monitor-grace-period=5s"},
})

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the shared control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// testActions write faults as `selftaint fault` does (the annotation),
// for the runner's tests; cmd/selftaint's tests run the real commands.
type testActions struct {
	client kubernetes.Interface
	mu     sync.Mutex
	calls  []string
}

func (a *testActions) called(s string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, s)
}

func (a *testActions) InjectFault(ctx context.Context, _, _, node string, f tdrill.FaultStep, _ bool) error {
	a.called("inject " + node)
	value, err := faults.Spec{Status: corev1.ConditionTrue, Reason: faults.DefaultReason, Message: "drill test", InjectedBy: "runner test"}.Lasting(time.Now(), f.For.Duration).Encode()
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{faults.AnnotationKey(f.Condition): value}}})
	_, err = a.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "selftaint-fault"})
	return err
}

func (a *testActions) ClearFaults(ctx context.Context, _, _, node string) error {
	a.called("clear " + node)
	n, err := a.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	nulls := map[string]any{}
	for _, k := range faults.Keys(n.Annotations) {
		nulls[k] = nil
	}
	if len(nulls) == 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": nulls}})
	_, err = a.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "selftaint-fault"})
	return err
}

func (a *testActions) FaultCondition(_ string, f tdrill.FaultStep) (corev1.NodeConditionType, corev1.ConditionStatus, error) {
	return corev1.NodeConditionType(f.Condition), corev1.ConditionTrue, nil
}

func (a *testActions) Drain(context.Context, string, []string, string, tdrill.DrainStep) error {
	return fmt.Errorf("no drains in these tests")
}

func (a *testActions) EndDrains(context.Context, string, []string) error { return nil }

func (a *testActions) Explain(context.Context, string, string, string, []corev1.Taint, time.Time) ([]taints.Eviction, error) {
	return nil, nil
}

func zero() *int { z := 0; return &z }

func dur(d time.Duration) tdrill.Duration { return tdrill.Duration{Duration: d} }

// webDeployment is a Deployment of n pods kept to pool's nodes.
func webDeployment(pool string, n int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: %d
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      nodeSelector: {%s: %s}
      containers:
      - name: web
        image: registry.invalid/web
`, n, PoolLabel, pool)
}

// liveNode creates a Ready Node no drill runs and heartbeats its Lease in
// kube-node-lease (as a kubelet would) until the test ends, so the node
// lifecycle controller leaves it alone: whoever writes it afterwards is
// the drill.
func liveNode(t *testing.T, cp *testcp.ControlPlane, name string, labels map[string]string) *corev1.Node {
	t.Helper()
	now := metav1.Now()
	leases := cp.Client().CoordinationV1().Leases(corev1.NamespaceNodeLease)
	secs := int32(40)
	holder := name
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &metav1.MicroTime{Time: now.Time}},
	}
	if _, err := leases.Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cp.CreateNode(t, name, func(n *corev1.Node) {
		n.Labels = labels
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "TestHeartbeat", LastHeartbeatTime: now, LastTransitionTime: now}}
	})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, _ = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
	}()
	// Admission registers it with the not-ready taint; the node lifecycle
	// controller lifts it and the TTL controller annotates it: then it
	// rests.
	n, _, err := testcp.WaitNode(t.Context(), cp.Client(), name, time.Minute, func(n *corev1.Node) bool {
		_, ttl := n.Annotations["node.alpha.kubernetes.io/ttl"]
		return ttl && len(n.Spec.Taints) == 0
	})
	if err != nil {
		t.Fatalf("node %s never came to rest: %v", name, err)
	}
	return n
}

// A real-nodes scenario with a coordinator step is refused before the drill
// creates anything: exit 2, naming the step.
func TestRealNodesCoordinatorStepRefusedBeforeAnything(t *testing.T) {
	cp := shared.Get(t)
	before, err := cp.Client().CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := &tdrill.Scenario{
		Name:    "realcoord",
		Cluster: tdrill.Cluster{RealNodes: "drill=realcoord"},
		Steps:   []tdrill.Step{{Name: "kill-leader", Coordinator: &tdrill.CoordinatorStep{Action: "kill"}}},
	}
	o := Run(t.Context(), Options{Scenario: s, Existing: true, RESTConfig: cp.RESTConfig(), Kubeconfig: cp.KubeconfigPath, Actions: &testActions{client: cp.Client()}})
	if o.Code != tdrill.ExitBadFile {
		t.Fatalf("exit %d, want %d (error %q)", o.Code, tdrill.ExitBadFile, o.Report.Error)
	}
	if !strings.Contains(o.Report.Error, `"kill-leader"`) || !strings.Contains(o.Report.Error, "no coordinator for real nodes") {
		t.Errorf("error %q does not name the step and why", o.Report.Error)
	}
	after, err := cp.Client().CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before.Items) {
		t.Errorf("namespaces: %d before, %d after: the refused drill created one", len(before.Items), len(after.Items))
	}
	if len(o.Report.Cleanup.Removed) != 0 {
		t.Errorf("cleanup removed %v, want nothing (nothing was created)", o.Report.Cleanup.Removed)
	}
}

// A drill on an existing cluster touches no node it was not given: a
// bystander's resourceVersion is the same afterwards, while the node it was
// given got (and lost) its fault, though the step's selector matches both.
func TestExistingClusterLeavesOtherNodesAlone(t *testing.T) {
	cp := shared.Get(t)
	bystander := liveNode(t, cp, "bystander", map[string]string{"drill": "no"})
	given := liveNode(t, cp, "given", map[string]string{"drill": "untouched"})
	acts := &testActions{client: cp.Client()}
	s := &tdrill.Scenario{
		Name: "untouched",
		Cluster: tdrill.Cluster{
			Pools:       []tdrill.Pool{{Name: "untouched", Count: 1}},
			RealNodes:   "drill=untouched",
			Coordinator: tdrill.Coordinator{Replicas: zero()},
		},
		Workloads: []tdrill.Workload{{Manifest: webDeployment("untouched", 1)}},
		Steps: []tdrill.Step{
			{Name: "fault", Fault: &tdrill.FaultStep{Nodes: tdrill.Nodes{Selector: "drill", Names: []string{"untouched-1"}}, Condition: "MemoryPressure", For: dur(3 * time.Second)}},
		},
		Settle: dur(time.Second),
	}
	var out bytes.Buffer
	o := Run(t.Context(), Options{Scenario: s, Existing: true, RESTConfig: cp.RESTConfig(), Kubeconfig: cp.KubeconfigPath, Actions: acts, Out: &syncBuffer{b: &out}})
	t.Logf("view:\n%s", out.String())
	if o.Code != tdrill.ExitPassed {
		t.Fatalf("exit %d, want 0: %s", o.Code, o.Report.Error)
	}
	if got := o.Report.Steps[0].Nodes; strings.Join(got, ",") != "given,untouched-1" {
		t.Errorf("the fault step picked %v, want [given untouched-1]", got)
	}
	n, err := cp.Client().CoreV1().Nodes().Get(t.Context(), "bystander", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.ResourceVersion != bystander.ResourceVersion {
		t.Errorf("bystander's resourceVersion %s -> %s: the drill wrote a node it was not given (managed fields %v)", bystander.ResourceVersion, n.ResourceVersion, managers(n))
	}
	g, err := cp.Client().CoreV1().Nodes().Get(t.Context(), "given", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g.ResourceVersion == given.ResourceVersion {
		t.Error("the given node was never written: the fault step did not reach it")
	}
	if keys := faults.Keys(g.Annotations); len(keys) > 0 {
		t.Errorf("the given node keeps fault annotations %v after the drill", keys)
	}
	assertNoDrillLeft(t, cp.Client(), "untouched", []string{"untouched-1"})
}

func managers(n *corev1.Node) []string {
	var out []string
	for _, m := range n.ManagedFields {
		out = append(out, m.Manager)
	}
	return out
}

// Ctrl-C (ctx cancelled) in the middle of a drill on an existing cluster:
// the drill stops (exit 3), and afterwards the API server has no node,
// pod, fault annotation, grant or maintenance Lease or namespace of it.
func TestInterruptedDrillLeavesNothing(t *testing.T) {
	cp := shared.Get(t)
	liveNode(t, cp, "interrupted-real", map[string]string{"drill": "interrupted"})
	acts := &testActions{client: cp.Client()}
	s := &tdrill.Scenario{
		Name: "interrupted",
		Cluster: tdrill.Cluster{
			Pools:       []tdrill.Pool{{Name: "interrupted", Count: 2}},
			RealNodes:   "drill=interrupted",
			Coordinator: tdrill.Coordinator{Replicas: zero()},
		},
		Workloads: []tdrill.Workload{{Manifest: webDeployment("interrupted", 2)}},
		Steps: []tdrill.Step{
			{Name: "fault", Fault: &tdrill.FaultStep{Nodes: tdrill.Nodes{Selector: "drill=interrupted", Names: []string{"interrupted-1", "interrupted-2"}}, Condition: "MemoryPressure", For: dur(time.Minute)}},
			{Name: "forever", WaitFor: &tdrill.WaitStep{Nodes: tdrill.Nodes{Names: []string{"interrupted-1"}}, Condition: &tdrill.ConditionState{Type: "NeverThere", Status: "True"}, Timeout: dur(5 * time.Minute)}},
		},
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out bytes.Buffer
	w := &syncBuffer{b: &out, on: "step forever (waitFor) starts", then: cancel}
	o := Run(ctx, Options{Scenario: s, Existing: true, RESTConfig: cp.RESTConfig(), Kubeconfig: cp.KubeconfigPath, Actions: acts, Out: w})
	t.Logf("view:\n%s", out.String())
	if o.Code != tdrill.ExitNotRun {
		t.Fatalf("exit %d, want %d (interrupted): %s", o.Code, tdrill.ExitNotRun, o.Report.Error)
	}
	if !strings.Contains(o.Report.Error, "interrupted") {
		t.Errorf("error %q does not say the drill was interrupted", o.Report.Error)
	}
	if !o.Report.Cleanup.Done {
		t.Errorf("cleanup not done: %s", o.Report.Cleanup.Error)
	}
	if !strings.Contains(out.String(), "cleanup done") {
		t.Error("the view does not say the cleanup was done")
	}
	real, err := cp.Client().CoreV1().Nodes().Get(t.Context(), "interrupted-real", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if keys := faults.Keys(real.Annotations); len(keys) > 0 {
		t.Errorf("the real node keeps fault annotations %v", keys)
	}
	assertNoDrillLeft(t, cp.Client(), "interrupted", []string{"interrupted-1", "interrupted-2"})
}

// assertNoDrillLeft checks that drill name left no virtual node (nor its
// Lease), namespace, pod, or grant or maintenance Lease behind.
func assertNoDrillLeft(t *testing.T, c kubernetes.Interface, name string, vnodes []string) {
	t.Helper()
	ctx := t.Context()
	for _, n := range vnodes {
		if _, err := c.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("virtual node %s still there (err %v)", n, err)
		}
		if _, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Lease of virtual node %s still there (err %v)", n, err)
		}
	}
	ns := DrillNamespace(name)
	if _, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s still there (err %v)", ns, err)
	}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) > 0 {
		t.Errorf("%d pods left in %s", len(pods.Items), ns)
	}
	for _, label := range []string{fleet.GrantLabel, fleet.SlotLabel} {
		leases, err := c.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: label})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range leases.Items {
			for _, n := range vnodes {
				if l.Name == fleet.GrantName(n) || l.Name == fleet.SlotName(n) {
					t.Errorf("lease %s/%s left behind", l.Namespace, l.Name)
				}
			}
		}
	}
}

// syncBuffer is a view output that tests read, calling then once a line
// contains on.
type syncBuffer struct {
	mu       sync.Mutex
	b        *bytes.Buffer
	on       string
	then     func()
	happened bool
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on != "" && !s.happened && strings.Contains(string(p), s.on) {
		s.happened = true
		s.then()
	}
	return s.b.Write(p)
}

// A second interrupt (Abort) abandons the cleanup, and the outcome says so.
func TestSecondInterruptAbandonsCleanup(t *testing.T) {
	cp := shared.Get(t)
	s := &tdrill.Scenario{
		Name: "abandoned",
		Cluster: tdrill.Cluster{
			Pools:       []tdrill.Pool{{Name: "abandoned", Count: 1}},
			Coordinator: tdrill.Coordinator{Replicas: zero()},
		},
		Steps: []tdrill.Step{
			{Name: "forever", WaitFor: &tdrill.WaitStep{Nodes: tdrill.Nodes{Names: []string{"abandoned-1"}}, Condition: &tdrill.ConditionState{Type: "NeverThere"}, Timeout: dur(5 * time.Minute)}},
		},
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	abort := make(chan struct{})
	close(abort) // the second Ctrl-C came with the first
	var out bytes.Buffer
	w := &syncBuffer{b: &out, on: "step forever (waitFor) starts", then: cancel}
	o := Run(ctx, Options{Scenario: s, Existing: true, RESTConfig: cp.RESTConfig(), Kubeconfig: cp.KubeconfigPath, Actions: &testActions{client: cp.Client()}, Out: w, Abort: abort})
	t.Logf("view:\n%s", out.String())
	if o.Code != tdrill.ExitNotRun {
		t.Errorf("exit %d, want %d", o.Code, tdrill.ExitNotRun)
	}
	if o.Report.Cleanup.Done || !strings.Contains(o.Report.Cleanup.Error, "cleanup aborted by a second interrupt") {
		t.Errorf("cleanup %+v, want not done, aborted by a second interrupt", o.Report.Cleanup)
	}
	if !strings.Contains(out.String(), "cleanup NOT done: cleanup aborted") {
		t.Error("the view does not say the cleanup was abandoned")
	}
	// What it left, the test removes (the shared cluster's other tests
	// keep to names of their own).
	bg := metav1.DeletePropagationBackground
	_ = cp.Client().CoreV1().Namespaces().Delete(context.Background(), DrillNamespace("abandoned"), metav1.DeleteOptions{PropagationPolicy: &bg})
	_ = cp.Client().CoreV1().Nodes().Delete(context.Background(), "abandoned-1", metav1.DeleteOptions{})
}
