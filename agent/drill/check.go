package drill

import (
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/virtual"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// Check finds what is wrong in s that is known before the drill starts
// anything, beyond the file itself (tdrill.Scenario.CheckKnown): a step's
// selector that picks none of its virtual nodes (with the labels each
// registers with), a fault on a condition or probe its agents do not have
// (cluster.config's probe registry and checks; on virtual nodes also the
// kubelet's conditions). Give it to tdrill.Load. A cluster.config that
// does not load is left to the run, which refuses it as such.
func Check(s *tdrill.Scenario) []tdrill.FieldErr {
	return s.CheckKnown(known(s))
}

// known is what the drill's nodes and agents will be.
func known(s *tdrill.Scenario) tdrill.Known {
	var k tdrill.Known
	if len(s.Cluster.Pools) > 0 {
		k.NodeLabels = map[string]map[string]string{}
		for _, p := range s.Cluster.Pools {
			tmpl, err := poolTemplate(p)
			if err != nil {
				continue // a bad taint: Validate says so
			}
			for _, n := range virtual.Names(p.Name+"-", p.Count) {
				k.NodeLabels[n] = tmpl.NodeLabels(n)
			}
		}
	}
	cfg, err := config.Parse([]byte(s.Cluster.Config))
	if err != nil {
		return k
	}
	k.Conditions, k.ProbeConditions = cfg.FaultTargets()
	if len(s.Cluster.Pools) > 0 {
		for _, c := range virtual.KubeletConditions() {
			k.Conditions[c] = true
		}
	}
	return k
}
