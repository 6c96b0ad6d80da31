package probes

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shirou/gopsutil/v3/common"
)

func TestHostPaths(t *testing.T) {
	tests := []struct {
		root string
		call func(Host) string
		want string
	}{
		{"", func(h Host) string { return h.Path("/proc/meminfo") }, "/proc/meminfo"},
		{"/", func(h Host) string { return h.Path("/proc/meminfo") }, "/proc/meminfo"},
		{"/host", func(h Host) string { return h.Path("/proc/meminfo") }, "/host/proc/meminfo"},
		{"/host/", func(h Host) string { return h.Path("/") }, "/host"},
		{"/host", func(h Host) string { return h.Path("var/lib/kubelet") }, "/host/var/lib/kubelet"},
		{"/host", func(h Host) string { return h.Path("/../../etc/passwd") }, "/host/etc/passwd"},
		{"testdata/x", func(h Host) string { return h.Path("/proc") }, "testdata/x/proc"},
		{"/host", func(h Host) string { return h.Proc() }, "/host/proc"},
		{"/host", func(h Host) string { return h.Proc("pressure", "memory") }, "/host/proc/pressure/memory"},
		{"", func(h Host) string { return h.Proc("sys/kernel/pid_max") }, "/proc/sys/kernel/pid_max"},
		{"/host", func(h Host) string { return h.Sys("class", "net") }, "/host/sys/class/net"},
		{"", func(h Host) string { return h.Sys() }, "/sys"},
	}
	for i, tt := range tests {
		if got := tt.call(Host{Root: tt.root}); got != tt.want {
			t.Errorf("case %d (root %q): got %q, want %q", i, tt.root, got, tt.want)
		}
	}
}

func TestHostWithContext(t *testing.T) {
	tests := []struct {
		root string
		want common.EnvMap
	}{
		{"", common.EnvMap{
			common.HostProcEnvKey: "/proc", common.HostSysEnvKey: "/sys", common.HostEtcEnvKey: "/etc",
			common.HostVarEnvKey: "/var", common.HostRunEnvKey: "/run", common.HostDevEnvKey: "/dev",
			common.HostRootEnvKey: "/",
		}},
		{"/host", common.EnvMap{
			common.HostProcEnvKey: "/host/proc", common.HostSysEnvKey: "/host/sys", common.HostEtcEnvKey: "/host/etc",
			common.HostVarEnvKey: "/host/var", common.HostRunEnvKey: "/host/run", common.HostDevEnvKey: "/host/dev",
			common.HostRootEnvKey: "/host",
		}},
	}
	for _, tt := range tests {
		ctx := Host{Root: tt.root}.WithContext(context.Background())
		got, ok := ctx.Value(common.EnvKey).(common.EnvMap)
		if !ok {
			t.Errorf("root %q: context carries no common.EnvMap", tt.root)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("root %q: got %d keys %v, want %v", tt.root, len(got), got, tt.want)
		}
		for k, want := range tt.want {
			if got[k] != want {
				t.Errorf("root %q: %s = %q, want %q", tt.root, k, got[k], want)
			}
		}
	}
}

func TestHostResolve(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"data/kubelet", "var/lib", "var/run"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"var/lib/kubelet":    "/data/kubelet",       // absolute: relative to the host root
		"var/lib/containerd": "../../data/kubelet",  // relative
		"var/lib/escape":     "../../../../../data", // cannot climb above the root
		"var/lib/dangling":   "/nope",
		"var/lib/loop":       "loop",
		"var/lib/chain":      "kubelet",
		"run":                "var/run",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		path    string
		want    string // under root
		wantErr error
	}{
		{"/", "", nil},
		{"/var/lib", "var/lib", nil},
		{"/var/lib/kubelet", "data/kubelet", nil},
		{"/var/lib/kubelet/", "data/kubelet", nil},
		{"/var/lib/containerd", "data/kubelet", nil},
		{"/var/lib/chain", "data/kubelet", nil},
		{"/var/lib/escape", "data", nil},
		{"/run", "var/run", nil},
		{"/var/lib/../lib/./kubelet", "data/kubelet", nil},
		{"/var/lib/dangling", "", fs.ErrNotExist},
		{"/missing/dir", "", fs.ErrNotExist},
		{"/var/lib/loop", "", syscall.ELOOP},
	}
	h := Host{Root: root}
	for _, tt := range tests {
		got, err := h.Resolve(tt.path)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("Resolve(%q) = %q, %v, want error %v naming the path", tt.path, got, err, tt.wantErr)
			}
			continue
		}
		if want := filepath.Join(root, tt.want); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v, want %q", tt.path, got, err, want)
		}
	}
}
