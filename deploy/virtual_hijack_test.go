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
	"k8s.io/apimachinery/pkg/watch"
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
//   - a watch of every version of the namespace's pods and EndpointSlices
//     sees no DaemonSet pod on a virtual node Ready or with a pod IP, and
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

	// Every version of the namespace's pods and EndpointSlices, from now.
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
						NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
							Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{attacker, run},
						}}}},
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
	w.waitPod(t, "the opted-in pod Ready", func(p *corev1.Pod) bool { return p.Name == optedIn.Name && podIsReady(p) })
	w.waitSlice(t, "the opted-in pod in its Service's EndpointSlice", func(s *discoveryv1.EndpointSlice) bool {
		return s.Labels[discoveryv1.LabelServiceName] == "opted-in" && len(s.Endpoints) > 0
	})
	rejected := func(p *corev1.Pod) bool {
		return p.Spec.NodeName == run && p.Labels["app"] == ds && p.Status.Phase == corev1.PodFailed && p.Status.Reason == virtual.ReasonNotOptedIn
	}
	w.waitPod(t, "the DaemonSet's pod on "+run+" rejected ("+virtual.ReasonNotOptedIn+")", rejected)
	w.waitPod(t, "a replacement of it rejected too", func(p *corev1.Pod) bool { return rejected(p) && w.rejectedPods(rejected) >= 2 })
	// And some more time, for anything late.
	time.Sleep(10 * time.Second)
	w.stop()

	for _, v := range w.violations(ds, optedIn.Name) {
		t.Error(v)
	}
}

// hijackWatch records every version of a namespace's pods and
// EndpointSlices.
type hijackWatch struct {
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	pods   []*corev1.Pod
	slices []*discoveryv1.EndpointSlice
	errs   []error
	change chan struct{}
}

func watchHijack(t *testing.T, cp *testcp.ControlPlane, ns string) *hijackWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	w := &hijackWatch{cancel: cancel, change: make(chan struct{}, 1)}
	admin := cp.Client()
	pw, err := admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := admin.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, wi := range []watch.Interface{pw, sw} {
		w.done.Go(func() {
			defer wi.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-wi.ResultChan():
					if !ok {
						w.mu.Lock()
						if ctx.Err() == nil {
							w.errs = append(w.errs, fmt.Errorf("a watch ended early: versions may have been missed"))
						}
						w.mu.Unlock()
						return
					}
					w.mu.Lock()
					switch o := ev.Object.(type) {
					case *corev1.Pod:
						w.pods = append(w.pods, o)
					case *discoveryv1.EndpointSlice:
						w.slices = append(w.slices, o)
					}
					w.mu.Unlock()
					select {
					case w.change <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	t.Cleanup(w.stop)
	return w
}

func (w *hijackWatch) stop() {
	w.cancel()
	w.done.Wait()
}

// waitPod waits until a version of a pod seen satisfies ok.
func (w *hijackWatch) waitPod(t *testing.T, what string, ok func(*corev1.Pod) bool) {
	t.Helper()
	w.wait(t, what, func() bool {
		for _, p := range w.pods {
			if ok(p) {
				return true
			}
		}
		return false
	})
}

// waitSlice waits until a version of an EndpointSlice seen satisfies ok.
func (w *hijackWatch) waitSlice(t *testing.T, what string, ok func(*discoveryv1.EndpointSlice) bool) {
	t.Helper()
	w.wait(t, what, func() bool {
		for _, s := range w.slices {
			if ok(s) {
				return true
			}
		}
		return false
	})
}

func (w *hijackWatch) wait(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		w.mu.Lock()
		done := ok()
		w.mu.Unlock()
		if done {
			return
		}
		select {
		case <-w.change:
		case <-deadline:
			t.Fatalf("waiting for %s: not seen in 3m", what)
		}
	}
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
