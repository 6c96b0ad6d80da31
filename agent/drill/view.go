package drill

import (
	"fmt"
	"io"
	"sync"
	"time"

	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// view is the live progress view: one line per event, with the time since
// t=0 (before t=0: the time since the drill began, as setup; stamp).
// While the recorder watches, lines are held for up to a second and
// printed in time order (lineBatcher): the recorder's lines reach the
// view a moment after what they saw, and a line the runner says now must
// not print before one seen earlier.
type view struct {
	out   io.Writer // nil: quiet
	now   func() time.Time
	began time.Time

	mu   sync.Mutex // guards t0, hold and writes to out
	t0   time.Time
	hold *lineBatcher // non-nil while lines are held (holdLines)
}

func newView(out io.Writer, now func() time.Time) *view {
	return &view{out: out, now: now, began: now()}
}

// holdLines holds the lines from now on, for window after the first of a
// batch and at least hold each, to print them coalesced and in time order,
// until releaseLines.
func (v *view) holdLines(window, hold time.Duration) {
	b := &lineBatcher{window: window, hold: hold, now: v.now, out: v.print}
	v.mu.Lock()
	v.hold = b
	v.mu.Unlock()
}

// releaseLines prints what is held and prints every later line at once.
func (v *view) releaseLines() {
	v.mu.Lock()
	b := v.hold
	v.hold = nil
	v.mu.Unlock()
	if b != nil {
		b.flush()
	}
}

// flushLines prints what is held now (in time order) and goes on holding.
func (v *view) flushLines() {
	v.mu.Lock()
	b := v.hold
	v.mu.Unlock()
	if b != nil {
		b.flush()
	}
}

// start marks t=0. Every line the view was given before is printed before
// the t=0 line, and every line seen before t0 that comes after it is
// labelled setup (stamp): none shows a time before t=0.
func (v *view) start(t0 time.Time) {
	v.mu.Lock()
	v.t0 = t0
	v.mu.Unlock()
	v.lineAt(t0, "t=0: the workloads are ready; the steps begin")
	v.flushLines()
}

// line prints one line of the view.
func (v *view) line(format string, args ...any) {
	v.lineAt(v.now(), fmt.Sprintf(format, args...))
}

// lineAt prints text as seen at time at (held first while lines are).
func (v *view) lineAt(at time.Time, text string) {
	if v == nil || v.out == nil {
		return
	}
	v.mu.Lock()
	b := v.hold
	v.mu.Unlock()
	if b != nil {
		b.add(Change{Time: at, Line: text})
		return
	}
	v.print(Change{Time: at, Line: text})
}

// print writes one line.
func (v *view) print(c Change) {
	v.mu.Lock()
	defer v.mu.Unlock()
	fmt.Fprintf(v.out, "%s  %s\n", stamp(c.Time, v.began, v.t0), c.Line)
}

// stamp is a line's time as the view prints it: "t+  12.3s" from t0 once
// the drill has one; before t0 (also a line seen before t0 that comes
// after it), "setup   4.5s" from began. Never a time before t=0.
func stamp(at, began, t0 time.Time) string {
	if t0.IsZero() || at.Before(t0) {
		return fmt.Sprintf("setup %6.1fs", max(at.Sub(began), 0).Seconds())
	}
	return fmt.Sprintf("t+%6.1fs", at.Sub(t0).Seconds())
}

// cleanup shows what the cleanup removed.
func (v *view) cleanup(c tdrill.Cleanup) {
	switch {
	case c.Done:
		v.line("cleanup done: removed %d object(s)", len(c.Removed))
	default:
		v.line("cleanup NOT done: %s", c.Error)
	}
	for _, r := range c.Removed {
		v.line("  removed %s", r)
	}
}
