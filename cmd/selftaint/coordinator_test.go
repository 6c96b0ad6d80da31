package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/taints/fleet"
)

func TestCoordinatorUsageErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"bad node selector", []string{"coordinator", "--node-selector=a in (", "--kubeconfig=/nonexistent"}, 1, "--node-selector"},
		{"unexpected argument", []string{"coordinator", "extra"}, 2, "unexpected arguments"},
		{"bad config", []string{"coordinator", "--config=/nonexistent/config.yaml", "--kubeconfig=/nonexistent"}, 1, "/nonexistent/config.yaml"},
		{"inverted leader election timing", []string{"coordinator", "--kubeconfig=" + writeFile(t, kubeconfigStub), "--metrics-address=",
			"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=10s"}, 1, "lease duration (5s) > renew deadline (10s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not mention %q", stderr.String(), tt.want)
			}
		})
	}
}

// kubeconfigStub is a kubeconfig that loads (nothing is dialled before the
// coordinator is built).
const kubeconfigStub = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

// TestCoordinatorCommand runs `selftaint coordinator`, as its own process,
// against a real control plane: it warns about the config, takes the leader Lease, serves
// its metrics and health, and on SIGTERM exits 0 having released the Lease;
// run again, it exits 1 when its leadership is taken from it (a pod
// restarts then).
func TestCoordinatorCommand(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver")
	t.Parallel()
	// The shared control plane: the coordinator keeps to its namespace and
	// counts only the Nodes of its selector, of which there are none.
	cp := shared.Get(t)
	const ns = "selftaint-cmd"
	if _, err := cp.Client().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A NoExecute rule without a fallback: valid, with a warning.
	cfg := writeFile(t, "rules:\n- condition: SelftaintMemoryPressure\n  status: \"True\"\n  taint: {key: selftaint.io/memory-pressure, effect: NoExecute}\n")
	args := []string{"coordinator", "--kubeconfig=" + cp.KubeconfigPath, "--namespace=" + ns, "--identity=cmd-test",
		"--config=" + cfg, "--metrics-address=127.0.0.1:0", "--node-selector=selftaint.test/group=cmd",
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=200ms"}

	// Terminated: exit 0, the leader Lease released.
	ctx, cancel := context.WithCancel(context.Background())
	stderr, code := startCommand(t, ctx, args)
	waitLeaderLease(t, cp, ns, "cmd-test", stderr)
	base := "http://" + servingAddress(t, stderr)
	waitHTTP(t, base+"/readyz", "ok")
	waitHTTP(t, base+"/metrics", "selftaint_coordinator_leader 1")
	if got := stderr.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "rules[0].fallback") {
		t.Errorf("no warning about the rule without a fallback in:\n%s", got)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0; stderr:\n%s", c, stderr)
	}
	l, err := cp.Client().CoordinationV1().Leases(ns).Get(t.Context(), fleet.DefaultLeaderLease, metav1.GetOptions{})
	if err != nil || (l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "") {
		t.Errorf("leader Lease after exit: %+v (%v), want it released", l, err)
	}

	// Its leadership taken: exit 1, saying so.
	stderr, code = startCommand(t, context.Background(), args)
	waitLeaderLease(t, cp, ns, "cmd-test", stderr)
	stealLeaderLease(t, cp, ns)
	select {
	case c := <-code:
		if c != 1 || !strings.Contains(stderr.String(), "lost leadership") {
			t.Errorf("exit code %d, want 1 saying it lost leadership; stderr:\n%s", c, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after its leadership was taken; stderr:\n%s", stderr)
	}
}

// TestCoordinatorLeadsBeyondItsAPIBudget: the leader Lease is renewed
// outside the client-side limit on the coordinator's API requests
// (--kube-api-qps), as kube-controller-manager renews its own, so a leader
// whose controller has used its budget does not lose its leadership and
// exit. Here the budget (a request every 50s) is far below what renewing
// every second takes: sharing it, the leader could not renew within its
// 15s deadline, and the test watches for longer than that. The deadline
// is long, so a renewal slowed by a loaded machine alone does not end the
// leadership: only sharing the budget does. (Sharing it, the coordinator
// does not even take the Lease in waitLeaderLease's 30s: a Get and a
// Create are two requests, 50s apart.)
func TestCoordinatorLeadsBeyondItsAPIBudget(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver")
	t.Parallel()
	cp := shared.Get(t)
	const ns = "selftaint-budget"
	if _, err := cp.Client().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "rules:\n- condition: SelftaintMemoryPressure\n  status: \"True\"\n  taint: {key: selftaint.io/memory-pressure, effect: NoSchedule}\n")
	args := []string{"coordinator", "--kubeconfig=" + cp.KubeconfigPath, "--namespace=" + ns, "--identity=budget-test",
		"--config=" + cfg, "--node-selector=selftaint.test/group=budget",
		"--kube-api-qps=0.02", "--kube-api-burst=1",
		"--leader-elect-lease-duration=20s", "--leader-elect-renew-deadline=15s", "--leader-elect-retry-period=1s"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr, code := startCommand(t, ctx, args)
	waitLeaderLease(t, cp, ns, "budget-test", stderr)
	leases := cp.Client().CoordinationV1().Leases(ns)
	var renewals int
	var last metav1.MicroTime
	// Longer than the renew deadline plus a retry period, so a leader
	// sharing its budget would have given up, and exited, by the end.
	const watch = 25 * time.Second
	for end := time.Now().Add(watch); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		select {
		case c := <-code:
			t.Fatalf("the leader exited (code %d) with its API budget used up; stderr:\n%s", c, stderr)
		default:
		}
		l, err := leases.Get(t.Context(), fleet.DefaultLeaderLease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "budget-test" {
			t.Fatalf("the leader Lease is held by %v, not the coordinator with its API budget used up; stderr:\n%s", l.Spec.HolderIdentity, stderr)
		}
		if l.Spec.RenewTime != nil && !l.Spec.RenewTime.Equal(&last) {
			renewals++
			last = *l.Spec.RenewTime
		}
	}
	// Renewed every second: 25 looks in 25s see a few renewals even on a
	// loaded machine; a budget of one request per 50s allows none.
	if renewals < 3 {
		t.Errorf("the leader Lease was seen renewed %d times in %v, want 3 or more", renewals, watch)
	}
}

// startCommand runs `selftaint args...` as its own process (this test
// binary running main), as a pod would, since the command sets process
// globals (klog's logger). Cancelling ctx sends it SIGTERM; its exit code
// comes on the channel.
func startCommand(t *testing.T, ctx context.Context, args []string) (*testkit.LogBuffer, chan int) {
	t.Helper()
	stderr := &testkit.LogBuffer{}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SELFTAINT_TEST_RUN_MAIN=1", "SELFTAINT_TEST_ARGS="+strings.Join(args, " "))
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting selftaint %v: %v", args, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	code := make(chan int, 1)
	go func() {
		_ = cmd.Wait()
		stop()
		code <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return stderr, code
}

func waitLeaderLease(t *testing.T, cp *testcp.ControlPlane, ns, identity string, stderr *testkit.LogBuffer) {
	t.Helper()
	err := testcp.Poll(t.Context(), 30*time.Second, testcp.PollInterval, func() (bool, error) {
		l, err := cp.Client().CoordinationV1().Leases(ns).Get(t.Context(), fleet.DefaultLeaderLease, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == identity, err
	})
	if err != nil {
		t.Fatalf("waiting for %s to lead: %v; stderr:\n%s", identity, err, stderr)
	}
}

var servingRE = regexp.MustCompile(`msg="serving metrics and health" address=(\S+)`)

// servingAddress is the address the command logged it serves on.
func servingAddress(t *testing.T, stderr *testkit.LogBuffer) string {
	t.Helper()
	m := servingRE.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no serving address logged:\n%s", stderr)
	}
	return m[1]
}

// waitHTTP polls url until it answers 200 with a body containing want.
func waitHTTP(t *testing.T, url, want string) {
	t.Helper()
	var body string
	err := testcp.Poll(t.Context(), 30*time.Second, testcp.PollInterval, func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && resp.StatusCode == http.StatusOK && strings.Contains(body, want), err
	})
	if err != nil {
		t.Fatalf("GET %s: %v; want 200 with %q, last body:\n%s", url, err, want, body)
	}
}

// stealLeaderLease makes another identity hold the leader Lease for an
// hour.
func stealLeaderLease(t *testing.T, cp *testcp.ControlPlane, ns string) {
	t.Helper()
	leases := cp.Client().CoordinationV1().Leases(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(t.Context(), fleet.DefaultLeaderLease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr.To("thief")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		_, err = leases.Update(t.Context(), l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("taking the leader Lease: %v", err)
	}
}

// TestVirtualCoordinatorFailover runs two replicas of `selftaint
// coordinator --virtual`, each its own process on one host (no metrics
// port by default, so they do not clash): one leads, as the virtual
// fleet's coordinator (its guard says so); SIGKILLed, it is replaced by
// the other within a few lease durations.
func TestVirtualCoordinatorFailover(t *testing.T) {
	testcp.SkipIfShort(t, "runs two coordinator processes and kills one")
	t.Parallel()
	// The shared control plane: the replicas keep to their namespace and
	// count only the Nodes of their selector, of which there are none.
	cp := shared.Get(t)
	const ns = "selftaint-vcoord"
	if _, err := cp.Client().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replica := func(identity string) *proc {
		return startProc(t, identity, "coordinator", "--virtual", "--kubeconfig="+cp.KubeconfigPath, "--namespace="+ns,
			"--identity="+identity, "--node-selector=selftaint.test/group=vcoord",
			"--leader-elect-lease-duration="+leaseDuration.String(), "--leader-elect-renew-deadline="+renewDeadline.String(),
			"--leader-elect-retry-period="+retryPeriod.String())
	}
	replicas := map[string]*proc{"vcoord-a": replica("vcoord-a"), "vcoord-b": replica("vcoord-b")}
	leases := cp.Client().CoordinationV1().Leases(ns)
	holder := func() (string, error) {
		l, err := leases.Get(t.Context(), fleet.DefaultLeaderLease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return "", err
		}
		return *l.Spec.HolderIdentity, nil
	}
	var leader string
	if err := testcp.Poll(t.Context(), time.Minute, 100*time.Millisecond, func() (bool, error) {
		h, err := holder()
		leader = h
		return replicas[h] != nil, err
	}); err != nil {
		t.Fatalf("no replica leads: %v; holder %q", err, leader)
	}
	// The virtual fleet's guard, whatever the config's coordinator.fleet.
	if err := testcp.Poll(t.Context(), time.Minute, 100*time.Millisecond, func() (bool, error) {
		cm, err := cp.Client().CoreV1().ConfigMaps(ns).Get(t.Context(), fleet.DefaultGuardName, metav1.GetOptions{})
		return err == nil && cm.Annotations[fleet.FleetAnnotation] == string(fleet.MembersVirtual), err
	}); err != nil {
		t.Errorf("the guard does not say it is the virtual fleet's: %v", err)
	}
	for name, p := range replicas {
		select {
		case <-p.done:
			t.Fatalf("replica %s exited: %v; stderr:\n%s", name, p.err, p.stderr)
		default:
		}
		if strings.Contains(p.stderr.String(), "serving metrics") {
			t.Errorf("replica %s serves metrics without --metrics-address", name)
		}
	}

	standby := "vcoord-a"
	if leader == standby {
		standby = "vcoord-b"
	}
	if err := replicas[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-replicas[leader].done
	killed := time.Now()
	if err := testcp.Poll(t.Context(), time.Minute, 100*time.Millisecond, func() (bool, error) {
		h, err := holder()
		return h == standby, err
	}); err != nil {
		h, _ := holder()
		t.Fatalf("%s did not take over from the killed %s: %v; holder %q; its stderr:\n%s", standby, leader, err, h, replicas[standby].stderr)
	}
	t.Logf("%s took over %s after %s was killed", standby, time.Since(killed).Round(time.Millisecond), leader)
}
