package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// maintView is what the live view has shown of the drain part, and when
// its moments happened.
type maintView struct {
	t0    time.Time // the part's first fault was written
	nodes map[string]*maintSeen
	pods  map[types.UID]*partPod
	// avail follows the PDB-guarded workload's pods; unavailable is how
	// many of them the live view last told unavailable.
	avail       *availability
	unavailable int
	// mostSlots is the most slots seen held by draining nodes at once.
	mostSlots int
	// followOut is the followed command's output; followCode its exit
	// code, once followDone.
	followOut  []string
	followCode int
	followDone bool
	// stop ends the watch behind avail.
	stop context.CancelFunc
}

// maintSeen is what the live view last showed of one node of the drain
// part, and when its moments happened (zero: not yet).
type maintSeen struct {
	fault                      *fault // its GPU fault; nil for the node the operator drains
	gpu, taints, request, cond string
	// cordon is "ours", "theirs" or "" (schedulable), as last shown.
	cordon string
	// by is who asked, as last shown.
	by string

	injected, asked, waiting, draining, drained, blocked, ended, cordoned, uncordoned time.Time
	// The condition's messages at those moments, and how it ended.
	waitMsg, blockMsg, endReason, endMsg string
	// refusal is the last Draining or DrainBlocked message that named a
	// PodDisruptionBudget.
	refusal string
}

// partPod is one pod of the drain part's workloads as the live view saw
// it.
type partPod struct {
	name, owner, node string
	original          bool      // running when the part began
	seen, evicted     time.Time // first seen on its node; evicted
}

// startMaint starts the drain part's view: its nodes, the pods running
// now, and the watch on the PDB-guarded workload's pods (mv.stop ends it).
func (v *view) startMaint(ctx context.Context, d *demo, pods []corev1.Pod, now time.Time) error {
	m := d.cast.maint
	mv := &maintView{nodes: map[string]*maintSeen{}, pods: map[types.UID]*partPod{}}
	mv.nodes[m.sick.node] = &maintSeen{fault: &m.sick}
	mv.nodes[m.second.node] = &maintSeen{fault: &m.second}
	mv.nodes[m.blocked] = &maintSeen{}
	for i := range pods {
		p := &pods[i]
		mv.pods[p.UID] = &partPod{name: p.Name, owner: ownerText(p), node: p.Spec.NodeName, original: true, seen: now}
	}
	g := m.guarded()
	ctx, mv.stop = context.WithCancel(ctx)
	a, err := watchAvailability(ctx, d.client, g.name, int(g.replicas))
	if err != nil {
		mv.stop()
		return err
	}
	mv.avail = a
	v.maint = mv
	return nil
}

// rel is t relative to the part's first fault, as "+1.5s".
func (mv *maintView) rel(t time.Time) string {
	return fmt.Sprintf("+%.1fs", t.Sub(mv.t0).Seconds())
}

// followedLine shows one line of the followed command's output and keeps
// it.
func (v *view) followedLine(log *printer, l string) {
	log.say("| %s", l)
	if v.maint != nil {
		v.maint.followOut = append(v.maint.followOut, l)
	}
}

// followed records how the followed command exited.
func (v *view) followed(code int) {
	if v.maint != nil {
		v.maint.followCode, v.maint.followDone = code, true
	}
}

// observeMaint shows what changed on the drain part's nodes and pods, and
// counts the slots held.
func (d *demo) observeMaint(ctx context.Context, v *view, nodes []corev1.Node, now time.Time) error {
	mv := v.maint
	for i := range nodes {
		if st := mv.nodes[nodes[i].Name]; st != nil {
			d.showMaintNode(mv, nodes[i].Name, st, &nodes[i], now)
		}
	}
	slots, err := d.client.CoordinationV1().Leases(coordinatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: fleet.SlotLabel + "=true"})
	if err != nil {
		return err
	}
	mv.mostSlots = max(mv.mostSlots, drainingSlots(slots.Items))
	if err := d.showPartPods(ctx, mv, now); err != nil {
		return err
	}
	if u, _ := mv.avail.now(); u != mv.unavailable {
		g := d.cast.maint.guarded()
		d.log.say("%s %s  %d of %d pods unavailable (PodDisruptionBudget %s allows %d)", g.kind, g.name, u, g.replicas, g.name, g.maxUnavailable)
		mv.unavailable = u
	}
	return nil
}

// drainingSlots is how many slot Leases are held by a node whose drain
// runs (or is blocked and not yet given back).
func drainingSlots(leases []coordinationv1.Lease) int {
	n := 0
	for _, l := range leases {
		phase := l.Annotations[fleet.SlotPhaseAnnotation]
		if ptrValue(l.Spec.HolderIdentity) != "" && (phase == fleet.PhaseDraining || phase == fleet.PhaseBlocked) {
			n++
		}
	}
	return n
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// showMaintNode shows what changed on one node of the drain part: its
// GPU condition and taints, its maintenance request, its cordon and its
// SelftaintMaintenance condition; and tells the part's moments.
func (d *demo) showMaintNode(mv *maintView, name string, st *maintSeen, n *corev1.Node, now time.Time) {
	if c := taints.FindCondition(n, gpuCondition); c != nil {
		// A healthy GPU is not news until it was seen failing.
		if s := fmt.Sprintf("%s=%s (%s)", gpuCondition, c.Status, c.Reason); s != st.gpu && (st.gpu != "" || c.Status != corev1.ConditionFalse) {
			d.log.say("%s  condition %s: %s", name, s, c.Message)
			st.gpu = s
		}
	}
	if s, _, _ := nodeTaints(n); s != st.taints {
		d.log.say("%s  taints: %s", name, orNone(s))
		st.taints = s
	}
	if req, line := requestOf(n); req != st.request {
		d.log.say("%s  %s", name, line)
		st.request = req
		if req != "" && st.asked.IsZero() {
			st.asked = now
			st.by = requesterOf(n)
		}
	}
	if c := cordonOf(n); c != st.cordon {
		d.log.say("%s  %s", name, cordonLine(n, c, st.cordon))
		switch {
		case c == "ours":
			st.cordoned = now
		case st.cordon == "ours":
			st.uncordoned = now
		}
		st.cordon = c
	}
	c := maintenanceCondition(n)
	if c == nil {
		return
	}
	if s := fmt.Sprintf("%s %s %s", c.Status, c.Reason, c.Message); s != st.cond {
		d.log.say("%s  %s=%s (%s): %s", name, fleet.MaintenanceCondition, c.Status, c.Reason, c.Message)
		st.cond = s
		markMaint(st, c, now)
	}
}

// markMaint records the moment a node's maintenance condition c, new at
// now, tells.
func markMaint(st *maintSeen, c *corev1.NodeCondition, now time.Time) {
	first := func(t *time.Time) {
		if t.IsZero() {
			*t = now
		}
	}
	if strings.Contains(c.Message, "PodDisruptionBudget") {
		st.refusal = c.Message
	}
	if c.Status != corev1.ConditionTrue {
		if !st.asked.IsZero() && st.ended.IsZero() {
			st.ended, st.endReason, st.endMsg = now, c.Reason, c.Message
		}
		return
	}
	switch c.Reason {
	case fleet.ReasonMaintenanceWaiting:
		if st.waiting.IsZero() {
			st.waiting, st.waitMsg = now, c.Message
		}
	case fleet.ReasonDraining:
		first(&st.draining)
	case fleet.ReasonDrainBlocked:
		first(&st.draining)
		if st.blocked.IsZero() {
			st.blocked, st.blockMsg = now, c.Message
		}
	case fleet.ReasonDrained:
		first(&st.draining)
		first(&st.drained)
	}
}

// maintenanceCondition is n's SelftaintMaintenance condition, nil if none.
func maintenanceCondition(n *corev1.Node) *corev1.NodeCondition {
	return taints.FindCondition(n, fleet.MaintenanceCondition)
}

// requestOf is n's maintenance request as the view compares it (the
// annotation and its value; "" for none), and the line that tells it.
func requestOf(n *corev1.Node) (string, string) {
	m, errs := fleet.MaintenanceOf(n)
	if m == nil {
		if len(errs) > 0 {
			return fmt.Sprint(errs), fmt.Sprintf("carries a maintenance request the coordinator cannot read: %v", errs)
		}
		return "", "no maintenance request any more: its request was withdrawn"
	}
	r := m.Request
	deadline := r.Deadline
	if deadline == "" {
		deadline = "the default"
	}
	key := m.Annotation + "=" + n.Annotations[m.Annotation]
	if m.Annotation == fleet.AgentRequestAnnotation {
		return key, fmt.Sprintf("asks for a drain: its agent wrote %s (for %s; reason %q; deadline %s)",
			m.Annotation, joinConditions(r.Conditions), r.Reason, deadline)
	}
	return key, fmt.Sprintf("maintenance requested by %s: %s (reason %q; deadline %s, then %s)",
		r.RequestedBy, m.Annotation, r.Reason, deadline, orDefault(r.OnDeadline, fleet.OnDeadlineRelease))
}

// requesterOf says who asked for n's maintenance.
func requesterOf(n *corev1.Node) string {
	m, _ := fleet.MaintenanceOf(n)
	switch {
	case m == nil:
		return ""
	case m.Annotation == fleet.AgentRequestAnnotation:
		return "its agent (" + joinConditions(m.Request.Conditions) + ")"
	}
	return "an operator (" + m.Request.Reason + ")"
}

func joinConditions(cs []corev1.NodeConditionType) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return strings.Join(out, ", ")
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// cordonOf says who cordoned n: "ours" (selftaint, recorded on the Node),
// "theirs" (someone else), or "" (it is schedulable).
func cordonOf(n *corev1.Node) string {
	switch _, ours := n.Annotations[fleet.CordonAnnotation]; {
	case !n.Spec.Unschedulable:
		return ""
	case ours:
		return "ours"
	}
	return "theirs"
}

// cordonLine tells n's cordon becoming c (from was).
func cordonLine(n *corev1.Node, c, was string) string {
	switch {
	case c == "ours":
		return fmt.Sprintf("cordoned by selftaint: Ready,SchedulingDisabled in kubectl get nodes (recorded as ours: %s=%s)", fleet.CordonAnnotation, n.Annotations[fleet.CordonAnnotation])
	case c == "theirs":
		return "cordoned by someone else (SchedulingDisabled, not recorded as ours: selftaint never uncordons it)"
	case was == "ours":
		return "uncordoned by selftaint: schedulable again"
	}
	return "schedulable again (uncordoned by someone else)"
}

// showPartPods shows the drain part's pods being evicted, and new ones
// (their controllers' replacements) once kube-scheduler has put them on a
// node.
func (d *demo) showPartPods(ctx context.Context, mv *maintView, now time.Time) error {
	pods, err := d.partPods(ctx)
	if err != nil {
		return err
	}
	present := map[types.UID]bool{}
	for i := range pods {
		p := &pods[i]
		present[p.UID] = true
		seen := mv.pods[p.UID]
		switch {
		case seen == nil && p.Spec.NodeName != "":
			seen = &partPod{name: p.Name, owner: ownerText(p), node: p.Spec.NodeName, seen: now}
			mv.pods[p.UID] = seen
			d.log.say("pod %s (%s) new: made by its controller, put on %s by kube-scheduler", p.Name, seen.owner, seen.node)
		case seen != nil && p.DeletionTimestamp != nil && seen.evicted.IsZero():
			seen.evicted = now
			d.log.say("pod %s (%s) on %s: evicted by the drain", p.Name, seen.owner, seen.node)
		}
	}
	for _, uid := range slices.Sorted(maps.Keys(mv.pods)) {
		if seen := mv.pods[uid]; !present[uid] && seen.evicted.IsZero() {
			seen.evicted = now
			d.log.say("pod %s (%s) on %s: evicted by the drain", seen.name, seen.owner, seen.node)
		}
	}
	return nil
}

// availability follows every version of a workload's pods (a watch from
// a list) and counts how many of its replicas are unavailable: not Ready,
// being deleted, or missing. It keeps the most seen at once since all
// were first available.
type availability struct {
	replicas int

	mu    sync.Mutex // guards the fields below
	pods  map[types.UID]*corev1.Pod
	armed bool // all replicas have been available
	cur   int
	most  int
	err   error
}

// watchAvailability starts following workload app's pods until ctx ends.
func watchAvailability(ctx context.Context, client kubernetes.Interface, app string, replicas int) (*availability, error) {
	selector := labels.Set{"app": app}.String()
	pods := client.CoreV1().Pods(namespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing %s's pods: %w", app, err)
	}
	a := &availability{replicas: replicas, pods: map[types.UID]*corev1.Pod{}}
	for i := range list.Items {
		a.pods[list.Items[i].UID] = &list.Items[i]
	}
	a.count()
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return pods.Watch(ctx, o)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watching %s's pods: %w", app, err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			a.take(ev)
		}
	}()
	return a, nil
}

// take counts one watch event.
func (a *availability) take(ev watch.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := ev.Object.(*corev1.Pod)
	switch {
	case !ok:
		if ev.Type == watch.Error {
			a.err = fmt.Errorf("watching the pods: %v", ev.Object)
		}
		return
	case ev.Type == watch.Deleted:
		delete(a.pods, p.UID)
	default:
		a.pods[p.UID] = p
	}
	a.count()
}

// count recounts; a.mu held.
func (a *availability) count() {
	ready := 0
	for _, p := range a.pods {
		if podReady(p) {
			ready++
		}
	}
	a.cur = max(0, a.replicas-ready)
	if a.cur == 0 {
		a.armed = true
	}
	if a.armed {
		a.most = max(a.most, a.cur)
	}
}

// now is how many are unavailable now, and the most at once so far.
func (a *availability) now() (int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur, a.most
}

// failed is the watch's error, if it met one.
func (a *availability) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}
