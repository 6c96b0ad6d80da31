package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/selftaint/selftaint/agent/coordinator"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
	"github.com/selftaint/selftaint/taints/fleet"
)

// testCondition is the condition the test fleets ask NoExecute for and the
// guard watches.
const testCondition corev1.NodeConditionType = "SelftaintTestFailure"

// groupLabel puts each test's nodes in its own fleet (the coordinator's
// NodeSelector), so the tests share one control plane.
const groupLabel = "selftaint.test/group"

const waitTimeout = 30 * time.Second

// env is one test's fleet: a namespace, a node group, a fake clock.
type env struct {
	t      *testing.T
	cp     *testcp.ControlPlane
	client kubernetes.Interface
	ns     string
	group  string
	clock  *testingclock.FakeClock
	logs   *testkit.LogBuffer
}

// newEnv makes a namespace and a fake clock for one test on cp.
func newEnv(t *testing.T, cp *testcp.ControlPlane) *env {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[len(name)-50:]
	}
	name = strings.Trim(name, "-")
	e := &env{t: t, cp: cp, client: cp.Client(), ns: name, group: name,
		clock: testingclock.NewFakeClock(time.Now().Truncate(time.Second)), logs: &testkit.LogBuffer{}}
	if _, err := e.client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", e.ns, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("coordinator logs:\n%s", e.logs.String())
		}
	})
	return e
}

// config is the test fleets' policy: budget as given, one grant per second
// per zone, a 30s TTL, the guard at its defaults.
func config(budget intstr.IntOrString) fleet.Config {
	return fleet.Config{
		MaxNoExecute:  budget,
		RatePerMinute: 60,
		GrantTTL:      30 * time.Second,
		Guard: fleet.GuardConfig{
			Threshold: 55, ResetMargin: 10, CoolDown: 5 * time.Minute, MinNodes: 3, RenewEvery: 30 * time.Second,
		},
		Watched: map[corev1.NodeConditionType][]corev1.ConditionStatus{testCondition: {corev1.ConditionTrue}},
	}
}

// options are a coordinator's options in e, as identity.
func (e *env) options(identity string, cfg fleet.Config) coordinator.Options {
	return coordinator.Options{
		Client:       e.client,
		Namespace:    e.ns,
		Identity:     identity,
		Config:       cfg,
		Clock:        e.clock,
		Logger:       slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", identity),
		NodeSelector: labels.SelectorFromSet(labels.Set{groupLabel: e.group}),
		// Leader election on real time, short enough for a test.
		LeaseDuration: 3 * time.Second,
		RenewDeadline: 2 * time.Second,
		RetryPeriod:   200 * time.Millisecond,
	}
}

// start runs a coordinator with opts, with leader election or without,
// until the returned stop is called (also at the end of the test); stop
// returns what Run returned.
func (e *env) start(opts coordinator.Options, elect bool) (*coordinator.Coordinator, func() error) {
	e.t.Helper()
	c, err := coordinator.New(opts)
	if err != nil {
		e.t.Fatalf("coordinator.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		if elect {
			done <- c.Run(ctx)
		} else {
			done <- c.RunWithoutElection(ctx)
		}
	}()
	var once sync.Once
	var runErr error
	stopped := false // by the test, which then checks the error itself
	halt := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errors.New("Run did not return within 30s of cancel")
			}
		})
		return runErr
	}
	e.t.Cleanup(func() {
		if err := halt(); !stopped && err != nil && !errors.Is(err, context.Canceled) {
			e.t.Errorf("%s: Run returned %v", opts.Identity, err)
		}
	})
	stop := func() error {
		stopped = true
		return halt()
	}
	return c, stop
}

// node creates a Ready node of e's group in zone, asking for NoExecute
// since since if since is not zero.
func (e *env) node(name, zone string, since time.Time) {
	e.t.Helper()
	e.cp.CreateNode(e.t, name, func(n *corev1.Node) {
		n.Labels = map[string]string{groupLabel: e.group, corev1.LabelTopologyZone: zone}
		if !since.IsZero() {
			n.Annotations = map[string]string{fleet.RequestAnnotation: request(since)}
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	})
}

// request is a Request annotation value for testCondition since since.
func request(since time.Time) string {
	return fleet.Request{Since: since, Conditions: []corev1.NodeConditionType{testCondition}}.Format()
}

// annotate sets (or, with value "", removes) node's request annotation.
func (e *env) annotate(node, value string) {
	e.t.Helper()
	v := "null"
	if value != "" {
		v = fmt.Sprintf("%q", value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, fleet.RequestAnnotation, v)
	if _, err := e.client.CoreV1().Nodes().Patch(e.t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("annotating node %s: %v", node, err)
	}
}

// report sets testCondition on node to status.
func (e *env) report(node string, status corev1.ConditionStatus) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q,"reason":"Test"}]}}`, testCondition, status)
	if _, err := e.client.CoreV1().Nodes().PatchStatus(e.t.Context(), node, []byte(patch)); err != nil {
		e.t.Fatalf("reporting %s=%s on node %s: %v", testCondition, status, node, err)
	}
}

// grants returns e's grant Leases by node, as the API server has them now.
func (e *env) grants() (map[string]coordinationv1.Lease, error) {
	list, err := e.client.CoordinationV1().Leases(e.ns).List(e.t.Context(), metav1.ListOptions{LabelSelector: fleet.GrantLabel + "=true"})
	if err != nil {
		return nil, err
	}
	out := map[string]coordinationv1.Lease{}
	for _, l := range list.Items {
		out[strings.TrimPrefix(l.Name, fleet.GrantPrefix)] = l
	}
	return out, nil
}

// holders are the nodes holding a grant in leases, sorted.
func holders(leases map[string]coordinationv1.Lease) []string {
	var out []string
	for node, l := range leases {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// waitGrants polls the grant Leases until ok holds, and returns them.
func (e *env) waitGrants(what string, ok func(map[string]coordinationv1.Lease) bool) map[string]coordinationv1.Lease {
	e.t.Helper()
	var last map[string]coordinationv1.Lease
	err := testcp.Poll(e.t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		var err error
		last, err = e.grants()
		return err == nil && ok(last), err
	})
	if err != nil {
		e.t.Fatalf("waiting for %s: %v; grants held by %v (all: %v)", what, err, holders(last), describe(last))
	}
	return last
}

// waitHolders waits until exactly want (sorted) hold grants.
func (e *env) waitHolders(want ...string) map[string]coordinationv1.Lease {
	e.t.Helper()
	slices.Sort(want)
	return e.waitGrants(fmt.Sprintf("grants held by exactly %v", want), func(l map[string]coordinationv1.Lease) bool {
		return slices.Equal(holders(l), want)
	})
}

func describe(leases map[string]coordinationv1.Lease) string {
	var parts []string
	for node, l := range leases {
		h := "<released>"
		if l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		parts = append(parts, fmt.Sprintf("%s(holder %s, renewed %v)", node, h, l.Spec.RenewTime))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// guard reads e's guard ConfigMap.
func (e *env) guard() (fleet.GuardState, *corev1.ConfigMap, error) {
	cm, err := e.client.CoreV1().ConfigMaps(e.ns).Get(e.t.Context(), fleet.DefaultGuardName, metav1.GetOptions{})
	if err != nil {
		return fleet.GuardState{}, nil, err
	}
	g, err := fleet.DecodeGuard(cm.Data)
	return g, cm, err
}

// stepGuard polls the guard until ok holds, stepping the clock by
// RenewEvery each time the coordinator has caught up with it (renewed the
// guard at the clock's time), so that every step is a decision made from
// what the coordinator has seen by then.
func (e *env) stepGuard(what string, renewEvery time.Duration, ok func(fleet.GuardState) bool) fleet.GuardState {
	e.t.Helper()
	var g fleet.GuardState
	err := testcp.Poll(e.t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		var err error
		if g, _, err = e.guard(); err != nil {
			return false, err
		}
		if ok(g) {
			return true, nil
		}
		if g.RenewTime.Equal(e.clock.Now()) {
			e.clock.Step(renewEvery)
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("waiting for the guard %s: %v; last %+v", what, err, g)
	}
	return g
}

// waitGuard polls the guard until ok holds, and returns it.
func (e *env) waitGuard(what string, ok func(fleet.GuardState) bool) (fleet.GuardState, *corev1.ConfigMap) {
	e.t.Helper()
	var g fleet.GuardState
	var cm *corev1.ConfigMap
	err := testcp.Poll(e.t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		var err error
		g, cm, err = e.guard()
		return err == nil && ok(g), err
	})
	if err != nil {
		e.t.Fatalf("waiting for the guard %s: %v; last %+v", what, err, g)
	}
	return g, cm
}

// events lists the Events in namespace about the object named name with
// reason.
func (e *env) events(namespace, name, reason string) ([]corev1.Event, error) {
	list, err := e.client.CoreV1().Events(namespace).List(e.t.Context(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": name, "reason": reason}.String(),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitEvent waits for an Event about name with reason in namespace and
// returns the Events there are.
func (e *env) waitEvent(namespace, name, reason string) []corev1.Event {
	e.t.Helper()
	var evs []corev1.Event
	err := testcp.Poll(e.t.Context(), waitTimeout, testcp.PollInterval, func() (bool, error) {
		var err error
		evs, err = e.events(namespace, name, reason)
		return len(evs) > 0, err
	})
	if err != nil {
		e.t.Fatalf("waiting for a %s Event about %s in %s: %v", reason, name, namespace, err)
	}
	return evs
}

// clientGoLogs collects client-go's logs (leader election, reflectors,
// the event broadcaster) for every test in the package: klog's logger is
// set once, in TestMain, before any goroutine that reads it starts, and
// never cleared, since the event broadcaster's goroutines may outlive a
// coordinator's Run.
var clientGoLogs = &testkit.LogBuffer{}

func TestMain(m *testing.M) {
	klog.SetSlogLogger(slog.New(slog.NewTextHandler(clientGoLogs, nil)))
	os.Exit(m.Run())
}

// showClientGoLogs logs client-go's logs if t fails.
func showClientGoLogs(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("client-go logs:\n%s", clientGoLogs.String())
		}
	})
}

// name is a node name unique to e's test.
func (e *env) name(s string) string { return e.group + "-" + s }
