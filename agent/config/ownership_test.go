package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestOwnership(t *testing.T) {
	tests := []struct {
		name   string
		config string
		checks []corev1.NodeConditionType
		// want are the params, each list joined with spaces.
		want map[string]string
	}{
		{
			name: "defaults",
			want: map[string]string{
				ParamTaints: "nvidia.com/gpu:NoSchedule selftaint.io/disk-pressure:NoSchedule selftaint.io/gpu-degraded:PreferNoSchedule " +
					"selftaint.io/gpu-failure:NoSchedule selftaint.io/memory-pressure:NoSchedule selftaint.io/network-unavailable:NoSchedule " +
					"selftaint.io/pid-pressure:NoSchedule selftaint.io/uninitialized:NoSchedule " +
					"startup-taint.cluster-autoscaler.kubernetes.io/selftaint-uninitialized:NoSchedule",
				ParamLabels: "",
				ParamConditions: "SelftaintDiskPressure SelftaintGPUDegraded SelftaintGPUFailure SelftaintMemoryPressure " +
					"SelftaintNetworkUnavailable SelftaintPIDPressure SelftaintUninitialized",
				ParamResources: "",
			},
		},
		{
			name: "one NoExecute rule, probes off, no initialization, GPUs advertised and labelled, an FPGA, checks",
			config: `
probes:
  memory: {enabled: false}
  disk: {enabled: false}
  pid: {enabled: true}
  gpu: {enabled: false}
  network: {enabled: false}
initialization: {enabled: false}
hardware:
  gpu: {advertise: true, taint: false, label: true}
  pci:
  - {resource: example.com/fpga, vendor: "0x10ee", taint: true, label: false, advertise: true}
rules:
- condition: SelftaintPIDPressure
  taint: {key: example.com/pids, value: "x", effect: NoExecute}
`,
			checks: []corev1.NodeConditionType{"NTPProblem", "KubeletUnhealthy"},
			want: map[string]string{
				ParamTaints:     "example.com/fpga:NoSchedule example.com/pids:NoExecute example.com/pids:NoSchedule",
				ParamLabels:     "nvidia.com/gpu.present",
				ParamConditions: "KubeletUnhealthy NTPProblem SelftaintPIDPressure",
				ParamResources:  "example.com/fpga nvidia.com/gpu",
			},
		},
		{
			name: "the autoscaler startup taint with its own effect",
			config: `
initialization: {autoscalerStartupTaint: true, taint: {effect: PreferNoSchedule}}
rules: []
hardware: {gpu: {taint: false}}
`,
			want: map[string]string{
				ParamTaints: "selftaint.io/uninitialized:PreferNoSchedule " +
					"startup-taint.cluster-autoscaler.kubernetes.io/selftaint-uninitialized:PreferNoSchedule",
				ParamLabels: "",
				ParamConditions: "SelftaintDiskPressure SelftaintGPUDegraded SelftaintGPUFailure SelftaintMemoryPressure " +
					"SelftaintNetworkUnavailable SelftaintPIDPressure SelftaintUninitialized",
				ParamResources: "",
			},
		},
	}
	for _, tt := range tests {
		cfg, err := Parse([]byte(tt.config))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		params := PolicyParams(cfg.Ownership(tt.checks))
		for _, k := range ParamKeys() {
			if got := strings.Join(paramList(params[k]), " "); got != tt.want[k] {
				t.Errorf("%s: %s = %q, want %q", tt.name, k, got, tt.want[k])
			}
		}
	}
}

func TestCheckPolicyParams(t *testing.T) {
	want := map[string]string{ParamTaints: "a:NoSchedule\nb:NoSchedule\n", ParamConditions: "X\n"}
	tests := []struct {
		name                   string
		have                   map[string]string
		wantMissing, wantExtra []string
	}{
		{"equal", map[string]string{ParamTaints: "b:NoSchedule\na:NoSchedule", ParamConditions: "  X  \n\n"}, nil, nil},
		{"missing", map[string]string{ParamTaints: "a:NoSchedule\n"}, []string{ParamTaints + " lacks b:NoSchedule", ParamConditions + " lacks X"}, nil},
		{"extra", map[string]string{ParamTaints: "a:NoSchedule\nb:NoSchedule\nc:NoExecute\n", ParamConditions: "X\n", ParamLabels: "l\n"},
			nil, []string{ParamTaints + " also allows c:NoExecute", ParamLabels + " also allows l"}},
	}
	for _, tt := range tests {
		missing, extra := CheckPolicyParams(want, tt.have)
		if !slices.Equal(missing, tt.wantMissing) || !slices.Equal(extra, tt.wantExtra) {
			t.Errorf("%s: CheckPolicyParams = %q, %q; want %q, %q", tt.name, missing, extra, tt.wantMissing, tt.wantExtra)
		}
	}
}

func TestFormatPolicyParamsRoundTrips(t *testing.T) {
	params := map[string]string{ParamTaints: "a:NoSchedule\nb:NoExecute\n", ParamLabels: "", ParamConditions: "X\n", ParamResources: "r\n"}
	got := FormatPolicyParams(params)
	want := "agent.selftaint.io/owned-taints: |\n  a:NoSchedule\n  b:NoExecute\nagent.selftaint.io/owned-labels: \"\"\n" +
		"agent.selftaint.io/owned-conditions: |\n  X\nagent.selftaint.io/owned-resources: |\n  r\n"
	if got != want {
		t.Errorf("FormatPolicyParams = %q, want %q", got, want)
	}
	if fmt.Sprint(paramList(params[ParamTaints])) != "[a:NoSchedule b:NoExecute]" {
		t.Errorf("paramList = %v", paramList(params[ParamTaints]))
	}
}
