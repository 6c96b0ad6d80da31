package taints

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestDecideInit(t *testing.T) {
	const gpu corev1.NodeConditionType = "SelftaintGPUFailure"
	healthy := map[corev1.NodeConditionType]corev1.ConditionStatus{gpu: corev1.ConditionFalse}
	gpuOK := map[corev1.NodeConditionType]State{gpu: {Status: corev1.ConditionFalse, Reason: "GPUsHealthy"}}
	gpuBad := map[corev1.NodeConditionType]State{gpu: {Status: corev1.ConditionTrue, Reason: "XidCritical"}}
	base := func(mod func(*InitInput)) InitInput {
		in := InitInput{Healthy: healthy, Required: []corev1.NodeConditionType{gpu}, States: gpuOK, HasInventory: true, InventoryTaken: true}
		mod(&in)
		return in
	}
	tests := []struct {
		name string
		in   InitInput
		want InitVerdict
	}{
		{
			name: "fresh node, probes and inventory pending",
			in: base(func(in *InitInput) {
				in.WaitingProbes, in.InventoryTaken, in.States = []string{"pid", "disk"}, false, nil
			}),
			want: InitVerdict{Decided: true, Uninitialized: true, State: State{Status: corev1.ConditionTrue, Reason: ReasonInitializing,
				Message: "waiting for the first verdict of the probes disk and pid; waiting for the hardware inventory; required: SelftaintGPUFailure is not reported"}},
		},
		{
			name: "first full round, a required condition failing",
			in:   base(func(in *InitInput) { in.States = gpuBad }),
			want: InitVerdict{Decided: true, Uninitialized: true, State: State{Status: corev1.ConditionTrue, Reason: ReasonRequiredCheckFailed,
				Message: "required: SelftaintGPUFailure is True (XidCritical)"}},
		},
		{
			name: "first full round, all healthy: initialized for the first time",
			in:   base(func(*InitInput) {}),
			want: InitVerdict{Decided: true, First: true, State: State{Status: corev1.ConditionFalse, Reason: ReasonInitialized,
				Message: "selftaint has a verdict from every probe and the hardware inventory, and every required condition is healthy"}},
		},
		{
			name: "no inventory, nothing required",
			in:   InitInput{},
			want: InitVerdict{Decided: true, First: true, State: State{Status: corev1.ConditionFalse, Reason: ReasonInitialized,
				Message: "selftaint has a verdict from every probe"}},
		},
		{
			name: "bootstrap, initialized before, restarted: not tainted again while probes are pending",
			in:   base(func(in *InitInput) { in.Initialized, in.WaitingProbes, in.States = true, []string{"memory"}, nil }),
			want: InitVerdict{Decided: true, State: State{Status: corev1.ConditionFalse, Reason: ReasonInitialized,
				Message: "initialized earlier (bootstrap mode: not tainted again); now waiting for the first verdict of the probe memory; required: SelftaintGPUFailure is not reported"}},
		},
		{
			name: "bootstrap, initialized before, a required condition failing: still initialized",
			in:   base(func(in *InitInput) { in.Initialized, in.States = true, gpuBad }),
			want: InitVerdict{Decided: true, State: State{Status: corev1.ConditionFalse, Reason: ReasonInitialized,
				Message: "initialized earlier (bootstrap mode: not tainted again); now required: SelftaintGPUFailure is True (XidCritical)"}},
		},
		{
			name: "continuous, initialized before, restarted: undecided until the first full round",
			in: base(func(in *InitInput) {
				in.Continuous, in.Initialized, in.WaitingProbes, in.States = true, true, []string{"memory"}, nil
			}),
			want: InitVerdict{State: State{Status: corev1.ConditionUnknown, Reason: ReasonInitializing,
				Message: "waiting for the first verdict of the probe memory; required: SelftaintGPUFailure is not reported"}},
		},
		{
			name: "continuous, initialized before, a required condition failing: uninitialized again",
			in:   base(func(in *InitInput) { in.Continuous, in.Initialized, in.States = true, true, gpuBad }),
			want: InitVerdict{Decided: true, Uninitialized: true, State: State{Status: corev1.ConditionTrue, Reason: ReasonRequiredCheckFailed,
				Message: "required: SelftaintGPUFailure is True (XidCritical)"}},
		},
		{
			name: "continuous, initialized before, healthy: initialized, not for the first time",
			in:   base(func(in *InitInput) { in.Continuous, in.Initialized = true, true }),
			want: InitVerdict{Decided: true, State: State{Status: corev1.ConditionFalse, Reason: ReasonInitialized,
				Message: "selftaint has a verdict from every probe and the hardware inventory, and every required condition is healthy"}},
		},
		{
			name: "the cloud provider's taint is reported, whatever the state",
			in:   base(func(in *InitInput) { in.CloudUninitialized = true }),
			want: InitVerdict{Decided: true, First: true, State: State{Status: corev1.ConditionFalse, Reason: ReasonInitialized,
				Message: "selftaint has a verdict from every probe and the hardware inventory, and every required condition is healthy" +
					"; the cloud controller has not initialized the node yet (node.cloudprovider.kubernetes.io/uninitialized, not selftaint's to remove)"}},
		},
		{
			name: "inventory, nothing required",
			in:   InitInput{HasInventory: true, InventoryTaken: true},
			want: InitVerdict{Decided: true, First: true, State: State{Status: corev1.ConditionFalse, Reason: ReasonInitialized,
				Message: "selftaint has a verdict from every probe and the hardware inventory"}},
		},
		{
			name: "no inventory, a required condition healthy",
			in:   base(func(in *InitInput) { in.HasInventory = false }),
			want: InitVerdict{Decided: true, First: true, State: State{Status: corev1.ConditionFalse, Reason: ReasonInitialized,
				Message: "selftaint has a verdict from every probe, and every required condition is healthy"}},
		},
		{
			name: "three probes pending, two required conditions failing: lists in words",
			in: InitInput{
				Healthy:       map[corev1.NodeConditionType]corev1.ConditionStatus{gpu: corev1.ConditionFalse, "NTPProblem": corev1.ConditionFalse},
				Required:      []corev1.NodeConditionType{gpu, "NTPProblem"},
				States:        gpuBad,
				WaitingProbes: []string{"pid", "disk", "memory"},
			},
			want: InitVerdict{Decided: true, Uninitialized: true, State: State{Status: corev1.ConditionTrue, Reason: ReasonInitializing,
				Message: "waiting for the first verdict of the probes disk, memory and pid; required: SelftaintGPUFailure is True (XidCritical) and NTPProblem is not reported"}},
		},
		{
			name: "a required condition Unknown is not healthy",
			in: base(func(in *InitInput) {
				in.States = map[corev1.NodeConditionType]State{gpu: {Status: corev1.ConditionUnknown, Reason: "NVMLUnreadable"}}
			}),
			want: InitVerdict{Decided: true, Uninitialized: true, State: State{Status: corev1.ConditionTrue, Reason: ReasonRequiredCheckFailed,
				Message: "required: SelftaintGPUFailure is Unknown (NVMLUnreadable)"}},
		},
	}
	for _, tt := range tests {
		if got := DecideInit(tt.in); got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

func TestJoinList(t *testing.T) {
	tests := []struct {
		items []string
		want  string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a and b"},
		{[]string{"a", "b", "c"}, "a, b and c"},
	}
	for _, tt := range tests {
		if got := joinList(tt.items); got != tt.want {
			t.Errorf("joinList(%q) = %q, want %q", tt.items, got, tt.want)
		}
	}
}
