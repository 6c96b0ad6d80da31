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
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	r, results := runArmed(t, p)
	select {
	case <-results:
	case <-time.After(30 * time.Second):
		t.Fatal("no first run")
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

// runArmed runs p alone on an hour's interval, so only its PSI watch
// wakes it, until the test ends, and waits until its triggers are armed.
// Its results come on the channel returned.
func runArmed(t *testing.T, p *Probe) (*probes.Runner, <-chan probes.Result) {
	t.Helper()
	armed := make(chan struct{})
	p.armed = func() { close(armed) }
	r, err := probes.NewRunner([]probes.Entry{{Probe: p, Interval: time.Hour, Timeout: 10 * time.Second}}, probes.RunnerOptions{Jitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan probes.Result, 1000)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, func(res probes.Result) { results <- res })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-armed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the PSI triggers were never armed: %+v", r.Stats()[0])
	}
	return r, results
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

// requirePSI fails (CI=true) or skips the test where the kernel has no
// memory PSI.
func requirePSI(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/pressure/memory"); err != nil {
		probestest.FailOrSkip(t, fmt.Sprintf("the kernel has no memory PSI (CONFIG_PSI): %v", err))
	}
}

// TestStallRuleRealPressure: page-cache thrashing in a small memory cgroup
// fires the some rule's trigger, and the run it wakes — the probe's
// interval is an hour — is already a problem, said to come from the
// trigger; once the thrashing stops, the probe's own re-check (a timer
// only while in pressure) finds the stall over and reports healthy, again
// without the interval.
func TestStallRuleRealPressure(t *testing.T) {
	requirePSI(t)
	th := probestest.NewThrash(t, 64<<20, 96<<20)
	p, err := New(Config{PSI: StallRules{Some: StallRule{Stall: 100 * time.Millisecond, Window: 2 * time.Second}}}, probes.Host{Root: "/"})
	if err != nil {
		t.Fatal(err)
	}
	r, results := runArmed(t, p)
	// until waits for a result ok accepts, logging the others.
	until := func(what string, ok func(probes.Result) bool) probes.Result {
		t.Helper()
		deadline := time.After(90 * time.Second)
		for {
			select {
			case res := <-results:
				t.Logf("run: %s %s: %s %v", res.Status, res.Reason, res.Message, res.Readings)
				if ok(res) {
					return res
				}
			case <-deadline:
				t.Fatalf("no run showed %s within 90s: %+v", what, r.Stats()[0])
			}
		}
	}
	until("the first run", func(probes.Result) bool { return true })
	th.Start(t, 4)
	until("the trigger's verdict", func(res probes.Result) bool {
		return res.Status == probes.StatusProblem && res.Reason == ReasonMemoryPressureStall && strings.Contains(res.Message, "the kernel's PSI trigger fired")
	})
	if err := th.Stop(); err != nil {
		t.Fatal(err)
	}
	until("the stall over", func(res probes.Result) bool { return res.Status == probes.StatusOK })
	if st := r.Stats()[0]; st.Wakes < 2 {
		t.Errorf("Wakes = %d, want the trigger's and the re-check's (the interval is an hour): %+v", st.Wakes, st)
	}
}

// TestWatchWindowNeedsCapSysResource: without CAP_SYS_RESOURCE (as the
// image's uid 65532 runs) the kernel refuses a 1s window; Watch says so,
// naming the trigger and the capability, and the probe shows it in its
// readings. A 2s window arms on the same terms. The capability is dropped
// from one locked OS thread only, which ends with its goroutine.
func TestWatchWindowNeedsCapSysResource(t *testing.T) {
	requirePSI(t)
	watchUnprivileged := func(window time.Duration) (*Probe, error) {
		p, err := New(Config{PSI: StallRules{Some: StallRule{Stall: 100 * time.Millisecond, Window: window}}}, probes.Host{Root: "/"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		p.armed = cancel // armed: enough, stop watching
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if err := dropCapSysResource(); err != nil {
				errc <- err
				return
			}
			errc <- p.Watch(ctx, func() {})
		}()
		select {
		case err := <-errc:
			return p, err
		case <-time.After(30 * time.Second):
			t.Fatal("Watch neither armed nor failed within 30s")
			return nil, nil
		}
	}
	p, err := watchUnprivileged(time.Second)
	if err == nil || !strings.Contains(err.Error(), `arming PSI trigger "some 100000 1000000"`) || !strings.Contains(err.Error(), "needs CAP_SYS_RESOURCE") {
		t.Errorf("Watch with a 1s window and no CAP_SYS_RESOURCE = %v, want an error naming the trigger and CAP_SYS_RESOURCE", err)
	}
	if res := p.Probe(t.Context()); !hasReading(res, "psi_triggers", "not armed: arming PSI trigger") {
		t.Errorf("the probe's readings %v do not say the trigger is not armed", res.Readings)
	}
	if _, err := watchUnprivileged(2 * time.Second); err != nil {
		t.Errorf("Watch with a 2s window and no CAP_SYS_RESOURCE = %v, want it armed", err)
	}
}

// dropCapSysResource removes CAP_SYS_RESOURCE from the calling thread's
// effective capabilities.
func dropCapSysResource() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Effective &^= 1 << unix.CAP_SYS_RESOURCE
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
