package config

import (
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/virtual"
	"github.com/selftaint/selftaint/probes"
)

// VirtualOptions are the options of virtual nodes that follow this config:
// its probes simulated (healthy unless a fault says otherwise), its rules
// and drain rules, heartbeat, faults, change limiter, and NoExecute grants
// read from the coordinator's namespace through leases. The caller adds
// the nodes' names, clients, template and lifecycle settings.
func (c *Config) VirtualOptions(leases typedcoordv1.LeasesGetter, coordinatorNamespace string) virtual.Options {
	return virtual.Options{
		Leases: leases,
		Probes: func(string) []agent.ProbeSpec {
			return c.SimulatedProbeSpecs(func(name string) probes.Probe { return virtual.SimulatedProbe{ProbeName: name} })
		},
		Rules:           c.TaintRules(),
		DrainRules:      c.DrainRules(),
		HeartbeatPeriod: c.HeartbeatPeriod.D,
		Faults:          c.FaultOptions(),
		Limiter:         c.Limiter(),
		NoExecute:       c.NoExecuteOptions(leases, coordinatorNamespace),
	}
}
