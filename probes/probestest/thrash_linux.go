package probestest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Thrash drives real memory pressure without touching the rest of the
// machine: reader processes in a memory cgroup with a small limit read a
// file somewhat larger than the limit over and over, so their page cache
// is reclaimed and refaulted all the time and the kernel stalls them on
// memory (PSI "some"). It works on cgroup v1, which has no memory.high,
// as on v2. The file lives on a real filesystem (not tmpfs), and only its
// own pages are dropped from the cache.
type Thrash struct {
	// Cgroup is the memory cgroup's directory.
	Cgroup string
	// File is the file the readers read.
	File string
	// procs is the cgroup's cgroup.procs.
	procs string
	// cmd runs the readers, each in its process group; nil when stopped.
	cmd *exec.Cmd
}

// NewThrash makes a memory cgroup limited to limit bytes and a file of
// size bytes whose pages are not in the cache, both removed when t ends.
// It needs root and a memory cgroup controller (v1 or v2): under CI=true
// it fails without them, elsewhere it skips.
func NewThrash(t testing.TB, limit, size int64) *Thrash {
	t.Helper()
	if os.Geteuid() != 0 {
		FailOrSkip(t, "making a memory cgroup needs root")
	}
	if _, err := exec.LookPath("cat"); err != nil {
		FailOrSkip(t, "thrashing needs cat(1)")
	}
	name := fmt.Sprintf("selftaint-thrash-%d-%s", os.Getpid(), strings.NewReplacer("/", "-").Replace(t.Name()))
	limitFile := "memory.max" // v2
	dir := filepath.Join("/sys/fs/cgroup/memory", name)
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		limitFile = "memory.limit_in_bytes" // v1
	} else if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(ctl), "memory") {
		_ = os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0o644)
		dir = filepath.Join("/sys/fs/cgroup", name)
	} else {
		FailOrSkip(t, "no memory cgroup controller (v1 or v2)")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		FailOrSkip(t, fmt.Sprintf("cannot make a memory cgroup: %v", err))
	}
	th := &Thrash{Cgroup: dir, procs: filepath.Join(dir, "cgroup.procs")}
	t.Cleanup(func() {
		if err := th.Stop(); err != nil {
			t.Error(err)
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing cgroup %s: %v", dir, err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(fmt.Sprint(limit)), 0o644); err != nil {
		t.Fatalf("limiting cgroup %s: %v", dir, err)
	}
	th.File = filepath.Join(realFSDir(t), "thrash")
	if err := writeUncached(th.File, size); err != nil {
		t.Fatal(err)
	}
	return th
}

// realFSDir is a temporary directory on a filesystem with a backing store:
// t.TempDir(), or one under /var/tmp where that is tmpfs.
func realFSDir(t testing.TB) string {
	t.Helper()
	for _, dir := range []string{t.TempDir(), "/var/tmp"} {
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil || fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC {
			continue
		}
		if dir == "/var/tmp" {
			d, err := os.MkdirTemp(dir, "selftaint-thrash-")
			if err != nil {
				continue
			}
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
		return dir
	}
	FailOrSkip(t, "no temporary directory on a real filesystem (both the test's and /var/tmp are tmpfs): page-cache thrashing needs one")
	return ""
}

// writeUncached writes size bytes to path and drops the file's own pages
// from the page cache (written back first), so the readers' reads charge
// them to their cgroup.
func writeUncached(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the thrash file: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1) // not zeros: no filesystem shortcut
	}
	for n := int64(0); n < size; n += int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), size-n)]); err != nil {
			return fmt.Errorf("writing the thrash file: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing the thrash file: %w", err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("dropping the thrash file's pages: %w", err)
	}
	return f.Close()
}

// Start starts readers processes in the cgroup, each reading the file
// over and over, until Stop.
func (th *Thrash) Start(t testing.TB, readers int) {
	t.Helper()
	if th.cmd != nil {
		t.Fatal("Thrash.Start: already started")
	}
	script := `echo $$ > "$1" || exit 1
i=0
while [ $i -lt "$3" ]; do
	(while :; do cat "$2"; done) >/dev/null &
	i=$((i+1))
done
wait`
	cmd := exec.Command("sh", "-c", script, "sh", th.procs, th.File, fmt.Sprint(readers))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the thrash readers: %v", err)
	}
	th.cmd = cmd
}

// Stop kills the readers (their process group), waits for the shell and
// for the cgroup to empty. Stopping a stopped Thrash does nothing.
func (th *Thrash) Stop() error {
	if th.cmd == nil {
		return nil
	}
	_ = syscall.Kill(-th.cmd.Process.Pid, syscall.SIGKILL)
	err := th.cmd.Wait()
	th.cmd = nil
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return fmt.Errorf("waiting for the thrash readers: %w", err)
	}
	// The readers may outlive the shell for a moment: wait until the
	// cgroup is empty, so it can be removed.
	for range 2000 {
		b, err := os.ReadFile(th.procs)
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("the thrash readers in %s did not end within 10s", th.Cgroup)
}
