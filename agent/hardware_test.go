package agent_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
)

const fpga corev1.ResourceName = "example.com/fpga"

// writePCIDevice puts one PCI device into a fixture sysfs under root.
func writePCIDevice(t *testing.T, root, addr, vendor, device, class string) string {
	t.Helper()
	dir := filepath.Join(root, "sys", "bus", "pci", "devices", addr)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"vendor": vendor, "device": device, "class": class} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// schedulable gives a Node what the scheduler needs to place pods, and a
// resource another writer advertises.
func schedulable(n *corev1.Node) {
	n.Labels = map[string]string{corev1.LabelHostname: n.Name}
	n.Status.Capacity = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("10"),
		"example.com/other":   resource.MustParse("3"),
	}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
}

// markReady does what the node lifecycle controller (not running here) does
// for a ready node: it lifts the not-ready taint the TaintNodesByCondition
// admission plugin puts on every new Node.
func markReady(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, c, name)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		_, err := c.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("lifting not-ready from %s: %v", name, err)
	}
}

func capacityOf(n *corev1.Node, r corev1.ResourceName) (capacity, allocatable string) {
	c, okc := n.Status.Capacity[r]
	a, oka := n.Status.Allocatable[r]
	if okc {
		capacity = c.String()
	}
	if oka {
		allocatable = a.String()
	}
	return capacity, allocatable
}

// TestHardwareResourcesTaintAndScheduling runs the agent on a node whose
// sysfs fixture holds an FPGA, against a real kube-apiserver with the
// ExtendedResourceToleration admission plugin and a real kube-scheduler:
// the node advertises the resource and carries its taint and label; a pod
// requesting the resource is given the toleration by admission and lands
// there, one that does not lands elsewhere; the resource zeroed by another
// writer is asserted again; when the FPGA disappears, the resource, taint
// and label go; the other writer's resource is never touched.
func TestHardwareResourcesTaintAndScheduling(t *testing.T) {
	cp := testcp.Start(t, testcp.Options{Scheduler: true, APIServerArgs: []string{"--enable-admission-plugins=ExtendedResourceToleration"}})
	c := cp.Client()
	ctx := t.Context()
	for _, name := range []string{"fpga-node", "plain-node"} {
		cp.CreateNode(t, name, schedulable)
		markReady(t, c, name)
	}

	root := t.TempDir()
	dev := writePCIDevice(t, root, "0000:3b:00.0", "0x10ee", "0x5000", "0x120000")
	writePCIDevice(t, root, "0000:01:00.0", "0x8086", "0x1572", "0x020000") // a NIC: no rule matches
	cfg, err := config.Parse([]byte(`
hardware:
  pci:
  - {resource: example.com/fpga, vendor: "0x10ee", class: "0x1200"}
`))
	if err != nil {
		t.Fatal(err)
	}
	host := probes.Host{Root: root}
	a, _ := startAgent(t, agent.Options{
		NodeName: "fpga-node", Client: c.CoreV1(),
		Hardware:       cfg.Inventory(host, nil, slog.Default()),
		HardwarePeriod: 300 * time.Millisecond,
	})

	taint := corev1.Taint{Key: string(fpga), Value: agent.HardwareTaintValue, Effect: corev1.TaintEffectNoSchedule}
	label := agent.HardwareLabel(fpga)
	n := waitNode(t, c, "fpga-node", 10*time.Second, "the FPGA advertised, tainted and labelled", func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, fpga)
		return capa == "1" && alloc == "1" && hasTaint(n, taint) && n.Labels[label] == "true"
	})
	if capa, alloc := capacityOf(n, "example.com/other"); capa != "3" || alloc != "3" {
		t.Errorf("the other writer's resource is %s/%s, want 3/3", capa, alloc)
	}
	if capa, _ := capacityOf(getNode(t, c, "plain-node"), fpga); capa != "" {
		t.Errorf("plain-node has %s %s; its agent never ran", capa, fpga)
	}

	// Scheduling: the ExtendedResourceToleration admission plugin gives the
	// toleration to the pod that requests the FPGA, and only to it.
	createPod := func(name string, requests corev1.ResourceList) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "c", Image: "example.invalid/app",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests},
			}}},
		}
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
	}
	createPod("wants-fpga", corev1.ResourceList{fpga: resource.MustParse("1")})
	createPod("plain", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")})
	if got := waitScheduled(t, c, "wants-fpga"); got.Spec.NodeName != "fpga-node" {
		t.Errorf("wants-fpga scheduled to %q, want fpga-node", got.Spec.NodeName)
	} else if !slices.ContainsFunc(got.Spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == string(fpga) && tol.Operator == corev1.TolerationOpExists && tol.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("wants-fpga tolerations %+v lack the one ExtendedResourceToleration adds", got.Spec.Tolerations)
	}
	if got := waitScheduled(t, c, "plain"); got.Spec.NodeName != "plain-node" {
		t.Errorf("plain scheduled to %q, want plain-node (fpga-node's taint repels it)", got.Spec.NodeName)
	} else if slices.ContainsFunc(got.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == string(fpga) }) {
		t.Errorf("plain got a toleration for %s without requesting it: %+v", fpga, got.Spec.Tolerations)
	}

	// Another writer (the kubelet does this on restart) zeroes the
	// resource with a full status update: it is asserted again.
	writesBefore := a.Stats().ConditionWrites
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, c, "fpga-node")
		n.Status.Capacity[fpga] = resource.MustParse("0")
		n.Status.Allocatable[fpga] = resource.MustParse("0")
		_, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{FieldManager: "kubelet"})
		return err
	}); err != nil {
		t.Fatalf("zeroing the FPGA: %v", err)
	}
	zeroed := time.Now()
	waitNode(t, c, "fpga-node", 5*time.Second, "the FPGA re-asserted", func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, fpga)
		return capa == "1" && alloc == "1"
	})
	t.Logf("zeroed resource re-asserted after %s", time.Since(zeroed).Round(time.Millisecond))
	// The agent counts its write once the API server has answered, which
	// can be a moment after a reader sees the result.
	for deadline := time.Now().Add(5 * time.Second); a.Stats().ConditionWrites == writesBefore; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("no status write re-asserted the resource")
			break
		}
	}
	if !hasEvent(t, c, "fpga-node", "ResourceRestored") {
		t.Errorf("no ResourceRestored event")
	}

	// The FPGA goes away: resource, taint and label go with it.
	if err := os.RemoveAll(dev); err != nil {
		t.Fatal(err)
	}
	n = waitNode(t, c, "fpga-node", 10*time.Second, "the FPGA's resource, taint and label removed", func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, fpga)
		_, labelled := n.Labels[label]
		return capa == "" && alloc == "" && !hasTaint(n, taint) && !labelled
	})
	if capa, alloc := capacityOf(n, "example.com/other"); capa != "3" || alloc != "3" {
		t.Errorf("the other writer's resource is %s/%s after ours went, want 3/3", capa, alloc)
	}
	if capa, alloc := capacityOf(n, corev1.ResourceCPU); capa != "4" || alloc != "4" {
		t.Errorf("cpu is %s/%s after ours went, want 4/4: the registration capacity must survive", capa, alloc)
	}
	if _, ok := n.Annotations["selftaint.io/owned-labels"]; ok {
		t.Errorf("label ownership record left behind: %v", n.Annotations)
	}
}

func waitScheduled(t *testing.T, c kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	err := testcp.Poll(t.Context(), 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		var err error
		p, err = c.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", err
	})
	if err != nil {
		if p != nil {
			t.Fatalf("pod %s not scheduled: %v; conditions %+v", name, err, p.Status.Conditions)
		}
		t.Fatalf("pod %s not scheduled: %v", name, err)
	}
	return p
}

func hasEvent(t *testing.T, c kubernetes.Interface, node, reason string) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		evs, err := c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=" + reason})
		if err != nil {
			t.Fatalf("listing events: %v", err)
		}
		if len(evs.Items) > 0 {
			return true
		}
	}
	return false
}

// TestHardwareHeldByOther checks the agent never takes over a resource
// another writer advertises (nvidia.com/gpu is the NVIDIA device plugin's):
// no write to it, a ResourceHeldByOther event; its taint and label still
// follow the hardware.
func TestHardwareHeldByOther(t *testing.T) {
	cp := testcp.Start(t, testcp.Options{})
	c := cp.Client()
	cp.CreateNode(t, "gpu-node", func(n *corev1.Node) {
		n.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
		n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	})
	inv := agent.InventoryFunc(func(context.Context) ([]agent.Resource, error) {
		return []agent.Resource{{Name: "nvidia.com/gpu", Count: 4, Advertise: true, Taint: true, Label: true}}, nil
	})
	startAgent(t, agent.Options{NodeName: "gpu-node", Client: c.CoreV1(), Hardware: inv})
	gpuTaint := corev1.Taint{Key: "nvidia.com/gpu", Value: agent.HardwareTaintValue, Effect: corev1.TaintEffectNoSchedule}
	n := waitNode(t, c, "gpu-node", 10*time.Second, "the GPU taint and label", func(n *corev1.Node) bool {
		return hasTaint(n, gpuTaint) && n.Labels["nvidia.com/gpu.present"] == "true"
	})
	if !hasEvent(t, c, "gpu-node", "ResourceHeldByOther") {
		t.Errorf("no ResourceHeldByOther event")
	}
	if capa, alloc := capacityOf(n, "nvidia.com/gpu"); capa != "8" || alloc != "8" {
		t.Errorf("nvidia.com/gpu is %s/%s, want the device plugin's 8/8 untouched", capa, alloc)
	}
	for _, mf := range n.ManagedFields {
		if mf.Manager == agent.DefaultFieldManager && mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), "f:nvidia.com/gpu") {
			t.Errorf("selftaint owns a field of nvidia.com/gpu: %s", mf.FieldsV1.Raw)
		}
	}
}
