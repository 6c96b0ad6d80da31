package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
)

// shared is the control plane (etcd and kube-apiserver) of the tests that
// need no fresh one: each keeps to Nodes and namespaces of its own. Tests
// that list every Node or every fault, run a coordinator or guard that
// counts every Node, or need kube-controller-manager or other flags use
// testcp.Start.
var shared = testcp.NewShared(testcp.Options{})

// TestMain lets tests run this test binary as the selftaint command itself,
// so they see the real exit status of main; and stops the shared control
// plane after the tests.
func TestMain(m *testing.M) {
	if os.Getenv("SELFTAINT_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"selftaint"}, strings.Fields(os.Getenv("SELFTAINT_TEST_ARGS"))...)
		main()
		return
	}
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the shared control plane: %v\n", err)
		code = max(code, 1)
	}
	if err := removeDrillBinary(); err != nil {
		fmt.Fprintf(os.Stderr, "removing the drills' selftaint binary: %v\n", err)
	}
	os.Exit(code)
}

// runMain runs the command in a child process and returns its exit code and
// stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SELFTAINT_TEST_RUN_MAIN=1", "SELFTAINT_TEST_ARGS="+strings.Join(args, " "))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	default:
		t.Fatalf("running selftaint: %v", err)
		return 0, "", ""
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestInvalidConfigExitsNonZero starts the agent with broken configs: it
// must exit non-zero before doing anything, naming the field and the reason.
func TestInvalidConfigExitsNonZero(t *testing.T) {
	tests := []struct {
		name   string
		config string
		want   []string
	}{
		{"unknown field", "probes:\n  memory:\n    intervall: 10s\n", []string{`unknown field "probes.memory.intervall"`}},
		{"bad effect", "rules:\n- condition: SelftaintMemoryPressure\n  taint: {key: selftaint.io/m, effect: NoSchedul}\n", []string{"rules[0].taint.effect", `"NoSchedul"`}},
		{"reserved key", "rules:\n- condition: SelftaintMemoryPressure\n  taint: {key: node.kubernetes.io/memory-pressure, effect: NoSchedule}\n", []string{"rules[0].taint.key", "node lifecycle", "allowReservedKey"}},
		{"negative duration", "probes:\n  disk:\n    clearAfter: -1m\n", []string{"probes.disk.clearAfter", "must not be negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := writeFile(t, tt.config)
			code, _, stderr := runMain(t, "agent", "--node-name=n1", "--kubeconfig=/nonexistent", "--config="+cfg)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; stderr: %s", stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not mention %q", stderr, w)
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"no command", nil, 2, "Usage"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"agent without node name", []string{"agent", "--node-name="}, 1, "--node-name is required"},
		{"check with a bad output", []string{"check", "--output=yaml"}, 1, "--output must be table or json"},
		{"unknown flag", []string{"check", "--nope"}, 2, "flag provided but not defined: -nope"},
		{"drill without a file", []string{"drill"}, 2, "want one FILE, got 0"},
		{"drill with two files", []string{"drill", "a.yaml", "b.yaml"}, 2, "want one FILE, got 2"},
		{"drill with a missing file", []string{"drill", "/nonexistent/drill.yaml"}, 2, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not mention %q", stderr.String(), tt.want)
			}
		})
	}
}

// TestCheckOnFixtureHost runs `selftaint check` against a fixture host whose
// memory is low: the memory row must say Problem and the table must list the
// memory taint.
func TestCheckOnFixtureHost(t *testing.T) {
	cfg := writeFile(t, "probes:\n  disk:\n    enabled: false\n")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"check", "--host-root=testdata/lowmem", "--config=" + cfg, "--output=json"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep checkReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("json output: %v\n%s", err, stdout.String())
	}
	got := map[string]checkRow{}
	for _, r := range rep.Probes {
		got[r.Probe] = r
	}
	if m := got["memory"]; m.Status != probes.StatusProblem || m.ConditionStatus != corev1.ConditionTrue || m.Condition != "SelftaintMemoryPressure" {
		t.Errorf("memory row = %+v, want Problem -> SelftaintMemoryPressure True", m)
	}
	if p := got["pid"]; p.Status != probes.StatusOK || p.ConditionStatus != corev1.ConditionFalse {
		t.Errorf("pid row = %+v, want OK -> False", p)
	}
	if _, ok := got["disk"]; ok {
		t.Errorf("disk probe ran although disabled")
	}
	if len(rep.Taints) != 1 || rep.Taints[0].Key != "selftaint.io/memory-pressure" || rep.Taints[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("taints = %+v, want only selftaint.io/memory-pressure:NoSchedule", rep.Taints)
	}

	stdout.Reset()
	code = run(context.Background(), []string{"check", "--host-root=testdata/lowmem", "--config=" + cfg}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("table: exit %d: %s", code, stderr.String())
	}
	for _, w := range []string{"PROBE", "memory", "Problem", "SelftaintMemoryPressure", "Taints that would follow:", "selftaint.io/memory-pressure:NoSchedule"} {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("table output does not contain %q:\n%s", w, stdout.String())
		}
	}
}

// TestCheckPrintsConfigWarnings: a config that is valid but risky (a
// NoExecute rule without a fallback) is told by check, in both outputs,
// naming the field; a config without one prints no warning.
func TestCheckPrintsConfigWarnings(t *testing.T) {
	risky := writeFile(t, "probes:\n  disk:\n    enabled: false\nrules:\n- condition: SelftaintMemoryPressure\n  taint: {key: selftaint.io/memory-pressure, effect: NoExecute}\n")
	for _, tc := range []struct {
		name, config string
		want         bool
	}{
		{"NoExecute without fallback", risky, true},
		{"defaults", writeFile(t, "probes:\n  disk:\n    enabled: false\n"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var table, js, stderr bytes.Buffer
			if code := run(context.Background(), []string{"check", "--host-root=testdata/lowmem", "--config=" + tc.config}, &table, &stderr); code != 0 {
				t.Fatalf("table: exit %d: %s", code, stderr.String())
			}
			if code := run(context.Background(), []string{"check", "--host-root=testdata/lowmem", "--config=" + tc.config, "--output=json"}, &js, &stderr); code != 0 {
				t.Fatalf("json: exit %d: %s", code, stderr.String())
			}
			var rep checkReport
			if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
				t.Fatalf("json output: %v\n%s", err, js.String())
			}
			const field = "rules[0].fallback: not set"
			if got := strings.Contains(table.String(), "warning: "+field); got != tc.want {
				t.Errorf("table output has the warning: %v, want %v:\n%s", got, tc.want, table.String())
			}
			if got := len(rep.Warnings) == 1 && strings.HasPrefix(rep.Warnings[0], field); got != tc.want {
				t.Errorf("json warnings %q: has the fallback warning %v, want %v", rep.Warnings, got, tc.want)
			}
			if !tc.want && (len(rep.Warnings) != 0 || strings.Contains(table.String(), "warning:")) {
				t.Errorf("warnings for a config without risk: %q\n%s", rep.Warnings, table.String())
			}
		})
	}
}

// TestCheckUnreadableHost points check at a host root with no /proc: every
// probe must say Unknown, not OK, and the command still succeeds.
func TestCheckUnreadableHost(t *testing.T) {
	cfg := writeFile(t, "probes:\n  disk:\n    paths: [/does-not-exist]\n")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"check", "--host-root=" + t.TempDir(), "--config=" + cfg, "--output=json"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep checkReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	// Every probe that reads the host (memory, disk, pid, network); no GPU
	// without NVML.
	hostProbes := 0
	for _, s := range config.DefaultRegistry() {
		if _, ok := s.Settings(&config.Probes{}).(config.HostBuilder); ok {
			hostProbes += len(s.Probes)
		}
	}
	if len(rep.Probes) != hostProbes {
		t.Fatalf("got %d probes, want %d", len(rep.Probes), hostProbes)
	}
	for _, r := range rep.Probes {
		if r.Status != probes.StatusUnknown || r.ConditionStatus != corev1.ConditionUnknown || r.Message == "" {
			t.Errorf("%s: status %s/%s message %q, want Unknown with a message", r.Probe, r.Status, r.ConditionStatus, r.Message)
		}
	}
	if len(rep.Taints) != 0 {
		t.Errorf("taints = %v, want none (Unknown does not taint by default)", rep.Taints)
	}
}

// TestCheckTellsTheDrain: with a rule that drains instead of tainting,
// check says the drain the agent would ask for on a host whose memory is
// low, in both outputs, and no taint.
func TestCheckTellsTheDrain(t *testing.T) {
	cfg := writeFile(t, "probes:\n  disk:\n    enabled: false\nrules:\n- condition: SelftaintMemoryPressure\n  action: drain\n  drain: {deadline: 45m, evictUnreplicated: true}\n")
	var table, js, stderr bytes.Buffer
	if code := run(context.Background(), []string{"check", "--host-root=testdata/lowmem", "--config=" + cfg}, &table, &stderr); code != 0 {
		t.Fatalf("table: exit %d: %s", code, stderr.String())
	}
	if code := run(context.Background(), []string{"check", "--host-root=testdata/lowmem", "--config=" + cfg, "--output=json"}, &js, &stderr); code != 0 {
		t.Fatalf("json: exit %d: %s", code, stderr.String())
	}
	var rep checkReport
	if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
		t.Fatalf("json output: %v\n%s", err, js.String())
	}
	if d := rep.Drain; d == nil || d.Deadline != "45m0s" || !d.EvictUnreplicated || !strings.HasPrefix(d.Reason, "condition SelftaintMemoryPressure is True: ") {
		t.Errorf("drain = %+v, want SelftaintMemoryPressure's, 45m, evictUnreplicated", d)
	}
	if len(rep.Taints) != 0 {
		t.Errorf("taints = %+v, want none: the rule drains instead", rep.Taints)
	}
	for _, w := range []string{"Drain that would be requested from the coordinator", "condition SelftaintMemoryPressure is True", "deadline 45m0s, evictUnreplicated", "Taints that would follow: none"} {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table output does not contain %q:\n%s", w, table.String())
		}
	}
}
