package virtual

// This file lets a caller stop and resume one virtual node's kubelet while
// the others of the same Run go on: a drill's "node NotReady" step.

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Control stops and resumes the kubelets of the virtual nodes one Run
// serves (Options.Control), while the process runs.
//
// Stop is a kubelet that died: the node's virtual-kubelet node controller
// (Lease renewals, status updates), its pod controller (pod status
// updates, pod starts and deletions) and its selftaint agent (conditions
// and their heartbeats, taints) all stop, and when Stop returns none of
// them writes to the API any more. The node's pods keep "running", as
// containers outlive their kubelet: the node lifecycle controller marks
// the node Unknown once its grace period has passed, taints it
// node.kubernetes.io/unreachable and marks its pods not ready; pods bound
// to it meanwhile stay Pending and pods deleted meanwhile stay
// Terminating.
//
// Resume is the kubelet started again: the node controller renews the
// Lease and writes the status, the agent adopts the Node's state and
// heartbeats Ready again (the node lifecycle controller then lifts the
// unreachable taint), the pod controller starts the pods bound meanwhile,
// finishes the deletions and writes every running pod's status back
// (ready again, as a kubelet's status manager does after a restart).
//
// A Control serves one Run at a time; its methods are safe for concurrent
// use. Stop and Resume are idempotent: stopping a stopped node or resuming
// a running one does nothing.
type Control struct {
	mu    sync.Mutex             // guards nodes
	nodes map[string]*nodeRunner // of the Run attached; nil when none
}

// NewControl returns a Control to pass to Run in Options.Control.
func NewControl() *Control { return &Control{} }

// ErrNotRunning says the Control serves no Run, or the Run has ended.
var ErrNotRunning = errors.New("virtual: no virtual nodes are running under this control")

// Stop stops node's kubelet and waits until none of its parts writes any
// more. It fails for a node the Run does not serve, or when no Run is
// attached.
func (c *Control) Stop(node string) error {
	r, err := c.runner(node)
	if err != nil {
		return err
	}
	return r.stop()
}

// Resume starts node's kubelet again after a Stop.
func (c *Control) Resume(node string) error {
	r, err := c.runner(node)
	if err != nil {
		return err
	}
	return r.resume()
}

// Stopped reports whether node's kubelet is stopped.
func (c *Control) Stopped(node string) (bool, error) {
	r, err := c.runner(node)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancel == nil, nil
}

func (c *Control) runner(node string) (*nodeRunner, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		return nil, ErrNotRunning
	}
	r, ok := c.nodes[node]
	if !ok {
		return nil, fmt.Errorf("virtual: node %s is not one of the virtual nodes this process runs", node)
	}
	return r, nil
}

// attach makes c serve a Run's nodes.
func (c *Control) attach(runners []*nodeRunner) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes != nil {
		return errors.New("virtual: the control already serves another run")
	}
	c.nodes = make(map[string]*nodeRunner, len(runners))
	for _, r := range runners {
		c.nodes[r.name] = r
	}
	return nil
}

// detach ends c's service of a Run whose context is done: once it returns,
// no Resume starts anything.
func (c *Control) detach() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	for _, r := range nodes {
		r.close()
	}
}

// nodeRunner runs one virtual node's kubelet, one incarnation at a time:
// started by Run, stopped and started again by a Control.
type nodeRunner struct {
	name string
	// build makes a fresh kubelet for the node (its controllers and
	// agent); the pods it runs are kept across incarnations.
	build func() (*virtualNode, error)
	// parent is the Run's context; wg counts every incarnation's
	// goroutines for Run to wait on; fail stops the whole Run.
	parent context.Context
	wg     *sync.WaitGroup
	fail   context.CancelCauseFunc

	mu     sync.Mutex         // guards the fields below; held through a whole start or stop
	closed bool               // the Run is ending: nothing starts any more
	cancel context.CancelFunc // ends the running incarnation; nil while stopped
	done   chan struct{}      // closed when the running (or last) incarnation has ended
}

// startLocked runs n, a new incarnation built by r.build; r.mu is held.
func (r *nodeRunner) startLocked(n *virtualNode) {
	ctx, cancel := context.WithCancel(r.parent)
	done := make(chan struct{})
	var parts sync.WaitGroup
	n.start(ctx, &parts, r.fail)
	r.wg.Go(func() {
		parts.Wait()
		close(done)
	})
	r.cancel, r.done = cancel, done
}

func (r *nodeRunner) resume() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return ErrNotRunning
	case r.cancel != nil:
		return nil
	}
	n, err := r.build()
	if err != nil {
		return fmt.Errorf("virtual node %s: resuming: %w", r.name, err)
	}
	r.startLocked(n)
	return nil
}

func (r *nodeRunner) stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrNotRunning
	}
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	<-r.done
	return nil
}

// close marks the runner's Run as ending.
func (r *nodeRunner) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
}
