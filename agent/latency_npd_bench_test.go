package agent_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent/testcp"
)

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
	bin := os.Getenv("NPD_BIN")
	if bin == "" {
		if root, err := testcp.RepoRoot(); err == nil {
			bin = filepath.Join(root, "bin", "node-problem-detector")
		}
	}
	if _, err := os.Stat(bin); err != nil {
		b.Logf("node-problem-detector not found (%v): its row is left out; `make npd` builds it", err)
		return nil
	}
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		b.Logf("node-problem-detector's row needs root and unshare(1) to put a FIFO over /dev/kmsg: left out")
		return nil
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		b.Fatal(err)
	}
	const node = "latency-npd"
	c := cp.Client()
	cp.CreateNode(b, node, nil)
	dir := b.TempDir()
	// Stamped against the boot NPD's reader takes: now less sysinfo's uptime.
	kmsg := newKmsgFIFO(b, dir, time.Now().Add(-time.Duration(si.Uptime)*time.Second))
	npd := &npdProcess{b: b, bin: bin, dir: dir, kmsg: kmsg.path, args: []string{
		"--hostname-override=" + node,
		"--apiserver-override=" + cp.RESTConfig().Host + "?inClusterConfig=false&auth=" + cp.KubeconfigPath,
		"--config.system-log-monitor=" + kernelMonitorJSON(b),
		"--address=127.0.0.1", "--port=" + freeLocalPort(b),
		"--prometheus-address=127.0.0.1", "--prometheus-port=" + freeLocalPort(b),
	}}
	npd.start()
	b.Cleanup(func() {
		npd.stop()
		if b.Failed() {
			out, _ := os.ReadFile(npd.logPath)
			b.Logf("node-problem-detector's log (%s):\n%s", npd.logPath, tail(string(out), 4000))
		}
	})
	nw := newNodeWatcher(b, c, node)
	waitKernelConditionsFalse(b, nw)
	res := measure(b, nw, "NPD v0.8.20 kmsg line (condition)", "npd", n, latencyEvent{
		spread: time.Second, // NPD's condition sync period
		cause:  func(i int) { kmsg.write(b, kernelLines[i%len(kernelLines)].line(i)) },
		on: func(i int, n *corev1.Node) bool {
			cd := condition(n, kernelLines[i%len(kernelLines)].cond)
			return cd != nil && cd.Status == corev1.ConditionTrue
		},
		clear: func(i int) {
			if i%len(kernelLines) == len(kernelLines)-1 {
				npd.stop()
				npd.start()
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

// npdProcess is node-problem-detector in a mount namespace of its own
// whose /dev/kmsg is the benchmark's FIFO.
type npdProcess struct {
	b        *testing.B
	bin, dir string
	kmsg     string
	args     []string
	cmd      *exec.Cmd
	exited   chan struct{}
	starts   int
	logPath  string
}

func (p *npdProcess) start() {
	p.b.Helper()
	p.starts++
	p.logPath = filepath.Join(p.dir, "npd-"+strconv.Itoa(p.starts)+".log")
	f, err := os.Create(p.logPath)
	if err != nil {
		p.b.Fatal(err)
	}
	args := append([]string{"-m", "--propagation", "private", "sh", "-c", `mount --bind "$0" /dev/kmsg && exec "$@"`, p.kmsg, p.bin}, p.args...)
	p.cmd = exec.Command("unshare", args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		p.b.Fatalf("starting node-problem-detector: %v", err)
	}
	p.exited = make(chan struct{})
	cmd, exited := p.cmd, p.exited
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(exited)
	}()
}

// stop ends the process (SIGTERM, SIGKILL after 10 s); it is a no-op for
// one already stopped.
func (p *npdProcess) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

func freeLocalPort(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
