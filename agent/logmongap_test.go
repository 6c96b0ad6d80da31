package agent_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
)

// TestKernelLogOverrunLosesNoLaterLine: records the kernel overwrote
// before they were read are said in a KernelLogOverrun Event, and the
// first record still there after them, a read-only remount, sets
// ReadonlyFilesystem on the Node.
func TestKernelLogOverrunLosesNoLaterLine(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "logmon-overrun"
	cp.CreateNode(t, node, nil)
	host, kmsg := logmonHost(t, "boot-1")
	startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: logmonSpecs(t, host)})
	waitNode(t, c, node, 30*time.Second, "ReadonlyFilesystem False", func(n *corev1.Node) bool {
		return conditionWas(n, "ReadonlyFilesystem", corev1.ConditionFalse, "FilesystemIsNotReadOnly")
	})
	appendKmsg(t, kmsg, kmsgRecord(1, -time.Second, "eth0: link up"), kmsgRecord(40, -time.Second, "EXT4-fs (sda1): Remounting filesystem read-only"))
	waitEvent(t, c, node, "KernelLogOverrun", 30*time.Second, "38 kernel log records after sequence 1 were overwritten")
	waitNode(t, c, node, 30*time.Second, "ReadonlyFilesystem True from the record after the overrun", func(n *corev1.Node) bool {
		return conditionWas(n, "ReadonlyFilesystem", corev1.ConditionTrue, "FilesystemIsReadOnly")
	})
}

// TestFilelogRotationLosesNoLine: NPD's kernel-monitor-filelog.json over
// /var/log/kern.log under the host root. The log is rotated the way a
// syslog daemon does it (renamed, the last lines still written to the
// renamed file, a new file under the name): the old file's last line, a
// hung docker task, sets KernelDeadlock; the new file's first line, an
// OOM kill, is recorded as an Event; the rotation as LogRotated.
func TestFilelogRotationLosesNoLine(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "logmon-rotation"
	cp.CreateNode(t, node, nil)
	host, _ := logmonHost(t, "boot-1")
	klog := host.Path("/var/log/kern.log")
	if err := os.MkdirAll(filepath.Dir(klog), 0o755); err != nil {
		t.Fatal(err)
	}
	line := func(msg string) string {
		return fmt.Sprintf("%s node1 kernel: [3600.0] %s\n", time.Now().Format("Jan _2 15:04:05"), msg)
	}
	writeFile(t, klog, line("eth0: link up"))
	path, err := filepath.Abs("../probes/logmon/testdata/npd/kernel-monitor-filelog.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf("checks:\n  npdLogConfigs: [%s]\n", path)))
	if err != nil {
		t.Fatal(err)
	}
	specs, logs, err := cfg.CheckProbeSpecsOn(host, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logs.Close() })
	startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: specs})
	waitNode(t, c, node, 30*time.Second, "KernelDeadlock False", func(n *corev1.Node) bool {
		return conditionWas(n, "KernelDeadlock", corev1.ConditionFalse, "KernelHasNoDeadlock")
	})

	const hung = "INFO: task docker:1234 blocked for more than 120 seconds."
	if err := os.Rename(klog, klog+".1"); err != nil {
		t.Fatal(err)
	}
	appendKmsg(t, klog+".1", line(hung)) // the daemon's open file, until it reopens
	writeFile(t, klog, line("Out of memory: Killed process 4545 (rotated) total-vm:1kB, anon-rss:1kB, file-rss:0kB"))
	waitEvent(t, c, node, "LogRotated", 30*time.Second, "kern.log was rotated")
	waitNode(t, c, node, 30*time.Second, "KernelDeadlock True from the old file's last line", func(n *corev1.Node) bool {
		return conditionWas(n, "KernelDeadlock", corev1.ConditionTrue, "DockerHung")
	})
	waitEvent(t, c, node, "OOMKilling", 30*time.Second, "(rotated)")
}
