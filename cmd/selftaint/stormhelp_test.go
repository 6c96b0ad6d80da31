package main

// The harness of the fleet e2e tests (storm_test.go): selftaint processes
// (virtual nodes and coordinators) run as children of the test binary, a
// watch that sees every version of every Node and checks the NoExecute
// budget at each one, a watch on the grant Leases, and the fault and
// measurement helpers.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/agent/virtual"
	"github.com/selftaint/selftaint/taints/faults"
	"github.com/selftaint/selftaint/taints/fleet"
)

const (
	// stormCond and stormKey are the NoExecute rule the storms fault.
	stormCond = corev1.NodeConditionType("SelftaintMemoryPressure")
	stormKey  = "selftaint.io/memory-pressure"
	// diskCond and diskKey are a NoSchedule rule, for TestNoCoordinator.
	diskCond = corev1.NodeConditionType("SelftaintDiskPressure")
	diskKey  = "selftaint.io/disk-pressure"
	// coordNS is where the grants, the guard and the leader Lease live
	// (the config's coordinator.namespace, so agents and coordinators
	// agree whatever $POD_NAMESPACE says).
	coordNS = "kube-system"
	// Leader election of the coordinators of the tests that kill a
	// leader (startFastCoordinator): short, so a takeover fits in a test.
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// fleetPolicy is the coordinator section of a storm test's config.
type fleetPolicy struct {
	maxNoExecute  string // a count or a percent
	ratePerMinute int
	grantTTL      time.Duration
	// guard is the guard section's fields inside {}, e.g.
	// `threshold: "55%", coolDown: 20s`; empty for the defaults.
	guard string
	// diskRule adds a NoSchedule rule for SelftaintDiskPressure.
	diskRule bool
}

// writeStormConfig writes the agents' and coordinators' config: the
// NoExecute rule (fallback NoSchedule), a change limiter loose enough for
// storms that re-inject many times, and the coordinator section (a
// virtual fleet: the storms' nodes are virtual).
func writeStormConfig(t *testing.T, p fleetPolicy) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `rules:
- condition: %s
  taint: {key: %s, effect: NoExecute}
  fallback: NoSchedule
`, stormCond, stormKey)
	if p.diskRule {
		fmt.Fprintf(&b, `- condition: %s
  taint: {key: %s, effect: NoSchedule}
`, diskCond, diskKey)
	}
	fmt.Fprintf(&b, `changeLimiter: {burst: 100, refill: 1s}
coordinator:
  namespace: %s
  maxNoExecute: %s
  ratePerMinute: %d
  grantTTL: %s
  fleet: virtual
`, coordNS, p.maxNoExecute, p.ratePerMinute, p.grantTTL)
	if p.guard != "" {
		fmt.Fprintf(&b, "  guard: {%s}\n", p.guard)
	}
	return writeFile(t, b.String())
}

// proc is a selftaint command running as a child of the test binary.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr *testkit.LogBuffer
	done   chan struct{}
	err    error // the exit status, once done is closed
}

// startProc runs `selftaint args...` (this test binary running main). It
// is interrupted at the end of the test unless it has exited; its stderr
// is logged if the test failed (or STORM_LOGS is set), and kept whole in
// $STORM_LOG_DIR if set. A process that exits by itself is
// reported in the log (a coordinator that loses its leadership exits).
func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, stderr: &testkit.LogBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), "SELFTAINT_TEST_RUN_MAIN=1", "SELFTAINT_TEST_ARGS="+strings.Join(args, " "))
	p.cmd.Stderr = p.stderr
	if dir := os.Getenv("STORM_LOG_DIR"); dir != "" {
		// Keep whole logs for a post-mortem.
		f, err := os.Create(filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_", "*", "").Replace(t.Name()+"-"+name)+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		p.cmd.Stderr = io.MultiWriter(p.stderr, f)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s (selftaint %s): %v", name, strings.Join(args, " "), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
				t.Errorf("%s did not stop within 20s of SIGINT", name)
			}
		}
		if t.Failed() || os.Getenv("STORM_LOGS") != "" {
			t.Logf("%s stderr (last 16 KiB):\n%s", name, lastBytes(p.stderr.String(), 16<<10))
		}
	})
	return p
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("killing %s: %v", p.name, err)
	}
	<-p.done
}

// killOrExited is kill for a process that may exit by itself at any
// moment (a coordinator losing its leadership): it reports false when the
// process had exited already, and waits for it either way.
func (p *proc) killOrExited(t *testing.T) bool {
	t.Helper()
	err := p.cmd.Process.Kill()
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("killing %s: %v", p.name, err)
	}
	<-p.done
	return err == nil
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// startZone runs n virtual nodes called prefix1..prefixN in zone (none
// when empty), in one process.
func startZone(t *testing.T, cp *testcp.ControlPlane, cfg, prefix, zone string, n int, extra ...string) *proc {
	t.Helper()
	args := []string{"virtual", fmt.Sprintf("--nodes=%d", n), "--name-prefix=" + prefix,
		"--kubeconfig=" + cp.KubeconfigPath, "--config=" + cfg, "--log-level=info",
		// Storms write a lot: far above the default of 2 per node.
		fmt.Sprintf("--kube-api-qps=%d", max(100, 10*n)), fmt.Sprintf("--kube-api-burst=%d", max(200, 20*n))}
	if zone != "" {
		args = append(args, "--labels="+fleet.ZoneLabel+"="+zone)
	}
	return startProc(t, "virtual "+prefix+"*", append(args, extra...)...)
}

// coordProc is a `selftaint coordinator` replica.
type coordProc struct {
	*proc
	identity string
}

// startCoordinator runs a coordinator replica with its default leader
// election and its metrics on a free loopback port. The tests that kill a
// leader use startFastCoordinator; for the others a short renew deadline
// only made a replica exit (losing its leadership) when the machine was
// loaded, and with no replica to take over the test failed for nothing.
func startCoordinator(t *testing.T, cp *testcp.ControlPlane, cfg, identity string) *coordProc {
	t.Helper()
	return startCoordinatorArgs(t, cp, cfg, identity)
}

// startFastCoordinator is startCoordinator with short leader election
// (leaseDuration, renewDeadline, retryPeriod), so that a takeover fits in
// a test.
func startFastCoordinator(t *testing.T, cp *testcp.ControlPlane, cfg, identity string) *coordProc {
	t.Helper()
	return startCoordinatorArgs(t, cp, cfg, identity,
		"--leader-elect-lease-duration="+leaseDuration.String(),
		"--leader-elect-renew-deadline="+renewDeadline.String(),
		"--leader-elect-retry-period="+retryPeriod.String())
}

func startCoordinatorArgs(t *testing.T, cp *testcp.ControlPlane, cfg, identity string, extra ...string) *coordProc {
	t.Helper()
	args := []string{"coordinator", "--kubeconfig=" + cp.KubeconfigPath, "--config=" + cfg,
		"--identity=" + identity, "--metrics-address=127.0.0.1:0", "--log-level=info",
		"--kube-api-qps=200", "--kube-api-burst=400"}
	p := startProc(t, "coordinator "+identity, append(args, extra...)...)
	return &coordProc{proc: p, identity: identity}
}

var metricsAddrRE = regexp.MustCompile(`msg="serving metrics and health" address=(\S+)`)

// apiRequests is the coordinator's selftaint_api_requests_total summed
// over its labels, from its /metrics (-1 if it cannot be read).
func (c *coordProc) apiRequests() float64 {
	m := metricsAddrRE.FindStringSubmatch(c.stderr.String())
	if m == nil {
		return -1
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	return sumMetric(resp.Body, "selftaint_api_requests_total")
}

func sumMetric(r io.Reader, name string) float64 {
	sum := 0.0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

var virtualStatsRE = regexp.MustCompile(`msg="virtual nodes running".* apiRequests=([0-9]+) apiRequestsPerSecond=([0-9.]+)`)

// virtualRequests is the virtual process's API requests so far, from its
// last stats line (-1 if none yet).
func virtualRequests(p *proc) int64 {
	ms := virtualStatsRE.FindAllStringSubmatch(p.stderr.String(), -1)
	if len(ms) == 0 {
		return -1
	}
	n, _ := strconv.ParseInt(ms[len(ms)-1][1], 10, 64)
	return n
}

// leaderOf is the holder of the coordinators' leader Lease ("" if none).
func leaderOf(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	l, err := c.CoordinationV1().Leases(coordNS).Get(t.Context(), fleet.DefaultLeaderLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("reading the leader Lease: %v", err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leadingReplica returns the running replica that holds the leader Lease,
// and another running one if there is one (nil: none).
func leadingReplica(t *testing.T, c kubernetes.Interface, replicas []*coordProc) (leader, other *coordProc) {
	t.Helper()
	id := leaderOf(t, c)
	for _, r := range replicas {
		switch {
		case !r.running():
		case r.identity == id:
			leader = r
		case other == nil:
			other = r
		}
	}
	if leader == nil {
		return nil, nil
	}
	return leader, other
}

// restartLostLeaders restarts, in place, each replica but killed that has
// exited on a lost leadership, as its Deployment would; a replica that
// exited for any other reason fails the test.
func restartLostLeaders(t *testing.T, cp *testcp.ControlPlane, cfg string, replicas []*coordProc, killed *coordProc) {
	t.Helper()
	for i, r := range replicas {
		if r == killed || r.running() {
			continue
		}
		if !strings.Contains(r.stderr.String(), "lost leadership") {
			t.Fatalf("%s exited, not on a lost leadership: %v\n%s", r.name, r.err, lastBytes(r.stderr.String(), 4<<10))
		}
		t.Logf("%s lost its leadership by itself and exited (%v); restarting it, as its Deployment would", r.identity, r.err)
		replicas[i] = startFastCoordinator(t, cp, cfg, r.identity)
	}
}

// waitLeader waits until one of coords holds the leader Lease and the
// guard ConfigMap has been written, and returns the leader.
func waitLeader(t *testing.T, c kubernetes.Interface, timeout time.Duration, coords ...*coordProc) *coordProc {
	t.Helper()
	var leader *coordProc
	err := testcp.Poll(t.Context(), timeout, 100*time.Millisecond, func() (bool, error) {
		id := leaderOf(t, c)
		leader = nil
		for _, cp := range coords {
			if cp.identity == id {
				leader = cp
			}
		}
		if leader == nil {
			return false, nil
		}
		_, err := c.CoreV1().ConfigMaps(coordNS).Get(t.Context(), fleet.DefaultGuardName, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no coordinator leads with a guard written after %s: leader Lease holder %q: %v", timeout, leaderOf(t, c), err)
	}
	return leader
}

// readGuard reads and decodes the guard ConfigMap.
func readGuard(t *testing.T, c kubernetes.Interface) (fleet.GuardState, bool) {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(coordNS).Get(t.Context(), fleet.DefaultGuardName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fleet.GuardState{}, false
	}
	if err != nil {
		t.Fatalf("reading the guard: %v", err)
	}
	g, err := fleet.DecodeGuard(cm.Data)
	if err != nil {
		t.Fatalf("decoding the guard %v: %v", cm.Data, err)
	}
	return g, true
}

// waitFleet waits until every named node is Ready and reports cond False.
func waitFleet(t *testing.T, c kubernetes.Interface, names []string, timeout time.Duration) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	began := time.Now()
	var missing []string
	err := testcp.Poll(t.Context(), timeout, time.Second, func() (bool, error) {
		list, err := c.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: virtual.LabelVirtual + "=true"})
		if err != nil {
			return false, err
		}
		ok := map[string]bool{}
		for i := range list.Items {
			n := &list.Items[i]
			if conditionStatus(n, corev1.NodeReady) == corev1.ConditionTrue && conditionStatus(n, stormCond) == corev1.ConditionFalse {
				ok[n.Name] = true
			}
		}
		missing = missing[:0]
		for n := range want {
			if !ok[n] {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		slices.Sort(missing)
		t.Fatalf("%d of %d nodes not Ready with %s False after %s: %v (first: %v)", len(missing), len(names), stormCond, timeout, err, missing[:min(10, len(missing))])
	}
	t.Logf("%d virtual nodes Ready and reporting %s False %s after start", len(names), stormCond, time.Since(began).Round(time.Millisecond))
}

// faultValue is a fault annotation value putting the condition True for d.
func faultValue(t *testing.T, d time.Duration) string {
	t.Helper()
	v, err := faults.Spec{
		Status: corev1.ConditionTrue, Reason: "StormTest", Message: "storm",
		ExpiresAt: time.Now().Add(d).UTC().Format(time.RFC3339), InjectedBy: "storm test",
	}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// patchFaults writes (value non-empty) or removes (value "") the fault
// annotation on cond on every node, from a pool of workers, as fast as
// the API server takes it. It returns when each write returned.
func patchFaults(t *testing.T, c kubernetes.Interface, nodes []string, cond corev1.NodeConditionType, value string) map[string]time.Time {
	t.Helper()
	key := strconv.Quote(faults.AnnotationKey(string(cond)))
	patch := []byte(`{"metadata":{"annotations":{` + key + `:null}}}`)
	if value != "" {
		patch = []byte(`{"metadata":{"annotations":{` + key + `:` + strconv.Quote(value) + `}}}`)
	}
	var mu sync.Mutex
	at := make(map[string]time.Time, len(nodes))
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(16, len(nodes)) {
		wg.Go(func() {
			for n := range work {
				_, err := c.CoreV1().Nodes().Patch(context.Background(), n, types.MergePatchType, patch, metav1.PatchOptions{})
				if err != nil {
					t.Errorf("patching the fault on %s: %v", n, err)
					continue
				}
				mu.Lock()
				at[n] = time.Now()
				mu.Unlock()
			}
		})
	}
	for _, n := range nodes {
		work <- n
	}
	close(work)
	wg.Wait()
	return at
}

func injectFaults(t *testing.T, c kubernetes.Interface, nodes []string, d time.Duration) map[string]time.Time {
	t.Helper()
	return patchFaults(t, c, nodes, stormCond, faultValue(t, d))
}

func clearFaults(t *testing.T, c kubernetes.Interface, nodes []string) map[string]time.Time {
	t.Helper()
	return patchFaults(t, c, nodes, stormCond, "")
}

// eventsWithReason lists the Events with reason, in every namespace.
func eventsWithReason(t *testing.T, c kubernetes.Interface, reason string) []corev1.Event {
	t.Helper()
	sel := fields.OneTermEqualSelector("reason", reason).String()
	evs, err := c.CoreV1().Events(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("listing %s events: %v", reason, err)
	}
	return evs.Items
}

// nodeVersion is one Node version as the fleet watch saw it: the parts that
// matter here.
type nodeVersion struct {
	at       time.Time // when the watch received it
	rv       uint64
	gone     bool // the Node was deleted
	noExec   bool // carries stormKey:NoExecute
	fallback bool // carries stormKey:NoSchedule
	faulted  bool // carries a fault annotation on stormCond
	cond     corev1.ConditionStatus
	request  bool      // carries the NoExecute request annotation
	since    time.Time // the request's since
}

func (s nodeVersion) same(o nodeVersion) bool {
	return s.gone == o.gone && s.noExec == o.noExec && s.fallback == o.fallback && s.faulted == o.faulted &&
		s.cond == o.cond && s.request == o.request && s.since.Equal(o.since)
}

// nodeTrack is what the fleet watch knows of one node: its zone and the
// versions at which any of the sampled parts changed.
type nodeTrack struct {
	zone     string
	timeline []nodeVersion
}

func (n *nodeTrack) last() nodeVersion { return n.timeline[len(n.timeline)-1] }

// budgetViolation is a Node version after which more nodes carried the
// NoExecute taint than the budget.
type budgetViolation struct {
	at       time.Time
	rv       uint64
	carrying []string
}

// fleetWatch is one watch on all Nodes from a resourceVersion taken before
// the storm, re-established from the last version seen when it closes, so
// that it sees every version of every Node in resourceVersion order. At
// each version it checks that no more nodes carry the NoExecute taint than
// the budget, and it keeps every node's timeline.
type fleetWatch struct {
	c      kubernetes.Interface
	budget int

	mu          sync.Mutex // guards the fields below
	nodes       map[string]*nodeTrack
	carrying    map[string]bool
	maxCarrying int
	versions    int
	restarts    int
	lastRV      uint64
	violations  []budgetViolation
	additions   map[string][]time.Time // NoExecute additions by zone, receive times
	fatal       error                  // the watch lost history: it cannot vouch for every version
}

// watchFleet lists the Nodes, then watches them from the list's
// resourceVersion until the test ends.
func watchFleet(t *testing.T, c kubernetes.Interface, budget int) *fleetWatch {
	t.Helper()
	list, err := c.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	w := &fleetWatch{c: c, budget: budget, nodes: map[string]*nodeTrack{}, carrying: map[string]bool{}, additions: map[string][]time.Time{}}
	now := time.Now()
	for i := range list.Items {
		w.apply(&list.Items[i], now, false, false)
	}
	rv, _ := strconv.ParseUint(list.ResourceVersion, 10, 64)
	w.lastRV = rv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return w
}

// run watches from the list's resourceVersion until ctx ends. One
// goroutine only reads the stream (so the API server never finds this
// watcher slow) and stamps each event with its receive time; another
// applies them in order.
func (w *fleetWatch) run(ctx context.Context) {
	type received struct {
		ev watch.Event
		at time.Time
	}
	q := make(chan received, 1<<16)
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		for r := range q {
			switch r.ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				if n, ok := r.ev.Object.(*corev1.Node); ok {
					w.apply(n, r.at, r.ev.Type == watch.Deleted, true)
				}
			case watch.Bookmark:
				if m, err := metaRV(r.ev.Object); err == nil {
					w.mu.Lock()
					w.lastRV = max(w.lastRV, m)
					w.mu.Unlock()
				}
			}
		}
	}()
	defer func() {
		close(q)
		<-applied
	}()
	w.mu.Lock()
	from := w.lastRV
	w.mu.Unlock()
	for ctx.Err() == nil {
		wi, err := w.c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatUint(from, 10), AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				w.fail(fmt.Errorf("re-watching Nodes from %d: %w", from, err))
				return
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range wi.ResultChan() {
			now := time.Now()
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					w.fail(fmt.Errorf("the Node watch from %d lost history: %w", from, err))
					wi.Stop()
					return
				}
				continue
			}
			if rv, err := metaRV(ev.Object); err == nil && rv > from {
				from = rv
			}
			q <- received{ev, now}
		}
		wi.Stop()
		w.mu.Lock()
		w.restarts++
		w.mu.Unlock()
	}
}

func metaRV(obj any) (uint64, error) {
	m, err := metaAccessor(obj)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(m.GetResourceVersion(), 10, 64)
}

func metaAccessor(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", obj)
	}
	return m, nil
}

func (w *fleetWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fatal == nil {
		w.fatal = err
	}
}

// apply records one Node version and checks the budget after it. watched
// versions (not the initial list's) must come in resourceVersion order.
func (w *fleetWatch) apply(n *corev1.Node, at time.Time, deleted, watched bool) {
	rv, _ := strconv.ParseUint(n.ResourceVersion, 10, 64)
	s := nodeVersion{at: at, rv: rv, gone: deleted}
	if !deleted {
		s.noExec = hasTaintKey(n, stormKey, corev1.TaintEffectNoExecute)
		s.fallback = hasTaintKey(n, stormKey, corev1.TaintEffectNoSchedule)
		_, s.faulted = n.Annotations[faults.AnnotationKey(string(stormCond))]
		s.cond = conditionStatus(n, stormCond)
		if raw, ok := n.Annotations[fleet.RequestAnnotation]; ok {
			s.request = true
			if r, err := fleet.ParseRequest(raw); err == nil {
				s.since = r.Since
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if watched && rv <= w.lastRV {
		// A watch re-established from lastRV never repeats a version:
		// this would mean the order cannot be trusted.
		if w.fatal == nil {
			w.fatal = fmt.Errorf("node %s version %d seen after version %d", n.Name, rv, w.lastRV)
		}
	}
	w.lastRV = max(w.lastRV, rv)
	w.versions++
	tr := w.nodes[n.Name]
	if tr == nil {
		tr = &nodeTrack{}
		w.nodes[n.Name] = tr
	}
	if z := n.Labels[fleet.ZoneLabel]; z != "" {
		tr.zone = z
	}
	was := len(tr.timeline) > 0 && tr.last().noExec
	if len(tr.timeline) == 0 || !tr.last().same(s) {
		tr.timeline = append(tr.timeline, s)
	}
	if s.noExec && !was {
		w.additions[tr.zone] = append(w.additions[tr.zone], at)
	}
	if s.noExec {
		w.carrying[n.Name] = true
	} else {
		delete(w.carrying, n.Name)
	}
	w.maxCarrying = max(w.maxCarrying, len(w.carrying))
	if len(w.carrying) > w.budget {
		names := make([]string, 0, len(w.carrying))
		for c := range w.carrying {
			names = append(names, c)
		}
		slices.Sort(names)
		w.violations = append(w.violations, budgetViolation{at: at, rv: rv, carrying: names})
	}
}

// carryingNow is the nodes carrying the NoExecute taint at the last
// version seen.
func (w *fleetWatch) carryingNow() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.carrying))
	for n := range w.carrying {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// timeline is a copy of node's timeline.
func (w *fleetWatch) timeline(node string) []nodeVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	if tr := w.nodes[node]; tr != nil {
		return slices.Clone(tr.timeline)
	}
	return nil
}

// now is node's last version seen.
func (w *fleetWatch) now(node string) (nodeVersion, bool) {
	tl := w.timeline(node)
	if len(tl) == 0 {
		return nodeVersion{}, false
	}
	return tl[len(tl)-1], true
}

// first is the first version of node at or after from for which ok
// holds.
func (w *fleetWatch) first(node string, from time.Time, ok func(nodeVersion) bool) (nodeVersion, bool) {
	tl := w.timeline(node)
	for i, s := range tl {
		// The state in force at from counts too: it is the last version
		// before from.
		if s.at.Before(from) && (i+1 < len(tl) && !tl[i+1].at.After(from)) {
			continue
		}
		if ok(s) {
			return s, true
		}
	}
	return nodeVersion{}, false
}

// describe is node's timeline, for failure messages.
func (w *fleetWatch) describe(node string) string {
	var b strings.Builder
	for _, s := range w.timeline(node) {
		fmt.Fprintf(&b, "\n  %s rv=%d gone=%v fault=%v cond=%q fallback=%v noExecute=%v request=%v since=%s",
			s.at.Format(time.StampMilli), s.rv, s.gone, s.faulted, s.cond, s.fallback, s.noExec, s.request, s.since.Format(time.TimeOnly))
	}
	return b.String()
}

// ever reports whether ok held at any version of node seen.
func (w *fleetWatch) ever(node string, ok func(nodeVersion) bool) bool {
	_, found := w.first(node, time.Time{}, ok)
	return found
}

// waitAll waits until ok holds at the last version of every node, and
// returns the nodes for which it does not when the time is up.
func (w *fleetWatch) waitAll(t *testing.T, nodes []string, timeout time.Duration, ok func(nodeVersion) bool) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var not []string
		for _, n := range nodes {
			if s, seen := w.now(n); !seen || !ok(s) {
				not = append(not, n)
			}
		}
		if len(not) == 0 || time.Now().After(deadline) || t.Context().Err() != nil {
			return not
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check fails the test if the watch lost history, or the budget or the
// per-zone rate (0: not checked) was broken at any version; it logs what
// the watch saw. allow, if not nil, excuses a version over the budget
// (only TestHolderGoneFreesGrant has one: an abandoned taint).
func (w *fleetWatch) check(t *testing.T, ratePerMinute int, allow func(budgetViolation) bool) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fatal != nil {
		t.Errorf("the Node watch cannot vouch for every version: %v", w.fatal)
	}
	t.Logf("fleet watch: %d Node versions seen (watch re-established %d times), at most %d nodes carried %s:NoExecute at once (budget %d)",
		w.versions, w.restarts, w.maxCarrying, stormKey, w.budget)
	var violations []budgetViolation
	for _, v := range w.violations {
		if allow == nil || !allow(v) {
			violations = append(violations, v)
		}
	}
	for i, v := range violations {
		if i == 5 {
			t.Errorf("... and %d more versions over the budget", len(violations)-5)
			break
		}
		t.Errorf("budget broken at Node resourceVersion %d (%s): %d nodes carry %s:NoExecute, budget %d: %v",
			v.rv, v.at.Format(time.StampMilli), len(v.carrying), stormKey, w.budget, v.carrying)
	}
	// The coordinator limits grant starts, on its own clock, to
	// ratePerMinute in any minute per zone. What the watch sees is the
	// NoExecute taints appearing, each one an agent's reaction time after
	// its grant, received by this watch a little later still. A grant
	// whose taint comes late (a busy agent, a watch delivering a burst)
	// can land in the same 60s window as grants that started a minute
	// after it, so a window may hold one more taint addition than grants
	// started; never two more unless the agents' latency varies by more
	// than the rate's spacing (60s/ratePerMinute), which would itself be a
	// failure worth seeing.
	if ratePerMinute > 0 {
		for _, zone := range slices.Sorted(maps.Keys(w.additions)) {
			adds := w.additions[zone]
			n, from := maxInWindow(adds, time.Minute)
			t.Logf("zone %q: %d NoExecute taints added, at most %d in any minute (rate %d)", zone, len(adds), n, ratePerMinute)
			if n > ratePerMinute+1 {
				t.Errorf("zone %q: %d NoExecute taints added in the minute from %s (watch receive times), rate %d per minute (+1 for watch and agent latency)",
					zone, n, from.Format(time.StampMilli), ratePerMinute)
			}
		}
	}
}

// maxInWindow is the largest number of times in any window [t, t+d) and
// where that window starts.
func maxInWindow(ts []time.Time, d time.Duration) (int, time.Time) {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, time.Time.Compare)
	best, from, j := 0, time.Time{}, 0
	for i := range ts {
		for j < len(ts) && ts[j].Sub(ts[i]) < d {
			j++
		}
		if j-i > best {
			best, from = j-i, ts[i]
		}
	}
	return best, from
}

// grantWatch watches the grant Leases and records, per node, when the
// watch first saw each grant start (the Lease naming the node its holder
// with a new acquireTime) and end (holder cleared, or the Lease deleted).
type grantWatch struct {
	mu       sync.Mutex // guards the fields below
	starts   map[string][]time.Time
	ends     map[string][]time.Time
	holding  map[string]time.Time // node -> acquireTime of the grant it holds now
	fatal    error
	versions int
	// maxHeld is the most grants held at once, at any Lease version, and
	// who held them then.
	maxHeld     int
	maxHeldWhen []string
	// acquired are the grants' acquireTimes (the coordinator's clock) by
	// the zone they started in.
	acquired map[string][]time.Time
}

func watchGrants(t *testing.T, c kubernetes.Interface) *grantWatch {
	t.Helper()
	leases := c.CoordinationV1().Leases(coordNS)
	sel := fleet.GrantLabel + "=true"
	list, err := leases.List(t.Context(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatalf("listing grant Leases: %v", err)
	}
	g := &grantWatch{starts: map[string][]time.Time{}, ends: map[string][]time.Time{}, holding: map[string]time.Time{}, acquired: map[string][]time.Time{}}
	now := time.Now()
	for i := range list.Items {
		g.apply(&list.Items[i], now, false)
	}
	lastRV := list.ResourceVersion
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			wi, err := leases.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: lastRV, AllowWatchBookmarks: true})
			if err != nil {
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					g.mu.Lock()
					g.fatal = err
					g.mu.Unlock()
					return
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				now := time.Now()
				if ev.Type == watch.Error {
					g.mu.Lock()
					g.fatal = apierrors.FromObject(ev.Object)
					g.mu.Unlock()
					wi.Stop()
					return
				}
				if m, err := metaAccessor(ev.Object); err == nil {
					lastRV = m.GetResourceVersion()
				}
				if l, ok := ev.Object.(*coordv1.Lease); ok && ev.Type != watch.Bookmark {
					g.apply(l, now, ev.Type == watch.Deleted)
				}
			}
			wi.Stop()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return g
}

func (g *grantWatch) apply(l *coordv1.Lease, at time.Time, deleted bool) {
	node := strings.TrimPrefix(l.Name, fleet.GrantPrefix)
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	var acquired time.Time
	if l.Spec.AcquireTime != nil {
		acquired = l.Spec.AcquireTime.Time
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.versions++
	prev, held := g.holding[node]
	switch {
	case !deleted && holder == node && (!held || !prev.Equal(acquired)):
		if held {
			g.ends[node] = append(g.ends[node], at)
		}
		g.starts[node] = append(g.starts[node], at)
		g.holding[node] = acquired
		zone := l.Annotations[fleet.GrantZoneAnnotation]
		g.acquired[zone] = append(g.acquired[zone], acquired)
	case (deleted || holder != node) && held:
		g.ends[node] = append(g.ends[node], at)
		delete(g.holding, node)
	}
	if len(g.holding) > g.maxHeld {
		g.maxHeld = len(g.holding)
		g.maxHeldWhen = slices.Sorted(maps.Keys(g.holding))
	}
}

// firstStart is when the watch first saw a grant to node start after from.
func (g *grantWatch) firstStart(node string, from time.Time) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.starts[node] {
		if !s.Before(from) {
			return s, true
		}
	}
	return time.Time{}, false
}

// firstEnd is when the watch first saw a grant of node end after from.
func (g *grantWatch) firstEnd(node string, from time.Time) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.ends[node] {
		if !s.Before(from) {
			return s, true
		}
	}
	return time.Time{}, false
}

// endsOf is every end of a grant to node the watch saw.
func (g *grantWatch) endsOf(node string) []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.ends[node])
}

// startsOf is every grant start to node the watch saw.
func (g *grantWatch) startsOf(node string) []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.starts[node])
}

func stamps(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Format(time.StampMilli)
	}
	return out
}

func (g *grantWatch) holders() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for n := range g.holding {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// check fails the test if the grant watch failed, more grants than
// budget were held at once at any Lease version, or (ratePerMinute > 0)
// more grants started in a zone within a minute of the coordinator's
// clock (their acquireTimes) than the rate.
func (g *grantWatch) check(t *testing.T, budget, ratePerMinute int) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fatal != nil {
		t.Errorf("the grant Lease watch failed: %v", g.fatal)
	}
	if g.maxHeld > budget {
		t.Errorf("%d grants held at once, budget %d: %v", g.maxHeld, budget, g.maxHeldWhen)
	}
	if ratePerMinute <= 0 {
		return
	}
	for _, zone := range slices.Sorted(maps.Keys(g.acquired)) {
		n, from := maxInWindow(g.acquired[zone], time.Minute)
		t.Logf("zone %q: %d grants started, at most %d in any minute by their acquireTime (rate %d)", zone, len(g.acquired[zone]), n, ratePerMinute)
		if n > ratePerMinute {
			t.Errorf("zone %q: %d grants started in the minute from %s (acquireTime), rate %d per minute", zone, n, from.Format(time.StampMilli), ratePerMinute)
		}
	}
}

// percentiles returns the p50 and p99 (nearest rank) of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p/100*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(50), rank(99)
}

// latencies is, for each node, the time from the first version at or after
// from[node] where start holds to the first one after that where end holds
// (the watch's receive times); nodes where either is missing are skipped
// and counted.
func (w *fleetWatch) latencies(nodes []string, from func(string) (time.Time, bool), end func(nodeVersion) bool) (ds []time.Duration, missing int) {
	for _, n := range nodes {
		f, ok := from(n)
		if !ok {
			missing++
			continue
		}
		s, ok := w.first(n, f, end)
		if !ok {
			missing++
			continue
		}
		ds = append(ds, max(0, s.at.Sub(f)))
	}
	return ds, missing
}

func logLatency(t *testing.T, what string, ds []time.Duration, missing int) {
	t.Helper()
	p50, p99 := percentiles(ds)
	t.Logf("%s: p50 %s, p99 %s, max %s over %d nodes (%d without)", what, p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		slices.Max(append(slices.Clone(ds), 0)).Round(time.Millisecond), len(ds), missing)
}

// nodeNames is prefix1..prefixN.
func nodeNames(prefix string, n int) []string { return virtual.Names(prefix, n) }

// TestStormChecker checks the checker itself, without a cluster: a
// version that puts one node too many under NoExecute is a violation, one
// that takes a node out is not, the rate window counts [t, t+1m), and the
// grant watch counts holders across Lease versions.
func TestStormChecker(t *testing.T) {
	w := &fleetWatch{budget: 2, nodes: map[string]*nodeTrack{}, carrying: map[string]bool{}, additions: map[string][]time.Time{}}
	t0 := time.Now()
	node := func(name string, rv int, noExec bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: strconv.Itoa(rv), Labels: map[string]string{fleet.ZoneLabel: "z"}}}
		if noExec {
			n.Spec.Taints = []corev1.Taint{{Key: stormKey, Effect: corev1.TaintEffectNoExecute}}
		}
		return n
	}
	w.apply(node("a", 1, true), t0, false, true)
	w.apply(node("b", 2, true), t0.Add(time.Second), false, true)
	w.apply(node("a", 3, false), t0.Add(2*time.Second), false, true)
	w.apply(node("c", 4, true), t0.Add(3*time.Second), false, true)
	if len(w.violations) != 0 {
		t.Fatalf("violations %+v after at most 2 carried at once", w.violations)
	}
	w.apply(node("a", 5, true), t0.Add(4*time.Second), false, true)
	if got, want := len(w.violations), 1; got != want || !slices.Equal(w.violations[0].carrying, []string{"a", "b", "c"}) || w.violations[0].rv != 5 {
		t.Fatalf("violations %+v, want one at rv 5 with a, b, c", w.violations)
	}
	w.apply(node("b", 6, false), t0.Add(5*time.Second), true, true) // deleted
	if got := w.carryingNow(); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("carrying %v after b's deletion, want [a c]", got)
	}
	if got := len(w.additions["z"]); got != 4 {
		t.Errorf("%d additions, want 4 (a twice, b, c)", got)
	}
	w.apply(node("c", 6, true), t0.Add(6*time.Second), false, true)
	if w.fatal == nil {
		t.Errorf("a repeated resourceVersion was not noticed")
	}

	ts := []time.Time{t0, t0.Add(30 * time.Second), t0.Add(59 * time.Second), t0.Add(60 * time.Second), t0.Add(125 * time.Second)}
	if n, from := maxInWindow(ts, time.Minute); n != 3 || !from.Equal(t0) {
		t.Errorf("maxInWindow = %d from %s, want 3 from the first", n, from)
	}

	g := &grantWatch{starts: map[string][]time.Time{}, ends: map[string][]time.Time{}, holding: map[string]time.Time{}, acquired: map[string][]time.Time{}}
	lease := func(node, holder string, acquired time.Time) *coordv1.Lease {
		l := fleet.NewGrant(coordNS, node, "z", 15*time.Second, acquired)
		l.Spec.HolderIdentity = &holder
		return l
	}
	g.apply(lease("a", "a", t0), t0, false)
	g.apply(lease("b", "b", t0), t0, false)
	g.apply(lease("a", "", t0), t0.Add(time.Second), false)
	g.apply(lease("c", "c", t0.Add(2*time.Second)), t0.Add(2*time.Second), false)
	g.apply(lease("a", "a", t0.Add(3*time.Second)), t0.Add(3*time.Second), false)
	if g.maxHeld != 3 || !slices.Equal(g.holders(), []string{"a", "b", "c"}) {
		t.Errorf("maxHeld %d holders %v, want 3 and [a b c]", g.maxHeld, g.holders())
	}
	if got := len(g.startsOf("a")); got != 2 {
		t.Errorf("a's grant starts: %d, want 2", got)
	}
	if end, ok := g.firstEnd("a", t0); !ok || !end.Equal(t0.Add(time.Second)) {
		t.Errorf("a's first grant end %s %v, want a second in", end, ok)
	}
}
