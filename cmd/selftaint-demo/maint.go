package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/taints/fleet"
)

// The drain part's settings.
const (
	gpuCondition = "SelftaintGPUFailure"
	gpuTaintKey  = "selftaint.io/gpu-failure"
	// partLabel is on every pod of the drain part's workloads; homeLabel
	// says which node a workload's pods prefer (and, once there, each
	// other's company).
	partLabel = "demo.selftaint.io/part"
	partValue = "drains"
	homeLabel = "demo.selftaint.io/home"
	// sickFault is how long the GPU fault on the first node lasts: long
	// enough for its drain to finish; when it ends, endWhenHealthy gives
	// the node back.
	sickFault = 30 * time.Second
	// secondFault is how long the second node's GPU fault lasts: past the
	// blocked drain's deadline and its own drain.
	secondFault = 2 * time.Minute
	// blockDeadline is the operator's drain's --deadline: the PDB refuses
	// its pod until then.
	blockDeadline = 20 * time.Second
)

// maintCast is who plays in the drain part: a node whose GPU fails while
// it runs a Deployment and a StatefulSet behind a PodDisruptionBudget; a
// second node whose GPU fails while the pool is held; and a node an
// operator drains whose only pod's PodDisruptionBudget allows no
// disruption.
type maintCast struct {
	sick, second fault
	blocked      string
	deadline     time.Duration
	workloads    []workload
}

func newMaintCast() maintCast {
	return maintCast{
		sick:     fault{"vnode-4", sickFault, "act 3: a GPU fails on a node running a Deployment and a StatefulSet", gpuFault, gpuMessage},
		second:   fault{"vnode-5", secondFault, "act 4: a second GPU fails while the pool is held", gpuFault, gpuMessage},
		blocked:  "vnode-6",
		deadline: blockDeadline,
		workloads: []workload{
			{kind: "Deployment", name: "web", replicas: 2, home: "vnode-4"},
			{kind: "StatefulSet", name: "db", replicas: 2, home: "vnode-4", maxUnavailable: 1},
			{kind: "Deployment", name: "ledger", replicas: 1, home: "vnode-6", minAvailable: 1},
		},
	}
}

// nodes are the drain part's node names, in order.
func (m maintCast) nodes() []string {
	return []string{m.sick.node, m.second.node, m.blocked}
}

// guarded is the workload behind a PodDisruptionBudget that allows a
// disruption: the one whose pods the part counts.
func (m maintCast) guarded() workload {
	i := slices.IndexFunc(m.workloads, func(w workload) bool { return w.maxUnavailable > 0 })
	return m.workloads[i]
}

// refusing is the workload whose PodDisruptionBudget allows no disruption.
func (m maintCast) refusing() workload {
	i := slices.IndexFunc(m.workloads, func(w workload) bool { return w.minAvailable > 0 })
	return m.workloads[i]
}

// workload is one of the drain part's workloads: a Deployment or a
// StatefulSet whose pods prefer node home, with a PodDisruptionBudget
// where maxUnavailable or minAvailable is set.
type workload struct {
	kind, name                   string
	replicas                     int32
	home                         string
	maxUnavailable, minAvailable int
}

// about says what w is, for the timeline.
func (w workload) about() string {
	s := fmt.Sprintf("%s %s/%s, %d replica(s) preferring %s", w.kind, namespace, w.name, w.replicas, w.home)
	switch {
	case w.maxUnavailable > 0:
		s += fmt.Sprintf(", behind PodDisruptionBudget %s (maxUnavailable: %d)", w.name, w.maxUnavailable)
	case w.minAvailable > 0:
		s += fmt.Sprintf(", behind PodDisruptionBudget %s (minAvailable: %d: it allows no disruption)", w.name, w.minAvailable)
	}
	return s
}

func (w workload) labels() map[string]string {
	return map[string]string{"app": w.name, partLabel: partValue, homeLabel: w.home}
}

// template is w's pods: they prefer its home node, and nodes that run
// pods with the same home (so the scheduler puts them all there, and
// puts the replacements of evicted ones together elsewhere).
func (w workload) template() corev1.PodTemplateSpec {
	hostIs := corev1.NodeSelectorRequirement{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{w.home}}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: w.labels()},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/" + w.name + ":1"}},
			Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
					{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{hostIs}}},
				}},
				PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
					{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{homeLabel: w.home}},
						TopologyKey:   corev1.LabelHostname,
					}},
				}},
			},
		},
	}
}

// create creates w and its PodDisruptionBudget.
func (d *demo) createWorkload(ctx context.Context, w workload) error {
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}}
	meta := metav1.ObjectMeta{Namespace: namespace, Name: w.name}
	var err error
	if w.kind == "StatefulSet" {
		_, err = d.client.AppsV1().StatefulSets(namespace).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(w.replicas), Selector: selector, ServiceName: w.name, Template: w.template(),
		}}, metav1.CreateOptions{})
	} else {
		_, err = d.client.AppsV1().Deployments(namespace).Create(ctx, &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(w.replicas), Selector: selector, Template: w.template(),
		}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating %s %s: %w", w.kind, w.name, err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: meta, Spec: policyv1.PodDisruptionBudgetSpec{Selector: selector}}
	switch {
	case w.maxUnavailable > 0:
		pdb.Spec.MaxUnavailable = ptr.To(intstr.FromInt(w.maxUnavailable))
	case w.minAvailable > 0:
		pdb.Spec.MinAvailable = ptr.To(intstr.FromInt(w.minAvailable))
	default:
		return nil
	}
	if _, err := d.client.PolicyV1().PodDisruptionBudgets(namespace).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating PodDisruptionBudget %s: %w", w.name, err)
	}
	return nil
}

// createWorkloads creates the drain part's workloads and waits for their
// pods to run, each on its workload's home node.
func (d *demo) createWorkloads(ctx context.Context) error {
	for _, w := range d.cast.maint.workloads {
		if err := d.createWorkload(ctx, w); err != nil {
			return err
		}
		d.log.say("%s", w.about())
	}
	var misplaced []string
	err := poll(ctx, 2*time.Minute, func() (bool, error) {
		pods, err := d.partPods(ctx)
		if err != nil {
			return false, err
		}
		want := map[string]int{}
		for _, w := range d.cast.maint.workloads {
			want[w.name] = int(w.replicas)
		}
		misplaced = nil
		for _, p := range pods {
			if !podReady(&p) {
				continue
			}
			want[p.Labels["app"]]--
			if p.Spec.NodeName != p.Labels[homeLabel] {
				misplaced = append(misplaced, fmt.Sprintf("%s on %s", p.Name, p.Spec.NodeName))
			}
		}
		for _, n := range want {
			if n > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the drain part's pods to run: %w", err)
	}
	if len(misplaced) > 0 {
		return fmt.Errorf("kube-scheduler put the drain part's pods elsewhere than the nodes they prefer: %s", strings.Join(misplaced, ", "))
	}
	d.log.say("their pods are Running on the nodes they prefer")
	return nil
}

// partPods are the drain part's pods, sorted by name.
func (d *demo) partPods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := d.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{partLabel: partValue}.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the drain part's pods: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// podReady reports whether p counts as available: Ready and not being
// deleted (as the disruption controller counts it healthy).
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// maintScript is the drain part's cues: act 3 injects the GPU fault on
// the sick node; once it is Drained, act 4 has an operator drain the
// blocked node with a short deadline; once that holds the slot, the
// second node's GPU fails too, and waits; the nodes as kubectl sees them,
// explain on the waiting node, then `drain --wait` follows the blocked
// drain to its deadline, and `drain --done` ends it.
func (d *demo) maintScript() []cue {
	m := d.cast.maint
	sick, second, blocked := m.sick.node, m.second.node, m.blocked
	ref := m.refusing()
	return []cue{
		{
			waitsFor: "nothing",
			ready:    func(*view) bool { return true },
			header: fmt.Sprintf("Act 3: a sick-node drain. GPU 0 of %s fails (a fault lasting %s); its rule says action: drain. Its agent asks for a drain; the coordinator gives it the pool's slot, cordons it and evicts its pods through the Eviction API, as their PodDisruptionBudgets allow.",
				sick, m.sick.lasts),
			fault: &m.sick,
		},
		{
			waitsFor: sick + " to be Drained",
			ready:    func(v *view) bool { return !v.maint.nodes[sick].drained.IsZero() },
			header: fmt.Sprintf("Act 4: the pool and a drain that cannot finish. An operator drains %s for an upgrade, with a %s deadline; its only pod, of %s, is behind a PodDisruptionBudget that allows no disruption:",
				blocked, m.deadline, ref.name),
			args: []string{"drain", blocked, "--reason=kernel upgrade", "--deadline=" + m.deadline.String()},
		},
		{
			waitsFor: blocked + " to hold the slot",
			ready:    func(v *view) bool { return !v.maint.nodes[blocked].draining.IsZero() },
			header:   fmt.Sprintf("%s holds the pool's only slot (maxParallel: 1). Now GPU 0 of %s fails too (for %s):", blocked, second, m.second.lasts),
			fault:    &m.second,
		},
		{
			waitsFor: second + " to wait for the slot",
			ready:    func(v *view) bool { return !v.maint.nodes[second].waiting.IsZero() },
			header:   fmt.Sprintf("%s waits in line. The nodes as kubectl get nodes shows them, with their SelftaintMaintenance condition:", second),
			show:     d.nodesTable,
		},
		{
			waitsFor: "nothing",
			ready:    func(*view) bool { return true },
			header:   fmt.Sprintf("What does explain say of %s?", second),
			explain:  second,
		},
		{
			waitsFor: "nothing",
			ready:    func(*view) bool { return true },
			header:   fmt.Sprintf("Follow %s's drain to its deadline (its output comes live, marked |):", blocked),
			follow:   []string{"drain", "--wait", blocked},
		},
		{
			waitsFor: blocked + "'s drain to end",
			ready:    func(v *view) bool { return !v.maint.nodes[blocked].ended.IsZero() },
			header:   fmt.Sprintf("%s's drain was given back at its deadline. The operator ends its maintenance:", blocked),
			args:     []string{"drain", "--done", blocked},
		},
	}
}

// maintOver reports whether the drain part has shown what it is for: the
// sick node drained and given back once healthy, the blocked node's drain
// ended, the second node drained.
func maintOver(m maintCast) func(v *view) bool {
	return func(v *view) bool {
		s, b, w := v.maint.nodes[m.sick.node], v.maint.nodes[m.blocked], v.maint.nodes[m.second.node]
		return !s.ended.IsZero() && !b.ended.IsZero() && !w.drained.IsZero()
	}
}

// maintStalled says what the drain part still waits for.
func maintStalled(m maintCast) func(v *view) string {
	return func(v *view) string {
		switch {
		case v.maint.nodes[m.blocked].ended.IsZero():
			return m.blocked + "'s drain has not ended"
		case v.maint.nodes[m.second.node].drained.IsZero():
			return m.second.node + " is not Drained"
		case v.maint.nodes[m.sick.node].ended.IsZero():
			return m.sick.node + "'s maintenance has not ended (its fault lasts " + m.sick.lasts.String() + ")"
		}
		return "a command still running"
	}
}

// maintPart runs the drain part on v.
func (d *demo) maintPart(ctx context.Context, v *view) error {
	d.log.plain("")
	d.log.plain("Part 2: maintenance drains, one node at a time (coordinator.maintenance.maxParallel: 1), through the Eviction API.")
	pods, err := d.partPods(ctx)
	if err != nil {
		return err
	}
	d.log.say("the pods the drains will move:")
	for _, p := range pods {
		d.log.plain(fmt.Sprintf("%spod %s/%s on %s (%s)", indent, namespace, p.Name, p.Spec.NodeName, ownerText(&p)))
	}
	if err := v.startMaint(ctx, d, pods, time.Now()); err != nil {
		return err
	}
	defer v.maint.stop()
	m := d.cast.maint
	return d.play(ctx, v, stage{
		cues:    d.maintScript(),
		over:    maintOver(m),
		stalled: maintStalled(m),
		timeout: m.sick.lasts + m.deadline + 2*time.Minute,
	})
}

// withoutRequest is a SelftaintMaintenance message without the request
// it ends with (" (request ID: reason by who)"), for a table.
func withoutRequest(msg string) string {
	s, _, _ := strings.Cut(msg, " (request ")
	return s
}

// ownerText names p's controller kind and workload ("Deployment web").
func ownerText(p *corev1.Pod) string {
	ref := metav1.GetControllerOf(p)
	switch {
	case ref == nil:
		return "no controller"
	case ref.Kind == "ReplicaSet":
		return "Deployment " + p.Labels["app"]
	}
	return ref.Kind + " " + ref.Name
}

// nodesTable is the nodes as `kubectl get nodes` shows them, with their
// SelftaintMaintenance condition.
func (d *demo) nodesTable(ctx context.Context) ([]string, error) {
	nodes, err := d.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	rows := [][]string{{"NAME", "STATUS", fmt.Sprint(fleet.MaintenanceCondition)}}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		status := "NotReady"
		if conditionStatus(n, corev1.NodeReady) == corev1.ConditionTrue {
			status = "Ready"
		}
		if n.Spec.Unschedulable {
			status += ",SchedulingDisabled"
		}
		maint := ""
		if c := maintenanceCondition(n); c != nil {
			maint = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, withoutRequest(c.Message))
		}
		rows = append(rows, []string{n.Name, status, maint})
	}
	lines := tableLines(rows)
	for i, l := range lines {
		lines[i] = indent + l
	}
	return lines, nil
}
