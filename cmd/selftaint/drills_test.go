package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	agentdrill "github.com/selftaint/selftaint/agent/drill"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// exampleDrills are the drills deploy/drills/ ships: `make demo` and the
// three examples the README lists.
var exampleDrills = []string{"demo", "gpu-training-xid79", "web-memory-storm", "rolling-maintenance"}

// drillsDir is deploy/drills/, from this package's directory.
const drillsDir = "../../deploy/drills"

// TestDrillFilesParse checks that every drill file shipped or used by the
// tests loads (strict decoding and validation), and that deploy/drills/
// holds exactly the example drills.
func TestDrillFilesParse(t *testing.T) {
	shipped, err := filepath.Glob(filepath.Join(drillsDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range shipped {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	if want := slices.Sorted(slices.Values(exampleDrills)); !slices.Equal(names, want) {
		t.Errorf("deploy/drills/ holds %v, want %v (a new drill goes into exampleDrills, which runs it)", names, want)
	}
	testdata, err := filepath.Glob("testdata/drills/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(shipped, testdata...) {
		s, err := tdrill.Load(f, agentdrill.Check)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".yaml"); s.Name != want {
			t.Errorf("%s: name %q, want the file's name %q", f, s.Name, want)
		}
	}
}

// TestExampleDrills runs each example drill on its own embedded control
// plane, as `make demo` and CI do, and checks that it passes, that every
// expectation held and that its cleanup finished. They run in parallel:
// each waits mostly on its own timeline.
func TestExampleDrills(t *testing.T) {
	bin := drillPrerequisites(t, "runs the four example drills (a minute or two, each with its own control plane)")
	for _, name := range exampleDrills {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rep, code, out := runDrillFile(t, bin, filepath.Join(drillsDir, name+".yaml"))
			if code != tdrill.ExitPassed {
				t.Errorf("selftaint drill %s exited %d, want 0; output:\n%s", name, code, out)
			}
			checkDrillReport(t, rep, true)
			checkViewOrder(t, out)
			if name == "demo" {
				// Act 4: gpu-3's drain, blocked by ledger's PDB, is given
				// back at its deadline: the condition goes False, its
				// reason stays DrainBlocked.
				const given = "node gpu-3: maintenance given back (SelftaintMaintenance False, DrainBlocked)"
				if !strings.Contains(out, given) {
					t.Errorf("the live view does not say %q:\n%s", given, out)
				}
			}
			t.Logf("%s: wall time %.1fs (control plane start %.1fs), %d steps, %d expectations",
				name, rep.DurationSeconds, rep.ControlPlaneStartSeconds, len(rep.Steps), len(rep.Expectations))
		})
	}
}

// checkViewOrder checks the live view in out: its lines in time order,
// no time before t=0. A line seen before t=0 may come after the t=0 line
// only as setup (seen as t=0 was marked).
func checkViewOrder(t *testing.T, out string) {
	t.Helper()
	last, t0 := -1.0, -1
	for i, l := range strings.Split(out, "\n") {
		var at float64
		switch {
		case strings.HasPrefix(l, "setup ") && t0 < 0:
			if _, err := fmt.Sscanf(strings.TrimPrefix(l, "setup "), "%fs", &at); err != nil {
				continue
			}
		case strings.HasPrefix(l, "t+"):
			if _, err := fmt.Sscanf(strings.TrimPrefix(l, "t+"), "%fs", &at); err != nil {
				continue
			}
			if at < 0 {
				t.Errorf("view line %d %q: a time before t=0", i+1, l)
			}
			if t0 < 0 {
				t0, last = i, -1 // t+ times from here
			}
		default:
			continue
		}
		if at < last {
			t.Errorf("view line %d %q: %.1fs after a line at %.1fs", i+1, l, at, last)
		}
		last = at
	}
	if t0 < 0 || !strings.Contains(strings.Split(out, "\n")[t0], "t=0: ") {
		t.Errorf("the live view's first t+ line is not the t=0 line:\n%s", out)
	}
}

// TestDrillWrongExpectationFails runs a drill whose expectation is wrong (a
// workload without a PodDisruptionBudget, tolerating NoExecute for 5 s,
// expected never to be evicted by a 20 s fault): it must exit 1 and its
// table must name the expectation and what it measured.
func TestDrillWrongExpectationFails(t *testing.T) {
	t.Parallel()
	bin := drillPrerequisites(t, "runs a drill (about 45 s)")
	rep, code, out := runDrillFile(t, bin, "testdata/drills/wrong-toleration.yaml")
	if code != tdrill.ExitBreached {
		t.Fatalf("exit %d, want %d (breached); output:\n%s", code, tdrill.ExitBreached, out)
	}
	checkDrillReport(t, rep, false)
	const name = "frontend rides out a memory fault"
	if len(rep.Expectations) != 1 || rep.Expectations[0].Name != name || rep.Expectations[0].Passed {
		t.Fatalf("expectations %+v, want %q failed", rep.Expectations, name)
	}
	msg := rep.Expectations[0].Message
	if !strings.Contains(msg, "DeletionByTaintManager") {
		t.Errorf("message %q does not say how the pod went (DeletionByTaintManager)", msg)
	}
	for _, want := range []string{name, "FAIL", msg} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not show %q:\n%s", want, out)
		}
	}
}

// TestDrillExpectationsCanFail runs drills built to breach one of the
// expectation kinds the example drills rely on, each of which the
// examples pass: the disruption guard tripped (web-memory-storm) with the
// guard's threshold at 100%, and at most one node in maintenance
// (rolling-maintenance, demo) with a maintenance pool of two. Each must
// exit 1 with that expectation failed, named in the output, for the
// reason given (the guard watched but untripped, not unseen; two nodes
// measured), and its other expectations held.
func TestDrillExpectationsCanFail(t *testing.T) {
	t.Parallel()
	bin := drillPrerequisites(t, "runs three drills (about 15-25 s each)")
	for _, tc := range []struct {
		drill, failed, why string
		held               []string
	}{
		{
			drill: "guard-threshold-100", failed: "the guard tripped for memory pressure in zone-a",
			why:  "the guard never tripped for SelftaintMemoryPressure in zone zone-a over",
			held: []string{"the guard never tripped"},
		},
		{
			drill: "maintenance-two-slots", failed: "at most one node in maintenance",
			why: "at most 2 nodes in maintenance",
		},
		{
			// A drain that breaks a PDB through a delete at its deadline
			// (onDeadline: force) is caught on the pod's own versions.
			drill: "force-drain", failed: "guarded's PDB never below its minimum",
			why:  "PDB below its minimum for",
			held: []string{"guarded never evicted through the Eviction API (its PDB refused)"},
		},
	} {
		t.Run(tc.drill, func(t *testing.T) {
			t.Parallel()
			rep, code, out := runDrillFile(t, bin, filepath.Join("testdata/drills", tc.drill+".yaml"))
			if code != tdrill.ExitBreached {
				t.Fatalf("exit %d, want %d (breached); output:\n%s", code, tdrill.ExitBreached, out)
			}
			checkDrillReport(t, rep, false)
			for _, e := range rep.Expectations {
				switch {
				case e.Name == tc.failed:
					if e.Passed || !strings.Contains(e.Message, tc.why) {
						t.Errorf("%q: passed %v, message %q; want failed with %q", e.Name, e.Passed, e.Message, tc.why)
					}
					if !strings.Contains(out, "FAIL "+tc.failed) {
						t.Errorf("output does not name %q as failed:\n%s", tc.failed, out)
					}
				case slices.Contains(tc.held, e.Name):
					if !e.Passed {
						t.Errorf("%q failed: %s", e.Name, e.Message)
					}
				default:
					t.Errorf("unexpected expectation %q in the report", e.Name)
				}
			}
			if want := 1 + len(tc.held); len(rep.Expectations) != want {
				t.Errorf("%d expectations in the report, want %d", len(rep.Expectations), want)
			}
			t.Logf("%s: wall time %.1fs (control plane start %.1fs)", tc.drill, rep.DurationSeconds, rep.ControlPlaneStartSeconds)
		})
	}
}

// TestDrillExplainSeesOwnGuard runs the drill: three nodes without
// a zone, a budget of one, a-1 faulted and granted, then b-1 faulted.
// b-1's own condition trips the guard (2 of 3 report), so explain, asked
// just before b-1's fault, must predict that b-1's pods stay (no grant, no
// NoExecute while the guard holds), and every prediction must hold; the
// fault's standing must say the guard trips with b-1 counted and when it
// resets; and the live view must name the guard's scope of the nodes
// without a zone.
func TestDrillExplainSeesOwnGuard(t *testing.T) {
	t.Parallel()
	bin := drillPrerequisites(t, "runs a drill (about 80 s)")
	rep, code, out := runDrillFile(t, bin, "testdata/drills/explain-own-guard.yaml")
	if code != tdrill.ExitPassed {
		t.Errorf("exit %d, want %d (passed); output:\n%s", code, tdrill.ExitPassed, out)
	}
	checkDrillReport(t, rep, true)
	for _, e := range rep.Expectations {
		if e.Kind != "explain" {
			continue
		}
		m := e.Measured
		if m.Predictions == nil || *m.Predictions == 0 || m.Held == nil || *m.Held != *m.Predictions {
			t.Errorf("explain's predictions: %s", e.Message)
		}
	}
	// The fault's standing is read once the fault is written; b-1's agent
	// may have published the condition by then ("is tripped ..., this node
	// counted") or not ("with this node's ... counted, ... trips"): either
	// way b-1 is counted once, 2 of 3.
	for _, want := range []string{
		"guard, projected: ",
		"SelftaintMemoryPressure", "fleet-wide: 2 of 3 nodes (66.67%)",
		"the NoExecute taints held for it come off (a-1); it resets once at most 1 of 3 nodes report it, for 10s",
		"guard: SelftaintMemoryPressure tripped among the nodes without a zone (2 of 3 nodes)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "in zone  ") || strings.Contains(out, `in zone ""`) {
		t.Errorf("the output names an empty zone:\n%s", out)
	}
}

// TestDrillMalformedExits2 checks that a malformed scenario exits 2 before
// anything runs, naming the field path of each error.
func TestDrillMalformedExits2(t *testing.T) {
	t.Parallel()
	good, err := os.ReadFile("testdata/drills/wrong-toleration.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"unknown field", "condition: memory, for: 20s", "condtion: memory, for: 20s", "steps[0].fault.condtion"},
		{"step not found", "notEvicted: {selector: app=frontend}", "evicted: {selector: app=frontend, after: xid}", "expect[0].evicted.after"},
		{"bad duration", "for: 20s", "for: 20 seconds", "steps[0].fault.for"},
		{"bad selector", "notEvicted: {selector: app=frontend}", "notEvicted: {selector: \"app in frontend\"}", "expect[0].notEvicted.selector"},
		// Known from the file and its config before anything starts.
		{"fault on no probe", "condition: memory, for: 20s", "condition: memroy, for: 20s",
			`bad.yaml:41: steps[0].fault.condition: "memroy" is neither a probe nor a condition the drill's agents have (did you mean memory?)`},
		{"selector that picks none", "fault: {nodes: [node-1], condition", "fault: {selector: pool=node, condition",
			`bad.yaml:41: steps[0].fault.selector: "pool=node" matches none of the drill's nodes (node-1..node-2: no labels of their own)`},
		// A type error hides nothing else; its path has its index and key.
		{"type error and more", "count: 2", "count: 2\n    labels: {gpu: true}\n    capacity: {cpu: 8x}",
			"bad.yaml: 2 errors:\n" +
				"bad.yaml:12: cluster.pools[0].labels[gpu]: a bool where a string belongs (YAML reads true as a boolean: quote it, gpu: \"true\")\n" +
				"bad.yaml:13: cluster.pools[0].capacity[cpu]: \"8x\" is not a quantity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(string(good), tc.from, tc.to, 1)
			if bad == string(good) {
				t.Fatalf("%q is not in the drill", tc.from)
			}
			file := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			start := time.Now()
			code := run(t.Context(), []string{"drill", file}, &stdout, &stderr)
			if code != tdrill.ExitBadFile {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tdrill.ExitBadFile, stdout.String(), stderr.String())
			}
			// Each line of want, in order.
			at := 0
			for _, w := range strings.Split(tc.want, "\n") {
				i := strings.Index(stderr.String()[at:], w)
				if i < 0 {
					t.Errorf("stderr does not name %s (after what came before):\n%s", w, stderr.String())
					break
				}
				at += i + len(w)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("a bad file took %s to refuse: something ran", d)
			}
		})
	}
}

// TestDrillBadFileEveryError: a drill file with six mistakes of six kinds
// (a value of the wrong type in a map, a probe that does not exist, a
// misspelt field, a selector that picks none of the drill's nodes, a
// number given as a string, a required field left out) exits 2 before
// anything runs, naming every one by its field path and line.
func TestDrillBadFileEveryError(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	const file = "testdata/drills-bad/every-error.yaml"
	code := run(t.Context(), []string{"drill", file}, &stdout, &stderr)
	if code != tdrill.ExitBadFile {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tdrill.ExitBadFile, stdout.String(), stderr.String())
	}
	want := []string{
		file + ": 6 errors:",
		file + `:13: cluster.pools[1].labels[gpu]: a bool where a string belongs (YAML reads true as a boolean: quote it, gpu: "true")`,
		file + `:36: steps[0].fault.condition: "memroy" is neither a probe nor a condition the drill's agents have (did you mean memory?)`,
		file + `:38: steps[1].drain.maxParalel: unknown field (did you mean maxParallel?)`,
		file + `:38: steps[1].drain.selector: "pool=gpu" matches none of the drill's nodes (node-1..node-2: no labels of their own; gpu-1: gpu=true)`,
		file + `:41: expect[0].notEvicted.min: a string where an int belongs`,
		file + `:42: expect[1].ready.within: must be greater than zero`,
	}
	got := stderr.String()
	at := 0
	for _, w := range want {
		i := strings.Index(got[at:], w)
		if i < 0 {
			t.Fatalf("stderr lacks %q (after what came before):\n%s", w, got)
		}
		at += i + len(w)
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout %q: a file refused prints nothing there", stdout.String())
	}
}

// TestDrillCatchesForceDelete runs a drill with a PodDisruptionBudget
// expectation against an existing cluster and force-deletes one of the
// guarded pods (grace period 0, no eviction) while it runs: the PDB is
// below its minimum only until the Deployment's replacement is ready, and
// the disruption controller may never write that down, but the drill,
// checking every watched version, must catch it and exit 1.
func TestDrillCatchesForceDelete(t *testing.T) {
	t.Parallel()
	bin := drillPrerequisites(t, "runs a drill (about 45 s)")
	cp := testcp.Start(t, testcp.Options{ControllerManager: true, Scheduler: true})
	client := cp.Client()
	ns := agentdrill.DrillNamespace("force-delete")

	type result struct {
		rep  tdrill.Report
		code int
		out  string
	}
	done, finished := make(chan result, 1), make(chan struct{})
	// A test that fails early still waits for the drill (its cleanup).
	t.Cleanup(func() { <-finished })
	go func() {
		defer close(finished)
		rep, code, out := runDrillFile(t, bin, "testdata/drills/force-delete.yaml", "--kubeconfig", cp.KubeconfigPath)
		done <- result{rep, code, out}
	}()

	// Once the hold step has run (t=0 has passed: the workload was ready),
	// force-delete one of guarded's ready pods.
	victim, ok := readyPodOnceFaulted(t, client, ns, "fd-1", func() bool { return len(done) > 0 })
	if !ok {
		r := <-done
		t.Fatalf("the drill ended (exit %d) before a pod could be deleted:\n%s", r.code, r.out)
	}
	err := client.CoreV1().Pods(ns).Delete(t.Context(), victim, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil {
		t.Fatalf("force-deleting %s: %v", victim, err)
	}

	r := <-done
	if r.code != tdrill.ExitBreached {
		t.Fatalf("exit %d, want %d (breached): the force delete of %s went unseen; output:\n%s", r.code, tdrill.ExitBreached, victim, r.out)
	}
	checkDrillReport(t, r.rep, false)
	const name = "guarded's PDB never below its minimum"
	if len(r.rep.Expectations) != 1 || r.rep.Expectations[0].Name != name || r.rep.Expectations[0].Passed {
		t.Fatalf("expectations %+v, want %q failed", r.rep.Expectations, name)
	}
	if !strings.Contains(r.out, name) {
		t.Errorf("output does not name %q:\n%s", name, r.out)
	}
	// Nothing of the drill's is left in the cluster it was given.
	if got, err := client.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{}); err == nil && got.DeletionTimestamp == nil {
		t.Errorf("namespace %s left behind", ns)
	}
}

// readyPodOnceFaulted waits until node carries the drill's fault
// annotation (its step has run) and returns a ready pod of app=guarded in
// ns; false if ended says the drill has ended first.
func readyPodOnceFaulted(t *testing.T, client kubernetes.Interface, ns, node string, ended func() bool) (string, bool) {
	t.Helper()
	var victim string
	early := false
	err := testcp.Poll(t.Context(), 3*time.Minute, 200*time.Millisecond, func() (bool, error) {
		if early = ended(); early {
			return true, nil
		}
		n, err := client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		if err != nil || n.Annotations["fault.selftaint.io/pid"] == "" {
			return false, nil
		}
		pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=guarded"})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podIsReady(&p) {
				victim = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for the drill's fault on %s and a ready pod: %v", node, err)
	}
	return victim, !early
}

// drillPrerequisites skips a slow drill test under -short (not with
// CI=true), fails or skips as testcp does where a control-plane binary is
// missing, and returns the selftaint binary for the coordinators.
func drillPrerequisites(t *testing.T, why string) string {
	t.Helper()
	testcp.SkipIfShort(t, why)
	testcp.EtcdPath(t)
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		testcp.KubePath(t, name)
	}
	return selftaintBinary(t)
}

// runDrillFile runs `selftaint drill` in-process on file with a report and a
// JUnit file, and returns the report, the exit code and everything it
// printed.
func runDrillFile(t *testing.T, bin, file string, extra ...string) (tdrill.Report, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	report, junit := filepath.Join(dir, "report.json"), filepath.Join(dir, "junit.xml")
	args := append([]string{"drill", "--selftaint", bin, "--report", report, "--junit", junit}, extra...)
	var out testkit.LogBuffer
	code := run(ctx, append(args, file), &out, &out)
	var rep tdrill.Report
	b, err := os.ReadFile(report)
	if err != nil {
		t.Errorf("reading the report: %v; output:\n%s", err, out.String())
		return rep, code, out.String()
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Errorf("decoding the report: %v\n%s", err, b)
	}
	if _, err := os.Stat(junit); err != nil {
		t.Errorf("no JUnit file: %v", err)
	}
	return rep, code, out.String()
}

// checkDrillReport checks what every finished drill's report says: it ran to
// its end, cleaned up, and passed as wanted.
func checkDrillReport(t *testing.T, rep tdrill.Report, passed bool) {
	t.Helper()
	if rep.Schema != tdrill.ReportSchema {
		t.Errorf("report schema %q, want %q", rep.Schema, tdrill.ReportSchema)
	}
	if rep.Error != "" {
		t.Errorf("the drill did not run to its end: %s", rep.Error)
	}
	for _, s := range rep.Steps {
		if s.Error != "" {
			t.Errorf("step %s failed: %s", s.Name, s.Error)
		}
	}
	if !rep.Cleanup.Done {
		t.Errorf("cleanup not done: %+v", rep.Cleanup)
	}
	if rep.Passed != passed {
		t.Errorf("report passed %v, want %v", rep.Passed, passed)
	}
	for _, e := range rep.Expectations {
		if passed && !e.Passed {
			t.Errorf("expectation %q failed: %s", e.Name, e.Message)
		}
	}
}

// podIsReady reports whether p's Ready condition is True.
func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// drillBinary is cmd/selftaint built once for the drills' coordinator
// processes (the test binary cannot be run as selftaint with arguments);
// TestMain removes it.
var drillBinary struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// selftaintBinary builds cmd/selftaint the first time it is asked and
// returns its path.
func selftaintBinary(t *testing.T) string {
	t.Helper()
	b := &drillBinary
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "selftaint-drills-test-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "selftaint")
		cmd := exec.Command("go", "build", "-o", b.bin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("building selftaint for the drills: %v", b.err)
	}
	return b.bin
}

// removeDrillBinary removes what selftaintBinary built.
func removeDrillBinary() error {
	if drillBinary.dir == "" {
		return nil
	}
	return os.RemoveAll(drillBinary.dir)
}
