package agent_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
)

// startNPDOnKmsg creates node and starts node-problem-detector (NPD_BIN,
// else bin/ of the repository) on it with kernel-monitor.json unchanged,
// NPD's own kmsg plugin reading a testkit.Kmsg FIFO bind-mounted over
// /dev/kmsg in a private mount namespace (its reader opens /dev/kmsg by
// that name), stamped against the boot NPD's reader takes; it returns
// once a watch of the Node has seen NPD's kernel conditions False. The
// end of the test stops NPD, with the end of its log when the test
// failed. An error, and nothing started, when NPD or the privilege to
// mount is missing.
func startNPDOnKmsg(b *testing.B, cp *testcp.ControlPlane, node string) (*testkit.Process, *testkit.Kmsg, *nodeWatcher, error) {
	b.Helper()
	bin := os.Getenv("NPD_BIN")
	if bin == "" {
		if root, err := testcp.RepoRoot(); err == nil {
			bin = filepath.Join(root, "bin", "node-problem-detector")
		}
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, nil, nil, fmt.Errorf("node-problem-detector not found (%w); `make npd` builds it", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		return nil, nil, nil, errors.New("node-problem-detector needs root and unshare(1) to put a FIFO over /dev/kmsg")
	}
	cp.CreateNode(b, node, nil)
	dir := b.TempDir()
	// Stamped against the boot NPD's reader takes: now less sysinfo's uptime.
	kmsg := testkit.NewKmsg(testkit.SysinfoBoot(b))
	fifo := kmsg.FIFO(b, filepath.Join(dir, "kmsg"), 0o600)
	npd := &testkit.Process{Name: "npd", Dir: dir, Argv: testkit.KmsgNamespace(fifo, bin,
		"--hostname-override="+node,
		"--apiserver-override="+cp.RESTConfig().Host+"?inClusterConfig=false&auth="+cp.KubeconfigPath,
		"--config.system-log-monitor="+kernelMonitorJSON(b),
		"--address=127.0.0.1", "--port="+testkit.FreePort(b),
		"--prometheus-address=127.0.0.1", "--prometheus-port="+testkit.FreePort(b),
	)}
	npd.Start(b)
	b.Cleanup(func() {
		npd.Stop()
		if b.Failed() {
			b.Logf("node-problem-detector's log:\n%s", testkit.Tail(npd.Log(), 4000))
		}
	})
	nw := newNodeWatcher(b, cp.Client(), node)
	waitKernelConditionsFalse(b, nw)
	return npd, kmsg, nw, nil
}

// npdKmsgResult measures node-problem-detector's kernel monitor on the
// lines BenchmarkLatencyKmsg writes (startNPDOnKmsg), from the line to the
// condition True on the Node watch. NPD never taints, and never clears a
// permanent condition in the process that set it, so each NPD process
// serves one event per condition and is then restarted (its start
// publishes them False again); only the way there is timed. nil, said in
// the log, when NPD or the privilege to mount is missing.
func npdKmsgResult(b *testing.B, cp *testcp.ControlPlane, n int) *latencyResult {
	b.Helper()
	const node = "latency-npd"
	npd, kmsg, nw, err := startNPDOnKmsg(b, cp, node)
	if err != nil {
		b.Logf("%v: its row is left out", err)
		return nil
	}
	res := measure(b, nw, "NPD v0.8.20 kmsg line (condition)", "npd", n, latencyEvent{
		spread: time.Second, // NPD's condition sync period
		cause:  func(i int) { kmsg.Write(b, kernelLines[i%len(kernelLines)].line(i)) },
		on: func(i int, n *corev1.Node) bool {
			cd := condition(n, kernelLines[i%len(kernelLines)].cond)
			return cd != nil && cd.Status == corev1.ConditionTrue
		},
		clear: func(i int) {
			if i%len(kernelLines) == len(kernelLines)-1 {
				npd.Restart(b)
			}
		},
		cleared: func(i int, n *corev1.Node) bool {
			if i%len(kernelLines) != len(kernelLines)-1 {
				return true
			}
			for _, l := range kernelLines {
				if cd := condition(n, l.cond); cd == nil || cd.Status != corev1.ConditionFalse {
					return false
				}
			}
			return true
		},
	})
	res.down = nil // restarts, not clears
	return &res
}
