package logmon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// stepClock is a wall clock a test steps (an NTP fix).
type stepClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// scriptedKmsg plays one open of /dev/kmsg: a record per read, then err,
// or, without one, a read blocked until it is closed.
type scriptedKmsg struct {
	recs   []string
	err    error
	closed chan struct{}
	once   sync.Once
}

func newScriptedKmsg(err error, recs ...string) *scriptedKmsg {
	return &scriptedKmsg{recs: recs, err: err, closed: make(chan struct{})}
}

func (k *scriptedKmsg) Read(p []byte) (int, error) {
	if len(k.recs) > 0 {
		n := copy(p, k.recs[0]+"\n")
		k.recs = k.recs[1:]
		return n, nil
	}
	if k.err != nil {
		return 0, k.err
	}
	<-k.closed
	return 0, os.ErrClosed
}

func (k *scriptedKmsg) Close() error {
	k.once.Do(func() { close(k.closed) })
	return nil
}

// collect polls p until ok holds of the Events taken so far, and returns
// them, with the last result.
func collect(t *testing.T, p *Probe, what string, ok func([]probes.Event, probes.Result) bool) ([]probes.Event, probes.Result) {
	t.Helper()
	var evs []probes.Event
	res := waitFor(t, p, what, func(r probes.Result) bool {
		evs = append(evs, r.Events...)
		return ok(evs, r)
	})
	return evs, res
}

func messages(evs []probes.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

// TestMonitorKmsgReopen: the kernel log fails to be read, then to be
// opened (the probes Unknown, naming the error, Watch going on); the wall
// clock is stepped back an hour meanwhile; opened again, the kernel hands
// its whole ring buffer again: the records read before are not matched
// again (no second Event), the new one is, at the time the first open's
// boot gives it (a boot recomputed from the stepped clock would put it an
// hour back, before lookback, and lose it). The old code never opened the
// log again.
func TestMonitorKmsgReopen(t *testing.T) {
	const oomA = "Out of memory: Killed process 1 (a) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
	const oomB = "Out of memory: Killed process 2 (b) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
	clock := &stepClock{now: t0}
	taps := make(chan Line, 10)
	mon, err := New(mustLoad(t, "testdata/npd/kernel-monitor.json"), Options{Host: fixtureHost(t, "boot-1"), Path: "/dev/kmsg",
		Now: clock.Now, Retry: 5 * time.Millisecond, Tap: func(l Line) { taps <- l }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	gate := make(chan struct{})
	var mu sync.Mutex // guards opens
	opens := 0
	mon.openKmsg = func(path string) (io.ReadCloser, error) {
		mu.Lock()
		defer mu.Unlock()
		opens++
		switch {
		case opens == 1:
			return newScriptedKmsg(syscall.EIO, rec(1, 2*time.Minute, oomA), rec(2, time.Minute, "eth0: link up")), nil
		case isClosed(gate):
			return newScriptedKmsg(nil, rec(1, 2*time.Minute, oomA), rec(2, time.Minute, "eth0: link up"), rec(3, 0, oomB)), nil
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EACCES}
	}
	p := byCondition(mon.Probes())["KernelDeadlock"]
	_, done := watch(t, p)
	evs, _ := collect(t, p, "oomA's Event and the read error", func(evs []probes.Event, r probes.Result) bool {
		return len(evs) > 0 && r.Status == probes.StatusUnknown && strings.Contains(r.Message, "permission denied")
	})
	if len(done) > 0 { // not taken: the cleanup waits for it
		t.Fatal("Watch ended while the log failed")
	}
	clock.Set(t0.Add(-time.Hour))
	close(gate)
	more, res := collect(t, p, "oomB's Event", func(evs []probes.Event, r probes.Result) bool {
		return r.Status == probes.StatusOK && r.Readings[1].Value == "3"
	})
	evs = append(evs, more...)
	if want := []string{"OOMKilling: " + oomA, "OOMKilling: " + oomB}; !reflect.DeepEqual(messages(evs), want) {
		t.Errorf("Events: got %q, want %q (each line once)", messages(evs), want)
	}
	if res.Reason != "KernelHasNoDeadlock" {
		t.Errorf("after the reopen: got %s %s, want OK KernelHasNoDeadlock", res.Status, res.Reason)
	}
	var last Line
	for len(taps) > 0 {
		last = <-taps
	}
	if last.Seq != 3 || !last.Time.Equal(t0) {
		t.Errorf("the last line: seq %d at %v, want seq 3 at %v (boot + its monotonic time)", last.Seq, last.Time, t0)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestMonitorBootRetry: the boot id cannot be read at first: the probe is
// Unknown naming it; once it can, the source starts (the old code kept
// the first failure for the life of the agent).
func TestMonitorBootRetry(t *testing.T) {
	host := fixtureHost(t, "boot-1")
	id := host.Proc("sys", "kernel", "random", "boot_id")
	if err := os.Rename(id, id+".later"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(path, []byte(rec(1, time.Second, "EXT4-fs (sda1): Remounting filesystem read-only")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mon, err := New(mustLoad(t, "testdata/npd/readonly-monitor.json"), Options{Host: host, Path: path,
		Now: func() time.Time { return t0 }, Retry: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	p := mon.Probes()[0]
	watch(t, p)
	res := waitFor(t, p, "Unknown", func(r probes.Result) bool { return r.Status == probes.StatusUnknown })
	if !strings.Contains(res.Message, "reading the boot id") {
		t.Errorf("got %q, want the boot id named", res.Message)
	}
	if err := os.Rename(id+".later", id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "the problem read once the boot is known", func(r probes.Result) bool { return r.Status == probes.StatusProblem })
}

func TestNextRetry(t *testing.T) {
	tests := []struct{ in, want time.Duration }{
		{time.Second, 2 * time.Second},
		{16 * time.Second, MaxRetry},
		{MaxRetry, MaxRetry},
		{time.Minute, time.Minute}, // a Retry option above MaxRetry stays
	}
	for _, tt := range tests {
		if got := nextRetry(tt.in); got != tt.want {
			t.Errorf("nextRetry(%v): got %v, want %v", tt.in, got, tt.want)
		}
	}
}

// filelogLine is a kernel-monitor-filelog.json line logged at at.
func filelogLine(at time.Time, msg string) string {
	return at.Format("Jan _2 15:04:05") + " node1 kernel: [1.0] " + msg + "\n"
}

func appendFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

func newFilelogMonitor(t *testing.T, host probes.Host, now func() time.Time) *Monitor {
	t.Helper()
	mon, err := New(mustLoad(t, "testdata/npd/kernel-monitor-filelog.json"), Options{Host: host, Now: now, Location: time.UTC,
		Poll: 5 * time.Millisecond, Retry: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	return mon
}

// TestMonitorFilelogReopen: the log's directory is replaced by a file (a
// look at the log fails: Unknown), lines are appended meanwhile; put back,
// the same file is read on from its offset, each line once; a new file
// found when it could not be read is read from its start, said as a
// rotation. Garbage lines are skipped and counted in a reading.
func TestMonitorFilelogReopen(t *testing.T) {
	host := fixtureHost(t, "boot-1")
	dir := host.Path("/var/log")
	log := filepath.Join(dir, "kern.log")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	oom := func(n int) string {
		return fmt.Sprintf("Out of memory: Killed process %d (x) total-vm:1kB, anon-rss:1kB, file-rss:0kB", n)
	}
	appendFile(t, log, filelogLine(t0.Add(-time.Minute), oom(1))+"garbage \xff\n")
	mon := newFilelogMonitor(t, host, func() time.Time { return t0 })
	p := byCondition(mon.Probes())["KernelDeadlock"]
	_, done := watch(t, p)
	evs, res := collect(t, p, "oom 1", func(evs []probes.Event, _ probes.Result) bool { return len(evs) > 0 })
	if got := res.Readings[3]; got.Name != "lines skipped" || !strings.HasPrefix(got.Value, "1 (the last: line \"garbage \\xff\": no timestamp") {
		t.Errorf("reading: got %+v, want 1 skipped naming the garbage line", got)
	}

	breakDir(t, dir)
	more, _ := collect(t, p, "Unknown", func(_ []probes.Event, r probes.Result) bool {
		return r.Status == probes.StatusUnknown && strings.Contains(r.Message, "not a directory")
	})
	evs = append(evs, more...)
	appendFile(t, filepath.Join(dir+".away", "kern.log"), filelogLine(t0, oom(2)))
	mustDo(t, os.Remove(dir), os.Rename(dir+".away", dir))
	more, _ = collect(t, p, "oom 2", func(_ []probes.Event, r probes.Result) bool {
		return r.Status == probes.StatusOK && r.Readings[1].Value == "2"
	})
	evs = append(evs, more...)
	if want := []string{"OOMKilling: " + oom(1), "OOMKilling: " + oom(2)}; !reflect.DeepEqual(messages(evs), want) {
		t.Errorf("Events: got %q, want %q (each line once)", messages(evs), want)
	}

	// Another file under the name while it cannot be read: from its start.
	breakDir(t, dir)
	waitFor(t, p, "Unknown", func(r probes.Result) bool { return r.Status == probes.StatusUnknown })
	mustDo(t, os.Remove(dir), os.MkdirAll(dir, 0o755))
	appendFile(t, log, filelogLine(t0, oom(3)))
	evs, _ = collect(t, p, "oom 3 and the rotation", func(evs []probes.Event, r probes.Result) bool { return len(evs) >= 2 })
	if len(evs) != 2 || evs[0].Reason != ReasonLogRotated || !strings.Contains(evs[0].Message, "replaced while it could not be read") || evs[1].Message != oom(3) {
		t.Errorf("Events: got %q, want LogRotated then oom 3", messages(evs))
	}
	if len(done) > 0 { // not taken: the cleanup waits for it
		t.Fatal("Watch ended")
	}
}

// breakDir moves dir to dir.away and puts a file in its place: a look at
// a log in it fails (not a directory).
func breakDir(t *testing.T, dir string) {
	t.Helper()
	mustDo(t, os.Rename(dir, dir+".away"))
	mustDo(t, os.WriteFile(dir, nil, 0o644))
}

// mustDo fails the test at the first error of steps done in order.
func mustDo(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestMonitorFilelogRestartClockStep: a filelog monitor restarted in the
// same boot after the wall clock was stepped back an hour (an NTP fix)
// reads the file again: the line whose Event was reported is not reported
// again (its offset), and a line written after the restart, stamped an
// hour before it, is (the old code placed lines by time only and took it
// as reported: the Event was lost).
func TestMonitorFilelogRestartClockStep(t *testing.T) {
	host := fixtureHost(t, "boot-1")
	log := host.Path("/var/log/kern.log")
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		t.Fatal(err)
	}
	const oom1 = "Out of memory: Killed process 1 (x) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
	const oom2 = "Out of memory: Killed process 2 (y) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
	appendFile(t, log, filelogLine(t0.Add(-time.Minute), oom1))
	mon := newFilelogMonitor(t, host, func() time.Time { return t0 })
	p := byCondition(mon.Probes())["KernelDeadlock"]
	watch(t, p)
	collect(t, p, "oom 1", func(evs []probes.Event, _ probes.Result) bool { return len(evs) > 0 })
	state := p.State()
	_ = mon.Close()

	stepped := t0.Add(-time.Hour)
	appendFile(t, log, filelogLine(stepped.Add(time.Second), oom2))
	mon = newFilelogMonitor(t, host, func() time.Time { return stepped.Add(2 * time.Second) })
	p = byCondition(mon.Probes())["KernelDeadlock"]
	if err := p.Restore(state); err != nil {
		t.Fatal(err)
	}
	watch(t, p)
	evs, _ := collect(t, p, "both lines read", func(_ []probes.Event, r probes.Result) bool { return r.Readings[1].Value == "2" })
	more := p.Probe(context.Background()).Events
	evs = append(evs, more...)
	if want := []string{"OOMKilling: " + oom2}; !reflect.DeepEqual(messages(evs), want) {
		t.Errorf("Events after the restart: got %q, want %q", messages(evs), want)
	}
}

// TestMonitorJournaldRetry: the journal directory is not there when the
// source starts (Unknown, naming it); once journald writes it, the source
// opens it and reads on (the old code gave up for the life of the agent).
func TestMonitorJournaldRetry(t *testing.T) {
	requireLibsystemd(t)
	host := fixtureHost(t, thisBoot)
	mon, err := New(mustLoad(t, "testdata/npd/systemd-monitor.json"), Options{Host: host, Now: func() time.Time { return t0 }, Retry: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	p := mon.Probes()[0]
	_, done := watch(t, p)
	res := waitFor(t, p, "Unknown", func(r probes.Result) bool { return r.Status == probes.StatusUnknown })
	if !strings.Contains(res.Message, "the journal directory") {
		t.Errorf("got %q, want the journal directory named", res.Message)
	}
	const msg = "Started kubelet.service - Kubernetes kubelet."
	probestest.WriteJournal(t, hostJournal(host), entry(time.Minute, thisBoot, "systemd", msg))
	evs, res := collect(t, p, "the kubelet Event", func(evs []probes.Event, _ probes.Result) bool { return len(evs) > 0 })
	if want := []string{"KubeletStart: " + msg}; !reflect.DeepEqual(messages(evs), want) || res.Status != probes.StatusOK {
		t.Errorf("got %s, Events %q; want OK, Events %q", res.Status, messages(evs), want)
	}
	if len(done) > 0 { // not taken: the cleanup waits for it
		t.Fatal("Watch ended")
	}
}

// TestMonitorJournaldRestartClockStep: a journald monitor restarted in the
// same boot after the wall clock was stepped back an hour reads the
// journal again: the entry whose Event was reported is not reported again,
// and one logged after the restart, stamped an hour before the first, is
// (placed by the journal's cursor; the old code placed it by time only
// and took it as reported: the Event was lost).
func TestMonitorJournaldRestartClockStep(t *testing.T) {
	requireLibsystemd(t)
	host := fixtureHost(t, thisBoot)
	file := hostJournal(host)
	const first = "Started kubelet.service - Kubernetes kubelet."
	const second = "Starting containerd.service - containerd container runtime..."
	const third = "Starting docker.service..."
	probestest.WriteJournal(t, file, entry(time.Minute, thisBoot, "systemd", first))
	newMon := func(now time.Time) *Probe {
		mon, err := New(mustLoad(t, "testdata/npd/systemd-monitor.json"), Options{Host: host, Now: func() time.Time { return now }, Retry: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mon.Close() })
		return mon.Probes()[0]
	}
	p := newMon(t0)
	watch(t, p)
	collect(t, p, "the first Event", func(evs []probes.Event, _ probes.Result) bool { return len(evs) > 0 })
	state := p.State()
	var h heldState
	if err := json.Unmarshal(state, &h); err != nil || h.EventsThrough == nil || !strings.HasPrefix(h.EventsThrough.Cursor, "s=") {
		t.Errorf("State %s (%v): want the entry's cursor kept", state, err)
	}
	_ = p.mon.Close()

	stepped := t0.Add(-time.Hour)
	// One logged before the clock was stepped back, one after.
	probestest.WriteJournal(t, file, entry(0, thisBoot, "systemd", second))
	probestest.WriteJournal(t, file, entry(time.Hour-time.Second, thisBoot, "systemd", third))
	p = newMon(stepped)
	if err := p.Restore(state); err != nil {
		t.Fatal(err)
	}
	watch(t, p)
	evs, _ := collect(t, p, "the new entries' Events", func(evs []probes.Event, _ probes.Result) bool { return len(evs) >= 2 })
	evs = append(evs, p.Probe(context.Background()).Events...)
	if want := []string{"ContainerdStart: " + second, "DockerStart: " + third}; !reflect.DeepEqual(messages(evs), want) {
		t.Errorf("Events after the restart: got %q, want %q", messages(evs), want)
	}
}

// TestMonitorClockSteppedBackWhileRunning: once a filelog or journald
// source has read what its log held when it started, a line logged after
// the wall clock was stepped back an hour (stamped before the start time)
// is matched: it was logged after reading started (the old code took it
// as before lookback and dropped it). A line written in the file before
// the start, stamped before lookback, is still not matched.
func TestMonitorClockSteppedBackWhileRunning(t *testing.T) {
	const oom = "Out of memory: Killed process 9 (x) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
	stepped := t0.Add(-time.Hour)
	t.Run("filelog", func(t *testing.T) {
		host := fixtureHost(t, "boot-1")
		log := host.Path("/var/log/kern.log")
		if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
			t.Fatal(err)
		}
		appendFile(t, log, filelogLine(stepped, "Out of memory: Killed process 1 (old) total-vm:1kB, anon-rss:1kB, file-rss:0kB"))
		clock := &stepClock{now: t0}
		mon := newFilelogMonitor(t, host, clock.Now)
		p := byCondition(mon.Probes())["KernelDeadlock"]
		watch(t, p)
		waitFor(t, p, "the old line read", func(r probes.Result) bool { return r.Readings[1].Value == "1" })
		clock.Set(stepped.Add(time.Second))
		appendFile(t, log, filelogLine(stepped.Add(time.Second), oom))
		evs, _ := collect(t, p, "both lines read", func(_ []probes.Event, r probes.Result) bool { return r.Readings[1].Value == "2" })
		evs = append(evs, p.Probe(context.Background()).Events...)
		if want := []string{"OOMKilling: " + oom}; !reflect.DeepEqual(messages(evs), want) {
			t.Errorf("Events: got %q, want %q", messages(evs), want)
		}
	})
	t.Run("journald", func(t *testing.T) {
		requireLibsystemd(t)
		host := fixtureHost(t, thisBoot)
		file := hostJournal(host)
		probestest.WriteJournal(t, file, entry(time.Hour, thisBoot, "systemd", "Started kubelet.service."),
			entry(time.Minute, thisBoot, "systemd", "Starting containerd.service..."))
		clock := &stepClock{now: t0}
		mon, err := New(mustLoad(t, "testdata/npd/systemd-monitor.json"), Options{Host: host, Now: clock.Now, Retry: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mon.Close() })
		p := mon.Probes()[0]
		watch(t, p)
		// The journal is sought to the start time: the old entry is not
		// even read. Wait for the source to reach the journal's end.
		waitFor(t, p, "the source caught up", func(r probes.Result) bool {
			return r.Readings[1].Value == "1" && mon.jf.caughtUp.Load() // jf is set before the line is read
		})
		clock.Set(stepped.Add(time.Second))
		const msg = "Starting docker.service..."
		probestest.WriteJournal(t, file, entry(time.Hour-time.Second, thisBoot, "systemd", msg))
		evs, _ := collect(t, p, "the new entry's Event", func(evs []probes.Event, _ probes.Result) bool { return len(evs) > 0 })
		if want := []string{"DockerStart: " + msg}; !reflect.DeepEqual(messages(evs), want) {
			t.Errorf("Events: got %q, want %q", messages(evs), want)
		}
	})
}

// TestMonitorBootGarbage: a garbage uptime or an empty boot id is an
// error naming it (Unknown), tried again until the files read well.
func TestMonitorBootGarbage(t *testing.T) {
	for _, tt := range []struct{ file, data, want string }{
		{"uptime", "NaN 12.0\n", "reading the uptime"},
		{"uptime", "-5 1\n", "reading the uptime"},
		{"uptime", "\n", "reading the uptime"},
		{"sys/kernel/random/boot_id", "\n", "reading the boot id"},
	} {
		t.Run(tt.file+tt.data, func(t *testing.T) {
			host := fixtureHost(t, "boot-1")
			file := host.Proc(strings.Split(tt.file, "/")...)
			good, err := os.ReadFile(file)
			mustDo(t, err, os.WriteFile(file, []byte(tt.data), 0o644))
			path := filepath.Join(t.TempDir(), "kmsg")
			mustDo(t, os.WriteFile(path, []byte(rec(1, time.Second, "EXT4-fs (sda1): Remounting filesystem read-only")+"\n"), 0o600))
			mon, err := New(mustLoad(t, "testdata/npd/readonly-monitor.json"), Options{Host: host, Path: path, Now: func() time.Time { return t0 }, Retry: 5 * time.Millisecond})
			mustDo(t, err)
			t.Cleanup(func() { _ = mon.Close() })
			p := mon.Probes()[0]
			watch(t, p)
			res := waitFor(t, p, "Unknown", func(r probes.Result) bool { return r.Status == probes.StatusUnknown })
			if !strings.Contains(res.Message, tt.want) {
				t.Errorf("got %q, want %q", res.Message, tt.want)
			}
			mustDo(t, os.WriteFile(file, good, 0o644))
			waitFor(t, p, "the problem read once the boot is known", func(r probes.Result) bool { return r.Status == probes.StatusProblem })
		})
	}
}

// TestMonitorKmsgReplaced: a file standing in for /dev/kmsg removed
// (Unknown) and written again with the same boot's records: the records
// read before are skipped, the new one read; each Event once.
func TestMonitorKmsgReplaced(t *testing.T) {
	oom := func(n int) string {
		return fmt.Sprintf("Out of memory: Killed process %d (x) total-vm:1kB, anon-rss:1kB, file-rss:0kB", n)
	}
	path := filepath.Join(t.TempDir(), "kmsg")
	mustDo(t, os.WriteFile(path, []byte(rec(1, time.Minute, oom(1))+"\n"), 0o600))
	mon, err := New(mustLoad(t, "testdata/npd/kernel-monitor.json"), Options{Host: fixtureHost(t, "boot-1"), Path: path,
		Now: func() time.Time { return t0 }, Retry: 5 * time.Millisecond})
	mustDo(t, err)
	t.Cleanup(func() { _ = mon.Close() })
	p := byCondition(mon.Probes())["KernelDeadlock"]
	watch(t, p)
	evs, _ := collect(t, p, "oom 1", func(evs []probes.Event, _ probes.Result) bool { return len(evs) > 0 })
	mustDo(t, os.Remove(path))
	more, _ := collect(t, p, "Unknown", func(_ []probes.Event, r probes.Result) bool { return r.Status == probes.StatusUnknown })
	evs = append(evs, more...)
	mustDo(t, os.WriteFile(path, []byte(rec(1, time.Minute, oom(1))+"\n"+rec(2, 0, oom(2))+"\n"), 0o600))
	more, _ = collect(t, p, "oom 2", func(_ []probes.Event, r probes.Result) bool {
		return r.Status == probes.StatusOK && r.Readings[1].Value == "2"
	})
	evs = append(evs, more...)
	evs = append(evs, p.Probe(context.Background()).Events...)
	if want := []string{"OOMKilling: " + oom(1), "OOMKilling: " + oom(2)}; !reflect.DeepEqual(messages(evs), want) {
		t.Errorf("Events: got %q, want %q", messages(evs), want)
	}
}
