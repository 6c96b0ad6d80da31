package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
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
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
)

// eventWatcher follows the Events of one Node on a watch.
type eventWatcher struct {
	b *testing.B
	w watch.Interface
}

func newEventWatcher(b *testing.B, c kubernetes.Interface, node string) *eventWatcher {
	b.Helper()
	w, err := c.CoreV1().Events("default").Watch(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", node).String(),
	})
	if err != nil {
		b.Fatalf("watching the Events of %s: %v", node, err)
	}
	b.Cleanup(w.Stop)
	return &eventWatcher{b: b, w: w}
}

// until returns when the watch delivers an Event of one of reasons whose
// message contains text.
func (ew *eventWatcher) until(timeout time.Duration, text string, reasons ...string) {
	ew.b.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, open := <-ew.w.ResultChan():
			if !open {
				ew.b.Fatalf("the Event watch ended waiting for %q", text)
			}
			e, ok := ev.Object.(*corev1.Event)
			if ok && strings.Contains(e.Message, text) && (len(reasons) == 0 || slices.Contains(reasons, e.Reason)) {
				return
			}
		case <-deadline:
			ew.b.Fatalf("no Event %v with %q within %v", reasons, text, timeout)
		}
	}
}

// eventTempLines are lines of kernel-monitor.json temporary rules, one
// reason each, taken in turn so that no reason passes the pacing's burst
// (5 per reason) within a run of 20.
var eventTempLines = []struct {
	reason string
	line   func(i int) string
}{
	{"OOMKilling", func(i int) string {
		return fmt.Sprintf("Killed process %d (bench) total-vm:1kB, anon-rss:1kB, file-rss:0kB", 7000+i)
	}},
	{"Ext4Error", func(i int) string { return fmt.Sprintf("EXT4-fs error (device sda%d): bench", i) }},
	{"IOError", func(i int) string { return fmt.Sprintf("Buffer I/O error on dev sdb%d, bench", i) }},
	{"MemoryReadError", func(i int) string { return fmt.Sprintf("CE memory read error on bench%d", i) }},
}

// startKmsgEventsAgent runs the agent with kernel-monitor.json reading
// kmsg (no taint rules); stop ends it and closes its monitors.
func startKmsgEventsAgent(b *testing.B, c kubernetes.Interface, node string, host string, kmsgPath string) (stop func()) {
	b.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf("checks:\n  npdLogConfigs: [%s]\n  kmsgPath: %s\n", kernelMonitorJSON(b), kmsgPath)))
	if err != nil {
		b.Fatal(err)
	}
	h, _ := kmsgAgentHost(b, host)
	specs, closer, err := cfg.CheckProbeSpecsOn(h, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatalf("CheckProbeSpecsOn: %v", err)
	}
	_, stopAgent := startAgent(b, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: specs, Logger: slog.New(slog.DiscardHandler)})
	return func() {
		stopAgent()
		_ = closer.Close()
	}
}

// BenchmarkLatencyEvents: from a kmsg line to its Event on an Event watch,
// for the two kinds of Events a log monitor records: a temporary rule's
// (kernel-monitor.json's OOMKilling, Ext4Error, IOError, MemoryReadError in
// turn) and a permanent rule's condition change (DockerHung setting
// KernelDeadlock; NPD's reason, ConditionChanged before NPD's reasons);
// selftaint against node-problem-detector v0.8.20 with the same file on
// the same lines (NPD_BIN, root and unshare(1), as BenchmarkLatencyKmsg).
// Each event waits a random pause of up to 1 s first. Every process records
// fewer Events than its pacing lets through at once: selftaint is
// restarted every 5 condition changes (a change, its clear and the clear's
// ProbeStateCleared are three of the agent's own Events, 25 at once), NPD
// after every condition change (it never clears one).
//
//	LATENCY_EVENTS=20 KUBE_BIN_DIR=$PWD/bin NPD_BIN=$PWD/bin/node-problem-detector go test -run '^$' -bench LatencyEvents -benchtime 1x ./agent/
func BenchmarkLatencyEvents(b *testing.B) {
	cp := shared.Get(b)
	c := cp.Client()
	n := min(latencyEvents(b, "LATENCY_EVENTS", 20), 20)
	var results []latencyResult

	// selftaint.
	{
		const node = "latency-events"
		cp.CreateNode(b, node, nil)
		dir := b.TempDir()
		_, boot := kmsgAgentHost(b, dir)
		kmsg := testkit.NewKmsg(boot)
		kmsgPath := kmsg.FIFO(b, filepath.Join(dir, "kmsg"), 0o600)
		stop := startKmsgEventsAgent(b, c, node, dir, kmsgPath)
		nw := newNodeWatcher(b, c, node)
		waitKernelConditionsFalse(b, nw)
		ew := newEventWatcher(b, c, node)
		temp := tempEventLatencies(b, kmsg, ew, n, latencyResult{name: "selftaint: temporary rule Event", key: "temp"})
		cond := latencyResult{name: "selftaint: condition change Event", key: "cond"}
		for i := range n {
			if i > 0 && i%5 == 0 {
				stop()
				stop = startKmsgEventsAgent(b, c, node, dir, kmsgPath)
			}
			time.Sleep(rand.N(time.Second))
			text := kernelLines[0].line(100 + i) // DockerHung: KernelDeadlock
			start := time.Now()
			kmsg.Write(b, text)
			ew.until(time.Minute, text, "DockerHung", agent.ReasonConditionChanged)
			cond.up = append(cond.up, time.Since(start))
			nw.until(time.Minute, "KernelDeadlock True", func(n *corev1.Node) bool {
				cd := condition(n, "KernelDeadlock")
				return cd != nil && cd.Status == corev1.ConditionTrue
			})
			testkit.RequestClear(b, c, node, "logmon-KernelDeadlock", "latency-bench", "KernelDeadlock")
			nw.until(time.Minute, "KernelDeadlock cleared", func(n *corev1.Node) bool {
				cd := condition(n, "KernelDeadlock")
				_, pending := n.Annotations[agent.ClearAnnotation("logmon-KernelDeadlock")]
				return cd != nil && cd.Status == corev1.ConditionFalse && !pending
			})
		}
		stop()
		results = append(results, cond, temp)
	}
	results = append(results, npdEventsResults(b, cp, n)...)
	eventReport(b, results)
}

// eventReport logs p50, p90 and max of each row, and reports them as the
// benchmark's metrics.
func eventReport(b *testing.B, results []latencyResult) {
	b.Helper()
	var t strings.Builder
	fmt.Fprintf(&t, "\n%-38s %6s %9s %9s %9s\n", "Event", "events", "p50 ms", "p90 ms", "max ms")
	for _, r := range results {
		up := slices.Clone(r.up)
		slices.Sort(up)
		fmt.Fprintf(&t, "%-38s %6d %9.1f %9.1f %9.1f\n", r.name, len(up), percentile(up, 0.5), percentile(up, 0.9), percentile(up, 1))
		b.ReportMetric(percentile(up, 0.5), r.key+"-p50-ms")
		b.ReportMetric(percentile(up, 0.9), r.key+"-p90-ms")
	}
	b.Log(t.String())
}

// tempEventLatencies times n temporary rules' lines (eventTempLines, each
// at a random phase within a second) written to kmsg, each to its Event
// on ew, into temp.
func tempEventLatencies(b *testing.B, kmsg *testkit.Kmsg, ew *eventWatcher, n int, temp latencyResult) latencyResult {
	b.Helper()
	for i := range n {
		time.Sleep(rand.N(time.Second))
		l := eventTempLines[i%len(eventTempLines)]
		text := l.line(i)
		start := time.Now()
		kmsg.Write(b, text)
		ew.until(time.Minute, text, l.reason)
		temp.up = append(temp.up, time.Since(start))
	}
	return temp
}

// npdEventsResults measures NPD's Events on the same lines; none, said in
// the log, when NPD or the privilege to mount is missing.
func npdEventsResults(b *testing.B, cp *testcp.ControlPlane, n int) []latencyResult {
	b.Helper()
	const node = "latency-events-npd"
	c := cp.Client()
	npd, kmsg := startNPDKmsg(b, cp, node)
	if npd == nil {
		return nil
	}
	nw := newNodeWatcher(b, c, node)
	waitKernelConditionsFalse(b, nw)
	ew := newEventWatcher(b, c, node)
	time.Sleep(2 * time.Second) // NPD's reader past the start
	temp := tempEventLatencies(b, kmsg, ew, n, latencyResult{name: "NPD v0.8.20: temporary rule Event", key: "npd-temp"})
	cond := latencyResult{name: "NPD v0.8.20: condition change Event", key: "npd-cond"}
	for i := range n {
		// A fresh NPD: its conditions False, its spam filter full.
		npd.Restart(b)
		waitKernelConditionsFalse(b, nw)
		time.Sleep(2 * time.Second) // NPD's reader past the start
		time.Sleep(rand.N(time.Second))
		text := kernelLines[0].line(100 + i)
		start := time.Now()
		kmsg.Write(b, text)
		ew.until(time.Minute, text, "DockerHung")
		cond.up = append(cond.up, time.Since(start))
	}
	return []latencyResult{cond, temp}
}
