package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/virtual"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// The names deploy/virtual's admission policies agree on.
const (
	// virtualPrefixAnnotation is each virtual policy's parameter, on the
	// policy itself: the virtual nodes' name prefix.
	virtualPrefixAnnotation = "virtual.selftaint.io/node-name-prefix"
	virtualPrefix           = "vnode-"
	// virtualTaintAnnotation is the nodes policy's other parameter: the
	// registration taint every Node the service account writes carries.
	virtualTaintAnnotation = "virtual.selftaint.io/registration-taint"
	virtualTaint           = "selftaint.io/virtual=true:NoSchedule"
	// virtualNamespace is deploy/virtual's own namespace.
	virtualNamespace    = "selftaint-virtual"
	virtualNodesPolicy  = "selftaint-virtual-nodes"
	virtualPodsPolicy   = "selftaint-virtual-pods"
	virtualLeasesPolicy = "selftaint-virtual-leases"
)

// virtualPolicies are the virtual policies with parameters (the prefix):
// each is its own parameter object.
var virtualPolicies = []string{virtualNodesPolicy, virtualPodsPolicy, virtualLeasesPolicy}

// virtualConfigMapsPolicy confines ConfigMap writes to the guard, and
// virtualEvictionsPolicy evictions to the pods' own grace period; they
// have no parameter.
const (
	virtualConfigMapsPolicy = "selftaint-virtual-configmaps"
	virtualEvictionsPolicy  = "selftaint-virtual-evictions"
)

// The opt-in kustomization that lets the virtual fleet's coordinator
// evict (drains of virtual nodes), relative to deploy/: not installed
// with deploy/virtual, and its ClusterRole.
const (
	virtualDrainsDir  = "virtual/drains"
	virtualDrainsRole = "selftaint-virtual-drains"
)

// virtualMatch is every virtual policy's match condition: the service
// account by name, in any namespace.
var virtualMatch = []admissionregistrationv1.MatchCondition{{
	Name:       "selftaint-virtual-service-account",
	Expression: "request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':" + virtualSA + "')",
}}

// deploymentFlag is the values of --name= among the Deployment's args.
func deploymentFlag(dep *appsv1.Deployment, name string) []string {
	var out []string
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestVirtualPolicyManifests checks, without a cluster, what keeps the
// virtual policies in force: each policy's prefix annotation is the
// Deployment's --name-prefix and the nodes policy's registration taint its
// --register-with-taints; each policy fails closed, matches the service
// account by name in any namespace (no namespace in the policy, so a
// namespace overlay keeps it) and is its own required parameter object, so
// it can never be in force without its parameters. Everything namespaced
// is in deploy/virtual's own namespace, whose Role is the coordinator's
// (never one in kube-node-lease: a namespace overlay would move it out),
// and the names the policies and RBAC allow there are the coordinator's.
func TestVirtualPolicyManifests(t *testing.T) {
	ms := readManifests(t, "virtual")
	dep := find[*appsv1.Deployment](t, ms, "selftaint-virtual")
	prefixes := deploymentFlag(dep, "name-prefix")
	if want := []string{virtualPrefix}; !slices.Equal(prefixes, want) {
		t.Errorf("Deployment --name-prefix %q, want %q", prefixes, want)
	}
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--coordinator") {
		t.Errorf("Deployment args %q: no --coordinator (the virtual fleet's coordinator: without it no virtual node gets NoExecute)", dep.Spec.Template.Spec.Containers[0].Args)
	}
	checkVirtualNamespaces(t, ms, dep)

	for _, name := range virtualPolicies {
		vap := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, name)
		// Each policy's parameter, and the Deployment's flag, are one value.
		if got, ok := vap.Annotations[virtualPrefixAnnotation]; !ok || !slices.Equal([]string{got}, prefixes) {
			t.Errorf("%s: annotation %s = %q (present: %v), want the Deployment's --name-prefix %q", name, virtualPrefixAnnotation, got, ok, prefixes)
		}
		if pk := vap.Spec.ParamKind; pk == nil || pk.APIVersion != "admissionregistration.k8s.io/v1" || pk.Kind != "ValidatingAdmissionPolicy" {
			t.Errorf("%s: paramKind %+v, want the policy itself (admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy)", name, pk)
		}
		checkVirtualPolicy(t, vap)
		b := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, ms, name)
		checkVirtualBinding(t, b, name)
	}
	// The registration taint: the nodes policy's parameter, the
	// Deployment's --register-with-taints, in the form both write.
	nodes := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, virtualNodesPolicy)
	var registered []string
	for _, v := range deploymentFlag(dep, "register-with-taints") {
		for _, s := range strings.Split(v, ",") {
			tt, err := taints.ParseTaint(s)
			if err != nil {
				t.Fatalf("Deployment --register-with-taints %q: %v", v, err)
			}
			registered = append(registered, taints.Format(tt))
		}
	}
	if got := nodes.Annotations[virtualTaintAnnotation]; got != virtualTaint || !slices.Contains(registered, got) {
		t.Errorf("%s: annotation %s = %q, want %q, one of the Deployment's --register-with-taints %q", virtualNodesPolicy, virtualTaintAnnotation, got, virtualTaint, registered)
	}
	// The pods policy's opt-in is the same taint.
	pods := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, virtualPodsPolicy)
	if got, want := pods.Annotations[virtualTaintAnnotation], nodes.Annotations[virtualTaintAnnotation]; got != want {
		t.Errorf("%s: annotation %s = %q, want the nodes policy's %q", virtualPodsPolicy, virtualTaintAnnotation, got, want)
	}
	// Leases in every namespace: RBAC grants them cluster-wide, so the
	// policy must see every write to say which.
	leases := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, virtualLeasesPolicy)
	if mc := leases.Spec.MatchConstraints; mc == nil || mc.NamespaceSelector != nil && len(mc.NamespaceSelector.MatchLabels)+len(mc.NamespaceSelector.MatchExpressions) > 0 {
		t.Errorf("%s: matchConstraints %+v, want leases in every namespace (no namespaceSelector)", virtualLeasesPolicy, mc)
	}
	cms := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, virtualConfigMapsPolicy)
	checkVirtualPolicy(t, cms)
	if b := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, ms, virtualConfigMapsPolicy); b.Spec.PolicyName != virtualConfigMapsPolicy ||
		!slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %s: policy %q actions %v, want %s and Deny", b.Name, b.Spec.PolicyName, b.Spec.ValidationActions, virtualConfigMapsPolicy)
	}
	checkCoordinatorNames(t, ms, leases, cms)
}

// checkVirtualPolicy checks what every virtual policy must be: failing
// closed, matching the service account in any namespace, naming no
// namespace but kube-node-lease (its own comes from the user name).
func checkVirtualPolicy(t *testing.T, vap *admissionregistrationv1.ValidatingAdmissionPolicy) {
	t.Helper()
	if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("%s: failurePolicy %v, want Fail", vap.Name, vap.Spec.FailurePolicy)
	}
	data, err := yaml.Marshal(vap)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"'" + virtualNamespace + "'", metav1.NamespaceSystem} {
		if strings.Contains(string(data), ns) {
			t.Errorf("%s names namespace %s: a namespace overlay would leave it behind", vap.Name, ns)
		}
	}
	if !slices.Equal(vap.Spec.MatchConditions, virtualMatch) {
		t.Errorf("%s: matchConditions %+v, want %+v", vap.Name, vap.Spec.MatchConditions, virtualMatch)
	}
}

// checkVirtualNamespaces checks deploy/virtual has a namespace of its own,
// holding everything namespaced, the service account's bindings name it,
// and the Deployment tells the pod its namespace.
func checkVirtualNamespaces(t *testing.T, ms []manifest, dep *appsv1.Deployment) {
	t.Helper()
	find[*corev1.Namespace](t, ms, virtualNamespace)
	for _, m := range ms {
		if ns := m.meta().GetNamespace(); ns != "" && ns != virtualNamespace {
			t.Errorf("%s: namespace %s, want %s (a Role in kube-node-lease would be moved out of it by a namespace overlay: grant with a ClusterRole)", m, ns, virtualNamespace)
		}
		if _, ok := m.obj.(*corev1.ConfigMap); ok {
			t.Errorf("%s: the virtual policies' parameters are their own annotations; a separate object, if missing, would deny every user's writes", m)
		}
		var subjects []rbacv1.Subject
		switch o := m.obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			subjects = o.Subjects
		case *rbacv1.RoleBinding:
			subjects = o.Subjects
		default:
			continue
		}
		if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: virtualSA, Namespace: virtualNamespace}}; !slices.Equal(subjects, want) {
			t.Errorf("%s: subjects %+v, want %+v", m, subjects, want)
		}
	}
	var env *corev1.EnvVar
	for i, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "POD_NAMESPACE" {
			env = &dep.Spec.Template.Spec.Containers[0].Env[i]
		}
	}
	if env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("Deployment POD_NAMESPACE %+v, want the downward API's metadata.namespace (where its coordinator's Leases and guard are)", env)
	}
}

// celOf is the CEL of vap's variables and validations, one line each.
func celOf(vap *admissionregistrationv1.ValidatingAdmissionPolicy) string {
	var out []string
	for _, v := range vap.Spec.Variables {
		out = append(out, v.Expression)
	}
	for _, v := range vap.Spec.Validations {
		out = append(out, v.Expression)
	}
	return strings.Join(out, "\n")
}

// checkCoordinatorNames checks the names RBAC and the policies allow in
// the virtual namespace are the coordinator's own: its leader Lease, its
// grants' prefix and the guard.
func checkCoordinatorNames(t *testing.T, ms []manifest, leases, cms *admissionregistrationv1.ValidatingAdmissionPolicy) {
	t.Helper()
	for _, want := range []string{
		"variables.name == '" + fleet.DefaultLeaderLease + "'", "variables.name.startsWith('" + fleet.GrantPrefix + "' + variables.prefix)",
		"variables.name.startsWith('" + fleet.SlotPrefix + "' + variables.prefix)", "object.metadata.?labels[?'" + fleet.SlotLabel + "'].orValue('') == 'true'",
		"oldObject.metadata.?labels[?'" + fleet.SlotLabel + "'].orValue('') == 'true'",
	} {
		if !strings.Contains(celOf(leases), want) {
			t.Errorf("%s does not allow %s", virtualLeasesPolicy, want)
		}
	}
	if !strings.Contains(celOf(cms), "variables.name == '"+fleet.DefaultGuardName+"'") {
		t.Errorf("%s does not name the guard %s", virtualConfigMapsPolicy, fleet.DefaultGuardName)
	}
	role := find[*rbacv1.Role](t, ms, "selftaint-virtual-coordinator")
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "configmaps") && len(r.ResourceNames) > 0 && !slices.Equal(r.ResourceNames, []string{fleet.DefaultGuardName}) {
			t.Errorf("Role %s: configmaps %v, want the guard %s only", role.Name, r.ResourceNames, fleet.DefaultGuardName)
		}
		if slices.Contains(r.Resources, "configmaps") && len(r.ResourceNames) == 0 && !slices.Equal(r.Verbs, []string{"create"}) {
			t.Errorf("Role %s: configmaps %v on any name, want create only (the only verb RBAC cannot name)", role.Name, r.Verbs)
		}
	}
}

// checkVirtualBinding checks binding b enforces policy: Deny, with the
// policy itself as its required parameter object.
func checkVirtualBinding(t *testing.T, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, policy string) {
	t.Helper()
	if b.Spec.PolicyName != policy || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %s: policy %q actions %v, want %s and Deny", b.Name, b.Spec.PolicyName, b.Spec.ValidationActions, policy)
	}
	if p := b.Spec.ParamRef; p == nil || p.Name != policy || p.Namespace != "" || p.Selector != nil ||
		p.ParameterNotFoundAction == nil || *p.ParameterNotFoundAction != admissionregistrationv1.DenyAction {
		t.Errorf("binding %s: paramRef %+v, want the policy %s itself (no namespace), denying when it is missing", b.Name, p, policy)
	}
}

// TestVirtualPolicyNamePrefixOverlay renders deploy/virtual under a
// kustomize name prefix: each binding's policyName and paramRef.name follow
// its renamed policy (kustomizeconfig.yaml), so the policies stay in force
// with their parameters.
func TestVirtualPolicyNamePrefixOverlay(t *testing.T) {
	const prefix = "team-"
	ms := kustomizeOverlay(t, "virtual", "namePrefix: "+prefix)
	for _, name := range virtualPolicies {
		find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, prefix+name)
		checkVirtualBinding(t, find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, ms, prefix+name), prefix+name)
	}
	for _, name := range []string{virtualConfigMapsPolicy, virtualEvictionsPolicy} {
		find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, prefix+name)
		if b := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, ms, prefix+name); b.Spec.PolicyName != prefix+name {
			t.Errorf("binding %s: policy %q, want %s", b.Name, b.Spec.PolicyName, prefix+name)
		}
	}
}

// TestVirtualPolicyOnControlPlane creates deploy/virtual on a real etcd and
// kube-apiserver (with the controller that type-checks admission policies)
// and then, as the virtual service account (with its own token):
//   - attacks the policies: every write to a real Node, a real node's pods
//     or its Lease, to a Lease or ConfigMap not its coordinator's, and every
//     Node without the registration taint is denied, and the virtual
//     counterparts are allowed;
//   - runs virtual nodes through their whole life with the policies in
//     force, never refused;
//   - runs virtual nodes against a real Node of the same name: refused,
//     and the Node is left untouched (not even with admin credentials);
//   - stops a virtual node whose label an admin removed, and does not
//     delete it on exit;
//   - checks by access review what RBAC grants it and what not;
//   - removes and then empties the policies' prefix annotation: the
//     service account may then write nothing, and an admin and a kubelet
//     are unaffected; then deletes a policy and leaves its binding: it
//     denies no one.
//
// The control plane, with deploy/ installed too, is shared with
// TestOnControlPlane (whose service accounts no virtual policy matches),
// and the subtests, each on Nodes and objects of its own, run in parallel.
// PrefixMissing installs deploy/virtual elsewhere (overlayAndPrefix): it
// changes the policies' parameters and deletes one, and while the API
// server catches up with a deleted policy its binding denies every user's
// Lease writes ("no params found"), the coordinator's and the virtual
// nodes' included.
func TestVirtualPolicyOnControlPlane(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver and virtual nodes")
	t.Parallel()
	cp := installed.get(t)
	sa := tokenConfig(t, cp, virtualNamespace, virtualSA)

	for _, sub := range []struct {
		name string
		test func(*testing.T)
	}{
		{"PrefixMissing", testVirtualPrefixMissing},
		{"Attacks", func(t *testing.T) { testVirtualPolicyAttacks(t, cp, sa) }},
		{"RunUnderPolicy", func(t *testing.T) { testVirtualRBACIsEnough(t, cp, sa) }},
		{"RefusesRealNode", func(t *testing.T) { testVirtualRefusesRealNode(t, cp, sa) }},
		{"StopsWhenUnlabelled", func(t *testing.T) { testVirtualStopsWhenUnlabelled(t, cp) }},
		{"RBACIsTight", func(t *testing.T) { testVirtualRBACIsTight(t, cp) }},
		{"DrainWrites", func(t *testing.T) { testVirtualDrainWrites(t, cp, sa) }},
	} {
		t.Run(sub.name, func(t *testing.T) {
			t.Parallel()
			sub.test(t)
		})
	}
}

// waitVirtualPolicies waits until each virtual policy denies the service
// account sa, of namespace ns, a write (the API server loads policies and
// their params asynchronously). The writes are dry runs.
func waitVirtualPolicies(t *testing.T, cp *testcp.ControlPlane, sa *rest.Config, ns string) {
	t.Helper()
	const realNode = "policy-canary-node"
	ctx := t.Context()
	cp.CreateNode(t, realNode, nil)
	canary := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "policy-canary"},
		Spec:       corev1.PodSpec{NodeName: realNode, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
	}
	if _, err := cp.Client().CoreV1().Pods(canary.Namespace).Create(ctx, canary, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	core, leases := coreClient(t, sa), leaseClient(t, sa)
	dry := []string{metav1.DryRunAll}
	for _, c := range []struct {
		policy string
		do     func() error
	}{
		{virtualNodesPolicy, func() error {
			_, err := core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: virtualPrefix + "canary"}}, metav1.CreateOptions{DryRun: dry})
			return err
		}},
		{virtualPodsPolicy, func() error {
			return core.Pods(canary.Namespace).Delete(ctx, canary.Name, metav1.DeleteOptions{DryRun: dry})
		}},
		{virtualLeasesPolicy, func() error {
			_, err := leases.Leases(corev1.NamespaceNodeLease).Create(ctx, lease(realNode), metav1.CreateOptions{DryRun: dry})
			return err
		}},
		{virtualConfigMapsPolicy, func() error {
			_, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "policy-canary"}}, metav1.CreateOptions{DryRun: dry})
			return err
		}},
	} {
		poll(t, time.Minute, "policy "+c.policy+" in force", func() (bool, error) {
			err := c.do()
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), c.policy), err
		})
	}
}

// checkPolicyTypes waits for the API server's type check of each named
// policy's CEL against the schemas of what it matches and of its param (a
// ValidatingAdmissionPolicy), and fails t on any warning.
func checkPolicyTypes(t *testing.T, admin kubernetes.Interface, names ...string) {
	t.Helper()
	for _, name := range names {
		var vap *admissionregistrationv1.ValidatingAdmissionPolicy
		poll(t, time.Minute, "the type check of policy "+name, func() (bool, error) {
			var err error
			vap, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(t.Context(), name, metav1.GetOptions{})
			return err == nil && vap.Status.TypeChecking != nil && vap.Status.ObservedGeneration == vap.Generation, err
		})
		for _, w := range vap.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("policy %s type check: %s: %s", name, w.FieldRef, w.Warning)
		}
	}
}

func leaseClient(t *testing.T, rc *rest.Config) *typedcoordv1.CoordinationV1Client {
	t.Helper()
	c, err := typedcoordv1.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// lease is node's Lease in kube-node-lease, as a kubelet writes it.
func lease(node string) *coordinationv1.Lease { return leaseIn(corev1.NamespaceNodeLease, node) }

// leaseIn is a Lease like node's, in namespace ns.
func leaseIn(ns, node string) *coordinationv1.Lease {
	holder, seconds := node, int32(40)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: node},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
}

// virtualNode is a virtual Node as `selftaint virtual` registers it in a
// cluster: labelled virtual, with the registration taint.
func virtualNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{virtual.LabelVirtual: "true"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{registrationTaint()}},
	}
}

// registrationTaint is virtualTaint.
func registrationTaint() corev1.Taint {
	t, err := taints.ParseTaint(virtualTaint)
	if err != nil {
		panic(err) // a constant
	}
	return t
}

// optIn is a pod's opt-in into virtual nodes: a toleration of the
// registration taint by its key.
func optIn() corev1.Toleration {
	return corev1.Toleration{Key: registrationTaint().Key, Operator: corev1.TolerationOpExists}
}

// byRBAC, as an attack's policy, wants it refused by RBAC (no admission
// policy involved).
const byRBAC = "RBAC"

// attack is one write as the virtual service account: allowed when policy
// is empty, refused by RBAC when it is byRBAC, else denied by policy with a
// message holding deny.
type attack struct {
	name   string
	do     func(context.Context) error
	policy string
	deny   string
}

func (a attack) check(t *testing.T) {
	t.Helper()
	err := a.do(t.Context())
	if a.matches(err) {
		return
	}
	switch {
	case a.policy == "":
		t.Errorf("%s: %v, want allowed", a.name, err)
	case err == nil:
		t.Errorf("%s: allowed, want denied by %s with %q", a.name, a.policy, a.deny)
	default:
		t.Errorf("%s: %v, want Forbidden by %s with %q", a.name, err, a.policy, a.deny)
	}
}

// matches reports whether err, what a's write returned, is what a wants.
func (a attack) matches(err error) bool {
	switch a.policy {
	case "":
		return err == nil
	case byRBAC:
		return apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
	}
	return apierrors.IsForbidden(err) && containsAll(err.Error(), []string{"'" + a.policy + "'", a.deny})
}

// testVirtualPolicyAttacks writes, as the virtual service account, to real
// Nodes (one named like a virtual node), their pods and Leases, to Leases
// outside kube-node-lease and its own namespace, to other Leases and
// ConfigMaps in its own namespace, and tries to register or keep a virtual
// Node without its registration taint (all denied); and to a virtual node,
// its pod and Lease, and its coordinator's Leases and guard (allowed); an
// admin's writes to the real ones are not affected.
func testVirtualPolicyAttacks(t *testing.T, cp *testcp.ControlPlane, rc *rest.Config) {
	const (
		real     = "real-1"
		realLike = virtualPrefix + "real" // a real Node with a virtual node's name
		vnode    = virtualPrefix + "a"
		podNS    = "policy-pods"
	)
	admin := cp.Client()
	ctx := t.Context()
	versions := map[string]string{}
	for _, n := range []string{real, realLike} {
		versions[n] = cp.CreateNode(t, n, func(n *corev1.Node) { n.Labels = map[string]string{"team": "infra"} }).ResourceVersion
	}
	createNamespace(t, admin, podNS)
	// Pods on the virtual node: on-virtual opted in (a toleration of the
	// registration taint by its key); the others did not.
	reg := registrationTaint()
	tolerations := map[string][]corev1.Toleration{
		"on-virtual":          {optIn()},
		"on-virtual-equal":    {{Key: reg.Key, Value: reg.Value, Effect: reg.Effect}},
		"wildcard-on-virtual": {{Operator: corev1.TolerationOpExists}},
		"other-value":         {{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}, {Key: reg.Key, Value: "false"}},
		"other-effect":        {{Key: reg.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
	}
	for name, node := range map[string]string{"on-real": real, "on-real-like": realLike, "on-virtual": vnode, "on-virtual-equal": vnode,
		"wildcard-on-virtual": vnode, "other-value": vnode, "other-effect": vnode, "unbound": "", "unbound-2": "", "admin-deletes": real} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: name, Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{NodeName: node, Tolerations: tolerations[name], Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
		}
		if _, err := admin.CoreV1().Pods(podNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Leases the service account may not renew: a real Node's, leases
	// outside kube-node-lease (RBAC grants leases in every namespace), the
	// control plane's leader Leases.
	for _, l := range []*coordinationv1.Lease{lease(realLike), lease(real), leaseIn(podNS, vnode+"-elsewhere")} {
		if _, err := admin.CoordinationV1().Leases(l.Namespace).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// (TestOnControlPlane/CoordinatorPolicy may have created these.)
	for _, l := range controlPlaneLeases {
		ensureLease(t, admin, metav1.NamespaceSystem, l, nil)
	}
	// A guard elsewhere (the real coordinator's, say).
	if _, err := admin.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultGuardName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	core, leases := coreClient(t, rc), leaseClient(t, rc)
	patchNode := func(name, patch string, sub ...string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := core.Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, sub...)
			return err
		}
	}
	jsonPatchNode := func(name, patch string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := core.Nodes().Patch(ctx, name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
			return err
		}
	}
	createNode := func(n *corev1.Node) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := core.Nodes().Create(ctx, n, metav1.CreateOptions{})
			return err
		}
	}
	deletePod := func(name string) func(context.Context) error {
		return func(ctx context.Context) error { return core.Pods(podNS).Delete(ctx, name, metav1.DeleteOptions{}) }
	}
	// The service account may not read pods: it updates the admin's copy.
	podRunning := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			p, err := admin.CoreV1().Pods(podNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Status.Phase = corev1.PodRunning
			_, err = core.Pods(podNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		}
	}
	// What the virtual kubelet may write of a pod's status, and more.
	podStatus := func(name string, change func(*corev1.Pod)) func(context.Context) error {
		return func(ctx context.Context) error {
			p, err := admin.CoreV1().Pods(podNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(p)
			_, err = core.Pods(podNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		}
	}
	runningAt := func(ip string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			now := metav1.Now()
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		}
	}
	rejectPod := func(p *corev1.Pod) {
		p.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: virtual.ReasonNotOptedIn, Message: "Pod was rejected: not opted in", QOSClass: p.Status.QOSClass}
	}
	relabel := func(p *corev1.Pod) { p.Labels["k8s-app"] = "kube-dns" }
	annotate := func(p *corev1.Pod) { p.Annotations = map[string]string{"attacker": "x"} }
	unlabel := func(p *corev1.Pod) { delete(p.Labels, "app") }
	finalize := func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/attacker") }
	both := func(fs ...func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			for _, f := range fs {
				f(p)
			}
		}
	}
	patchPodStatus := func(name, patch string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := core.Pods(podNS).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
			return err
		}
	}
	notOptedIn := func(name string) string {
		return "may run only pods that tolerate its registration taint " + virtualTaint + " by its key " + reg.Key +
			" (a toleration of every taint is no opt-in), and pod " + name + " does not: it may only reject it"
	}
	statusOnly := func(name string) string {
		return "may change the status of pod " + name + " only, not its labels, annotations, finalizers or owner references"
	}
	createLease := func(node string) func(context.Context) error {
		return createLeaseIn(leases, corev1.NamespaceNodeLease, node)
	}
	renewLease := func(node string) func(context.Context) error {
		return renewLeaseIn(leases, corev1.NamespaceNodeLease, node)
	}
	deleteLeaseIn := func(ns, name string) func(context.Context) error {
		return func(ctx context.Context) error { return leases.Leases(ns).Delete(ctx, name, metav1.DeleteOptions{}) }
	}
	own := virtualNamespace
	writeConfigMap := func(ns, name string, update bool) func(context.Context) error {
		return func(ctx context.Context) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": time.Now().String()}}
			var err error
			if update {
				_, err = core.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			} else {
				_, err = core.ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			}
			return err
		}
	}
	notReady := `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Attack"}]}}`
	notVirtualMsg := func(n string) string {
		return "only virtual Nodes (labelled selftaint.io/virtual=true), and " + n + " is not"
	}
	prefixMsg := func(n string) string { return "starts with " + virtualPrefix + " (node-name-prefix), not " + n }
	taintMsg := func(n string, created bool) string {
		m := "may create or modify only Nodes that carry the taint " + virtualTaint + " (registration-taint), and Node " + n
		if created {
			return m + " does not"
		}
		return m + " would not: it may not remove or change it"
	}
	nsMsg := func(name, ns string) string {
		return "may write Leases only in kube-node-lease and in its own namespace " + own + ", not " + name + " in namespace " + ns
	}
	cmMsg := func(name string) string {
		return "may write only its guard ConfigMap, selftaint-guard, in its own namespace " + own + ", not " + name + " in namespace " + own
	}
	unlabelled := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: virtualPrefix + "unlabelled"}}
	untainted := virtualNode(virtualPrefix + "untainted")
	untainted.Spec.Taints = nil
	withTaint := func(name string, taint corev1.Taint) *corev1.Node {
		n := virtualNode(name)
		n.Spec.Taints = []corev1.Taint{taint}
		return n
	}
	preferred, otherValue := reg, reg
	preferred.Effect, otherValue.Value = corev1.TaintEffectPreferNoSchedule, "false"
	vnode2 := virtualPrefix + "b"
	regJSON := fmt.Sprintf(`{"key":%q,"value":%q,"effect":%q}`, reg.Key, reg.Value, reg.Effect)

	for _, a := range []attack{
		// Nodes.
		{"create a Node without the virtual label", createNode(unlabelled), virtualNodesPolicy, "create only Nodes labelled selftaint.io/virtual=true, and " + unlabelled.Name + " is not"},
		{"create a virtual Node whose name lacks the prefix", createNode(virtualNode("other-1")), virtualNodesPolicy, prefixMsg("other-1")},
		{"create a virtual Node without the registration taint", createNode(untainted), virtualNodesPolicy, taintMsg(untainted.Name, true)},
		{"create a virtual Node whose registration taint is PreferNoSchedule", createNode(withTaint(virtualPrefix+"preferred", preferred)), virtualNodesPolicy, taintMsg(virtualPrefix+"preferred", true)},
		{"create a virtual Node whose registration taint has another value", createNode(withTaint(virtualPrefix+"other-value", otherValue)), virtualNodesPolicy, taintMsg(virtualPrefix+"other-value", true)},
		{"create a virtual Node", createNode(virtualNode(vnode)), "", ""},
		{"label a real Node", patchNode(real, `{"metadata":{"labels":{"team":"attacker"}}}`), virtualNodesPolicy, prefixMsg(real)},
		{"taint a real Node", patchNode(real, `{"spec":{"taints":[{"key":"x","effect":"NoExecute"}]}}`), virtualNodesPolicy, prefixMsg(real)},
		{"label a real Node named like a virtual one", patchNode(realLike, `{"metadata":{"labels":{"team":"attacker"}}}`), virtualNodesPolicy, notVirtualMsg(realLike)},
		{"mark a real Node virtual", patchNode(realLike, `{"metadata":{"labels":{"selftaint.io/virtual":"true"}}}`), virtualNodesPolicy, notVirtualMsg(realLike)},
		{"set a real Node's status Ready False", patchNode(realLike, notReady, "status"), virtualNodesPolicy, notVirtualMsg(realLike)},
		{"delete a real Node", func(ctx context.Context) error { return core.Nodes().Delete(ctx, realLike, metav1.DeleteOptions{}) }, virtualNodesPolicy, notVirtualMsg(realLike)},
		{"delete a real Node without the prefix", func(ctx context.Context) error { return core.Nodes().Delete(ctx, real, metav1.DeleteOptions{}) }, virtualNodesPolicy, prefixMsg(real)},
		{"label a virtual Node", patchNode(vnode, `{"metadata":{"labels":{"team":"drill"}}}`), "", ""},
		{"taint a virtual Node", patchNode(vnode, `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"},`+regJSON+`]}}`), "", ""},
		{"set a virtual Node's status Ready False", patchNode(vnode, notReady, "status"), "", ""},
		{"remove a virtual Node's label", patchNode(vnode, `{"metadata":{"labels":{"selftaint.io/virtual":null}}}`), virtualNodesPolicy, "may not remove or change the label selftaint.io/virtual of Node " + vnode},
		{"change a virtual Node's label through its status", patchNode(vnode, `{"metadata":{"labels":{"selftaint.io/virtual":"false"}}}`, "status"), virtualNodesPolicy, "may not remove or change the label selftaint.io/virtual of Node " + vnode},
		{"remove a virtual Node's taints", patchNode(vnode, `{"spec":{"taints":[]}}`), virtualNodesPolicy, taintMsg(vnode, false)},
		{"replace a virtual Node's taints without the registration taint", patchNode(vnode, `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}`), virtualNodesPolicy, taintMsg(vnode, false)},
		{"remove the registration taint by JSON patch", jsonPatchNode(vnode, `[{"op":"remove","path":"/spec/taints/1"}]`), virtualNodesPolicy, taintMsg(vnode, false)},
		{"make the registration taint PreferNoSchedule", jsonPatchNode(vnode, `[{"op":"replace","path":"/spec/taints/1/effect","value":"PreferNoSchedule"}]`), virtualNodesPolicy, taintMsg(vnode, false)},
		{"change the registration taint's value", jsonPatchNode(vnode, `[{"op":"replace","path":"/spec/taints/1/value","value":"false"}]`), virtualNodesPolicy, taintMsg(vnode, false)},
		// A virtual Node an admin untainted is not the service account's
		// to keep: its status writes are refused until it puts the taint
		// back.
		{"create a second virtual Node", createNode(virtualNode(vnode2)), "", ""},
		{"admin: untaint it", func(ctx context.Context) error {
			_, err := admin.CoreV1().Nodes().Patch(ctx, vnode2, types.MergePatchType, []byte(`{"spec":{"taints":[]}}`), metav1.PatchOptions{})
			return err
		}, "", ""},
		{"set the untainted Node's status", patchNode(vnode2, notReady, "status"), virtualNodesPolicy, taintMsg(vnode2, false)},
		{"put the registration taint back", patchNode(vnode2, `{"spec":{"taints":[`+regJSON+`]}}`), "", ""},
		{"delete the second virtual Node", func(ctx context.Context) error { return core.Nodes().Delete(ctx, vnode2, metav1.DeleteOptions{}) }, "", ""},
		// Pods.
		{"update the status of a pod on a real Node", podRunning("on-real"), virtualPodsPolicy, "pod on-real is bound to node " + real},
		{"delete a pod on a real Node", deletePod("on-real"), virtualPodsPolicy, "pod on-real is bound to node " + real},
		{"delete a pending pod", deletePod("unbound"), virtualPodsPolicy, "pod unbound is bound to no node"},
		{"mark a pending pod Running", podRunning("unbound-2"), virtualPodsPolicy, "pod unbound-2 is bound to no node"},
		{"update the status of a pod on a virtual Node", podRunning("on-virtual"), "", ""},
		// The Service hijack: a pod that did not opt in (a DaemonSet's
		// that tolerates every taint) reported Ready at an address of the
		// token's choosing, or relabelled through pods/status.
		{"report a wildcard-tolerating pod Running and Ready at " + hijackIP, podStatus("wildcard-on-virtual", runningAt(hijackIP)), virtualPodsPolicy, notOptedIn("wildcard-on-virtual")},
		{"report a wildcard-tolerating pod Running", podRunning("wildcard-on-virtual"), virtualPodsPolicy, notOptedIn("wildcard-on-virtual")},
		{"report it Failed with a pod IP", podStatus("wildcard-on-virtual", both(rejectPod, func(p *corev1.Pod) { p.Status.PodIP = hijackIP })), virtualPodsPolicy, notOptedIn("wildcard-on-virtual")},
		{"report it Failed and Ready", podStatus("wildcard-on-virtual", both(rejectPod, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		})), virtualPodsPolicy, notOptedIn("wildcard-on-virtual")},
		{"report Ready a pod whose toleration of the key has another value", podStatus("other-value", runningAt("10.64.0.9")), virtualPodsPolicy, notOptedIn("other-value")},
		{"report Ready a pod whose toleration of the key has another effect", podStatus("other-effect", runningAt("10.64.0.9")), virtualPodsPolicy, notOptedIn("other-effect")},
		{"relabel a wildcard-tolerating pod k8s-app=kube-dns through pods/status", podStatus("wildcard-on-virtual", relabel), virtualPodsPolicy, statusOnly("wildcard-on-virtual")},
		{"relabel it while rejecting it", podStatus("wildcard-on-virtual", both(rejectPod, relabel)), virtualPodsPolicy, statusOnly("wildcard-on-virtual")},
		{"relabel an opted-in pod k8s-app=kube-dns through pods/status", podStatus("on-virtual", relabel), virtualPodsPolicy, statusOnly("on-virtual")},
		{"relabel it while reporting it Ready", podStatus("on-virtual", both(runningAt("10.64.0.8"), relabel)), virtualPodsPolicy, statusOnly("on-virtual")},
		{"take an opted-in pod out of its Service through pods/status", podStatus("on-virtual", unlabel), virtualPodsPolicy, statusOnly("on-virtual")},
		{"annotate an opted-in pod through pods/status", podStatus("on-virtual", annotate), virtualPodsPolicy, statusOnly("on-virtual")},
		{"add a finalizer to an opted-in pod through pods/status", podStatus("on-virtual", finalize), virtualPodsPolicy, statusOnly("on-virtual")},
		{"relabel a pod by a merge patch of pods/status", patchPodStatus("on-virtual", `{"metadata":{"labels":{"k8s-app":"kube-dns"}}}`), byRBAC, ""},
		// What the virtual kubelet does: run opted-in pods, reject the
		// others.
		{"report an opted-in pod Running and Ready with its IP", podStatus("on-virtual", runningAt("10.64.0.8")), "", ""},
		{"report Ready a pod that tolerates the registration taint exactly", podStatus("on-virtual-equal", runningAt("10.64.0.10")), "", ""},
		{"reject a wildcard-tolerating pod (Failed, no pod IP)", podStatus("wildcard-on-virtual", rejectPod), "", ""},
		{"delete a pod on a virtual Node", deletePod("on-virtual"), "", ""},
		{"delete a pod that did not opt in", deletePod("wildcard-on-virtual"), "", ""},
		// Leases in kube-node-lease and elsewhere.
		{"create a real Node's Lease", createLease(real + "-new"), virtualLeasesPolicy, prefixMsg(real + "-new")},
		{"renew a real Node's Lease", renewLease(real), virtualLeasesPolicy, prefixMsg(real)},
		{"delete a real Node's Lease", deleteLeaseIn(corev1.NamespaceNodeLease, real), byRBAC, ""},
		{"create a virtual Node's Lease outside kube-node-lease", createLeaseIn(leases, podNS, vnode), virtualLeasesPolicy, nsMsg(vnode, podNS)},
		{"renew a Lease named like a virtual node's outside kube-node-lease", renewLeaseIn(leases, podNS, vnode+"-elsewhere"), virtualLeasesPolicy, nsMsg(vnode+"-elsewhere", podNS)},
		{"take over kube-scheduler's leader Lease", renewLeaseIn(leases, metav1.NamespaceSystem, "kube-scheduler"), virtualLeasesPolicy, nsMsg("kube-scheduler", metav1.NamespaceSystem)},
		{"take over kube-controller-manager's leader Lease", renewLeaseIn(leases, metav1.NamespaceSystem, "kube-controller-manager"), virtualLeasesPolicy, nsMsg("kube-controller-manager", metav1.NamespaceSystem)},
		{"delete kube-scheduler's leader Lease", deleteLeaseIn(metav1.NamespaceSystem, "kube-scheduler"), byRBAC, ""},
		{"create a Lease in kube-system", createLeaseIn(leases, metav1.NamespaceSystem, vnode), virtualLeasesPolicy, nsMsg(vnode, metav1.NamespaceSystem)},
		{"create a grant Lease in kube-system", createLeaseIn(leases, metav1.NamespaceSystem, fleet.GrantName(vnode)), virtualLeasesPolicy, nsMsg(fleet.GrantName(vnode), metav1.NamespaceSystem)},
		{"create a virtual Node's Lease", createLease(vnode), "", ""},
		{"renew a virtual Node's Lease", renewLease(vnode), "", ""},
		// Its coordinator's Leases in its own namespace, and nothing else
		// there.
		{"create its leader Lease", createLeaseIn(leases, own, fleet.DefaultLeaderLease), "", ""},
		{"renew its leader Lease", renewLeaseIn(leases, own, fleet.DefaultLeaderLease), "", ""},
		{"create a virtual Node's grant", createLeaseIn(leases, own, fleet.GrantName(vnode)), "", ""},
		{"renew a virtual Node's grant", renewLeaseIn(leases, own, fleet.GrantName(vnode)), "", ""},
		{"delete a virtual Node's grant", deleteLeaseIn(own, fleet.GrantName(vnode)), "", ""},
		{"create a real Node's grant in its namespace", createLeaseIn(leases, own, fleet.GrantName(real)), virtualLeasesPolicy, virtualOwnLeaseMsg(own, "CREATE", fleet.GrantName(real))},
		{"create a Lease named kube-scheduler in its namespace", createLeaseIn(leases, own, "kube-scheduler"), virtualLeasesPolicy, virtualOwnLeaseMsg(own, "CREATE", "kube-scheduler")},
		{"create a virtual Node's heartbeat in its namespace", createLeaseIn(leases, own, vnode), virtualLeasesPolicy, virtualOwnLeaseMsg(own, "CREATE", vnode)},
		// ConfigMaps: its guard only.
		{"create its guard", writeConfigMap(own, fleet.DefaultGuardName, false), "", ""},
		{"update its guard", writeConfigMap(own, fleet.DefaultGuardName, true), "", ""},
		{"create another ConfigMap in its namespace", writeConfigMap(own, "other", false), virtualConfigMapsPolicy, cmMsg("other")},
		{"create a guard in kube-system", writeConfigMap(metav1.NamespaceSystem, fleet.DefaultGuardName+"-2", false), byRBAC, ""},
		{"update the guard in kube-system", writeConfigMap(metav1.NamespaceSystem, fleet.DefaultGuardName, true), byRBAC, ""},
		{"delete its guard", func(ctx context.Context) error {
			return core.ConfigMaps(own).Delete(ctx, fleet.DefaultGuardName, metav1.DeleteOptions{})
		}, byRBAC, ""},
		// Deleting the virtual Node last.
		{"delete a virtual Node", func(ctx context.Context) error { return core.Nodes().Delete(ctx, vnode, metav1.DeleteOptions{}) }, "", ""},
	} {
		a.check(t)
	}

	// The gap, by design: names with the prefix belong to virtual nodes.
	// A pod or Lease says only its node's name, so those of a real Node
	// named with the prefix are not protected (the Node itself is).
	for _, a := range []attack{
		{"renew the Lease of a real Node named like a virtual one", renewLease(realLike), "", ""},
		{"delete a pod on a real Node named like a virtual one", deletePod("on-real-like"), "", ""},
	} {
		a.check(t)
	}

	// Nothing above changed the real Nodes, and the admin is not affected.
	for n, rv := range versions {
		node, err := admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.ResourceVersion != rv {
			t.Errorf("real node %s was written (resourceVersion %s -> %s): labels %v taints %v conditions %v",
				n, rv, node.ResourceVersion, node.Labels, node.Spec.Taints, node.Status.Conditions)
		}
	}
	if _, err := admin.CoreV1().Nodes().Patch(ctx, real, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"ml"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("admin labelling a real Node: %v", err)
	}
	if err := admin.CoreV1().Pods(podNS).Delete(ctx, "admin-deletes", metav1.DeleteOptions{}); err != nil {
		t.Errorf("admin deleting a pod on a real Node: %v", err)
	}
}

// createLeaseIn creates, with client c, a Lease like node's in namespace
// ns.
func createLeaseIn(c typedcoordv1.LeasesGetter, ns, node string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.Leases(ns).Create(ctx, leaseIn(ns, node), metav1.CreateOptions{})
		return err
	}
}

// renewLeaseIn renews, with client c, the Lease named node in namespace ns.
func renewLeaseIn(c typedcoordv1.LeasesGetter, ns, node string) func(context.Context) error {
	return func(ctx context.Context) error {
		l, err := c.Leases(ns).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = c.Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
}

// runVirtual runs virtual.Run for names with credentials rc until stopped
// (at the end of the test at the latest).
func runVirtual(t *testing.T, rc *rest.Config, names []string, deleteOnExit bool) *running {
	t.Helper()
	logger, _ := captureLogs(t)
	opts := virtual.Options{
		Names:                names,
		Core:                 coreClient(t, rc),
		Leases:               leaseClient(t, rc),
		Template:             virtual.NodeTemplate{Taints: []corev1.Taint{registrationTaint()}, OptIn: []corev1.Taint{registrationTaint()}},
		LeaseDuration:        4 * time.Second,
		StatusUpdateInterval: time.Second,
		HeartbeatPeriod:      time.Minute,
		DeleteOnExit:         deleteOnExit,
		Logger:               logger,
	}
	accept := func(err error) bool { return stoppedByCancel(err) || errors.As(err, new(*virtual.NotVirtualError)) }
	return runFunc(t, "virtual.Run", 60*time.Second, accept, func(ctx context.Context) error { return virtual.Run(ctx, opts) })
}

// testVirtualRefusesRealNode runs virtual nodes whose names include a real
// Node's: Run fails at once naming it, and the real Node and its Lease are
// untouched and it is not deleted on exit. With admin credentials too, so
// it is the code that refuses, not only the policy.
func testVirtualRefusesRealNode(t *testing.T, cp *testcp.ControlPlane, sa *rest.Config) {
	const real = virtualPrefix + "taken"
	admin := cp.Client()
	ctx := t.Context()
	before := cp.CreateNode(t, real, func(n *corev1.Node) {
		n.Labels = map[string]string{"team": "infra"}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	})
	for _, c := range []struct {
		who string
		rc  *rest.Config
	}{{"admin", cp.RESTConfig()}, {"service account", sa}} {
		other := virtualPrefix + "beside-" + strings.ReplaceAll(c.who, " ", "-")
		ok, err := runVirtual(t, c.rc, []string{other, real}, true).wait(30 * time.Second)
		if !ok {
			t.Fatalf("as %s: virtual.Run still running 30s after start, want it to refuse node %s", c.who, real)
		}
		var nv *virtual.NotVirtualError
		if !errors.As(err, &nv) || nv.Node != real || !strings.Contains(err.Error(), "node "+real+" exists and is not a virtual node") {
			t.Errorf("as %s: virtual.Run = %v, want a NotVirtualError naming %s", c.who, err, real)
		}
		// It failed before serving anything, the other node included.
		for _, n := range []string{other} {
			if _, err := admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("as %s: node %s: %v, want NotFound (nothing registered)", c.who, n, err)
			}
		}
	}
	after, err := admin.CoreV1().Nodes().Get(ctx, real, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the real node after virtual.Run: %v", err)
	}
	if after.ResourceVersion != before.ResourceVersion || after.UID != before.UID {
		t.Errorf("the real node was written (resourceVersion %s -> %s): labels %v taints %v conditions %+v",
			before.ResourceVersion, after.ResourceVersion, after.Labels, after.Spec.Taints, after.Status.Conditions)
	}
	if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, real, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the real node's Lease: %v, want NotFound (no heartbeat for it)", err)
	}
}

// testVirtualStopsWhenUnlabelled runs a virtual node with admin
// credentials (no policy) and has the admin remove its virtual label: Run
// stops serving it with a NotVirtualError, and delete-on-exit leaves it.
func testVirtualStopsWhenUnlabelled(t *testing.T, cp *testcp.ControlPlane) {
	const node = virtualPrefix + "relabelled"
	admin := cp.Client()
	ctx := t.Context()
	run := runVirtual(t, cp.RESTConfig(), []string{node}, true)
	waitNode(t, admin, node, 30*time.Second, "registered and Ready", func(n *corev1.Node) bool {
		c := taints.FindCondition(n, corev1.NodeReady)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	patch := []byte(`{"metadata":{"labels":{"selftaint.io/virtual":null}}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ok, err := run.wait(30 * time.Second)
	if !ok {
		t.Errorf("virtual.Run still serving %s 30s after its label was removed", node)
		err = run.stop()
	}
	var nv *virtual.NotVirtualError
	if !errors.As(err, &nv) || nv.Node != node {
		t.Errorf("virtual.Run = %v, want a NotVirtualError naming %s", err, node)
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Errorf("node %s after exit: %v, want it kept (no longer virtual)", node, err)
	}
}

// testVirtualRBACIsTight asks the API server's authorizer what the
// virtual service account may do: what it needs (rbac.yaml), and nothing
// else. Leases are granted in every namespace (a Role in kube-node-lease
// would not survive a namespace overlay); the leases policy confines the
// writes to kube-node-lease and its coordinator's in its own namespace
// (testVirtualPolicyAttacks). In its own namespace it may also list,
// watch and delete Leases, create ConfigMaps (the policy allows only the
// guard) and read and update the guard.
func testVirtualRBACIsTight(t *testing.T, cp *testcp.ControlPlane) {
	const (
		coord     = "coordination.k8s.io"
		admission = "admissionregistration.k8s.io"
		elsewhere = "some-namespace"
		own       = virtualNamespace
		guard     = fleet.DefaultGuardName
	)
	allowed := []access{
		{verb: "create", resource: "nodes"}, {verb: "get", resource: "nodes"}, {verb: "list", resource: "nodes"},
		{verb: "watch", resource: "nodes"}, {verb: "patch", resource: "nodes"}, {verb: "delete", resource: "nodes"},
		{verb: "patch", resource: "nodes", subresource: "status"},
		{verb: "list", resource: "pods"}, {verb: "watch", resource: "pods"}, {verb: "delete", resource: "pods", namespace: elsewhere},
		{verb: "update", resource: "pods", subresource: "status", namespace: elsewhere},
		{verb: "create", resource: "events", namespace: "default"}, {verb: "patch", resource: "events", namespace: elsewhere},
		{verb: "get", group: coord, resource: "leases", namespace: corev1.NamespaceNodeLease},
		{verb: "create", group: coord, resource: "leases", namespace: corev1.NamespaceNodeLease},
		{verb: "update", group: coord, resource: "leases", namespace: corev1.NamespaceNodeLease},
		// Allowed by RBAC, denied by the leases policy.
		{verb: "create", group: coord, resource: "leases", namespace: elsewhere},
		{verb: "update", group: coord, resource: "leases", namespace: metav1.NamespaceSystem},
		// Its coordinator, in its own namespace.
		{verb: "list", group: coord, resource: "leases", namespace: own},
		{verb: "watch", group: coord, resource: "leases", namespace: own},
		{verb: "delete", group: coord, resource: "leases", namespace: own},
		{verb: "create", resource: "configmaps", namespace: own},
		{verb: "get", resource: "configmaps", namespace: own, name: guard},
		{verb: "list", resource: "configmaps", namespace: own, name: guard},
		{verb: "watch", resource: "configmaps", namespace: own, name: guard},
		{verb: "update", resource: "configmaps", namespace: own, name: guard},
	}
	denied := []access{
		{verb: "update", resource: "nodes"}, {verb: "deletecollection", resource: "nodes"},
		{verb: "update", resource: "nodes", subresource: "status"}, {verb: "get", resource: "nodes", subresource: "proxy"},
		{verb: "get", resource: "pods", namespace: elsewhere}, {verb: "create", resource: "pods", namespace: elsewhere},
		{verb: "update", resource: "pods", namespace: elsewhere}, {verb: "patch", resource: "pods", subresource: "status", namespace: elsewhere},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: elsewhere},
		{verb: "create", resource: "pods", subresource: "binding", namespace: elsewhere},
		{verb: "deletecollection", resource: "pods", namespace: elsewhere},
		{verb: "delete", group: coord, resource: "leases", namespace: corev1.NamespaceNodeLease},
		{verb: "delete", group: coord, resource: "leases", namespace: metav1.NamespaceSystem},
		{verb: "patch", group: coord, resource: "leases", namespace: corev1.NamespaceNodeLease},
		{verb: "list", group: coord, resource: "leases", namespace: corev1.NamespaceNodeLease},
		{verb: "watch", group: coord, resource: "leases"},
		{verb: "deletecollection", group: coord, resource: "leases", namespace: corev1.NamespaceNodeLease},
		{verb: "deletecollection", group: coord, resource: "leases", namespace: own},
		{verb: "get", resource: "secrets", namespace: own}, {verb: "list", resource: "secrets"},
		{verb: "get", resource: "configmaps", namespace: metav1.NamespaceSystem},
		{verb: "get", resource: "configmaps", namespace: own, name: "other"},
		{verb: "list", resource: "configmaps", namespace: own},
		{verb: "create", resource: "configmaps", namespace: metav1.NamespaceSystem},
		{verb: "update", resource: "configmaps", namespace: metav1.NamespaceSystem, name: guard},
		{verb: "delete", resource: "configmaps", namespace: own, name: guard},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: own, name: virtualSA},
		{verb: "update", resource: "events", namespace: "default"}, {verb: "delete", resource: "events", namespace: "default"},
		// Its parameters are the operator's.
		{verb: "get", group: admission, resource: "validatingadmissionpolicies", name: virtualNodesPolicy},
		{verb: "update", group: admission, resource: "validatingadmissionpolicies", name: virtualNodesPolicy},
		{verb: "patch", group: admission, resource: "validatingadmissionpolicies", name: virtualLeasesPolicy},
		{verb: "delete", group: admission, resource: "validatingadmissionpolicybindings", name: virtualPodsPolicy},
		{verb: "delete", group: admission, resource: "validatingadmissionpolicies", name: virtualConfigMapsPolicy},
	}
	checkAccess(t, cp, "system:serviceaccount:"+own+":"+virtualSA, nil, "the virtual kubelet", allowed, denied)
}

// setVirtualPrefix sets each virtual policy's parameter, its prefix
// annotation, to prefix, or removes it when prefix is nil, as an operator
// editing the policies would. The API server takes it up asynchronously.
func setVirtualPrefix(t *testing.T, admin kubernetes.Interface, prefix *string) {
	t.Helper()
	for _, name := range virtualPolicies {
		setAnnotation(t, admin, name, virtualPrefixAnnotation, prefix)
	}
}

// setAnnotation sets policy's annotation key to value, or removes it when
// value is nil.
func setAnnotation(t *testing.T, admin kubernetes.Interface, policy, key string, value *string) {
	t.Helper()
	vaps := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	vap, err := vaps.Get(t.Context(), policy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if value == nil {
		delete(vap.Annotations, key)
	} else {
		if vap.Annotations == nil {
			vap.Annotations = map[string]string{}
		}
		vap.Annotations[key] = *value
	}
	if _, err := vaps.Update(t.Context(), vap, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// asKubelet is a client config that acts as the kubelet of node.
func asKubelet(cp *testcp.ControlPlane, node string) *rest.Config {
	rc := cp.RESTConfig()
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	return rc
}

// testVirtualPrefixMissing installs deploy/virtual on a control plane where
// it is not installed otherwise, then removes, restores and empties the policies' prefix
// annotation. Without a prefix (absent or empty) the service account
// may write no Node, pod or Lease, while an admin and a real node's kubelet
// go on writing Nodes, pods and Leases: the parameters can be wrong but
// never missing, so they cannot cause an outage. Last, it deletes one
// policy and leaves its binding, as an uninstall half done: the binding
// then denies nobody (a separate parameter object missing would have had
// it deny every user's Lease writes).
func testVirtualPrefixMissing(t *testing.T) {
	const (
		kubeletNode = "bystander"
		vnode       = virtualPrefix + "no-prefix"
		podNS       = "prefix-missing"
	)
	cp := overlayAndPrefix.Get(t)
	createManifests(t, cp.Client(), readManifests(t, "virtual"))
	sa := tokenConfig(t, cp, virtualNamespace, virtualSA)
	waitVirtualPolicies(t, cp, sa, virtualNamespace)
	admin := cp.Client()
	ctx := t.Context()
	cp.CreateNode(t, kubeletNode, nil)
	createNamespace(t, admin, podNS)
	// A kubelet, authorized as in a cluster whose node authorizer is off
	// (testcp runs RBAC only).
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-kubelet-" + kubeletNode},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:node:" + kubeletNode}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeletRC := asKubelet(cp, kubeletNode)
	kubelet, kubeletLeases := coreClient(t, kubeletRC), leaseClient(t, kubeletRC)
	// The binding reaches the RBAC authorizer's cache a moment later:
	// until then RBAC refuses (no policy is named), then it must succeed.
	poll(t, 10*time.Second, "the kubelet creating its Lease", func() (bool, error) {
		err := createLeaseIn(kubeletLeases, corev1.NamespaceNodeLease, kubeletNode)(ctx)
		if apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			return false, err
		}
		return err == nil, err
	})
	// Opted into virtual nodes: what the service account may report
	// Running with the parameters in place.
	pod := func(name, node string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: name},
			Spec:       corev1.PodSpec{NodeName: node, Tolerations: []corev1.Toleration{optIn()}, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
		}
		if _, err := admin.CoreV1().Pods(podNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("on-virtual", vnode)
	if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease(vnode), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The service account's writes, all dry runs: allowed with the prefix,
	// denied without.
	core, leases := coreClient(t, sa), leaseClient(t, sa)
	dry := []string{metav1.DryRunAll}
	noPrefix := func(policy string) string {
		return "policy " + policy + " has no (or an empty) annotation " + virtualPrefixAnnotation
	}
	saWrites := []attack{
		{"create a virtual Node", func(ctx context.Context) error {
			_, err := core.Nodes().Create(ctx, virtualNode(vnode), metav1.CreateOptions{DryRun: dry})
			return err
		}, virtualNodesPolicy, "may write no Node: " + noPrefix(virtualNodesPolicy)},
		{"update the status of a pod on a virtual Node", func(ctx context.Context) error {
			p, err := admin.CoreV1().Pods(podNS).Get(ctx, "on-virtual", metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Status.Phase = corev1.PodRunning
			_, err = core.Pods(podNS).UpdateStatus(ctx, p, metav1.UpdateOptions{DryRun: dry})
			return err
		}, virtualPodsPolicy, "may change no pod: " + noPrefix(virtualPodsPolicy)},
		{"renew a virtual Node's Lease", func(ctx context.Context) error {
			l, err := leases.Leases(corev1.NamespaceNodeLease).Get(ctx, vnode, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, err = leases.Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{DryRun: dry})
			return err
		}, virtualLeasesPolicy, "may write no Lease: " + noPrefix(virtualLeasesPolicy)},
	}
	// waitSA waits until each of the service account's writes is denied
	// (want false) or allowed (want true): each policy's parameters reach
	// the API server's admission on their own.
	waitSA := func(state string, allowed bool) {
		t.Helper()
		for _, a := range saWrites {
			want := a
			if allowed {
				want.policy, want.deny = "", ""
			}
			poll(t, 30*time.Second, fmt.Sprintf("%s: %q allowed: %v", state, a.name, allowed), func() (bool, error) {
				err := want.do(ctx)
				return want.matches(err), err
			})
		}
	}
	// bystanders checks an admin and a kubelet are not affected: they
	// write Nodes, pods (a fresh one named by step) and Leases.
	bystanders := func(step string) {
		t.Helper()
		pod("kubelet-"+step, kubeletNode)
		pod("admin-"+step, kubeletNode)
		ready := fmt.Appendf(nil, `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":%q}]}}`, step)
		for _, a := range []attack{
			{"kubelet: its Node's status", func(ctx context.Context) error {
				_, err := kubelet.Nodes().Patch(ctx, kubeletNode, types.StrategicMergePatchType, ready, metav1.PatchOptions{}, "status")
				return err
			}, "", ""},
			{"kubelet: renew its Lease", renewLeaseIn(kubeletLeases, corev1.NamespaceNodeLease, kubeletNode), "", ""},
			{"kubelet: a pod's status", func(ctx context.Context) error {
				p, err := kubelet.Pods(podNS).Get(ctx, "kubelet-"+step, metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Status.Phase = corev1.PodSucceeded
				_, err = kubelet.Pods(podNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return err
			}, "", ""},
			{"kubelet: delete a pod", func(ctx context.Context) error {
				return kubelet.Pods(podNS).Delete(ctx, "kubelet-"+step, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			}, "", ""},
			{"admin: label a Node", func(ctx context.Context) error {
				_, err := admin.CoreV1().Nodes().Patch(ctx, kubeletNode, types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"step":%q}}}`, step), metav1.PatchOptions{})
				return err
			}, "", ""},
			{"admin: delete a pod", func(ctx context.Context) error {
				return admin.CoreV1().Pods(podNS).Delete(ctx, "admin-"+step, metav1.DeleteOptions{})
			}, "", ""},
			{"admin: renew a Lease", renewLeaseIn(admin.CoordinationV1(), corev1.NamespaceNodeLease, kubeletNode), "", ""},
			{"admin: create a virtual node's Lease", createLeaseIn(admin.CoordinationV1(), corev1.NamespaceNodeLease, vnode+"-"+step), "", ""},
		} {
			a.name = step + ": " + a.name
			a.check(t)
		}
	}

	for _, a := range saWrites {
		a.policy, a.deny = "", ""
		a.name = "with the prefix: " + a.name
		a.check(t)
	}

	setVirtualPrefix(t, admin, nil)
	waitSA("annotation removed", false)
	bystanders("removed")

	prefix := virtualPrefix
	setVirtualPrefix(t, admin, &prefix)
	waitSA("annotation restored", true)

	// Without its registration taint, the nodes policy lets the service
	// account write no Node (a taint it could not check is no taint), and
	// no one else is affected.
	setAnnotation(t, admin, virtualNodesPolicy, virtualTaintAnnotation, nil)
	noTaint := saWrites[0]
	noTaint.deny = "may write no Node: policy " + virtualNodesPolicy + " has no (or an empty) annotation " + virtualTaintAnnotation
	poll(t, 30*time.Second, "registration taint removed: "+noTaint.name+" denied", func() (bool, error) {
		err := noTaint.do(ctx)
		return noTaint.matches(err), err
	})
	bystanders("no-taint")
	taint := virtualTaint
	setAnnotation(t, admin, virtualNodesPolicy, virtualTaintAnnotation, &taint)
	waitSA("registration taint restored", true)

	empty := ""
	setVirtualPrefix(t, admin, &empty)
	waitSA("annotation empty", false)
	bystanders("empty")

	// A binding whose policy (its own parameter object) is gone: it stops
	// confining the service account, and denies no one.
	vaps := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	if err := vaps.Delete(ctx, virtualLeasesPolicy, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, virtualLeasesPolicy, metav1.GetOptions{}); err != nil {
		t.Fatalf("the binding of the deleted policy: %v, want it still there", err)
	}
	poll(t, 30*time.Second, "the deleted policy to leave admission", func() (bool, error) {
		err := saWrites[2].do(ctx)
		return err == nil, err
	})
	bystanders("policy-deleted")
}

// TestVirtualPolicyNamespaceOverlay renders deploy/virtual under a
// kustomize overlay that moves it to another namespace, creates the result
// on a control plane where deploy/virtual is not installed otherwise
// (shared, see kubeSystemOverlays), and checks it still works there: the Namespace
// and every namespaced object moved, the RBAC bindings name the service
// account in the new namespace and nothing is left in deploy/virtual's;
// the service account there (with its own token) may register a virtual
// node and is still refused a real one; it may create and renew a virtual
// node's Lease in kube-node-lease (with a Role in kube-node-lease, moved
// by the overlay, it could not) and its coordinator's Leases (a slot too)
// and guard in the new namespace (its own, from its user name), and is refused a Lease
// elsewhere, one with a real node's name, and other names in its
// namespace.
func TestVirtualPolicyNamespaceOverlay(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver")
	t.Parallel()
	const ns = "selftaint-test"
	rendered := kustomizeOverlay(t, "virtual", "namespace: "+ns)
	find[*corev1.Namespace](t, rendered, ns)
	for _, m := range rendered {
		if got := m.meta().GetNamespace(); got == virtualNamespace || m.kind() == "Namespace" && m.meta().GetName() == virtualNamespace {
			t.Errorf("%s: left in %s by the namespace overlay", m, virtualNamespace)
		} else if got != "" && got != ns {
			t.Errorf("%s: in namespace %s, want %s", m, got, ns)
		}
		var subjects []rbacv1.Subject
		switch b := m.obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			subjects = b.Subjects
		case *rbacv1.RoleBinding:
			subjects = b.Subjects
		}
		if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: virtualSA, Namespace: ns}}; subjects != nil && !slices.Equal(subjects, want) {
			t.Errorf("%s: subjects %+v, want %+v", m, subjects, want)
		}
	}

	cp := kubeSystemOverlays.Get(t)
	createManifests(t, cp.Client(), rendered)
	ctx := t.Context()
	// deploy/virtual's namespace exists too (another install, say): the
	// service account moved out of it may not write there.
	createNamespace(t, cp.Client(), virtualNamespace)
	rc := tokenConfig(t, cp, ns, virtualSA)
	core, leases := coreClient(t, rc), leaseClient(t, rc)
	const real = "real-1"
	realLike := virtualPrefix + "real"
	cp.CreateNode(t, realLike, nil)
	poll(t, time.Minute, "the overlay's policy to deny patching a real node", func() (bool, error) {
		_, err := core.Nodes().Patch(ctx, realLike, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		return apierrors.IsForbidden(err) && containsAll(err.Error(), []string{virtualNodesPolicy, "only virtual Nodes"}), err
	})
	poll(t, time.Minute, "the overlay's policy to deny a Lease in "+ns, func() (bool, error) {
		_, err := leases.Leases(ns).Create(ctx, leaseIn(ns, virtualPrefix+"canary"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), virtualLeasesPolicy), err
	})
	poll(t, time.Minute, "the overlay's policy to deny a ConfigMap in "+ns, func() (bool, error) {
		_, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "canary"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), virtualConfigMapsPolicy), err
	})
	vnode := virtualNode(virtualPrefix + "1")
	grant := fleet.GrantName(vnode.Name)
	for _, a := range []attack{
		{"create an unlabelled Node", func(ctx context.Context) error {
			_, err := core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: virtualPrefix + "2"}}, metav1.CreateOptions{})
			return err
		}, virtualNodesPolicy, "create only Nodes labelled selftaint.io/virtual=true"},
		{"create a virtual Node", func(ctx context.Context) error {
			_, err := core.Nodes().Create(ctx, vnode, metav1.CreateOptions{})
			return err
		}, "", ""},
		{"create the virtual Node's Lease", createLeaseIn(leases, corev1.NamespaceNodeLease, vnode.Name), "", ""},
		{"renew the virtual Node's Lease", renewLeaseIn(leases, corev1.NamespaceNodeLease, vnode.Name), "", ""},
		{"create a virtual Node's Lease in " + ns, createLeaseIn(leases, ns, vnode.Name), virtualLeasesPolicy,
			"may write in its own namespace " + ns + " only the Leases of its coordinator"},
		{"create the virtual Node's grant in " + ns, createLeaseIn(leases, ns, grant), "", ""},
		{"create its leader Lease in " + ns, createLeaseIn(leases, ns, fleet.DefaultLeaderLease), "", ""},
		{"take the virtual Node's maintenance slot in " + ns, func(ctx context.Context) error {
			l := leaseIn(ns, fleet.SlotName(vnode.Name))
			l.Labels = map[string]string{fleet.SlotLabel: "true"}
			_, err := leases.Leases(ns).Create(ctx, l, metav1.CreateOptions{})
			return err
		}, "", ""},
		{"create the virtual Node's grant in " + virtualNamespace, createLeaseIn(leases, virtualNamespace, grant), virtualLeasesPolicy,
			"may write Leases only in kube-node-lease and in its own namespace " + ns + ", not " + grant + " in namespace " + virtualNamespace},
		{"create a real Node's Lease", createLeaseIn(leases, corev1.NamespaceNodeLease, real), virtualLeasesPolicy,
			"Leases of nodes whose name starts with " + virtualPrefix + " (node-name-prefix), not " + real},
		{"create its guard in " + ns, func(ctx context.Context) error {
			_, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultGuardName}}, metav1.CreateOptions{})
			return err
		}, "", ""},
		{"list its grants in " + ns, func(ctx context.Context) error {
			_, err := leases.Leases(ns).List(ctx, metav1.ListOptions{})
			return err
		}, "", ""},
		{"delete the virtual Node", func(ctx context.Context) error { return core.Nodes().Delete(ctx, vnode.Name, metav1.DeleteOptions{}) }, "", ""},
	} {
		a.check(t)
	}
}
