package config

import (
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes"
)

func TestParseDefaults(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatalf("Parse(nil): %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"heartbeatPeriod", c.HeartbeatPeriod.D, 5 * time.Minute},
		{"memory.interval", c.Probes.Memory.Interval.D, 10 * time.Second},
		{"memory.timeout", c.Probes.Memory.Timeout.D, 5 * time.Second},
		{"memory.for", c.Probes.Memory.For.D, 30 * time.Second},
		{"memory.clearAfter", c.Probes.Memory.ClearAfter.D, 2 * time.Minute},
		{"memory.condition", c.Probes.Memory.Condition, DefaultMemoryCondition},
		{"memory.availableBelow", c.Probes.Memory.AvailableBelow.T, probes.Threshold{Value: 5, Percent: true}},
		{"memory.psiFullAvg10Above", *c.Probes.Memory.PSIFullAvg10Above, 0.0},
		{"memory.psi.some.stall", c.Probes.Memory.PSI.Some.Stall.D, time.Duration(0)},
		{"memory.psi.some.window", c.Probes.Memory.PSI.Some.Window.D, 2 * time.Second},
		{"memory.psi.full.stall", c.Probes.Memory.PSI.Full.Stall.D, 500 * time.Millisecond},
		{"memory.psi.full.window", c.Probes.Memory.PSI.Full.Window.D, 2 * time.Second},
		{"disk.freeBelow", c.Probes.Disk.FreeBelow.T, probes.Threshold{Value: 10, Percent: true}},
		{"disk.inodesFreeBelow", c.Probes.Disk.InodesFreeBelow.T, probes.Threshold{Value: 5, Percent: true}},
		{"pid.usedAbove", c.Probes.PID.UsedAbove.T, probes.Threshold{Value: 90, Percent: true}},
		{"pid.enabled", c.Probes.PID.IsEnabled(), true},
		{"rules", len(c.Rules), len(DefaultRegistry().Targets())},
		{"network.condition", c.Probes.Network.Condition, DefaultNetworkCondition},
		{"initialization.mode", c.Initialization.Mode, InitBootstrap},
		{"initialization.taint", c.InitOptions().Taint, corev1.Taint{Key: DefaultInitTaintKey, Effect: corev1.TaintEffectNoSchedule}},
		{"checks.concurrency", c.Checks.Concurrency, 3},
		{"gpu.interval", c.Probes.GPU.Interval.D, 5 * time.Second},
		{"gpu.for", c.Probes.GPU.For.D, time.Duration(0)},
		{"gpu.degraded.condition", c.Probes.GPU.Degraded.Condition, DefaultGPUDegradedCondition},
		{"hardware.gpu.resource", c.Hardware.GPU.Resource, DefaultGPUResource},
		{"hardware.gpu.advertise", *c.Hardware.GPU.Advertise, false},
		{"hardware.gpu.taint", *c.Hardware.GPU.Taint, true},
		{"hardware.period", c.Hardware.Period.D, time.Minute},
		{"rules[0].effect", c.Rules[0].Taint.Effect, corev1.TaintEffectNoSchedule},
		{"rules[0].status", c.Rules[0].Status, corev1.ConditionTrue},
		{"faults.enabled", c.Faults.IsEnabled(), true},
		{"faults.defaultDuration", c.Faults.DefaultDuration.D, 10 * time.Minute},
		{"faults.maxDuration", c.Faults.MaxDuration.D, time.Hour},
		{"FaultOptions", c.FaultOptions(), agent.FaultOptions{MaxDuration: time.Hour}},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestParseOverrides(t *testing.T) {
	c, err := Parse([]byte(`
heartbeatPeriod: 1m
probes:
  memory:
    interval: 2s
    timeout: 1s
    for: 0s
    availableBelow: 512Mi
  disk:
    enabled: false
    paths: [/, /data]
  pid:
    usedAbove: 30000
rules:
- condition: SelftaintMemoryPressure
  taint: {key: example.com/mem, value: low, effect: NoExecute}
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.HeartbeatPeriod.D != time.Minute || c.Probes.Memory.Interval.D != 2*time.Second || c.Probes.Memory.For.D != 0 {
		t.Errorf("durations not applied: %+v", c)
	}
	if got, want := c.Probes.Memory.AvailableBelow.T, (probes.Threshold{Value: 512 << 20}); got != want {
		t.Errorf("availableBelow = %v, want %v", got, want)
	}
	if got, want := c.Probes.PID.UsedAbove.T, (probes.Threshold{Value: 30000}); got != want {
		t.Errorf("usedAbove = %v, want %v", got, want)
	}
	if c.Probes.Disk.IsEnabled() {
		t.Errorf("disk enabled, want disabled")
	}
	rules := c.TaintRules()
	if len(rules) != 1 || rules[0].Taint.Key != "example.com/mem" || rules[0].Status != corev1.ConditionTrue || rules[0].Taint.Effect != corev1.TaintEffectNoExecute {
		t.Errorf("rules = %+v, want the one configured rule with status defaulted to True", rules)
	}
}

// goFieldPath matches a Go field path as the probe and check packages name
// fields ("Checks[0].Timeout", "Targets[1].Address"), and goFieldLabel a
// capitalised label before a colon ("UsedAbove: ", "Address: "): a config
// error must show neither, only the file's names.
var (
	goFieldPath  = regexp.MustCompile(`\b[A-Z][A-Za-z]*(\[[0-9]+\])?\.[A-Z][A-Za-z]*\b|\b[A-Z][A-Za-z]*\[[0-9]+\]`)
	goFieldLabel = regexp.MustCompile(`\b[A-Z][A-Za-z]*: `)
)

// goNames returns what in msg looks like a Go field name.
func goNames(msg string) []string {
	out := goFieldPath.FindAllString(msg, -1)
	for _, m := range goFieldLabel.FindAllString(msg, -1) {
		if m != "Forbidden: " { // field.Forbidden's own label
			out = append(out, m)
		}
	}
	return out
}

func TestParseErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown top-level field", "heartbeat: 5m", []string{`unknown field "heartbeat"`}},
		{"unknown nested field", "probes:\n  memory:\n    availble: 5%", []string{`unknown field "probes.memory.availble"`}},
		{"unknown field in a rule", "rules:\n- condition: SelftaintMemoryPressure\n  taint: {key: selftaint.io/x, effect: NoSchedule, efect: x}", []string{`unknown field "rules[0].taint.efect"`}},
		{"bad effect", "rules:\n- condition: SelftaintMemoryPressure\n  taint: {key: selftaint.io/x, effect: NoWay}", []string{"rules[0].taint.effect", "NoWay"}},
		{"reserved key", "rules:\n- condition: SelftaintMemoryPressure\n  taint: {key: node.kubernetes.io/memory-pressure, effect: NoSchedule}", []string{"rules[0].taint.key", "allowReservedKey"}},
		{"negative duration", "probes:\n  memory:\n    for: -5s", []string{"probes.memory.for", "must not be negative"}},
		{"garbage duration", "probes:\n  disk:\n    interval: soon", []string{"probes.disk.interval", `"soon"`}},
		{"number as duration", "heartbeatPeriod: 300", []string{"heartbeatPeriod", "duration"}},
		{"timeout not below interval", "probes:\n  pid:\n    interval: 5s\n    timeout: 5s", []string{"probes.pid.timeout", "below interval"}},
		{"kubelet condition", "probes:\n  memory:\n    condition: MemoryPressure", []string{"probes.memory.condition", "kubelet"}},
		{"duplicate condition", "probes:\n  disk:\n    condition: SelftaintMemoryPressure", []string{"probes.disk.condition", "Duplicate"}},
		{"bad threshold", "probes:\n  memory:\n    availableBelow: lots", []string{"probes.memory.availableBelow", "lots"}},
		{"percent over 100", "probes:\n  disk:\n    freeBelow: 150%", []string{"probes.disk.freeBelow"}},
		{"psi out of range", "probes:\n  memory:\n    psiFullAvg10Above: 101", []string{"probes.memory.psiFullAvg10Above"}},
		{"psi stall window below the kernel's", "probes:\n  memory:\n    psi:\n      some: {stall: 100ms, window: 100ms}", []string{"probes.memory.psi.some.window", "outside the kernel's PSI trigger windows"}},
		{"psi stall longer than its window", "probes:\n  memory:\n    psi:\n      full: {stall: 3s}", []string{"probes.memory.psi.full.stall", "longer than the window 2s"}},
		{"psi stall garbage", "probes:\n  memory:\n    psi:\n      some: {stall: lots, window: 2s}", []string{"probes.memory.psi.some.stall", `"lots"`}},
		{"relative disk path", "probes:\n  disk:\n    paths: [data]", []string{"probes.disk.paths[0]", "absolute"}},
		{"rule for unknown condition", "rules:\n- condition: Nope\n  taint: {key: selftaint.io/x, effect: NoSchedule}", []string{"rules[0].condition", "Nope"}},
		{"not yaml", "probes: [", []string{"decoding"}},
		{"zero fault duration", "faults:\n  defaultDuration: 0s", []string{"faults.defaultDuration", "greater than zero"}},
		{"negative max fault duration", "faults:\n  maxDuration: -1h", []string{"faults.maxDuration", "must not be negative"}},
		{"fault default above max", "faults:\n  defaultDuration: 2h", []string{"faults.defaultDuration", "must not exceed maxDuration (1h0m0s)"}},
		{"unknown fault field", "faults:\n  maxDurration: 2h", []string{`unknown field "faults.maxDurration"`}},
		{"bad pci resource name", "hardware:\n  pci:\n  - {resource: fpga, vendor: \"0x10ee\"}\n", []string{"hardware.pci[0]", "fpga"}},
		{"kubernetes.io gpu resource", "hardware:\n  gpu:\n    resource: kubernetes.io/gpu\n", []string{"hardware.gpu.resource"}},
		{"bad pci vendor", "hardware:\n  pci:\n  - {resource: example.com/fpga, vendor: \"xilinx\"}\n", []string{"hardware.pci[0]", "xilinx"}},
		{"gpu resource by pci", "hardware:\n  pci:\n  - {resource: nvidia.com/gpu, vendor: \"0x10de\"}\n", []string{"hardware.pci[0].resource", "GPU resource"}},
		{"pci rules disagree", "hardware:\n  pci:\n  - {resource: example.com/fpga, vendor: \"0x10ee\"}\n  - {resource: example.com/fpga, vendor: \"0x1172\", label: false}\n", []string{"hardware.pci[1]", "must match hardware.pci[0]"}},
		{"unknown pci field", "hardware:\n  pci:\n  - {resource: example.com/fpga, vendr: \"0x10ee\"}\n", []string{`unknown field "hardware.pci[0].vendr"`}},
		{"gpu degraded duplicate condition", "probes:\n  gpu:\n    degraded:\n      condition: SelftaintGPUFailure\n", []string{"probes.gpu.degraded.condition", "Duplicate"}},
		{"gpu degraded reserved condition", "probes:\n  gpu:\n    degraded:\n      condition: Ready\n", []string{"probes.gpu.degraded.condition", "kubelet"}},
		{"bad init mode", "initialization:\n  mode: sometimes\n", []string{"initialization.mode", "sometimes"}},
		{"reserved init taint", "initialization:\n  taint: {key: node.kubernetes.io/not-ready, effect: NoSchedule}\n", []string{"initialization.taint.key", "node lifecycle"}},
		{"unknown required condition", "initialization:\n  requiredConditions: [Nope]\n", []string{"initialization.requiredConditions[0]", "no probe or check feeds"}},
		{"check on the coordinator's condition", "checks:\n  custom:\n  - {name: x, condition: SelftaintMaintenance, path: /bin/true}\n", []string{"checks.custom[0].condition", "coordinator"}},
		{"check on kubelet condition", "checks:\n  custom:\n  - {name: x, condition: Ready, path: /bin/true}\n", []string{"checks.custom[0].condition", "kubelet"}},
		{"check without path", "checks:\n  custom:\n  - {name: x, condition: XProblem}\n", []string{"checks.custom[0].path: Invalid value: must not be empty"}},
		{"check timeout above interval", "checks:\n  custom:\n  - {name: x, condition: XProblem, path: /bin/true, interval: 5s, timeout: 10s}\n",
			[]string{"checks.custom[0].timeout: Invalid value: 10s must be below its interval 5s"}},
		{"check without name", "checks:\n  custom:\n  - {condition: XProblem, path: /bin/true}\n", []string{"checks.custom[0].name: Invalid value: must not be empty"}},
		{"check name twice", "checks:\n  custom:\n  - {name: ntp, condition: XProblem, path: /bin/true}\n  - {name: ntp, condition: XProblem, path: /bin/true}\n",
			[]string{`checks.custom[1].name: Invalid value: "ntp" is the name of checks.custom[0] too`}},
		{"check timeout above a shared condition's interval", "checks:\n  custom:\n  - {name: fast, condition: XProblem, path: /bin/true, interval: 5s, timeout: 1s}\n  - {name: slow, condition: XProblem, path: /bin/true, interval: 20s, timeout: 10s}\n",
			[]string{"checks.custom[1].timeout: Invalid value: 10s must be below 5s, the shortest interval of the checks of condition \"XProblem\""}},
		{"check negative timeout reported once", "checks:\n  custom:\n  - {name: x, condition: XProblem, path: /bin/true, timeout: -1s}\n",
			[]string{`checks.custom[0].timeout: Invalid value: "-1s": must not be negative`}},
		{"pid count beyond 64 bits", "probes:\n  pid:\n    usedAbove: 18446744073709551616", []string{"probes.pid.usedAbove", "18446744073709551616 is out of range", "from 0 to 4194304"}},
		{"pid count beyond 64 bits, quoted", "probes:\n  pid:\n    usedAbove: \"18446744073709551616\"", []string{"probes.pid.usedAbove", "from 0 to 4194304"}},
		{"pid count above the largest pid_max", "probes:\n  pid:\n    usedAbove: 5Mi", []string{"probes.pid.usedAbove", "threshold 5Mi is out of range", "the largest pid_max Linux allows"}},
		{"pid fractional count", "probes:\n  pid:\n    usedAbove: 100.5", []string{"probes.pid.usedAbove", "a whole number"}},
		{"inode count beyond 64 bits", "probes:\n  disk:\n    inodesFreeBelow: 99999999999999999999999", []string{"probes.disk.inodesFreeBelow", "threshold 1e+23 is out of range", "from 0 to 18446744073709551615"}},
		{"disk bytes beyond 64 bits", "probes:\n  disk:\n    freeBelow: 99999999999999999999999Pi", []string{"probes.disk.freeBelow", "too large: an amount must be below 16384Pi (2^64)"}},
		{"memory bytes beyond 64 bits", "probes:\n  memory:\n    availableBelow: \"16384Pi\"", []string{"probes.memory.availableBelow", "too large"}},
		{"memory threshold overflowing a float", "probes:\n  memory:\n    availableBelow: " + strings.Repeat("9", 300) + "Pi", []string{"probes.memory.availableBelow", "too large"}},
		{"network tcp target", "probes:\n  network:\n    targets: [{tcp: nope}]\n", []string{`probes.network.targets[0].tcp: Invalid value: "nope" is not host:port`}},
		{"network dns target", "probes:\n  network:\n    targets: [{tcp: \"a:1\"}, {dns: \"a b\"}]\n", []string{`probes.network.targets[1].dns: Invalid value: "a b" is not a host name`}},
		{"duration beyond 292 years", "heartbeatPeriod: 9999999999h", []string{"heartbeatPeriod", `"9999999999h"`, "is too long: a duration must be below 2562047h0m0s"}},
		{"max fault duration beyond a week", "faults:\n  maxDuration: 300000h", []string{"faults.maxDuration", "must be at most 168h0m0s"}},
		{"guard threshold beyond an int", "coordinator:\n  guard:\n    threshold: 99999999999999999999", []string{"coordinator.guard.threshold", "whole percent"}},
		{"relative npd config", "checks:\n  npdConfigs: [npd.json]\n", []string{"checks.npdConfigs[0]", "absolute"}},
		{"relative npd log config", "checks:\n  npdLogConfigs: [kernel-monitor.json]\n", []string{"checks.npdLogConfigs[0]", "absolute"}},
		{"relative kmsg path", "checks:\n  kmsgPath: dev/kmsg\n", []string{"checks.kmsgPath", "absolute"}},
		{"gpu kernelLog not a bool", "probes:\n  gpu:\n    kernelLog: sometimes\n", []string{"probes.gpu.kernelLog"}},
		{"relative npd plugin root", "checks:\n  npdPluginRoot: host\n", []string{"checks.npdPluginRoot", "absolute"}},
		{"network target both", "probes:\n  network:\n    targets: [{tcp: \"a:1\", dns: b}]\n", []string{"probes.network.targets[0]", "exactly one"}},
		{"network bad route", "probes:\n  network:\n    defaultRoute: sometimes\n", []string{"probes.network", "sometimes"}},
		{"gpu unknown xid action", "probes:\n  gpu:\n    xids: {63: panic}\n", []string{"probes.gpu.xids[63]", "panic", "reset-gpu"}},
		{"gpu xid not a number", "probes:\n  gpu:\n    xids: {sixty: ignore}\n", []string{"probes.gpu.xids"}},
		{"gpu negative expected", "probes:\n  gpu:\n    expectedGPUs: -1\n", []string{"probes.gpu.expectedGPUs"}},
		{"gpu percent over 100", "probes:\n  gpu:\n    sustained:\n      slowdownPercent: 120\n", []string{"probes.gpu.sustained.slowdownPercent"}},
		{"gpu zero window", "probes:\n  gpu:\n    sustained:\n      window: 0s\n", []string{"probes.gpu.sustained.window"}},
		{"gpu negative rate", "probes:\n  gpu:\n    sustained:\n      pcieReplaysPerMinute: -1\n", []string{"probes.gpu.sustained.pcieReplaysPerMinute"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded, want an error mentioning %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			// The file's names, never Go's.
			if names := goNames(err.Error()); len(names) > 0 {
				t.Errorf("error %q names Go fields %q, want the file's names", err, names)
			}
		})
	}
}

// TestGoNames keeps goNames catching the messages that used to slip
// through.
func TestGoNames(t *testing.T) {
	tests := []struct {
		msg  string
		want int
	}{
		{`checks.custom: Invalid value: "": custom checks: Checks[0].Timeout: 10s must be below its interval 5s`, 2},
		{`probes.network.targets[0]: Invalid value: Address: "nope" is not host:port`, 1},
		{`probes.pid: Invalid value: UsedAbove: threshold 2 is out of range`, 1},
		{`checks.custom[1].name: Invalid value: "ntp" is the name of checks.custom[0] too`, 0},
		{`probes.memory.condition: Forbidden: MemoryPressure belongs to the kubelet`, 0},
	}
	for _, tt := range tests {
		if got := goNames(tt.msg); len(got) != tt.want {
			t.Errorf("goNames(%q) = %q, want %d", tt.msg, got, tt.want)
		}
	}
}

func TestGPUConfig(t *testing.T) {
	cfg, err := Parse([]byte("probes:\n  gpu:\n    xids: {63: reboot, 999: ignore}\n    skipXids: [79]\n    expectedGPUs: 8\n    sustained:\n      powerViolationPercent: 0\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	c := cfg.Probes.GPU.PackageConfig()
	if c.Xids[63] != "reboot" || c.Xids[999] != "ignore" || len(c.SkipXids) != 1 || c.ExpectedGPUs != 8 {
		t.Errorf("got xids %v, skip %v, expected %d; want {63: reboot, 999: ignore}, [79], 8", c.Xids, c.SkipXids, c.ExpectedGPUs)
	}
	if kl := cfg.Probes.GPU.KernelLog; kl != nil {
		t.Errorf("kernelLog %v, want unset by default (a kmsg log monitor's lines, no reader of its own)", *kl)
	}
	if c.PowerViolationPercent != 0 || c.ThermalViolationPercent != 10 || c.Window != 10*time.Minute {
		t.Errorf("got power %v, thermal %v, window %v; want 0 (off), 10 (default), 10m", c.PowerViolationPercent, c.ThermalViolationPercent, c.Window)
	}
}

func TestFaultsConfig(t *testing.T) {
	c, err := Parse([]byte("faults:\n  enabled: false\n  defaultDuration: 1m\n  maxDuration: 1m\nprobes:\n  pid:\n    enabled: false\n  gpu:\n    enabled: false\n  network:\n    enabled: false\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := c.FaultOptions(), (agent.FaultOptions{Disabled: true, MaxDuration: time.Minute}); got != want {
		t.Errorf("FaultOptions() = %+v, want %+v", got, want)
	}
	conds, probeConds := c.FaultTargets()
	wantConds := map[corev1.NodeConditionType]bool{DefaultMemoryCondition: true, DefaultDiskCondition: true}
	wantProbes := map[string]corev1.NodeConditionType{"memory": DefaultMemoryCondition, "disk": DefaultDiskCondition}
	if !maps.Equal(conds, wantConds) || !maps.Equal(probeConds, wantProbes) {
		t.Errorf("FaultTargets() = %v, %v, want %v, %v (the disabled pid, gpu and network probes are no targets)", conds, probeConds, wantConds, wantProbes)
	}
}

func TestEmptyRulesMeansNoTaints(t *testing.T) {
	c, err := Parse([]byte("rules: []"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(c.Rules) != 0 {
		t.Errorf("rules = %v, want none", c.Rules)
	}
}

func TestHardwareAndInitDefaults(t *testing.T) {
	c, err := Parse([]byte("hardware:\n  pci:\n  - {resource: example.com/fpga, vendor: \"0x10ee\", class: \"0x1200\"}\n" +
		"checks:\n  custom:\n  - {name: ntp, condition: NTPProblem, path: /bin/true}\ninitialization:\n  requiredConditions: [NTPProblem]\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if r := c.Hardware.PCI[0]; !*r.Advertise || !*r.Taint || !*r.Label {
		t.Errorf("pci rule actions %v %v %v, want all true by default", *r.Advertise, *r.Taint, *r.Label)
	}
	c, err = Parse([]byte("initialization:\n  autoscalerStartupTaint: true\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := c.InitOptions().Taint.Key; got != AutoscalerStartupTaintKey {
		t.Errorf("init taint key %q, want the autoscaler's startup-taint key", got)
	}
}

// TestPSIWindowWarns: a stall rule's window the image cannot arm (not a
// multiple of 2s without CAP_SYS_RESOURCE) is valid, but warned of by its
// field; the defaults and 2s multiples are not.
func TestPSIWindowWarns(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want []string
	}{
		{"", nil},
		{"probes:\n  memory:\n    psi:\n      some: {stall: 100ms, window: 4s}", nil},
		{"probes:\n  memory:\n    psi:\n      some: {stall: 100ms, window: 1s}", []string{"probes.memory.psi.some.window: 1s is not a multiple of 2s"}},
		{"probes:\n  memory:\n    psi:\n      full: {stall: 100ms, window: 2500ms}", []string{"probes.memory.psi.full.window: 2.5s"}},
		{"probes:\n  memory:\n    enabled: false\n    psi:\n      some: {stall: 100ms, window: 1s}", nil},
	} {
		c, err := Parse([]byte(tt.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tt.yaml, err)
		}
		got := c.Warnings()
		ok := len(got) == len(tt.want)
		for i := range tt.want {
			ok = ok && strings.HasPrefix(got[i], tt.want[i]) && strings.Contains(got[i], "uid 65532")
		}
		if !ok {
			t.Errorf("%q: warnings %q, want ones starting %q", tt.yaml, got, tt.want)
		}
	}
}
