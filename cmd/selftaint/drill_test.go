package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/agent/testcp"
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
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"drill", file, "--report", report, "--junit", junit}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	for _, want := range []string{"step memory (fault) starts", "step tainted done", "cleanup done", "PASS"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
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
