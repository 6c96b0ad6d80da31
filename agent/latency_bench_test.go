package agent_test

// End-to-end latency benchmarks: from a kernel or driver event (a kmsg
// line, a fatal Xid from the NVML mock, a link down in a network
// namespace) to the taint on a Node watch, through the whole agent
// pipeline (probe, runner and its wake-ups, damping with for: 0s, the
// plan, the Node write) on a real kube-apiserver. Each event is caused,
// its taint awaited on the watch, then cleared and the taint's removal
// awaited, before the next. Against the same pipeline with the probes'
// wake-ups hidden (the polled path: a run only on the interval) and, for
// the kernel log, node-problem-detector's kernel monitor on the same line.
// They are benchmarks, never part of `make test`: `make latency-bench`.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/gpu"
	"github.com/selftaint/selftaint/probes/logmon"
	"github.com/selftaint/selftaint/taints"
)

// latencyEvents is the number of events $env asks for, def when unset:
// LATENCY_EVENTS (default 100) for the woken paths, LATENCY_POLLED_EVENTS
// (default 20) for the polled path and node-problem-detector, each of
// whose events waits for an interval.
func latencyEvents(b *testing.B, env string, def int) int {
	b.Helper()
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number of events", env, s)
	}
	return n
}

// latencyEvent is one kind of event a benchmark causes over and over.
type latencyEvent struct {
	// cause makes event i happen.
	cause func(i int)
	// on reports whether event i shows on the Node (its taint, or NPD's
	// condition).
	on func(i int, n *corev1.Node) bool
	// clear undoes event i; nil when the event cannot be undone on the
	// same process (then only the way there is measured).
	clear func(i int)
	// cleared reports whether the Node is ready for the next event once
	// event i was cleared; nil means !on.
	cleared func(i int, n *corev1.Node) bool
	// spread: each event is caused after a random pause in [0, spread),
	// untimed, so events fall at random phases of the probe's interval
	// (and of NPD's 1 s sync) rather than just after the run that showed
	// the previous one cleared. Set it to the interval.
	spread time.Duration
	// pause and clearPause are untimed least pauses before each cause
	// and each clear.
	pause, clearPause time.Duration
}

// nodeWatcher follows one Node with a watch, re-opened from the last
// version seen should the API server end it.
type nodeWatcher struct {
	b    *testing.B
	c    kubernetes.Interface
	node string
	w    watch.Interface
	rv   string
	last *corev1.Node
}

func newNodeWatcher(b *testing.B, c kubernetes.Interface, node string) *nodeWatcher {
	b.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		b.Fatalf("reading node %s: %v", node, err)
	}
	nw := &nodeWatcher{b: b, c: c, node: node, rv: n.ResourceVersion, last: n}
	nw.open()
	b.Cleanup(func() { nw.w.Stop() })
	return nw
}

func (nw *nodeWatcher) open() {
	w, err := nw.c.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", nw.node).String(),
		ResourceVersion: nw.rv,
	})
	if err != nil {
		nw.b.Fatalf("watching node %s: %v", nw.node, err)
	}
	nw.w = w
}

// until returns when the watch delivers a version of the Node for which
// ok holds (at once if the last one seen does), failing the benchmark
// after timeout.
func (nw *nodeWatcher) until(timeout time.Duration, what string, ok func(*corev1.Node) bool) {
	nw.b.Helper()
	if ok(nw.last) {
		return
	}
	deadline := time.After(timeout)
	for {
		select {
		case ev, open := <-nw.w.ResultChan():
			if !open {
				nw.open()
				continue
			}
			n, isNode := ev.Object.(*corev1.Node)
			if !isNode {
				continue // an error event: the next read of a closed channel re-opens
			}
			nw.rv, nw.last = n.ResourceVersion, n
			if ok(n) {
				return
			}
		case <-deadline:
			nw.b.Fatalf("the watch did not see %s on node %s within %v; last: %s", what, nw.node, timeout, describe(nw.last))
		}
	}
}

// latencyResult is one path's samples.
type latencyResult struct {
	// name is the table's; key the metrics' (no spaces).
	name, key string
	up, down  []time.Duration
}

// measure causes n events one after another, each timed from its cause
// to the Node watch seeing it, and from its clear to the watch seeing it
// gone.
func measure(b *testing.B, nw *nodeWatcher, name, key string, n int, ev latencyEvent) latencyResult {
	b.Helper()
	res := latencyResult{name: name, key: key}
	for i := 0; i < n; i++ {
		time.Sleep(ev.pause)
		if ev.spread > 0 {
			time.Sleep(rand.N(ev.spread))
		}
		start := time.Now()
		ev.cause(i)
		nw.until(time.Minute, fmt.Sprintf("event %d", i), func(node *corev1.Node) bool { return ev.on(i, node) })
		res.up = append(res.up, time.Since(start))
		if ev.clear == nil {
			continue
		}
		cleared := func(node *corev1.Node) bool { return !ev.on(i, node) }
		if ev.cleared != nil {
			cleared = func(node *corev1.Node) bool { return ev.cleared(i, node) }
		}
		time.Sleep(ev.clearPause)
		start = time.Now()
		ev.clear(i)
		nw.until(time.Minute, fmt.Sprintf("event %d cleared", i), cleared)
		res.down = append(res.down, time.Since(start))
	}
	return res
}

// percentile is the nearest-rank q-th percentile of sorted samples, in ms.
func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / float64(time.Millisecond)
}

// report logs a table of the results and reports the first one's figures
// (the woken path) as the benchmark's metrics, the others' p99 beside.
func report(b *testing.B, results ...latencyResult) {
	b.Helper()
	var t strings.Builder
	fmt.Fprintf(&t, "\n%-34s %6s %9s %9s %9s   %6s %9s %9s\n", "path", "events", "p50 ms", "p99 ms", "max ms", "clears", "p50 ms", "p99 ms")
	for k, r := range results {
		up, down := slices.Clone(r.up), slices.Clone(r.down)
		slices.Sort(up)
		slices.Sort(down)
		line := fmt.Sprintf("%-34s %6d %9.1f %9.1f %9.1f", r.name, len(up), percentile(up, 0.5), percentile(up, 0.99), percentile(up, 1))
		if len(down) > 0 {
			line += fmt.Sprintf("   %6d %9.1f %9.1f", len(down), percentile(down, 0.5), percentile(down, 0.99))
		}
		t.WriteString(line + "\n")
		if k == 0 {
			b.ReportMetric(percentile(up, 0.5), "p50-ms")
			b.ReportMetric(percentile(up, 0.99), "p99-ms")
			b.ReportMetric(percentile(up, 1), "max-ms")
			if len(down) > 0 {
				b.ReportMetric(percentile(down, 0.99), "clear-p99-ms")
			}
			continue
		}
		b.ReportMetric(percentile(up, 0.5), r.key+"-p50-ms")
		b.ReportMetric(percentile(up, 0.99), r.key+"-p99-ms")
	}
	b.Log(t.String())
}

// unwoken hides a probe's Watch from the runner: the polled path, a run
// only on the interval, as before event wake-ups. It keeps the probe
// Stateful, which the agent's clear requests need.
type unwoken struct{ probes.Stateful }

// unwokenPlain is unwoken for a probe that keeps no state.
type unwokenPlain struct{ p probes.Probe }

func (u unwokenPlain) Name() string                            { return u.p.Name() }
func (u unwokenPlain) Probe(ctx context.Context) probes.Result { return u.p.Probe(ctx) }

func withoutWakes(specs []agent.ProbeSpec) []agent.ProbeSpec {
	out := slices.Clone(specs)
	for i := range out {
		if s, ok := out[i].Entry.Probe.(probes.Stateful); ok {
			out[i].Entry.Probe = unwoken{s}
		} else {
			out[i].Entry.Probe = unwokenPlain{p: out[i].Entry.Probe}
		}
	}
	return out
}

// kernelLines are the lines of NPD's kernel-monitor.json permanent rules
// the kmsg benchmarks write, one per condition, in turn.
var kernelLines = []struct {
	cond corev1.NodeConditionType
	line func(i int) string
}{
	{"KernelDeadlock", func(i int) string {
		return fmt.Sprintf("INFO: task docker:%d blocked for more than 120 seconds.", 1000+i)
	}},
	{"XfsShutdown", func(i int) string {
		return fmt.Sprintf("XFS (sdb%d): Corruption of in-memory data detected.  Shutting down filesystem", i)
	}},
	{"CperHardwareErrorFatal", func(int) string { return "{1}[Hardware Error]: event severity: fatal" }},
}

func kernelTaint(cond corev1.NodeConditionType) corev1.Taint {
	return corev1.Taint{Key: "selftaint.io/" + strings.ToLower(string(cond)), Effect: corev1.TaintEffectNoSchedule}
}

// kmsgAgentHost is a host root whose kernel booted an hour ago.
func kmsgAgentHost(b *testing.B, dir string) (probes.Host, time.Time) {
	b.Helper()
	boot := time.Now().Add(-time.Hour)
	for path, data := range map[string]string{
		"proc/sys/kernel/random/boot_id": "latency-boot\n",
		"proc/uptime":                    "3600.00 100.00\n",
	} {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return probes.Host{Root: dir}, boot
}

// kernelMonitorJSON is NPD's kernel-monitor.json, our unchanged copy.
func kernelMonitorJSON(b *testing.B) string {
	b.Helper()
	p, err := filepath.Abs("../probes/logmon/testdata/npd/kernel-monitor.json")
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// runKmsgAgent runs the agent with kernel-monitor.json reading a kmsg
// FIFO, a NoSchedule rule per condition the benchmark sets, and its
// probes woken or polled.
func runKmsgAgent(b *testing.B, c kubernetes.Interface, node string, polled bool) *testkit.Kmsg {
	b.Helper()
	dir := b.TempDir()
	host, boot := kmsgAgentHost(b, dir)
	kmsg := testkit.NewKmsg(boot)
	kmsgPath := kmsg.FIFO(b, filepath.Join(dir, "kmsg"), 0o600)
	// The rules are given to the agent as the config would build them:
	// the config's validation does not know the conditions of NPD files
	// (it would reject a rule on KernelDeadlock).
	var rules []taints.Rule
	for _, l := range kernelLines {
		rules = append(rules, taints.Rule{Condition: l.cond, Status: corev1.ConditionTrue, Taint: kernelTaint(l.cond)})
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf("checks:\n  npdLogConfigs: [%s]\n  kmsgPath: %s\n", kernelMonitorJSON(b), kmsgPath)))
	if err != nil {
		b.Fatal(err)
	}
	specs, closer, err := cfg.CheckProbeSpecsOn(host, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatalf("CheckProbeSpecsOn: %v", err)
	}
	b.Cleanup(func() { _ = closer.Close() })
	if polled {
		// Polled as NPD syncs, once a second: the woken probes' interval
		// is only a long resync.
		specs = withoutWakes(specs)
		for i := range specs {
			specs[i].Entry.Interval = logmon.PollInterval
		}
	}
	startAgent(b, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: specs, Rules: rules,
		Logger: slog.New(slog.DiscardHandler)})
	return kmsg
}

// kmsgAgentEvent writes kernelLines in turn and clears each through the
// probe's clear request (a permanent condition, as in NPD, is never
// cleared by a line).
func kmsgAgentEvent(b *testing.B, c kubernetes.Interface, node string, kmsg *testkit.Kmsg) latencyEvent {
	line := func(i int) corev1.NodeConditionType { return kernelLines[i%len(kernelLines)].cond }
	return latencyEvent{
		cause:  func(i int) { kmsg.Write(b, kernelLines[i%len(kernelLines)].line(i)) },
		on:     func(i int, n *corev1.Node) bool { return hasTaint(n, kernelTaint(line(i))) },
		spread: logmon.PollInterval,
		clear: func(i int) {
			testkit.RequestClear(b, c, node, "logmon-"+string(line(i)), "latency-bench", string(line(i)))
		},
		cleared: func(i int, n *corev1.Node) bool {
			_, pending := n.Annotations[agent.ClearAnnotation("logmon-"+string(line(i)))]
			return !hasTaint(n, kernelTaint(line(i))) && !pending
		},
	}
}

// waitKernelConditionsFalse waits until the agent (or NPD) has published
// every benchmarked condition False.
func waitKernelConditionsFalse(b *testing.B, nw *nodeWatcher) {
	b.Helper()
	nw.until(time.Minute, "the kernel monitor's conditions False", func(n *corev1.Node) bool {
		for _, l := range kernelLines {
			if cd := condition(n, l.cond); cd == nil || cd.Status != corev1.ConditionFalse {
				return false
			}
		}
		return true
	})
}

// BenchmarkLatencyKmsg: a line of one of NPD's kernel-monitor.json
// permanent rules (KernelDeadlock, XfsShutdown, CperHardwareErrorFatal in
// turn) written to a FIFO standing in for /dev/kmsg, to its condition's
// taint on a Node watch; the file loaded unchanged, for: 0s (a log
// monitor's conditions are not damped). Cleared by the probe's clear
// request. Against the polled path (every logmon.PollInterval, 1 s, as NPD syncs) and
// node-problem-detector v0.8.20 with the same file on the same lines
// (condition, no taint; see npdKmsgResult). The taint rules are built
// here: the config rejects a rule on a condition of an npdLogConfigs file.
//
//	make latency-bench   (or LATENCY_EVENTS=100 LATENCY_POLLED_EVENTS=20 KUBE_BIN_DIR=$PWD/bin go test -run '^$' -bench LatencyKmsg -benchtime 1x ./agent/)
func BenchmarkLatencyKmsg(b *testing.B) {
	cp := shared.Get(b)
	c := cp.Client()
	n := latencyEvents(b, "LATENCY_EVENTS", 100)
	np := latencyEvents(b, "LATENCY_POLLED_EVENTS", 20)
	var results []latencyResult
	for _, polled := range []bool{false, true} {
		node, name, key, count := "latency-kmsg", fmt.Sprintf("kmsg line, woken (resync %s)", logmon.Interval), "woken", n
		if polled {
			node, name, key, count = "latency-kmsg-polled", fmt.Sprintf("kmsg line, polled (interval %s)", logmon.PollInterval), "polled", np
		}
		cp.CreateNode(b, node, nil)
		kmsg := runKmsgAgent(b, c, node, polled)
		nw := newNodeWatcher(b, c, node)
		waitKernelConditionsFalse(b, nw)
		results = append(results, measure(b, nw, name, key, count, kmsgAgentEvent(b, c, node, kmsg)))
	}
	if npd := npdKmsgResult(b, cp, np); npd != nil {
		results = append(results, *npd)
	}
	report(b, results...)
}

// gpuLatencyAgent runs the GPU probes over the NVML mock f with for: 0s
// and clearAfter 0s (interval as given, the default when empty).
func gpuLatencyAgent(b *testing.B, c kubernetes.Interface, node string, f *gpuFake, interval string, polled bool) {
	b.Helper()
	sched := "    for: 0s\n    clearAfter: 0s\n"
	if interval != "" {
		sched += "    interval: " + interval + "\n    timeout: 500ms\n"
	}
	cfg, err := config.Parse([]byte("probes:\n  gpu:\n" + sched))
	if err != nil {
		b.Fatal(err)
	}
	specs, closer, err := cfg.GPUProbeSpecs(gpu.Env{Lib: f, BootID: func() (string, error) { return "boot-1", nil }})
	if err != nil {
		b.Fatalf("GPUProbeSpecs: %v", err)
	}
	b.Cleanup(func() { _ = closer.Close() })
	if polled {
		specs = withoutWakes(specs)
	}
	startAgent(b, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: specs, Rules: cfg.TaintRules(),
		Logger: slog.New(slog.DiscardHandler)})
}

// BenchmarkLatencyXid: a fatal Xid (79, fallen off the bus) on GPU i%8
// pushed by the NVML mock's event set to the GPU failure taint on a Node
// watch (for: 0s), cleared by the fatal probe's clear request for that
// GPU. The woken path runs at a 1 s interval (only the way back waits for
// it), the polled path at the GPU probe's default interval.
//
//	make latency-bench   (or KUBE_BIN_DIR=$PWD/bin go test -run '^$' -bench LatencyXid -benchtime 1x ./agent/)
func BenchmarkLatencyXid(b *testing.B) {
	cp := shared.Get(b)
	c := cp.Client()
	n := latencyEvents(b, "LATENCY_EVENTS", 100)
	np := latencyEvents(b, "LATENCY_POLLED_EVENTS", 20)
	var results []latencyResult
	for _, polled := range []bool{false, true} {
		node, name, key, interval, count := "latency-xid", "NVML Xid 79, woken (interval 1s)", "woken", "1s", n
		if polled {
			node, name, key, interval, count = "latency-xid-polled", "NVML Xid 79, polled (default interval)", "polled", "", np
		}
		cp.CreateNode(b, node, nil)
		f := newGPUFake()
		f.noRecovery = true
		gpuLatencyAgent(b, c, node, f, interval, polled)
		nw := newNodeWatcher(b, c, node)
		nw.until(time.Minute, "GPU condition False", func(n *corev1.Node) bool {
			cd := condition(n, config.DefaultGPUCondition)
			return cd != nil && cd.Status == corev1.ConditionFalse
		})
		spread := time.Second
		if polled {
			spread = 5 * time.Second // the GPU probe's default interval
		}
		results = append(results, measure(b, nw, name, key, count, latencyEvent{
			spread: spread,
			cause:  func(i int) { f.xid(i%len(f.Devices), 79) },
			on:     func(_ int, n *corev1.Node) bool { return hasTaint(n, gpuFailureTaint) },
			clear: func(i int) {
				testkit.RequestClear(b, c, node, gpu.NameFatal, "latency-bench", f.uuid(i%len(f.Devices)))
			},
			cleared: func(_ int, n *corev1.Node) bool {
				_, pending := n.Annotations[agent.ClearAnnotation(gpu.NameFatal)]
				return !hasTaint(n, gpuFailureTaint) && !pending
			},
		}))
	}
	report(b, results...)
}
