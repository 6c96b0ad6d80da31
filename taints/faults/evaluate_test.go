package faults_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/faults"
)

// TestEvaluate walks fault annotations through a sequence of syncs with a
// fake clock: a fault starting, holding, ending by expiry (due for removal)
// and by removal, a value rejected once however often it is seen, a value
// re-injected, two faults on one condition, one already stale when first
// seen, and a disabled agent.
func TestEvaluate(t *testing.T) {
	at := func(d time.Duration) string { return faultNow.Add(d).Format(time.RFC3339) }
	value := func(status corev1.ConditionStatus, expires time.Duration) string {
		return fmt.Sprintf(`{"status":%q,"expiresAt":%q}`, status, at(expires))
	}
	memKey, diskKey := faults.AnnotationKey("memory"), faults.AnnotationKey("SelftaintDiskPressure")
	memCondKey := faults.AnnotationKey("SelftaintMemoryPressure")
	j := faults.Judge{Conditions: faultKnown, ProbeConditions: faultProbe, MaxDuration: time.Hour}

	type sync struct {
		at          time.Duration
		annotations map[string]string
		// want: condition -> status in force; keys started, ended,
		// rejected, expired; next expiry (offset, -1 for none).
		apply                             map[corev1.NodeConditionType]corev1.ConditionStatus
		started, ended, rejected, expired []string
		next                              time.Duration
	}
	tests := []struct {
		name  string
		judge faults.Judge
		syncs []sync
	}{
		{
			name: "start, hold, expire (due for removal), then gone", judge: j,
			syncs: []sync{
				{at: 0, annotations: map[string]string{memKey: value("True", 10*time.Minute)},
					apply: map[corev1.NodeConditionType]corev1.ConditionStatus{"SelftaintMemoryPressure": "True"}, started: []string{memKey}, next: 10 * time.Minute},
				{at: time.Minute, annotations: map[string]string{memKey: value("True", 10*time.Minute)},
					apply: map[corev1.NodeConditionType]corev1.ConditionStatus{"SelftaintMemoryPressure": "True"}, next: 10 * time.Minute},
				{at: 10 * time.Minute, annotations: map[string]string{memKey: value("True", 10*time.Minute)},
					ended: []string{memKey}, expired: []string{memKey}, next: -1},
				{at: 11 * time.Minute, annotations: map[string]string{}, next: -1},
			},
		},
		{
			name: "removed by the operator before expiry: ends, nothing to remove", judge: j,
			syncs: []sync{
				{at: 0, annotations: map[string]string{memKey: value("True", 10*time.Minute)},
					apply: map[corev1.NodeConditionType]corev1.ConditionStatus{"SelftaintMemoryPressure": "True"}, started: []string{memKey}, next: 10 * time.Minute},
				{at: time.Minute, annotations: nil, ended: []string{memKey}, next: -1},
			},
		},
		{
			name: "a bad value is rejected once, however often it is seen; a new value is judged afresh", judge: j,
			syncs: []sync{
				{at: 0, annotations: map[string]string{memKey: `{"status":"Maybe"}`}, rejected: []string{memKey}, next: -1},
				{at: time.Minute, annotations: map[string]string{memKey: `{"status":"Maybe"}`}, next: -1},
				{at: 2 * time.Minute, annotations: map[string]string{memKey: value("False", 10*time.Minute)},
					apply: map[corev1.NodeConditionType]corev1.ConditionStatus{"SelftaintMemoryPressure": "False"}, started: []string{memKey}, next: 10 * time.Minute},
			},
		},
		{
			name: "too long when first seen: rejected, and stays rejected as time passes", judge: j,
			syncs: []sync{
				{at: 0, annotations: map[string]string{memKey: value("True", 2*time.Hour)}, rejected: []string{memKey}, next: -1},
				{at: 90 * time.Minute, annotations: map[string]string{memKey: value("True", 2*time.Hour)}, next: -1},
			},
		},
		{
			name: "already expired when first seen: rejected, not removed", judge: j,
			syncs: []sync{
				{at: 0, annotations: map[string]string{memKey: value("True", -time.Minute)}, rejected: []string{memKey}, next: -1},
			},
		},
		{
			name: "re-injected with a new value: starts again", judge: j,
			syncs: []sync{
				{at: 0, annotations: map[string]string{memKey: value("True", 5*time.Minute)},
					apply: map[corev1.NodeConditionType]corev1.ConditionStatus{"SelftaintMemoryPressure": "True"}, started: []string{memKey}, next: 5 * time.Minute},
				{at: time.Minute, annotations: map[string]string{memKey: value("Unknown", 20*time.Minute)},
					apply: map[corev1.NodeConditionType]corev1.ConditionStatus{"SelftaintMemoryPressure": "Unknown"}, started: []string{memKey}, next: 20 * time.Minute},
			},
		},
		{
			name: "two faults on one condition: one applies; two conditions: both", judge: j,
			syncs: []sync{
				{at: 0, annotations: map[string]string{memKey: value("True", 5*time.Minute), memCondKey: value("False", 30*time.Minute), diskKey: value("True", 7*time.Minute)},
					apply:   map[corev1.NodeConditionType]corev1.ConditionStatus{"SelftaintMemoryPressure": "False", "SelftaintDiskPressure": "True"},
					started: []string{diskKey, memCondKey}, next: 5 * time.Minute},
			},
		},
		{
			name: "disabled: every fault rejected, nothing applies", judge: faults.Judge{Disabled: true, Conditions: faultKnown, ProbeConditions: faultProbe, MaxDuration: time.Hour},
			syncs: []sync{
				{at: 0, annotations: map[string]string{memKey: value("True", 5*time.Minute)}, rejected: []string{memKey}, next: -1},
			},
		},
	}
	keys := func(fs []faults.Fault) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Key)
		}
		return out
	}
	for _, tt := range tests {
		mem := faults.Memory{}
		for i, s := range tt.syncs {
			before := fmt.Sprint(mem)
			ev, next := faults.Evaluate(s.annotations, mem, faultNow.Add(s.at), tt.judge)
			if fmt.Sprint(mem) != before {
				t.Errorf("%s, sync %d: Evaluate changed the memory it was given", tt.name, i)
			}
			mem = next
			apply := map[corev1.NodeConditionType]corev1.ConditionStatus{}
			for c, f := range ev.Apply {
				apply[c] = f.Status
			}
			var rejected []string
			for _, r := range ev.Rejected {
				rejected = append(rejected, r.Key)
			}
			wantNext := time.Time{}
			if s.next >= 0 {
				wantNext = faultNow.Add(s.next)
			}
			for _, c := range []struct {
				what      string
				got, want any
			}{
				{"apply", fmt.Sprint(apply), fmt.Sprint(nonNil(s.apply))},
				{"started", keys(ev.Started), s.started},
				{"ended", ev.Ended, s.ended},
				{"rejected", rejected, s.rejected},
				{"expired", keys(ev.Expired), s.expired},
				{"next", ev.Next, wantNext},
			} {
				if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
					t.Errorf("%s, sync %d: %s = %v, want %v", tt.name, i, c.what, c.got, c.want)
				}
			}
		}
	}
}

func nonNil(m map[corev1.NodeConditionType]corev1.ConditionStatus) map[corev1.NodeConditionType]corev1.ConditionStatus {
	if m == nil {
		return map[corev1.NodeConditionType]corev1.ConditionStatus{}
	}
	return m
}

// TestEvaluateAfterRestart judges, with a fresh memory as a restarted agent
// has, a fault that was too long when first seen: from its injectedAt or
// the time its annotation was written it stays rejected however late the
// restart; with neither it is judged from first sight (the documented
// limit for old faults). A fault written within the maximum still applies.
func TestEvaluateAfterRestart(t *testing.T) {
	at := func(d time.Duration) string { return faultNow.Add(d).Format(time.RFC3339) }
	key := faults.AnnotationKey("memory")
	j := faults.Judge{Conditions: faultKnown, ProbeConditions: faultProbe, MaxDuration: time.Hour}
	withInjected := fmt.Sprintf(`{"injectedAt":%q,"expiresAt":%q}`, at(0), at(2*time.Hour))
	old := fmt.Sprintf(`{"expiresAt":%q}`, at(2*time.Hour))
	short := fmt.Sprintf(`{"injectedAt":%q,"expiresAt":%q}`, at(0), at(time.Hour))
	written := func(v string) map[string]faults.Written {
		return map[string]faults.Written{key: {Value: v, At: faultNow}}
	}
	tests := []struct {
		name    string
		value   string
		written map[string]faults.Written
		restart time.Duration
		applies bool
		problem string
	}{
		{"injectedAt, restarted 90m on", withInjected, nil, 90 * time.Minute, false, "the fault lasts 2h0m0s, from injectedAt"},
		{"injectedAt, restarted 119m on", withInjected, nil, 119 * time.Minute, false, "from injectedAt"},
		{"no injectedAt, written time known", old, written(old), 90 * time.Minute, false, "from when its annotation was written"},
		{"no injectedAt, written time of another value", old, written("{}"), 90 * time.Minute, true, ""},
		{"no injectedAt, no written time: first sight", old, nil, 90 * time.Minute, true, ""},
		{"within the maximum: applies after a restart", short, nil, 30 * time.Minute, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ann := map[string]string{key: tt.value}
			first, mem := faults.Evaluate(ann, faults.Memory{}, faultNow, j)
			if len(first.Rejected) != 1 && tt.value != short {
				t.Fatalf("first sight: rejected %v, want the fault rejected", first.Rejected)
			}
			if len(mem.Written) != 0 {
				t.Errorf("memory after Evaluate keeps Written %v, want none", mem.Written)
			}
			ev, _ := faults.Evaluate(ann, faults.Memory{Written: tt.written}, faultNow.Add(tt.restart), j)
			if got := len(ev.Apply) == 1; got != tt.applies {
				t.Errorf("after the restart: applies = %v, want %v (rejected %v)", got, tt.applies, ev.Rejected)
			}
			if tt.problem != "" && (len(ev.Rejected) != 1 || !strings.Contains(ev.Rejected[0].Problem, tt.problem)) {
				t.Errorf("after the restart: rejected %v, want one mentioning %q", ev.Rejected, tt.problem)
			}
		})
	}
}
