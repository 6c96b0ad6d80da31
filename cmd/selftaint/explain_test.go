package main

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

const explainNS = "explain"

var (
	gpuLost  = corev1.Taint{Key: "selftaint.io/gpu-lost", Effect: corev1.TaintEffectNoExecute}
	diskFull = corev1.Taint{Key: "selftaint.io/disk-pressure", Effect: corev1.TaintEffectNoSchedule}
)

// tolerate returns a toleration of key's NoExecute taints (Exists), for secs
// seconds when secs is not nil.
func tolerate(key string, secs *int64) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs}
}

// createPod creates a pod bound to node (no scheduler needed) with these
// tolerations.
func createPod(t *testing.T, c kubernetes.Interface, ns, name, node string, tols ...corev1.Toleration) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Containers:  []corev1.Container{{Name: "c", Image: "example.invalid/none"}},
			Tolerations: tols,
		},
	}
	got, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return got
}

func createNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// explainJSON runs selftaint explain with --output=json and decodes it.
func explainJSON(t *testing.T, args ...string) map[string]taints.Eviction {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"explain"}, append(args, "--output=json")...)
	if code := run(t.Context(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("selftaint %v: exit %d, stderr:\n%s", args, code, stderr.String())
	}
	var evs []taints.Eviction
	if err := json.Unmarshal(stdout.Bytes(), &evs); err != nil {
		t.Fatalf("selftaint %v: decoding %q: %v", args, stdout.String(), err)
	}
	out := map[string]taints.Eviction{}
	for _, e := range evs {
		out[e.PodName()] = e
	}
	return out
}

type verdict struct {
	when     taints.EvictWhen
	after    time.Duration
	because  []string // taints.Format of each
	schedule bool
}

func verdictOf(e taints.Eviction) verdict {
	v := verdict{when: e.When, after: e.After, schedule: e.CanScheduleNew}
	for _, t := range e.Because {
		v.because = append(v.because, taints.Format(t))
	}
	return v
}

// TestExplainAgainstAPIServer runs selftaint explain against a real
// kube-apiserver: it reads the node's taints, lists the pods bound to it
// (and only those) and applies proposed taints.
func TestExplainAgainstAPIServer(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	kubeconfig := "--kubeconfig=" + cp.KubeconfigPath
	taintedAt := time.Now().Add(-3 * time.Second).Truncate(time.Second)
	gpu := gpuLost
	gpu.TimeAdded = &metav1.Time{Time: taintedAt}
	cp.CreateNode(t, "explain-n1", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{gpu, diskFull} })
	cp.CreateNode(t, "explain-n2", nil)
	createNamespace(t, c, explainNS)

	createPod(t, c, explainNS, "plain", "explain-n1")
	twenty := createPod(t, c, explainNS, "twenty", "explain-n1", tolerate(gpuLost.Key, ptr.To[int64](20)))
	createPod(t, c, explainNS, "forever", "explain-n1", tolerate(gpuLost.Key, nil))
	createPod(t, c, explainNS, "mem-ten", "explain-n1", tolerate(gpuLost.Key, nil), tolerate("selftaint.io/memory-pressure", ptr.To[int64](10)))
	createPod(t, c, explainNS, "everything", "explain-n1", corev1.Toleration{Operator: corev1.TolerationOpExists})
	createPod(t, c, explainNS, "elsewhere", "explain-n2")

	const (
		gpuS   = "selftaint.io/gpu-lost:NoExecute"
		memS   = "selftaint.io/memory-pressure=high:NoExecute"
		diskS  = "selftaint.io/disk-pressure:NoSchedule"
		gpuV2S = "selftaint.io/gpu-lost=v2:NoExecute"
		// The API server's TaintNodesByCondition admission adds it to
		// every new Node.
		notReadyS = "node.kubernetes.io/not-ready:NoSchedule"
	)
	tests := []struct {
		name string
		args []string
		// proposedGPU: the gpu-lost taint is proposed, so its clock
		// starts at the run rather than at the node's timeAdded.
		proposedGPU bool
		want        map[string]verdict
	}{
		{
			name: "current taints",
			args: []string{"explain-n1", kubeconfig},
			want: map[string]verdict{
				"explain/plain":      {when: taints.EvictImmediately, because: []string{gpuS}},
				"explain/twenty":     {when: taints.EvictAfter, after: 20 * time.Second, because: []string{gpuS}},
				"explain/forever":    {when: taints.EvictNever, because: []string{gpuS}},
				"explain/mem-ten":    {when: taints.EvictNever, because: []string{gpuS}},
				"explain/everything": {when: taints.EvictNever, because: []string{gpuS}, schedule: true},
			},
		},
		{
			name: "proposed NoExecute taint, NODE after the flags",
			args: []string{"--taint", memS, kubeconfig, "explain-n1"},
			want: map[string]verdict{
				"explain/plain":      {when: taints.EvictImmediately, because: []string{gpuS, memS}},
				"explain/twenty":     {when: taints.EvictImmediately, because: []string{memS}},
				"explain/forever":    {when: taints.EvictImmediately, because: []string{memS}},
				"explain/mem-ten":    {when: taints.EvictAfter, after: 10 * time.Second, because: []string{memS}},
				"explain/everything": {when: taints.EvictNever, because: []string{gpuS, memS}, schedule: true},
			},
		},
		{
			name:        "proposed taint replaces the current one with its key and effect",
			args:        []string{"explain-n1", kubeconfig, "--taint=" + gpuV2S},
			proposedGPU: true,
			want: map[string]verdict{
				"explain/plain":      {when: taints.EvictImmediately, because: []string{gpuV2S}},
				"explain/twenty":     {when: taints.EvictAfter, after: 20 * time.Second, because: []string{gpuV2S}},
				"explain/forever":    {when: taints.EvictNever, because: []string{gpuV2S}},
				"explain/mem-ten":    {when: taints.EvictNever, because: []string{gpuV2S}},
				"explain/everything": {when: taints.EvictNever, because: []string{gpuV2S}, schedule: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			got := explainJSON(t, tt.args...)
			after := time.Now()
			gotV := map[string]verdict{}
			for name, e := range got {
				gotV[name] = verdictOf(e)
			}
			if !reflect.DeepEqual(gotV, tt.want) {
				t.Errorf("verdicts:\n got %+v\nwant %+v", gotV, tt.want)
			}
			// At: the taint-eviction controller starts its clock when it
			// sees the taint (its timeAdded; the run for a proposed one)
			// or the pod on the tainted node, whichever is later. The
			// pods here were created after the node was tainted.
			if e, ok := got["explain/twenty"]; ok && e.When == taints.EvictAfter {
				if tt.proposedGPU {
					if e.At.Before(before.Add(20*time.Second)) || e.At.After(after.Add(20*time.Second)) {
						t.Errorf("twenty: At = %v, want 20s after the run (%v .. %v)", e.At, before, after)
					}
				} else if want := twenty.CreationTimestamp.Add(20 * time.Second); !e.At.Equal(want) {
					t.Errorf("twenty: At = %v, want %v (its creation, after the taint's timeAdded %v, + 20s)", e.At, want, taintedAt)
				}
			}
			if e, ok := got["explain/mem-ten"]; ok && e.When == taints.EvictAfter {
				if e.At.Before(before.Add(10*time.Second)) || e.At.After(after.Add(10*time.Second)) {
					t.Errorf("mem-ten: At = %v, want 10s after the run (%v .. %v)", e.At, before, after)
				}
			}
		})
	}

	t.Run("table", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{"explain", "explain-n1", kubeconfig, "--taint", memS}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
		}
		out := stdout.String()
		for _, want := range []string{
			"Taints considered on node explain-n1: " + gpuS + ", " + diskS + ", " + notReadyS + ", " + memS + " (proposed)",
			"NAMESPACE/POD", "EVICTION", "BECAUSE", "NEW PODS LIKE IT",
			"explain/mem-ten", "after 10s (at ", "tolerates " + memS + " for 10s",
			"does not tolerate " + gpuS + ", " + memS,
			"blocked: " + gpuS + ", " + diskS + ", " + notReadyS + ", " + memS,
			"never", "schedule",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "elsewhere") {
			t.Errorf("table lists a pod of another node:\n%s", out)
		}
		// Soonest first: immediate evictions come before the timed one,
		// which comes before those that stay.
		if i, j := strings.Index(out, "explain/plain"), strings.Index(out, "explain/mem-ten"); i < 0 || j < 0 || i > j {
			t.Errorf("plain (immediately) should come before mem-ten (after 10s):\n%s", out)
		}
		if i, j := strings.Index(out, "explain/mem-ten"), strings.Index(out, "explain/everything"); i < 0 || j < 0 || i > j {
			t.Errorf("mem-ten (after 10s) should come before everything (never):\n%s", out)
		}
	})

	errTests := []struct {
		name string
		args []string
		want []string
	}{
		{"bad effect", []string{"explain-n1", kubeconfig, "--taint=selftaint.io/x=y:NoExecut"}, []string{"--taint", `effect "NoExecut"`}},
		{"bad key", []string{"explain-n1", kubeconfig, "--taint=bad key:NoSchedule"}, []string{"--taint", `key "bad key"`}},
		{"no effect", []string{"explain-n1", kubeconfig, "--taint=selftaint.io/x"}, []string{"--taint", `"selftaint.io/x": no effect`}},
		{"unknown node", []string{"nosuchnode", kubeconfig}, []string{"nosuchnode", "not found"}},
		{"bad output", []string{"explain-n1", kubeconfig, "--output=yaml"}, []string{"--output", `"yaml"`}},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"explain"}, tt.args...), &stdout, &stderr)
			if code != 1 {
				t.Errorf("exit %d, want 1; stderr:\n%s", code, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q lacks %q", stderr.String(), w)
				}
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout %q, want nothing on error", stdout.String())
			}
		})
	}
}

func TestExplainUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"explain"},
		{"explain", "n1", "n2"},
		{"explain", "n1", "--output=json", "n2"},
		{"explain", "--nosuchflag", "n1"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("run %v: exit %d, want 2 (usage); stderr:\n%s", args, code, stderr.String())
		}
	}
}

func TestWithProposed(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	old := metav1.NewTime(now.Add(-time.Hour))
	cur := []corev1.Taint{
		{Key: "a", Effect: corev1.TaintEffectNoExecute, TimeAdded: &old},
		{Key: "a", Effect: corev1.TaintEffectNoSchedule},
		{Key: "b", Effect: corev1.TaintEffectNoSchedule},
	}
	prop := []corev1.Taint{
		{Key: "a", Value: "new", Effect: corev1.TaintEffectNoExecute},
		{Key: "c", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	got, isProp := withProposed(cur, prop, now)
	nowT := metav1.NewTime(now)
	want := []corev1.Taint{
		cur[1], cur[2],
		{Key: "a", Value: "new", Effect: corev1.TaintEffectNoExecute, TimeAdded: &nowT},
		prop[1],
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(isProp, []bool{false, false, true, true}) {
		t.Errorf("withProposed:\n got %+v %v\nwant %+v %v", got, isProp, want, []bool{false, false, true, true})
	}
	if prop[0].TimeAdded != nil {
		t.Errorf("withProposed set TimeAdded on its argument")
	}
}

// TestExplainMatchesTaintEvictionController checks explain's predictions
// against the real taint-eviction controller: a NoExecute taint lands on a
// node, and each pod is deleted when explain said it would be, within 2s.
func TestExplainMatchesTaintEvictionController(t *testing.T) {
	testcp.SkipIfShort(t, "runs kube-controller-manager and waits for evictions")
	t.Parallel()
	cp := testcp.Start(t, testcp.Options{ControllerManager: true})
	c := cp.Client()
	ctx := t.Context()
	kubeconfig := "--kubeconfig=" + cp.KubeconfigPath
	createNamespace(t, c, explainNS)
	waitForTaintEviction(t, cp)
	cp.CreateNode(t, "n1", nil)
	createPod(t, c, explainNS, "plain", "n1")
	createPod(t, c, explainNS, "five", "n1", tolerate(gpuLost.Key, ptr.To[int64](5)))
	createPod(t, c, explainNS, "forever", "n1", tolerate(gpuLost.Key, nil))
	done := createPod(t, c, explainNS, "done", "n1")
	done.Status.Phase = corev1.PodSucceeded
	if _, err := c.CoreV1().Pods(explainNS).UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking pod done Succeeded: %v", err)
	}

	predicted := explainJSON(t, "n1", kubeconfig, "--taint="+taints.Format(gpuLost))
	// The node lifecycle controller writes the Node too: retry on 409.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		gpu := gpuLost
		gpu.TimeAdded = ptr.To(metav1.Now())
		node.Spec.Taints = append(node.Spec.Taints, gpu)
		_, err = c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("tainting n1: %v", err)
	}
	current := explainJSON(t, "n1", kubeconfig)

	// Watch for deletions (a pod without a kubelet stays Terminating, so
	// a deletionTimestamp counts) until well after the last one due.
	deleted := map[string]time.Time{}
	deadline := time.Now().Add(5*time.Second + 5*time.Second)
	for time.Now().Before(deadline) {
		for _, name := range []string{"plain", "five", "forever", "done"} {
			if _, seen := deleted[name]; seen {
				continue
			}
			p, err := c.CoreV1().Pods(explainNS).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				deleted[name] = time.Now()
			case err != nil:
				t.Fatalf("getting pod %s: %v", name, err)
			case p.DeletionTimestamp != nil:
				deleted[name] = time.Now()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, name := range []string{"plain", "five", "forever", "done"} {
		key := explainNS + "/" + name
		for label, pred := range map[string]taints.Eviction{"proposed": predicted[key], "current": current[key]} {
			at, gone := deleted[name]
			switch {
			case pred.When == taints.EvictNever && gone:
				t.Errorf("%s (%s): explain said never, but it was deleted at %v", key, label, at.Format(time.StampMilli))
			case pred.When != taints.EvictNever && !gone:
				t.Errorf("%s (%s): explain said %v at %v, but it was not deleted", key, label, pred.When, pred.At.Format(time.StampMilli))
			case gone && (at.Sub(pred.At) > 2*time.Second || pred.At.Sub(at) > 2*time.Second):
				t.Errorf("%s (%s): deleted at %v, explain said %v (%v)", key, label, at.Format(time.StampMilli), pred.At.Format(time.StampMilli), pred.When)
			}
		}
		if e := current[key]; name == "done" && !e.Finished {
			t.Errorf("%s: Finished = false, want true", key)
		}
	}
	for name, at := range deleted {
		t.Logf("%s: deleted at %s, predicted %s", name, at.Format(time.StampMilli), current[explainNS+"/"+name].At.Format(time.StampMilli))
	}
}

// waitForTaintEviction returns once the taint-eviction controller is
// running: it has evicted a canary pod from a canary node with a NoExecute
// taint. Until then (several seconds after kube-controller-manager reports
// healthy) it would start its clocks late.
func waitForTaintEviction(t *testing.T, cp *testcp.ControlPlane) {
	t.Helper()
	c := cp.Client()
	canary := corev1.Taint{Key: "selftaint.io/canary", Effect: corev1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.Now())}
	cp.CreateNode(t, "canary", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{canary} })
	createPod(t, c, explainNS, "canary", "canary")
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(explainNS).Get(ctx, "canary", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil), nil
	}); err != nil {
		t.Fatalf("the taint-eviction controller never evicted the canary pod: %v", err)
	}
}

// TestExplainStanding: explain's NoExecute place in line and maintenance
// standing come from fleet.Decide, asked as the coordinator asks, against
// a real kube-apiserver. A NotReady node that asked first is not in the
// NoExecute line (Decide grants no NotReady node), so the node that asked
// after it is first; a sick-node drain request whose condition the node no
// longer reports waits first in the maintenance line, saying so; a
// draining node shows its request, its slot and its progress from the
// Lease, and its condition. Requests are dated in 2000 so that the other
// tests' nodes on the shared control plane queue behind them.
func TestExplainStanding(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const ns = "explain-standing"
	createNamespace(t, c, ns)
	kubeconfig := "--kubeconfig=" + cp.KubeconfigPath
	mem := corev1.NodeConditionType("SelftaintMemoryPressure")
	// A NoExecute budget of 0: every node that asks waits.
	cfg := writeFile(t, "coordinator:\n  maxNoExecute: 0\nrules:\n- condition: SelftaintMemoryPressure\n  status: \"True\"\n  taint: {key: selftaint.io/memory-pressure, effect: NoExecute}\n  fallback: NoSchedule\n")
	day := func(d int) time.Time { return time.Date(2000, 1, d, 0, 0, 0, 0, time.UTC) }
	node := func(name string, ready corev1.ConditionStatus, annotations map[string]string, conds ...corev1.NodeCondition) {
		cp.CreateNode(t, name, func(n *corev1.Node) {
			n.Annotations = annotations
			n.Status.Conditions = append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.Now()}}, conds...)
		})
	}
	asks := func(d int) map[string]string {
		return map[string]string{fleet.RequestAnnotation: fleet.Request{Since: day(d), Conditions: []corev1.NodeConditionType{mem}}.Format()}
	}
	memTrue := corev1.NodeCondition{Type: mem, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}
	node("standing-down", corev1.ConditionFalse, asks(2), memTrue)
	node("standing-me", corev1.ConditionTrue, asks(3), memTrue)

	sick := fleet.MaintenanceRequest{Version: fleet.MaintenanceVersion, Reason: "GPU lost", RequestedBy: "selftaint-agent", RequestedAt: day(2), Conditions: []corev1.NodeConditionType{"SelftaintGPULost"}}
	node("standing-sick", corev1.ConditionTrue, map[string]string{fleet.AgentRequestAnnotation: sick.Format()})
	op := fleet.MaintenanceRequest{Version: fleet.MaintenanceVersion, Reason: "kernel upgrade", RequestedBy: "alice", RequestedAt: day(1), Deadline: "2h"}
	opID := fleet.Maintenance{Annotation: fleet.OperatorRequestAnnotation, Request: op}.ID()
	cp.CreateNode(t, "standing-drain", func(n *corev1.Node) {
		n.Annotations = map[string]string{fleet.OperatorRequestAnnotation: op.Format(), fleet.CordonAnnotation: opID}
		n.Spec.Unschedulable = true
		n.Status.Conditions = []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
			{Type: fleet.MaintenanceCondition, Status: corev1.ConditionTrue, Reason: fleet.ReasonDraining, Message: "evicted 3 of 10 pods", LastTransitionTime: metav1.Now()},
		}
	})
	holder, acquired := "standing-drain", metav1.NewMicroTime(time.Now().Add(-time.Minute))
	slot := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: fleet.SlotName(holder), Namespace: ns, Labels: map[string]string{fleet.SlotLabel: "true"}, Annotations: map[string]string{
			fleet.SlotRequestAnnotation: opID, fleet.SlotPhaseAnnotation: fleet.PhaseDraining, fleet.SlotProgressAnnotation: fleet.FormatProgress(fleet.Progress{Evicted: 3, Total: 10}),
		}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &acquired},
	}
	if _, err := c.CoordinationV1().Leases(ns).Create(t.Context(), slot, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the slot Lease: %v", err)
	}

	explain := func(t *testing.T, name string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{"explain", name, kubeconfig, "--config=" + cfg, "--namespace=" + ns}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
		}
		return stdout.String()
	}
	check := func(t *testing.T, out string, want []string, not ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("explain does not say %q:\n%s", w, out)
			}
		}
		for _, w := range not {
			if strings.Contains(out, w) {
				t.Errorf("explain says %q:\n%s", w, out)
			}
		}
	}
	t.Run("NoExecute: the place in line is Decide's", func(t *testing.T) {
		// The old second copy of the order put the NotReady node first and
		// this one 2nd.
		check(t, explain(t, "standing-me"), []string{"no grant: 1st of "}, "Maintenance of")
	})
	t.Run("maintenance: waiting, its trigger cleared", func(t *testing.T) {
		check(t, explain(t, "standing-sick"), []string{
			"Maintenance of standing-sick: a drain takes a slot from the coordinator's maintenance pool (namespace explain-standing).",
			"request: its agent's (selftaint.io/drain-request, id agent/2000-01-02T00:00:00Z)",
			"slot: none",
			"place: 1st of ", "waiting: its condition SelftaintGPULost has cleared: a sick-node drain starts only while the node reports it",
			"condition SelftaintMaintenance: not set",
		})
	})
	t.Run("maintenance: draining", func(t *testing.T) {
		check(t, explain(t, "standing-drain"), []string{
			"request: an operator's (maintenance.selftaint.io/request, id operator/2000-01-01T00:00:00Z): \"kernel upgrade\", by alice",
			"deadline 2h from the drain's start, then release",
			"slot: Draining since", "(request operator/2000-01-01T00:00:00Z), deadline", "evicted 3 of 10 pods",
			"place: holds its slot", "pool: ", "standing-drain", "condition SelftaintMaintenance: True, Draining since",
		}, "given back")
	})
}
