// Package network is selftaint's network probe. It exists so a node that
// has lost its uplink (link down, no carrier, no address), its default
// route or its CNI network config, or that cannot reach the API server or
// other endpoints the workloads need, is tainted before pods are scheduled
// onto a node nobody can reach. It reads the routing tables from the host's
// /proc/net, link state from /sys/class/net, and asks the kernel for the
// interfaces' addresses.
//
// /proc/net, the addresses and the connections the probe opens all belong
// to the network namespace of the process that reads them, so the probe
// must run in the host's network namespace: in a DaemonSet that means
// hostNetwork: true. /sys/class/net shows the namespace sysfs was mounted
// in, which for the host's /sys mounted into the pod is the host's.
package network

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// Name is the network probe's name.
const Name = "network"

// Reasons the network probe reports. When several checks fail, the reason
// is the first failing one in this order, and the message lists them all.
const (
	// ReasonNetworkOK: every check passed.
	ReasonNetworkOK = "NetworkOK"
	// ReasonNoDefaultRoute: a required default route is missing.
	ReasonNoDefaultRoute = "NoDefaultRoute"
	// ReasonInterfaceDown: an uplink is missing, administratively down,
	// without carrier or not operationally up.
	ReasonInterfaceDown = "InterfaceDown"
	// ReasonNoGlobalAddress: an uplink has no global unicast address.
	ReasonNoGlobalAddress = "NoGlobalAddress"
	// ReasonNoCNIConfig: the CNI config directory is missing or holds no
	// network config.
	ReasonNoCNIConfig = "NoCNIConfig"
	// ReasonAPIServerUnreachable: a TCP connection to Config.APIServer
	// failed.
	ReasonAPIServerUnreachable = "APIServerUnreachable"
	// ReasonTargetUnreachable: a configured target could not be reached
	// or resolved.
	ReasonTargetUnreachable = "TargetUnreachable"
	// ReasonReadError: a routing table or sysfs file is missing,
	// unreadable or garbage, or the kernel would not list addresses.
	ReasonReadError = probes.ReasonReadError
)

// Defaults for the zero Config.
const (
	// DefaultCNIConfDir is where the kubelet and container runtimes look
	// for CNI network configs.
	DefaultCNIConfDir = "/etc/cni/net.d"
	// DefaultTargetTimeout bounds one reachability check.
	DefaultTargetTimeout = 2 * time.Second
)

// RouteRequirement says which default routes must exist.
type RouteRequirement string

// Route requirements.
const (
	// RouteAny (also the empty string) wants an IPv4 or an IPv6 default
	// route.
	RouteAny RouteRequirement = "any"
	// RouteIPv4 wants an IPv4 default route.
	RouteIPv4 RouteRequirement = "ipv4"
	// RouteIPv6 wants an IPv6 default route.
	RouteIPv6 RouteRequirement = "ipv6"
	// RouteBoth wants both (dual-stack nodes).
	RouteBoth RouteRequirement = "both"
	// RouteNone wants none (isolated nodes). The interfaces of default
	// routes that do exist are still checked.
	RouteNone RouteRequirement = "none"
)

// TargetKind says how a Target is checked.
type TargetKind string

// Target kinds.
const (
	// TargetTCP connects to Address, "host:port", and closes the
	// connection.
	TargetTCP TargetKind = "tcp"
	// TargetDNS resolves Address, a host name, to at least one address.
	TargetDNS TargetKind = "dns"
)

// Target is an endpoint the node must reach.
type Target struct {
	Kind TargetKind
	// Address is "host:port" for TCP (an IPv6 host in brackets), a name
	// for DNS.
	Address string
	// Timeout bounds the check; 0 means Config.TargetTimeout.
	Timeout time.Duration
}

func (t Target) String() string { return string(t.Kind) + " " + t.Address }

// Config says what the network probe checks. The zero Config checks the
// default routes' interfaces, that an IPv4 or IPv6 default route exists and
// that the CNI config directory holds a network config.
type Config struct {
	// Interfaces are the uplinks to check, by name. Each must exist, be
	// up with carrier and have a global unicast address. Empty means the
	// interfaces of the preferred (lowest metric) default routes of the
	// families DefaultRoute asks for (both families for "any" and "none").
	Interfaces []string
	// DefaultRoute says which default routes must exist. Empty means
	// RouteAny.
	DefaultRoute RouteRequirement
	// SkipCNIConfig turns the CNI config check off, for nodes whose
	// network is not set up by a CNI plugin.
	SkipCNIConfig bool
	// CNIConfDir is the absolute host path of the CNI config directory.
	// Empty means DefaultCNIConfDir. It must hold a *.conf, *.conflist or
	// *.json file.
	CNIConfDir string
	// APIServer is the API server's "host:port", checked with a TCP
	// connection (the agent passes KUBERNETES_SERVICE_HOST:PORT). Empty
	// means not checked.
	APIServer string
	// Targets are further endpoints to check, in order.
	Targets []Target
	// TargetTimeout bounds the API server check and every target without
	// a Timeout of its own. 0 means DefaultTargetTimeout. Targets are
	// checked in parallel, so the runner's timeout for this probe must be
	// above the longest target timeout.
	TargetTimeout time.Duration
}

// Validate checks names, addresses and timeouts. A problem is a
// *probes.ConfigError naming each field.
func (c Config) Validate() error {
	var errs []probes.FieldError
	add := func(field string, err error) {
		if err != nil {
			errs = append(errs, probes.FieldError{Field: field, Detail: err.Error()})
		}
	}
	for i, name := range c.Interfaces {
		add(fmt.Sprintf("Interfaces[%d]", i), validInterfaceName(name))
	}
	switch c.DefaultRoute {
	case "", RouteAny, RouteIPv4, RouteIPv6, RouteBoth, RouteNone:
	default:
		add("DefaultRoute", fmt.Errorf("%q is not one of any, ipv4, ipv6, both, none", c.DefaultRoute))
	}
	if c.CNIConfDir != "" && !path.IsAbs(c.CNIConfDir) {
		add("CNIConfDir", fmt.Errorf("%q is not an absolute path", c.CNIConfDir))
	}
	if c.APIServer != "" {
		add("APIServer", validHostPort(c.APIServer))
	}
	if c.TargetTimeout < 0 {
		add("TargetTimeout", fmt.Errorf("%v must not be negative", c.TargetTimeout))
	}
	for i, t := range c.Targets {
		field := fmt.Sprintf("Targets[%d]", i)
		add(field+".Address", t.validAddress())
		if t.Kind != TargetTCP && t.Kind != TargetDNS {
			add(field+".Kind", fmt.Errorf("%q is not tcp or dns", t.Kind))
		}
		if t.Timeout < 0 {
			add(field+".Timeout", fmt.Errorf("%v must not be negative", t.Timeout))
		}
	}
	return probes.NewConfigError(Name, errs)
}

// validAddress checks the address for the target's kind; an unknown kind
// has no address to check.
func (t Target) validAddress() error {
	switch t.Kind {
	case TargetTCP:
		return validHostPort(t.Address)
	case TargetDNS:
		if t.Address == "" || strings.ContainsAny(t.Address, " \t\n/:") {
			return fmt.Errorf("%q is not a host name", t.Address)
		}
	}
	return nil
}

// validInterfaceName accepts what the kernel's dev_valid_name accepts.
func validInterfaceName(name string) error {
	switch {
	case name == "":
		return errors.New("interface name is empty")
	case len(name) > 15:
		return fmt.Errorf("interface name %q is longer than 15 bytes", name)
	case name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n"):
		return fmt.Errorf("%q is not a valid interface name", name)
	}
	return nil
}

// validHostPort accepts "host:port" with a port number 1-65535.
func validHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	if _, err := netip.ParseAddrPort("0.0.0.0:" + port); err != nil || port == "0" {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
	}
	return nil
}

// Probe is the network probe. It is safe for concurrent use once
// configured.
type Probe struct {
	// Addrs returns the addresses of the named interface. It defaults to
	// interfaceAddrs (net.Interface's Addrs), which asks the kernel of
	// this process's network namespace; tests of fixture hosts replace
	// it. Set it before the probe first runs.
	Addrs func(name string) ([]net.Addr, error)
	// Dial opens TCP connections for the API server and TCP targets. It
	// defaults to a net.Dialer's DialContext.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// LookupHost resolves DNS targets. It defaults to the pure-Go
	// resolver, which honours ctx and reads the host's resolv.conf as
	// this process sees it.
	LookupHost func(ctx context.Context, host string) ([]string, error)

	cfg  Config
	host probes.Host
	// subscribed, if set, is called once Watch's netlink socket has
	// joined its groups; tests wait for it before changing the network.
	subscribed func()
}

// New returns a network probe that reads the host under host.Root.
func New(cfg Config, host probes.Host) (*Probe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DefaultRoute == "" {
		cfg.DefaultRoute = RouteAny
	}
	if cfg.CNIConfDir == "" {
		cfg.CNIConfDir = DefaultCNIConfDir
	}
	if cfg.TargetTimeout == 0 {
		cfg.TargetTimeout = DefaultTargetTimeout
	}
	var uplinks []string
	for _, name := range cfg.Interfaces {
		if !slices.Contains(uplinks, name) {
			uplinks = append(uplinks, name)
		}
	}
	cfg.Interfaces = uplinks
	resolver := &net.Resolver{PreferGo: true}
	return &Probe{
		Addrs:      interfaceAddrs,
		Dial:       (&net.Dialer{}).DialContext,
		LookupHost: resolver.LookupHost,
		cfg:        cfg,
		host:       host,
	}, nil
}

// interfaceAddrs is the default Addrs. The addresses are one netlink dump
// of them (RTM_GETADDR), filtered by the interface's index; the index comes
// from an ioctl where it can, as libc's if_nametoindex does, and not from
// net.InterfaceByName, which dumps every link with its statistics (on a
// node with hundreds of pod veths, the larger part of the probe's work).
// Where the ioctl fails, net.InterfaceByName is asked, and says why.
func interfaceAddrs(name string) ([]net.Addr, error) {
	if index, err := interfaceIndex(name); err == nil {
		return (&net.Interface{Index: index, Name: name}).Addrs()
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	return ifi.Addrs()
}

// Name returns "network".
func (p *Probe) Name() string { return Name }

// Watch implements probes.Waker: it wakes the probe on every rtnetlink
// link, address or route change in this process's network namespace, and
// on an overrun of its socket (ENOBUFS), when changes were lost. The
// probe's interval still resyncs. It returns an error where netlink cannot
// be used (not Linux, or the socket is refused); the probe then runs only
// on its interval.
func (p *Probe) Watch(ctx context.Context, wake func()) error {
	return watchNetlink(ctx, wake, p.subscribed)
}

// report collects what one run found.
type report struct {
	// hostUnreadable: the IPv4 routing table, which every Linux host has,
	// does not exist, so the host root itself is suspect (not mounted,
	// wrong --host-root) and no verdict is trusted.
	hostUnreadable bool
	reason         string   // of the first problem
	problems       []string // what is wrong, in check order
	errs           []string // what could not be read
	oks            []string // what is fine, for the OK message
	readings       []probes.Reading
}

func (r *report) problem(reason, format string, args ...any) {
	if r.reason == "" {
		r.reason = reason
	}
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *report) reading(name, value string) {
	r.readings = append(r.readings, probes.Reading{Name: name, Value: value})
}

// Probe runs every check once: default routes, uplinks, CNI config, then
// the API server and targets in parallel.
func (p *Probe) Probe(ctx context.Context) probes.Result {
	var r report
	uplinks := p.checkRoutes(&r)
	for _, name := range uplinks {
		p.checkInterface(&r, name)
	}
	if !p.cfg.SkipCNIConfig {
		p.checkCNI(&r)
	}
	p.checkTargets(ctx, &r)

	switch {
	case r.hostUnreadable:
		// Without the routing table the host root is suspect: a missing
		// CNI directory there says nothing about the node, and a probe
		// that cannot see the host must never taint it.
		msg := strings.Join(append(r.errs, r.problems...), "; ")
		return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: msg, Readings: r.readings}
	case len(r.problems) > 0:
		// Read errors elsewhere do not hide a problem we did see.
		msg := strings.Join(append(r.problems, r.errs...), "; ")
		return probes.Result{Status: probes.StatusProblem, Reason: r.reason, Message: msg, Readings: r.readings}
	case len(r.errs) > 0:
		return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: strings.Join(r.errs, "; "), Readings: r.readings}
	}
	return probes.Result{Status: probes.StatusOK, Reason: ReasonNetworkOK, Message: strings.Join(r.oks, "; "), Readings: r.readings}
}

// checkRoutes reads both routing tables, checks the default routes
// DefaultRoute asks for, and returns the uplinks to check.
func (p *Probe) checkRoutes(r *report) []string {
	req := p.cfg.DefaultRoute
	v4, v6 := p.readDefaultRoutes()
	for _, fam := range []routeFamily{v4, v6} {
		if fam.err != nil {
			r.errs = append(r.errs, fam.err.Error())
			r.hostUnreadable = r.hostUnreadable || (fam.name == "ipv4" && errors.Is(fam.err, fs.ErrNotExist))
		}
		r.reading("default_route_"+fam.name, fam.reading())
	}
	for _, msg := range missingDefaultRoutes(req, v4, v6) {
		r.problem(ReasonNoDefaultRoute, "%s", msg)
	}
	if ok := defaultRoutesOK(v4.routes, v6.routes); ok != "" {
		r.oks = append(r.oks, ok)
	}
	if len(p.cfg.Interfaces) > 0 {
		return p.cfg.Interfaces
	}
	return uplinkNames(req, v4.routes, v6.routes)
}

// routeFamily is what one routing table said about default routes.
type routeFamily struct {
	name     string  // "ipv4" or "ipv6", as in reading names
	path     string  // the table's file
	routes   []route // the preferred default routes
	err      error   // the table could not be read
	disabled bool    // IPv6 is disabled: the table does not exist
}

// readDefaultRoutes reads both routing tables and keeps their preferred
// default routes. A missing IPv6 table is IPv6 disabled (ipv6.disable=1),
// not an error.
func (p *Probe) readDefaultRoutes() (v4, v6 routeFamily) {
	v4 = routeFamily{name: "ipv4", path: p.host.Proc("net", "route")}
	v4.routes, v4.err = readRoutes(v4.path, parseIPv4Routes)
	v6 = routeFamily{name: "ipv6", path: p.host.Proc("net", "ipv6_route")}
	v6.routes, v6.err = readRoutes(v6.path, parseIPv6Routes)
	if errors.Is(v6.err, fs.ErrNotExist) {
		v6.disabled, v6.err = true, nil
	}
	v4.routes, v6.routes = preferred(v4.routes), preferred(v6.routes)
	return v4, v6
}

// reading is the value of the family's default_route_* reading.
func (f routeFamily) reading() string {
	switch {
	case f.err != nil:
		return "unreadable"
	case f.disabled:
		return "IPv6 disabled"
	case len(f.routes) == 0:
		return "none"
	}
	return joinRoutes(f.routes)
}

// missingDefaultRoutes says which default routes req asks for and the
// tables lack. A table that could not be read lacks nothing: that is a
// read error, reported as such.
func missingDefaultRoutes(req RouteRequirement, v4, v6 routeFamily) []string {
	switch req {
	case RouteAny:
		if v4.err == nil && v6.err == nil && len(v4.routes)+len(v6.routes) == 0 {
			return []string{"no default route (IPv4 or IPv6)"}
		}
	case RouteIPv4:
		return v4.missing("IPv4")
	case RouteIPv6:
		return v6.missing("IPv6")
	case RouteBoth:
		return append(v4.missing("IPv4"), v6.missing("IPv6")...)
	}
	return nil
}

// missing says, in a list of none or one, that the table has no default
// route; label names the family in the message.
func (f routeFamily) missing(label string) []string {
	if f.err != nil || len(f.routes) > 0 {
		return nil
	}
	why := ""
	if f.disabled {
		why = fmt.Sprintf(" (IPv6 is disabled: %s does not exist)", f.path)
	}
	return []string{fmt.Sprintf("no %s default route%s", label, why)}
}

// defaultRoutesOK is the OK message part for the default routes, or ""
// when there are none.
func defaultRoutesOK(v4, v6 []route) string {
	var defaults []string
	for _, rt := range v4 {
		defaults = append(defaults, "IPv4 via "+rt.Iface)
	}
	for _, rt := range v6 {
		defaults = append(defaults, "IPv6 via "+rt.Iface)
	}
	if len(defaults) == 0 {
		return ""
	}
	return "default route " + strings.Join(defaults, ", ")
}

// uplinkNames returns the interfaces of the default routes of the
// families req checks, each once, in route order.
func uplinkNames(req RouteRequirement, v4, v6 []route) []string {
	var uplinks []route
	if req != RouteIPv6 {
		uplinks = append(uplinks, v4...)
	}
	if req != RouteIPv4 {
		uplinks = append(uplinks, v6...)
	}
	var names []string
	for _, rt := range uplinks {
		if !slices.Contains(names, rt.Iface) {
			names = append(names, rt.Iface)
		}
	}
	return names
}

// readRoutes reads and parses a routing table; errors name the file.
func readRoutes(path string, parse func([]byte) ([]route, error)) ([]route, error) {
	data, err := probes.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading routes: %w", err)
	}
	routes, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return routes, nil
}

func joinRoutes(routes []route) string {
	s := make([]string, len(routes))
	for i, r := range routes {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// iffUp is IFF_UP in /sys/class/net/<if>/flags: administratively up.
const iffUp = 0x1

// checkInterface checks that the uplink name exists, is up with carrier and
// has a global unicast address.
func (p *Probe) checkInterface(r *report, name string) {
	key := "interface " + name
	dir := p.host.Sys("class", "net", name)
	if !interfaceExists(r, key, name, dir) {
		return
	}
	link, err := readLink(dir, name)
	if err != nil {
		r.errs = append(r.errs, err.Error())
		r.reading(key, "unreadable")
		return
	}
	if msg, reading := link.problem(name); msg != "" {
		r.problem(ReasonInterfaceDown, "%s", msg)
		r.reading(key, reading)
		return
	}

	addrs, err := p.Addrs(name)
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("listing addresses of interface %s: %v", name, err))
		r.reading(key, "up, addresses unreadable")
		return
	}
	global := globalAddrs(addrs)
	if len(global) == 0 {
		r.problem(ReasonNoGlobalAddress, "interface %s has no global address", name)
		r.reading(key, "up, no global address")
		return
	}
	r.reading(key, "up, "+strings.Join(global, " "))
	r.oks = append(r.oks, fmt.Sprintf("interface %s up with %s", name, strings.Join(global, " ")))
}

// interfaceExists reports whether the interface's sysfs directory dir
// exists. When it does not, it records why under key: the interface is
// missing (a problem) or sysfs cannot be read (an error).
func interfaceExists(r *report, key, name, dir string) bool {
	_, err := os.Stat(dir)
	if err == nil {
		return true
	}
	if !errors.Is(err, fs.ErrNotExist) {
		r.errs = append(r.errs, fmt.Sprintf("reading interface %s: %v", name, err))
		r.reading(key, "unreadable")
		return false
	}
	// Tell a missing interface from a missing or wrong sysfs.
	if _, err := os.Stat(filepath.Dir(dir)); err != nil {
		r.errs = append(r.errs, fmt.Sprintf("reading interfaces: %v", err))
		r.reading(key, "unreadable")
		return false
	}
	r.problem(ReasonInterfaceDown, "interface %s does not exist", name)
	r.reading(key, "missing")
	return false
}

// linkState is an interface's link as sysfs shows it.
type linkState struct {
	up        bool   // administratively (IFF_UP)
	operstate string // read only when up
	carrier   bool   // read only when up
}

// readLink reads the link state of the interface name from its sysfs
// directory dir. It stops at an administratively down interface.
func readLink(dir, name string) (linkState, error) {
	var l linkState
	data, err := readInterfaceFile(dir, name, "flags")
	if err != nil {
		return l, err
	}
	flags, err := parseFlags(data)
	if err != nil {
		return l, fmt.Errorf("parsing %s: %w", filepath.Join(dir, "flags"), err)
	}
	if l.up = flags&iffUp != 0; !l.up {
		return l, nil
	}
	if data, err = readInterfaceFile(dir, name, "operstate"); err != nil {
		return l, err
	}
	if l.operstate = strings.TrimSpace(string(data)); l.operstate == "" {
		return l, fmt.Errorf("parsing %s: file is empty", filepath.Join(dir, "operstate"))
	}
	data, err = readInterfaceFile(dir, name, "carrier")
	switch {
	case errors.Is(err, syscall.EINVAL):
		// The kernel refuses to read carrier while the device is down.
	case err != nil:
		return l, err
	default:
		if l.carrier, err = parseCarrier(data); err != nil {
			return l, fmt.Errorf("parsing %s: %w", filepath.Join(dir, "carrier"), err)
		}
	}
	return l, nil
}

// readInterfaceFile reads file in the interface's sysfs directory dir;
// errors name the interface.
func readInterfaceFile(dir, name, file string) ([]byte, error) {
	data, err := probes.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil, fmt.Errorf("reading interface %s: %w", name, err)
	}
	return data, nil
}

// problem says what is wrong with the link of interface name, as a
// problem message and a reading value, or "", "" when it is up with
// carrier.
func (l linkState) problem(name string) (msg, reading string) {
	switch {
	case !l.up:
		return fmt.Sprintf("interface %s is administratively down", name), "administratively down"
	case !l.carrier:
		return fmt.Sprintf("interface %s has no carrier (operstate %s)", name, l.operstate), "no carrier, operstate " + l.operstate
	// "unknown" is what drivers without operstate support (tun, some
	// virtual and older NICs) report while working.
	case l.operstate != "up" && l.operstate != "unknown":
		return fmt.Sprintf("interface %s is not up (operstate %s)", name, l.operstate), "operstate " + l.operstate
	}
	return "", ""
}

// globalAddrs returns the global unicast addresses among addrs, as
// strings.
func globalAddrs(addrs []net.Addr) []string {
	var global []string
	for _, a := range addrs {
		if ip := addrIP(a); ip.IsGlobalUnicast() {
			global = append(global, a.String())
		}
	}
	return global
}

// addrIP returns the IP of an interface address (an *net.IPNet from
// Interface.Addrs, or an *net.IPAddr).
func addrIP(a net.Addr) net.IP {
	switch a := a.(type) {
	case *net.IPNet:
		return a.IP
	case *net.IPAddr:
		return a.IP
	}
	return nil
}

// cniExtensions are the files libcni (and so the kubelet and container
// runtimes) load network configs from.
var cniExtensions = []string{".conf", ".conflist", ".json"}

// checkCNI checks that the CNI config directory holds a network config.
func (p *Probe) checkCNI(r *report) {
	dir := p.cfg.CNIConfDir
	resolved, err := p.host.Resolve(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if _, rootErr := os.Stat(p.host.Path("/")); rootErr != nil {
			// Not the node missing a config: selftaint misses the node.
			r.errs = append(r.errs, fmt.Sprintf("reading CNI config directory: host root: %v", rootErr))
			r.reading("cni_config", "unreadable")
			return
		}
		r.problem(ReasonNoCNIConfig, "CNI config directory %s does not exist", dir)
		r.reading("cni_config", "directory missing")
		return
	}
	var entries []os.DirEntry
	if err == nil {
		entries, err = os.ReadDir(resolved)
	}
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("reading CNI config directory: %v", err))
		r.reading("cni_config", "unreadable")
		return
	}
	var confs []string
	for _, e := range entries {
		if !e.IsDir() && slices.Contains(cniExtensions, filepath.Ext(e.Name())) {
			confs = append(confs, e.Name()) // ReadDir sorts, as libcni does
		}
	}
	if len(confs) == 0 {
		r.problem(ReasonNoCNIConfig, "no CNI network config (*.conf, *.conflist, *.json) in %s", dir)
		r.reading("cni_config", "none")
		return
	}
	r.reading("cni_config", strings.Join(confs, ", "))
	r.oks = append(r.oks, "CNI config "+confs[0])
}

// checkTargets checks the API server and the targets in parallel and
// reports them in config order.
func (p *Probe) checkTargets(ctx context.Context, r *report) {
	type check struct {
		target Target
		label  string // for messages and readings
		reason string
		err    error
	}
	var checks []*check
	if p.cfg.APIServer != "" {
		checks = append(checks, &check{
			target: Target{Kind: TargetTCP, Address: p.cfg.APIServer},
			label:  "API server " + p.cfg.APIServer,
			reason: ReasonAPIServerUnreachable,
		})
	}
	for _, t := range p.cfg.Targets {
		checks = append(checks, &check{target: t, label: "target " + t.String(), reason: ReasonTargetUnreachable})
	}
	var wg sync.WaitGroup
	for _, c := range checks {
		wg.Go(func() { c.err = p.reach(ctx, c.target) })
	}
	wg.Wait()
	for _, c := range checks {
		if c.err != nil {
			r.problem(c.reason, "%s unreachable: %v", c.label, c.err)
			r.reading(c.label, "unreachable")
			continue
		}
		r.reading(c.label, "reachable")
		r.oks = append(r.oks, c.label+" reachable")
	}
}

// reach checks one target within its timeout.
func (p *Probe) reach(ctx context.Context, t Target) error {
	timeout := t.Timeout
	if timeout == 0 {
		timeout = p.cfg.TargetTimeout
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	switch t.Kind {
	case TargetTCP:
		var conn net.Conn
		if conn, err = p.Dial(tctx, "tcp", t.Address); err == nil {
			conn.Close()
		}
	case TargetDNS:
		var addrs []string
		if addrs, err = p.LookupHost(tctx, t.Address); err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
	}
	// The dialer's socket deadline can fire a moment before tctx's timer.
	var netErr net.Error
	if err != nil && ctx.Err() == nil && (errors.Is(tctx.Err(), context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()) {
		return fmt.Errorf("no answer within %v (%w)", timeout, err)
	}
	return err
}
