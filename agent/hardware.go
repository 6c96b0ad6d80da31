package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/selftaint/selftaint/taints"
)

// HardwareTaintValue is the value of a special-hardware taint.
const HardwareTaintValue = taints.HardwareTaintValue

// DefaultHardwarePeriod is how often the hardware inventory is taken again.
const DefaultHardwarePeriod = time.Minute

// HardwareLabel is the label key that says a node has resource r.
func HardwareLabel(r corev1.ResourceName) string { return taints.HardwareLabel(r) }

// Resource is one kind of special hardware the node has and what selftaint
// does about it (taints.Hardware).
type Resource = taints.Hardware

// Inventory reports the special hardware the node has now. An error keeps
// the last good inventory in force.
type Inventory interface {
	Inventory(ctx context.Context) ([]Resource, error)
}

// InventoryFunc adapts a function to Inventory.
type InventoryFunc func(ctx context.Context) ([]Resource, error)

// Inventory calls f.
func (f InventoryFunc) Inventory(ctx context.Context) ([]Resource, error) { return f(ctx) }

// runInventory takes the inventory now and every period, and enqueues a
// reconcile when it changes.
func (a *Agent) runInventory(ctx context.Context) {
	var lastErr string
	for {
		res, err := a.opts.Hardware.Inventory(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if msg := err.Error(); msg != lastErr {
				a.log.Warn("hardware inventory failed; keeping the last good one", "err", err)
				lastErr = msg
			}
		default:
			lastErr = ""
			res = slices.Clone(res)
			slices.SortFunc(res, func(x, y Resource) int { return strings.Compare(string(x.Name), string(y.Name)) })
			a.mu.Lock()
			changed := !a.haveHardware || !slices.EqualFunc(a.hardware, res, sameResource)
			a.hardware, a.haveHardware = res, true
			a.addOwnableHardwareLocked(res)
			a.mu.Unlock()
			if changed {
				a.log.Info("hardware inventory", "resources", formatResources(res))
				if a.queue != nil {
					a.queue.Add(a.opts.NodeName)
				}
			}
		}
		t := a.clock.NewTimer(a.opts.HardwarePeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

func sameResource(x, y Resource) bool {
	return x.Name == y.Name && x.Count == y.Count && x.Advertise == y.Advertise && x.Taint == y.Taint && x.Label == y.Label
}

func formatResources(rs []Resource) string {
	if len(rs) == 0 {
		return "none"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s=%d", r.Name, r.Count)
	}
	return strings.Join(parts, ", ")
}

// HardwareTaint is the taint for hardware r (taints.HardwareTaint).
func HardwareTaint(r corev1.ResourceName) corev1.Taint { return taints.HardwareTaint(r) }

// reportHeldResources tells, once per change, about resources we would
// advertise that another writer already advertises.
func (a *Agent) reportHeldResources(node *corev1.Node, held []corev1.ResourceName) {
	names := make([]string, len(held))
	for i, r := range held {
		names[i] = string(r)
	}
	s := strings.Join(names, ", ")
	if !a.changedSince(&a.lastHeldResources, s) {
		return
	}
	a.recorder.Eventf(node, corev1.EventTypeWarning, "ResourceHeldByOther",
		"would advertise %s, but another writer (a device plugin through the kubelet?) already does; leaving it alone", s)
	a.log.Warn("extended resource advertised by another writer; not touching it", "resources", s)
}

// resourceMemory is what the agent keeps about extended resources between
// syncs (taints.PlanResources). Its fields are guarded by Agent.mu.
type resourceMemory struct {
	// adopted is the count of each resource an earlier run advertised, as
	// the Node had it at start: asserted until an inventory succeeds.
	adopted map[corev1.ResourceName]int64
	// yielded are the resources left to another writer.
	yielded map[corev1.ResourceName]taints.Yield
}

// adoptResourcesLocked takes over the resources an earlier run advertised
// (those our field manager owns in status.capacity) with their counts.
// a.mu is held.
func (a *Agent) adoptResourcesLocked(node *corev1.Node) {
	a.advertised = taints.OwnedCapacity(node, a.opts.FieldManager)
	a.res.adopted = map[corev1.ResourceName]int64{}
	for r := range a.advertised {
		if q, ok := node.Status.Capacity[r]; ok && q.Value() > 0 {
			a.res.adopted[r] = q.Value()
		}
	}
	if len(a.res.adopted) > 0 {
		a.log.Info("adopted extended resources from node; kept until an inventory succeeds", "resources", formatCounts(a.res.adopted))
	}
}

// keepResourcesLocked keeps the yield state the plan's extended resources
// (taints.PlanResources, in taints.PlanNode) leave. a.mu is held.
func (a *Agent) keepResourcesLocked(rp taints.ResourcePlan) {
	a.res.yielded = rp.Yielded
}

// reportResourceEvents tells each yield, resumption and release once.
func (a *Agent) reportResourceEvents(node *corev1.Node, events []taints.ResourceEvent) {
	for _, e := range events {
		y := e.Yield
		who := y.Managers
		if who == "" {
			who = "another writer (no field manager recorded)"
		}
		switch e.Kind {
		case taints.ResourceYielded:
			a.recorder.Eventf(node, corev1.EventTypeWarning, string(e.Kind),
				"%s: %s set %s to %d where selftaint advertised %d; selftaint no longer writes it, and resumes only when that value is removed or zeroed",
				e.Resource, who, y.Field, y.Theirs, y.Ours)
			a.log.Warn("extended resource taken over by another writer; yielding", "resource", e.Resource,
				"manager", who, "field", y.Field, "theirs", y.Theirs, "ours", y.Ours)
		case taints.ResourceResumed:
			a.recorder.Eventf(node, corev1.EventTypeNormal, string(e.Kind),
				"%s: the value %s set (%d) was %s; advertising %d again", e.Resource, who, y.Theirs, e.Gone, e.Count)
			a.log.Info("resuming an extended resource another writer let go", "resource", e.Resource,
				"manager", who, "gone", e.Gone, "count", e.Count)
		case taints.ResourceReleased:
			a.recorder.Eventf(node, corev1.EventTypeNormal, string(e.Kind),
				"%s: the hardware is gone; leaving the resource to %s", e.Resource, who)
			a.log.Info("forgot a yielded extended resource: the hardware is gone", "resource", e.Resource, "manager", who)
		}
	}
}

// removeResources withdraws what rp says: the entries we alone own of
// resources no longer wanted, with a JSON patch on the status subresource
// that first tests each value, so an amount someone else wrote meanwhile
// is not removed; then it forgets those resources.
//
// Leaving them out of the next server-side apply is not safe: when none of
// our fields remain under status.capacity, the API server prunes the whole
// map if nobody else is recorded as owning it, and a Node's registration
// capacity (cpu, memory, pods) often has no recorded owner.
func (a *Agent) removeResources(ctx context.Context, node *corev1.Node, rp taints.ResourcePlan) (*corev1.Node, error) {
	if len(rp.Withdraw) == 0 && len(rp.Forget) == 0 {
		return node, nil
	}
	var ops []map[string]any
	for _, e := range rp.Withdraw {
		list := node.Status.Capacity
		if e.Field == taints.FieldAllocatable {
			list = node.Status.Allocatable
		}
		q, ok := list[e.Name]
		if !ok {
			continue
		}
		path := "/status/" + e.Field + "/" + jsonPointerEscape(string(e.Name))
		ops = append(ops, map[string]any{"op": "test", "path": path, "value": q.String()}, map[string]any{"op": "remove", "path": path})
	}
	written := node
	if len(ops) > 0 {
		patch, err := json.Marshal(ops)
		if err != nil {
			return nil, fmt.Errorf("building resource removal patch: %w", err)
		}
		written, err = a.opts.Client.Nodes().Patch(ctx, a.opts.NodeName, types.JSONPatchType, patch,
			metav1.PatchOptions{FieldManager: a.opts.FieldManager}, "status")
		if err != nil {
			return nil, fmt.Errorf("withdrawing extended resources %v: %w", rp.Forget, err)
		}
		a.remember(written)
	}
	released := map[corev1.ResourceName]bool{}
	for _, e := range rp.Events {
		released[e.Resource] = e.Kind == taints.ResourceReleased
	}
	a.mu.Lock()
	for _, r := range rp.Forget {
		delete(a.advertised, r)
	}
	a.mu.Unlock()
	for _, r := range rp.Forget {
		if released[r] {
			continue
		}
		a.recorder.Eventf(written, corev1.EventTypeNormal, "ResourceRemoved", "no longer advertising %s: the hardware is gone", r)
		a.log.Info("withdrew extended resource", "resource", r)
	}
	return written, nil
}

// applyNodeStatus applies cfg to the Node's status with our field manager.
// It forces only where rp means to override another writer (a resource
// asserted again over their zero); a conflict on our conditions alone is
// forced through, as they are ours by type. A conflict on an extended
// resource means another writer changed it after the Node was read: the
// error sends the sync round again to decide from the fresh Node (and
// yield), instead of writing over their value.
func (a *Agent) applyNodeStatus(ctx context.Context, cfg *corev1ac.NodeApplyConfiguration, rp taints.ResourcePlan) (*corev1.Node, error) {
	nodes := a.opts.Client.Nodes()
	opts := metav1.ApplyOptions{FieldManager: a.opts.FieldManager, Force: rp.Force}
	written, err := nodes.ApplyStatus(ctx, cfg, opts)
	switch {
	case err == nil || opts.Force || !apierrors.IsConflict(err):
		return written, err
	case resourceConflict(err):
		a.conflicts.Add(1)
		return nil, fmt.Errorf("another writer changed an extended resource since the node was read; deciding again: %w", err)
	}
	opts.Force = true
	return nodes.ApplyStatus(ctx, cfg, opts)
}

// resourceConflict says an apply conflict names an entry of
// status.capacity or allocatable.
func resourceConflict(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Type == metav1.CauseTypeFieldManagerConflict &&
			(strings.HasPrefix(c.Field, ".status."+taints.FieldCapacity+".") || strings.HasPrefix(c.Field, ".status."+taints.FieldAllocatable+".")) {
			return true
		}
	}
	return false
}

// withResources puts the entries rp applies into status.
func withResources(status *corev1ac.NodeStatusApplyConfiguration, rp taints.ResourcePlan) {
	if len(rp.Capacity) > 0 {
		status.WithCapacity(resourceList(rp.Capacity))
	}
	if len(rp.Allocatable) > 0 {
		status.WithAllocatable(resourceList(rp.Allocatable))
	}
}

func resourceList(counts map[corev1.ResourceName]int64) corev1.ResourceList {
	l := make(corev1.ResourceList, len(counts))
	for r, n := range counts {
		l[r] = quantity(n)
	}
	return l
}

func formatCounts(counts map[corev1.ResourceName]int64) string {
	parts := make([]string, 0, len(counts))
	for _, r := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", r, counts[r]))
	}
	return strings.Join(parts, ", ")
}

func quantity(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }

// hardwareWhy explains a hardware taint, for Events; ok is false when t is
// not one.
func hardwareWhy(t corev1.Taint, rs []Resource) (string, bool) {
	for _, r := range rs {
		if r.Taint && string(r.Name) == t.Key && t.Effect == corev1.TaintEffectNoSchedule {
			why := fmt.Sprintf("the node has %d %s", r.Count, r.Name)
			if r.Detail != "" {
				why += " (" + r.Detail + ")"
			}
			return why, true
		}
	}
	return "", false
}

// ruleTaint reports whether a rule produces taint id.
func (a *Agent) ruleTaint(id taints.TaintID) bool { return len(a.ruleFor[id]) > 0 }

// hardwareState is the inventory as one sync sees it.
type hardwareState struct {
	resources []Resource
	// known is false until the first inventory: until then, hardware
	// taints and labels we own are kept, never lifted.
	known bool
}

// reportResources records what a status write advertised and tells about
// changes: a resource first advertised, or restored after another writer
// zeroed or removed it (one resumed after a yield was told already).
func (a *Agent) reportResources(written, old *corev1.Node, rp taints.ResourcePlan) {
	resources := rp.Advertise
	a.mu.Lock()
	before := maps.Clone(a.advertised)
	for r := range resources {
		a.advertised[r] = true
	}
	a.mu.Unlock()
	for _, r := range slices.Sorted(maps.Keys(resources)) {
		n := resources[r]
		q, had := old.Status.Capacity[r]
		switch {
		case rp.Resumed[r]:
			// told as ResourceResumed
		case before[r] && (!had || q.Value() != n):
			a.recorder.Eventf(written, corev1.EventTypeWarning, "ResourceRestored", "%s was %s by another writer; advertised %d again", r, zeroedOrRemoved(had), n)
			a.log.Warn("re-asserted an extended resource another writer changed", "resource", r, "count", n)
		case !before[r]:
			a.recorder.Eventf(written, corev1.EventTypeNormal, "ResourceAdvertised", "advertising %d %s", n, r)
			a.log.Info("advertising extended resource", "resource", r, "count", n)
		case q.Value() != n:
			a.recorder.Eventf(written, corev1.EventTypeNormal, "ResourceAdvertised", "advertising %d %s (was %s)", n, r, q.String())
		}
	}
}

func zeroedOrRemoved(had bool) string {
	if had {
		return "changed"
	}
	return "removed"
}

// reportForeignLabels tells, once per change, about labels we want that
// another writer already set.
func (a *Agent) reportForeignLabels(node *corev1.Node, foreign []string) {
	s := strings.Join(foreign, ", ")
	if !a.changedSince(&a.lastForeignLabels, s) {
		return
	}
	a.recorder.Eventf(node, corev1.EventTypeWarning, "LabelHeldByOther",
		"wanted label(s) %s, but another writer already set them; leaving theirs in place and not claiming them", s)
	a.log.Warn("label held by another writer; not claiming it", "labels", s)
}

// reportLabels tells about the labels a write set and removed.
func (a *Agent) reportLabels(node *corev1.Node, p taints.LabelPlan) {
	for _, k := range slices.Sorted(maps.Keys(p.Set)) {
		a.recorder.Eventf(node, corev1.EventTypeNormal, "LabelSet", "set label %s=%s", k, p.Set[k])
		a.log.Info("set label", "label", k, "value", p.Set[k])
	}
	for _, k := range p.Remove {
		a.recorder.Eventf(node, corev1.EventTypeNormal, "LabelRemoved", "removed label %s: the hardware is gone", k)
		a.log.Info("removed label", "label", k)
	}
}

// changedSince records s as the conflict last reported in *last and says
// whether it is new and worth reporting: each conflict is told once, not on
// every reconcile.
func (a *Agent) changedSince(last *string, s string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := s != *last
	*last = s
	return changed && s != ""
}
