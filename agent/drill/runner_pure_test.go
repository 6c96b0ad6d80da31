package drill

import (
	"errors"
	"fmt"
	"strings"
	"testing"

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
