package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/selftaint/selftaint/agent/metrics"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

const monitoringDir = "monitoring"

// metricsPort is the agent's default --metrics-address port
// (cmd/selftaint's defaultMetricsAddress; TestDefaultMetricsAddress there
// pins it to this number).
const metricsPort = 9746

// readYAMLMap decodes a YAML file into generic maps.
func readYAMLMap(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestPrometheusRuleMatchesRulesFile checks the PrometheusRule carries
// exactly the groups of the plain rules file promtool tests.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	rules := readYAMLMap(t, filepath.Join(monitoringDir, "rules.yaml"))
	pr := readYAMLMap(t, filepath.Join(monitoringDir, "prometheusrule.yaml"))
	if pr["kind"] != "PrometheusRule" || pr["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Errorf("prometheusrule.yaml is %v %v, want monitoring.coreos.com/v1 PrometheusRule", pr["apiVersion"], pr["kind"])
	}
	spec, _ := pr["spec"].(map[string]any)
	if spec == nil || rules["groups"] == nil || !reflect.DeepEqual(spec["groups"], rules["groups"]) {
		t.Errorf("prometheusrule.yaml spec.groups differs from rules.yaml groups:\n got %v\nwant %v", spec["groups"], rules["groups"])
	}
}

// TestMonitoringKustomization checks deploy/monitoring is its own
// kustomization listing the operator objects (not the plain rules files)
// and that deploy/'s kustomization does not pull it in.
func TestMonitoringKustomization(t *testing.T) {
	k := readYAMLMap(t, filepath.Join(monitoringDir, "kustomization.yaml"))
	if got, want := fmt.Sprint(k["resources"]), "[podmonitor.yaml coordinator-podmonitor.yaml prometheusrule.yaml]"; got != want {
		t.Errorf("monitoring resources %s, want %s", got, want)
	}
	top := readYAMLMap(t, "kustomization.yaml")
	for _, r := range top["resources"].([]any) {
		if strings.Contains(fmt.Sprint(r), "monitoring") {
			t.Errorf("deploy/kustomization.yaml includes %v; monitoring needs the operator's CRDs and must stay optional", r)
		}
	}
	pm := readYAMLMap(t, filepath.Join(monitoringDir, "podmonitor.yaml"))
	eps := pm["spec"].(map[string]any)["podMetricsEndpoints"].([]any)
	if port := eps[0].(map[string]any)["port"]; port != "metrics" {
		t.Errorf("PodMonitor scrapes port %v, want the DaemonSet's named port metrics", port)
	}
}

// TestCoordinatorPodMonitor checks the coordinator's PodMonitor selects
// exactly the coordinator Deployment's pods, scrapes the container port it
// names, and sets the job the fleet alerts match.
func TestCoordinatorPodMonitor(t *testing.T) {
	type relabeling struct {
		TargetLabel string `json:"targetLabel"`
		Replacement string `json:"replacement"`
	}
	var pm struct {
		Kind string `json:"kind"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			PodMetricsEndpoints []struct {
				Port        string       `json:"port"`
				Relabelings []relabeling `json:"relabelings"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(monitoringDir, "coordinator-podmonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &pm); err != nil {
		t.Fatal(err)
	}
	d := find[*appsv1.Deployment](t, readManifests(t, "."), coordinatorSA)
	if pm.Kind != "PodMonitor" || !reflect.DeepEqual(pm.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) ||
		!reflect.DeepEqual(pm.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("%s selecting %v, want a PodMonitor selecting the coordinator's pods %v", pm.Kind, pm.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	if got := pm.Spec.NamespaceSelector.MatchNames; len(got) != 1 || got[0] != d.Namespace {
		t.Errorf("PodMonitor looks in namespaces %v, want [%s]", got, d.Namespace)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("%d endpoints, want 1", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	ports := d.Spec.Template.Spec.Containers[0].Ports
	if !slices.ContainsFunc(ports, func(p corev1.ContainerPort) bool { return p.Name == ep.Port }) {
		t.Errorf("PodMonitor scrapes port %q, the coordinator's container names %+v", ep.Port, ports)
	}
	if !slices.Contains(ep.Relabelings, relabeling{TargetLabel: "job", Replacement: "selftaint-coordinator"}) {
		t.Errorf("relabelings %+v set no job=\"selftaint-coordinator\" (the fleet alerts match it)", ep.Relabelings)
	}
}

// requirePromtool returns promtool's path; without it the test fails under
// CI=true and is skipped otherwise.
func requirePromtool(t *testing.T) string {
	t.Helper()
	return testcp.RequireBinary(t, "promtool", os.Getenv("PROMTOOL"), "install it with `make tools` (apt-get install prometheus) or point $PROMTOOL at it")
}

func runPromtool(t *testing.T, promtool, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRulesWithPromtool checks the rules with the real promtool, runs their
// unit tests, and checks those give every alert a firing and a non-firing
// case.
func TestRulesWithPromtool(t *testing.T) {
	t.Parallel() // promtool's seconds beside the control planes' waits
	promtool := requirePromtool(t)
	runPromtool(t, promtool, monitoringDir, "check", "rules", "rules.yaml")
	out := runPromtool(t, promtool, monitoringDir, "test", "rules", "rules_test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules did not report SUCCESS:\n%s", out)
	}

	type ruleTests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	b, err := os.ReadFile(filepath.Join(monitoringDir, "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rt ruleTests
	if err := yaml.Unmarshal(b, &rt); err != nil {
		t.Fatal(err)
	}
	firing, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, alert := range alertNames(t) {
		if !firing[alert] || !silent[alert] {
			t.Errorf("alert %s: firing case %v, non-firing case %v; want both in rules_test.yaml", alert, firing[alert], silent[alert])
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

func alertNames(t *testing.T) []string {
	var names []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no alerts in rules.yaml")
	}
	return names
}

// dashboardExprs returns the PromQL of every target and template query.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		// Panels are a collapsed row's.
		Panels []panel `json:"panels"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json is not valid JSON: %v", err)
	}
	var exprs []string
	var panels []panel
	for _, p := range d.Panels {
		panels = append(append(panels, p), p.Panels...)
	}
	for _, p := range panels {
		if p.Type == "row" {
			if len(p.Targets) > 0 {
				t.Errorf("row %q has queries", p.Title)
			}
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			exprs = append(exprs, v.Definition)
		}
	}
	return exprs
}

// exportedNames runs every method of the agent's and the coordinator's
// metrics once and returns the names their registries then expose, with
// the _bucket, _sum and _count series of histograms and summaries.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	names := gatheredNames(t, agentRegistry(t))
	for n := range gatheredNames(t, coordinatorRegistry(t)) {
		names[n] = true
	}
	return names
}

// agentRegistry is the agent's registry after every method of its metrics
// ran once.
func agentRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.BuildInfo{Version: "v", Revision: "r", GoVersion: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterReady(reg, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	id := taints.TaintID{Key: "k", Effect: corev1.TaintEffectNoSchedule}
	m.ProbeRan("p", time.Millisecond, probes.FailureTimeout)
	m.SetConditions(map[corev1.NodeConditionType]corev1.ConditionStatus{"C": corev1.ConditionTrue})
	m.SetTaints([]taints.TaintID{id})
	m.TaintChanged(id, true)
	m.DetectedToTainted("probe", time.Second)
	m.FaultApplied()
	m.FaultRejected()
	m.SetAdvertised(map[corev1.ResourceName]int64{"example.com/fpga": 1})
	m.SetFlapping(map[corev1.NodeConditionType]bool{"C": true})
	m.SetNoExecute(map[corev1.NodeConditionType]bool{"C": false})
	m.NoExecuteSuspended("C", taints.ReasonNoExecuteWaiting)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusConflict) }))
	defer srv.Close()
	resp, err := (&http.Client{Transport: m.WrapTransport(http.DefaultTransport)}).Get(srv.URL + "/api/v1/nodes/n")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return reg
}

// coordinatorRegistry is the coordinator's registry after every method of
// its metrics ran once.
func coordinatorRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewCoordinator(reg, metrics.BuildInfo{Version: "v", Revision: "r", GoVersion: "go"})
	if err != nil {
		t.Fatal(err)
	}
	m.SetLeader(true)
	m.Decided(fleet.Decision{
		NoExecuteDecision: fleet.NoExecuteDecision{Budget: 1, Held: 1, Waiting: []string{"n2"}},
		Guard:             fleet.GuardState{Conditions: map[corev1.NodeConditionType]map[string]fleet.Scope{"C": {fleet.FleetScope: {Tripped: true}}}},
	}, time.Millisecond)
	m.GrantStarted("z")
	m.GrantReleased(fleet.ReleaseNoLongerAsks)
	m.MaintenanceState(1, 1, 1, 1)
	m.Evicted(metrics.EvictionEvicted, 1)
	m.DrainFinished(fleet.ReasonDrained, time.Minute)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusConflict) }))
	defer srv.Close()
	resp, err := (&http.Client{Transport: m.WrapTransport(http.DefaultTransport)}).Get(srv.URL + "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return reg
}

// gatheredNames is the metric names reg exposes, with the _bucket, _sum
// and _count series of histograms and summaries.
func gatheredNames(t *testing.T, reg prometheus.Gatherer) map[string]bool {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[f.GetName()+"_bucket"], names[f.GetName()+"_sum"], names[f.GetName()+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[f.GetName()+"_sum"], names[f.GetName()+"_count"] = true, true
		}
	}
	return names
}

// metricRef finds metric names in PromQL: selftaint's, the Go runtime's and
// the process collector's. `up` is Prometheus' own and always exists.
var metricRef = regexp.MustCompile(`\b(?:selftaint|go|process)_[a-zA-Z0-9_]+`)

// TestDashboardAndRulesUseExportedMetrics checks every metric name the
// alerts and the dashboard query is one the agent or the coordinator
// registers, and (with promtool) that the dashboard's PromQL parses.
func TestDashboardAndRulesUseExportedMetrics(t *testing.T) {
	names := exportedNames(t)
	for _, want := range []string{
		"selftaint_build_info", "selftaint_condition", "selftaint_taint", "go_goroutines", "process_resident_memory_bytes",
		"selftaint_condition_flapping", "selftaint_noexecute_allowed", "selftaint_noexecute_suspended_total",
		"selftaint_coordinator_leader", "selftaint_noexecute_budget", "selftaint_disruption_guard_tripped",
		"selftaint_coordinator_decision_duration_seconds_bucket",
		"selftaint_maintenance_nodes", "selftaint_maintenance_evictions_total", "selftaint_maintenance_drain_duration_seconds_bucket",
	} {
		if !names[want] {
			t.Fatalf("the registry lacks %s; exportedNames is broken", want)
		}
	}
	exprs := map[string][]string{"dashboard.json": dashboardExprs(t)}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			exprs["rules.yaml"] = append(exprs["rules.yaml"], r.Expr)
		}
	}
	for file, list := range exprs {
		used := 0
		for _, e := range list {
			for _, ref := range metricRef.FindAllString(e, -1) {
				used++
				if !names[ref] {
					t.Errorf("%s queries %s, which neither the agent nor the coordinator exports (in %q)", file, ref, e)
				}
			}
		}
		if used == 0 {
			t.Errorf("%s queries no metric at all", file)
		}
	}

	// promtool parses the dashboard's queries as recording rules, with
	// Grafana's variables filled in.
	promtool := requirePromtool(t)
	fill := strings.NewReplacer("$__rate_interval", "5m", "$node", ".*")
	type rec struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var recs []rec
	for i, e := range exprs["dashboard.json"] {
		if strings.HasPrefix(e, "label_values(") {
			continue // a Grafana function, not PromQL
		}
		recs = append(recs, rec{Record: fmt.Sprintf("dashboard:query%d", i), Expr: fill.Replace(e)})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-rules.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, promtool, dir, "check", "rules", "dashboard-rules.yaml")
}

// TestDaemonSetHealthProbes checks the agent's container serves metrics on
// a named port and the kubelet probes /healthz and /readyz there.
func TestDaemonSetHealthProbes(t *testing.T) {
	ds := find[*appsv1.DaemonSet](t, readManifests(t, "."), "selftaint")
	c := ds.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })
	if i < 0 || c.Ports[i].ContainerPort != metricsPort || c.Ports[i].Protocol != corev1.ProtocolTCP {
		t.Fatalf("ports %+v, want metrics %d/TCP", c.Ports, metricsPort)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--metrics-address") {
			t.Errorf("args set %s; the port is pinned to the default :%d here", a, metricsPort)
		}
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe %+v, want an httpGet", p.what, p.probe)
			continue
		}
		if g := p.probe.HTTPGet; g.Path != p.path || g.Port != intstr.FromString("metrics") {
			t.Errorf("%s probe gets %s on %v, want %s on port metrics", p.what, g.Path, g.Port.String(), p.path)
		}
	}
}

// leaderGauge finds the coordinator's gauges of the fleet's state: every
// replica exports them, only the leader's are current.
var leaderGauge = regexp.MustCompile(`\bselftaint_(?:noexecute_(?:budget|held|waiting)|disruption_guard_tripped|maintenance_nodes)\b`)

// TestFleetStateReadFromTheLeader checks every alert and dashboard query
// that reads the coordinator's view of the fleet keeps only the leader's
// series (a standby's are zero or, after it led, stale).
func TestFleetStateReadFromTheLeader(t *testing.T) {
	exprs := dashboardExprs(t)
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	used := 0
	for _, e := range exprs {
		if leaderGauge.MatchString(e) {
			used++
			if !strings.Contains(e, "selftaint_coordinator_leader == 1") {
				t.Errorf("%q reads the fleet's state without keeping the leader's series (selftaint_coordinator_leader == 1)", e)
			}
		}
	}
	if used == 0 {
		t.Error("no alert or panel reads the NoExecute budget or the disruption guard")
	}
}
