package logmon

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestKmsgScanner(t *testing.T) {
	boot := t0.Add(-time.Hour)
	tests := []struct {
		name      string
		chunks    []string
		wantLines []Line
		wantGaps  []Gap
	}{
		{"one record per read, dictionary lines skipped",
			[]string{"6,100,5000000,-;eth0: link up\n SUBSYSTEM=net\n DEVICE=n2\n", "3,101,6000000,c;Killed process 1 (x)\n"},
			[]Line{{Time: boot.Add(5 * time.Second), Message: "eth0: link up", Seq: 100}, {Time: boot.Add(6 * time.Second), Message: "Killed process 1 (x)", Seq: 101}}, nil},
		{"records split across reads (FIFO)",
			[]string{"6,1,1,-;a", "b\n6,2,2,-;c\n6,3", ",3,-;d\n"},
			[]Line{{Time: boot.Add(time.Microsecond), Message: "ab", Seq: 1}, {Time: boot.Add(2 * time.Microsecond), Message: "c", Seq: 2}, {Time: boot.Add(3 * time.Microsecond), Message: "d", Seq: 3}}, nil},
		{"a skip in sequence numbers is a gap of its size",
			[]string{"6,10,1,-;a\n", "6,14,2,-;b\n"},
			[]Line{{Time: boot.Add(time.Microsecond), Message: "a", Seq: 10}, {Time: boot.Add(2 * time.Microsecond), Message: "b", Seq: 14}},
			[]Gap{{Lost: 3, After: 10}}},
		{"garbage is not a record", []string{"hello\n6,x,1,-;a\n"}, nil, nil},
		{"bad fields are not a record", []string{"x,1,1,-;a\n6,1,-5,-;a\n6,1;a\n6,18446744073709551616,1,-;a\n"}, nil, nil},
		{"a continuation line without its record", []string{" SUBSYSTEM=net\n6,1,1,-;a\n"}, []Line{{Time: boot.Add(time.Microsecond), Message: "a", Seq: 1}}, nil},
		{"invalid UTF-8 is replaced", []string{"6,1,1,-;a\xffb\n"}, []Line{{Time: boot.Add(time.Microsecond), Message: "a\uFFFDb", Seq: 1}}, nil},
		{"a huge record is skipped, the next read", []string{"6,1,1,-;" + strings.Repeat("x", maxRecord), strings.Repeat("y", 100) + "\n6,2,2,-;b\n"},
			[]Line{{Time: boot.Add(2 * time.Microsecond), Message: "b", Seq: 2}}, nil},
		{"a huge record in one read", []string{"6,1,1,-;" + strings.Repeat("x", maxRecord) + "\n6,2,2,-;b\n"},
			[]Line{{Time: boot.Add(2 * time.Microsecond), Message: "b", Seq: 2}}, nil},
		{"records read again are skipped", []string{"6,1,1,-;a\n6,2,2,-;b\n6,1,1,-;a\n6,2,2,-;b\n6,3,3,-;c\n"},
			[]Line{{Time: boot.Add(time.Microsecond), Message: "a", Seq: 1}, {Time: boot.Add(2 * time.Microsecond), Message: "b", Seq: 2}, {Time: boot.Add(3 * time.Microsecond), Message: "c", Seq: 3}}, nil},
		{"semicolons in the message", []string{"6,1,1,-;a;b\n"}, []Line{{Time: boot.Add(time.Microsecond), Message: "a;b", Seq: 1}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &kmsgScanner{boot: boot}
			var lines []Line
			var gaps []Gap
			var bad []string
			for _, c := range tt.chunks {
				s.feed([]byte(c), func(l Line) { lines = append(lines, l) }, func(g Gap) { gaps = append(gaps, g) }, func(why string) { bad = append(bad, why) })
			}
			// What is not a record (but dictionary lines) is said, once each.
			wantBad := map[string]int{"garbage is not a record": 2, "bad fields are not a record": 4, "a huge record is skipped, the next read": 1, "a huge record in one read": 1}[tt.name]
			if len(bad) != wantBad {
				t.Errorf("bad: got %d %q, want %d", len(bad), bad, wantBad)
			}
			if !reflect.DeepEqual(lines, tt.wantLines) {
				t.Errorf("lines: got %+v, want %+v", lines, tt.wantLines)
			}
			if !reflect.DeepEqual(gaps, tt.wantGaps) {
				t.Errorf("gaps: got %+v, want %+v", gaps, tt.wantGaps)
			}
		})
	}
}

// epipeReader plays /dev/kmsg: one record per read, an EPIPE where the
// kernel overwrote records, then the oldest record still there.
type epipeReader struct{ reads []any }

func (r *epipeReader) Read(p []byte) (int, error) {
	if len(r.reads) == 0 {
		return 0, errors.New("done")
	}
	next := r.reads[0]
	r.reads = r.reads[1:]
	if err, ok := next.(error); ok {
		return 0, err
	}
	return copy(p, next.(string)), nil
}

// TestReadKmsgOverrun: an EPIPE is reported as an overrun, then the skip
// in sequence numbers as its size, and reading goes on with the records
// still there.
func TestReadKmsgOverrun(t *testing.T) {
	r := &epipeReader{reads: []any{"6,1,1,-;a\n", syscall.EPIPE, "6,50,2,-;b\n", "6,51,3,-;c\n"}}
	var msgs []string
	var gaps []Gap
	err := ReadKmsg(context.Background(), r, t0, func(l Line) { msgs = append(msgs, l.Message) }, func(g Gap) { gaps = append(gaps, g) })
	if err == nil || err.Error() != "reading kmsg: done" {
		t.Errorf("got %v, want the reader's error wrapped", err)
	}
	if want := []string{"a", "b", "c"}; !reflect.DeepEqual(msgs, want) {
		t.Errorf("got %q, want %q", msgs, want)
	}
	if want := []Gap{{Overrun: true, After: 1}, {Lost: 48, After: 1}}; !reflect.DeepEqual(gaps, want) {
		t.Errorf("gaps: got %+v, want %+v", gaps, want)
	}
}

// TestReadKmsgFIFO: a FIFO stands in for /dev/kmsg; records written after
// the writer closed and reopened are still read.
func TestReadKmsgFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kmsg")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		done <- ReadKmsg(ctx, f, t0, func(l Line) { got <- l.Message }, func(Gap) {})
	}()
	for _, rec := range []string{"6,1,1,-;first\n", "6,2,2,-;second\n"} {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, rec); err != nil {
			t.Fatal(err)
		}
		w.Close()
		select {
		case m := <-got:
			if want := rec[len("6,1,1,-;") : len(rec)-1]; m != want {
				t.Errorf("got %q, want %q", m, want)
			}
		case err := <-done:
			t.Fatalf("reader ended: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%q not read in 30 s", rec)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("got %v, want nil after cancel", err)
	}
}
