package agent

import (
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/selftaint/selftaint/taints"
)

func TestFallbacks(t *testing.T) {
	const a, b = corev1.NodeConditionType("A"), corev1.NodeConditionType("B")
	const susp, wait = taints.ReasonNoExecuteSuspended, taints.ReasonNoExecuteWaiting
	v := func(c corev1.NodeConditionType, allowed bool, reason string) taints.NoExecuteVerdict {
		return taints.NoExecuteVerdict{Condition: c, Gate: taints.Gate{NoExecute: allowed, Reason: reason}}
	}
	type m = map[corev1.NodeConditionType]string
	tests := []struct {
		name     string
		prev     m
		verdicts []taints.NoExecuteVerdict
		wantFell string
		wantNow  m
	}{
		{"nothing applies", nil, nil, "[]", m{}},
		{"goes to its fallback", nil, []taints.NoExecuteVerdict{v(a, false, wait)}, "[A:NoExecuteWaiting]", m{a: wait}},
		{"stays there for the same reason", m{a: wait}, []taints.NoExecuteVerdict{v(a, false, wait)}, "[]", m{a: wait}},
		{"stays there for another reason", m{a: wait}, []taints.NoExecuteVerdict{v(a, false, susp)}, "[A:NoExecuteSuspended]", m{a: susp}},
		{"allowed", m{a: wait}, []taints.NoExecuteVerdict{v(a, true, "")}, "[]", m{}},
		{"back to the fallback after NoExecute", nil, []taints.NoExecuteVerdict{v(a, false, susp), v(b, true, "")}, "[A:NoExecuteSuspended]", m{a: susp}},
		{"the rule no longer applies", m{a: susp, b: wait}, []taints.NoExecuteVerdict{v(b, false, wait)}, "[]", m{b: wait}},
		{"two at once", nil, []taints.NoExecuteVerdict{v(a, false, susp), v(b, false, wait)}, "[A:NoExecuteSuspended B:NoExecuteWaiting]", m{a: susp, b: wait}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fell, now := fallbacks(tt.prev, tt.verdicts)
			var got []string
			for _, f := range fell {
				got = append(got, fmt.Sprintf("%s:%s", f.Condition, f.Reason))
			}
			if g := fmt.Sprint(got); g != tt.wantFell {
				t.Errorf("fell = %s, want %s", g, tt.wantFell)
			}
			if !maps.Equal(now, tt.wantNow) {
				t.Errorf("now = %v, want %v", now, tt.wantNow)
			}
		})
	}
}

// recorder is a Metrics that keeps what the flapping and NoExecute methods
// were last given, and the suspensions counted.
type recorder struct {
	nopMetrics
	flapping, noExecute map[corev1.NodeConditionType]bool
	suspended           []string
}

func (r *recorder) SetFlapping(f map[corev1.NodeConditionType]bool)  { r.flapping = f }
func (r *recorder) SetNoExecute(n map[corev1.NodeConditionType]bool) { r.noExecute = n }
func (r *recorder) NoExecuteSuspended(c corev1.NodeConditionType, reason string) {
	r.suspended = append(r.suspended, string(c)+":"+reason)
}

// TestReportSync checks what one sync's outcome gives Metrics: flapping for
// every condition published (false unless the limiter holds it), NoExecute
// for the conditions whose NoExecute rule applies.
func TestReportSync(t *testing.T) {
	const a, b, c = corev1.NodeConditionType("A"), corev1.NodeConditionType("B"), corev1.NodeConditionType("C")
	r := &recorder{}
	reportSync(r, syncOutcome{
		node: &corev1.Node{},
		states: map[corev1.NodeConditionType]taints.State{
			a: {Status: corev1.ConditionTrue}, b: {Status: corev1.ConditionTrue}, c: {Status: corev1.ConditionFalse},
		},
		flapping: map[corev1.NodeConditionType]bool{b: true},
		noExecute: []taints.NoExecuteVerdict{
			{Condition: a, Gate: taints.Gate{NoExecute: true}},
			{Condition: b, Gate: taints.Gate{Reason: taints.ReasonNoExecuteSuspended}},
		},
	})
	if want := map[corev1.NodeConditionType]bool{a: false, b: true, c: false}; !maps.Equal(r.flapping, want) {
		t.Errorf("SetFlapping(%v), want %v", r.flapping, want)
	}
	if want := map[corev1.NodeConditionType]bool{a: true, b: false}; !maps.Equal(r.noExecute, want) {
		t.Errorf("SetNoExecute(%v), want %v", r.noExecute, want)
	}
}

// TestObserveSyncCountsFallbacks checks observeSync counts a NoExecute
// rule going to its fallback once, not at every sync it stays there, and
// again when it gets there anew.
func TestObserveSyncCountsFallbacks(t *testing.T) {
	const c = corev1.NodeConditionType("C")
	r := &recorder{}
	a := &Agent{opts: Options{Metrics: r}, clock: testingclock.NewFakeClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))}
	sync := func(g taints.Gate) {
		a.observeSync(syncOutcome{
			node:      &corev1.Node{},
			states:    map[corev1.NodeConditionType]taints.State{c: {Status: corev1.ConditionTrue}},
			noExecute: []taints.NoExecuteVerdict{{Condition: c, Gate: g}},
		})
	}
	for _, g := range []taints.Gate{
		{Reason: taints.ReasonNoExecuteSuspended},
		{Reason: taints.ReasonNoExecuteSuspended},
		{Reason: taints.ReasonNoExecuteWaiting},
		{Reason: taints.ReasonNoExecuteWaiting},
		{NoExecute: true},
		{Reason: taints.ReasonNoExecuteWaiting},
	} {
		sync(g)
	}
	if got, want := fmt.Sprint(r.suspended), "[C:NoExecuteSuspended C:NoExecuteWaiting C:NoExecuteWaiting]"; got != want {
		t.Errorf("NoExecuteSuspended calls %s, want %s", got, want)
	}
	if !a.LoopState().FirstSync {
		t.Error("observeSync did not mark the first sync written")
	}
}
