package drill_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/drill"
)

// t0 is every record's t=0; at(s) is s seconds after it.
var t0 = time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func dur(d time.Duration) drill.Duration { return drill.Duration{Duration: d} }

// record is a record from t=0 to end seconds, in namespace "d", with step
// "xid" (a fault on gpu-1) started at 10s.
func record(end float64) *drill.Record {
	return &drill.Record{
		Start: t0, End: at(end), Namespace: "d",
		Steps: []drill.StepRecord{{Name: "xid", Kind: "fault", Started: at(10), Ended: at(10.5), Nodes: []string{"gpu-1"}}},
	}
}

var web = drill.WorkloadRef{Kind: "Deployment", Name: "web"}

func wv(s float64, ready, desired int32) drill.WorkloadVersion {
	return drill.WorkloadVersion{Time: at(s), Ref: drill.WorkloadRef{Kind: "Deployment", Name: "web", Namespace: "d"}, Ready: ready, Desired: desired}
}

// pod is a version of web's pod uid (named web-uid) on node.
func pod(s float64, uid, node string, ready bool) drill.PodVersion {
	return drill.PodVersion{Time: at(s), Namespace: "d", Name: "web-" + uid, UID: uid, Labels: map[string]string{"app": "web"},
		Owner: drill.WorkloadRef{Kind: "Deployment", Name: "web", Namespace: "d"}, Node: node, Ready: ready}
}

func gone(p drill.PodVersion, disruption string, deleted bool) drill.PodVersion {
	p.Ready, p.Terminating, p.Deleted, p.Disruption = false, !deleted, deleted, disruption
	return p
}

type evalCase struct {
	name   string
	expect drill.Expectation
	rec    *drill.Record
	passed bool
	// message holds substrings of the message, measured of the
	// measured figures' JSON.
	message  []string
	measured string
}

func runEval(t *testing.T, tests []evalCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &drill.Scenario{Expect: []drill.Expectation{tt.expect}}
			got := drill.Evaluate(s, tt.rec)
			if len(got) != 1 {
				t.Fatalf("Evaluate gave %d results, want 1", len(got))
			}
			r := got[0]
			if r.Passed != tt.passed {
				t.Errorf("passed = %v, want %v (%s)", r.Passed, tt.passed, r.Message)
			}
			for _, m := range tt.message {
				if !strings.Contains(r.Message, m) {
					t.Errorf("message %q lacks %q", r.Message, m)
				}
			}
			if strings.Contains(r.Message, "\n") {
				t.Errorf("message %q is not one line", r.Message)
			}
			b, err := json.Marshal(r.Measured)
			if err != nil {
				t.Fatal(err)
			}
			if tt.measured != "" && string(b) != tt.measured {
				t.Errorf("measured = %s\n          want %s", b, tt.measured)
			}
		})
	}
}

func TestEvaluateReady(t *testing.T) {
	ready := func(within time.Duration, after string) drill.Expectation {
		return drill.Expectation{Ready: &drill.ReadyExpect{Workload: web, Within: dur(within), After: after}}
	}
	withVersions := func(end float64, vs ...drill.WorkloadVersion) *drill.Record {
		r := record(end)
		r.Workloads = vs
		return r
	}
	// Three pods ready before the step; a deleted at 12 and b made not
	// ready (its node gone) at 13; c (new) ready at 17, d at 25; e is not
	// ready a moment and back in place: not lost. f, from another
	// Deployment, is ignored.
	resched := withVersions(60, wv(0, 3, 3), wv(12, 2, 3), wv(13, 1, 3), wv(17, 2, 3), wv(25, 3, 3))
	other := pod(0, "f", "cpu-1", true)
	other.Owner.Name = "db"
	resched.Pods = []drill.PodVersion{
		pod(0, "a", "gpu-1", true), pod(0, "b", "gpu-1", true), pod(0, "e", "cpu-1", true), other,
		gone(pod(12, "a", "gpu-1", true), "DeletionByTaintManager", false),
		pod(13, "b", "gpu-1", false), pod(14, "e", "cpu-1", false), gone(pod(14, "f", "cpu-1", true), "", true),
		pod(15, "c", "", false), pod(15.5, "e", "cpu-1", true), pod(16, "c", "cpu-1", false), pod(17, "c", "cpu-1", true),
		pod(20, "d", "cpu-2", false), pod(25, "d", "cpu-2", true),
	}
	tests := []evalCase{
		{
			name: "never lost a replica", expect: ready(time.Minute, "xid"),
			rec: withVersions(60, wv(0, 3, 3), wv(11, 3, 3)), passed: true,
			message:  []string{"Deployment/web never lost a ready replica after xid (3/3 ready), expected back within 1m"},
			measured: `{"readyAfterSeconds":0,"ready":3,"desired":3,"lost":0,"rescheduled":0}`,
		},
		{
			name: "back within", expect: ready(time.Minute, "xid"), rec: resched, passed: true,
			message:  []string{"Deployment/web back to 3/3 ready 15.0s after xid, expected within 1m", "2 of 2 lost pods rescheduled, p50 5.0s p99 12.0s"},
			measured: `{"readyAfterSeconds":15,"ready":3,"desired":3,"lost":2,"rescheduled":2,"rescheduleSeconds":[5,12],"rescheduleP50Seconds":5,"rescheduleP99Seconds":12}`,
		},
		{
			name: "back too late", expect: ready(10*time.Second, "xid"), rec: resched,
			message: []string{"back to 3/3 ready 15.0s after xid, expected within 10s"},
		},
		{
			name: "from t=0 without after", expect: ready(time.Minute, ""), rec: resched, passed: true,
			message: []string{"back to 3/3 ready 25.0s after t=0"},
		},
		{
			name: "never back", expect: ready(time.Minute, "xid"),
			rec:     withVersions(300, wv(0, 3, 3), wv(12, 2, 3)),
			message: []string{"Deployment/web not ready after 290.0s (ready 2/3), expected back within 1m after xid"},
		},
		{
			name: "already down when the step starts", expect: ready(time.Minute, "xid"),
			rec: withVersions(60, wv(0, 3, 3), wv(5, 2, 3), wv(30, 3, 3)), passed: true,
			message: []string{"back to 3/3 ready 20.0s after xid"},
		},
		{
			name: "back, then down again to the end", expect: ready(time.Minute, "xid"),
			rec:     withVersions(60, wv(0, 3, 3), wv(12, 2, 3), wv(20, 3, 3), wv(40, 2, 3)),
			message: []string{"back to 3/3 ready 10.0s after xid, expected within 1m, but down again from 40.0s to the end (ready 2/3)"},
		},
		{
			name: "back, down and back again", expect: ready(time.Minute, "xid"), passed: true,
			rec:     withVersions(60, wv(0, 3, 3), wv(12, 2, 3), wv(20, 3, 3), wv(40, 2, 3), wv(45, 3, 3)),
			message: []string{"back to 3/3 ready 10.0s after xid, expected within 1m"},
		},
		{
			name: "last version before the step, down to the end", expect: ready(time.Minute, "xid"),
			rec:     withVersions(60, wv(0, 3, 3), wv(5, 2, 3)),
			message: []string{"not ready after 50.0s (ready 2/3)"},
		},
		{
			name: "step never ran", expect: ready(time.Minute, "drain"), rec: resched,
			message: []string{"step drain never ran"},
		},
		{
			name: "workload never seen", expect: ready(time.Minute, "xid"), rec: record(60),
			message: []string{"Deployment/web was never seen"},
		},
		{
			name: "other namespace is not the drill's", expect: ready(time.Minute, "xid"),
			rec: func() *drill.Record {
				r := withVersions(60, wv(0, 3, 3))
				r.Workloads[0].Ref.Namespace = "other"
				return r
			}(),
			message: []string{"Deployment/web was never seen"},
		},
	}
	runEval(t, tests)
}

func pdbv(s float64, healthy, desired int32, cause, rv string) drill.PDBVersion {
	return drill.PDBVersion{Time: at(s), Namespace: "d", Name: "train", Cause: cause, ResourceVersion: rv,
		Healthy: healthy, Desired: desired, Expected: desired + 1, Known: true}
}

func TestEvaluatePDB(t *testing.T) {
	pdb := func(name string) drill.Expectation { return drill.Expectation{PDB: &drill.PDBExpect{Name: name}} }
	with := func(end float64, vs ...drill.PDBVersion) *drill.Record {
		r := record(end)
		r.PDBs = vs
		return r
	}
	unknown := pdbv(0, 0, 0, "pdb", "1")
	unknown.Known = false
	otherNS := pdbv(20, 0, 3, "pdb", "9")
	otherNS.Namespace = "else"
	tests := []evalCase{
		{
			name: "never below", expect: pdb("train"), passed: true,
			rec:      with(60, unknown, pdbv(1, 4, 3, "pdb", "2"), pdbv(12, 3, 3, "pod d/t-0", "3"), pdbv(20, 4, 3, "pod d/t-4", "4"), otherNS),
			message:  []string{"PDB d/train never below its minimum (fewest healthy 3, desired 3, over 3 versions)"},
			measured: `{"pdbs":["d/train"],"violationSeconds":0,"violations":0,"minHealthy":3}`,
		},
		{
			// A force delete (no eviction) takes a pod while another is
			// down: caught on the pod's version, and again later.
			name: "below twice", expect: pdb("train"),
			rec: with(60, pdbv(1, 3, 3, "pdb", "2"), pdbv(12, 2, 3, "pod d/t-0", "31"), pdbv(13, 1, 3, "pod d/t-1", "32"),
				pdbv(14.5, 3, 3, "pod d/t-5", "33"), pdbv(40, 2, 3, "pod d/t-2", "40"), pdbv(41, 3, 3, "pod d/t-6", "41")),
			message: []string{"PDB below its minimum for 3.5s (2 times), expected never; first: d/train at 12.0s, 2/3 healthy, after pod d/t-0 changed (resourceVersion 31)"},
			measured: `{"pdbs":["d/train"],"violationSeconds":3.5,"violations":2,"minHealthy":1,` +
				`"firstViolation":{"atSeconds":12,"pdb":"d/train","cause":"pod d/t-0","resourceVersion":"31","healthy":2,"desired":3}}`,
		},
		{
			name: "below until the end", expect: pdb(""),
			rec:     with(60, pdbv(50, 2, 3, "pdb", "5")),
			message: []string{"below its minimum for 10.0s (1 time)"},
		},
		{
			name: "below before t=0 and still at t=0", expect: pdb("train"),
			rec:     with(60, pdbv(-5, 2, 3, "pdb", "5"), pdbv(-3, 1, 3, "pdb", "6"), pdbv(4, 3, 3, "pdb", "7")),
			message: []string{"below its minimum for 4.0s (1 time)", "first: d/train at 0.0s, 1/3 healthy"},
		},
		{
			name: "below before t=0 only", expect: pdb("train"), passed: true,
			rec: with(60, pdbv(-5, 2, 3, "pdb", "5"), pdbv(-3, 3, 3, "pdb", "6")),
		},
		{
			name: "never known", expect: pdb("train"), rec: with(60, unknown),
			message: []string{"the disruption controller never reported PDB d/train"},
		},
		{
			name: "not in the record", expect: pdb("train"), rec: with(60, otherNS),
			message: []string{"the disruption controller never reported PDB d/train"},
		},
		{
			name: "no PDB at all", expect: pdb(""), rec: with(60),
			message: []string{"no PodDisruptionBudget seen in namespace d: nothing guards the pods"},
		},
	}
	runEval(t, tests)
}

// tp is a version of a train pod (labels app=train).
func tp(s float64, name, node string) drill.PodVersion {
	return drill.PodVersion{Time: at(s), Namespace: "d", Name: name, UID: "u-" + name, Labels: map[string]string{"app": "train"}, Node: node, Ready: true}
}

func TestEvaluateEvictions(t *testing.T) {
	evicted := func(sel, after string, min int) drill.Expectation {
		return drill.Expectation{Evicted: &drill.EvictExpect{Selector: sel, After: after, Min: min}}
	}
	notEvicted := func(sel, after string) drill.Expectation {
		return drill.Expectation{NotEvicted: &drill.EvictExpect{Selector: sel, After: after}}
	}
	with := func(ps ...drill.PodVersion) *drill.Record {
		r := record(60)
		r.Pods = ps
		return r
	}
	disrupted := tp(11, "t-0", "gpu-1")
	disrupted.Disruption = "DeletionByTaintManager"
	taintEvicted := with(tp(0, "t-0", "gpu-1"), tp(0, "t-1", "gpu-2"), disrupted,
		gone(tp(11.5, "t-0", "gpu-1"), "DeletionByTaintManager", false), gone(tp(12, "t-0", "gpu-1"), "DeletionByTaintManager", true))
	forced := with(tp(0, "t-0", "gpu-1"), tp(0, "t-1", "gpu-2"), gone(tp(20, "t-1", "gpu-2"), "", true))
	early := with(tp(0, "t-0", "gpu-1"), gone(tp(5, "t-0", "gpu-1"), "EvictionByEvictionAPI", true), tp(6, "t-2", "gpu-2"))
	// Three pods on gpu-1 evicted after xid (10s) and replaced at 12s on
	// gpu-2; one replacement is itself evicted at 20s.
	var replaced []drill.PodVersion
	for _, n := range []string{"t-0", "t-1", "t-2"} {
		replaced = append(replaced, tp(0, n, "gpu-1"))
	}
	for _, n := range []string{"t-0", "t-1", "t-2"} {
		replaced = append(replaced, gone(tp(11, n, "gpu-1"), "DeletionByTaintManager", true), tp(12, "r"+n, "gpu-2"))
	}
	replacedOnce := with(replaced...)
	replacedTwice := with(append(replaced, gone(tp(20, "rt-0", "gpu-2"), "DeletionByTaintManager", true))...)
	tests := []evalCase{
		{
			name: "evicted by the taint manager", expect: evicted("app=train", "xid", 1), rec: taintEvicted, passed: true,
			message:  []string{"1 of 2 pods app=train in namespace d evicted after xid (DeletionByTaintManager), expected at least 1"},
			measured: `{"matched":2,"evictions":1,"pods":[{"namespace":"d","name":"t-0","node":"gpu-1","reason":"DeletionByTaintManager","atSeconds":11.5}]}`,
		},
		{
			name: "fewer than min", expect: evicted("app=train", "xid", 2), rec: taintEvicted,
			message: []string{"1 of 2 pods app=train in namespace d evicted after xid (DeletionByTaintManager), expected at least 2"},
		},
		{
			name: "a force delete is no eviction", expect: evicted("app=train", "", 1), rec: forced,
			message:  []string{"0 of 2 pods app=train in namespace d evicted after t=0, expected at least 1; 1 deleted without eviction"},
			measured: `{"matched":2,"evictions":0,"pods":[{"namespace":"d","name":"t-1","node":"gpu-2","reason":"deleted without eviction","atSeconds":20}]}`,
		},
		{
			name: "evicted before the step does not count", expect: evicted("app=train", "xid", 1), rec: early,
			message: []string{"0 of 1 pod app=train in namespace d evicted after xid"},
		},
		{
			name: "replacement pods are not the expectation's", expect: evicted("app=train", "xid", 3), rec: replacedOnce, passed: true,
			message:  []string{"3 of 3 pods app=train in namespace d evicted after xid (DeletionByTaintManager), expected at least 3"},
			measured: `{"matched":3,"evictions":3,"pods":[{"namespace":"d","name":"t-0","node":"gpu-1","reason":"DeletionByTaintManager","atSeconds":11},{"namespace":"d","name":"t-1","node":"gpu-1","reason":"DeletionByTaintManager","atSeconds":11},{"namespace":"d","name":"t-2","node":"gpu-1","reason":"DeletionByTaintManager","atSeconds":11}]}`,
		},
		{
			name: "a replacement evicted too is said, not counted", expect: evicted("app=train", "xid", 4), rec: replacedTwice,
			message: []string{"3 of 3 pods app=train in namespace d evicted after xid (DeletionByTaintManager), expected at least 4; 1 pod created after xid evicted too (not counted)"},
		},
		{
			name: "selector matches nothing", expect: evicted("app=nope", "", 1), rec: taintEvicted,
			message: []string{"0 of 0 pods app=nope"},
		},
		{
			name: "not evicted holds", expect: notEvicted("app=train,!spare", "xid"), rec: early, passed: true,
			message: []string{"none of 1 pod app=train,!spare evicted or deleted after xid"},
		},
		{
			name: "not evicted: evicted", expect: notEvicted("app=train", ""), rec: taintEvicted,
			message: []string{"pod d/t-0 evicted (DeletionByTaintManager) at 11.5s on gpu-1, expected none of app=train evicted"},
		},
		{
			name: "not evicted: force deleted", expect: notEvicted("app=train", ""), rec: forced,
			message: []string{"pod d/t-1 deleted without eviction at 20.0s on gpu-2"},
		},
		{
			name: "not evicted: no pod to keep", expect: notEvicted("app=nope", ""), rec: forced,
			message: []string{"no pod matches app=nope in namespace d: nothing to keep"},
		},
		{
			name: "step never ran", expect: notEvicted("app=train", "drain"), rec: forced,
			message: []string{"step drain never ran"},
		},
	}
	runEval(t, tests)
}

func nv(s float64, name string, keys ...string) drill.NodeVersion {
	return drill.NodeVersion{Time: at(s), Name: name, NoExecute: keys, Ready: "True"}
}

func TestEvaluateNoExecute(t *testing.T) {
	noExec := func(n int, keys ...string) drill.Expectation {
		return drill.Expectation{NoExecute: &drill.NoExecuteExpect{AtMost: n, Keys: keys}}
	}
	storm := record(60)
	storm.Nodes = []drill.NodeVersion{
		nv(-1, "gpu-1"), nv(-1, "gpu-2", "pool"), nv(-1, "gpu-3"),
		nv(12, "gpu-1", "selftaint.io/gpu"), nv(15, "gpu-3", "node.kubernetes.io/unreachable"),
		nv(20, "gpu-1"), nv(21, "gpu-3"),
	}
	tests := []evalCase{
		{
			name: "too many at once", expect: noExec(1), rec: storm,
			message:  []string{"at most 3 nodes with NoExecute at once (gpu-1, gpu-2, gpu-3 at 15.0s), expected at most 1"},
			measured: `{"maxNoExecuteNodes":3,"maxNoExecuteAtSeconds":15,"noExecuteNodes":["gpu-1","gpu-2","gpu-3"]}`,
		},
		{
			name: "only the keys asked", expect: noExec(1, "selftaint.io/gpu", "node.kubernetes.io/unreachable"), rec: storm,
			message: []string{"at most 2 nodes with NoExecute at once (gpu-1, gpu-3 at 15.0s)"},
		},
		{
			name: "within the limit", expect: noExec(2, "selftaint.io/gpu", "node.kubernetes.io/unreachable"), rec: storm, passed: true,
		},
		{
			name: "tainted before t=0 counts at t=0", expect: noExec(0, "pool"), rec: storm,
			message:  []string{"at most 1 node with NoExecute at once (gpu-2 at 0.0s), expected at most 0"},
			measured: `{"maxNoExecuteNodes":1,"maxNoExecuteAtSeconds":0,"noExecuteNodes":["gpu-2"]}`,
		},
		{
			name: "no node seen", expect: noExec(1), rec: record(60),
			message: []string{"no node of the drill was seen"},
		},
	}
	runEval(t, tests)
}

func prediction(pod string, when taints.EvictWhen, after time.Duration) drill.Prediction {
	return drill.Prediction{Step: "xid", Node: "gpu-1", Eviction: taints.Eviction{
		Namespace: "d", Name: pod, When: when, After: after,
		Because: []corev1.Taint{{Key: "selftaint.io/gpu", Effect: corev1.TaintEffectNoExecute}},
	}}
}

func TestEvaluateExplain(t *testing.T) {
	explain := drill.Expectation{Explain: &drill.ExplainExpect{Step: "xid", Tolerance: dur(5 * time.Second)}}
	// gpu-1 is tainted from 12s (an older unrelated NoExecute taint
	// does not count) to 50s.
	base := func(preds ...drill.Prediction) *drill.Record {
		r := record(60)
		r.Nodes = []drill.NodeVersion{nv(0, "gpu-1", "other"), nv(12, "gpu-1", "other", "selftaint.io/gpu"), nv(50, "gpu-1")}
		r.Predictions = preds
		r.Pods = []drill.PodVersion{
			tp(0, "now", "gpu-1"), gone(tp(13, "now", "gpu-1"), "DeletionByTaintManager", false),
			tp(0, "later", "gpu-1"), gone(tp(42, "later", "gpu-1"), "DeletionByTaintManager", false),
			tp(0, "stays", "gpu-1"), tp(0, "forced", "gpu-1"), gone(tp(30, "forced", "gpu-1"), "", true),
		}
		return r
	}
	tests := []evalCase{
		{
			name: "all held", expect: explain, passed: true,
			rec: base(prediction("now", taints.EvictImmediately, 0), prediction("later", taints.EvictAfter, 30*time.Second),
				prediction("stays", taints.EvictNever, 0), prediction("late", taints.EvictAfter, 300*time.Second)),
			message:  []string{"4 of 4 predictions held for step xid (tolerance 5s)"},
			measured: `{"predictions":4,"held":4}`,
		},
		{
			name: "evicted too early", expect: explain,
			rec:      base(prediction("later", taints.EvictAfter, 40*time.Second), prediction("now", taints.EvictImmediately, 0)),
			message:  []string{"1 of 2 predictions held for step xid, expected all; d/later on gpu-1: predicted evicted after 40s, observed evicted (DeletionByTaintManager) 30.0s after the taint"},
			measured: `{"predictions":2,"held":1,"mismatches":[{"pod":"d/later","node":"gpu-1","predicted":"evicted after 40s","observed":"evicted (DeletionByTaintManager) 30.0s after the taint"}]}`,
		},
		{
			name: "predicted to stay, force deleted", expect: explain, rec: base(prediction("forced", taints.EvictNever, 0)),
			message: []string{"d/forced on gpu-1: predicted never evicted, observed deleted without eviction at 30.0s"},
		},
		{
			name: "predicted at once, not evicted", expect: explain, rec: base(prediction("stays", taints.EvictImmediately, 0)),
			message: []string{"predicted evicted at once, observed not evicted (tainted 48.0s before the end)"},
		},
		{
			name: "taint never came", expect: explain,
			rec: func() *drill.Record {
				r := base(prediction("now", taints.EvictImmediately, 0))
				r.Nodes = r.Nodes[:1]
				return r
			}(),
			message: []string{"observed evicted (DeletionByTaintManager) at 13.0s, but its node never carried the NoExecute taint"},
		},
		{
			name: "no prediction", expect: explain, rec: base(),
			message: []string{"no prediction was taken for step xid"},
		},
	}
	runEval(t, tests)
}

func TestEvaluateNamesAndOrder(t *testing.T) {
	s := &drill.Scenario{Expect: []drill.Expectation{
		{Ready: &drill.ReadyExpect{Workload: web, Within: dur(2 * time.Minute), After: "xid"}},
		{Name: "train is guarded", PDB: &drill.PDBExpect{Name: "train"}},
		{PDB: &drill.PDBExpect{}},
		{Evicted: &drill.EvictExpect{Selector: "app=train", After: "xid", Min: 2}},
		{NotEvicted: &drill.EvictExpect{Selector: "app=web"}},
		{NoExecute: &drill.NoExecuteExpect{AtMost: 1}},
		{NoExecute: &drill.NoExecuteExpect{AtMost: 2, Keys: []string{"a", "b"}}},
		{Explain: &drill.ExplainExpect{Step: "xid"}},
	}}
	want := []struct{ name, kind string }{
		{"ready Deployment/web within 2m after xid", "ready"},
		{"train is guarded", "pdb"},
		{"no pdb below its minimum", "pdb"},
		{"evicted app=train after xid (at least 2)", "evicted"},
		{"not evicted app=web", "notEvicted"},
		{"at most 1 NoExecute node", "noExecute"},
		{"at most 2 NoExecute nodes (a, b)", "noExecute"},
		{"explain holds for xid", "explain"},
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
