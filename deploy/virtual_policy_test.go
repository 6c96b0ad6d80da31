package deploy_test

import (
	"context"
	"errors"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/virtual"
)

// The names deploy/virtual's admission policies agree on.
const (
	virtualParams       = "selftaint-virtual" // the ConfigMap
	virtualPrefix       = "vnode-"
	virtualNodesPolicy  = "selftaint-virtual-nodes"
	virtualPodsPolicy   = "selftaint-virtual-pods"
	virtualLeasesPolicy = "selftaint-virtual-leases"
)

var virtualPolicies = []string{virtualNodesPolicy, virtualPodsPolicy, virtualLeasesPolicy}

// TestVirtualPolicyManifests checks, without a cluster, what keeps the
// virtual policies in force: the ConfigMap's prefix is the Deployment's
// --name-prefix; each policy fails closed, matches the service account by
// name in any namespace (no namespace in the policy, so a namespace overlay
// keeps it) and is bound with the ConfigMap as a required param.
func TestVirtualPolicyManifests(t *testing.T) {
	ms := readManifests(t, "virtual")
	cm := find[*corev1.ConfigMap](t, ms, virtualParams)
	if got := cm.Data["nodeNamePrefix"]; got != virtualPrefix {
		t.Errorf("ConfigMap %s nodeNamePrefix = %q, want %q", virtualParams, got, virtualPrefix)
	}
	dep := find[*appsv1.Deployment](t, ms, "selftaint-virtual")
	var prefixes []string
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if p, ok := strings.CutPrefix(a, "--name-prefix="); ok {
			prefixes = append(prefixes, p)
		}
	}
	if want := []string{cm.Data["nodeNamePrefix"]}; !slices.Equal(prefixes, want) {
		t.Errorf("Deployment --name-prefix %q, want %q (the ConfigMap's nodeNamePrefix)", prefixes, want)
	}
	if cm.Namespace != namespace {
		t.Errorf("ConfigMap in %q, want %q (beside the service account)", cm.Namespace, namespace)
	}

	for _, name := range virtualPolicies {
		vap := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, name)
		if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("%s: failurePolicy %v, want Fail", name, vap.Spec.FailurePolicy)
		}
		if pk := vap.Spec.ParamKind; pk == nil || pk.APIVersion != "v1" || pk.Kind != "ConfigMap" {
			t.Errorf("%s: paramKind %+v, want v1 ConfigMap", name, pk)
		}
		data, err := yaml.Marshal(vap)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), namespace) {
			t.Errorf("%s names namespace %s: a namespace overlay would leave it behind", name, namespace)
		}
		want := []admissionregistrationv1.MatchCondition{{
			Name:       "selftaint-virtual-service-account",
			Expression: "request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':" + virtualSA + "')",
		}}
		if !slices.Equal(vap.Spec.MatchConditions, want) {
			t.Errorf("%s: matchConditions %+v, want %+v", name, vap.Spec.MatchConditions, want)
		}
		b := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, ms, name)
		deny := admissionregistrationv1.DenyAction
		wantRef := &admissionregistrationv1.ParamRef{Name: virtualParams, Namespace: namespace, ParameterNotFoundAction: &deny}
		if b.Spec.PolicyName != name || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
			t.Errorf("binding %s: policy %q actions %v, want %s and Deny", name, b.Spec.PolicyName, b.Spec.ValidationActions, name)
		}
		if got := b.Spec.ParamRef; got == nil || got.Name != wantRef.Name || got.Namespace != wantRef.Namespace ||
			got.ParameterNotFoundAction == nil || *got.ParameterNotFoundAction != deny || got.Selector != nil {
			t.Errorf("binding %s: paramRef %+v, want %+v", name, got, wantRef)
		}
	}
}

// TestVirtualPolicyOnControlPlane creates deploy/virtual on a real etcd and
// kube-apiserver (with the controller that type-checks admission policies)
// and then, as the virtual service account (impersonated):
//   - attacks the policies: every write to a real Node, a real node's pods
//     or its Lease is denied, and the virtual counterparts are allowed;
//   - runs virtual nodes through their whole life with the policies in
//     force, never refused;
//   - runs virtual nodes against a real Node of the same name: refused,
//     and the Node is left untouched (not even with admin credentials);
//   - stops a virtual node whose label an admin removed, and does not
//     delete it on exit;
//   - empties and then deletes the prefix ConfigMap: the service account
//     may then write nothing.
func TestVirtualPolicyOnControlPlane(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver and virtual nodes")
	cp := testcp.Start(t, testcp.Options{
		ControllerManager:     true,
		ControllerManagerArgs: []string{"--controllers=validatingadmissionpolicy-status-controller"},
	})
	for _, m := range readManifests(t, "virtual") {
		if err := create(t.Context(), cp.Client(), m); err != nil {
			t.Fatalf("creating %s: %v", m, err)
		}
	}
	sa := asServiceAccount(cp, virtualSA, "")
	waitVirtualPolicies(t, cp, sa)
	checkPolicyTypes(t, cp.Client())

	t.Run("Attacks", func(t *testing.T) { testVirtualPolicyAttacks(t, cp, sa) })
	t.Run("RunUnderPolicy", func(t *testing.T) { testVirtualRBACIsEnough(t, cp) })
	t.Run("RefusesRealNode", func(t *testing.T) { testVirtualRefusesRealNode(t, cp, sa) })
	t.Run("StopsWhenUnlabelled", func(t *testing.T) { testVirtualStopsWhenUnlabelled(t, cp) })
	// Last: it changes the ConfigMap.
	t.Run("PrefixMissing", func(t *testing.T) { testVirtualPrefixMissing(t, cp, sa) })
}

// waitVirtualPolicies waits until each virtual policy denies the service
// account sa a write (the API server loads policies and their params
// asynchronously). The writes are dry runs.
func waitVirtualPolicies(t *testing.T, cp *testcp.ControlPlane, sa *rest.Config) {
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
	} {
		poll(t, time.Minute, "policy "+c.policy+" in force", func() (bool, error) {
			err := c.do()
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), c.policy), err
		})
	}
}

// checkPolicyTypes waits for the API server's type check of each virtual
// policy's CEL against the schemas of what it matches and the ConfigMap
// param, and fails t on any warning.
func checkPolicyTypes(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	for _, name := range virtualPolicies {
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
func lease(node string) *coordinationv1.Lease {
	holder, seconds := node, int32(40)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
}

func virtualNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{virtual.LabelVirtual: "true"}}}
}

// attack is one write as the virtual service account: allowed when policy
// is empty, else denied by policy with a message holding deny.
type attack struct {
	name   string
	do     func(context.Context) error
	policy string
	deny   string
}

func (a attack) check(t *testing.T) {
	t.Helper()
	err := a.do(t.Context())
	switch {
	case a.policy == "" && err != nil:
		t.Errorf("%s: %v, want allowed", a.name, err)
	case a.policy != "" && err == nil:
		t.Errorf("%s: allowed, want denied by %s with %q", a.name, a.policy, a.deny)
	case a.policy != "" && (!apierrors.IsForbidden(err) || !containsAll(err.Error(), []string{"'" + a.policy + "'", a.deny})):
		t.Errorf("%s: %v, want Forbidden by %s with %q", a.name, err, a.policy, a.deny)
	}
}

// testVirtualPolicyAttacks writes, as the virtual service account, to real
// Nodes (one named like a virtual node), their pods and Leases (all
// denied), and to a virtual node, its pod and Lease (allowed); an admin's
// writes to the real ones are not affected.
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
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, node := range map[string]string{"on-real": real, "on-real-like": realLike, "on-virtual": vnode, "unbound": "", "admin-deletes": real} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: name},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
		}
		if _, err := admin.CoreV1().Pods(podNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease(realLike), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	core, leases := coreClient(t, rc), leaseClient(t, rc)
	patchNode := func(name, patch string, sub ...string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := core.Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, sub...)
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
	createLease := func(node string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := leases.Leases(corev1.NamespaceNodeLease).Create(ctx, lease(node), metav1.CreateOptions{})
			return err
		}
	}
	renewLease := func(node string) func(context.Context) error {
		return func(ctx context.Context) error {
			l, err := leases.Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, err = leases.Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}
	}
	notReady := `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Attack"}]}}`
	notVirtualMsg := func(n string) string {
		return "only virtual Nodes (labelled selftaint.io/virtual=true), and " + n + " is not"
	}
	prefixMsg := func(n string) string { return "starts with " + virtualPrefix + " (nodeNamePrefix), not " + n }
	unlabelled := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: virtualPrefix + "unlabelled"}}

	for _, a := range []attack{
		// Nodes.
		{"create a Node without the virtual label", createNode(unlabelled), virtualNodesPolicy, "create only Nodes labelled selftaint.io/virtual=true, and " + unlabelled.Name + " is not"},
		{"create a virtual Node whose name lacks the prefix", createNode(virtualNode("other-1")), virtualNodesPolicy, prefixMsg("other-1")},
		{"create a virtual Node", createNode(virtualNode(vnode)), "", ""},
		{"label a real Node", patchNode(real, `{"metadata":{"labels":{"team":"attacker"}}}`), virtualNodesPolicy, prefixMsg(real)},
		{"taint a real Node", patchNode(real, `{"spec":{"taints":[{"key":"x","effect":"NoExecute"}]}}`), virtualNodesPolicy, prefixMsg(real)},
		{"label a real Node named like a virtual one", patchNode(realLike, `{"metadata":{"labels":{"team":"attacker"}}}`), virtualNodesPolicy, notVirtualMsg(realLike)},
		{"mark a real Node virtual", patchNode(realLike, `{"metadata":{"labels":{"selftaint.io/virtual":"true"}}}`), virtualNodesPolicy, notVirtualMsg(realLike)},
		{"set a real Node's status Ready False", patchNode(realLike, notReady, "status"), virtualNodesPolicy, notVirtualMsg(realLike)},
		{"delete a real Node", func(ctx context.Context) error { return core.Nodes().Delete(ctx, realLike, metav1.DeleteOptions{}) }, virtualNodesPolicy, notVirtualMsg(realLike)},
		{"delete a real Node without the prefix", func(ctx context.Context) error { return core.Nodes().Delete(ctx, real, metav1.DeleteOptions{}) }, virtualNodesPolicy, prefixMsg(real)},
		{"label a virtual Node", patchNode(vnode, `{"metadata":{"labels":{"team":"drill"}}}`), "", ""},
		{"taint a virtual Node", patchNode(vnode, `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}`), "", ""},
		{"set a virtual Node's status Ready False", patchNode(vnode, notReady, "status"), "", ""},
		{"remove a virtual Node's label", patchNode(vnode, `{"metadata":{"labels":{"selftaint.io/virtual":null}}}`), virtualNodesPolicy, "may not remove or change the label selftaint.io/virtual of Node " + vnode},
		{"change a virtual Node's label through its status", patchNode(vnode, `{"metadata":{"labels":{"selftaint.io/virtual":"false"}}}`, "status"), virtualNodesPolicy, "may not remove or change the label selftaint.io/virtual of Node " + vnode},
		// Pods.
		{"update the status of a pod on a real Node", podRunning("on-real"), virtualPodsPolicy, "pod on-real is bound to node " + real},
		{"delete a pod on a real Node", deletePod("on-real"), virtualPodsPolicy, "pod on-real is bound to node " + real},
		{"delete a pending pod", deletePod("unbound"), virtualPodsPolicy, "pod unbound is bound to no node"},
		{"update the status of a pod on a virtual Node", podRunning("on-virtual"), "", ""},
		{"delete a pod on a virtual Node", deletePod("on-virtual"), "", ""},
		// Leases.
		{"create a real Node's Lease", createLease(real), virtualLeasesPolicy, prefixMsg(real)},
		{"create a virtual Node's Lease", createLease(vnode), "", ""},
		{"renew a virtual Node's Lease", renewLease(vnode), "", ""},
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

// runningVirtual is a virtual.Run in the background.
type runningVirtual struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // what Run returned; set before done is closed
}

// wait returns true and Run's error once it returned, or false after
// timeout.
func (r *runningVirtual) wait(timeout time.Duration) (returned bool, err error) {
	select {
	case <-r.done:
		return true, r.err
	case <-time.After(timeout):
		return false, nil
	}
}

// stop cancels Run and returns its error.
func (r *runningVirtual) stop() error {
	r.cancel()
	ok, err := r.wait(60 * time.Second)
	if !ok {
		return errors.New("virtual.Run did not return within 60s of cancel")
	}
	return err
}

// runVirtual runs virtual.Run for names with credentials rc until stopped
// (at the end of the test at the latest).
func runVirtual(t *testing.T, rc *rest.Config, names []string, deleteOnExit bool) *runningVirtual {
	t.Helper()
	logger, _ := captureLogs(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningVirtual{cancel: cancel, done: make(chan struct{})}
	opts := virtual.Options{
		Names:                names,
		Core:                 coreClient(t, rc),
		Leases:               leaseClient(t, rc),
		LeaseDuration:        4 * time.Second,
		StatusUpdateInterval: time.Second,
		HeartbeatPeriod:      time.Minute,
		DeleteOnExit:         deleteOnExit,
		Logger:               logger,
	}
	go func() {
		defer close(r.done)
		r.err = virtual.Run(ctx, opts)
	}()
	t.Cleanup(func() {
		if err := r.stop(); err != nil && !errors.Is(err, context.Canceled) && !errors.As(err, new(*virtual.NotVirtualError)) {
			t.Errorf("virtual.Run: %v", err)
		}
	})
	return r
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
		c := nodeCondition(n, corev1.NodeReady)
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

// testVirtualPrefixMissing empties the ConfigMap's prefix, then deletes the
// ConfigMap: the service account may then create no virtual Node. With the
// ConfigMap missing the binding denies every matched request, the admin's
// included (parameterNotFoundAction Deny is checked before the match
// condition): this pins that behaviour, which the manifests warn about.
func testVirtualPrefixMissing(t *testing.T, cp *testcp.ControlPlane, sa *rest.Config) {
	admin := cp.Client()
	ctx := t.Context()
	core := coreClient(t, sa)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	createVirtual := func() error { _, err := core.Nodes().Create(ctx, virtualNode(virtualPrefix+"x"), dry); return err }
	if err := createVirtual(); err != nil {
		t.Fatalf("creating a virtual node before the change: %v, want allowed", err)
	}

	cm, err := admin.CoreV1().ConfigMaps(namespace).Get(ctx, virtualParams, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["nodeNamePrefix"] = ""
	if _, err := admin.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "an empty prefix to deny creating a virtual node", func() (bool, error) {
		err := createVirtual()
		return apierrors.IsForbidden(err) && containsAll(err.Error(), []string{virtualNodesPolicy, "has no nodeNamePrefix"}), err
	})

	cp.CreateNode(t, "bystander", nil)
	if err := admin.CoreV1().ConfigMaps(namespace).Delete(ctx, virtualParams, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "a missing ConfigMap to deny creating a virtual node", func() (bool, error) {
		err := createVirtual()
		return err != nil && containsAll(err.Error(), []string{virtualNodesPolicy, "no params found"}), fmt.Errorf("%w (reason %s)", err, apierrors.ReasonForError(err))
	})
	_, err = admin.CoreV1().Nodes().Patch(ctx, "bystander", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	if err == nil || !containsAll(err.Error(), []string{virtualNodesPolicy, "no params found"}) {
		t.Errorf("admin patching a Node while the ConfigMap is missing: %v; the manifests say it is denied", err)
	}
}

// TestVirtualPolicyNamespaceOverlay renders deploy/virtual under a
// kustomize overlay that moves it to another namespace, creates the result
// on a fresh control plane, and checks the policies follow: the binding
// reads its param from the new namespace, the service account there may
// register a virtual node and is still refused a real one.
func TestVirtualPolicyNamespaceOverlay(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver")
	const ns = "selftaint-test"
	rendered := renderOverlay(t, ns)
	for _, m := range rendered {
		if m.kind() == "ValidatingAdmissionPolicyBinding" {
			b := m.obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
			if b.Spec.ParamRef == nil || b.Spec.ParamRef.Namespace != ns {
				t.Errorf("%s: paramRef %+v, want namespace %s", m, b.Spec.ParamRef, ns)
			}
		}
	}

	cp := testcp.Start(t, testcp.Options{})
	admin := cp.Client()
	ctx := t.Context()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, m := range rendered {
		if err := create(ctx, admin, m); err != nil {
			t.Fatalf("creating %s: %v", m, err)
		}
	}
	rc := cp.RESTConfig()
	rc.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + virtualSA,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	core := coreClient(t, rc)
	real := virtualPrefix + "real"
	cp.CreateNode(t, real, nil)
	poll(t, time.Minute, "the overlay's policy to deny patching a real node", func() (bool, error) {
		_, err := core.Nodes().Patch(ctx, real, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		return apierrors.IsForbidden(err) && containsAll(err.Error(), []string{virtualNodesPolicy, "only virtual Nodes"}), err
	})
	vnode := virtualNode(virtualPrefix + "1")
	for _, a := range []attack{
		{"create an unlabelled Node", func(ctx context.Context) error {
			_, err := core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: virtualPrefix + "2"}}, metav1.CreateOptions{})
			return err
		}, virtualNodesPolicy, "create only Nodes labelled selftaint.io/virtual=true"},
		{"create a virtual Node", func(ctx context.Context) error {
			_, err := core.Nodes().Create(ctx, vnode, metav1.CreateOptions{})
			return err
		}, "", ""},
		{"delete the virtual Node", func(ctx context.Context) error { return core.Nodes().Delete(ctx, vnode.Name, metav1.DeleteOptions{}) }, "", ""},
	} {
		a.check(t)
	}
}

// renderOverlay builds, with kustomize, an overlay of deploy/virtual that
// sets namespace ns, and decodes the result.
func renderOverlay(t *testing.T, ns string) []manifest {
	t.Helper()
	base, err := filepath.Abs("virtual")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// kustomize takes no absolute path, and one outside the overlay only
	// without load restrictions.
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: " + ns + "\nresources:\n- " + rel + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = kusttypes.LoadRestrictionsNone
	res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build of the overlay: %v", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "rendered.yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	ms, err := decodeFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}
