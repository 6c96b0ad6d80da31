package testcp

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

func TestMergeArgs(t *testing.T) {
	tests := []struct {
		name                string
		defaults, overrides []string
		want                []string
	}{
		{"none", []string{"--a=1", "--b=2"}, nil, []string{"--a=1", "--b=2"}},
		{"replace in place", []string{"--a=1", "--b=2"}, []string{"--a=3"}, []string{"--a=3", "--b=2"}},
		{"append new", []string{"--a=1"}, []string{"--c=3", "--d"}, []string{"--a=1", "--c=3", "--d"}},
		{"bare flag replaces", []string{"--a=1"}, []string{"--a"}, []string{"--a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mergeArgs(tt.defaults, tt.overrides); !slices.Equal(got, tt.want) {
				t.Errorf("mergeArgs(%q, %q) = %q, want %q", tt.defaults, tt.overrides, got, tt.want)
			}
		})
	}
}

func TestAPIServerArgsServiceAccountAdmission(t *testing.T) {
	p := &pki{}
	has := func(args []string, a string) bool { return slices.Contains(args, a) }
	got := apiServerArgs(p, "http://127.0.0.1:1", 2, "/x", nil)
	if !has(got, "--disable-admission-plugins=ServiceAccount") {
		t.Errorf("default args %q: ServiceAccount admission not disabled", got)
	}
	got = apiServerArgs(p, "http://127.0.0.1:1", 2, "/x", []string{"--enable-admission-plugins=ExtendedResourceToleration,ServiceAccount"})
	if has(got, "--disable-admission-plugins=ServiceAccount") {
		t.Errorf("args %q: ServiceAccount both enabled and disabled", got)
	}
	got = apiServerArgs(p, "http://127.0.0.1:1", 2, "/x", []string{"--secure-port=9"})
	if !has(got, "--secure-port=9") || has(got, "--secure-port=2") {
		t.Errorf("args %q: --secure-port not replaced", got)
	}
}

// checkVersion checks that the API server reports KubeVersion.
func checkVersion(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	info, err := c.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("ServerVersion: %v", err)
	}
	got, err := version.ParseSemantic(info.GitVersion)
	if err != nil {
		t.Fatalf("parsing server version %q: %v", info.GitVersion, err)
	}
	want := version.MustParseSemantic(KubeVersion)
	if got.Major() != want.Major() || got.Minor() != want.Minor() || got.Patch() != want.Patch() {
		t.Errorf("server version = %s, want %s", got, want)
	}
}

func TestAPIServer(t *testing.T) {
	cp := Start(t, Options{})
	c := cp.Client()
	ctx := t.Context()
	checkVersion(t, c)

	created := cp.CreateNode(t, "node-a", func(n *corev1.Node) {
		n.Labels = map[string]string{"selftaint.io/test": "yes"}
		n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	})
	got, err := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	if got.UID != created.UID || got.Labels["selftaint.io/test"] != "yes" {
		t.Errorf("node read back = uid %s labels %v, want uid %s with the test label", got.UID, got.Labels, created.UID)
	}
	if q := got.Status.Capacity[corev1.ResourcePods]; q.Value() != 110 {
		t.Errorf("node capacity pods = %s, want 110 (status given at create is kept)", q.String())
	}

	// RESTConfig hands out copies: changing one must not change the next.
	cfg := cp.RESTConfig()
	cfg.BearerToken = "changed"
	if cp.RESTConfig().BearerToken == "changed" {
		t.Errorf("RESTConfig returned a shared config")
	}

	cp.StopAPIServer()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = c.CoreV1().Nodes().Get(short, "node-a", metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Fatalf("get node with the API server stopped: got no error")
	}
	cp.StartAPIServer()
	got, err = c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node after restarting the API server: %v", err)
	}
	if got.UID != created.UID {
		t.Errorf("node uid after restart = %s, want %s", got.UID, created.UID)
	}
	checkVersion(t, c)
}

func TestFullControlPlane(t *testing.T) {
	cp := Start(t, Options{ControllerManager: true, Scheduler: true})
	c := cp.Client()
	ctx := t.Context()
	checkVersion(t, c)

	now := metav1.Now()
	cp.CreateNode(t, "node-b", func(n *corev1.Node) {
		n.Status.Capacity = corev1.ResourceList{
			corev1.ResourcePods:   resource.MustParse("10"),
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
		}
		n.Status.Allocatable = n.Status.Capacity
		n.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}}
	})
	if _, err := c.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{}); err != nil {
		t.Fatalf("get node: %v", err)
	}

	// The controller manager is working: its service-account controller
	// creates the default ServiceAccount.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Errorf("default ServiceAccount never appeared: %v", err)
	}

	// The scheduler is working: a pod gets bound to the only node.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	var nodeName string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		nodeName = p.Spec.NodeName
		return nodeName != "", nil
	}); err != nil {
		t.Errorf("pod never scheduled: %v", err)
	}
	if nodeName != "" && nodeName != "node-b" {
		t.Errorf("pod scheduled to %q, want node-b", nodeName)
	}
}
