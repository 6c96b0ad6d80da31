package network

// Tests of the probe against a real kernel: each test builds a node and a
// peer network namespace joined by a veth pair, breaks the link, route or
// targets with ip(8), and runs the probe inside the node namespace through
// `ip netns exec`, which also mounts that namespace's /sys, so /proc/net,
// /sys/class/net and the kernel's address list all describe it. They need
// root and iproute2: under CI=true they fail without them, elsewhere they
// are skipped.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

const (
	// helperEnv carries a helperRequest to TestNetnsHelper in the child.
	helperEnv = "SELFTAINT_NETNS_HELPER"
	// resultPrefix marks the helper's result line on stdout.
	resultPrefix = "NETNS-RESULT "
	// watchingLine says the helper's probe is subscribed to netlink.
	watchingLine = "NETNS-WATCHING"

	nodeAddr = "10.77.0.2"
	peerAddr = "10.77.0.1"
	// apiPort is where the helper listens, standing in for the API
	// server; the node namespace is private, so a fixed port is free.
	apiPort = "16443"
)

// helperRequest is what the parent asks the helper to do.
type helperRequest struct {
	Config Config
	// Listen, if set, is a TCP address the helper listens on while the
	// probe runs.
	Listen string
	// Watch makes the helper run the probe under a probes.Runner with an
	// hour's interval, print watchingLine once its netlink socket is
	// subscribed and a result line for every run, until its stdin ends.
	Watch bool
}

// TestNetnsHelper is not a test: the netns tests run the test binary again
// inside a namespace with only this function selected. It runs the probe
// against the namespace it finds itself in and prints the Result.
func TestNetnsHelper(t *testing.T) {
	env := os.Getenv(helperEnv)
	if env == "" {
		return // an ordinary run of the package's tests
	}
	var req helperRequest
	if err := json.Unmarshal([]byte(env), &req); err != nil {
		t.Fatalf("decoding %s: %v", helperEnv, err)
	}
	if req.Listen != "" {
		l, err := net.Listen("tcp", req.Listen)
		if err != nil {
			t.Fatalf("listening on %s: %v", req.Listen, err)
		}
		defer l.Close()
	}
	p, err := New(req.Config, probes.Host{Root: "/"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if req.Watch {
		runWatchHelper(t, p)
		return
	}
	res := probes.RunOnce(t.Context(), p, 10*time.Second, nil)
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\n%s%s\n", resultPrefix, out)
}

// runWatchHelper runs p under a Runner whose interval never comes during a
// test, printing each result, until stdin ends.
func runWatchHelper(t *testing.T, p *Probe) {
	p.subscribed = func() { fmt.Printf("\n%s\n", watchingLine) }
	r, err := probes.NewRunner([]probes.Entry{{Probe: p, Interval: time.Hour, Timeout: 10 * time.Second}},
		probes.RunnerOptions{Jitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	r.Run(ctx, func(res probes.Result) {
		out, err := json.Marshal(res)
		if err != nil {
			t.Error(err)
			return
		}
		fmt.Printf("\n%s%s\n", resultPrefix, out)
	})
	if st := r.Stats()[0]; st.WatchError != "" {
		t.Errorf("watch failed: %s", st.WatchError)
	}
}

// requireNetns fails the test under CI=true, and skips it elsewhere, when
// it cannot create network namespaces.
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
	if len(missing) > 0 {
		probestest.FailOrSkip(t, "network namespace tests need "+strings.Join(missing, " and "))
	}
}

var netnsSeq atomic.Int64

// topology is a node namespace whose eth0 (10.77.0.2/24) is joined by a
// veth pair to eth1 (10.77.0.1/24) in a peer namespace, both up, with the
// node's default route via the peer.
type topology struct {
	t          *testing.T
	node, peer string // namespace names
}

// newTopology builds a topology with names unique to this process, removed
// when the test ends.
func newTopology(t *testing.T) *topology {
	t.Helper()
	requireNetns(t)
	id := fmt.Sprintf("selftaint-%d-%d", os.Getpid(), netnsSeq.Add(1))
	tp := &topology{t: t, node: id + "-node", peer: id + "-peer"}
	for _, ns := range []string{tp.node, tp.peer} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			probestest.FailOrSkip(t, fmt.Sprintf("cannot create network namespaces: ip netns add %s: %v: %s", ns, err, bytes.TrimSpace(out)))
		}
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
			os.RemoveAll(filepath.Join("/etc/netns", ns))
		})
	}
	tp.ip("", "link", "add", "eth0", "netns", tp.node, "type", "veth", "peer", "name", "eth1", "netns", tp.peer)
	tp.ip(tp.node, "link", "set", "lo", "up")
	tp.ip(tp.peer, "link", "set", "lo", "up")
	tp.ip(tp.node, "addr", "add", nodeAddr+"/24", "dev", "eth0")
	tp.ip(tp.peer, "addr", "add", peerAddr+"/24", "dev", "eth1")
	tp.ip(tp.node, "link", "set", "eth0", "up")
	tp.ip(tp.peer, "link", "set", "eth1", "up")
	tp.ip(tp.node, "route", "add", "default", "via", peerAddr)
	tp.waitLink("state UP")
	return tp
}

// ip runs ip(8) in namespace ns ("" for this process's), stopping the test
// if it fails.
func (tp *topology) ip(ns string, args ...string) string {
	tp.t.Helper()
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		tp.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out)
}

// waitLink waits until `ip link show dev eth0` in the node namespace
// contains want, e.g. "state UP" or "NO-CARRIER": the kernel applies
// carrier changes to operstate asynchronously.
func (tp *topology) waitLink(want string) {
	tp.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := tp.ip(tp.node, "link", "show", "dev", "eth0")
		if strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) {
			tp.t.Fatalf("eth0 did not show %q: %s", want, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// probe runs the network probe inside the node namespace.
func (tp *topology) probe(req helperRequest) probes.Result {
	tp.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		tp.t.Fatal(err)
	}
	env, err := json.Marshal(req)
	if err != nil {
		tp.t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", tp.node, exe, "-test.run=^TestNetnsHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(env))
	out, err := cmd.CombinedOutput()
	if err != nil {
		tp.t.Fatalf("running the probe in namespace %s: %v\n%s", tp.node, err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), resultPrefix); ok {
			var res probes.Result
			if err := json.Unmarshal([]byte(line), &res); err != nil {
				tp.t.Fatalf("decoding the helper's result %q: %v", line, err)
			}
			tp.t.Logf("%s %s: %s %v", res.Status, res.Reason, res.Message, res.Readings)
			return res
		}
	}
	tp.t.Fatalf("the helper printed no result:\n%s", out)
	return probes.Result{}
}

// cniDir returns a CNI config directory holding one network config.
func cniDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-test.conflist"), []byte(`{"cniVersion":"1.0.0","name":"test","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestNetnsLinkFlaps(t *testing.T) {
	tp := newTopology(t)
	// The API server stands in on loopback, which stays up throughout.
	api := net.JoinHostPort("127.0.0.1", apiPort)
	req := helperRequest{Config: Config{CNIConfDir: cniDir(t), APIServer: api}, Listen: api}
	ok := probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK, Message: []string{
		"default route IPv4 via eth0", "interface eth0 up with " + nodeAddr + "/24", "CNI config 10-test.conflist", "API server " + api + " reachable",
	}}

	got := tp.probe(req)
	probestest.CheckResult(t, got, ok)
	if r := reading(got.Readings, "default_route_ipv4"); r != "eth0 via "+peerAddr {
		t.Errorf("got default_route_ipv4 %q, want %q", r, "eth0 via "+peerAddr)
	}

	// The peer's end goes down: eth0 stays administratively up and keeps
	// its route, but loses carrier.
	tp.ip(tp.peer, "link", "set", "eth1", "down")
	tp.waitLink("NO-CARRIER")
	probestest.CheckResult(t, tp.probe(req), probestest.Want{
		Status: probes.StatusProblem, Reason: ReasonInterfaceDown, Message: []string{"interface eth0 has no carrier"},
	})

	tp.ip(tp.peer, "link", "set", "eth1", "up")
	tp.waitLink("state UP")
	probestest.CheckResult(t, tp.probe(req), ok)

	// eth0 itself goes down, which also takes its routes away; naming
	// eth0 in the config still checks it.
	tp.ip(tp.node, "link", "set", "eth0", "down")
	tp.waitLink("state DOWN")
	named := req
	named.Config.Interfaces = []string{"eth0"}
	probestest.CheckResult(t, tp.probe(named), probestest.Want{
		Status: probes.StatusProblem, Reason: ReasonNoDefaultRoute,
		Message: []string{"no default route (IPv4 or IPv6); interface eth0 is administratively down"},
	})

	tp.ip(tp.node, "link", "set", "eth0", "up")
	tp.waitLink("state UP")
	tp.ip(tp.node, "route", "add", "default", "via", peerAddr)
	probestest.CheckResult(t, tp.probe(named), ok)
}

func TestNetnsDefaultRoute(t *testing.T) {
	tp := newTopology(t)
	req := helperRequest{Config: Config{SkipCNIConfig: true}}
	probestest.CheckResult(t, tp.probe(req), probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK})

	v6 := req
	v6.Config.DefaultRoute = RouteIPv6
	probestest.CheckResult(t, tp.probe(v6), probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoDefaultRoute, Message: []string{"no IPv6 default route"}})

	tp.ip(tp.node, "route", "del", "default")
	probestest.CheckResult(t, tp.probe(req), probestest.Want{
		Status: probes.StatusProblem, Reason: ReasonNoDefaultRoute, Message: []string{"no default route (IPv4 or IPv6)"},
	})

	// A route straight out of the interface, without a gateway, counts.
	tp.ip(tp.node, "route", "add", "default", "dev", "eth0")
	got := tp.probe(req)
	probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK})
	if r := reading(got.Readings, "default_route_ipv4"); r != "eth0 (no gateway)" {
		t.Errorf("got default_route_ipv4 %q, want %q", r, "eth0 (no gateway)")
	}

	// Without its address the uplink has a route but nothing to send from.
	// (Removing a device's last IPv4 address removes its routes too.)
	tp.ip(tp.node, "addr", "flush", "dev", "eth0", "scope", "global")
	tp.ip(tp.node, "route", "add", "default", "dev", "eth0")
	probestest.CheckResult(t, tp.probe(req), probestest.Want{
		Status: probes.StatusProblem, Reason: ReasonNoGlobalAddress, Message: []string{"interface eth0 has no global address"},
	})
}

func TestNetnsTargets(t *testing.T) {
	tp := newTopology(t)
	// A blackhole route drops everything for that prefix.
	tp.ip(tp.node, "route", "add", "blackhole", "198.51.100.0/24")
	// Name resolution in the node namespace asks the peer, which has no
	// DNS server: its kernel answers port unreachable.
	resolvConf := filepath.Join("/etc/netns", tp.node, "resolv.conf")
	_, err := os.Stat("/etc/netns")
	created := errors.Is(err, fs.ErrNotExist)
	t.Cleanup(func() {
		os.RemoveAll(filepath.Dir(resolvConf))
		if created {
			os.Remove("/etc/netns") // fails, as it should, if another test uses it
		}
	})
	if err := os.MkdirAll(filepath.Dir(resolvConf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resolvConf, []byte("nameserver "+peerAddr+"\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := net.JoinHostPort(nodeAddr, apiPort)

	tests := []struct {
		name   string
		target Target
		want   probestest.Want
	}{
		{
			name: "open port", target: Target{Kind: TargetTCP, Address: listen},
			want: probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK, Message: []string{"target tcp " + listen + " reachable"}},
		},
		{
			name: "closed port on the peer", target: Target{Kind: TargetTCP, Address: peerAddr + ":9"},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonTargetUnreachable, Message: []string{"target tcp " + peerAddr + ":9 unreachable", "connection refused"}},
		},
		{
			name: "nobody at the address", target: Target{Kind: TargetTCP, Address: "10.77.0.99:80", Timeout: 300 * time.Millisecond},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonTargetUnreachable, Message: []string{"target tcp 10.77.0.99:80 unreachable: no answer within 300ms"}},
		},
		{
			name: "blackholed", target: Target{Kind: TargetTCP, Address: "198.51.100.1:443", Timeout: 300 * time.Millisecond},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonTargetUnreachable, Message: []string{"target tcp 198.51.100.1:443 unreachable"}},
		},
		{
			name: "name from the hosts file", target: Target{Kind: TargetDNS, Address: "localhost"},
			want: probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK, Message: []string{"target dns localhost reachable"}},
		},
		{
			name: "DNS server unreachable", target: Target{Kind: TargetDNS, Address: "selftaint-test.invalid", Timeout: 3 * time.Second},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonTargetUnreachable, Message: []string{"target dns selftaint-test.invalid unreachable", "selftaint-test.invalid"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := *tp
			sub.t = t
			req := helperRequest{Config: Config{SkipCNIConfig: true, Targets: []Target{tt.target}}, Listen: listen}
			probestest.CheckResult(t, sub.probe(req), tt.want)
		})
	}
}

// watcher is the probe running under a Runner inside the node namespace.
type watcher struct {
	t       *testing.T
	results chan probes.Result
	watch   chan struct{} // closed when the helper printed watchingLine
}

// watch starts the probe under a Runner in the node namespace; it stops
// when the test ends.
func (tp *topology) watch(req helperRequest) *watcher {
	tp.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		tp.t.Fatal(err)
	}
	req.Watch = true
	env, err := json.Marshal(req)
	if err != nil {
		tp.t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", tp.node, exe, "-test.run=^TestNetnsHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(env))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tp.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tp.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tp.t.Fatalf("starting the watching helper: %v", err)
	}
	w := &watcher{t: tp.t, results: make(chan probes.Result, 100), watch: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == watchingLine {
				close(w.watch)
				continue
			}
			line, ok := strings.CutPrefix(sc.Text(), resultPrefix)
			if !ok {
				continue
			}
			var res probes.Result
			if err := json.Unmarshal([]byte(line), &res); err != nil {
				tp.t.Errorf("decoding the helper's result %q: %v", line, err)
				continue
			}
			w.results <- res
		}
	}()
	tp.t.Cleanup(func() {
		stdin.Close()
		<-done
		if err := cmd.Wait(); err != nil {
			tp.t.Errorf("the watching helper: %v", err)
		}
	})
	return w
}

// next returns the helper's next result; the deadline is far below the
// probe's hour-long interval, so only a wake can deliver it in time.
func (w *watcher) next() probes.Result {
	w.t.Helper()
	select {
	case res := <-w.results:
		w.t.Logf("%s %s: %s", res.Status, res.Reason, res.Message)
		return res
	case <-time.After(30 * time.Second):
		w.t.Fatal("no probe run within 30s: the netlink watch did not wake the probe (its interval is an hour)")
		return probes.Result{}
	}
}

// TestNetnsLinkDownWakesProbe: under a Runner with an hour's interval, a
// link losing carrier, and coming back, each run the probe at once through
// its netlink watch.
func TestNetnsLinkDownWakesProbe(t *testing.T) {
	tp := newTopology(t)
	w := tp.watch(helperRequest{Config: Config{SkipCNIConfig: true}})
	if got := w.next(); got.Status != probes.StatusOK {
		t.Fatalf("first run: %s %s: %s, want OK", got.Status, got.Reason, got.Message)
	}
	select {
	case <-w.watch:
	case <-time.After(30 * time.Second):
		t.Fatal("the helper's netlink watch never subscribed")
	}
	for _, step := range []struct {
		state string
		want  probes.Status
	}{
		{"down", probes.StatusProblem},
		{"up", probes.StatusOK},
	} {
		tp.ip(tp.peer, "link", "set", "eth1", step.state)
		// A change can take several messages (carrier, then operstate):
		// the first wake may still see the old state; one soon after
		// must see the new.
		for got := w.next(); got.Status != step.want; got = w.next() {
		}
	}
}
