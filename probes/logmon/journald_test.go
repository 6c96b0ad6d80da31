package logmon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/sdjournal"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// Boot ids in the kernel's form, as the fixture host's boot_id has them.
const (
	thisBoot  = "8f0c6b4e-2d6a-4b1e-9a7e-3c5d1f2e4a6b"
	otherBoot = "11111111-2222-4333-8444-555555555555"
	machineID = "fedcba9876543210fedcba9876543210"
)

// requireLibsystemd fails (CI=true) or skips the test where libsystemd
// cannot be loaded.
func requireLibsystemd(t *testing.T) {
	t.Helper()
	j, err := sdjournal.NewJournalFromDir(t.TempDir())
	if err != nil {
		probestest.FailOrSkip(t, "reading a journal needs "+LibsystemdName+" (apt-get install libsystemd0): "+err.Error())
	}
	_ = j.Close()
}

// hostJournal is the fixture host's persistent system journal file.
func hostJournal(host probes.Host) string {
	return host.Path(filepath.Join(DefaultJournalPath, machineID, "system.journal"))
}

// entry is a journal entry logged ago before t0.
func entry(ago time.Duration, boot, ident, msg string) probestest.JournalEntry {
	return probestest.JournalEntry{Time: t0.Add(-ago), BootID: boot, Identifier: ident, Message: msg}
}

func TestJournalLine(t *testing.T) {
	at := t0.Add(-time.Second)
	e := func(fields map[string]string) *sdjournal.JournalEntry {
		return &sdjournal.JournalEntry{Fields: fields, RealtimeTimestamp: uint64(at.UnixMicro())}
	}
	boot := journalBootID(thisBoot)
	tests := []struct {
		name   string
		e      *sdjournal.JournalEntry
		bootID string
		want   Line
		wantOK bool
	}{
		{"this boot", e(map[string]string{"MESSAGE": "m", "_BOOT_ID": boot}), boot, Line{Time: at, Message: "m"}, true},
		{"another boot", e(map[string]string{"MESSAGE": "m", "_BOOT_ID": journalBootID(otherBoot)}), boot, Line{}, false},
		{"upper case", e(map[string]string{"MESSAGE": "m", "_BOOT_ID": strings.ToUpper(boot)}), boot, Line{Time: at, Message: "m"}, true},
		{"no _BOOT_ID", e(map[string]string{"MESSAGE": "m"}), boot, Line{Time: at, Message: "m"}, true},
		{"the boot unknown", e(map[string]string{"MESSAGE": "m", "_BOOT_ID": "x"}), "", Line{Time: at, Message: "m"}, true},
		{"no MESSAGE", e(map[string]string{"_BOOT_ID": boot}), boot, Line{Time: at}, true},
	}
	for _, tt := range tests {
		got, ok := journalLine(tt.e, tt.bootID)
		if ok != tt.wantOK || !got.Time.Equal(tt.want.Time) || got.Message != tt.want.Message {
			t.Errorf("%s: got %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
	if got, want := journalBootID(thisBoot+"\n"), "8f0c6b4e2d6a4b1e9a7e3c5d1f2e4a6b"; got != want {
		t.Errorf("journalBootID: got %q, want %q", got, want)
	}
}

func TestJournalDir(t *testing.T) {
	mk := func(dirs ...string) probes.Host {
		root := t.TempDir()
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return probes.Host{Root: root}
	}
	tests := []struct {
		name    string
		host    probes.Host
		logPath string
		want    string
	}{
		{"persistent", mk("var/log/journal", "run/log/journal"), DefaultJournalPath, DefaultJournalPath},
		{"volatile only", mk("run/log/journal"), DefaultJournalPath, VolatileJournalPath},
		{"no logPath, persistent", mk("var/log/journal"), "", DefaultJournalPath},
		{"no logPath, volatile only", mk("run/log/journal"), "", VolatileJournalPath},
		{"neither: the persistent one, to fail naming it", mk(), "", DefaultJournalPath},
		{"another logPath, as written", mk("run/log/journal"), "/srv/journal", "/srv/journal"},
	}
	for _, tt := range tests {
		if got, want := JournalDir(tt.host, tt.logPath), tt.host.Path(tt.want); got != want {
			t.Errorf("%s: got %s, want %s", tt.name, got, want)
		}
	}
}

// TestMonitorJournald: NPD's systemd-monitor.json unchanged on a journal
// written by systemd-journal-remote: an entry of the file's
// SYSLOG_IDENTIFIER ("systemd") within lookback gives its Event; entries
// before lookback, of another identifier or of another boot do not; an
// entry appended while the monitor follows wakes the watcher and gives its
// Event.
func TestMonitorJournald(t *testing.T) {
	requireLibsystemd(t)
	host := fixtureHost(t, thisBoot)
	file := hostJournal(host)
	probestest.WriteJournal(t, file,
		entry(10*time.Minute, thisBoot, "systemd", "Started kubelet.service - Kubernetes kubelet."), // before lookback (5m)
		entry(3*time.Minute, otherBoot, "systemd", "Starting docker.service..."),                    // another boot
		entry(2*time.Minute, thisBoot, "kubelet", "Started kubelet.service."),                       // another identifier
		entry(time.Minute, thisBoot, "systemd", "Starting containerd.service - containerd container runtime..."))
	mon := newMonitor(t, "systemd-monitor.json", host, "")
	ps := mon.Probes()
	if len(ps) != 1 || ps[0].Name() != "logmon-systemd-monitor" || ps[0].Condition() != "" {
		t.Fatalf("probes: got %d, the first %s, want the events-only logmon-systemd-monitor", len(ps), ps[0].Name())
	}
	p := ps[0]
	wakes, _ := watch(t, p)
	var events []probes.Event
	take := func(what string, n int) {
		t.Helper()
		waitFor(t, p, what, func(r probes.Result) bool {
			events = append(events, r.Events...)
			return len(events) >= n
		})
	}
	take("the containerd Event", 1)
	want := []probes.Event{{Reason: "ContainerdStart", Message: "Starting containerd.service - containerd container runtime..."}}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events: got %+v, want %+v (the rest is before lookback, of another boot or another identifier)", events, want)
	}
	res := p.Probe(context.Background())
	probestest.CheckResult(t, res, probestest.Want{Status: probes.StatusOK, Reason: ReasonEventsOnly, Message: []string{host.Path(DefaultJournalPath)}})
	for len(wakes) > 0 {
		<-wakes
	}

	probestest.WriteJournal(t, file, entry(0, thisBoot, "systemd", "Started kubelet.service - Kubernetes kubelet."))
	select {
	case <-wakes:
	case <-time.After(30 * time.Second):
		t.Fatal("no wake in 30 s after a matching entry was appended")
	}
	take("the kubelet Event", 2)
	want = append(want, probes.Event{Reason: "KubeletStart", Message: "Started kubelet.service - Kubernetes kubelet."})
	if !reflect.DeepEqual(events, want) {
		t.Errorf("events: got %+v, want %+v", events, want)
	}
}

// TestMonitorJournaldCondition: NPD's docker-monitor.json unchanged: a
// dockerd entry of this boot sets CorruptDockerOverlay2; one of another
// boot, within lookback and read before, does not.
func TestMonitorJournaldCondition(t *testing.T) {
	requireLibsystemd(t)
	const overlay = "returned error: readlink /var/lib/docker/overlay2/l/abc: invalid argument"
	const dead = "OCI runtime start failed: container process is already dead: unknown"
	host := fixtureHost(t, thisBoot)
	file := hostJournal(host)
	probestest.WriteJournal(t, file,
		entry(2*time.Minute, otherBoot, "dockerd", overlay),
		entry(time.Minute, thisBoot, "dockerd", dead))
	mon := newMonitor(t, "docker-monitor.json", host, "")
	p := mon.Probes()[0]
	if p.Condition() != "CorruptDockerOverlay2" {
		t.Fatalf("first probe %s, want CorruptDockerOverlay2's", p.Name())
	}
	watch(t, p)
	res := waitFor(t, p, "the container startup Event", func(r probes.Result) bool { return len(r.Events) > 0 })
	if res.Status != probes.StatusOK || res.Reason != "NoCorruptDockerOverlay2" {
		t.Errorf("after another boot's overlay2 entry: got %s %s %q, want OK NoCorruptDockerOverlay2", res.Status, res.Reason, res.Message)
	}
	if want := []probes.Event{{Reason: "DockerContainerStartupFailure", Message: dead}}; !reflect.DeepEqual(res.Events, want) {
		t.Errorf("events: got %+v, want %+v", res.Events, want)
	}

	probestest.WriteJournal(t, file, entry(0, thisBoot, "dockerd", overlay))
	res = waitFor(t, p, "CorruptDockerOverlay2", func(r probes.Result) bool { return r.Status == probes.StatusProblem })
	if res.Reason != "CorruptDockerOverlay2" || res.Message != overlay {
		t.Errorf("got %s %q, want CorruptDockerOverlay2 %q", res.Reason, res.Message, overlay)
	}
}

// TestMonitorJournaldCannotOpen: where libsystemd cannot be loaded, or the
// journal directory is missing, the condition is Unknown (LogReadError)
// naming the library or directory, and Watch goes on (the source is
// tried again).
func TestMonitorJournaldCannotOpen(t *testing.T) {
	noLib := errors.New("unable to open a handle to the library")
	tests := []struct {
		name    string
		dirs    bool
		open    func(string) (journal, error)
		wantMsg []string
	}{
		{"no libsystemd", true, func(string) (journal, error) { return nil, noLib }, []string{LibsystemdName, noLib.Error(), DefaultJournalPath}},
		{"no journal directory", false, nil, []string{"the journal directory", DefaultJournalPath, "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := fixtureHost(t, thisBoot)
			if tt.dirs {
				if err := os.MkdirAll(host.Path(DefaultJournalPath), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			mon := newMonitor(t, "docker-monitor.json", host, "")
			mon.openJournal = tt.open
			p := mon.Probes()[0]
			_, done := watch(t, p)
			res := waitFor(t, p, "Unknown", func(r probes.Result) bool { return r.Status == probes.StatusUnknown })
			probestest.CheckResult(t, res, probestest.Want{Status: probes.StatusUnknown, Reason: ReasonLogReadError, Message: tt.wantMsg})
			if len(done) > 0 { // not taken: the cleanup waits for it
				t.Errorf("Watch ended, want it to go on")
			}
		})
	}
}

// followJournal runs a journalFollower of the "app" identifier on dir
// until the test ends; the channels get its lines' messages and notes.
func followJournal(t *testing.T, dir string, open func(string) (journal, error)) (<-chan string, <-chan noted) {
	t.Helper()
	lines, notes := make(chan string, 100), make(chan noted, 100)
	f := &journalFollower{dir: dir, source: "app", bootID: journalBootID(thisBoot), since: t0.Add(-time.Hour),
		wait: 50 * time.Millisecond, retry: 10 * time.Millisecond, open: open,
		line: func(l Line) { lines <- l.Message }, note: func(r, m string) { notes <- noted{r, m} }, bad: func(string) {}, opened: func() {}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return lines, notes
}

// expectLines reads want from lines, in order, then checks nothing more
// came.
func expectLines(t *testing.T, lines <-chan string, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-lines:
			if got != w {
				t.Fatalf("got line %q, want %q", got, w)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("line %q not read in 30 s", w)
		}
	}
	select {
	case got := <-lines:
		t.Fatalf("got line %q again or out of turn, want none after %q", got, want)
	default:
	}
}

// TestJournaldRotationAndVacuum: the journal rotated as journald rotates
// it (the file renamed, a new one created under the name) and the old
// file vacuumed (deleted) while it is being read: every entry is read
// once, in order, and reading goes on.
func TestJournaldRotationAndVacuum(t *testing.T) {
	requireLibsystemd(t)
	dir := filepath.Join(t.TempDir(), "journal")
	file := filepath.Join(dir, machineID, "system.journal")
	probestest.WriteJournal(t, file, entry(3*time.Second, thisBoot, "app", "a1"), entry(2*time.Second, thisBoot, "app", "a2"))
	lines, notes := followJournal(t, dir, openJournalDir)
	expectLines(t, lines, "a1", "a2")

	rotated := filepath.Join(dir, machineID, "system@0000000000000000-0000000000000001.journal")
	if err := os.Rename(file, rotated); err != nil {
		t.Fatal(err)
	}
	probestest.WriteJournal(t, file, entry(time.Second, thisBoot, "app", "b1"))
	expectLines(t, lines, "b1")
	if err := os.Remove(rotated); err != nil {
		t.Fatal(err)
	}
	probestest.WriteJournal(t, file, entry(0, thisBoot, "app", "b2"))
	expectLines(t, lines, "b2")
	if len(notes) > 0 {
		t.Errorf("notes: got %+v, want none", <-notes)
	}
}

// failingJournal is a journal whose Next fails once, after failAfter
// entries, or from when fail is closed.
type failingJournal struct {
	journal
	failAfter int
	n         int
	fail      <-chan struct{}
}

func (j *failingJournal) Next() (uint64, error) {
	j.n++
	if j.n == j.failAfter+1 {
		return 0, errors.New("boom")
	}
	select {
	case <-j.fail:
		return 0, errors.New("boom")
	default:
	}
	return j.journal.Next()
}

// TestJournaldResumeAfterError: a failed read is said as a LogReadError
// note and reading goes on after the last entry read: nothing is read
// twice or lost, including entries appended meanwhile.
func TestJournaldResumeAfterError(t *testing.T) {
	requireLibsystemd(t)
	dir := filepath.Join(t.TempDir(), "journal")
	file := filepath.Join(dir, machineID, "system.journal")
	probestest.WriteJournal(t, file,
		entry(4*time.Second, thisBoot, "app", "c1"), entry(3*time.Second, thisBoot, "app", "c2"), entry(2*time.Second, thisBoot, "app", "c3"))
	opened := 0
	open := func(dir string) (journal, error) {
		j, err := openJournalDir(dir)
		if err != nil {
			return nil, err
		}
		opened++
		if opened == 1 {
			return &failingJournal{journal: j, failAfter: 2}, nil
		}
		return j, nil
	}
	lines, notes := followJournal(t, dir, open)
	expectLines(t, lines, "c1", "c2", "c3")
	select {
	case n := <-notes:
		if n.reason != ReasonLogReadError || !strings.Contains(n.msg, "boom") || !strings.Contains(n.msg, "after 2 entries") {
			t.Errorf("note: got %+v, want a %s after 2 entries naming the error", n, ReasonLogReadError)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no note of the failed read")
	}
	probestest.WriteJournal(t, file, entry(time.Second, thisBoot, "app", "c4"))
	expectLines(t, lines, "c4")
}

// TestJournalReadable: a journal directory whose journal files cannot be
// opened is an error (libsystemd would read it as empty); one without
// journal files yet is not.
func TestJournalReadable(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, machineID)
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := journalReadable(dir); err != nil {
		t.Errorf("no journal files: got %v, want none", err)
	}
	// A file that cannot be opened, whoever runs the test (a dangling
	// link; as the agent's user a 0640 file of another group fails alike).
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(sub, "system.journal")); err != nil {
		t.Fatal(err)
	}
	if err := journalReadable(dir); err == nil || !strings.Contains(err.Error(), "none of the 1 journal files can be read") {
		t.Errorf("an unreadable journal file: got %v, want none readable", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "user-1000.journal"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := journalReadable(dir); err != nil {
		t.Errorf("one readable journal file: got %v, want none", err)
	}
}

// TestJournaldResumeAfterVacuum: the journal is opened again after a failed
// read when the last entry read was vacuumed meanwhile (its file deleted,
// newer entries in another): reading goes on with the first entry not
// read, none lost or read twice.
func TestJournaldResumeAfterVacuum(t *testing.T) {
	requireLibsystemd(t)
	dir := filepath.Join(t.TempDir(), "journal")
	old := filepath.Join(dir, machineID, "system@0000000000000000-0000000000000001.journal")
	probestest.WriteJournal(t, old, entry(4*time.Second, thisBoot, "app", "v1"), entry(3*time.Second, thisBoot, "app", "v2"))
	fail, reopen := make(chan struct{}), make(chan struct{})
	opened := 0
	open := func(dir string) (journal, error) {
		opened++
		if opened == 2 {
			<-reopen
		}
		j, err := openJournalDir(dir)
		if err != nil || opened > 1 {
			return j, err
		}
		return &failingJournal{journal: j, failAfter: -1, fail: fail}, nil
	}
	lines, notes := followJournal(t, dir, open)
	expectLines(t, lines, "v1", "v2")
	close(fail)
	select {
	case n := <-notes:
		if n.reason != ReasonLogReadError {
			t.Errorf("note: got %+v, want a %s", n, ReasonLogReadError)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no note of the failed read")
	}
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	probestest.WriteJournal(t, filepath.Join(dir, machineID, "system.journal"),
		entry(2*time.Second, thisBoot, "app", "v3"), entry(time.Second, thisBoot, "app", "v4"))
	close(reopen)
	expectLines(t, lines, "v3", "v4")
}
