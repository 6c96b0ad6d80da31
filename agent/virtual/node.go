package virtual

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/taints/fleet"
)

// Labels every virtual node carries, so people and selectors can tell it
// from a real one. "type: virtual-kubelet" is virtual-kubelet's convention.
const (
	LabelVirtual   = fleet.VirtualLabel
	LabelType      = "type"
	LabelTypeValue = "virtual-kubelet"
)

// KubeletVersion is what a virtual node reports as its kubelet version: the
// Kubernetes release whose client libraries selftaint is built with.
const KubeletVersion = "v1.35.4"

// NodeTemplate is what every virtual node registers with.
type NodeTemplate struct {
	// Capacity is the node's capacity and allocatable (cpu, memory, pods,
	// ephemeral-storage, extended resources).
	Capacity corev1.ResourceList
	// Labels are added to the standard ones.
	Labels map[string]string
	// Taints are registered with the node, as the kubelet's
	// --register-with-taints. The standard not-ready taint is added too.
	Taints []corev1.Taint
	// InternalIP is the node's address; default 127.0.0.1.
	InternalIP string
	// OptIn is the taints a pod must tolerate, each by its key, for the
	// node to run it (OptedIn): in a shared cluster, the registration
	// taints that keep other workloads off. Any other pod bound to the
	// node is rejected, as a kubelet rejects a pod at admission, so a
	// DaemonSet that tolerates every taint never has a pod Ready there.
	// Empty runs every pod (a cluster of its own, such as a drill's).
	OptIn []corev1.Taint
}

// DefaultCapacity is a mid-sized machine.
func DefaultCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("8"),
		corev1.ResourceMemory:           resource.MustParse("32Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
}

// NodeLabels are the labels virtual node name registers with: the
// standard ones (hostname, os, arch, virtual) and t's.
func (t NodeTemplate) NodeLabels(name string) map[string]string {
	labels := map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
		LabelVirtual:           "true",
		LabelType:              LabelTypeValue,
	}
	for k, v := range t.Labels {
		labels[k] = v
	}
	// Never overridden: it keeps a virtual node out of a real fleet's
	// budget and guard, and it is what the admission policy confines.
	labels[LabelVirtual] = "true"
	return labels
}

// newNode is the Node object virtual node number index (0-based) registers
// as. Conditions are left out: selftaint's agent writes them (server-side
// apply), the same pipeline as on a real node.
func (t NodeTemplate) newNode(name string, index int) *corev1.Node {
	labels := t.NodeLabels(name)
	taints := append([]corev1.Taint(nil), t.Taints...)
	// Like the kubelet: no pods until the node is known to be ready. The
	// node lifecycle controller lifts it once Ready is True.
	taints = append(taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
	capacity := t.Capacity
	if capacity == nil {
		capacity = DefaultCapacity()
	}
	ip := t.internalIP()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.NodeSpec{
			Taints:  taints,
			PodCIDR: podCIDR(index),
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity.DeepCopy(),
			Allocatable: capacity.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: ip},
				{Type: corev1.NodeHostName, Address: name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:            runtime.GOARCH,
				OperatingSystem:         "linux",
				OSImage:                 "selftaint virtual node",
				KernelVersion:           "virtual",
				ContainerRuntimeVersion: "selftaint://virtual",
				KubeletVersion:          KubeletVersion,
				MachineID:               fmt.Sprintf("selftaint-virtual-%d", index),
				SystemUUID:              fmt.Sprintf("selftaint-virtual-%d", index),
			},
		},
	}
}

// internalIP is the node's address, 127.0.0.1 by default.
func (t NodeTemplate) internalIP() string {
	if t.InternalIP == "" {
		return "127.0.0.1"
	}
	return t.InternalIP
}

// podCIDR is virtual node index's pod range: 10.64.0.0/10 cut into /24s.
func podCIDR(index int) string {
	return fmt.Sprintf("10.%d.%d.0/24", 64+(index/256)%64, index%256)
}

// podIPs hands out addresses .1 to .254 of a node's /24, round robin.
func podIPs(index int) func() string {
	var mu sync.Mutex
	next := 0
	a, b := 64+(index/256)%64, index%256
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		next = next%254 + 1
		return fmt.Sprintf("10.%d.%d.%d", a, b, next)
	}
}

// nodeStatus is virtual-kubelet's NodeProvider: the machine is imaginary, so
// it always answers pings and never changes its status on its own.
type nodeStatus struct{}

func (nodeStatus) Ping(context.Context) error                           { return nil }
func (nodeStatus) NotifyNodeStatus(context.Context, func(*corev1.Node)) {}
