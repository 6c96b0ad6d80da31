package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
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

// withBusIDs gives f's GPUs their PCI bus ids in NVML's PCI info
// (dgxa100's leaves them empty), as the kernel's NVRM lines name them.
func (f *gpuFake) withBusIDs() *gpuFake {
	for i := range f.Devices {
		d := f.Devices[i].(*dgxa100.Device)
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: 0x20B010DE}
			copy(p.BusId[:], d.PciBusID)
			return p, nvml.SUCCESS
		}
	}
	return f
}

// hangable makes every GPU count, UUID and PCI read of f block while hung
// is set, until the test ends.
func (f *gpuFake) hangable(t *testing.T) *atomic.Bool {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hung := &atomic.Bool{}
	wait := func() {
		if hung.Load() {
			<-release
		}
	}
	count := f.DeviceGetCountFunc
	f.DeviceGetCountFunc = func() (int, nvml.Return) { wait(); return count() }
	for i := range f.Devices {
		d := f.Devices[i].(*dgxa100.Device)
		uuid, pci := d.GetUUIDFunc, d.GetPciInfoFunc
		d.GetUUIDFunc = func() (string, nvml.Return) { wait(); return uuid() }
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { wait(); return pci() }
	}
	return hung
}

// nvrmXid79 is the driver's kernel line for Xid 79 on the GPU at bus.
func nvrmXid79(bus string) string {
	return fmt.Sprintf("NVRM: Xid (PCI:%s): 79, pid=4242, name=python3, GPU has fallen off the bus.", strings.TrimSuffix(bus, ".0"))
}

// runKernelGPUAgent runs an agent with the GPU probes over lib (fast
// schedule) and the kernel log of host as the config has it: npdLogs are
// NPD log monitor files, none for the GPU probe's own reader.
func runKernelGPUAgent(t *testing.T, cp *testcp.ControlPlane, node string, lib nvml.Interface, host probes.Host, npdLogs ...string) []agent.ProbeSpec {
	t.Helper()
	return runKernelGPUAgentWith(t, cp, node, lib, host, "", npdLogs...)
}

// runKernelGPUAgentWith is runKernelGPUAgent with more of probes.gpu's
// settings (YAML lines at its indent, "    expectedGPUs: 7\n").
func runKernelGPUAgentWith(t *testing.T, cp *testcp.ControlPlane, node string, lib nvml.Interface, host probes.Host, gpuYAML string, npdLogs ...string) []agent.ProbeSpec {
	t.Helper()
	yaml := "probes:\n  gpu:\n    interval: 500ms\n    timeout: 400ms\n    clearAfter: 2s\n    degraded: {clearAfter: 2s}\n    kernelLog: true\n" + gpuYAML
	if len(npdLogs) > 0 {
		yaml += fmt.Sprintf("checks:\n  npdLogConfigs: [%s]\n", strings.Join(npdLogs, ", "))
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	checks, logs, err := cfg.CheckProbeSpecsOn(host, slog.Default())
	if err != nil {
		t.Fatalf("CheckProbeSpecsOn: %v", err)
	}
	t.Cleanup(func() { _ = logs.Close() })
	gpus, closer, err := cfg.GPUProbeSpecsOn(gpu.Env{Lib: lib, BootID: func() (string, error) { return "boot-1", nil }}, logs)
	if err != nil {
		t.Fatalf("GPUProbeSpecsOn: %v", err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	specs := append(checks, gpus...)
	startAgent(t, agent.Options{NodeName: node, Client: cp.Client().CoreV1(), Probes: specs, Rules: cfg.TaintRules(), HeartbeatPeriod: time.Second})
	return specs
}

func gpuCondition(s corev1.ConditionStatus, msg ...string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		cd := condition(n, config.DefaultGPUCondition)
		if cd == nil || cd.Status != s {
			return false
		}
		for _, m := range msg {
			if !strings.Contains(cd.Message, m) {
				return false
			}
		}
		return true
	}
}

// TestKernelXid79TaintsWhileNVMLHangs: with no log monitor configured, the
// GPU probe reads the kernel log itself; while every NVML read hangs (the
// probe Unknown) the driver's Xid 79 line in the kernel log fails the GPU
// on the Node and puts the GPU failure taint on it.
func TestKernelXid79TaintsWhileNVMLHangs(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "gpu-kernel-xid"
	cp.CreateNode(t, node, nil)

	f := newGPUFake().withBusIDs()
	hung := f.hangable(t)
	host, kmsg := logmonHost(t, "boot-1")
	specs := runKernelGPUAgent(t, cp, node, f, host)
	if !hasProbe(specs, "logmon-"+config.GPUKernelLogName) {
		t.Fatalf("no probe logmon-%s among %d specs: the GPU probe has no kernel log reader of its own", config.GPUKernelLogName, len(specs))
	}
	waitNode(t, c, node, 20*time.Second, "GPU condition False", gpuCondition(corev1.ConditionFalse))
	hung.Store(true)
	waitNode(t, c, node, 20*time.Second, "the GPU condition Unknown while NVML hangs", gpuCondition(corev1.ConditionUnknown))

	bus := f.Devices[3].(*dgxa100.Device).PciBusID
	appendKmsg(t, kmsg, kmsgRecord(1, -time.Second, nvrmXid79(bus)))
	n := waitNode(t, c, node, 20*time.Second, "the GPU failure taint for the kernel's Xid 79", func(n *corev1.Node) bool {
		return hasTaint(n, gpuFailureTaint) && gpuCondition(corev1.ConditionTrue, "Xid 79")(n)
	})
	want := "GPU 3 (" + f.uuid(3) + "): Xid 79 (GPU has fallen off the bus)"
	if cd := condition(n, config.DefaultGPUCondition); cd.Reason != gpu.ReasonGPURebootRequired || !strings.Contains(cd.Message, want) {
		t.Errorf("condition %s %q, want %s naming %q (the line's bus id %s is GPU 3's)", cd.Reason, cd.Message, gpu.ReasonGPURebootRequired, want, bus)
	}
}

// TestKernelXidCountedOnceFromBothChannels: with NPD's kernel-monitor.json
// reading the kernel log, its lines reach the GPU probe; an Xid 79 NVML
// reported and the kernel logged for the same GPU counts once, and a
// second one only the kernel logged counts again: 2, not 1 (the lines
// not read) nor 3 (counted from both channels). An Xid 94
// NVML reports after the kernel line was read (an OOM line after it made
// its Event) marks a Node version written after the line was filed.
func TestKernelXidCountedOnceFromBothChannels(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "gpu-kernel-xid-once"
	cp.CreateNode(t, node, nil)

	f := newGPUFake().withBusIDs()
	host, kmsg := logmonHost(t, "boot-1")
	kernelMonitor, err := filepath.Abs("../probes/logmon/testdata/npd/kernel-monitor.json")
	if err != nil {
		t.Fatal(err)
	}
	specs := runKernelGPUAgent(t, cp, node, f, host, kernelMonitor)
	if hasProbe(specs, "logmon-"+config.GPUKernelLogName) {
		t.Fatalf("the GPU probe reads the kernel log itself beside kernel-monitor.json: two readers of one log")
	}
	waitNode(t, c, node, 20*time.Second, "GPU condition False", gpuCondition(corev1.ConditionFalse))

	bus := f.Devices[3].(*dgxa100.Device).PciBusID
	f.xid(3, 79)
	waitNode(t, c, node, 20*time.Second, "NVML's Xid 79", gpuCondition(corev1.ConditionTrue, "Xid 79 (GPU has fallen off the bus) at"))
	// The kernel's line of that Xid, then a second occurrence only the
	// kernel logged, then an OOM line whose Event says both were read.
	appendKmsg(t, kmsg, kmsgRecord(1, -time.Second, nvrmXid79(bus)), kmsgRecord(2, -time.Second, nvrmXid79(bus)),
		kmsgRecord(3, -time.Second, "Out of memory: Killed process 77 (after-xid) total-vm:1kB, anon-rss:1kB, file-rss:0kB"))
	waitEvent(t, c, node, "OOMKilling", 20*time.Second, "(after-xid)")
	f.xid(3, 94)
	n := waitNode(t, c, node, 20*time.Second, "Xid 94 after the kernel's Xid 79 lines", gpuCondition(corev1.ConditionTrue, "Xid 94"))
	if msg := condition(n, config.DefaultGPUCondition).Message; !strings.Contains(msg, "Xid 79 (GPU has fallen off the bus) 2 times") {
		t.Errorf("condition message %q, want Xid 79 2 times: NVML's event and the kernel's first line are one Xid, the second line another", msg)
	}
	if st := n.Annotations[agent.StateAnnotation(gpu.NameFatal)]; !strings.Contains(st, `"xid":79`) {
		t.Errorf("state %s holds no Xid 79", st)
	}
}

func hasProbe(specs []agent.ProbeSpec, name string) bool {
	for _, s := range specs {
		if s.Entry.Probe.Name() == name {
			return true
		}
	}
	return false
}

// TestDeadGPUAcceptedAsTheREADMESays: GPU 3 is dead (NVML does not see it)
// and its Xid 79 is known only from the kernel log, as the Xid of a GPU
// NVML did not identify: the node is failed and tainted. The README's
// recipe (expectedGPUs set to the GPUs that work, then `gpu clear --gpu`
// with the dead GPU's PCI address) drops that Xid, the ProbeStateCleared
// event says so, and the taint and the condition lift.
func TestDeadGPUAcceptedAsTheREADMESays(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "gpu-dead-accepted"
	cp.CreateNode(t, node, nil)

	f := newGPUFake().withBusIDs()
	bus := f.Devices[3].(*dgxa100.Device).PciBusID     // as the probe writes PCI addresses
	alive := append(f.Devices[:3:3], f.Devices[4:]...) // GPU 3 is dead: NVML counts the 7 others
	f.DeviceGetCountFunc = func() (int, nvml.Return) { return len(alive), nvml.SUCCESS }
	f.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(alive) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return alive[i], nvml.SUCCESS
	}
	host, kmsg := logmonHost(t, "boot-1")
	runKernelGPUAgentWith(t, cp, node, f, host, "    expectedGPUs: 7\n")
	waitNode(t, c, node, 20*time.Second, "GPU condition False", gpuCondition(corev1.ConditionFalse))

	appendKmsg(t, kmsg, kmsgRecord(1, -time.Second, nvrmXid79(bus))) // logged after the reader started
	waitNode(t, c, node, 20*time.Second, "the GPU failure taint for the dead GPU's Xid 79", func(n *corev1.Node) bool {
		return hasTaint(n, gpuFailureTaint) && gpuCondition(corev1.ConditionTrue, "a GPU NVML did not identify: PCI "+bus, "Xid 79")(n)
	})

	req, err := agent.ClearRequest{Targets: []string{bus}, RequestedAt: time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano), By: t.Name()}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, agent.ClearAnnotation(gpu.NameFatal), req)
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("writing the clear request: %v", err)
	}
	waitEvent(t, c, node, agent.ReasonProbeStateCleared, 20*time.Second, "PCI "+bus, "dropped Xid 79 x1")
	waitNode(t, c, node, 20*time.Second, "the dead GPU accepted: no taint, condition False", func(n *corev1.Node) bool {
		return !hasTaint(n, gpuFailureTaint) && gpuCondition(corev1.ConditionFalse)(n)
	})
}
