package network

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Route flags from <linux/route.h>, as /proc/net/route and
// /proc/net/ipv6_route print them.
const (
	rtfUp     = 0x0001 // RTF_UP: the route is usable
	rtfReject = 0x0200 // RTF_REJECT: unreachable, prohibit or blackhole
)

// route is a default route: where packets for anywhere leave the host.
type route struct {
	Iface string
	// Gateway is the next hop; the zero Addr for a route straight out of
	// the interface (a point-to-point link or an on-link default).
	Gateway netip.Addr
	Metric  uint32
}

// String formats r for readings and messages: "eth0 via 192.0.2.1".
func (r route) String() string {
	if !r.Gateway.IsValid() {
		return r.Iface + " (no gateway)"
	}
	return r.Iface + " via " + r.Gateway.String()
}

// parseIPv4Routes parses /proc/net/route and returns its usable default
// routes (destination and mask 0, RTF_UP set, RTF_REJECT not), in file
// order. Every line is checked, so a truncated or garbled file is an error
// rather than a host without a default route. The file looks like this, with
// addresses as hexadecimal 32-bit numbers in the host's byte order:
//
//	Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
//	eth0	00000000	010200C0	0003	0	0	100	00000000	0	0	0
func parseIPv4Routes(data []byte) ([]route, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("file is empty")
	}
	lines := strings.Split(string(data), "\n")
	if f := strings.Fields(lines[0]); len(f) < 11 || f[0] != "Iface" || f[1] != "Destination" || f[7] != "Mask" {
		return nil, fmt.Errorf("line 1: %q is not the header \"Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT\"", truncate(lines[0], 80))
	}
	var routes []route
	for i, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		n := i + 2
		if len(f) != 11 {
			return nil, fmt.Errorf("line %d: got %d fields, want 11", n, len(f))
		}
		var dst, gw, mask [4]byte
		for _, x := range []struct {
			name string
			s    string
			out  *[4]byte
		}{{"destination", f[1], &dst}, {"gateway", f[2], &gw}, {"mask", f[7], &mask}} {
			v, err := parseHex(x.s, 8)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", n, x.name, err)
			}
			binary.NativeEndian.PutUint32(x.out[:], uint32(v))
		}
		flags, err := parseHex(f[3], 4)
		if err != nil {
			return nil, fmt.Errorf("line %d: flags: %w", n, err)
		}
		metric, err := strconv.ParseUint(f[6], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %d: metric: %w", n, err)
		}
		if dst != [4]byte{} || mask != [4]byte{} || flags&rtfUp == 0 || flags&rtfReject != 0 {
			continue
		}
		r := route{Iface: f[0], Metric: uint32(metric)}
		if gw != [4]byte{} {
			r.Gateway = netip.AddrFrom4(gw)
		}
		routes = append(routes, r)
	}
	return routes, nil
}

// parseIPv6Routes parses /proc/net/ipv6_route and returns its usable
// default routes (::/0, RTF_UP set, RTF_REJECT not), in file order. Each
// line has ten fields: destination, its prefix length, source, its prefix
// length, next hop, metric, reference count, use count, flags, interface,
// all but the interface in hexadecimal. An empty file is valid: a host with
// IPv6 enabled but no IPv6 routes at all.
func parseIPv6Routes(data []byte) ([]route, error) {
	var routes []route
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		n := i + 1
		if len(f) != 10 {
			return nil, fmt.Errorf("line %d: got %d fields, want 10", n, len(f))
		}
		var dst, nextHop [16]byte
		for _, x := range []struct {
			name string
			s    string
			out  *[16]byte
		}{{"destination", f[0], &dst}, {"source", f[2], new([16]byte)}, {"next hop", f[4], &nextHop}} {
			if len(x.s) != 32 {
				return nil, fmt.Errorf("line %d: %s %q is not 32 hexadecimal digits", n, x.name, truncate(x.s, 40))
			}
			if _, err := hex.Decode(x.out[:], []byte(x.s)); err != nil {
				return nil, fmt.Errorf("line %d: %s %q: %w", n, x.name, x.s, err)
			}
		}
		// The numeric fields, in file order.
		var nums [6]uint64
		for j, x := range []struct {
			name   string
			field  int
			digits int
		}{
			{"destination prefix length", 1, 2}, {"source prefix length", 3, 2}, {"metric", 5, 8},
			{"reference count", 6, 8}, {"use count", 7, 8}, {"flags", 8, 8},
		} {
			v, err := parseHex(f[x.field], x.digits)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", n, x.name, err)
			}
			nums[j] = v
		}
		prefixLen, srcLen, metric, flags := nums[0], nums[1], nums[2], nums[5]
		if prefixLen > 128 || srcLen > 128 {
			return nil, fmt.Errorf("line %d: prefix length above 128", n)
		}
		if dst != [16]byte{} || prefixLen != 0 || flags&rtfUp == 0 || flags&rtfReject != 0 {
			continue
		}
		r := route{Iface: f[9], Metric: uint32(metric)}
		if nextHop != [16]byte{} {
			r.Gateway = netip.AddrFrom16(nextHop)
		}
		routes = append(routes, r)
	}
	return routes, nil
}

// parseHex parses exactly digits hexadecimal digits.
func parseHex(s string, digits int) (uint64, error) {
	if len(s) != digits {
		return 0, fmt.Errorf("%q is not %d hexadecimal digits", truncate(s, 40), digits)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not hexadecimal", s)
	}
	return v, nil
}

// preferred returns the routes with the lowest metric: the ones the kernel
// sends traffic through (several with equal cost multipath).
func preferred(routes []route) []route {
	if len(routes) == 0 {
		return nil
	}
	best := routes[0].Metric
	for _, r := range routes[1:] {
		best = min(best, r.Metric)
	}
	var out []route
	for _, r := range routes {
		if r.Metric == best {
			out = append(out, r)
		}
	}
	return out
}

// parseFlags parses /sys/class/net/<if>/flags, e.g. "0x1003".
func parseFlags(data []byte) (uint64, error) {
	s := string(bytes.TrimSpace(data))
	if s == "" {
		return 0, errors.New("file is empty")
	}
	hexDigits, ok := strings.CutPrefix(s, "0x")
	if !ok {
		return 0, fmt.Errorf("%q is not a hexadecimal number with 0x", truncate(s, 40))
	}
	v, err := strconv.ParseUint(hexDigits, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a hexadecimal number with 0x", truncate(s, 40))
	}
	return v, nil
}

// parseCarrier parses /sys/class/net/<if>/carrier: "1" or "0".
func parseCarrier(data []byte) (bool, error) {
	switch s := string(bytes.TrimSpace(data)); s {
	case "1":
		return true, nil
	case "0":
		return false, nil
	case "":
		return false, errors.New("file is empty")
	default:
		return false, fmt.Errorf("%q is not 0 or 1", truncate(s, 40))
	}
}

// truncate cuts s to at most n bytes, for quoting garbage in errors.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
