package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
)

// BenchmarkVersusNPD is issue 29's "Must show" run: node-problem-detector
// and `selftaint agent` side by side on one etcd and kube-apiserver, each
// process on a Node of its own, in one run, so that the ratios hold on a
// loaded machine.
//
// The processes, all started at once:
//
//   - npd-kmsg: NPD with --config.system-log-monitor=kernel-monitor.json;
//   - selftaint-kmsg: selftaint with its probes off (memory, disk, pid,
//     network, gpu) and checks.npdLogConfigs: [the same file];
//   - npd-kernel-log: NPD with kernel-monitor.json and
//     readonly-monitor.json (deploy/kernel-log/npd/);
//   - selftaint-kernel-log and selftaint-kernel-log-65532:
//     deploy/kernel-log/config.yaml, its file paths pointed at those two
//     files and its kmsgPath at a FIFO, as root and as uid 65532 (the
//     image's user: setpriv --reuid 65532 --regid 65532 --clear-groups);
//   - selftaint-defaults and selftaint-defaults-65532: no config (the
//     built-in defaults), as root and as uid 65532.
//
// Every process that reads the kernel log reads a FIFO of its own (NPD's
// bind-mounted over /dev/kmsg in a private mount namespace: its reader
// opens /dev/kmsg by that name); nothing is written to the real kernel
// log. The selftaint binary is built as `make build` builds it, or
// $SELFTAINT_BIN (a prebuilt binary, to measure another build); each
// selftaint process runs a copy of its own owned by its user, as on a node
// (the start-up memory shed pages out only pages no other process maps,
// and only for the file's owner).
//
// Phases:
//
//  1. Settle: every Node has its processes' conditions, and
//     $VERSUS_SETTLE (2m) has passed since the start (selftaint sheds its
//     start-up memory 30 s after its first sync).
//  2. Quiet CPU window of $VERSUS_WINDOW (10m): nothing is written. Each
//     process's CPU time (every thread's run time from
//     /proc/PID/task/TID/schedstat; utime+stime of /proc/PID/stat beside
//     it), its voluntary and involuntary context switches (the threads'
//     status), the load average; the ratio selftaint/NPD per pair. Then a
//     second quiet window up to $VERSUS_RSS_AT (20m) after the start.
//  3. RSS at $VERSUS_RSS_AT after the start: VmRSS, RssAnon and RssFile
//     of each process (/proc/PID/status).
//  4. Event latency, on the kmsg pair: lines of kernel-monitor.json's
//     permanent rules (a condition change) and of its temporary rules
//     (an Event), each with a token of its own, written at the same
//     moment to both readers' FIFOs (the same record), one at a time at
//     random pauses; from the write to the first Event carrying the token
//     on an Event watch (involvedObject.kind=Node; an Event seen as its
//     count going up counts too). $VERSUS_EVENTS (21) lines of each kind,
//     in rounds of one line per permanent rule: NPD never clears a
//     permanent condition, so between rounds it is restarted, and
//     selftaint's conditions are cleared by the probes' clear requests
//     and it is restarted too (both pace Events: client-go's spam filter
//     lets 25 per source and object through, then one per 5 minutes, and
//     selftaint 5 per reason, then one per 5 minutes; a round stays well
//     under both). The reasons each records are reported, not asserted.
//  5. No line missed, no Event twice: each line written is accounted for
//     on each side by an Event carrying its token or by what selftaint
//     says its pacing held back (selftaint_events_held_back_total on
//     /metrics; "0 (no series)" where none was held back, or the binary has
//     no such metric); an Event of one reason recorded twice for one line
//     is counted.
//
// The kernel-log pair gets no lines: a FIFO hands each record to one
// reader, and each of those processes opens its kernel log twice (once per
// file), so its two monitors would share the lines between them. Its
// figures are the quiet CPU and the RSS.
//
// It needs root, unshare(1), setpriv(1) and node-problem-detector ($NPD_BIN
// or bin/node-problem-detector: `make npd`), and fails at once, saying
// which, without them. A measurement: it never fails on the figures, and
// `make test` never runs it.
//
//	make versus-npd   (VERSUS_WINDOW=1m VERSUS_RSS_AT=4m VERSUS_EVENTS=6 for a short run)
func BenchmarkVersusNPD(b *testing.B) {
	npdBin := versusRequirements(b)
	settle := versusDuration(b, "VERSUS_SETTLE", 2*time.Minute)
	window := versusDuration(b, "VERSUS_WINDOW", 10*time.Minute)
	rssAt := versusDuration(b, "VERSUS_RSS_AT", 20*time.Minute)
	events := versusCount(b, "VERSUS_EVENTS", 21)
	bin := os.Getenv("SELFTAINT_BIN")
	if bin == "" {
		bin = buildAsMake(b)
	} else if _, err := os.Stat(bin); err != nil {
		b.Fatalf("SELFTAINT_BIN=%s: %v", bin, err)
	}
	cp := testcp.Start(b, testcp.Options{})
	v := newVersusRun(b, cp, bin, npdBin)
	for _, s := range v.subjects {
		cp.CreateNode(b, s.node, nil)
	}
	start := time.Now()
	for _, s := range v.subjects {
		s.Start(b)
		s.started = time.Now()
	}
	for i := 0; i < b.N; i++ {
		// 1. Settle.
		b.Logf("settling: waiting for every Node's conditions, then until %s after the start", settle)
		for _, s := range v.subjects {
			v.waitConditions(s, 3*time.Minute, func(c *corev1.NodeCondition) bool { return true })
		}
		v.sleep(time.Until(start.Add(settle)))

		// 2. Quiet CPU windows.
		b.Logf("quiet CPU window of %s", window)
		load := []string{loadAvg(b)}
		u0 := v.usage()
		v.sleep(window)
		u1 := v.usage()
		load = append(load, loadAvg(b))
		var u2 []testkit.ProcUsage
		window2 := time.Until(start.Add(rssAt))
		if window2 > 0 {
			b.Logf("a second quiet window of %s, to RSS at %s after the start", window2.Round(time.Second), rssAt)
			v.sleep(window2)
			u2 = v.usage()
			load = append(load, loadAvg(b))
		}

		// 3. RSS.
		rssTaken := time.Since(start)
		mem := make([]map[string]int64, len(v.subjects))
		for k, s := range v.subjects {
			m, err := testkit.ReadMemory(s.Pid())
			if err != nil {
				b.Fatalf("%s: %v", s.Name, err)
			}
			mem[k] = m
		}

		// 4 and 5. Event latency, lines missed, Events twice.
		b.Logf("Event latency: %d lines of each kind on the kmsg pair", events)
		lat := v.latency(events)

		v.report(versusFigures{window: window, window2: window2, rssAt: rssTaken, load: load,
			u0: u0, u1: u1, u2: u2, mem: mem, lat: lat})
	}
}

// versusRequirements fails the benchmark at once when what it runs is
// missing, and returns node-problem-detector's path.
func versusRequirements(b *testing.B) string {
	if os.Geteuid() != 0 {
		b.Fatal("BenchmarkVersusNPD needs root: node-problem-detector reads a FIFO bind-mounted over /dev/kmsg in a mount namespace of its own, and selftaint runs as uid 65532 too")
	}
	for _, tool := range []string{"unshare", "setpriv", "sh", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("BenchmarkVersusNPD needs %s(1) (util-linux): %v", tool, err)
		}
	}
	path := os.Getenv("NPD_BIN")
	if path == "" {
		root, err := testcp.RepoRoot()
		if err != nil {
			b.Fatalf("finding the repository for bin/node-problem-detector: %v", err)
		}
		path = filepath.Join(root, "bin", "node-problem-detector")
	}
	if _, err := os.Stat(path); err != nil {
		b.Fatalf("node-problem-detector: %v; %s", err, npdHint)
	}
	return path
}

func versusDuration(b *testing.B, env string, def time.Duration) time.Duration {
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive Go duration such as 1m", env, s)
	}
	return d
}

func versusCount(b *testing.B, env string, def int) int {
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", env, s)
	}
	return n
}

// versusUID is the user the image runs the agent as.
const versusUID = 65532

// versusSubject is one measured process and its Node.
type versusSubject struct {
	*testkit.Process
	node string
	npd  bool
	// conds are the conditions it publishes, settled when all are there.
	conds []corev1.NodeConditionType
	// metrics is selftaint's /metrics address.
	metrics string
	started time.Time
}

// versusRun is the benchmark's processes and what they share.
type versusRun struct {
	b        *testing.B
	cp       *testcp.ControlPlane
	c        kubernetes.Interface
	subjects []*versusSubject
	// npdKmsg and stKmsg are the kmsg pair, which get the lines through
	// lines; the other readers' FIFOs (idle) never get any.
	npdKmsg, stKmsg *versusSubject
	lines, idle     *testkit.Kmsg
}

// kernelMonitorConds are kernel-monitor.json's conditions, readonlyConds
// readonly-monitor.json's.
var (
	kernelMonitorConds = []corev1.NodeConditionType{"KernelDeadlock", "XfsShutdown", "CperHardwareErrorFatal"}
	readonlyConds      = []corev1.NodeConditionType{"ReadonlyFilesystem"}
)

func newVersusRun(b *testing.B, cp *testcp.ControlPlane, bin, npdBin string) *versusRun {
	// One directory every subject can read, uid 65532 too (b.TempDir's
	// are root's alone).
	dir, err := os.MkdirTemp("", "versus-npd-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	copyFile := func(from, name string, mode os.FileMode) string {
		data, err := os.ReadFile(from)
		if err != nil {
			b.Fatal(err)
		}
		to := filepath.Join(dir, name)
		if err := os.WriteFile(to, data, mode); err != nil {
			b.Fatal(err)
		}
		if err := os.Chmod(to, mode); err != nil {
			b.Fatal(err)
		}
		return to
	}
	kernelMonitor := copyFile("../../deploy/kernel-log/npd/kernel-monitor.json", "kernel-monitor.json", 0o644)
	readonlyMonitor := copyFile("../../deploy/kernel-log/npd/readonly-monitor.json", "readonly-monitor.json", 0o644)
	kubeconfig := copyFile(cp.KubeconfigPath, "kubeconfig", 0o644)
	deployKernelLog, err := os.ReadFile("../../deploy/kernel-log/config.yaml")
	if err != nil {
		b.Fatal(err)
	}

	v := &versusRun{b: b, cp: cp, c: cp.Client(), lines: testkit.NewKmsg(testkit.SysinfoBoot(b)), idle: testkit.NewKmsg(testkit.SysinfoBoot(b))}
	npd := func(name, fifo string, files ...string) *versusSubject {
		node := "versus-" + name
		return &versusSubject{node: node, npd: true, Process: &testkit.Process{Name: name, Dir: dir,
			Argv: testkit.KmsgNamespace(fifo, npdBin,
				"--hostname-override="+node,
				"--apiserver-override="+cp.RESTConfig().Host+"?inClusterConfig=false&auth="+kubeconfig,
				"--config.system-log-monitor="+strings.Join(files, ","),
				"--address=127.0.0.1", "--port="+testkit.FreePort(b),
				"--prometheus-address=127.0.0.1", "--prometheus-port="+testkit.FreePort(b))}}
	}
	selftaint := func(name string, uid int, config string) *versusSubject {
		node := "versus-" + name
		addr := "127.0.0.1:" + testkit.FreePort(b)
		// A binary of its own, as on a node: the start-up memory shed
		// (madvise MADV_PAGEOUT) leaves alone the pages another process
		// maps too. Owned by the user it runs as, as the image installs
		// it: the kernel pages a file out only for its owner.
		own := copyFile(bin, "selftaint-"+name, 0o755)
		if err := os.Chown(own, uid, uid); err != nil {
			b.Fatal(err)
		}
		argv := []string{own}
		if uid != 0 {
			argv = []string{"setpriv", "--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(uid), "--clear-groups", own}
		}
		argv = append(argv, "agent", "--node-name="+node, "--kubeconfig="+kubeconfig, "--metrics-address="+addr)
		if config != "" {
			path := filepath.Join(dir, name+".yaml")
			if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
				b.Fatal(err)
			}
			argv = append(argv, "--config="+path)
		}
		return &versusSubject{node: node, metrics: addr, conds: []corev1.NodeConditionType{"SelftaintUninitialized"},
			Process: &testkit.Process{Name: name, Dir: dir, Argv: argv}}
	}
	kernelLogConfig := func(fifo string) string {
		s := strings.NewReplacer(
			"/etc/selftaint/kernel-monitor.json", kernelMonitor,
			"/etc/selftaint/readonly-monitor.json", readonlyMonitor,
			"kmsgPath: /dev/kmsg", "kmsgPath: "+fifo,
		).Replace(string(deployKernelLog))
		if !strings.Contains(s, kernelMonitor) || !strings.Contains(s, readonlyMonitor) || !strings.Contains(s, "kmsgPath: "+fifo) {
			b.Fatal("deploy/kernel-log/config.yaml no longer names /etc/selftaint/kernel-monitor.json, /etc/selftaint/readonly-monitor.json and kmsgPath: /dev/kmsg: point the benchmark at what it names now")
		}
		return s
	}
	fifo := func(k *testkit.Kmsg, name string) string {
		return k.FIFO(b, filepath.Join(dir, name+".kmsg"), 0o644)
	}

	v.npdKmsg = npd("npd-kmsg", fifo(v.lines, "npd-kmsg"), kernelMonitor)
	v.npdKmsg.conds = kernelMonitorConds
	v.stKmsg = selftaint("selftaint-kmsg", 0, `probes:
  memory: {enabled: false}
  disk: {enabled: false}
  pid: {enabled: false}
  network: {enabled: false}
  gpu: {enabled: false}
checks:
  npdLogConfigs: [`+kernelMonitor+`]
  kmsgPath: `+fifo(v.lines, "selftaint-kmsg")+`
`)
	v.stKmsg.conds = append(v.stKmsg.conds, kernelMonitorConds...)
	npdKernelLog := npd("npd-kernel-log", fifo(v.idle, "npd-kernel-log"), kernelMonitor, readonlyMonitor)
	npdKernelLog.conds = append(slices.Clone(kernelMonitorConds), readonlyConds...)
	kernelLog := func(name string, uid int) *versusSubject {
		s := selftaint(name, uid, kernelLogConfig(fifo(v.idle, name)))
		s.conds = append(s.conds, kernelMonitorConds...)
		s.conds = append(s.conds, readonlyConds...)
		s.conds = append(s.conds, "SelftaintMemoryPressure")
		return s
	}
	defaults := func(name string, uid int) *versusSubject {
		s := selftaint(name, uid, "")
		s.conds = append(s.conds, "SelftaintMemoryPressure")
		return s
	}
	v.subjects = []*versusSubject{
		v.npdKmsg, v.stKmsg,
		npdKernelLog, kernelLog("selftaint-kernel-log", 0),
		kernelLog("selftaint-kernel-log-65532", versusUID),
		defaults("selftaint-defaults", 0), defaults("selftaint-defaults-65532", versusUID),
	}
	return v
}

// alive fails the benchmark as soon as a subject has exited.
func (v *versusRun) alive() {
	for _, s := range v.subjects {
		if err := s.Alive(); err != nil {
			v.b.Fatal(err)
		}
	}
}

// sleep waits d, failing as soon as a subject exits.
func (v *versusRun) sleep(d time.Duration) {
	end := time.Now().Add(d)
	for {
		v.alive()
		left := time.Until(end)
		if left <= 0 {
			return
		}
		time.Sleep(min(time.Second, left))
	}
}

// usage reads every subject's ProcUsage.
func (v *versusRun) usage() []testkit.ProcUsage {
	out := make([]testkit.ProcUsage, len(v.subjects))
	for k, s := range v.subjects {
		u, err := testkit.ReadUsage(s.Pid())
		if err != nil {
			v.b.Fatalf("%s: %v", s.Name, err)
		}
		out[k] = u
	}
	return out
}

// waitConditions waits until s's Node has every condition of s and ok
// holds for each, failing after timeout or as soon as a subject exits.
func (v *versusRun) waitConditions(s *versusSubject, timeout time.Duration, ok func(*corev1.NodeCondition) bool) {
	var last *corev1.Node
	err := testcp.Poll(context.Background(), timeout, 500*time.Millisecond, func() (bool, error) {
		v.alive()
		n, err := v.c.CoreV1().Nodes().Get(context.Background(), s.node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = n
		for _, typ := range s.conds {
			c := versusCondition(n, typ)
			if c == nil || !ok(c) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var have []string
		if last != nil {
			for _, c := range last.Status.Conditions {
				have = append(have, fmt.Sprintf("%s=%s", c.Type, c.Status))
			}
		}
		v.b.Fatalf("%s's Node %s: conditions %v not as awaited within %v (it has %v): %v; the end of its log:\n%s",
			s.Name, s.node, s.conds, timeout, have, err, testkit.Tail(s.Log(), 3000))
	}
}

func versusCondition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// versusLine is a kernel log line of one of kernel-monitor.json's rules:
// a permanent rule's (kind "condition": the rule's condition) or a
// temporary rule's (kind "temporary": the rule's reason). format has one
// %s, for the line's token.
type versusLine struct {
	kind, rule, format string
}

var (
	versusPermanent = []versusLine{
		{"condition", "KernelDeadlock", "task docker:%s blocked for more than 120 seconds."},
		{"condition", "XfsShutdown", "XFS (%s): Corruption of in-memory data detected.  Shutting down filesystem"},
		{"condition", "CperHardwareErrorFatal", "{%s}[Hardware Error]: event severity: fatal"},
	}
	versusTemporary = []versusLine{
		{"temporary", "OOMKilling", "Killed process 4242 (%s) total-vm:1024kB, anon-rss:512kB, file-rss:0kB, shmem-rss:0kB"},
		{"temporary", "TaskHung", "task %s:4242 blocked for more than 120 seconds."},
		{"temporary", "UnregisterNetDevice", "unregister_netdevice: waiting for %s to become free. Usage count = 1"},
		{"temporary", "KernelOops", "BUG: unable to handle kernel NULL pointer dereference at %s"},
		{"temporary", "Ext4Error", "EXT4-fs error (device %s): ext4_find_entry:1455: inode #2: comm ls: reading directory lblock 0"},
		{"temporary", "Ext4Warning", "EXT4-fs warning (device %s): ext4_dx_add_entry:2006: Directory index full!"},
		{"temporary", "IOError", "Buffer I/O error on dev %s, logical block 0, async page read"},
		{"temporary", "MemoryReadError", "CE memory read error on %s"},
		{"temporary", "CperHardwareErrorCorrected", "{%s}[Hardware Error]: event severity: corrected"},
		{"temporary", "CperHardwareErrorRecoverable", "{%s}[Hardware Error]: event severity: recoverable"},
	}
)

// versusTemporaryReason reports whether reason is a temporary rule's of
// kernel-monitor.json: an Event of another reason carrying a permanent
// rule's line is its condition change's (the docker line matches TaskHung
// too).
func versusTemporaryReason(reason string) bool {
	for _, l := range versusTemporary {
		if l.rule == reason {
			return true
		}
	}
	return false
}

// versusToken is the mark each line carries, found again in its Events'
// messages.
var versusToken = regexp.MustCompile(`vn[0-9]{5}`)

// eventSeen is an Event recorded (created, or its count gone up) as the
// watch saw it.
type eventSeen struct {
	node, reason, message string
	at                    time.Time
	// times is how many recordings it stands for (the count's rise).
	times int32
}

// eventLog follows every Node Event with a watch and files what it sees
// by the line token in its message.
type eventLog struct {
	mu      sync.Mutex // guards the fields below
	byToken map[string][]eventSeen
	counts  map[types.UID]int32
	changed chan struct{} // signalled (without blocking) on each Event seen
	err     error
}

func watchEvents(b *testing.B, c kubernetes.Interface) (*eventLog, func()) {
	el := &eventLog{byToken: map[string][]eventSeen{}, counts: map[types.UID]int32{}, changed: make(chan struct{}, 1)}
	sel := fields.OneTermEqualSelector("involvedObject.kind", "Node").String()
	ctx, cancel := context.WithCancel(context.Background())
	list := func() string {
		l, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			b.Fatalf("listing Events: %v", err)
		}
		el.mu.Lock()
		for _, e := range l.Items {
			el.counts[e.UID] = max(e.Count, 1)
		}
		el.mu.Unlock()
		return l.ResourceVersion
	}
	rv := list()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := c.CoreV1().Events("").Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv})
			if err != nil {
				if ctx.Err() == nil {
					time.Sleep(time.Second)
				}
				continue
			}
			for ev := range w.ResultChan() {
				e, ok := ev.Object.(*corev1.Event)
				if !ok {
					// An error (a resource version too old): start again
					// from a fresh list; what happened between is lost,
					// and said.
					el.mu.Lock()
					el.err = errors.Join(el.err, fmt.Errorf("the Event watch ended with %v at %s", ev.Object, time.Now().Format(time.TimeOnly)))
					el.mu.Unlock()
					w.Stop()
					if ctx.Err() == nil {
						rv = list()
					}
					break
				}
				rv = e.ResourceVersion
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					continue
				}
				el.seen(e)
			}
		}
	}()
	return el, func() {
		cancel()
		<-done
	}
}

func (el *eventLog) seen(e *corev1.Event) {
	now := time.Now()
	el.mu.Lock()
	defer el.mu.Unlock()
	count := max(e.Count, 1)
	times := count - el.counts[e.UID]
	if times <= 0 {
		return // not recorded again: another change
	}
	el.counts[e.UID] = count
	tok := versusToken.FindString(e.Message)
	el.byToken[tok] = append(el.byToken[tok], eventSeen{node: e.InvolvedObject.Name, reason: e.Reason, message: e.Message, at: now, times: times})
	select {
	case el.changed <- struct{}{}:
	default:
	}
}

// first is the first Event on node carrying token that want accepts.
func (el *eventLog) first(node, token string, want func(reason string) bool) (eventSeen, bool) {
	el.mu.Lock()
	defer el.mu.Unlock()
	for _, e := range el.byToken[token] {
		if e.node == node && want(e.reason) {
			return e, true
		}
	}
	return eventSeen{}, false
}

// recordings are the Events of token on node: recordings by reason.
func (el *eventLog) recordings(node, token string) map[string]int32 {
	el.mu.Lock()
	defer el.mu.Unlock()
	out := map[string]int32{}
	for _, e := range el.byToken[token] {
		if e.node == node {
			out[e.reason] += e.times
		}
	}
	return out
}

// versusLatency is one side's Event figures.
type versusLatency struct {
	// ms are the latencies by kind ("condition", "temporary").
	ms map[string][]float64
	// reasons are the reasons of the first Event of each line, by kind.
	reasons map[string]map[string]int
	// lines and missed count the lines written and those without an Event
	// of their kind, by kind.
	lines, missed map[string]int
	// twice counts Events recorded more than once for one line (and
	// reason); recorded all the Events seen for the lines.
	twice, recorded int
	// heldBack is selftaint's selftaint_events_held_back_total summed over
	// its processes, by reason; nil when the binary has no such metric.
	heldBack map[string]float64
}

// versusLatencyResult is the kmsg pair's.
type versusLatencyResult struct {
	npd, st  versusLatency
	rounds   int
	watchErr error
}

// latency runs phases 4 and 5 on the kmsg pair: events lines of each kind.
func (v *versusRun) latency(events int) versusLatencyResult {
	b := v.b
	el, stop := watchEvents(b, v.c)
	defer stop()
	pair := []*versusSubject{v.npdKmsg, v.stKmsg}
	res := versusLatencyResult{}
	for _, side := range []*versusLatency{&res.npd, &res.st} {
		*side = versusLatency{ms: map[string][]float64{}, reasons: map[string]map[string]int{"condition": {}, "temporary": {}},
			lines: map[string]int{}, missed: map[string]int{}}
	}
	sides := map[*versusSubject]*versusLatency{v.npdKmsg: &res.npd, v.stKmsg: &res.st}
	res.rounds = (events + len(versusPermanent) - 1) / len(versusPermanent)
	tempPerRound := (events + res.rounds - 1) / res.rounds
	var tokens []string
	seq, temp := 0, 0
	for round := 0; round < res.rounds; round++ {
		if round > 0 {
			v.nextRound(sides)
		}
		lines := slices.Clone(versusPermanent)
		for k := 0; k < tempPerRound; k++ {
			lines = append(lines, versusTemporary[temp%len(versusTemporary)])
			temp++
		}
		rand.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
		for _, l := range lines {
			seq++
			token := fmt.Sprintf("vn%05d", seq)
			tokens = append(tokens, token)
			time.Sleep(500*time.Millisecond + rand.N(time.Second))
			v.alive()
			want := func(reason string) bool { return true }
			if l.kind == "condition" {
				want = func(reason string) bool { return !versusTemporaryReason(reason) }
			}
			at := v.lines.Write(b, fmt.Sprintf(l.format, token))
			deadline := time.After(30 * time.Second)
			pending := slices.Clone(pair)
			for len(pending) > 0 {
				pending = slices.DeleteFunc(pending, func(s *versusSubject) bool {
					e, ok := el.first(s.node, token, want)
					if ok {
						side := sides[s]
						side.ms[l.kind] = append(side.ms[l.kind], float64(e.at.Sub(at))/float64(time.Millisecond))
						side.reasons[l.kind][e.reason]++
					}
					return ok
				})
				if len(pending) == 0 {
					break
				}
				select {
				case <-el.changed:
				case <-deadline:
					for _, s := range pending {
						sides[s].missed[l.kind]++
					}
					pending = nil
				}
			}
			for _, s := range pair {
				sides[s].lines[l.kind]++
			}
		}
	}
	// Stragglers: an Event recorded twice may come late.
	time.Sleep(10 * time.Second)
	for _, s := range pair {
		side := sides[s]
		for _, tok := range tokens {
			for _, n := range el.recordings(s.node, tok) {
				side.recorded += int(n)
				if n > 1 {
					side.twice += int(n) - 1
				}
			}
		}
		if s.metrics != "" {
			side.heldBack = addHeldBack(side.heldBack, v.heldBack(s))
		}
	}
	el.mu.Lock()
	res.watchErr = el.err
	el.mu.Unlock()
	return res
}

// nextRound makes both sides ready for another round: selftaint's
// permanent conditions cleared by the probes' clear requests, then both
// processes restarted with fresh pacing (NPD's start publishes its
// conditions False again; selftaint keeps what it held across a restart,
// hence the clears).
func (v *versusRun) nextRound(sides map[*versusSubject]*versusLatency) {
	b := v.b
	st := v.stKmsg
	for _, c := range kernelMonitorConds {
		testkit.RequestClear(b, v.c, st.node, "logmon-"+string(c), "versus-npd", string(c))
	}
	v.waitConditions(st, 2*time.Minute, func(c *corev1.NodeCondition) bool {
		return !slices.Contains(kernelMonitorConds, c.Type) || c.Status == corev1.ConditionFalse
	})
	sides[st].heldBack = addHeldBack(sides[st].heldBack, v.heldBack(st))
	v.npdKmsg.Restart(b)
	st.Restart(b)
	v.waitConditions(v.npdKmsg, 2*time.Minute, func(c *corev1.NodeCondition) bool { return c.Status == corev1.ConditionFalse })
	err := testcp.Poll(context.Background(), 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		v.alive()
		resp, err := http.Get("http://" + st.metrics + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		b.Fatalf("%s not ready after its restart: %v; the end of its log:\n%s", st.Name, err, testkit.Tail(st.Log(), 3000))
	}
	v.waitConditions(st, 2*time.Minute, func(c *corev1.NodeCondition) bool {
		return !slices.Contains(kernelMonitorConds, c.Type) || c.Status == corev1.ConditionFalse
	})
	time.Sleep(2 * time.Second) // both readers have opened their FIFOs
}

// versusHeldBack matches the metric of the Events selftaint's pacing held
// back.
var versusHeldBack = regexp.MustCompile(`^selftaint_events_held_back_total(?:\{reason="([^"]*)"\})? ([0-9.e+-]+)$`)

// heldBack is selftaint's selftaint_events_held_back_total by reason, read
// from s's /metrics; nil when it has no such metric (a build before it).
func (v *versusRun) heldBack(s *versusSubject) map[string]float64 {
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		v.b.Logf("%s: reading /metrics: %v", s.Name, err)
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		v.b.Logf("%s: reading /metrics: %v", s.Name, err)
		return nil
	}
	var out map[string]float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "# TYPE selftaint_events_held_back_total ") && out == nil {
			out = map[string]float64{}
		}
		m := versusHeldBack.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[m[1]] += n
	}
	return out
}

func addHeldBack(to, from map[string]float64) map[string]float64 {
	if from == nil {
		return to
	}
	if to == nil {
		to = map[string]float64{}
	}
	for r, n := range from {
		to[r] += n
	}
	return to
}

// versusFigures is what the phases measured.
type versusFigures struct {
	window, window2, rssAt time.Duration
	load                   []string
	u0, u1, u2             []testkit.ProcUsage
	mem                    []map[string]int64
	lat                    versusLatencyResult
}

// report logs the table (figure | NPD | selftaint | ratio), each
// process's figures, and reports the key figures as metrics.
func (v *versusRun) report(f versusFigures) {
	b := v.b
	idx := map[string]int{}
	for k, s := range v.subjects {
		idx[s.Name] = k
	}
	cpu := func(name string, second bool) float64 {
		k := idx[name]
		if second {
			if f.u2 == nil {
				return math.NaN()
			}
			return f.u2[k].Since(f.u1[k]).CPU.Seconds()
		}
		return f.u1[k].Since(f.u0[k]).CPU.Seconds()
	}
	vol := func(name string) int64 { k := idx[name]; return f.u1[k].Since(f.u0[k]).Voluntary }
	mib := func(name, field string) float64 { return float64(f.mem[idx[name]][field]) / 1024 }

	var t strings.Builder
	row := func(figure, npd, st, ratio string) {
		fmt.Fprintf(&t, "| %s | %s | %s | %s |\n", figure, npd, st, ratio)
	}
	ratio := func(st, npd float64) string {
		if npd == 0 || math.IsNaN(st) || math.IsNaN(npd) {
			return "—"
		}
		return fmt.Sprintf("%.2f", st/npd)
	}
	w1 := f.window.String()
	t.WriteString("\n| figure | NPD | selftaint | ratio |\n|---|---|---|---|\n")
	pairs := []struct{ label, npd, st string }{
		{"same kernel-log file (kernel-monitor.json), probes off", "npd-kmsg", "selftaint-kmsg"},
		{"deploy/kernel-log's config vs NPD with its two files", "npd-kernel-log", "selftaint-kernel-log"},
	}
	for _, p := range pairs {
		n1, s1 := cpu(p.npd, false), cpu(p.st, false)
		row(fmt.Sprintf("CPU, %s, quiet %s", p.label, w1), fmt.Sprintf("%.3f s", n1), fmt.Sprintf("%.3f s", s1), ratio(s1, n1))
		if f.u2 != nil {
			n2, s2 := cpu(p.npd, true), cpu(p.st, true)
			row(fmt.Sprintf("CPU, %s, the next quiet %s", p.label, f.window2.Round(time.Second)), fmt.Sprintf("%.3f s", n2), fmt.Sprintf("%.3f s", s2), ratio(s2, n2))
		}
		nv, sv := vol(p.npd), vol(p.st)
		row(fmt.Sprintf("voluntary context switches, %s, quiet %s", p.label, w1), strconv.FormatInt(nv, 10), strconv.FormatInt(sv, 10), ratio(float64(sv), float64(nv)))
	}
	lat := f.lat
	for _, kind := range []struct{ key, label string }{{"condition", "condition-change Event"}, {"temporary", "temporary-rule Event"}} {
		np, sp := pct(lat.npd.ms[kind.key]), pct(lat.st.ms[kind.key])
		row(kind.label+" p50 / p90 / max", np.String(), sp.String(), ratio(sp.p50, np.p50)+" (p50)")
		row(kind.label+" reasons", reasonList(lat.npd.reasons[kind.key]), reasonList(lat.st.reasons[kind.key]), "")
		row(kind.label+": lines written / without an Event", fmt.Sprintf("%d / %d", lat.npd.lines[kind.key], lat.npd.missed[kind.key]),
			fmt.Sprintf("%d / %d", lat.st.lines[kind.key], lat.st.missed[kind.key]), "")
	}
	row("Events seen / recorded twice for one line", fmt.Sprintf("%d / %d", lat.npd.recorded, lat.npd.twice), fmt.Sprintf("%d / %d", lat.st.recorded, lat.st.twice), "")
	row("Events held back (selftaint_events_held_back_total)", "—", heldBackString(lat.st.heldBack), "")
	for _, p := range []struct{ label, npd, st string }{
		{"same kernel-log file", "npd-kmsg", "selftaint-kmsg"},
		{"deploy/kernel-log (root)", "npd-kernel-log", "selftaint-kernel-log"},
		{"deploy/kernel-log (uid 65532)", "npd-kernel-log", "selftaint-kernel-log-65532"},
		{"defaults (root)", "npd-kernel-log", "selftaint-defaults"},
		{"defaults (uid 65532)", "npd-kernel-log", "selftaint-defaults-65532"},
	} {
		row(fmt.Sprintf("RSS at %s, %s: VmRSS (RssAnon + RssFile) MiB", f.rssAt.Round(time.Second), p.label),
			memString(f.mem[idx[p.npd]]), memString(f.mem[idx[p.st]]), ratio(mib(p.st, "VmRSS"), mib(p.npd, "VmRSS")))
	}

	var d strings.Builder
	fmt.Fprintf(&d, "\nload average (1, 5, 15 min) at the quiet windows' start, between and end: %s\n", strings.Join(f.load, " | "))
	fmt.Fprintf(&d, "%-28s %10s %10s %9s %9s %10s %9s %8s %8s %8s\n", "process", "CPU s", "stat s", "vol cs", "invol cs", "CPU2 s", "vol cs2", "VmRSS", "RssAnon", "RssFile")
	for k, s := range v.subjects {
		u := f.u1[k].Since(f.u0[k])
		cpu2, vol2 := "—", "—"
		if f.u2 != nil {
			u2 := f.u2[k].Since(f.u1[k])
			cpu2, vol2 = fmt.Sprintf("%.4f", u2.CPU.Seconds()), strconv.FormatInt(u2.Voluntary, 10)
		}
		fmt.Fprintf(&d, "%-28s %10.4f %10.2f %9d %9d %10s %9s %8.1f %8.1f %8.1f\n", s.Name, u.CPU.Seconds(), u.StatSeconds, u.Voluntary, u.Involuntary,
			cpu2, vol2, mib(s.Name, "VmRSS"), mib(s.Name, "RssAnon"), mib(s.Name, "RssFile"))
	}
	fmt.Fprintf(&d, "Event latency: %d rounds on the kmsg pair (both restarted between rounds)", lat.rounds)
	if lat.watchErr != nil {
		fmt.Fprintf(&d, "; the Event watch was re-listed, Events may be missing: %v", lat.watchErr)
	}
	b.Logf("BenchmarkVersusNPD: NPD v0.8.20 vs selftaint, one API server, each on its own Node%s%s", t.String(), d.String())

	b.ReportMetric(cpu("selftaint-kmsg", false)/cpu("npd-kmsg", false), "kmsg-cpu/npd")
	b.ReportMetric(cpu("selftaint-kernel-log", false)/cpu("npd-kernel-log", false), "kernel-log-cpu/npd")
	b.ReportMetric(cpu("npd-kmsg", false), "npd-kmsg-cpu-s")
	b.ReportMetric(cpu("selftaint-kmsg", false), "selftaint-kmsg-cpu-s")
	b.ReportMetric(cpu("npd-kernel-log", false), "npd-kernel-log-cpu-s")
	b.ReportMetric(cpu("selftaint-kernel-log", false), "selftaint-kernel-log-cpu-s")
	for _, kind := range []string{"condition", "temporary"} {
		np, sp := pct(lat.npd.ms[kind]), pct(lat.st.ms[kind])
		b.ReportMetric(np.p50, "npd-"+kind+"-p50-ms")
		b.ReportMetric(np.p90, "npd-"+kind+"-p90-ms")
		b.ReportMetric(sp.p50, "selftaint-"+kind+"-p50-ms")
		b.ReportMetric(sp.p90, "selftaint-"+kind+"-p90-ms")
	}
	b.ReportMetric(float64(lat.st.missed["condition"]+lat.st.missed["temporary"]), "selftaint-lines-missed")
	b.ReportMetric(float64(lat.npd.missed["condition"]+lat.npd.missed["temporary"]), "npd-lines-missed")
	b.ReportMetric(float64(lat.st.twice), "selftaint-events-twice")
	for _, s := range v.subjects {
		b.ReportMetric(mib(s.Name, "VmRSS"), s.Name+"-rss-MiB")
	}
}

// latencyFigures are the nearest-rank percentiles of some latencies, ms.
type latencyFigures struct {
	n             int
	p50, p90, max float64
}

func pct(ms []float64) latencyFigures {
	if len(ms) == 0 {
		return latencyFigures{p50: math.NaN(), p90: math.NaN(), max: math.NaN()}
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	at := func(q float64) float64 { return s[max(0, min(len(s)-1, int(math.Ceil(float64(len(s))*q))-1))] }
	return latencyFigures{n: len(s), p50: at(0.5), p90: at(0.9), max: s[len(s)-1]}
}

func (l latencyFigures) String() string {
	if l.n == 0 {
		return "none"
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f ms (%d)", l.p50, l.p90, l.max, l.n)
}

func reasonList(m map[string]int) string {
	var out []string
	for r, n := range m {
		out = append(out, fmt.Sprintf("%s ×%d", r, n))
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func heldBackString(m map[string]float64) string {
	if m == nil {
		// A counter vector shows on /metrics only once a reason has a
		// series: nothing held back, or a binary without the metric.
		return "0 (no series on /metrics)"
	}
	var out []string
	total := 0.0
	for r, n := range m {
		total += n
		out = append(out, fmt.Sprintf("%s %g", r, n))
	}
	slices.Sort(out)
	return fmt.Sprintf("%g (%s)", total, strings.Join(out, ", "))
}

func memString(m map[string]int64) string {
	return fmt.Sprintf("%.1f (%.1f + %.1f)", float64(m["VmRSS"])/1024, float64(m["RssAnon"])/1024, float64(m["RssFile"])/1024)
}
