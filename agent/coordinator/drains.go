package coordinator

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/selftaint/selftaint/taints/fleet"
)

// Drainer drains one node: each Pass lists its pods, evicts what may go
// now (or, forced, deletes what the Eviction API refuses) and says where
// the drain stands. evictedBefore is what this drain evicted before (a
// new leader resumes the count from the slot).
type Drainer interface {
	Pass(ctx context.Context, force bool, evictedBefore int) (DrainPass, error)
}

// DrainPass is what one pass found.
type DrainPass struct {
	// Progress is the drain's count after the pass.
	Progress fleet.Progress
	// Results are the pass's evictions by result (for metrics).
	Results map[string]int
	// Summary says it for people: what was evicted, what remains, what
	// refuses and why.
	Summary string
	// Blocked: nothing that remains can go now (refused, or left by the
	// request). Drained: nothing remains. OnlyLeft: what remains are only
	// pods the request leaves.
	Blocked, Drained, OnlyLeft bool
	// Next is when another pass is useful (zero: soon).
	Next time.Time
}

// NewDrainer makes the Drainer of node's drain for request.
type NewDrainer func(node string, request fleet.MaintenanceRequest) (Drainer, error)

// Pacing of a drain's passes, on real time: at least minPass apart, and
// at most maxPass, so a change (a pod gone, a PDB that allows again) is
// seen within it.
const (
	minPass     = 500 * time.Millisecond
	defaultPass = 2 * time.Second
	maxPass     = 5 * time.Second
	failedPass  = 5 * time.Second
)

// drainReport is the latest pass of a running drain, as the controller
// writes it.
type drainReport struct {
	progress                   fleet.Progress
	summary                    string
	blocked, drained, onlyLeft bool
	err                        error
}

// drainRun is one node's running drain.
type drainRun struct {
	id     string // the request it serves
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{} // a pass is wanted now (force changed)

	// Guarded by drainSet.mu.
	force       bool
	report      drainReport
	reported    bool
	toldBlocked bool
}

// drainSet are the running drains, by node. The controller's worker
// starts and stops them; their goroutines report through it.
type drainSet struct {
	mu   sync.Mutex // guards runs and the runs' guarded fields
	runs map[string]*drainRun
}

// ensureDrain makes sure node's drain runs for m's request, as ordered,
// and returns it.
func (c *controller) ensureDrain(node string, m *fleet.Maintenance, l *coordinationv1.Lease, order fleet.DrainOrder) *drainRun {
	s := &c.drains
	s.mu.Lock()
	run := s.runs[node]
	if run != nil && run.id == m.ID() {
		if run.force != order.Force {
			run.force = order.Force
			select {
			case run.kick <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
		return run
	}
	s.mu.Unlock()
	c.stopDrain(node)

	base, err := fleet.ParseProgress(l.Annotations[fleet.SlotProgressAnnotation])
	if err != nil {
		c.log.Warn("unreadable drain progress on the slot; counting from zero", "node", node, "err", err)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	run = &drainRun{id: m.ID(), cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1), force: order.Force}
	s.mu.Lock()
	if s.runs == nil {
		s.runs = map[string]*drainRun{}
	}
	s.runs[node] = run
	s.mu.Unlock()
	d, err := c.opts.NewDrainer(node, m.Request)
	if err != nil {
		s.mu.Lock()
		run.report, run.reported = drainReport{progress: base, summary: "the drain could not start", err: err}, true
		s.mu.Unlock()
		close(run.done)
		return run
	}
	c.log.Info("drain started", "node", node, "request", run.id, "resumed", base.Evicted)
	go c.drainLoop(ctx, node, run, d, base)
	return run
}

// drainLoop runs node's drain's passes until it is drained or stopped.
func (c *controller) drainLoop(ctx context.Context, node string, run *drainRun, d Drainer, base fleet.Progress) {
	defer close(run.done)
	evicted := base.Evicted
	for {
		c.drains.mu.Lock()
		force := run.force
		c.drains.mu.Unlock()
		p, err := d.Pass(ctx, force, evicted)
		if ctx.Err() != nil {
			return
		}
		wait := defaultPass
		rep := drainReport{progress: fleet.Progress{Evicted: evicted, Total: max(base.Total, evicted)}, err: err}
		if err == nil {
			evicted = p.Progress.Evicted
			rep = drainReport{progress: p.Progress, summary: p.Summary, blocked: p.Blocked, drained: p.Drained, onlyLeft: p.OnlyLeft}
			for result, n := range p.Results {
				c.opts.Metrics.Evicted(result, n)
			}
			if !p.Next.IsZero() {
				wait = min(max(time.Until(p.Next), minPass), maxPass)
			}
		} else {
			c.log.Warn("a drain pass failed; trying again", "node", node, "err", err)
			wait = failedPass
		}
		c.drains.mu.Lock()
		run.report, run.reported = rep, true
		c.drains.mu.Unlock()
		c.queue.Add(queueKey)
		if rep.drained {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-run.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// latest is run's last report, if it is still node's drain and has
// reported.
func (s *drainSet) latest(node string, run *drainRun) (drainReport, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs[node] != run || !run.reported {
		return drainReport{}, false
	}
	return run.report, true
}

// firstBlock reports whether run has not yet told that it is blocked,
// and remembers that it now has.
func (s *drainSet) firstBlock(node string, run *drainRun) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	told := run.toldBlocked
	run.toldBlocked = true
	return !told
}

// stopDrain stops node's drain, if one runs, and waits for it.
func (c *controller) stopDrain(node string) {
	s := &c.drains
	s.mu.Lock()
	run := s.runs[node]
	delete(s.runs, node)
	s.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
}

// steerDrains stops the drains the decision no longer orders.
func (c *controller) steerDrains(v *view, md fleet.MaintenanceDecision) {
	c.drains.mu.Lock()
	var stop []string
	for node, run := range c.drains.runs {
		m := v.maintenance[node]
		if _, ordered := md.Drain[node]; !ordered || m == nil || m.ID() != run.id {
			stop = append(stop, node)
		}
	}
	c.drains.mu.Unlock()
	for _, node := range stop {
		c.stopDrain(node)
	}
}

// stopAllDrains stops every drain (the leadership ends).
func (c *controller) stopAllDrains() {
	c.drains.mu.Lock()
	var nodes []string
	for node := range c.drains.runs {
		nodes = append(nodes, node)
	}
	c.drains.mu.Unlock()
	for _, node := range nodes {
		c.stopDrain(node)
	}
}
