package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// The drill's start-up and file errors: what a user sees when the embedded
// control plane is slow or does not start, and when cluster.config is
// wrong. Each drill starts (at most) a real etcd and fake Kubernetes
// components from --kube-bin-dir.

// fakeKubeBins writes kube-apiserver (running apiserver, a shell script),
// kube-controller-manager and kube-scheduler (which never answer) into a
// new directory and returns it.
func fakeKubeBins(t *testing.T, apiserver string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Fatal("needs /bin/sh")
	}
	dir := t.TempDir()
	for name, script := range map[string]string{
		"kube-apiserver":          apiserver,
		"kube-controller-manager": "exec sleep 600",
		"kube-scheduler":          "exec sleep 600",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// keptLogPath finds the kept log's path in line and removes its directory
// when the test ends.
func keptLogPath(t *testing.T, line, component string) string {
	t.Helper()
	m := regexp.MustCompile(`(/\S+/` + regexp.QuoteMeta(component) + `\.log)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the line names no kept %s log: %q", component, line)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(m[1])) })
	return m[1]
}

// nonEmptyLines are the lines of s that are not blank.
func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// readReport decodes the JSON report at path.
func readReport(t *testing.T, path string) tdrill.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the report: %v", err)
	}
	var rep tdrill.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("decoding the report: %v\n%s", err, b)
	}
	return rep
}

// A control plane that is not ready within --start-timeout: progress lines
// on the way, naming what is still awaited; then exit 3 with one line on
// stderr that names the limit, the slow component, how long each took,
// and the logs, kept.
func TestDrillStartTimeout(t *testing.T) {
	t.Parallel()
	testcp.SkipIfShort(t, "starts etcd and waits 30 s for a kube-apiserver that never answers")
	testcp.EtcdPath(t)
	bins := fakeKubeBins(t, "exec sleep 600")
	report := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr testkit.LogBuffer
	code := run(t.Context(), []string{"drill", "testdata/drillerrors/start.yaml", "--kube-bin-dir", bins, "--start-timeout", "30s", "--report", report}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != tdrill.ExitNotRun {
		t.Fatalf("exit %d, want %d", code, tdrill.ExitNotRun)
	}
	progress := 0
	for _, l := range nonEmptyLines(stdout.String()) {
		if strings.Contains(l, "waiting for kube-apiserver") {
			progress++
		}
	}
	if progress == 0 {
		t.Errorf("no progress line names kube-apiserver as awaited (want one about every 10 s)")
	}
	lines := nonEmptyLines(stderr.String())
	if len(lines) != 1 {
		t.Fatalf("stderr has %d lines, want 1", len(lines))
	}
	line := lines[0]
	for _, want := range []string{"did not start within 30s", "kube-apiserver was slow", "etcd ready in", "kube-apiserver.log"} {
		if !strings.Contains(line, want) {
			t.Errorf("stderr line lacks %q: %s", want, line)
		}
	}
	if _, err := os.Stat(keptLogPath(t, line, "kube-apiserver")); err != nil {
		t.Errorf("the log the line names is not there: %v", err)
	}
	if rep := readReport(t, report); strings.Contains(rep.Error, "\n") || !strings.Contains(rep.Error, "kube-apiserver was slow") {
		t.Errorf("report error %q, want one line naming kube-apiserver as slow", rep.Error)
	}
}

// A component that exits at once: exit 3 with one line on stderr naming
// it, its exit and what its log ends with, and the log, kept; none of the
// log's lines are printed (the closing table and the report included).
func TestDrillStartFailureOneLine(t *testing.T) {
	t.Parallel()
	testcp.EtcdPath(t)
	bins := fakeKubeBins(t, `for i in $(seq 45); do echo "I1127 10:00:00.000000    4242 noise.go:1] noise line $i" >&2; done
echo 'E1127 10:00:00.100000    4242 run.go:72] "command failed" err="unknown flag: --bogus"' >&2
exit 1`)
	report := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr testkit.LogBuffer
	code := run(t.Context(), []string{"drill", "testdata/drillerrors/start.yaml", "--kube-bin-dir", bins, "--report", report}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != tdrill.ExitNotRun {
		t.Fatalf("exit %d, want %d", code, tdrill.ExitNotRun)
	}
	lines := nonEmptyLines(stderr.String())
	if len(lines) != 1 {
		t.Fatalf("stderr has %d lines, want 1", len(lines))
	}
	line := lines[0]
	for _, want := range []string{"kube-apiserver exited", "exit status 1", "unknown flag: --bogus"} {
		if !strings.Contains(line, want) {
			t.Errorf("stderr line lacks %q: %s", want, line)
		}
	}
	log, err := os.ReadFile(keptLogPath(t, line, "kube-apiserver"))
	if err != nil || !strings.Contains(string(log), "noise line 45") {
		t.Errorf("the kept log: %v, %d bytes; want kube-apiserver's output", err, len(log))
	}
	for _, l := range nonEmptyLines(stdout.String()) {
		if strings.Contains(l, "noise") || strings.Contains(l, "I1127") || strings.Contains(l, "E1127") {
			t.Errorf("stdout carries the component's log: %q", l)
		}
	}
	if strings.Contains(line, "noise") || strings.Contains(line, "I1127") {
		t.Errorf("stderr line carries a log line verbatim: %s", line)
	}
	if rep := readReport(t, report); strings.Contains(rep.Error, "\n") || strings.Contains(rep.Error, "noise") || !strings.Contains(rep.Error, "kube-apiserver") {
		t.Errorf("report error %q, want one line naming kube-apiserver without its log", rep.Error)
	}
}

// A typo in cluster.config: exit 2, before anything starts, with one line
// naming the drill file, the line of the typo in it and the field's path;
// no cleanup, no table, no temporary file.
func TestDrillConfigErrorAtItsLine(t *testing.T) {
	t.Parallel()
	var stdout, stderr testkit.LogBuffer
	// A kube-bin-dir without binaries: a drill that got as far as starting
	// would fail differently.
	code := run(t.Context(), []string{"drill", "testdata/drillerrors/config-typo.yaml", "--kube-bin-dir", t.TempDir()}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != tdrill.ExitBadFile {
		t.Fatalf("exit %d, want %d", code, tdrill.ExitBadFile)
	}
	if out := stdout.String(); out != "" {
		t.Errorf("stdout %q, want nothing (nothing ran)", out)
	}
	lines := nonEmptyLines(stderr.String())
	if len(lines) != 1 {
		t.Fatalf("stderr has %d lines, want 1", len(lines))
	}
	want := "selftaint drill: testdata/drillerrors/config-typo.yaml:15: cluster.config.rules[0].fallbak: unknown field"
	if !strings.HasPrefix(lines[0], want) {
		t.Errorf("stderr %q, want it to begin %q", lines[0], want)
	}
	if strings.Contains(lines[0], os.TempDir()) || strings.Contains(lines[0], "cleanup") {
		t.Errorf("stderr names a temporary file or a cleanup: %s", lines[0])
	}
}
