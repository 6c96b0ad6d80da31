package config

// This file turns an Xid number into the fault that makes a node look, to
// selftaint, as if one of its GPUs had raised it: `selftaint fault inject
// --gpu-xid` and a drill's GPU step write it.

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/probes/gpu"
)

// ErrXidNotFatal says an Xid's action (the catalog's, or the config's
// override) is ignore or restart-app: the GPU probe raises no condition for
// it, so no fault can show what it would do.
var ErrXidNotFatal = errors.New("the GPU probe raises no condition for it")

// XidFault is the fault the GPU probe's own verdict would amount to after a
// GPU raised an Xid.
type XidFault struct {
	// Info is the catalog's entry for the Xid, with the config's
	// overrides (probes.gpu.xids, skipXids).
	Info gpu.XidInfo
	// Target is the fault target: the fatal GPU probe's name, "gpu". Xids
	// never feed the degraded probe.
	Target string
	// Condition is the condition the target feeds (probes.gpu.condition,
	// SelftaintGPUFailure by default), and Status the status it takes.
	Condition corev1.NodeConditionType
	Status    corev1.ConditionStatus
	// Reason and Message are the probe's for that Xid: the action's reason
	// (GPURebootRequired for Xid 79) and, e.g., "GPU 0: Xid 79 (GPU has
	// fallen off the bus) at 2026-11-23T12:00:00Z; reboot the node".
	Reason, Message string
}

// GPUXidFault is the fault for GPU number index raising xid at, judged by
// this config's GPU probe: the catalog's action with the config's
// overrides decides. An Xid the catalog does not know is fatal (reset-gpu),
// as the probe takes it. It fails with ErrXidNotFatal for an Xid whose
// action is ignore or restart-app, and when the GPU probe is disabled.
func (c *Config) GPUXidFault(xid uint64, index int, at time.Time) (XidFault, error) {
	_, probeConditions := c.FaultTargets()
	cond, ok := probeConditions[gpu.NameFatal]
	if !ok {
		return XidFault{}, fmt.Errorf("Xid %d: the GPU probe is disabled in the config (probes.gpu), so no condition takes GPU faults", xid)
	}
	gc := c.Probes.GPU.PackageConfig()
	info := gc.Catalog().Lookup(xid)
	reason, message, fatal := info.Problem(index, at)
	if !fatal {
		by := "NVIDIA's catalog"
		if info.Overridden {
			by = "the config (probes.gpu.xids or skipXids)"
		}
		return XidFault{Info: info}, fmt.Errorf("%s: its action is %s, by %s: %w", info, info.Action, by, ErrXidNotFatal)
	}
	return XidFault{Info: info, Target: gpu.NameFatal, Condition: cond, Status: corev1.ConditionTrue, Reason: reason, Message: message}, nil
}
