package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// twoNodeDrill faults one of two virtual nodes under a two-pod Deployment:
// the kubelet's MemoryPressure, whose taint the node lifecycle controller
// puts on; the drill waits for it and expects the Deployment to stay ready
// and no node to carry NoExecute.
const twoNodeDrill = `apiVersion: selftaint.io/v1alpha1
kind: Drill
name: two-nodes
cluster:
  pools:
  - name: vn
    count: 2
  coordinator: {replicas: 0}
workloads:
- file: web.yaml
steps:
- name: memory
  fault: {nodes: [vn-1], condition: MemoryPressure, for: 6s}
- name: tainted
  waitFor: {nodes: [vn-1], taint: {key: node.kubernetes.io/memory-pressure, effect: NoSchedule}, timeout: 1m}
expect:
- ready: {workload: {kind: Deployment, name: web}, within: 1m}
- noExecute: {atMost: 0}
- notEvicted: {selector: app=web}
settle: 2s
timeout: 3m
`

const webManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: registry.invalid/web
`

// A passing two-node drill on the embedded control plane: exit 0, the
// table, a JSON report that says it passed and a JUnit file, and a cleanup
// that stopped the control plane.
func TestDrillTwoNodesPasses(t *testing.T) {
	t.Parallel()
	testcp.SkipIfShort(t, "starts a control plane")
	testcp.KubePath(t, "kube-apiserver") // skip (or, under CI, fail) without the binaries
	dir := t.TempDir()
	file := filepath.Join(dir, "two-nodes.yaml")
	for name, text := range map[string]string{file: twoNodeDrill, filepath.Join(dir, "web.yaml"): webManifest} {
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	report, junit := filepath.Join(dir, "report.json"), filepath.Join(dir, "junit.xml")
	var stdout, stderr testkit.LogBuffer
	// --keep: once judged, the cluster stays up (its nodes listed through
	// the kubeconfig it prints) until Ctrl-C, which then cleans up and
	// keeps the verdict.
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	kept := make(chan error, 1)
	go func() { kept <- keptClusterNodes(ctx, &stdout, 2); interrupt() }()
	code := run(ctx, []string{"drill", file, "--report", report, "--junit", junit, "--keep"}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err := <-kept; err != nil {
		t.Errorf("--keep: %v", err)
	}
	if code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	for _, want := range []string{"step memory (fault) starts", "step tainted done", "--keep: 3 of 3 expectations held", "cleanup done", "PASS"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	checkViewOrder(t, stdout.String())
	// The fault command's output follows its step's line.
	if start, cmd := strings.Index(stdout.String(), "step memory (fault) starts"), strings.Index(stdout.String(), "| injected fault on node vn-1"); cmd < 0 || start > cmd {
		t.Errorf("the fault command's output is not after its step's line:\n%s", stdout.String())
	}
	// The workloads' ready line, which makes t=0, prints before it.
	if ready, t0 := strings.Index(stdout.String(), "Deployment web: 2/2 ready"), strings.Index(stdout.String(), "t=0: "); ready < 0 || ready > t0 {
		t.Errorf("the live view does not say the workload ready before t=0:\n%s", stdout.String())
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep tdrill.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Passed || len(rep.Expectations) != 3 || rep.ControlPlaneStartSeconds <= 0 || !rep.Cleanup.Done {
		t.Errorf("report: passed %v, %d expectations, control plane %.1fs, cleanup %+v", rep.Passed, len(rep.Expectations), rep.ControlPlaneStartSeconds, rep.Cleanup)
	}
	if _, err := os.Stat(junit); err != nil {
		t.Errorf("no JUnit file: %v", err)
	}
	t.Logf("wall time %.1fs, control plane start %.1fs", rep.DurationSeconds, rep.ControlPlaneStartSeconds)
}

// A malformed file exits 2 naming the field, and nothing runs.
func TestDrillBadFileExits2(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.yaml")
	bad := strings.Replace(twoNodeDrill, "condition: MemoryPressure", "condtion: MemoryPressure", 1)
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"drill", file}, &stdout, &stderr)
	if code != tdrill.ExitBadFile {
		t.Fatalf("exit %d, want %d; stderr %s", code, tdrill.ExitBadFile, stderr.String())
	}
	if !strings.Contains(stderr.String(), "steps[0].fault.condtion") {
		t.Errorf("stderr does not name the field: %s", stderr.String())
	}
}

// drillCluster is a control plane the cmd drill tests use as an existing
// cluster (--kubeconfig): with the node lifecycle controller, which lifts
// the virtual nodes' not-ready taint, and the scheduler.
func drillCluster(t *testing.T) *testcp.ControlPlane {
	return testcp.Start(t, testcp.Options{ControllerManager: true, Scheduler: true})
}

// writeDrill writes the drill text (and web.yaml beside it) and returns
// its path.
func writeDrill(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "drill.yaml")
	for name, text := range map[string]string{file: text, filepath.Join(dir, "web.yaml"): webManifest} {
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return file
}

// lineWriter calls then once a line written to it contains on.
type lineWriter struct {
	mu   sync.Mutex
	b    bytes.Buffer
	on   string
	then func()
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.then != nil && strings.Contains(string(p), w.on) {
		w.then()
		w.then = nil
	}
	return w.b.Write(p)
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// interruptedDrill holds a grant (the memory fault's NoExecute) and a
// maintenance slot (vn-2's drain) when it is interrupted.
const interruptedDrill = `apiVersion: selftaint.io/v1alpha1
kind: Drill
name: interrupted
cluster:
  pools:
  - name: vn
    count: 2
  config: |
    rules:
    - condition: SelftaintMemoryPressure
      taint: {key: selftaint.io/memory-pressure, effect: NoExecute}
      fallback: NoSchedule
    coordinator:
      namespace: drill-coordinator
      fleet: virtual
workloads:
- file: web.yaml
steps:
- name: memory
  fault: {nodes: [vn-1], condition: memory, for: 5m}
- name: drain
  drain: {nodes: [vn-2], reason: drill test}
- name: granted
  waitFor: {nodes: [vn-1], taint: {key: selftaint.io/memory-pressure, effect: NoExecute}, timeout: 1m}
- name: draining
  waitFor: {nodes: [vn-2], condition: {type: SelftaintMaintenance}, timeout: 1m}
- name: forever
  waitFor: {nodes: [vn-1], condition: {type: NeverThere}, timeout: 5m}
expect:
- noExecute: {atMost: 1}
timeout: 3m
`

// Ctrl-C in the middle of a drill on an existing cluster, through the real
// `selftaint fault` and `selftaint drain` code and a coordinator process
// holding a grant and a maintenance slot: exit 3, and the API server has
// no node, pod, fault annotation, grant, maintenance or leader Lease or
// namespace of the drill's afterwards (the coordinator's namespace, which
// the drill did not create, stays).
func TestDrillInterruptedCleansUp(t *testing.T) {
	t.Parallel()
	testcp.SkipIfShort(t, "starts a control plane")
	cp := drillCluster(t)
	bin := buildStamped(t)
	c := cp.Client()
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "drill-coordinator"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	file := writeDrill(t, interruptedDrill)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &lineWriter{on: "step forever (waitFor) starts", then: cancel}
	var stderr bytes.Buffer
	code := run(ctx, []string{"drill", file, "--kubeconfig", cp.KubeconfigPath, "--selftaint", bin}, out, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), stderr.String())
	if code != tdrill.ExitNotRun {
		t.Fatalf("exit %d, want %d", code, tdrill.ExitNotRun)
	}
	for _, want := range []string{"injected fault on node vn-1", "requested maintenance", "step draining done", "cleanup done", "removed namespace selftaint-drill-interrupted"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	nodes, err := c.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		t.Errorf("node %s left behind (annotations %v)", n.Name, n.Annotations)
	}
	pods, err := c.CoreV1().Pods(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		t.Errorf("pod %s/%s left behind", p.Namespace, p.Name)
	}
	leases, err := c.CoordinationV1().Leases(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if l.Namespace == corev1.NamespaceNodeLease || l.Namespace == "drill-coordinator" {
			t.Errorf("lease %s/%s left behind", l.Namespace, l.Name)
		}
	}
	if _, err := c.CoreV1().ConfigMaps("drill-coordinator").Get(t.Context(), "selftaint-guard", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the coordinator's guard ConfigMap is still there (err %v)", err)
	}
	if _, err := c.CoreV1().Namespaces().Get(t.Context(), "selftaint-drill-interrupted", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the drill's namespace is still there (err %v)", err)
	}
	if _, err := c.CoreV1().Namespaces().Get(t.Context(), "drill-coordinator", metav1.GetOptions{}); err != nil {
		t.Errorf("the coordinator's namespace, which the drill did not create, is gone: %v", err)
	}
}

// A workload that cannot be scheduled stops the drill before t=0: exit 3,
// naming the workload and the scheduler's reason.
// A bare pod (no controller) is waited for before t=0 like a workload:
// one that cannot be scheduled stops the drill with exit 3 naming it.
func TestDrillWaitsForBarePods(t *testing.T) {
	t.Parallel()
	testcp.SkipIfShort(t, "starts a control plane")
	cp := drillCluster(t)
	bare := "apiVersion: v1\nkind: Pod\nmetadata: {name: lonely}\nspec:\n  nodeSelector: {nowhere: \"true\"}\n  containers: [{name: app, image: registry.invalid/app}]\n"
	file := writeDrill(t, strings.NewReplacer(
		"name: two-nodes", "name: bare",
		"file: web.yaml", "manifest: |\n    "+strings.ReplaceAll(bare, "\n", "\n    "),
		"timeout: 3m", "timeout: 15s",
	).Replace(twoNodeDrill))
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"drill", file, "--kubeconfig", cp.KubeconfigPath}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != tdrill.ExitNotRun {
		t.Fatalf("exit %d, want %d", code, tdrill.ExitNotRun)
	}
	for _, want := range []string{"workload Pod selftaint-drill-bare/lonely is not ready: pod lonely Pending, not scheduled: Unschedulable"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
}

func TestDrillUnschedulableWorkloadExits3(t *testing.T) {
	t.Parallel()
	testcp.SkipIfShort(t, "starts a control plane")
	cp := drillCluster(t)
	file := writeDrill(t, strings.NewReplacer(
		"name: two-nodes", "name: pending",
		"file: web.yaml", "manifest: |\n    "+strings.ReplaceAll(strings.Replace(webManifest, "    spec:\n      containers:", "    spec:\n      nodeSelector: {nowhere: \"true\"}\n      containers:", 1), "\n", "\n    "),
		"timeout: 3m", "timeout: 15s",
	).Replace(twoNodeDrill))
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"drill", file, "--kubeconfig", cp.KubeconfigPath}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != tdrill.ExitNotRun {
		t.Fatalf("exit %d, want %d", code, tdrill.ExitNotRun)
	}
	for _, want := range []string{"workload Deployment selftaint-drill-pending/web is not ready: 0 of 2 ready", "Pending, not scheduled: Unschedulable", "node affinity/selector"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
}

func TestFaultInjectArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    tdrill.FaultStep
		want string
	}{
		{"condition", tdrill.FaultStep{Condition: "memory", Status: "True", Reason: "Oom", Message: "m", For: tdrill.Duration{Duration: time.Minute}},
			"n --config c.yaml --injected-by selftaint drill --kubeconfig k --for 1m0s --condition memory --status True --reason Oom --message m"},
		// The defaults give every fault status True: an Xid sets its own.
		{"gpu xid", tdrill.FaultStep{GPUXid: 79, Status: "True", For: tdrill.Duration{Duration: time.Minute}},
			"n --config c.yaml --injected-by selftaint drill --kubeconfig k --for 1m0s --gpu-xid 79"},
	} {
		if got := strings.Join(faultInjectArgs("k", "c.yaml", "n", tc.f), " "); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// keptClusterNodes waits for --keep's line in out, then lists the kept
// cluster's nodes through the kubeconfig it names and wants n of them.
func keptClusterNodes(ctx context.Context, out *testkit.LogBuffer, n int) error {
	var path string
	err := testcp.Poll(ctx, 3*time.Minute, 100*time.Millisecond, func() (bool, error) {
		_, rest, ok := strings.Cut(out.String(), "export KUBECONFIG=")
		if ok {
			path, _, ok = strings.Cut(rest, "\n")
		}
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("no --keep line: %w", err)
	}
	client, err := operatorClient(&kubeFlags{kubeconfig: path}, "drill-keep-test")
	if err != nil {
		return err
	}
	nodes, err := client.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the kept cluster's nodes: %w", err)
	}
	if len(nodes.Items) != n {
		return fmt.Errorf("the kept cluster has %d nodes, want %d", len(nodes.Items), n)
	}
	return nil
}

func TestKubeBinDir(t *testing.T) {
	beside := t.TempDir() // a selftaint installed with the kube binaries
	alone := t.TempDir()  // a selftaint installed alone
	for _, dir := range []string{beside, alone} {
		if err := os.WriteFile(filepath.Join(dir, "selftaint"), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(beside, "kube-apiserver"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := func(dir string) func() (string, error) {
		return func() (string, error) { return filepath.Join(dir, "selftaint"), nil }
	}
	tests := []struct {
		name, flag, env string
		exe             func() (string, error)
		want            string
	}{
		{"the flag first", "/opt/kube", "/env/kube", exe(beside), "/opt/kube"},
		{"then $KUBE_BIN_DIR", "", "/env/kube", exe(beside), "/env/kube"},
		{"then beside the binary", "", "", exe(beside), beside},
		{"nothing beside it: testcp's lookup", "", "", exe(alone), ""},
		{"no executable path", "", "", func() (string, error) { return "", os.ErrNotExist }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kubeBinDir(tt.flag, tt.env, tt.exe); got != tt.want {
				t.Errorf("kubeBinDir = %q, want %q", got, tt.want)
			}
		})
	}
}
