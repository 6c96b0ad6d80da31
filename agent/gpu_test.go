package agent_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/gpu"
)

// gpuFake is a DGX A100 whose GPUs read healthy, with the driver's
// recovery action per GPU and Xid events a test pushes. Only the signals
// it fakes are offered: the others are "not available".
type gpuFake struct {
	*dgxa100.Server
	// noRecovery: the driver has no recovery action field (older drivers).
	noRecovery bool
	mu         sync.Mutex // guards the fields below
	recovery   map[int]uint64
	queue      []nvml.EventData
}

func newGPUFake() *gpuFake {
	f := &gpuFake{Server: dgxa100.New(), recovery: map[int]uint64{}}
	offered := map[string]bool{
		"nvmlDeviceGetFieldValues": true, "nvmlDeviceGetTotalEccErrors": true, "nvmlDeviceGetRemappedRows": true,
		"nvmlEventSetCreate": true, "nvmlDeviceGetSupportedEventTypes": true, "nvmlDeviceRegisterEvents": true,
		"nvmlEventSetWait_v2": true, "nvmlEventSetFree": true,
	}
	f.LookupSymbolFunc = func(sym string) error {
		if offered[sym] {
			return nil
		}
		return nvml.ERROR_FUNCTION_NOT_FOUND
	}
	f.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				deadline := time.Now().Add(time.Duration(ms) * time.Millisecond)
				for {
					f.mu.Lock()
					if len(f.queue) > 0 {
						ev := f.queue[0]
						f.queue = f.queue[1:]
						f.mu.Unlock()
						return ev, nvml.SUCCESS
					}
					f.mu.Unlock()
					if time.Now().After(deadline) {
						return nvml.EventData{}, nvml.ERROR_TIMEOUT
					}
					time.Sleep(5 * time.Millisecond)
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	for i := range f.Devices {
		d := f.Devices[i].(*dgxa100.Device)
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeAll, nvml.SUCCESS }
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.SUCCESS }
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
		d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
			f.mu.Lock()
			defer f.mu.Unlock()
			for j := range values {
				values[j].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				if values[j].FieldId == 230 && !f.noRecovery { // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
					values[j].NvmlReturn = uint32(nvml.SUCCESS)
					values[j].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
					binary.NativeEndian.PutUint32(values[j].Value[:4], uint32(f.recovery[i]))
				}
			}
			return nvml.SUCCESS
		}
	}
	return f
}

func (f *gpuFake) setRecovery(i int, action uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recovery[i] = action
}

func (f *gpuFake) xid(i int, xid uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, nvml.EventData{Device: f.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid,
		GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
}

func (f *gpuFake) uuid(i int) string { return f.Devices[i].(*dgxa100.Device).UUID }

// sameGPUs gives f the UUIDs of old: the same machine after the agent
// restarted (dgxa100.New makes new ones).
func (f *gpuFake) sameGPUs(old *gpuFake) *gpuFake {
	for i := range f.Devices {
		f.Devices[i].(*dgxa100.Device).UUID = old.uuid(i)
	}
	return f
}

// runGPUAgent runs an agent with the default config's GPU probes over lib
// (fast schedule, clearAfter 2s) on the default boot.
func runGPUAgent(t *testing.T, c *testcp.ControlPlane, node string, lib nvml.Interface) func() {
	t.Helper()
	cfg, err := config.Parse([]byte("probes:\n  gpu:\n    interval: 500ms\n    timeout: 400ms\n    clearAfter: 2s\n    degraded: {clearAfter: 2s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	specs, closer, err := cfg.GPUProbeSpecs(gpu.Env{Lib: lib, BootID: func() (string, error) { return "boot-1", nil }})
	if err != nil {
		t.Fatalf("GPUProbeSpecs: %v", err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	_, stop := startAgent(t, agent.Options{NodeName: node, Client: c.Client().CoreV1(), Probes: specs, Rules: cfg.TaintRules(), HeartbeatPeriod: time.Second})
	return func() {
		stop()
		_ = closer.Close()
	}
}

var gpuFailureTaint = corev1.Taint{Key: "selftaint.io/gpu-failure", Effect: corev1.TaintEffectNoSchedule}

// TestGPUFailureSurvivesRestart: Xid 94 (reset the GPU) on GPU 2 taints the
// node; the agent restarts onto a driver that no longer has the event (NVML
// does not replay them) and whose GPU reads healthy. The taint is on every
// version of the Node the watch sees after the restart, the condition
// stays True, and both clear only once the driver's recovery action, set
// across the restart, goes back to none (the reset observed).
func TestGPUFailureSurvivesRestart(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "gpu-restart"
	cp.CreateNode(t, node, withForeign)
	failed := func(n *corev1.Node) bool {
		cd := condition(n, config.DefaultGPUCondition)
		return hasTaint(n, gpuFailureTaint) && cd != nil && cd.Status == corev1.ConditionTrue
	}

	f1 := newGPUFake()
	stop1 := runGPUAgent(t, cp, node, f1)
	waitNode(t, c, node, 20*time.Second, "GPU condition False", func(n *corev1.Node) bool {
		cd := condition(n, config.DefaultGPUCondition)
		return cd != nil && cd.Status == corev1.ConditionFalse
	})
	f1.xid(2, 94)
	n := waitNode(t, c, node, 20*time.Second, "GPU failure taint for Xid 94", failed)
	cd := condition(n, config.DefaultGPUCondition)
	for _, want := range []string{"GPU 2 (" + f1.uuid(2) + ")", "Xid 94 (Contained memory error)", "reset the GPU"} {
		if !strings.Contains(cd.Message, want) {
			t.Errorf("condition message %q does not name %q", cd.Message, want)
		}
	}
	if cd.Reason != gpu.ReasonGPUResetRequired {
		t.Errorf("reason %s, want %s", cd.Reason, gpu.ReasonGPUResetRequired)
	}
	waitNode(t, c, node, 10*time.Second, "the GPU state annotation", func(n *corev1.Node) bool {
		return strings.Contains(n.Annotations[agent.StateAnnotation(gpu.NameFatal)], `"xid":94`)
	})
	stop1()

	// The restarted agent's driver: no event, the GPU healthy, the
	// recovery action the driver keeps across agent restarts.
	f2 := newGPUFake().sameGPUs(f1)
	f2.setRecovery(2, 1) // GPU reset
	w := startWatch(t, c, node, getNode(t, c, node).ResourceVersion)
	runGPUAgent(t, cp, node, f2)
	// Several heartbeats and well past clearAfter.
	time.Sleep(6 * time.Second)
	w.everyVersion(t, "after the restart", "the GPU failure", failed)
	checkForeignSurvived(t, w)
	n = getNode(t, c, node)
	if msg := condition(n, config.DefaultGPUCondition).Message; !strings.Contains(msg, "Xid 94") {
		t.Errorf("after the restart the condition %q no longer names Xid 94", msg)
	}

	// The reset: the driver's recovery action goes back to none.
	f2.setRecovery(2, 0)
	n = waitNode(t, c, node, 20*time.Second, "GPU failure cleared after the reset", func(n *corev1.Node) bool {
		cd := condition(n, config.DefaultGPUCondition)
		return !hasTaint(n, gpuFailureTaint) && cd != nil && cd.Status == corev1.ConditionFalse
	})
	if st := n.Annotations[agent.StateAnnotation(gpu.NameFatal)]; strings.Contains(st, `"xid":94`) {
		t.Errorf("the state still holds Xid 94 after the reset: %s", st)
	}
}

// TestGPUXidHeldAcrossRestartUntilCleared: on a driver without a recovery
// action, nothing but the kept state holds Xid 94 after a restart: the
// GPU reads healthy. The taint stays well past clearAfter, on every
// version of the Node, until an operator clears the GPU.
func TestGPUXidHeldAcrossRestartUntilCleared(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "gpu-clear"
	cp.CreateNode(t, node, withForeign)
	failed := func(n *corev1.Node) bool {
		cd := condition(n, config.DefaultGPUCondition)
		return hasTaint(n, gpuFailureTaint) && cd != nil && cd.Status == corev1.ConditionTrue && strings.Contains(cd.Message, "Xid 94")
	}
	f1 := newGPUFake()
	f1.noRecovery = true
	stop1 := runGPUAgent(t, cp, node, f1)
	waitNode(t, c, node, 20*time.Second, "GPU condition False", func(n *corev1.Node) bool {
		cd := condition(n, config.DefaultGPUCondition)
		return cd != nil && cd.Status == corev1.ConditionFalse
	})
	f1.xid(5, 94)
	waitNode(t, c, node, 20*time.Second, "GPU failure taint for Xid 94", failed)
	waitNode(t, c, node, 10*time.Second, "the GPU state annotation", func(n *corev1.Node) bool {
		return strings.Contains(n.Annotations[agent.StateAnnotation(gpu.NameFatal)], `"xid":94`)
	})
	stop1()

	f2 := newGPUFake().sameGPUs(f1)
	f2.noRecovery = true
	w := startWatch(t, c, node, getNode(t, c, node).ResourceVersion)
	runGPUAgent(t, cp, node, f2)
	time.Sleep(6 * time.Second) // three times clearAfter
	w.everyVersion(t, "after the restart", "the GPU failure", failed)
	checkForeignSurvived(t, w)

	req, err := agent.ClearRequest{Targets: []string{f1.uuid(5)}, RequestedAt: time.Now().UTC().Format(time.RFC3339Nano), By: t.Name()}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, agent.ClearAnnotation(gpu.NameFatal), req)
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("writing the clear request: %v", err)
	}
	waitEvent(t, c, node, agent.ReasonProbeStateCleared, 20*time.Second, f1.uuid(5), "Xid 94")
	waitNode(t, c, node, 20*time.Second, "GPU failure cleared by the operator", func(n *corev1.Node) bool {
		cd := condition(n, config.DefaultGPUCondition)
		_, pending := n.Annotations[agent.ClearAnnotation(gpu.NameFatal)]
		return !hasTaint(n, gpuFailureTaint) && cd != nil && cd.Status == corev1.ConditionFalse && !pending
	})
}

// TestGPUInventoryHeldWhileNVMLHangs: the GPU resource is advertised from
// the GPU monitor's count; when every NVML call the monitor makes hangs,
// the inventory fails within the read's deadline and the last good count
// stays: every watched Node version keeps nvidia.com/gpu=8 and its taint,
// the GPU condition is not lifted, and the agent still stops at once (the
// inventory no longer sits in an NVML call that never returns).
func TestGPUInventoryHeldWhileNVMLHangs(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "gpu-hung-inventory"
	cp.CreateNode(t, node, withForeign)

	f := newGPUFake()
	hung := f.hangable(t)

	cfg, err := config.Parse([]byte("hardware:\n  gpu: {advertise: true}\nprobes:\n  gpu:\n    interval: 500ms\n    timeout: 400ms\n    clearAfter: 2s\n    degraded: {clearAfter: 2s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	specs, closer, err := cfg.GPUProbeSpecs(gpu.Env{Lib: f, BootID: func() (string, error) { return "boot-1", nil }})
	if err != nil {
		t.Fatalf("GPUProbeSpecs: %v", err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	counter, ok := closer.(config.GPUCounter)
	if !ok {
		t.Fatalf("the GPU monitor (%T) counts no GPUs", closer)
	}
	_, stop := startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: specs, Rules: cfg.TaintRules(),
		Hardware: cfg.Inventory(probes.Host{Root: t.TempDir()}, counter, slog.Default()), HardwarePeriod: 200 * time.Millisecond,
		HeartbeatPeriod: time.Second})

	const gpus = corev1.ResourceName(config.DefaultGPUResource)
	gpuTaint := corev1.Taint{Key: string(gpus), Value: agent.HardwareTaintValue, Effect: corev1.TaintEffectNoSchedule}
	advertised := func(n *corev1.Node) bool {
		capa, alloc := capacityOf(n, gpus)
		return capa == "8" && alloc == "8" && hasTaint(n, gpuTaint)
	}
	n := waitNode(t, c, node, 20*time.Second, "8 GPUs advertised and the GPU condition False", func(n *corev1.Node) bool {
		cd := condition(n, config.DefaultGPUCondition)
		return advertised(n) && cd != nil && cd.Status == corev1.ConditionFalse
	})

	w := startWatch(t, c, node, n.ResourceVersion)
	hung.Store(true)
	// The probes' reads time out: the condition goes Unknown (never a
	// recovery). The monitor's latest read now says the count hung, so
	// each inventory (every 200ms) fails and the last good count stays.
	waitNode(t, c, node, 20*time.Second, "the GPU condition Unknown while NVML hangs", func(n *corev1.Node) bool {
		cd := condition(n, config.DefaultGPUCondition)
		return cd != nil && cd.Status == corev1.ConditionUnknown
	})
	time.Sleep(3 * time.Second)
	w.everyVersion(t, "while NVML hangs", "the GPUs", advertised)
	checkForeignSurvived(t, w)

	start := time.Now()
	stop()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the agent took %s to stop while NVML hangs", took)
	}
}
