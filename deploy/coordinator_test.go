package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
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
// included, as its service account, through everything it writes: the
// leader Lease, a grant created, renewed, released and deleted, the guard
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

	client, err := kubernetes.NewForConfig(asServiceAccount(cp, coordinatorSA, ""))
	if err != nil {
		t.Fatal(err)
	}
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
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
// coordinator's service account may do what it needs and nothing else: no
// node writes, no evictions, no secrets, no other ConfigMap.
func testCoordinatorRBACIsTight(t *testing.T, cp *testcp.ControlPlane) {
	const coord = "coordination.k8s.io"
	allowed := []access{
		{verb: "get", resource: "nodes"}, {verb: "list", resource: "nodes"}, {verb: "watch", resource: "nodes"},
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
		{verb: "patch", resource: "nodes"}, {verb: "update", resource: "nodes"}, {verb: "create", resource: "nodes"}, {verb: "delete", resource: "nodes"},
		{verb: "patch", resource: "nodes", subresource: "status"}, {verb: "update", resource: "nodes", subresource: "status"},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: namespace},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: "default"},
		{verb: "delete", resource: "pods", namespace: namespace}, {verb: "list", resource: "pods"},
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
	}
	checkAccess(t, cp, saUser(coordinatorSA), nil, "the coordinator", allowed, denied)
}

// testAgentFleetRBAC checks the agent's read-only view of the coordinator's
// decisions: it may read Leases (its grant, listed and watched by name) and
// get, list and watch the guard ConfigMap by name, by access reviews and
// by trying (a list or watch with a metadata.name field selector is a named
// request); it may not write either, or read any other ConfigMap.
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
		{"watch its grant by name", func() error { return watchOnce(sa.CoordinationV1().Leases(namespace).Watch(ctx, byName(grant))) }, true},
		{"list its grant by name", func() error { _, err := sa.CoordinationV1().Leases(namespace).List(ctx, byName(grant)); return err }, true},
		{"get the guard", func() error {
			_, err := sa.CoreV1().ConfigMaps(namespace).Get(ctx, guardName, metav1.GetOptions{})
			return err
		}, true},
		{"list the guard by name", func() error { _, err := sa.CoreV1().ConfigMaps(namespace).List(ctx, byName(guardName)); return err }, true},
		{"watch the guard by name", func() error { return watchOnce(sa.CoreV1().ConfigMaps(namespace).Watch(ctx, byName(guardName))) }, true},
		{"list configmaps", func() error { _, err := sa.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{}); return err }, false},
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
