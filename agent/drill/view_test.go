package drill

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStamp(t *testing.T) {
	began := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t0 := began.Add(30 * time.Second)
	for _, tc := range []struct {
		name   string
		at, t0 time.Time
		want   string
	}{
		{"setup, before t=0 is known", began.Add(4500 * time.Millisecond), time.Time{}, "setup    4.5s"},
		{"at t=0", t0, t0, "t+   0.0s"},
		{"after t=0", t0.Add(12300 * time.Millisecond), t0, "t+  12.3s"},
		// Seen before t=0 but printed after it (a watch's line held a
		// moment): labelled setup, never a time before t=0.
		{"seen before t=0, printed after", t0.Add(-400 * time.Millisecond), t0, "setup   29.6s"},
		{"seen before the drill began", began.Add(-time.Second), time.Time{}, "setup    0.0s"},
	} {
		if got := stamp(tc.at, began, tc.t0); got != tc.want {
			t.Errorf("%s: stamp = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestViewOrder: lines are printed in the order of the times they were
// seen, whichever came to the view first; what was seen before t=0 prints
// before the t=0 line, or, when it comes after that line was printed, as
// setup; no line shows a time before t=0.
func TestViewOrder(t *testing.T) {
	began := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t0 := began.Add(10 * time.Second)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var out bytes.Buffer
	now := began
	v := newView(&out, func() time.Time { return now })
	v.line("registering 2 virtual nodes")
	v.holdLines(time.Hour, 0) // as the recorder starts: flushed by start and release only
	// The recorder's line that made the workloads ready comes to the view
	// a moment after the runner saw them ready and marked t=0.
	v.lineAt(at(-0.2), "Deployment web: 2/2 ready")
	v.start(t0)
	// Seen before t=0, handed on only after the t=0 line was printed.
	v.lineAt(at(-0.1), "pod web-1: ready on vn-1")
	// A step the runner says now, and a node line seen before it that the
	// recorder hands on after it.
	now = at(5)
	v.line("step memory (fault) starts")
	v.lineAt(at(4.8), "node vn-1: SelftaintMemoryPressure True")
	v.releaseLines()
	now = at(70)
	v.line("cleanup done: removed 3 object(s)")
	want := []string{
		"setup    0.0s  registering 2 virtual nodes",
		"setup    9.8s  Deployment web: 2/2 ready",
		"t+   0.0s  t=0: the workloads are ready; the steps begin",
		"setup    9.9s  pod web-1: ready on vn-1",
		"t+   4.8s  node vn-1: SelftaintMemoryPressure True",
		"t+   5.0s  step memory (fault) starts",
		"t+  70.0s  cleanup done: removed 3 object(s)",
	}
	if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("view:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
}

func TestDueLines(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int, line string) Change {
		return Change{Time: t0.Add(time.Duration(ms) * time.Millisecond), Line: line}
	}
	for _, tc := range []struct {
		name      string
		in        []Change
		cutoff    time.Time
		due, rest []Change
	}{
		{"in time order, the late one before",
			[]Change{at(0, "a"), at(500, "step starts"), at(300, "node seen before it"), at(900, "young")},
			t0.Add(600 * time.Millisecond),
			[]Change{at(0, "a"), at(300, "node seen before it"), at(500, "step starts")}, []Change{at(900, "young")}},
		{"seen at once: in the order said", []Change{at(100, "first"), at(100, "second")}, t0.Add(100 * time.Millisecond),
			[]Change{at(100, "first"), at(100, "second")}, []Change{}},
		{"all of them", []Change{at(900, "b"), at(0, "a")}, time.Time{}, []Change{at(0, "a"), at(900, "b")}, nil},
		{"none due", []Change{at(900, "b")}, t0, []Change{}, []Change{at(900, "b")}},
		{"empty", nil, t0, []Change{}, []Change{}},
	} {
		due, rest := dueLines(tc.in, tc.cutoff)
		if fmt.Sprint(due) != fmt.Sprint(tc.due) || fmt.Sprint(rest) != fmt.Sprint(tc.rest) {
			t.Errorf("%s: dueLines = %v, %v; want %v, %v", tc.name, due, rest, tc.due, tc.rest)
		}
	}
}

// TestLineBatcherHolds: a timed hand-on passes the lines seen before its
// cutoff, in time order, and keeps the younger ones for the next.
func TestLineBatcherHolds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []string
	b := &lineBatcher{window: time.Hour, hold: time.Second, now: func() time.Time { return t0.Add(2 * time.Second) },
		out: func(c Change) { got = append(got, c.Line) }}
	b.add(Change{Time: t0.Add(800 * time.Millisecond), Line: "step starts"})
	b.add(Change{Time: t0.Add(1500 * time.Millisecond), Line: "young"})
	b.add(Change{Time: t0.Add(700 * time.Millisecond), Line: "node seen before the step"})
	b.due() // at 2s, holding 1s: what was seen up to 1s
	if want := []string{"node seen before the step", "step starts"}; !slices.Equal(got, want) {
		t.Errorf("due handed on %q, want %q", got, want)
	}
	b.flush()
	if want := []string{"node seen before the step", "step starts", "young"}; !slices.Equal(got, want) {
		t.Errorf("after flush %q, want %q", got, want)
	}
}
