package agent_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/probes"
)

// logmonHost is a host root whose kernel booted an hour ago with bootID;
// its /dev/kmsg stands in as a regular file the test appends records to:
// like /dev/kmsg, and unlike a FIFO, every reader (one per NPD file) reads
// every record.
func logmonHost(t *testing.T, bootID string, records ...string) (probes.Host, string) {
	t.Helper()
	root := t.TempDir()
	for path, data := range map[string]string{
		"proc/sys/kernel/random/boot_id": bootID + "\n",
		"proc/uptime":                    "3600.00 100.00\n",
		"dev/kmsg":                       "",
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, data)
	}
	host := probes.Host{Root: root}
	kmsg := host.Path("/dev/kmsg")
	appendKmsg(t, kmsg, records...)
	return host, kmsg
}

// kmsgRecord is a kmsg record logged ago before the fixture's boot +
// uptime (roughly now).
func kmsgRecord(seq int, ago time.Duration, msg string) string {
	return fmt.Sprintf("6,%d,%d,-;%s\n", seq, (time.Hour - ago).Microseconds(), msg)
}

// appendKmsg appends records, one write each, as the kernel logs them.
func appendKmsg(t *testing.T, path string, records ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range records {
		if _, err := io.WriteString(f, r); err != nil {
			t.Fatal(err)
		}
	}
}

// logmonSpecs builds node-problem-detector's kernel-monitor.json and
// readonly-monitor.json, unchanged, reading host's kernel log.
func logmonSpecs(t *testing.T, host probes.Host) []agent.ProbeSpec {
	t.Helper()
	return npdLogSpecs(t, host, "kernel-monitor.json", "readonly-monitor.json")
}

// npdLogSpecs builds the NPD system-log-monitor files named (in
// probes/logmon/testdata/npd), unchanged, reading host's logs.
func npdLogSpecs(t *testing.T, host probes.Host, names ...string) []agent.ProbeSpec {
	t.Helper()
	var files []string
	for _, f := range names {
		p, err := filepath.Abs(filepath.Join("../probes/logmon/testdata/npd", f))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf("checks:\n  npdLogConfigs: [%s]\n", strings.Join(files, ", "))))
	if err != nil {
		t.Fatal(err)
	}
	specs, closer, err := cfg.CheckProbeSpecsOn(host, slog.Default())
	if err != nil {
		t.Fatalf("CheckProbeSpecsOn: %v", err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	return specs
}

func conditionWas(n *corev1.Node, typ corev1.NodeConditionType, s corev1.ConditionStatus, reason string) bool {
	c := condition(n, typ)
	return c != nil && c.Status == s && (reason == "" || c.Reason == reason)
}

// TestKernelLogMonitorOnTheNode runs NPD's kernel-monitor.json and
// readonly-monitor.json unchanged through the agent against a real
// kube-apiserver: kernel log lines set KernelDeadlock and
// ReadonlyFilesystem on the Node and record OOMKilling and TaskHung
// Events, and lost records a KernelLogOverrun Event; after a restart in the same boot the conditions hold (their
// lines are past lookback now, so only the kept state can hold them), and
// after a reboot they clear. An Event recorded before the restart is not
// recorded again for its line read again within lookback.
func TestKernelLogMonitorOnTheNode(t *testing.T) {
	const (
		node = "logmon"
		hung = "INFO: task docker:1234 blocked for more than 120 seconds."
		oom  = "Out of memory: Killed process 4242 (stress) total-vm:1048576kB, anon-rss:1000000kB, file-rss:0kB, shmem-rss:0kB"
		ro   = "EXT4-fs (sda1): Remounting filesystem read-only"
	)
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	cp.CreateNode(t, node, nil)

	host, kmsg := logmonHost(t, "boot-1")
	_, stop := startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: logmonSpecs(t, host)})
	waitNode(t, c, node, 30*time.Second, "the log monitor's conditions False", func(n *corev1.Node) bool {
		return conditionWas(n, "KernelDeadlock", corev1.ConditionFalse, "KernelHasNoDeadlock") &&
			conditionWas(n, "ReadonlyFilesystem", corev1.ConditionFalse, "FilesystemIsNotReadOnly")
	})
	appendKmsg(t, kmsg, kmsgRecord(1, 2*time.Second, hung), kmsgRecord(2, time.Second, ro), kmsgRecord(3, time.Second, oom))
	n := waitNode(t, c, node, 30*time.Second, "KernelDeadlock and ReadonlyFilesystem True", func(n *corev1.Node) bool {
		return conditionWas(n, "KernelDeadlock", corev1.ConditionTrue, "DockerHung") &&
			conditionWas(n, "ReadonlyFilesystem", corev1.ConditionTrue, "FilesystemIsReadOnly")
	})
	if got := condition(n, "KernelDeadlock").Message; got != hung {
		t.Errorf("KernelDeadlock message %q, want the line %q", got, hung)
	}
	if !conditionWas(n, "XfsShutdown", corev1.ConditionFalse, "XfsHasNotShutDown") {
		t.Errorf("XfsShutdown: %+v, want False XfsHasNotShutDown", condition(n, "XfsShutdown"))
	}
	waitEvent(t, c, node, "TaskHung", 30*time.Second, hung)
	waitEvent(t, c, node, "OOMKilling", 30*time.Second, "Killed process 4242 (stress)")
	// Records the kernel overwrote before they were read: said in an Event.
	appendKmsg(t, kmsg, kmsgRecord(10, 0, "eth0: link up"))
	waitEvent(t, c, node, "KernelLogOverrun", 30*time.Second, "kernel-monitor: ", "6 kernel log records after sequence 3 were overwritten")
	waitNode(t, c, node, 30*time.Second, "the held conditions' state and the Events reported on the Node", func(n *corev1.Node) bool {
		return strings.Contains(n.Annotations[agent.StateAnnotationPrefix+"logmon-KernelDeadlock"], `"eventsThrough":{"seq":3,`) &&
			n.Annotations[agent.StateAnnotationPrefix+"logmon-ReadonlyFilesystem"] != ""
	})
	stop()

	// A restart in the same boot, the conditions' lines now 10 minutes old
	// (past the files' 5m lookback): only the state brings the conditions
	// back. The OOM line, a minute old, is read again within lookback: its
	// Event was recorded before the restart and is not recorded again. A
	// fresh OOM line shows the new agent has run and written.
	old := []string{kmsgRecord(1, 10*time.Minute, hung), kmsgRecord(2, 10*time.Minute, ro), kmsgRecord(3, time.Minute, oom)}
	host, kmsg = logmonHost(t, "boot-1", old...)
	_, stop = startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: logmonSpecs(t, host)})
	appendKmsg(t, kmsg, kmsgRecord(4, 0, "Out of memory: Killed process 4343 (after-restart) total-vm:1kB, anon-rss:1kB, file-rss:0kB"))
	waitEvent(t, c, node, "OOMKilling", 30*time.Second, "(after-restart)")
	var stress []corev1.Event
	for _, e := range nodeEvents(t, c, node, "OOMKilling") {
		if strings.Contains(e.Message, "(stress)") {
			stress = append(stress, e)
		}
	}
	if len(stress) != 1 || stress[0].Count != 1 {
		t.Errorf("OOMKilling Events of the line read before and after the restart: %d (%+v), want one, counted once", len(stress), stress)
	}
	n = getNode(t, c, node)
	if !conditionWas(n, "KernelDeadlock", corev1.ConditionTrue, "DockerHung") || !conditionWas(n, "ReadonlyFilesystem", corev1.ConditionTrue, "FilesystemIsReadOnly") {
		t.Errorf("after a restart in the same boot: KernelDeadlock %+v, ReadonlyFilesystem %+v, want both still True", condition(n, "KernelDeadlock"), condition(n, "ReadonlyFilesystem"))
	}
	if evs := nodeEvents(t, c, node, "TaskHung"); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("TaskHung events after the restart: %d (first count %v), want the one from before: old lines are not new", len(evs), evs)
	}
	stop()

	// A reboot: a new boot id, the same old state on the Node.
	host, _ = logmonHost(t, "boot-2")
	startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: logmonSpecs(t, host)})
	waitNode(t, c, node, 30*time.Second, "the conditions False after a reboot", func(n *corev1.Node) bool {
		return conditionWas(n, "KernelDeadlock", corev1.ConditionFalse, "KernelHasNoDeadlock") &&
			conditionWas(n, "ReadonlyFilesystem", corev1.ConditionFalse, "FilesystemIsNotReadOnly")
	})
}
