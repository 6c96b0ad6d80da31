package taints

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/faults"
)

func TestPlanConditions(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const mem, initC corev1.NodeConditionType = "SelftaintMemoryPressure", "SelftaintUninitialized"
	st := func(s corev1.ConditionStatus, reason string, ltt time.Time) State {
		return State{Status: s, Reason: reason, LastTransitionTime: ltt}
	}
	fault := faults.Fault{Key: "fault.selftaint.io/memory", Condition: mem, Status: corev1.ConditionTrue, Reason: faults.DefaultReason, Message: "drill"}
	tests := []struct {
		name      string
		in        ConditionsInput
		want      State // of mem, or of initC when the case is about initialization
		of        corev1.NodeConditionType
		fromFault bool
	}{
		{
			name: "status holds: the published transition time is carried",
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{mem: st("False", "Fine", ago(time.Minute))},
				Published: map[corev1.NodeConditionType]Published{mem: {State: st("False", "Fine", ago(time.Hour))}}},
			want: st("False", "Fine", ago(time.Hour)), of: mem,
		},
		{
			name: "a damped flip keeps the damper's flip time",
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{mem: st("True", "Low", ago(time.Second))},
				Published: map[corev1.NodeConditionType]Published{mem: {State: st("False", "Fine", ago(time.Hour))}}},
			want: st("True", "Low", ago(time.Second)), of: mem,
		},
		{
			name: "a flip time before the last publication is not believed: now",
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{mem: st("True", "Low", ago(2*time.Hour))},
				Published: map[corev1.NodeConditionType]Published{mem: {State: st("False", "Fine", ago(time.Hour))}}},
			want: st("True", "Low", now), of: mem,
		},
		{
			name: "never published, no flip time: now",
			in:   ConditionsInput{Damped: map[corev1.NodeConditionType]State{mem: st("False", "Fine", time.Time{})}},
			want: st("False", "Fine", now), of: mem,
		},
		{
			name: "a fault starts: its state, flipped now, whatever the damper says",
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{mem: st("False", "Fine", ago(time.Minute))},
				Faults:    map[corev1.NodeConditionType]faults.Fault{mem: fault},
				Published: map[corev1.NodeConditionType]Published{mem: {State: st("False", "Fine", ago(time.Hour))}}},
			want: State{Status: "True", Reason: faults.DefaultReason, Message: "[fault.selftaint.io/memory] drill", LastTransitionTime: now}, of: mem, fromFault: true,
		},
		{
			name: "a fault holds: its transition time is carried",
			in: ConditionsInput{Faults: map[corev1.NodeConditionType]faults.Fault{mem: fault},
				Published: map[corev1.NodeConditionType]Published{mem: {State: st("True", faults.DefaultReason, ago(time.Minute)), Fault: true}}},
			want: State{Status: "True", Reason: faults.DefaultReason, Message: "[fault.selftaint.io/memory] drill", LastTransitionTime: ago(time.Minute)}, of: mem, fromFault: true,
		},
		{
			name: "a fault ends: back to the damper's state, flipped now",
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{mem: st("False", "Fine", ago(time.Hour))},
				Published: map[corev1.NodeConditionType]Published{mem: {State: st("True", faults.DefaultReason, ago(time.Minute)), Fault: true}}},
			want: st("False", "Fine", now), of: mem,
		},
		{
			name: "initialization undecided after a restart: what was published stays",
			in: ConditionsInput{InitCondition: initC, Init: &InitInput{Continuous: true, Initialized: true, WaitingProbes: []string{"memory"}},
				Published: map[corev1.NodeConditionType]Published{initC: {State: st("False", ReasonInitialized, ago(time.Hour))}}},
			want: st("False", ReasonInitialized, ago(time.Hour)), of: initC,
		},
		{
			name: "initialization decided from the other conditions: a required one failing",
			in: ConditionsInput{InitCondition: initC,
				Init:      &InitInput{Continuous: true, Initialized: true, Required: []corev1.NodeConditionType{mem}, Healthy: map[corev1.NodeConditionType]corev1.ConditionStatus{mem: "False"}},
				Damped:    map[corev1.NodeConditionType]State{mem: st("True", "Low", ago(time.Second))},
				Published: map[corev1.NodeConditionType]Published{initC: {State: st("False", ReasonInitialized, ago(time.Hour))}}},
			want: State{Status: "True", Reason: ReasonRequiredCheckFailed, Message: "required: SelftaintMemoryPressure is True (Low)", LastTransitionTime: now}, of: initC,
		},
	}
	for _, tt := range tests {
		tt.in.Now = now
		p := PlanConditions(tt.in)
		if got := p.States[tt.of]; fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: %s = %+v, want %+v", tt.name, tt.of, got, tt.want)
		}
		if p.FromFault[tt.of] != tt.fromFault {
			t.Errorf("%s: from a fault %v, want %v", tt.name, p.FromFault[tt.of], tt.fromFault)
		}
		if (tt.in.Init != nil) != (p.Init != nil) {
			t.Errorf("%s: init verdict %v with init input %v", tt.name, p.Init, tt.in.Init)
		}
	}
}

// TestPlanConditionsMessageNow: which conditions' messages are written as
// soon as they change (ConditionsPlan.MessageNow), not with the next
// write.
func TestPlanConditionsMessageNow(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	const npd, ready corev1.NodeConditionType = "KubeletUnhealthy", "Ready"
	fault := faults.Fault{Key: "fault.selftaint.io/kubelet", Condition: npd, Status: corev1.ConditionFalse, Reason: faults.DefaultReason, Message: "drill"}
	st := func(s corev1.ConditionStatus) State {
		return State{Status: s, Reason: "R", Message: "m", LastTransitionTime: now}
	}
	tests := []struct {
		name    string
		in      ConditionsInput
		of      corev1.NodeConditionType
		healthy corev1.ConditionStatus // "" leaves Healthy unset: False
		want    bool
	}{
		{name: "message updates, a problem: news", of: npd, want: true,
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{npd: st("True")}, MessageUpdates: map[corev1.NodeConditionType]bool{npd: true}}},
		{name: "message updates, OK: rides the next write", of: npd,
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{npd: st("False")}, MessageUpdates: map[corev1.NodeConditionType]bool{npd: true}}},
		{name: "message updates, Unknown: rides the next write, as NPD leaves it", of: npd,
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{npd: st("Unknown")}, MessageUpdates: map[corev1.NodeConditionType]bool{npd: true}}},
		{name: "no message updates, a problem: rides the next write", of: npd,
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{npd: st("True")}}},
		{name: "message updates of another condition", of: npd,
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{npd: st("True")}, MessageUpdates: map[corev1.NodeConditionType]bool{ready: true}}},
		{name: "message updates, healthy True, False is the problem: news", of: ready, healthy: "True", want: true,
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{ready: st("False")}, MessageUpdates: map[corev1.NodeConditionType]bool{ready: true}}},
		{name: "message updates, healthy True, True: rides the next write", of: ready, healthy: "True",
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{ready: st("True")}, MessageUpdates: map[corev1.NodeConditionType]bool{ready: true}}},
		{name: "a fault, whatever its status: what the operator asked for", of: npd, want: true,
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{npd: st("True")}, Faults: map[corev1.NodeConditionType]faults.Fault{npd: fault}}},
		{name: "message updates under a fault that says OK: the fault's", of: npd, want: true,
			in: ConditionsInput{Damped: map[corev1.NodeConditionType]State{npd: st("True")}, Faults: map[corev1.NodeConditionType]faults.Fault{npd: fault}, MessageUpdates: map[corev1.NodeConditionType]bool{npd: true}}},
	}
	for _, tt := range tests {
		tt.in.Now = now
		if tt.healthy != "" {
			tt.in.Healthy = map[corev1.NodeConditionType]corev1.ConditionStatus{tt.of: tt.healthy}
		}
		p := PlanConditions(tt.in)
		if _, ok := p.States[tt.of]; !ok {
			t.Fatalf("%s: %s not planned", tt.name, tt.of)
		}
		if got := p.MessageNow[tt.of]; got != tt.want {
			t.Errorf("%s: message of %s written at once %v, want %v", tt.name, tt.of, got, tt.want)
		}
	}
}

func TestMessageIsNews(t *testing.T) {
	tests := []struct {
		status, healthy corev1.ConditionStatus
		want            bool
	}{
		{"True", "False", true},
		{"False", "False", false},
		{"Unknown", "False", false},
		{"False", "True", true},
		{"True", "True", false},
		{"Unknown", "True", false},
	}
	for _, tt := range tests {
		if got := MessageIsNews(tt.status, tt.healthy); got != tt.want {
			t.Errorf("MessageIsNews(%s, healthy %s) = %v, want %v", tt.status, tt.healthy, got, tt.want)
		}
	}
}
