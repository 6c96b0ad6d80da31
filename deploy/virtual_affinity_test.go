package deploy_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/selftaint/selftaint/agent/virtual"
)

// TestNeverOnVirtualNodes: the agent's DaemonSet (which tolerates every
// taint), the coordinator and the virtual nodes' own Deployment never land
// on a virtual node: their required node affinity refuses a Node with the
// label virtual nodes register with, whatever its value, and takes a real
// one. The scheduler's own matcher decides, as it would.
func TestNeverOnVirtualNodes(t *testing.T) {
	base := readManifests(t, ".")
	pods := map[string]corev1.PodSpec{
		"DaemonSet selftaint":                     find[*appsv1.DaemonSet](t, base, "selftaint").Spec.Template.Spec,
		"Deployment " + coordinatorSA:             find[*appsv1.Deployment](t, base, coordinatorSA).Spec.Template.Spec,
		"Deployment selftaint-virtual (virtual/)": find[*appsv1.Deployment](t, readManifests(t, "virtual"), "selftaint-virtual").Spec.Template.Spec,
	}
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	}
	for what, spec := range pods {
		required := nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: spec})
		for _, tc := range []struct {
			name string
			node *corev1.Node
			want bool
		}{
			{"a real node", node(map[string]string{corev1.LabelHostname: "n", corev1.LabelOSStable: "linux"}), true},
			{"a virtual node", node(map[string]string{virtual.LabelVirtual: "true", virtual.LabelType: virtual.LabelTypeValue}), false},
			{"a node labelled " + virtual.LabelVirtual + "=false", node(map[string]string{virtual.LabelVirtual: "false"}), false},
		} {
			got, err := required.Match(tc.node)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if got != tc.want {
				t.Errorf("%s on %s: matches %v, want %v", what, tc.name, got, tc.want)
			}
		}
	}
}
