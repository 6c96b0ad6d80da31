package drill_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/taints/drill"
)

// validDrill uses every section; the table's cases each break one thing.
const validDrill = `apiVersion: selftaint.io/v1alpha1
kind: Drill
name: gpu-xid79
cluster:
  pools:
  - name: gpu
    count: 4
    labels: {pool: gpu, topology.kubernetes.io/zone: a}
    capacity: {nvidia.com/gpu: 8, cpu: "64", memory: 512Gi}
    taints: ["nvidia.com/gpu=present:NoSchedule"]
  - name: cpu
    count: 2
workloads:
- manifest: |
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
steps:
- name: xid
  at: 10s
  fault: {nodes: [gpu-1], gpuXid: 79, for: 1m}
- notReady: {selector: pool=cpu, for: 30s}
- drain: {nodes: [gpu-2], reason: maintenance, maxParallel: 1, done: true}
- coordinator: {action: pause, for: 5s}
- waitFor: {nodes: [gpu-1], condition: {type: GPUHealthy, status: "False"}}
expect:
- ready: {workload: {kind: Deployment, name: web}, within: 2m, after: xid}
- pdb: {name: train}
- evicted: {selector: app=train, after: xid}
- notEvicted: {selector: app=web}
- noExecute: {atMost: 1}
- explain: {step: xid}
`

func TestParseValid(t *testing.T) {
	s, err := drill.Parse([]byte(validDrill), "gpu.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"timeout", s.Timeout.Duration, 10 * time.Minute},
		{"settle", s.Settle.Duration, 5 * time.Second},
		{"grace", s.Cluster.NodeMonitorGracePeriod.Duration, 20 * time.Second},
		{"replicas", *s.Cluster.Coordinator.Replicas, 1},
		{"step 1 name", s.Steps[0].Name, "xid"},
		{"step 2 name", s.Steps[1].Name, "step-2"},
		{"step 1 at", s.Steps[0].At.Duration, 10 * time.Second},
		{"step 1 kind", s.Steps[0].StepKind(), "fault"},
		{"fault status", s.Steps[0].Fault.Status, "True"},
		{"fault xid", s.Steps[0].Fault.GPUXid, 79},
		{"fault for", s.Steps[0].Fault.For.Duration, time.Minute},
		{"wait timeout", s.Steps[4].WaitFor.Timeout.Duration, 2 * time.Minute},
		{"wait status kept", s.Steps[4].WaitFor.Condition.Status, "False"},
		{"evict min", s.Expect[2].Evicted.Min, 1},
		{"notEvicted min stays 0", s.Expect[3].NotEvicted.Min, 0},
		{"tolerance", s.Expect[5].Explain.Tolerance.Duration, 10 * time.Second},
		{"capacity", s.Cluster.Pools[0].Capacity.Name("nvidia.com/gpu", "").Value(), int64(8)},
		{"expect kind", s.Expect[1].ExpectKind(), "pdb"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// TestParseErrors breaks the valid drill one way per row (replacing old
// by new) and wants each error, named by its field path, in the
// *FileError.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, old, new string
		want           []string
	}{
		{"unknown field at depth", "gpuXid: 79,", "gpuXid: 79, condtion: X,", []string{`steps[0].fault.condtion: unknown field`}},
		{"duplicate key at depth", "reason: maintenance,", "reason: maintenance, reason: again,", []string{`steps[2].drain.reason: duplicate field`}},
		{"duplicate top-level key", "kind: Drill\n", "kind: Drill\nkind: Drill\n", []string{`kind: duplicate field`}},
		{"wrong type", "count: 2", "count: two", []string{`cluster.pools[1].count: a string where an int belongs`}},
		{"unknown version", "selftaint.io/v1alpha1", "selftaint.io/v2", []string{`apiVersion: "selftaint.io/v2" is not supported; supported: selftaint.io/v1alpha1`}},
		{"no version", "apiVersion: selftaint.io/v1alpha1\n", "", []string{`apiVersion: required: selftaint.io/v1alpha1`}},
		{"wrong kind", "kind: Drill", "kind: Drills", []string{`kind: "Drills": must be Drill`}},
		{"bad name", "name: gpu-xid79", "name: GPU_xid", []string{`name: "GPU_xid": a lowercase RFC 1123 label`}},
		{"pool count", "count: 2", "count: 0", []string{`cluster.pools[1].count: must be at least 1`}},
		{"pool name", "name: cpu", "name: CPU", []string{`cluster.pools[1].name: "CPU"`, `steps[1]`}[:1]},
		{"duplicate pool", "name: cpu", "name: gpu", []string{`cluster.pools[1].name: "gpu" names another pool too`}},
		{"bad quantity", "memory: 512Gi", "memory: lots", []string{`bad.yaml:9: cluster.pools[0].capacity[memory]: "lots" is not a quantity`}},
		{"bad resource name", "cpu: \"64\"", "c/p/u: \"64\"", []string{`cluster.pools[0].capacity[c/p/u]: resource name "c/p/u"`}},
		{"bad label", "pool: gpu,", "pool: g u,", []string{`cluster.pools[0].labels[pool]: value "g u"`}},
		{"bad taint", "nvidia.com/gpu=present:NoSchedule", "nvidia.com/gpu=present:NoRun", []string{`cluster.pools[0].taints[0]: taint "nvidia.com/gpu=present:NoRun": effect "NoRun" is not one of`}},
		{"no nodes", "  pools:\n  - name: gpu", "  poolz:\n  - name: gpu", []string{`cluster.poolz: unknown field`}},
		{"two fault kinds", "gpuXid: 79,", "gpuXid: 79, condition: MemoryPressure,", []string{`steps[0].fault: exactly one of condition and gpuXid`}},
		{"no fault kind", "gpuXid: 79,", "", []string{`steps[0].fault: exactly one of condition and gpuXid`}},
		{"negative xid", "gpuXid: 79", "gpuXid: -79", []string{`steps[0].fault.gpuXid: -79 must be a positive Xid number`}},
		{"wrong type in a later list element", "- coordinator: {action: pause, for: 5s}", "- coordinator: {action: [pause], for: 5s}", []string{`bad.yaml:24: steps[3].coordinator.action: a list where a string belongs`}},
		{"wrong type in a list", "nodes: [gpu-2]", "nodes: [gpu-2, 7]", []string{`steps[2].drain.nodes[1]: a number where a string belongs (YAML reads 7 as a number: quote it, "7")`}},
		{"bad status", "gpuXid: 79,", "gpuXid: 79, status: Maybe,", []string{`steps[0].fault.status: "Maybe": must be one of True, False, Unknown`}},
		{"unquoted status", "gpuXid: 79,", "gpuXid: 79, status: True,", []string{`bad.yaml:21: steps[0].fault.status: a bool where a string belongs (YAML reads True as a boolean: quote it, status: "True")`}},
		{"fault for missing", "gpuXid: 79, for: 1m", "gpuXid: 79", []string{`steps[0].fault.for: must be greater than zero`}},
		{"bad duration", "for: 1m}", "for: 1 minute}", []string{`steps[0].fault.for: "1 minute" must be a duration such as`}},
		{"number duration", "at: 10s", "at: 10", []string{`steps[0].at: "10" must be a duration`}},
		{"negative at", "at: 10s", "at: -10s", []string{`steps[0].at: -10s must not be negative`}},
		{"node not in pools", "nodes: [gpu-1], gpuXid", "nodes: [gpu-5], gpuXid", []string{`steps[0].fault.nodes[0]: "gpu-5" is not one of the drill's virtual nodes (gpu-1..gpu-4, cpu-1..cpu-2)`}},
		{"node zero-padded", "nodes: [gpu-1], gpuXid", "nodes: [gpu-01], gpuXid", []string{`steps[0].fault.nodes[0]: "gpu-01" is not one`}},
		{"no nodes picked", "nodes: [gpu-1], gpuXid", "gpuXid", []string{`steps[0].fault: no nodes: give nodes (names) or selector`}},
		{"bad selector", "selector: pool=cpu", "selector: pool==cpu=", []string{`steps[1].notReady.selector: label selector "pool==cpu="`}},
		{"two actions", "- notReady: {selector: pool=cpu, for: 30s}", "- notReady: {selector: pool=cpu, for: 30s}\n  drain: {nodes: [gpu-2], reason: x}", []string{`steps[1]: exactly one of fault, notReady, drain, coordinator, waitFor (got notReady, drain)`}},
		{"no action", "- coordinator: {action: pause, for: 5s}", "- name: nothing", []string{`steps[3]: no action`}},
		{"duplicate step name", "- notReady:", "- name: xid\n  notReady:", []string{`steps[1].name: "xid" names another step too`}},
		{"drain without reason", "reason: maintenance,", "", []string{`steps[2].drain.reason: required`}},
		{"drain on deadline", "reason: maintenance,", "reason: maintenance, onDeadline: evict,", []string{`steps[2].drain.onDeadline: "evict": must be release or force`}},
		{"coordinator action", "action: pause", "action: stop", []string{`steps[3].coordinator.action: "stop": must be kill or pause`}},
		{"pause needs for", "action: pause, for: 5s", "action: pause", []string{`steps[3].coordinator.for: must be greater than zero`}},
		{"kill needs no for", "action: pause, for: 5s", "action: kill", nil},
		{"no coordinator", "count: 2\n", "count: 2\n  coordinator: {replicas: 0}\n", []string{`steps[3].coordinator: cluster.coordinator.replicas is 0`}},
		{"wait without nodes", "waitFor: {nodes: [gpu-1], ", "waitFor: {", []string{`steps[4].waitFor: no nodes: give nodes (names) or selector`}},
		{"wait for a workload on nodes", "condition: {type: GPUHealthy, status: \"False\"}", "workload: {kind: Deployment, name: web}", []string{`steps[4].waitFor: nodes and selector are not for a workload`}},
		{"wait maintenance", "condition: {type: GPUHealthy, status: \"False\"}", "maintenance: Drainy", []string{`steps[4].waitFor.maintenance: "Drainy": must be one of Waiting, Draining, Drained, DrainBlocked, Released`}},
		{"wait two things", "condition: {type: GPUHealthy, status: \"False\"}", "maintenance: Drained, taint: {key: a}", []string{`steps[4].waitFor: exactly one of condition, taint, maintenance, workload (got 2)`}},
		{"wait workload kind", "waitFor: {nodes: [gpu-1], condition: {type: GPUHealthy, status: \"False\"}}", "waitFor: {workload: {kind: Pod, name: x}}", []string{`steps[4].waitFor.workload.kind: "Pod": must be one of Deployment, StatefulSet, ReplicaSet, Job, DaemonSet`}},
		{"after unknown step", "within: 2m, after: xid", "within: 2m, after: xid79", []string{`expect[0].ready.after: no step named "xid79"`}},
		{"within missing", "within: 2m, ", "", []string{`expect[0].ready.within: must be greater than zero`}},
		{"explain needs a fault step", "explain: {step: xid}", "explain: {step: step-2}", []string{`expect[5].explain.step: step "step-2" is a notReady step; explain's predictions are taken for fault steps`}},
		{"explain unknown step", "explain: {step: xid}", "explain: {step: nope}", []string{`expect[5].explain.step: no step named "nope"`}},
		{"two kinds", "- pdb: {name: train}", "- pdb: {name: train}\n  noExecute: {atMost: 1}", []string{`expect[1]: exactly one of ready, pdb, evicted, notEvicted, noExecute, explain, guard, maintenance (got pdb, noExecute)`}},
		{"selector required", "notEvicted: {selector: app=web}", "notEvicted: {namespace: x}", []string{`expect[3].notEvicted.selector: required`}},
		{"min only for evicted", "notEvicted: {selector: app=web}", "notEvicted: {selector: app=web, min: 2}", []string{`expect[3].notEvicted.min: only for evicted`}},
		{"atMost negative", "atMost: 1", "atMost: -1", []string{`expect[4].noExecute.atMost: -1 must not be negative`}},
		{"duplicate expectation name", "- pdb: {name: train}\n- evicted", "- pdb: {name: train}\n  name: x\n- name: x\n  evicted", []string{`expect[2].name: "x" names another expectation too`}},
		{"manifest not an object", "metadata: {name: web}", "metadata: {}", []string{`workloads[0].manifest: document 1: Deployment without metadata.name`}},
		{"file and manifest", "- manifest: |", "- file: web.yaml\n  manifest: |", []string{`workloads[0]: exactly one of file and manifest`}},
		{"second document", "- explain: {step: xid}\n", "- explain: {step: xid}\n---\nname: x\n", []string{`more than one YAML document`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(validDrill, tt.old) {
				t.Fatalf("the valid drill has no %q", tt.old)
			}
			in := strings.Replace(validDrill, tt.old, tt.new, 1)
			_, err := drill.Parse([]byte(in), "bad.yaml")
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Parse: %v, want nil", err)
				}
				return
			}
			var fe *drill.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse: %v (%T), want a *drill.FileError", err, err)
			}
			if fe.File != "bad.yaml" || !strings.HasPrefix(err.Error(), "bad.yaml:") {
				t.Errorf("error %q does not name the file", err)
			}
			at := 0
			for _, w := range tt.want {
				i := strings.Index(err.Error()[at:], w)
				if i < 0 {
					t.Fatalf("error %q: want %q (after the errors before it)", err, w)
				}
				at += i + len(w)
			}
		})
	}
}

func TestParseSeveralErrors(t *testing.T) {
	in := validDrill
	for _, r := range [][2]string{
		{"count: 2", "count: -2"},
		{"nodes: [gpu-1], gpuXid", "nodes: [gpu-5, cpu-1], gpuXid"},
		{"within: 2m, ", ""},
	} {
		in = strings.Replace(in, r[0], r[1], 1)
	}
	_, err := drill.Parse([]byte(in), "bad.yaml")
	var fe *drill.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("Parse: %v, want a *FileError", err)
	}
	// cpu-1 is not reported: its pool's count is wrong, and said so.
	want := []drill.FieldErr{
		{Path: "cluster.pools[1].count", Msg: "must be at least 1"},
		{Path: "steps[0].fault.nodes[0]", Msg: `"gpu-5" is not one of the drill's virtual nodes (gpu-1..gpu-4)`},
		{Path: "expect[0].ready.within", Msg: "must be greater than zero"},
	}
	if fmt.Sprint(fe.Errs) != fmt.Sprint(want) {
		t.Errorf("errors:\n got %v\nwant %v", fe.Errs, want)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("web.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\n")
	write("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\nkind: Pod\n")
	withFile := func(f string) string {
		return strings.Replace(validDrill, "- manifest: |\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: web}\n", "- file: "+f+"\n", 1)
	}
	tests := []struct{ name, drill, want string }{
		{"file beside the drill", withFile("web.yaml"), ""},
		{"missing file", withFile("nope.yaml"), "workloads[0].file: open " + filepath.Join(dir, "nope.yaml")},
		{"file with a non-object", withFile("broken.yaml"), "workloads[0].file: broken.yaml: document 2: no apiVersion"},
		{"bad drill", strings.Replace(withFile("web.yaml"), "count: 2", "count: 0", 1), "cluster.pools[1].count: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := write("drill.yaml", tt.drill)
			_, err := drill.Load(p)
			var fe *drill.FileError
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tt.want == "":
			case !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Load: %v, want a *FileError with %q", err, tt.want)
			}
		})
	}
	if _, err := drill.Load(filepath.Join(dir, "absent.yaml")); !errors.As(err, new(*drill.FileError)) {
		t.Errorf("Load of a missing file: %v, want a *FileError", err)
	}
}

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{{2 * time.Minute, `"2m"`}, {90 * time.Second, `"1m30s"`}, {time.Hour, `"1h"`}, {1500 * time.Millisecond, `"1.5s"`}, {time.Hour + time.Second, `"1h0m1s"`}}
	for _, tt := range tests {
		b, err := drill.Duration{Duration: tt.d}.MarshalJSON()
		if err != nil || string(b) != tt.want {
			t.Errorf("MarshalJSON(%s) = %s, %v; want %s", tt.d, b, err, tt.want)
		}
		var back drill.Duration
		if err := back.UnmarshalJSON(b); err != nil || back.Duration != tt.d {
			t.Errorf("UnmarshalJSON(%s) = %v, %v", b, back.Duration, err)
		}
	}
}

// TestParseRealNodes: with realNodes, a fault or drain may name a real
// node; notReady (virtual nodes only) may not; without pools or realNodes
// the drill has no nodes.
func TestParseRealNodes(t *testing.T) {
	real := strings.Replace(validDrill, "cluster:\n", "cluster:\n  realNodes: role=gpu\n", 1)
	tests := []struct{ name, in, want string }{
		{"fault on a real node", strings.Replace(real, "nodes: [gpu-1], gpuXid", "nodes: [worker-7.example], gpuXid", 1), ""},
		{"notReady on a real node", strings.Replace(real, "selector: pool=cpu, for: 30s", "nodes: [worker-7], for: 30s", 1),
			`steps[1].notReady.nodes[0]: "worker-7" is not one of the drill's virtual nodes`},
		{"bad real node name", strings.Replace(real, "nodes: [gpu-1], gpuXid", "nodes: [Worker_7], gpuXid", 1), `steps[0].fault.nodes[0]: "Worker_7"`},
		{"bad realNodes selector", strings.Replace(validDrill, "cluster:\n", "cluster:\n  realNodes: 'role in (gpu'\n", 1), `cluster.realNodes: label selector "role in (gpu"`},
		{"unknown key beside pools", strings.Replace(validDrill, "  pools:\n", "  poolsGone: true\n  pools:\n", 1), `cluster.poolsGone: unknown field`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := drill.Parse([]byte(tt.in), "real.yaml")
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Parse: %v, want %q", err, tt.want)
			}
		})
	}
	s := &drill.Scenario{APIVersion: drill.APIVersion, Kind: drill.Kind, Name: "empty",
		Steps:  []drill.Step{{Coordinator: &drill.CoordinatorStep{Action: "kill"}}},
		Expect: []drill.Expectation{{NoExecute: &drill.NoExecuteExpect{}}}}
	s.SetDefaults()
	if got := fmt.Sprint(s.Validate()); got != "[cluster: no nodes: give pools of virtual nodes (or realNodes, with --kubeconfig)]" {
		t.Errorf("Validate of a drill without nodes: %s", got)
	}
}

// TestParseEveryError: a value of the wrong type hides no other error, of
// decoding or of validation; each error has its full path (list index,
// map key) and its line; the hint to quote a value is that value's, where
// a string belongs, and only there.
func TestParseEveryError(t *testing.T) {
	const in = `apiVersion: selftaint.io/v1alpha1
kind: Drill
name: many
cluster:
  pools:
  - name: cpu
    count: 2
  - name: gpu
    count: two
    labels: {gpu: true, zone: 1, topology.kubernetes.io/zone: "a"}
    capacity: {nvidia.com/gpu: [8]}
steps:
- fault: {nodes: [cpu-1], condition: memory, status: True, for: 1m}
- drain: {nodes: [cpu-2], reason: x, maxParallel: "2", dne: true}
- notReady: {selector: "pool in (", for: 30s}
expect:
- ready: {workload: {kind: Deployment, name: web}}
- noExecute: {atMost: 1.5}
`
	_, err := drill.Parse([]byte(in), "many.yaml")
	var fe *drill.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("Parse: %v, want a *FileError", err)
	}
	want := []drill.FieldErr{
		{Path: "cluster.pools[1].count", Line: 9, Msg: "a string where an int belongs"},
		{Path: "cluster.pools[1].labels[gpu]", Line: 10, Msg: `a bool where a string belongs (YAML reads true as a boolean: quote it, gpu: "true")`},
		{Path: "cluster.pools[1].labels[zone]", Line: 10, Msg: `a number where a string belongs (YAML reads 1 as a number: quote it, zone: "1")`},
		{Path: "cluster.pools[1].capacity[nvidia.com/gpu]", Line: 11, Msg: "a list where a quantity (such as 4, 500m, 16Gi) belongs"},
		{Path: "steps[0].fault.status", Line: 13, Msg: `a bool where a string belongs (YAML reads True as a boolean: quote it, status: "True")`},
		{Path: "steps[1].drain.maxParallel", Line: 14, Msg: "a string where an int belongs"},
		{Path: "steps[1].drain.dne", Line: 14, Msg: "unknown field (did you mean done?)"},
		{Path: "steps[2].notReady.selector", Line: 15, Msg: `label selector "pool in (": unable to parse requirement: found '', expected: ',', ')' or identifier`},
		{Path: "expect[0].ready.within", Line: 17, Msg: "must be greater than zero"},
		{Path: "expect[1].noExecute.atMost", Line: 18, Msg: "a number 1.5 where an int belongs"},
	}
	if !slices.Equal(fe.Errs, want) {
		t.Errorf("errors:\n%s", err)
		for i := range max(len(fe.Errs), len(want)) {
			var g, w drill.FieldErr
			if i < len(fe.Errs) {
				g = fe.Errs[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("error %d: got %+v\n          want %+v", i, g, w)
			}
		}
	}
	if first := strings.SplitN(err.Error(), "\n", 3); len(first) < 3 || first[0] != "many.yaml: 10 errors:" ||
		first[1] != "  many.yaml:9: cluster.pools[1].count: a string where an int belongs" {
		t.Errorf("Error() = %q, want a count, then an error a line, file:line first", err.Error())
	}
}
