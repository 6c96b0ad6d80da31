package drill_test

import (
	"bytes"
	"strings"
	"testing"

	junit "github.com/joshdk/go-junit"
	"github.com/santhosh-tekuri/jsonschema/v6"
	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/drill"
	"github.com/selftaint/selftaint/taints/fleet"
)

// scopes is a guard's conditions: condition -> scope -> tripped, with
// unhealthy of nodes.
type scope struct {
	cond, scope      string
	tripped          bool
	unhealthy, nodes int
}

// gv is a version of the guard ConfigMap at s seconds, resourceVersion
// rv, holding scopes.
func gv(s float64, rv string, scopes ...scope) drill.GuardVersion {
	g := fleet.GuardState{RenewTime: at(s), Leader: "coordinator-0", Conditions: map[corev1.NodeConditionType]map[string]fleet.Scope{}}
	for _, sc := range scopes {
		c := corev1.NodeConditionType(sc.cond)
		if g.Conditions[c] == nil {
			g.Conditions[c] = map[string]fleet.Scope{}
		}
		g.Conditions[c][sc.scope] = fleet.Scope{Tripped: sc.tripped, Since: at(s), Unhealthy: sc.unhealthy, Nodes: sc.nodes}
	}
	return drill.GuardVersion{Time: at(s), ResourceVersion: rv, State: g}
}

func guardExpect(tripped bool, cond, zone string) drill.Expectation {
	return drill.Expectation{Guard: &drill.GuardExpect{Tripped: &tripped, Condition: cond, Zone: zone}}
}

func TestEvaluateGuard(t *testing.T) {
	with := func(vs ...drill.GuardVersion) *drill.Record {
		r := record(60)
		r.Guards = vs
		return r
	}
	memA := func(tripped bool, unhealthy int) scope { return scope{"MemoryPressure", "a", tripped, unhealthy, 4} }
	memFleet := scope{"MemoryPressure", fleet.FleetScope, false, 3, 8}
	// MemoryPressure trips in zone a at 14s (renewed at 24s) and resets
	// at 40s; DiskPressure trips fleet-wide at 50s, to the end (60s).
	storm := with(
		gv(0, "1"), gv(10, "2", memA(false, 1), memFleet),
		gv(14, "3", memA(true, 3), memFleet), gv(24, "4", memA(true, 3), memFleet),
		gv(40, "5", memA(false, 1), memFleet),
		gv(50, "6", memA(false, 1), scope{"DiskPressure", fleet.FleetScope, true, 6, 8}),
	)
	unreadable := drill.GuardVersion{Time: at(20), ResourceVersion: "9", Error: "guard: renewTime is required"}
	deleted := drill.GuardVersion{Time: at(20), ResourceVersion: "9", Deleted: true}
	tests := []evalCase{
		{
			name: "tripped in the zone asked", expect: guardExpect(true, "MemoryPressure", "a"), rec: storm, passed: true,
			message: []string{"the guard tripped for MemoryPressure in zone a at 14.0s (3 of 4 nodes; tripped 26.0s in all), expected tripped for MemoryPressure in zone a"},
			measured: `{"guardVersions":6,"unreadableVersions":0,"firstTrip":{"atSeconds":14,"condition":"MemoryPressure","scope":"a",` +
				`"unhealthy":3,"nodes":4,"resourceVersion":"3"},"trippedScopes":["MemoryPressure/a"],"trippedSeconds":26}`,
		},
		{
			name: "any trip breaches never", expect: guardExpect(false, "", ""), rec: storm,
			message: []string{"the guard tripped for MemoryPressure in zone a at 14.0s (3 of 4 nodes; tripped 36.0s in all), expected never tripped"},
			measured: `{"guardVersions":6,"unreadableVersions":0,"firstTrip":{"atSeconds":14,"condition":"MemoryPressure","scope":"a",` +
				`"unhealthy":3,"nodes":4,"resourceVersion":"3"},"trippedScopes":["MemoryPressure/a","DiskPressure/*"],"trippedSeconds":36}`,
		},
		{
			name: "never in another zone", expect: guardExpect(false, "", "b"), rec: storm, passed: true,
			message:  []string{"the guard never tripped in zone b over 6 versions, expected never tripped in zone b"},
			measured: `{"guardVersions":6,"unreadableVersions":0,"trippedSeconds":0}`,
		},
		{
			name: "the fleet-wide scope only", expect: guardExpect(true, "MemoryPressure", "*"), rec: storm,
			message: []string{"the guard never tripped for MemoryPressure fleet-wide over 6 versions, expected tripped for MemoryPressure fleet-wide"},
		},
		{
			name: "another condition fleet-wide", expect: guardExpect(true, "DiskPressure", ""), rec: storm, passed: true,
			message: []string{"the guard tripped for DiskPressure fleet-wide at 50.0s (6 of 8 nodes; tripped 10.0s in all)"},
		},
		{
			name: "tripped before t=0 counts at t=0", expect: guardExpect(false, "MemoryPressure", ""),
			rec:     with(gv(-20, "1", memA(false, 1)), gv(-5, "2", memA(true, 3)), gv(30, "3", memA(false, 1))),
			message: []string{"the guard tripped for MemoryPressure in zone a at 0.0s (3 of 4 nodes; tripped 30.0s in all)"},
		},
		{
			name: "reset before t=0 does not count", expect: guardExpect(false, "", ""), passed: true,
			rec:     with(gv(-20, "1", memA(true, 3)), gv(-5, "2", memA(false, 1)), gv(30, "3", memA(false, 1))),
			message: []string{"the guard never tripped over 2 versions, expected never tripped"},
		},
		{
			name: "deleted: nothing tripped from then", expect: guardExpect(true, "", ""), passed: true,
			rec:     with(gv(14, "3", memA(true, 3)), deleted),
			message: []string{"tripped 6.0s in all"},
		},
		{
			name: "unreadable: never cannot be proven", expect: guardExpect(false, "", ""),
			rec:     with(gv(0, "1"), unreadable, gv(30, "10")),
			message: []string{"the guard could not be read at 20.0s (guard: renewTime is required; 1 of 3 versions), expected never tripped"},
		},
		{
			name: "unreadable: said when it never tripped", expect: guardExpect(true, "", ""),
			rec:     with(gv(0, "1"), unreadable),
			message: []string{"the guard never tripped over 2 versions, expected tripped; unreadable at 1 of 2 versions, first at 20.0s"},
		},
		{
			name: "never seen: never is not proven", expect: guardExpect(false, "", ""), rec: record(60),
			message: []string{"the guard ConfigMap was never seen (no coordinator wrote it, or the drill did not watch it), expected never tripped"},
		},
		{
			name: "never seen: not tripped", expect: guardExpect(true, "MemoryPressure", ""), rec: record(60),
			message: []string{"the guard ConfigMap was never seen", "expected tripped for MemoryPressure"},
		},
		{
			name: "tripped not set", expect: drill.Expectation{Guard: &drill.GuardExpect{}}, rec: storm,
			message: []string{"guard.tripped is not set"},
		},
	}
	runEval(t, tests)
}

// mv is a version of node name at s seconds whose maintenance condition
// has status and reason ("" status: no condition).
func mv(s float64, name, status, reason string) drill.NodeVersion {
	v := nv(s, name)
	v.Conditions = map[string]string{"Ready": "True"}
	if status != "" {
		v.Conditions[string(fleet.MaintenanceCondition)] = status
		v.Maintenance = reason
	}
	return v
}

func TestEvaluateMaintenance(t *testing.T) {
	atMost := func(n int) drill.Expectation {
		return drill.Expectation{Maintenance: &drill.MaintenanceExpect{AtMost: n}}
	}
	with := func(vs ...drill.NodeVersion) *drill.Record {
		r := record(60)
		r.Nodes = vs
		return r
	}
	// n-1 waits, drains from 5s, is drained at 14s and released at 15s;
	// n-2 waits from 5s and drains from 12s (two slots held then), is
	// blocked and retries at 20s and is given back at 30s; n-3 is given
	// back blocked (False) at 25s without holding a slot before.
	rolling := with(
		mv(-1, "n-1", "True", "Waiting"), mv(-1, "n-2", "", ""), mv(-1, "n-3", "", ""),
		mv(5, "n-1", "True", "Draining"), mv(5, "n-2", "True", "Waiting"), mv(14, "n-1", "True", "Drained"),
		mv(12, "n-2", "True", "Draining"), mv(15, "n-1", "False", "Released"), mv(20, "n-2", "True", "DrainBlocked"),
		mv(25, "n-3", "False", "DrainBlocked"), mv(30, "n-2", "False", "DrainBlocked"),
	)
	tests := []evalCase{
		{
			name: "two slots at once", expect: atMost(1), rec: rolling,
			message:  []string{"at most 2 nodes in maintenance (holding a slot: Draining, DrainBlocked) at once (n-1, n-2 at 12.0s), expected at most 1"},
			measured: `{"maxMaintenanceNodes":2,"maxMaintenanceAtSeconds":12,"maintenanceNodes":["n-1","n-2"]}`,
		},
		{name: "within the pool", expect: atMost(2), rec: rolling, passed: true},
		{
			name: "waiting holds no slot", expect: atMost(1), passed: true,
			rec: with(mv(0, "n-1", "True", "Waiting"), mv(0, "n-2", "True", "Waiting"), mv(3, "n-3", "True", "Draining"),
				mv(4, "n-1", "True", "Waiting")),
			message:  []string{"at most 1 node in maintenance (holding a slot: Draining, DrainBlocked) at once (n-3 at 3.0s), expected at most 1"},
			measured: `{"maxMaintenanceNodes":1,"maxMaintenanceAtSeconds":3,"maintenanceNodes":["n-3"]}`,
		},
		{
			name: "a drained node takes no slot", expect: atMost(1), passed: true,
			rec:      with(mv(0, "n-1", "True", "Draining"), mv(4, "n-1", "True", "Drained"), mv(5, "n-2", "True", "Draining")),
			message:  []string{"at most 1 node in maintenance (holding a slot: Draining, DrainBlocked) at once (n-1 at 0.0s), expected at most 1"},
			measured: `{"maxMaintenanceNodes":1,"maxMaintenanceAtSeconds":0,"maintenanceNodes":["n-1"]}`,
		},
		{
			name: "blocked and retrying holds one, blocked and given back does not", expect: atMost(0),
			rec:     with(mv(2, "n-1", "True", "DrainBlocked"), mv(2, "n-2", "False", "DrainBlocked"), mv(3, "n-3", "False", "Released")),
			message: []string{"at most 1 node in maintenance (holding a slot: Draining, DrainBlocked) at once (n-1 at 2.0s), expected at most 0"},
		},
		{
			name: "held before t=0 counts at t=0", expect: atMost(0),
			rec:      with(mv(-3, "n-1", "True", "Draining"), mv(8, "n-1", "False", "Released")),
			measured: `{"maxMaintenanceNodes":1,"maxMaintenanceAtSeconds":0,"maintenanceNodes":["n-1"]}`,
		},
		{
			name: "no maintenance at all", expect: atMost(0), rec: with(mv(0, "n-1", "", "")), passed: true,
			message:  []string{"at most 0 nodes in maintenance (holding a slot: Draining, DrainBlocked) at once, expected at most 0"},
			measured: `{"maxMaintenanceNodes":0,"maxMaintenanceAtSeconds":0}`,
		},
		{
			name: "no node seen", expect: atMost(1), rec: record(60),
			message: []string{"no node of the drill was seen, expected at most 1 in maintenance"},
		},
	}
	runEval(t, tests)
}

func TestEvaluateEvictionReason(t *testing.T) {
	evicted := func(reason string, min int) drill.Expectation {
		return drill.Expectation{Evicted: &drill.EvictExpect{Selector: "app=train", Reason: reason, Min: min}}
	}
	notEvicted := func(sel, reason string) drill.Expectation {
		return drill.Expectation{NotEvicted: &drill.EvictExpect{Selector: sel, Reason: reason}}
	}
	// t-0 drained through the Eviction API at 11s, t-1 evicted by the
	// taint manager at 12s, t-2 force deleted at 20s, t-3 stays.
	mixed := record(60)
	mixed.Pods = []drill.PodVersion{
		tp(0, "t-0", "gpu-1"), tp(0, "t-1", "gpu-2"), tp(0, "t-2", "gpu-2"), tp(0, "t-3", "gpu-3"),
		gone(tp(11, "t-0", "gpu-1"), drill.ReasonEvictionAPI, false), gone(tp(12, "t-1", "gpu-2"), drill.ReasonTaintManager, false),
		gone(tp(20, "t-2", "gpu-2"), "", true),
	}
	tests := []evalCase{
		{
			name: "evicted through the Eviction API", expect: evicted("EvictionByEvictionAPI", 1), rec: mixed, passed: true,
			message: []string{"1 of 4 pods app=train in namespace d evicted by EvictionByEvictionAPI after t=0, expected at least 1; " +
				"1 evicted otherwise (DeletionByTaintManager); 1 deleted without eviction"},
			measured: `{"matched":4,"evictions":1,"pods":[` +
				`{"namespace":"d","name":"t-0","node":"gpu-1","reason":"EvictionByEvictionAPI","atSeconds":11},` +
				`{"namespace":"d","name":"t-1","node":"gpu-2","reason":"DeletionByTaintManager","atSeconds":12},` +
				`{"namespace":"d","name":"t-2","node":"gpu-2","reason":"deleted without eviction","atSeconds":20}]}`,
		},
		{
			name: "other reasons do not count", expect: evicted("EvictionByEvictionAPI", 2), rec: mixed,
			message: []string{"1 of 4 pods app=train in namespace d evicted by EvictionByEvictionAPI after t=0, expected at least 2"},
		},
		{
			name: "no eviction of that reason", expect: evicted("TerminationByKubelet", 1), rec: mixed,
			message: []string{"0 of 4 pods app=train in namespace d evicted by TerminationByKubelet after t=0, expected at least 1; " +
				"2 evicted otherwise (EvictionByEvictionAPI, DeletionByTaintManager); 1 deleted without eviction"},
		},
		{
			name: "not evicted by the taint manager: breached", expect: notEvicted("app=train", "DeletionByTaintManager"), rec: mixed,
			message: []string{"pod d/t-1 evicted (DeletionByTaintManager) at 12.0s on gpu-2, expected none of app=train evicted by DeletionByTaintManager; " +
				"2 left otherwise (EvictionByEvictionAPI), 1 deleted without eviction"},
		},
		{
			name: "not evicted by preemption: holds, other removals said", expect: notEvicted("app=train", "PreemptionByScheduler"), rec: mixed, passed: true,
			message: []string{"none of 4 pods app=train evicted by PreemptionByScheduler after t=0; 3 left otherwise (EvictionByEvictionAPI, DeletionByTaintManager), 1 deleted without eviction"},
		},
		{
			name: "not evicted by a reason: nothing left", expect: notEvicted("app=train,!gone", "DeletionByTaintManager"), passed: true,
			rec:     func() *drill.Record { r := record(60); r.Pods = mixed.Pods[:4]; return r }(),
			message: []string{"none of 4 pods app=train,!gone evicted by DeletionByTaintManager after t=0"},
		},
		{
			name: "not evicted by a reason: no pod to keep", expect: notEvicted("app=nope", "DeletionByTaintManager"), rec: mixed,
			message: []string{"no pod matches app=nope in namespace d: nothing to keep"},
		},
	}
	runEval(t, tests)
}

func TestEvaluateNewKindsNames(t *testing.T) {
	s := &drill.Scenario{Expect: []drill.Expectation{
		guardExpect(true, "MemoryPressure", "a"),
		guardExpect(false, "", ""),
		guardExpect(false, "", "*"),
		{Maintenance: &drill.MaintenanceExpect{AtMost: 1}},
		{Evicted: &drill.EvictExpect{Selector: "app=train", Reason: drill.ReasonEvictionAPI, After: "xid", Min: 2}},
		{NotEvicted: &drill.EvictExpect{Selector: "app=web", Reason: drill.ReasonTaintManager}},
	}}
	want := []struct{ name, kind string }{
		{"guard tripped for MemoryPressure in zone a", "guard"},
		{"guard never tripped", "guard"},
		{"guard never tripped fleet-wide", "guard"},
		{"at most 1 node in maintenance", "maintenance"},
		{"evicted app=train by EvictionByEvictionAPI after xid (at least 2)", "evicted"},
		{"not evicted app=web by DeletionByTaintManager", "notEvicted"},
	}
	got := drill.Evaluate(s, record(60))
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Kind != w.kind {
			t.Errorf("result %d: %q (%s), want %q (%s)", i, got[i].Name, got[i].Kind, w.name, w.kind)
		}
	}
}

// newKindsReport is a report of the guard, maintenance and reasoned
// eviction verdicts: the guard tripped as expected, the maintenance
// pool was exceeded.
func newKindsReport(t *testing.T) *drill.Report {
	t.Helper()
	rec := record(60)
	rec.Guards = []drill.GuardVersion{gv(0, "1"), gv(14, "2", scope{"MemoryPressure", "a", true, 3, 4}), gv(40, "3")}
	rec.Nodes = []drill.NodeVersion{mv(0, "n-1", "True", "Draining"), mv(2, "n-2", "True", "DrainBlocked"), mv(30, "n-1", "False", "Released")}
	rec.Pods = []drill.PodVersion{pod(0, "a", "n-1", true), pod(0, "b", "n-3", true), gone(pod(5, "a", "n-1", true), drill.ReasonEvictionAPI, true)}
	s := &drill.Scenario{Expect: []drill.Expectation{
		guardExpect(true, "MemoryPressure", "a"),
		{Maintenance: &drill.MaintenanceExpect{AtMost: 1}},
		{NotEvicted: &drill.EvictExpect{Selector: "app=web", Reason: drill.ReasonTaintManager}},
	}}
	return &drill.Report{
		Drill: "storm", File: "storm.yaml", Cluster: "embedded", Started: t0, Finished: t0.Add(70e9), DurationSeconds: 70,
		Expectations: drill.Evaluate(s, rec), Cleanup: drill.Cleanup{Done: true},
	}
}

func TestOutputNewKinds(t *testing.T) {
	r := newKindsReport(t)
	table := drill.Table(r)
	for _, w := range []string{
		"PASS    guard tripped for MemoryPressure in zone a     tripped at 14.0s (MemoryPressure in zone a), 26.0s in all\n",
		"FAIL    at most 1 node in maintenance                  max 2 nodes in maintenance\n",
		"PASS    not evicted app=web by DeletionByTaintManager  0 of 2 evicted, 1 evicted otherwise\n",
		"FAIL at most 1 node in maintenance: at most 2 nodes in maintenance (holding a slot: Draining, DrainBlocked) at once (n-1, n-2 at 2.0s), expected at most 1\n",
	} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, table)
		}
	}
	var buf bytes.Buffer
	if err := drill.WriteJUnit(&buf, r); err != nil {
		t.Fatal(err)
	}
	suites, err := junit.Ingest(buf.Bytes())
	if err != nil || len(suites) != 1 || len(suites[0].Tests) != 4 {
		t.Fatalf("junit: %v, %+v\n%s", err, suites, buf.String())
	}
	if g := suites[0].Tests[1]; g.Name != "at most 1 node in maintenance" || g.Status != junit.StatusFailed || g.Error == nil ||
		!strings.Contains(g.SystemOut, `"maxMaintenanceNodes":2`) {
		t.Errorf("maintenance test case %+v", g)
	}
	if g := suites[0].Tests[0]; g.Status != junit.StatusPassed || !strings.Contains(g.SystemOut, `"firstTrip":{"atSeconds":14`) {
		t.Errorf("guard test case %+v", g)
	}
	if !strings.Contains(buf.String(), `<testsuite name="storm" tests="4" failures="1" errors="0"`) {
		t.Errorf("suite counts:\n%s", buf.String())
	}
}

// TestReportSchemaNewKinds: a report with the guard, maintenance and
// reasoned eviction verdicts validates; their fields are in the schema.
func TestReportSchemaNewKinds(t *testing.T) {
	sch := compileSchema(t)
	var buf bytes.Buffer
	if err := drill.WriteJSON(&buf, newKindsReport(t)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, old, new string
		valid          bool
	}{
		{name: "valid", valid: true},
		{name: "guard kind", old: `"kind": "guard"`, new: `"kind": "guards"`},
		{name: "firstTrip's fields", old: `"scope": "a"`, new: `"zone": "a"`},
		{name: "maintenance count", old: `"maxMaintenanceNodes": 2`, new: `"maxMaintenanceNodes": -2`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc := buf.String()
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
			if tt.valid != (err == nil) {
				t.Errorf("valid = %v, want %v (%v)\n%s", err == nil, tt.valid, err, doc)
			}
		})
	}
}

// newKindsDrill is the valid drill with the guard, maintenance and
// reasoned eviction expectations after its own.
const newKindsDrill = validDrill + `- guard: {tripped: true, condition: MemoryPressure, zone: a}
- guard: {tripped: false, zone: "*"}
- maintenance: {atMost: 1}
- evicted: {selector: app=train, reason: EvictionByEvictionAPI}
- notEvicted: {selector: app=web, reason: DeletionByTaintManager}
`

func TestParseNewKinds(t *testing.T) {
	s, err := drill.Parse([]byte(newKindsDrill), "new.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	g, fleetWide, m, ev, nev := s.Expect[6].Guard, s.Expect[7].Guard, s.Expect[8].Maintenance, s.Expect[9].Evicted, s.Expect[10].NotEvicted
	switch {
	case g == nil || *g.Tripped != true || g.Condition != "MemoryPressure" || g.Zone != "a":
		t.Errorf("guard %+v", g)
	case fleetWide == nil || *fleetWide.Tripped != false || fleetWide.Zone != fleet.FleetScope:
		t.Errorf("fleet-wide guard %+v", fleetWide)
	case m == nil || m.AtMost != 1:
		t.Errorf("maintenance %+v", m)
	case ev == nil || ev.Reason != drill.ReasonEvictionAPI || ev.Min != 1:
		t.Errorf("evicted %+v", ev)
	case nev == nil || nev.Reason != drill.ReasonTaintManager:
		t.Errorf("notEvicted %+v", nev)
	}
	tests := []struct{ name, old, new, want string }{
		{"tripped required", "tripped: false, zone", "zone", `expect[7].guard.tripped: required: true (tripped at some moment) or false (never)`},
		{"tripped is a boolean", "tripped: false", `tripped: "no"`, `expect[7].guard.tripped: a string where a bool belongs`},
		{"guard condition", "condition: MemoryPressure, zone: a", "condition: Memory Pressure, zone: a", `expect[6].guard.condition: "Memory Pressure": name part must consist of`},
		{"guard zone", `zone: "*"`, `zone: "zone a"`, `expect[7].guard.zone: "zone a": a zone name (a label value) or "*" for the fleet-wide scope`},
		{"guard unknown field", "tripped: true,", "tripped: true, scope: a,", `expect[6].guard.scope: unknown field`},
		{"maintenance negative", "maintenance: {atMost: 1}", "maintenance: {atMost: -1}", `expect[8].maintenance.atMost: -1 must not be negative`},
		{"maintenance unknown field", "maintenance: {atMost: 1}", "maintenance: {atMost: 1, reason: Drained}", `expect[8].maintenance.reason: unknown field`},
		{"evicted reason", "reason: EvictionByEvictionAPI", "reason: Drained", `expect[9].evicted.reason: "Drained": must be one of EvictionByEvictionAPI, DeletionByTaintManager, DeletionByPodGC, DeletionByDeviceTaintManager, PreemptionByScheduler, TerminationByKubelet`},
		{"notEvicted reason", "reason: DeletionByTaintManager", "reason: deletionbytaintmanager", `expect[10].notEvicted.reason: "deletionbytaintmanager": must be one of`},
		{"guard without a coordinator", "count: 2\n", "count: 2\n  coordinator: {replicas: 0}\n", `expect[6].guard: cluster.coordinator.replicas is 0: no coordinator writes the guard`},
		{"two kinds", "- maintenance: {atMost: 1}", "- maintenance: {atMost: 1}\n  guard: {tripped: true}", `expect[8]: exactly one of ready, pdb, evicted, notEvicted, noExecute, explain, guard, maintenance (got guard, maintenance)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(newKindsDrill, tt.old) {
				t.Fatalf("the drill has no %q", tt.old)
			}
			_, err := drill.Parse([]byte(strings.Replace(newKindsDrill, tt.old, tt.new, 1)), "bad.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse: %v\nwant %q", err, tt.want)
			}
		})
	}
}
