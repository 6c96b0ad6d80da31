package drill

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/agent/testcp"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// recordWait is how long the recorder test waits for anything: generous,
// for a loaded two-core machine.
const recordWait = 60 * time.Second

// lineLog collects the live view's lines.
type lineLog struct {
	mu    sync.Mutex // guards lines
	lines []string
}

func (l *lineLog) add(c Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, c.Line)
}

func (l *lineLog) has(line string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.lines, line)
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestRecorder is the recorder on a real control plane (with the
// disruption controller): a watch the API server refuses fails
// StartRecorder at once; a force delete (grace 0) that takes a PDB of
// minAvailable 2 from 2 healthy pods to 1 is a recorded PDB version with
// Healthy 1 < Desired 2, caused by the pod's delete, whatever the
// disruption controller writes after; an eviction through the Eviction API
// shows as the pod's Disruption EvictionByEvictionAPI; a Deployment's pod
// is owned by the Deployment, not its ReplicaSet; only the drill's node is
// recorded.
func TestRecorder(t *testing.T) {
	cp := testcp.Start(t, testcp.Options{ControllerManager: true})
	c := cp.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const ns, nodeName = "drill-rec", "rec-node-1"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	cp.CreateNode(t, nodeName, nil)
	cp.CreateNode(t, "rec-not-ours", nil)

	recordRefused(ctx, t, cp, ns)

	var log lineLog
	rec, err := StartRecorder(ctx, c, Scope{Namespaces: []string{ns}, Nodes: func(n string) bool { return n == nodeName }}, clock.RealClock{}, log.add)
	if err != nil {
		t.Fatalf("StartRecorder: %v", err)
	}
	defer rec.Stop()

	recordForceDelete(ctx, t, c, rec, ns, nodeName)
	recordEviction(ctx, t, c, rec, ns, nodeName)
	recordDeployment(ctx, t, c, rec, ns)

	for _, n := range rec.Record().Nodes {
		if n.Name != nodeName {
			t.Errorf("recorded node %s, outside the drill's scope", n.Name)
		}
	}
	if _, ok := rec.Node(nodeName); !ok {
		t.Errorf("Node(%s) not recorded", nodeName)
	}

	rec.Stop() // delivers every pending line
	for _, want := range []string{
		"pod a (" + nodeName + "): deleted without eviction",
		"PDB app: 1 healthy, below its minimum 2",
		"pod c (" + nodeName + "): evicted (EvictionByEvictionAPI)",
		"pod d: ready on " + nodeName,
	} {
		if !log.has(want) {
			t.Errorf("live view lacks %q; it said:\n%s", want, log.String())
		}
	}
}

// recordRefused: a user that may not list pods makes StartRecorder fail
// with the API server's refusal, not wait for a cache that never syncs.
func recordRefused(ctx context.Context, t *testing.T, cp *testcp.ControlPlane, ns string) {
	t.Helper()
	cfg := cp.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "drill-nobody"}
	nobody, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for drill-nobody: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, recordWait)
	defer cancel()
	rec, err := StartRecorder(rctx, nobody, Scope{Namespaces: []string{ns}}, clock.RealClock{}, nil)
	if err == nil {
		rec.Stop()
		t.Fatalf("StartRecorder as a user with no rights = nil error, want forbidden")
	}
	if !apierrors.IsForbidden(err) || rctx.Err() != nil {
		t.Fatalf("StartRecorder as a user with no rights = %v, want a forbidden error before the deadline", err)
	}
}

// recordForceDelete: two ready pods under a PDB of minAvailable 2, one
// force-deleted: a recorded version with Healthy 1 < Desired 2, caused by
// the pod's delete.
func recordForceDelete(ctx context.Context, t *testing.T, c kubernetes.Interface, rec *Recorder, ns, nodeName string) {
	t.Helper()
	for _, name := range []string{"a", "b"} {
		readyPod(ctx, t, c, ns, name, nodeName)
	}
	minTwo := intstr.FromInt32(2)
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minTwo,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "rec"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PDB: %v", err)
	}
	waitRecorder(ctx, t, rec, "the PDB known with 2 healthy of 2 desired", func() bool {
		v, ok := rec.PDB(ns, "app")
		return ok && v.Known && v.Healthy == 2 && v.Desired == 2
	})

	// A force delete: no eviction, no grace, the disruption controller
	// not asked.
	if err := c.CoreV1().Pods(ns).Delete(ctx, "a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatalf("force-deleting pod a: %v", err)
	}
	waitRecorder(ctx, t, rec, "pod a gone", func() bool {
		_, ok := rec.Pod(ns, "a")
		return !ok
	})
	var below *tdrill.PDBVersion
	for _, v := range rec.Record().PDBs {
		if v.Name == "app" && v.Cause == "pod "+ns+"/a" {
			below = &v
		}
	}
	if below == nil || !below.Known || below.Healthy != 1 || below.Desired != 2 {
		t.Fatalf("PDB version caused by pod a's delete = %+v, want Known, Healthy 1, Desired 2; all: %+v", below, rec.Record().PDBs)
	}

}

// recordEviction: two more ready pods, one evicted through the Eviction
// API once the disruption controller allows it.
func recordEviction(ctx context.Context, t *testing.T, c kubernetes.Interface, rec *Recorder, ns, nodeName string) {
	t.Helper()
	for _, name := range []string{"c", "d"} {
		readyPod(ctx, t, c, ns, name, nodeName)
	}
	var evictErr error
	if err := testcp.Poll(ctx, recordWait, 100*time.Millisecond, func() (bool, error) {
		evictErr = c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns}})
		return evictErr == nil, evictErr
	}); err != nil {
		t.Fatalf("evicting pod c: %v", err)
	}
	waitRecorder(ctx, t, rec, "pod c evicted", func() bool {
		v, ok := rec.Pod(ns, "c")
		return ok && v.Disruption == "EvictionByEvictionAPI" && v.Terminating
	})

}

// recordDeployment: a Deployment's pod (pending: no scheduler) belongs to
// the Deployment, not its ReplicaSet.
func recordDeployment(ctx context.Context, t *testing.T, c kubernetes.Interface, rec *Recorder, ns string) {
	t.Helper()
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment: %v", err)
	}
	web := tdrill.WorkloadRef{Kind: "Deployment", Name: "web", Namespace: ns}
	waitRecorder(ctx, t, rec, "a pod of Deployment web", func() bool {
		for _, p := range rec.Record().Pods {
			if p.Owner == web {
				return true
			}
		}
		return false
	})
	for _, ref := range []tdrill.WorkloadRef{web, {Kind: "Deployment", Name: "web"}} {
		if v, ok := rec.Workload(ref); !ok || v.Ref != web || v.Desired != 1 {
			t.Errorf("Workload(%v) = %+v, %v; want %v with Desired 1", ref, v, ok, web)
		}
	}
}

// readyPod creates a pod bound to node that tolerates every taint (no
// kubelet heartbeats the node, so the node lifecycle controller taints it)
// and marks it Running and Ready, as a kubelet would.
func readyPod(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name, node string) {
	t.Helper()
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "rec"}},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Containers:  []corev1.Container{{Name: "c", Image: "none"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking pod %s ready: %v", name, err)
	}
}

// waitRecorder waits, on the recorder's Updated, until ok holds.
func waitRecorder(ctx context.Context, t *testing.T, rec *Recorder, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(recordWait)
	for {
		updated := rec.Updated()
		if ok() {
			return
		}
		select {
		case <-updated:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s; record: %s", recordWait, what, summary(rec.Record()))
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

func summary(r tdrill.Record) string {
	var b strings.Builder
	for _, p := range r.Pods {
		fmt.Fprintf(&b, "\n  pod %s ready=%v terminating=%v deleted=%v disruption=%q owner=%v", p.Name, p.Ready, p.Terminating, p.Deleted, p.Disruption, p.Owner)
	}
	for _, p := range r.PDBs {
		fmt.Fprintf(&b, "\n  pdb %s %s healthy=%d desired=%d known=%v", p.Name, p.Cause, p.Healthy, p.Desired, p.Known)
	}
	return b.String()
}
