package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// standing is what the coordinator's decision says about one node, as an
// operator command reads it: the node, its grant and its maintenance slot,
// the guard, and what fleet.Decide, asked about the fleet as it is now,
// says of the NoExecute budget and the maintenance pool (the same function
// the coordinator asks, on the same view: fleet.NodeView).
type standing struct {
	node *corev1.Node
	// statuses are the node's conditions, with a fault's status in place
	// where one was just injected.
	statuses map[corev1.NodeConditionType]corev1.ConditionStatus
	flapping map[corev1.NodeConditionType]bool
	rules    []taints.Rule
	// grant is the node's grant Lease (nil: none); guard the guard read
	// (nil: none, or unreadable: guardErr).
	grant    *coordinationv1.Lease
	guard    *fleet.GuardState
	guardErr error
	// staleAfter is the agents' guard staleness; budget the fleet's budget
	// and of how many nodes; held the nodes counted against it; waiting
	// the nodes that ask and hold none, in the order they are granted;
	// granting: the node is granted at the coordinator's next decision.
	staleAfter time.Duration
	budget     int
	max        intstr.IntOrString
	nodes      int
	held       int
	waiting    []string
	granting   bool
	namespace  string
	now        time.Time
	// maintenance is the node's maintenance standing.
	maintenance maintenanceStanding
	// members are the Nodes the coordinator counts: the guard's record of
	// its coordinator's, else the config's coordinator.fleet.
	members fleet.Membership
	// projected is the guard fleet.Decide decides with this node's own
	// conditions and request counted (taints.ProjectNoExecute; nil when no
	// guard was read: no coordinator decides), and holds its scopes that
	// hold a condition the node asks NoExecute for.
	projected *fleet.GuardState
	holds     []fleet.GuardHold
}

// describe says, for each NoExecute rule of the node's, whether its
// NoExecute taint is on now or would be, and why not, with the budget's
// state: what an operator needs before trusting an eviction drill.
// Nothing when the config has no NoExecute rule.
func (s standing) describe() []string {
	var ruled []taints.Rule
	for _, r := range s.rules {
		if r.Taint.Effect == corev1.TaintEffectNoExecute {
			ruled = append(ruled, r)
		}
	}
	if len(ruled) == 0 {
		return nil
	}
	name := s.node.Name
	if !s.members.Includes(s.node) {
		return []string{
			fmt.Sprintf("NoExecute on %s: selftaint's NoExecute rules need a grant from the coordinator (namespace %s).", name, s.namespace),
			fmt.Sprintf("  this node is not in that coordinator's fleet (fleet %s: %s): it is not counted there and gets no grant from it, so its NoExecute rules apply their fallback; a coordinator whose fleet includes it (for a virtual node, `selftaint virtual --coordinator`, in its own namespace) grants it", s.members.OrDefault(), s.members.Describe()),
		}
	}
	in := taints.NoExecuteInput{Guard: s.guard}
	if s.projected != nil {
		// The gates under the guard as the coordinator will decide it
		// once this node's own condition is counted.
		in.Guard = s.projected
	}
	in.Granted, in.GrantUntil = fleet.Granted(s.grant, name, s.now, s.now)
	if s.guard != nil {
		in.GuardFresh, _ = s.guard.Fresh(s.now, s.now, s.staleAfter)
	}
	out := []string{fmt.Sprintf("NoExecute on %s: selftaint's NoExecute rules need a grant from the coordinator (namespace %s).", name, s.namespace)}
	out = append(out, "  "+s.budgetLine(), "  "+s.guardLine(in.GuardFresh))
	for _, h := range s.holds {
		out = append(out, "  guard, projected: "+h.Describe())
	}
	out = append(out, "  "+s.grantLine(in))
	gates := taints.PlanGates(s.rules, s.statuses, s.flapping, s.node.Labels[fleet.ZoneLabel], in)
	for _, r := range ruled {
		g := gates[r.Condition]
		if g.Reason == taints.ReasonNoExecuteWaiting {
			g.Message = s.waitWhy()
		}
		out = append(out, "  "+ruleLine(r, s.statuses, g))
	}
	return out
}

// waitWhy says why a node without a grant waits: the budget is full, or it
// has room and the coordinator grants in order as its zone's rate allows.
func (s standing) waitWhy() string {
	if s.held >= s.budget {
		return fmt.Sprintf("waiting for a grant: the fleet's NoExecute budget is full (%d of %d held); grants pass on in the order nodes asked as holders clear", s.held, s.budget)
	}
	return fmt.Sprintf("waiting for a grant: the budget has room (%d of %d held); the coordinator grants in the order nodes asked, as each zone's rate allows", s.held, s.budget)
}

func (s standing) budgetLine() string {
	return fmt.Sprintf("budget: %d of %d grants held (maxNoExecute %s of %d nodes, fleet %s); %d node(s) waiting", s.held, s.budget, s.max.String(), s.nodes, s.members.OrDefault(), len(s.waiting))
}

func (s standing) guardLine(fresh bool) string {
	switch {
	case s.guardErr != nil:
		return fmt.Sprintf("guard: cannot be read (%v): NoExecute is suspended fleet-wide until the coordinator rewrites it", s.guardErr)
	case s.guard == nil:
		return "guard: not found: no coordinator has run; NoExecute is suspended until one does"
	}
	var tripped []string
	for c, scopes := range s.guard.Conditions {
		for scope, sc := range scopes {
			if sc.Tripped {
				tripped = append(tripped, fmt.Sprintf("%s (%s, %d of %d nodes)", c, strings.TrimPrefix(fleet.ScopeWhere(scope), "in "), sc.Unhealthy, sc.Nodes))
			}
		}
	}
	slices.Sort(tripped)
	state := "fresh"
	if !fresh {
		state = fmt.Sprintf("STALE (older than %s: the coordinator is absent or cut off; NoExecute is suspended)", s.staleAfter)
	}
	trips := "tripped for: none"
	if len(tripped) > 0 {
		trips = "tripped for: " + strings.Join(tripped, ", ")
	}
	return fmt.Sprintf("guard: renewed %s, %s; %s", s.guard.RenewTime.Local().Format(time.TimeOnly), state, trips)
}

func (s standing) grantLine(in taints.NoExecuteInput) string {
	name := s.node.Name
	req, asks := s.node.Annotations[fleet.RequestAnnotation]
	var since string
	if r, err := fleet.ParseRequest(req); asks && err == nil {
		since = fmt.Sprintf("asked since %s for %s", r.Since.Local().Format(time.TimeOnly), fleet.JoinConditions(r.Conditions))
	} else if asks {
		since = fmt.Sprintf("its request cannot be read (%v)", err)
	} else if len(taints.Wanted(s.rules, s.statuses, s.flapping)) > 0 {
		since = "about to ask (its agent asks for a grant as it publishes the condition)"
	} else {
		since = "not asking (no NoExecute rule of its applies)"
	}
	if in.Granted {
		return fmt.Sprintf("this node: %s; holds a grant until %s", since, in.GrantUntil.Local().Format(time.TimeOnly))
	}
	if i := slices.Index(s.waiting, name); i >= 0 {
		return fmt.Sprintf("this node: %s; no grant: %s of %d waiting", since, fleet.Ordinal(i+1), len(s.waiting))
	}
	if s.granting {
		return fmt.Sprintf("this node: %s; no grant yet: the budget has room, and the coordinator grants it at its next decision", since)
	}
	return fmt.Sprintf("this node: %s; no grant", since)
}

// ruleLine says what one NoExecute rule does on the node now.
func ruleLine(r taints.Rule, statuses map[corev1.NodeConditionType]corev1.ConditionStatus, g taints.Gate) string {
	ne := taints.Format(corev1.Taint{Key: r.Taint.Key, Value: r.Taint.Value, Effect: corev1.TaintEffectNoExecute})
	fb := taints.Format(corev1.Taint{Key: r.Taint.Key, Value: r.Taint.Value, Effect: r.Fallback})
	st, ok := statuses[r.Condition]
	switch {
	case !ok:
		return fmt.Sprintf("%s: not reported; %s would need a grant", r.Condition, ne)
	case !r.Applies(st):
		return fmt.Sprintf("%s is %s: the rule does not apply; were it to, %s would go on at once and %s only with a grant", r.Condition, st, fb, ne)
	case g.NoExecute && !g.Hold:
		return fmt.Sprintf("%s is %s: %s applies (granted), with %s", r.Condition, st, ne, fb)
	case g.Hold:
		return fmt.Sprintf("%s is %s: %s (%s); no new taint for it is added while the guard holds", r.Condition, st, g.Reason, g.Message)
	default:
		return fmt.Sprintf("%s is %s: %s applies; %s falls back to it (%s: %s)", r.Condition, st, fb, ne, g.Reason, g.Message)
	}
}

// printStanding prints node's NoExecute standing (readStanding, describe;
// nothing when the config has no NoExecute rule) and its maintenance
// standing (nothing when it has no maintenance request, slot or
// condition), each after a blank line.
func printStanding(ctx context.Context, w io.Writer, core typedcorev1.CoreV1Interface, leases typedcoordv1.LeasesGetter, cfg *config.Config, namespace string, node *corev1.Node, overrides map[corev1.NodeConditionType]corev1.ConditionStatus, now time.Time) error {
	st, err := readStanding(ctx, core, leases, cfg, namespace, node, overrides, now)
	if err != nil {
		return err
	}
	st.print(w)
	return nil
}

// print prints what printStanding prints.
func (s standing) print(w io.Writer) {
	for _, lines := range [][]string{s.describe(), s.maintenance.describe(s.node, s.namespace, s.now)} {
		if len(lines) > 0 {
			fmt.Fprintln(w)
			fmt.Fprintln(w, strings.Join(lines, "\n"))
		}
	}
}

// withheld are the taints of proposed that the node will not put on: the
// NoExecute taints of its rules whose condition the guard, with the
// node's own condition counted, holds in its zone (taints.Withheld; none
// when no guard was read).
func (s standing) withheld(proposed []corev1.Taint) []corev1.Taint {
	if s.projected == nil {
		return nil
	}
	return taints.Withheld(s.rules, proposed, *s.projected, s.node.Labels[fleet.ZoneLabel])
}

// readStanding reads what describe needs: the Nodes, the grant and slot
// Leases and the guard, in the coordinator's namespace for cfg, and asks
// fleet.Decide about them as the coordinator will decide once the node's
// own conditions are counted (taints.ProjectNoExecute): overrides replace
// the node's condition statuses (a fault just injected, a proposed
// taint's condition), and the node is seen reporting them and asking for
// NoExecute as its agent will, counted once; the rest of the fleet is seen
// as it is.
func readStanding(ctx context.Context, core typedcorev1.CoreV1Interface, leases typedcoordv1.LeasesGetter, cfg *config.Config, namespace string, node *corev1.Node, overrides map[corev1.NodeConditionType]corev1.ConditionStatus, now time.Time) (standing, error) {
	s := standing{
		node: node, rules: cfg.TaintRules(), namespace: namespace, now: now,
		staleAfter: cfg.Coordinator.Guard.StaleAfter.D, max: *cfg.Coordinator.MaxNoExecute,
		statuses: map[corev1.NodeConditionType]corev1.ConditionStatus{}, flapping: map[corev1.NodeConditionType]bool{},
	}
	for _, c := range node.Status.Conditions {
		s.statuses[c.Type] = c.Status
		s.flapping[c.Type] = c.Reason == taints.ReasonFlapping
	}
	for c, st := range overrides {
		s.statuses[c], s.flapping[c] = st, false
	}
	if err := s.readGuard(ctx, core, cfg); err != nil {
		return s, err
	}
	in, err := s.readFleet(ctx, core, leases, cfg)
	if err != nil {
		return s, err
	}
	var d fleet.Decision
	if s.members.Includes(node) {
		p := taints.ProjectNoExecute(in, node, s.rules, s.statuses, s.flapping, now)
		d = p.Decision
		if s.guard != nil {
			g := d.Guard
			s.projected, s.holds = &g, p.Holds
		}
	} else {
		// Not counted by that coordinator: the fleet as it is.
		d = fleet.Decide(in)
	}
	s.budget, s.held, s.waiting = d.Budget, d.Held, d.Waiting
	s.granting = slices.Contains(d.Grant, node.Name)
	s.maintenance.decision = d.Maintenance
	s.maintenance.maxParallel = in.Config.Maintenance.MaxParallel
	return s, nil
}

// readFleet reads Decide's input as the coordinator builds it: the fleet's
// Nodes (fleet.NodeView), the grant and slot Leases of its namespace, the
// guard as it last wrote it. It keeps the node's own Leases and
// maintenance request for describe.
func (s *standing) readFleet(ctx context.Context, core typedcorev1.CoreV1Interface, leases typedcoordv1.LeasesGetter, cfg *config.Config) (fleet.Input, error) {
	fc := cfg.Fleet()
	fc.Members = s.members
	in := fleet.Input{Config: fc, Now: s.now, Leader: "selftaint-explain", Memory: fleet.Memory{Since: s.now}}
	if s.guard != nil {
		in.Memory.Guard, in.Memory.Decided = *s.guard, true
	}
	all, err := core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing nodes for the NoExecute budget: %w", err)
	}
	grantNames, slotNames, outside := map[string]string{}, map[string]string{}, map[string]bool{}
	for i := range all.Items {
		n := &all.Items[i]
		if !s.members.Includes(n) {
			outside[fleet.GrantName(n.Name)], outside[fleet.SlotName(n.Name)] = true, true
			continue
		}
		fn, errs := fleet.NodeView(n, fc.Watched)
		fn.CarriesNoExecute, _ = taints.CarriesNoExecute(n) // unreadable: counted, as the coordinator does
		in.Nodes = append(in.Nodes, fn)
		grantNames[fleet.GrantName(n.Name)], slotNames[fleet.SlotName(n.Name)] = n.Name, n.Name
		if n.Name == s.node.Name {
			s.maintenance.request, s.maintenance.requestErrs = fn.Maintenance, errs.Maintenance
		}
	}
	s.nodes = len(in.Nodes)
	grants, err := s.readLeases(ctx, leases, fleet.GrantLabel, fleet.GrantPrefix, grantNames, outside)
	if err != nil {
		return in, fmt.Errorf("listing NoExecute grants in %s: %w", s.namespace, err)
	}
	for node, l := range grants {
		in.Grants = append(in.Grants, fleet.GrantOf(node, l))
	}
	s.grant = grants[s.node.Name]
	slots, err := s.readLeases(ctx, leases, fleet.SlotLabel, fleet.SlotPrefix, slotNames, outside)
	if err != nil {
		return in, fmt.Errorf("listing maintenance slots in %s: %w", s.namespace, err)
	}
	for node, l := range slots {
		in.Slots = append(in.Slots, fleet.SlotOf(node, l))
	}
	s.maintenance.slot = slots[s.node.Name]
	return in, nil
}

// readLeases lists the Leases labelled label=true in s's namespace, by the
// node each is for (fleet.LeaseNode); those of Nodes outside the fleet
// are left out, as the coordinator leaves them alone.
func (s *standing) readLeases(ctx context.Context, leases typedcoordv1.LeasesGetter, label, prefix string, byName map[string]string, outside map[string]bool) (map[string]*coordinationv1.Lease, error) {
	list, err := leases.Leases(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: label + "=true"})
	if err != nil {
		return nil, err
	}
	out := map[string]*coordinationv1.Lease{}
	for i := range list.Items {
		l := &list.Items[i]
		if outside[l.Name] {
			continue
		}
		if node, ok := fleet.LeaseNode(l, prefix, byName); ok {
			out[node] = l
		}
	}
	return out, nil
}

// readGuard reads the guard in s's namespace, and the fleet its
// coordinator counts (its annotation fleet.FleetAnnotation; the config's
// coordinator.fleet where it has none).
func (s *standing) readGuard(ctx context.Context, core typedcorev1.CoreV1Interface, cfg *config.Config) error {
	s.members = fleet.Membership(cfg.Coordinator.Fleet).OrDefault()
	cm, err := core.ConfigMaps(s.namespace).Get(ctx, cfg.Coordinator.Guard.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading the guard %s/%s: %w", s.namespace, cfg.Coordinator.Guard.Name, err)
	}
	if m, err := fleet.ParseMembership(cm.Annotations[fleet.FleetAnnotation]); err == nil && cm.Annotations[fleet.FleetAnnotation] != "" {
		s.members = m
	}
	g, err := fleet.DecodeGuard(cm.Data)
	if err != nil {
		s.guardErr = err
		return nil
	}
	s.guard = &g
	return nil
}
