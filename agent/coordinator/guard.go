package coordinator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/taints/fleet"
)

// guardObject is the guard ConfigMap as the coordinator knows it.
type guardObject struct {
	// loaded: it has been read since this leader started.
	loaded bool
	// obj is the ConfigMap as last read or written; nil while none exists.
	obj *corev1.ConfigMap
	// pending: the guard last decided has not been written yet.
	pending bool
}

// loadGuard reads the guard ConfigMap, once per leadership, into the
// memory: a tripped guard stays tripped across a leader change. A missing
// or unreadable one starts the guard empty, and says so; a failed read is
// an error (retried), never an empty guard.
func (c *controller) loadGuard(ctx context.Context) error {
	cm, err := c.opts.Client.CoreV1().ConfigMaps(c.opts.Namespace).Get(ctx, c.opts.GuardName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.log.Info("no guard ConfigMap yet; starting from an empty guard", "configmap", c.opts.Namespace+"/"+c.opts.GuardName)
		c.guard = guardObject{loaded: true}
		return nil
	case err != nil:
		return fmt.Errorf("reading the guard ConfigMap %s/%s: %w", c.opts.Namespace, c.opts.GuardName, err)
	}
	c.guard = guardObject{loaded: true, obj: cm}
	g, err := fleet.DecodeGuard(cm.Data)
	if err != nil {
		c.log.Warn("the guard ConfigMap is unreadable; starting from an empty guard", "configmap", c.opts.Namespace+"/"+c.opts.GuardName, "err", err)
		return nil
	}
	c.memory.Guard = g
	c.log.Info("starting from the guard the last leader wrote", "leader", g.Leader, "renewed", g.RenewTime, "tripped", trippedScopes(g))
	return nil
}

// trippedScopes lists a guard's tripped condition/scope pairs, for logs.
func trippedScopes(g fleet.GuardState) []string {
	var out []string
	for cond, scopes := range g.Conditions {
		for scope, s := range scopes {
			if s.Tripped {
				out = append(out, string(cond)+"/"+scope)
			}
		}
	}
	return out
}

// writeGuard writes g to the guard ConfigMap: a create when none exists,
// else an update carrying the resourceVersion last read or written. A
// stale view re-reads it and says errStale.
func (c *controller) writeGuard(ctx context.Context, g fleet.GuardState) error {
	c.guard.pending = true
	client := c.opts.Client.CoreV1().ConfigMaps(c.opts.Namespace)
	var cm *corev1.ConfigMap
	if c.guard.obj == nil {
		cm = &corev1.ConfigMap{ObjectMeta: objectMeta(c.opts.GuardName, c.opts.Namespace)}
	} else {
		cm = c.guard.obj.DeepCopy()
		cm.Labels = withOwnLabels(cm.Labels)
	}
	// Which Nodes it judged (and counts in the budget), for readers such
	// as `selftaint explain`.
	cm.Annotations = mergeMaps(cm.Annotations, map[string]string{fleet.FleetAnnotation: string(c.opts.Config.Members.OrDefault())})
	cm.Data = fleet.EncodeGuard(g)
	var written *corev1.ConfigMap
	var err error
	if c.guard.obj == nil {
		written, err = client.Create(ctx, cm, metav1.CreateOptions{})
	} else {
		written, err = client.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return c.guardWriteFailed(ctx, err)
	}
	c.guard.obj, c.guard.pending = written, false
	return nil
}

// guardWriteFailed handles a refused guard write: a stale view re-reads
// the ConfigMap (its content is not adopted: this leader's guard stands)
// and says errStale.
func (c *controller) guardWriteFailed(ctx context.Context, err error) error {
	what := fmt.Sprintf("writing the guard ConfigMap %s/%s", c.opts.Namespace, c.opts.GuardName)
	if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	fresh, getErr := c.opts.Client.CoreV1().ConfigMaps(c.opts.Namespace).Get(ctx, c.opts.GuardName, metav1.GetOptions{})
	switch {
	case getErr == nil:
		c.guard.obj = fresh
	case apierrors.IsNotFound(getErr):
		c.guard.obj = nil
	default:
		return fmt.Errorf("%s: %w: %w (re-reading it: %w)", what, errStale, err, getErr)
	}
	return fmt.Errorf("%s: %w: %w", what, errStale, err)
}

// ref is the object guard Events are filed against.
func (g guardObject) ref(namespace, name string) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: namespace, Name: name}
	if g.obj != nil {
		ref.UID = g.obj.UID
	}
	return ref
}
