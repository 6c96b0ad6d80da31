package deploy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/agent/virtual"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/faults"
)

// TestOnControlPlane creates every manifest on a real etcd and
// kube-apiserver (RBAC authorization, the default admission plugins, which
// include ValidatingAdmissionPolicy) and
// then, as the service accounts themselves (impersonated, with the node
// name a pod-bound token carries):
//   - runs the agent: it writes its condition, taint and Events and removes
//     an expired fault, and is never refused;
//   - checks the agent can do nothing else (secrets, deleting Nodes, ...);
//   - checks the admission policy: the agent's own Node's taints yes, any
//     other Node, spec field or label no; other users unaffected;
//   - runs the coordinator through all it writes, under its admission
//     policy, never refused, and checks it can do nothing else (secrets;
//     any Lease or ConfigMap but its own, the control plane's leader
//     Leases in kube-system above all);
//   - makes the coordinator's drain writes (cordon, uncordon, its
//     condition, evictions) under its Node and pod policies, and attacks
//     them: no other Node field, no cordon without a request, no uncordon
//     of someone else's cordon, no pod deletion without drain-force/;
//   - checks the agent can read its grant and the guard, and write neither.
//
// Virtual nodes run under the same control plane, everything installed,
// in TestVirtualPolicyOnControlPlane/RunUnderPolicy.
//
// The control plane is shared with TestVirtualPolicyOnControlPlane (whose
// service account no policy here matches). The subtests that change what
// others would see run first, one at a time: PolicyWithoutParameters
// empties the agents' policy parameters (and restores them), the
// coordinator's leader Lease and guard that CoordinatorRBACIsEnough's
// coordinator holds are what CoordinatorPolicy takes over,
// AgentNeverOwnsMaintenance adds to the agents' parameters (and restores
// them), and DrainForce lets the coordinator delete pods (and takes it
// back). The rest, each on Nodes and objects of its own, run in parallel.
func TestOnControlPlane(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver and waits for the agent")
	t.Parallel()
	cp := installed.get(t)

	t.Run("PolicyWithoutParameters", func(t *testing.T) { testPolicyWithoutParameters(t, cp) })
	t.Run("CoordinatorRBACIsEnough", func(t *testing.T) { testCoordinatorRBACIsEnough(t, cp) })
	t.Run("CoordinatorPolicy", func(t *testing.T) { testCoordinatorPolicy(t, cp) })
	t.Run("AgentNeverOwnsMaintenance", func(t *testing.T) { testAgentNeverOwnsMaintenance(t, cp) })
	t.Run("DrainForce", func(t *testing.T) { testDrainForce(t, cp) })
	for _, sub := range []struct {
		name string
		test func(*testing.T, *testcp.ControlPlane)
	}{
		{"AgentRBACIsEnough", testAgentRBACIsEnough},
		{"AgentRBACIsTight", testAgentRBACIsTight},
		{"AdmissionPolicy", testAdmissionPolicy},
		{"CoordinatorRBACIsTight", testCoordinatorRBACIsTight},
		{"AgentFleetRBAC", testAgentFleetRBAC},
		{"CoordinatorNodePolicy", testCoordinatorNodePolicy},
		{"CoordinatorDrainWrites", testCoordinatorDrainWrites},
		{"CoordinatorPods", testCoordinatorPods},
	} {
		t.Run(sub.name, func(t *testing.T) {
			t.Parallel()
			sub.test(t, cp)
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// create creates one manifest's object as it is in the file.
func create(ctx context.Context, c kubernetes.Interface, m manifest) error {
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	var err error
	switch o := m.obj.(type) {
	case *corev1.Namespace:
		_, err = c.CoreV1().Namespaces().Create(ctx, o, opts)
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *corev1.ConfigMap:
		_, err = c.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, opts)
	case *corev1.ResourceQuota:
		_, err = c.CoreV1().ResourceQuotas(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, o, opts)
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
	case *appsv1.DaemonSet:
		_, err = c.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, opts)
	case *appsv1.Deployment:
		_, err = c.AppsV1().Deployments(o.Namespace).Create(ctx, o, opts)
	case *policyv1.PodDisruptionBudget:
		_, err = c.PolicyV1().PodDisruptionBudgets(o.Namespace).Create(ctx, o, opts)
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, opts)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, opts)
	default:
		return fmt.Errorf("the test does not know how to create a %T", m.obj)
	}
	return err
}

// createManifests creates ms with c: Namespaces first, then the rest in
// order. A Namespace that exists already (an overlay into kube-system
// renames deploy/'s Namespace to it) is updated with the manifest's
// labels, as kubectl apply would.
func createManifests(t *testing.T, c kubernetes.Interface, ms []manifest) {
	t.Helper()
	ctx := t.Context()
	ms = slices.Clone(ms)
	slices.SortStableFunc(ms, func(a, b manifest) int {
		return boolInt(a.kind() != "Namespace") - boolInt(b.kind() != "Namespace")
	})
	namespaces := c.CoreV1().Namespaces()
	for _, m := range ms {
		err := create(ctx, c, m)
		if want, ok := m.obj.(*corev1.Namespace); ok && apierrors.IsAlreadyExists(err) {
			have, getErr := namespaces.Get(ctx, want.Name, metav1.GetOptions{})
			if getErr != nil {
				t.Fatal(getErr)
			}
			have.Labels = mergeMaps(have.Labels, want.Labels)
			_, err = namespaces.Update(ctx, have, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("creating %s: %v", m, err)
		}
	}
}

// createNamespace creates the Namespace name as c.
func createNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// saNamespace is the namespace of service account sa in the manifests.
func saNamespace(sa string) string {
	if sa == virtualSA {
		return virtualNamespace
	}
	return namespace
}

// saUser is the user a pod's token for service account sa authenticates as.
func saUser(sa string) string { return "system:serviceaccount:" + saNamespace(sa) + ":" + sa }

// saGroups are the groups of user, a service account's user name.
func saGroups(user string) []string {
	ns := strings.Split(user, ":")[2]
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// asServiceAccount is a client config that acts as service account sa, as
// a token bound to a pod on node (none if empty) would.
func asServiceAccount(cp *testcp.ControlPlane, sa, node string) *rest.Config {
	return asServiceAccountIn(cp, saNamespace(sa), sa, node)
}

func coreClient(t *testing.T, rc *rest.Config) *typedcorev1.CoreV1Client {
	t.Helper()
	c, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkNotRefused fails t if the logs show a request refused by RBAC or by
// admission.
func checkNotRefused(t *testing.T, logs *testkit.LogBuffer) {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		if l := strings.ToLower(line); strings.Contains(l, "forbidden") || strings.Contains(l, "denied") {
			t.Errorf("a request was refused: %s", line)
		}
	}
}

// poll calls ok every 50ms until it returns true, failing t with what and
// the last error after timeout.
func poll(t *testing.T, timeout time.Duration, what string, ok func() (bool, error)) {
	t.Helper()
	if err := testcp.Poll(context.Background(), timeout, testcp.PollInterval, ok); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitPolicyActive waits until the admission policy is in force (the API
// server loads policies asynchronously) and checks the API server's type
// check of its CEL against the Node schema, and of the coordinator's
// against the Lease, ConfigMap, Node and Pod schemas, found nothing.
func waitPolicyActive(t *testing.T, cp *testcp.ControlPlane) {
	t.Helper()
	cp.CreateNode(t, "policy-canary", nil)
	stranger := coreClient(t, asServiceAccount(cp, agentSA, "some-other-node"))
	patch := []byte(`{"metadata":{"annotations":{"selftaint.io/canary":"x"}}}`)
	poll(t, time.Minute, "the admission policy to deny a write to another node", func() (bool, error) {
		_, err := stranger.Nodes().Patch(t.Context(), "policy-canary", types.MergePatchType, patch, metav1.PatchOptions{})
		return err != nil && strings.Contains(err.Error(), policyName), err
	})
	checkPolicyTypes(t, cp.Client(), policyName, coordinatorPolicy, coordinatorNodesPolicy, coordinatorPodsPolicy)
}

// problemProbe reports a problem until told otherwise.
type problemProbe struct{ ok atomic.Bool }

func (p *problemProbe) Name() string { return "deploy-test" }
func (p *problemProbe) Probe(context.Context) probes.Result {
	if p.ok.Load() {
		return probes.Result{Status: probes.StatusOK, Reason: "Fine", Message: "the test says all is well"}
	}
	return probes.Result{Status: probes.StatusProblem, Reason: "TestProblem", Message: "the test says there is a problem"}
}

// quietProbe always finds all well; its condition is a fault target.
type quietProbe struct{}

func (quietProbe) Name() string { return "deploy-quiet" }
func (quietProbe) Probe(context.Context) probes.Result {
	return probes.Result{Status: probes.StatusOK, Reason: "Quiet", Message: "nothing to report"}
}

const (
	testCondition  corev1.NodeConditionType = "SelftaintDeployTest"
	quietCondition corev1.NodeConditionType = "SelftaintDeployQuiet"
	testTaintKey                            = "selftaint.io/deploy-test"
)

// runAgent runs an agent until the returned stop is called (also at the
// end of the test).
func runAgent(t *testing.T, opts agent.Options) (stop func()) {
	t.Helper()
	_, stop = testkit.StartAgent(t, opts)
	return stop
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

// waitNode polls the Node as admin until ok holds.
func waitNode(t *testing.T, c kubernetes.Interface, name string, timeout time.Duration, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	testkit.WaitNode(t, c, name, timeout, what, nil, ok)
}

// testAgentRBACIsEnough runs the real agent as the agent's service account
// bound to its node, with the admission policy in force, through
// everything it does on its Node: initialization (it claims and lifts the
// uninitialized taint the node registered with), conditions, its taint,
// Events, a fault's expiry, hardware advertised, tainted and labelled and
// then withdrawn, and a restart. Nothing is refused.
func testAgentRBACIsEnough(t *testing.T, cp *testcp.ControlPlane) {
	const node = "agent-node"
	admin := cp.Client()
	initTaint := corev1.Taint{Key: "selftaint.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}
	cp.CreateNode(t, node, func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{initTaint} })
	logger, logs := captureLogs(t)
	probe := &problemProbe{}
	var fpgas atomic.Int64
	fpgas.Store(1)
	opts := agent.Options{
		NodeName: node,
		Client:   coreClient(t, asServiceAccount(cp, agentSA, node)),
		Probes: []agent.ProbeSpec{
			{Entry: probes.Entry{Probe: probe, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond}, Condition: testCondition},
			{Entry: probes.Entry{Probe: quietProbe{}, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond}, Condition: quietCondition},
		},
		Rules:           []taints.Rule{{Condition: testCondition, Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: testTaintKey, Effect: corev1.TaintEffectNoSchedule}}},
		HeartbeatPeriod: time.Hour,
		Jitter:          -1,
		Logger:          logger,
		Init:            &agent.InitOptions{Condition: "SelftaintUninitialized", Taint: initTaint},
		Hardware: agent.InventoryFunc(func(context.Context) ([]agent.Resource, error) {
			return []agent.Resource{{Name: fpgaResource, Count: fpgas.Load(), Advertise: true, Taint: true, Label: true}}, nil
		}),
		HardwarePeriod: 200 * time.Millisecond,
	}
	stop := runAgent(t, opts)

	// Condition (nodes/status, server-side apply) and taint (nodes patch);
	// initialized; the FPGA advertised, tainted and labelled.
	waitNode(t, admin, node, 30*time.Second, "condition True and taint set, initialized, the FPGA advertised", func(n *corev1.Node) bool {
		c := taints.FindCondition(n, testCondition)
		capacity := n.Status.Capacity[fpgaResource]
		return c != nil && c.Status == corev1.ConditionTrue && hasTaint(n, testTaintKey) &&
			!hasTaint(n, initTaint.Key) && n.Annotations["selftaint.io/initialized-at"] != "" &&
			capacity.Value() == 1 && hasTaint(n, string(fpgaResource)) && n.Labels[agent.HardwareLabel(fpgaResource)] == "true"
	})
	// Clear and raise again: the repeated Event is a patch of the first.
	probe.ok.Store(true)
	waitNode(t, admin, node, 30*time.Second, "taint lifted", func(n *corev1.Node) bool { return !hasTaint(n, testTaintKey) })
	probe.ok.Store(false)
	waitNode(t, admin, node, 30*time.Second, "taint set again", func(n *corev1.Node) bool { return hasTaint(n, testTaintKey) })
	poll(t, 30*time.Second, "a TaintAdded Event counted twice in namespace default", func() (bool, error) {
		evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node, "reason": "TaintAdded"}.String(),
		})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool { return e.Count >= 2 && e.Source.Component == "selftaint" }), nil
	})

	// A fault the agent applied and saw expire is removed by a JSON patch.
	key := faults.AnnotationKey(string(quietCondition))
	value, err := faults.Spec{Status: corev1.ConditionTrue, ExpiresAt: time.Now().Add(6 * time.Second).UTC().Format(time.RFC3339)}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if _, err := admin.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("injecting a fault: %v", err)
	}
	waitNode(t, admin, node, 30*time.Second, "the fault applied", func(n *corev1.Node) bool {
		c := taints.FindCondition(n, quietCondition)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == faults.DefaultReason
	})
	waitNode(t, admin, node, 30*time.Second, "the expired fault removed and the condition back to False", func(n *corev1.Node) bool {
		_, still := n.Annotations[key]
		c := taints.FindCondition(n, quietCondition)
		return !still && c != nil && c.Status == corev1.ConditionFalse
	})

	// The FPGA goes: resource, taint and label withdrawn.
	fpgas.Store(0)
	waitNode(t, admin, node, 30*time.Second, "the FPGA withdrawn", func(n *corev1.Node) bool {
		_, advertised := n.Status.Capacity[fpgaResource]
		_, labelled := n.Labels[agent.HardwareLabel(fpgaResource)]
		return !advertised && !hasTaint(n, string(fpgaResource)) && !labelled
	})

	// A restart: the new process adopts the Node as it is and carries on.
	stop()
	fpgas.Store(1)
	stop = runAgent(t, opts)
	waitNode(t, admin, node, 30*time.Second, "the FPGA advertised again after the restart", func(n *corev1.Node) bool {
		capacity := n.Status.Capacity[fpgaResource]
		return capacity.Value() == 1 && hasTaint(n, string(fpgaResource))
	})
	probe.ok.Store(true)
	waitNode(t, admin, node, 30*time.Second, "taint lifted after the restart", func(n *corev1.Node) bool { return !hasTaint(n, testTaintKey) })
	stop()
	checkNotRefused(t, logs)
}

// access is one request an access review asks about.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

// checkAccess asks the API server's authorizer, as user (a service
// account, with the given user extra), about each request: every one in
// allowed must be allowed (who needs it) and every one in denied denied.
func checkAccess(t *testing.T, cp *testcp.ControlPlane, user string, extra map[string]authorizationv1.ExtraValue, who string, allowed, denied []access) {
	t.Helper()
	review := func(a access) bool {
		t.Helper()
		sar, err := cp.Client().AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: saGroups(user),
				Extra:  extra,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name, Version: "v1",
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("access review %+v: %v", a, err)
		}
		return sar.Status.Allowed
	}
	for _, a := range allowed {
		if !review(a) {
			t.Errorf("%s %s %s/%s %s in %q: denied, but %s needs it", a.verb, a.group, a.resource, a.subresource, a.name, a.namespace, who)
		}
	}
	for _, a := range denied {
		if review(a) {
			t.Errorf("%s %s %s/%s %s in %q: allowed, but %s does not need it", a.verb, a.group, a.resource, a.subresource, a.name, a.namespace, who)
		}
	}
}

// testAgentRBACIsTight checks the agent's service account may do what the
// agent needs and nothing else, by access reviews and by trying.
func testAgentRBACIsTight(t *testing.T, cp *testcp.ControlPlane) {
	const node = "tight-node"
	cp.CreateNode(t, node, nil)
	const admissionGroup = "admissionregistration.k8s.io"
	allowed := []access{
		{verb: "get", resource: "nodes"}, {verb: "list", resource: "nodes"}, {verb: "watch", resource: "nodes"}, {verb: "patch", resource: "nodes"},
		{verb: "patch", resource: "nodes", subresource: "status"},
		{verb: "create", resource: "events", namespace: "default"}, {verb: "patch", resource: "events", namespace: "default"},
		{verb: "get", resource: "validatingadmissionpolicies", group: admissionGroup, name: policyName},
	}
	denied := []access{
		{verb: "get", resource: "validatingadmissionpolicies", group: admissionGroup, name: "another-policy"},
		{verb: "list", resource: "validatingadmissionpolicies", group: admissionGroup},
		{verb: "update", resource: "validatingadmissionpolicies", group: admissionGroup, name: policyName},
		{verb: "patch", resource: "validatingadmissionpolicies", group: admissionGroup, name: policyName},
		{verb: "delete", resource: "validatingadmissionpolicybindings", group: admissionGroup, name: policyName},
		{verb: "create", resource: "nodes"}, {verb: "update", resource: "nodes"}, {verb: "delete", resource: "nodes"}, {verb: "deletecollection", resource: "nodes"},
		{verb: "update", resource: "nodes", subresource: "status"}, {verb: "get", resource: "nodes", subresource: "proxy"},
		{verb: "get", resource: "secrets", namespace: namespace}, {verb: "list", resource: "secrets"},
		{verb: "list", resource: "pods"}, {verb: "delete", resource: "pods", namespace: namespace}, {verb: "create", resource: "pods", subresource: "eviction", namespace: namespace},
		{verb: "get", resource: "configmaps", namespace: namespace},
		{verb: "create", resource: "events", namespace: namespace}, {verb: "update", resource: "events", namespace: "default"}, {verb: "delete", resource: "events", namespace: "default"},
	}
	checkAccess(t, cp, saUser(agentSA), map[string]authorizationv1.ExtraValue{nodeNameExtra: {node}}, "the agent", allowed, denied)

	// And by trying: refused by RBAC (not by the admission policy).
	sa := coreClient(t, asServiceAccount(cp, agentSA, node))
	ctx := t.Context()
	for _, try := range []struct {
		what string
		do   func() error
	}{
		{"get a secret", func() error { _, err := sa.Secrets(namespace).Get(ctx, "anything", metav1.GetOptions{}); return err }},
		{"list secrets", func() error { _, err := sa.Secrets("").List(ctx, metav1.ListOptions{}); return err }},
		{"delete its Node", func() error { return sa.Nodes().Delete(ctx, node, metav1.DeleteOptions{}) }},
		{"create a Node", func() error {
			_, err := sa.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "made-by-agent"}}, metav1.CreateOptions{})
			return err
		}},
		{"list pods", func() error { _, err := sa.Pods("").List(ctx, metav1.ListOptions{}); return err }},
		{"read its ConfigMap", func() error {
			_, err := sa.ConfigMaps(namespace).Get(ctx, configMapName, metav1.GetOptions{})
			return err
		}},
	} {
		err := try.do()
		if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), policyName) {
			t.Errorf("%s as the agent: %v, want Forbidden by RBAC", try.what, err)
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// testVirtualRBACIsEnough runs one virtual node as the virtual service
// account (rc), through registration, Lease renewals, a pod's whole life
// and deletion on exit.
func testVirtualRBACIsEnough(t *testing.T, cp *testcp.ControlPlane, rc *rest.Config) {
	const node, podNS, podName = "vnode-1", "virtual-test", "app"
	admin := cp.Client()
	ctx := t.Context()
	logger, logs := captureLogs(t)
	core := coreClient(t, rc)
	leases, err := typedcoordv1.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	const simCondition corev1.NodeConditionType = "SelftaintVirtualTest"
	const simTaint = "selftaint.io/virtual-test"
	opts := virtual.Options{
		Names:    []string{node},
		Core:     core,
		Leases:   leases,
		Template: virtual.NodeTemplate{Taints: []corev1.Taint{registrationTaint()}, OptIn: []corev1.Taint{registrationTaint()}},
		Probes: func(string) []agent.ProbeSpec {
			return []agent.ProbeSpec{{
				Entry:     probes.Entry{Probe: virtual.SimulatedProbe{ProbeName: "sim"}, Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond},
				Condition: simCondition,
			}}
		},
		Rules:                []taints.Rule{{Condition: simCondition, Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: simTaint, Effect: corev1.TaintEffectNoSchedule}}},
		HeartbeatPeriod:      time.Minute,
		LeaseDuration:        4 * time.Second,
		StatusUpdateInterval: 2 * time.Second,
		DeleteOnExit:         true,
		Logger:               logger,
	}
	run := runFunc(t, "virtual.Run", 60*time.Second, stoppedByCancel, func(ctx context.Context) error { return virtual.Run(ctx, opts) })

	waitNode(t, admin, node, 30*time.Second, "registered, Ready and the selftaint condition reported", func(n *corev1.Node) bool {
		r, s := taints.FindCondition(n, corev1.NodeReady), taints.FindCondition(n, simCondition)
		return r != nil && r.Status == corev1.ConditionTrue && s != nil && s.Status == corev1.ConditionFalse
	})
	// The Lease is created, then renewed (updated).
	var first *metav1.MicroTime
	poll(t, 30*time.Second, "the node's Lease renewed", func() (bool, error) {
		l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, err
		}
		if first == nil {
			first = l.Spec.RenewTime.DeepCopy()
		}
		return l.Spec.RenewTime.After(first.Time), nil
	})

	// A fault: the node's agent taints the node, then removes the expired
	// annotation.
	key := faults.AnnotationKey(string(simCondition))
	value, err := faults.Spec{Status: corev1.ConditionTrue, ExpiresAt: time.Now().Add(6 * time.Second).UTC().Format(time.RFC3339)}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("injecting a fault: %v", err)
	}
	waitNode(t, admin, node, 30*time.Second, "the fault's taint", func(n *corev1.Node) bool { return hasTaint(n, simTaint) })
	waitNode(t, admin, node, 30*time.Second, "the expired fault removed and its taint lifted", func(n *corev1.Node) bool {
		_, still := n.Annotations[key]
		return !still && !hasTaint(n, simTaint)
	})

	// A pod bound to the node (opted in) runs, and its deletion completes.
	createNamespace(t, admin, podNS)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: podName},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Tolerations: []corev1.Toleration{optIn()},
			Containers:  []corev1.Container{{Name: "c", Image: "example.invalid/app"}},
		},
	}
	if _, err := admin.CoreV1().Pods(podNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "the pod Running", func() (bool, error) {
		p, err := admin.CoreV1().Pods(podNS).Get(ctx, podName, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	poll(t, 30*time.Second, "an Event about the pod from the virtual kubelet", func() (bool, error) {
		evs, err := admin.CoreV1().Events(podNS).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": podName}.String(),
		})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool { return e.Source.Component == "selftaint-virtual" }), nil
	})
	if err := admin.CoreV1().Pods(podNS).Delete(ctx, podName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "the pod's deletion completed by the virtual kubelet", func() (bool, error) {
		_, err := admin.CoreV1().Pods(podNS).Get(ctx, podName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})

	// --delete-on-exit.
	run.check(t)
	if _, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node after exit: %v, want NotFound (deleted on exit)", err)
	}
	checkNotRefused(t, logs)
}
