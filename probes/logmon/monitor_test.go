package logmon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// uptime is the fixture host's uptime at t0: it booted at t0-uptime.
const uptime = time.Hour

// fixtureHost is a host root with a boot id and an uptime of uptime.
func fixtureHost(t *testing.T, bootID string) probes.Host {
	t.Helper()
	root := t.TempDir()
	for path, data := range map[string]string{
		"proc/sys/kernel/random/boot_id": bootID + "\n",
		"proc/uptime":                    fmt.Sprintf("%.2f 1234.00\n", uptime.Seconds()),
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return probes.Host{Root: root}
}

// fifo makes a FIFO standing in for /dev/kmsg.
func fifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kmsg")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeKmsg writes records to the FIFO (waiting for its reader to open it).
func writeKmsg(t *testing.T, path string, recs ...string) {
	t.Helper()
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, r := range recs {
		if _, err := io.WriteString(w, r+"\n"); err != nil {
			t.Fatal(err)
		}
	}
}

// rec is a kmsg record logged ago before t0.
func rec(seq int, ago time.Duration, msg string) string {
	return fmt.Sprintf("6,%d,%d,-;%s", seq, (uptime - ago).Microseconds(), msg)
}

func newMonitor(t *testing.T, config string, host probes.Host, path string) *Monitor {
	t.Helper()
	mon, err := New(mustLoad(t, "testdata/npd/"+config), Options{Host: host, Path: path, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	return mon
}

// watch runs p.Watch until the test ends; the channel gets each wake.
func watch(t *testing.T, p *Probe) (<-chan struct{}, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wakes := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() { done <- p.Watch(ctx, func() { wakes <- struct{}{} }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	return wakes, done
}

// waitFor polls p until ok holds of its result, for 30 s.
func waitFor(t *testing.T, p *Probe, what string, ok func(probes.Result) bool) probes.Result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res := p.Probe(context.Background())
		if ok(res) {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen in 30 s; last result %+v", what, res)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func byCondition(ps []*Probe) map[string]*Probe {
	out := map[string]*Probe{}
	for _, p := range ps {
		out[p.Condition()] = p
	}
	return out
}

const hungDocker = "INFO: task docker:1234 blocked for more than 120 seconds."

// TestMonitorKmsgFIFO: kernel-monitor.json unchanged over a FIFO standing
// in for /dev/kmsg: a matching line wakes the watcher, sets its condition
// and gives its Event once, on the first condition's probe; a line from
// before lookback is not matched; a skip in sequence numbers is an Event
// and is said in the healthy conditions' messages.
func TestMonitorKmsgFIFO(t *testing.T) {
	path := fifo(t)
	mon := newMonitor(t, "kernel-monitor.json", fixtureHost(t, "boot-1"), path)
	ps := mon.Probes()
	var names []string
	for _, p := range ps {
		names = append(names, p.Name())
	}
	if want := []string{"logmon-KernelDeadlock", "logmon-XfsShutdown", "logmon-CperHardwareErrorFatal"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("probes: got %v, want %v", names, want)
	}
	cond := byCondition(ps)
	wakes, _ := watch(t, cond["XfsShutdown"])

	writeKmsg(t, path,
		rec(1, 50*time.Minute, "Out of memory: Killed process 1 (old) total-vm:1kB, anon-rss:1kB, file-rss:0kB"), // before lookback (5m)
		rec(2, time.Second, hungDocker))
	select {
	case <-wakes:
	case <-time.After(30 * time.Second):
		t.Fatal("no wake in 30 s after a matching line")
	}
	kd := cond["KernelDeadlock"]
	res := waitFor(t, kd, "KernelDeadlock problem", func(r probes.Result) bool { return r.Status == probes.StatusProblem })
	if res.Reason != "DockerHung" || res.Message != hungDocker {
		t.Errorf("KernelDeadlock: got %s %q, want DockerHung %q", res.Reason, res.Message, hungDocker)
	}
	if want := []probes.Event{{Reason: "TaskHung", Message: hungDocker}}; !reflect.DeepEqual(res.Events, want) {
		t.Errorf("events: got %+v, want %+v (the old OOM line is before lookback)", res.Events, want)
	}
	if again := kd.Probe(context.Background()); len(again.Events) != 0 || again.Status != probes.StatusProblem {
		t.Errorf("second run: got %s with events %+v, want Problem and no event again", again.Status, again.Events)
	}
	xfs := cond["XfsShutdown"].Probe(context.Background())
	if xfs.Status != probes.StatusOK || xfs.Reason != "XfsHasNotShutDown" || len(xfs.Events) != 0 {
		t.Errorf("XfsShutdown: got %+v, want OK XfsHasNotShutDown without events", xfs)
	}

	writeKmsg(t, path, rec(10, 0, "eth0: link up"))
	res = waitFor(t, kd, "the overrun event", func(r probes.Result) bool { return len(r.Events) > 0 })
	if len(res.Events) != 1 || res.Events[0].Reason != ReasonKernelLogOverrun || !strings.Contains(res.Events[0].Message, "7 kernel log records after sequence 2") {
		t.Errorf("gap events: got %+v, want one %s naming 7 records after 2", res.Events, ReasonKernelLogOverrun)
	}
	xfs = cond["XfsShutdown"].Probe(context.Background())
	if !strings.Contains(xfs.Message, "7 kernel log records") {
		t.Errorf("XfsShutdown message %q does not say what was lost", xfs.Message)
	}
}

// TestMonitorTap: the tap sees every line read, matched or not, in order,
// except those before lookback.
func TestMonitorTap(t *testing.T) {
	path := fifo(t)
	got := make(chan string, 10)
	mon, err := New(mustLoad(t, "testdata/npd/readonly-monitor.json"), Options{Host: fixtureHost(t, "boot-1"), Path: path,
		Now: func() time.Time { return t0 }, Tap: func(l Line) { got <- l.Message }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	watch(t, mon.Probes()[0])
	const xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
	writeKmsg(t, path, rec(1, 10*time.Minute, "NVRM: Xid (PCI:0000:3b:00): 79, an old one"), rec(2, time.Second, xid), rec(3, 0, "eth0: link up"))
	for _, want := range []string{xid, "eth0: link up"} {
		select {
		case m := <-got:
			if m != want {
				t.Errorf("tap got %q, want %q", m, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("tap did not see %q in 30 s", want)
		}
	}
}

// TestMonitorRestartAndReboot: a held condition's State brings it back
// after a restart in the same boot, and not after a reboot; old lines are
// not matched again after the restart (lookback).
func TestMonitorRestartAndReboot(t *testing.T) {
	path := fifo(t)
	mon := newMonitor(t, "readonly-monitor.json", fixtureHost(t, "boot-1"), path)
	p := mon.Probes()[0]
	watch(t, p)
	writeKmsg(t, path, rec(1, time.Second, "EXT4-fs (sda1): Remounting filesystem read-only"))
	waitFor(t, p, "ReadonlyFilesystem problem", func(r probes.Result) bool { return r.Status == probes.StatusProblem })
	state := p.State()
	if state == nil {
		t.Fatal("State: got nil while the condition holds a problem")
	}

	for _, tt := range []struct {
		boot       string
		wantStatus probes.Status
		wantReason string
	}{
		{"boot-1", probes.StatusProblem, "FilesystemIsReadOnly"},
		{"boot-2", probes.StatusOK, "FilesystemIsNotReadOnly"},
	} {
		t.Run(tt.boot, func(t *testing.T) {
			path := fifo(t)
			mon := newMonitor(t, "readonly-monitor.json", fixtureHost(t, tt.boot), path)
			p := mon.Probes()[0]
			if err := p.Restore(state); err != nil {
				t.Fatal(err)
			}
			watch(t, p)
			writeKmsg(t, path, rec(1, 10*time.Minute, "EXT4-fs (sda1): Remounting filesystem read-only"), rec(2, 0, "eth0: link up"))
			waitFor(t, p, "the lines read", func(r probes.Result) bool { return r.Readings[1].Value == "2" })
			res := p.Probe(context.Background())
			if res.Status != tt.wantStatus || res.Reason != tt.wantReason {
				t.Errorf("got %s %s, want %s %s", res.Status, res.Reason, tt.wantStatus, tt.wantReason)
			}
		})
	}
}

// TestMonitorReadError: a log that cannot be opened makes a healthy
// condition Unknown, naming the error, but never clears a held one; Watch
// goes on, and once the log is there the source opens it and reads on
// (the old code gave up for the life of the agent).
func TestMonitorReadError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kmsg") // not there yet
	mon, err := New(mustLoad(t, "testdata/npd/readonly-monitor.json"), Options{Host: fixtureHost(t, "boot-1"), Path: path,
		Now: func() time.Time { return t0 }, Retry: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	p := mon.Probes()[0]
	_, done := watch(t, p)
	res := waitFor(t, p, "Unknown", func(r probes.Result) bool { return r.Status == probes.StatusUnknown })
	if res.Reason != ReasonLogReadError || !strings.Contains(res.Message, path) || !strings.Contains(res.Message, "no such file") {
		t.Errorf("got %s %q, want %s naming %s and the error", res.Reason, res.Message, ReasonLogReadError, path)
	}
	held := []byte(`{"bootID":"boot-1","condition":{"Type":"ReadonlyFilesystem","Problem":true,"Reason":"FilesystemIsReadOnly","Message":"m"}}`)
	if err := p.Restore(held); err != nil {
		t.Fatal(err)
	}
	if res := p.Probe(context.Background()); res.Status != probes.StatusProblem {
		t.Errorf("with a held problem: got %s, want Problem (a read failure is never a recovery)", res.Status)
	}
	if words, err := p.Clear([]string{"all"}, t0); err != nil || words != "cleared ReadonlyFilesystem" {
		t.Errorf("Clear: got %q, %v", words, err)
	}
	if res := p.Probe(context.Background()); res.Status != probes.StatusUnknown {
		t.Errorf("after Clear: got %s, want Unknown", res.Status)
	}
	if len(done) > 0 { // not taken: the cleanup waits for it
		t.Fatal("Watch ended while the log failed")
	}

	// The log appears (a file standing in for /dev/kmsg).
	if err := os.WriteFile(path, []byte(rec(1, time.Second, "EXT4-fs (sda1): Remounting filesystem read-only")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res = waitFor(t, p, "the problem read once the log is there", func(r probes.Result) bool { return r.Status == probes.StatusProblem })
	if res.Reason != "FilesystemIsReadOnly" {
		t.Errorf("got %s, want FilesystemIsReadOnly", res.Reason)
	}
}

func TestJudge(t *testing.T) {
	boom := errors.New("boom")
	held := ConditionState{Type: "C", Problem: true, Reason: "Bad", Message: "line"}
	ok := ConditionState{Type: "C", Reason: "Good", Message: "fine"}
	tests := []struct {
		name    string
		cond    string
		cs      ConditionState
		err     error
		want    probes.Status
		wantRsn string
	}{
		{"healthy", "C", ok, nil, probes.StatusOK, "Good"},
		{"problem", "C", held, nil, probes.StatusProblem, "Bad"},
		{"read error", "C", ok, boom, probes.StatusUnknown, ReasonLogReadError},
		{"read error keeps a problem", "C", held, boom, probes.StatusProblem, "Bad"},
		{"events only", "", ConditionState{}, nil, probes.StatusOK, ReasonEventsOnly},
		{"events only, read error", "", ConditionState{}, boom, probes.StatusUnknown, ReasonLogReadError},
	}
	for _, tt := range tests {
		got, reason, _ := judge(tt.cond, tt.cs, tt.err, "/dev/kmsg")
		if got != tt.want || reason != tt.wantRsn {
			t.Errorf("%s: got %s %s, want %s %s", tt.name, got, reason, tt.want, tt.wantRsn)
		}
	}
}

// The seams: a log monitor probe is Stateful, and a Waker as KERNEL.md
// declares it (probes.Waker, landing from the runner's side).
var (
	_ probes.Stateful = (*Probe)(nil)
	_ interface {
		Watch(context.Context, func()) error
	} = (*Probe)(nil)
)
