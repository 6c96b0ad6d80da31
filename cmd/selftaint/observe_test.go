package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent/testkit"
)

// Stamped into the binary TestAgentMetricsThroughAFaultCycle builds.
const (
	stampVersion  = "v9.9.9-metrics-test"
	stampRevision = "0123456789abcdef0123456789abcdef01234567"
)

// buildStamped builds cmd/selftaint with the version and revision stamped
// by -ldflags -X, as the Makefile and Dockerfile do, and returns its path.
func buildStamped(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "selftaint")
	cmd := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X main.version="+stampVersion+" -X main.revision="+stampRevision, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// scrape fetches url and parses it with Prometheus' own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scraping %s: %s %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// sample finds the series of family name whose labels include want; nil
// when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			if have[k] != v {
				ok = false
				break
			}
		}
		if ok {
			return m
		}
	}
	return nil
}

// val is a counter's, gauge's or untyped sample's value; -1 when missing.
func val(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m := sample(fams, name, labels)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return -1
}

// TestAgentMetricsThroughAFaultCycle builds the real binary with a stamped
// version, runs it as the agent on a real control plane against a fixture
// host whose memory is low (the memory probe really goes bad, damped by
// 1 s), drives a fault on the PID condition through its whole life (inject,
// taint, expiry, taint gone), then scrapes /metrics and checks the values:
// conditions, taints, one taint change each way, the detect-to-taint
// histogram for both the probe and the fault, faults applied, API requests
// by verb and resource, conflicts, build info, runtime collectors, and the
// structured log lines of each taint decision.
func TestAgentMetricsThroughAFaultCycle(t *testing.T) {
	t.Parallel()
	bin := buildStamped(t)
	if out, err := exec.Command(bin, "version").Output(); err != nil || !strings.Contains(string(out), "selftaint "+stampVersion+" (revision "+stampRevision+", "+runtime.Version()+")") {
		t.Errorf("selftaint version = %q, %v; want the stamped version and revision", out, err)
	}

	cp := shared.Get(t)
	c := cp.Client()
	kc := "--kubeconfig=" + cp.KubeconfigPath
	const node = "observed"
	cp.CreateNode(t, node, nil)
	cfg := writeFile(t, noNVML+"probes:\n  disk: {enabled: false}\n  network: {enabled: false}\n"+
		"  pid: {interval: 1s, timeout: 500ms, for: 30s, clearAfter: 30s}\n"+
		"  memory: {interval: 1s, timeout: 500ms, for: 1s, clearAfter: 1h}\n")

	var stderr testkit.LogBuffer
	cmd := exec.Command(bin, "agent", "--node-name="+node, kc, "--host-root=testdata/lowmem", "--config="+cfg,
		"--metrics-address=127.0.0.1:0")
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("agent exited with %v", err)
		}
		if t.Failed() {
			t.Logf("agent stderr:\n%s", lastBytes(stderr.String(), 16<<10))
		}
	}()
	addrRE := regexp.MustCompile(`msg="serving metrics and health" address=(\S+)`)
	var base string
	for deadline := time.Now().Add(20 * time.Second); base == ""; time.Sleep(20 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(stderr.String()); m != nil {
			base = "http://" + m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the agent did not say where it serves metrics:\n%s", stderr.String())
		}
	}

	const pidKey, memKey = "selftaint.io/pid-pressure", "selftaint.io/memory-pressure"
	pollNode(t, c, node, 30*time.Second, "pid False and the memory taint", func(n *corev1.Node) bool {
		return conditionStatus(n, "SelftaintPIDPressure") == corev1.ConditionFalse &&
			hasTaintKey(n, memKey, corev1.TaintEffectNoSchedule)
	})
	if code, out, errs := runCLI(t, "fault", "inject", node, "--condition=pid", "--for=4s", "--message=metrics drill", kc, "--config="+cfg); code != 0 {
		t.Fatalf("inject: exit %d: %s %s", code, out, errs)
	}
	pollNode(t, c, node, 10*time.Second, "the fault's taint", func(n *corev1.Node) bool {
		return hasTaintKey(n, pidKey, corev1.TaintEffectNoSchedule)
	})
	pollNode(t, c, node, 20*time.Second, "the fault expired and its taint gone", func(n *corev1.Node) bool {
		_, faulted := n.Annotations["fault.selftaint.io/pid"]
		return !faulted && !hasTaintKey(n, pidKey, corev1.TaintEffectNoSchedule) && conditionStatus(n, "SelftaintPIDPressure") == corev1.ConditionFalse
	})

	// Events are sent asynchronously, and the gauges are set once the sync
	// that wrote the Node we saw returns (after its last write): scrape
	// until an Event has been created and that sync has been recorded.
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		fams = scrape(t, base+"/metrics")
		// The taint gauge follows the sync that removed the taint, which
		// may come after the one that wrote the condition: wait for both.
		settled := val(fams, "selftaint_api_requests_total", map[string]string{"verb": "create", "resource": "events", "code": "201"}) >= 1 &&
			val(fams, "selftaint_condition", map[string]string{"condition": "SelftaintPIDPressure", "status": "False"}) == 1 &&
			sample(fams, "selftaint_taint", map[string]string{"key": "selftaint.io/pid-pressure"}) == nil
		if settled || time.Now().After(deadline) {
			break
		}
	}
	type L = map[string]string
	checks := []struct {
		name    string
		labels  L
		want    float64
		atLeast bool
	}{
		{"selftaint_build_info", L{"version": stampVersion, "revision": stampRevision, "goversion": runtime.Version()}, 1, false},
		{"selftaint_ready", nil, 1, false},
		{"selftaint_condition", L{"condition": "SelftaintPIDPressure", "status": "False"}, 1, false},
		{"selftaint_condition", L{"condition": "SelftaintPIDPressure", "status": "True"}, 0, false},
		{"selftaint_condition", L{"condition": "SelftaintPIDPressure", "status": "Unknown"}, 0, false},
		{"selftaint_condition", L{"condition": "SelftaintMemoryPressure", "status": "True"}, 1, false},
		{"selftaint_condition", L{"condition": "SelftaintMemoryPressure", "status": "False"}, 0, false},
		{"selftaint_taint", L{"key": memKey, "effect": "NoSchedule"}, 1, false},
		{"selftaint_taint_changes_total", L{"key": pidKey, "effect": "NoSchedule", "direction": "added"}, 1, false},
		{"selftaint_taint_changes_total", L{"key": pidKey, "effect": "NoSchedule", "direction": "removed"}, 1, false},
		{"selftaint_taint_changes_total", L{"key": memKey, "effect": "NoSchedule", "direction": "added"}, 1, false},
		{"selftaint_taint_changes_total", L{"key": memKey, "effect": "NoSchedule", "direction": "removed"}, 0, false},
		{"selftaint_faults_applied_total", nil, 1, false},
		{"selftaint_faults_rejected_total", nil, 0, false},
		{"selftaint_api_conflicts_total", nil, 0, true},
		{"selftaint_probe_runs_total", L{"probe": "pid"}, 3, true},
		{"selftaint_probe_errors_total", L{"probe": "pid", "kind": "timeout"}, 0, false},
		{"selftaint_probe_errors_total", L{"probe": "memory", "kind": "read_error"}, 0, false},
		{"selftaint_api_requests_total", L{"verb": "list", "resource": "nodes", "subresource": "", "code": "200"}, 1, true},
		{"selftaint_api_requests_total", L{"verb": "watch", "resource": "nodes", "subresource": "", "code": "200"}, 1, true},
		{"selftaint_api_requests_total", L{"verb": "apply", "resource": "nodes", "subresource": "status", "code": "200"}, 3, true},
		// Taints: memory added, pid added, pid removed; and the expired
		// fault's annotation removed.
		{"selftaint_api_requests_total", L{"verb": "patch", "resource": "nodes", "subresource": "", "code": "200"}, 4, true},
		{"selftaint_api_requests_total", L{"verb": "create", "resource": "events", "subresource": "", "code": "201"}, 1, true},
		{"go_goroutines", nil, 1, true},
		{"process_resident_memory_bytes", nil, 1, true},
	}
	for _, ck := range checks {
		got := val(fams, ck.name, ck.labels)
		if got == -1 || (!ck.atLeast && got != ck.want) || (ck.atLeast && got < ck.want) {
			op := "="
			if ck.atLeast {
				op = ">="
			}
			t.Errorf("%s%v = %v, want %s %v", ck.name, ck.labels, got, op, ck.want)
		}
	}
	if m := sample(fams, "selftaint_taint", L{"key": pidKey}); m != nil {
		t.Errorf("selftaint_taint for %s after the fault expired: %v", pidKey, m)
	}
	if m := sample(fams, "selftaint_api_request_duration_seconds", L{"verb": "patch", "resource": "nodes"}); m == nil || m.GetHistogram().GetSampleCount() < 4 {
		t.Errorf("API latency histogram for patch nodes = %v, want at least 4 samples", m)
	}
	// The probe's detect-to-taint time runs from its first Problem result,
	// before the 1 s of damping; the fault's from the sync that applied it.
	for _, tt := range []struct {
		source   string
		min, max float64
	}{{"probe", 1, 30}, {"fault", 0, 5}} {
		m := sample(fams, "selftaint_detect_to_taint_seconds", L{"source": tt.source})
		if m == nil {
			t.Errorf("no selftaint_detect_to_taint_seconds{source=%q}", tt.source)
			continue
		}
		h := m.GetHistogram()
		if h.GetSampleCount() != 1 || h.GetSampleSum() < tt.min || h.GetSampleSum() > tt.max {
			t.Errorf("selftaint_detect_to_taint_seconds{source=%q}: count %d sum %v, want 1 sample in [%v, %v]",
				tt.source, h.GetSampleCount(), h.GetSampleSum(), tt.min, tt.max)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, err := http.Get(base + path); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %v, %v; want 200", path, resp, err)
		} else {
			resp.Body.Close()
		}
	}

	// One structured line per taint decision, naming the rule and the
	// condition behind it.
	logs := stderr.String()
	for _, want := range []string{
		fmt.Sprintf(`msg="taint added" node=%s taint=%s:NoSchedule key=%s effect=NoSchedule rule="SelftaintPIDPressure=True" condition=SelftaintPIDPressure status=True reason=InjectedFault`, node, pidKey, pidKey),
		fmt.Sprintf(`msg="taint removed" node=%s taint=%s:NoSchedule key=%s effect=NoSchedule rule="SelftaintPIDPressure=True" condition=SelftaintPIDPressure status=False`, node, pidKey, pidKey),
		fmt.Sprintf(`msg="taint added" node=%s taint=%s:NoSchedule key=%s effect=NoSchedule rule="SelftaintMemoryPressure=True" condition=SelftaintMemoryPressure status=True`, node, memKey, memKey),
	} {
		if n := strings.Count(logs, want); n != 1 {
			t.Errorf("%d log lines with %q, want exactly 1", n, want)
		}
	}
	if strings.Contains(logs, "level=ERROR") {
		t.Errorf("agent logged errors")
	}
}
