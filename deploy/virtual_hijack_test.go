package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/virtual"
)

// hijackIP is the address an attacker would put behind a Service.
const hijackIP = "10.66.66.66"

// testVirtualCannotHijack plays the Service hijack through virtual nodes
// with the virtual service account's own token, with the DaemonSet,
// scheduler and EndpointSlice controllers running:
//   - a DaemonSet in kube-system that tolerates every taint (as CNI
//     agents, log shippers and node agents do), behind a Service, gets a
//     pod on a virtual node the token registered as the policy allows, and
//     one on a virtual node selftaint's virtual kubelet runs (with the
//     token);
//   - the token cannot report the first Running and Ready with an address
//     of its choosing, nor put the label of a kube-dns-like Service on it
//     through pods/status, nor both at once;
//   - the virtual kubelet rejects the second (Failed, NotOptedIn), as a
//     kubelet rejects a pod at admission, and every replacement the
//     DaemonSet controller makes;
//   - the namespace's pods and EndpointSlices, read every 100ms, show no
//     DaemonSet pod on a virtual node Ready or with a pod IP, and
//     no endpoint on a virtual node or at the attacker's address, while a
//     pod that opted in (a toleration of the registration taint by key)
//     does run Ready and is published for its own Service (the
//     EndpointSlice controller is at work).
func testVirtualCannotHijack(t *testing.T, cp *testcp.ControlPlane, rc *rest.Config) {
	const (
		ns       = metav1.NamespaceSystem
		attacker = virtualPrefix + "hijack" // the token's own "kubelet"
		run      = virtualPrefix + "hj-1"   // selftaint's virtual kubelet
		ds       = "node-agent"
	)
	admin := cp.Client()
	ctx := t.Context()
	core := coreClient(t, rc)

	// The namespace's pods and EndpointSlices, from now.
	w := watchHijack(t, cp, ns)

	service := func(name string, selector map[string]string) {
		t.Helper()
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP}}},
		}
		if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	service("kube-dns", map[string]string{"k8s-app": "kube-dns"})
	service(ds, map[string]string{"app": ds})
	service("opted-in", map[string]string{"app": "opted-in"})

	// The attacker's node, as the nodes policy allows it.
	n := virtualNode(attacker)
	n.Status = corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
		Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}},
	}
	if _, err := core.Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering a virtual node as the policy allows: %v", err)
	}
	t.Cleanup(func() {
		if err := admin.CoreV1().Nodes().Delete(context.Background(), attacker, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting node %s: %v", attacker, err)
		}
	})
	runVirtual(t, rc, []string{run}, true)

	// On these two nodes only: the other subtests' nodes are theirs.
	daemonSet := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ds},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": ds}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": ds}},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
						// A field selector takes one value: a term each.
						NodeSelectorTerms: []corev1.NodeSelectorTerm{
							{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{attacker}}}},
							{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{run}}}},
						},
					}}},
					Containers: []corev1.Container{{Name: "agent", Image: "example.invalid/agent"}},
				},
			},
		},
	}
	if _, err := admin.AppsV1().DaemonSets(ns).Create(ctx, daemonSet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := admin.AppsV1().DaemonSets(ns).Delete(context.Background(), ds, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting DaemonSet %s: %v", ds, err)
		}
	})
	optedIn := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opted-in", Labels: map[string]string{"app": "opted-in"}},
		Spec: corev1.PodSpec{
			NodeName:    run,
			Tolerations: []corev1.Toleration{optIn()},
			Containers:  []corev1.Container{{Name: "c", Image: "example.invalid/app"}},
		},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, optedIn, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The attacker's steps, on the DaemonSet's pod on its node.
	var victim *corev1.Pod
	poll(t, 2*time.Minute, "the DaemonSet's pod on "+attacker, func() (bool, error) {
		l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + ds, FieldSelector: "spec.nodeName=" + attacker})
		if err != nil || len(l.Items) == 0 {
			return false, err
		}
		victim = &l.Items[0]
		return true, nil
	})
	// The token may not read pods: it writes the admin's copy, again on a
	// conflict (the scheduler and the DaemonSet controller write too).
	status := func(change func(*corev1.Pod)) func(context.Context) error {
		return func(ctx context.Context) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				p, err := admin.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				change(p)
				_, err = core.Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return err
			})
		}
	}
	ready := func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.PodIPs = hijackIP, []corev1.PodIP{{IP: hijackIP}}
		p.Status.HostIP = "127.0.0.1"
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	}
	dnsLabel := func(p *corev1.Pod) { p.Labels["k8s-app"] = "kube-dns" }
	notOptedIn := "does not: it may only reject it"
	for _, a := range []attack{
		{"report the DaemonSet's pod Running and Ready at " + hijackIP, status(ready), virtualPodsPolicy, "pod " + victim.Name + " " + notOptedIn},
		{"label it k8s-app=kube-dns through pods/status", status(dnsLabel), virtualPodsPolicy, "may change the status of pod " + victim.Name + " only"},
		{"both", status(func(p *corev1.Pod) { ready(p); dnsLabel(p) }), virtualPodsPolicy, "may change the status of pod " + victim.Name + " only"},
	} {
		a.check(t)
	}

	// The virtual kubelet's side: the opted-in pod runs and is published,
	// the DaemonSet's pods are rejected, again and again.
	if !w.waitPod(t, "the opted-in pod Ready", func(p *corev1.Pod) bool { return p.Name == optedIn.Name && podIsReady(p) }) ||
		!w.waitSlice(t, "the opted-in pod in its Service's EndpointSlice", func(s *discoveryv1.EndpointSlice) bool {
			return s.Labels[discoveryv1.LabelServiceName] == "opted-in" && len(s.Endpoints) > 0
		}) {
		t.FailNow() // the controllers at work are the premise of the rest
	}
	rejected := func(p *corev1.Pod) bool {
		return p.Spec.NodeName == run && p.Labels["app"] == ds && p.Status.Phase == corev1.PodFailed && p.Status.Reason == virtual.ReasonNotOptedIn
	}
	// Not fatal: what was seen meanwhile is reported below either way.
	if w.waitPod(t, "the DaemonSet's pod on "+run+" rejected ("+virtual.ReasonNotOptedIn+")", rejected) {
		w.waitPod(t, "a replacement of it rejected too", func(p *corev1.Pod) bool { return rejected(p) && w.rejectedPods(rejected) >= 2 })
	}
	// And some more time, for anything late.
	time.Sleep(10 * time.Second)
	w.stop()

	for _, v := range w.violations(ds, optedIn.Name) {
		t.Error(v)
	}
}

// hijackWatch records the versions of a namespace's pods and
// EndpointSlices, read by a list every 100ms (the test control plane's
// watch cache may not serve a watch of them: "Too large resource
// version"). A version that lasts less than that may be missed; a pod
// reported Ready, or an endpoint published, stays so far longer.
type hijackWatch struct {
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	pods   []*corev1.Pod
	slices []*discoveryv1.EndpointSlice
	seenRV map[string]bool // kind/namespace/name/resourceVersion recorded
	errs   []error
	change chan struct{}
}

func watchHijack(t *testing.T, cp *testcp.ControlPlane, ns string) *hijackWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	w := &hijackWatch{cancel: cancel, change: make(chan struct{}, 1), seenRV: map[string]bool{}}
	admin := cp.Client()
	w.done.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			pods, perr := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			slices, serr := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
			w.mu.Lock()
			if ctx.Err() == nil {
				for _, err := range []error{perr, serr} {
					if err != nil {
						w.errs = append(w.errs, err)
					}
				}
			}
			if perr == nil {
				for i := range pods.Items {
					p := &pods.Items[i]
					if k := "pod/" + p.Name + "/" + p.ResourceVersion; !w.seenRV[k] {
						w.seenRV[k] = true
						w.pods = append(w.pods, p)
					}
				}
			}
			if serr == nil {
				for i := range slices.Items {
					s := &slices.Items[i]
					if k := "slice/" + s.Name + "/" + s.ResourceVersion; !w.seenRV[k] {
						w.seenRV[k] = true
						w.slices = append(w.slices, s)
					}
				}
			}
			w.mu.Unlock()
			select {
			case w.change <- struct{}{}:
			default:
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	t.Cleanup(w.stop)
	return w
}

func (w *hijackWatch) stop() {
	w.cancel()
	w.done.Wait()
}

// waitPod waits until a version of a pod seen satisfies ok, and reports
// whether one did (failing t if not).
func (w *hijackWatch) waitPod(t *testing.T, what string, ok func(*corev1.Pod) bool) bool {
	t.Helper()
	return w.wait(t, what, func() bool {
		for _, p := range w.pods {
			if ok(p) {
				return true
			}
		}
		return false
	})
}

// waitSlice waits until a version of an EndpointSlice seen satisfies ok,
// and reports whether one did (failing t if not).
func (w *hijackWatch) waitSlice(t *testing.T, what string, ok func(*discoveryv1.EndpointSlice) bool) bool {
	t.Helper()
	return w.wait(t, what, func() bool {
		for _, s := range w.slices {
			if ok(s) {
				return true
			}
		}
		return false
	})
}

func (w *hijackWatch) wait(t *testing.T, what string, ok func() bool) bool {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		w.mu.Lock()
		done := ok()
		w.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-w.change:
		case <-deadline:
			t.Errorf("waiting for %s: not seen in 3m; seen:\n%s", what, w.seen())
			return false
		}
	}
}

// seen is the last version of each pod and EndpointSlice seen, one line
// each.
func (w *hijackWatch) seen() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	last := map[string]string{}
	for _, p := range w.pods {
		last["pod "+p.Name] = fmt.Sprintf("node %q phase %s reason %s Ready %v pod IP %q (%d errors)", p.Spec.NodeName, p.Status.Phase, p.Status.Reason, podIsReady(p), p.Status.PodIP, len(w.errs))
	}
	for _, s := range w.slices {
		last["EndpointSlice "+s.Name] = fmt.Sprintf("%d endpoints", len(s.Endpoints))
	}
	var out []string
	for k, v := range last {
		out = append(out, k+": "+v)
	}
	return strings.Join(out, "\n")
}

// rejectedPods counts the pods (by UID) seen as rejected says. Called
// with w.mu held (from a wait condition).
func (w *hijackWatch) rejectedPods(rejected func(*corev1.Pod) bool) int {
	uids := map[string]bool{}
	for _, p := range w.pods {
		if rejected(p) {
			uids[string(p.UID)] = true
		}
	}
	return len(uids)
}

// violations is every version seen that breaks the rule: a pod of the
// DaemonSet ds on a virtual node Ready or with a pod IP, a pod with the
// attacker's address, an endpoint on a virtual node but optedIn's, or at
// the attacker's address.
func (w *hijackWatch) violations(ds, optedIn string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]string(nil), errStrings(w.errs)...)
	for _, p := range w.pods {
		onVirtual := strings.HasPrefix(p.Spec.NodeName, virtualPrefix)
		if onVirtual && p.Labels["app"] == ds && (podIsReady(p) || p.Status.PodIP != "") {
			out = append(out, fmt.Sprintf("DaemonSet pod %s on virtual node %s: phase %s, Ready %v, pod IP %q (resourceVersion %s), want never Ready and no pod IP",
				p.Name, p.Spec.NodeName, p.Status.Phase, podIsReady(p), p.Status.PodIP, p.ResourceVersion))
		}
		if p.Status.PodIP == hijackIP || p.Labels["k8s-app"] == "kube-dns" {
			out = append(out, fmt.Sprintf("pod %s got the attacker's address or label: pod IP %q labels %v (resourceVersion %s)", p.Name, p.Status.PodIP, p.Labels, p.ResourceVersion))
		}
	}
	for _, s := range w.slices {
		for _, e := range s.Endpoints {
			node := ""
			if e.NodeName != nil {
				node = *e.NodeName
			}
			target := ""
			if e.TargetRef != nil {
				target = e.TargetRef.Name
			}
			if (strings.HasPrefix(node, virtualPrefix) && target != optedIn) || strings.Contains(strings.Join(e.Addresses, ","), hijackIP) {
				out = append(out, fmt.Sprintf("EndpointSlice %s (Service %s) published %v of pod %s on node %s (resourceVersion %s)",
					s.Name, s.Labels[discoveryv1.LabelServiceName], e.Addresses, target, node, s.ResourceVersion))
			}
		}
	}
	return out
}

func errStrings(errs []error) []string {
	out := make([]string, len(errs))
	for i, err := range errs {
		out[i] = err.Error()
	}
	return out
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
