package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints/faults"
	"github.com/selftaint/selftaint/taints/fleet"
)

// BenchmarkFleet1000 measures the fleet's cost on a real API server: 1,000
// virtual nodes (one `selftaint virtual` process, every node running its
// agent) and a `selftaint coordinator` process with the default budget
// (10%, 6 new grants a minute), both the real binary. It reports the API
// requests per second of agents and coordinator in steady state and during
// a storm on half the nodes (below the guard's 55%), the time from a fault
// to its fallback taint and from a grant to its NoExecute taint (p50, p99),
// and the coordinator's resident memory.
//
//	make deps && KUBE_BIN_DIR=$PWD/bin go test -run '^$' -bench Fleet1000 -benchtime 1x -timeout 30m ./cmd/selftaint/
func BenchmarkFleet1000(b *testing.B) {
	const nodes = 1000
	bin := buildSelftaint(b)
	cp := testcp.Start(b, testcp.Options{})
	c := cp.Client()
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`rules:
- condition: SelftaintMemoryPressure
  taint: {key: selftaint.io/memory-pressure, effect: NoExecute}
  fallback: NoSchedule
coordinator: {fleet: virtual}
`), 0o600); err != nil {
		b.Fatal(err)
	}
	// Both processes find the coordinator's objects in the default
	// namespace, selftaint's own.
	if _, err := c.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: config.DefaultCoordinatorNamespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	port := freePort(b)
	coord := startProcess(b, bin, "coordinator", "--kubeconfig="+cp.KubeconfigPath, "--config="+cfg,
		"--identity=bench", "--metrics-address=127.0.0.1:"+port, "--log-level=warn")
	virt := startProcess(b, bin, "virtual", "--nodes="+strconv.Itoa(nodes), "--name-prefix=bench-", "--kubeconfig="+cp.KubeconfigPath,
		"--config="+cfg, "--log-level=info", "--stats-interval=5s")
	for i := 0; i < b.N; i++ {
		waitFleetReady(b, c, nodes)
		time.Sleep(30 * time.Second) // first writes and heartbeats settle
		const window = 60 * time.Second
		v0, c0 := virt.requests(), coordRequests(b, port)
		time.Sleep(window)
		v1, c1 := virt.requests(), coordRequests(b, port)
		b.ReportMetric((v1-v0)/window.Seconds(), "steady-agents-req/s")
		b.ReportMetric((c1-c0)/window.Seconds(), "steady-coordinator-req/s")

		obs := observeFleet(b, c)
		injected := injectHalf(b, c, nodes)
		v0, c0 = virt.requests(), coordRequests(b, port)
		time.Sleep(window)
		v1, c1 = virt.requests(), coordRequests(b, port)
		b.ReportMetric((v1-v0)/window.Seconds(), "storm-agents-req/s")
		b.ReportMetric((c1-c0)/window.Seconds(), "storm-coordinator-req/s")
		fallback, noExecute := obs.latencies(injected)
		b.Logf("storm on %d nodes: %d got the fallback, %d NoExecute within %s", len(injected), len(fallback), len(noExecute), window)
		b.ReportMetric(percentile(fallback, 50), "fault-to-fallback-p50-ms")
		b.ReportMetric(percentile(fallback, 99), "fault-to-fallback-p99-ms")
		b.ReportMetric(percentile(noExecute, 50), "grant-to-noexecute-p50-ms")
		b.ReportMetric(percentile(noExecute, 99), "grant-to-noexecute-p99-ms")
		mem := procMemKiB(b, coord.cmd.Process.Pid)
		b.ReportMetric(float64(mem["VmRSS"])/1024, "coordinator-rss-MiB")
		b.ReportMetric(float64(mem["VmHWM"])/1024, "coordinator-peak-rss-MiB")
		vmem := procMemKiB(b, virt.cmd.Process.Pid)
		b.ReportMetric(float64(vmem["VmRSS"])/1024, "virtual-process-rss-MiB")
	}
}

func buildSelftaint(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "selftaint")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// process is a selftaint subprocess whose stderr is scanned for the
// virtual process's request counter (its stats log line).
type process struct {
	cmd   *exec.Cmd
	mu    sync.Mutex // guards count
	count float64
}

var apiRequestsRE = regexp.MustCompile(`apiRequests=(\d+)`)

func startProcess(b *testing.B, bin string, args ...string) *process {
	p := &process{cmd: exec.Command(bin, args...)}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if m := apiRequestsRE.FindStringSubmatch(sc.Text()); m != nil {
				n, _ := strconv.ParseFloat(m[1], 64)
				p.mu.Lock()
				p.count = n
				p.mu.Unlock()
			} else if strings.Contains(sc.Text(), "level=ERROR") {
				b.Log(args[0] + ": " + sc.Text())
			}
		}
	}()
	b.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
		}
	})
	return p
}

// requests is the virtual process's request count as of its last stats
// line (every 5s).
func (p *process) requests() float64 {
	time.Sleep(5500 * time.Millisecond) // a fresh stats line
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

// coordRequests sums the coordinator's selftaint_api_requests_total.
func coordRequests(b *testing.B, port string) float64 {
	resp, err := http.Get("http://127.0.0.1:" + port + "/metrics")
	if err != nil {
		b.Fatalf("scraping the coordinator: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "selftaint_api_requests_total{") {
			continue
		}
		f := strings.Fields(line)
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += n
		}
	}
	return sum
}

func waitFleetReady(b *testing.B, c kubernetes.Interface, n int) {
	err := testcp.Poll(context.Background(), 10*time.Minute, 5*time.Second, func() (bool, error) {
		list, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, node := range list.Items {
			for _, cd := range node.Status.Conditions {
				if cd.Type == "SelftaintMemoryPressure" && cd.Status == corev1.ConditionFalse {
					ready++
				}
			}
		}
		return ready == n, nil
	})
	if err != nil {
		b.Fatalf("the %d virtual nodes did not all report: %v", n, err)
	}
}

// fleetObservation is when each node was first seen with its fallback and
// its NoExecute taint, and when its grant was first seen.
type fleetObservation struct {
	mu                          sync.Mutex // guards the maps
	fallback, noExecute, grants map[string]time.Time
}

func observeFleet(b *testing.B, c kubernetes.Interface) *fleetObservation {
	o := &fleetObservation{fallback: map[string]time.Time{}, noExecute: map[string]time.Time{}, grants: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	// Watches start from a list's resourceVersion (one from none fails on
	// an API server whose etcd has no progress notifications) and resume
	// from the last version seen when the API server ends them.
	go o.follow(ctx, b, func(rv string) (watch.Interface, error) {
		return c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	}, func() (string, error) {
		l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		for _, t := range n.Spec.Taints {
			if t.Key == "selftaint.io/memory-pressure" && t.Effect == corev1.TaintEffectNoSchedule {
				o.first(o.fallback, n.Name)
			}
			if t.Key == "selftaint.io/memory-pressure" && t.Effect == corev1.TaintEffectNoExecute {
				o.first(o.noExecute, n.Name)
			}
		}
	})
	grantSel := metav1.ListOptions{LabelSelector: fleet.GrantLabel + "=true"}
	go o.follow(ctx, b, func(rv string) (watch.Interface, error) {
		sel := grantSel
		sel.ResourceVersion = rv
		return c.CoordinationV1().Leases(config.DefaultCoordinatorNamespace).Watch(ctx, sel)
	}, func() (string, error) {
		l, err := c.CoordinationV1().Leases(config.DefaultCoordinatorNamespace).List(ctx, grantSel)
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			o.first(o.grants, *l.Spec.HolderIdentity)
		}
	})
	return o
}

// first records now for k in m unless it is there.
func (o *fleetObservation) first(m map[string]time.Time, k string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := m[k]; !ok {
		m[k] = time.Now()
	}
}

// follow lists for a resourceVersion, watches from it, hands every object
// to seen, and resumes from the last version seen when the watch ends,
// until ctx ends.
func (o *fleetObservation) follow(ctx context.Context, b *testing.B, watchFrom func(rv string) (watch.Interface, error), list func() (string, error), seen func(any)) {
	rv, err := list()
	for ctx.Err() == nil {
		if err != nil {
			b.Logf("fleet watch: %v; listing again", err)
			time.Sleep(time.Second)
			rv, err = list()
			continue
		}
		w, werr := watchFrom(rv)
		if werr != nil {
			err = werr
			continue
		}
		expired := false
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				expired = true // e.g. 410 Gone: start again from a list
				break
			}
			seen(ev.Object)
			if m, ok := ev.Object.(metav1.Object); ok {
				rv = m.GetResourceVersion()
			}
		}
		w.Stop()
		if expired {
			rv, err = list()
		}
	}
}

// latencies are the fault-to-fallback and grant-to-NoExecute times, in ms.
func (o *fleetObservation) latencies(injected map[string]time.Time) (fallback, noExecute []float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for n, at := range injected {
		if t, ok := o.fallback[n]; ok {
			fallback = append(fallback, float64(t.Sub(at).Milliseconds()))
		}
		if g, ok := o.grants[n]; ok {
			if t, ok := o.noExecute[n]; ok {
				noExecute = append(noExecute, float64(t.Sub(g).Milliseconds()))
			}
		}
	}
	return fallback, noExecute
}

// injectHalf writes a 10-minute memory fault on half the nodes, 20 at a
// time, and returns when each was written.
func injectHalf(b *testing.B, c kubernetes.Interface, n int) map[string]time.Time {
	spec := faults.Spec{Status: corev1.ConditionTrue, Reason: "Storm", Message: "bench", ExpiresAt: time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)}
	value, err := spec.Encode()
	if err != nil {
		b.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{faults.AnnotationKey("memory"): value}}})
	var mu sync.Mutex
	out := map[string]time.Time{}
	work := make(chan string)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for name := range work {
				if _, err := c.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					b.Errorf("injecting on %s: %v", name, err)
					continue
				}
				mu.Lock()
				out[name] = time.Now()
				mu.Unlock()
			}
		})
	}
	for i := 1; i <= n/2; i++ {
		work <- fmt.Sprintf("bench-%d", i)
	}
	close(work)
	wg.Wait()
	return out
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return -1
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p/100))]
}
