package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
// children, and the agent's own probe keeps working throughout. Only the
// hung plugin's rule has a short timeout: the others' is long enough for
// a loaded machine (a plugin timing out turns its condition Unknown).
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
		timeout := ""
		if ck.script == "hang.sh" {
			timeout = `, "timeout": "500ms"`
		}
		npdRules = append(npdRules, fmt.Sprintf(`{"type": "permanent", "condition": %q, "reason": "%sFound", "path": %q%s}`, ck.cond, ck.cond, filepath.Join(dir, ck.script), timeout))
	}
	npd := fmt.Sprintf(`{
  "plugin": "custom",
  "pluginConfig": {"invoke_interval": "1s", "timeout": "30s", "max_output_length": 80, "concurrency": 3},
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

	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	cp.CreateNode(t, "npd", nil)
	own := newSwitchProbe(probes.StatusOK)
	specs = append(specs, agent.ProbeSpec{Entry: probes.Entry{Probe: own, Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond}, Condition: cond})
	startAgent(t, agent.Options{NodeName: "npd", Client: c.CoreV1(), Probes: specs, Rules: rules})

	// Wait for each check's status and reason: a rule whose first run has
	// not ended yet reads Unknown/PluginRunning, which has the hung
	// rule's wanted status but not its reason.
	n := waitNode(t, c, "npd", time.Minute, "every NPD condition's status and reason", func(n *corev1.Node) bool {
		for _, ck := range checks {
			if got := condition(n, corev1.NodeConditionType(ck.cond)); got == nil || got.Status != ck.want.status || got.Reason != ck.want.reason {
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
		// The plugins' output is cut to max_output_length (80): a message
		// with it stays short. The hung plugin's is the agent's own (its
		// path and its run's times), cut only at the agent's 1024 bytes.
		limit := 200
		if ck.script == "hang.sh" {
			limit = 1024
		}
		if !utf8.ValidString(got.Message) || len(got.Message) > limit {
			t.Errorf("%s: message %q is not valid UTF-8 of at most %d bytes", ck.cond, got.Message, limit)
		}
	}
	if got := condition(n, corev1.NodeConditionType("CheckProblem")); strings.Contains(got.Message, "second line") {
		t.Errorf("CheckProblem message %q has more than the first line", got.Message)
	}

	// The hung plugin's background child went with it: no process left.
	waitGone(t, pidFile)

	// The agent's own probe is unaffected.
	own.set(probes.StatusProblem)
	waitNode(t, c, "npd", 30*time.Second, "the agent's own condition True", conditionIs(corev1.ConditionTrue))
}

// waitGone waits up to 30s for the process whose pid is in pidFile to be
// gone.
func waitGone(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the hang plugin never ran: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the hung plugin's child %d is still alive", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeExec writes an executable shell script at path, making its
// directory.
func writeExec(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes data to path.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkSpecs builds the probes of a config's checks section.
func checkSpecs(t *testing.T, checks string) []agent.ProbeSpec {
	t.Helper()
	cfg, err := config.Parse([]byte(checks))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := cfg.CheckProbeSpecs(slog.Default())
	if err != nil {
		t.Fatalf("CheckProbeSpecs: %v", err)
	}
	return specs
}

// TestNPDHealthCheckerOnTheNode runs NPD's health-checker-kubelet.json,
// the file NPD ships, unchanged (invoke_interval 10s, timeout 3m), on a
// real API server. Its plugin, /home/kubernetes/bin/health-checker, is a
// stub at that path under checks.npdPluginRoot: the config is not edited.
// KubeletUnhealthy appears and follows the stub's exit status, including
// a run longer than the interval, which is neither killed nor overlapped
// by the next.
func TestNPDHealthCheckerOnTheNode(t *testing.T) {
	npdPath, err := filepath.Abs("../probes/custom/testdata/npd/health-checker-kubelet.json")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	state := filepath.Join(root, "state")
	// The stub prints its arguments' component, sleeps as told, and exits
	// with the status in the state file; it logs overlapping runs.
	writeExec(t, filepath.Join(root, "home/kubernetes/bin/health-checker"), fmt.Sprintf(`if [ -e %[1]s.pid ] && kill -0 "$(cat %[1]s.pid)" 2>/dev/null; then echo overlap >> %[1]s.log; fi
echo $$ > %[1]s.pid
read code sleep < %[1]s
sleep "$sleep"
echo "end $*" >> %[1]s.log
echo "$1: exit $code"
exit "$code"
`, state))
	set := func(code int, sleep string) { writeFile(t, state, fmt.Sprintf("%d %s\n", code, sleep)) }
	set(0, "0")

	specs := checkSpecs(t, fmt.Sprintf("checks:\n  npdConfigs: [%s]\n  npdPluginRoot: %s\n", npdPath, root))
	if len(specs) != 1 || specs[0].Condition != "KubeletUnhealthy" {
		t.Fatalf("got probe specs %v, want one for KubeletUnhealthy", specs)
	}
	if e := specs[0].Entry; e.Interval != 10*time.Second || e.Timeout != 9*time.Second {
		t.Errorf("Entry every %v within %v, want every 10s (the file's invoke_interval) within 9s", e.Interval, e.Timeout)
	}

	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	cp.CreateNode(t, "npd-kubelet", nil)
	w := startWatch(t, c, "npd-kubelet", getNode(t, c, "npd-kubelet").ResourceVersion)
	startAgent(t, agent.Options{NodeName: "npd-kubelet", Client: c.CoreV1(), Probes: specs})

	const kubelet corev1.NodeConditionType = "KubeletUnhealthy"
	is := func(s corev1.ConditionStatus) func(*corev1.Node) bool {
		return func(n *corev1.Node) bool { c := condition(n, kubelet); return c != nil && c.Status == s }
	}
	n := waitNode(t, c, "npd-kubelet", 20*time.Second, "KubeletUnhealthy False", is(corev1.ConditionFalse))
	if got := condition(n, kubelet); got.Reason != "KubeletIsHealthy" || got.Message != "kubelet on the node is functioning properly" {
		t.Errorf("healthy: got %s %q, want the file's KubeletIsHealthy and its message", got.Reason, got.Message)
	}

	// A run of 12s, longer than the 10s interval, well within the 3m
	// timeout, that finds a problem.
	set(1, "12")
	n = waitNode(t, c, "npd-kubelet", 40*time.Second, "KubeletUnhealthy True", is(corev1.ConditionTrue))
	if got := condition(n, kubelet); got.Reason != "KubeletUnhealthy" || got.Message != "--component=kubelet: exit 1" {
		t.Errorf("unhealthy: got %s %q, want the rule's reason KubeletUnhealthy and the stub's first line", got.Reason, got.Message)
	}

	set(0, "0")
	waitNode(t, c, "npd-kubelet", 30*time.Second, "KubeletUnhealthy False again", is(corev1.ConditionFalse))
	// Every version of the Node: the long run kept the condition where
	// it was until it ended; it never went Unknown (timed out).
	for _, n := range w.seen() {
		if got := condition(n, kubelet); got != nil && got.Status == corev1.ConditionUnknown {
			t.Errorf("node version %s: KubeletUnhealthy Unknown (%s: %s)", n.ResourceVersion, got.Reason, got.Message)
		}
	}

	log, err := os.ReadFile(state + ".log")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "overlap") {
		t.Errorf("a run of the health checker started while another ran: %q", log)
	}
	if !strings.Contains(string(log), "end --component=kubelet --enable-repair=true --cooldown-time=1m --loopback-time=0 --health-check-timeout=10s\n") {
		t.Errorf("the stub's runs %q do not show the file's arguments", log)
	}
}

// TestNPDTemporaryRuleEvents runs an NPD config with a temporary rule and
// enable_message_change_based_condition_update on a real API server: the
// temporary rule's failures become Warning Events on the Node, and a flood
// of them is paced (agent.ReasonBurst reach the API); the permanent rule's
// changes are told with NPD's reasons (the rule's going True, the
// condition's default going back), and its message change while its
// condition stays True by NPD's Event.
func TestNPDTemporaryRuleEvents(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	writeExec(t, filepath.Join(dir, "conntrack.sh"), fmt.Sprintf("echo run >> %s\necho 'conntrack table full'\nexit 1\n", runs))
	state := filepath.Join(dir, "state")
	writeExec(t, filepath.Join(dir, "check.sh"), fmt.Sprintf("read code msg < %s\necho \"$msg\"\nexit \"$code\"\n", state))
	writeFile(t, state, "0 fine\n")
	npd := fmt.Sprintf(`{
  "plugin": "custom",
  "pluginConfig": {"invoke_interval": "200ms", "timeout": "30s", "enable_message_change_based_condition_update": true},
  "source": "network-custom-plugin-monitor",
  "conditions": [{"type": "NPDCheck", "reason": "CheckIsFine", "message": "all good"}],
  "rules": [
    {"type": "temporary", "reason": "ConntrackFull", "path": %q},
    {"type": "permanent", "condition": "NPDCheck", "reason": "CheckFailed", "path": %q}
  ]
}`, filepath.Join(dir, "conntrack.sh"), filepath.Join(dir, "check.sh"))
	npdPath := filepath.Join(dir, "npd.json")
	writeFile(t, npdPath, npd)
	specs := checkSpecs(t, "checks:\n  npdConfigs: ["+npdPath+"]\n")

	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "npd-events"
	cp.CreateNode(t, node, nil)
	startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: specs})

	e := waitEvent(t, c, node, "ConntrackFull", time.Minute, "conntrack table full")
	if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Node" || string(e.InvolvedObject.UID) != node {
		t.Errorf("got event %s on %s %s (uid %s), want a Warning on Node %s with uid %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.InvolvedObject.UID, node, node)
	}
	// The flood goes on: at least 25 failing runs in all.
	err := testcp.Poll(context.Background(), time.Minute, 100*time.Millisecond, func() (bool, error) {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run") >= 25, nil
	})
	if err != nil {
		t.Fatalf("the temporary rule did not run 25 times: %v", err)
	}
	// The recorder writes what it was given in the background, and
	// retries a write that failed 10s later at most: wait for the burst
	// to be recorded, however slowly (on a loaded machine a probe run
	// that ends after its timeout hands its events to the next one), then
	// for anything more.
	recorded := func() int32 {
		var n int32
		for _, e := range nodeEvents(t, c, node, "ConntrackFull") {
			n += e.Count
		}
		return n
	}
	_ = testcp.Poll(context.Background(), 90*time.Second, 100*time.Millisecond, func() (bool, error) {
		return recorded() >= agent.ReasonBurst, nil
	})
	time.Sleep(2 * time.Second)
	if recorded := recorded(); recorded != agent.ReasonBurst {
		t.Errorf("25 or more failing runs recorded %d ConntrackFull events, want %d", recorded, agent.ReasonBurst)
	}

	// The permanent rule: a problem, then a new message while it stays.
	writeFile(t, state, "1 first message\n")
	waitNode(t, c, node, time.Minute, "NPDCheck True", func(n *corev1.Node) bool {
		c := condition(n, "NPDCheck")
		return c != nil && c.Status == corev1.ConditionTrue
	})
	// NPD's reasons: the rule's going True, the condition's default one
	// going back.
	waitEvent(t, c, node, "CheckFailed", time.Minute, "NPDCheck is now True (CheckFailed): first message")
	writeFile(t, state, "1 second message\n")
	waitEvent(t, c, node, "CheckFailed", time.Minute, `Node condition NPDCheck is now: True, reason: CheckFailed, message: "second message"`)
	writeFile(t, state, "0 fine again\n")
	waitEvent(t, c, node, "CheckIsFine", time.Minute, "NPDCheck is now False (CheckIsFine)")
	for _, e := range nodeEvents(t, c, node, agent.ReasonConditionChanged) {
		if strings.Contains(e.Message, "NPDCheck is now True") || strings.Contains(e.Message, "NPDCheck is now False (CheckIsFine)") {
			t.Errorf("a ConditionChanged Event for an NPD file's condition: %q, want NPD's reason", e.Message)
		}
	}
}

// stalledProbe never finishes a run before its context ends: an
// events-only probe whose first result does not come.
type stalledProbe struct{}

func (stalledProbe) Name() string { return "stalled-events" }
func (stalledProbe) Probe(ctx context.Context) probes.Result {
	<-ctx.Done()
	return probes.Result{Status: probes.StatusUnknown, Reason: "Canceled", Message: "canceled"}
}

// TestNPDTemporaryOnlyFilesOnTheNode runs NPD's iptables-mode-monitor.json
// and network-problem-monitor.json, files of temporary rules only,
// unchanged (iptables-mode-monitor runs once a day) on a real API server.
// Their plugins are stubs at the paths the files give,
// ./config/plugin/<name>, which NPD and selftaint resolve against the
// working directory (checks.npdPluginRoot moves only absolute paths), so
// the test runs from a directory holding them. Each file is one
// events-only probe: every failing run is a Warning Event on the Node
// with the rule's reason and the plugin's message, a passing one none,
// and no condition is ever written for them, nor does initialization wait
// for an events-only probe (one here never reports at all).
func TestNPDTemporaryOnlyFilesOnTheNode(t *testing.T) {
	root := t.TempDir()
	writeExec(t, filepath.Join(root, "config/plugin/iptables_mode.sh"), "echo 'iptables-legacy rules found beside iptables-nft'\nexit 1\n")
	writeExec(t, filepath.Join(root, "config/plugin/network_problem.sh"), "echo 'conntrack table has room'\nexit 0\n")
	writeExec(t, filepath.Join(root, "config/plugin/dns_problem.sh"), "echo 'cannot resolve kubernetes.default'\nexit 1\n")
	specs := temporaryOnlySpecs(t, "iptables-mode-monitor.json", "network-problem-monitor.json")
	if e := specs[0].Entry; e.Interval != 24*time.Hour {
		t.Errorf("iptables-mode-monitor.json's probe runs every %v, want the file's 86400s", e.Interval)
	}
	t.Chdir(root) // so not parallel: the working directory is the process's

	cp := shared.Get(t)
	c := cp.Client()
	const node = "npd-temporary"
	cp.CreateNode(t, node, func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{initTaint} })
	w := startWatch(t, c, node, getNode(t, c, node).ResourceVersion)
	own := newSwitchProbe(probes.StatusOK)
	specs = append(specs,
		agent.ProbeSpec{Entry: probes.Entry{Probe: stalledProbe{}, Interval: 2 * time.Hour, Timeout: time.Hour}},
		agent.ProbeSpec{Entry: probes.Entry{Probe: own, Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond}, Condition: cond},
	)
	a, _ := startAgent(t, agent.Options{
		NodeName: node, Client: c.CoreV1(), Probes: specs, Rules: rules,
		Init: &agent.InitOptions{Condition: initCond, Taint: initTaint, Required: []corev1.NodeConditionType{cond}},
	})

	for _, want := range []struct{ reason, msg string }{
		{"IPTablesVersionsMismatch", "iptables-legacy rules found beside iptables-nft"},
		{"DNSUnreachable", "cannot resolve kubernetes.default"},
	} {
		e := waitEvent(t, c, node, want.reason, 20*time.Second, want.msg)
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != node || e.Source.Component != "selftaint" {
			t.Errorf("%s: got a %s event on %s %s from %q, want a Warning on Node %s from selftaint", want.reason, e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Source.Component, node)
		}
	}
	n := waitNode(t, c, node, 10*time.Second, "initialized, the stalled events-only probe not waited for", func(n *corev1.Node) bool {
		ic := condition(n, initCond)
		return !hasTaint(n, initTaint) && ic != nil && ic.Status == corev1.ConditionFalse
	})
	if evs := nodeEvents(t, c, node, "ConntrackFull"); len(evs) != 0 {
		t.Errorf("a passing temporary rule recorded %d ConntrackFull events, want none", len(evs))
	}
	for _, st := range a.ProbeStats() {
		if strings.HasPrefix(st.Name, "custom-npd:") && (st.Runs == 0 || st.LastStatus != probes.StatusOK) {
			t.Errorf("probe %s: %d runs, last %s; want runs, OK (events only)", st.Name, st.Runs, st.LastStatus)
		}
	}

	// Our own condition goes on as before; on no version of the Node is
	// there a condition but the agent's own two.
	own.set(probes.StatusProblem)
	waitNode(t, c, node, 10*time.Second, "the agent's own condition True", conditionIs(corev1.ConditionTrue))
	onlyConditions(t, append(w.seen(), n), cond, initCond)
}

// temporaryOnlySpecs builds the probe specs of the shipped NPD files of
// temporary rules only named, in order, and checks that each is one
// events-only spec named after its file.
func temporaryOnlySpecs(t *testing.T, files ...string) []agent.ProbeSpec {
	t.Helper()
	var paths, want []string
	for _, f := range files {
		path, err := filepath.Abs(filepath.Join("../probes/custom/testdata/npd", f))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
		want = append(want, "custom-npd:"+strings.TrimSuffix(f, ".json"))
	}
	specs := checkSpecs(t, "checks:\n  npdConfigs: ["+strings.Join(paths, ", ")+"]\n")
	var got []string
	for _, s := range specs {
		if !s.EventsOnly() {
			t.Errorf("spec of %s feeds condition %q, want events only", s.Entry.Probe.Name(), s.Condition)
		}
		got = append(got, s.Entry.Probe.Name())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got probes %v, want %v", got, want)
	}
	return specs
}

// onlyConditions checks that every version of the Node has no condition
// but those allowed.
func onlyConditions(t *testing.T, versions []*corev1.Node, allowed ...corev1.NodeConditionType) {
	t.Helper()
	for _, n := range versions {
		for _, got := range n.Status.Conditions {
			if !slices.Contains(allowed, got.Type) {
				t.Errorf("node version %s: condition %s (%s: %s), want only %v", n.ResourceVersion, got.Type, got.Reason, got.Message, allowed)
			}
		}
	}
}

// TestNPDMessageUpdatesOnTheNode runs, on a real API server, an NPD
// config with enable_message_change_based_condition_update beside a custom
// check, both failing all along with a message that changes. The NPD
// condition's new message reaches the Node at once, as NPD writes it; the
// custom check's waits: no write for it before the heartbeat (an hour
// here), and it rides the next write there is. The plugins' timeouts are
// generous: a bash script that overran its timeout on a loaded machine
// would turn its condition Unknown, and the test would fail for load alone.
func TestNPDMessageUpdatesOnTheNode(t *testing.T) {
	dir := t.TempDir()
	script := func(name string) (path string, set func(code int, msg string)) {
		state := filepath.Join(dir, name+".state")
		path = filepath.Join(dir, name+".sh")
		writeExec(t, path, fmt.Sprintf("read code msg < %s\necho \"$msg\"\nexit \"$code\"\n", state))
		return path, func(code int, msg string) { writeFile(t, state, fmt.Sprintf("%d %s\n", code, msg)) }
	}
	npdPlugin, setNPD := script("npd")
	ownPlugin, setOwn := script("own")
	setNPD(1, "first npd message")
	setOwn(1, "first own message")
	npdPath := filepath.Join(dir, "npd.json")
	writeFile(t, npdPath, fmt.Sprintf(`{
  "plugin": "custom",
  "pluginConfig": {"invoke_interval": "500ms", "timeout": "30s", "enable_message_change_based_condition_update": true},
  "source": "message-monitor",
  "conditions": [{"type": "NPDMessages", "reason": "NPDIsFine", "message": "all good"}],
  "rules": [{"type": "permanent", "condition": "NPDMessages", "reason": "NPDBroken", "path": %q}]
}`, npdPlugin))
	specs := checkSpecs(t, fmt.Sprintf("checks:\n  custom:\n  - {name: own, condition: OwnMessages, reason: OwnBroken, path: %s, interval: 2s, timeout: 1900ms}\n  npdConfigs: [%s]\n", ownPlugin, npdPath))
	updates := map[corev1.NodeConditionType]bool{}
	for _, s := range specs {
		updates[s.Condition] = s.MessageUpdates
	}
	if want := map[corev1.NodeConditionType]bool{"NPDMessages": true, "OwnMessages": false}; fmt.Sprint(updates) != fmt.Sprint(want) {
		t.Fatalf("got message updates %v, want %v", updates, want)
	}

	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "npd-messages"
	cp.CreateNode(t, node, nil)
	a, _ := startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: specs, HeartbeatPeriod: time.Hour})
	message := func(n *corev1.Node, t corev1.NodeConditionType) string {
		if c := condition(n, t); c != nil && c.Status == corev1.ConditionTrue {
			return c.Message
		}
		return ""
	}
	waitNode(t, c, node, time.Minute, "both conditions True with their first messages", func(n *corev1.Node) bool {
		return message(n, "NPDMessages") == "first npd message" && message(n, "OwnMessages") == "first own message"
	})

	// The custom check's new message: no write before the heartbeat. The
	// agent counts a write once the API server has answered it, so the
	// watch above can see the last write before the counter does: start
	// counting once the counter has settled.
	writes := settledStats(t, a).ConditionWrites
	runs := func() uint64 {
		for _, s := range a.ProbeStats() {
			if s.Name == "custom-OwnMessages" {
				return s.Runs
			}
		}
		return 0
	}
	before := runs()
	setOwn(1, "second own message")
	// Three runs of the check, however long a loaded machine takes.
	for deadline := time.Now().Add(time.Minute); runs()-before < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the custom check ran %d times in a minute, want 3", runs()-before)
		}
	}
	if got, want := message(getNode(t, c, node), "OwnMessages"), "first own message"; got != want {
		t.Errorf("without message updates, %d runs after the message changed: got %q on the Node, want %q until the heartbeat", runs()-before, got, want)
	}
	if got := a.Stats().ConditionWrites; got != writes || runs()-before < 3 {
		t.Errorf("without message updates: %d condition writes in %d runs after the message changed, want none in 3 or more", got-writes, runs()-before)
	}

	// The NPD condition's new message: written at once, the other's
	// riding along.
	start := time.Now()
	setNPD(1, "second npd message")
	// At once means before the heartbeat (an hour): a loaded machine may
	// take seconds.
	n := waitNode(t, c, node, 30*time.Second, "NPDMessages' second message", func(n *corev1.Node) bool {
		return message(n, "NPDMessages") == "second npd message"
	})
	t.Logf("the NPD condition's new message reached the Node %v after the plugin's output changed", time.Since(start))
	if got, want := message(n, "OwnMessages"), "second own message"; got != want {
		t.Errorf("the custom check's message with the next write: got %q, want %q", got, want)
	}
	if got := condition(n, "NPDMessages"); got.Reason != "NPDBroken" {
		t.Errorf("NPDMessages reason %s, want NPDBroken still", got.Reason)
	}
}
