package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/faults"
	"github.com/selftaint/selftaint/taints/fleet"
)

// fpgaResource is the hardware the test agent advertises, taints and
// labels.
const fpgaResource corev1.ResourceName = "example.com/fpga"

// memoryCondition is the memory probe's condition in the deployed config.
const memoryCondition corev1.NodeConditionType = "SelftaintMemoryPressure"

func ptrTo[T any](v T) *T { return &v }

// The policy's parameters: annotations on the policy itself (see
// agent/config.ParamTaints and its siblings).
const (
	paramTaints     = "agent.selftaint.io/owned-taints"
	paramLabels     = "agent.selftaint.io/owned-labels"
	paramConditions = "agent.selftaint.io/owned-conditions"
	paramResources  = "agent.selftaint.io/owned-resources"
)

// testParams are the admission policy's parameters for the test agents:
// the deployed policy's (what the deployed config owns) plus the test
// agents' own conditions, rule taint and FPGA, one per line, as
// `selftaint policy-params` prints them for a config that has those.
func testParams(t *testing.T) map[string]string {
	t.Helper()
	vap := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, readManifests(t, "."), policyName)
	add := map[string][]string{
		paramTaints:     {testTaintKey + ":NoSchedule", string(fpgaResource) + ":NoSchedule"},
		paramLabels:     {agent.HardwareLabel(fpgaResource)},
		paramConditions: {string(testCondition), string(quietCondition)},
		paramResources:  {string(fpgaResource)},
	}
	params := map[string]string{}
	for k, extra := range add {
		v, ok := vap.Annotations[k]
		if !ok {
			t.Fatalf("the deployed policy has no annotation %s", k)
		}
		params[k] = v + strings.Join(extra, "\n") + "\n"
	}
	return params
}

// setPolicyParams writes the policy's parameters (its annotations), as an
// operator does after changing the config (selftaint policy-params), and
// waits until the API server enforces them: until a write only they allow
// goes through when want is true, or is denied when want is false.
func setPolicyParams(t *testing.T, cp *testcp.ControlPlane, ns string, params map[string]string, want bool) {
	t.Helper()
	// Not t.Context(): this also runs in cleanups, after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vaps := cp.Client().AdmissionregistrationV1().ValidatingAdmissionPolicies()
	vap, err := vaps.Get(ctx, policyName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(vap.Annotations, params)
	if _, err := vaps.Update(ctx, vap, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's policy and parameter informers catch up
	// asynchronously.
	const probe = "policy-params-canary"
	cp.CreateNode(t, probe, nil)
	sa := coreClient(t, asServiceAccountIn(cp, ns, agentSA, probe))
	apply := fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Node","metadata":{"name":%q},"status":{"conditions":[{"type":%q,"status":"False","reason":"Canary"}]}}`, probe, testCondition)
	poll(t, time.Minute, fmt.Sprintf("the policy to take the new parameters (%s allowed: %v)", testCondition, want), func() (bool, error) {
		_, err := sa.Nodes().Patch(ctx, probe, types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "canary", Force: ptrTo(true)}, "status")
		return (err == nil) == want, err
	})
	if err := cp.Client().CoreV1().Nodes().Delete(ctx, probe, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// asServiceAccountIn is asServiceAccount for a service account in ns.
func asServiceAccountIn(cp *testcp.ControlPlane, ns, sa, node string) *rest.Config {
	rc := cp.RESTConfig()
	rc.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	if node != "" {
		rc.Impersonate.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	return rc
}

// kubeletNode fills a Node as the kubelet and other writers leave it: a
// foreign taint, an operator's taint under selftaint's prefix that no
// config names, and one of selftaint's, labels, an annotation and a fault,
// the kubelet's Ready condition and one of selftaint's, capacity with
// another writer's extended resource, addresses, the kubelet's endpoint.
func kubeletNode(n *corev1.Node) {
	n.Labels = map[string]string{"team": "infra", "kubernetes.io/hostname": n.Name}
	n.Annotations = map[string]string{
		"example.com/owner":                        "team-a",
		faults.AnnotationKey("memory"):             `{"status":"True"}`,
		taints.OwnedTaintsAnnotation:               "selftaint.io/memory-pressure:NoSchedule",
		"node.alpha.kubernetes.io/ttl":             "0",
		"volumes.kubernetes.io/controller-managed": "true",
	}
	n.Spec.Taints = []corev1.Taint{
		{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "selftaint.io/maintenance", Effect: corev1.TaintEffectNoSchedule},
		{Key: "selftaint.io/memory-pressure", Effect: corev1.TaintEffectNoSchedule},
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: memoryCondition, Status: corev1.ConditionTrue, Reason: "LowMemory", LastHeartbeatTime: now, LastTransitionTime: now},
	}
	n.Status.Capacity = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourcePods: resource.MustParse("110"),
		"example.com/other": resource.MustParse("2"),
	}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}, {Type: corev1.NodeHostName, Address: n.Name}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	n.Status.NodeInfo.KubeletVersion = "v1.35.4"
}

// nodeWrite is one write to a Node: a patch of the given type to the Node
// or its status; or, with taints set, a merge patch of spec.taints made by
// editing the list as the writer reads it.
type nodeWrite struct {
	pt     types.PatchType
	status bool
	body   string
	taints func([]corev1.Taint) []corev1.Taint
}

func (w nodeWrite) do(c typedcorev1.NodesGetter, node string) func(context.Context) error {
	return func(ctx context.Context) error {
		if w.taints != nil {
			n, err := c.Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			list, err := json.Marshal(w.taints(slices.Clone(n.Spec.Taints)))
			if err != nil {
				return err
			}
			w = mergeSpec(`{"taints":` + string(list) + `}`)
		}
		var sub []string
		if w.status {
			sub = []string{"status"}
		}
		opts := metav1.PatchOptions{}
		body := w.body
		if w.pt == types.ApplyPatchType {
			opts = metav1.PatchOptions{FieldManager: "attacker", Force: ptrTo(true)}
			body = `{"apiVersion":"v1","kind":"Node","metadata":{"name":"` + node + `"},"status":` + body + `}`
		}
		_, err := c.Nodes().Patch(ctx, node, w.pt, []byte(body), opts, sub...)
		return err
	}
}

func mergeMeta(s string) nodeWrite {
	return nodeWrite{pt: types.MergePatchType, body: `{"metadata":` + s + `}`}
}
func mergeSpec(s string) nodeWrite {
	return nodeWrite{pt: types.MergePatchType, body: `{"spec":` + s + `}`}
}
func statusSMP(s string) nodeWrite {
	return nodeWrite{pt: types.StrategicMergePatchType, status: true, body: s}
}
func statusJSON(s string) nodeWrite { return nodeWrite{pt: types.JSONPatchType, status: true, body: s} }

// statusApply is a server-side apply of the given status to the Node the
// write is sent to.
func statusApply(s string) nodeWrite {
	return nodeWrite{pt: types.ApplyPatchType, status: true, body: s}
}

// addTaint writes the Node's taints with t added.
func addTaint(key string, effect corev1.TaintEffect) nodeWrite {
	return nodeWrite{taints: func(ts []corev1.Taint) []corev1.Taint {
		return append(ts, corev1.Taint{Key: key, Effect: effect})
	}}
}

// removeTaint writes the Node's taints without those under key.
func removeTaint(key string) nodeWrite {
	return nodeWrite{taints: func(ts []corev1.Taint) []corev1.Taint {
		return slices.DeleteFunc(ts, func(t corev1.Taint) bool { return t.Key == key })
	}}
}

// setTaintValue writes the Node's taints with key's value changed.
func setTaintValue(key, value string) nodeWrite {
	return nodeWrite{taints: func(ts []corev1.Taint) []corev1.Taint {
		for i := range ts {
			if ts[i].Key == key {
				ts[i].Value = value
			}
		}
		return ts
	}}
}

// testAdmissionPolicy attacks the policy with the agent's own identity —
// bound to node A, and bound to no node — on another node B and on A
// itself, through nodes and nodes/status with merge, strategic-merge, JSON
// patches and server-side apply, and checks each attack is denied by the
// policy and changes nothing, while what the agent does on A is allowed
// and other users are unaffected.
func testAdmissionPolicy(t *testing.T, cp *testcp.ControlPlane) {
	const a, b = "policy-a", "policy-b"
	admin := cp.Client()
	for _, n := range []string{a, b} {
		cp.CreateNode(t, n, kubeletNode)
	}
	bound := coreClient(t, asServiceAccount(cp, agentSA, a))
	unbound := coreClient(t, asServiceAccount(cp, agentSA, ""))
	before := map[string]*corev1.Node{}
	for _, n := range []string{a, b} {
		before[n] = getNode(t, admin, n)
	}

	// Attacks on another node, and with a token bound to no node.
	elsewhere := []struct {
		name string
		w    nodeWrite
	}{
		{"set the kubelet's Ready False (strategic merge)", statusSMP(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Evil"}]}}`)},
		{"set the kubelet's Ready False (server-side apply)", statusApply(`{"conditions":[{"type":"Ready","status":"False","reason":"Evil"}]}`)},
		{"zero cpu and pods capacity", statusSMP(`{"status":{"capacity":{"cpu":"0","pods":"0"},"allocatable":{"cpu":"0","pods":"0"}}}`)},
		{"remove another writer's extended resource", statusJSON(`[{"op":"remove","path":"/status/capacity/example.com~1other"}]`)},
		{"replace the InternalIP and kubelet port", statusSMP(`{"status":{"addresses":[{"type":"InternalIP","address":"203.0.113.66"}],"daemonEndpoints":{"kubeletEndpoint":{"Port":1}}}}`)},
		{"relabel through status", statusSMP(`{"metadata":{"labels":{"team":"evil"}}}`)},
		{"add a fault through status", statusSMP(`{"metadata":{"annotations":{"fault.selftaint.io/memory":"{\"status\":\"True\"}"}}}`)},
		{"an ownerReference to a missing object through status", statusSMP(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}}`)},
		{"claim a foreign taint in the ownership record through status", statusSMP(`{"metadata":{"annotations":{"selftaint.io/owned-taints":"dedicated:NoSchedule"}}}`)},
		{"add a taint", addTaint(testTaintKey, corev1.TaintEffectNoSchedule)},
		{"remove a foreign taint", removeTaint("dedicated")},
		{"claim a foreign taint in the ownership record", mergeMeta(`{"annotations":{"selftaint.io/owned-taints":"dedicated:NoSchedule"}}`)},
		{"ask for a drain", mergeMeta(fmt.Sprintf(`{"annotations":{%q:%q}}`, fleet.AgentRequestAnnotation, maintenanceRequest()))},
	}
	var attacks []attack
	for _, e := range elsewhere {
		attacks = append(attacks,
			attack{"bound to " + a + ", on " + b + ": " + e.name, e.w.do(bound, b), policyName, "its token is bound to node " + a + ", not " + b},
			attack{"bound to no node, on " + b + ": " + e.name, e.w.do(unbound, b), policyName, "name no node"},
			attack{"bound to no node, on " + a + ": " + e.name, e.w.do(unbound, a), policyName, "name no node"})
	}
	// Attacks on its own node.
	own := func(name string, w nodeWrite, deny string) attack {
		return attack{"own node: " + name, w.do(bound, a), policyName, deny}
	}
	attacks = append(attacks,
		own("remove a foreign taint", removeTaint("dedicated"), "only its own taints (owned-taints), not dedicated:NoSchedule"),
		own("remove the API server's not-ready taint", removeTaint(corev1.TaintNodeNotReady), "not node.kubernetes.io/not-ready:NoSchedule"),
		// The prefix alone makes no taint selftaint's (see
		// taints.OwnedByKey): only the key:effects the parameters list.
		own("remove an operator's selftaint.io/ taint no config names", removeTaint("selftaint.io/maintenance"), "not selftaint.io/maintenance:NoSchedule"),
		own("change a foreign taint's value", setTaintValue("dedicated", "cpu"), "not dedicated:NoSchedule"),
		own("add a taint under any key", addTaint("evil", corev1.TaintEffectNoExecute), "not evil:NoExecute"),
		own("add its own key with another effect", addTaint("selftaint.io/memory-pressure", corev1.TaintEffectNoExecute), "not selftaint.io/memory-pressure:NoExecute"),
		own("set a lookalike .present label", mergeMeta(`{"labels":{"node-role.kubernetes.io/control-plane.present":"true"}}`), "only its own hardware labels (owned-labels), not node-role.kubernetes.io/control-plane.present"),
		own("set a selftaint.io label", mergeMeta(`{"labels":{"selftaint.io/virtual":"true"}}`), "not selftaint.io/virtual"),
		own("change a foreign label", mergeMeta(`{"labels":{"team":"ml"}}`), "not team"),
		own("delete a foreign annotation", mergeMeta(`{"annotations":{"example.com/owner":null}}`), "not example.com/owner"),
		own("add a fault", mergeMeta(`{"annotations":{"fault.selftaint.io/disk":"{\"status\":\"True\"}"}}`), "not fault.selftaint.io/disk"),
		own("change a fault", mergeMeta(`{"annotations":{"fault.selftaint.io/memory":"{\"status\":\"False\"}"}}`), "not fault.selftaint.io/memory"),
		own("add a finalizer", mergeMeta(`{"finalizers":["example.com/hold"]}`), "finalizers or ownerReferences"),
		own("add an ownerReference", mergeMeta(`{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}`), "finalizers or ownerReferences"),
		own("set spec.unschedulable", mergeSpec(`{"unschedulable":true}`), "not spec.unschedulable"),
		// Maintenance: an operator's request, and the coordinator's cordon
		// record and condition, are never the agent's.
		own("write an operator's maintenance request", mergeMeta(fmt.Sprintf(`{"annotations":{%q:%q}}`, fleet.OperatorRequestAnnotation, maintenanceRequest())), "not "+fleet.OperatorRequestAnnotation),
		own("write the coordinator's cordon record", mergeMeta(fmt.Sprintf(`{"annotations":{%q:"operator/x"}}`, fleet.CordonAnnotation)), "not "+fleet.CordonAnnotation),
		own("cordon itself with the coordinator's record", mergeNode(fmt.Sprintf(`{"metadata":{"annotations":{%q:"operator/x"}},"spec":{"unschedulable":true}}`, fleet.CordonAnnotation)), "not spec.unschedulable"),
		own("apply the coordinator's maintenance condition", statusApply(fmt.Sprintf(`{"conditions":[{"type":%q,"status":"False","reason":%q}]}`, fleet.MaintenanceCondition, fleet.ReasonReleased)), "not "+string(fleet.MaintenanceCondition)),
		own("set podCIDR and providerID", mergeSpec(`{"podCIDR":"10.2.0.0/24","providerID":"x://y"}`), "podCIDR"),
		own("overwrite the kubelet's Ready (strategic merge)", statusSMP(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Evil"}]}}`), "only its own conditions (owned-conditions), not Ready"),
		own("overwrite the kubelet's Ready (server-side apply)", statusApply(`{"conditions":[{"type":"Ready","status":"False","reason":"Evil"}]}`), "not Ready"),
		// A copy is a member of the kubelet's conditions: it passes a
		// membership test, and outlives the kubelet's next NotReady.
		own("append an exact copy of the kubelet's Ready", appendCondition(t, *taints.FindCondition(before[a], corev1.NodeReady)), "not add or remove a copy of a condition it does not own, not Ready"),
		own("remove another writer's extended resource", statusJSON(`[{"op":"remove","path":"/status/capacity/example.com~1other"}]`), "only its own extended resources (owned-resources), not capacity example.com/other"),
		own("zero cpu capacity (server-side apply)", statusApply(`{"capacity":{"cpu":"0"}}`), "not capacity cpu"),
		own("replace the InternalIP", statusSMP(`{"status":{"addresses":[{"type":"InternalIP","address":"203.0.113.66"}]}}`), "not status.addresses"),
		own("change the kubelet port", statusSMP(`{"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":1}}}}`), "not status.daemonEndpoints"),
		own("set its own hardware label through status", statusSMP(`{"metadata":{"labels":{"example.com/fpga.present":"true"}}}`), "no labels through nodes/status"),
		own("write its ownership record through status", statusSMP(`{"metadata":{"annotations":{"selftaint.io/owned-taints":"dedicated:NoSchedule"}}}`), "no annotations through nodes/status"),
		own("an ownerReference through status", statusSMP(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}}`), "finalizers or ownerReferences"),
	)
	for _, at := range attacks {
		at.check(t)
	}
	// Nothing changed on either node.
	for _, n := range []string{a, b} {
		checkUnchanged(t, before[n], getNode(t, admin, n))
	}

	// What the agent does on its own node is allowed, in this order.
	allowed := []struct {
		name string
		w    nodeWrite
	}{
		{"add its rule's taint, carrying the others", addTaint(testTaintKey, corev1.TaintEffectNoSchedule)},
		{"remove its rule's taint", removeTaint(testTaintKey)},
		{"remove another of its taints", removeTaint("selftaint.io/memory-pressure")},
		{"set its hardware label", mergeMeta(`{"labels":{"example.com/fpga.present":"true"}}`)},
		{"remove its hardware label", mergeMeta(`{"labels":{"example.com/fpga.present":null}}`)},
		{"write its ownership records and initialized-at", mergeMeta(`{"annotations":{"selftaint.io/owned-taints":"selftaint.io/deploy-test:NoSchedule","selftaint.io/owned-labels":"example.com/fpga.present","selftaint.io/initialized-at":"2026-01-01T00:00:00Z"}}`)},
		{"write its ownership record with a timeAdded", mergeMeta(`{"annotations":{"selftaint.io/owned-taints":"selftaint.io/deploy-test:NoSchedule@2026-01-01T00:00:00Z"}}`)},
		{"remove an expired fault", mergeMeta(`{"annotations":{"fault.selftaint.io/memory":null}}`)},
		{"ask for a drain of its own node", mergeMeta(fmt.Sprintf(`{"annotations":{%q:%q}}`, fleet.AgentRequestAnnotation, maintenanceRequest()))},
		{"withdraw its drain request", mergeMeta(fmt.Sprintf(`{"annotations":{%q:null}}`, fleet.AgentRequestAnnotation))},
		{"apply its own condition", statusApply(fmt.Sprintf(`{"conditions":[{"type":%q,"status":"True","reason":"Test"}]}`, testCondition))},
		{"patch its own condition", statusSMP(fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"False","reason":"Test"}]}}`, quietCondition))},
		{"advertise its resource", statusApply(`{"capacity":{"example.com/fpga":"1"},"allocatable":{"example.com/fpga":"1"}}`)},
		{"withdraw its resource", statusJSON(`[{"op":"test","path":"/status/capacity/example.com~1fpga","value":"1"},{"op":"remove","path":"/status/capacity/example.com~1fpga"},{"op":"remove","path":"/status/allocatable/example.com~1fpga"}]`)},
	}
	for _, w := range allowed {
		attack{"own node: " + w.name, w.w.do(bound, a), "", ""}.check(t)
	}
	// A writer with a stale list (kubectl taint) puts the agent's taint
	// back, unrecorded: it is the agent's by key, and it may remove it.
	for _, at := range []attack{
		{"admin: a stale list puts the agent's taint back", addTaint(testTaintKey, corev1.TaintEffectNoSchedule).do(admin.CoreV1(), a), "", ""},
		{"own node: remove its rule's taint it did not record", removeTaint(testTaintKey).do(bound, a), "", ""},
	} {
		at.check(t)
	}
	after := getNode(t, admin, a)
	if !hasTaint(after, "dedicated") || !hasTaint(after, "selftaint.io/maintenance") || after.Labels["team"] != "infra" || after.Annotations["example.com/owner"] != "team-a" {
		t.Errorf("after the agent's writes, node %s lost a foreign taint, label or annotation: %+v", a, after.ObjectMeta)
	}
	if c := taints.FindCondition(after, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("after the agent's writes, Ready = %+v, want the kubelet's True", c)
	}

	testConditionCopies(t, cp)

	// Creating a Node is refused even for the node its token names (a
	// server-side apply of a Node that does not exist would create it).
	ghost := coreClient(t, asServiceAccount(cp, agentSA, "ghost"))
	attack{"create its own (missing) Node by server-side apply", func(ctx context.Context) error {
		_, err := ghost.Nodes().Patch(ctx, "ghost", types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"ghost"}}`),
			metav1.PatchOptions{FieldManager: "attacker", Force: ptrTo(true)})
		if apierrors.IsForbidden(err) && !strings.Contains(err.Error(), policyName) {
			return nil // refused by RBAC, as it must be
		}
		return fmt.Errorf("want Forbidden by RBAC, got %v", err)
	}, "", ""}.check(t)

	// Other users are not affected.
	for _, w := range []nodeWrite{mergeSpec(`{"unschedulable":true}`), mergeMeta(`{"labels":{"team":"ml"}}`), statusSMP(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Admin"}]}}`)} {
		attack{"admin on " + b, w.do(admin.CoreV1(), b), "", ""}.check(t)
	}
}

func getNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	return testkit.GetNode(t, c, name)
}

// checkUnchanged fails t if anything but bookkeeping differs between two
// reads of a Node.
func checkUnchanged(t *testing.T, before, after *corev1.Node) {
	t.Helper()
	strip := func(n *corev1.Node) *corev1.Node {
		n = n.DeepCopy()
		n.ResourceVersion, n.ManagedFields = "", nil
		return n
	}
	if b, a := strip(before), strip(after); !reflect.DeepEqual(b, a) {
		t.Errorf("node %s changed:\nbefore %+v\nafter  %+v", before.Name, b, a)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("node %s was written (resourceVersion %s -> %s)", before.Name, before.ResourceVersion, after.ResourceVersion)
	}
}

// installRendered creates namespace ns on cp (unless it is there already,
// as kube-system is) and every rendered object in it (see
// createManifests).
func installRendered(t *testing.T, cp *testcp.ControlPlane, ns string, rendered []manifest) {
	t.Helper()
	_, err := cp.Client().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	createManifests(t, cp.Client(), rendered)
}

// mergeMaps returns a with b's entries added (a new map).
func mergeMaps(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// kustomizeOverlayYAML renders, with kustomize, an overlay of the
// kustomization in base (a directory relative to deploy/) with the
// kustomization field line (e.g. "namespace: x") and the components (also
// relative to deploy/).
func kustomizeOverlayYAML(t *testing.T, base, line string, components ...string) []byte {
	t.Helper()
	return renderOverlay(t, base, line, nil, components)
}

// renderOverlay is kustomizeOverlayYAML with the overlay's transformers
// (directories relative to deploy/, e.g. eventsInDefaultDir) too.
func renderOverlay(t *testing.T, base, line string, transformers, components []string) []byte {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes no absolute path, and one outside the overlay only
	// without load restrictions.
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(dir, abs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" + line + "\nresources:\n- " + rel(base) + "\n"
	for _, f := range []struct {
		field string
		dirs  []string
	}{{"transformers", transformers}, {"components", components}} {
		if len(f.dirs) > 0 {
			k += f.field + ":\n"
		}
		for _, d := range f.dirs {
			k += "- " + rel(d) + "\n"
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = kusttypes.LoadRestrictionsNone
	res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build of an overlay of %s: %v", base, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kustomizeOverlay is kustomizeOverlayYAML's result decoded.
func kustomizeOverlay(t *testing.T, base, line string, components ...string) []manifest {
	t.Helper()
	return decodeRendered(t, kustomizeOverlayYAML(t, base, line, components...))
}

// decodeRendered decodes what kustomize rendered.
func decodeRendered(t *testing.T, rendered []byte) []manifest {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(file, rendered, 0o600); err != nil {
		t.Fatal(err)
	}
	ms, err := decodeFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestPolicyNamespaceOverlay installs deploy/ through a kustomize overlay
// that moves it to another namespace, on a control plane where deploy/ is
// not installed otherwise (shared, see overlayAndPrefix), and attacks it:
// the policy still confines the agent's service account (now in that
// namespace), and the agent's own writes still go through. The overlay is
// a plain `namespace:` one: its agent's and coordinator's Node Events are
// refused until what the transformer events-in-default keeps in "default"
// is installed too (testPlainOverlayEvents).
func TestPolicyNamespaceOverlay(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver")
	t.Parallel()
	const ns = "selftaint-system"
	rendered := kustomizeOverlay(t, ".", "namespace: "+ns)
	for _, m := range rendered {
		if m.meta().GetNamespace() == namespace {
			t.Errorf("%s still in %s after the overlay", m, namespace)
		}
	}
	cp := overlayAndPrefix.Get(t)
	installRendered(t, cp, ns, rendered)
	attackAgentPolicy(t, cp, "overlay", ns, agentSA, policyName)
	testPlainOverlayEvents(t, cp, ns)
}

// attackAgentPolicy attacks, on Nodes named after prefix, the agent
// policy named policy as installed for the agent's service account sa in
// ns, with that account's token bound to one of them: the policy denies
// writes to another node and to what the agent does not own on its own,
// and lets its own writes through.
func attackAgentPolicy(t *testing.T, cp *testcp.ControlPlane, prefix, ns, sa, policy string) {
	t.Helper()
	admin := cp.Client()
	ctx := t.Context()
	a, b, canary := prefix+"-a", prefix+"-b", prefix+"-canary"
	for _, n := range []string{a, b} {
		cp.CreateNode(t, n, kubeletNode)
	}
	c := coreClient(t, asServiceAccountIn(cp, ns, sa, a))
	// The API server loads policies asynchronously: wait until it denies a
	// write to a canary node, then attack.
	cp.CreateNode(t, canary, nil)
	poll(t, time.Minute, "the "+prefix+" policy to deny a write to another node", func() (bool, error) {
		err := mergeMeta(`{"annotations":{"x":"y"}}`).do(c, canary)(ctx)
		return apierrors.IsForbidden(err) && containsAll(err.Error(), []string{policy, "bound to node " + a}), err
	})
	beforeB := getNode(t, admin, b)
	for _, at := range []attack{
		{prefix + ": set another node's Ready False", statusSMP(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Evil"}]}}`).do(c, b), policy, "bound to node " + a + ", not " + b},
		{prefix + ", own node: overwrite Ready", statusSMP(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Evil"}]}}`).do(c, a), policy, "not Ready"},
		{prefix + ", own node: remove a foreign taint", removeTaint("dedicated").do(c, a), policy, "not dedicated:NoSchedule"},
		{prefix + ", own node: remove its own taint", removeTaint("selftaint.io/memory-pressure").do(c, a), "", ""},
		{prefix + ", own node: apply its own condition", statusApply(fmt.Sprintf(`{"conditions":[{"type":%q,"status":"False","reason":"Fine"}]}`, memoryCondition)).do(c, a), "", ""},
	} {
		at.check(t)
	}
	checkUnchanged(t, beforeB, getNode(t, admin, b))
}

// testPolicyWithoutParameters empties the policy's parameters, as an
// operator's mistake would: the agent's service account may then own
// nothing (its writes of its own condition and taint are denied), and
// nobody else is affected — the policy is its own parameter object, so no
// missing object can make the API server deny other users' Node writes.
func testPolicyWithoutParameters(t *testing.T, cp *testcp.ControlPlane) {
	const node = "no-params"
	admin := cp.Client()
	cp.CreateNode(t, node, kubeletNode)
	empty := map[string]string{paramTaints: "", paramLabels: "", paramConditions: "", paramResources: ""}
	setPolicyParams(t, cp, namespace, empty, false)
	t.Cleanup(func() { setPolicyParams(t, cp, namespace, testParams(t), true) })
	bound := coreClient(t, asServiceAccount(cp, agentSA, node))
	for _, at := range []attack{
		{"agent: its own condition", statusApply(`{"conditions":[{"type":"SelftaintMemoryPressure","status":"False","reason":"Fine"}]}`).do(bound, node), policyName, "not SelftaintMemoryPressure"},
		{"agent: its own taint", removeTaint("selftaint.io/memory-pressure").do(bound, node), policyName, "not selftaint.io/memory-pressure:NoSchedule"},
		{"admin: the kubelet's Ready", statusSMP(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Admin"}]}}`).do(admin.CoreV1(), node), "", ""},
		{"admin: a taint", addTaint("example.com/maintenance", corev1.TaintEffectNoSchedule).do(admin.CoreV1(), node), "", ""},
	} {
		at.check(t)
	}
}

// TestKustomizeBuilds renders each kustomization with kustomize itself (as
// `kubectl apply -k` would) and checks what comes out: every object of
// deploy/, deploy/virtual/, deploy/drain-force/ and deploy/virtual/drains/
// as the files hold them, and deploy/monitoring/ with its generated
// dashboard ConfigMap.
func TestKustomizeBuilds(t *testing.T) {
	for _, tt := range []struct {
		dir  string
		want []string // kind/name of objects the build must hold
	}{
		{".", []string{"ValidatingAdmissionPolicy/" + policyName, "ValidatingAdmissionPolicyBinding/" + policyName, "DaemonSet/selftaint", "ConfigMap/" + configMapName,
			"Deployment/" + coordinatorSA, "PodDisruptionBudget/" + coordinatorSA, "ServiceAccount/" + coordinatorSA,
			"ValidatingAdmissionPolicy/" + coordinatorNodesPolicy, "ValidatingAdmissionPolicyBinding/" + coordinatorNodesPolicy,
			"ValidatingAdmissionPolicy/" + coordinatorPodsPolicy, "ValidatingAdmissionPolicyBinding/" + coordinatorPodsPolicy}},
		{"virtual", []string{"Deployment/selftaint-virtual", "ServiceAccount/" + virtualSA,
			"ValidatingAdmissionPolicy/" + virtualEvictionsPolicy, "ValidatingAdmissionPolicyBinding/" + virtualEvictionsPolicy}},
		{drainForceDir, []string{"ClusterRole/" + drainForceRole, "ClusterRoleBinding/" + drainForceRole}},
		{virtualDrainsDir, []string{"ClusterRole/" + virtualDrainsRole, "ClusterRoleBinding/" + virtualDrainsRole}},
		{"monitoring", []string{"PodMonitor/selftaint", "PodMonitor/selftaint-coordinator", "PrometheusRule/selftaint", "ConfigMap/selftaint-dashboard"}},
	} {
		opts := krusty.MakeDefaultOptions()
		res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), tt.dir)
		if err != nil {
			t.Errorf("kustomize build %s: %v", tt.dir, err)
			continue
		}
		have := map[string]bool{}
		for _, r := range res.Resources() {
			have[r.GetKind()+"/"+r.GetName()] = true
			if r.GetKind() == "ConfigMap" && r.GetName() == "selftaint-dashboard" {
				data := r.GetDataMap()
				if !json.Valid([]byte(data["dashboard.json"])) {
					t.Errorf("%s: the dashboard ConfigMap holds no valid dashboard.json", tt.dir)
				}
			}
		}
		for _, w := range tt.want {
			if !have[w] {
				t.Errorf("kustomize build %s: no %s (have %v)", tt.dir, w, slices.Sorted(maps.Keys(have)))
			}
		}
		if tt.dir != "monitoring" && len(have) != len(readManifests(t, tt.dir)) {
			t.Errorf("kustomize build %s: %d objects, the files hold %d", tt.dir, len(have), len(readManifests(t, tt.dir)))
		}
	}
}

// appendCondition is a JSON patch of the Node's status that appends c.
func appendCondition(t *testing.T, c corev1.NodeCondition) nodeWrite {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return statusJSON(`[{"op":"add","path":"/status/conditions/-","value":` + string(b) + `}]`)
}

// testConditionCopies: on a Node that already carries a second, stale copy
// of the kubelet's Ready=True (written before the policy counted copies, or
// by another writer), the kubelet reports NotReady and the copy stays; the
// agent may still write its own condition, carrying both, and may neither
// remove the copy nor add another.
func testConditionCopies(t *testing.T, cp *testcp.ControlPlane) {
	t.Helper()
	const node = "policy-copies"
	admin := cp.Client()
	cp.CreateNode(t, node, kubeletNode)
	ready := *taints.FindCondition(getNode(t, admin, node), corev1.NodeReady)
	attack{"admin: a stale copy of Ready", appendCondition(t, ready).do(admin.CoreV1(), node), "", ""}.check(t)
	notReady := `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady"}]}}`
	attack{"admin: the kubelet reports NotReady", statusSMP(notReady).do(admin.CoreV1(), node), "", ""}.check(t)
	conditions := getNode(t, admin, node).Status.Conditions
	var got []string
	stale := -1
	for i, c := range conditions {
		got = append(got, string(c.Type)+"="+string(c.Status))
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			stale = i
		}
	}
	slices.Sort(got)
	if want := []string{"Ready=False", "Ready=True", string(memoryCondition) + "=True"}; !slices.Equal(got, want) {
		t.Fatalf("conditions %v, want %v (a stale copy of Ready=True after NotReady)", got, want)
	}

	bound := coreClient(t, asServiceAccount(cp, agentSA, node))
	own := nodeWrite{pt: types.JSONPatchType, status: true, body: fmt.Sprintf(
		`[{"op":"add","path":"/status/conditions/-","value":{"type":%q,"status":"False","reason":"Fine"}}]`, testCondition)}
	removeCopy := statusJSON(fmt.Sprintf(`[{"op":"test","path":"/status/conditions/%d/status","value":"True"},{"op":"remove","path":"/status/conditions/%d"}]`, stale, stale))
	for _, at := range []attack{
		{"own node with a stale Ready: write its own condition, carrying the copy", own.do(bound, node), "", ""},
		{"own node with a stale Ready: remove the copy", removeCopy.do(bound, node), policyName, "not Ready"},
		{"own node with a stale Ready: add another", appendCondition(t, ready).do(bound, node), policyName, "not Ready"},
	} {
		at.check(t)
	}
}

// testAgentNeverOwnsMaintenance adds the coordinator's SelftaintMaintenance
// to the agents' policy parameters, as an operator's config naming it
// would (and a marker condition, to know the API server took them): the
// agent may then write the marker but still not SelftaintMaintenance,
// which is never the agent's whatever the parameters say.
func testAgentNeverOwnsMaintenance(t *testing.T, cp *testcp.ControlPlane) {
	const node = "never-maintenance"
	const marker corev1.NodeConditionType = "SelftaintDeployMarker"
	cp.CreateNode(t, node, kubeletNode)
	bound := coreClient(t, asServiceAccount(cp, agentSA, node))
	// A new message each time: a write that changes nothing passes the
	// policy whatever it owns.
	applyCondition := func(c corev1.NodeConditionType) nodeWrite {
		return statusApply(fmt.Sprintf(`{"conditions":[{"type":%q,"status":"True","reason":"Test","message":"%d"}]}`, c, time.Now().UnixNano()))
	}
	markerAllowed := func(want bool) func() (bool, error) {
		return func() (bool, error) {
			err := applyCondition(marker).do(bound, node)(context.Background())
			return (err == nil) == want, err
		}
	}
	params := testParams(t)
	params[paramConditions] += string(fleet.MaintenanceCondition) + "\n" + string(marker) + "\n"
	setPolicyParams(t, cp, namespace, params, true)
	t.Cleanup(func() {
		setPolicyParams(t, cp, namespace, testParams(t), true)
		poll(t, time.Minute, "the marker condition refused again", markerAllowed(false))
	})
	poll(t, time.Minute, "the parameters naming "+string(marker)+" in force", markerAllowed(true))
	attack{"own node, with parameters naming it: apply " + string(fleet.MaintenanceCondition), applyCondition(fleet.MaintenanceCondition).do(bound, node),
		policyName, "only its own conditions (owned-conditions), not " + string(fleet.MaintenanceCondition)}.check(t)
}
