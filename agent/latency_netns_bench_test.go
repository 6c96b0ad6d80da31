package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// latencyNetnsEnv carries a netnsAgentRequest to TestLatencyNetnsHelper.
const latencyNetnsEnv = "SELFTAINT_LATENCY_NETNS"

// netnsAgentRequest is what BenchmarkLatencyNetns asks of the agent it
// runs inside the node's network namespace.
type netnsAgentRequest struct {
	Node string
	// Host, Token and CA reach the API server; Socket is a unix socket
	// the benchmark forwards to it (a path, so it crosses namespaces).
	Host, Token, Socket string
	CA                  []byte
	Polled              bool
}

// TestLatencyNetnsHelper is not a test: BenchmarkLatencyNetns runs the
// test binary again inside a network namespace with only this function
// selected. It runs the agent with the default config's network probe
// (for: 0s, clearAfter: 0s, no CNI or API server check) on the namespace
// it finds itself in, until its stdin ends.
func TestLatencyNetnsHelper(t *testing.T) {
	env := os.Getenv(latencyNetnsEnv)
	if env == "" {
		return // an ordinary run of the package's tests
	}
	var req netnsAgentRequest
	if err := json.Unmarshal([]byte(env), &req); err != nil {
		t.Fatalf("decoding %s: %v", latencyNetnsEnv, err)
	}
	rc := &rest.Config{Host: req.Host, BearerToken: req.Token, TLSClientConfig: rest.TLSClientConfig{CAData: req.CA},
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", req.Socket)
		}}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`probes:
  memory: {enabled: false}
  disk: {enabled: false}
  pid: {enabled: false}
  network: {for: 0s, clearAfter: 0s, checkCNIConfig: false, checkAPIServer: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := cfg.ProbeSpecs(probes.Host{Root: "/"}, "")
	if err != nil {
		t.Fatalf("ProbeSpecs: %v", err)
	}
	if req.Polled {
		specs = withoutWakes(specs)
	}
	a, err := agent.New(agent.Options{NodeName: req.Node, Client: cs.CoreV1(), Probes: specs, Rules: cfg.TaintRules(),
		Jitter: -1, HeartbeatPeriod: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("agent.Run: %v", err)
	}
}

// BenchmarkLatencyNetns: a link taken down in a network namespace (the
// peer end of the node's uplink veth set down, so the uplink loses
// carrier) to the network taint on a Node watch, and the link set up
// again to the taint gone, with for: 0s and clearAfter: 0s. The agent runs
// inside the node's namespace (the test binary again, under `ip netns
// exec`, which also mounts that namespace's /sys), reaching the API
// server through a unix socket the benchmark forwards. Timed from before
// running ip(8), so the time to start it is included. Against the same
// agent with the probe's netlink wake-ups hidden, at the default 10 s
// interval. Needs root and iproute2.
//
//	make latency-bench   (or KUBE_BIN_DIR=$PWD/bin go test -run '^$' -bench LatencyNetns -benchtime 1x ./agent/)
func BenchmarkLatencyNetns(b *testing.B) {
	requireLatencyNetns(b)
	cp := shared.Get(b)
	c := cp.Client()
	sock := forwardAPIServer(b, cp.RESTConfig().Host)
	n := latencyEvents(b, "LATENCY_EVENTS", 100)
	np := latencyEvents(b, "LATENCY_POLLED_EVENTS", 20)
	taint := corev1.Taint{Key: "selftaint.io/network-unavailable"}
	tainted := func(n *corev1.Node) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taint.Key })
	}
	var results []latencyResult
	// A link down comes more than two seconds after the last link event,
	// at a random phase of the interval: the kernel's linkwatch holds a
	// non-urgent event such as losing carrier until a second after its
	// last run (a gain of carrier is urgent, and runs it), so a link
	// down soon after a link up waits for it; the third row shows that
	// wait (events 0.1-1.1 s apart). A link up comes at least WakeGap
	// after the run that saw the link down.
	variants := []struct {
		node, name, key string
		polled          bool
		count           int
		pause, spread   time.Duration
	}{
		{"latency-netns", "netns link down, woken (interval 10s)", "woken", false, n, 2 * time.Second, time.Second},
		{"latency-netns-polled", "netns link down, polled (interval 10s)", "polled", true, np, 0, 10 * time.Second},
		{"latency-netns-close", "netns link down <1.1s after up, woken", "close", false, n, probes.DefaultWakeGap, time.Second},
	}
	for _, v := range variants {
		cp.CreateNode(b, v.node, nil)
		ns := newLatencyNetns(b)
		ns.runAgent(b, netnsAgentRequest{Node: v.node, Host: cp.RESTConfig().Host, Token: cp.RESTConfig().BearerToken,
			CA: cp.RESTConfig().CAData, Socket: sock, Polled: v.polled})
		nw := newNodeWatcher(b, c, v.node)
		nw.until(time.Minute, "the network condition False", func(n *corev1.Node) bool {
			cd := condition(n, config.DefaultNetworkCondition)
			return cd != nil && cd.Status == corev1.ConditionFalse
		})
		time.Sleep(time.Second) // the netlink watch subscribes beside the first run
		results = append(results, measure(b, nw, v.name, v.key, v.count, latencyEvent{
			spread:     v.spread,
			pause:      v.pause,
			clearPause: probes.DefaultWakeGap,
			cause:      func(int) { ns.ip(b, ns.peer, "link", "set", "eth1", "down") },
			on:         func(_ int, n *corev1.Node) bool { return tainted(n) },
			clear:      func(int) { ns.ip(b, ns.peer, "link", "set", "eth1", "up") },
			cleared:    func(_ int, n *corev1.Node) bool { return !tainted(n) },
		}))
	}
	report(b, results...)
}

// requireLatencyNetns stops the benchmark (a failure under CI=true) where
// it cannot build network namespaces.
func requireLatencyNetns(b *testing.B) {
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
	if len(missing) > 0 {
		probestest.FailOrSkip(b, "the netns latency benchmark needs "+strings.Join(missing, " and "))
	}
}

// forwardAPIServer listens on a unix socket and forwards each connection
// to the API server at host (https://IP:port), until the benchmark ends.
func forwardAPIServer(b *testing.B, host string) string {
	b.Helper()
	u, err := url.Parse(host)
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(b.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in); _ = out.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return sock
}

// latencyNetns is a node namespace whose eth0 (10.78.0.2/24) is joined by
// a veth pair to eth1 (10.78.0.1/24) in a peer namespace, both up, with the
// node's default route via the peer (the network probe's tests build the
// same; theirs run the probe alone).
type latencyNetns struct {
	node, peer string
}

func newLatencyNetns(b *testing.B) *latencyNetns {
	b.Helper()
	id := fmt.Sprintf("st-lat-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	ns := &latencyNetns{node: id + "-n", peer: id + "-p"}
	for _, name := range []string{ns.node, ns.peer} {
		ns.ip(b, "", "netns", "add", name)
		b.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				b.Errorf("ip netns del %s: %v: %s", name, err, out)
			}
		})
	}
	ns.ip(b, "", "link", "add", "eth0", "netns", ns.node, "type", "veth", "peer", "name", "eth1", "netns", ns.peer)
	ns.ip(b, ns.node, "link", "set", "lo", "up")
	ns.ip(b, ns.node, "addr", "add", "10.78.0.2/24", "dev", "eth0")
	ns.ip(b, ns.peer, "addr", "add", "10.78.0.1/24", "dev", "eth1")
	ns.ip(b, ns.node, "link", "set", "eth0", "up")
	ns.ip(b, ns.peer, "link", "set", "eth1", "up")
	ns.ip(b, ns.node, "route", "add", "default", "via", "10.78.0.1")
	return ns
}

// ip runs ip(8) in namespace name ("" for this process's).
func (ns *latencyNetns) ip(b *testing.B, name string, args ...string) {
	b.Helper()
	if name != "" {
		args = append([]string{"-n", name}, args...)
	}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		b.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// runAgent runs TestLatencyNetnsHelper in the node namespace until the
// benchmark ends; its output goes to a log shown if the benchmark fails.
func (ns *latencyNetns) runAgent(b *testing.B, req netnsAgentRequest) {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	env, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	logPath := filepath.Join(b.TempDir(), "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns.node, exe, "-test.run=^TestLatencyNetnsHelper$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), latencyNetnsEnv+"="+string(env))
	cmd.Stdout, cmd.Stderr = logf, logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting the agent in namespace %s: %v", ns.node, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = stdin.Close()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
		}
		_ = logf.Close()
		if err != nil || b.Failed() {
			out, _ := os.ReadFile(logPath)
			b.Logf("the agent in namespace %s: %v\n%s", ns.node, err, testkit.Tail(string(out), 4000))
		}
	})
}
