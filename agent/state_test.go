package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

const recordProbeName = "records"

// recordProbe is a Stateful probe that reports Problem while it holds a
// record (a target, such as a GPU UUID, and when it learned of it). State
// encodes its records, Restore takes them back, Clear drops them. It counts
// its runs and notes how many had happened when Restore was called.
type recordProbe struct {
	name string
	// bloat, if set, makes State return that many bytes more.
	bloat int

	mu            sync.Mutex // guards the fields below
	records       map[string]time.Time
	runs          int
	restores      int
	runsAtRestore int
	restoredWith  []byte
}

var _ probes.Stateful = (*recordProbe)(nil)

func newRecordProbe(targets ...string) *recordProbe {
	p := &recordProbe{name: recordProbeName, records: map[string]time.Time{}, runsAtRestore: -1}
	for _, t := range targets {
		p.add(t)
	}
	return p
}

// add makes the probe hold a record of target, learned now.
func (p *recordProbe) add(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records[target] = time.Now()
}

func (p *recordProbe) Name() string { return p.name }

func (p *recordProbe) Probe(context.Context) probes.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	if len(p.records) == 0 {
		return probes.Result{Status: probes.StatusOK, Reason: "Fine", Message: "no records"}
	}
	return probes.Result{Status: probes.StatusProblem, Reason: "Held", Message: "holding " + strings.Join(slices.Sorted(maps.Keys(p.records)), ", ")}
}

// recordState is the probe's state encoding.
type recordState struct {
	Records map[string]time.Time `json:"records"`
	Pad     string               `json:"pad,omitempty"`
}

func (p *recordProbe) State() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.records) == 0 && p.bloat == 0 {
		return nil
	}
	b, err := json.Marshal(recordState{Records: p.records, Pad: strings.Repeat("x", p.bloat)})
	if err != nil {
		panic(err)
	}
	return b
}

func (p *recordProbe) Restore(state []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.restores++
	p.runsAtRestore = p.runs
	p.restoredWith = slices.Clone(state)
	if state == nil {
		return nil
	}
	var s recordState
	if err := json.Unmarshal(state, &s); err != nil {
		return fmt.Errorf("decoding records: %w", err)
	}
	maps.Copy(p.records, s.Records)
	return nil
}

func (p *recordProbe) Clear(targets []string, requested time.Time) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Equal(targets, []string{agent.ClearAll}) {
		targets = slices.Sorted(maps.Keys(p.records))
	}
	for _, t := range targets {
		if _, ok := p.records[t]; !ok {
			return "", fmt.Errorf("no record of %q", t)
		}
	}
	var cleared []string
	for _, t := range targets {
		if p.records[t].Before(requested) {
			delete(p.records, t)
			cleared = append(cleared, t)
		}
	}
	if len(cleared) == 0 {
		return "nothing to clear", nil
	}
	return "cleared " + strings.Join(cleared, ", "), nil
}

// restoreOrder returns how many times Restore was called, how many runs
// had happened by the first call (-1: never called) and what it was given.
func (p *recordProbe) restoreOrder() (restores, runsBefore int, with []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restores, p.runsAtRestore, p.restoredWith
}

func (p *recordProbe) runCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// runStateful runs an agent for node with p feeding cond under rules,
// without damping.
func runStateful(t *testing.T, c kubernetes.Interface, node string, p probes.Probe, heartbeat time.Duration, hook func(context.Context, *corev1.Node)) (*agent.Agent, func()) {
	t.Helper()
	return startAgent(t, agent.Options{
		NodeName:         node,
		Client:           c.CoreV1(),
		Probes:           []agent.ProbeSpec{probeSpec(p, cond, taints.Damping{})},
		Rules:            rules,
		HeartbeatPeriod:  heartbeat,
		BeforeTaintWrite: hook,
	})
}

var stateKey = agent.StateAnnotation(recordProbeName)

// hasRecords says the Node's state annotation holds exactly targets (none:
// no annotation).
func hasRecords(targets ...string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		v, ok := n.Annotations[stateKey]
		if len(targets) == 0 {
			return !ok
		}
		var s recordState
		if !ok || json.Unmarshal([]byte(v), &s) != nil {
			return false
		}
		return slices.Equal(slices.Sorted(maps.Keys(s.Records)), targets)
	}
}

func tainted(n *corev1.Node) bool {
	return conditionIs(corev1.ConditionTrue)(n) && hasTaint(n, ourTaint)
}

func clearValue(t *testing.T, r agent.ClearRequest) string {
	t.Helper()
	v, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// now3339 is now as a request's requestedAt, to the nanosecond (as
// selftaint gpu clear writes it).
func now3339() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// checkForeignAnnotation fails t for every watched version of the Node
// without the foreign annotation.
func checkForeignAnnotation(t *testing.T, w *nodeWatch) {
	t.Helper()
	for i, n := range w.seen() {
		if n.Annotations[foreignAnnotation] != "team-a" {
			t.Errorf("update %d (rv %s) lost the foreign annotation: %v", i, n.ResourceVersion, n.Annotations)
		}
	}
}

// TestStatefulStateSurvivesRestart: agent 1's probe holds a record, so the
// condition is True, the taint on and the state annotation written. Agent 2
// runs a fresh probe that holds nothing (and would report OK) unless its
// state is restored: no version of the Node a watch sees after the restart
// lacks the taint or shows the condition anything but True, Restore is
// called once, with the annotation, before the probe's first run, and
// another writer's annotation and taint survive every version.
func TestStatefulStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "stateful-restart"
	created := cp.CreateNode(t, node, withForeignAnnotation)
	w1 := startWatch(t, c, node, created.ResourceVersion)

	p1 := newRecordProbe("GPU-1")
	_, stop1 := runStateful(t, c, node, p1, time.Second, nil)
	n := waitNode(t, c, node, 20*time.Second, "condition True, taint and state", func(n *corev1.Node) bool {
		return tainted(n) && hasRecords("GPU-1")(n)
	})
	if restores, before, with := p1.restoreOrder(); restores != 1 || before != 0 || with != nil {
		t.Errorf("agent 1: Restore called %d times after %d runs with %q, want once before any run with nil (no annotation)", restores, before, with)
	}
	ltt := condition(n, cond).LastTransitionTime
	stop1()
	kept := getNode(t, c, node)
	state := kept.Annotations[stateKey]

	w2 := startWatch(t, c, node, kept.ResourceVersion)
	p2 := newRecordProbe()
	_, stop2 := runStateful(t, c, node, p2, time.Second, nil)
	// Several heartbeats, and many probe runs.
	time.Sleep(3 * time.Second)
	stop2()
	if runs := p2.runCount(); runs < 10 {
		t.Fatalf("agent 2's probe ran %d times in 3s; the test proves nothing", runs)
	}
	restores, before, with := p2.restoreOrder()
	if restores != 1 || before != 0 {
		t.Errorf("agent 2: Restore called %d times, after %d runs; want once, before the first run", restores, before)
	}
	if string(with) != state {
		t.Errorf("agent 2 restored %q, want the annotation %q", with, state)
	}
	evs := w2.seen()
	if len(evs) == 0 {
		t.Fatalf("agent 2 wrote nothing in 3s despite a 1s heartbeat")
	}
	for i, n := range evs {
		cc := condition(n, cond)
		if !hasTaint(n, ourTaint) || cc == nil || cc.Status != corev1.ConditionTrue || !cc.LastTransitionTime.Equal(&ltt) {
			t.Errorf("update %d (rv %s) after the restart: %s, condition %+v; want our taint and True since %s", i, n.ResourceVersion, describe(n), cc, ltt)
		}
		if !hasRecords("GPU-1")(n) {
			t.Errorf("update %d (rv %s) after the restart lost the state: %q", i, n.ResourceVersion, n.Annotations[stateKey])
		}
	}
	for _, w := range []*nodeWatch{w1, w2} {
		checkForeignSurvived(t, w)
		checkForeignAnnotation(t, w)
	}
	if evs := nodeEvents(t, c, node, "ProbeStateUnreadable"); len(evs) != 0 {
		t.Errorf("unexpected ProbeStateUnreadable: %s", evs[0].Message)
	}
}

// TestStatefulStateOnlyChangeWrites: a new record changes the probe's state
// but not its condition's status or reason; with a 1h heartbeat only the
// state change can make the agent write, and it does, within a few runs.
func TestStatefulStateOnlyChangeWrites(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "stateful-change"
	cp.CreateNode(t, node, withForeignAnnotation)
	p := newRecordProbe("GPU-1")
	a, _ := runStateful(t, c, node, p, time.Hour, nil)
	waitNode(t, c, node, 20*time.Second, "taint and state", func(n *corev1.Node) bool { return tainted(n) && hasRecords("GPU-1")(n) })
	time.Sleep(time.Second) // the informer catches up with our own writes
	before := a.Stats()

	p.add("GPU-2")
	added := time.Now()
	n := waitNode(t, c, node, 5*time.Second, "the new record written", hasRecords("GPU-1", "GPU-2"))
	t.Logf("state written %s after the record was added", time.Since(added).Round(time.Millisecond))
	// The agent counts its write once the API server's answer is back,
	// which may be after we saw the Node change.
	if err := testcp.Poll(context.Background(), 5*time.Second, 10*time.Millisecond, func() (bool, error) {
		return a.Stats().TaintWrites > before.TaintWrites, nil
	}); err != nil {
		t.Errorf("metadata writes %d -> %d, want one more", before.TaintWrites, a.Stats().TaintWrites)
	}
	if cc := condition(n, cond); cc == nil || cc.Status != corev1.ConditionTrue || cc.Reason != "Held" {
		t.Errorf("condition %+v, want still True/Held", cc)
	}
	if !hasTaint(n, ourTaint) || !hasTaint(n, foreignTaint) || n.Annotations[foreignAnnotation] != "team-a" {
		t.Errorf("after the state write: %s %v", describe(n), n.Annotations)
	}
}

// TestStatefulUnreadableState: a garbage state annotation gets a
// ProbeStateUnreadable Event naming the probe and the error; the probe
// starts afresh, the agent keeps working (the garbage is replaced by the
// probe's own state). A state too big for an annotation is not written,
// with a ProbeStateUnwritable Event, and the taints are still written.
func TestStatefulUnreadableState(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "stateful-garbage"
	cp.CreateNode(t, node, func(n *corev1.Node) {
		withForeignAnnotation(n)
		n.Annotations[stateKey] = "{not json"
	})
	p := newRecordProbe()
	runStateful(t, c, node, p, time.Hour, nil)
	waitEvent(t, c, node, "ProbeStateUnreadable", 20*time.Second, recordProbeName, stateKey, "decoding records")
	waitNode(t, c, node, 10*time.Second, "condition False, the garbage gone", func(n *corev1.Node) bool {
		return conditionIs(corev1.ConditionFalse)(n) && hasRecords()(n)
	})
	if restores, before, _ := p.restoreOrder(); restores != 1 || before != 0 {
		t.Errorf("Restore called %d times after %d runs, want once before the first run", restores, before)
	}
	p.add("GPU-3")
	n := waitNode(t, c, node, 10*time.Second, "the agent still works: taint and state", func(n *corev1.Node) bool {
		return tainted(n) && hasRecords("GPU-3")(n)
	})
	if n.Annotations[foreignAnnotation] != "team-a" || !hasTaint(n, foreignTaint) {
		t.Errorf("foreign annotation or taint lost: %s %v", describe(n), n.Annotations)
	}

	const big = "stateful-big"
	cp.CreateNode(t, big, withForeignAnnotation)
	bp := newRecordProbe("GPU-1")
	bp.bloat = agent.MaxStateLen
	runStateful(t, c, big, bp, time.Hour, nil)
	waitEvent(t, c, big, "ProbeStateUnwritable", 20*time.Second, recordProbeName, "longer than")
	n = waitNode(t, c, big, 10*time.Second, "the taint written all the same", tainted)
	if _, ok := n.Annotations[stateKey]; ok {
		t.Errorf("an oversized state was written: %d bytes", len(n.Annotations[stateKey]))
	}
}

// TestStatefulClear: an operator's clear requests are each handled once:
// the probe clears, a ProbeStateCleared Event carries its words and who
// asked, the annotation goes in the agent's next write together with the
// new state, and the taint lifts after the probe's next run once nothing
// is held. Requests the agent cannot act on (malformed, unknown probe, no
// requestedAt, the probe's own error) get one ClearRejected Event each and
// are removed too. Another writer's annotation and taint survive.
func TestStatefulClear(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "stateful-clear"
	created := cp.CreateNode(t, node, withForeignAnnotation)
	w := startWatch(t, c, node, created.ResourceVersion)
	p := newRecordProbe("GPU-1", "GPU-2")
	runStateful(t, c, node, p, time.Hour, nil)
	waitNode(t, c, node, 20*time.Second, "taint and state", func(n *corev1.Node) bool { return tainted(n) && hasRecords("GPU-1", "GPU-2")(n) })

	clearKey := agent.ClearAnnotation(recordProbeName)
	setAnnotations(t, c, node, map[string]any{clearKey: clearValue(t, agent.ClearRequest{Targets: []string{"GPU-1"}, RequestedAt: now3339(), By: "alice"})})
	waitEvent(t, c, node, "ProbeStateCleared", 10*time.Second, recordProbeName, "by alice", "cleared GPU-1")
	n := waitNode(t, c, node, 10*time.Second, "request removed, GPU-1 gone from the state", func(n *corev1.Node) bool {
		_, asked := n.Annotations[clearKey]
		return !asked && hasRecords("GPU-2")(n)
	})
	if !tainted(n) {
		t.Errorf("the taint lifted while GPU-2 is still held: %s", describe(n))
	}

	// Clear everything.
	setAnnotations(t, c, node, map[string]any{clearKey: clearValue(t, agent.ClearRequest{Targets: []string{agent.ClearAll}, RequestedAt: now3339(), By: "bob"})})
	waitEvent(t, c, node, "ProbeStateCleared", 10*time.Second, "by bob", "cleared GPU-2")
	waitNode(t, c, node, 10*time.Second, "request removed, no state, no taint, condition False", func(n *corev1.Node) bool {
		_, asked := n.Annotations[clearKey]
		return !asked && hasRecords()(n) && !hasTaint(n, ourTaint) && conditionIs(corev1.ConditionFalse)(n)
	})

	// Requests the agent rejects.
	p.add("GPU-4")
	waitNode(t, c, node, 10*time.Second, "tainted again", tainted)
	bad := map[string]struct{ value, problem string }{
		clearKey:                        {`{"targets":["GPU-4"],`, "not a valid clear request"},
		agent.ClearAnnotation("nosuch"): {clearValue(t, agent.ClearRequest{Targets: []string{"all"}, RequestedAt: now3339()}), `no probe "nosuch" keeps state on this node (those that do: ` + recordProbeName + ")"},
	}
	setAnnotations(t, c, node, map[string]any{clearKey: bad[clearKey].value, agent.ClearAnnotation("nosuch"): bad[agent.ClearAnnotation("nosuch")].value})
	for k, b := range bad {
		waitEvent(t, c, node, "ClearRejected", 10*time.Second, k, b.problem)
	}
	waitNode(t, c, node, 10*time.Second, "rejected requests removed", func(n *corev1.Node) bool {
		_, a := n.Annotations[clearKey]
		_, b := n.Annotations[agent.ClearAnnotation("nosuch")]
		return !a && !b
	})
	for _, r := range []struct{ value, problem string }{
		{`{"targets":["GPU-4"]}`, "no requestedAt"},
		{`{"targets":["GPU-9"],"requestedAt":"` + now3339() + `"}`, `no record of "GPU-9"`},
	} {
		setAnnotations(t, c, node, map[string]any{clearKey: r.value})
		waitEvent(t, c, node, "ClearRejected", 10*time.Second, clearKey, r.problem)
		waitNode(t, c, node, 10*time.Second, "rejected request removed", func(n *corev1.Node) bool {
			_, asked := n.Annotations[clearKey]
			return !asked
		})
	}
	n = getNode(t, c, node)
	if !tainted(n) || !hasRecords("GPU-4")(n) {
		t.Errorf("a rejected request changed the probe's state: %s %q", describe(n), n.Annotations[stateKey])
	}

	// More syncs must not repeat any report.
	for i := range 3 {
		setAnnotations(t, c, node, map[string]any{foreignAnnotation: fmt.Sprintf("team-%d", i)})
		time.Sleep(300 * time.Millisecond)
	}
	setAnnotations(t, c, node, map[string]any{foreignAnnotation: "team-a"})
	time.Sleep(time.Second)
	var total int32
	for _, reason := range []string{"ProbeStateCleared", "ClearRejected"} {
		for _, e := range nodeEvents(t, c, node, reason) {
			if e.Count > 1 {
				t.Errorf("%s reported %d times: %s", reason, e.Count, e.Message)
			}
			total += max(e.Count, 1)
		}
	}
	if total != 6 {
		t.Errorf("%d clear Events, want 6 (2 cleared, 4 rejected)", total)
	}
	checkForeignSurvived(t, w)
	for i, n := range w.seen() {
		if v := n.Annotations[foreignAnnotation]; !strings.HasPrefix(v, "team-") {
			t.Errorf("update %d (rv %s) lost the foreign annotation: %v", i, n.ResourceVersion, n.Annotations)
		}
	}
}

// TestStatefulClearRunsTheProbe: a clear request runs the probe at once,
// so the condition and taint follow within seconds though its interval is
// an hour.
func TestStatefulClearRunsTheProbe(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "stateful-clear-runs"
	cp.CreateNode(t, node, nil)
	p := newRecordProbe("GPU-1")
	startAgent(t, agent.Options{
		NodeName:        node,
		Client:          c.CoreV1(),
		Probes:          []agent.ProbeSpec{{Entry: probes.Entry{Probe: p, Interval: time.Hour, Timeout: time.Second}, Condition: cond}},
		Rules:           rules,
		HeartbeatPeriod: time.Hour,
	})
	waitNode(t, c, node, 20*time.Second, "taint and state", func(n *corev1.Node) bool { return tainted(n) && hasRecords("GPU-1")(n) })
	setAnnotations(t, c, node, map[string]any{agent.ClearAnnotation(recordProbeName): clearValue(t, agent.ClearRequest{Targets: []string{agent.ClearAll}, RequestedAt: now3339()})})
	waitNode(t, c, node, 20*time.Second, "no taint, condition False, well before the hour's interval", func(n *corev1.Node) bool {
		return !hasTaint(n, ourTaint) && conditionIs(corev1.ConditionFalse)(n)
	})
}

// TestStatefulClearNewerRequestKept: a second request written between the
// agent's read and its write (which removes the first) makes the write
// conflict; the agent re-reads, leaves the second request in place, and
// handles it at its next sync. Both are acted on, once each.
func TestStatefulClearNewerRequestKept(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	const node = "stateful-clear-race"
	cp.CreateNode(t, node, withForeignAnnotation)
	clearKey := agent.ClearAnnotation(recordProbeName)
	var firstV, secondV atomic.Value
	firstV.Store("")
	secondV.Store("")
	var raced atomic.Bool
	hook := func(ctx context.Context, read *corev1.Node) {
		first := firstV.Load().(string)
		if first == "" || read.Annotations[clearKey] != first || raced.Swap(true) {
			return
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{clearKey: secondV.Load().(string)}}})
		if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("writing the second request: %v", err)
		}
	}
	p := newRecordProbe("GPU-1", "GPU-2")
	a, _ := runStateful(t, c, node, p, time.Hour, hook)
	waitNode(t, c, node, 20*time.Second, "taint and state", func(n *corev1.Node) bool { return tainted(n) && hasRecords("GPU-1", "GPU-2")(n) })

	first := clearValue(t, agent.ClearRequest{Targets: []string{"GPU-1"}, RequestedAt: now3339(), By: "first"})
	second := clearValue(t, agent.ClearRequest{Targets: []string{"GPU-2"}, RequestedAt: now3339(), By: "second"})
	secondV.Store(second)
	firstV.Store(first)
	setAnnotations(t, c, node, map[string]any{clearKey: first})
	waitEvent(t, c, node, "ProbeStateCleared", 10*time.Second, "by first", "cleared GPU-1")
	waitEvent(t, c, node, "ProbeStateCleared", 10*time.Second, "by second", "cleared GPU-2")
	waitNode(t, c, node, 10*time.Second, "both handled: no request, no state, no taint", func(n *corev1.Node) bool {
		_, asked := n.Annotations[clearKey]
		return !asked && hasRecords()(n) && !hasTaint(n, ourTaint)
	})
	if !raced.Load() {
		t.Fatalf("the hook never wrote the second request; the race was not exercised")
	}
	if got := a.Stats().Conflicts; got < 1 {
		t.Errorf("conflicts = %d, want at least 1", got)
	}
	if evs := nodeEvents(t, c, node, "ClearRejected"); len(evs) != 0 {
		t.Errorf("unexpected ClearRejected: %s", evs[0].Message)
	}
}

func TestClearRequestParse(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		value   string
		want    agent.ClearRequest
		wantErr string
	}{
		{"one target", `{"targets":["GPU-1"],"requestedAt":"2026-03-01T12:00:00Z","by":"alice"}`,
			agent.ClearRequest{Targets: []string{"GPU-1"}, RequestedAt: "2026-03-01T12:00:00Z", By: "alice"}, ""},
		{"all, no by", `{"targets":["all"],"requestedAt":"2026-03-01T13:00:00+01:00"}`,
			agent.ClearRequest{Targets: []string{"all"}, RequestedAt: "2026-03-01T13:00:00+01:00"}, ""},
		{"fractional seconds", `{"targets":["a"],"requestedAt":"2026-03-01T12:00:00.000000000Z"}`,
			agent.ClearRequest{Targets: []string{"a"}, RequestedAt: "2026-03-01T12:00:00.000000000Z"}, ""},
		{"not JSON", `{"targets":`, agent.ClearRequest{}, "not a valid clear request"},
		{"unknown field", `{"targets":["a"],"requestedAt":"2026-03-01T12:00:00Z","gpu":"x"}`, agent.ClearRequest{}, `unknown field "gpu"`},
		{"trailing data", `{"targets":["a"],"requestedAt":"2026-03-01T12:00:00Z"} {}`, agent.ClearRequest{}, "not a valid clear request"},
		{"no targets", `{"requestedAt":"2026-03-01T12:00:00Z"}`, agent.ClearRequest{}, "names no targets"},
		{"empty targets", `{"targets":[],"requestedAt":"2026-03-01T12:00:00Z"}`, agent.ClearRequest{}, "names no targets"},
		{"an empty target", `{"targets":["a",""],"requestedAt":"2026-03-01T12:00:00Z"}`, agent.ClearRequest{}, "target 1 is empty"},
		{"no requestedAt", `{"targets":["a"]}`, agent.ClearRequest{}, "has no requestedAt"},
		{"bad requestedAt", `{"targets":["a"],"requestedAt":"yesterday"}`, agent.ClearRequest{}, `requestedAt "yesterday" is not RFC 3339`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, when, err := agent.ParseClearRequest(tt.value)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			if !slices.Equal(got.Targets, tt.want.Targets) || got.RequestedAt != tt.want.RequestedAt || got.By != tt.want.By {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if !when.Equal(at) {
				t.Errorf("requested at %v, want %v", when, at)
			}
			// Encode gives back a value that parses to the same request.
			v, err := got.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if again, _, err := agent.ParseClearRequest(v); err != nil || !slices.Equal(again.Targets, got.Targets) || again.By != got.By {
				t.Errorf("Encode round trip: %q -> %+v, %v", v, again, err)
			}
		})
	}
	if _, err := (agent.ClearRequest{Targets: []string{"a"}}).Encode(); err == nil {
		t.Errorf("Encode of a request without requestedAt: no error")
	}
}
