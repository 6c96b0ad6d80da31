package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/metrics"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/testkit"
)

// failingStatus is the agent's client to the real API server, but its
// status applies fail while fail is set (counted in failed).
type failingStatus struct {
	typedcorev1.CoreV1Interface
	fail, failed *atomic.Int64
}

func (f failingStatus) Nodes() typedcorev1.NodeInterface {
	return failingNodes{f.CoreV1Interface.Nodes(), f.fail, f.failed}
}

type failingNodes struct {
	typedcorev1.NodeInterface
	fail, failed *atomic.Int64
}

func (f failingNodes) ApplyStatus(ctx context.Context, n *corev1ac.NodeApplyConfiguration, o metav1.ApplyOptions) (*corev1.Node, error) {
	if f.fail.Load() != 0 {
		f.failed.Add(1)
		return nil, errors.New("test: the status write fails")
	}
	return f.NodeInterface.ApplyStatus(ctx, n, o)
}

// TestConditionEventWhenDecided: a condition change's Event is recorded as
// soon as the agent decides the change, before its status write, with the
// reason of the NPD rule that set it (kernel-monitor.json's DockerHung),
// as node-problem-detector records it; a write that fails and is retried
// tells it no second time.
func TestConditionEventWhenDecided(t *testing.T) {
	const (
		node = "events-decided"
		hung = "INFO: task docker:4321 blocked for more than 120 seconds."
	)
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	cp.CreateNode(t, node, nil)
	host, kmsg := logmonHost(t, "boot-1")
	var fail, failed atomic.Int64
	client := failingStatus{c.CoreV1(), &fail, &failed}
	startAgent(t, agent.Options{NodeName: node, Client: client, Probes: npdLogSpecs(t, host, "kernel-monitor.json")})
	waitNode(t, c, node, 30*time.Second, "KernelDeadlock False", func(n *corev1.Node) bool {
		return conditionWas(n, "KernelDeadlock", corev1.ConditionFalse, "KernelHasNoDeadlock")
	})

	fail.Store(1)
	appendKmsg(t, kmsg, kmsgRecord(1, 0, hung))
	e := waitEvent(t, c, node, "DockerHung", 30*time.Second, "KernelDeadlock is now True (DockerHung): "+hung)
	if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != node {
		t.Errorf("got a %s Event on %s %s, want a Warning on Node %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, node)
	}
	// The agent retries the write (backing off from 100ms): let it fail a
	// few times more.
	if err := testcp.Poll(context.Background(), 30*time.Second, 50*time.Millisecond, func() (bool, error) {
		return failed.Load() >= 3, nil
	}); err != nil {
		t.Fatalf("the status write was tried %d times, want 3: %v", failed.Load(), err)
	}
	if n := getNode(t, c, node); !conditionWas(n, "KernelDeadlock", corev1.ConditionFalse, "") {
		t.Fatalf("KernelDeadlock on the Node %+v while every status write fails, want it still False", condition(n, "KernelDeadlock"))
	}
	fail.Store(0)
	waitNode(t, c, node, 30*time.Second, "KernelDeadlock True", func(n *corev1.Node) bool {
		return conditionWas(n, "KernelDeadlock", corev1.ConditionTrue, "DockerHung")
	})
	time.Sleep(time.Second) // anything the recorder has left
	if evs := nodeEvents(t, c, node, "DockerHung"); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("DockerHung Events after %d failed writes: %d (%+v), want one, counted once", failed.Load(), len(evs), evs)
	}
	for _, e := range nodeEvents(t, c, node, agent.ReasonConditionChanged) {
		if strings.Contains(e.Message, "KernelDeadlock is now True") {
			t.Errorf("a ConditionChanged Event for an NPD file's condition: %q, want NPD's reason", e.Message)
		}
	}
}

// TestEventBurstAccounted: a burst of lines matching a temporary rule
// (kernel-monitor.json's OOMKilling): every line is accounted for, a
// burst of agent.ReasonBurst recorded and the rest held back, counted in
// selftaint_events_held_back_total and told in one log line.
func TestEventBurstAccounted(t *testing.T) {
	const (
		node  = "events-burst"
		lines = 12
	)
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	cp.CreateNode(t, node, nil)
	host, kmsg := logmonHost(t, "boot-1")
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.BuildInfo{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: npdLogSpecs(t, host, "kernel-monitor.json"),
		Metrics: m, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitNode(t, c, node, 30*time.Second, "KernelDeadlock False", func(n *corev1.Node) bool {
		return conditionWas(n, "KernelDeadlock", corev1.ConditionFalse, "KernelHasNoDeadlock")
	})
	var recs []string
	for i := range lines {
		recs = append(recs, kmsgRecord(i+1, 0, fmt.Sprintf("Out of memory: Killed process %d (burst) total-vm:1kB, anon-rss:1kB, file-rss:0kB", 5000+i)))
	}
	appendKmsg(t, kmsg, recs...)

	heldBack := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "selftaint_events_held_back_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "reason" && l.GetValue() == "OOMKilling" {
						return int(s.GetCounter().GetValue())
					}
				}
			}
		}
		return 0
	}
	recorded := func() int {
		n := 0
		for _, e := range nodeEvents(t, c, node, "OOMKilling") {
			n += int(e.Count)
		}
		return n
	}
	err = testcp.Poll(context.Background(), time.Minute, 100*time.Millisecond, func() (bool, error) {
		return recorded()+heldBack() >= lines, nil
	})
	time.Sleep(time.Second) // anything more the recorder writes
	r, h := recorded(), heldBack()
	if err != nil || r != agent.ReasonBurst || h != lines-agent.ReasonBurst {
		t.Errorf("%d matched lines: %d OOMKilling Events recorded, %d held back (%v), want %d and %d", lines, r, h, err, agent.ReasonBurst, lines-agent.ReasonBurst)
	}
	if got := strings.Count(logs.String(), "Events held back"); got != 1 || !strings.Contains(logs.String(), "reason=OOMKilling") {
		t.Errorf("the log tells the burst held back %d times, want once for OOMKilling; log:\n%s", got, logs.String())
	}
}
