package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/faults"
)

// Integration tests against a real kube-apiserver.

const (
	otherCond  corev1.NodeConditionType = "SelftaintOtherPressure"
	thirdCond  corev1.NodeConditionType = "SelftaintThirdPressure"
	otherProbe                          = "other"
	thirdProbe                          = "third"
)

// namedProbe is a switchProbe under another name.
type namedProbe struct {
	*switchProbe
	name string
}

func (p namedProbe) Name() string { return p.name }

func probeSpec(p probes.Probe, c corev1.NodeConditionType, d taints.Damping) agent.ProbeSpec {
	return agent.ProbeSpec{Entry: probes.Entry{Probe: p, Interval: 100 * time.Millisecond, Timeout: 90 * time.Millisecond}, Condition: c, Damping: d}
}

const foreignAnnotation = "example.com/owner"

func withForeignAnnotation(n *corev1.Node) {
	withForeign(n)
	n.Annotations = map[string]string{foreignAnnotation: "team-a"}
}

// setAnnotations merge-patches annotations onto the Node (a nil value
// removes one), as kubectl annotate does.
func setAnnotations(t *testing.T, c kubernetes.Interface, node string, ann map[string]any) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating node %s: %v", node, err)
	}
}

func faultValue(t *testing.T, spec faults.Spec) string {
	t.Helper()
	v, err := spec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// nodeEvents returns the Events on node with reason.
func nodeEvents(t *testing.T, c kubernetes.Interface, node, reason string) []corev1.Event {
	t.Helper()
	evs, err := c.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": node, "reason": reason}.String(),
	})
	if err != nil {
		t.Fatalf("listing events: %v", err)
	}
	return evs.Items
}

// waitEvent waits for an Event on node with reason whose message contains
// every string in want, and returns it.
func waitEvent(t *testing.T, c kubernetes.Interface, node, reason string, timeout time.Duration, want ...string) corev1.Event {
	t.Helper()
	var found corev1.Event
	var msgs []string
	err := testcp.Poll(context.Background(), timeout, 100*time.Millisecond, func() (bool, error) {
		msgs = nil
		for _, e := range nodeEvents(t, c, node, reason) {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(e.Message, w)
			}
			if ok {
				found = e
				return true, nil
			}
			msgs = append(msgs, e.Message)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on %s mentioning %q: %v; saw %q", reason, node, want, err, msgs)
	}
	return found
}

// TestFaultInjectAndExpire injects a fault on a healthy node whose probe is
// damped by 30 s: the condition and taint follow at once, with a new
// lastTransitionTime; when the fault expires the condition and taint clear
// and the annotation goes, with nobody acting. Another writer's annotation,
// taint and condition survive every update.
func TestFaultInjectAndExpire(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "faulted"
	created := cp.CreateNode(t, node, withForeignAnnotation)
	w := startWatch(t, c, node, created.ResourceVersion)

	p := newSwitchProbe(probes.StatusOK)
	damping := taints.Damping{For: 30 * time.Second, ClearAfter: 30 * time.Second}
	runAgent(t, c, node, p, agentOpts{damping: damping})
	n := waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))
	ltt0 := condition(n, cond).LastTransitionTime.Time
	// lastTransitionTime has second precision: make the flip land in a later second.
	time.Sleep(time.Until(ltt0.Add(time.Second)) + 100*time.Millisecond)

	const ttl = 4 * time.Second
	key := faults.AnnotationKey(string(cond))
	expiry := time.Now().Add(ttl).Truncate(time.Second)
	value := faultValue(t, faults.Spec{
		Message:    "drill: pretend memory is short",
		ExpiresAt:  expiry.UTC().Format(time.RFC3339),
		InjectedBy: "TestFaultInjectAndExpire",
	})
	injected := time.Now()
	setAnnotations(t, c, node, map[string]any{key: value})
	n = waitNode(t, c, node, 10*time.Second, "condition True and our taint", func(n *corev1.Node) bool {
		return conditionIs(corev1.ConditionTrue)(n) && hasTaint(n, ourTaint)
	})
	took := time.Since(injected)
	t.Logf("condition True and taint %s after the injection", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("the fault took %s to apply, want under 3s (damping For=%s must not apply to faults)", took, damping.For)
	}
	cc := condition(n, cond)
	if cc.Reason != faults.DefaultReason || cc.Message != "["+key+"] drill: pretend memory is short" {
		t.Errorf("condition = %s/%s %q, want the fault's reason and message", cc.Status, cc.Reason, cc.Message)
	}
	ltt1 := cc.LastTransitionTime.Time
	if !ltt1.After(ltt0) || ltt1.Before(injected.Truncate(time.Second)) {
		t.Errorf("lastTransitionTime %s, want moved from %s to the injection (%s)", ltt1, ltt0, injected)
	}
	waitEvent(t, c, node, "FaultActive", 5*time.Second, key, "injected by TestFaultInjectAndExpire", string(cond)+" is True")

	// Nobody acts: the fault expires, the agent lifts it and removes it.
	n = waitNode(t, c, node, ttl+10*time.Second, "condition False, no taint and no fault annotation", func(n *corev1.Node) bool {
		_, annotated := n.Annotations[key]
		return conditionIs(corev1.ConditionFalse)(n) && !hasTaint(n, ourTaint) && !annotated
	})
	cleared := time.Now()
	t.Logf("cleared %s after the expiry", cleared.Sub(expiry).Round(time.Millisecond))
	if cleared.Before(expiry) {
		t.Errorf("the fault was lifted at %s, before its expiry %s", cleared, expiry)
	}
	cc = condition(n, cond)
	if cc.Reason != "Fine" {
		t.Errorf("condition reason after the fault = %q, want the probe's (Fine)", cc.Reason)
	}
	if ltt2 := cc.LastTransitionTime.Time; !ltt2.After(ltt1) {
		t.Errorf("lastTransitionTime %s did not move when the fault ended (was %s)", ltt2, ltt1)
	}
	if n.Annotations[foreignAnnotation] != "team-a" {
		t.Errorf("foreign annotation lost: %v", n.Annotations)
	}
	waitEvent(t, c, node, "FaultExpired", 5*time.Second, key)
	if evs := nodeEvents(t, c, node, "FaultRejected"); len(evs) != 0 {
		t.Errorf("unexpected FaultRejected event: %s", evs[0].Message)
	}
	checkForeignSurvived(t, w)
	for i, n := range w.seen() {
		if n.Annotations[foreignAnnotation] != "team-a" {
			t.Errorf("update %d (rv %s) lost the foreign annotation: %v", i, n.ResourceVersion, n.Annotations)
		}
	}
}

// TestFaultRejections writes malformed fault annotations next to a valid
// one: each is ignored with one FaultRejected Event naming the annotation
// and the problem, left in place, and the valid fault still applies. An
// agent with faults disabled rejects every fault and applies none.
func TestFaultRejections(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "rejecting"
	cp.CreateNode(t, node, withForeignAnnotation)

	main, other, third := newSwitchProbe(probes.StatusOK), newSwitchProbe(probes.StatusOK), newSwitchProbe(probes.StatusOK)
	damping := taints.Damping{For: 30 * time.Second, ClearAfter: 30 * time.Second}
	startAgent(t, agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes: []agent.ProbeSpec{
			probeSpec(main, cond, damping),
			probeSpec(namedProbe{other, otherProbe}, otherCond, damping),
			probeSpec(namedProbe{third, thirdProbe}, thirdCond, damping),
		},
		Rules:  rules,
		Faults: agent.FaultOptions{MaxDuration: time.Hour},
	})
	waitNode(t, c, node, 20*time.Second, "conditions False", func(n *corev1.Node) bool {
		for _, t := range []corev1.NodeConditionType{cond, otherCond, thirdCond} {
			if c := condition(n, t); c == nil || c.Status != corev1.ConditionFalse {
				return false
			}
		}
		return true
	})

	in := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }
	bad := map[string]struct{ value, problem string }{
		"fault.selftaint.io/switch":                 {`{"status":"True","expiresAt":`, "not a valid fault"},
		"fault.selftaint.io/SelftaintGPUFailure":    {`{"expiresAt":"` + in(5*time.Minute) + `"}`, `unknown target "SelftaintGPUFailure"`},
		"fault.selftaint.io/SelftaintOtherPressure": {`{"expiresAt":"` + in(-time.Minute) + `"}`, "is in the past already when the agent first saw it"},
		"fault.selftaint.io/other":                  {`{"expiresAt":"` + in(100*time.Hour) + `"}`, "beyond the maximum fault duration 1h0m0s"},
		"fault.selftaint.io/SelftaintThirdPressure": {`{"expiresAt":"` + in(5*time.Minute) + `","severity":"high"}`, `unknown field "severity"`},
		"fault.selftaint.io/third":                  {`{"status":"Maybe","expiresAt":"` + in(5*time.Minute) + `"}`, `status "Maybe" is not True, False or Unknown`},
	}
	validKey := faults.AnnotationKey(string(cond))
	ann := map[string]any{validKey: faultValue(t, faults.Spec{ExpiresAt: in(5 * time.Minute)})}
	for k, b := range bad {
		ann[k] = b.value
	}
	setAnnotations(t, c, node, ann)

	n := waitNode(t, c, node, 10*time.Second, "the valid fault applied", func(n *corev1.Node) bool {
		return conditionIs(corev1.ConditionTrue)(n) && hasTaint(n, ourTaint)
	})
	for _, oc := range []corev1.NodeConditionType{otherCond, thirdCond} {
		if cc := condition(n, oc); cc == nil || cc.Status != corev1.ConditionFalse || cc.Reason != "Fine" {
			t.Errorf("%s = %+v, want False/Fine: its faults were all malformed", oc, cc)
		}
	}
	for k, b := range bad {
		e := waitEvent(t, c, node, "FaultRejected", 10*time.Second, k+":", b.problem)
		t.Logf("%s", e.Message)
	}

	// More syncs (another writer's edits) must not repeat the reports.
	for i := range 3 {
		setAnnotations(t, c, node, map[string]any{foreignAnnotation: fmt.Sprintf("team-%d", i)})
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(time.Second)
	count := map[string]int32{}
	for _, e := range nodeEvents(t, c, node, "FaultRejected") {
		for k := range bad {
			if strings.Contains(e.Message, k+":") {
				count[k] += max(e.Count, 1)
			}
		}
	}
	for k := range bad {
		if count[k] != 1 {
			t.Errorf("%s reported %d times, want once", k, count[k])
		}
	}
	n = getNode(t, c, node)
	for k, b := range bad {
		if n.Annotations[k] != b.value {
			t.Errorf("rejected annotation %s = %q, want it left in place as %q", k, n.Annotations[k], b.value)
		}
	}
	if !conditionIs(corev1.ConditionTrue)(n) || !hasTaint(n, ourTaint) || !hasTaint(n, foreignTaint) {
		t.Errorf("after the rejections: %s, want the valid fault still applied and the foreign taint kept", describe(n))
	}
	if evs := nodeEvents(t, c, node, "FaultActive"); len(evs) != 1 || !strings.Contains(evs[0].Message, validKey) || evs[0].Count > 1 {
		t.Errorf("FaultActive events = %v, want one for %s", evs, validKey)
	}

	// The agent keeps going: a corrected annotation is judged afresh and applies.
	thirdKey := faults.AnnotationKey(thirdProbe)
	setAnnotations(t, c, node, map[string]any{thirdKey: faultValue(t, faults.Spec{Reason: "Corrected", ExpiresAt: in(5 * time.Minute)})})
	waitNode(t, c, node, 5*time.Second, "the corrected fault applied", func(n *corev1.Node) bool {
		cc := condition(n, thirdCond)
		return cc != nil && cc.Status == corev1.ConditionTrue && cc.Reason == "Corrected"
	})
	waitEvent(t, c, node, "FaultActive", 5*time.Second, thirdKey)

	// A disabled agent on another node ignores a well-formed fault.
	const off = "faults-off"
	cp.CreateNode(t, off, withForeign)
	startAgent(t, agent.Options{
		NodeName: off,
		Client:   c.CoreV1(),
		Probes:   []agent.ProbeSpec{probeSpec(newSwitchProbe(probes.StatusOK), cond, damping)},
		Rules:    rules,
		Faults:   agent.FaultOptions{Disabled: true},
	})
	waitNode(t, c, off, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))
	setAnnotations(t, c, off, map[string]any{validKey: faultValue(t, faults.Spec{ExpiresAt: in(5 * time.Minute)})})
	waitEvent(t, c, off, "FaultRejected", 10*time.Second, validKey, "fault injection is disabled")
	if n := getNode(t, c, off); !conditionIs(corev1.ConditionFalse)(n) || hasTaint(n, ourTaint) {
		t.Errorf("a disabled agent applied a fault: %s", describe(n))
	}
}

// TestFaultReinjectedBeforeRemovalIsKept re-injects a fault just as the
// agent is about to remove the expired one: the removal's JSON patch tests
// the old value, fails, and the new fault stays and applies.
func TestFaultReinjectedBeforeRemovalIsKept(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "reinjected"
	cp.CreateNode(t, node, withForeignAnnotation)
	key := faults.AnnotationKey(probeName)
	// The fault values are set once the agent runs; the hook reads them.
	var firstV, secondV atomic.Value
	firstV.Store("")
	secondV.Store("")

	var reinjected atomic.Bool
	hook := func(ctx context.Context, read *corev1.Node) {
		// The agent is lifting the first fault's taint; it removes the
		// annotation next. Someone injects again in between.
		if read.Annotations[key] != firstV.Load().(string) || conditionIs(corev1.ConditionTrue)(read) || reinjected.Swap(true) {
			return
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: secondV.Load().(string)}}})
		if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("re-injecting: %v", err)
		}
	}
	p := newSwitchProbe(probes.StatusOK)
	runAgent(t, c, node, p, agentOpts{damping: taints.Damping{For: time.Minute, ClearAfter: time.Minute}, hook: hook})
	waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))
	first := faultValue(t, faults.Spec{Message: "first", ExpiresAt: time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339)})
	second := faultValue(t, faults.Spec{Message: "second", ExpiresAt: time.Now().Add(5 * time.Minute).UTC().Format(time.RFC3339)})
	firstV.Store(first)
	secondV.Store(second)
	setAnnotations(t, c, node, map[string]any{key: first})
	waitNode(t, c, node, 5*time.Second, "the first fault applied", func(n *corev1.Node) bool {
		cc := condition(n, cond)
		return cc != nil && cc.Status == corev1.ConditionTrue && cc.Message == "["+key+"] first" && hasTaint(n, ourTaint)
	})
	waitNode(t, c, node, 15*time.Second, "the second fault applied", func(n *corev1.Node) bool {
		cc := condition(n, cond)
		return cc != nil && cc.Status == corev1.ConditionTrue && cc.Message == "["+key+"] second" && hasTaint(n, ourTaint)
	})
	if !reinjected.Load() {
		t.Fatalf("the hook never re-injected; the race was not exercised")
	}
	time.Sleep(time.Second)
	n := getNode(t, c, node)
	if n.Annotations[key] != second {
		t.Errorf("annotation = %q, want the re-injected fault kept", n.Annotations[key])
	}
	if evs := nodeEvents(t, c, node, "FaultExpired"); len(evs) != 0 {
		t.Errorf("FaultExpired event although the fault was re-injected: %s", evs[0].Message)
	}
	if n.Annotations[foreignAnnotation] != "team-a" || !hasTaint(n, foreignTaint) {
		t.Errorf("foreign annotation or taint lost: %s %v", describe(n), n.Annotations)
	}
}

// TestFaultSurvivesRestartAndExpiresWhileDown restarts the agent while a
// fault applies (nothing changes, lastTransitionTime included), then stops
// it until the fault has expired: the next agent recognises the fault it
// applied, removes it instead of rejecting it, and the condition clears.
func TestFaultSurvivesRestartAndExpiresWhileDown(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "restarted"
	cp.CreateNode(t, node, withForeignAnnotation)
	damping := taints.Damping{For: time.Minute, ClearAfter: time.Minute}
	p := newSwitchProbe(probes.StatusOK)
	_, stop := runAgent(t, c, node, p, agentOpts{damping: damping, heartbeat: time.Second})
	waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))

	key := faults.AnnotationKey(string(cond))
	expiry := time.Now().Add(8 * time.Second).Truncate(time.Second)
	setAnnotations(t, c, node, map[string]any{key: faultValue(t, faults.Spec{ExpiresAt: expiry.UTC().Format(time.RFC3339)})})
	n := waitNode(t, c, node, 5*time.Second, "the fault applied", func(n *corev1.Node) bool {
		return conditionIs(corev1.ConditionTrue)(n) && hasTaint(n, ourTaint)
	})
	ltt := condition(n, cond).LastTransitionTime
	stop()

	// Restart while the fault holds: the heartbeat writes, nothing changes.
	w := startWatch(t, c, node, getNode(t, c, node).ResourceVersion)
	_, stop = runAgent(t, c, node, p, agentOpts{damping: damping, heartbeat: time.Second})
	time.Sleep(1500 * time.Millisecond)
	stop()
	evs := w.seen()
	if len(evs) == 0 {
		t.Fatalf("the restarted agent wrote nothing despite a 1s heartbeat")
	}
	for i, n := range evs {
		cc := condition(n, cond)
		if cc == nil || cc.Status != corev1.ConditionTrue || !cc.LastTransitionTime.Equal(&ltt) || !hasTaint(n, ourTaint) {
			t.Errorf("update %d after restart changed the fault's condition or taint: %s, ltt %v want %v", i, describe(n), cc, ltt)
		}
	}
	if time.Now().After(expiry) {
		t.Fatalf("the fault expired during the restart check; the test is too slow to prove anything")
	}

	// Down past the expiry, then up again.
	time.Sleep(time.Until(expiry) + time.Second)
	runAgent(t, c, node, p, agentOpts{damping: damping})
	waitNode(t, c, node, 10*time.Second, "condition False, no taint, no fault annotation", func(n *corev1.Node) bool {
		_, annotated := n.Annotations[key]
		return conditionIs(corev1.ConditionFalse)(n) && !hasTaint(n, ourTaint) && !annotated
	})
	waitEvent(t, c, node, "FaultExpired", 5*time.Second, key)
	if evs := nodeEvents(t, c, node, "FaultRejected"); len(evs) != 0 {
		t.Errorf("the restarted agent rejected the fault it had applied: %s", evs[0].Message)
	}
}

// TestRejectedFaultStaysRejectedAfterRestart injects two faults longer than
// the maximum duration (2 s, so 7 s with the slack): one as the CLI writes
// it (with injectedAt), one in the older form without (as kubectl annotate
// writes it by hand). The agent rejects both; it is restarted once less
// than the maximum is left before they expire, which a restarted agent
// counting from its own first sight would accept; it rejects both again,
// from injectedAt and from the annotation's managed-fields time, and no
// watched version of the Node shows either condition faulted or our taint.
func TestRejectedFaultStaysRejectedAfterRestart(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "rejected-restart"
	cp.CreateNode(t, node, withForeignAnnotation)
	const maxDur = 2 * time.Second
	main, other := newSwitchProbe(probes.StatusOK), newSwitchProbe(probes.StatusOK)
	damping := taints.Damping{For: time.Minute, ClearAfter: time.Minute}
	opts := agent.Options{
		NodeName: node,
		Client:   c.CoreV1(),
		Probes:   []agent.ProbeSpec{probeSpec(main, cond, damping), probeSpec(namedProbe{other, otherProbe}, otherCond, damping)},
		Rules:    rules,
		Faults:   agent.FaultOptions{MaxDuration: maxDur},
	}
	healthy := func(n *corev1.Node) bool {
		for _, ct := range []corev1.NodeConditionType{cond, otherCond} {
			if cc := condition(n, ct); cc == nil || cc.Status != corev1.ConditionFalse || cc.Reason != "Fine" {
				return false
			}
		}
		return !hasTaint(n, ourTaint)
	}
	_, stop := startAgent(t, opts)
	w := startWatch(t, c, node, waitNode(t, c, node, 20*time.Second, "conditions False", healthy).ResourceVersion)

	const lasts = 16 * time.Second
	cliKey, oldKey := faults.AnnotationKey(probeName), faults.AnnotationKey(otherProbe)
	injected := time.Now()
	cliValue := faultValue(t, faults.Spec{Message: "too long", InjectedBy: "TestRejectedFaultStaysRejectedAfterRestart"}.Lasting(injected, lasts))
	expiry := injected.Add(lasts).Truncate(time.Second)
	oldValue := faultValue(t, faults.Spec{Message: "too long, old form", ExpiresAt: expiry.UTC().Format(time.RFC3339)})
	setAnnotations(t, c, node, map[string]any{cliKey: cliValue, oldKey: oldValue})
	waitEvent(t, c, node, "FaultRejected", 5*time.Second, cliKey+":", "from injectedAt", "beyond the maximum fault duration 2s")
	waitEvent(t, c, node, "FaultRejected", 5*time.Second, oldKey+":", "away, beyond the maximum fault duration 2s")
	stop()

	// Restart once a fault judged from first sight would be within the
	// maximum (plus the slack), with time left to see it rejected.
	restartAt := expiry.Add(-(maxDur + faults.ExpirySlack - 2*time.Second))
	time.Sleep(time.Until(restartAt))
	restarted := time.Now()
	startAgent(t, opts)
	waitEvent(t, c, node, "FaultRejected", 3*time.Second, oldKey+":", "from when its annotation was written")
	// The CLI fault's rejection reads as before; the restarted agent
	// reports it again.
	err := testcp.Poll(context.Background(), 3*time.Second, 100*time.Millisecond, func() (bool, error) {
		var n int32
		for _, e := range nodeEvents(t, c, node, "FaultRejected") {
			if strings.Contains(e.Message, cliKey+":") {
				n += max(e.Count, 1)
			}
		}
		return n >= 2, nil
	})
	if err != nil {
		t.Errorf("the restarted agent did not report the CLI fault rejected: %v", err)
	}
	time.Sleep(time.Until(restarted.Add(2 * time.Second)))
	if left := time.Until(expiry); left < 0 {
		t.Fatalf("the faults expired %s before the checks ended; the test proves nothing", -left)
	}
	n := getNode(t, c, node)
	if !healthy(n) {
		t.Errorf("after the restart: %s, want both conditions False (Fine) and no taint", describe(n))
	}
	if n.Annotations[cliKey] != cliValue || n.Annotations[oldKey] != oldValue {
		t.Errorf("rejected annotations = %q, %q, want them left in place", n.Annotations[cliKey], n.Annotations[oldKey])
	}
	for i, n := range w.seen() {
		if !healthy(n) {
			t.Errorf("update %d (rv %s) shows a fault: %s", i, n.ResourceVersion, describe(n))
		}
	}
	if evs := nodeEvents(t, c, node, "FaultActive"); len(evs) != 0 {
		t.Errorf("FaultActive event for a rejected fault: %s", evs[0].Message)
	}
}

// TestAppliedFaultRejudgedAfterRestart applies a fault, then restarts the
// agent with a maximum duration the fault exceeds (counted from its
// injectedAt): the restarted agent does not adopt it, rejects it with an
// Event, leaves the annotation, and the condition follows the probe again.
func TestAppliedFaultRejudgedAfterRestart(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "rejudged"
	cp.CreateNode(t, node, withForeignAnnotation)
	p := newSwitchProbe(probes.StatusOK)
	opts := func(max time.Duration) agent.Options {
		return agent.Options{
			NodeName: node,
			Client:   c.CoreV1(),
			Probes:   []agent.ProbeSpec{probeSpec(p, cond, taints.Damping{For: time.Minute, ClearAfter: time.Minute})},
			Rules:    rules,
			Faults:   agent.FaultOptions{MaxDuration: max},
		}
	}
	_, stop := startAgent(t, opts(time.Hour))
	waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))
	key := faults.AnnotationKey(string(cond))
	value := faultValue(t, faults.Spec{Reason: "Drill", Message: "ten minutes"}.Lasting(time.Now(), 10*time.Minute))
	setAnnotations(t, c, node, map[string]any{key: value})
	waitNode(t, c, node, 5*time.Second, "the fault applied", func(n *corev1.Node) bool {
		cc := condition(n, cond)
		return cc != nil && cc.Status == corev1.ConditionTrue && cc.Reason == "Drill" && hasTaint(n, ourTaint)
	})
	stop()

	startAgent(t, opts(time.Minute))
	waitEvent(t, c, node, "FaultRejected", 10*time.Second, key+":", "the fault lasts 10m", "from injectedAt", "beyond the maximum fault duration 1m0s")
	n := waitNode(t, c, node, 10*time.Second, "condition False (Fine) and no taint", func(n *corev1.Node) bool {
		cc := condition(n, cond)
		return cc != nil && cc.Status == corev1.ConditionFalse && cc.Reason == "Fine" && !hasTaint(n, ourTaint)
	})
	if n.Annotations[key] != value {
		t.Errorf("annotation = %q, want the rejected fault left in place", n.Annotations[key])
	}
	if !hasTaint(n, foreignTaint) || n.Annotations[foreignAnnotation] != "team-a" {
		t.Errorf("foreign taint or annotation lost: %s %v", describe(n), n.Annotations)
	}
}

// TestFaultClearedWhileDownIsNotAdopted injects a fault with a reason of
// its own (not the default one), stops the agent, clears the fault, and
// starts the agent again: the condition the fault set says nothing about
// the machine, so the restarted agent does not adopt it as its probe's
// finding (which would hold it True for the probe's clearAfter, an hour
// here): the healthy probe's first verdict clears it and its taint at once.
func TestFaultClearedWhileDownIsNotAdopted(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "cleared-while-down"
	cp.CreateNode(t, node, withForeignAnnotation)
	damping := taints.Damping{For: time.Minute, ClearAfter: time.Hour}
	p := newSwitchProbe(probes.StatusOK)
	_, stop := runAgent(t, c, node, p, agentOpts{damping: damping})
	waitNode(t, c, node, 20*time.Second, "condition False", conditionIs(corev1.ConditionFalse))

	key := faults.AnnotationKey(string(cond))
	setAnnotations(t, c, node, map[string]any{key: faultValue(t, faults.Spec{
		Reason: "ChaosDrill", Message: "pretend memory is short",
		ExpiresAt: time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339),
	})})
	n := waitNode(t, c, node, 10*time.Second, "the fault applied", func(n *corev1.Node) bool {
		return conditionIs(corev1.ConditionTrue)(n) && hasTaint(n, ourTaint)
	})
	if cc := condition(n, cond); cc.Reason != "ChaosDrill" {
		t.Fatalf("condition reason %q, want the fault's ChaosDrill", cc.Reason)
	}
	stop()

	setAnnotations(t, c, node, map[string]any{key: nil})
	w := startWatch(t, c, node, getNode(t, c, node).ResourceVersion)
	started := time.Now()
	a, _ := runAgent(t, c, node, p, agentOpts{damping: damping})
	n = waitNode(t, c, node, 20*time.Second, "condition False and no taint after the restart", func(n *corev1.Node) bool {
		return conditionIs(corev1.ConditionFalse)(n) && !hasTaint(n, ourTaint)
	})
	took := time.Since(started)
	t.Logf("restart -> the cleared fault's condition False and its taint gone: %s, in %d syncs", took.Round(time.Millisecond), a.Stats().Syncs)
	if cc := condition(n, cond); cc.Reason != "Fine" {
		t.Errorf("condition after the restart = %s/%s, want the probe's (Fine)", cc.Status, cc.Reason)
	}
	// Within one sync: the first write the restarted agent makes to the
	// condition is the probe's verdict.
	for i, v := range w.seen() {
		cc := condition(v, cond)
		if cc != nil && cc.Status == corev1.ConditionTrue && cc.Reason != "ChaosDrill" {
			t.Errorf("version %d (rv %s) took the fault's condition for the probe's: %s/%s", i, v.ResourceVersion, cc.Status, cc.Reason)
		}
	}
	if evs := nodeEvents(t, c, node, "FaultRejected"); len(evs) != 0 {
		t.Errorf("unexpected FaultRejected event: %s", evs[0].Message)
	}
}
