package drill

import (
	"strings"
	"testing"

	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// TestCheck: the labels a virtual node registers with (its pool's, the
// drill's pool label, the standard ones) and the agents' fault targets
// (cluster.config's probes and conditions, the kubelet's on virtual
// nodes) are what a drill file's steps are checked against before it
// runs.
func TestCheck(t *testing.T) {
	drill := func(config string, steps ...tdrill.Step) *tdrill.Scenario {
		return &tdrill.Scenario{
			Cluster: tdrill.Cluster{Config: config, Pools: []tdrill.Pool{{Name: "gpu", Count: 2, Labels: map[string]string{"zone": "a"}}}},
			Steps:   steps,
		}
	}
	fault := func(sel, cond string) tdrill.Step {
		return tdrill.Step{Fault: &tdrill.FaultStep{Nodes: tdrill.Nodes{Selector: sel}, Condition: cond}}
	}
	for _, tc := range []struct {
		name string
		s    *tdrill.Scenario
		want string // "" none
	}{
		{"the pool's label and a probe", drill("", fault("zone=a", "memory")), ""},
		{"the drill's pool label", drill("", fault(PoolLabel+"=gpu", "SelftaintMemoryPressure")), ""},
		{"the hostname", drill("", fault("kubernetes.io/hostname=gpu-2", "memory")), ""},
		{"the virtual label", drill("", fault("type=virtual-kubelet", "memory")), ""},
		{"a kubelet condition on virtual nodes", drill("", fault("zone=a", "MemoryPressure")), ""},
		{"a custom check's condition", drill("checks:\n  custom:\n  - {name: fan, condition: FanBroken, path: /bin/true}\n", fault("zone=a", "FanBroken")), ""},
		{"a selector that picks none", drill("", fault("zone=b", "memory")), `steps[0].fault.selector: "zone=b" matches none of the drill's nodes (gpu-1..gpu-2: zone=a)`},
		{"no probe memroy", drill("", fault("zone=a", "memroy")), `steps[0].fault.condition: "memroy" is neither a probe nor a condition the drill's agents have (did you mean memory?)`},
		{"a probe the config disables", drill("probes:\n  memory: {enabled: false}\n", fault("zone=a", "memory")), `steps[0].fault.condition: "memory" is neither`},
		{"a config that does not load: the run says so", drill("probes: {memroy: {}}\n", fault("zone=a", "nope")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.s)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("Check = %v, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0].Error(), tc.want)):
				t.Errorf("Check = %v, want one starting %q", got, tc.want)
			}
		})
	}
}
