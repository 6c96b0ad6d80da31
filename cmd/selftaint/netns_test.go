package main

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/probes/probestest"
)

// requireNetns fails under CI=true, and skips elsewhere, without root and
// ip(8).
func requireNetns(t *testing.T) {
	t.Helper()
	var missing []string
	if runtime.GOOS != "linux" {
		missing = append(missing, "Linux")
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		missing = append(missing, "the ip command (Debian package iproute2)")
	}
	if len(missing) == 0 {
		return
	}
	probestest.FailOrSkip(t, "the network namespace test needs "+strings.Join(missing, " and "))
}

// ipCmd runs ip(8) with args, failing t on error.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// TestNetworkConditionInNetns runs the real agent binary inside a network
// namespace the test builds, as the DaemonSet runs it in the host's (with
// hostNetwork): an uplink veth whose peer is in a second namespace carries
// the default route, and a second veth reaches the test's kube-apiserver.
// Taking the uplink's peer down makes SelftaintNetworkUnavailable True after
// the `for` damping and taints the node; bringing it up clears it after
// `clearAfter`; deleting the default route makes it True again.
func TestNetworkConditionInNetns(t *testing.T) {
	requireNetns(t)
	testcp.SkipIfShort(t, "builds network namespaces and waits out damping")
	t.Parallel()
	// Listen beyond loopback so the namespace can reach the API server
	// through its veth.
	cp := testcp.Start(t, testcp.Options{APIServerArgs: []string{"--bind-address=0.0.0.0"}})
	c := cp.Client()
	const node = "netns-node"
	cp.CreateNode(t, node, nil)

	id := os.Getpid() % 10000
	nodeNS, peerNS := fmt.Sprintf("st-node-%d", id), fmt.Sprintf("st-peer-%d", id)
	for _, ns := range []string{nodeNS, peerNS} {
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	// The uplink: eth0 in the node namespace, its peer in the peer one.
	ipCmd(t, "link", "add", "eth0", "netns", nodeNS, "type", "veth", "peer", "name", "eth1", "netns", peerNS)
	// The API link: api0 in the node namespace, its peer here.
	hostAPI := fmt.Sprintf("stapi%d", id)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostAPI).Run() })
	ipCmd(t, "link", "add", hostAPI, "type", "veth", "peer", "name", "api0", "netns", nodeNS)
	a, b := 100+id%100, id/100%250
	hostIP, nsAPIIP := fmt.Sprintf("10.%d.%d.1", a, b), fmt.Sprintf("10.%d.%d.2", a, b)
	ipCmd(t, "addr", "add", hostIP+"/30", "dev", hostAPI)
	ipCmd(t, "link", "set", hostAPI, "up")
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", nsAPIIP + "/30", "dev", "api0"},
		{"link", "set", "api0", "up"},
		{"addr", "add", "10.78.0.2/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
	} {
		ipCmd(t, append([]string{"-n", nodeNS}, args...)...)
	}
	ipCmd(t, "-n", peerNS, "addr", "add", "10.78.0.1/24", "dev", "eth1")
	ipCmd(t, "-n", peerNS, "link", "set", "eth1", "up")
	ipCmd(t, "-n", nodeNS, "route", "add", "default", "via", "10.78.0.1")

	// A kubeconfig that reaches the API server through the API link; the
	// serving certificate is for 127.0.0.1, so say that is the name.
	kc, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		u, err := url.Parse(cl.Server)
		if err != nil {
			t.Fatal(err)
		}
		cl.Server = "https://" + net.JoinHostPort(hostIP, u.Port())
		cl.TLSServerName = "127.0.0.1"
	}
	nsKubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, nsKubeconfig); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, `probes:
  memory: {enabled: false}
  disk: {enabled: false}
  pid: {enabled: false}
  gpu: {enabled: false}
  network:
    interval: 500ms
    timeout: 400ms
    for: 2s
    clearAfter: 2s
    checkCNIConfig: false
initialization: {enabled: false}
# The test breaks and mends the network five times in a row on purpose: a
# bucket big enough that the change limiter lets every change through.
changeLimiter: {burst: 20, refill: 1s}
`)
	var stderr testkit.LogBuffer
	cmd := exec.Command("ip", "netns", "exec", nodeNS, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SELFTAINT_TEST_RUN_MAIN=1",
		"SELFTAINT_TEST_ARGS="+strings.Join([]string{"agent", "--node-name=" + node, "--kubeconfig=" + nsKubeconfig, "--config=" + cfg, "--log-level=warn", "--metrics-address=127.0.0.1:0"}, " "))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent stderr:\n%s", stderr.String())
		}
	})

	const netCond corev1.NodeConditionType = "SelftaintNetworkUnavailable"
	netTaint := "selftaint.io/network-unavailable"
	status := func(want corev1.ConditionStatus, tainted bool) func(*corev1.Node) bool {
		return func(n *corev1.Node) bool {
			return conditionStatus(n, netCond) == want && hasTaintKey(n, netTaint, corev1.TaintEffectNoSchedule) == tainted
		}
	}
	pollNode(t, c, node, 30*time.Second, "the network condition False", status(corev1.ConditionFalse, false))

	flip := func(what string, act []string, want corev1.ConditionStatus, tainted bool, damping time.Duration) *corev1.NodeCondition {
		t.Helper()
		ipCmd(t, act...)
		began := time.Now()
		n, at := pollNode(t, c, node, damping+10*time.Second, what, status(want, tainted))
		took := at.Sub(began)
		t.Logf("%s after %s", what, took.Round(time.Millisecond))
		if took < damping {
			t.Errorf("%s after %s, before the %s damping", what, took, damping)
		}
		return nodeCondition(n, netCond)
	}
	got := flip("uplink peer down: condition True and tainted", []string{"-n", peerNS, "link", "set", "eth1", "down"}, corev1.ConditionTrue, true, 2*time.Second)
	if !strings.Contains(got.Message, "eth0") {
		t.Errorf("message %q does not name the interface", got.Message)
	}
	flip("uplink peer up: condition False, taint lifted", []string{"-n", peerNS, "link", "set", "eth1", "up"}, corev1.ConditionFalse, false, 2*time.Second)
	got = flip("default route deleted: condition True", []string{"-n", nodeNS, "route", "del", "default"}, corev1.ConditionTrue, true, 2*time.Second)
	if got.Reason != "NoDefaultRoute" {
		t.Errorf("reason %q, want NoDefaultRoute (message %q)", got.Reason, got.Message)
	}
	flip("default route back: condition False", []string{"-n", nodeNS, "route", "add", "default", "via", "10.78.0.1"}, corev1.ConditionFalse, false, 2*time.Second)
}
