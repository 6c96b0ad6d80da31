package deploy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// virtualOwnLeaseMsg is what the virtual leases policy says when the
// service account of namespace own writes (op) a Lease there that is not
// its coordinator's.
func virtualOwnLeaseMsg(own, op, name string) string {
	return "may write in its own namespace " + own + " only the Leases of its coordinator, selftaint-coordinator, selftaint-grant-" +
		virtualPrefix + "... and selftaint-maintenance-" + virtualPrefix + "... (labelled selftaint.io/maintenance=true), not " + op + " of " + name
}

// TestVirtualDrainsManifests checks, without a cluster, the opt-in that
// lets the virtual fleet's coordinator evict: deploy/virtual/drains/
// grants exactly pods/eviction create to the virtual service account,
// deploy/virtual/ alone grants no eviction, and the policy that holds its
// evictions to the pods' own grace period is in deploy/virtual/, in force
// before the opt-in, matching the service account in any namespace.
func TestVirtualDrainsManifests(t *testing.T) {
	ms := readManifests(t, virtualDrainsDir)
	role := find[*rbacv1.ClusterRole](t, ms, virtualDrainsRole)
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].APIGroups, []string{""}) || !slices.Equal(role.Rules[0].Resources, []string{"pods/eviction"}) ||
		!slices.Equal(role.Rules[0].Verbs, []string{"create"}) || role.Rules[0].ResourceNames != nil {
		t.Errorf("ClusterRole %s rules %+v, want exactly pods/eviction create", virtualDrainsRole, role.Rules)
	}
	if b := find[*rbacv1.ClusterRoleBinding](t, ms, virtualDrainsRole); b.RoleRef.Name != virtualDrainsRole {
		t.Errorf("ClusterRoleBinding %s binds %s, want %s", virtualDrainsRole, b.RoleRef.Name, virtualDrainsRole)
	}
	checkSubjects(t, ms, virtualNamespace, func(string) string { return virtualSA })

	base := readManifests(t, "virtual")
	for _, m := range base {
		var rules []rbacv1.PolicyRule
		switch o := m.obj.(type) {
		case *rbacv1.ClusterRole:
			rules = o.Rules
		case *rbacv1.Role:
			rules = o.Rules
		}
		for _, r := range rules {
			if slices.Contains(r.Resources, "pods/eviction") {
				t.Errorf("%s: rule %+v: deploy/virtual grants no eviction (deploy/virtual/drains/ is opt-in)", m, r)
			}
		}
	}
	vap := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, base, virtualEvictionsPolicy)
	checkVirtualPolicy(t, vap)
	if mc := vap.Spec.MatchConstraints; mc == nil || len(mc.ResourceRules) != 1 || !slices.Equal(mc.ResourceRules[0].Resources, []string{"pods/eviction"}) ||
		!slices.Equal(mc.ResourceRules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
		t.Errorf("%s: matchConstraints %+v, want pods/eviction CREATE", virtualEvictionsPolicy, mc)
	}
	if b := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, base, virtualEvictionsPolicy); b.Spec.PolicyName != virtualEvictionsPolicy ||
		!slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %s: policy %q actions %v, want %s and Deny", b.Name, b.Spec.PolicyName, b.Spec.ValidationActions, virtualEvictionsPolicy)
	}
}

// testVirtualDrainWrites makes, with the virtual service account's own
// token (deploy/virtual/drains/ not applied), the writes the virtual
// fleet's coordinator makes to drain a node, on a virtual node and on real
// ones. Allowed on the virtual node: its slot Lease in its own namespace
// (labelled selftaint.io/maintenance=true), updated and deleted; its cordon
// and uncordon; its SelftaintMaintenance condition by server-side apply;
// listing its pods. Denied: a slot Lease that is not labelled, loses its
// label, is named for a real Node or is in another namespace; cordoning a
// real Node that asks for maintenance (one named like a virtual node too)
// or applying the condition to it; evicting any pod (RBAC, without
// drains/). The real Nodes are left as they were.
func testVirtualDrainWrites(t *testing.T, cp *testcp.ControlPlane, sa *rest.Config) {
	const (
		podNS    = "vdrain-writes"
		real     = "drain-real"
		realLike = virtualPrefix + "drain-real" // a real Node with a virtual node's name
		vnode    = virtualPrefix + "drained"
		id       = "operator/2026-01-01T00:00:00Z"
	)
	admin := cp.Client()
	ctx := t.Context()
	own := virtualNamespace
	c, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Create(ctx, virtualNode(vnode), metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering virtual node %s: %v", vnode, err)
	}
	asked := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, fleet.OperatorRequestAnnotation, maintenanceRequest())
	if _, err := admin.CoreV1().Nodes().Patch(ctx, vnode, types.MergePatchType, asked, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	before := map[string]*corev1.Node{}
	for _, n := range []string{real, realLike} {
		before[n] = cp.CreateNode(t, n, func(n *corev1.Node) {
			kubeletNode(n)
			n.Annotations[fleet.OperatorRequestAnnotation] = maintenanceRequest()
		})
	}
	createNamespace(t, admin, podNS)
	createPod(t, admin, podNS, "on-virtual", vnode, nil)
	createPod(t, admin, podNS, "on-real", real, nil)
	// The admin's Lease, named like a virtual node's slot but not labelled.
	notSlot := fleet.SlotName(virtualPrefix + "admins")
	if _, err := admin.CoordinationV1().Leases(own).Create(ctx, leaseIn(own, notSlot), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	leases := c.CoordinationV1()
	slotLease := func(ns, name, label string) func(context.Context) error {
		return func(ctx context.Context) error {
			l := leaseIn(ns, name)
			if label != "" {
				l.Labels = map[string]string{fleet.SlotLabel: label}
			}
			_, err := leases.Leases(ns).Create(ctx, l, metav1.CreateOptions{})
			return err
		}
	}
	updateSlot := func(name string, change func(*coordinationv1.Lease)) func(context.Context) error {
		return func(ctx context.Context) error {
			l, err := leases.Leases(own).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(l)
			_, err = leases.Leases(own).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}
	}
	deleteLease := func(name string) func(context.Context) error {
		return func(ctx context.Context) error { return leases.Leases(own).Delete(ctx, name, metav1.DeleteOptions{}) }
	}
	nsMsg := func(name, ns string) string {
		return "may write Leases only in kube-node-lease and in its own namespace " + own + ", not " + name + " in namespace " + ns
	}
	prefixMsg := func(n string) string { return "starts with " + virtualPrefix + " (node-name-prefix), not " + n }
	notVirtualMsg := func(n string) string {
		return "only virtual Nodes (labelled selftaint.io/virtual=true), and " + n + " is not"
	}
	cordon := func(rv string) string { return cordonPatch(rv, id) }
	slot := fleet.SlotName(vnode)
	for _, a := range []attack{
		// Its slot Leases.
		{"take a virtual Node's slot", slotLease(own, slot, "true"), "", ""},
		{"record the drain's phase on it", updateSlot(slot, func(l *coordinationv1.Lease) {
			l.Annotations = map[string]string{fleet.SlotPhaseAnnotation: fleet.PhaseDraining}
		}), "", ""},
		{"remove the slot's label", updateSlot(slot, func(l *coordinationv1.Lease) { delete(l.Labels, fleet.SlotLabel) }),
			virtualLeasesPolicy, virtualOwnLeaseMsg(own, "UPDATE", slot)},
		{"create an unlabelled slot", slotLease(own, fleet.SlotName(vnode+"-2"), ""), virtualLeasesPolicy, virtualOwnLeaseMsg(own, "CREATE", fleet.SlotName(vnode+"-2"))},
		{"create a slot labelled false", slotLease(own, fleet.SlotName(vnode+"-2"), "false"), virtualLeasesPolicy, virtualOwnLeaseMsg(own, "CREATE", fleet.SlotName(vnode+"-2"))},
		{"create a real Node's slot", slotLease(own, fleet.SlotName(real), "true"), virtualLeasesPolicy, virtualOwnLeaseMsg(own, "CREATE", fleet.SlotName(real))},
		{"label the admin's Lease named like a slot", updateSlot(notSlot, func(l *coordinationv1.Lease) { l.Labels = map[string]string{fleet.SlotLabel: "true"} }),
			virtualLeasesPolicy, virtualOwnLeaseMsg(own, "UPDATE", notSlot)},
		{"delete the admin's Lease named like a slot", deleteLease(notSlot), virtualLeasesPolicy, virtualOwnLeaseMsg(own, "DELETE", notSlot)},
		{"create a slot in kube-system", slotLease(metav1.NamespaceSystem, slot, "true"), virtualLeasesPolicy, nsMsg(slot, metav1.NamespaceSystem)},
		{"create a slot in " + podNS, slotLease(podNS, slot, "true"), virtualLeasesPolicy, nsMsg(slot, podNS)},
		{"create a slot in kube-node-lease", slotLease(corev1.NamespaceNodeLease, slot, "true"), virtualLeasesPolicy,
			"Leases of nodes whose name starts with " + virtualPrefix + " (node-name-prefix), not " + slot},
		// Its Node writes: cordon, condition, uncordon.
		{"cordon the virtual Node", readThenPatch(c, vnode, cordon), "", ""},
		{"say Draining on the virtual Node", applyMaintenance(c, vnode, corev1.ConditionTrue, fleet.ReasonDraining, "evicted 0 of 1 pods"), "", ""},
		{"list the virtual Node's pods", func(ctx context.Context) error {
			_, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", vnode).String()})
			return err
		}, "", ""},
		{"uncordon the virtual Node", readThenPatch(c, vnode, uncordonPatch), "", ""},
		{"say Released on the virtual Node", applyMaintenance(c, vnode, corev1.ConditionFalse, fleet.ReasonReleased, "the request was withdrawn"), "", ""},
		{"give back the virtual Node's slot", deleteLease(slot), "", ""},
		{"cordon a real Node that asks for maintenance", readThenPatch(c, real, cordon), virtualNodesPolicy, prefixMsg(real)},
		{"cordon a real Node named like a virtual one", readThenPatch(c, realLike, cordon), virtualNodesPolicy, notVirtualMsg(realLike)},
		{"say Draining on a real Node", applyMaintenance(c, real, corev1.ConditionTrue, fleet.ReasonDraining, "evil"), virtualNodesPolicy, prefixMsg(real)},
		{"say Draining on a real Node named like a virtual one", applyMaintenance(c, realLike, corev1.ConditionTrue, fleet.ReasonDraining, "evil"), virtualNodesPolicy, notVirtualMsg(realLike)},
		// Evictions: none without drains/.
		{"evict a pod on the virtual Node", evict(c, podNS, "on-virtual", nil), byRBAC, ""},
		{"evict a pod on a real Node", evict(c, podNS, "on-real", nil), byRBAC, ""},
		{"delete a pod on a real Node (a forced drain)", deletePod(c, podNS, "on-real", nil), virtualPodsPolicy, "pod on-real is bound to node " + real},
	} {
		a.check(t)
	}
	for n, b := range before {
		checkUnchanged(t, b, getNode(t, admin, n))
	}
}

// testVirtualDrain runs the selftaint binary as the Deployment's pod would
// (its arguments, $POD_NAMESPACE, the service account's token) and has an
// operator ask for the maintenance of a virtual node that runs a pod. The
// virtual fleet's coordinator takes the node's slot Lease in its
// namespace, cordons the node and tries to evict the pod: without
// deploy/virtual/drains/ the eviction is refused and the node's
// SelftaintMaintenance condition says so (DrainBlocked, naming the missing
// permission); once it is applied the pod is evicted (and the virtual
// kubelet completes its deletion) and the node is Drained. The request
// withdrawn, the node is uncordoned, the condition says Released and the
// slot Lease is deleted. Nothing but those evictions is refused on the
// way. With drains/ the token may evict any pod (what README's Security
// section says), but never with a grace period of its own.
func testVirtualDrain(t *testing.T, cp *testcp.ControlPlane, bin string, dep *appsv1.Deployment, ns string) {
	const (
		node  = virtualPrefix + "2"
		podNS = "vdrain"
		pod   = "evictee"
	)
	admin := cp.Client()
	ctx := t.Context()
	// A pool of 10: the other subtests' virtual nodes (NotReady ones count
	// as unavailable) never keep this drain waiting.
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("coordinator:\n  maintenance:\n    maxParallel: 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sa := tokenConfig(t, cp, ns, virtualSA)
	args := append(slices.Clone(dep.Spec.Template.Spec.Containers[0].Args),
		"--kubeconfig="+writeKubeconfig(t, sa), "--config="+cfg, "--stats-interval=0")
	proc, logs := runProcess(t, bin, args, "POD_NAMESPACE="+ns)
	waitNode(t, admin, node, time.Minute, "registered and Ready", func(n *corev1.Node) bool {
		r := taints.FindCondition(n, corev1.NodeReady)
		return r != nil && r.Status == corev1.ConditionTrue
	})
	runPods(t, admin, podNS, node, map[string][]corev1.Toleration{pod: nil})

	req := fleet.MaintenanceRequest{Reason: "deploy test: a drain drill", RequestedBy: "deploy-test", RequestedAt: time.Now(), EvictUnreplicated: true}
	setMaintenanceRequest(t, admin, node, &req)
	waitMaintenance(t, admin, node, 2*time.Minute, "DrainBlocked: no permission to evict "+podNS+"/"+pod,
		maintenanceIs(corev1.ConditionTrue, fleet.ReasonDrainBlocked, podNS+"/"+pod, "no permission to evict pods", "pods/eviction create", virtualDrainsDir))
	checkDrainStarted(t, admin, ns, node, podNS, pod)

	createManifests(t, admin, readManifests(t, virtualDrainsDir))
	poll(t, 3*time.Minute, "pod "+podNS+"/"+pod+" evicted and gone", func() (bool, error) {
		_, err := admin.CoreV1().Pods(podNS).Get(ctx, pod, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	waitMaintenance(t, admin, node, time.Minute, "Drained", maintenanceIs(corev1.ConditionTrue, fleet.ReasonDrained))
	poll(t, time.Minute, "the slot Lease in phase Drained", func() (bool, error) {
		l, err := admin.CoordinationV1().Leases(ns).Get(ctx, fleet.SlotName(node), metav1.GetOptions{})
		return err == nil && l.Annotations[fleet.SlotPhaseAnnotation] == fleet.PhaseDrained, err
	})

	setMaintenanceRequest(t, admin, node, nil)
	released := maintenanceIs(corev1.ConditionFalse, fleet.ReasonReleased)
	waitMaintenance(t, admin, node, time.Minute, "Released and uncordoned", func(n *corev1.Node) bool {
		_, marked := n.Annotations[fleet.CordonAnnotation]
		return !n.Spec.Unschedulable && !marked && released(n)
	})
	poll(t, time.Minute, "the slot Lease deleted", func() (bool, error) {
		_, err := admin.CoordinationV1().Leases(ns).Get(ctx, fleet.SlotName(node), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	checkVirtualEvictionReach(t, admin, sa, podNS+"-reach")
	proc.check(t) // SIGTERM: it exits 0
	checkOnlyEvictionsRefused(t, logs)
}

// setMaintenanceRequest writes, as an operator (admin), req as node's
// maintenance request, or withdraws it when req is nil.
func setMaintenanceRequest(t *testing.T, admin kubernetes.Interface, node string, req *fleet.MaintenanceRequest) {
	t.Helper()
	value := "null"
	if req != nil {
		value = fmt.Sprintf("%q", req.Format())
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%s}}}`, fleet.OperatorRequestAnnotation, value)
	if _, err := admin.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("writing the maintenance request of %s: %v", node, err)
	}
}

// maintenanceIs holds for a Node whose SelftaintMaintenance condition has
// status and reason, and a message holding each of in.
func maintenanceIs(status corev1.ConditionStatus, reason string, in ...string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		c := taints.FindCondition(n, fleet.MaintenanceCondition)
		return c != nil && c.Status == status && c.Reason == reason && containsAll(c.Message, in)
	}
}

// waitMaintenance is waitNode saying, if it fails, how the node's cordon
// and maintenance condition last looked.
func waitMaintenance(t *testing.T, c kubernetes.Interface, name string, timeout time.Duration, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	testkit.WaitNode(t, c, name, timeout, what, func(n *corev1.Node) string {
		if n == nil {
			return "none"
		}
		return fmt.Sprintf("unschedulable %v, annotation %s %q, condition %+v", n.Spec.Unschedulable, fleet.CordonAnnotation,
			n.Annotations[fleet.CordonAnnotation], taints.FindCondition(n, fleet.MaintenanceCondition))
	}, ok)
}

// checkDrainStarted checks node's drain started though its pod podNS/pod
// could not be evicted: node cordoned by selftaint, its slot Lease in ns
// labelled and held by it, the pod still there.
func checkDrainStarted(t *testing.T, admin kubernetes.Interface, ns, node, podNS, pod string) {
	t.Helper()
	ctx := t.Context()
	n := getNode(t, admin, node)
	if !n.Spec.Unschedulable || n.Annotations[fleet.CordonAnnotation] == "" {
		t.Errorf("node %s while draining: unschedulable %v, annotation %s %q; want it cordoned by selftaint", node, n.Spec.Unschedulable, fleet.CordonAnnotation, n.Annotations[fleet.CordonAnnotation])
	}
	slot, err := admin.CoordinationV1().Leases(ns).Get(ctx, fleet.SlotName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the slot Lease of %s in %s: %v", node, ns, err)
	}
	if slot.Labels[fleet.SlotLabel] != "true" || slot.Spec.HolderIdentity == nil || *slot.Spec.HolderIdentity != node {
		t.Errorf("slot Lease %s: labels %v, holder %v; want %s=true held by %s", slot.Name, slot.Labels, slot.Spec.HolderIdentity, fleet.SlotLabel, node)
	}
	if p, err := admin.CoreV1().Pods(podNS).Get(ctx, pod, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("pod %s/%s before drains/: %v (deleting: %v), want it running", podNS, pod, err, p != nil && p.DeletionTimestamp != nil)
	}
}

// checkVirtualEvictionReach checks, with drains/ applied, what the virtual
// token sa may evict beyond its nodes (README's Security section): a pod
// on a real node, in a new namespace ns, but not with a grace period of
// its own.
func checkVirtualEvictionReach(t *testing.T, admin kubernetes.Interface, sa *rest.Config, ns string) {
	t.Helper()
	const pod = "on-a-real-node"
	createNamespace(t, admin, ns)
	createPod(t, admin, ns, pod, "real-node", nil)
	c, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	// The policy was loaded long ago: a dry run makes sure, without harm
	// if it were not.
	poll(t, time.Minute, "policy "+virtualEvictionsPolicy+" in force", func() (bool, error) {
		err := c.CoreV1().Pods(ns).EvictV1(t.Context(), &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Namespace: ns, Name: pod},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0), DryRun: []string{metav1.DryRunAll}},
		})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "'"+virtualEvictionsPolicy+"'"), err
	})
	for _, a := range []attack{
		{"evict with a grace period of 0", evict(c, ns, pod, ptrTo[int64](0)), virtualEvictionsPolicy,
			"may evict a pod only with its own grace period (no deleteOptions.gracePeriodSeconds), not pod " + ns + "/" + pod + " with 0s"},
		{"evict a pod on a real node (drains/ reaches every pod)", evict(c, ns, pod, nil), "", ""},
	} {
		a.check(t)
	}
}

// checkOnlyEvictionsRefused fails t if the logs show a request refused,
// by RBAC or by admission, other than an eviction.
func checkOnlyEvictionsRefused(t *testing.T, logs *testkit.LogBuffer) {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		if l := strings.ToLower(line); (strings.Contains(l, "forbidden") || strings.Contains(l, "denied")) && !strings.Contains(l, "pods/eviction") {
			t.Errorf("a request was refused: %s", line)
		}
	}
}
