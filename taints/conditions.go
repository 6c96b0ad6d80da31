package taints

import (
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/faults"
)

// Published is a condition as last published (or adopted from the Node at
// start-up), and whether a fault decided it.
type Published struct {
	State
	Fault bool
}

// ConditionsInput is what decides the conditions one sync publishes.
type ConditionsInput struct {
	Now time.Time
	// Damped are the conditions the dampers have decided.
	Damped map[corev1.NodeConditionType]State
	// Faults are the faults in force, by condition: each decides its
	// condition outright, no damping (the damper keeps observing underneath
	// and takes over again when the fault ends).
	Faults map[corev1.NodeConditionType]faults.Fault
	// Published is what was published last, for transition times.
	Published map[corev1.NodeConditionType]Published
	// InitCondition and Init, when Init is set, decide the initialization
	// condition (Init.States is filled in here from the other conditions).
	InitCondition corev1.NodeConditionType
	Init          *InitInput
	// Limiter, Limits and Rules drive the change limiter: each condition
	// with rules passes through Limit (faults too: a fault flipped faster
	// than the bucket allows flaps like a probe).
	Limiter LimiterConfig
	Limits  map[corev1.NodeConditionType]LimitState
	Rules   []Rule
	// MessageUpdates are the conditions whose new message is news while
	// they report a problem (node-problem-detector's
	// enable_message_change_based_condition_update): see
	// ConditionsPlan.MessageNow. Healthy is each condition's status when
	// all is well (False when absent), which tells a problem.
	MessageUpdates map[corev1.NodeConditionType]bool
	Healthy        map[corev1.NodeConditionType]corev1.ConditionStatus
}

// ConditionsPlan is the conditions to publish.
type ConditionsPlan struct {
	States    map[corev1.NodeConditionType]State
	FromFault map[corev1.NodeConditionType]bool
	// Init is the initialization verdict, when initialization is managed.
	Init *InitVerdict
	// Limits are the change limiters after this sync; Flapping the
	// conditions they hold; FlapStarted and FlapEnded those that started
	// or stopped flapping now; LimitWake when a limiter next needs a sync.
	Limits                 map[corev1.NodeConditionType]LimitState
	Flapping               map[corev1.NodeConditionType]bool
	FlapStarted, FlapEnded []corev1.NodeConditionType
	LimitWake              time.Time
	// MessageNow are the conditions whose message is written as soon as
	// it differs from the Node's: a fault's (what the operator asked for)
	// and, while it reports a problem, one with MessageUpdates (see
	// MessageIsNews). Any other message carries live readings and rides
	// the next write (a status, reason or transition change, or the
	// heartbeat): writing each would cost a write per probe run.
	MessageNow map[corev1.NodeConditionType]bool
}

// PlanConditions decides every condition to publish and its
// lastTransitionTime: carried from the last published state while the
// status holds; now when a fault starts or ends, or for a state never
// published; the damper's flip time otherwise (now if that would go back
// in time). The initialization condition, while undecided, keeps what was
// published.
func PlanConditions(in ConditionsInput) ConditionsPlan {
	p := ConditionsPlan{States: map[corev1.NodeConditionType]State{}, FromFault: map[corev1.NodeConditionType]bool{}}
	for t, s := range in.Damped {
		p.States[t] = s
	}
	for t, f := range in.Faults {
		p.States[t] = State{Status: f.Status, Reason: f.Reason, Message: f.ConditionMessage()}
		p.FromFault[t] = true
	}
	limit(&p, in)
	p.MessageNow = map[corev1.NodeConditionType]bool{}
	for t, s := range p.States {
		p.States[t] = transition(in.Published, t, s, p.FromFault[t], in.Now)
		if p.FromFault[t] || (in.MessageUpdates[t] && MessageIsNews(s.Status, healthyOf(in.Healthy, t))) {
			p.MessageNow[t] = true
		}
	}
	if in.Init != nil {
		init := *in.Init
		init.States = p.States
		v := DecideInit(init)
		if prev, ok := in.Published[in.InitCondition]; !v.Decided && ok {
			v.State = prev.State
		}
		p.States[in.InitCondition] = transition(in.Published, in.InitCondition, v.State, false, in.Now)
		p.Init = &v
	}
	return p
}

// MessageIsNews reports whether a new message of a condition with message
// updates (ConditionsInput.MessageUpdates) is news at status, the status
// being healthy when all is well: while the condition reports a problem
// (neither its healthy status nor Unknown), as node-problem-detector
// updates a condition that stays True. An OK or Unknown message rides the
// next write, as NPD leaves it alone.
func MessageIsNews(status, healthy corev1.ConditionStatus) bool {
	return verdictOf(status, healthy) == VerdictProblem
}

// healthyOf is condition t's healthy status in healthy, False when absent.
func healthyOf(healthy map[corev1.NodeConditionType]corev1.ConditionStatus, t corev1.NodeConditionType) corev1.ConditionStatus {
	if h, ok := healthy[t]; ok {
		return h
	}
	return corev1.ConditionFalse
}

// limit passes every condition with rules through its change limiter.
func limit(p *ConditionsPlan, in ConditionsInput) {
	p.Limits = map[corev1.NodeConditionType]LimitState{}
	p.Flapping = map[corev1.NodeConditionType]bool{}
	byCond := RulesByCondition(in.Rules)
	for _, t := range slices.Sorted(maps.Keys(p.States)) {
		var published *Published
		if pub, ok := in.Published[t]; ok {
			published = &pub
		}
		l := Limit(in.Limiter, in.Limits[t], byCond[t], p.States[t], published, in.Now)
		p.States[t], p.Limits[t] = l.State, l.Next
		if l.Next.Flapping {
			p.Flapping[t] = true
		}
		if l.Started {
			p.FlapStarted = append(p.FlapStarted, t)
		}
		if l.Ended {
			p.FlapEnded = append(p.FlapEnded, t)
		}
		p.LimitWake = Earliest(p.LimitWake, l.Wake)
	}
}

// RulesByCondition groups rules by the condition they follow.
func RulesByCondition(rules []Rule) map[corev1.NodeConditionType][]Rule {
	out := map[corev1.NodeConditionType][]Rule{}
	for _, r := range rules {
		out[r.Condition] = append(out[r.Condition], r)
	}
	return out
}

// transition sets s's lastTransitionTime for condition t (see
// PlanConditions).
func transition(published map[corev1.NodeConditionType]Published, t corev1.NodeConditionType, s State, fromFault bool, now time.Time) State {
	p, ok := published[t]
	switch {
	case ok && p.Status == s.Status:
		s.LastTransitionTime = p.LastTransitionTime
	case fromFault || (ok && p.Fault) || s.LastTransitionTime.IsZero():
		// A fault starting or ending flips the condition now, whenever the
		// damper underneath last changed.
		s.LastTransitionTime = now
	case ok && s.LastTransitionTime.Before(p.LastTransitionTime):
		s.LastTransitionTime = now
	}
	return s
}
