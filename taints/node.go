package taints

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/faults"
	"github.com/selftaint/selftaint/taints/fleet"
)

// Snapshot is everything one sync decides from: the Node as read, what the
// agent has seen and decided since it started, its config, and the clock.
type Snapshot struct {
	Node *corev1.Node
	Now  time.Time
	// Damped are the conditions the dampers have decided; Pending is when
	// a damper's pending flip is due (zero: none).
	Damped  map[corev1.NodeConditionType]State
	Pending time.Time
	// Faults is this sync's evaluation of the fault annotations.
	Faults faults.Eval
	// Published is what was published last, for transition times.
	Published map[corev1.NodeConditionType]Published
	// Told is the status each condition's last change Event told, for
	// the conditions whose change was told but not written yet (a write
	// that failed and is retried): a change is told once, when decided,
	// not again at each retry (conditionChanges).
	Told map[corev1.NodeConditionType]corev1.ConditionStatus
	// InitCondition, Init and InitTaint manage initialization when Init is
	// set.
	InitCondition corev1.NodeConditionType
	Init          *InitInput
	InitTaint     corev1.Taint
	// Rules map conditions to taints; Ownable is what the ownership records
	// are trusted for.
	Rules   []Rule
	Ownable Ownable
	// DrainRules ask for a sick-node drain (PlanDrainRequest).
	DrainRules []DrainRule
	// Hardware is the last good inventory (HardwareKnown false until the
	// first); Advertised the extended resources advertised before;
	// Adopted the count of each resource an earlier run advertised, as the
	// Node had it at start (asserted until an inventory succeeds); Yielded
	// the resources left to another writer as of the last sync
	// (PlanResources).
	Hardware      []Hardware
	HardwareKnown bool
	Advertised    map[corev1.ResourceName]bool
	Adopted       map[corev1.ResourceName]int64
	Yielded       map[corev1.ResourceName]Yield
	// FieldManager is the server-side apply field manager the agent writes
	// status under.
	FieldManager string
	// HeartbeatPeriod is how often conditions are re-written when nothing
	// changed; MaxMessageLen caps a published message.
	HeartbeatPeriod time.Duration
	MaxMessageLen   int
	// Healthy is each condition's status when all is well.
	Healthy map[corev1.NodeConditionType]corev1.ConditionStatus
	// MessageUpdates are the conditions whose new message is written at
	// once while they report a problem (ConditionsInput.MessageUpdates).
	MessageUpdates map[corev1.NodeConditionType]bool
	// Limiter is the change limiter and Limits each condition's state.
	Limiter LimiterConfig
	Limits  map[corev1.NodeConditionType]LimitState
	// NoExecute is what the node knows of the coordinator's grants and
	// guard.
	NoExecute NoExecuteInput
}

// NodePlan is what one sync does to the Node.
type NodePlan struct {
	// Conditions to publish, and the initialization verdict.
	Conditions ConditionsPlan
	// Status: extended resources to advertise, those held by another
	// writer, and whether the status needs writing.
	Status StatusPlan
	// Resources is the extended resources' plan (PlanResources) that
	// Status sums up: the entries the status apply holds, the withdrawals,
	// the yield state after this sync and its Events.
	Resources ResourcePlan
	// Metadata is what decides the taints, labels and records
	// (PlanMetadata): the write loop plans them from it, and again with a
	// fresh Node after a conflict.
	Metadata MetadataInput
	// Changes are the conditions whose status this sync changes on the
	// Node, sorted by type, but those already told (Snapshot.Told): each
	// is told in an Event as soon as decided, before the status is
	// written (fault Events come from Faults).
	Changes []ConditionChange
	// Limits are the change limiters after this sync (kept once the
	// writes succeed); Flapping the conditions they hold, FlapStarted and
	// FlapEnded those that started or stopped flapping now.
	Limits                 map[corev1.NodeConditionType]LimitState
	Flapping               map[corev1.NodeConditionType]bool
	FlapStarted, FlapEnded []corev1.NodeConditionType
	// NoExecute says, for each condition with a NoExecute rule that
	// applies, whether its NoExecute taint may be on and why not, sorted.
	NoExecute []NoExecuteVerdict
	// Next is when the next sync is due (zero: only when something
	// changes): a damper's pending flip, a fault's expiry, a change
	// limiter's release, a grant's end, the guard going stale, a holder's
	// liveness stamp, or the heartbeat.
	Next time.Time
}

// ConditionChange is a condition whose status changes, for its Event.
type ConditionChange struct {
	Type corev1.NodeConditionType
	State
	// Unhealthy: the new status is not the healthy one (a Warning Event).
	Unhealthy bool
}

// StatusPlan is what to write to the Node's status.
type StatusPlan struct {
	// Resources are the extended resources to advertise: the hardware
	// present that selftaint advertises, except what another writer holds
	// or was yielded to.
	Resources map[corev1.ResourceName]int64
	// Held are resources another writer (a device plugin) advertised
	// before selftaint did: left alone.
	Held []corev1.ResourceName
	// Write says the conditions or resources need writing: a status,
	// reason or transition time changed, a fault's message, a resource's
	// count, or the heartbeat is due.
	Write bool
}

// PlanNode decides one sync: the conditions (PlanConditions), the status
// write and the extended resources, what decides the metadata
// (PlanMetadata), and when to run next.
func PlanNode(s Snapshot) NodePlan {
	var p NodePlan
	in := ConditionsInput{
		Now: s.Now, Damped: s.Damped, Faults: s.Faults.Apply, Published: s.Published,
		Limiter: s.Limiter, Limits: s.Limits, Rules: s.Rules,
		MessageUpdates: s.MessageUpdates, Healthy: s.Healthy,
	}
	if s.Init != nil {
		in.InitCondition, in.Init = s.InitCondition, s.Init
	}
	p.Conditions = PlanConditions(in)
	p.Resources = PlanResources(resourceInput(s))
	p.Status = planStatus(s, p.Conditions, p.Resources)
	statuses := make(map[corev1.NodeConditionType]corev1.ConditionStatus, len(p.Conditions.States))
	for t, st := range p.Conditions.States {
		statuses[t] = st.Status
	}
	c := p.Conditions
	p.Limits, p.Flapping, p.FlapStarted, p.FlapEnded = c.Limits, c.Flapping, c.FlapStarted, c.FlapEnded
	gates := PlanGates(s.Rules, statuses, c.Flapping, s.Node.Labels[fleet.ZoneLabel], s.NoExecute)
	p.NoExecute = noExecuteVerdicts(s.Rules, statuses, gates)
	p.Metadata = MetadataInput{
		Node: s.Node, Now: s.Now, Rules: s.Rules, Statuses: statuses,
		Hardware: s.Hardware, HardwareKnown: s.HardwareKnown, Ownable: s.Ownable,
		Gates: gates,
		Request: RequestInput{
			Wanted: Wanted(s.Rules, statuses, c.Flapping), Granted: s.NoExecute.Granted, AliveEvery: s.NoExecute.AliveEvery,
		},
		Drain: DrainInput{Rules: s.DrainRules, States: p.Conditions.States},
	}
	if p.Conditions.Init != nil {
		p.Metadata.Init = &InitTaint{Taint: s.InitTaint, Verdict: *p.Conditions.Init}
	}
	p.Changes = conditionChanges(s, p.Conditions.States)
	p.Next = Earliest(Earliest(s.Pending, s.Faults.Next), nextHeartbeat(s, p.Conditions.States, p.Status.Write))
	p.Next = Earliest(p.Next, c.LimitWake)
	p.Next = Earliest(p.Next, nextNoExecute(s, p.Metadata.Request))
	return p
}

// noExecuteVerdicts are the gates of the conditions whose NoExecute rule
// applies, sorted by condition.
func noExecuteVerdicts(rules []Rule, statuses map[corev1.NodeConditionType]corev1.ConditionStatus, gates map[corev1.NodeConditionType]Gate) []NoExecuteVerdict {
	var out []NoExecuteVerdict
	byCond := RulesByCondition(rules)
	for _, c := range slices.Sorted(maps.Keys(byCond)) {
		if st, ok := statuses[c]; ok && noExecuteApplies(byCond[c], st) {
			out = append(out, NoExecuteVerdict{Condition: c, Gate: gates[c]})
		}
	}
	return out
}

// nextNoExecute is when NoExecute needs a sync while the node asks for it:
// its grant ends, the guard goes stale, or its liveness stamp is due.
func nextNoExecute(s Snapshot, req RequestInput) time.Time {
	if len(req.Wanted) == 0 {
		return time.Time{}
	}
	var next time.Time
	ne := s.NoExecute
	if ne.Granted {
		next = Earliest(next, ne.GrantUntil)
		next = Earliest(next, AliveDue(s.Node, req, s.Now))
	}
	if ne.GuardFresh {
		next = Earliest(next, ne.GuardStaleAt)
	}
	return next
}

// conditionChanges is the conditions whose status differs from the one
// last told (Snapshot.Told), or, when none is told since the last write,
// from the Node's.
func conditionChanges(s Snapshot, states map[corev1.NodeConditionType]State) []ConditionChange {
	var out []ConditionChange
	for _, t := range slices.Sorted(maps.Keys(states)) {
		st := states[t]
		prev, known := s.Told[t]
		if c := FindCondition(s.Node, t); !known && c != nil {
			prev, known = c.Status, true
		}
		if known && prev == st.Status {
			continue
		}
		healthy, ok := s.Healthy[t]
		if !ok {
			healthy = corev1.ConditionFalse
		}
		out = append(out, ConditionChange{Type: t, State: st, Unhealthy: st.Status != healthy})
	}
	return out
}

// resourceInput is what PlanResources decides from in s: the inventory's
// counts of the resources advertised, or, until an inventory succeeds, the
// adopted ones.
func resourceInput(s Snapshot) ResourceInput {
	in := ResourceInput{
		Known:      s.HardwareKnown,
		Advertised: s.Advertised,
		Seen:       SeenResources(s.Node, s.FieldManager, ResourceNames(s.Node)),
		Yielded:    s.Yielded,
		Wanted:     map[corev1.ResourceName]int64{},
	}
	if !in.Known {
		maps.Copy(in.Wanted, s.Adopted)
		return in
	}
	for _, h := range s.Hardware {
		if h.Advertise && h.Count > 0 {
			in.Wanted[h.Name] = h.Count
		}
	}
	return in
}

// planStatus sums up rp for the status and decides whether the status
// needs writing: a condition or a resource entry differs, or the
// heartbeat is due.
func planStatus(s Snapshot, c ConditionsPlan, rp ResourcePlan) StatusPlan {
	p := StatusPlan{Resources: rp.Advertise, Held: rp.Held}
	p.Write = conditionsNeedWrite(s, c) || rp.NeedsWrite(s.Node)
	return p
}

// OwnedCapacity is the resources field manager owns in the Node's status
// capacity (its managed fields): what an earlier run advertised.
func OwnedCapacity(node *corev1.Node, manager string) map[corev1.ResourceName]bool {
	out := map[corev1.ResourceName]bool{}
	for _, mf := range node.ManagedFields {
		if mf.Manager != manager || mf.FieldsV1 == nil {
			continue
		}
		for r := range capacityKeys(mf.FieldsV1.Raw) {
			out[r] = true
		}
	}
	return out
}

// capacityKeys lists the status.capacity keys in a managedFields entry.
func capacityKeys(raw []byte) map[corev1.ResourceName]bool {
	var f struct {
		Status struct {
			Capacity map[string]json.RawMessage `json:"f:capacity"`
		} `json:"f:status"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return nil
	}
	out := map[corev1.ResourceName]bool{}
	for k := range f.Status.Capacity {
		if name, ok := strings.CutPrefix(k, "f:"); ok {
			out[corev1.ResourceName(name)] = true
		}
	}
	return out
}

// conditionsNeedWrite reports whether a condition's status, reason or
// transition time differs from the Node, or a heartbeat is due. A changed
// message alone waits for the heartbeat: messages carry live readings and
// would otherwise cause a write on every probe run. The messages of
// c.MessageNow are written at once: a fault's, what the operator asked
// for, and a problem's with message updates (NPD's).
func conditionsNeedWrite(s Snapshot, c ConditionsPlan) bool {
	for t, st := range c.States {
		nc := FindCondition(s.Node, t)
		if nc == nil || nc.Status != st.Status || nc.Reason != st.Reason ||
			!nc.LastTransitionTime.Time.Truncate(time.Second).Equal(st.LastTransitionTime.Truncate(time.Second)) {
			return true
		}
		if c.MessageNow[t] && nc.Message != Truncate(st.Message, s.MaxMessageLen) {
			return true
		}
		if !s.Now.Before(nc.LastHeartbeatTime.Add(s.HeartbeatPeriod)) {
			return true
		}
	}
	return false
}

// nextHeartbeat is when the oldest of our conditions needs refreshing:
// heartbeat period after now when this sync writes them, else after their
// last heartbeat on the Node.
func nextHeartbeat(s Snapshot, states map[corev1.NodeConditionType]State, writing bool) time.Time {
	var next time.Time
	for t := range states {
		at := s.Now.Add(s.HeartbeatPeriod)
		if !writing {
			c := FindCondition(s.Node, t)
			if c == nil {
				continue
			}
			at = c.LastHeartbeatTime.Add(s.HeartbeatPeriod)
		}
		next = Earliest(next, at)
	}
	return next
}

// FindCondition returns the Node's condition of type t, or nil.
func FindCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// Truncate caps s at n bytes, ending it with "..." when cut; n <= 0 means
// no cap.
func Truncate(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// Earliest is the earlier of two times, a zero time meaning none.
func Earliest(x, y time.Time) time.Time {
	if x.IsZero() || (!y.IsZero() && y.Before(x)) {
		return y
	}
	return x
}
