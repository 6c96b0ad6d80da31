package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// ChangeLimiter limits how often each condition's taints may change on a
// node: a token bucket per condition, after damping. When a condition
// changes faster, its taints stay on (a NoExecute rule's at its fallback
// effect), its reason says Flapping, until it has been stable for
// CoolDown and a token is there.
type ChangeLimiter struct {
	// Enabled turns it on. Default true.
	Enabled *bool `json:"enabled,omitempty"`
	// Burst is how many taint changes may happen back to back. Default 3.
	Burst int `json:"burst"`
	// Refill is how often one more change is allowed. Default 5m.
	Refill Duration `json:"refill"`
	// CoolDown is how long a flapping condition must be stable before its
	// taints follow it again. Default 5m.
	CoolDown Duration `json:"coolDown"`
}

// IsEnabled reports whether the limiter is on.
func (l ChangeLimiter) IsEnabled() bool { return l.Enabled == nil || *l.Enabled }

// Coordinator configures NoExecute grants, the disruption guard and the
// maintenance pool: the coordinator reads all of it, the agents what they
// need to follow it (namespace, guard name, TTL, staleness, and a drain
// rule's default deadline).
type Coordinator struct {
	// Namespace holds the grant Leases, the guard ConfigMap and the leader
	// Lease. Default: the pod's namespace (POD_NAMESPACE), else
	// selftaint (DefaultCoordinatorNamespace).
	Namespace string `json:"namespace,omitempty"`
	// Fleet is which Nodes the coordinator counts (in the budget, the rate
	// and the guard) and grants: real (the default: Nodes not labelled
	// selftaint.io/virtual=true), virtual (only those) or all.
	Fleet string `json:"fleet,omitempty"`
	// MaxNoExecute is how many nodes may carry NoExecute at once: a count
	// or a percent of the nodes (rounded up). Default 10%.
	MaxNoExecute *intstr.IntOrString `json:"maxNoExecute,omitempty"`
	// RatePerMinute is how many new NoExecute grants may start per minute
	// in one zone. Default 6 (the node lifecycle controller's 0.1 node/s).
	RatePerMinute int `json:"ratePerMinute"`
	// GrantTTL is how long a grant lasts unless renewed. Default 1m,
	// at least 15s.
	GrantTTL Duration `json:"grantTTL"`
	// Guard is the disruption guard.
	Guard Guard `json:"guard"`
	// Maintenance is the maintenance pool: how many nodes may be drained
	// at once.
	Maintenance Maintenance `json:"maintenance"`
}

// Maintenance configures the maintenance pool the coordinator serves
// drains from (operators' requests and rules with action: drain).
type Maintenance struct {
	// MaxParallel is how many nodes may be unavailable through maintenance
	// at once, counting in-flight drains, NotReady nodes and nodes cordoned
	// by someone else: a count or a percent of the nodes (rounded up).
	// Default 1; 0 starts no drain.
	MaxParallel *intstr.IntOrString `json:"maxParallel,omitempty"`
	// MaxParallelPerZone, if set, bounds each zone the same way (a percent
	// of the zone's nodes).
	MaxParallelPerZone *intstr.IntOrString `json:"maxParallelPerZone,omitempty"`
	// DefaultDeadline is how long a drain may take once started where its
	// request gives no deadline. Default 1h; at most 720h.
	DefaultDeadline Duration `json:"defaultDeadline"`
}

// Guard configures the disruption guard.
type Guard struct {
	// Name of the guard ConfigMap. Default selftaint-guard.
	Name string `json:"name"`
	// Threshold: more than this share of a zone's (or the fleet's) nodes
	// reporting the same condition trips the guard. Default 55%.
	Threshold Percent `json:"threshold"`
	// ResetMargin: it resets once the share stays at or below Threshold
	// minus this for CoolDown. Default 10%.
	ResetMargin Percent `json:"resetMargin"`
	// CoolDown default 5m.
	CoolDown Duration `json:"coolDown"`
	// MinNodes: a zone with fewer nodes is only judged as part of the
	// fleet. Default 3.
	MinNodes int `json:"minNodes"`
	// RenewEvery is how often the coordinator rewrites the guard when
	// nothing changed. Default 30s.
	RenewEvery Duration `json:"renewEvery"`
	// StaleAfter: an agent that sees no renewal this long stops trusting
	// the guard for NoExecute. Default 2m; at least twice RenewEvery.
	StaleAfter Duration `json:"staleAfter"`
}

// Percent is a whole percent written "55%" (or 55).
type Percent struct {
	P int
	rawValue
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *Percent) UnmarshalJSON(b []byte) error {
	var n int
	if json.Unmarshal(b, &n) == nil {
		p.P, p.raw = n, string(b)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		p.raw, p.err = string(b), fmt.Errorf("must be a whole percent such as \"55%%\"")
		return nil
	}
	p.raw = s
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	if err != nil {
		p.err = fmt.Errorf("must be a whole percent such as \"55%%\"")
		return nil
	}
	p.P = n
	return nil
}

// MarshalJSON implements json.Marshaler.
func (p Percent) MarshalJSON() ([]byte, error) { return json.Marshal(fmt.Sprintf("%d%%", p.P)) }

func (p Percent) validate(path *field.Path, lo, hi int) field.ErrorList {
	if p.err != nil {
		return p.parseError(path)
	}
	if p.P < lo || p.P > hi {
		return field.ErrorList{field.Invalid(path, p.raw, fmt.Sprintf("must be between %d%% and %d%%", lo, hi))}
	}
	return nil
}

func (l *ChangeLimiter) setDefaults() {
	if l.Enabled == nil {
		l.Enabled = ptr(true)
	}
	if l.Burst == 0 {
		l.Burst = 3
	}
	defaultDuration(&l.Refill, 5*time.Minute)
	defaultDuration(&l.CoolDown, 5*time.Minute)
}

func (c *Coordinator) setDefaults() {
	if c.Fleet == "" {
		c.Fleet = string(fleet.MembersReal)
	}
	if c.MaxNoExecute == nil {
		v := intstr.FromString("10%")
		c.MaxNoExecute = &v
	}
	if c.RatePerMinute == 0 {
		c.RatePerMinute = 6
	}
	defaultDuration(&c.GrantTTL, time.Minute)
	g := &c.Guard
	if g.Name == "" {
		g.Name = fleet.DefaultGuardName
	}
	if !g.Threshold.set() {
		g.Threshold.P = 55
	}
	if !g.ResetMargin.set() {
		g.ResetMargin.P = 10
	}
	defaultDuration(&g.CoolDown, 5*time.Minute)
	if g.MinNodes == 0 {
		g.MinNodes = 3
	}
	defaultDuration(&g.RenewEvery, 30*time.Second)
	defaultDuration(&g.StaleAfter, 2*time.Minute)
	m := &c.Maintenance
	if m.MaxParallel == nil {
		v := intstr.FromInt32(1)
		m.MaxParallel = &v
	}
	defaultDuration(&m.DefaultDeadline, time.Hour)
}

func (l ChangeLimiter) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if l.Burst < 2 {
		errs = append(errs, field.Invalid(p.Child("burst"), l.Burst, "must be at least 2: lifting a taint needs two tokens, so one is always left to put it back (to turn the limiter off, set enabled: false)"))
	}
	errs = append(errs, l.Refill.validate(p.Child("refill"), false)...)
	errs = append(errs, l.CoolDown.validate(p.Child("coolDown"), true)...)
	return errs
}

func (c Coordinator) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(c.Namespace) {
			errs = append(errs, field.Invalid(p.Child("namespace"), c.Namespace, msg))
		}
	}
	if _, err := fleet.ParseMembership(c.Fleet); err != nil {
		var valid []string
		for _, m := range fleet.Memberships() {
			valid = append(valid, string(m))
		}
		errs = append(errs, field.NotSupported(p.Child("fleet"), c.Fleet, valid))
	}
	errs = append(errs, validateMaxNoExecute(p.Child("maxNoExecute"), *c.MaxNoExecute)...)
	if c.RatePerMinute < 1 {
		errs = append(errs, field.Invalid(p.Child("ratePerMinute"), c.RatePerMinute, "must be at least 1 (to allow no NoExecute at all, set maxNoExecute: 0)"))
	}
	errs = append(errs, c.GrantTTL.validate(p.Child("grantTTL"), false)...)
	if c.GrantTTL.err == nil && c.GrantTTL.D < 15*time.Second {
		errs = append(errs, field.Invalid(p.Child("grantTTL"), c.GrantTTL.raw, "must be at least 15s (grants are renewed every third of it)"))
	}
	if c.GrantTTL.err == nil && c.GrantTTL.D%time.Second != 0 {
		errs = append(errs, field.Invalid(p.Child("grantTTL"), c.GrantTTL.raw, "must be whole seconds (a Lease's duration is in seconds)"))
	}
	errs = append(errs, c.Guard.validate(p.Child("guard"))...)
	return append(errs, c.Maintenance.validate(p.Child("maintenance"))...)
}

func (m Maintenance) validate(p *field.Path) field.ErrorList {
	errs := validateCountOrPercent(p.Child("maxParallel"), *m.MaxParallel)
	if m.MaxParallelPerZone != nil {
		errs = append(errs, validateCountOrPercent(p.Child("maxParallelPerZone"), *m.MaxParallelPerZone)...)
	}
	return append(errs, validateDeadline(p.Child("defaultDeadline"), m.DefaultDeadline)...)
}

func validateMaxNoExecute(p *field.Path, v intstr.IntOrString) field.ErrorList {
	return validateCountOrPercent(p, v)
}

// validateCountOrPercent checks a number of nodes: a count, or a percent
// of them between 0% and 100%.
func validateCountOrPercent(p *field.Path, v intstr.IntOrString) field.ErrorList {
	if v.Type == intstr.Int {
		if v.IntVal < 0 {
			return field.ErrorList{field.Invalid(p, v.IntVal, "must not be negative")}
		}
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
	if err != nil || !strings.HasSuffix(v.StrVal, "%") || n < 0 || n > 100 {
		return field.ErrorList{field.Invalid(p, v.StrVal, "must be a count (10) or a percent of the nodes (\"10%\") between 0% and 100%")}
	}
	return nil
}

func (g Guard) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(g.Name) {
		errs = append(errs, field.Invalid(p.Child("name"), g.Name, msg))
	}
	errs = append(errs, g.Threshold.validate(p.Child("threshold"), 1, 100)...)
	errs = append(errs, g.ResetMargin.validate(p.Child("resetMargin"), 0, 100)...)
	if g.Threshold.err == nil && g.ResetMargin.err == nil && g.ResetMargin.P > g.Threshold.P {
		errs = append(errs, field.Invalid(p.Child("resetMargin"), g.ResetMargin.raw, fmt.Sprintf("must not exceed threshold (%d%%)", g.Threshold.P)))
	}
	errs = append(errs, g.CoolDown.validate(p.Child("coolDown"), true)...)
	if g.MinNodes < 1 {
		errs = append(errs, field.Invalid(p.Child("minNodes"), g.MinNodes, "must be at least 1"))
	}
	errs = append(errs, g.RenewEvery.validate(p.Child("renewEvery"), false)...)
	errs = append(errs, g.StaleAfter.validate(p.Child("staleAfter"), false)...)
	if g.RenewEvery.err == nil && g.StaleAfter.err == nil && g.StaleAfter.D < 2*g.RenewEvery.D {
		errs = append(errs, field.Invalid(p.Child("staleAfter"), g.StaleAfter.raw,
			fmt.Sprintf("must be at least twice renewEvery (%s), or one late renewal would suspend NoExecute fleet-wide", g.RenewEvery.D)))
	}
	return errs
}

// DefaultCoordinatorNamespace is where the coordinator's objects are when
// neither the config nor the pod's namespace says: selftaint's own
// namespace (deploy/namespace.yaml), never kube-system, whose Leases are
// the control plane's.
const DefaultCoordinatorNamespace = "selftaint"

// NamespaceOr is the namespace of the coordinator's objects: the config's,
// else podNamespace ($POD_NAMESPACE), else DefaultCoordinatorNamespace.
func (c Coordinator) NamespaceOr(podNamespace string) string {
	switch {
	case c.Namespace != "":
		return c.Namespace
	case podNamespace != "":
		return podNamespace
	}
	return DefaultCoordinatorNamespace
}

// NoExecuteOptions tell an agent where its grant and the guard are, in
// namespace (NamespaceOr), read with leases.
func (c *Config) NoExecuteOptions(leases typedcoordv1.LeasesGetter, namespace string) *agent.NoExecuteOptions {
	co := c.Coordinator
	return &agent.NoExecuteOptions{
		Leases: leases, Namespace: namespace, GuardName: co.Guard.Name,
		GrantTTL: co.GrantTTL.D, GuardStaleAfter: co.Guard.StaleAfter.D,
	}
}

// Limiter is the change limiter's settings for the plan; a zero Burst
// means off.
func (c *Config) Limiter() taints.LimiterConfig {
	l := c.ChangeLimiter
	if !l.IsEnabled() {
		return taints.LimiterConfig{}
	}
	return taints.LimiterConfig{Burst: l.Burst, Refill: l.Refill.D, CoolDown: l.CoolDown.D}
}

// Fleet is the coordinator's policy: which Nodes it counts, the budget,
// the rate, the grants' TTL, the guard, which judges every condition a
// rule taints or drains for, in the statuses that apply the rule, and the
// maintenance pool.
func (c *Config) Fleet() fleet.Config {
	co := c.Coordinator
	watched := map[corev1.NodeConditionType][]corev1.ConditionStatus{}
	watch := func(cond corev1.NodeConditionType, applies func(corev1.ConditionStatus) bool) {
		for _, s := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown} {
			if applies(s) && !slices.Contains(watched[cond], s) {
				watched[cond] = append(watched[cond], s)
			}
		}
	}
	for _, r := range c.TaintRules() {
		watch(r.Condition, r.Applies)
	}
	for _, r := range c.DrainRules() {
		watch(r.Condition, r.Applies)
	}
	m := co.Maintenance
	var perZone *intstr.IntOrString
	if m.MaxParallelPerZone != nil {
		v := *m.MaxParallelPerZone
		perZone = &v
	}
	return fleet.Config{
		MaxNoExecute:  *co.MaxNoExecute,
		RatePerMinute: co.RatePerMinute,
		GrantTTL:      co.GrantTTL.D,
		Guard: fleet.GuardConfig{
			Threshold: co.Guard.Threshold.P, ResetMargin: co.Guard.ResetMargin.P,
			CoolDown: co.Guard.CoolDown.D, MinNodes: co.Guard.MinNodes, RenewEvery: co.Guard.RenewEvery.D,
		},
		Watched: watched,
		Members: fleet.Membership(co.Fleet),
		Maintenance: fleet.MaintenanceConfig{
			MaxParallel: *m.MaxParallel, MaxParallelPerZone: perZone, DefaultDeadline: m.DefaultDeadline.D,
		},
	}
}

// Warnings are settings that are valid but risky, each naming its field:
// a NoExecute rule without a fallback effect; a memory stall rule whose
// window the image cannot arm.
func (c *Config) Warnings() []string {
	out := c.Probes.Memory.psiWarnings()
	for i, r := range c.Rules {
		if r.Taint.Effect == corev1.TaintEffectNoExecute && r.Fallback == "" {
			out = append(out, fmt.Sprintf(
				"rules[%d].fallback: not set, so %s uses NoSchedule: while this node holds no NoExecute grant from the coordinator (none running, the budget used up, the disruption guard tripped, or the condition flapping) it gets %s:NoSchedule instead, new pods stay off and running pods stay; set fallback: NoSchedule (or PreferNoSchedule) to say that is what you want",
				i, r.Condition, r.Taint.Key))
		}
	}
	return out
}
