package drill_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"strings"
	"testing"
	"time"

	junit "github.com/joshdk/go-junit"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/drill"
)

// sampleReport is a drill whose expectations of every kind were judged
// on one record: ready, explain and noExecute hold; the PDB and
// notEvicted are breached (a force delete), and the drain step failed.
func sampleReport(t *testing.T) *drill.Report {
	t.Helper()
	rec := record(60)
	rec.Workloads = []drill.WorkloadVersion{wv(0, 2, 2), wv(12, 1, 2), wv(17, 2, 2)}
	rec.Pods = []drill.PodVersion{
		pod(0, "a", "gpu-1", true), pod(0, "b", "gpu-2", true),
		gone(pod(12, "a", "gpu-1", true), "DeletionByTaintManager", false), pod(17, "c", "cpu-1", true),
		gone(pod(30, "b", "gpu-2", true), "", true),
	}
	rec.PDBs = []drill.PDBVersion{pdbv(0, 2, 2, "pdb", "1"), pdbv(12, 1, 2, "pod d/web-a", "12"), pdbv(17, 2, 2, "pod d/web-c", "17")}
	rec.Nodes = []drill.NodeVersion{nv(0, "gpu-1"), nv(11, "gpu-1", "selftaint.io/gpu"), nv(40, "gpu-1")}
	rec.Predictions = []drill.Prediction{prediction("web-a", taints.EvictImmediately, 0)}
	s := &drill.Scenario{Expect: []drill.Expectation{
		{Ready: &drill.ReadyExpect{Workload: web, Within: dur(time.Minute), After: "xid"}},
		{PDB: &drill.PDBExpect{}},
		{Name: `web stays <"&'>`, NotEvicted: &drill.EvictExpect{Selector: "app=web", After: "xid"}},
		{NoExecute: &drill.NoExecuteExpect{AtMost: 1}},
		{Explain: &drill.ExplainExpect{Step: "xid", Tolerance: dur(5 * time.Second)}},
	}}
	return &drill.Report{
		Drill: "gpu-xid79", File: "deploy/drills/gpu-xid79.yaml", Cluster: "embedded",
		Started: t0.Add(-20 * time.Second), Finished: t0.Add(65 * time.Second), DurationSeconds: 85, ControlPlaneStartSeconds: 8.25,
		Steps: []drill.StepReport{
			{Name: "xid", Kind: "fault", AtSeconds: 10, DurationSeconds: 0.5, Nodes: []string{"gpu-1"}},
			{Name: "drain", Kind: "drain", AtSeconds: 20, DurationSeconds: 1, Nodes: []string{"gpu-2"}, Error: "the coordinator did not answer"},
		},
		Expectations: drill.Evaluate(s, rec),
		Error:        "step drain failed",
		Cleanup:      drill.Cleanup{Done: true, Removed: []string{"namespace d", "node gpu-1", "node gpu-2"}},
	}
}

func TestExitCode(t *testing.T) {
	r := sampleReport(t)
	if got := r.ExitCode(); got != drill.ExitNotRun {
		t.Errorf("not run: %d, want %d", got, drill.ExitNotRun)
	}
	r.Error = ""
	if got := r.ExitCode(); got != drill.ExitBreached {
		t.Errorf("breached: %d, want %d", got, drill.ExitBreached)
	}
	r.Expectations = []drill.Result{r.Expectations[0]}
	if got := r.ExitCode(); got != drill.ExitPassed {
		t.Errorf("passed: %d, want %d", got, drill.ExitPassed)
	}
}

func TestTable(t *testing.T) {
	r := sampleReport(t)
	got := drill.Table(r)
	want := []string{
		"RESULT  EXPECTATION",
		"PASS    ready Deployment/web within 1m after xid  back in 7.0s, reschedule p50 5.0s p99 5.0s (1 pod)\n",
		"FAIL    no pdb below its minimum                  PDB violated 5.0s (1 time), fewest healthy 1\n",
		"FAIL    web stays <\"&'>                           1 of 3 evicted, 1 deleted without eviction\n",
		"PASS    at most 1 NoExecute node                  max 1 NoExecute node\n",
		"PASS    explain holds for xid                     1/1 predictions held\n",
		"FAIL no pdb below its minimum: PDB below its minimum for 5.0s",
		"FAIL web stays <\"&'>: pod d/web-a evicted (DeletionByTaintManager) at 12.0s on gpu-1",
		"step drain (drain) failed at 20.0s: the coordinator did not answer\n",
		"NOT RUN TO ITS END: step drain failed (2 of 5 expectations breached or undecided); wall time 1m25s (control plane started in 8.3s)\n",
	}
	at := 0
	for _, w := range want {
		i := strings.Index(got[at:], w)
		if i < 0 {
			t.Fatalf("table lacks %q (after what came before):\n%s", w, got)
		}
		at += i + len(w)
	}
	r.Error, r.Steps[1].Error = "", ""
	r.Passed = false
	if got := drill.Table(r); !strings.HasSuffix(got, "FAILED: 2 of 5 expectations breached; wall time 1m25s (control plane started in 8.3s)\n") {
		t.Errorf("breached footer:\n%s", got)
	}
	r.Expectations = []drill.Result{r.Expectations[0]}
	r.Passed, r.ControlPlaneStartSeconds = true, 0
	if got := drill.Table(r); !strings.HasSuffix(got, "PASSED: 1 of 1 expectations held; wall time 1m25s\n") {
		t.Errorf("passed footer:\n%s", got)
	}
}

// TestJUnit parses the JUnit file with a JUnit parser
// (github.com/joshdk/go-junit) and checks its tests, statuses and
// messages, and the counts in the file's own attributes.
func TestJUnit(t *testing.T) {
	r := sampleReport(t)
	var buf bytes.Buffer
	if err := drill.WriteJUnit(&buf, r); err != nil {
		t.Fatal(err)
	}
	suites, err := junit.Ingest(buf.Bytes())
	if err != nil {
		t.Fatalf("junit.Ingest: %v\n%s", err, buf.String())
	}
	if len(suites) != 1 || suites[0].Name != "gpu-xid79" {
		t.Fatalf("suites %+v, want one named gpu-xid79\n%s", suites, buf.String())
	}
	s := suites[0]
	type tc struct {
		classname, name string
		status          junit.Status
		message         string
	}
	want := []tc{
		{"gpu-xid79.steps", "step xid (fault)", junit.StatusPassed, ""},
		{"gpu-xid79.steps", "step drain (drain)", junit.StatusError, "the coordinator did not answer"},
		{"gpu-xid79.expect", "ready Deployment/web within 1m after xid", junit.StatusPassed, ""},
		{"gpu-xid79.expect", "no pdb below its minimum", junit.StatusFailed, r.Expectations[1].Message},
		{"gpu-xid79.expect", `web stays <"&'>`, junit.StatusFailed, r.Expectations[2].Message},
		{"gpu-xid79.expect", "at most 1 NoExecute node", junit.StatusPassed, ""},
		{"gpu-xid79.expect", "explain holds for xid", junit.StatusPassed, ""},
		{"gpu-xid79", "cleanup", junit.StatusPassed, ""},
	}
	if len(s.Tests) != len(want) {
		t.Fatalf("%d tests, want %d:\n%s", len(s.Tests), len(want), buf.String())
	}
	for i, w := range want {
		g := s.Tests[i]
		if (tc{g.Classname, g.Name, g.Status, g.Message}) != w {
			t.Errorf("test %d = %q %q %s %q\n   want %q %q %s %q", i, g.Classname, g.Name, g.Status, g.Message, w.classname, w.name, w.status, w.message)
		}
	}
	if s.Totals.Tests != 8 || s.Totals.Failed != 2 || s.Totals.Error != 1 || s.Tests[1].Duration != time.Second {
		t.Errorf("totals %+v, step duration %s", s.Totals, s.Tests[1].Duration)
	}
	if !strings.Contains(s.Tests[3].SystemOut, `violationSeconds`) {
		t.Errorf("the PDB test's system-out %q lacks its figures", s.Tests[3].SystemOut)
	}
	// A passing case says in words what was judged, as a failing one's
	// message does, not only JSON.
	for i, want := range map[int][]string{
		0: {"step xid (fault) started at 10.0s from t=0 and took 0.5s on 1 node: gpu-1"},
		2: {"PASS ready Deployment/web within 1m after xid: " + r.Expectations[0].Message, "measured: back in 7.0s, reschedule p50 5.0s p99 5.0s (1 pod)", `measured (JSON): {"readyAfterSeconds":7`},
		5: {"PASS at most 1 NoExecute node: " + r.Expectations[3].Message, "measured: max 1 NoExecute node"},
		6: {"PASS explain holds for xid: " + r.Expectations[4].Message, "measured: 1/1 predictions held"},
		3: {"FAIL no pdb below its minimum: " + r.Expectations[1].Message},
	} {
		for _, w := range want {
			if !strings.Contains(s.Tests[i].SystemOut, w) {
				t.Errorf("test %q: system-out %q lacks %q", s.Tests[i].Name, s.Tests[i].SystemOut, w)
			}
		}
	}
	checkJUnitCounts(t, buf.Bytes())
}

// checkJUnitCounts checks the file's own counts, which CI systems read
// without counting.
func checkJUnitCounts(t *testing.T, b []byte) {
	t.Helper()
	var attrs struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Suite    struct {
			Tests     int    `xml:"tests,attr"`
			Failures  int    `xml:"failures,attr"`
			Errors    int    `xml:"errors,attr"`
			Time      string `xml:"time,attr"`
			Timestamp string `xml:"timestamp,attr"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &attrs); err != nil {
		t.Fatal(err)
	}
	if attrs.Tests != 8 || attrs.Failures != 2 || attrs.Errors != 1 || attrs.Suite.Tests != 8 || attrs.Suite.Failures != 2 ||
		attrs.Suite.Errors != 1 || attrs.Suite.Time != "85.000" || attrs.Suite.Timestamp != "2026-11-27T07:59:40Z" {
		t.Errorf("attributes %+v", attrs)
	}
	// The timestamp has its zone: RFC 3339 reads it as the same instant.
	if ts, err := time.Parse(time.RFC3339, attrs.Suite.Timestamp); err != nil || !ts.Equal(t0.Add(-20*time.Second)) {
		t.Errorf("timestamp %q: RFC 3339 reads %v (%v), want %v", attrs.Suite.Timestamp, ts, err, t0.Add(-20*time.Second))
	}
}

func TestJUnitNotRun(t *testing.T) {
	r := &drill.Report{Drill: "d", Error: "kube-apiserver did not start: exit status 1", Cleanup: drill.Cleanup{Error: "etcd data dir: permission denied"}}
	var buf bytes.Buffer
	if err := drill.WriteJUnit(&buf, r); err != nil {
		t.Fatal(err)
	}
	suites, err := junit.Ingest(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range suites[0].Tests {
		got = append(got, c.Name+": "+string(c.Status)+": "+c.Message)
	}
	want := []string{"cleanup: error: etcd data dir: permission denied", "run: error: kube-apiserver did not start: exit status 1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("report.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// TestReportSchema: reports WriteJSON writes validate against
// report.schema.json (draft 2020-12), and reports that break it do not.
func TestReportSchema(t *testing.T) {
	sch := compileSchema(t)
	var buf bytes.Buffer
	if err := drill.WriteJSON(&buf, sampleReport(t)); err != nil {
		t.Fatal(err)
	}
	valid := buf.String()
	var empty bytes.Buffer
	if err := drill.WriteJSON(&empty, &drill.Report{Drill: "d", Cluster: "existing"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, doc, old, new string
		valid               bool
	}{
		{name: "every kind", doc: valid, valid: true},
		{name: "nothing ran", doc: empty.String(), valid: true},
		{name: "passed is a boolean", doc: valid, old: `"passed": false`, new: `"passed": "no"`},
		{name: "schema version", doc: valid, old: `"selftaint.io/drill-report/v1"`, new: `"selftaint.io/drill-report/v2"`},
		{name: "unknown kind", doc: valid, old: `"kind": "noExecute"`, new: `"kind": "noexecute"`},
		{name: "unknown measured field", doc: valid, old: `"violationSeconds"`, new: `"violationSecs"`},
		{name: "unknown top-level field", doc: valid, old: `"drill": "gpu-xid79"`, new: `"drill": "gpu-xid79", "extra": 1`},
		{name: "negative seconds", doc: valid, old: `"durationSeconds": 85`, new: `"durationSeconds": -85`},
		{name: "count is an integer", doc: valid, old: `"violations": 1`, new: `"violations": 1.5`},
		{name: "started is a time", doc: valid, old: `"started": "2026-11-27T07:59:40Z"`, new: `"started": "yesterday"`},
		{name: "cleanup required", doc: empty.String(), old: `"cleanup": {`, new: `"cleanUp": {`},
		{name: "steps never null", doc: empty.String(), old: `"steps": []`, new: `"steps": null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := tt.doc
			if tt.old != "" {
				if !strings.Contains(doc, tt.old) {
					t.Fatalf("the report has no %s:\n%s", tt.old, doc)
				}
				doc = strings.Replace(doc, tt.old, tt.new, 1)
			}
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
			if err != nil {
				t.Fatal(err)
			}
			err = sch.Validate(inst)
			if tt.valid && err != nil {
				t.Errorf("a valid report fails the schema: %v\n%s", err, doc)
			}
			if !tt.valid && err == nil {
				t.Errorf("a wrong report (%s) passes the schema", tt.name)
			}
		})
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	r := sampleReport(t)
	var buf bytes.Buffer
	if err := drill.WriteJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	var back drill.Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Schema != drill.ReportSchema || len(back.Expectations) != 5 || *back.Expectations[1].Measured.ViolationSeconds != 5 {
		t.Errorf("round trip lost something: %+v", back)
	}
	if strings.Contains(buf.String(), "null") {
		t.Errorf("the report has a null:\n%s", buf.String())
	}
}
