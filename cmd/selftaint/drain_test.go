package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints/fleet"
)

func TestDrainArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(drainArgs) bool // nil: no check beyond no error
		wantErr string               // "usage": errUsage
	}{
		{name: "a request, flags after the nodes", args: []string{"a", "b", "a", "--reason", "kernel", "--deadline", "30m", "--on-deadline", "force", "--evict-unreplicated", "--delete-emptydir-data"},
			check: func(a drainArgs) bool {
				return slices.Equal(a.nodes, []string{"a", "b"}) && !a.wait && reflect.DeepEqual(a.request, fleet.MaintenanceRequest{
					Version: fleet.MaintenanceVersion, Reason: "kernel", Deadline: "30m", OnDeadline: fleet.OnDeadlineForce, EvictUnreplicated: true, DeleteEmptyDirData: true})
			}},
		{name: "flags before the node, wait with a timeout", args: []string{"--reason=r", "--wait", "--timeout=5m", "a"},
			check: func(a drainArgs) bool { return a.wait && a.timeout == 5*time.Minute && !a.follow }},
		{name: "max-parallel is a rollout that waits", args: []string{"--selector", "pool=gpu", "--max-parallel", "2", "--reason", "r"},
			check: func(a drainArgs) bool { return a.wait && a.maxParallel == 2 && a.selector == "pool=gpu" }},
		{name: "wait alone follows", args: []string{"a", "--wait"}, check: func(a drainArgs) bool { return a.follow && a.wait }},
		{name: "done", args: []string{"--done", "a"}, check: func(a drainArgs) bool { return a.done && slices.Equal(a.nodes, []string{"a"}) }},
		{name: "done by selector", args: []string{"--done", "--selector=pool=gpu"}, check: func(a drainArgs) bool { return a.done }},

		{name: "no nodes", args: []string{"--reason", "r"}, wantErr: "usage"},
		{name: "unknown flag", args: []string{"a", "--reason", "r", "--force"}, wantErr: "usage"},
		{name: "no reason", args: []string{"a"}, wantErr: "--reason is required"},
		{name: "blank reason", args: []string{"a", "--reason", "  "}, wantErr: "--reason must not be blank"},
		{name: "reason too long", args: []string{"a", "--reason", strings.Repeat("x", 300)}, wantErr: "reason: is 300 bytes long"},
		{name: "request flag without a reason", args: []string{"a", "--wait", "--evict-unreplicated"}, wantErr: "--reason is required with --evict-unreplicated"},
		{name: "bad deadline", args: []string{"a", "--reason", "r", "--deadline", "soon"}, wantErr: `--deadline "soon" is not a duration`},
		{name: "bad deadline without a reason", args: []string{"a", "--deadline", "5x"}, wantErr: `--deadline "5x" is not a duration`},
		{name: "negative deadline", args: []string{"a", "--reason", "r", "--deadline=-1m"}, wantErr: `--deadline "-1m" must be positive`},
		{name: "deadline too long", args: []string{"a", "--reason", "r", "--deadline", "1000h"}, wantErr: `--deadline "1000h" is longer than 720h0m0s`},
		{name: "bad on-deadline", args: []string{"a", "--reason", "r", "--on-deadline", "delete"}, wantErr: `--on-deadline "delete" is not release or force`},
		{name: "max-parallel without selector", args: []string{"a", "--reason", "r", "--max-parallel", "2"}, wantErr: "--max-parallel needs --selector"},
		{name: "zero max-parallel", args: []string{"--selector", "x=y", "--reason", "r", "--max-parallel", "0"}, wantErr: "--max-parallel must be at least 1"},
		{name: "nodes and selector", args: []string{"a", "--selector", "x=y", "--reason", "r"}, wantErr: "not both"},
		{name: "bad selector", args: []string{"--selector", "x==y=", "--reason", "r"}, wantErr: "--selector"},
		{name: "timeout without wait", args: []string{"a", "--reason", "r", "--timeout", "1m"}, wantErr: "--timeout needs --wait"},
		{name: "zero timeout", args: []string{"a", "--reason", "r", "--wait", "--timeout", "0s"}, wantErr: "--timeout must be greater than zero"},
		{name: "done with a reason", args: []string{"a", "--done", "--reason", "r"}, wantErr: "--reason does not go with --done"},
		{name: "done with wait", args: []string{"a", "--done", "--wait"}, wantErr: "--wait does not go with --done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			got, err := parseDrain(progStandalone, tt.args, &stderr)
			switch {
			case tt.wantErr == "usage":
				if !errors.Is(err, errUsage) || stderr.Len() == 0 {
					t.Fatalf("got error %v and stderr %q, want a usage error, printed", err, stderr.String())
				}
				return
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatalf("got error %v (stderr %q)", err, stderr.String())
			}
			if tt.check != nil && !tt.check(got) {
				t.Errorf("got %+v", got)
			}
		})
	}
	if code, out, _ := runCLI(t, "drain", "-h"); code != 0 || !strings.Contains(out, fleet.OperatorRequestAnnotation) {
		t.Errorf("selftaint drain -h: exit %d, stdout %q", code, out)
	}
	if code, _, errs := runCLI(t, "drain"); code != 2 || !strings.Contains(errs, "Usage") {
		t.Errorf("selftaint drain: exit %d, stderr %q; want 2 and the usage", code, errs)
	}
	if code, out, _ := runCLI(t, "help"); code != 0 || !strings.Contains(out, "selftaint drain NODE...") {
		t.Errorf("selftaint help does not list drain: %q", out)
	}
}

func TestDrainPickRequester(t *testing.T) {
	tests := []struct{ reviewed, context, want string }{
		{"alice@example.com", "kind-admin", "alice@example.com"},
		{"", "kind-admin", "kind-admin"},
		{"", "", "selftaint drain"},
	}
	for _, tt := range tests {
		if got := pickRequester(tt.reviewed, tt.context); got != tt.want {
			t.Errorf("pickRequester(%q, %q) = %q, want %q", tt.reviewed, tt.context, got, tt.want)
		}
	}
}

// maintenanceNode is a Node carrying request value, at resourceVersion rv,
// with a SelftaintMaintenance condition (status "": none).
func maintenanceNode(rv, value string, st corev1.ConditionStatus, reason string, ltt time.Time) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: rv}}
	if value != "" {
		n.Annotations = map[string]string{fleet.OperatorRequestAnnotation: value}
	}
	if st != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: fleet.MaintenanceCondition, Status: st, Reason: reason, Message: reason + " msg", LastTransitionTime: metav1.NewTime(ltt)}}
	}
	return n
}

// TestDrainJudge follows one request through versions of its node: what is
// shown, and when the wait ends.
func TestDrainJudge(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	before, after := at.Add(-time.Hour), at.Add(time.Minute)
	const v = "the-request"
	type step struct {
		node       *corev1.Node
		wantReason string
		wantEnd    endKind
		changed    bool
	}
	tests := []struct {
		name     string
		baseline *corev1.NodeCondition
		steps    []step
	}{
		{name: "waiting, draining, drained", steps: []step{
			{maintenanceNode("10", v, "", "", time.Time{}), "Requested", endNone, true},
			{maintenanceNode("11", v, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, at), "Waiting", endNone, true},
			{maintenanceNode("12", v, corev1.ConditionTrue, fleet.ReasonDraining, at), "Draining", endNone, true},
			{maintenanceNode("13", v, corev1.ConditionTrue, fleet.ReasonDraining, at), "Draining", endNone, false},
			{maintenanceNode("14", v, corev1.ConditionTrue, fleet.ReasonDrained, at), "Drained", endDrained, true},
			{maintenanceNode("15", "", "", "", time.Time{}), "Drained", endDrained, false}, // ended: stays
		}},
		{name: "an earlier maintenance's conditions are not this one's", steps: []step{
			{maintenanceNode("10", v, corev1.ConditionTrue, fleet.ReasonDrained, before), "Requested", endNone, true},
			{maintenanceNode("11", v, corev1.ConditionFalse, fleet.ReasonDrainBlocked, before), "Requested", endNone, false},
			{maintenanceNode("12", v, corev1.ConditionFalse, fleet.ReasonDrainBlocked, after), "DrainBlocked", endFailed, true},
		}},
		{name: "a version older than one seen is ignored", steps: []step{
			{maintenanceNode("20", v, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, at), "Waiting", endNone, true},
			{maintenanceNode("19", "", "", "", time.Time{}), "Waiting", endNone, false},
		}},
		{name: "blocked now, retrying; then given back at the deadline", steps: []step{
			{maintenanceNode("10", v, corev1.ConditionTrue, fleet.ReasonDrainBlocked, after), "DrainBlocked", endNone, true},
			{maintenanceNode("11", v, corev1.ConditionFalse, fleet.ReasonDrainBlocked, after), "DrainBlocked", endFailed, true},
		}},
		{name: "replacing a maintenance under way: its Released is not this one's end",
			baseline: &corev1.NodeCondition{Type: fleet.MaintenanceCondition, Status: corev1.ConditionTrue, Reason: fleet.ReasonDrained, LastTransitionTime: metav1.NewTime(before)},
			steps: []step{
				{maintenanceNode("10", v, corev1.ConditionTrue, fleet.ReasonDrained, before), "Requested", endNone, true},
				{maintenanceNode("11", v, corev1.ConditionFalse, fleet.ReasonReleased, at), "Requested", endNone, true},
				{maintenanceNode("12", v, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, after), "Waiting", endNone, true},
				{maintenanceNode("13", v, corev1.ConditionFalse, fleet.ReasonReleased, after), "Released", endFailed, true},
			}},
		{name: "waiting or draining that appears after the write is this request's, whatever its transition time",
			baseline: &corev1.NodeCondition{Type: fleet.MaintenanceCondition, Status: corev1.ConditionTrue, Reason: fleet.ReasonMaintenanceWaiting, Message: "Waiting msg", LastTransitionTime: metav1.NewTime(before)},
			steps: []step{
				{maintenanceNode("10", v, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, before), "Requested", endNone, true},
				{maintenanceNode("11", v, corev1.ConditionTrue, fleet.ReasonDraining, before), "Draining", endNone, true},
				{maintenanceNode("12", v, corev1.ConditionTrue, fleet.ReasonDrained, before), "Drained", endDrained, true},
			}},
		{name: "withdrawn", steps: []step{
			{maintenanceNode("10", v, corev1.ConditionTrue, fleet.ReasonDraining, at), "Draining", endNone, true},
			{maintenanceNode("11", "", corev1.ConditionTrue, fleet.ReasonDraining, at), "Withdrawn", endFailed, true},
		}},
		{name: "replaced", steps: []step{{maintenanceNode("10", "another", "", "", time.Time{}), "Replaced", endFailed, true}}},
		{name: "deleted", steps: []step{{nil, "Gone", endFailed, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newNodeWait(v, at, tt.baseline)
			for i, s := range tt.steps {
				changed := w.observe(s.node)
				if w.reason != s.wantReason || w.end != s.wantEnd || changed != s.changed {
					t.Fatalf("step %d: got %s (end %d, changed %v), want %s (end %d, changed %v)", i, w.reason, w.end, changed, s.wantReason, s.wantEnd, s.changed)
				}
			}
		})
	}
}

// TestDrainRolloutLine checks the order and bound of a rollout's requests.
func TestDrainRolloutLine(t *testing.T) {
	r := newRollout([]string{"a", "b", "c", "d", "e"}, 2)
	if got := r.due(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("first due %v, want a b", got)
	}
	r.waits["a"], r.waits["b"] = &nodeWait{}, &nodeWait{}
	if got := r.due(); got != nil {
		t.Fatalf("due with 2 in flight: %v", got)
	}
	r.waits["a"].end = endDrained
	if got := r.due(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("due after a drained: %v, want c", got)
	}
	r.waits["c"] = &nodeWait{end: endFailed, reason: "DrainBlocked", message: "PDB"}
	r.fail("c", "DrainBlocked: PDB")
	if got := r.due(); got != nil || r.finished() {
		t.Fatalf("after a failure: due %v, finished %v; want none, not finished (b in flight)", got, r.finished())
	}
	r.waits["b"].end = endDrained
	err := r.result()
	if !r.finished() || err == nil || !strings.Contains(err.Error(), "c: DrainBlocked: PDB") || !strings.Contains(err.Error(), "not requested: d, e") {
		t.Fatalf("finished %v, result %v", r.finished(), err)
	}
	all := newRollout([]string{"a", "b", "c"}, 0)
	if got := all.due(); len(got) != 3 {
		t.Fatalf("no bound: due %v", got)
	}
}

// TestDrainRolloutOrder: a rollout asks first for the nodes the
// maintenance pool already counts (NotReady, cordoned by someone else),
// then the rest, each in name order; a node selftaint cordoned is not
// someone else's.
func TestDrainRolloutOrder(t *testing.T) {
	node := func(name string, ready, unschedulable bool, cordonedFor string) corev1.Node {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: unschedulable},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
		if cordonedFor != "" {
			n.Annotations = map[string]string{fleet.CordonAnnotation: cordonedFor}
		}
		return n
	}
	got := rolloutOrder([]corev1.Node{
		node("e", true, false, ""),
		node("d", true, true, ""), // cordoned by someone else
		node("c", true, true, "operator/2026-01-01T00:00:00Z"),
		node("b", false, false, ""), // NotReady
		node("a", true, false, ""),
	})
	if want := []string{"b", "d", "a", "c", "e"}; !slices.Equal(got, want) {
		t.Errorf("rolloutOrder = %v, want %v", got, want)
	}
}

// lockedBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startCLI runs a command line in-process in the background; the result
// comes on the channel.
func startCLI(ctx context.Context, args ...string) (*lockedBuffer, *lockedBuffer, <-chan int) {
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, &out, &errb) }()
	return &out, &errb, done
}

// waitOutput waits until b holds a line matching re.
func waitOutput(t *testing.T, b *lockedBuffer, re string) {
	t.Helper()
	rx := regexp.MustCompile(re)
	if err := testcp.Poll(context.Background(), 60*time.Second, 20*time.Millisecond, func() (bool, error) {
		return rx.MatchString(b.String()), nil
	}); err != nil {
		t.Fatalf("waiting for output matching %q: %v; output so far:\n%s", re, err, b.String())
	}
}

// setMaintenance writes node's SelftaintMaintenance condition by
// server-side apply on nodes/status, as a coordinator does.
func setMaintenance(t *testing.T, c kubernetes.Interface, node string, st corev1.ConditionStatus, reason, msg string, ltt time.Time) {
	t.Helper()
	cond := corev1ac.NodeCondition().WithType(fleet.MaintenanceCondition).WithStatus(st).WithReason(reason).WithMessage(msg).
		WithLastTransitionTime(metav1.NewTime(ltt)).WithLastHeartbeatTime(metav1.Now())
	if _, err := c.CoreV1().Nodes().ApplyStatus(context.Background(), corev1ac.Node(node).WithStatus(corev1ac.NodeStatus().WithConditions(cond)),
		metav1.ApplyOptions{FieldManager: "fake-coordinator", Force: true}); err != nil {
		t.Fatalf("writing %s on %s: %v", fleet.MaintenanceCondition, node, err)
	}
}

// renamedUserKubeconfig is a copy of the kubeconfig at path whose user
// (and context's user) is called name: only the API server knows who the
// token is.
func renamedUserKubeconfig(t *testing.T, path, name string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["users"].([]any)[0].(map[string]any)["name"] = name
	cfg["contexts"].([]any)[0].(map[string]any)["context"].(map[string]any)["user"] = name
	b, err = json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// withoutRequest is n's annotations less the operator's request.
func withoutRequest(n *corev1.Node) map[string]string {
	out := maps.Clone(n.Annotations)
	delete(out, fleet.OperatorRequestAnnotation)
	return out
}

// TestDrainRequestOnAPIServer writes, keeps, renews and removes requests
// on a real API server: the exact strict value, who asked as the API
// server says, nothing else touched, and flag errors writing nothing.
func TestDrainRequestOnAPIServer(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	// The kubeconfig's user has a local name; the request must carry the
	// name the API server authenticates the token as.
	kc := "--kubeconfig=" + renamedUserKubeconfig(t, cp.KubeconfigPath, "my-local-name")
	const node = "drain-req"
	cp.CreateNode(t, node, withForeignBits)
	before := nodeNow(t, c, node)

	// Flag errors name the flag and write nothing.
	for _, tt := range []struct {
		args     []string
		flagName string
	}{
		{[]string{"--reason", "r", "--deadline", "soon"}, "--deadline"},
		{[]string{"--reason", "r", "--on-deadline", "drop"}, "--on-deadline"},
		{[]string{"--deadline", "1h"}, "--reason"},
		{[]string{"--reason", "r", "--max-parallel", "2"}, "--max-parallel"},
	} {
		code, _, errs := runCLI(t, append([]string{"drain", node, kc}, tt.args...)...)
		if code != 1 || !strings.Contains(errs, tt.flagName) {
			t.Errorf("drain %v: exit %d, stderr %q; want 1 naming %s", tt.args, code, errs, tt.flagName)
		}
	}
	if n := nodeNow(t, c, node); n.ResourceVersion != before.ResourceVersion {
		t.Fatalf("a refused command line wrote the node: %v", n.Annotations)
	}

	began := time.Now()
	code, out, errs := runCLI(t, "drain", node, "--reason", "kernel 6.12", "--deadline", "45m", "--on-deadline", "force", "--delete-emptydir-data", kc)
	if code != 0 {
		t.Fatalf("drain: exit %d, stderr %q", code, errs)
	}
	n := nodeNow(t, c, node)
	value := n.Annotations[fleet.OperatorRequestAnnotation]
	req, err := fleet.ParseMaintenanceRequest(fleet.OperatorRequestAnnotation, value)
	if err != nil {
		t.Fatalf("the request %q does not parse strictly: %v", value, err)
	}
	want := fleet.MaintenanceRequest{Version: fleet.MaintenanceVersion, Reason: "kernel 6.12", RequestedBy: testcp.AdminUser,
		RequestedAt: req.RequestedAt, Deadline: "45m", OnDeadline: fleet.OnDeadlineForce, DeleteEmptyDirData: true}
	if !reflect.DeepEqual(req, want) || value != want.Format() {
		t.Errorf("request %q\n= %+v\nwant %+v (formatted %q)", value, req, want, want.Format())
	}
	if lo, hi := began.Truncate(time.Second), time.Now(); req.RequestedAt.Before(lo) || req.RequestedAt.After(hi) {
		t.Errorf("requestedAt %s not within [%s, %s]", req.RequestedAt, lo, hi)
	}
	if !reflect.DeepEqual(withoutRequest(n), before.Annotations) || !reflect.DeepEqual(n.Spec, before.Spec) || !reflect.DeepEqual(n.Labels, before.Labels) {
		t.Errorf("drain touched more than its annotation:\nbefore %v %+v\nafter  %v %+v", before.Annotations, before.Spec, n.Annotations, n.Spec)
	}
	if !strings.Contains(out, "requested maintenance (operator/"+req.RequestedAt.UTC().Format(time.RFC3339)+") by "+testcp.AdminUser) || !strings.Contains(out, "selftaint drain --wait "+node) {
		t.Errorf("stdout %q does not say what was requested and how to follow it", out)
	}

	// A second drain keeps the first request and its place in line.
	time.Sleep(1100 * time.Millisecond) // a new request would have a later requestedAt
	code, out, errs = runCLI(t, "drain", node, "--reason", "again", kc)
	if code != 0 || !strings.Contains(out, "already requested, left as it is, keeping its place in line") || !strings.Contains(out, "kernel 6.12") {
		t.Errorf("second drain: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if got := nodeNow(t, c, node).Annotations[fleet.OperatorRequestAnnotation]; got != value {
		t.Errorf("second drain changed the request: %q, was %q", got, value)
	}
	// --renew replaces it, later in line.
	code, out, errs = runCLI(t, "drain", node, "--reason", "again", "--renew", kc)
	renewed, err := fleet.ParseMaintenanceRequest(fleet.OperatorRequestAnnotation, nodeNow(t, c, node).Annotations[fleet.OperatorRequestAnnotation])
	if code != 0 || err != nil || renewed.Reason != "again" || !renewed.RequestedAt.After(req.RequestedAt) || !strings.Contains(out, "it replaces the request made") {
		t.Errorf("--renew: exit %d, stdout %q, stderr %q; request %+v, %v", code, out, errs, renewed, err)
	}

	// --done removes the operator's request and nothing else: the agent's
	// request stays, and the cordon is the coordinator's to undo.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"agent's","%s":"operator/x"}},"spec":{"unschedulable":true}}`, fleet.AgentRequestAnnotation, fleet.CordonAnnotation)
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	mid := nodeNow(t, c, node)
	code, out, errs = runCLI(t, "drain", "--done", node, kc)
	if code != 0 || !strings.Contains(out, "removed its maintenance request") || !strings.Contains(out, "uncordons it (selftaint cordoned it, for operator/x)") ||
		!strings.Contains(out, "its agent's drain request") {
		t.Errorf("--done: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	after := nodeNow(t, c, node)
	if _, ok := after.Annotations[fleet.OperatorRequestAnnotation]; ok || !reflect.DeepEqual(after.Annotations, withoutRequest(mid)) || !reflect.DeepEqual(after.Spec, mid.Spec) {
		t.Errorf("--done touched more than the operator's request:\nbefore %v %+v\nafter  %v %+v", mid.Annotations, mid.Spec, after.Annotations, after.Spec)
	}
	if code, out, _ := runCLI(t, "drain", "--done", node, kc); code != 0 || !strings.Contains(out, "no operator maintenance request to remove") {
		t.Errorf("--done again: exit %d, stdout %q", code, out)
	}
	if code, _, errs := runCLI(t, "drain", "nosuch", "--reason", "r", kc); code != 1 || !strings.Contains(errs, "reading node nosuch") {
		t.Errorf("unknown node: exit %d, stderr %q", code, errs)
	}
}

// conflictingNodes is a NodeInterface whose first Patch of each node
// finds it changed by someone else since it was read.
type conflictingNodes struct {
	typedcorev1.NodeInterface
	other   kubernetes.Interface
	patches atomic.Int32
}

func (c *conflictingNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Node, error) {
	if c.patches.Add(1) == 1 {
		if _, err := c.other.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"example.com/meanwhile":"x"}}}`), metav1.PatchOptions{}); err != nil {
			return nil, err
		}
	}
	return c.NodeInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// TestDrainConflictRetried: a node changed between the read and the write
// makes the API server refuse the write (409); drain reads it again and
// writes, keeping what the other writer wrote.
func TestDrainConflictRetried(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "drain-conflict"
	cp.CreateNode(t, node, nil)
	for _, done := range []bool{false, true} {
		nodes := &conflictingNodes{NodeInterface: c.CoreV1().Nodes(), other: c}
		var out bytes.Buffer
		d := &drainer{nodes: nodes, out: &out, now: time.Now, by: "ci"}
		a := drainArgs{nodes: []string{node}, done: done, request: fleet.MaintenanceRequest{Version: fleet.MaintenanceVersion, Reason: "r"}}
		if err := d.run(context.Background(), a); err != nil {
			t.Fatalf("done=%v: %v", done, err)
		}
		n := nodeNow(t, c, node)
		_, has := n.Annotations[fleet.OperatorRequestAnnotation]
		if nodes.patches.Load() != 2 || has == done || n.Labels["example.com/meanwhile"] != "x" {
			t.Errorf("done=%v: %d patches (want 2: one refused), request there %v, labels %v", done, nodes.patches.Load(), has, n.Labels)
		}
		if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(`{"metadata":{"labels":{"example.com/meanwhile":null}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDrainWait follows drains through conditions a fake coordinator
// writes: progress lines as they change, exit 0 once Drained, 1 with the
// blocking PDB named once DrainBlocked, and an earlier maintenance's
// condition never taken for this one.
func TestDrainWait(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	kc := "--kubeconfig=" + cp.KubeconfigPath
	ctx := t.Context()
	for _, n := range []string{"drain-wait-ok", "drain-wait-blocked", "drain-wait-stale"} {
		cp.CreateNode(t, n, nil)
	}
	hasRequest := func(n *corev1.Node) bool { _, ok := n.Annotations[fleet.OperatorRequestAnnotation]; return ok }

	// Left from an earlier maintenance: released an hour ago.
	setMaintenance(t, c, "drain-wait-ok", corev1.ConditionFalse, fleet.ReasonReleased, "request withdrawn", time.Now().Add(-time.Hour))
	out, errs, done := startCLI(ctx, "drain", "drain-wait-ok", "--reason", "firmware", "--wait", "--timeout", "2m", kc)
	if _, _, err := testcp.WaitNode(ctx, c, "drain-wait-ok", 30*time.Second, hasRequest); err != nil {
		t.Fatalf("waiting for the request: %v", err)
	}
	waitOutput(t, out, `(?m)^drain-wait-ok  Requested  waiting for the coordinator`)
	setMaintenance(t, c, "drain-wait-ok", corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, "2nd in line of 3: the pool is full", time.Now())
	waitOutput(t, out, `(?m)^drain-wait-ok  Waiting    2nd in line of 3: the pool is full$`)
	setMaintenance(t, c, "drain-wait-ok", corev1.ConditionTrue, fleet.ReasonDraining, "evicted 3 of 7 pods; remaining: ns/a, ns/b", time.Now())
	waitOutput(t, out, `(?m)^drain-wait-ok  Draining   evicted 3 of 7 pods; remaining: ns/a, ns/b$`)
	setMaintenance(t, c, "drain-wait-ok", corev1.ConditionTrue, fleet.ReasonDrained, "evicted 7 of 7 pods", time.Now())
	if code := waitExit(t, done); code != 0 {
		t.Fatalf("exit %d, want 0; stdout:\n%s\nstderr: %s", code, out, errs)
	}
	if !strings.Contains(out.String(), "drain-wait-ok  Drained    evicted 7 of 7 pods") || !strings.Contains(out.String(), "every node is Drained (1)") {
		t.Errorf("stdout:\n%s", out)
	}
	if strings.Count(out.String(), "Draining") != 1 {
		t.Errorf("a line printed when nothing changed:\n%s", out)
	}
	// --wait alone follows the request made: Drained already.
	if code, out, errs := runCLI(t, "drain", "drain-wait-ok", "--wait", kc); code != 0 || !strings.Contains(out, "following its request") || !strings.Contains(out, "Drained") {
		t.Errorf("follow a drained node: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	out, errs, done = startCLI(ctx, "drain", "drain-wait-blocked", "--reason", "firmware", "--wait", kc)
	if _, _, err := testcp.WaitNode(ctx, c, "drain-wait-blocked", 30*time.Second, hasRequest); err != nil {
		t.Fatalf("waiting for the request: %v", err)
	}
	setMaintenance(t, c, "drain-wait-blocked", corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, "1st in line", time.Now())
	waitOutput(t, out, `Waiting    1st in line`)
	setMaintenance(t, c, "drain-wait-blocked", corev1.ConditionTrue, fleet.ReasonDraining, "evicted 1 of 2 pods", time.Now())
	waitOutput(t, out, `Draining   evicted 1 of 2 pods`)
	const blocked = "evicted 1 of 2 pods; refused: db/db-0 by PodDisruptionBudget db/db-pdb (disruptionsAllowed 0: needs 2 healthy, has 2); given back at the deadline"
	setMaintenance(t, c, "drain-wait-blocked", corev1.ConditionFalse, fleet.ReasonDrainBlocked, blocked, time.Now())
	if code := waitExit(t, done); code != 1 || !strings.Contains(errs.String(), "drain-wait-blocked: DrainBlocked: "+blocked) {
		t.Fatalf("blocked: exit %d, want 1 naming the PDB; stdout:\n%s\nstderr: %s", code, out, errs)
	}

	// An earlier maintenance left True Drained: not this request's.
	setMaintenance(t, c, "drain-wait-stale", corev1.ConditionTrue, fleet.ReasonDrained, "evicted 4 of 4 pods", time.Now().Add(-time.Hour))
	code, stdout, stderr := runCLI(t, "drain", "drain-wait-stale", "--reason", "firmware", "--wait", "--timeout", "3s", kc)
	if code != 1 || !strings.Contains(stderr, "--timeout 3s passed with 1 nodes not Drained") || !strings.Contains(stderr, "drain-wait-stale: Requested: waiting for the coordinator") {
		t.Errorf("stale Drained: exit %d, want 1 at the timeout; stdout %q, stderr %q", code, stdout, stderr)
	}
}

// waitExit waits for a command started by startCLI to end.
func waitExit(t *testing.T, done <-chan int) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(2 * time.Minute):
		t.Fatal("the command did not end")
		return -1
	}
}

// TestDrainRollout runs a rollout of 5 nodes with --max-parallel 2 against
// a fake coordinator that drains each requested node after a moment: a
// watch on the nodes never sees more than 2 requested and not Drained,
// they are requested in name order with requestedAt not decreasing, and
// all end Drained.
func TestDrainRollout(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	ctx := t.Context()
	const sel = "selftaint-test/rollout=drain"
	var names []string
	for i := range 5 {
		name := fmt.Sprintf("drain-roll-%d", 4-i) // created out of order
		names = append(names, name)
		cp.CreateNode(t, name, func(n *corev1.Node) { n.Labels = map[string]string{"selftaint-test/rollout": "drain"} })
	}
	slices.Sort(names)
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	checked := make(chan rolloutSeen, 1)
	go checkRollout(w.ResultChan(), len(names), checked)

	coordCtx, stopCoord := context.WithCancel(ctx)
	defer stopCoord()
	coordDone := make(chan error, 1)
	go func() { coordDone <- fakeDrainCoordinator(coordCtx, c, sel) }()

	code, out, errs := runCLI(t, "drain", "--selector", sel, "--max-parallel", "2", "--reason", "os upgrade", "--timeout", "2m", "--kubeconfig="+cp.KubeconfigPath)
	stopCoord()
	if err := <-coordDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("fake coordinator: %v", err)
	}
	if code != 0 {
		t.Fatalf("rollout: exit %d\nstdout:\n%s\nstderr: %s", code, out, errs)
	}
	var seen rolloutSeen
	select {
	case seen = <-checked:
	case <-time.After(time.Minute):
		t.Fatal("the watch did not see every node Drained")
	}
	t.Logf("rollout output:\n%s", out)
	if seen.maxInFlight > 2 {
		t.Errorf("%d nodes requested and not Drained at once, want at most 2", seen.maxInFlight)
	}
	// The bound is used: the second node is requested before the first
	// is Drained.
	if second, drained := strings.Index(out, "drain-roll-1  requested"), strings.Index(out, "Drained"); second < 0 || second > drained {
		t.Errorf("the second node was not requested before the first drained:\n%s", out)
	}
	if !slices.Equal(seen.order, names) {
		t.Errorf("requested in the order %v, want %v", seen.order, names)
	}
	if !slices.IsSortedFunc(seen.requestedAt, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Errorf("requestedAt decreases along the rollout: %v", seen.requestedAt)
	}

	// --done by the same selector ends them all.
	kc := "--kubeconfig=" + cp.KubeconfigPath
	if code, out, errs := runCLI(t, "drain", "--done", "--selector", sel, kc); code != 0 || strings.Count(out, "removed its maintenance request") != len(names) {
		t.Errorf("--done --selector: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, name := range names {
		if _, ok := nodeNow(t, c, name).Annotations[fleet.OperatorRequestAnnotation]; ok {
			t.Errorf("--done --selector left the request on %s", name)
		}
	}
	if code, out, _ := runCLI(t, "drain", "--done", "--selector", sel, kc); code != 0 || !strings.Contains(out, "no node matching") {
		t.Errorf("--done --selector again: exit %d, stdout %q", code, out)
	}
}

func TestDrainDoneOutlook(t *testing.T) {
	node := func(ann map[string]string, cordoned bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: ann}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	}
	tests := []struct {
		name string
		n    *corev1.Node
		want string
	}{
		{"cordoned by selftaint", node(map[string]string{fleet.CordonAnnotation: "operator/t"}, true), "uncordons it (selftaint cordoned it, for operator/t)"},
		{"cordoned by someone else", node(nil, true), "stays cordoned, as selftaint did not cordon it (kubectl uncordon n"},
		{"not cordoned", node(nil, false), "(the node is not cordoned)"},
	}
	for _, tt := range tests {
		if got := doneOutlook(tt.n); !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q does not say %q", tt.name, got, tt.want)
		}
	}
	if got := agentNote(node(map[string]string{fleet.AgentRequestAnnotation: "x"}, false)); !strings.Contains(got, "stays, and the coordinator serves it") {
		t.Errorf("agentNote = %q", got)
	}
}

// rolloutSeen is what a watch saw of a rollout.
type rolloutSeen struct {
	maxInFlight int
	order       []string    // nodes in the order their request appeared
	requestedAt []time.Time // in that order
}

// checkRollout follows every version of the rollout's nodes until all n
// are Drained, counting those requested and not Drained.
func checkRollout(events <-chan watch.Event, n int, result chan<- rolloutSeen) {
	var seen rolloutSeen
	inFlight, drained := map[string]bool{}, map[string]bool{}
	for ev := range events {
		node, ok := ev.Object.(*corev1.Node)
		if !ok {
			continue
		}
		raw, requested := node.Annotations[fleet.OperatorRequestAnnotation]
		if requested && !slices.Contains(seen.order, node.Name) {
			req, _ := fleet.ParseMaintenanceRequest(fleet.OperatorRequestAnnotation, raw)
			seen.order, seen.requestedAt = append(seen.order, node.Name), append(seen.requestedAt, req.RequestedAt)
		}
		c := maintenanceCondition(node)
		drained[node.Name] = c != nil && c.Status == corev1.ConditionTrue && c.Reason == fleet.ReasonDrained
		inFlight[node.Name] = requested && !drained[node.Name]
		count := 0
		for _, f := range inFlight {
			if f {
				count++
			}
		}
		seen.maxInFlight = max(seen.maxInFlight, count)
		all := 0
		for _, d := range drained {
			if d {
				all++
			}
		}
		if all == n {
			result <- seen
			return
		}
	}
}

// fakeDrainCoordinator plays the coordinator for the nodes sel matches:
// a node with an operator request goes Waiting, then Draining, then
// Drained, a step every 100 ms.
func fakeDrainCoordinator(ctx context.Context, c kubernetes.Interface, sel string) error {
	next := map[string]string{"": fleet.ReasonMaintenanceWaiting, fleet.ReasonMaintenanceWaiting: fleet.ReasonDraining, fleet.ReasonDraining: fleet.ReasonDrained}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		for _, n := range list.Items {
			if _, ok := n.Annotations[fleet.OperatorRequestAnnotation]; !ok {
				continue
			}
			cur := ""
			if cond := maintenanceCondition(&n); cond != nil {
				cur = cond.Reason
			}
			reason, ok := next[cur]
			if !ok {
				continue
			}
			cond := corev1ac.NodeCondition().WithType(fleet.MaintenanceCondition).WithStatus(corev1.ConditionTrue).WithReason(reason).
				WithMessage("fake " + reason).WithLastTransitionTime(metav1.Now()).WithLastHeartbeatTime(metav1.Now())
			if _, err := c.CoreV1().Nodes().ApplyStatus(ctx, corev1ac.Node(n.Name).WithStatus(corev1ac.NodeStatus().WithConditions(cond)),
				metav1.ApplyOptions{FieldManager: "fake-coordinator", Force: true}); err != nil {
				return err
			}
		}
	}
}

var _ io.Writer = (*lockedBuffer)(nil)
