package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/selftaint/selftaint/agent/testcp"
)

// npdHint says how to get the node-problem-detector binary the CPU
// benchmark compares against.
const npdHint = "build it with `make npd` (node-problem-detector from the Go module proxy, into bin/) or point $NPD_BIN at it"

// benchCheck is the check both sides run: node-problem-detector's custom
// plugin protocol, one permanent rule every 10 s (the interval of NPD's
// shipped health checkers), a plugin that prints one line and exits 0. Both
// load this very file (selftaint through checks.npdConfigs).
const benchCheck = `{
  "plugin": "custom",
  "pluginConfig": {
    "invoke_interval": "10s",
    "timeout": "5s",
    "max_output_length": 80,
    "concurrency": 1,
    "enable_message_change_based_condition_update": false
  },
  "source": "bench-custom-plugin-monitor",
  "metricsReporting": true,
  "conditions": [
    {"type": "BenchCheckProblem", "reason": "BenchCheckIsUp", "message": "the bench check passes"}
  ],
  "rules": [
    {"type": "permanent", "condition": "BenchCheckProblem", "reason": "BenchCheckFailed", "path": "%s", "timeout": "5s"}
  ]
}
`

// BenchmarkAgentCPUAgainstNPD measures the steady-state CPU time of
// `selftaint agent` against node-problem-detector's, side by side in one
// run: the same etcd and kube-apiserver, the same window, the same check.
//
// Three processes run at once, each on its own Node:
//
//   - npd: node-problem-detector (its k8s exporter on, heartbeat 5m, its
//     Prometheus and health endpoints on loopback as it serves them by
//     default) running the check above as its only monitor;
//   - selftaint-check: `selftaint agent` running the same file through
//     checks.npdConfigs, its built-in probes off (memory, disk, pid,
//     network, gpu): the same check, the same work;
//   - selftaint-defaults: `selftaint agent` with its default config (the
//     memory, disk, pid and network probes every 10 s, the hardware
//     inventory, initialization) plus the same file: what a DaemonSet
//     runs. NPD runs nothing more, so this ratio is the one that favours
//     NPD.
//
// Both selftaint agents log at info and serve /metrics on loopback, as the
// DaemonSet runs them. Nothing changes on the Nodes: it is the idle loop
// (NPD cannot taint, so there is nothing else to compare). After they have
// all published their condition and settled (60 s), it reads each
// process's CPU time at the start and the end of the window (all its
// threads, not the plugins it runs: they are its children): the run time of
// each thread in nanoseconds (schedstat), and utime + stime of
// /proc/PID/stat, the same total in 1/100 s, beside it. It reports the
// seconds of each, the ratios selftaint/NPD, the load average and how many
// times each Node changed in the window.
//
// The window is 10 minutes; $CPU_WINDOW (a Go duration) changes it. It is
// a measurement, never run by `make test` (a benchmark) and never failing
// on the figures: `make cpu` runs it.
//
//	make deps npd && NPD_BIN=$PWD/bin/node-problem-detector KUBE_BIN_DIR=$PWD/bin \
//	  go test -run '^$' -bench AgentCPUAgainstNPD -benchtime 1x -timeout 30m ./cmd/selftaint/
func BenchmarkAgentCPUAgainstNPD(b *testing.B) {
	window := cpuWindow(b)
	npdBin := npdBinary(b)
	bin := buildAsMake(b)
	cp := testcp.Start(b, testcp.Options{})
	dir := b.TempDir()
	check := writeBenchCheck(b, dir)
	sameCfg := writeBenchFile(b, dir, "check-only.yaml", `probes:
  memory: {enabled: false}
  disk: {enabled: false}
  pid: {enabled: false}
  network: {enabled: false}
  gpu: {enabled: false}
checks:
  npdConfigs: [`+check+`]
`)
	defaultsCfg := writeBenchFile(b, dir, "defaults.yaml", "checks:\n  npdConfigs: ["+check+"]\n")

	subjects := []*cpuSubject{
		{name: "npd", node: "cpu-npd", bin: npdBin, args: []string{
			"--hostname-override=cpu-npd",
			"--apiserver-override=" + cp.RESTConfig().Host + "?inClusterConfig=false&auth=" + cp.KubeconfigPath,
			"--config.custom-plugin-monitor=" + check,
			"--address=127.0.0.1", "--port=" + freePort(b),
			"--prometheus-address=127.0.0.1", "--prometheus-port=" + freePort(b),
		}},
		{name: "selftaint-check", node: "cpu-selftaint-check", bin: bin, args: []string{
			"agent", "--node-name=cpu-selftaint-check", "--kubeconfig=" + cp.KubeconfigPath, "--config=" + sameCfg,
			"--metrics-address=127.0.0.1:0",
		}},
		{name: "selftaint-defaults", node: "cpu-selftaint-defaults", bin: bin, args: []string{
			"agent", "--node-name=cpu-selftaint-defaults", "--kubeconfig=" + cp.KubeconfigPath, "--config=" + defaultsCfg,
			"--metrics-address=127.0.0.1:0",
		}},
	}
	for _, s := range subjects {
		cp.CreateNode(b, s.node, nil)
	}
	for _, s := range subjects {
		s.start(b, dir)
	}
	for i := 0; i < b.N; i++ {
		// Settle: every process has published the check's condition, then
		// 60 s more (selftaint sheds its start-up memory 30 s after its
		// first sync; NPD's first resync is 10 s after its first write).
		for _, s := range subjects {
			waitCondition(b, cp, s.node, "BenchCheckProblem", s.alive)
		}
		sleepWhileAlive(b, subjects, 60*time.Second)

		changes, load0, load1 := measureWindow(b, cp, subjects, window)

		npd := subjects[0]
		b.Logf("window %s; load average (1, 5, 15 min) at its start %s, at its end %s", window, load0, load1)
		for _, s := range subjects {
			b.Logf("%-18s %8.4f s CPU (%.4f%% of a core; /proc/PID/stat: %.2f s), %.3fx NPD's; %.1f wake-ups a minute; its Node changed %d times",
				s.name, s.used, 100*s.used/window.Seconds(), s.usedTicks, s.used/npd.used, s.wakesPerMinute(window), changes[s.node])
			b.ReportMetric(s.used, s.name+"-cpu-s")
		}
		b.ReportMetric(subjects[1].used/npd.used, "check/npd")
		b.ReportMetric(subjects[2].used/npd.used, "defaults/npd")
	}
}

// BenchmarkKernelLogCPUAgainstNPD is BenchmarkAgentCPUAgainstNPD for the
// kernel-log monitor: four processes side by side in one run on one API
// server, each on its own Node, all reading the host's /dev/kmsg (root
// needed), over a quiet window (nothing written to it by the benchmark):
//
//   - npd-kernel: node-problem-detector with
//     --config.system-log-monitor=kernel-monitor.json;
//   - selftaint-kernel: `selftaint agent`, its probes off, reading the same
//     file (checks.npdLogConfigs): target <= 0.8x npd-kernel;
//   - npd-shipped: node-problem-detector with kernel-monitor.json and
//     readonly-monitor.json;
//   - selftaint-shipped: the agent with deploy/kernel-log/config.yaml (its
//     default probes, hardware, initialization, faults, coordinator
//     watches, and the same two files): target <= 1.0x npd-shipped.
//
// It logs each one's CPU seconds, its ratio to its NPD, and its wake-ups
// (voluntary context switches) a minute. $CPU_WINDOW sets the window
// (default 10 minutes), $CPU_SETTLE the settling time (default 60 s).
//
//	NPD_BIN=$PWD/bin/node-problem-detector KUBE_BIN_DIR=$PWD/bin CPU_WINDOW=3m \
//	  go test -run '^$' -bench KernelLogCPUAgainstNPD -benchtime 1x -timeout 30m ./cmd/selftaint/
func BenchmarkKernelLogCPUAgainstNPD(b *testing.B) {
	window := cpuWindow(b)
	npdBin := npdBinary(b)
	if _, err := os.Stat("/dev/kmsg"); err != nil || os.Geteuid() != 0 {
		b.Fatalf("reading /dev/kmsg needs root and the device: %v", err)
	}
	bin := buildAsMake(b)
	cp := testcp.Start(b, testcp.Options{})
	dir := b.TempDir()
	root, err := testcp.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	kernel := filepath.Join(root, "deploy", "kernel-log", "npd", "kernel-monitor.json")
	readonly := filepath.Join(root, "deploy", "kernel-log", "npd", "readonly-monitor.json")
	kernelCfg := writeBenchFile(b, dir, "kernel.yaml", `probes:
  memory: {enabled: false}
  disk: {enabled: false}
  pid: {enabled: false}
  network: {enabled: false}
  gpu: {enabled: false}
checks:
  npdLogConfigs: [`+kernel+`]
  kmsgPath: /dev/kmsg
`)
	shipped, err := os.ReadFile(filepath.Join(root, "deploy", "kernel-log", "config.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	shippedText := strings.NewReplacer("/etc/selftaint/kernel-monitor.json", kernel, "/etc/selftaint/readonly-monitor.json", readonly).Replace(string(shipped))
	shippedCfg := writeBenchFile(b, dir, "shipped.yaml", shippedText)
	npdArgs := func(node, monitors string) []string {
		return []string{
			"--hostname-override=" + node,
			"--apiserver-override=" + cp.RESTConfig().Host + "?inClusterConfig=false&auth=" + cp.KubeconfigPath,
			"--config.system-log-monitor=" + monitors,
			"--address=127.0.0.1", "--port=" + freePort(b),
			"--prometheus-address=127.0.0.1", "--prometheus-port=" + freePort(b),
		}
	}
	agentArgs := func(node, cfg string) []string {
		return []string{"agent", "--node-name=" + node, "--kubeconfig=" + cp.KubeconfigPath, "--config=" + cfg, "--metrics-address=127.0.0.1:0"}
	}
	subjects := []*cpuSubject{
		{name: "npd-kernel", node: "kl-npd-kernel", bin: npdBin, args: npdArgs("kl-npd-kernel", kernel)},
		{name: "selftaint-kernel", node: "kl-selftaint-kernel", bin: bin, args: agentArgs("kl-selftaint-kernel", kernelCfg)},
		{name: "npd-shipped", node: "kl-npd-shipped", bin: npdBin, args: npdArgs("kl-npd-shipped", kernel+","+readonly)},
		{name: "selftaint-shipped", node: "kl-selftaint-shipped", bin: bin, args: agentArgs("kl-selftaint-shipped", shippedCfg)},
	}
	for _, s := range subjects {
		cp.CreateNode(b, s.node, nil)
	}
	for _, s := range subjects {
		s.start(b, dir)
	}
	for i := 0; i < b.N; i++ {
		for _, s := range subjects {
			waitCondition(b, cp, s.node, "KernelDeadlock", s.alive)
		}
		sleepWhileAlive(b, subjects, cpuSettle(b))
		changes, load0, load1 := measureWindow(b, cp, subjects, window)
		b.Logf("window %s; load average (1, 5, 15 min) at its start %s, at its end %s", window, load0, load1)
		for j, s := range subjects {
			npd := subjects[j&^1]
			b.Logf("%-18s %8.4f s CPU (/proc/PID/stat: %.2f s), %.3fx %s's; %.1f wake-ups a minute (%.1f involuntary); its Node changed %d times",
				s.name, s.used, s.usedTicks, s.used/npd.used, npd.name, s.wakesPerMinute(window), float64(s.involuntary)/window.Minutes(), changes[s.node])
			b.ReportMetric(s.used, s.name+"-cpu-s")
			b.ReportMetric(s.wakesPerMinute(window), s.name+"-wakes/min")
		}
		b.ReportMetric(subjects[1].used/subjects[0].used, "kernel/npd")
		b.ReportMetric(subjects[3].used/subjects[2].used, "shipped/npd")
	}
}

// idleProfileHz is the CPU profile's sampling rate: an idle agent uses
// about a millisecond of CPU a second, so pprof's 100 Hz would take a
// sample every few seconds.
const idleProfileHz = 1000

// BenchmarkAgentIdleProfile takes a CPU profile of the agent's idle loop:
// `selftaint agent` run in this process against a real API server,
// profiled at 1000 Hz over the window once it has settled (start-up is
// left out). The profile goes to $CPU_PROFILE; the window is $CPU_WINDOW
// (default 10 minutes).
//
// The agent's config is the default one plus the benchmark's check
// (selftaint-defaults of BenchmarkAgentCPUAgainstNPD), or the file
// $CPU_PROFILE_CONFIG names, with ${REPO} in it replaced by the
// repository's root and ${KMSG} by a FIFO standing in for /dev/kmsg (held
// open for writing, nothing written: a quiet kernel log); the benchmark
// then waits for the condition $CPU_PROFILE_CONDITION (default
// KernelDeadlock) before it settles. Beside the profile it logs what load
// does not distort: the wake-ups of the process (voluntary context
// switches of all its threads, /proc/self/task/*/status) per minute of the
// window, and its CPU seconds (schedstat).
//
//	CPU_PROFILE=/tmp/idle.pprof KUBE_BIN_DIR=$PWD/bin go test -run '^$' -bench AgentIdleProfile -benchtime 1x -timeout 30m ./cmd/selftaint/
//	CPU_PROFILE_CONFIG=$PWD/cmd/selftaint/testdata/cpu/kernel-monitor.yaml CPU_PROFILE=/tmp/kmsg.pprof ... (the same)
//	go tool pprof -top /tmp/idle.pprof
func BenchmarkAgentIdleProfile(b *testing.B) {
	out := os.Getenv("CPU_PROFILE")
	if out == "" {
		b.Fatal("set CPU_PROFILE to the file the profile goes to")
	}
	window := cpuWindow(b)
	cp := testcp.Start(b, testcp.Options{})
	dir := b.TempDir()
	cfg, cond := idleProfileConfig(b, dir)
	const node = "idle"
	cp.CreateNode(b, node, nil)
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		b.Fatal(err)
	}
	// The agent alone in this process, as in its own: it tunes the runtime
	// (GOMAXPROCS, GC percent) as main's agent does.
	ctx, cancel := context.WithCancel(withRuntimeTuning(context.Background()))
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"agent", "--node-name=" + node, "--kubeconfig=" + cp.KubeconfigPath, "--config=" + cfg,
			"--metrics-address=127.0.0.1:0"}, io.Discard, logf)
	}()
	b.Cleanup(func() {
		cancel()
		<-exited
		_ = logf.Close()
	})
	alive := func(b *testing.B) {
		select {
		case code := <-exited:
			exited <- code
			log, _ := os.ReadFile(logf.Name())
			b.Fatalf("the agent exited with %d; its log:\n%s", code, log)
		default:
		}
	}
	self := &cpuSubject{name: "agent", pid: os.Getpid()}
	for i := 0; i < b.N; i++ {
		waitCondition(b, cp, node, cond, alive)
		time.Sleep(cpuSettle(b))
		alive(b)
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		load0 := loadAvg(b)
		self.begin(b)
		runtime.SetCPUProfileRate(idleProfileHz) // before StartCPUProfile, whose 100 Hz then does not apply
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		stopTrace := idleTrace(b)
		time.Sleep(window)
		stopTrace()
		pprof.StopCPUProfile()
		self.end(b)
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		alive(b)
		b.Logf("CPU profile of %s of the idle agent at %d Hz: %s", window, idleProfileHz, out)
		b.Logf("window %s; load average at its start %s, at its end %s; %s", window, load0, loadAvg(b), self.summary(window))
		b.ReportMetric(self.wakesPerMinute(window), "wakes/min")
	}
}

// idleProfileConfig writes the config BenchmarkAgentIdleProfile runs (see
// there) into dir and returns its path and the condition to wait for.
func idleProfileConfig(b *testing.B, dir string) (string, corev1.NodeConditionType) {
	path := os.Getenv("CPU_PROFILE_CONFIG")
	if path == "" {
		return writeBenchFile(b, dir, "defaults.yaml", "checks:\n  npdConfigs: ["+writeBenchCheck(b, dir)+"]\n"), "BenchCheckProblem"
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("CPU_PROFILE_CONFIG: %v", err)
	}
	root, err := testcp.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	text := string(raw)
	if strings.Contains(text, "${KMSG}") {
		text = strings.ReplaceAll(text, "${KMSG}", quietKmsgFIFO(b, dir))
	}
	text = strings.ReplaceAll(text, "${REPO}", root)
	cond := corev1.NodeConditionType(os.Getenv("CPU_PROFILE_CONDITION"))
	if cond == "" {
		cond = "KernelDeadlock"
	}
	return writeBenchFile(b, dir, "profiled.yaml", text), cond
}

// quietKmsgFIFO makes a FIFO in dir standing in for /dev/kmsg, held open
// for writing until the benchmark ends (a reader blocks in read, as on the
// kernel's log), with nothing written, and returns its path.
func quietKmsgFIFO(b *testing.B, dir string) string {
	path := filepath.Join(dir, "kmsg")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		b.Fatalf("mkfifo: %v", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0) // O_RDWR: no wait for a reader, never end of file
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })
	return path
}

// idleTrace starts an execution trace (runtime/trace) into $CPU_TRACE, if
// set, and returns what stops it: every goroutine's wake-up with its stack,
// for `go tool trace`.
func idleTrace(b *testing.B) func() {
	path := os.Getenv("CPU_TRACE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := trace.Start(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		trace.Stop()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuSettle is $CPU_SETTLE, else 60 s: the time from the first condition
// to the window's start.
func cpuSettle(b *testing.B) time.Duration {
	s := os.Getenv("CPU_SETTLE")
	if s == "" {
		return 60 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		b.Fatalf("CPU_SETTLE=%q: want a Go duration such as 30s", s)
	}
	return d
}

// measureWindow reads each subject's CPU over window (begin, end) and
// returns how many times each one's Node changed meanwhile and the load
// average at the window's start and end.
func measureWindow(b *testing.B, cp *testcp.ControlPlane, subjects []*cpuSubject, window time.Duration) (changes map[string]int, load0, load1 string) {
	b.Helper()
	counts := watchNodeChanges(b, cp, subjects)
	load0 = loadAvg(b)
	for _, s := range subjects {
		s.begin(b)
	}
	sleepWhileAlive(b, subjects, window)
	for _, s := range subjects {
		s.end(b)
	}
	return counts(), load0, loadAvg(b)
}

// cpuWindow is $CPU_WINDOW, else 10 minutes.
func cpuWindow(b *testing.B) time.Duration {
	w := os.Getenv("CPU_WINDOW")
	if w == "" {
		return 10 * time.Minute
	}
	d, err := time.ParseDuration(w)
	if err != nil || d <= 0 {
		b.Fatalf("CPU_WINDOW=%q: want a positive Go duration such as 2m", w)
	}
	return d
}

// npdBinary is $NPD_BIN, else <repo>/bin/node-problem-detector.
func npdBinary(b *testing.B) string {
	path := os.Getenv("NPD_BIN")
	if path == "" {
		if root, err := testcp.RepoRoot(); err == nil {
			path = filepath.Join(root, "bin", "node-problem-detector")
		}
	}
	return testcp.RequireBinary(b, "node-problem-detector", path, npdHint)
}

// buildAsMake builds the binary as `make build` and the Dockerfile do: cgo
// on, the Makefile's link flags.
func buildAsMake(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "selftaint")
	build := exec.Command("go", "build", "-trimpath", "-ldflags="+makefileLDFlags(b), "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// writeBenchCheck writes the plugin and benchCheck for it into dir and
// returns the config's path.
func writeBenchCheck(b *testing.B, dir string) string {
	plugin := filepath.Join(dir, "bench-check.sh")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\necho the bench check passes\nexit 0\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	return writeBenchFile(b, dir, "bench-check.json", fmt.Sprintf(benchCheck, plugin))
}

func writeBenchFile(b *testing.B, dir, name, content string) string {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// cpuSubject is one measured process and its Node.
type cpuSubject struct {
	name, node, bin string
	args            []string
	log             string
	cmd             *exec.Cmd
	pid             int
	exited          chan struct{}
	// threads0 and ticks0 are the CPU time at the window's start: each
	// thread's, and the process's from /proc/PID/stat.
	threads0 map[string]time.Duration
	ticks0   float64
	// used and usedTicks are the CPU seconds used in the window: from the
	// threads' schedstat (nanoseconds), and from /proc/PID/stat (1/100 s).
	used, usedTicks float64
	// switches0 is each thread's voluntary and involuntary context
	// switches at the window's start; voluntary and involuntary those in
	// the window. A voluntary switch is a thread going to sleep (waiting
	// for a timer, a read, a lock): every wake-up of an idle process is
	// one, whatever the load, which only adds involuntary ones.
	switches0              map[string][2]int64
	voluntary, involuntary int64
}

// start runs the subject with its output in dir/NAME.log; the benchmark's
// cleanup stops it (SIGTERM, SIGKILL after 10 s).
func (s *cpuSubject) start(b *testing.B, dir string) {
	s.log = filepath.Join(dir, s.name+".log")
	f, err := os.Create(s.log)
	if err != nil {
		b.Fatal(err)
	}
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	if err := s.cmd.Start(); err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	s.pid = s.cmd.Process.Pid
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		_ = f.Close()
		close(s.exited)
	}()
	b.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

// alive fails the benchmark with the end of the subject's log if it has
// exited.
func (s *cpuSubject) alive(b *testing.B) {
	select {
	case <-s.exited:
		out, _ := os.ReadFile(s.log)
		if len(out) > 4000 {
			out = out[len(out)-4000:]
		}
		b.Fatalf("%s exited (%v); the end of its log:\n%s", s.name, s.cmd.ProcessState, out)
	default:
	}
}

// begin notes the subject's CPU time at the window's start.
func (s *cpuSubject) begin(b *testing.B) {
	s.alive(b)
	s.ticks0 = s.statSeconds(b)
	s.threads0 = s.threadTimes(b)
	s.switches0 = s.threadSwitches(b)
}

// end computes the CPU time the subject used since begin. The precise
// figure sums each thread's run time (/proc/PID/task/TID/schedstat,
// nanoseconds; a thread started in the window counts from 0, one that ended
// in it is lost: Go runtimes keep their threads). /proc/PID/stat's utime +
// stime is the same total (the kernel scales its tick samples to the run
// time) in 1/100 s, too coarse for an idle process over minutes: it is
// reported beside it.
func (s *cpuSubject) end(b *testing.B) {
	s.alive(b)
	var used time.Duration
	for tid, d := range s.threadTimes(b) {
		used += d - s.threads0[tid]
	}
	s.used = used.Seconds()
	s.usedTicks = s.statSeconds(b) - s.ticks0
	s.voluntary, s.involuntary = 0, 0
	for tid, n := range s.threadSwitches(b) {
		s.voluntary += n[0] - s.switches0[tid][0]
		s.involuntary += n[1] - s.switches0[tid][1]
	}
}

// wakesPerMinute is the voluntary context switches of the window per
// minute (see switches0).
func (s *cpuSubject) wakesPerMinute(window time.Duration) float64 {
	return float64(s.voluntary) / window.Minutes()
}

// summary says the window's CPU time and wake-ups.
func (s *cpuSubject) summary(window time.Duration) string {
	return fmt.Sprintf("%s: %.4f s CPU (/proc/PID/stat: %.2f s); %.1f wake-ups (voluntary context switches) a minute, %.1f involuntary",
		s.name, s.used, s.usedTicks, s.wakesPerMinute(window), float64(s.involuntary)/window.Minutes())
}

func (s *cpuSubject) proc() string { return "/proc/" + strconv.Itoa(s.pid) }

// threadSwitches is each thread's voluntary and involuntary context
// switches so far, by thread id (/proc/PID/task/TID/status).
func (s *cpuSubject) threadSwitches(b *testing.B) map[string][2]int64 {
	tasks, err := os.ReadDir(s.proc() + "/task")
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	out := make(map[string][2]int64, len(tasks))
	for _, t := range tasks {
		raw, err := os.ReadFile(s.proc() + "/task/" + t.Name() + "/status")
		if err != nil {
			continue // the thread ended
		}
		var n [2]int64
		for _, line := range strings.Split(string(raw), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			i := map[string]int{"voluntary_ctxt_switches": 0, "nonvoluntary_ctxt_switches": 1}
			if j, ok := i[k]; ok {
				if n[j], err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
					b.Fatalf("%s: unexpected %s in %s", s.name, line, t.Name())
				}
			}
		}
		out[t.Name()] = n
	}
	return out
}

// threadTimes is each thread's run time so far, by thread id (the first
// field of /proc/PID/task/TID/schedstat, in nanoseconds).
func (s *cpuSubject) threadTimes(b *testing.B) map[string]time.Duration {
	tasks, err := os.ReadDir(s.proc() + "/task")
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	out := make(map[string]time.Duration, len(tasks))
	for _, t := range tasks {
		raw, err := os.ReadFile(s.proc() + "/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(raw))
		if len(f) != 3 {
			b.Fatalf("%s: unexpected schedstat %q", s.name, raw)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			b.Fatalf("%s: unexpected schedstat %q", s.name, raw)
		}
		out[t.Name()] = time.Duration(ns)
	}
	return out
}

// statSeconds is the subject's CPU time so far, user + system, all its
// threads (fields 14 and 15 of /proc/PID/stat, in clock ticks of 1/100 s,
// USER_HZ on every Linux architecture Go supports).
func (s *cpuSubject) statSeconds(b *testing.B) float64 {
	raw, err := os.ReadFile(s.proc() + "/stat")
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	stat := string(raw)
	// The fields after the command name, which may hold spaces: state is
	// the first, utime the 12th, stime the 13th.
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) < 13 {
		b.Fatalf("%s: unexpected /proc/PID/stat: %q", s.name, stat)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("%s: unexpected /proc/PID/stat: %q", s.name, stat)
	}
	const userHZ = 100
	return (utime + stime) / userHZ
}

// sleepWhileAlive waits d, failing as soon as a subject exits.
func sleepWhileAlive(b *testing.B, subjects []*cpuSubject, d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for _, s := range subjects {
			s.alive(b)
		}
		time.Sleep(min(time.Second, time.Until(end)))
	}
}

// waitCondition waits until Node node has condition typ; alive fails the
// benchmark when what should write it has exited.
func waitCondition(b *testing.B, cp *testcp.ControlPlane, node string, typ corev1.NodeConditionType, alive func(*testing.B)) {
	err := testcp.Poll(context.Background(), 3*time.Minute, time.Second, func() (bool, error) {
		alive(b)
		n, err := cp.Client().CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == typ {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		b.Fatalf("Node %s has no %s condition: %v", node, typ, err)
	}
}

// watchNodeChanges counts the Nodes' modifications from now until the
// returned function is called; it returns the counts by Node name.
func watchNodeChanges(b *testing.B, cp *testcp.ControlPlane, subjects []*cpuSubject) func() map[string]int {
	w, err := cp.Client().CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	counts := make(map[string]int)
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := make(map[string]bool)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			// The watch starts with an ADDED event per Node; count changes.
			if ev.Type == watch.Modified || (ev.Type == watch.Added && seen[n.Name]) {
				counts[n.Name]++
			}
			seen[n.Name] = true
		}
	}()
	return func() map[string]int {
		w.Stop()
		<-done
		return counts
	}
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg(b *testing.B) string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:3], " ")
}
