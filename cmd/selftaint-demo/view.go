package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// view is what the live view has shown so far, and when the drill's
// moments happened.
type view struct {
	t0     time.Time // the first fault was written (zero before)
	nodes  map[string]*nodeSeen
	pods   map[string]*podSeen
	events map[types.UID]bool // shown
	// mostGranted and mostNoExecute are the most nodes seen holding a
	// grant, and carrying NoExecute, at once.
	mostGranted, mostNoExecute int
	// maint is the drain part's view, once it has begun.
	maint *maintView
}

// nodeSeen is what the live view last showed of one node, and when its
// moments happened (zero: not yet).
type nodeSeen struct {
	fault   fault
	cond    string
	taints  string
	asks    bool
	granted bool

	injected, asked, grantedAt, releasedAt, fallbackOn, noExecuteOn, noExecuteOff, cleared time.Time
}

// podSeen is when the live view saw one pod's eviction begin and end.
type podSeen struct {
	node           string
	deleting, gone time.Time
}

func newView(c cast) *view {
	v := &view{nodes: map[string]*nodeSeen{}, pods: map[string]*podSeen{}, events: map[types.UID]bool{}}
	for _, f := range c.faults {
		v.nodes[f.node] = &nodeSeen{fault: f}
	}
	for _, p := range c.pods {
		v.pods[p.name] = &podSeen{node: p.node}
	}
	return v
}

// rel is t relative to the first fault, as "+1.5s".
func (v *view) rel(t time.Time) string {
	return fmt.Sprintf("+%.1fs", t.Sub(v.t0).Seconds())
}

// injected records that f was written now.
func (v *view) injected(f fault, now time.Time) {
	if st := v.nodes[f.node]; st != nil {
		if v.t0.IsZero() {
			v.t0 = now
		}
		st.injected = now
		return
	}
	if mv := v.maint; mv != nil && mv.nodes[f.node] != nil {
		if mv.t0.IsZero() {
			mv.t0 = now
		}
		mv.nodes[f.node].injected = now
	}
}

// observe reads the nodes, their grants, the pods and the Events once and
// shows what changed since the last time.
func (d *demo) observe(ctx context.Context, v *view) error {
	nodes, err := d.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	leases, err := d.client.CoordinationV1().Leases(coordinatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: fleet.GrantLabel + "=true"})
	if err != nil {
		return err
	}
	now := time.Now()
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	granted, carrying := 0, 0
	for i := range nodes.Items {
		n := &nodes.Items[i]
		g := grantOf(leases.Items, n.Name, now)
		if st := v.nodes[n.Name]; st != nil {
			d.showNode(v, st, n, g, now)
		}
		if g != nil {
			granted++
		}
		if _, _, ne := nodeTaints(n); ne {
			carrying++
		}
	}
	v.mostGranted, v.mostNoExecute = max(v.mostGranted, granted), max(v.mostNoExecute, carrying)
	if err := d.showPods(ctx, v, now); err != nil {
		return err
	}
	if v.maint != nil {
		if err := d.observeMaint(ctx, v, nodes.Items, now); err != nil {
			return err
		}
	}
	return d.showEvents(ctx, v)
}

// grantOf is node's live grant Lease among leases at now (nil: none).
func grantOf(leases []coordinationv1.Lease, node string, now time.Time) *coordinationv1.Lease {
	i := slices.IndexFunc(leases, func(l coordinationv1.Lease) bool { return l.Name == fleet.GrantName(node) })
	if i < 0 {
		return nil
	}
	if ok, _ := fleet.Granted(&leases[i], node, now, now); !ok {
		return nil
	}
	return &leases[i]
}

// showNode shows what changed on one node, in the order it happens: its
// condition, its request for a grant, the grant, our taints; and tells
// the drill's moments.
func (d *demo) showNode(v *view, st *nodeSeen, n *corev1.Node, grant *coordinationv1.Lease, now time.Time) {
	if c := taints.FindCondition(n, condition); c != nil {
		if s := fmt.Sprintf("%s=%s (%s)", condition, c.Status, c.Reason); s != st.cond {
			d.log.say("%s  condition %s: %s", n.Name, s, c.Message)
			st.cond = s
		}
	}
	req, asks := n.Annotations[fleet.RequestAnnotation]
	if asks != st.asks {
		d.log.say("%s  %s", n.Name, requestLine(req, asks))
		st.asks = asks
		if asks && st.asked.IsZero() {
			st.asked = now
		}
	}
	if (grant != nil) != st.granted {
		d.showGrant(v, n.Name, grant, now)
	}
	s, fallback, noExecute := nodeTaints(n)
	if s != st.taints {
		d.log.say("%s  taints: %s", n.Name, orNone(s))
		st.taints = s
	}
	for _, l := range mark(st, taintTransition(*st, fallback, noExecute), now) {
		d.log.plain(indent + l)
	}
}

// requestLine says what a node's request annotation (req; asks: present)
// means.
func requestLine(req string, asks bool) string {
	if !asks {
		return "withdrew its request for a NoExecute grant"
	}
	r, err := fleet.ParseRequest(req)
	if err != nil {
		return fmt.Sprintf("asks for a NoExecute grant, but its request cannot be read: %v", err)
	}
	return fmt.Sprintf("asks the coordinator for a NoExecute grant (annotation %s, since %s)", fleet.RequestAnnotation, r.Since.Local().Format(time.TimeOnly))
}

// showGrant shows node's grant being made (grant) or released (nil).
func (d *demo) showGrant(v *view, node string, grant *coordinationv1.Lease, now time.Time) {
	st := v.nodes[node]
	if grant == nil {
		st.granted, st.releasedAt = false, now
		d.log.say("%s  grant released: Lease %s/%s has no holder", node, coordinatorNamespace, fleet.GrantName(node))
		return
	}
	note := grantNote(v, node, now)
	st.granted, st.grantedAt = true, now
	_, until := fleet.Granted(grant, node, now, now)
	d.log.say("%s  granted: Lease %s/%s holds NoExecute for it until %s (the coordinator renews it)", node, coordinatorNamespace, grant.Name, until.Local().Format(time.TimeOnly))
	d.log.plain(indent + note)
}

// grantNote tells node's grant, made at now: at once, or passed on from
// the node whose grant was released last.
func grantNote(v *view, node string, now time.Time) string {
	st := v.nodes[node]
	from, released := "", time.Time{}
	for name, o := range v.nodes {
		if name != node && !o.releasedAt.IsZero() && o.releasedAt.After(released) && o.releasedAt.After(st.asked) {
			from, released = name, o.releasedAt
		}
	}
	if from == "" {
		return fmt.Sprintf("granted %s after it asked: the budget had room (%d of %d held now)", since(st.asked, now), v.holders()+1, budget)
	}
	return fmt.Sprintf("the grant passed on: %s's was released %s earlier; %s had waited %s in line", from, since(released, now), node, since(st.asked, now))
}

// holders is how many nodes hold a grant, as last seen.
func (v *view) holders() int {
	n := 0
	for _, o := range v.nodes {
		if o.granted {
			n++
		}
	}
	return n
}

// moments are the drill's moments one poll of a node's taints shows.
type moments struct {
	fallbackOn, noExecuteOn, noExecuteOff, cleared bool
}

// taintTransition says which moments a node last seen as st reaches when
// a poll shows its fallback and NoExecute taints on or off. Each node has
// one fault, so each moment happens at most once.
func taintTransition(st nodeSeen, fallback, noExecute bool) moments {
	tainted := !st.fallbackOn.IsZero() || !st.noExecuteOn.IsZero()
	return moments{
		fallbackOn:   fallback && st.fallbackOn.IsZero(),
		noExecuteOn:  noExecute && st.noExecuteOn.IsZero(),
		noExecuteOff: !noExecute && !st.noExecuteOn.IsZero() && st.noExecuteOff.IsZero(),
		cleared:      !fallback && !noExecute && tainted && st.cleared.IsZero(),
	}
}

// mark records a node's moments m at now and returns what to tell of them.
func mark(st *nodeSeen, m moments, now time.Time) []string {
	var out []string
	if m.fallbackOn {
		st.fallbackOn = now
		out = append(out, fmt.Sprintf("fallback on %s after the fault was written: no new pods without a toleration; running pods stay", since(st.injected, now)))
	}
	if m.noExecuteOn {
		st.noExecuteOn = now
		out = append(out, noExecuteNote(*st, now))
	}
	if m.noExecuteOff {
		st.noExecuteOff = now
		if !m.cleared {
			out = append(out, "NoExecute lifted; the fallback stays")
		}
	}
	if m.cleared {
		st.cleared = now
		out = append(out, clearedNote(*st))
	}
	return out
}

// noExecuteNote tells NoExecute joining the fallback at now.
func noExecuteNote(st nodeSeen, now time.Time) string {
	s := fmt.Sprintf("NoExecute joined the fallback %s after the fault was written", since(st.injected, now))
	if st.grantedAt.IsZero() {
		return s + ": the taint-eviction controller now evicts what does not tolerate it"
	}
	return fmt.Sprintf("%s, %s after the grant: the taint-eviction controller now evicts what does not tolerate it", s, since(st.grantedAt, now))
}

// clearedNote tells a node's fault clearing.
func clearedNote(st nodeSeen) string {
	s := fmt.Sprintf("fault expired on its own (it lasted %s), condition and taints cleared, nobody acting", st.fault.lasts)
	switch {
	case st.grantedAt.IsZero():
		return s + "; its wait outlasted the fault: it never held a grant, so its pods were never evicted"
	case st.noExecuteOn.IsZero():
		return s + "; it held a grant, but NoExecute never landed"
	}
	return s
}

// since is how long after from now is, as "0.3s".
func since(from, now time.Time) string {
	return fmt.Sprintf("%.1fs", now.Sub(from).Seconds())
}

// showPods shows the drill's pods that began to be evicted or went away
// since the last poll.
func (d *demo) showPods(ctx context.Context, v *view, now time.Time) error {
	list, err := d.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range d.cast.pods {
		st := v.pods[p.name]
		if !st.gone.IsZero() {
			continue
		}
		i := slices.IndexFunc(list.Items, func(q corev1.Pod) bool { return q.Name == p.name })
		found := i >= 0
		evicted, gone := podTransition(*st, found, found && list.Items[i].DeletionTimestamp != nil)
		if evicted {
			st.deleting = now
			d.log.say("pod %-8s evicted by the taint-eviction controller at %s; explain predicted %s", p.name, v.rel(now), d.prediction(v, p.name))
		}
		if gone {
			st.gone = now
			d.log.say("pod %-8s gone: the virtual kubelet stopped it and the deletion completed", p.name)
		}
	}
	return nil
}

// podTransition says what a poll of a pod last seen as st shows: its
// eviction beginning (it is being deleted or already gone, and was not
// seen deleting before) and its being gone (not found).
func podTransition(st podSeen, found, deleting bool) (evicted, gone bool) {
	return (!found || deleting) && st.deleting.IsZero(), !found
}

// shownReason reports whether the live view shows Events with reason:
// why NoExecute waits, and what the coordinator says of the budget and the
// guard.
func shownReason(reason string) bool {
	switch reason {
	case taints.ReasonNoExecuteWaiting, taints.ReasonNoExecuteSuspended,
		fleet.EventGrantReleased, fleet.EventTaintAbandoned, fleet.EventGuardTripped, fleet.EventGuardReset,
		"TaintHeldByGuard", "ConditionFlapping", "ConditionStable", "InvalidMaintenanceRequest":
		return true
	}
	return false
}

// showEvents shows the new Events on the drill's nodes with a shown
// reason.
func (d *demo) showEvents(ctx context.Context, v *view) error {
	list, err := d.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	slices.SortStableFunc(list.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	for _, e := range list.Items {
		if v.events[e.UID] || !shownReason(e.Reason) {
			continue
		}
		v.events[e.UID] = true
		about := e.InvolvedObject.Name
		if e.InvolvedObject.Kind != "Node" {
			about = e.InvolvedObject.Kind + " " + about
		}
		d.log.say("%s  Event %s: %s", about, e.Reason, e.Message)
	}
	return nil
}

// eventTime is when an Event was first recorded.
func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// nodeTaints formats the node's selftaint.io taints and says whether the
// drill's fallback and NoExecute taints are among them.
func nodeTaints(n *corev1.Node) (s string, fallback, noExecute bool) {
	var out []string
	for _, t := range n.Spec.Taints {
		if !strings.HasPrefix(t.Key, "selftaint.io/") {
			continue
		}
		out = append(out, taints.Format(t))
		if t.Key == taintKey {
			fallback = fallback || t.Effect == corev1.TaintEffectNoSchedule
			noExecute = noExecute || t.Effect == corev1.TaintEffectNoExecute
		}
	}
	return strings.Join(out, ", "), fallback, noExecute
}

func orNone(s string) string {
	if s == "" {
		return "none of ours"
	}
	return s
}
