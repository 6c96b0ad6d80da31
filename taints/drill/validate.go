package drill

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// The defaults SetDefaults fills.
const (
	DefaultTimeout                = 10 * time.Minute
	DefaultSettle                 = 5 * time.Second
	DefaultNodeMonitorGracePeriod = 20 * time.Second
	DefaultCoordinatorReplicas    = 1
	DefaultWaitTimeout            = 2 * time.Minute
	DefaultTolerance              = 10 * time.Second
	DefaultEvictMin               = 1
)

// Step kinds, as StepRecord.Kind and StepReport.Kind name them.
const (
	StepFault       = "fault"
	StepNotReady    = "notReady"
	StepDrain       = "drain"
	StepCoordinator = "coordinator"
	StepWaitFor     = "waitFor"
)

// Expectation kinds, as Result.Kind names them.
const (
	KindReady       = "ready"
	KindPDB         = "pdb"
	KindEvicted     = "evicted"
	KindNotEvicted  = "notEvicted"
	KindNoExecute   = "noExecute"
	KindExplain     = "explain"
	KindGuard       = "guard"
	KindMaintenance = "maintenance"
)

// The DisruptionTarget reasons an evicted or notEvicted expectation may
// name that k8s.io/api/core/v1 has no constant for; each is written by
// one component of kubernetes v1.35 (the file that sets it named).
const (
	// ReasonEvictionAPI: the Eviction API (the pods/eviction
	// subresource: drains, `kubectl drain`), in
	// pkg/registry/core/pod/storage/eviction.go.
	ReasonEvictionAPI = "EvictionByEvictionAPI"
	// ReasonTaintManager: the taint-eviction controller (a NoExecute
	// taint the pod does not tolerate), in
	// pkg/controller/tainteviction/taint_eviction.go.
	ReasonTaintManager = "DeletionByTaintManager"
	// ReasonPodGC: the pod garbage collector (an orphan pod, or one on an
	// out-of-service node), in pkg/controller/podgc/gc_controller.go.
	ReasonPodGC = "DeletionByPodGC"
	// ReasonDeviceTaintManager: the device-taint eviction controller
	// (DRA), in pkg/controller/devicetainteviction.
	ReasonDeviceTaintManager = "DeletionByDeviceTaintManager"
)

// EvictionReasons are the DisruptionTarget reasons an expectation's
// reason may name: the four above and core/v1's
// PodReasonPreemptionByScheduler and PodReasonTerminationByKubelet.
func EvictionReasons() []string {
	return []string{
		ReasonEvictionAPI, ReasonTaintManager, ReasonPodGC, ReasonDeviceTaintManager,
		corev1.PodReasonPreemptionByScheduler, corev1.PodReasonTerminationByKubelet,
	}
}

// SlotReasons are the reasons of selftaint's maintenance condition, while
// True, of a node that takes one of the maintenance pool's slots
// (coordinator.maintenance.maxParallel), as the coordinator counts them
// (taints/fleet pool.go: a slot whose node is Drained does not count, its
// pods have moved): Draining when it takes the slot and cordons
// (startSlot), Draining or DrainBlocked while the drain runs or is refused
// and retries (followDrain). Drained (still cordoned, its pods gone),
// Waiting (in line) and the condition False (Released, or DrainBlocked
// given back at the deadline) take none.
func SlotReasons() []string {
	return []string{fleet.ReasonDraining, fleet.ReasonDrainBlocked}
}

// workloadKinds are the kinds a WorkloadRef may name.
func workloadKinds() []string {
	return []string{"Deployment", "StatefulSet", "ReplicaSet", "Job", "DaemonSet"}
}

// maintenanceStates are the reasons of selftaint's maintenance condition
// a waitFor may wait for.
func maintenanceStates() []string {
	return []string{
		fleet.ReasonMaintenanceWaiting, fleet.ReasonDraining, fleet.ReasonDrained,
		fleet.ReasonDrainBlocked, fleet.ReasonReleased,
	}
}

func conditionStatuses() []string { return []string{"True", "False", "Unknown"} }

// SetDefaults fills what the file left out: Timeout 10m, Settle 5s, step
// names "step-N" (1-based), coordinator replicas 1, nodeMonitorGracePeriod
// 20s, a fault's and a waitFor condition's status "True", waitFor timeout
// 2m, evicted's min 1, explain's tolerance 10s.
func (s *Scenario) SetDefaults() {
	defaultDuration(&s.Timeout, DefaultTimeout)
	defaultDuration(&s.Settle, DefaultSettle)
	defaultDuration(&s.Cluster.NodeMonitorGracePeriod, DefaultNodeMonitorGracePeriod)
	if s.Cluster.Coordinator.Replicas == nil {
		n := DefaultCoordinatorReplicas
		s.Cluster.Coordinator.Replicas = &n
	}
	for i := range s.Steps {
		st := &s.Steps[i]
		if st.Name == "" {
			st.Name = fmt.Sprintf("step-%d", i+1)
		}
		if st.Fault != nil && st.Fault.Status == "" {
			st.Fault.Status = "True"
		}
		if w := st.WaitFor; w != nil {
			defaultDuration(&w.Timeout, DefaultWaitTimeout)
			if w.Condition != nil && w.Condition.Status == "" {
				w.Condition.Status = "True"
			}
		}
	}
	for i := range s.Expect {
		e := &s.Expect[i]
		if e.Evicted != nil && e.Evicted.Min == 0 {
			e.Evicted.Min = DefaultEvictMin
		}
		if e.Explain != nil {
			defaultDuration(&e.Explain.Tolerance, DefaultTolerance)
		}
	}
}

func defaultDuration(d *Duration, v time.Duration) {
	if d.IsZero() {
		d.Duration = v
	}
}

// StepKind is the kind of the step's one action ("" when it has none).
func (st *Step) StepKind() string {
	kinds := st.kinds()
	if len(kinds) == 0 {
		return ""
	}
	return kinds[0]
}

func (st *Step) kinds() []string {
	var k []string
	for _, a := range []struct {
		name string
		set  bool
	}{
		{StepFault, st.Fault != nil}, {StepNotReady, st.NotReady != nil}, {StepDrain, st.Drain != nil},
		{StepCoordinator, st.Coordinator != nil}, {StepWaitFor, st.WaitFor != nil},
	} {
		if a.set {
			k = append(k, a.name)
		}
	}
	return k
}

// ExpectKind is the kind of the expectation ("" when it has none).
func (e *Expectation) ExpectKind() string {
	kinds := e.kinds()
	if len(kinds) == 0 {
		return ""
	}
	return kinds[0]
}

func (e *Expectation) kinds() []string {
	var k []string
	for _, a := range []struct {
		name string
		set  bool
	}{
		{KindReady, e.Ready != nil}, {KindPDB, e.PDB != nil}, {KindEvicted, e.Evicted != nil},
		{KindNotEvicted, e.NotEvicted != nil}, {KindNoExecute, e.NoExecute != nil}, {KindExplain, e.Explain != nil},
		{KindGuard, e.Guard != nil}, {KindMaintenance, e.Maintenance != nil},
	} {
		if a.set {
			k = append(k, a.name)
		}
	}
	return k
}

// validator collects field errors in the order of the file.
type validator struct {
	s    *Scenario
	errs []FieldErr
	// steps maps each step's name to its kind.
	steps map[string]string
}

func (v *validator) add(p *field.Path, format string, args ...any) {
	v.errs = append(v.errs, FieldErr{Path: p.String(), Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) duration(p *field.Path, d Duration, allowZero bool) {
	if msg := d.check(allowZero); msg != "" {
		v.add(p, "%s", msg)
	}
}

// Validate checks everything that can be checked without a cluster (the
// agents' config, cluster.config, is the runner's to check: see
// ConfigError). Run it after SetDefaults; each error names its field path.
func (s *Scenario) Validate() []FieldErr {
	v := &validator{s: s, steps: map[string]string{}}
	v.header()
	v.cluster(field.NewPath("cluster"))
	for i, w := range s.Workloads {
		v.workload(field.NewPath("workloads").Index(i), w)
	}
	if len(s.Steps) == 0 {
		v.add(field.NewPath("steps"), "at least one step is required")
	}
	for i := range s.Steps {
		v.step(field.NewPath("steps").Index(i), &s.Steps[i])
	}
	if len(s.Expect) == 0 {
		v.add(field.NewPath("expect"), "at least one expectation is required")
	}
	names := map[string]bool{}
	for i := range s.Expect {
		p := field.NewPath("expect").Index(i)
		e := &s.Expect[i]
		if e.Name != "" && names[e.Name] {
			v.add(p.Child("name"), "%q names another expectation too", e.Name)
		}
		names[e.Name] = true
		v.expectation(p, e)
	}
	v.duration(field.NewPath("timeout"), s.Timeout, false)
	v.duration(field.NewPath("settle"), s.Settle, true)
	return v.errs
}

func (v *validator) header() {
	s := v.s
	switch {
	case s.APIVersion == "":
		v.add(field.NewPath("apiVersion"), "required: %s", APIVersion)
	case s.APIVersion != APIVersion:
		v.add(field.NewPath("apiVersion"), "%q is not supported; supported: %s", s.APIVersion, APIVersion)
	}
	if s.Kind != Kind {
		v.add(field.NewPath("kind"), "%q: must be %s", s.Kind, Kind)
	}
	if s.Name == "" {
		v.add(field.NewPath("name"), "required")
	} else {
		v.dns1123Label(field.NewPath("name"), s.Name)
	}
}

func (v *validator) dns1123Label(p *field.Path, s string) {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		v.add(p, "%q: %s", s, strings.Join(errs, "; "))
	}
}

func (v *validator) cluster(p *field.Path) {
	c := &v.s.Cluster
	if len(c.Pools) == 0 && c.RealNodes == "" {
		v.add(p, "no nodes: give pools of virtual nodes (or realNodes, with --kubeconfig)")
	}
	seen := map[string]bool{}
	for i, pool := range c.Pools {
		pp := p.Child("pools").Index(i)
		if seen[pool.Name] {
			v.add(pp.Child("name"), "%q names another pool too", pool.Name)
		}
		seen[pool.Name] = true
		v.pool(pp, pool)
	}
	if c.RealNodes != "" {
		v.selector(p.Child("realNodes"), c.RealNodes)
	}
	if r := c.Coordinator.Replicas; r != nil && *r < 0 {
		v.add(p.Child("coordinator", "replicas"), "%d must not be negative", *r)
	}
	v.duration(p.Child("nodeMonitorGracePeriod"), c.NodeMonitorGracePeriod, false)
}

func (v *validator) pool(p *field.Path, pool Pool) {
	if pool.Name == "" {
		v.add(p.Child("name"), "required")
	} else {
		v.dns1123Label(p.Child("name"), pool.Name)
	}
	if pool.Count < 1 {
		v.add(p.Child("count"), "must be at least 1")
	}
	for k, val := range pool.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			v.add(p.Child("labels").Key(k), "key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(val); len(errs) > 0 {
			v.add(p.Child("labels").Key(k), "value %q: %s", val, strings.Join(errs, "; "))
		}
	}
	for name, q := range pool.Capacity {
		if errs := validation.IsQualifiedName(string(name)); len(errs) > 0 {
			v.add(p.Child("capacity").Key(string(name)), "resource name %q: %s", name, strings.Join(errs, "; "))
		}
		if q.Sign() < 0 {
			v.add(p.Child("capacity").Key(string(name)), "%s must not be negative", q.String())
		}
	}
	for i, t := range pool.Taints {
		if _, err := taints.ParseTaint(t); err != nil {
			v.add(p.Child("taints").Index(i), "%v", err)
		}
	}
}

func (v *validator) selector(p *field.Path, s string) {
	if _, err := labels.Parse(s); err != nil {
		v.add(p, "label selector %q: %v", s, err)
	}
}

func (v *validator) workload(p *field.Path, w Workload) {
	switch {
	case (w.File == "") == (w.Manifest == ""):
		v.add(p, "exactly one of file and manifest")
	case w.Manifest != "":
		if msg := checkManifest([]byte(w.Manifest)); msg != "" {
			v.add(p.Child("manifest"), "%s", msg)
		}
	}
}

func (v *validator) step(p *field.Path, st *Step) {
	if _, dup := v.steps[st.Name]; dup {
		v.add(p.Child("name"), "%q names another step too", st.Name)
	}
	kinds := st.kinds()
	switch len(kinds) {
	case 0:
		v.add(p, "no action: exactly one of fault, notReady, drain, coordinator, waitFor")
	case 1:
	default:
		v.add(p, "exactly one of fault, notReady, drain, coordinator, waitFor (got %s)", strings.Join(kinds, ", "))
	}
	if _, dup := v.steps[st.Name]; !dup {
		v.steps[st.Name] = st.StepKind()
	}
	if st.At != nil {
		v.duration(p.Child("at"), *st.At, true)
	}
	switch {
	case st.Fault != nil:
		v.fault(p.Child("fault"), st.Fault)
	case st.NotReady != nil:
		v.nodes(p.Child("notReady"), st.NotReady.Nodes, true)
		v.duration(p.Child("notReady", "for"), st.NotReady.For, false)
	case st.Drain != nil:
		v.drain(p.Child("drain"), st.Drain)
	case st.Coordinator != nil:
		v.coordinator(p.Child("coordinator"), st.Coordinator)
	case st.WaitFor != nil:
		v.waitFor(p.Child("waitFor"), st.WaitFor)
	}
}

// nodes checks a pick: names or a selector; names must be the drill's
// virtual nodes (<pool>-<i>), or, with realNodes and unless virtualOnly,
// node names.
func (v *validator) nodes(p *field.Path, n Nodes, virtualOnly bool) {
	if len(n.Names) == 0 && n.Selector == "" {
		v.add(p, "no nodes: give nodes (names) or selector")
	}
	for i, name := range n.Names {
		if ok, badPool := v.poolNode(name); ok || badPool {
			continue // a bad pool is reported as such
		}
		if v.s.Cluster.RealNodes != "" && !virtualOnly {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				v.add(p.Child("nodes").Index(i), "%q: %s", name, strings.Join(errs, "; "))
			}
			continue
		}
		v.add(p.Child("nodes").Index(i), "%q is not one of the drill's virtual nodes (%s)", name, v.poolRanges())
	}
	if n.Selector != "" {
		v.selector(p.Child("selector"), n.Selector)
	}
}

// poolNode reports whether name is <pool>-<i> with 1 <= i <= count, and
// whether it names a pool whose count is itself wrong.
func (v *validator) poolNode(name string) (ok, badPool bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return false, false
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || strconv.Itoa(n) != name[i+1:] {
		return false, false
	}
	for _, pool := range v.s.Cluster.Pools {
		if pool.Name == name[:i] {
			return n >= 1 && n <= pool.Count, pool.Count < 1
		}
	}
	return false, false
}

func (v *validator) poolRanges() string {
	var r []string
	for _, pool := range v.s.Cluster.Pools {
		if pool.Count >= 1 {
			r = append(r, fmt.Sprintf("%s-1..%s-%d", pool.Name, pool.Name, pool.Count))
		}
	}
	if len(r) == 0 {
		return "it has none"
	}
	return strings.Join(r, ", ")
}

func (v *validator) fault(p *field.Path, f *FaultStep) {
	v.nodes(p, f.Nodes, false)
	switch {
	case (f.Condition == "") == (f.GPUXid == 0):
		v.add(p, "exactly one of condition and gpuXid")
	case f.GPUXid < 0:
		v.add(p.Child("gpuXid"), "%d must be a positive Xid number", f.GPUXid)
	case f.Condition != "":
		if errs := validation.IsQualifiedName(f.Condition); len(errs) > 0 {
			v.add(p.Child("condition"), "%q: %s", f.Condition, strings.Join(errs, "; "))
		}
	}
	v.status(p.Child("status"), f.Status)
	v.duration(p.Child("for"), f.For, false)
}

func (v *validator) status(p *field.Path, s string) {
	if !slices.Contains(conditionStatuses(), s) {
		v.add(p, "%q: must be one of %s", s, strings.Join(conditionStatuses(), ", "))
	}
}

func (v *validator) drain(p *field.Path, d *DrainStep) {
	v.nodes(p, d.Nodes, false)
	if strings.TrimSpace(d.Reason) == "" {
		v.add(p.Child("reason"), "required: why the nodes are drained")
	}
	v.duration(p.Child("deadline"), d.Deadline, true)
	if d.MaxParallel < 0 {
		v.add(p.Child("maxParallel"), "%d must not be negative", d.MaxParallel)
	}
	switch d.OnDeadline {
	case "", fleet.OnDeadlineRelease, fleet.OnDeadlineForce:
	default:
		v.add(p.Child("onDeadline"), "%q: must be %s or %s", d.OnDeadline, fleet.OnDeadlineRelease, fleet.OnDeadlineForce)
	}
}

func (v *validator) coordinator(p *field.Path, c *CoordinatorStep) {
	if r := v.s.Cluster.Coordinator.Replicas; r != nil && *r == 0 {
		v.add(p, "cluster.coordinator.replicas is 0: there is no coordinator to %s", c.Action)
	}
	switch c.Action {
	case "kill":
		v.duration(p.Child("for"), c.For, true)
	case "pause":
		v.duration(p.Child("for"), c.For, false)
	default:
		v.add(p.Child("action"), "%q: must be kill or pause", c.Action)
	}
}

func (v *validator) waitFor(p *field.Path, w *WaitStep) {
	var set []string
	for _, c := range []struct {
		name string
		set  bool
	}{{"condition", w.Condition != nil}, {"taint", w.Taint != nil}, {"maintenance", w.Maintenance != ""}, {"workload", w.Workload != nil}} {
		if c.set {
			set = append(set, c.name)
		}
	}
	if len(set) != 1 {
		v.add(p, "exactly one of condition, taint, maintenance, workload (got %d)", len(set))
	}
	switch {
	case w.Workload != nil:
		if len(w.Names) > 0 || w.Selector != "" {
			v.add(p, "nodes and selector are not for a workload")
		}
		v.workloadRef(p.Child("workload"), *w.Workload)
	case len(set) > 0:
		v.nodes(p, w.Nodes, false)
	}
	if c := w.Condition; c != nil {
		if c.Type == "" {
			v.add(p.Child("condition", "type"), "required")
		}
		v.status(p.Child("condition", "status"), c.Status)
	}
	if t := w.Taint; t != nil {
		v.taintKey(p.Child("taint", "key"), t.Key)
		if t.Effect != "" && !slices.Contains(taintEffects(), corev1.TaintEffect(t.Effect)) {
			v.add(p.Child("taint", "effect"), "%q: must be one of NoSchedule, PreferNoSchedule, NoExecute", t.Effect)
		}
	}
	if w.Maintenance != "" && !slices.Contains(maintenanceStates(), w.Maintenance) {
		v.add(p.Child("maintenance"), "%q: must be one of %s", w.Maintenance, strings.Join(maintenanceStates(), ", "))
	}
	v.duration(p.Child("timeout"), w.Timeout, false)
}

func taintEffects() []corev1.TaintEffect {
	return []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
}

func (v *validator) taintKey(p *field.Path, k string) {
	if k == "" {
		v.add(p, "required")
		return
	}
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		v.add(p, "%q: %s", k, strings.Join(errs, "; "))
	}
}

func (v *validator) workloadRef(p *field.Path, w WorkloadRef) {
	if !slices.Contains(workloadKinds(), w.Kind) {
		v.add(p.Child("kind"), "%q: must be one of %s", w.Kind, strings.Join(workloadKinds(), ", "))
	}
	if w.Name == "" {
		v.add(p.Child("name"), "required")
	} else if errs := validation.IsDNS1123Subdomain(w.Name); len(errs) > 0 {
		v.add(p.Child("name"), "%q: %s", w.Name, strings.Join(errs, "; "))
	}
	if w.Namespace != "" {
		v.dns1123Label(p.Child("namespace"), w.Namespace)
	}
}

func (v *validator) after(p *field.Path, name string) {
	if name == "" {
		return
	}
	if _, ok := v.steps[name]; !ok {
		v.add(p, "no step named %q", name)
	}
}

func (v *validator) expectation(p *field.Path, e *Expectation) {
	kinds := e.kinds()
	all := strings.Join(expectKinds(), ", ")
	switch len(kinds) {
	case 0:
		v.add(p, "no expectation: exactly one of %s", all)
	case 1:
	default:
		v.add(p, "exactly one of %s (got %s)", all, strings.Join(kinds, ", "))
	}
	switch {
	case e.Ready != nil:
		r := e.Ready
		v.workloadRef(p.Child("ready", "workload"), r.Workload)
		v.duration(p.Child("ready", "within"), r.Within, false)
		v.after(p.Child("ready", "after"), r.After)
	case e.PDB != nil:
		v.pdb(p.Child("pdb"), e.PDB)
	case e.Evicted != nil:
		v.evict(p.Child("evicted"), e.Evicted, true)
	case e.NotEvicted != nil:
		v.evict(p.Child("notEvicted"), e.NotEvicted, false)
	case e.NoExecute != nil:
		v.noExecute(p.Child("noExecute"), e.NoExecute)
	case e.Explain != nil:
		v.explain(p.Child("explain"), e.Explain)
	case e.Guard != nil:
		v.guard(p.Child("guard"), e.Guard)
	case e.Maintenance != nil:
		if e.Maintenance.AtMost < 0 {
			v.add(p.Child("maintenance", "atMost"), "%d must not be negative", e.Maintenance.AtMost)
		}
	}
}

// expectKinds are the expectation kinds, in the order of the format.
func expectKinds() []string {
	return []string{KindReady, KindPDB, KindEvicted, KindNotEvicted, KindNoExecute, KindExplain, KindGuard, KindMaintenance}
}

func (v *validator) pdb(p *field.Path, e *PDBExpect) {
	if e.Name != "" {
		if errs := validation.IsDNS1123Subdomain(e.Name); len(errs) > 0 {
			v.add(p.Child("name"), "%q: %s", e.Name, strings.Join(errs, "; "))
		}
	}
	if e.Namespace != "" {
		v.dns1123Label(p.Child("namespace"), e.Namespace)
	}
}

func (v *validator) guard(p *field.Path, g *GuardExpect) {
	if g.Tripped == nil {
		v.add(p.Child("tripped"), "required: true (tripped at some moment) or false (never)")
	}
	if r := v.s.Cluster.Coordinator.Replicas; r != nil && *r == 0 && v.s.Cluster.RealNodes == "" {
		v.add(p, "cluster.coordinator.replicas is 0: no coordinator writes the guard")
	}
	if g.Condition != "" {
		if errs := validation.IsQualifiedName(g.Condition); len(errs) > 0 {
			v.add(p.Child("condition"), "%q: %s", g.Condition, strings.Join(errs, "; "))
		}
	}
	if g.Zone != "" && g.Zone != fleet.FleetScope {
		if errs := validation.IsValidLabelValue(g.Zone); len(errs) > 0 {
			v.add(p.Child("zone"), "%q: a zone name (a label value) or %q for the fleet-wide scope: %s", g.Zone, fleet.FleetScope, strings.Join(errs, "; "))
		}
	}
}

func (v *validator) evict(p *field.Path, e *EvictExpect, evicted bool) {
	if e.Selector == "" {
		v.add(p.Child("selector"), "required: a label selector of the pods")
	} else {
		v.selector(p.Child("selector"), e.Selector)
	}
	if e.Namespace != "" {
		v.dns1123Label(p.Child("namespace"), e.Namespace)
	}
	switch {
	case !evicted && e.Min != 0:
		v.add(p.Child("min"), "only for evicted")
	case e.Min < 0:
		v.add(p.Child("min"), "%d must not be negative", e.Min)
	}
	if e.Reason != "" && !slices.Contains(EvictionReasons(), e.Reason) {
		v.add(p.Child("reason"), "%q: must be one of %s", e.Reason, strings.Join(EvictionReasons(), ", "))
	}
	v.after(p.Child("after"), e.After)
}

func (v *validator) noExecute(p *field.Path, n *NoExecuteExpect) {
	if n.AtMost < 0 {
		v.add(p.Child("atMost"), "%d must not be negative", n.AtMost)
	}
	for i, k := range n.Keys {
		v.taintKey(p.Child("keys").Index(i), k)
	}
}

func (v *validator) explain(p *field.Path, e *ExplainExpect) {
	kind, ok := v.steps[e.Step]
	switch {
	case e.Step == "":
		v.add(p.Child("step"), "required: the fault step whose predictions are checked")
	case !ok:
		v.add(p.Child("step"), "no step named %q", e.Step)
	case kind != StepFault:
		v.add(p.Child("step"), "step %q is a %s step; explain's predictions are taken for fault steps", e.Step, kind)
	}
	v.duration(p.Child("tolerance"), e.Tolerance, true)
}
