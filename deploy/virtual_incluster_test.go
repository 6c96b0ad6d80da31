package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/faults"
	"github.com/selftaint/selftaint/taints/fleet"
)

// TestVirtualInCluster installs deploy/virtual as its files are (but the
// Deployment, whose pod's command the test runs itself) on a control plane
// with every controller of kube-controller-manager (node lifecycle, taint
// eviction) and kube-scheduler, and acts with the virtual service
// account's own token (a TokenRequest, as the pod's mounted token; not
// impersonation):
//   - it cannot capture workloads: a Node without the registration taint
//     is refused, so ordinary pods go to a real node even beside a virtual
//     node of 1000 CPUs, and a pod that fits only there stays Pending; it
//     cannot mark a pod Running that is not bound to one of its nodes;
//   - it cannot put an address behind a Service (testVirtualCannotHijack):
//     a DaemonSet pod that tolerates every taint is never Ready on a
//     virtual node, nor in an EndpointSlice, and the token can neither
//     report it Running nor relabel a pod through pods/status;
//   - `selftaint virtual` (the built binary) with the Deployment's own
//     arguments (the virtual fleet's coordinator in the process) and a
//     NoExecute rule: a fault on a virtual node gets a grant in its
//     namespace, the NoExecute taint and the eviction of a pod that does
//     not tolerate it, and its log shows no refusal.
func TestVirtualInCluster(t *testing.T) {
	testcp.SkipIfShort(t, "runs a full control plane, builds selftaint and waits for an eviction")
	t.Parallel()
	build := buildSelftaint(t) // while the control plane starts
	cp := testcp.Start(t, testcp.Options{ControllerManager: true, Scheduler: true})
	ms := readManifests(t, "virtual")
	createManifests(t, cp.Client(), slices.DeleteFunc(slices.Clone(ms), func(m manifest) bool { return m.kind() == "Deployment" }))
	ns := virtualSANamespace(t, ms)
	sa := tokenConfig(t, cp, ns, virtualSA)
	waitVirtualPolicies(t, cp, sa, ns)
	bin := build(t)

	// In parallel, each on Nodes and pods of its own. Each sees the
	// other's virtual Nodes, all with the registration taint (the
	// scheduler places nothing there but CannotHijackServices' DaemonSet,
	// which only its own two nodes match), and the virtual fleet's
	// coordinator may count CannotCaptureWorkloads' big virtual node and
	// CannotHijackServices' two or not yet: with 1 faulted node of 3 to 6
	// the guard (55%) stays untripped and the budget (10%, rounded up) is
	// 1 either way; Drain's pool (maxParallel 10) has room for the ones
	// that go NotReady.
	t.Run("CannotCaptureWorkloads", func(t *testing.T) {
		t.Parallel()
		testVirtualCannotCapture(t, cp, sa)
	})
	// In kube-system, on Nodes of its own.
	t.Run("CannotHijackServices", func(t *testing.T) {
		t.Parallel()
		testVirtualCannotHijack(t, cp, sa)
	})
	// The virtual fleet's coordinator of one run at a time: two would
	// contend for its leader Lease.
	t.Run("Fleet", func(t *testing.T) {
		t.Parallel()
		dep := find[*appsv1.Deployment](t, ms, "selftaint-virtual")
		t.Run("Drain", func(t *testing.T) { testVirtualDrain(t, cp, bin, dep, ns) })
		t.Run("NoExecuteEviction", func(t *testing.T) { testVirtualNoExecuteEviction(t, cp, bin, dep, ns) })
	})
}

// virtualSANamespace is the namespace of the virtual service account in
// ms.
func virtualSANamespace(t *testing.T, ms []manifest) string {
	t.Helper()
	return find[*corev1.ServiceAccount](t, ms, virtualSA).Namespace
}

// tokenConfig is a client config that authenticates with a token the API
// server issued for service account sa in namespace ns (a TokenRequest),
// as a pod's mounted token does.
func tokenConfig(t *testing.T, cp *testcp.ControlPlane, ns, sa string) *rest.Config {
	t.Helper()
	tr, err := cp.Client().CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for service account %s/%s: %v", ns, sa, err)
	}
	rc := cp.RESTConfig()
	rc.BearerToken, rc.BearerTokenFile = tr.Status.Token, ""
	rc.Impersonate = rest.ImpersonationConfig{}
	return rc
}

// writeKubeconfig writes a kubeconfig file for rc's server, CA and bearer
// token.
func writeKubeconfig(t *testing.T, rc *rest.Config) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cp"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "cp", AuthInfo: "sa"}
	cfg.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// buildSelftaint starts building the selftaint command, and returns a
// function that waits for the build and returns the binary's path, failing
// t if it failed.
func buildSelftaint(t *testing.T) func(*testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "selftaint")
	type result struct {
		out  []byte
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		began := time.Now()
		out, err := exec.Command("go", "build", "-o", bin, "github.com/selftaint/selftaint/cmd/selftaint").CombinedOutput()
		done <- result{out, err, time.Since(began)}
	}()
	// A test that fails before it waits still waits for the build, which
	// writes into its temporary directory.
	var r *result
	wait := func() result {
		if r == nil {
			got := <-done
			r = &got
		}
		return *r
	}
	t.Cleanup(func() { wait() })
	return func(t *testing.T) string {
		t.Helper()
		began := time.Now()
		res := wait()
		if res.err != nil {
			t.Fatalf("building selftaint: %v\n%s", res.err, res.out)
		}
		t.Logf("built selftaint in %v (waited %v for it)", res.took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		return bin
	}
}

// testVirtualCannotCapture: the virtual service account registers a
// "vnode" of 1000 CPUs, Ready, without the registration taint (refused)
// and with it (allowed); an ordinary pod is then scheduled onto the real
// node, and a pod that fits only on the virtual node stays Pending for its
// taint. Neither can the service account mark either pod Running.
func testVirtualCannotCapture(t *testing.T, cp *testcp.ControlPlane, rc *rest.Config) {
	const (
		worker = "worker-1"
		podNS  = "capture"
	)
	admin := cp.Client()
	ctx := t.Context()
	sized := func(cpu string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}
	}
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}}
	cp.CreateNode(t, worker, func(n *corev1.Node) {
		n.Labels = map[string]string{corev1.LabelHostname: worker}
		n.Status = corev1.NodeStatus{Capacity: sized("4"), Allocatable: sized("4"), Conditions: ready}
	})
	vnode := func(name string, tainted bool) *corev1.Node {
		n := virtualNode(name)
		n.Labels[corev1.LabelHostname] = name
		if !tainted {
			n.Spec.Taints = nil
		}
		n.Status = corev1.NodeStatus{Capacity: sized("1000"), Allocatable: sized("1000"), Conditions: ready}
		return n
	}
	core := coreClient(t, rc)
	createNode := func(n *corev1.Node) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := core.Nodes().Create(ctx, n, metav1.CreateOptions{})
			return err
		}
	}
	untainted, tainted := virtualPrefix+"capture", virtualPrefix+"big"
	for _, a := range []attack{
		{"register a 1000-CPU virtual Node without the registration taint", createNode(vnode(untainted, false)), virtualNodesPolicy,
			"may create or modify only Nodes that carry the taint " + virtualTaint + " (registration-taint), and Node " + untainted + " does not"},
		{"register a 1000-CPU virtual Node with it", createNode(vnode(tainted, true)), "", ""},
	} {
		a.check(t)
	}

	createNamespace(t, admin, podNS)
	pod := func(name, cpu string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
		}
		if _, err := admin.CoreV1().Pods(podNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("ordinary", "1")
	pod("big", "8")
	var ordinary *corev1.Pod
	poll(t, time.Minute, "the ordinary pod scheduled", func() (bool, error) {
		var err error
		ordinary, err = admin.CoreV1().Pods(podNS).Get(ctx, "ordinary", metav1.GetOptions{})
		return err == nil && ordinary.Spec.NodeName != "", err
	})
	if ordinary.Spec.NodeName != worker {
		t.Errorf("the ordinary pod was scheduled onto %s, want %s (the real node)", ordinary.Spec.NodeName, worker)
	}
	var big *corev1.Pod
	poll(t, time.Minute, "the scheduler's verdict on the big pod", func() (bool, error) {
		var err error
		big, err = admin.CoreV1().Pods(podNS).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return big.Spec.NodeName != "" || slices.ContainsFunc(big.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "untolerated taint")
		}), nil
	})
	if big.Spec.NodeName != "" {
		t.Errorf("the pod that fits only on the virtual node was scheduled onto %s, want it Pending (untolerated taint)", big.Spec.NodeName)
	}

	// Its pods policy: only pods bound to its nodes.
	// The scheduler still writes the pending pod's status (its
	// PodScheduled condition, at each retry): a write that lost that race
	// (409) is tried again on the new version, so what the attack meets is
	// the policy.
	running := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				p, err := admin.CoreV1().Pods(podNS).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Status.Phase = corev1.PodRunning
				_, err = core.Pods(podNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return err
			})
		}
	}
	for _, a := range []attack{
		{"mark a pod on the real node Running", running("ordinary"), virtualPodsPolicy, "pod ordinary is bound to node " + worker},
		{"mark a pending pod Running", running("big"), virtualPodsPolicy, "pod big is bound to no node"},
	} {
		a.check(t)
	}
}

// testVirtualNoExecuteEviction runs the selftaint binary as the
// Deployment's pod would (its arguments, $POD_NAMESPACE, the service
// account's token) with a config whose memory rule is NoExecute, injects a
// fault on vnode-1 and waits for the grant, the NoExecute taint and the
// taint-eviction controller deleting the pod that does not tolerate it
// (and the virtual kubelet completing the deletion), while the one that
// tolerates it stays. Nothing is refused on the way, and on SIGTERM it
// exits 0 having deleted its Nodes.
func testVirtualNoExecuteEviction(t *testing.T, cp *testcp.ControlPlane, bin string, dep *appsv1.Deployment, ns string) {
	const (
		node     = virtualPrefix + "1"
		podNS    = "drill"
		memCond  = "SelftaintMemoryPressure"
		memTaint = "selftaint.io/memory-pressure"
	)
	admin := cp.Client()
	ctx := t.Context()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`rules:
- condition: `+memCond+`
  taint: {key: `+memTaint+`, effect: NoExecute}
  fallback: NoSchedule
`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(dep.Spec.Template.Spec.Containers[0].Args),
		"--kubeconfig="+writeKubeconfig(t, tokenConfig(t, cp, ns, virtualSA)), "--config="+cfg, "--stats-interval=0")
	proc, logs := runProcess(t, bin, args, "POD_NAMESPACE="+ns)

	waitNode(t, admin, node, time.Minute, "registered, Ready and schedulable", func(n *corev1.Node) bool {
		r := taints.FindCondition(n, corev1.NodeReady)
		return r != nil && r.Status == corev1.ConditionTrue && !hasTaint(n, corev1.TaintNodeNotReady) && taints.FindCondition(n, memCond) != nil
	})
	poll(t, time.Minute, "the virtual fleet's coordinator writing its guard in "+ns, func() (bool, error) {
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, fleet.DefaultGuardName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && cm.Annotations[fleet.FleetAnnotation] == string(fleet.MembersVirtual), err
	})

	runPods(t, admin, podNS, node, map[string][]corev1.Toleration{
		"victim":   nil,
		"tolerant": {{Key: memTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
	})

	value, err := faults.Spec{Status: corev1.ConditionTrue, InjectedBy: "deploy test"}.Lasting(time.Now(), 3*time.Minute).Encode()
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, faults.AnnotationKey(memCond), value)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("injecting a fault: %v", err)
	}
	poll(t, time.Minute, "a NoExecute grant for "+node+" in "+ns, func() (bool, error) {
		l, err := admin.CoordinationV1().Leases(ns).Get(ctx, fleet.GrantName(node), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == node, err
	})
	waitNode(t, admin, node, time.Minute, "the NoExecute taint", func(n *corev1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == memTaint && t.Effect == corev1.TaintEffectNoExecute })
	})
	poll(t, time.Minute, "the pod without a toleration evicted and gone", func() (bool, error) {
		_, err := admin.CoreV1().Pods(podNS).Get(ctx, "victim", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if p, err := admin.CoreV1().Pods(podNS).Get(ctx, "tolerant", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the pod tolerating the taint: %v (deleting: %v), want it kept", err, p != nil && p.DeletionTimestamp != nil)
	}

	proc.check(t) // SIGTERM: it exits 0
	if _, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node %s after exit: %v, want it deleted (--delete-on-exit)", node, err)
	}
	checkNotRefused(t, logs)
}

// runPods creates, in a new namespace ns, a pod bound to node per entry of
// pods (with those tolerations and the opt-in into virtual nodes, a
// toleration of the registration taint by its key), and waits until each
// is Running.
func runPods(t *testing.T, admin kubernetes.Interface, ns, node string, pods map[string][]corev1.Toleration) {
	t.Helper()
	ctx := t.Context()
	createNamespace(t, admin, ns)
	for name, tols := range pods {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.PodSpec{NodeName: node, Tolerations: append([]corev1.Toleration{optIn()}, tols...), Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}}},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name := range pods {
		poll(t, time.Minute, "pod "+name+" Running", func() (bool, error) {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
	}
}
