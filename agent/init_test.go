package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes"
)

const initCond corev1.NodeConditionType = "SelftaintUninitialized"

var (
	initTaint  = corev1.Taint{Key: "selftaint.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}
	cloudTaint = corev1.Taint{Key: agent.CloudProviderUninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}
)

// TestUninitializedTaintLifecycle runs the taint's whole life on a real
// kube-apiserver, in both modes: registered by the kubelet (a taint selftaint
// did not put there, which it removes all the same), removed after the first
// healthy round with the time recorded on the Node; in bootstrap mode never
// put back after a later failure of a required condition, in continuous mode
// put back and lifted again. The cloud provider's uninitialized taint is
// reported and never touched.
func TestUninitializedTaintLifecycle(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	for _, continuous := range []bool{false, true} {
		name := map[bool]string{false: "bootstrap", true: "continuous"}[continuous]
		t.Run(name, func(t *testing.T) {
			cp.CreateNode(t, name, func(n *corev1.Node) {
				// As kubelet --register-with-taints would, plus the cloud
				// controller's own.
				n.Spec.Taints = []corev1.Taint{initTaint, cloudTaint}
			})
			p := newSwitchProbe(probes.StatusOK)
			startAgent(t, agent.Options{
				NodeName: name, Client: c.CoreV1(),
				Probes: []agent.ProbeSpec{{Entry: probes.Entry{Probe: p, Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond}, Condition: cond}},
				Rules:  rules,
				Init:   &agent.InitOptions{Condition: initCond, Taint: initTaint, Continuous: continuous, Required: []corev1.NodeConditionType{cond}},
			})
			n := waitNode(t, c, name, 10*time.Second, "the uninitialized taint lifted", func(n *corev1.Node) bool {
				return !hasTaint(n, initTaint) && conditionIs(corev1.ConditionFalse)(n)
			})
			ic := condition(n, initCond)
			if ic == nil || ic.Status != corev1.ConditionFalse || ic.Reason != agent.ReasonInitialized {
				t.Errorf("initialization condition %+v, want False/%s", ic, agent.ReasonInitialized)
			}
			if _, err := time.Parse(time.RFC3339, n.Annotations[agent.InitializedAnnotation]); err != nil {
				t.Errorf("annotation %s = %q, want an RFC 3339 time: %v", agent.InitializedAnnotation, n.Annotations[agent.InitializedAnnotation], err)
			}
			if !hasTaint(n, cloudTaint) {
				t.Errorf("the cloud provider's taint was removed: %v", n.Spec.Taints)
			}
			if ic != nil && !strings.Contains(ic.Message, agent.CloudProviderUninitializedTaint) {
				t.Errorf("initialization message %q does not report the cloud provider's taint", ic.Message)
			}

			// A required condition fails.
			p.set(probes.StatusProblem)
			waitNode(t, c, name, 10*time.Second, "the required condition True", func(n *corev1.Node) bool {
				return conditionIs(corev1.ConditionTrue)(n) && hasTaint(n, ourTaint)
			})
			if !continuous {
				time.Sleep(time.Second) // several syncs
				if n := getNode(t, c, name); hasTaint(n, initTaint) {
					t.Fatalf("bootstrap mode put the uninitialized taint back after a later failure: %v", n.Spec.Taints)
				}
				return
			}
			waitNode(t, c, name, 10*time.Second, "the uninitialized taint back", func(n *corev1.Node) bool {
				ic := condition(n, initCond)
				return hasTaint(n, initTaint) && ic != nil && ic.Status == corev1.ConditionTrue && ic.Reason == agent.ReasonRequiredCheckFailed
			})
			p.set(probes.StatusOK)
			n = waitNode(t, c, name, 10*time.Second, "the uninitialized taint lifted again", func(n *corev1.Node) bool {
				return !hasTaint(n, initTaint) && conditionIs(corev1.ConditionFalse)(n)
			})
			if !hasTaint(n, cloudTaint) {
				t.Errorf("the cloud provider's taint was removed: %v", n.Spec.Taints)
			}
		})
	}
}

// TestUninitializedTaintAddedUntilReady: a node registered without the
// taint gets it while a required condition is unhealthy from the start,
// and loses it once healthy.
func TestUninitializedTaintAddedUntilReady(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	cp.CreateNode(t, "late", nil)
	p := newSwitchProbe(probes.StatusProblem)
	startAgent(t, agent.Options{
		NodeName: "late", Client: c.CoreV1(),
		Probes: []agent.ProbeSpec{{Entry: probes.Entry{Probe: p, Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond}, Condition: cond}},
		Init:   &agent.InitOptions{Condition: initCond, Taint: initTaint, Required: []corev1.NodeConditionType{cond}},
	})
	n := waitNode(t, c, "late", 10*time.Second, "the uninitialized taint added", func(n *corev1.Node) bool { return hasTaint(n, initTaint) })
	if _, ok := n.Annotations[agent.InitializedAnnotation]; ok {
		t.Errorf("initialized annotation set while a required condition fails")
	}
	p.set(probes.StatusOK)
	waitNode(t, c, "late", 10*time.Second, "the uninitialized taint lifted", func(n *corev1.Node) bool {
		_, done := n.Annotations[agent.InitializedAnnotation]
		return !hasTaint(n, initTaint) && done
	})
}

// slowProbe reports OK after a delay: the first round takes that long.
type slowProbe struct{ delay time.Duration }

func (slowProbe) Name() string { return probeName }
func (p slowProbe) Probe(ctx context.Context) probes.Result {
	select {
	case <-time.After(p.delay):
	case <-ctx.Done():
	}
	return probes.Result{Status: probes.StatusOK, Reason: "Fine", Message: "fine"}
}

// TestUninitializedTaintRestartContinuous: after a restart in continuous
// mode, before the first round completes, the agent cannot tell whether the
// node is initialized: it neither taints the node nor flips the condition
// to Unknown.
func TestUninitializedTaintRestartContinuous(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	cp.CreateNode(t, "init-restart", nil)
	in := &agent.InitOptions{Condition: initCond, Taint: initTaint, Continuous: true, Required: []corev1.NodeConditionType{cond}}
	_, stop := startAgent(t, agent.Options{
		NodeName: "init-restart", Client: c.CoreV1(), Init: in,
		Probes: []agent.ProbeSpec{{Entry: probes.Entry{Probe: newSwitchProbe(probes.StatusOK), Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond}, Condition: cond}},
	})
	waitNode(t, c, "init-restart", 10*time.Second, "initialized", func(n *corev1.Node) bool {
		_, done := n.Annotations[agent.InitializedAnnotation]
		return done && !hasTaint(n, initTaint)
	})
	stop()

	startAgent(t, agent.Options{
		NodeName: "init-restart", Client: c.CoreV1(), Init: in,
		Probes: []agent.ProbeSpec{{Entry: probes.Entry{Probe: slowProbe{3 * time.Second}, Interval: 10 * time.Second, Timeout: 5 * time.Second}, Condition: cond}},
	})
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		n := getNode(t, c, "init-restart")
		if hasTaint(n, initTaint) {
			t.Fatalf("the restarted agent tainted the node before its first round")
		}
		if ic := condition(n, initCond); ic == nil || ic.Status != corev1.ConditionFalse {
			t.Fatalf("initialization condition %+v during the restart, want it to stay False", ic)
		}
	}
}
