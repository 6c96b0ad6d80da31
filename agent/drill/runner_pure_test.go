package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/taints"
	tdrill "github.com/selftaint/selftaint/taints/drill"
	"github.com/selftaint/selftaint/taints/fleet"
)

func TestVerdict(t *testing.T) {
	pass := []tdrill.Result{{Passed: true}}
	fail := []tdrill.Result{{Passed: true}, {Passed: false}}
	for _, tc := range []struct {
		name    string
		err     error
		results []tdrill.Result
		want    int
	}{
		{"all held", nil, pass, tdrill.ExitPassed},
		{"no expectations", nil, nil, tdrill.ExitPassed},
		{"one breached", nil, fail, tdrill.ExitBreached},
		{"bad file", &BadFileError{Field: "cluster.config", Err: errors.New("x")}, nil, tdrill.ExitBadFile},
		{"a failed step", errors.New("step x: not met"), pass, tdrill.ExitNotRun},
		{"timeout after the steps, all held", errTimeout, pass, tdrill.ExitPassed},
		{"timeout after the steps, one breached", errTimeout, fail, tdrill.ExitBreached},
		{"timeout during a step", fmt.Errorf("%w %w: %w", errTimeout, errUnfinished, errors.New("deadline")), pass, tdrill.ExitNotRun},
	} {
		if got := verdict(tc.err, tc.results); got != tc.want {
			t.Errorf("%s: verdict %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestNoExecuteTaintsFor(t *testing.T) {
	noExec := corev1.Taint{Key: "selftaint.io/memory-pressure", Effect: corev1.TaintEffectNoExecute}
	rules := []taints.Rule{
		{Condition: "SelftaintMemoryPressure", Status: corev1.ConditionTrue, Taint: noExec, Fallback: corev1.TaintEffectNoSchedule},
		{Condition: "SelftaintMemoryPressure", Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoSchedule}},
		{Condition: "SelftaintDiskPressure", Status: corev1.ConditionTrue, TaintOnUnknown: true, Taint: corev1.Taint{Key: "disk", Effect: corev1.TaintEffectNoExecute}},
	}
	for _, tc := range []struct {
		cond corev1.NodeConditionType
		st   corev1.ConditionStatus
		want []string
	}{
		{"SelftaintMemoryPressure", corev1.ConditionTrue, []string{"selftaint.io/memory-pressure"}},
		{"SelftaintMemoryPressure", corev1.ConditionFalse, nil},
		{"SelftaintMemoryPressure", corev1.ConditionUnknown, nil},
		{"SelftaintDiskPressure", corev1.ConditionUnknown, []string{"disk"}},
		{"Unrelated", corev1.ConditionTrue, nil},
	} {
		var got []string
		for _, taint := range NoExecuteTaintsFor(rules, tc.cond, tc.st) {
			got = append(got, taint.Key)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s=%s: got %v, want %v", tc.cond, tc.st, got, tc.want)
		}
	}
}

func TestNodeUnmet(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a-1"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			{Type: fleet.MaintenanceCondition, Status: corev1.ConditionTrue, Reason: "Drained"},
		}},
	}
	for _, tc := range []struct {
		name string
		w    tdrill.WaitStep
		want string // a part of the message; "" met
	}{
		{"condition met", tdrill.WaitStep{Condition: &tdrill.ConditionState{Type: "Ready", Status: "True"}}, ""},
		{"condition status defaults True", tdrill.WaitStep{Condition: &tdrill.ConditionState{Type: "Ready"}}, ""},
		{"condition not met", tdrill.WaitStep{Condition: &tdrill.ConditionState{Type: "Ready", Status: "False"}}, `condition Ready is "True", not False`},
		{"absent condition", tdrill.WaitStep{Condition: &tdrill.ConditionState{Type: "X", Status: "True"}}, `condition X is ""`},
		{"taint present", tdrill.WaitStep{Taint: &tdrill.TaintState{Key: "k", Effect: "NoExecute"}}, ""},
		{"taint any effect", tdrill.WaitStep{Taint: &tdrill.TaintState{Key: "k"}}, ""},
		{"taint other effect", tdrill.WaitStep{Taint: &tdrill.TaintState{Key: "k", Effect: "NoSchedule"}}, "has no taint k:NoSchedule"},
		{"taint still there", tdrill.WaitStep{Taint: &tdrill.TaintState{Key: "k", Absent: true}}, "still has taint k"},
		{"taint gone", tdrill.WaitStep{Taint: &tdrill.TaintState{Key: "gone", Absent: true}}, ""},
		{"maintenance", tdrill.WaitStep{Maintenance: "Drained"}, ""},
		{"maintenance not yet", tdrill.WaitStep{Maintenance: "Released"}, `maintenance "Drained", not Released`},
	} {
		got := nodeUnmet(n, &tc.w)
		if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCheckCluster(t *testing.T) {
	one, none := 1, 0
	kill := []tdrill.Step{{Name: "k", Coordinator: &tdrill.CoordinatorStep{Action: "kill"}}}
	pools := []tdrill.Pool{{Name: "a", Count: 1}}
	for _, tc := range []struct {
		name     string
		s        tdrill.Scenario
		existing bool
		want     string // the field the error names; "" no error
	}{
		{"real nodes embedded", tdrill.Scenario{Cluster: tdrill.Cluster{RealNodes: "x=y"}}, false, "cluster.realNodes"},
		{"real nodes existing", tdrill.Scenario{Cluster: tdrill.Cluster{RealNodes: "x=y"}}, true, ""},
		{"coordinator step, real nodes only", tdrill.Scenario{Cluster: tdrill.Cluster{RealNodes: "x=y"}, Steps: kill}, true, `steps[0].coordinator (step "k")`},
		{"coordinator step, pools", tdrill.Scenario{Cluster: tdrill.Cluster{Pools: pools, Coordinator: tdrill.Coordinator{Replicas: &one}}, Steps: kill}, false, ""},
		{"coordinator step, no replicas", tdrill.Scenario{Cluster: tdrill.Cluster{Pools: pools, Coordinator: tdrill.Coordinator{Replicas: &none}}, Steps: kill}, false, "steps[0].coordinator"},
	} {
		err := checkCluster(&tc.s, tc.existing)
		var bad *BadFileError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.As(err, &bad) || !strings.HasPrefix(bad.Field, tc.want)):
			t.Errorf("%s: got %v, want a BadFileError on %s", tc.name, err, tc.want)
		}
	}
}

func TestDecodeManifests(t *testing.T) {
	objs, err := decodeManifests([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b, namespace: other}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetName() != "a" || objs[1].GetNamespace() != "other" {
		t.Errorf("got %d objects: %v", len(objs), objs)
	}
	for text, want := range map[string]string{
		"kind: Pod\nmetadata: {name: a}\n":                   "document 1: apiVersion and kind are required",
		"apiVersion: v1\nkind: Pod\n---\napiVersion: v1\n":   "metadata.name is required",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: [x]}\n": "",
	} {
		_, err := decodeManifests([]byte(text))
		if want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: got %v, want %q", text, err, want)
		}
	}
}

func TestVirtualQPS(t *testing.T) {
	for _, tc := range []struct {
		nodes     int
		lease     time.Duration
		qps       float32
		burst     int
		whyWanted string
	}{
		{1, 8 * time.Second, 20, 40, "at least 20"},
		{9, 8 * time.Second, 22.5, 45, "2.5 a node with 8 s Leases (renewed every 2 s)"},
		{200, 8 * time.Second, 500, 1000, "scales with the nodes"},
		{200, 40 * time.Second, 420, 840, "a longer Lease is renewed less often"},
		{200, 0, 400, 800, "no Lease: the nodes' other writes"},
	} {
		qps, burst := virtualQPS(tc.nodes, tc.lease)
		if qps != tc.qps || burst != tc.burst {
			t.Errorf("%d nodes, lease %s: got QPS %v burst %d, want %v and %d (%s)", tc.nodes, tc.lease, qps, burst, tc.qps, tc.burst, tc.whyWanted)
		}
	}
}

func TestReadyCount(t *testing.T) {
	node := func(name string, ready corev1.ConditionStatus, taints ...string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		for _, k := range taints {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
		}
		return n
	}
	nodes := []corev1.Node{
		node("a-1", corev1.ConditionTrue),
		node("a-2", corev1.ConditionFalse),
		node("a-3", corev1.ConditionTrue, corev1.TaintNodeNotReady),
		node("a-4", corev1.ConditionTrue, "other"),
		node("other-1", corev1.ConditionTrue),
	}
	ready, registered := readyCount(nodes, []string{"a-1", "a-2", "a-3", "a-4", "a-5"})
	if ready != 2 || registered != 4 {
		t.Errorf("got %d ready of %d registered, want 2 of 4 (a-1 and a-4 ready; a-2 not Ready, a-3 not-ready taint, a-5 absent, other-1 not asked for)", ready, registered)
	}
}

func TestPoolRanges(t *testing.T) {
	got := poolRanges([]tdrill.Pool{{Name: "a-hot", Count: 34}, {Name: "gpu", Count: 1}, {Name: "b", Count: 2}})
	if want := "a-hot-1..a-hot-34, gpu-1, b-1..b-2"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestForEachNode(t *testing.T) {
	nodes := []string{"n-1", "n-2", "n-3", "n-4", "n-5", "n-6", "n-7", "n-8"}
	t.Run("all, at most limit at once", func(t *testing.T) {
		var mu sync.Mutex
		running, most := 0, 0
		seen := map[string]bool{}
		err := forEachNode(t.Context(), nodes, 3, func(_ context.Context, n string) error {
			mu.Lock()
			running++
			most = max(most, running)
			seen[n] = true
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		})
		if err != nil || len(seen) != len(nodes) || most > 3 {
			t.Errorf("got error %v, %d nodes called, %d at once; want no error, %d, at most 3", err, len(seen), most, len(nodes))
		}
	})
	t.Run("the first error, not the cancellation it caused", func(t *testing.T) {
		boom := errors.New("boom on n-2")
		var started sync.Map
		err := forEachNode(t.Context(), nodes, 2, func(ctx context.Context, n string) error {
			started.Store(n, true)
			if n == "n-2" {
				return boom
			}
			<-ctx.Done() // the others wait until the error cancels them
			return fmt.Errorf("on %s: %w", n, ctx.Err())
		})
		if !errors.Is(err, boom) {
			t.Errorf("got %v, want %v", err, boom)
		}
		if _, ok := started.Load("n-8"); ok {
			t.Errorf("n-8 started after the error")
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := forEachNode(ctx, nodes, 2, func(context.Context, string) error { return nil })
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
}

func TestCoalesceLines(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int, line string) Change {
		return Change{Time: t0.Add(time.Duration(ms) * time.Millisecond), Line: line}
	}
	for _, tc := range []struct {
		name string
		in   []Change
		want []Change
	}{
		{"too few to coalesce, kept as they are",
			[]Change{at(0, "node a-1: Ready False"), at(10, "node a-2: Ready False"), at(20, "node a-3: Ready False")},
			[]Change{at(0, "node a-1: Ready False"), at(10, "node a-2: Ready False"), at(20, "node a-3: Ready False")}},
		{"four nodes saying the same: one line at the first's place and time, with the span",
			[]Change{
				at(0, "node a-1: SelftaintMemoryPressure True"),
				at(100, "pod web-1 (a-1): evicted (DeletionByTaintManager)"),
				at(200, "node a-2: SelftaintMemoryPressure True"),
				at(300, "node a-3: SelftaintMemoryPressure True"),
				at(300, "node a-3: taint selftaint.io/memory-pressure:NoExecute on"),
				at(600, "node a-4: SelftaintMemoryPressure True"),
			},
			[]Change{
				at(0, "4 nodes: SelftaintMemoryPressure True (a-1, a-2, a-3, a-4; within 0.6s)"),
				at(100, "pod web-1 (a-1): evicted (DeletionByTaintManager)"),
				at(300, "node a-3: taint selftaint.io/memory-pressure:NoExecute on"),
			}},
		{"at most six names, then how many more",
			[]Change{at(0, "node n-1: Ready Unknown"), at(0, "node n-2: Ready Unknown"), at(0, "node n-3: Ready Unknown"), at(0, "node n-4: Ready Unknown"),
				at(0, "node n-5: Ready Unknown"), at(0, "node n-6: Ready Unknown"), at(0, "node n-7: Ready Unknown"), at(0, "node n-8: Ready Unknown")},
			[]Change{at(0, "8 nodes: Ready Unknown (n-1, n-2, n-3, n-4, n-5, n-6 and 2 more; within 0.0s)")}},
		{"not node lines", []Change{at(0, "guard: SelftaintMemoryPressure tripped in zone a (3 of 3 nodes)"), at(0, "nodes: x")},
			[]Change{at(0, "guard: SelftaintMemoryPressure tripped in zone a (3 of 3 nodes)"), at(0, "nodes: x")}},
		{"empty", nil, []Change{}},
	} {
		got := coalesceLines(tc.in, 4)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, got, tc.want)
		}
	}
}

func TestLineBatcher(t *testing.T) {
	var mu sync.Mutex
	var got []string
	b := &lineBatcher{window: time.Hour, out: func(c Change) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, c.Line)
	}}
	now := time.Now()
	for _, n := range []string{"a-1", "a-2", "a-3", "a-4"} {
		b.add(Change{Time: now, Line: "node " + n + ": Ready False"})
	}
	b.add(Change{Time: now, Line: "Deployment web: 3/4 ready"})
	mu.Lock()
	held := len(got)
	mu.Unlock()
	if held != 0 {
		t.Errorf("%d lines handed on before the window ended, want none", held)
	}
	b.flush() // as stopRecording does
	want := []string{"4 nodes: Ready False (a-1, a-2, a-3, a-4; within 0.0s)", "Deployment web: 3/4 ready"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	b.flush()
	if len(got) != len(want) {
		t.Errorf("a second flush handed on %q", got[len(want):])
	}
}

func TestControllerManagerArgs(t *testing.T) {
	for _, tc := range []struct {
		pools []tdrill.Pool
		want  string
	}{
		{nil, "--node-monitor-grace-period=20s --kube-api-qps=20 --kube-api-burst=40"},
		{[]tdrill.Pool{{Name: "a", Count: 9}}, "--node-monitor-grace-period=20s --kube-api-qps=20 --kube-api-burst=40"},
		{[]tdrill.Pool{{Name: "a", Count: 100}, {Name: "b", Count: 100}}, "--node-monitor-grace-period=20s --kube-api-qps=200 --kube-api-burst=400"},
	} {
		s := &tdrill.Scenario{Cluster: tdrill.Cluster{Pools: tc.pools, NodeMonitorGracePeriod: dur(20 * time.Second)}}
		if got := strings.Join(controllerManagerArgs(s), " "); got != tc.want {
			t.Errorf("pools %v: got %q, want %q", tc.pools, got, tc.want)
		}
	}
}
