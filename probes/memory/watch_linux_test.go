package memory

// Tests of the PSI trigger against the real kernel: a process squeezed in a
// memory cgroup with a small limit stalls on reclaim, which fires the
// trigger. They need root, a kernel with PSI and a memory cgroup (v1 or
// v2): under CI=true they fail without them, elsewhere they are skipped.
// Where the kernel has no PSI, only TestWatchNotAPressureFile and
// TestWatchNoPSI run: a fake pressure file cannot raise POLLPRI, so the
// wake itself is only shown on a kernel that has PSI.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// squeezeEnv makes TestSqueezeHelper allocate far past its cgroup's limit.
const squeezeEnv = "SELFTAINT_SQUEEZE_HELPER"

// TestSqueezeHelper is not a test: TestWatchSqueezeWakesProbe runs the test
// binary again inside a small memory cgroup with only this selected, and
// the kernel stalls it on reclaim, then kills it.
func TestSqueezeHelper(t *testing.T) {
	if os.Getenv(squeezeEnv) == "" {
		return
	}
	b := make([]byte, 512<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println(b[len(b)-4096])
}

// memoryCgroup makes a cgroup limited to 32 MiB (v1's memory controller
// or v2's, whichever holds it) and returns its cgroup.procs path.
func memoryCgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		probestest.FailOrSkip(t, "squeezing memory in a cgroup needs root")
	}
	name := fmt.Sprintf("selftaint-squeeze-%d", os.Getpid())
	limit := "memory.max" // v2
	dir := filepath.Join("/sys/fs/cgroup/memory", name)
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		limit = "memory.limit_in_bytes" // v1
	} else if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(ctl), "memory") {
		_ = os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0o644)
		dir = filepath.Join("/sys/fs/cgroup", name)
	} else {
		probestest.FailOrSkip(t, "no memory cgroup controller (v1 or v2) to squeeze in")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		probestest.FailOrSkip(t, fmt.Sprintf("cannot make a memory cgroup: %v", err))
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing cgroup %s: %v", dir, err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, limit), []byte("33554432"), 0o644); err != nil {
		t.Fatalf("limiting cgroup %s: %v", dir, err)
	}
	return filepath.Join(dir, "cgroup.procs")
}

// squeeze runs TestSqueezeHelper in the cgroup whose procs file is given,
// until the kernel kills it.
func squeeze(t *testing.T, procs string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", procs, exe, "-test.run=^TestSqueezeHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), squeezeEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("squeeze ended: %v %s", err, strings.TrimSpace(string(out)))
}

// TestWatchSqueezeWakesProbe: under a Runner with an hour's interval, a
// real memory squeeze fires the PSI trigger and runs the probe at once.
func TestWatchSqueezeWakesProbe(t *testing.T) {
	if _, err := os.Stat("/proc/pressure/memory"); err != nil {
		probestest.FailOrSkip(t, fmt.Sprintf("the kernel has no memory PSI (CONFIG_PSI): %v", err))
	}
	procs := memoryCgroup(t)
	p, err := New(Config{AvailableBelow: probes.Threshold{Value: 1, Percent: true}}, probes.Host{Root: "/"})
	if err != nil {
		t.Fatal(err)
	}
	p.wakeStall = 10 * time.Millisecond
	armed := make(chan struct{})
	p.armed = func() { close(armed) }
	r, err := probes.NewRunner([]probes.Entry{{Probe: p, Interval: time.Hour, Timeout: 10 * time.Second}}, probes.RunnerOptions{Jitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan probes.Result, 100)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, func(res probes.Result) { results <- res })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-results:
	case <-time.After(30 * time.Second):
		t.Fatal("no first run")
	}
	select {
	case <-armed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the PSI trigger was never armed: %+v", r.Stats()[0])
	}
	// Each squeeze lasts about a second; the trigger fires at most once
	// per 2s window. Several tries, so a squeeze that happens to stall
	// too little on a loaded machine does not fail the test.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		squeeze(t, procs)
		select {
		case res := <-results:
			t.Logf("woken run: %s %s: %s", res.Status, res.Reason, res.Message)
			if st := r.Stats()[0]; st.Wakes == 0 {
				t.Errorf("a run came but Wakes = 0: %+v", st)
			}
			return
		case <-time.After(3 * time.Second):
		}
	}
	t.Fatalf("squeezes for 60s never woke the probe (its interval is an hour): %+v", r.Stats()[0])
}

// TestWatchNoPSI: without a pressure file, Watch says the kernel has no PSI,
// so the runner keeps the probe on its interval.
func TestWatchNoPSI(t *testing.T) {
	p, err := New(Config{}, probes.Host{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Watch(t.Context(), func() {})
	if err == nil || !strings.Contains(err.Error(), "no PSI") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Watch = %v, want an error saying the kernel has no PSI", err)
	}
}

// TestWatchNotAPressureFile: a regular file in place of the pressure file
// (a fixture host) never raises POLLPRI; Watch says so instead of spinning.
func TestWatchNotAPressureFile(t *testing.T) {
	root := t.TempDir()
	data, err := os.ReadFile("testdata/healthy/proc/pressure/memory")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "proc", "pressure"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "pressure", "memory"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{}, probes.Host{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Watch(t.Context(), func() { t.Error("woken by a regular file") })
	if err == nil || !strings.Contains(err.Error(), "not a kernel pressure file") {
		t.Errorf("Watch = %v, want an error saying it is not a kernel pressure file", err)
	}
}
