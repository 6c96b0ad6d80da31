package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/agent/testcp"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// cleanupTimeout bounds the whole cleanup.
const cleanupTimeout = 3 * time.Minute

// errCleanupAborted: a second interrupt abandoned the cleanup.
var errCleanupAborted = errors.New("cleanup aborted by a second interrupt: what is listed as removed is gone, the rest may remain")

// cleanup removes everything the drill created, whether it ended, failed
// or was interrupted (ctx cancelled: the cleanup runs on regardless, until
// Abort closes).
func (r *runner) cleanup(ctx context.Context) tdrill.Cleanup {
	cctx, cancel := context.WithTimeoutCause(context.WithoutCancel(ctx), cleanupTimeout, errors.New("the cleanup took longer than "+cleanupTimeout.String()))
	defer cancel()
	aborted := make(chan struct{})
	if r.opts.Abort != nil {
		go func() {
			select {
			case <-r.opts.Abort:
				close(aborted)
				cancel()
			case <-cctx.Done():
			}
		}()
	}
	if r.env != nil && r.env.client != nil {
		r.view.line("cleaning up")
	}
	removed, err := r.cleanupSteps(cctx)
	select {
	case <-aborted:
		err = errors.Join(errCleanupAborted, err)
	default:
	}
	c := tdrill.Cleanup{Done: err == nil, Removed: removed}
	if err != nil {
		c.Error = err.Error()
	}
	return c
}

// cleanupSteps undoes, in order, what the drill did.
func (r *runner) cleanupSteps(ctx context.Context) ([]string, error) {
	var removed []string
	var errs []error
	do := func(rm []string, err error) {
		removed = append(removed, rm...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	r.mu.Lock()
	c := r.created
	c.faults, c.drains, c.nodes, c.namespaces = slices.Clone(c.faults), slices.Clone(c.drains), slices.Clone(c.nodes), slices.Clone(c.namespaces)
	r.mu.Unlock()
	if r.env == nil || r.env.client == nil {
		return nil, nil // nothing was created
	}
	embedded := r.env.cp != nil
	if r.virtual != nil {
		// A stopped kubelet deletes no pod: resume them all.
		for n, k := range r.virtual.control {
			_ = k.Resume(n)
		}
	}
	if !embedded {
		do(r.clearFaults(ctx, c.faults))
		do(r.endDrains(ctx, c.drains))
	}
	if r.coord != nil {
		do(r.coord.stopAll(), nil)
	}
	if !embedded {
		do(r.deleteApplied(ctx))
		do(r.deleteNamespaces(ctx, c.namespaces))
	}
	if r.virtual != nil {
		if err := r.virtual.stop(); err != nil {
			r.view.line("virtual nodes ended with: %v", err)
		}
	}
	if embedded {
		return r.closeControlPlane(removed)
	}
	do(r.deleteVirtualNodes(ctx, c.nodes))
	do(r.deleteCoordinatorLeases(ctx, r.drillNodes()))
	return removed, errors.Join(errs...)
}

// closeControlPlane stops the embedded control plane and removes its
// directory: everything in it goes with it.
func (r *runner) closeControlPlane(removed []string) ([]string, error) {
	dir := r.env.cp.Dir
	if err := r.env.cp.Close(); err != nil {
		return removed, err
	}
	return append(removed, "the embedded control plane (stopped; "+dir+" removed)"), nil
}

// clearFaults clears the faults on the nodes the drill injected some on,
// stepConcurrency nodes at a time; every node is tried.
func (r *runner) clearFaults(ctx context.Context, nodes []string) ([]string, error) {
	errs := make([]error, len(nodes))
	cleared := make([]bool, len(nodes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, stepConcurrency)
	for i, n := range nodes {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := r.opts.Actions.ClearFaults(ctx, r.env.kubeconfig, r.plan.configPath, n)
			switch {
			case err == nil:
				cleared[i] = true
			case !apierrors.IsNotFound(errors.Unwrap(err)) && !apierrors.IsNotFound(err):
				errs[i] = fmt.Errorf("clearing faults on %s: %w", n, err)
			}
		}()
	}
	wg.Wait()
	var removed []string
	for i, n := range nodes {
		if cleared[i] {
			removed = append(removed, "faults on node "+n)
		}
	}
	return removed, errors.Join(errs...)
}

// endDrains ends the drains the drill asked for on real nodes (a virtual
// node's ends with it).
func (r *runner) endDrains(ctx context.Context, nodes []string) ([]string, error) {
	var real []string
	for _, n := range nodes {
		if r.realNodes[n] {
			real = append(real, n)
		}
	}
	if len(real) == 0 {
		return nil, nil
	}
	if err := r.opts.Actions.EndDrains(ctx, r.env.kubeconfig, real); err != nil {
		return nil, fmt.Errorf("ending the drains of %v: %w", real, err)
	}
	out := make([]string, len(real))
	for i, n := range real {
		out[i] = "maintenance request on node " + n
	}
	return out, nil
}

// deleteNamespaces deletes the namespaces the drill created and waits
// until they are gone (their pods with them).
func (r *runner) deleteNamespaces(ctx context.Context, names []string) ([]string, error) {
	var removed []string
	var errs []error
	nsClient := r.env.client.CoreV1().Namespaces()
	for _, ns := range names {
		err := nsClient.Delete(ctx, ns, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting namespace %s: %w", ns, err))
			continue
		}
		err = testcp.Poll(ctx, 2*time.Minute, 250*time.Millisecond, func() (bool, error) {
			_, err := nsClient.Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s not gone: %w", ns, err))
			continue
		}
		removed = append(removed, "namespace "+ns+" (with everything in it)")
	}
	return removed, errors.Join(errs...)
}
