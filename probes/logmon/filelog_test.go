package logmon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

func TestLineFormatParse(t *testing.T) {
	f := mustLoad(t, "testdata/npd/kernel-monitor-filelog.json").Filelog
	tests := []struct {
		text    string
		want    Line
		wantErr bool
	}{
		{"Nov 27 03:59:59 node1 kernel: [ 12.345678] EXT4-fs error (device sda1): x",
			Line{Time: time.Date(2026, 11, 27, 3, 59, 59, 0, time.UTC), Message: "EXT4-fs error (device sda1): x"}, false},
		{"Nov  2 01:02:03 node1 kernel: [1.0] a", Line{Time: time.Date(2026, 11, 2, 1, 2, 3, 0, time.UTC), Message: "a"}, false},
		{"Nov 27 03:59:59 node1 systemd[1]: Started x", Line{}, true},
		{"garbage", Line{}, true},
	}
	for _, tt := range tests {
		got, err := f.Parse(tt.text, t0, time.UTC)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%q: got %+v, %v; want %+v (error %v)", tt.text, got, err, tt.want, tt.wantErr)
		}
	}
}

type noted struct{ reason, msg string }

// TestReadFilelogRotationAndTruncation: lines written before a rotation
// but not yet read are read from the old file, then the new file from its
// start; a truncated file is read again from its start; both are noted.
func TestReadFilelogRotationAndTruncation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kern.log")
	write := func(p, data string, flag int) {
		t.Helper()
		f, err := os.OpenFile(p, flag|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	write(path, "a\nb\n", os.O_APPEND)
	lines, notes := make(chan string, 100), make(chan noted, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ReadFilelog(ctx, path, 5*time.Millisecond, func(l string) { lines <- l }, func(r, m string) { notes <- noted{r, m} })
	}()
	expect := func(want ...string) {
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
	}
	expectNote := func(reason string) {
		t.Helper()
		select {
		case n := <-notes:
			if n.reason != reason {
				t.Fatalf("got note %+v, want %s", n, reason)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s noted in 30 s", reason)
		}
	}
	expect("a", "b")
	// Rotation: a last line in the old file, then the new file.
	write(path, "c\nunfinished", os.O_APPEND)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	write(path, "d-a-longer-line\n", os.O_APPEND)
	expect("c", "unfinished", "d-a-longer-line")
	expectNote(ReasonLogRotated)
	// Truncation (copytruncate): read again from the start.
	write(path, "e\n", os.O_TRUNC)
	expect("e")
	expectNote(ReasonLogTruncated)
	write(path, "f\n", os.O_APPEND)
	expect("f")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ReadFilelog: %v", err)
	}
}

// TestMonitorFilelog: kernel-monitor-filelog.json unchanged over a file
// under the host root: a matching line sets KernelDeadlock.
func TestMonitorFilelog(t *testing.T) {
	host := fixtureHost(t, "boot-1")
	log := host.Path("/var/log/kern.log")
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		t.Fatal(err)
	}
	old := "Nov 27 03:50:00 node1 kernel: [1.0] INFO: task docker:1 blocked for more than 120 seconds.\n" // before lookback (5m)
	if err := os.WriteFile(log, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	mon, err := New(mustLoad(t, "testdata/npd/kernel-monitor-filelog.json"), Options{Host: host, Now: func() time.Time { return t0 }, Location: time.UTC, Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mon.Close() })
	p := byCondition(mon.Probes())["KernelDeadlock"]
	watch(t, p)
	waitFor(t, p, "the old line read", func(r probes.Result) bool { return r.Readings[1].Value == "1" })
	if res := p.Probe(context.Background()); res.Status != probes.StatusOK {
		t.Fatalf("a line before lookback: got %s %s, want OK", res.Status, res.Reason)
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("Nov 27 03:59:59 node1 kernel: [3599.0] " + hungDocker + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res := waitFor(t, p, "KernelDeadlock problem", func(r probes.Result) bool { return r.Status == probes.StatusProblem })
	if res.Reason != "DockerHung" || res.Message != hungDocker {
		t.Errorf("got %s %q, want DockerHung %q", res.Reason, res.Message, hungDocker)
	}
}
