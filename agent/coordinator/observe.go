package coordinator

import (
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// view is one decision's picture of the fleet: what Decide is given, and
// the objects behind it for writing the decision.
type view struct {
	fleetNodes []fleet.Node
	grants     []fleet.Grant
	// nodes are the fleet's Nodes by name (cached objects: never mutate).
	nodes map[string]*corev1.Node
	// zones is each node's zone.
	zones map[string]string
	// leases are the grant Leases by the node they grant (cached or
	// written objects: never mutate).
	leases map[string]*coordinationv1.Lease
	// maintenance is each fleet node's maintenance request, where it has
	// a readable one.
	maintenance map[string]*fleet.Maintenance
	// slots are the maintenance slot Leases by node (cached or written
	// objects: never mutate); slotList how Decide sees them.
	slots    map[string]*coordinationv1.Lease
	slotList []fleet.Slot
}

// aliveSeen is the last Request.Alive value seen for a node ("" for none)
// and when, on the coordinator's clock, it changed (zero: not since this
// leader started).
type aliveSeen struct {
	value string
	at    time.Time
}

// observe builds the view from the cached Nodes and the grant Leases
// (merged with the coordinator's own writes), remembering Alive values and
// reporting bad requests on the way. Only the fleet's Nodes are seen
// (Config.Members): a Node outside it counts in neither the budget nor the
// guard, and its grant Lease is neither counted, renewed nor deleted.
func (c *controller) observe(nodes []*corev1.Node, leases []*coordinationv1.Lease, now time.Time) *view {
	v := &view{
		nodes:       make(map[string]*corev1.Node, len(nodes)),
		zones:       make(map[string]string, len(nodes)),
		leases:      make(map[string]*coordinationv1.Lease, len(leases)),
		maintenance: map[string]*fleet.Maintenance{},
		slots:       map[string]*coordinationv1.Lease{},
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	byGrantName := make(map[string]string, len(nodes))
	// outside are the grant names of the Nodes that exist but are not in
	// the fleet: not counted, never granted, their Leases left alone.
	outside := map[string]bool{}
	for _, n := range nodes {
		if !c.opts.Config.Members.Includes(n) {
			outside[fleet.GrantName(n.Name)] = true
			continue
		}
		fn := c.fleetNode(n, now)
		if fn.Maintenance != nil {
			v.maintenance[n.Name] = fn.Maintenance
		}
		v.fleetNodes = append(v.fleetNodes, fn)
		v.nodes[n.Name] = n
		v.zones[n.Name] = fn.Zone
		byGrantName[fleet.GrantName(n.Name)] = n.Name
	}
	c.forgetGone(v.nodes)
	for _, l := range leases {
		if outside[l.Name] {
			continue
		}
		node, ok := grantNode(l, byGrantName)
		if !ok {
			c.log.Debug("ignoring a lease labelled as a grant whose name is not a grant's", "lease", l.Name)
			continue
		}
		v.leases[node] = l
		v.grants = append(v.grants, fleet.GrantOf(node, l))
	}
	slices.SortFunc(v.grants, func(a, b fleet.Grant) int { return strings.Compare(a.Node, b.Node) })
	return v
}

// fleetNode is how Decide sees node n: fleet.NodeView (what explain sees
// too), with what only the coordinator knows.
func (c *controller) fleetNode(n *corev1.Node, now time.Time) fleet.Node {
	fn, errs := fleet.NodeView(n, c.opts.Config.Watched)
	c.tellBadRequest(n, errs.Request)
	c.tellBadMaintenance(n, errs.Maintenance)
	fn.AliveSeen = c.aliveSeen(n.Name, fn.Request, now)
	fn.CarriesNoExecute = c.carriesNoExecute(n)
	return fn
}

// observeSlots adds the maintenance slot Leases to v: those of the fleet's
// nodes, and those of nodes that no longer exist (to be deleted); a slot
// of a Node outside the fleet is left alone.
func (c *controller) observeSlots(v *view, leases []*coordinationv1.Lease) {
	bySlotName := make(map[string]string, len(v.nodes))
	for name := range v.nodes {
		bySlotName[fleet.SlotName(name)] = name
	}
	for _, l := range leases {
		node, ok := fleet.LeaseNode(l, fleet.SlotPrefix, bySlotName)
		if !ok || (v.nodes[node] == nil && c.exists(node)) {
			continue
		}
		v.slots[node] = l
		v.slotList = append(v.slotList, fleet.SlotOf(node, l))
	}
	slices.SortFunc(v.slotList, func(a, b fleet.Slot) int { return strings.Compare(a.Node, b.Node) })
}

// exists reports whether a Node of that name exists (in the cache), in the
// fleet or not.
func (c *controller) exists(node string) bool {
	_, err := c.nodes.Get(node)
	return err == nil
}

// forgetGone drops what is remembered about nodes no longer in the fleet.
func (c *controller) forgetGone(nodes map[string]*corev1.Node) {
	for name := range c.alive {
		if _, ok := nodes[name]; !ok {
			delete(c.alive, name)
		}
	}
	for name := range c.badRequests {
		if _, ok := nodes[name]; !ok {
			delete(c.badRequests, name)
		}
	}
}

// tellBadRequest tells, the first time each bad value of n's NoExecute
// request is seen (err, from fleet.NodeView: it is no request), why, as a
// Warning Event on the Node.
func (c *controller) tellBadRequest(n *corev1.Node, err error) {
	if err == nil {
		delete(c.badRequests, n.Name)
		return
	}
	raw := n.Annotations[fleet.RequestAnnotation]
	if c.badRequests[n.Name] == raw {
		return
	}
	c.badRequests[n.Name] = raw
	c.log.Warn("ignoring an unreadable NoExecute request", "node", n.Name, "err", err)
	c.recorder.Eventf(n, corev1.EventTypeWarning, "InvalidNoExecuteRequest",
		"ignoring annotation %s (no NoExecute grant while it is unreadable): %s", fleet.RequestAnnotation, taints.Truncate(err.Error(), 512))
}

// aliveSeen remembers node's request as last seen and returns when it last
// changed on the coordinator's clock: any change is its agent writing (a
// holder refreshes Alive; an agent back from a stall rewrites it). Zero
// while it has not changed since this leader first saw the node, so
// Decide judges it from Memory.Since.
func (c *controller) aliveSeen(node string, req *fleet.Request, now time.Time) time.Time {
	value := ""
	if req != nil {
		value = req.Format()
	}
	prev, ok := c.alive[node]
	switch {
	case !ok:
		prev = aliveSeen{value: value}
	case prev.value != value:
		prev = aliveSeen{value: value, at: now}
	}
	c.alive[node] = prev
	return prev.at
}

// carriesNoExecute: a NoExecute taint on n is one of selftaint's, by its
// ownership record. An unreadable record cannot say, so any NoExecute
// taint counts (it then counts against the budget: the safe side).
func (c *controller) carriesNoExecute(n *corev1.Node) bool {
	carries, err := taints.CarriesNoExecute(n)
	if err != nil {
		c.log.Debug("unreadable taint ownership record; counting any NoExecute taint as selftaint's", "node", n.Name, "err", err)
	}
	return carries
}

// grantNode is the node lease grants: the fleet node whose grant name it
// has, else its holder if the name is the holder's, else the name without
// the prefix (a node gone from the fleet). ok is false for a lease whose
// name is not a grant's.
func grantNode(l *coordinationv1.Lease, byGrantName map[string]string) (string, bool) {
	return fleet.LeaseNode(l, fleet.GrantPrefix, byGrantName)
}
