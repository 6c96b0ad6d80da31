package taints

import corev1 "k8s.io/api/core/v1"

// HardwareTaintValue is the value of a special-hardware taint. Its key is
// the resource name and its effect NoSchedule, so the
// ExtendedResourceToleration admission plugin tolerates it for exactly the
// pods that request the resource.
const HardwareTaintValue = "present"

// Hardware is one kind of special hardware the node has and what selftaint
// does about it.
type Hardware struct {
	// Name is the extended resource name, e.g. example.com/fpga.
	Name corev1.ResourceName `json:"name"`
	// Count is how many the node has now.
	Count int64 `json:"count"`
	// Advertise puts Count in the Node's status capacity and allocatable.
	Advertise bool `json:"advertise"`
	// Taint keeps the taint Name=present:NoSchedule while Count > 0.
	Taint bool `json:"taint"`
	// Label keeps the label HardwareLabel(Name)=true while Count > 0.
	Label bool `json:"label"`
	// Detail says what was found, for logs and Events.
	Detail string `json:"detail,omitempty"`
}

// HardwareLabel is the label key that says a node has resource r, for pods
// that must land only there (the taint repels, the label attracts). It
// follows NVIDIA GPU feature discovery's nvidia.com/gpu.present.
func HardwareLabel(r corev1.ResourceName) string { return string(r) + ".present" }

// HardwareTaint is the taint for hardware r: its key is the resource name,
// effect NoSchedule, so the ExtendedResourceToleration admission plugin
// tolerates it for exactly the pods that request r.
func HardwareTaint(r corev1.ResourceName) corev1.Taint {
	return corev1.Taint{Key: string(r), Value: HardwareTaintValue, Effect: corev1.TaintEffectNoSchedule}
}

// HardwareTaints are the taints an inventory asks for.
func HardwareTaints(hw []Hardware) []corev1.Taint {
	var out []corev1.Taint
	for _, h := range hw {
		if h.Taint && h.Count > 0 {
			out = append(out, HardwareTaint(h.Name))
		}
	}
	return out
}

// HardwareLabels are the labels an inventory asks for.
func HardwareLabels(hw []Hardware) map[string]string {
	out := map[string]string{}
	for _, h := range hw {
		if h.Label && h.Count > 0 {
			out[HardwareLabel(h.Name)] = "true"
		}
	}
	return out
}
