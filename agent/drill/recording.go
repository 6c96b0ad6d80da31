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
	r.lines = &lineBatcher{window: coalesceWindow, out: func(c Change) { r.view.lineAt(c.Time, c.Line) }}
	rec, err := StartRecorder(ctx, r.env.client, scope, clock.RealClock{}, r.lines.add)
	if err != nil {
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
	if r.lines != nil {
		r.lines.flush()
	}
}

// coalesceMin is how many nodes must say the same thing within one
// coalesceWindow for the view to say it once for all of them.
const (
	coalesceMin    = 4
	coalesceWindow = time.Second
)

// lineBatcher holds the recorder's lines for up to window after the first
// of a batch, then hands them on coalesced (coalesceLines): a storm on a
// hundred nodes is a few lines, not hundreds.
type lineBatcher struct {
	window time.Duration
	out    func(Change)

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
		b.timer = time.AfterFunc(b.window, b.flush)
	}
}

// flush hands on what is held.
func (b *lineBatcher) flush() {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	buf := b.buf
	b.buf = nil
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.mu.Unlock()
	for _, c := range coalesceLines(buf, coalesceMin) {
		b.out(c)
	}
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
