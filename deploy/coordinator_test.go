package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"github.com/selftaint/selftaint/agent/coordinator"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints/fleet"
)

// The coordinator's names the manifests agree on.
const (
	coordinatorPort = 9747
	guardName       = "selftaint-guard"
	leaderLease     = "selftaint-coordinator"
)

// TestCoordinatorSpec pins what the coordinator's Deployment must say: two
// replicas on different nodes where possible, the downward API for its
// identity and namespace, the agents' config, health probes on its metrics
// port, no privileges, and a PodDisruptionBudget keeping one.
func TestCoordinatorSpec(t *testing.T) {
	ms := readManifests(t, ".")
	d := find[*appsv1.Deployment](t, ms, coordinatorSA)
	pod := d.Spec.Template.Spec
	check := func(what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("replicas", d.Spec.Replicas != nil && *d.Spec.Replicas == 2, true)
	check("serviceAccountName", pod.ServiceAccountName, coordinatorSA)
	check("priorityClassName", pod.PriorityClassName, "system-cluster-critical")
	check("hostNetwork", pod.HostNetwork, false)
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("selector %v does not match the pod labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	checkAntiAffinity(t, pod, d.Spec.Template.Labels)
	checkTolerations(t, ms, pod.Tolerations)
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	check("image", c.Image, image)
	check("args", c.Args, []string{"coordinator", "--config=/etc/selftaint/config.yaml"})
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	check("POD_NAME", env["POD_NAME"], "metadata.name")
	check("POD_NAMESPACE", env["POD_NAMESPACE"], "metadata.namespace")
	checkConfigMount(t, pod, c)
	checkHealthProbes(t, c, coordinatorPort)
	checkLockedDown(t, pod, c)
	for _, q := range []struct {
		what string
		got  *resource.Quantity
	}{{"cpu request", c.Resources.Requests.Cpu()}, {"memory request", c.Resources.Requests.Memory()}, {"memory limit", c.Resources.Limits.Memory()}} {
		if q.got.IsZero() {
			t.Errorf("%s not set", q.what)
		}
	}

	pdb := find[*policyv1.PodDisruptionBudget](t, ms, coordinatorSA)
	if pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(1) || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget minAvailable %v maxUnavailable %v, want minAvailable 1", pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable)
	}
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget selector %v does not match the coordinator's pods (%v)", pdb.Spec.Selector, err)
	}
}

// checkAntiAffinity: the replicas prefer different nodes.
func checkAntiAffinity(t *testing.T, pod corev1.PodSpec, podLabels map[string]string) {
	t.Helper()
	if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("affinity %+v, want one preferred pod anti-affinity term", pod.Affinity)
	}
	term := pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if term.TopologyKey != corev1.LabelHostname || err != nil || !sel.Matches(labels.Set(podLabels)) {
		t.Errorf("anti-affinity term %+v, want the coordinator's own pods across %s", term, corev1.LabelHostname)
	}
}

// checkTolerations: the coordinator tolerates every selftaint.io/ taint
// the deployed config can set (its rules' and the initialization taint),
// whatever the effect, and nothing else of selftaint's.
func checkTolerations(t *testing.T, ms []manifest, tolerations []corev1.Toleration) {
	t.Helper()
	var cfg struct {
		Initialization struct {
			Taint corev1.Taint `json:"taint"`
		} `json:"initialization"`
		Rules []struct {
			Taint corev1.Taint `json:"taint"`
		} `json:"rules"`
	}
	cm := find[*corev1.ConfigMap](t, ms, configMapName)
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	keys := []string{cfg.Initialization.Taint.Key}
	for _, r := range cfg.Rules {
		keys = append(keys, r.Taint.Key)
	}
	for _, k := range keys {
		if !slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool {
			return tol.Key == k && tol.Operator == corev1.TolerationOpExists && tol.Effect == ""
		}) {
			t.Errorf("no toleration of %s with any effect", k)
		}
	}
	for _, tol := range tolerations {
		if tol.Key == "" || !strings.HasPrefix(tol.Key, "selftaint.io/") || tol.TolerationSeconds != nil {
			t.Errorf("toleration %+v: only selftaint.io/ keys, forever, are expected", tol)
		}
	}
}

// checkConfigMount: the agents' ConfigMap, read-only, where --config says.
func checkConfigMount(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	var volume string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == configMapName {
			volume = v.Name
		}
	}
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/selftaint" })
	if volume == "" || i < 0 || c.VolumeMounts[i].Name != volume || !c.VolumeMounts[i].ReadOnly {
		t.Errorf("mounts %+v, volumes %+v: want ConfigMap %s read-only at /etc/selftaint", c.VolumeMounts, pod.Volumes, configMapName)
	}
}

// checkHealthProbes: metrics on a named port, liveness on /healthz and
// readiness on /readyz there.
func checkHealthProbes(t *testing.T, c corev1.Container, port int32) {
	t.Helper()
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })
	if i < 0 || c.Ports[i].ContainerPort != port || c.Ports[i].Protocol != corev1.ProtocolTCP {
		t.Errorf("ports %+v, want metrics %d/TCP", c.Ports, port)
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port != intstr.FromString("metrics") {
			t.Errorf("%s probe %+v, want an httpGet of %s on port metrics", p.what, p.probe, p.path)
		}
	}
}

// checkLockedDown: non-root, read-only root filesystem, no capabilities,
// no privilege escalation, the runtime's seccomp profile.
func checkLockedDown(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatal("pod or container securityContext missing")
	}
	for what, ok := range map[string]bool{
		"runAsNonRoot":             psc.RunAsNonRoot != nil && *psc.RunAsNonRoot,
		"runAsUser 65532":          psc.RunAsUser != nil && *psc.RunAsUser == 65532,
		"seccompProfile":           psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"readOnlyRootFilesystem":   sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem,
		"allowPrivilegeEscalation": sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		"not privileged":           sc.Privileged == nil || !*sc.Privileged,
		"drop ALL, add none":       sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0,
	} {
		if !ok {
			t.Errorf("securityContext: want %s", what)
		}
	}
}

// testCoordinatorRBACIsEnough runs the real coordinator, leader election
// included, as its service account with its admission policy in force,
// through everything it writes: the leader Lease created, renewed and
// released, a grant created, renewed, released and deleted, the guard
// created, tripped and renewed, Events about a Node (in default) and about
// the guard and the leader Lease (in its namespace). Nothing is refused.
func testCoordinatorRBACIsEnough(t *testing.T, cp *testcp.ControlPlane) {
	const group = "coordinator-rbac"
	const condition corev1.NodeConditionType = "SelftaintDeployFleet"
	admin := cp.Client()
	logger, logs := captureLogs(t)
	clk := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	nodes := []string{"coord-asks", "coord-bad", "coord-idle"}
	for _, n := range nodes {
		cp.CreateNode(t, n, func(node *corev1.Node) {
			node.Labels = map[string]string{"selftaint.test/group": group, corev1.LabelTopologyZone: "a"}
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		})
	}
	request := fleet.Request{Since: clk.Now().Add(-time.Minute), Conditions: []corev1.NodeConditionType{condition}}.Format()
	annotate(t, admin, "coord-asks", request)
	annotate(t, admin, "coord-bad", "not json")

	client := coordinatorClient(t, cp, namespace)
	waitCoordinatorPolicy(t, client, namespace)
	c, err := coordinator.New(coordinator.Options{
		Client: client, Namespace: namespace, Identity: "coordinator-under-test", Clock: clk, Logger: logger,
		Config: fleet.Config{
			MaxNoExecute: intstr.FromString("100%"), RatePerMinute: 6, GrantTTL: 30 * time.Second,
			Guard:   fleet.GuardConfig{Threshold: 55, ResetMargin: 10, CoolDown: 5 * time.Minute, MinNodes: 3, RenewEvery: 30 * time.Second},
			Watched: map[corev1.NodeConditionType][]corev1.ConditionStatus{condition: {corev1.ConditionTrue}},
		},
		NodeSelector:  labels.SelectorFromSet(labels.Set{"selftaint.test/group": group}),
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	run := runFunc(t, "coordinator.Run", 60*time.Second, func(err error) bool { return errors.Is(err, context.Canceled) }, c.Run)
	defer func() {
		run.check(t) // context.Canceled
		checkNotRefused(t, logs)
	}()

	grantName := fleet.GrantName("coord-asks")
	leases := admin.CoordinationV1().Leases(namespace)
	waitLease(t, leases.Get, grantName, "granted", func(l *coordinationv1.Lease) bool { return l.Spec.HolderIdentity != nil })
	waitLease(t, leases.Get, leaderLease, "led", func(l *coordinationv1.Lease) bool {
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "coordinator-under-test"
	})
	waitEvents(t, admin, metav1.NamespaceDefault, "coord-bad", "InvalidNoExecuteRequest")
	clk.Step(10 * time.Second)
	renewed := clk.Now()
	waitLease(t, leases.Get, grantName, "renewed", func(l *coordinationv1.Lease) bool {
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Equal(renewed)
	})

	// The guard trips (2 of 3 report the condition), and is renewed.
	for _, n := range nodes[1:] {
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":"Test"}]}}`, condition)
		if _, err := admin.CoreV1().Nodes().PatchStatus(t.Context(), n, []byte(patch)); err != nil {
			t.Fatal(err)
		}
	}
	waitEvents(t, admin, namespace, guardName, fleet.EventGuardTripped)

	// Released when it stops asking; deleted after the rate window.
	annotate(t, admin, "coord-asks", "")
	waitLease(t, leases.Get, grantName, "released", func(l *coordinationv1.Lease) bool { return l.Spec.HolderIdentity == nil })
	clk.Step(2 * time.Minute)
	poll(t, 30*time.Second, "the released grant deleted", func() (bool, error) {
		_, err := leases.Get(t.Context(), grantName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	guard, err := admin.CoreV1().ConfigMaps(namespace).Get(t.Context(), guardName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g, err := fleet.DecodeGuard(guard.Data); err != nil || !g.RenewTime.Equal(clk.Now()) {
		t.Errorf("guard %+v (%v), want it renewed at %v", g, err, clk.Now())
	}
	waitEvents(t, admin, namespace, leaderLease, "LeaderElection")
}

func annotate(t *testing.T, c kubernetes.Interface, node, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = fmt.Sprintf("%q", value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, fleet.RequestAnnotation, v)
	if _, err := c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating node %s: %v", node, err)
	}
}

// waitLease polls the Lease name (with get) until ok holds.
func waitLease(t *testing.T, get func(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error), name, what string, ok func(*coordinationv1.Lease) bool) {
	t.Helper()
	poll(t, 30*time.Second, "Lease "+name+" "+what, func() (bool, error) {
		l, err := get(t.Context(), name, metav1.GetOptions{})
		return err == nil && ok(l), err
	})
}

// waitEvents waits for an Event with reason about the object name in
// namespace.
func waitEvents(t *testing.T, c kubernetes.Interface, namespace, name, reason string) {
	t.Helper()
	poll(t, 30*time.Second, fmt.Sprintf("a %s Event about %s in %s", reason, name, namespace), func() (bool, error) {
		evs, err := c.CoreV1().Events(namespace).List(t.Context(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": name, "reason": reason}.String(),
		})
		return err == nil && len(evs.Items) > 0, err
	})
}

// testCoordinatorRBACIsTight checks by access reviews that the
// coordinator's service account may do what it needs and nothing else:
// Node writes (which its drain policy narrows, testCoordinatorNodePolicy),
// pod reads and evictions for drains, but no Node creation or deletion, no
// pod deletion (drain-force/ is opt-in) or watch, no secrets, no other
// ConfigMap.
func testCoordinatorRBACIsTight(t *testing.T, cp *testcp.ControlPlane) {
	const coord = "coordination.k8s.io"
	allowed := []access{
		{verb: "get", resource: "nodes"}, {verb: "list", resource: "nodes"}, {verb: "watch", resource: "nodes"},
		{verb: "patch", resource: "nodes"}, {verb: "update", resource: "nodes"}, {verb: "patch", resource: "nodes", subresource: "status"},
		{verb: "get", resource: "pods", namespace: "default"}, {verb: "list", resource: "pods"},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: namespace},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: "default"},
		{verb: "create", group: coord, resource: "leases", namespace: namespace, name: fleet.SlotName("n1")},
		{verb: "update", group: coord, resource: "leases", namespace: namespace, name: fleet.SlotName("n1")},
		{verb: "delete", group: coord, resource: "leases", namespace: namespace, name: fleet.SlotName("n1")},
		{verb: "list", group: coord, resource: "leases", namespace: namespace}, {verb: "watch", group: coord, resource: "leases", namespace: namespace},
		{verb: "create", group: coord, resource: "leases", namespace: namespace},
		{verb: "get", group: coord, resource: "leases", namespace: namespace, name: "selftaint-grant-n1"},
		{verb: "update", group: coord, resource: "leases", namespace: namespace, name: "selftaint-grant-n1"},
		{verb: "delete", group: coord, resource: "leases", namespace: namespace, name: "selftaint-grant-n1"},
		{verb: "update", group: coord, resource: "leases", namespace: namespace, name: leaderLease},
		{verb: "create", resource: "configmaps", namespace: namespace},
		{verb: "get", resource: "configmaps", namespace: namespace, name: guardName},
		{verb: "update", resource: "configmaps", namespace: namespace, name: guardName},
		{verb: "create", resource: "events", namespace: namespace}, {verb: "patch", resource: "events", namespace: namespace},
		{verb: "create", resource: "events", namespace: "default"}, {verb: "patch", resource: "events", namespace: "default"},
	}
	denied := []access{
		{verb: "create", resource: "nodes"}, {verb: "delete", resource: "nodes"}, {verb: "deletecollection", resource: "nodes"},
		{verb: "update", resource: "nodes", subresource: "status"}, {verb: "get", resource: "nodes", subresource: "proxy"},
		{verb: "delete", resource: "pods", namespace: namespace}, {verb: "delete", resource: "pods", namespace: "default"},
		{verb: "deletecollection", resource: "pods", namespace: "default"}, {verb: "watch", resource: "pods"},
		{verb: "create", resource: "pods", namespace: "default"}, {verb: "update", resource: "pods", namespace: "default"},
		{verb: "patch", resource: "pods", namespace: "default"}, {verb: "patch", resource: "pods", subresource: "status", namespace: "default"},
		{verb: "get", resource: "pods", subresource: "exec", namespace: "default"}, {verb: "create", resource: "pods", subresource: "exec", namespace: "default"},
		{verb: "list", group: "policy", resource: "poddisruptionbudgets"}, {verb: "update", group: "policy", resource: "poddisruptionbudgets", namespace: "default"},
		{verb: "get", resource: "secrets", namespace: namespace}, {verb: "list", resource: "secrets"}, {verb: "list", resource: "secrets", namespace: namespace},
		{verb: "get", resource: "configmaps", namespace: namespace, name: configMapName},
		{verb: "update", resource: "configmaps", namespace: namespace, name: configMapName},
		{verb: "list", resource: "configmaps", namespace: namespace},
		{verb: "delete", resource: "configmaps", namespace: namespace, name: guardName},
		{verb: "patch", resource: "configmaps", namespace: namespace, name: guardName},
		{verb: "patch", group: coord, resource: "leases", namespace: namespace, name: "selftaint-grant-n1"},
		{verb: "deletecollection", group: coord, resource: "leases", namespace: namespace},
		{verb: "update", group: coord, resource: "leases", namespace: corev1.NamespaceNodeLease, name: "n1"},
		{verb: "create", group: coord, resource: "leases", namespace: "default"},
		{verb: "create", resource: "events", namespace: "kube-public"},
		// Nothing in kube-system: the control plane's leader Leases.
		{verb: "get", group: coord, resource: "leases", namespace: metav1.NamespaceSystem, name: "kube-scheduler"},
		{verb: "list", group: coord, resource: "leases", namespace: metav1.NamespaceSystem},
		{verb: "update", group: coord, resource: "leases", namespace: metav1.NamespaceSystem, name: "kube-scheduler"},
		{verb: "delete", group: coord, resource: "leases", namespace: metav1.NamespaceSystem, name: "kube-controller-manager"},
		{verb: "create", group: coord, resource: "leases", namespace: metav1.NamespaceSystem},
		{verb: "create", resource: "configmaps", namespace: metav1.NamespaceSystem},
		{verb: "create", resource: "events", namespace: metav1.NamespaceSystem},
	}
	// The Lease and ConfigMap writes RBAC allows in its namespace are
	// narrowed by name by its admission policy (testCoordinatorPolicy).
	checkAccess(t, cp, saUser(coordinatorSA), nil, "the coordinator", allowed, denied)
}

// testAgentFleetRBAC checks the agent's read-only view of the coordinator's
// decisions: it may read Leases (its grant, listed and watched by name) and
// get, list and watch the guard ConfigMap by name, by access reviews and
// by trying (a list or watch with a metadata.name field selector is a named
// request); it may not write either, or read any other ConfigMap, or any
// Lease in kube-system (the control plane's).
func testAgentFleetRBAC(t *testing.T, cp *testcp.ControlPlane) {
	const node, coord = "fleet-rbac-node", "coordination.k8s.io"
	grant := fleet.GrantName(node)
	allowed := []access{
		{verb: "get", group: coord, resource: "leases", namespace: namespace, name: grant},
		{verb: "watch", group: coord, resource: "leases", namespace: namespace, name: grant},
		{verb: "list", group: coord, resource: "leases", namespace: namespace, name: grant},
		{verb: "get", resource: "configmaps", namespace: namespace, name: guardName},
		{verb: "list", resource: "configmaps", namespace: namespace, name: guardName},
		{verb: "watch", resource: "configmaps", namespace: namespace, name: guardName},
	}
	denied := []access{
		{verb: "create", group: coord, resource: "leases", namespace: namespace},
		{verb: "update", group: coord, resource: "leases", namespace: namespace, name: grant},
		{verb: "patch", group: coord, resource: "leases", namespace: namespace, name: grant},
		{verb: "delete", group: coord, resource: "leases", namespace: namespace, name: grant},
		{verb: "update", group: coord, resource: "leases", namespace: namespace, name: leaderLease},
		{verb: "create", resource: "configmaps", namespace: namespace},
		{verb: "update", resource: "configmaps", namespace: namespace, name: guardName},
		{verb: "patch", resource: "configmaps", namespace: namespace, name: guardName},
		{verb: "delete", resource: "configmaps", namespace: namespace, name: guardName},
		{verb: "get", resource: "configmaps", namespace: namespace, name: configMapName},
		{verb: "list", resource: "configmaps", namespace: namespace},
		{verb: "watch", resource: "configmaps", namespace: namespace},
		// No Lease in kube-system: the control plane's leader Leases.
		{verb: "get", group: coord, resource: "leases", namespace: metav1.NamespaceSystem, name: "kube-scheduler"},
		{verb: "list", group: coord, resource: "leases", namespace: metav1.NamespaceSystem},
		{verb: "watch", group: coord, resource: "leases", namespace: metav1.NamespaceSystem},
	}
	checkAccess(t, cp, saUser(agentSA), map[string]authorizationv1.ExtraValue{nodeNameExtra: {node}}, "the agent", allowed, denied)

	// And by trying, as the agent bound to its node.
	rc := asServiceAccount(cp, agentSA, node)
	sa, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	byName := func(name string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	}
	// A watch from "now" (no resourceVersion) waits 3s here for the API
	// server's watch cache to confirm it is fresh, which etcd 3.4 cannot;
	// authorization, what is tested, comes first either way.
	watchByName := func(name string) metav1.ListOptions {
		o := byName(name)
		o.ResourceVersion = "0"
		return o
	}
	watchOnce := func(w interface{ Stop() }, err error) error {
		if err == nil {
			w.Stop()
		}
		return err
	}
	for _, try := range []struct {
		what    string
		do      func() error
		allowed bool
	}{
		{"get its grant", func() error {
			_, err := sa.CoordinationV1().Leases(namespace).Get(ctx, grant, metav1.GetOptions{})
			return err
		}, true},
		{"watch its grant by name", func() error { return watchOnce(sa.CoordinationV1().Leases(namespace).Watch(ctx, watchByName(grant))) }, true},
		{"list its grant by name", func() error { _, err := sa.CoordinationV1().Leases(namespace).List(ctx, byName(grant)); return err }, true},
		{"get the guard", func() error {
			_, err := sa.CoreV1().ConfigMaps(namespace).Get(ctx, guardName, metav1.GetOptions{})
			return err
		}, true},
		{"list the guard by name", func() error { _, err := sa.CoreV1().ConfigMaps(namespace).List(ctx, byName(guardName)); return err }, true},
		{"watch the guard by name", func() error { return watchOnce(sa.CoreV1().ConfigMaps(namespace).Watch(ctx, watchByName(guardName))) }, true},
		{"list configmaps", func() error { _, err := sa.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{}); return err }, false},
		{"list kube-system's Leases", func() error {
			_, err := sa.CoordinationV1().Leases(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"get kube-scheduler's Lease", func() error {
			_, err := sa.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, "kube-scheduler", metav1.GetOptions{})
			return err
		}, false},
		{"read the config", func() error {
			_, err := sa.CoreV1().ConfigMaps(namespace).Get(ctx, configMapName, metav1.GetOptions{})
			return err
		}, false},
		{"create a grant for itself", func() error {
			_, err := sa.CoordinationV1().Leases(namespace).Create(ctx, fleet.NewGrant(namespace, node, "", time.Minute, time.Now()), metav1.CreateOptions{})
			return err
		}, false},
		{"write the guard", func() error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: guardName, Namespace: namespace}, Data: fleet.EncodeGuard(fleet.GuardState{RenewTime: time.Now()})}
			_, err := sa.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{})
			return err
		}, false},
	} {
		err := try.do()
		if apierrors.IsNotFound(err) {
			err = nil // allowed to look; nothing there
		}
		if try.allowed && err != nil {
			t.Errorf("%s as the agent: %v, want it allowed", try.what, err)
		}
		if !try.allowed && !apierrors.IsForbidden(err) {
			t.Errorf("%s as the agent: %v, want Forbidden", try.what, err)
		}
	}
}

// The coordinator's admission policy (coordinator-policy.yaml) and its
// parameters.
const (
	coordinatorPolicy = "selftaint-coordinator"
	paramLeaderLease  = "coordinator.selftaint.io/leader-lease"
	paramGrantPrefix  = "coordinator.selftaint.io/grant-prefix"
	paramSlotPrefix   = "coordinator.selftaint.io/slot-prefix"
	paramGuard        = "coordinator.selftaint.io/guard"
)

// checkCoordinatorPolicy checks, without a cluster, what keeps the
// coordinator's policy in force and right: it matches the coordinator's
// service account by name in any namespace, fails closed, is its own
// required parameter object, sees every Lease and ConfigMap write in every
// namespace, and its parameters are the names the code and the deployed
// config use, which the RBAC Roles name too.
func checkCoordinatorPolicy(t *testing.T, ms []manifest) {
	t.Helper()
	vap := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, coordinatorPolicy)
	want := []admissionregistrationv1.MatchCondition{{
		Name:       "selftaint-coordinator-service-account",
		Expression: "request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':" + coordinatorSA + "')",
	}}
	if !slices.Equal(vap.Spec.MatchConditions, want) {
		t.Errorf("%s: matchConditions %+v, want %+v", coordinatorPolicy, vap.Spec.MatchConditions, want)
	}
	if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("%s: failurePolicy %v, want Fail", coordinatorPolicy, vap.Spec.FailurePolicy)
	}
	if pk := vap.Spec.ParamKind; pk == nil || pk.APIVersion != "admissionregistration.k8s.io/v1" || pk.Kind != "ValidatingAdmissionPolicy" {
		t.Errorf("%s: paramKind %+v, want the policy itself", coordinatorPolicy, pk)
	}
	data, err := yaml.Marshal(vap)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "namespace: "+namespace) || strings.Contains(string(data), "'"+namespace+"'") {
		t.Errorf("%s names namespace %s: a namespace overlay would leave it behind", coordinatorPolicy, namespace)
	}
	for _, label := range []string{fleet.GrantLabel, fleet.SlotLabel} {
		if !strings.Contains(string(data), "'"+label+"'") {
			t.Errorf("%s does not check the label %s", coordinatorPolicy, label)
		}
	}
	mc := vap.Spec.MatchConstraints
	if mc == nil || mc.NamespaceSelector != nil && len(mc.NamespaceSelector.MatchLabels)+len(mc.NamespaceSelector.MatchExpressions) > 0 {
		t.Fatalf("%s: matchConstraints %+v, want every namespace (no namespaceSelector)", coordinatorPolicy, mc)
	}
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	for _, gr := range []string{"coordination.k8s.io/leases", "/configmaps"} {
		if !slices.ContainsFunc(mc.ResourceRules, func(r admissionregistrationv1.NamedRuleWithOperations) bool {
			return len(r.APIGroups) == 1 && len(r.Resources) == 1 && r.APIGroups[0]+"/"+r.Resources[0] == gr &&
				slices.Equal(r.Operations, ops) && slices.Equal(r.APIVersions, []string{"*"}) && r.ResourceNames == nil
		}) {
			t.Errorf("%s: no rule for %s, every version, CREATE, UPDATE and DELETE, any name: %+v", coordinatorPolicy, gr, mc.ResourceRules)
		}
	}
	binding := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, ms, coordinatorPolicy)
	if binding.Spec.PolicyName != coordinatorPolicy || !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %+v, want policy %s with action Deny", binding.Spec, coordinatorPolicy)
	}
	if p := binding.Spec.ParamRef; p == nil || p.Name != coordinatorPolicy || p.Namespace != "" || p.Selector != nil ||
		p.ParameterNotFoundAction == nil || *p.ParameterNotFoundAction != admissionregistrationv1.DenyAction {
		t.Errorf("binding paramRef %+v, want the policy %s itself, denying when it is missing", binding.Spec.ParamRef, coordinatorPolicy)
	}

	// Its parameters are the code's names and the deployed config's guard,
	// which both Roles name.
	// (Not agent/config: with it this test binary links go-nvml, whose
	// symbols kustomize's plugin loader makes the linker bind at start.)
	var cfg struct {
		Coordinator struct {
			Guard struct {
				Name string `json:"name"`
			} `json:"guard"`
		} `json:"coordinator"`
	}
	if err := yaml.Unmarshal([]byte(find[*corev1.ConfigMap](t, ms, configMapName).Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Coordinator.Guard.Name == "" {
		cfg.Coordinator.Guard.Name = fleet.DefaultGuardName
	}
	for k, want := range map[string]string{paramLeaderLease: fleet.DefaultLeaderLease, paramGrantPrefix: fleet.GrantPrefix, paramSlotPrefix: fleet.SlotPrefix, paramGuard: cfg.Coordinator.Guard.Name} {
		if got := vap.Annotations[k]; got != want {
			t.Errorf("%s: annotation %s = %q, want %q", coordinatorPolicy, k, got, want)
		}
	}
	for _, role := range []string{coordinatorSA, "selftaint-fleet"} {
		r := find[*rbacv1.Role](t, ms, role)
		if !slices.ContainsFunc(r.Rules, func(p rbacv1.PolicyRule) bool {
			return slices.Contains(p.Resources, "configmaps") && slices.Equal(p.ResourceNames, []string{cfg.Coordinator.Guard.Name})
		}) {
			t.Errorf("Role %s: no configmaps rule naming the guard %s: %+v", role, cfg.Coordinator.Guard.Name, r.Rules)
		}
	}
}

// coordinatorClient acts as the coordinator's service account in ns.
func coordinatorClient(t *testing.T, cp *testcp.ControlPlane, ns string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(asServiceAccountIn(cp, ns, coordinatorSA, ""))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitCoordinatorPolicy waits until the API server enforces the
// coordinator's policy (it loads policies asynchronously) on c, the
// coordinator's service account in ns: until a dry-run creation of a Lease
// no coordinator writes is refused by it.
func waitCoordinatorPolicy(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	waitCoordinatorPolicyNamed(t, c, ns, coordinatorPolicy)
}

// waitCoordinatorPolicyNamed is waitCoordinatorPolicy for the policy named
// policy (a renamed install's).
func waitCoordinatorPolicyNamed(t *testing.T, c kubernetes.Interface, ns, policy string) {
	t.Helper()
	poll(t, time.Minute, "the coordinator's policy "+policy+" in force in "+ns, func() (bool, error) {
		_, err := c.CoordinationV1().Leases(ns).Create(t.Context(), leaseIn(ns, "policy-canary"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "'"+policy+"'"), err
	})
}

// The control plane's leader Leases in kube-system (kube-scheduler's and
// kube-controller-manager's leader election).
var controlPlaneLeases = []string{"kube-scheduler", "kube-controller-manager"}

// ensureLease creates, as admin, the Lease name in ns held by "real-holder"
// (labelled as labels), unless it is there already (kube-controller-manager
// may hold its own).
func ensureLease(t *testing.T, admin kubernetes.Interface, ns, name string, labels map[string]string) {
	t.Helper()
	l := leaseIn(ns, name)
	l.Spec.HolderIdentity, l.Labels = ptrTo("real-holder"), labels
	if _, err := admin.CoordinationV1().Leases(ns).Create(t.Context(), l, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// checkNotTaken fails t if the Lease ns/name is gone or held by the
// attacker.
func checkNotTaken(t *testing.T, admin kubernetes.Interface, ns, name string) {
	t.Helper()
	l, err := admin.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("Lease %s/%s after the attacks: %v", ns, name, err)
		return
	}
	if h := l.Spec.HolderIdentity; h != nil && *h == attacker {
		t.Errorf("Lease %s/%s taken over by the coordinator's token", ns, name)
	}
}

// attacker is the holder a taken-over Lease would name.
const attacker = "attacker"

// grantLabels are a grant Lease's labels (fleet.NewGrant's).
func grantLabels() map[string]string { return map[string]string{fleet.GrantLabel: "true"} }

// slotLabels are a maintenance slot Lease's labels.
func slotLabels() map[string]string { return map[string]string{fleet.SlotLabel: "true"} }

// createLease creates, with c, the Lease ns/name labelled labels.
func createLease(c kubernetes.Interface, ns, name string, labels map[string]string) func(context.Context) error {
	return func(ctx context.Context) error {
		l := leaseIn(ns, name)
		l.Labels = labels
		_, err := c.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{})
		return err
	}
}

// takeLease reads the Lease ns/name as admin and, with c, writes it back
// held by the attacker, with its labels changed by relabel (if set).
func takeLease(admin, c kubernetes.Interface, ns, name string, relabel func(map[string]string) map[string]string) func(context.Context) error {
	return func(ctx context.Context) error {
		l, err := admin.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading it as admin: %w", err)
		}
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptrTo(attacker), &metav1.MicroTime{Time: time.Now()}
		if relabel != nil {
			l.Labels = relabel(l.Labels)
		}
		_, err = c.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
}

func deleteLease(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.CoordinationV1().Leases(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
}

func createConfigMap(c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"x": "y"}}
		_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
}

// updateConfigMap reads ConfigMap ns/name as admin and writes it back
// changed with c.
func updateConfigMap(admin, c kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading it as admin: %w", err)
		}
		cm.Data = map[string]string{"attacked": "true"}
		_, err = c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}
}

// rbacAttack is one request the coordinator's RBAC must refuse.
type rbacAttack struct {
	name string
	do   func(context.Context) error
}

func (a rbacAttack) check(t *testing.T) {
	t.Helper()
	if err := a.do(t.Context()); !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Errorf("%s: %v, want Forbidden by RBAC", a.name, err)
	}
}

// coordinatorPolicyAttacks are the writes the coordinator's token c, in
// its own namespace ns, must be refused there by its policy although RBAC
// lets it write Leases and ConfigMaps there (another component's Lease, a
// new name, a grant's name without the grant label, the leader Lease's
// deletion, another ConfigMap), then what it does there, allowed. grant is
// a node's grant Lease it creates, renews and deletes. Admin's Leases
// another-component and the squatted grant name are created first.
func coordinatorPolicyAttacks(t *testing.T, admin, c kubernetes.Interface, ns string) []attack {
	t.Helper()
	const other = "another-component"
	squatted, grant := fleet.GrantName("squatted"), fleet.GrantName("attack-node")
	squattedSlot, slot := fleet.SlotName("squatted"), fleet.SlotName("attack-node")
	ensureLease(t, admin, ns, other, nil)
	ensureLease(t, admin, ns, squatted, nil)
	ensureLease(t, admin, ns, squattedSlot, nil)
	refused := func(name string, do func(context.Context) error, deny string) attack {
		return attack{"coordinator in " + ns + ": " + name, do, coordinatorPolicy, deny}
	}
	allowed := func(name string, do func(context.Context) error) attack {
		return attack{"coordinator in " + ns + ": " + name, do, "", ""}
	}
	noGrantLabel := func(l map[string]string) map[string]string {
		l = maps.Clone(l)
		delete(l, fleet.GrantLabel)
		return l
	}
	noSlotLabel := func(l map[string]string) map[string]string {
		l = maps.Clone(l)
		delete(l, fleet.SlotLabel)
		return l
	}
	writeLeader := func(ctx context.Context) error {
		err := createLease(c, ns, leaderLease, nil)(ctx)
		if apierrors.IsAlreadyExists(err) {
			return takeLease(admin, c, ns, leaderLease, nil)(ctx)
		}
		return err
	}
	writeGuard := func(ctx context.Context) error {
		err := createConfigMap(c, ns, guardName)(ctx)
		if apierrors.IsAlreadyExists(err) {
			return updateConfigMap(admin, c, ns, guardName)(ctx)
		}
		return err
	}
	return []attack{
		refused("create a Lease of another name", createLease(c, ns, "kube-scheduler", nil), "not CREATE of Lease kube-scheduler"),
		refused("take over another component's Lease", takeLease(admin, c, ns, other, nil), "not UPDATE of Lease "+other),
		refused("delete another component's Lease", deleteLease(c, ns, other), "not DELETE of Lease "+other),
		refused("create a grant's name without the grant label", createLease(c, ns, fleet.GrantName("unlabelled"), nil), "not CREATE of Lease "+fleet.GrantName("unlabelled")),
		refused("label someone's Lease that has a grant's name", takeLease(admin, c, ns, squatted, func(map[string]string) map[string]string { return grantLabels() }), "not UPDATE of Lease "+squatted),
		refused("create a ConfigMap of another name", createConfigMap(c, ns, "other-config"), "not CREATE of ConfigMap other-config"),
		allowed("create a grant", createLease(c, ns, grant, grantLabels())),
		allowed("renew the grant", takeLease(admin, c, ns, grant, nil)),
		refused("take the grant label off the grant", takeLease(admin, c, ns, grant, noGrantLabel), "not UPDATE of Lease "+grant),
		allowed("delete the grant", deleteLease(c, ns, grant)),
		refused("create a slot's name without the slot label", createLease(c, ns, fleet.SlotName("unlabelled"), nil), "not CREATE of Lease "+fleet.SlotName("unlabelled")),
		refused("create a slot's name with the grant label", createLease(c, ns, fleet.SlotName("grant-labelled"), grantLabels()), "not CREATE of Lease "+fleet.SlotName("grant-labelled")),
		refused("create a grant's name with the slot label", createLease(c, ns, fleet.GrantName("slot-labelled"), slotLabels()), "not CREATE of Lease "+fleet.GrantName("slot-labelled")),
		refused("label someone's Lease that has a slot's name", takeLease(admin, c, ns, squattedSlot, func(map[string]string) map[string]string { return slotLabels() }), "not UPDATE of Lease "+squattedSlot),
		refused("label another component's Lease as a slot", takeLease(admin, c, ns, other, func(map[string]string) map[string]string { return slotLabels() }), "not UPDATE of Lease "+other),
		allowed("take a slot", createLease(c, ns, slot, slotLabels())),
		allowed("update the slot", takeLease(admin, c, ns, slot, nil)),
		refused("take the slot label off the slot", takeLease(admin, c, ns, slot, noSlotLabel), "not UPDATE of Lease "+slot),
		allowed("delete the slot", deleteLease(c, ns, slot)),
		allowed("create or renew the leader Lease", writeLeader),
		refused("delete the leader Lease", deleteLease(c, ns, leaderLease), "not DELETE of Lease "+leaderLease),
		allowed("create or update the guard", writeGuard),
	}
}

// testCoordinatorPolicy attacks, with the coordinator's own token (its
// service account in selftaint's namespace), the control plane's leader
// Leases in kube-system (RBAC refuses: its Role is in its own namespace
// only), Leases and ConfigMaps in its own namespace that are not its own
// (its policy refuses), and its own objects in a namespace where an
// operator's extra Role would let it write (its policy refuses: its own
// namespace only); and checks what it does is allowed.
func testCoordinatorPolicy(t *testing.T, cp *testcp.ControlPlane) {
	const elsewhere = "coordinator-elsewhere"
	admin := cp.Client()
	c := coordinatorClient(t, cp, namespace)
	waitCoordinatorPolicy(t, c, namespace)
	for _, l := range controlPlaneLeases {
		ensureLease(t, admin, metav1.NamespaceSystem, l, nil)
	}
	sys := metav1.NamespaceSystem
	for _, a := range []rbacAttack{
		{"take over kube-scheduler's Lease", takeLease(admin, c, sys, "kube-scheduler", nil)},
		{"take over kube-controller-manager's Lease", takeLease(admin, c, sys, "kube-controller-manager", nil)},
		{"delete kube-scheduler's Lease", deleteLease(c, sys, "kube-scheduler")},
		{"create a Lease in kube-system", createLease(c, sys, "cloud-controller-manager", nil)},
		{"create a grant in kube-system", createLease(c, sys, fleet.GrantName("n1"), grantLabels())},
		{"create a ConfigMap in kube-system", createConfigMap(c, sys, guardName)},
		{"read kube-system's Leases", func(ctx context.Context) error {
			_, err := c.CoordinationV1().Leases(sys).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"update the agents' config", updateConfigMap(admin, c, namespace, configMapName)},
		{"delete the guard", func(ctx context.Context) error {
			return c.CoreV1().ConfigMaps(namespace).Delete(ctx, guardName, metav1.DeleteOptions{})
		}},
		{"patch a grant", func(ctx context.Context) error {
			_, err := c.CoordinationV1().Leases(namespace).Patch(ctx, fleet.GrantName("n1"), types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
			return err
		}},
	} {
		a.check(t)
	}
	for _, a := range coordinatorPolicyAttacks(t, admin, c, namespace) {
		a.check(t)
	}

	// An operator's extra Role lets it write Leases and ConfigMaps in
	// another namespace (as a coordinator.namespace other than its own
	// would need): its policy still refuses all of it there.
	createNamespace(t, admin, elsewhere)
	grantEverything(t, admin, elsewhere, namespace)
	ensureLease(t, admin, elsewhere, "kube-scheduler", nil)
	notOwn := "only in its own namespace " + namespace + ", not "
	for _, a := range []attack{
		{"a grant elsewhere", createLease(c, elsewhere, fleet.GrantName("n1"), grantLabels()), coordinatorPolicy, notOwn + "Lease " + fleet.GrantName("n1") + " in namespace " + elsewhere},
		{"its leader Lease elsewhere", createLease(c, elsewhere, leaderLease, nil), coordinatorPolicy, notOwn + "Lease " + leaderLease + " in namespace " + elsewhere},
		{"its guard elsewhere", createConfigMap(c, elsewhere, guardName), coordinatorPolicy, notOwn + "ConfigMap " + guardName + " in namespace " + elsewhere},
		{"take over a Lease elsewhere", takeLease(admin, c, elsewhere, "kube-scheduler", nil), coordinatorPolicy, notOwn + "Lease kube-scheduler"},
		{"delete a Lease elsewhere", deleteLease(c, elsewhere, "kube-scheduler"), coordinatorPolicy, notOwn + "Lease kube-scheduler"},
	} {
		a.check(t)
	}
	for _, l := range controlPlaneLeases {
		checkNotTaken(t, admin, sys, l)
	}
	checkNotTaken(t, admin, elsewhere, "kube-scheduler")
	checkNotTaken(t, admin, namespace, "another-component")
}

// grantEverything binds, as admin, a Role in ns that lets the coordinator's
// service account (in saNS) write any Lease and ConfigMap there, and waits
// for the RBAC cache to have it.
func grantEverything(t *testing.T, admin kubernetes.Interface, ns, saNS string) {
	t.Helper()
	ctx := t.Context()
	const name = "operator-extra"
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update", "delete"}},
		},
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: coordinatorSA, Namespace: saNS}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + saNS + ":" + coordinatorSA
	poll(t, time.Minute, "the extra Role in the RBAC cache", func() (bool, error) {
		sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: saGroups(user),
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Version: "v1"},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed, err
	})
}

// TestCoordinatorPolicyKubeSystemOverlay installs deploy/ through a
// kustomize overlay that puts it all into kube-system, but for the Events
// Roles that events-in-default keeps in "default" (as selftaint was
// before it had a namespace of its own), on a control plane where deploy/
// is not installed otherwise (shared, see kubeSystemOverlays), and
// attacks the control plane's leader Leases there with the coordinator's
// own token: RBAC now lets it write any Lease in kube-system, and its policy
// must refuse taking over, deleting or creating any but its own; what it
// does is still allowed.
func TestCoordinatorPolicyKubeSystemOverlay(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver")
	t.Parallel()
	sys := metav1.NamespaceSystem
	rendered := namespaceOverlay(t, sys)
	for _, m := range rendered {
		if ns := m.meta().GetNamespace(); ns != "" && ns != sys && ns != metav1.NamespaceDefault {
			t.Errorf("%s: left in %s by the overlay", m, ns)
		}
	}
	cp := kubeSystemOverlays.Get(t)
	installRendered(t, cp, sys, rendered)
	waitNodeEventsAllowed(t, cp, sys)
	admin := cp.Client()
	c := coordinatorClient(t, cp, sys)
	waitCoordinatorPolicy(t, c, sys)
	for _, l := range controlPlaneLeases {
		ensureLease(t, admin, sys, l, nil)
	}
	inSys := func(name string, do func(context.Context) error, deny string) attack {
		return attack{"coordinator in kube-system: " + name, do, coordinatorPolicy, deny}
	}
	attacks := []attack{
		inSys("take over kube-scheduler's Lease", takeLease(admin, c, sys, "kube-scheduler", nil), "not UPDATE of Lease kube-scheduler"),
		inSys("take over kube-controller-manager's Lease", takeLease(admin, c, sys, "kube-controller-manager", nil), "not UPDATE of Lease kube-controller-manager"),
		inSys("delete kube-scheduler's Lease", deleteLease(c, sys, "kube-scheduler"), "not DELETE of Lease kube-scheduler"),
		inSys("delete kube-controller-manager's Lease", deleteLease(c, sys, "kube-controller-manager"), "not DELETE of Lease kube-controller-manager"),
		inSys("create cloud-controller-manager's Lease", createLease(c, sys, "cloud-controller-manager", nil), "not CREATE of Lease cloud-controller-manager"),
		inSys("create cluster-autoscaler's Lease", createLease(c, sys, "cluster-autoscaler", nil), "not CREATE of Lease cluster-autoscaler"),
	}
	for _, a := range append(attacks, coordinatorPolicyAttacks(t, admin, c, sys)...) {
		a.check(t)
	}
	for _, l := range controlPlaneLeases {
		checkNotTaken(t, admin, sys, l)
	}
}
