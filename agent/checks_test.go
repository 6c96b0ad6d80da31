package agent_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
)

// TestNPDChecksOnTheNode runs an unchanged node-problem-detector
// custom-plugin-monitor config through the agent against a real
// kube-apiserver. Its plugins return OK, a problem, unknown, hang past the
// timeout, print binary garbage, print megabytes: each becomes the
// condition NPD's protocol says, the hung plugin is killed with its
// children, and the agent's own probe keeps working throughout.
func TestNPDChecksOnTheNode(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "hang.pid")
	scripts := map[string]string{
		"ok.sh":      "echo all good\nexit 0\n",
		"problem.sh": "echo disk is on fire\necho second line ignored\nexit 1\n",
		"unknown.sh": "echo cannot tell\nexit 2\n",
		"hang.sh":    "sleep 1000 &\necho $! > " + pidFile + "\nwait\n",
		"garbage.sh": "printf '\\000\\377\\376 garbage \\033[31m'\nexit 1\n",
		"mega.sh":    "head -c 5000000 /dev/zero\nexit 0\n",
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	type want struct {
		status corev1.ConditionStatus
		reason string
		msg    string // substring
	}
	checks := []struct {
		cond, script string
		want         want
	}{
		{"CheckOK", "ok.sh", want{corev1.ConditionFalse, "CheckOKIsFine", "no CheckOK"}},
		{"CheckProblem", "problem.sh", want{corev1.ConditionTrue, "CheckProblemFound", "disk is on fire"}},
		{"CheckUnknown", "unknown.sh", want{corev1.ConditionUnknown, "PluginUnknown", "cannot tell"}},
		{"CheckHang", "hang.sh", want{corev1.ConditionUnknown, "PluginTimeout", ""}},
		{"CheckGarbage", "garbage.sh", want{corev1.ConditionTrue, "CheckGarbageFound", "garbage"}},
		{"CheckMega", "mega.sh", want{corev1.ConditionFalse, "CheckMegaIsFine", ""}},
	}
	var conds, npdRules []string
	for _, ck := range checks {
		conds = append(conds, fmt.Sprintf(`{"type": %q, "reason": "%sIsFine", "message": "no %s"}`, ck.cond, ck.cond, ck.cond))
		npdRules = append(npdRules, fmt.Sprintf(`{"type": "permanent", "condition": %q, "reason": "%sFound", "path": %q}`, ck.cond, ck.cond, filepath.Join(dir, ck.script)))
	}
	npd := fmt.Sprintf(`{
  "plugin": "custom",
  "pluginConfig": {"invoke_interval": "1s", "timeout": "500ms", "max_output_length": 80, "concurrency": 3},
  "source": "custom-plugin-monitor",
  "metricsReporting": true,
  "conditions": [%s],
  "rules": [%s]
}`, strings.Join(conds, ",\n"), strings.Join(npdRules, ",\n"))
	npdPath := filepath.Join(dir, "custom-plugin-monitor.json")
	if err := os.WriteFile(npdPath, []byte(npd), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte("checks:\n  npdConfigs: [" + npdPath + "]\n"))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := cfg.CheckProbeSpecs(slog.Default())
	if err != nil {
		t.Fatalf("CheckProbeSpecs: %v", err)
	}
	if len(specs) != len(checks) {
		t.Fatalf("%d probe specs from the NPD config, want %d", len(specs), len(checks))
	}

	cp := testcp.Start(t, testcp.Options{})
	c := cp.Client()
	cp.CreateNode(t, "npd", nil)
	own := newSwitchProbe(probes.StatusOK)
	specs = append(specs, agent.ProbeSpec{Entry: probes.Entry{Probe: own, Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond}, Condition: cond})
	startAgent(t, agent.Options{NodeName: "npd", Client: c.CoreV1(), Probes: specs, Rules: rules})

	n := waitNode(t, c, "npd", 20*time.Second, "every NPD condition", func(n *corev1.Node) bool {
		for _, ck := range checks {
			if got := condition(n, corev1.NodeConditionType(ck.cond)); got == nil || got.Status != ck.want.status {
				return false
			}
		}
		return true
	})
	for _, ck := range checks {
		got := condition(n, corev1.NodeConditionType(ck.cond))
		if got.Reason != ck.want.reason || !strings.Contains(got.Message, ck.want.msg) {
			t.Errorf("%s: %s/%s %q, want %s/%s containing %q", ck.cond, got.Status, got.Reason, got.Message, ck.want.status, ck.want.reason, ck.want.msg)
		}
		if !utf8.ValidString(got.Message) || len(got.Message) > 200 {
			t.Errorf("%s: message %q is not short valid UTF-8", ck.cond, got.Message)
		}
	}
	if got := condition(n, corev1.NodeConditionType("CheckProblem")); strings.Contains(got.Message, "second line") {
		t.Errorf("CheckProblem message %q has more than the first line", got.Message)
	}

	// The hung plugin's background child went with it: no process left.
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the hang plugin never ran: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the hung plugin's child %d is still alive", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The agent's own probe is unaffected.
	own.set(probes.StatusProblem)
	waitNode(t, c, "npd", 5*time.Second, "the agent's own condition True", conditionIs(corev1.ConditionTrue))
}
