package drill_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/drill"
)

// TestCheckKnown: a selector that picks none of the drill's nodes, and a
// fault on a condition or probe its agents do not have, are refused from
// what is known before the drill runs; what picks some, or names a probe
// or a condition, passes.
func TestCheckKnown(t *testing.T) {
	known := drill.Known{
		NodeLabels: map[string]map[string]string{
			"gpu-1": {"pool": "gpu", "kubernetes.io/hostname": "gpu-1"},
			"gpu-2": {"pool": "gpu", "kubernetes.io/hostname": "gpu-2"},
			"cpu-1": {"kubernetes.io/hostname": "cpu-1"},
		},
		Conditions:      map[corev1.NodeConditionType]bool{"SelftaintMemoryPressure": true, "MemoryPressure": true},
		ProbeConditions: map[string]corev1.NodeConditionType{"memory": "SelftaintMemoryPressure"},
	}
	base := func(steps ...drill.Step) *drill.Scenario {
		return &drill.Scenario{
			Cluster: drill.Cluster{Pools: []drill.Pool{{Name: "gpu", Count: 2, Labels: map[string]string{"pool": "gpu"}}, {Name: "cpu", Count: 1}}},
			Steps:   steps,
		}
	}
	fault := func(sel, cond string) drill.Step {
		return drill.Step{Fault: &drill.FaultStep{Nodes: drill.Nodes{Selector: sel}, Condition: cond}}
	}
	for _, tc := range []struct {
		name string
		s    *drill.Scenario
		k    drill.Known
		want []string
	}{
		{"selector and probe known", base(fault("pool=gpu", "memory")), known, nil},
		{"a condition by type", base(fault("pool=gpu", "MemoryPressure")), known, nil},
		{"a standard label", base(fault("kubernetes.io/hostname=cpu-1", "memory")), known, nil},
		{"selector matches none", base(fault("pool=gpuu", "memory")), known,
			[]string{`steps[0].fault.selector: "pool=gpuu" matches none of the drill's nodes (gpu-1..gpu-2: pool=gpu; cpu-1: no labels of their own)`}},
		{"a notReady selector", base(drill.Step{NotReady: &drill.NotReadyStep{Nodes: drill.Nodes{Selector: "zone=a"}}}), known,
			[]string{`steps[0].notReady.selector: "zone=a" matches none`}},
		{"a drain selector", base(drill.Step{Drain: &drill.DrainStep{Nodes: drill.Nodes{Names: []string{"gpu-1"}, Selector: "pool=cpu"}}}), known,
			[]string{`steps[0].drain.selector: "pool=cpu" matches none`}},
		{"a waitFor selector", base(drill.Step{WaitFor: &drill.WaitStep{Nodes: drill.Nodes{Selector: "!pool,x"}}}), known,
			[]string{`steps[0].waitFor.selector: "!pool,x" matches none`}},
		{"no probe memroy", base(fault("", "memroy")), known,
			[]string{`steps[0].fault.condition: "memroy" is neither a probe nor a condition the drill's agents have (did you mean memory?): the probes are memory; the conditions MemoryPressure, SelftaintMemoryPressure`}},
		{"no such condition", base(fault("", "SelftaintDiskPressure")), known,
			[]string{`steps[0].fault.condition: "SelftaintDiskPressure" is neither a probe nor a condition the drill's agents have: the probes`}},
		{"both, in step order", base(fault("pool=x", "memory"), fault("", "cpu")), known,
			[]string{`steps[0].fault.selector: "pool=x"`, `steps[1].fault.condition: "cpu"`}},
		{"real nodes: their labels are not known", func() *drill.Scenario {
			s := base(fault("role=worker", "memory"))
			s.Cluster.RealNodes = "role=worker"
			return s
		}(), known, nil},
		{"nothing known", base(fault("pool=x", "nope")), drill.Known{}, nil},
		{"a bad selector is Validate's", base(fault("pool in (", "memory")), known, nil},
		{"gpuXid: no condition to check", base(drill.Step{Fault: &drill.FaultStep{Nodes: drill.Nodes{Selector: "pool=gpu"}, GPUXid: 79}}), known, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.s.CheckKnown(tc.k)
			if len(got) != len(tc.want) {
				t.Fatalf("CheckKnown = %v, want %d error(s) %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i].Error(), w) {
					t.Errorf("error %d = %q, want it to start %q", i, got[i].Error(), w)
				}
			}
		})
	}
}
