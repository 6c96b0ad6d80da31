package virtual

import (
	"context"
	"fmt"
	"sync"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// pods runs one virtual node's pods as far as the API can tell: a pod bound
// to the node goes Running with every container started and ready; a pod
// being deleted stops at once, its containers terminated, and is removed
// from the API server as a kubelet does once a pod's containers have
// exited, so an eviction finishes instead of hanging in Terminating for the
// grace period. It implements virtual-kubelet's PodLifecycleHandler and
// PodNotifier.
type pods struct {
	node   string
	hostIP string
	clock  clock.PassiveClock
	// podIP hands out pod IPs from the node's range.
	podIP func() string
	// remove deletes a stopped pod from the API server.
	remove func(ctx context.Context, pod *corev1.Pod) error

	mu     sync.Mutex             // guards the fields below
	byKey  map[string]*corev1.Pod // namespace/name -> the pod as we run it
	notify func(*corev1.Pod)
}

func newPods(node, hostIP string, podIP func() string, remove func(context.Context, *corev1.Pod) error, c clock.PassiveClock) *pods {
	return &pods{node: node, hostIP: hostIP, podIP: podIP, remove: remove, clock: c, byKey: map[string]*corev1.Pod{}}
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
// and ready, the pod Ready.
func (p *pods) CreatePod(_ context.Context, pod *corev1.Pod) error {
	now := metav1.NewTime(p.clock.Now())
	run := pod.DeepCopy()
	run.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    p.hostIP,
		HostIPs:   []corev1.HostIP{{IP: p.hostIP}},
		StartTime: &now,
		QOSClass:  pod.Status.QOSClass,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
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

// UpdatePod takes the pod's new spec and keeps its running status.
func (p *pods) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	cur, ok := p.byKey[key]
	if !ok {
		p.mu.Unlock()
		return errdefs.NotFoundf("pod %s is not running on virtual node %s", key, p.node)
	}
	upd := pod.DeepCopy()
	upd.Status = cur.Status
	p.byKey[key] = upd
	p.mu.Unlock()
	p.send(upd.DeepCopy())
	return nil
}

// DeletePod stops the pod at once: every container terminated with exit
// code 0, the pod Succeeded, and the pod removed from the API server.
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
			return p.remove(ctx, pod)
		}
		return errdefs.NotFoundf("pod %s is not running on virtual node %s", key, p.node)
	}
	now := metav1.NewTime(p.clock.Now())
	done := pod.DeepCopy()
	done.Status = *cur.Status.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	for i := range done.Status.Conditions {
		switch done.Status.Conditions[i].Type {
		case corev1.PodReady, corev1.ContainersReady, corev1.PodReadyToStartContainers:
			done.Status.Conditions[i].Status = corev1.ConditionFalse
			done.Status.Conditions[i].Reason = "PodCompleted"
			done.Status.Conditions[i].LastTransitionTime = now
		}
	}
	for i := range done.Status.ContainerStatuses {
		cs := &done.Status.ContainerStatuses[i]
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
	p.send(done)
	if pod.DeletionTimestamp == nil {
		// Not deleted in the API (the pod controller removing a pod the
		// API no longer has): nothing more to do.
		return nil
	}
	return p.remove(ctx, pod)
}

// resend reports every running pod's status again, as a kubelet's status
// manager does when it starts: a pod controller started after a Stop has
// not sent any yet, and the API may have them marked not ready.
func (p *pods) resend() {
	p.mu.Lock()
	running := make([]*corev1.Pod, 0, len(p.byKey))
	for _, pod := range p.byKey {
		running = append(running, pod.DeepCopy())
	}
	p.mu.Unlock()
	for _, pod := range running {
		p.send(pod)
	}
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
