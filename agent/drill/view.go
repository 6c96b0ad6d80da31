package drill

import (
	"fmt"
	"io"
	"sync"
	"time"

	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// view is the live progress view: one line per event, with the time since
// t=0 (before t=0: the time since the drill began, as setup).
type view struct {
	out   io.Writer // nil: quiet
	now   func() time.Time
	began time.Time

	mu sync.Mutex // guards t0 and writes to out
	t0 time.Time
}

func newView(out io.Writer, now func() time.Time) *view {
	return &view{out: out, now: now, began: now()}
}

// start marks t=0.
func (v *view) start(t0 time.Time) {
	v.mu.Lock()
	v.t0 = t0
	v.mu.Unlock()
	v.line("t=0: the workloads are ready; the steps begin")
}

// line prints one line of the view.
func (v *view) line(format string, args ...any) {
	v.lineAt(v.now(), fmt.Sprintf(format, args...))
}

// lineAt prints text as seen at time at.
func (v *view) lineAt(at time.Time, text string) {
	if v == nil || v.out == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.t0.IsZero() {
		fmt.Fprintf(v.out, "setup %6.1fs  %s\n", at.Sub(v.began).Seconds(), text)
		return
	}
	fmt.Fprintf(v.out, "t+%6.1fs  %s\n", at.Sub(v.t0).Seconds(), text)
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
