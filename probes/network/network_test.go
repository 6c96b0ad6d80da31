package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

func ipNet(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

// fakeAddrs are the addresses fixture hosts' interfaces have.
var fakeAddrs = map[string][]net.Addr{
	"eth0": {ipNet("192.0.2.10/24"), ipNet("fe80::10/64"), ipNet("2001:db8::10/64")},
	"eth1": {ipNet("192.0.3.10/24")},
	"lo":   {ipNet("127.0.0.1/8"), ipNet("::1/128")},
}

// newFixtureProbe makes a probe of the fixture host root under testdata,
// with addresses from addrs and no network access.
func newFixtureProbe(t *testing.T, cfg Config, root string, addrs map[string][]net.Addr) *Probe {
	t.Helper()
	p, err := New(cfg, probes.Host{Root: filepath.Join("testdata", root)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p.Addrs = func(name string) ([]net.Addr, error) {
		a, ok := addrs[name]
		if !ok {
			return nil, errors.New("route ip+net: no such network interface")
		}
		return a, nil
	}
	p.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		return nil, errors.New("fixture tests do not dial")
	}
	p.LookupHost = func(ctx context.Context, host string) ([]string, error) {
		return nil, errors.New("fixture tests do not resolve")
	}
	return p
}

func TestProbeFixtures(t *testing.T) {
	noCNI := Config{SkipCNIConfig: true}
	tests := []struct {
		name        string
		root        string
		cfg         Config
		addrs       map[string][]net.Addr // nil: fakeAddrs
		want        probestest.Want
		wantReading map[string]string
	}{
		{
			name: "healthy", root: "healthy",
			want: probestest.Want{
				Status: probes.StatusOK, Reason: ReasonNetworkOK,
				Message: []string{"default route IPv4 via eth0, IPv6 via eth0; interface eth0 up with 192.0.2.10/24 2001:db8::10/64; CNI config 10-flannel.conflist"},
				Readings: []probes.Reading{
					{Name: "default_route_ipv4", Value: "eth0 via 192.0.2.1"},
					{Name: "default_route_ipv6", Value: "eth0 via fe80::1"},
					{Name: "interface eth0", Value: "up, 192.0.2.10/24 2001:db8::10/64"},
					{Name: "cni_config", Value: "10-flannel.conflist"},
				},
			},
		},
		{
			// wlan0's default route has a higher metric: a backup link
			// whose carrier is down is not the node's uplink.
			name: "backup default route not checked", root: "healthy", cfg: Config{DefaultRoute: RouteIPv4},
			want: probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK},
		},
		{
			name: "configured interfaces replace the default routes'", root: "healthy", cfg: Config{Interfaces: []string{"wlan0"}},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonInterfaceDown, Message: []string{"interface wlan0 has no carrier (operstate down)"}},
		},
		{
			name: "configured interface missing", root: "healthy", cfg: Config{Interfaces: []string{"eth0", "bond0", "eth0"}},
			want: probestest.Want{
				Status: probes.StatusProblem, Reason: ReasonInterfaceDown, Message: []string{"interface bond0 does not exist"},
				Readings: []probes.Reading{
					{Name: "default_route_ipv4", Value: "eth0 via 192.0.2.1"},
					{Name: "default_route_ipv6", Value: "eth0 via fe80::1"},
					{Name: "interface eth0", Value: "up, 192.0.2.10/24 2001:db8::10/64"},
					{Name: "interface bond0", Value: "missing"},
					{Name: "cni_config", Value: "10-flannel.conflist"},
				},
			},
		},
		{
			name: "carrier down", root: "carrier-down",
			want:        probestest.Want{Status: probes.StatusProblem, Reason: ReasonInterfaceDown, Message: []string{"interface eth0 has no carrier (operstate down)"}},
			wantReading: map[string]string{"interface eth0": "no carrier, operstate down"},
		},
		{
			name: "administratively down", root: "admin-down",
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonInterfaceDown, Message: []string{"interface eth0 is administratively down"}},
		},
		{
			name: "dormant", root: "dormant",
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonInterfaceDown, Message: []string{"interface eth0 is not up (operstate dormant)"}},
		},
		{
			name: "operstate unknown with carrier is up", root: "operstate-unknown",
			want: probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK},
		},
		{
			name: "no global address", root: "healthy",
			addrs: map[string][]net.Addr{"eth0": {ipNet("fe80::10/64"), ipNet("169.254.3.4/16")}},
			want:  probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoGlobalAddress, Message: []string{"interface eth0 has no global address"}},
		},
		{
			name: "addresses unreadable", root: "healthy", addrs: map[string][]net.Addr{},
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"listing addresses of interface eth0: route ip+net: no such network interface"}},
		},
		{
			name: "ECMP: every preferred default route's interface", root: "ecmp", cfg: Config{DefaultRoute: RouteIPv4},
			want:        probestest.Want{Status: probes.StatusProblem, Reason: ReasonInterfaceDown, Message: []string{"interface eth1 has no carrier (operstate lowerlayerdown)"}},
			wantReading: map[string]string{"default_route_ipv4": "eth0 via 192.0.2.1, eth1 via 192.0.3.1", "interface eth0": "up, 192.0.2.10/24 2001:db8::10/64"},
		},
		{
			name: "IPv6 uplink checked for any", root: "split",
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonInterfaceDown, Message: []string{"interface eth1 has no carrier"}},
		},
		{
			name: "IPv6 uplink not checked for ipv4", root: "split", cfg: Config{DefaultRoute: RouteIPv4},
			want: probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK, Message: []string{"default route IPv4 via eth0, IPv6 via eth1; interface eth0 up"}},
		},
		{
			name: "no default route", root: "no-default",
			want: probestest.Want{
				Status: probes.StatusProblem, Reason: ReasonNoDefaultRoute, Message: []string{"no default route (IPv4 or IPv6)"},
				Readings: []probes.Reading{
					{Name: "default_route_ipv4", Value: "none"},
					{Name: "default_route_ipv6", Value: "none"},
					{Name: "cni_config", Value: "10-flannel.conflist"},
				},
			},
		},
		{
			name: "no default route, none required", root: "no-default", cfg: Config{DefaultRoute: RouteNone},
			want: probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK, Message: []string{"CNI config 10-flannel.conflist"}},
		},
		{
			name: "no default route, interface still checked", root: "no-default", cfg: Config{Interfaces: []string{"eth0"}},
			want:        probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoDefaultRoute, Message: []string{"no default route (IPv4 or IPv6)"}},
			wantReading: map[string]string{"interface eth0": "up, 192.0.2.10/24 2001:db8::10/64"},
		},
		{
			name: "reject default routes do not count", root: "reject-default",
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoDefaultRoute},
		},
		{
			name: "IPv6 only, any", root: "ipv6-only",
			want: probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK, Message: []string{"default route IPv6 via eth0"}},
		},
		{
			name: "IPv6 only, ipv4 required", root: "ipv6-only", cfg: Config{DefaultRoute: RouteIPv4},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoDefaultRoute, Message: []string{"no IPv4 default route"}},
		},
		{
			name: "IPv6 only, both required", root: "ipv6-only", cfg: Config{DefaultRoute: RouteBoth},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoDefaultRoute, Message: []string{"no IPv4 default route"}},
		},
		{
			name: "IPv6 disabled, any", root: "ipv6-disabled",
			want:        probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK},
			wantReading: map[string]string{"default_route_ipv6": "IPv6 disabled"},
		},
		{
			name: "IPv6 disabled, ipv6 required", root: "ipv6-disabled", cfg: Config{DefaultRoute: RouteIPv6},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoDefaultRoute, Message: []string{"no IPv6 default route (IPv6 is disabled: testdata/ipv6-disabled/proc/net/ipv6_route does not exist)"}},
		},
		{
			name: "route garbage", root: "route-garbage",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"parsing testdata/route-garbage/proc/net/route: line 1"}},
		},
		{
			name: "route line garbage", root: "route-bad-line",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"parsing testdata/route-bad-line/proc/net/route: line 2: destination"}},
		},
		{
			name: "route truncated", root: "route-truncated",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"route-truncated/proc/net/route: line 2: got 8 fields, want 11"}},
		},
		{
			name: "route empty", root: "route-empty",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"route-empty/proc/net/route: file is empty"}},
		},
		{
			// The IPv6 default route still names eth0, which is checked.
			name: "route unreadable, IPv6 fine", root: "route-empty", cfg: Config{DefaultRoute: RouteIPv6},
			want:        probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"route-empty/proc/net/route: file is empty"}},
			wantReading: map[string]string{"default_route_ipv4": "unreadable", "interface eth0": "up, 192.0.2.10/24 2001:db8::10/64"},
		},
		{
			name: "problem seen despite a read error", root: "route-empty", cfg: Config{Interfaces: []string{"wlan0"}},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonInterfaceDown, Message: []string{"interface wlan0 has no carrier", "; parsing testdata/route-empty/proc/net/route: file is empty"}},
		},
		{
			name: "ipv6 route garbage", root: "ipv6-route-garbage",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"parsing testdata/ipv6-route-garbage/proc/net/ipv6_route: line 1: got 3 fields, want 10"}},
		},
		{
			// A CNI directory missing where /proc is missing too says
			// nothing about the node: Unknown, never a taint.
			name: "empty host root", root: "empty-root",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"no such file or directory", "CNI config directory /etc/cni/net.d does not exist"}},
		},
		{
			name: "no host root", root: "does-not-exist",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"reading routes: open testdata/does-not-exist/proc/net/route: no such file or directory", "reading CNI config directory: host root: stat testdata/does-not-exist"}},
		},
		{
			name: "no sysfs", root: "no-sysfs", cfg: noCNI,
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"reading interfaces: stat testdata/no-sysfs/sys/class/net: no such file or directory"}},
		},
		{
			name: "flags garbage", root: "flags-garbage",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"parsing testdata/flags-garbage/sys/class/net/eth0/flags: \"up\" is not a hexadecimal number"}},
		},
		{
			name: "carrier garbage", root: "carrier-garbage",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: []string{"parsing testdata/carrier-garbage/sys/class/net/eth0/carrier: \"2\" is not 0 or 1"}},
		},
		{
			name: "no CNI config", root: "no-cni",
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoCNIConfig, Message: []string{"no CNI network config (*.conf, *.conflist, *.json) in /etc/cni/net.d"}},
		},
		{
			name: "no CNI config directory", root: "no-cni-dir",
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoCNIConfig, Message: []string{"CNI config directory /etc/cni/net.d does not exist"}},
		},
		{
			name: "CNI check off", root: "no-cni-dir", cfg: noCNI,
			want: probestest.Want{Status: probes.StatusOK, Reason: ReasonNetworkOK},
		},
		{
			name: "CNI config elsewhere", root: "healthy", cfg: Config{CNIConfDir: "/etc/cni"},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonNoCNIConfig, Message: []string{"in /etc/cni"}},
		},
		{
			name: "first problem gives the reason, all are listed", root: "no-cni", cfg: Config{Interfaces: []string{"wlan0"}, DefaultRoute: RouteBoth},
			addrs: map[string][]net.Addr{},
			want: probestest.Want{
				Status: probes.StatusProblem, Reason: ReasonInterfaceDown,
				Message: []string{"interface wlan0 has no carrier (operstate down); no CNI network config"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addrs := tt.addrs
			if addrs == nil {
				addrs = fakeAddrs
			}
			got := newFixtureProbe(t, tt.cfg, tt.root, addrs).Probe(context.Background())
			probestest.CheckResult(t, got, tt.want)
			for name, want := range tt.wantReading {
				if got := reading(got.Readings, name); got != want {
					t.Errorf("got reading %s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

func reading(rs []probes.Reading, name string) string {
	for _, r := range rs {
		if r.Name == name {
			return r.Value
		}
	}
	return "<missing>"
}

// fakeConn is the connection fake dials return.
type fakeConn struct{ net.Conn }

func (fakeConn) Close() error { return nil }

func TestProbeTargets(t *testing.T) {
	cfg := Config{
		SkipCNIConfig: true,
		APIServer:     "10.96.0.1:443",
		Targets: []Target{
			{Kind: TargetTCP, Address: "registry.example:443"},
			{Kind: TargetDNS, Address: "example.com", Timeout: 50 * time.Millisecond},
			{Kind: TargetTCP, Address: "[2001:db8::1]:80", Timeout: time.Millisecond},
		},
		TargetTimeout: time.Second,
	}
	tests := []struct {
		name    string
		refuse  map[string]bool // addresses whose dial fails at once
		hang    map[string]bool // addresses whose dial or lookup blocks until ctx ends
		noAddrs bool            // lookups succeed with no addresses
		want    probestest.Want
	}{
		{
			name: "all reachable", hang: map[string]bool{},
			want: probestest.Want{
				Status: probes.StatusOK, Reason: ReasonNetworkOK,
				Message: []string{"API server 10.96.0.1:443 reachable; target tcp registry.example:443 reachable; target dns example.com reachable; target tcp [2001:db8::1]:80 reachable"},
				Readings: []probes.Reading{
					{Name: "default_route_ipv4", Value: "eth0 via 192.0.2.1"},
					{Name: "default_route_ipv6", Value: "eth0 via fe80::1"},
					{Name: "interface eth0", Value: "up, 192.0.2.10/24 2001:db8::10/64"},
					{Name: "API server 10.96.0.1:443", Value: "reachable"},
					{Name: "target tcp registry.example:443", Value: "reachable"},
					{Name: "target dns example.com", Value: "reachable"},
					{Name: "target tcp [2001:db8::1]:80", Value: "reachable"},
				},
			},
		},
		{
			name: "API server refused", refuse: map[string]bool{"10.96.0.1:443": true},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonAPIServerUnreachable, Message: []string{"API server 10.96.0.1:443 unreachable: connection refused"}},
		},
		{
			name: "target refused", refuse: map[string]bool{"registry.example:443": true},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonTargetUnreachable, Message: []string{"target tcp registry.example:443 unreachable: connection refused"}},
		},
		{
			name: "target times out on its own timeout", hang: map[string]bool{"[2001:db8::1]:80": true},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonTargetUnreachable, Message: []string{"target tcp [2001:db8::1]:80 unreachable: no answer within 1ms (context deadline exceeded)"}},
		},
		{
			name: "DNS times out", hang: map[string]bool{"example.com": true},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonTargetUnreachable, Message: []string{"target dns example.com unreachable: no answer within 50ms"}},
		},
		{
			name: "DNS without addresses", noAddrs: true,
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonTargetUnreachable, Message: []string{"target dns example.com unreachable: no addresses"}},
		},
		{
			name: "API server reason first", refuse: map[string]bool{"10.96.0.1:443": true, "registry.example:443": true},
			want: probestest.Want{Status: probes.StatusProblem, Reason: ReasonAPIServerUnreachable, Message: []string{"API server 10.96.0.1:443 unreachable: connection refused; target tcp registry.example:443 unreachable"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newFixtureProbe(t, cfg, "healthy", fakeAddrs)
			block := func(ctx context.Context, addr string) error {
				if tt.refuse[addr] {
					return errors.New("connection refused")
				}
				if tt.hang[addr] {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}
			p.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
				if network != "tcp" {
					t.Errorf("Dial network %q, want tcp", network)
				}
				if err := block(ctx, address); err != nil {
					return nil, err
				}
				return fakeConn{}, nil
			}
			p.LookupHost = func(ctx context.Context, host string) ([]string, error) {
				if err := block(ctx, host); err != nil {
					return nil, err
				}
				if tt.noAddrs {
					return nil, nil
				}
				return []string{"192.0.2.80"}, nil
			}
			probestest.CheckResult(t, p.Probe(context.Background()), tt.want)
		})
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // empty: valid
	}{
		{"zero", Config{}, ""},
		{"typical", Config{
			Interfaces: []string{"eth0", "bond0.100"}, DefaultRoute: RouteBoth, CNIConfDir: "/etc/cni/net.d",
			APIServer: "10.96.0.1:443", TargetTimeout: time.Second,
			Targets: []Target{{Kind: TargetTCP, Address: "[fd00::1]:53", Timeout: time.Second}, {Kind: TargetDNS, Address: "kubernetes.default.svc"}},
		}, ""},
		{"route requirements", Config{DefaultRoute: RouteNone}, ""},
		{"empty interface", Config{Interfaces: []string{"eth0", ""}}, "Interfaces[1]: interface name is empty"},
		{"long interface", Config{Interfaces: []string{"a-very-long-interface"}}, "Interfaces[0]: interface name \"a-very-long-interface\" is longer than 15 bytes"},
		{"interface with slash", Config{Interfaces: []string{"../eth0"}}, `Interfaces[0]: "../eth0" is not a valid interface name`},
		{"route requirement", Config{DefaultRoute: "IPv4"}, `DefaultRoute: "IPv4" is not one of any, ipv4, ipv6, both, none`},
		{"relative CNI dir", Config{CNIConfDir: "etc/cni"}, `CNIConfDir: "etc/cni" is not an absolute path`},
		{"API server without port", Config{APIServer: "10.96.0.1"}, `APIServer: "10.96.0.1" is not host:port`},
		{"API server port 0", Config{APIServer: "10.96.0.1:0"}, `APIServer: "10.96.0.1:0": port "0" is not a number from 1 to 65535`},
		{"API server named port", Config{APIServer: "10.96.0.1:https"}, `port "https" is not a number`},
		{"API server without host", Config{APIServer: ":443"}, `APIServer: ":443" has no host`},
		{"negative timeout", Config{TargetTimeout: -time.Second}, "TargetTimeout: -1s must not be negative"},
		{"target kind", Config{Targets: []Target{{Kind: "icmp", Address: "10.0.0.1"}}}, `Targets[0].Kind: "icmp" is not tcp or dns`},
		{"tcp target address", Config{Targets: []Target{{Kind: TargetDNS, Address: "a"}, {Kind: TargetTCP, Address: "a"}}}, `Targets[1].Address: "a" is not host:port`},
		{"dns target address", Config{Targets: []Target{{Kind: TargetDNS, Address: "a:53"}}}, `Targets[0].Address: "a:53" is not a host name`},
		{"target timeout", Config{Targets: []Target{{Kind: TargetDNS, Address: "a", Timeout: -1}}}, "Targets[0].Timeout: -1ns must not be negative"},
		{"all errors together", Config{DefaultRoute: "x", TargetTimeout: -1}, "DefaultRoute"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg, probes.Host{})
		probestest.CheckError(t, tt.name, err, tt.wantErr)
		if err != nil && !strings.HasPrefix(err.Error(), "network probe config: ") {
			t.Errorf("%s: error %q does not say it is the network probe's config", tt.name, err)
		}
	}
}

func TestProbeRealHost(t *testing.T) {
	probestest.SkipUnlessRealHost(t, "needs Linux /proc/net and /sys/class/net")
	// The test machine need not be a Kubernetes node, nor have a default
	// route: check only that the real files parse.
	got := probestest.CheckRealHost(t, New, Config{SkipCNIConfig: true, DefaultRoute: RouteNone}, Name)
	if r := reading(got.Readings, "default_route_ipv4"); r == "<missing>" || r == "unreadable" {
		t.Errorf("got default_route_ipv4 reading %q, want the parsed route", r)
	}
}

func TestMissingDefaultRoutes(t *testing.T) {
	some := []route{{Iface: "eth0"}}
	readErr := errors.New("reading routes: boom")
	v4 := func(routes []route, err error) routeFamily {
		return routeFamily{name: "ipv4", routes: routes, err: err}
	}
	v6 := func(routes []route, err error) routeFamily {
		return routeFamily{name: "ipv6", routes: routes, err: err}
	}
	v6Off := routeFamily{name: "ipv6", path: "/host/proc/net/ipv6_route", disabled: true}
	tests := []struct {
		name   string
		req    RouteRequirement
		v4, v6 routeFamily
		want   []string
	}{
		{"any, both present", RouteAny, v4(some, nil), v6(some, nil), nil},
		{"any, ipv6 only", RouteAny, v4(nil, nil), v6(some, nil), nil},
		{"any, none", RouteAny, v4(nil, nil), v6(nil, nil), []string{"no default route (IPv4 or IPv6)"}},
		{"any, none, ipv6 disabled", RouteAny, v4(nil, nil), v6Off, []string{"no default route (IPv4 or IPv6)"}},
		{"any, none, ipv4 unreadable", RouteAny, v4(nil, readErr), v6(nil, nil), nil},
		{"ipv4, missing", RouteIPv4, v4(nil, nil), v6(some, nil), []string{"no IPv4 default route"}},
		{"ipv4, unreadable", RouteIPv4, v4(nil, readErr), v6(some, nil), nil},
		{"ipv6, missing", RouteIPv6, v4(some, nil), v6(nil, nil), []string{"no IPv6 default route"}},
		{"ipv6, disabled", RouteIPv6, v4(some, nil), v6Off, []string{"no IPv6 default route (IPv6 is disabled: /host/proc/net/ipv6_route does not exist)"}},
		{"both, both missing", RouteBoth, v4(nil, nil), v6(nil, nil), []string{"no IPv4 default route", "no IPv6 default route"}},
		{"both, present", RouteBoth, v4(some, nil), v6(some, nil), nil},
		{"none", RouteNone, v4(nil, nil), v6(nil, nil), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := missingDefaultRoutes(tt.req, tt.v4, tt.v6)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestUplinkNames(t *testing.T) {
	v4 := []route{{Iface: "eth0"}, {Iface: "eth1"}}
	v6 := []route{{Iface: "eth1"}, {Iface: "wg0"}}
	tests := []struct {
		req  RouteRequirement
		want string
	}{
		{RouteAny, "eth0 eth1 wg0"},
		{RouteBoth, "eth0 eth1 wg0"},
		{RouteNone, "eth0 eth1 wg0"},
		{RouteIPv4, "eth0 eth1"},
		{RouteIPv6, "eth1 wg0"},
	}
	for _, tt := range tests {
		if got := strings.Join(uplinkNames(tt.req, v4, v6), " "); got != tt.want {
			t.Errorf("uplinkNames(%q): got %q, want %q", tt.req, got, tt.want)
		}
	}
}

func TestLinkStateProblem(t *testing.T) {
	tests := []struct {
		link             linkState
		wantMsg, wantVal string
	}{
		{linkState{}, "interface eth0 is administratively down", "administratively down"},
		{linkState{up: true, operstate: "down"}, "interface eth0 has no carrier (operstate down)", "no carrier, operstate down"},
		{linkState{up: true, operstate: "dormant", carrier: true}, "interface eth0 is not up (operstate dormant)", "operstate dormant"},
		{linkState{up: true, operstate: "up", carrier: true}, "", ""},
		{linkState{up: true, operstate: "unknown", carrier: true}, "", ""},
	}
	for _, tt := range tests {
		msg, val := tt.link.problem("eth0")
		if msg != tt.wantMsg || val != tt.wantVal {
			t.Errorf("%+v: got %q, %q, want %q, %q", tt.link, msg, val, tt.wantMsg, tt.wantVal)
		}
	}
}

// TestInterfaceAddrsAsTheStandardLibrary: the default Addrs finds each
// interface of this network namespace by its index and returns what
// net.InterfaceByName's Addrs returns; a missing interface's error is
// net.InterfaceByName's.
func TestInterfaceAddrsAsTheStandardLibrary(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs) == 0 {
		t.Fatal("no network interface at all (not even lo)")
	}
	for _, ifi := range ifs {
		want, err := ifi.Addrs()
		if err != nil {
			t.Fatal(err)
		}
		got, err := interfaceAddrs(ifi.Name)
		if err != nil {
			t.Errorf("%s: %v", ifi.Name, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: addresses %v, want %v", ifi.Name, got, want)
		}
	}
	const missing = "selftaint-none0"
	_, want := net.InterfaceByName(missing)
	if _, err := interfaceAddrs(missing); err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("missing interface: error %v, want %v", err, want)
	}
}
