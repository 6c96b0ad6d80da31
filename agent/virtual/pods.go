package virtual

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// pods runs one virtual node's pods as far as the API can tell: a pod bound
// to the node goes Running with every container started and ready; a pod
// being deleted stops at once, its terminal status (containers terminated)
// is written, and it is removed from the API server as a kubelet does once
// a pod's containers have exited, so an eviction finishes instead of
// hanging in Terminating for the grace period. Like the kubelet's status
// manager it owns only the kubelet's pod conditions: the others
// (DisruptionTarget from an eviction, a readiness gate's) stay as the API
// has them. It implements virtual-kubelet's PodLifecycleHandler and
// PodNotifier.
type pods struct {
	node   string
	hostIP string
	clock  clock.PassiveClock
	// podIP hands out pod IPs from the node's range.
	podIP func() string
	api   podAPI
	// optIn is the taints a pod must tolerate by key to run here
	// (NodeTemplate.OptIn, OptedIn).
	optIn []corev1.Taint

	mu     sync.Mutex             // guards the fields below
	byKey  map[string]*corev1.Pod // namespace/name -> the pod as we run it
	notify func(*corev1.Pod)
}

func newPods(node, hostIP string, podIP func() string, api podAPI, c clock.PassiveClock) *pods {
	return &pods{node: node, hostIP: hostIP, podIP: podIP, api: api, clock: c, byKey: map[string]*corev1.Pod{}}
}

// podAPI is what pods writes to the API server itself. The running
// statuses go through the pod controller (NotifyPods); a stopped pod's
// terminal status is written here, before the pod is removed, because the
// pod controller writes asynchronously: its write would race the removal
// (a 409 on the grace-period update, or a write after the pod is gone).
type podAPI struct {
	// report writes status(the pod as the API has it now) as the pod's
	// status, unless the pod is gone or was replaced. status sees the whole
	// pod it applies to (the one read again after a conflict): its phase,
	// deletionTimestamp and UID may have changed since pod was read.
	report func(ctx context.Context, pod *corev1.Pod, status func(*corev1.Pod) corev1.PodStatus) error
	// remove deletes a stopped pod from the API server.
	remove func(ctx context.Context, pod *corev1.Pod) error
	// list reads the node's pods.
	list func(ctx context.Context) ([]corev1.Pod, error)
}

// apiWith is node's podAPI through client.
func apiWith(client typedcorev1.PodsGetter, node string) podAPI {
	return podAPI{report: reportWith(client), remove: removeWith(client), list: func(ctx context.Context) ([]corev1.Pod, error) {
		l, err := client.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			return nil, fmt.Errorf("listing the pods of virtual node %s: %w", node, err)
		}
		return l.Items, nil
	}}
}

// reportWith writes a pod's status by read-modify-write: first onto pod as
// the pod controller handed it, then, on a conflict, onto the pod read
// again, so a condition someone else set meanwhile is kept. It reads with
// list (the verb the informers use; selftaint-virtual may not get pods).
func reportWith(client typedcorev1.PodsGetter) func(context.Context, *corev1.Pod, func(*corev1.Pod) corev1.PodStatus) error {
	return func(ctx context.Context, pod *corev1.Pod, status func(*corev1.Pod) corev1.PodStatus) error {
		pods := client.Pods(pod.Namespace)
		cur := pod
		first := true
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if !first {
				list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String()})
				if err != nil {
					return err
				}
				if len(list.Items) == 0 || list.Items[0].UID != pod.UID {
					cur = nil // gone, or another pod under the name
					return nil
				}
				cur = &list.Items[0]
			}
			first = false
			want := status(cur)
			if apiequality.Semantic.DeepEqual(want, cur.Status) {
				return nil
			}
			upd := cur.DeepCopy()
			upd.Status = want
			_, err := pods.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
			return err
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reporting status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		return nil
	}
}

// removeWith deletes stopped pods through client: at once (grace period 0,
// the containers have exited) and only the pod that stopped (UID
// precondition), so a pod recreated under the same name is left alone.
func removeWith(client typedcorev1.PodsGetter) func(context.Context, *corev1.Pod) error {
	return func(ctx context.Context, pod *corev1.Pod) error {
		err := client.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("removing stopped pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		return nil
	}
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// NotifyPods is called once by the pod controller with the callback that
// carries status changes back to the API server.
func (p *pods) NotifyPods(_ context.Context, notify func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = notify
}

func (p *pods) send(pod *corev1.Pod) {
	p.mu.Lock()
	notify := p.notify
	p.mu.Unlock()
	if notify != nil {
		notify(pod)
	}
}

// CreatePod starts the pod: init containers completed, containers running
// and ready, the pod Ready. A pod that did not opt into virtual nodes
// (OptedIn) is rejected instead, as a kubelet rejects a pod at admission:
// Failed, never Running or Ready, no pod IP.
func (p *pods) CreatePod(_ context.Context, pod *corev1.Pod) error {
	if ok, missing := OptedIn(pod, p.optIn); !ok {
		rejected := pod.DeepCopy()
		rejected.Status = rejectedStatus(p.node, pod.Status, missing)
		p.mu.Lock()
		p.byKey[podKey(pod.Namespace, pod.Name)] = rejected
		p.mu.Unlock()
		p.send(rejected.DeepCopy())
		return nil
	}
	now := metav1.NewTime(p.clock.Now())
	run := pod.DeepCopy()
	run.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    p.hostIP,
		HostIPs:   []corev1.HostIP{{IP: p.hostIP}},
		StartTime: &now,
		QOSClass:  pod.Status.QOSClass,
		Conditions: mergeConditions(pod.Status.Conditions, []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}),
	}
	if !pod.Spec.HostNetwork {
		ip := p.podIP()
		run.Status.PodIP = ip
		run.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	} else {
		run.Status.PodIP = p.hostIP
		run.Status.PodIPs = []corev1.PodIP{{IP: p.hostIP}}
	}
	for _, c := range pod.Spec.InitContainers {
		run.Status.InitContainerStatuses = append(run.Status.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now,
			}},
			Ready: true,
		})
	}
	started := true
	for _, c := range pod.Spec.Containers {
		run.Status.ContainerStatuses = append(run.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name),
			State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			Ready:   true,
			Started: &started,
		})
	}
	p.mu.Lock()
	p.byKey[podKey(pod.Namespace, pod.Name)] = run
	p.mu.Unlock()
	p.send(run.DeepCopy())
	return nil
}

func containerID(pod *corev1.Pod, container string) string {
	return fmt.Sprintf("selftaint://%s/%s", pod.UID, container)
}

// UpdatePod takes the pod's new spec and keeps its running status, with
// the conditions others set as the API has them.
func (p *pods) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	cur, ok := p.byKey[key]
	if !ok {
		p.mu.Unlock()
		return errdefs.NotFoundf("pod %s is not running on virtual node %s", key, p.node)
	}
	upd := pod.DeepCopy()
	upd.Status = *cur.Status.DeepCopy()
	upd.Status.Conditions = mergeConditions(pod.Status.Conditions, cur.Status.Conditions)
	p.byKey[key] = upd
	p.mu.Unlock()
	p.send(upd.DeepCopy())
	return nil
}

// DeletePod stops the pod at once: every container terminated with exit
// code 0, the pod Succeeded. A pod being deleted in the API gets that
// status written (keeping the conditions others set, DisruptionTarget
// first of all) and is then removed from the API server.
func (p *pods) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	cur, ok := p.byKey[key]
	delete(p.byKey, key)
	p.mu.Unlock()
	if !ok {
		if pod.DeletionTimestamp != nil {
			// Not running here (say, since a restart) but being deleted:
			// there is nothing to stop, so finish the deletion.
			return p.api.remove(ctx, pod)
		}
		return errdefs.NotFoundf("pod %s is not running on virtual node %s", key, p.node)
	}
	if pod.DeletionTimestamp == nil {
		// Not deleted in the API (the pod controller removing a pod the
		// API no longer has): nothing to report.
		return nil
	}
	now := metav1.NewTime(p.clock.Now())
	ran := cur.Status
	if err := p.api.report(ctx, pod, func(api *corev1.Pod) corev1.PodStatus { return terminated(api.Status, ran, now) }); err != nil {
		// Back in byKey: the pod controller retries the deletion.
		p.mu.Lock()
		if _, again := p.byKey[key]; !again {
			p.byKey[key] = cur
		}
		p.mu.Unlock()
		return err
	}
	return p.api.remove(ctx, pod)
}

// kubeletCondition says whether a kubelet owns the pod condition t (the
// kubelet's PodConditionsByKubelet and PodReadyToStartContainers); the others
// belong to whoever set them.
func kubeletCondition(t corev1.PodConditionType) bool {
	switch t {
	case corev1.PodScheduled, corev1.PodReady, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReadyToStartContainers:
		return true
	}
	return false
}

// mergeConditions merges the kubelet's conditions ours into api as the
// kubelet's status manager does: api's conditions the kubelet does not own,
// as they are, then ours the kubelet owns.
func mergeConditions(api, ours []corev1.PodCondition) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(api)+len(ours))
	for _, c := range api {
		if !kubeletCondition(c.Type) {
			out = append(out, c)
		}
	}
	for _, c := range ours {
		if kubeletCondition(c.Type) {
			out = append(out, c)
		}
	}
	return out
}

// terminated is the status reported for a pod stopped at now: ran (the
// status it ran with) with every container terminated with exit code 0, the
// pod Succeeded and not ready, merged onto api (the status the API has) as
// mergeConditions does. A pod the API already has in a terminal phase keeps
// api: a terminal phase is final.
func terminated(api, ran corev1.PodStatus, now metav1.Time) corev1.PodStatus {
	if api.Phase == corev1.PodSucceeded || api.Phase == corev1.PodFailed {
		return api
	}
	if ran.Phase == corev1.PodFailed {
		// Rejected at admission (rejectedStatus): it never ran.
		done := *ran.DeepCopy()
		done.Conditions = mergeConditions(api.Conditions, done.Conditions)
		return done
	}
	done := *ran.DeepCopy()
	done.Phase = corev1.PodSucceeded
	for i := range done.Conditions {
		switch done.Conditions[i].Type {
		case corev1.PodReady, corev1.ContainersReady, corev1.PodReadyToStartContainers:
			done.Conditions[i].Status = corev1.ConditionFalse
			done.Conditions[i].Reason = "PodCompleted"
			done.Conditions[i].LastTransitionTime = now
		}
	}
	done.Conditions = mergeConditions(api.Conditions, done.Conditions)
	done.NominatedNodeName = api.NominatedNodeName
	for i := range done.ContainerStatuses {
		cs := &done.ContainerStatuses[i]
		var startedAt metav1.Time
		if cs.State.Running != nil {
			startedAt = cs.State.Running.StartedAt
		}
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", Message: "stopped by the virtual kubelet",
			StartedAt: startedAt, FinishedAt: now, ContainerID: cs.ContainerID,
		}}
		cs.Ready = false
		started := false
		cs.Started = &started
	}
	return done
}

// resend reports every running pod's status again, as a kubelet's status
// manager does when it starts: a pod controller started after a Stop has
// not sent any yet, and the API may have them marked not ready. Like the
// status manager it merges onto what the API has (the conditions others set
// meanwhile, an eviction's DisruptionTarget, are kept), and leaves alone the
// pods deleted meanwhile: the pod controller stops those (DeletePod). It
// reads the API until it can or ctx is done.
func (p *pods) resend(ctx context.Context) {
	p.mu.Lock()
	none := len(p.byKey) == 0
	p.mu.Unlock()
	if none {
		return
	}
	var current []corev1.Pod
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		current, err = p.api.list(ctx)
		return err == nil, nil
	})
	if err != nil {
		return // ctx is done
	}
	for _, pod := range p.resent(current) {
		p.send(pod)
	}
}

// resent is what resend sends, given the node's pods as the API has them.
func (p *pods) resent(current []corev1.Pod) []*corev1.Pod {
	api := make(map[string]*corev1.Pod, len(current))
	for i := range current {
		api[podKey(current[i].Namespace, current[i].Name)] = &current[i]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.byKey))
	for key, pod := range p.byKey {
		cur, ok := api[key]
		if !ok || cur.UID != pod.UID || cur.DeletionTimestamp != nil {
			continue
		}
		send := pod.DeepCopy()
		send.Status.Conditions = mergeConditions(cur.Status.Conditions, pod.Status.Conditions)
		out = append(out, send)
	}
	return out
}

// GetPod returns the pod as it runs here, or nil if it does not.
func (p *pods) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.byKey[podKey(namespace, name)]
	if !ok {
		return nil, errdefs.NotFoundf("pod %s/%s is not running on virtual node %s", namespace, name, p.node)
	}
	return pod.DeepCopy(), nil
}

// GetPodStatus returns the status of a pod running here.
func (p *pods) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods lists the pods running here.
func (p *pods) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.byKey))
	for _, pod := range p.byKey {
		out = append(out, pod.DeepCopy())
	}
	return out, nil
}
