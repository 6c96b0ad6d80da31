package deploy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// The coordinator's drain identity: the admission policies on its Node and
// pod writes (coordinator-drain-policy.yaml) and the opt-in RBAC of forced
// drains (drain-force/).
const (
	coordinatorNodesPolicy = "selftaint-coordinator-nodes"
	coordinatorPodsPolicy  = "selftaint-coordinator-pods"
	// drainForceDir is the opt-in kustomization, relative to deploy/: not
	// installed with deploy/.
	drainForceDir  = "drain-force"
	drainForceRole = "selftaint-coordinator-drain-force"
	// coordinatorFieldManager is the field manager of the coordinator's
	// server-side apply of its condition (DRAIN.md).
	coordinatorFieldManager = "selftaint-coordinator"
)

// coordinatorMatch is the coordinator's policies' match condition: its
// service account by name, in any namespace.
var coordinatorMatch = []admissionregistrationv1.MatchCondition{{
	Name:       "selftaint-coordinator-service-account",
	Expression: "request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':" + coordinatorSA + "')",
}}

// maintenanceRequest is a valid maintenance request's annotation value.
func maintenanceRequest() string {
	return fleet.MaintenanceRequest{Reason: "deploy test", RequestedBy: "deploy-test", RequestedAt: time.Now()}.Format()
}

// TestCoordinatorDrainManifests checks, without a cluster, what keeps the
// coordinator's drain identity confined: its Node and pod policies fail
// closed, match its service account by name in any namespace and see
// every write they confine; the names they check are the protocol's
// (taints/fleet); the agent's policy names the coordinator's condition as
// never the agent's; the coordinator's roles in deploy/ grant evictions
// and pod reads but no pod deletion, which only drain-force/ grants; and
// the agent's roles grant nothing on pods.
func TestCoordinatorDrainManifests(t *testing.T) {
	ms := readManifests(t, ".")
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	checkDrainPolicy(t, ms, coordinatorNodesPolicy, map[string][]admissionregistrationv1.OperationType{"nodes": all, "nodes/status": all},
		fleet.CordonAnnotation, fleet.OperatorRequestAnnotation, fleet.AgentRequestAnnotation, string(fleet.MaintenanceCondition))
	checkDrainPolicy(t, ms, coordinatorPodsPolicy, map[string][]admissionregistrationv1.OperationType{
		"pods/eviction": {admissionregistrationv1.Create}, "pods": {admissionregistrationv1.Delete},
	}, "DaemonSet", corev1.MirrorPodAnnotationKey)
	agentPolicy, err := yaml.Marshal(find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, policyName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(agentPolicy), "'"+string(fleet.MaintenanceCondition)+"'") {
		t.Errorf("%s does not keep %s from the agent", policyName, fleet.MaintenanceCondition)
	}
	checkPodRights(t, ms)
	force := readManifests(t, drainForceDir)
	role := find[*rbacv1.ClusterRole](t, force, drainForceRole)
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].APIGroups, []string{""}) || !slices.Equal(role.Rules[0].Resources, []string{"pods"}) ||
		!slices.Equal(role.Rules[0].Verbs, []string{"delete"}) || role.Rules[0].ResourceNames != nil {
		t.Errorf("ClusterRole %s rules %+v, want exactly pods delete", drainForceRole, role.Rules)
	}
	checkSubjects(t, force, namespace, func(string) string { return coordinatorSA })
	if b := find[*rbacv1.ClusterRoleBinding](t, force, drainForceRole); b.RoleRef.Name != drainForceRole {
		t.Errorf("ClusterRoleBinding %s binds %s, want %s", drainForceRole, b.RoleRef.Name, drainForceRole)
	}
}

// checkDrainPolicy checks the coordinator's policy name in ms: it matches
// the coordinator's service account by name, fails closed, has a rule for
// each core resource in rules with exactly its operations (every version,
// any name, any namespace), names no namespace, holds each of the literals
// names, and its binding denies.
func checkDrainPolicy(t *testing.T, ms []manifest, name string, rules map[string][]admissionregistrationv1.OperationType, names ...string) {
	t.Helper()
	vap := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, name)
	if !slices.Equal(vap.Spec.MatchConditions, coordinatorMatch) {
		t.Errorf("%s: matchConditions %+v, want %+v", name, vap.Spec.MatchConditions, coordinatorMatch)
	}
	if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("%s: failurePolicy %v, want Fail", name, vap.Spec.FailurePolicy)
	}
	mc := vap.Spec.MatchConstraints
	if mc == nil || mc.NamespaceSelector != nil && len(mc.NamespaceSelector.MatchLabels)+len(mc.NamespaceSelector.MatchExpressions) > 0 {
		t.Fatalf("%s: matchConstraints %+v, want every namespace", name, mc)
	}
	for resource, ops := range rules {
		if !slices.ContainsFunc(mc.ResourceRules, func(r admissionregistrationv1.NamedRuleWithOperations) bool {
			return slices.Equal(r.APIGroups, []string{""}) && slices.Contains(r.Resources, resource) &&
				slices.Equal(r.Operations, ops) && slices.Equal(r.APIVersions, []string{"*"}) && r.ResourceNames == nil
		}) {
			t.Errorf("%s: no rule for %s, every version, %v, any name: %+v", name, resource, ops, mc.ResourceRules)
		}
	}
	checkPolicyText(t, vap, names...)
	binding := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, ms, name)
	if binding.Spec.PolicyName != name || !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %+v, want policy %s with action Deny", binding.Spec, name)
	}
}

// checkPolicyText checks vap holds each of the literals names and names
// no namespace (a namespace overlay would leave it behind).
func checkPolicyText(t *testing.T, vap *admissionregistrationv1.ValidatingAdmissionPolicy, names ...string) {
	t.Helper()
	data, err := yaml.Marshal(vap)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(string(data), n) {
			t.Errorf("%s does not check %s", vap.Name, n)
		}
	}
	if strings.Contains(string(data), "namespace: "+namespace) || strings.Contains(string(data), "'"+namespace+"'") {
		t.Errorf("%s names namespace %s: a namespace overlay would leave it behind", vap.Name, namespace)
	}
}

// checkPodRights: the coordinator's ClusterRole in deploy/ evicts and
// reads pods and writes Nodes; nothing in deploy/ deletes pods or gives
// anyone but the coordinator any pod right.
func checkPodRights(t *testing.T, ms []manifest) {
	t.Helper()
	grants := func(rules []rbacv1.PolicyRule, resource, verb string) bool {
		return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
		})
	}
	coord := find[*rbacv1.ClusterRole](t, ms, coordinatorSA)
	for _, rv := range [][2]string{{"pods/eviction", "create"}, {"pods", "get"}, {"pods", "list"}, {"nodes", "patch"}, {"nodes/status", "patch"}} {
		if !grants(coord.Rules, rv[0], rv[1]) {
			t.Errorf("ClusterRole %s does not grant %s %s", coordinatorSA, rv[1], rv[0])
		}
	}
	for _, m := range ms {
		var rules []rbacv1.PolicyRule
		switch o := m.obj.(type) {
		case *rbacv1.ClusterRole:
			rules = o.Rules
		case *rbacv1.Role:
			rules = o.Rules
		}
		coordinator := strings.HasPrefix(m.meta().GetName(), coordinatorSA)
		for _, r := range rules {
			onPods := slices.ContainsFunc(r.Resources, func(res string) bool { return res == "pods" || strings.HasPrefix(res, "pods/") })
			if onPods && (!coordinator || slices.Contains(r.Verbs, "delete") || slices.Contains(r.Verbs, "deletecollection")) {
				t.Errorf("%s: rule %+v: no pod deletion in deploy/ (drain-force/ is opt-in), and no pod right but the coordinator's", m, r)
			}
		}
	}
}

// waitDrainPolicies waits until the API server enforces the coordinator's
// Node and pod policies (it loads policies asynchronously) on c, the
// coordinator's token: until a dry-run label of node, and an eviction with
// a grace period of a pod that need not exist, are refused by them.
func waitDrainPolicies(t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	waitDrainPoliciesNamed(t, c, namespace, node, coordinatorNodesPolicy, coordinatorPodsPolicy)
}

// waitDrainPoliciesNamed is waitDrainPolicies for the policies named
// nodesPolicy and podsPolicy (a renamed install's), the canary pod in ns.
func waitDrainPoliciesNamed(t *testing.T, c kubernetes.Interface, ns, node, nodesPolicy, podsPolicy string) {
	t.Helper()
	poll(t, time.Minute, "the coordinator's Node policy "+nodesPolicy+" in force", func() (bool, error) {
		_, err := c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(`{"metadata":{"labels":{"policy-canary":"x"}}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "'"+nodesPolicy+"'"), err
	})
	poll(t, time.Minute, "the coordinator's pod policy "+podsPolicy+" in force", func() (bool, error) {
		err := evict(c, ns, "policy-canary", ptrTo[int64](0))(t.Context())
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "'"+podsPolicy+"'"), err
	})
}

// evict asks, with c, the Eviction API to evict pod ns/name, with a grace
// period if one is given.
func evict(c kubernetes.Interface, ns, name string, grace *int64) func(context.Context) error {
	return func(ctx context.Context) error {
		e := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if grace != nil {
			e.DeleteOptions = &metav1.DeleteOptions{GracePeriodSeconds: grace}
		}
		return c.CoreV1().Pods(ns).EvictV1(ctx, e)
	}
}

// deletePod deletes, with c, pod ns/name, with a grace period if one is
// given.
func deletePod(c kubernetes.Interface, ns, name string, grace *int64) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: grace})
	}
}

// createPod creates, as admin, pod ns/name bound to node (which need not
// exist: no kubelet runs it, and a deleted one stays terminating),
// changed by mutate if set.
func createPod(t *testing.T, admin kubernetes.Interface, ns, name, node string, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
	}
	if mutate != nil {
		mutate(p)
	}
	p, err := admin.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return p
}

// cordonPatch is the coordinator's cordon (DRAIN.md): one merge patch,
// with the resourceVersion it read as a precondition, setting
// spec.unschedulable and the cordon annotation with the request's ID.
func cordonPatch(rv, id string) string {
	return fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%q}},"spec":{"unschedulable":true}}`, rv, fleet.CordonAnnotation, id)
}

// uncordonPatch is its uncordon: both removed in one write.
func uncordonPatch(rv string) string {
	return fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:null}},"spec":{"unschedulable":null}}`, rv, fleet.CordonAnnotation)
}

// forgetPatch removes the cordon annotation alone (someone else
// uncordoned the node mid-drain).
func forgetPatch(rv string) string {
	return fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:null}}}`, rv, fleet.CordonAnnotation)
}

// readThenPatch reads node with c and merge-patches it with the body
// patch makes of the resourceVersion read.
func readThenPatch(c kubernetes.Interface, node string, patch func(rv string) string) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch(n.ResourceVersion)), metav1.PatchOptions{})
		return err
	}
}

// applyMaintenance is the coordinator's write of its condition: a
// server-side apply of SelftaintMaintenance alone to nodes/status, under its
// field manager, forced.
func applyMaintenance(c kubernetes.Interface, node string, status corev1.ConditionStatus, reason, message string) func(context.Context) error {
	return func(ctx context.Context) error {
		now := metav1.Now()
		ac := corev1ac.Node(node).WithStatus(corev1ac.NodeStatus().WithConditions(corev1ac.NodeCondition().
			WithType(fleet.MaintenanceCondition).WithStatus(status).WithReason(reason).WithMessage(message).
			WithLastHeartbeatTime(now).WithLastTransitionTime(now)))
		_, err := c.CoreV1().Nodes().ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: coordinatorFieldManager, Force: true})
		return err
	}
}

// mergeNode is a JSON merge patch of the Node.
func mergeNode(body string) nodeWrite { return nodeWrite{pt: types.MergePatchType, body: body} }

// testCoordinatorNodePolicy attacks Nodes with the coordinator's own token:
// a Node that asks for no maintenance, one that asks, and one someone else
// cordoned, through nodes and nodes/status with merge, strategic-merge,
// JSON patches and server-side apply. Each attack is denied and changes
// nothing; creating or deleting a Node is refused by RBAC.
func testCoordinatorNodePolicy(t *testing.T, cp *testcp.ControlPlane) {
	const none, asked, foreign = "drain-none", "drain-asked", "drain-foreign-cordon"
	admin := cp.Client()
	cp.CreateNode(t, none, kubeletNode)
	cp.CreateNode(t, asked, func(n *corev1.Node) {
		kubeletNode(n)
		n.Annotations[fleet.OperatorRequestAnnotation] = maintenanceRequest()
	})
	cp.CreateNode(t, foreign, func(n *corev1.Node) {
		kubeletNode(n)
		n.Annotations[fleet.OperatorRequestAnnotation] = maintenanceRequest()
		n.Spec.Unschedulable = true
	})
	c := coordinatorClient(t, cp, namespace)
	waitDrainPolicies(t, c, none)
	before := map[string]*corev1.Node{}
	for _, n := range []string{none, asked, foreign} {
		before[n] = getNode(t, admin, n)
	}
	cw := c.CoreV1()
	on := func(node, name string, w nodeWrite, deny string) attack {
		return attack{"coordinator on " + node + ": " + name, w.do(cw, node), coordinatorNodesPolicy, deny}
	}
	cordon := mergeNode(fmt.Sprintf(`{"metadata":{"annotations":{%q:"operator/x"}},"spec":{"unschedulable":true}}`, fleet.CordonAnnotation))
	annotation := func(key string) nodeWrite { return mergeMeta(fmt.Sprintf(`{"annotations":{%q:"x"}}`, key)) }
	const together = "only together"
	attacks := []attack{
		on(none, "cordon a Node that asks for no maintenance", cordon, "may cordon only a Node that asks for maintenance"),
		on(none, "add a taint", addTaint("example.com/evil", corev1.TaintEffectNoExecute), "not spec.taints"),
		on(none, "remove a foreign taint", removeTaint("dedicated"), "not spec.taints"),
		on(none, "remove selftaint's own taint", removeTaint("selftaint.io/memory-pressure"), "not spec.taints"),
		on(none, "change a label", mergeMeta(`{"labels":{"team":"evil"}}`), "may change no label of a Node, not team"),
		on(none, "change a foreign annotation", mergeMeta(`{"annotations":{"example.com/owner":"evil"}}`), "not example.com/owner"),
		on(none, "write an operator's maintenance request", annotation(fleet.OperatorRequestAnnotation), "not "+fleet.OperatorRequestAnnotation),
		on(none, "write an agent's drain request", annotation(fleet.AgentRequestAnnotation), "not "+fleet.AgentRequestAnnotation),
		on(none, "write the agent's ownership record", annotation(taints.OwnedTaintsAnnotation), "not "+taints.OwnedTaintsAnnotation),
		on(none, "cordon without the cordon annotation", mergeSpec(`{"unschedulable":true}`), together),
		on(none, "write the cordon annotation alone", annotation(fleet.CordonAnnotation), together),
		on(none, "set podCIDR and providerID", mergeSpec(`{"podCIDR":"10.2.0.0/24","providerID":"x://y"}`), "podCIDR"),
		on(none, "add a finalizer", mergeMeta(`{"finalizers":["example.com/hold"]}`), "finalizers or ownerReferences"),
		on(none, "add an ownerReference", mergeMeta(`{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}`), "finalizers or ownerReferences"),
		on(none, "set the kubelet's Ready False (strategic merge)", statusSMP(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Evil"}]}}`), "only the SelftaintMaintenance condition, not Ready"),
		on(none, "set the kubelet's Ready False (server-side apply)", statusApply(`{"conditions":[{"type":"Ready","status":"False","reason":"Evil"}]}`), "not Ready"),
		on(none, "overwrite the agent's condition", statusApply(`{"conditions":[{"type":"SelftaintMemoryPressure","status":"False","reason":"Evil"}]}`), "not SelftaintMemoryPressure"),
		on(none, "append an exact copy of the kubelet's Ready", appendCondition(t, *taints.FindCondition(before[none], corev1.NodeReady)), "not add or remove a copy of a condition it does not own, not Ready"),
		on(none, "zero cpu and pods capacity", statusSMP(`{"status":{"capacity":{"cpu":"0","pods":"0"},"allocatable":{"cpu":"0","pods":"0"}}}`), "status.capacity"),
		on(none, "zero cpu capacity (server-side apply)", statusApply(`{"capacity":{"cpu":"0"}}`), "not status.capacity"),
		on(none, "remove another writer's extended resource", statusJSON(`[{"op":"remove","path":"/status/capacity/example.com~1other"}]`), "not status.capacity"),
		on(none, "replace the InternalIP", statusSMP(`{"status":{"addresses":[{"type":"InternalIP","address":"203.0.113.66"}]}}`), "not status.addresses"),
		on(none, "write the cordon annotation through status", statusSMP(fmt.Sprintf(`{"metadata":{"annotations":{%q:"x"}}}`, fleet.CordonAnnotation)), "no annotation through nodes/status"),
		on(none, "relabel through status", statusSMP(`{"metadata":{"labels":{"team":"evil"}}}`), "may change no label"),
		on(asked, "cordon and taint in one write", mergeNode(fmt.Sprintf(`{"metadata":{"annotations":{%q:"operator/x"}},"spec":{"unschedulable":true,"taints":[]}}`, fleet.CordonAnnotation)), "not spec.taints"),
		on(asked, "cordon and relabel in one write", mergeNode(fmt.Sprintf(`{"metadata":{"labels":{"team":"evil"},"annotations":{%q:"operator/x"}},"spec":{"unschedulable":true}}`, fleet.CordonAnnotation)), "may change no label"),
		on(asked, "cordon with an empty cordon annotation", mergeNode(fmt.Sprintf(`{"metadata":{"annotations":{%q:""}},"spec":{"unschedulable":true}}`, fleet.CordonAnnotation)), together),
		on(asked, "withdraw the request", mergeMeta(fmt.Sprintf(`{"annotations":{%q:null}}`, fleet.OperatorRequestAnnotation)), "not "+fleet.OperatorRequestAnnotation),
		on(foreign, "uncordon a Node someone else cordoned", mergeSpec(`{"unschedulable":false}`), "may uncordon only a Node it cordoned"),
		on(foreign, "claim someone else's cordon", annotation(fleet.CordonAnnotation), together),
		on(foreign, "claim someone else's cordon and uncordon", mergeNode(fmt.Sprintf(`{"metadata":{"annotations":{%q:"operator/x"}},"spec":{"unschedulable":false}}`, fleet.CordonAnnotation)), "may uncordon only a Node it cordoned"),
		{"coordinator: create a Node", func(ctx context.Context) error {
			_, err := cw.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "made-by-coordinator"}}, metav1.CreateOptions{})
			return err
		}, byRBAC, ""},
		{"coordinator: create a Node by server-side apply", func(ctx context.Context) error {
			_, err := cw.Nodes().Apply(ctx, corev1ac.Node("made-by-coordinator"), metav1.ApplyOptions{FieldManager: coordinatorFieldManager, Force: true})
			return err
		}, byRBAC, ""},
		{"coordinator: delete a Node", func(ctx context.Context) error { return cw.Nodes().Delete(ctx, none, metav1.DeleteOptions{}) }, byRBAC, ""},
	}
	for _, at := range attacks {
		at.check(t)
	}
	for _, n := range []string{none, asked, foreign} {
		checkUnchanged(t, before[n], getNode(t, admin, n))
	}
}

// testCoordinatorDrainWrites makes, with the coordinator's own token, the
// Node writes a drain makes, the way DRAIN.md says: the condition by
// server-side apply under its field manager, forced; the cordon and the
// uncordon as one merge patch with a resourceVersion precondition; the
// cordon annotation forgotten after someone else uncordoned. Each is
// allowed, changes exactly what it says and leaves the kubelet's, the
// agent's and the operator's fields as they were; a cordon with a stale
// resourceVersion is refused by the API server (409), and the same
// request's node cannot be re-marked for another request while cordoned.
func testCoordinatorDrainWrites(t *testing.T, cp *testcp.ControlPlane) {
	const operator, agentAsked, put = "drain-operator", "drain-agent", "drain-put"
	admin := cp.Client()
	cp.CreateNode(t, operator, func(n *corev1.Node) {
		kubeletNode(n)
		n.Annotations[fleet.OperatorRequestAnnotation] = maintenanceRequest()
	})
	cp.CreateNode(t, agentAsked, func(n *corev1.Node) {
		kubeletNode(n)
		n.Annotations[fleet.AgentRequestAnnotation] = maintenanceRequest()
	})
	cp.CreateNode(t, put, func(n *corev1.Node) {
		kubeletNode(n)
		n.Annotations[fleet.OperatorRequestAnnotation] = maintenanceRequest()
	})
	c := coordinatorClient(t, cp, namespace)
	waitDrainPolicies(t, c, operator)
	before := getNode(t, admin, operator)
	const id = "operator/2026-01-01T00:00:00Z"
	allowed := func(name string, do func(context.Context) error) attack {
		return attack{"coordinator: " + name, do, "", ""}
	}
	for _, at := range []attack{
		allowed("say Waiting", applyMaintenance(c, operator, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, "1st in line of 1")),
		allowed("cordon", readThenPatch(c, operator, func(rv string) string { return cordonPatch(rv, id) })),
		allowed("say Draining", applyMaintenance(c, operator, corev1.ConditionTrue, fleet.ReasonDraining, "evicted 0 of 1 pods; remaining: ns/a")),
		{"coordinator: mark the cordon as another request's", mergeMeta(fmt.Sprintf(`{"annotations":{%q:"operator/other"}}`, fleet.CordonAnnotation)).do(c.CoreV1(), operator), coordinatorNodesPolicy, "only together"},
		allowed("say Drained", applyMaintenance(c, operator, corev1.ConditionTrue, fleet.ReasonDrained, "evicted 1 of 1 pods")),
	} {
		at.check(t)
	}
	n := getNode(t, admin, operator)
	if !n.Spec.Unschedulable || n.Annotations[fleet.CordonAnnotation] != id {
		t.Errorf("after the cordon: unschedulable %v, %s %q; want true and %q", n.Spec.Unschedulable, fleet.CordonAnnotation, n.Annotations[fleet.CordonAnnotation], id)
	}
	stale := cordonPatch(before.ResourceVersion, id)
	if _, err := c.CoreV1().Nodes().Patch(t.Context(), operator, types.MergePatchType, []byte(stale), metav1.PatchOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("a cordon with a stale resourceVersion: %v, want a 409 Conflict", err)
	}
	for _, at := range []attack{
		allowed("uncordon", readThenPatch(c, operator, uncordonPatch)),
		allowed("say Released", applyMaintenance(c, operator, corev1.ConditionFalse, fleet.ReasonReleased, "the request was withdrawn")),
	} {
		at.check(t)
	}
	after := getNode(t, admin, operator)
	if after.Spec.Unschedulable || after.Annotations[fleet.CordonAnnotation] != "" {
		t.Errorf("after the uncordon: unschedulable %v, annotations %v", after.Spec.Unschedulable, after.Annotations)
	}
	if cond := taints.FindCondition(after, fleet.MaintenanceCondition); cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != fleet.ReasonReleased {
		t.Errorf("%s = %+v, want False %s", fleet.MaintenanceCondition, cond, fleet.ReasonReleased)
	}
	// Everything else as it was: the condition is all that is new.
	after.Status.Conditions = slices.DeleteFunc(after.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == fleet.MaintenanceCondition })
	before.ResourceVersion = after.ResourceVersion
	checkUnchanged(t, before, after)

	// The agent's request: cordoned; someone else uncordons it mid-drain;
	// the coordinator forgets its cordon, and a later cordon by someone
	// else is not its to lift.
	for _, at := range []attack{
		allowed("cordon for the agent's request", readThenPatch(c, agentAsked, func(rv string) string { return cordonPatch(rv, "agent/2026-01-01T00:00:00Z") })),
		{"admin: uncordon it", mergeSpec(`{"unschedulable":false}`).do(admin.CoreV1(), agentAsked), "", ""},
		allowed("forget its cordon", readThenPatch(c, agentAsked, forgetPatch)),
		{"admin: cordon it", mergeSpec(`{"unschedulable":true}`).do(admin.CoreV1(), agentAsked), "", ""},
		{"coordinator: uncordon the admin's cordon", readThenPatch(c, agentAsked, uncordonPatch), coordinatorNodesPolicy, "may uncordon only a Node it cordoned"},
	} {
		at.check(t)
	}

	// The coordinator may write by update (PUT) too, under the same rules.
	for _, at := range []attack{
		allowed("cordon by update", func(ctx context.Context) error {
			n, err := c.CoreV1().Nodes().Get(ctx, put, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Unschedulable, n.Annotations[fleet.CordonAnnotation] = true, id
			_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}),
		{"coordinator: taint by update", func(ctx context.Context) error {
			n, err := c.CoreV1().Nodes().Get(ctx, put, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = nil
			_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}, coordinatorNodesPolicy, "not spec.taints"},
	} {
		at.check(t)
	}
}

// testCoordinatorPods checks, with the coordinator's own token, what it
// may do to pods without drain-force/: read and list a node's pods, evict
// one (the Eviction API deletes a pending pod at once, and refuses a
// running one its PodDisruptionBudget protects: 429), but not with a
// grace period of its own, and never delete a pod or read a secret.
func testCoordinatorPods(t *testing.T, cp *testcp.ControlPlane) {
	const ns, node = "drain-pods", "drain-pods-node"
	admin := cp.Client()
	ctx := t.Context()
	createNamespace(t, admin, ns)
	createPod(t, admin, ns, "pending", node, nil)
	createPod(t, admin, ns, "kept", node, nil)
	guarded := createPod(t, admin, ns, "guarded", node, nil)
	guarded.Status.Phase = corev1.PodRunning
	guarded.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, guarded, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guarded"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: guarded.Labels}},
	}
	if _, err := admin.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := coordinatorClient(t, cp, namespace)
	cp.CreateNode(t, node, nil)
	waitDrainPolicies(t, c, node)

	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil || len(pods.Items) != 3 {
		t.Fatalf("the coordinator listing the node's pods: %v, %d pods; want the 3 there", err, len(pods.Items))
	}
	if _, err := c.CoreV1().Pods(ns).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Errorf("the coordinator reading a pod: %v", err)
	}
	for _, at := range []attack{
		{"coordinator: evict with a grace period of 0", evict(c, ns, "kept", ptrTo[int64](0)), coordinatorPodsPolicy, "only with its own grace period"},
		{"coordinator: evict with a grace period of 1", evict(c, ns, "kept", ptrTo[int64](1)), coordinatorPodsPolicy, "not pod " + ns + "/kept with 1s"},
		{"coordinator: delete a pod", deletePod(c, ns, "kept", nil), byRBAC, ""},
		{"coordinator: watch pods", func(ctx context.Context) error {
			w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err == nil {
				w.Stop()
			}
			return err
		}, byRBAC, ""},
		{"coordinator: get a secret", func(ctx context.Context) error {
			_, err := c.CoreV1().Secrets(namespace).Get(ctx, "anything", metav1.GetOptions{})
			return err
		}, byRBAC, ""},
		{"coordinator: list secrets", func(ctx context.Context) error {
			_, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		}, byRBAC, ""},
		{"coordinator: evict a pending pod", evict(c, ns, "pending", nil), "", ""},
	} {
		at.check(t)
	}
	if err := evict(c, ns, "guarded", nil)(ctx); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting a pod its PodDisruptionBudget protects: %v, want 429 Too Many Requests", err)
	}
	if p, err := admin.CoreV1().Pods(ns).Get(ctx, "pending", metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("the evicted pod is not being deleted: %+v", p.ObjectMeta)
	}
	for _, name := range []string{"kept", "guarded"} {
		if p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Errorf("pod %s after the refused evictions and deletion: %v, %v; want it there, not deleting", name, err, p.DeletionTimestamp)
		}
	}

	// The agent: no eviction, no pod.
	agentC, err := kubernetes.NewForConfig(asServiceAccount(cp, agentSA, node))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []attack{
		{"agent: evict a pod on its node", evict(agentC, ns, "kept", nil), byRBAC, ""},
		{"agent: delete a pod on its node", deletePod(agentC, ns, "kept", nil), byRBAC, ""},
		{"agent: read a pod on its node", func(ctx context.Context) error {
			_, err := agentC.CoreV1().Pods(ns).Get(ctx, "kept", metav1.GetOptions{})
			return err
		}, byRBAC, ""},
	} {
		at.check(t)
	}
}

// testDrainForce installs drain-force/ (and removes it at the end, waiting
// until RBAC refuses again, before the tests that check the coordinator
// may not delete pods run): the coordinator's token may then delete a pod
// with its own grace period, but not with a shorter one, nor a DaemonSet's
// pod or a mirror pod.
func testDrainForce(t *testing.T, cp *testcp.ControlPlane) {
	const ns, node = "drain-force", "drain-force-node"
	admin := cp.Client()
	ctx := t.Context()
	createNamespace(t, admin, ns)
	cp.CreateNode(t, node, nil)
	mayDelete := func(want bool) func() (bool, error) {
		user := saUser(coordinatorSA)
		return func() (bool, error) {
			sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: saGroups(user),
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Resource: "pods", Namespace: ns, Version: "v1"},
			}}, metav1.CreateOptions{})
			return err == nil && sar.Status.Allowed == want, err
		}
	}
	createManifests(t, admin, readManifests(t, drainForceDir))
	t.Cleanup(func() {
		rbac := admin.RbacV1()
		for _, err := range []error{
			rbac.ClusterRoleBindings().Delete(context.Background(), drainForceRole, metav1.DeleteOptions{}),
			rbac.ClusterRoles().Delete(context.Background(), drainForceRole, metav1.DeleteOptions{}),
		} {
			if err != nil {
				t.Errorf("removing drain-force: %v", err)
			}
		}
		poll(t, time.Minute, "pods delete refused again after drain-force is removed", mayDelete(false))
	})
	poll(t, time.Minute, "drain-force's pods delete in the RBAC cache", mayDelete(true))
	c := coordinatorClient(t, cp, namespace)
	waitDrainPolicies(t, c, node)

	for _, name := range []string{"plain", "own-grace", "short-grace"} {
		createPod(t, admin, ns, name, node, nil)
	}
	createPod(t, admin, ns, "daemon", node, func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "00000000-0000-0000-0000-000000000002", Controller: ptrTo(true)}}
	})
	createPod(t, admin, ns, "mirror", node, func(p *corev1.Pod) {
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	})
	for _, at := range []attack{
		{"forced: delete with a grace period of 0", deletePod(c, ns, "short-grace", ptrTo[int64](0)), coordinatorPodsPolicy, "only with its own grace period (30s), not pod " + ns + "/short-grace with 0s"},
		{"forced: delete a DaemonSet's pod", deletePod(c, ns, "daemon", nil), coordinatorPodsPolicy, "may not delete a pod of a DaemonSet or a mirror pod"},
		{"forced: delete a mirror pod", deletePod(c, ns, "mirror", nil), coordinatorPodsPolicy, "may not delete a pod of a DaemonSet or a mirror pod"},
		{"forced: evict with a grace period of 0", evict(c, ns, "short-grace", ptrTo[int64](0)), coordinatorPodsPolicy, "only with its own grace period"},
		{"forced: delete a pod", deletePod(c, ns, "plain", nil), "", ""},
		{"forced: delete a pod with its own grace period", deletePod(c, ns, "own-grace", ptrTo[int64](30)), "", ""},
	} {
		at.check(t)
	}
	for name, deleting := range map[string]bool{"plain": true, "own-grace": true, "short-grace": false, "daemon": false, "mirror": false} {
		switch p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); {
		case err != nil:
			t.Errorf("pod %s: %v; want it there (its deletion waits for a kubelet), deleting: %v", name, err, deleting)
		case (p.DeletionTimestamp != nil) != deleting:
			t.Errorf("pod %s deleting: %v, want %v", name, p.DeletionTimestamp != nil, deleting)
		}
	}
}
