package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// errStale marks a write refused because the coordinator's view was stale
// (409 Conflict, AlreadyExists, NotFound): the object has been re-read,
// and the decision must be made again from the fresh view.
var errStale = errors.New("the view was stale")

// execute writes decision d: the guard first (agents should see a trip as
// soon as possible), then releases, deletions and renewals, and grants
// last, and only when every release went through (a grant may rely on the
// budget a release frees). A stale view stops it at once: the rest was
// decided from that view.
func (c *controller) execute(ctx context.Context, v *view, d fleet.Decision, now time.Time) error {
	var errs []error
	// run does one step for each node and says whether all went through;
	// false as well on a stale view, which ends the execution.
	stale := false
	run := func(nodes []string, do func(node string) error) bool {
		ok := true
		for _, node := range nodes {
			if stale {
				return false
			}
			if err := do(node); err != nil {
				errs = append(errs, err)
				ok, stale = false, errors.Is(err, errStale)
			}
		}
		return ok
	}
	if d.WriteGuard || c.guard.pending {
		run([]string{""}, func(string) error { return c.writeGuard(ctx, d.Guard) })
	}
	released := run(sortedKeys(d.Release), func(node string) error { return c.release(ctx, v, node, d.Release[node]) })
	run(d.Delete, func(node string) error { return c.delete(ctx, v, node) })
	run(d.Renew, func(node string) error { return c.renew(ctx, v, node, now) })
	if !released && len(d.Grant) > 0 && !stale {
		errs = append(errs, fmt.Errorf("not granting %v until the releases before them have gone through", d.Grant))
	} else {
		run(d.Grant, func(node string) error { return c.grant(ctx, v, node, now) })
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// grant writes node's grant from now: a new Lease, or the released one
// taken again.
func (c *controller) grant(ctx context.Context, v *view, node string, now time.Time) error {
	zone := v.zones[node]
	fresh := fleet.NewGrant(c.opts.Namespace, node, zone, c.opts.Config.GrantTTL, now)
	fresh.Labels = withOwnLabels(fresh.Labels)
	old := v.leaseFor(node)
	var written *coordinationv1.Lease
	var err error
	if old == nil {
		written, err = c.leaseClient().Create(ctx, fresh, metav1.CreateOptions{})
	} else {
		l := old.DeepCopy()
		l.Labels = mergeMaps(l.Labels, fresh.Labels)
		l.Annotations = mergeMaps(l.Annotations, fresh.Annotations)
		l.Spec = fresh.Spec
		written, err = c.leaseClient().Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return c.leaseWriteFailed(ctx, v, node, "granting NoExecute to node "+node, err)
	}
	c.wrote(written)
	v.leases[node] = written
	c.opts.Metrics.GrantStarted(zone)
	c.log.Info("granted NoExecute", "node", node, "zone", zone, "lease", written.Name, "ttl", c.opts.Config.GrantTTL)
	return nil
}

// renew moves node's grant's renewTime to now.
func (c *controller) renew(ctx context.Context, v *view, node string, now time.Time) error {
	return c.updateLease(ctx, v, node, "renewing the grant of node "+node, func(l *coordinationv1.Lease) {
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
		l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.Config.GrantTTL / time.Second))
	})
}

// release clears the holder of node's grant, why being one of fleet's
// Release reasons. The Lease stays, with its acquireTime, so the rate
// window survives a leader change.
func (c *controller) release(ctx context.Context, v *view, node, why string) error {
	err := c.updateLease(ctx, v, node, "releasing the grant of node "+node, func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity = nil
	})
	if err != nil {
		return err
	}
	c.opts.Metrics.GrantReleased(why)
	c.log.Info("released NoExecute grant", "node", node, "why", why)
	return nil
}

// updateLease writes node's grant Lease changed by mutate, carrying the
// resourceVersion it was read at.
func (c *controller) updateLease(ctx context.Context, v *view, node, what string, mutate func(*coordinationv1.Lease)) error {
	old := v.leaseFor(node)
	if old == nil {
		return fmt.Errorf("%s: %w: no grant Lease known", what, errStale)
	}
	l := old.DeepCopy()
	mutate(l)
	written, err := c.leaseClient().Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return c.leaseWriteFailed(ctx, v, node, what, err)
	}
	c.wrote(written)
	v.leases[node] = written // a later step of this decision writes on from it
	return nil
}

// delete deletes node's released grant Lease, provided it is still the
// version the decision saw.
func (c *controller) delete(ctx context.Context, v *view, node string) error {
	old := v.leaseFor(node)
	if old == nil {
		return nil
	}
	err := c.leaseClient().Delete(ctx, old.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &old.UID, ResourceVersion: &old.ResourceVersion},
	})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		c.deleted(old.Name, old.UID)
		delete(v.leases, node)
		c.log.Debug("deleted a released grant", "node", node, "lease", old.Name)
		return nil
	}
	return c.leaseWriteFailed(ctx, v, node, "deleting the released grant of node "+node, err)
}

// leaseWriteFailed handles a refused write of node's grant Lease: a stale
// view (conflict, already exists, not found) re-reads the Lease, so the
// next decision starts from it, and says errStale.
func (c *controller) leaseWriteFailed(ctx context.Context, v *view, node, what string, err error) error {
	name := fleet.GrantName(node)
	if old := v.leaseFor(node); old != nil {
		name = old.Name
	}
	if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	fresh, getErr := c.leaseClient().Get(ctx, name, metav1.GetOptions{})
	switch {
	case getErr == nil:
		c.wrote(fresh)
	case apierrors.IsNotFound(getErr):
		if old := v.leaseFor(node); old != nil {
			c.deleted(name, old.UID)
		}
	default:
		return fmt.Errorf("%s: %w: %w (re-reading it: %w)", what, errStale, err, getErr)
	}
	return fmt.Errorf("%s: %w: %w", what, errStale, err)
}

func (c *controller) leaseClient() typedcoordinationv1.LeaseInterface {
	return c.opts.Client.CoordinationV1().Leases(c.opts.Namespace)
}

// mergeMaps returns a with b's entries added (a new map).
func mergeMaps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

// tell records the decision's Events: about a Node, or, for the fleet,
// about the guard ConfigMap.
func (c *controller) tell(v *view, events []fleet.Event) {
	for _, e := range events {
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
		}
		var obj *corev1.ObjectReference
		if e.Node == "" {
			obj = c.guard.ref(c.opts.Namespace, c.opts.GuardName)
		} else {
			obj = v.nodeRef(e.Node)
		}
		c.recorder.Event(obj, typ, e.Reason, taints.Truncate(e.Message, 1024))
	}
}
