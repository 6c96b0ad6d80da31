package drill

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// recording is the recorder's side the runner uses: what it saw so far.
type recording interface {
	Record() tdrill.Record
	// Flush hands on every line said so far before it returns.
	Flush()
	Stop()
}

// startRecording starts the recorder on the drill's namespaces (its own
// and those its workloads name) and nodes, its change lines going to the
// live view.
func (r *runner) startRecording(ctx context.Context) error {
	namespaces := []string{DrillNamespace(r.s.Name)}
	for _, o := range r.plan.objects {
		if ns := o.GetNamespace(); ns != "" && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	own := map[string]bool{}
	for _, n := range r.drillNodes() {
		own[n] = true
	}
	scope := Scope{Namespaces: namespaces, Nodes: func(name string) bool { return own[name] }}
	if r.plan.replicas() > 0 || watchesGuard(r.s) {
		// The disruption guard of the drill's coordinators (or, on an
		// existing cluster, of its coordinator, as the config names it).
		scope.CoordinatorNamespace = r.coordinatorNamespace()
		scope.GuardName = r.plan.cfg.Coordinator.Guard.Name
	}
	r.view.holdLines(coalesceWindow, lineHold)
	rec, err := StartRecorder(ctx, r.env.client, scope, clock.RealClock{}, func(c Change) { r.view.lineAt(c.Time, c.Line) })
	if err != nil {
		r.view.releaseLines()
		return fmt.Errorf("starting to watch the drill's objects: %w", err)
	}
	r.recording = rec
	return nil
}

// stopRecording stops the recorder, once, and shows its last lines.
func (r *runner) stopRecording() {
	if r.recording != nil {
		r.recording.Stop()
	}
	r.view.releaseLines()
}

// startLine marks t=0 in the view once every line the recorder said before
// it is in the view: what was seen before t=0 prints before the t=0 line.
func (r *runner) startLine(t0 time.Time) {
	if r.recording != nil {
		r.recording.Flush()
	}
	r.view.start(t0)
}

// sayNow prints every line said so far (the recorder's too), before what
// is written to the view's writer directly: the output of a command a
// step runs goes after its step's line.
func (r *runner) sayNow() {
	if r.recording != nil {
		r.recording.Flush()
	}
	r.view.flushLines()
}

// coalesceMin is how many nodes must say the same thing within one
// coalesceWindow for the view to say it once for all of them; lineHold is
// how long a line waits at least before it is printed: one handed to the
// view that much later than it was seen (the recorder's lines come a
// moment after) still prints in order.
const (
	coalesceMin    = 4
	coalesceWindow = time.Second
	lineHold       = 500 * time.Millisecond
)

// lineBatcher holds the view's lines for window after the first of a
// batch, then hands on, in time order and coalesced (coalesceLines: a
// storm on a hundred nodes is a few lines, not hundreds), those seen at
// least hold before (dueLines); the younger ones wait for the next batch.
type lineBatcher struct {
	window, hold time.Duration
	now          func() time.Time
	out          func(Change)

	flushMu sync.Mutex // held while a batch is handed on: batches keep their order
	mu      sync.Mutex // guards buf and timer
	buf     []Change
	timer   *time.Timer
}

func (b *lineBatcher) add(c Change) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, c)
	if b.timer == nil {
		b.timer = time.AfterFunc(b.window, b.due)
	}
}

// due hands on the lines seen at least hold ago.
func (b *lineBatcher) due() { b.hand(b.now().Add(-b.hold)) }

// flush hands on every line held.
func (b *lineBatcher) flush() { b.hand(time.Time{}) }

// hand hands on the lines seen up to cutoff (zero: all of them) and
// waits again for the rest.
func (b *lineBatcher) hand(cutoff time.Time) {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	due, rest := dueLines(b.buf, cutoff)
	b.buf = rest
	if len(rest) > 0 {
		b.timer = time.AfterFunc(b.window, b.due)
	}
	b.mu.Unlock()
	for _, c := range coalesceLines(due, coalesceMin) {
		b.out(c)
	}
}

// dueLines sorts lines by the time they were seen (stable: lines seen at
// once keep the order they were said in) and splits them into those seen
// at or before cutoff (all of them when cutoff is zero) and the rest.
func dueLines(lines []Change, cutoff time.Time) (due, rest []Change) {
	lines = slices.Clone(lines)
	slices.SortStableFunc(lines, func(x, y Change) int { return x.Time.Compare(y.Time) })
	if cutoff.IsZero() {
		return lines, nil
	}
	i, _ := slices.BinarySearchFunc(lines, cutoff, func(c Change, t time.Time) int {
		if c.Time.After(t) {
			return 1
		}
		return -1
	})
	return lines[:i], lines[i:]
}

// coalesceLines says the node lines of changes that are the same but for
// the node ("node a-1: Ready False") once, when at least least nodes say it:
// "4 nodes: Ready False (a-1, a-2, a-3, a-4; within 0.3s)", at the first
// one's place and time. Every other line is kept as it is, in order.
func coalesceLines(changes []Change, least int) []Change {
	type group struct {
		first, last time.Time
		nodes       []string
		said        bool
	}
	groups := map[string]*group{}
	for _, c := range changes {
		node, what, ok := nodeLine(c.Line)
		if !ok {
			continue
		}
		g := groups[what]
		if g == nil {
			g = &group{first: c.Time}
			groups[what] = g
		}
		g.nodes = append(g.nodes, node)
		g.last = c.Time
	}
	out := make([]Change, 0, len(changes))
	for _, c := range changes {
		_, what, ok := nodeLine(c.Line)
		g := groups[what]
		switch {
		case !ok || len(g.nodes) < least:
			out = append(out, c)
		case !g.said:
			line := fmt.Sprintf("%d nodes: %s (%s; within %.1fs)", len(g.nodes), what, briefNames(g.nodes, 6), g.last.Sub(g.first).Seconds())
			out = append(out, Change{Time: g.first, Line: line})
			g.said = true
		}
	}
	return out
}

// nodeLine splits a node line, "node NAME: WHAT".
func nodeLine(line string) (node, what string, ok bool) {
	rest, ok := strings.CutPrefix(line, "node ")
	if !ok {
		return "", "", false
	}
	node, what, ok = strings.Cut(rest, ": ")
	if !ok || node == "" || strings.Contains(node, " ") {
		return "", "", false
	}
	return node, what, true
}

// watchesGuard: an expectation of s judges the disruption guard.
func watchesGuard(s *tdrill.Scenario) bool {
	return slices.ContainsFunc(s.Expect, func(e tdrill.Expectation) bool { return e.Guard != nil })
}
