package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// FieldManager is the server-side apply field manager of the coordinator's
// writes to Node status: it owns the SelftaintMaintenance condition and
// nothing else there.
const FieldManager = "selftaint-coordinator"

// Reasons of the Events the maintenance executor tells, beside the
// decision's own.
const (
	EventCordoned              = "Cordoned"
	EventUncordoned            = "Uncordoned"
	EventDrained               = "Drained"
	EventDrainRefused          = "DrainRefused"
	EventInvalidMaintenanceReq = "InvalidMaintenanceRequest"
)

// executeMaintenance writes the maintenance decision md: slots given back
// first (they free the pool for the starts), Leases no longer needed
// deleted, new slots started and cordoned, the drains running as ordered,
// their progress, and every node's condition. It goes on past a failed
// step for one node (each node's writes are independent); a stale view
// ends it (the decision was made from it). unconfirmed, if not nil, says
// why the starts may not be written: they are left out (and their drains
// with them), the rest written.
func (c *controller) executeMaintenance(ctx context.Context, v *view, md fleet.MaintenanceDecision, now time.Time, unconfirmed error) error {
	var errs []error
	step := func(err error) bool {
		if err != nil {
			errs = append(errs, err)
			return !errors.Is(err, errStale)
		}
		return true
	}
	deleting := map[string]bool{}
	for _, n := range md.Delete {
		deleting[n] = true
	}
	ended := true
	for _, node := range slices.Sorted(maps.Keys(md.End)) {
		if !step(c.endSlot(ctx, v, node, md.End[node], deleting[node], now)) {
			return errors.Join(errs...)
		}
	}
	for _, node := range md.Delete {
		if _, done := md.End[node]; done {
			continue
		}
		if !step(c.deleteSlot(ctx, v, node)) {
			return errors.Join(errs...)
		}
	}
	if len(errs) > 0 {
		// A start may rely on the slot an end frees.
		ended = false
	}
	notStarted, ok := c.writeStarts(ctx, v, md.Start, now, ended, unconfirmed, step)
	if !ok {
		return errors.Join(errs...)
	}
	c.steerDrains(v, md)
	for _, node := range slices.Sorted(maps.Keys(md.Drain)) {
		if notStarted[node] {
			continue
		}
		if !step(c.followDrain(ctx, v, node, md.Drain[node], now)) {
			return errors.Join(errs...)
		}
	}
	for _, node := range md.Frozen {
		step(c.holdFrozen(ctx, v, node, now))
	}
	for i, w := range md.Waiting {
		msg := fmt.Sprintf("%s in line of %d for a maintenance slot: %s", fleet.Ordinal(i+1), len(md.Waiting), w.Why)
		step(c.setCondition(ctx, v, w.Node, corev1.ConditionTrue, fleet.ReasonMaintenanceWaiting, msg+c.requestSuffix(v, w.Node), now))
	}
	for _, node := range withdrawnUnstarted(v, md) {
		step(c.setCondition(ctx, v, node, corev1.ConditionFalse, fleet.ReasonReleased, withdrawnMessage(v.nodes[node]), now))
	}
	c.reportMaintenance(v, md)
	return errors.Join(errs...)
}

// writeStarts writes the slots of starts when they may be written: the
// slots given back before them were (ended), and the pool was confirmed
// (unconfirmed is nil). It returns the starts not written, whose nodes
// hold no slot, so nothing of them may be drained or cordoned, and false
// when a stale view ended it. Errors go to step.
func (c *controller) writeStarts(ctx context.Context, v *view, starts []string, now time.Time, ended bool, unconfirmed error, step func(error) bool) (notStarted map[string]bool, ok bool) {
	notStarted = map[string]bool{}
	var held error
	switch {
	case len(starts) == 0:
		return notStarted, true
	case unconfirmed != nil:
		held = unconfirmed
	case !ended:
		held = fmt.Errorf("not starting the drains of %v until the slots given back before them are written", starts)
	default:
		for _, node := range starts {
			if !step(c.startSlot(ctx, v, node, now)) {
				return notStarted, false
			}
		}
		return notStarted, true
	}
	step(held)
	for _, node := range starts {
		notStarted[node] = true
	}
	return notStarted, true
}

// withdrawnUnstarted are the nodes whose condition still says they are in
// maintenance (True: waiting for a slot) though no request stands and they
// hold no slot: a request withdrawn before its drain started (a sick node
// healed while it waited, `selftaint drain --done` on a waiting node). A
// held slot is ended by the decision (md.End), which says so itself.
func withdrawnUnstarted(v *view, md fleet.MaintenanceDecision) []string {
	var out []string
	for name, n := range v.nodes {
		_, ending := md.End[name]
		cond := taints.FindCondition(n, fleet.MaintenanceCondition)
		if v.maintenance[name] == nil && !ending && holder(v.slots[name]) != name && cond != nil && cond.Status == corev1.ConditionTrue {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// withdrawnMessage says why n, which waited, is no longer in maintenance.
func withdrawnMessage(n *corev1.Node) string {
	for _, a := range []string{fleet.OperatorRequestAnnotation, fleet.AgentRequestAnnotation} {
		if _, ok := n.Annotations[a]; ok {
			return "its maintenance request cannot be read (" + a + "; see its InvalidMaintenanceRequest Event): nothing of it is acted on; the drain did not start"
		}
	}
	return "the request was withdrawn before the drain started"
}

// holdFrozen says that node, whose request cannot be read any more, is
// held as it is: its condition keeps its reason (the drain's phase) and
// says why nothing moves.
func (c *controller) holdFrozen(ctx context.Context, v *view, node string, now time.Time) error {
	reason := fleet.ReasonDraining
	if l := v.slots[node]; l != nil && l.Annotations[fleet.SlotPhaseAnnotation] == fleet.PhaseDrained {
		reason = fleet.ReasonDrained
	}
	return c.setCondition(ctx, v, node, corev1.ConditionTrue, reason,
		"its maintenance request cannot be read any more (see its InvalidMaintenanceRequest Event): held as it is (cordoned, no pod evicted, nothing uncordoned, no deadline) until the request is fixed or removed", now)
}

// requestSuffix names the request a node's condition is about.
func (c *controller) requestSuffix(v *view, node string) string {
	if m := v.maintenance[node]; m != nil {
		return fmt.Sprintf(" (request %s: %q by %s)", m.ID(), m.Request.Reason, m.Request.RequestedBy)
	}
	return ""
}

// reportMaintenance tells the metrics how many nodes are in each state.
func (c *controller) reportMaintenance(v *view, md fleet.MaintenanceDecision) {
	drained, blocked := 0, 0
	for node, l := range v.slots {
		if _, ending := md.End[node]; !ending && holder(l) == node && l.Annotations[fleet.SlotPhaseAnnotation] == fleet.PhaseDrained {
			drained++
		}
	}
	for node, n := range v.nodes {
		cond := taints.FindCondition(n, fleet.MaintenanceCondition)
		if v.maintenance[node] != nil && cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == fleet.ReasonDrainBlocked {
			blocked++
		}
	}
	c.opts.Metrics.MaintenanceState(len(md.Waiting), len(md.Drain), drained, blocked)
}

// startSlot takes node's slot from now (a new Lease, or its ended one
// taken again) and cordons it.
func (c *controller) startSlot(ctx context.Context, v *view, node string, now time.Time) error {
	m := v.maintenance[node]
	if m == nil {
		return fmt.Errorf("starting the maintenance of node %s: %w: it has no request", node, errStale)
	}
	t := metav1.NewMicroTime(now)
	fresh := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: fleet.SlotName(node), Namespace: c.opts.Namespace,
			Labels: withOwnLabels(map[string]string{fleet.SlotLabel: "true"}),
			Annotations: map[string]string{
				fleet.SlotRequestAnnotation:  m.ID(),
				fleet.SlotPhaseAnnotation:    fleet.PhaseDraining,
				fleet.SlotProgressAnnotation: fleet.FormatProgress(fleet.Progress{}),
				fleet.GrantZoneAnnotation:    v.zones[node],
			},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), AcquireTime: &t, RenewTime: &t},
	}
	if n := v.nodes[node]; n != nil && n.Spec.Unschedulable && n.Annotations[fleet.CordonAnnotation] == "" {
		// Someone else's cordon: kept, never lifted by us, and lifted by
		// them it ends the drain (the slot records it, as a new leader
		// could not tell it from a cordon not yet written).
		fresh.Annotations[fleet.SlotCordonAnnotation] = fleet.SlotCordonTheirs
	}
	old := v.slots[node]
	var written *coordinationv1.Lease
	var err error
	if old == nil {
		written, err = c.slotClient().Create(ctx, fresh, metav1.CreateOptions{})
	} else {
		l := old.DeepCopy()
		l.Labels = mergeMaps(l.Labels, fresh.Labels)
		l.Annotations = mergeMaps(l.Annotations, fresh.Annotations)
		if _, theirs := fresh.Annotations[fleet.SlotCordonAnnotation]; !theirs {
			delete(l.Annotations, fleet.SlotCordonAnnotation)
		}
		l.Spec = fresh.Spec
		written, err = c.slotClient().Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return c.slotWriteFailed(ctx, v, node, "starting the maintenance of node "+node, err)
	}
	c.slotWritten.wrote(written)
	v.slots[node] = written
	c.log.Info("maintenance slot taken", "node", node, "request", m.ID(), "deadline", m.Request.DeadlineIn(c.opts.Config.Maintenance.DefaultDeadline))
	if err := c.cordon(ctx, v, node); err != nil {
		return err
	}
	msg := "cordoned; evicting its pods"
	if n := v.nodes[node]; n != nil && n.Spec.Unschedulable && n.Annotations[fleet.CordonAnnotation] == "" {
		msg = "already cordoned by someone else (it stays cordoned after maintenance); evicting its pods"
	}
	return c.setCondition(ctx, v, node, corev1.ConditionTrue, fleet.ReasonDraining, msg+c.requestSuffix(v, node), now)
}

// cordon marks node unschedulable, with the record that selftaint did it
// (for the request it serves), in one write carrying the resourceVersion
// it read; a node already cordoned, by anyone, is left as it is.
func (c *controller) cordon(ctx context.Context, v *view, node string) error {
	n := v.nodes[node]
	m := v.maintenance[node]
	if n == nil || m == nil || n.Spec.Unschedulable {
		return nil
	}
	patch := map[string]any{
		"metadata": map[string]any{
			"resourceVersion": n.ResourceVersion,
			"annotations":     map[string]any{fleet.CordonAnnotation: m.ID()},
		},
		"spec": map[string]any{"unschedulable": true},
	}
	written, err := c.patchNode(ctx, node, patch)
	if err != nil {
		return fmt.Errorf("cordoning node %s: %w", node, err)
	}
	v.nodes[node] = written
	c.recorder.Eventf(v.nodeRef(node), corev1.EventTypeNormal, EventCordoned, "cordoned node %q for maintenance (request %s): SchedulingDisabled until the request is withdrawn", node, m.ID())
	return nil
}

// uncordon makes node schedulable again if selftaint cordoned it (its
// record is there), removing the record in the same write; a node someone
// else cordoned stays cordoned. A record left on a node someone else
// already uncordoned is removed.
func (c *controller) uncordon(ctx context.Context, v *view, node string) error {
	n := v.nodes[node]
	if n == nil {
		return nil
	}
	if _, ours := n.Annotations[fleet.CordonAnnotation]; !ours {
		return nil
	}
	patch := map[string]any{
		"metadata": map[string]any{
			"resourceVersion": n.ResourceVersion,
			"annotations":     map[string]any{fleet.CordonAnnotation: nil},
		},
	}
	if n.Spec.Unschedulable {
		patch["spec"] = map[string]any{"unschedulable": nil}
	}
	written, err := c.patchNode(ctx, node, patch)
	if err != nil {
		return fmt.Errorf("uncordoning node %s: %w", node, err)
	}
	v.nodes[node] = written
	if n.Spec.Unschedulable {
		c.recorder.Eventf(v.nodeRef(node), corev1.EventTypeNormal, EventUncordoned, "uncordoned node %q: its maintenance has ended", node)
	}
	return nil
}

// patchNode merge-patches node; a conflict (the resourceVersion in the
// patch is stale) or a missing node is a stale view.
func (c *controller) patchNode(ctx context.Context, node string, patch map[string]any) (*corev1.Node, error) {
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	written, err := c.opts.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %w", errStale, err)
	}
	return written, err
}

// endSlot gives node's slot back with outcome: what selftaint cordoned is
// uncordoned, its drain stopped, the slot released (or deleted, when its
// request is gone) and the condition set False.
func (c *controller) endSlot(ctx context.Context, v *view, node string, outcome fleet.Outcome, del bool, now time.Time) error {
	if outcome.Reason == fleet.ReasonDrainBlocked {
		// Given back at the deadline: say what blocked it (the pods, the
		// budgets and what they allow), which the decision cannot know.
		if s := c.lastSummary(v, node); s != "" {
			outcome.Message += "; what blocked it: " + s
		}
	}
	c.stopDrain(node)
	if err := c.uncordon(ctx, v, node); err != nil {
		return err
	}
	old := v.slots[node]
	if old != nil && old.Annotations[fleet.SlotPhaseAnnotation] == fleet.PhaseDraining {
		c.opts.Metrics.DrainFinished(outcome.Reason, now.Sub(acquired(old)))
	}
	var err error
	if del {
		err = c.deleteSlot(ctx, v, node)
	} else {
		err = c.updateSlot(ctx, v, node, "giving back the maintenance slot of node "+node, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = nil
			l.Annotations = mergeMaps(l.Annotations, map[string]string{fleet.SlotPhaseAnnotation: fleet.PhaseEnded})
		})
	}
	if err != nil {
		return err
	}
	c.log.Info("maintenance slot given back", "node", node, "outcome", outcome.Reason, "why", outcome.Message)
	if _, exists := v.nodes[node]; !exists {
		return nil
	}
	return c.setCondition(ctx, v, node, corev1.ConditionFalse, outcome.Reason, outcome.Message, now)
}

// lastSummary is what node's drain last found (evicted N of M, what
// remains, what refuses and why): its running drain's last pass, or, where
// this leader has run none yet (it took over at the deadline), the summary
// in the node's condition; "" when neither says.
func (c *controller) lastSummary(v *view, node string) string {
	c.drains.mu.Lock()
	run := c.drains.runs[node]
	summary := ""
	if run != nil && run.reported && run.report.err == nil {
		summary = run.report.summary
	}
	c.drains.mu.Unlock()
	if summary != "" {
		return summary
	}
	n := v.nodes[node]
	if n == nil {
		return ""
	}
	cond := taints.FindCondition(n, fleet.MaintenanceCondition)
	if cond == nil || cond.Status != corev1.ConditionTrue || (cond.Reason != fleet.ReasonDraining && cond.Reason != fleet.ReasonDrainBlocked) {
		return ""
	}
	summary, _, _ = strings.Cut(cond.Message, "; deadline ")
	if !strings.HasPrefix(summary, "evicted ") {
		return ""
	}
	return summary
}

// deleteSlot deletes node's slot Lease, provided it is still the version
// the decision saw.
func (c *controller) deleteSlot(ctx context.Context, v *view, node string) error {
	c.stopDrain(node)
	old := v.slots[node]
	if old == nil {
		return nil
	}
	err := c.slotClient().Delete(ctx, old.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &old.UID, ResourceVersion: &old.ResourceVersion},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.slotWriteFailed(ctx, v, node, "deleting the maintenance slot of node "+node, err)
	}
	c.slotWritten.deleted(old.Name, old.UID)
	delete(v.slots, node)
	return nil
}

// updateSlot writes node's slot Lease changed by mutate, carrying the
// resourceVersion it was read at.
func (c *controller) updateSlot(ctx context.Context, v *view, node, what string, mutate func(*coordinationv1.Lease)) error {
	old := v.slots[node]
	if old == nil {
		return fmt.Errorf("%s: %w: no slot Lease known", what, errStale)
	}
	l := old.DeepCopy()
	mutate(l)
	written, err := c.slotClient().Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return c.slotWriteFailed(ctx, v, node, what, err)
	}
	c.slotWritten.wrote(written)
	v.slots[node] = written
	return nil
}

// slotWriteFailed handles a refused write of node's slot Lease like
// leaseWriteFailed does a grant's.
func (c *controller) slotWriteFailed(ctx context.Context, v *view, node, what string, err error) error {
	name := fleet.SlotName(node)
	if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	fresh, getErr := c.slotClient().Get(ctx, name, metav1.GetOptions{})
	switch {
	case getErr == nil:
		c.slotWritten.wrote(fresh)
	case apierrors.IsNotFound(getErr):
		if old := v.slots[node]; old != nil {
			c.slotWritten.deleted(name, old.UID)
		}
	default:
		return fmt.Errorf("%s: %w: %w (re-reading it: %w)", what, errStale, err, getErr)
	}
	return fmt.Errorf("%s: %w: %w", what, errStale, err)
}

func (c *controller) slotClient() typedcoordinationv1.LeaseInterface {
	return c.opts.Client.CoordinationV1().Leases(c.opts.Namespace)
}

// followDrain keeps node's drain going as ordered: cordoned, its drain
// running, and what its last pass found written to the slot and the
// condition.
func (c *controller) followDrain(ctx context.Context, v *view, node string, order fleet.DrainOrder, now time.Time) error {
	n, m, l := v.nodes[node], v.maintenance[node], v.slots[node]
	if n == nil || m == nil || l == nil {
		return nil
	}
	if !n.Spec.Unschedulable {
		if l.Annotations[fleet.SlotCordonAnnotation] == fleet.SlotCordonTheirs {
			// Someone else's cordon, lifted: the decision ends the drain.
			return nil
		}
		// Taken, but not cordoned yet (a leader stopped between the two
		// writes): cordon before evicting anything.
		if err := c.cordon(ctx, v, node); err != nil {
			return err
		}
		n = v.nodes[node]
		if !n.Spec.Unschedulable {
			return nil
		}
	}
	run := c.ensureDrain(node, m, l, order)
	rep, ok := c.drains.latest(node, run)
	if !ok {
		return nil
	}
	if rep.err != nil {
		return c.setCondition(ctx, v, node, corev1.ConditionTrue, fleet.ReasonDraining,
			fmt.Sprintf("%s; the last pass failed: %v", rep.summary, rep.err), now)
	}
	if err := c.writeProgress(ctx, v, node, rep); err != nil {
		return err
	}
	switch {
	case rep.drained:
		if err := c.updateSlot(ctx, v, node, "marking node "+node+" drained", func(l *coordinationv1.Lease) {
			l.Annotations = mergeMaps(l.Annotations, map[string]string{fleet.SlotPhaseAnnotation: fleet.PhaseDrained})
		}); err != nil {
			return err
		}
		c.opts.Metrics.DrainFinished(fleet.ReasonDrained, now.Sub(acquired(l)))
		c.recorder.Eventf(v.nodeRef(node), corev1.EventTypeNormal, EventDrained, "node %q is drained: %s", node, rep.summary)
		return c.setCondition(ctx, v, node, corev1.ConditionTrue, fleet.ReasonDrained, rep.summary+c.requestSuffix(v, node), now)
	case order.Force && rep.onlyLeft:
		// Forced, and only pods the request leaves remain: it cannot
		// finish; the next decision gives the slot back.
		return c.updateSlot(ctx, v, node, "marking the drain of node "+node+" blocked", func(l *coordinationv1.Lease) {
			l.Annotations = mergeMaps(l.Annotations, map[string]string{fleet.SlotPhaseAnnotation: fleet.PhaseBlocked})
		})
	}
	reason := fleet.ReasonDraining
	if rep.blocked {
		reason = fleet.ReasonDrainBlocked
		if c.drains.firstBlock(node, run) {
			c.recorder.Eventf(v.nodeRef(node), corev1.EventTypeWarning, EventDrainRefused, "the drain of node %q is blocked: %s", node, rep.summary)
		}
	}
	until := fmt.Sprintf("; deadline %s (then %s)", order.Deadline.UTC().Format(time.RFC3339), onDeadline(m.Request))
	if order.Force {
		until = "; deadline passed: deleting what the Eviction API refuses, each pod with its grace period"
	}
	return c.setCondition(ctx, v, node, corev1.ConditionTrue, reason, rep.summary+until, now)
}

func onDeadline(r fleet.MaintenanceRequest) string {
	if r.Force() {
		return "force: pods the Eviction API refuses are deleted with their grace period"
	}
	return "release: the node is given back, uncordoned, DrainBlocked"
}

// writeProgress keeps the drain's count on its slot, so that a new leader
// resumes it.
func (c *controller) writeProgress(ctx context.Context, v *view, node string, rep drainReport) error {
	l := v.slots[node]
	want := fleet.FormatProgress(rep.progress)
	if l == nil || l.Annotations[fleet.SlotProgressAnnotation] == want {
		return nil
	}
	return c.updateSlot(ctx, v, node, "recording the drain progress of node "+node, func(l *coordinationv1.Lease) {
		l.Annotations = mergeMaps(l.Annotations, map[string]string{fleet.SlotProgressAnnotation: want})
	})
}

// acquired is when a slot was taken.
func acquired(l *coordinationv1.Lease) time.Time {
	if l.Spec.AcquireTime == nil {
		return time.Time{}
	}
	return l.Spec.AcquireTime.Time
}

// holder is a Lease's holder ("" if none).
func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// maxConditionMessage bounds the condition's message.
const maxConditionMessage = 1024

// setCondition sets node's SelftaintMaintenance condition by server-side
// apply, as the coordinator's own field manager, when it differs from
// what the node has (or what was last written, while the informer
// catches up). lastTransitionTime moves only when the status does.
func (c *controller) setCondition(ctx context.Context, v *view, node string, status corev1.ConditionStatus, reason, message string, now time.Time) error {
	n := v.nodes[node]
	if n == nil {
		return nil
	}
	message = taints.Truncate(message, maxConditionMessage)
	want := conditionKey{status, reason, message}
	cur := taints.FindCondition(n, fleet.MaintenanceCondition)
	if cur != nil && (conditionKey{cur.Status, cur.Reason, cur.Message}) == want {
		delete(c.conditions, node)
		return nil
	}
	if last, ok := c.conditions[node]; ok && resourceVersion(n.ResourceVersion) >= last.version {
		// The informer has caught up with the write: the node says.
		delete(c.conditions, node)
	}
	if last, ok := c.conditions[node]; ok && last.key == want {
		return nil
	}
	transition := now
	if cur != nil && cur.Status == status {
		transition = cur.LastTransitionTime.Time
	}
	if last, ok := c.conditions[node]; ok && last.key.status == status {
		transition = last.transition
	}
	ac := corev1ac.Node(node).WithStatus(corev1ac.NodeStatus().WithConditions(
		corev1ac.NodeCondition().
			WithType(fleet.MaintenanceCondition).
			WithStatus(status).
			WithReason(reason).
			WithMessage(message).
			WithLastHeartbeatTime(metav1.NewTime(now)).
			WithLastTransitionTime(metav1.NewTime(transition)),
	))
	written, err := c.opts.Client.CoreV1().Nodes().ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("setting the %s condition of node %s: %w", fleet.MaintenanceCondition, node, err)
	}
	c.conditions[node] = writtenCondition{key: want, transition: transition, version: resourceVersion(written.ResourceVersion)}
	return nil
}

// conditionKey is what makes two conditions the same to a reader.
type conditionKey struct {
	status          corev1.ConditionStatus
	reason, message string
}

// writtenCondition is a condition the coordinator wrote, until the
// informer shows it.
type writtenCondition struct {
	key        conditionKey
	transition time.Time
	// version is the Node's resourceVersion the write returned: once the
	// informer's copy is as new, it is trusted again (someone else may
	// have changed the condition since).
	version uint64
}

// tellBadMaintenance tells, once per value, that a node's maintenance
// request cannot be read, naming the annotation and the field.
func (c *controller) tellBadMaintenance(n *corev1.Node, errs []error) {
	if len(errs) == 0 {
		delete(c.badMaintenance, n.Name)
		return
	}
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	msg := strings.Join(msgs, "; ")
	if c.badMaintenance[n.Name] == msg {
		return
	}
	c.badMaintenance[n.Name] = msg
	c.log.Warn("ignoring an unreadable maintenance request", "node", n.Name, "err", msg)
	c.recorder.Eventf(n, corev1.EventTypeWarning, EventInvalidMaintenanceReq,
		"ignoring the maintenance request (nothing of it is acted on while it is unreadable): %s", taints.Truncate(msg, 900))
}
