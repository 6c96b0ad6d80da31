package disk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

const gib = 1 << 30

func pct(v float64) probes.Threshold { return probes.Threshold{Value: v, Percent: true} }

// fakeStatfs answers for host paths under root from usages, records the
// host paths asked for, and fails for anything else.
func fakeStatfs(root string, usages map[string]Usage, errs map[string]error, asked *[]string) func(string) (Usage, error) {
	return func(path string) (Usage, error) {
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return Usage{}, err
		}
		host := filepath.Clean("/" + rel)
		*asked = append(*asked, host)
		if err := errs[host]; err != nil {
			return Usage{}, &os.PathError{Op: "statfs", Path: path, Err: err}
		}
		u, ok := usages[host]
		if !ok {
			return Usage{}, &os.PathError{Op: "statfs", Path: path, Err: syscall.ENOENT}
		}
		return u, nil
	}
}

func TestProbe(t *testing.T) {
	healthy := Usage{TotalBytes: 40 * gib, FreeBytes: 30 * gib, TotalInodes: 2_000_000, FreeInodes: 1_500_000, Device: 1}
	lowSpace := Usage{TotalBytes: 40 * gib, FreeBytes: 12 * gib / 10, TotalInodes: 2_000_000, FreeInodes: 1_500_000, Device: 2}
	lowInodes := Usage{TotalBytes: 40 * gib, FreeBytes: 30 * gib, TotalInodes: 2_000_000, FreeInodes: 500, Device: 3}
	def := Config{FreeBelow: pct(10), InodesFreeBelow: pct(5)}
	onDev := func(u Usage, dev uint64) Usage { u.Device = dev; return u }

	tests := []struct {
		name         string
		root         string
		cfg          Config
		usages       map[string]Usage
		errs         map[string]error
		wantStatus   probes.Status
		wantReason   string
		wantMessage  []string // substrings
		wantNot      []string // must not appear in the message
		wantAsked    []string
		wantReadings []probes.Reading // nil: not checked
	}{
		{
			name: "bare node, defaults, healthy", root: "bare-node", cfg: def,
			usages:     map[string]Usage{"/": healthy},
			wantStatus: probes.StatusOK, wantReason: ReasonDiskOK,
			wantMessage: []string{"free space on / 30 GiB (75.0% of 40 GiB)"},
			wantAsked:   []string{"/"},
			wantReadings: []probes.Reading{
				{Name: "/ free", Value: "30 GiB (75.0% of 40 GiB)"},
				{Name: "/ inodes free", Value: "1500000 (75.0% of 2000000)"},
			},
		},
		{
			name: "kubelet node, one filesystem, low: one message", root: "kubelet-node", cfg: def,
			usages: map[string]Usage{
				"/": lowSpace, "/var/lib/kubelet": lowSpace, "/var/lib/containerd": lowSpace,
			},
			wantStatus: probes.StatusProblem, wantReason: ReasonLowDiskSpace,
			wantMessage: []string{"free space on / (also /var/lib/kubelet, /var/lib/containerd) 1.2 GiB (3.0% of 40 GiB) is below 10%"},
			wantNot:     []string{";"},
			wantAsked:   []string{"/", "/var/lib/kubelet", "/var/lib/containerd"},
			wantReadings: []probes.Reading{
				{Name: "/ also", Value: "/var/lib/kubelet, /var/lib/containerd"},
				{Name: "/ free", Value: "1.2 GiB (3.0% of 40 GiB)"},
				{Name: "/ inodes free", Value: "1500000 (75.0% of 2000000)"},
			},
		},
		{
			name: "kubelet node, separate filesystems, space and inodes low", root: "kubelet-node", cfg: def,
			usages: map[string]Usage{
				"/": healthy, "/var/lib/kubelet": lowInodes, "/var/lib/containerd": lowSpace,
			},
			wantStatus: probes.StatusProblem, wantReason: ReasonLowDiskSpace,
			wantMessage: []string{
				"free space on /var/lib/containerd 1.2 GiB (3.0% of 40 GiB) is below 10%",
				"free inodes on /var/lib/kubelet 500 (0.0% of 2000000) is below 5%",
			},
			wantNot: []string{"free space on / "},
		},
		{
			name: "inodes low only", root: "kubelet-node", cfg: def,
			usages: map[string]Usage{
				"/": healthy, "/var/lib/kubelet": healthy, "/var/lib/containerd": lowInodes,
			},
			wantStatus: probes.StatusProblem, wantReason: ReasonLowInodes,
			wantMessage: []string{"free inodes on /var/lib/containerd 500 (0.0% of 2000000) is below 5%"},
		},
		{
			name: "absolute thresholds", root: "kubelet-node",
			cfg: Config{
				Paths:     []string{"/", "/data"},
				FreeBelow: probes.Threshold{Value: 2 * gib}, InodesFreeBelow: probes.Threshold{Value: 1000},
			},
			usages:     map[string]Usage{"/": onDev(lowSpace, 1), "/data": lowInodes},
			wantStatus: probes.StatusProblem, wantReason: ReasonLowDiskSpace,
			wantMessage: []string{
				"free space on / 1.2 GiB (3.0% of 40 GiB) is below 2 GiB",
				"free inodes on /data 500 (0.0% of 2000000) is below 1000",
			},
		},
		{
			name: "thresholds disabled", root: "kubelet-node", cfg: Config{},
			usages: map[string]Usage{
				"/": healthy, "/var/lib/kubelet": lowInodes, "/var/lib/containerd": lowSpace,
			},
			wantStatus: probes.StatusOK, wantReason: ReasonDiskOK,
			wantMessage: []string{"free space on / 30 GiB", "; free space on /var/lib/containerd 1.2 GiB"},
		},
		{
			name: "no inode total: inode check skipped", root: "bare-node", cfg: def,
			usages:     map[string]Usage{"/": {TotalBytes: 40 * gib, FreeBytes: 30 * gib, Device: 1}},
			wantStatus: probes.StatusOK, wantReason: ReasonDiskOK,
			wantReadings: []probes.Reading{
				{Name: "/ free", Value: "30 GiB (75.0% of 40 GiB)"},
				{Name: "/ inodes free", Value: "not reported"},
			},
		},
		{
			name: "unknown device never merged", root: "kubelet-node", cfg: def,
			usages: map[string]Usage{
				"/": onDev(lowSpace, 0), "/var/lib/kubelet": onDev(lowSpace, 0), "/var/lib/containerd": onDev(healthy, 0),
			},
			wantStatus: probes.StatusProblem, wantReason: ReasonLowDiskSpace,
			wantMessage: []string{"free space on / 1.2 GiB", "; free space on /var/lib/kubelet 1.2 GiB"},
		},
		{
			name: "configured paths, cleaned and deduplicated", root: "kubelet-node",
			cfg:        Config{Paths: []string{"/var/lib/kubelet/", "/var/lib/kubelet", "/data"}, FreeBelow: pct(10)},
			usages:     map[string]Usage{"/var/lib/kubelet": healthy, "/data": healthy},
			wantStatus: probes.StatusOK, wantReason: ReasonDiskOK,
			wantMessage: []string{"free space on /var/lib/kubelet (also /data) 30 GiB"},
			wantAsked:   []string{"/var/lib/kubelet", "/data"},
		},
		{
			name: "configured path missing", root: "bare-node",
			cfg:        Config{Paths: []string{"/", "/data"}, FreeBelow: pct(10)},
			usages:     map[string]Usage{"/": healthy},
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"cannot read /data: resolving host path /data: lstat testdata/bare-node/data: no such file or directory"},
			wantAsked:   []string{"/"},
		},
		{
			name: "statfs fails", root: "kubelet-node", cfg: def,
			usages:     map[string]Usage{"/": healthy, "/var/lib/kubelet": healthy},
			errs:       map[string]error{"/var/lib/containerd": syscall.EIO},
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"cannot read /var/lib/containerd: reading filesystem usage: statfs testdata/kubelet-node/var/lib/containerd: input/output error"},
		},
		{
			name: "problem seen despite a read error", root: "kubelet-node", cfg: def,
			usages:     map[string]Usage{"/": lowSpace, "/var/lib/kubelet": healthy},
			errs:       map[string]error{"/var/lib/containerd": syscall.EIO},
			wantStatus: probes.StatusProblem, wantReason: ReasonLowDiskSpace,
			wantMessage: []string{"free space on / 1.2 GiB", "; cannot read /var/lib/containerd"},
		},
		{
			name: "host root missing", root: "does-not-exist", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"cannot read /: "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join("testdata", tt.root)
			p, err := New(tt.cfg, probes.Host{Root: root})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			var asked []string
			p.Statfs = fakeStatfs(root, tt.usages, tt.errs, &asked)
			got := p.Probe(context.Background())
			probestest.CheckResult(t, got, probestest.Want{Status: tt.wantStatus, Reason: tt.wantReason, Message: tt.wantMessage, Readings: tt.wantReadings})
			for _, not := range tt.wantNot {
				if strings.Contains(got.Message, not) {
					t.Errorf("got message %q, want it not to contain %q", got.Message, not)
				}
			}
			if tt.wantAsked != nil && strings.Join(asked, ",") != strings.Join(tt.wantAsked, ",") {
				t.Errorf("got statfs calls for %q, want %q", asked, tt.wantAsked)
			}
		})
	}
}

// An absolute symlink in the host tree is followed inside the host root.
func TestProbeFollowsSymlinksInsideRoot(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"var/lib", "mnt/data/kubelet"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/mnt/data/kubelet", filepath.Join(root, "var/lib/kubelet")); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{}, probes.Host{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	p.Statfs = fakeStatfs(root, map[string]Usage{"/": {TotalBytes: 1, Device: 1}, "/mnt/data/kubelet": {TotalBytes: 1, Device: 2}}, nil, &asked)
	got := p.Probe(context.Background())
	if got.Status != probes.StatusOK {
		t.Errorf("got %s/%s %q, want OK", got.Status, got.Reason, got.Message)
	}
	if want := "/,/mnt/data/kubelet"; strings.Join(asked, ",") != want {
		t.Errorf("got statfs calls for %q, want %q", asked, want)
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // empty: valid
	}{
		{"zero", Config{}, ""},
		{"typical", Config{Paths: []string{"/", "/data"}, FreeBelow: pct(10), InodesFreeBelow: pct(5)}, ""},
		{"relative path", Config{Paths: []string{"var/lib"}}, `Paths[0]: "var/lib" is not an absolute path`},
		{"empty path", Config{Paths: []string{""}}, `Paths[0]: "" is not an absolute path`},
		{"free percent above 100", Config{FreeBelow: pct(101)}, "FreeBelow: threshold 101% must not be above 100%"},
		{"inodes negative", Config{InodesFreeBelow: probes.Threshold{Value: -3}}, "InodesFreeBelow: threshold -3 must not be negative"},
		{"inodes count of 2^64", Config{InodesFreeBelow: probes.Threshold{Value: 1 << 64}}, "InodesFreeBelow: threshold 18446744073709551616 is out of range: a count must be a whole number from 0 to 18446744073709551615"},
		{"inodes fractional count", Config{InodesFreeBelow: probes.Threshold{Value: 0.5}}, "InodesFreeBelow: threshold 0.5 is out of range"},
		{"free bytes of 2^64", Config{FreeBelow: probes.Threshold{Value: 1 << 64}}, "FreeBelow: threshold 18446744073709551616 is too large"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg, probes.Host{})
		probestest.CheckError(t, tt.name, err, tt.wantErr)
	}
}

func TestStatfsReal(t *testing.T) {
	probestest.SkipUnlessRealHost(t, "needs Linux statfs")
	dir := t.TempDir()
	u, err := statfs(dir)
	if err != nil {
		t.Fatalf("statfs(%q): %v", dir, err)
	}
	if u.TotalBytes == 0 || u.FreeBytes > u.TotalBytes || u.Device == 0 {
		t.Errorf("statfs(%q) = %+v, want a size, free <= size and a device", dir, u)
	}
	_, err = statfs(filepath.Join(dir, "missing"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("statfs(missing) error = %v, want ENOENT naming the path", err)
	}
}

func TestProbeRealHost(t *testing.T) {
	probestest.SkipUnlessRealHost(t, "needs Linux statfs")
	got := probestest.CheckRealHost(t, New, Config{FreeBelow: pct(1), InodesFreeBelow: pct(1)}, "disk")
	if len(got.Readings) < 2 {
		t.Errorf("got readings %v, want free space and inodes of /", got.Readings)
	}
}
