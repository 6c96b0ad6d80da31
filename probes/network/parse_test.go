package network

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/probes/probestest"
)

const v4Header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"

func checkRoutes(t *testing.T, name string, parse func([]byte) ([]route, error), in string, want []route, wantErr string) {
	t.Helper()
	got, err := parse([]byte(in))
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s(%q) error = %v, want one containing %q", name, in, err, wantErr)
		}
		return
	}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("%s(%q) = %v, %v, want %v", name, in, got, err, want)
	}
}

func TestParseIPv4Routes(t *testing.T) {
	gw := netip.MustParseAddr("192.0.2.1")
	tests := []struct {
		name    string
		in      string
		want    []route
		wantErr string
	}{
		{"default via gateway", v4Header + "eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", []route{{Iface: "eth0", Gateway: gw, Metric: 100}}, ""},
		{"on-link default", v4Header + "ppp0\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0\n", []route{{Iface: "ppp0"}}, ""},
		{"connected route only", v4Header + "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n", nil, ""},
		{"header only", v4Header, nil, ""},
		{"header without newline", strings.TrimSuffix(v4Header, "\n"), nil, ""},
		{"route not up", v4Header + "eth0\t00000000\t010200C0\t0002\t0\t0\t0\t00000000\t0\t0\t0\n", nil, ""},
		{"unreachable default", v4Header + "*\t00000000\t00000000\t0201\t0\t0\t0\t00000000\t0\t0\t0\n", nil, ""},
		{"host route to 0.0.0.0 is not default", v4Header + "eth0\t00000000\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0\n", nil, ""},
		{
			"two defaults in file order",
			v4Header + "eth1\t00000000\t010300C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\neth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n",
			[]route{{Iface: "eth1", Gateway: netip.MustParseAddr("192.0.3.1"), Metric: 600}, {Iface: "eth0", Gateway: gw, Metric: 100}}, "",
		},
		{"empty", "", nil, "file is empty"},
		{"blank", "\n \n", nil, "file is empty"},
		{"no header", "eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", nil, "line 1"},
		{"garbage", "banana\n", nil, `line 1: "banana" is not the header`},
		{"short line", v4Header + "eth0\t00000000\t010200C0\n", nil, "line 2: got 3 fields, want 11"},
		{"bad destination", v4Header + "eth0\t0000000G\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n", nil, `line 2: destination: "0000000G" is not hexadecimal`},
		{"short gateway", v4Header + "eth0\t00000000\t0102\t0003\t0\t0\t0\t00000000\t0\t0\t0\n", nil, `gateway: "0102" is not 8 hexadecimal digits`},
		{"bad flags", v4Header + "eth0\t00000000\t010200C0\t00x3\t0\t0\t0\t00000000\t0\t0\t0\n", nil, "line 2: flags"},
		{"bad metric", v4Header + "eth0\t00000000\t010200C0\t0003\t0\t0\t-1\t00000000\t0\t0\t0\n", nil, "line 2: metric"},
		{"bad line after default", v4Header + "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\neth0\t00000000\n", nil, "line 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRoutes(t, "parseIPv4Routes", parseIPv4Routes, tt.in, tt.want, tt.wantErr)
		})
	}
}

func TestParseIPv6Routes(t *testing.T) {
	const (
		zero   = "00000000000000000000000000000000"
		gw     = "fe800000000000000000000000000001"
		null   = zero + " 00 " + zero + " 00 " + zero + " ffffffff 00000001 00000000 00200200       lo\n"
		linkLo = "fe800000000000000000000000000000 40 " + zero + " 00 " + zero + " 00000100 00000001 00000000 00000001     eth0\n"
	)
	def := func(nextHop, metric, flags, iface string) string {
		return zero + " 00 " + zero + " 00 " + nextHop + " " + metric + " 00000003 00000000 " + flags + " " + iface + "\n"
	}
	tests := []struct {
		name    string
		in      string
		want    []route
		wantErr string
	}{
		{"default via link-local gateway", linkLo + def(gw, "00000400", "00000003", "eth0") + null, []route{{Iface: "eth0", Gateway: netip.MustParseAddr("fe80::1"), Metric: 1024}}, ""},
		{"on-link default", def(zero, "00000001", "00000001", "wg0"), []route{{Iface: "wg0", Metric: 1}}, ""},
		{"only the null entry", null + null, nil, ""},
		{"empty file: no routes", "", nil, ""},
		{"route not up", def(gw, "00000400", "00000002", "eth0"), nil, ""},
		{"reject default", def(zero, "00000400", "00000201", "lo"), nil, ""},
		{"not a default", "20010db8000000000000000000000000 00 " + zero + " 00 " + gw + " 00000400 00000001 00000000 00000003 eth0\n", nil, ""},
		{"prefix length set", zero + " 40 " + zero + " 00 " + gw + " 00000400 00000001 00000000 00000003 eth0\n", nil, ""},
		{"garbage", "fe80 40 garbage\n", nil, "line 1: got 3 fields, want 10"},
		{"short destination", "fe80 00 " + zero + " 00 " + gw + " 00000400 00000001 00000000 00000003 eth0\n", nil, `destination "fe80" is not 32 hexadecimal digits`},
		{"bad next hop", zero + " 00 " + zero + " 00 " + strings.Repeat("x", 32) + " 00000400 00000001 00000000 00000003 eth0\n", nil, "next hop"},
		{"bad flags", def(gw, "00000400", "0000000z", "eth0"), nil, "line 1: flags"},
		{"bad metric", def(gw, "400", "00000003", "eth0"), nil, "line 1: metric"},
		{"prefix length above 128", zero + " 81 " + zero + " 00 " + gw + " 00000400 00000001 00000000 00000003 eth0\n", nil, "prefix length above 128"},
		{"truncated after a good line", def(gw, "00000400", "00000003", "eth0") + zero + " 00 " + zero, nil, "line 2: got 3 fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRoutes(t, "parseIPv6Routes", parseIPv6Routes, tt.in, tt.want, tt.wantErr)
		})
	}
}

func TestPreferred(t *testing.T) {
	a := route{Iface: "eth0", Metric: 100}
	b := route{Iface: "wlan0", Metric: 600}
	c := route{Iface: "eth1", Metric: 100}
	tests := []struct {
		in, want []route
	}{
		{nil, nil},
		{[]route{b}, []route{b}},
		{[]route{b, a}, []route{a}},
		{[]route{a, b, c}, []route{a, c}},
	}
	for _, tt := range tests {
		if got := preferred(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("preferred(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr string
	}{
		{"0x1003\n", 0x1003, ""},
		{"0x9", 0x9, ""},
		{"", 0, "file is empty"},
		{"1003", 0, "is not a hexadecimal number with 0x"},
		{"0xzz", 0, "is not a hexadecimal number with 0x"},
	}
	for _, tt := range tests {
		probestest.CheckParse(t, "parseFlags", parseFlags, tt.in, tt.want, tt.wantErr)
	}
}

func TestParseCarrier(t *testing.T) {
	tests := []struct {
		in      string
		want    bool
		wantErr string
	}{
		{"1\n", true, ""},
		{"0\n", false, ""},
		{"", false, "file is empty"},
		{"2", false, `"2" is not 0 or 1`},
	}
	for _, tt := range tests {
		probestest.CheckParse(t, "parseCarrier", parseCarrier, tt.in, tt.want, tt.wantErr)
	}
}

func FuzzParseIPv4Routes(f *testing.F) {
	probestest.AddProcFixtures(f, "net/route")
	f.Fuzz(func(t *testing.T, data []byte) {
		routes, err := parseIPv4Routes(data)
		if err != nil {
			return
		}
		for _, r := range routes {
			if r.Iface == "" || (r.Gateway.IsValid() && !r.Gateway.Is4()) {
				t.Errorf("parseIPv4Routes(%q) returned %+v: not a sane default route", data, r)
			}
		}
	})
}

func FuzzParseIPv6Routes(f *testing.F) {
	probestest.AddProcFixtures(f, "net/ipv6_route")
	f.Fuzz(func(t *testing.T, data []byte) {
		routes, err := parseIPv6Routes(data)
		if err != nil {
			return
		}
		for _, r := range routes {
			if r.Iface == "" || (r.Gateway.IsValid() && !r.Gateway.Is6()) {
				t.Errorf("parseIPv6Routes(%q) returned %+v: not a sane default route", data, r)
			}
		}
	})
}
