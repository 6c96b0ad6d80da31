package main

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints/faults"
)

var cliForeignTaint = corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}

func withForeignBits(n *corev1.Node) {
	n.Annotations = map[string]string{"example.com/owner": "team-a"}
	n.Spec.Taints = []corev1.Taint{cliForeignTaint}
}

// runCLI runs one selftaint command line in-process.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func nodeNow(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// withoutFaults returns n's annotations other than faults.
func withoutFaults(n *corev1.Node) map[string]string {
	out := maps.Clone(n.Annotations)
	maps.DeleteFunc(out, func(k, _ string) bool { return faults.IsAnnotation(k) })
	return out
}

// TestFaultCLIRoundTrip injects, lists and clears faults against a real API
// server and checks each command touches only fault annotations.
func TestFaultCLIRoundTrip(t *testing.T) {
	t.Parallel()
	// Its own control plane: `fault list` lists the faults of every Node.
	cp := testcp.Start(t, testcp.Options{})
	c := cp.Client()
	kc := "--kubeconfig=" + cp.KubeconfigPath
	cp.CreateNode(t, "n1", withForeignBits)
	cp.CreateNode(t, "n2", withForeignBits)
	before, before2 := nodeNow(t, c, "n1"), nodeNow(t, c, "n2")

	// inject, flags after the node as in the docs.
	began := time.Now()
	code, out, errs := runCLI(t, "fault", "inject", "n1", "--condition", "memory", "--for", "5m", "--message", "drill", "--injected-by", "ci", kc)
	if code != 0 {
		t.Fatalf("inject: exit %d: %s", code, errs)
	}
	for _, w := range []string{"injected fault on node n1: SelftaintMemoryPressure is True (InjectedFault) until ", "(in 5m", "annotation fault.selftaint.io/memory="} {
		if !strings.Contains(out, w) {
			t.Errorf("inject output %q does not contain %q", out, w)
		}
	}
	n1 := nodeNow(t, c, "n1")
	key := faults.AnnotationKey("memory")
	f, err := faults.Parse(key, n1.Annotations[key], nil, map[string]corev1.NodeConditionType{"memory": "SelftaintMemoryPressure"})
	if err != nil {
		t.Fatalf("the injected annotation %q does not parse: %v", n1.Annotations[key], err)
	}
	if f.Status != corev1.ConditionTrue || f.Reason != faults.DefaultReason || f.Message != "drill" || f.InjectedBy != "ci" {
		t.Errorf("injected fault = %+v", f)
	}
	if lo, hi := began.Add(5*time.Minute).Truncate(time.Second), time.Now().Add(5*time.Minute+time.Second); f.ExpiresAt.Before(lo) || f.ExpiresAt.After(hi) {
		t.Errorf("expiresAt %s not within [%s, %s]", f.ExpiresAt, lo, hi)
	}
	if lo, hi := began.Truncate(time.Second), time.Now(); f.InjectedAt.Before(lo) || f.InjectedAt.After(hi) {
		t.Errorf("injectedAt %s not within [%s, %s]: the agent counts the duration from it", f.InjectedAt, lo, hi)
	}
	if !reflect.DeepEqual(withoutFaults(n1), before.Annotations) || !reflect.DeepEqual(n1.Spec, before.Spec) || !reflect.DeepEqual(n1.Status, before.Status) {
		t.Errorf("inject touched more than its annotation:\nbefore %+v %+v\nafter  %+v %+v", before.Annotations, before.Spec, n1.Annotations, n1.Spec)
	}

	// Flags before the node work too.
	if code, _, errs := runCLI(t, "fault", "inject", kc, "--condition=SelftaintDiskPressure", "--status=Unknown", "--reason=DiskGone", "--for=3s", "n2"); code != 0 {
		t.Fatalf("inject n2: exit %d: %s", code, errs)
	}
	// A malformed fault someone wrote by hand.
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), "n2", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"fault.selftaint.io/pid":"{bad"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	code, out, errs = runCLI(t, "fault", "list", "n1", kc)
	if code != 0 {
		t.Fatalf("list n1: exit %d: %s", code, errs)
	}
	t.Logf("list n1:\n%s", out)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
		!strings.Contains(lines[0], "NODE") || !strings.Contains(lines[0], "TARGET") || !strings.Contains(lines[0], "EXPIRES") || !strings.Contains(lines[0], "VALID") ||
		!fieldsAre(lines[1], "n1", "memory", "True", "InjectedFault") || !strings.Contains(lines[1], "(in 4m") && !strings.Contains(lines[1], "(in 5m") ||
		!strings.HasSuffix(lines[1], "yes") {
		t.Errorf("list n1 output unexpected:\n%s", out)
	}

	code, out, errs = runCLI(t, "fault", "list", kc)
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errs)
	}
	t.Logf("list:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("list: got %d lines, want a header and 3 faults:\n%s", len(lines), out)
	}
	if !fieldsAre(lines[1], "n1", "memory") || !fieldsAre(lines[2], "n2", "SelftaintDiskPressure", "Unknown", "DiskGone") || !strings.HasSuffix(lines[2], "yes") ||
		!fieldsAre(lines[3], "n2", "pid", "-", "-", "-", "no:") || !strings.Contains(lines[3], "not a valid fault") {
		t.Errorf("list output unexpected:\n%s", out)
	}

	// The 3 s fault expires: list says so (no agent runs here to remove it).
	// It expires 3 s after it was injected, which a loaded machine may have
	// done well after began: poll for it.
	expired := func() bool {
		_, out, _ = runCLI(t, "fault", "list", "n2", kc)
		return strings.Contains(out, "ago)") && strings.Contains(out, "no: expired")
	}
	deadline := time.Now().Add(20 * time.Second)
	for !expired() && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(out, "ago)") || !strings.Contains(out, "no: expired") {
		t.Errorf("list 20 s after the 3 s fault's injection does not show it expired:\n%s", out)
	}

	// clear by the other name of the same condition.
	code, out, errs = runCLI(t, "fault", "clear", "n1", "--condition", "SelftaintMemoryPressure", kc)
	if code != 0 || !strings.Contains(out, "cleared fault.selftaint.io/memory on node n1") {
		t.Fatalf("clear n1: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if n := nodeNow(t, c, "n1"); !reflect.DeepEqual(n.Annotations, before.Annotations) || !reflect.DeepEqual(n.Spec, before.Spec) {
		t.Errorf("after clear n1: annotations %v spec %+v, want as before %v %+v", n.Annotations, n.Spec, before.Annotations, before.Spec)
	}
	code, out, _ = runCLI(t, "fault", "clear", "n1", "--condition", "memory", kc)
	if code != 0 || !strings.Contains(out, "no fault to clear") {
		t.Errorf("clearing again: exit %d, %q", code, out)
	}
	code, out, errs = runCLI(t, "fault", "clear", "n2", "--all", kc)
	if code != 0 || !strings.Contains(out, "fault.selftaint.io/SelftaintDiskPressure") || !strings.Contains(out, "fault.selftaint.io/pid") {
		t.Fatalf("clear --all: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if n := nodeNow(t, c, "n2"); !reflect.DeepEqual(n.Annotations, map[string]string{"example.com/owner": "team-a"}) || !reflect.DeepEqual(n.Spec, before2.Spec) {
		t.Errorf("after clear --all: annotations %v spec %+v, want only the foreign annotation and the spec as before (%+v)", n.Annotations, n.Spec, before2.Spec)
	}
	if _, out, _ = runCLI(t, "fault", "list", kc); strings.TrimSpace(out) != "no faults" {
		t.Errorf("list after clearing: %q, want no faults", out)
	}

	// --config supplies the default duration, the maximum and the targets.
	cfg := writeFile(t, "faults:\n  defaultDuration: 1m\n  maxDuration: 2m\nprobes:\n  pid:\n    condition: ExampleThreads\nrules: []\n")
	code, out, errs = runCLI(t, "fault", "inject", "n1", "--condition=ExampleThreads", "--config="+cfg, kc)
	if code != 0 || !strings.Contains(out, "ExampleThreads is True") || !strings.Contains(out, "(in 1m") {
		t.Errorf("inject with --config: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = runCLI(t, "fault", "inject", "n1", "--condition=pid", "--for=5m", "--config="+cfg, kc)
	if code != 1 || !strings.Contains(errs, "longer than the maximum fault duration 2m0s") {
		t.Errorf("inject --for beyond the configured maximum: exit %d, stderr %q", code, errs)
	}

	// A GPU Xid by number: the GPU probe's condition, reason and message.
	code, out, errs = runCLI(t, "fault", "inject", "n2", "--gpu-xid", "79", "--for=2m", "--injected-by=ci", kc)
	if code != 0 {
		t.Fatalf("inject --gpu-xid 79: exit %d: %s", code, errs)
	}
	for _, w := range []string{"the GPU probe reports Xid 79 (GPU has fallen off the bus; reboot the node) as GPURebootRequired on SelftaintGPUFailure",
		"injected fault on node n2: SelftaintGPUFailure is True (GPURebootRequired)", "annotation fault.selftaint.io/gpu="} {
		if !strings.Contains(out, w) {
			t.Errorf("inject --gpu-xid output %q does not contain %q", out, w)
		}
	}
	gkey := faults.AnnotationKey("gpu")
	gf, err := faults.Parse(gkey, nodeNow(t, c, "n2").Annotations[gkey], nil, map[string]corev1.NodeConditionType{"gpu": "SelftaintGPUFailure"})
	if err != nil {
		t.Fatalf("the injected Xid fault does not parse: %v", err)
	}
	if gf.Condition != "SelftaintGPUFailure" || gf.Status != corev1.ConditionTrue || gf.Reason != "GPURebootRequired" ||
		!strings.HasPrefix(gf.Message, "GPU 0: Xid 79 (GPU has fallen off the bus) at ") || !strings.HasSuffix(gf.Message, "; reboot the node") {
		t.Errorf("injected Xid fault = %+v", gf)
	}
	// The config's override decides: 79 turned off is refused.
	off := writeFile(t, "probes:\n  gpu:\n    xids: {79: ignore}\n")
	code, _, errs = runCLI(t, "fault", "inject", "n1", "--gpu-xid=79", "--config="+off, kc)
	if code != 1 || !strings.Contains(errs, "its action is ignore, by the config") {
		t.Errorf("inject --gpu-xid 79 with 79 ignored: exit %d, stderr %q", code, errs)
	}
}

// fieldsAre reports whether line's leading whitespace-separated fields are
// want.
func fieldsAre(line string, want ...string) bool {
	f := strings.Fields(line)
	if len(f) < len(want) {
		return false
	}
	for i, w := range want {
		if f[i] != w {
			return false
		}
	}
	return true
}

// TestFaultCLIErrors checks the fault commands' argument errors, and their
// API errors against a real API server: each exits non-zero with the
// problem on stderr and writes nothing.
func TestFaultCLIErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"no subcommand", []string{"fault"}, 2, "selftaint fault inject NODE"},
		{"unknown subcommand", []string{"fault", "frob"}, 2, `unknown command "frob"`},
		{"inject without node", []string{"fault", "inject", "--condition=memory"}, 2, "want exactly one NODE"},
		{"inject two nodes", []string{"fault", "inject", "a", "b", "--condition=memory"}, 2, "want exactly one NODE"},
		{"inject without condition", []string{"fault", "inject", "n1"}, 1, "--condition is required"},
		{"inject for zero", []string{"fault", "inject", "n1", "--condition=memory", "--for=0s"}, 1, "--for must be greater than zero"},
		{"inject for negative", []string{"fault", "inject", "n1", "--condition=memory", "--for=-1m"}, 1, "--for must be greater than zero"},
		{"inject for too long", []string{"fault", "inject", "n1", "--condition=memory", "--for=2h"}, 1, "longer than the maximum fault duration 1h0m0s"},
		{"inject unknown condition", []string{"fault", "inject", "n1", "--condition=SelftaintBogus"}, 1, `unknown target "SelftaintBogus"`},
		{"inject bad status", []string{"fault", "inject", "n1", "--condition=memory", "--status=true"}, 1, `status "true" is not True, False or Unknown`},
		{"inject bad reason", []string{"fault", "inject", "n1", "--condition=memory", "--reason=two words"}, 1, "must be CamelCase"},
		{"inject bad flag", []string{"fault", "inject", "n1", "--condtion=memory"}, 2, "flag provided but not defined: -condtion"},
		{"inject Xid and condition", []string{"fault", "inject", "n1", "--gpu-xid=79", "--condition=memory"}, 1, "--gpu-xid sets the condition, status, reason and message: not with --condition"},
		{"inject Xid and reason", []string{"fault", "inject", "n1", "--gpu-xid=79", "--reason=Mine"}, 1, "not with --reason"},
		{"inject Xid not a number", []string{"fault", "inject", "n1", "--gpu-xid=seventy-nine"}, 2, "invalid value"},
		{"inject ignored Xid", []string{"fault", "inject", "n1", "--gpu-xid=63"}, 1, "--gpu-xid 63: Xid 63 (GPU memory remapping event; none): its action is ignore, by NVIDIA's catalog: the GPU probe raises no condition for it"},
		{"inject application Xid", []string{"fault", "inject", "n1", "--gpu-xid=13"}, 1, "its action is restart-app"},
		{"clear without what", []string{"fault", "clear", "n1"}, 1, "give exactly one of --condition or --all"},
		{"clear with both", []string{"fault", "clear", "n1", "--all", "--condition=memory"}, 1, "give exactly one of --condition or --all"},
		{"list two nodes", []string{"fault", "list", "a", "b"}, 2, "want at most one NODE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append(tt.args, "--kubeconfig=/nonexistent/kubeconfig")...)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q does not mention %q", stderr, tt.want)
			}
		})
	}

	// Its own control plane: it checks that no Node at all was written.
	cp := testcp.Start(t, testcp.Options{})
	kc := "--kubeconfig=" + cp.KubeconfigPath
	for _, args := range [][]string{
		{"fault", "inject", "missing", "--condition=memory", kc},
		{"fault", "clear", "missing", "--all", kc},
		{"fault", "list", "missing", kc},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != 1 || !strings.Contains(stderr, `"missing" not found`) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and the node named as not found", args, code, stderr)
		}
	}
	if l, err := cp.Client().CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("nodes after failed commands: %v (err %v), want none", l, err)
	}
	// The kubelet's conditions take faults on virtual nodes only.
	cp.CreateNode(t, "real", nil)
	if code, _, stderr := runCLI(t, "fault", "inject", "real", "--condition=Ready", "--status=False", kc); code != 1 || !strings.Contains(stderr, "only virtual nodes") {
		t.Errorf("inject Ready on a real node: exit %d, stderr %q; want 1 and a word on virtual nodes", code, stderr)
	}
	if n := nodeNow(t, cp.Client(), "real"); len(n.Annotations) != 0 {
		t.Errorf("annotations on real after a refused fault: %v", n.Annotations)
	}
}

// TestFaultCLIWithAgent runs the agent command against a fixture host and
// drives it with the fault commands: a fault injected by the CLI taints the
// node within seconds although its probe is healthy and damped by 30 s, and
// clearing it lifts the taint.
func TestFaultCLIWithAgent(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	kc := "--kubeconfig=" + cp.KubeconfigPath
	const node = "with-agent"
	cp.CreateNode(t, node, withForeignBits)
	cfg := writeFile(t, "probes:\n  disk:\n    enabled: false\n  pid:\n    interval: 1s\n    timeout: 500ms\n    for: 30s\n    clearAfter: 30s\n")

	// The agent runs as its own process (this test binary running main),
	// as in production; in-process it would set klog's global logger under
	// the test's clients.
	var agentErr bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SELFTAINT_TEST_RUN_MAIN=1",
		"SELFTAINT_TEST_ARGS="+strings.Join([]string{"agent", "--node-name=" + node, kc, "--host-root=testdata/lowmem", "--config=" + cfg, "--log-level=warn", "--metrics-address=127.0.0.1:0"}, " "))
	cmd.Stderr = &agentErr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the agent: %v", err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("agent exited with %v; stderr:\n%s", err, agentErr.String())
		} else if strings.Contains(agentErr.String(), "level=ERROR") {
			t.Errorf("agent logged errors:\n%s", agentErr.String())
		}
	}()

	pid := corev1.NodeConditionType("SelftaintPIDPressure")
	pidTaint := "selftaint.io/pid-pressure"
	cond := func(n *corev1.Node) *corev1.NodeCondition {
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == pid {
				return &n.Status.Conditions[i]
			}
		}
		return nil
	}
	tainted := func(n *corev1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == pidTaint })
	}
	wait := func(what string, timeout time.Duration, ok func(*corev1.Node) bool) *corev1.Node {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			n := nodeNow(t, c, node)
			if ok(n) {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %s waiting for %s: conditions %+v taints %v", timeout, what, n.Status.Conditions, n.Spec.Taints)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wait("the pid condition False", 30*time.Second, func(n *corev1.Node) bool { c := cond(n); return c != nil && c.Status == corev1.ConditionFalse })

	injected := time.Now()
	if code, out, errs := runCLI(t, "fault", "inject", node, "--condition=pid", "--for=1m", "--message=drill", kc, "--config="+cfg); code != 0 {
		t.Fatalf("inject: exit %d: %s %s", code, out, errs)
	}
	wait("the fault's condition and taint", 5*time.Second, func(n *corev1.Node) bool {
		c := cond(n)
		return c != nil && c.Status == corev1.ConditionTrue && faultMessage(c.Message, "drill") && tainted(n)
	})
	if took := time.Since(injected); took > 3*time.Second {
		t.Errorf("the fault took %s to apply, want under 3s", took)
	}
	if code, out, _ := runCLI(t, "fault", "list", node, kc, "--config="+cfg); code != 0 || !strings.Contains(out, "pid") || !strings.Contains(out, "yes") {
		t.Errorf("list: exit %d:\n%s", code, out)
	}
	if code, out, errs := runCLI(t, "fault", "clear", node, "--condition=SelftaintPIDPressure", kc, "--config="+cfg); code != 0 {
		t.Fatalf("clear: exit %d: %s %s", code, out, errs)
	}
	n := wait("the condition False and no taint", 5*time.Second, func(n *corev1.Node) bool {
		c := cond(n)
		return c != nil && c.Status == corev1.ConditionFalse && !tainted(n)
	})
	if n.Annotations["example.com/owner"] != "team-a" || !slices.Contains(n.Spec.Taints, cliForeignTaint) {
		t.Errorf("foreign annotation or taint lost: %v %v", n.Annotations, n.Spec.Taints)
	}
}

// TestFaultRows judges faults as selftaint fault list does, without an API
// server: durations far off read plainly beside their dates, a fault's
// duration counts from its injectedAt or from when its annotation was
// written (the Node's managed fields), and a null field is named.
func TestFaultRows(t *testing.T) {
	cfg, err := config.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	known, probeConds := cfg.FaultTargets()
	env := &faultEnv{cfg: cfg, known: known, probeConditions: probeConds}
	now := time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	written := func(key string, d time.Duration) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: "kubectl-annotate", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: now.Add(d)},
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:` + key + `":{}}}}`)}}
	}
	tests := []struct {
		name          string
		value         string
		writtenAgo    time.Duration // 0: no managed fields
		expires, want string
	}{
		{"far future", `{"expiresAt":"9999-12-31T00:00:00Z"}`, 0, "9999-12-31T00:00:00Z (in more than 100 years)",
			"no: expiresAt 9999-12-31T00:00:00Z is more than 100 years away, beyond the maximum fault duration 1h0m0s"},
		{"long past", `{"expiresAt":"0001-01-01T00:00:00Z"}`, 0, "0001-01-01T00:00:00Z (more than 100 years ago)", "no: expired"},
		{"a year off", `{"expiresAt":"` + at(365*24*time.Hour) + `"}`, 0, "(in about 365 days)", "is about 365 days away"},
		{"valid", `{"injectedAt":"` + at(-10*time.Minute) + `","expiresAt":"` + at(30*time.Minute) + `"}`, 0, "(in 30m0s)", "yes"},
		{"too long from injectedAt", `{"injectedAt":"` + at(-90*time.Minute) + `","expiresAt":"` + at(30*time.Minute) + `"}`, 0, "(in 30m0s)",
			"no: the fault lasts 2h0m0s, from injectedAt 2026-11-23T09:30:00Z to expiresAt 2026-11-23T11:30:00Z, beyond the maximum fault duration 1h0m0s"},
		{"too long from when it was written", `{"expiresAt":"` + at(30*time.Minute) + `"}`, 90 * time.Minute, "(in 30m0s)",
			"no: the fault lasts 2h0m0s, from when its annotation was written (2026-11-23T09:30:00Z)"},
		{"status null", `{"status":null,"expiresAt":"` + at(30*time.Minute) + `"}`, 0, "-", "no: status is null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := faults.AnnotationKey("memory")
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{key: tt.value}}}
			if tt.writtenAgo != 0 {
				n.ManagedFields = []metav1.ManagedFieldsEntry{written(key, -tt.writtenAgo)}
			}
			rows := faultRows(env, n, now)
			if len(rows) != 1 {
				t.Fatalf("got %d rows, want 1: %+v", len(rows), rows)
			}
			if got := rows[0]; !strings.Contains(got.expires, tt.expires) || !strings.HasPrefix(got.valid, tt.want) && !strings.Contains(got.valid, tt.want) {
				t.Errorf("got expires %q, valid %q; want %q and %q", got.expires, got.valid, tt.expires, tt.want)
			}
		})
	}
}
