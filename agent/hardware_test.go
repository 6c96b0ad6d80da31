package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
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
	t.Parallel() // on a control plane of its own, with the scheduler and the admission plugin
	cp := testcp.Start(t, testcp.Options{Scheduler: true, APIServerArgs: []string{"--enable-admission-plugins=ExtendedResourceToleration"}})
	c := cp.Client()
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

	checkFPGAScheduling(t, c)
	zeroAndWaitRestored(t, c, a, "fpga-node")

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

// checkFPGAScheduling: the ExtendedResourceToleration admission plugin
// gives the toleration to the pod that requests the FPGA, and only to it;
// that pod lands on fpga-node, the other on plain-node.
func checkFPGAScheduling(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	createPod := func(name string, requests corev1.ResourceList) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "c", Image: "example.invalid/app",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests},
			}}},
		}
		if _, err := c.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
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
}

// zeroAndWaitRestored zeroes the FPGA with a full status update, as the
// kubelet does on restart, and waits for a's status write that asserts it
// again and its ResourceRestored event.
func zeroAndWaitRestored(t *testing.T, c kubernetes.Interface, a *agent.Agent, node string) {
	t.Helper()
	writesBefore := a.Stats().ConditionWrites
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, c, node)
		n.Status.Capacity[fpga] = resource.MustParse("0")
		n.Status.Allocatable[fpga] = resource.MustParse("0")
		_, err := c.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{FieldManager: "kubelet"})
		return err
	}); err != nil {
		t.Fatalf("zeroing the FPGA: %v", err)
	}
	zeroed := time.Now()
	waitNode(t, c, node, 5*time.Second, "the FPGA re-asserted", func(n *corev1.Node) bool {
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
	if !hasEvent(t, c, node, "ResourceRestored") {
		t.Errorf("no ResourceRestored event")
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
	t.Parallel()
	cp := shared.Get(t)
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

// patchResource writes resource r into the Node's status capacity and, when
// alsoAllocatable, allocatable, as field manager, with a merge patch (an
// update, as kubectl and the kubelet write); value "" removes it. It
// returns the Node written.
func patchResource(t *testing.T, c kubernetes.Interface, node, manager string, r corev1.ResourceName, value string, alsoAllocatable bool) *corev1.Node {
	t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	status := map[string]any{"capacity": map[string]any{string(r): v}}
	if alsoAllocatable {
		status["allocatable"] = map[string]any{string(r): v}
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: manager}, "status")
	if err != nil {
		t.Fatalf("%s writing %s=%q: %v", manager, r, value, err)
	}
	return n
}

// eventCount is how many times an Event with reason was recorded on node
// (the recorder folds repeats into one Event's count).
func eventCount(t *testing.T, c kubernetes.Interface, node, reason string) int32 {
	t.Helper()
	var n int32
	for _, e := range nodeEvents(t, c, node, reason) {
		n += max(e.Count, 1)
	}
	return n
}

// heartbeatProbe is a probe spec that keeps the agent writing its status
// (a condition with a 1 s heartbeat, see startAgent's HeartbeatPeriod), so
// a test sees what each status write does to the extended resources.
func heartbeatProbe() []agent.ProbeSpec {
	return []agent.ProbeSpec{{
		Entry:     probes.Entry{Probe: newSwitchProbe(probes.StatusOK), Interval: 100 * time.Millisecond, Timeout: 90 * time.Millisecond},
		Condition: cond,
	}}
}

// checkRegistration fails t when a version of the Node lost the
// registration capacity or the other writer's resource.
func checkRegistration(t *testing.T, i int, n *corev1.Node) {
	t.Helper()
	for r, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "4", "example.com/other": "3"} {
		if capa, alloc := capacityOf(n, r); capa != want || alloc != want {
			t.Errorf("version %d (rv %s): %s is %q/%q, want %s/%s untouched", i, n.ResourceVersion, r, capa, alloc, want, want)
		}
	}
}

// TestHardwareYieldsToAnotherWriter: the agent advertises 1 FPGA; another
// field manager writes 4 into capacity. The agent yields: it says so once,
// in a ResourceYielded event naming the manager and both values, and never
// writes its 1 back, though it writes the status every second — every
// version a watch sees for 4 s keeps their value, also after they change
// it to 5 in capacity and allocatable. Its own allocatable entry, which
// nobody else wrote, stays as it was until then (not pruned). When they
// zero it, the agent resumes (ResourceResumed); when the kubelet then
// rewrites capacity without it, it is asserted again (ResourceRestored).
// The registration capacity and another writer's resource survive every
// version.
func TestHardwareYieldsToAnotherWriter(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "yield-node"
	cp.CreateNode(t, node, schedulable)
	inv := agent.InventoryFunc(func(context.Context) ([]agent.Resource, error) {
		return []agent.Resource{{Name: fpga, Count: 1, Advertise: true, Taint: true, Label: true}}, nil
	})
	a, _ := startAgent(t, agent.Options{
		NodeName: node, Client: c.CoreV1(), Hardware: inv, HardwarePeriod: 200 * time.Millisecond,
		Probes: heartbeatProbe(), HeartbeatPeriod: time.Second,
	})
	waitNode(t, c, node, 10*time.Second, "the FPGA advertised", func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, fpga)
		return capa == "1" && alloc == "1"
	})

	// Another field manager takes the resource over, and keeps writing.
	n := patchResource(t, c, node, "operator", fpga, "4", false)
	w := startWatch(t, c, node, n.ResourceVersion)
	writes := a.Stats().ConditionWrites
	time.Sleep(2 * time.Second)
	patchResource(t, c, node, "operator", fpga, "5", true)
	time.Sleep(2 * time.Second)
	if got := a.Stats().ConditionWrites - writes; got < 2 {
		t.Fatalf("the agent wrote its status %d times in 4 s with a 1 s heartbeat; the test proves nothing", got)
	}
	evs := w.seen()
	if len(evs) == 0 {
		t.Fatal("the watch saw no version")
	}
	sawFive := false
	for i, n := range evs {
		capa, alloc := capacityOf(n, fpga)
		if capa != "4" && capa != "5" {
			t.Errorf("version %d (rv %s): capacity %s is %q, want the other writer's 4 or 5", i, n.ResourceVersion, fpga, capa)
		}
		sawFive = sawFive || alloc == "5"
		if want := map[bool]string{false: "1", true: "5"}[sawFive]; alloc != want {
			t.Errorf("version %d (rv %s): allocatable %s is %q, want %s", i, n.ResourceVersion, fpga, alloc, want)
		}
		checkRegistration(t, i, n)
	}
	if !sawFive {
		t.Errorf("no watched version had the other writer's allocatable 5")
	}
	e := waitEvent(t, c, node, "ResourceYielded", 10*time.Second, string(fpga), "operator", "capacity to 4", "advertised 1")
	if e.Type != corev1.EventTypeWarning {
		t.Errorf("ResourceYielded is a %s event, want Warning", e.Type)
	}

	// They zero it: ours comes back.
	patchResource(t, c, node, "operator", fpga, "0", true)
	waitNode(t, c, node, 5*time.Second, "the FPGA resumed after the other writer zeroed it", func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, fpga)
		return capa == "1" && alloc == "1"
	})
	waitEvent(t, c, node, "ResourceResumed", 10*time.Second, string(fpga), "operator", "zeroed", "advertising 1 again")

	// The kubelet rewrites capacity without it (as on restart): asserted
	// again, not yielded. Right after one of the agent's heartbeat writes
	// (1 s apart here), so the agent sees the removal before its next
	// heartbeat would put the FPGA back unseen (the end state would be the
	// same, but without the ResourceRestored Event this test checks).
	before := getNode(t, c, node).ResourceVersion
	waitNode(t, c, node, 5*time.Second, "an agent heartbeat write", func(n *corev1.Node) bool { return n.ResourceVersion != before })
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, c, node)
		delete(n.Status.Capacity, fpga)
		delete(n.Status.Allocatable, fpga)
		_, err := c.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{FieldManager: "kubelet"})
		return err
	}); err != nil {
		t.Fatalf("removing the FPGA as the kubelet: %v", err)
	}
	n = waitNode(t, c, node, 5*time.Second, "the FPGA asserted again after the kubelet dropped it", func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, fpga)
		return capa == "1" && alloc == "1"
	})
	checkRegistration(t, 0, n)
	waitEvent(t, c, node, "ResourceRestored", 10*time.Second, string(fpga), "removed")
	if got := eventCount(t, c, node, "ResourceYielded"); got != 1 {
		t.Errorf("ResourceYielded recorded %d times, want once", got)
	}
	if got := eventCount(t, c, node, "ResourceResumed"); got != 1 {
		t.Errorf("ResourceResumed recorded %d times, want once", got)
	}
}

// TestHardwareResumesWhenTheOtherWriterRemovesIt: another field manager
// takes the resource over with server-side apply (capacity and
// allocatable, forced); the agent yields and, once they remove their
// value, advertises its own again.
func TestHardwareResumesWhenTheOtherWriterRemovesIt(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "resume-node"
	cp.CreateNode(t, node, schedulable)
	inv := agent.InventoryFunc(func(context.Context) ([]agent.Resource, error) {
		return []agent.Resource{{Name: fpga, Count: 1, Advertise: true}}, nil
	})
	startAgent(t, agent.Options{
		NodeName: node, Client: c.CoreV1(), Hardware: inv, HardwarePeriod: 200 * time.Millisecond,
		Probes: heartbeatProbe(), HeartbeatPeriod: time.Second,
	})
	waitNode(t, c, node, 10*time.Second, "the FPGA advertised", func(n *corev1.Node) bool {
		capa, _ := capacityOf(n, fpga)
		return capa == "1"
	})
	four := corev1.ResourceList{fpga: resource.MustParse("4")}
	n, err := c.CoreV1().Nodes().ApplyStatus(t.Context(),
		corev1ac.Node(node).WithStatus(corev1ac.NodeStatus().WithCapacity(four).WithAllocatable(four.DeepCopy())),
		metav1.ApplyOptions{FieldManager: "plugin", Force: true})
	if err != nil {
		t.Fatalf("the plugin applying 4: %v", err)
	}
	w := startWatch(t, c, node, n.ResourceVersion)
	waitEvent(t, c, node, "ResourceYielded", 10*time.Second, "plugin", "capacity to 4", "advertised 1")
	time.Sleep(2 * time.Second)
	for i, n := range w.seen() {
		if capa, alloc := capacityOf(n, fpga); capa != "4" || alloc != "4" {
			t.Errorf("version %d (rv %s): %s is %q/%q, want the plugin's 4/4", i, n.ResourceVersion, fpga, capa, alloc)
		}
		checkRegistration(t, i, n)
	}

	// The plugin lets go: its apply no longer names the resource, and
	// nobody else owns it, so the API server removes it (with the
	// registration capacity, which here has no recorded owner: see
	// TestServerSideApplyReleasesOnlyUnownedEntries).
	if _, err := c.CoreV1().Nodes().ApplyStatus(t.Context(), corev1ac.Node(node).WithStatus(corev1ac.NodeStatus()),
		metav1.ApplyOptions{FieldManager: "plugin", Force: true}); err != nil {
		t.Fatalf("the plugin letting go: %v", err)
	}
	waitNode(t, c, node, 5*time.Second, "the FPGA resumed after the plugin removed its value", func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, fpga)
		return capa == "1" && alloc == "1"
	})
	waitEvent(t, c, node, "ResourceResumed", 10*time.Second, "plugin", "removed", "advertising 1 again")
}

// failingInventory fails until ok is set, then reports resources.
type failingInventory struct {
	ok        atomic.Bool
	resources []agent.Resource
}

func (f *failingInventory) Inventory(context.Context) ([]agent.Resource, error) {
	if !f.ok.Load() {
		return nil, errors.New("NVML: driver not loaded")
	}
	return f.resources, nil
}

// TestHardwareKeptWhileInventoryFailsAfterRestart: the agent advertised 2
// FPGAs with their taint and label, and restarts onto an inventory that
// fails. Every version of the Node a watch sees keeps the resource, taint
// and label, though the agent writes its status every second; the kubelet
// zeroing it meanwhile gets the adopted count asserted again. Only once an
// inventory succeeds and finds no FPGA does the resource go.
func TestHardwareKeptWhileInventoryFailsAfterRestart(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "restart-hw"
	cp.CreateNode(t, node, schedulable)
	taint := agent.HardwareTaint(fpga)
	label := agent.HardwareLabel(fpga)
	advertised := func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, fpga)
		return capa == "2" && alloc == "2" && hasTaint(n, taint) && n.Labels[label] == "true"
	}
	good := agent.InventoryFunc(func(context.Context) ([]agent.Resource, error) {
		return []agent.Resource{{Name: fpga, Count: 2, Advertise: true, Taint: true, Label: true}}, nil
	})
	_, stop := startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Hardware: good, Probes: heartbeatProbe(), HeartbeatPeriod: time.Second})
	waitNode(t, c, node, 10*time.Second, "the FPGAs advertised, tainted and labelled", advertised)
	stop()

	w := startWatch(t, c, node, getNode(t, c, node).ResourceVersion)
	inv := &failingInventory{}
	a, _ := startAgent(t, agent.Options{
		NodeName: node, Client: c.CoreV1(), Hardware: inv, HardwarePeriod: 100 * time.Millisecond,
		Probes: heartbeatProbe(), HeartbeatPeriod: time.Second,
		// What the config says the agent may own (agent/config): its
		// hardware taint and label records are trusted before an
		// inventory reports the hardware.
		Ownership: agent.Ownership{Taints: []taints.TaintID{taints.IDOf(taint)}, Labels: []string{label}, Resources: []corev1.ResourceName{fpga}},
	})
	time.Sleep(4 * time.Second)
	if got := a.Stats().ConditionWrites; got < 2 {
		t.Fatalf("the restarted agent wrote its status %d times in 4 s with a 1 s heartbeat; the test proves nothing", got)
	}
	evs := w.seen()
	for i, n := range evs {
		if !advertised(n) {
			capa, alloc := capacityOf(n, fpga)
			t.Errorf("version %d (rv %s) after the restart lost the FPGAs: %s=%q/%q, %s", i, n.ResourceVersion, fpga, capa, alloc, describe(n))
		}
		checkRegistration(t, i, n)
	}

	// The kubelet zeroes it while the inventory still fails: the count
	// adopted at start is asserted again.
	patchResource(t, c, node, "kubelet", fpga, "0", true)
	waitNode(t, c, node, 5*time.Second, "the adopted count asserted again", advertised)

	// An inventory succeeds and finds no FPGA: now it goes.
	inv.ok.Store(true)
	n := waitNode(t, c, node, 10*time.Second, "the FPGAs withdrawn", func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, fpga)
		return capa == "" && alloc == "" && !hasTaint(n, taint) && n.Labels[label] == ""
	})
	checkRegistration(t, 0, n)
}

// TestServerSideApplyReleasesOnlyUnownedEntries pins down, on the real API
// server, what yielding and withdrawing rely on: an extended resource left
// out of our apply is kept when another field manager has taken it over
// (by update or forced apply) or co-owns it, and removed when only we own
// it — together with the whole map, registration capacity included, when
// no other entry has a recorded owner. That is why the agent never just
// leaves out an entry it alone owns.
func TestServerSideApplyReleasesOnlyUnownedEntries(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	ctx := t.Context()
	apply := func(node, manager, value string, force bool) error {
		st := corev1ac.NodeStatus()
		if value != "" {
			l := corev1.ResourceList{fpga: resource.MustParse(value)}
			st.WithCapacity(l).WithAllocatable(l.DeepCopy())
		}
		_, err := c.CoreV1().Nodes().ApplyStatus(ctx, corev1ac.Node(node).WithStatus(st), metav1.ApplyOptions{FieldManager: manager, Force: force})
		return err
	}
	mustApply := func(node, manager, value string, force bool) {
		t.Helper()
		if err := apply(node, manager, value, force); err != nil {
			t.Fatalf("%s applying %q to %s: %v", manager, value, node, err)
		}
	}
	tests := []struct {
		name  string
		other func(node string)
		// want is the resource's capacity and allocatable after we leave
		// it out; wantCPU the registration capacity's cpu.
		wantCapacity, wantAllocatable, wantCPU string
	}{
		{"another manager updated capacity only", func(node string) {
			patchResource(t, c, node, "operator", fpga, "4", false)
		}, "4", "4", "4"}, // our lone allocatable is pruned with its map; the API server defaults allocatable to capacity
		{"another manager applied both, forced", func(node string) {
			mustApply(node, "plugin", "4", true)
		}, "4", "4", "4"},
		{"another manager co-owns our value", func(node string) {
			mustApply(node, "plugin", "1", false)
		}, "1", "1", "4"},
		{"nobody else owns it", func(string) {}, "", "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := fmt.Sprintf("ssa-%d", i)
			cp.CreateNode(t, node, schedulable)
			mustApply(node, "selftaint", "1", true)
			tt.other(node)
			mustApply(node, "selftaint", "", true)
			n := getNode(t, c, node)
			if capa, alloc := capacityOf(n, fpga); capa != tt.wantCapacity || alloc != tt.wantAllocatable {
				t.Errorf("%s after we left it out: %q/%q, want %q/%q", fpga, capa, alloc, tt.wantCapacity, tt.wantAllocatable)
			}
			if capa, _ := capacityOf(n, corev1.ResourceCPU); capa != tt.wantCPU {
				t.Errorf("cpu after we left %s out: %q, want %q", fpga, capa, tt.wantCPU)
			}
		})
	}
	// A different value by a non-forced apply is refused, not taken.
	cp.CreateNode(t, "ssa-conflict", schedulable)
	mustApply("ssa-conflict", "selftaint", "1", true)
	err := apply("ssa-conflict", "plugin", "4", false)
	if !apierrors.IsConflict(err) {
		t.Fatalf("a non-forced apply of another value: err %v, want a conflict", err)
	}
	// The agent tells a conflict on a resource from one on its conditions
	// by the causes' fields.
	var fields []string
	if status := apierrors.APIStatus(nil); errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if c.Type == metav1.CauseTypeFieldManagerConflict {
				fields = append(fields, c.Field)
			}
		}
	}
	slices.Sort(fields)
	if want := []string{".status.allocatable.example.com/fpga", ".status.capacity.example.com/fpga"}; !slices.Equal(fields, want) {
		t.Errorf("conflict fields %q, want %q", fields, want)
	}
}
