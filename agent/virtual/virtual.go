// Package virtual runs simulated Nodes so users can see, on a real control
// plane and without sick hardware, how their workloads react when a node is
// tainted. selftaint is each virtual node's kubelet (through
// virtual-kubelet): it registers the Node, renews its Lease in
// kube-node-lease, runs the pods bound to it as far as the API can tell, and
// reports the standard conditions (Ready, MemoryPressure, DiskPressure,
// PIDPressure), so the control plane's node lifecycle controller treats it
// as it would a real node. Each virtual node also runs selftaint's own
// pipeline (probes -> conditions -> taints) with probes that are healthy
// unless a fault is injected through a Node annotation.
package virtual

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

// Defaults, the kubelet's where it has one.
const (
	// DefaultLeaseDuration is the kubelet's nodeLeaseDurationSeconds; the
	// lease is renewed every quarter of it.
	DefaultLeaseDuration = 40 * time.Second
	// DefaultStatusUpdateInterval is how often virtual-kubelet re-sends the
	// node's status (capacity, addresses, node info) besides the lease.
	DefaultStatusUpdateInterval = time.Minute
	// kubeletProbeInterval is how often the standard conditions' probes
	// run. They never change on their own; a fault overrides them at once.
	kubeletProbeInterval = 10 * time.Second
)

// Options configure a set of virtual nodes run by one process.
type Options struct {
	// Names of the nodes to run, one virtual node each.
	Names []string
	// Core and Leases talk to the API server.
	Core   typedcorev1.CoreV1Interface
	Leases typedcoordv1.LeasesGetter
	// Template is what each node registers with.
	Template NodeTemplate
	// Probes builds one node's selftaint probes (see SimulatedProbe); the
	// standard kubelet conditions are added to them.
	Probes func(node string) []agent.ProbeSpec
	// Rules, DrainRules, HeartbeatPeriod, Faults, Limiter and NoExecute
	// are passed to each node's agent (NoExecute's Leases default to
	// Leases).
	Rules           []taints.Rule
	DrainRules      []taints.DrainRule
	HeartbeatPeriod time.Duration
	Faults          agent.FaultOptions
	Limiter         taints.LimiterConfig
	NoExecute       *agent.NoExecuteOptions
	// LeaseDuration defaults to DefaultLeaseDuration.
	LeaseDuration time.Duration
	// StatusUpdateInterval defaults to DefaultStatusUpdateInterval.
	StatusUpdateInterval time.Duration
	// PodSyncWorkers per node; default 2.
	PodSyncWorkers int
	// DeleteOnExit deletes the Nodes when Run returns, so the pods on them
	// are cleaned up by the control plane instead of staying on an
	// unreachable node.
	DeleteOnExit bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Clock is the agents' clock; defaults to the real clock.
	// virtual-kubelet's controllers always use the real clock.
	Clock clock.WithTicker
	// Control, if set, stops and resumes single nodes' kubelets while Run
	// runs (see Control).
	Control *Control
}

// Names returns n node names: prefix1 ... prefixN.
func Names(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return names
}

// KubeletConditionSpecs are the standard conditions a kubelet reports, with
// the kubelet's own reasons, healthy unless a fault says otherwise. The
// node lifecycle controller taints from them (node.kubernetes.io/not-ready,
// memory-pressure, ...), so selftaint's rules do not.
func KubeletConditionSpecs() []agent.ProbeSpec {
	spec := func(name string, cond corev1.NodeConditionType, healthy corev1.ConditionStatus, reason, message string) agent.ProbeSpec {
		return agent.ProbeSpec{
			Entry: probes.Entry{
				Probe:    SimulatedProbe{ProbeName: name, Reason: reason, Message: message},
				Interval: kubeletProbeInterval,
				Timeout:  time.Second,
			},
			Condition: cond,
			Healthy:   healthy,
		}
	}
	return []agent.ProbeSpec{
		spec("kubelet-ready", corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "virtual kubelet is posting ready status"),
		spec("kubelet-memory", corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "virtual kubelet has sufficient memory available"),
		spec("kubelet-disk", corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "virtual kubelet has no disk pressure"),
		spec("kubelet-pid", corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "virtual kubelet has sufficient PID available"),
	}
}

// KubeletConditions are the condition types KubeletConditionSpecs reports:
// on a virtual node they are fault targets too.
func KubeletConditions() []corev1.NodeConditionType {
	specs := KubeletConditionSpecs()
	out := make([]corev1.NodeConditionType, len(specs))
	for i, s := range specs {
		out[i] = s.Condition
	}
	return out
}

// SimulatedProbe is a probe of an imaginary machine: it always finds it
// healthy. On a virtual node only an injected fault makes a problem.
type SimulatedProbe struct {
	ProbeName string
	// Reason and Message of the healthy verdict; defaults say it is a
	// virtual node.
	Reason, Message string
}

// Name is the probe's name.
func (p SimulatedProbe) Name() string { return p.ProbeName }

// Probe reports OK.
func (p SimulatedProbe) Probe(context.Context) probes.Result {
	r := probes.Result{Status: probes.StatusOK, Reason: p.Reason, Message: p.Message}
	if r.Reason == "" {
		r.Reason = "VirtualNodeHealthy"
	}
	if r.Message == "" {
		r.Message = "virtual node: healthy unless a fault is injected"
	}
	return r
}

// Run registers the virtual nodes and runs them until ctx is cancelled or
// one of them fails; it returns the first failure. It never serves a Node
// that is not virtual (labelled selftaint.io/virtual=true): if one exists
// under one of the names, Run fails at once with a NotVirtualError and
// touches nothing; if one appears later in a virtual node's place, Run
// fails when that node's status is next written.
func Run(ctx context.Context, opts Options) error {
	if err := opts.validate(); err != nil {
		return err
	}
	opts.setDefaults()

	// Before virtual-kubelet touches a Node: on registration it patches an
	// existing Node of the same name as its own.
	regs, err := checkExisting(ctx, opts.Core.Nodes(), opts.Names)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The pod controllers' events share one broadcaster.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: opts.Core.Events("")})
	defer broadcaster.Shutdown()

	// Pods' environment is not resolved (nothing runs), so the config map,
	// secret and service informers virtual-kubelet asks for are never
	// started and selftaint needs no access to secrets.
	unused := unusedInformers{
		configMaps: newInformer[corelisters.ConfigMapLister](&corev1.ConfigMap{}, corelisters.NewConfigMapLister),
		secrets:    newInformer[corelisters.SecretLister](&corev1.Secret{}, corelisters.NewSecretLister),
		services:   newInformer[corelisters.ServiceLister](&corev1.Service{}, corelisters.NewServiceLister),
	}

	var wg sync.WaitGroup
	runners := make([]*nodeRunner, len(opts.Names))
	for i, name := range opts.Names {
		// Pods outlive a stopped kubelet, as containers do.
		pods := newPods(name, opts.Template.internalIP(), podIPs(i), apiWith(opts.Core, name), opts.Clock)
		pods.optIn = opts.Template.OptIn
		runners[i] = &nodeRunner{
			name: name, parent: ctx, wg: &wg, fail: cancel,
			build: func() (*virtualNode, error) {
				return newVirtualNode(opts, name, i, regs[name], pods, broadcaster, unused, cancel)
			},
		}
	}
	if opts.Control != nil {
		if err := opts.Control.attach(runners); err != nil {
			return err
		}
		// Also when a node cannot be built below.
		defer opts.Control.detach()
	}
	// Every node is built before any starts: one that cannot be fails
	// the set before anything touches the API.
	first := make([]*virtualNode, len(runners))
	for i, r := range runners {
		if first[i], err = r.build(); err != nil {
			return err
		}
	}
	for i, r := range runners {
		r.mu.Lock()
		r.startLocked(first[i])
		r.mu.Unlock()
	}
	opts.Logger.Info("virtual nodes starting", "nodes", len(runners))
	<-ctx.Done()
	if opts.Control != nil {
		opts.Control.detach()
	}
	// Once closed, no runner starts an incarnation: wg.Wait sees them all.
	for _, r := range runners {
		r.close()
	}
	wg.Wait()
	if opts.DeleteOnExit {
		deleteNodes(opts.Core.Nodes(), regs, opts.Names, opts.Logger)
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// validate checks what Run cannot do without.
func (opts *Options) validate() error {
	if len(opts.Names) == 0 {
		return errors.New("virtual: no nodes to run")
	}
	if opts.Core == nil || opts.Leases == nil {
		return errors.New("virtual: clients are required")
	}
	seen := map[string]bool{}
	for _, n := range opts.Names {
		if seen[n] {
			return fmt.Errorf("virtual: node %s named twice", n)
		}
		seen[n] = true
	}
	return nil
}

// setDefaults fills in the defaults of the fields left zero.
func (opts *Options) setDefaults() {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.StatusUpdateInterval <= 0 {
		opts.StatusUpdateInterval = DefaultStatusUpdateInterval
	}
	if opts.PodSyncWorkers <= 0 {
		opts.PodSyncWorkers = 2
	}
}

// virtualNode is one node: its virtual-kubelet node and pod controllers,
// its pod informer and its selftaint agent.
type virtualNode struct {
	name  string
	log   *slog.Logger
	nodes *vknode.NodeController
	pods  *vknode.PodController
	// provider is the node's running pods, kept across its incarnations.
	provider *pods
	podInf   cache.SharedIndexInformer
	agent    *agent.Agent
	workers  int
	// ready reads whether the Node is Ready in the API.
	ready func(context.Context) (bool, error)
}

// newVirtualNode builds node name's parts; reg records the Node it
// registers, and fail stops the whole set when the Node turns out not to
// be virtual.
func newVirtualNode(opts Options, name string, index int, reg *registration, provider *pods, broadcaster record.EventBroadcaster, unused unusedInformers, fail context.CancelCauseFunc) (*virtualNode, error) {
	log := opts.Logger.With("node", name)
	template := opts.Template.newNode(name, index)
	nodeClient := guardedNodes{NodeInterface: opts.Core.Nodes(), reg: reg}
	nc, err := vknode.NewNodeController(nodeStatus{}, template, nodeClient,
		vknode.WithNodeEnableLeaseV1(opts.Leases.Leases(corev1.NamespaceNodeLease), int32(opts.LeaseDuration/time.Second)),
		vknode.WithNodeStatusUpdateInterval(opts.StatusUpdateInterval),
		// Someone deleted the Node: register it again, as a kubelet does.
		vknode.WithNodeStatusUpdateErrorHandler(func(ctx context.Context, err error) error {
			if notVirtual(err) {
				// A real Node took this one's name: stop serving it.
				fail(fmt.Errorf("virtual node %s: %w", name, err))
				return err
			}
			if !apierrors.IsNotFound(err) {
				return err
			}
			log.Warn("virtual node was deleted; registering it again")
			_, err = nodeClient.Create(ctx, template.DeepCopy(), metav1.CreateOptions{})
			return err
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("virtual node %s: %w", name, err)
	}

	podClient := opts.Core
	selector := fields.OneTermEqualSelector("spec.nodeName", name).String()
	podInf := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return podClient.Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return podClient.Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	pc, err := vknode.NewPodController(vknode.PodControllerConfig{
		PodClient:                 podClient,
		PodInformer:               informer[corelisters.PodLister]{podInf, corelisters.NewPodLister},
		EventRecorder:             broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "selftaint-virtual", Host: name}),
		Provider:                  provider,
		ConfigMapInformer:         unused.configMaps,
		SecretInformer:            unused.secrets,
		ServiceInformer:           unused.services,
		SkipDownwardAPIResolution: true,
	})
	if err != nil {
		return nil, fmt.Errorf("virtual node %s: %w", name, err)
	}

	var specs []agent.ProbeSpec
	if opts.Probes != nil {
		specs = opts.Probes(name)
	}
	specs = append(specs, KubeletConditionSpecs()...)
	a, err := agent.New(agent.Options{
		NodeName:        name,
		Client:          opts.Core,
		Probes:          specs,
		Rules:           opts.Rules,
		DrainRules:      opts.DrainRules,
		HeartbeatPeriod: opts.HeartbeatPeriod,
		Clock:           opts.Clock,
		Logger:          opts.Logger,
		Faults:          opts.Faults,
		Limiter:         opts.Limiter,
		NoExecute:       noExecute(opts),
	})
	if err != nil {
		return nil, fmt.Errorf("virtual node %s: %w", name, err)
	}
	return &virtualNode{name: name, log: log, nodes: nc, pods: pc, provider: provider, podInf: podInf, agent: a, workers: opts.PodSyncWorkers,
		ready: nodeReady(nodeClient, name)}, nil
}

// noExecute is the agents' NoExecute options, reading grants with the
// nodes' Lease client unless they name another.
func noExecute(opts Options) *agent.NoExecuteOptions {
	if opts.NoExecute == nil {
		return nil
	}
	ne := *opts.NoExecute
	if ne.Leases == nil {
		ne.Leases = opts.Leases
	}
	return &ne
}

// start runs the node's parts; the first to fail cancels the whole set.
func (n *virtualNode) start(ctx context.Context, wg *sync.WaitGroup, fail context.CancelCauseFunc) {
	vctx := vklog.WithLogger(ctx, newVKLogger(n.log.With("component", "virtual-kubelet")))
	run := func(what string, f func(context.Context) error) {
		wg.Go(func() {
			err := f(vctx)
			if err != nil && ctx.Err() == nil {
				fail(fmt.Errorf("virtual node %s: %s: %w", n.name, what, err))
			}
		})
	}
	run("node controller", n.nodes.Run)
	run("pod informer", func(ctx context.Context) error { n.podInf.RunWithContext(ctx); return nil })
	run("pod controller", func(ctx context.Context) error {
		// Pods are run once the node is registered.
		select {
		case <-n.nodes.Ready():
		case <-ctx.Done():
			return nil
		}
		return n.pods.Run(ctx, n.workers)
	})
	run("pod status resync", func(ctx context.Context) error {
		// A kubelet started again writes its pods' statuses back (the
		// node lifecycle controller marked them not ready meanwhile).
		// The first incarnation has no pods yet.
		select {
		case <-n.pods.Ready():
		case <-ctx.Done():
			return nil
		}
		n.provider.resend(ctx)
		return nil
	})
	run("pod readiness reconcile", func(ctx context.Context) error {
		// What the node lifecycle controller marked not ready while the
		// node was NotReady, ready again once it is Ready (see
		// reconcileReady).
		select {
		case <-n.pods.Ready():
		case <-ctx.Done():
			return nil
		}
		n.provider.reconcileReady(ctx, n.cachedPods, n.ready, n.log.Warn)
		return nil
	})
	run("agent", func(ctx context.Context) error {
		// The agent writes to the Node once it is known to be virtual
		// and registered.
		select {
		case <-n.nodes.Ready():
		case <-ctx.Done():
			return nil
		}
		if err := n.agent.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	})
}

// cachedPods are the node's pods as the pod informer has them (cached
// objects: never mutate).
func (n *virtualNode) cachedPods() []*corev1.Pod {
	objs := n.podInf.GetIndexer().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}
