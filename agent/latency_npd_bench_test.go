package agent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
)

// startNPDKmsg creates node and starts node-problem-detector v0.8.20 for
// it with kernel-monitor.json, reading a kmsg FIFO of its own (its own
// mount namespace), stopped when b ends (its log shown if b failed); nil,
// said in the log, when NPD or the privilege to mount is missing.
func startNPDKmsg(b *testing.B, cp *testcp.ControlPlane, node string) (*testkit.Process, *testkit.Kmsg) {
	b.Helper()
	bin := os.Getenv("NPD_BIN")
	if bin == "" {
		if root, err := testcp.RepoRoot(); err == nil {
			bin = filepath.Join(root, "bin", "node-problem-detector")
		}
	}
	if _, err := os.Stat(bin); err != nil {
		b.Logf("node-problem-detector not found (%v): its rows are left out; `make npd` builds it", err)
		return nil, nil
	}
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		b.Logf("node-problem-detector's rows need root and unshare(1) to put a FIFO over /dev/kmsg: left out")
		return nil, nil
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
	return npd, kmsg
}

// npdKmsgResult measures node-problem-detector's kernel monitor on the
// lines BenchmarkLatencyKmsg writes: kernel-monitor.json unchanged, NPD's
// own kmsg plugin reading a FIFO bind-mounted over /dev/kmsg in a private
// mount namespace (its reader opens /dev/kmsg by that name), from the
// line to the condition True on the Node watch. NPD never taints, and
// never clears a permanent condition in the process that set it, so each
// NPD process serves one event per condition and is then restarted (its
// start publishes them False again); only the way there is timed. nil,
// said in the log, when NPD or the privilege to mount is missing.
func npdKmsgResult(b *testing.B, cp *testcp.ControlPlane, n int) *latencyResult {
	b.Helper()
	const node = "latency-npd"
	c := cp.Client()
	npd, kmsg := startNPDKmsg(b, cp, node)
	if npd == nil {
		return nil
	}
	nw := newNodeWatcher(b, c, node)
	waitKernelConditionsFalse(b, nw)
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
