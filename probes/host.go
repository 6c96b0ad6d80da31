package probes

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/shirou/gopsutil/v3/common"
)

// Host says where the host's filesystem is visible to selftaint. On a node
// binary Root is "/" (or empty, which means "/"); in a DaemonSet the host's
// root is usually mounted read-only at some other place, e.g. "/host", and
// every path a probe reads must be looked up under it.
//
// Path, Proc and Sys work lexically: the kernel then follows any symlink in
// the result as this process sees the filesystem, so an absolute symlink in
// the host tree (e.g. /var/lib/kubelet -> /data/kubelet) would point into
// the container, not the host. That does not matter for the real files
// below /proc and /sys; for paths that may be symlinks use Resolve.
type Host struct {
	// Root is the host's filesystem root as seen from this process.
	Root string
}

// root returns the cleaned root, "/" when Root is empty.
func (h Host) root() string {
	if h.Root == "" {
		return "/"
	}
	return filepath.Clean(h.Root)
}

// Path returns where the host path p is visible, e.g. "/host/proc/meminfo"
// for "/proc/meminfo" with Root "/host". p is taken as absolute on the host:
// a relative p is anchored at the host's root and ".." cannot climb above it.
func (h Host) Path(p string) string {
	return filepath.Join(h.root(), filepath.Clean("/"+p))
}

// Proc returns the host's /proc joined with elem, e.g. Proc("meminfo").
func (h Host) Proc(elem ...string) string {
	return h.Path(filepath.Join(append([]string{"/proc"}, elem...)...))
}

// Sys returns the host's /sys joined with elem, e.g. Sys("class", "net").
func (h Host) Sys(elem ...string) string {
	return h.Path(filepath.Join(append([]string{"/sys"}, elem...)...))
}

// WithContext returns a copy of ctx that makes gopsutil's *WithContext
// functions (mem.VirtualMemoryWithContext, disk.UsageWithContext, ...) read
// the host's /proc, /sys, /etc, /var, /run and /dev under Root. It sets every
// key explicitly, so HOST_PROC and friends in this process's environment do
// not apply: Host is the single source of truth for where the host is.
func (h Host) WithContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, common.EnvKey, common.EnvMap{
		common.HostProcEnvKey: h.Path("/proc"),
		common.HostSysEnvKey:  h.Path("/sys"),
		common.HostEtcEnvKey:  h.Path("/etc"),
		common.HostVarEnvKey:  h.Path("/var"),
		common.HostRunEnvKey:  h.Path("/run"),
		common.HostDevEnvKey:  h.Path("/dev"),
		common.HostRootEnvKey: h.root(),
	})
}

// maxSymlinks bounds symlink hops in Resolve, like the kernel's limit.
const maxSymlinks = 40

// Resolve returns where the host path p is visible, like Path, but follows
// symlinks as the host would: an absolute link target is taken relative to
// the host's root, and ".." never climbs above it. Every component must
// exist; errors name the path that failed.
func (h Host) Resolve(p string) (string, error) {
	resolved := "/" // host path resolved so far; contains no symlinks
	rest := strings.Split(filepath.Clean("/"+p), "/")
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(h.Path(next))
		if err != nil {
			return "", fmt.Errorf("resolving host path %s: %w", p, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if hops++; hops > maxSymlinks {
			return "", fmt.Errorf("resolving host path %s: %w", p, &fs.PathError{Op: "resolve", Path: h.Path(p), Err: syscall.ELOOP})
		}
		target, err := os.Readlink(h.Path(next))
		if err != nil {
			return "", fmt.Errorf("resolving host path %s: %w", p, err)
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return h.Path(resolved), nil
}
