package config

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

// fakePackageConfig stands for a probe package's Config: its Validate is
// the only check of LimitAbove, as a real package's is.
type fakePackageConfig struct{ LimitAbove probes.Threshold }

func (c fakePackageConfig) Validate() error {
	var errs []probes.FieldError
	if err := c.LimitAbove.Validate(); err != nil {
		errs = append(errs, probes.FieldError{Field: "LimitAbove", Detail: err.Error()})
	}
	return probes.NewConfigError("fake", errs)
}

// fakeProbeSettings is a test-only block, probes.fake. Its settings live
// outside Probes: the test cannot add a field to Probes, and needs none.
type fakeProbeSettings struct {
	Common     `json:",inline"`
	LimitAbove Threshold `json:"limitAbove"`
}

func (f *fakeProbeSettings) Base() *Common     { return &f.Common }
func (f *fakeProbeSettings) Commons() []Common { return []Common{f.Common} }
func (f *fakeProbeSettings) SetDefaults() {
	defaultThreshold(&f.LimitAbove, probes.Threshold{Value: 80, Percent: true})
}
func (f *fakeProbeSettings) packageConfig() fakePackageConfig {
	return fakePackageConfig{LimitAbove: f.LimitAbove.T}
}
func (f *fakeProbeSettings) Validate(p *field.Path) field.ErrorList {
	return packageErrors(p, f, f.packageConfig().Validate())
}
func (f *fakeProbeSettings) BuildHost(HostEnv) ([]probes.Probe, error) {
	if err := f.packageConfig().Validate(); err != nil {
		return nil, err
	}
	return []probes.Probe{fakeProbe{}}, nil
}

type fakeProbe struct{}

func (fakeProbe) Name() string { return "fake" }
func (fakeProbe) Probe(context.Context) probes.Result {
	return probes.Result{Status: probes.StatusOK, Reason: "Fine", Message: "fine"}
}

// withFake is the default registry plus probes.fake, and the block's
// settings.
func withFake() (Registry, *fakeProbeSettings) {
	settings := &fakeProbeSettings{}
	reg := append(DefaultRegistry(), ProbeSection{
		Key:      "fake",
		Defaults: Schedule{Interval: 7 * time.Second, Timeout: 2 * time.Second, For: time.Second, ClearAfter: 3 * time.Second},
		Settings: func(*Probes) ProbeSettings { return settings },
		Probes: []ProbeTarget{{Name: "fake", Condition: "SelftaintFakeProblem",
			Taint: TaintSpec{Key: "selftaint.io/fake", Effect: corev1.TaintEffectPreferNoSchedule}}},
	})
	return reg, settings
}

// fakeConfig is the defaulted, valid config of the registry withFake.
func fakeConfig(t *testing.T) (*Config, Registry, *fakeProbeSettings) {
	t.Helper()
	reg, fake := withFake()
	c := &Config{reg: reg}
	c.setDefaults()
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatalf("Validate of the defaults: %v", errs.ToAggregate())
	}
	return c, reg, fake
}

// TestRegistryExtraProbe proves that one registry entry is all a new probe
// needs: the test-only probes.fake appears in the defaults and default
// rules here, and (TestRegistryExtraProbeDerived) in the probes built, the
// virtual nodes' simulated probes, the fault targets, ownership and the
// fault help, and (TestRegistryExtraProbeValidation) in validation with
// its field paths, with no other edit.
func TestRegistryExtraProbe(t *testing.T) {
	c, _, fake := fakeConfig(t)
	checks := []struct {
		name      string
		got, want any
	}{
		{"fake.enabled", fake.IsEnabled(), true},
		{"fake.interval", fake.Interval.D, 7 * time.Second},
		{"fake.timeout", fake.Timeout.D, 2 * time.Second},
		{"fake.for", fake.For.D, time.Second},
		{"fake.clearAfter", fake.ClearAfter.D, 3 * time.Second},
		{"fake.condition", fake.Condition, corev1.NodeConditionType("SelftaintFakeProblem")},
		{"fake.limitAbove", fake.LimitAbove.T, probes.Threshold{Value: 80, Percent: true}},
		{"memory.condition (the rest untouched)", c.Probes.Memory.Condition, DefaultMemoryCondition},
		{"len(rules)", len(c.Rules), len(DefaultRules()) + 1},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}

	// The default rules.
	last := c.Rules[len(c.Rules)-1]
	if last.Condition != "SelftaintFakeProblem" || last.Taint.Key != "selftaint.io/fake" || last.Taint.Effect != corev1.TaintEffectPreferNoSchedule || last.Status != corev1.ConditionTrue {
		t.Errorf("last default rule = %+v, want the fake probe's", last)
	}
}

func TestRegistryExtraProbeDerived(t *testing.T) {
	c, reg, fake := fakeConfig(t)
	// The probes built on a host.
	specs, err := c.ProbeSpecs(probes.Host{Root: t.TempDir()}, "")
	if err != nil {
		t.Fatalf("ProbeSpecs: %v", err)
	}
	if s := specs[len(specs)-1]; s.Entry.Probe.Name() != "fake" || s.Condition != "SelftaintFakeProblem" || s.Entry.Interval != 7*time.Second || s.Damping != (taints.Damping{For: time.Second, ClearAfter: 3 * time.Second}) {
		t.Errorf("last probe spec = %+v, want the fake probe with its schedule and damping", s)
	}

	// The simulated probes of virtual nodes.
	var simulated []string
	for _, s := range c.SimulatedProbeSpecs(func(name string) probes.Probe { return fakeProbe{} }) {
		simulated = append(simulated, fmt.Sprintf("%s %s", s.Condition, s.Entry.Interval))
	}
	if want := "SelftaintFakeProblem 7s"; !slices.Contains(simulated, want) {
		t.Errorf("simulated specs %q lack %q", simulated, want)
	}

	// The fault targets.
	conds, byProbe := c.FaultTargets()
	if !conds["SelftaintFakeProblem"] || byProbe["fake"] != "SelftaintFakeProblem" {
		t.Errorf("FaultTargets() = %v, %v; want fake -> SelftaintFakeProblem", conds, byProbe)
	}

	// Ownership.
	o := c.Ownership(nil)
	if !slices.Contains(o.Conditions, "SelftaintFakeProblem") || !slices.Contains(o.Taints, taints.TaintID{Key: "selftaint.io/fake", Effect: corev1.TaintEffectPreferNoSchedule}) {
		t.Errorf("Ownership() = %+v, want the fake condition and taint", o)
	}

	// The fault help.
	if got, want := reg.FaultTargetHelp(), "  fake          SelftaintFakeProblem\n"; !strings.HasSuffix(got, want) {
		t.Errorf("FaultTargetHelp() = %q, want it to end %q", got, want)
	}
	if got := reg.ProbeNames(); !strings.HasSuffix(got, ", network, fake") {
		t.Errorf("ProbeNames() = %q, want it to end with fake", got)
	}

	// A disabled fake probe is no target, and not simulated.
	fake.Enabled = ptr(false)
	if _, byProbe := c.FaultTargets(); byProbe["fake"] != "" {
		t.Errorf("disabled fake probe is a fault target: %v", byProbe)
	}
}

// TestRegistryExtraProbeValidation checks that the fake block's bad
// values are reported with their field paths: the schedule's by the
// registry, the threshold's by its package's validation.
func TestRegistryExtraProbeValidation(t *testing.T) {
	tests := []struct {
		name string
		set  func(f *fakeProbeSettings)
		want []string
	}{
		{"threshold out of range (the package's check)", func(f *fakeProbeSettings) { f.LimitAbove.T = probes.Threshold{Value: 150, Percent: true} },
			[]string{"probes.fake.limitAbove", "150% must not be above 100%"}},
		{"timeout not below interval", func(f *fakeProbeSettings) { f.Timeout.D = 9 * time.Second },
			[]string{"probes.fake.timeout", "below interval"}},
		{"kubelet condition", func(f *fakeProbeSettings) { f.Condition = corev1.NodeReady },
			[]string{"probes.fake.condition", "kubelet"}},
		{"duplicate condition", func(f *fakeProbeSettings) { f.Condition = DefaultMemoryCondition },
			[]string{"probes.fake.condition", "Duplicate", "also probes.memory.condition"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg, fake := withFake()
			c := &Config{reg: reg}
			c.setDefaults()
			tt.set(fake)
			err := c.Validate().ToAggregate()
			if err == nil {
				t.Fatalf("Validate succeeded, want an error mentioning %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestPackageErrorsPaths checks how a probe package's field errors get the
// config's field paths.
func TestPackageErrorsPaths(t *testing.T) {
	n := &NetworkProbe{}
	tests := []struct {
		goField, want string
	}{
		{"DefaultRoute", `probes.network.defaultRoute: Invalid value: x`},
		{"CNIConfDir", `probes.network.cniConfDir: Invalid value: x`},
		{"Interfaces[2]", `probes.network.interfaces[2]: Invalid value: x`},
		{"Targets[1].Timeout", `probes.network.targets[1].timeout: Invalid value: x`},
		{"Targets[1].Address", `probes.network.targets[1]: Invalid value: Address: x`},
		{"APIServer", `probes.network: Invalid value: APIServer: x`},
		{"Interfaces[z]", `probes.network.interfaces: Invalid value: [z]: x`},
	}
	for _, tt := range tests {
		err := probes.NewConfigError("network", []probes.FieldError{{Field: tt.goField, Detail: "x"}})
		errs := packageErrors(field.NewPath("probes", "network"), n, err)
		if len(errs) != 1 || errs[0].Error() != tt.want {
			t.Errorf("%s: got %v, want %q", tt.goField, errs, tt.want)
		}
	}
	// An error that names no field is reported at the block.
	errs := packageErrors(field.NewPath("probes", "gpu"), &GPUProbe{}, fmt.Errorf("gpu probe config: broken"))
	if len(errs) != 1 || errs[0].Error() != "probes.gpu: Invalid value: gpu probe config: broken" {
		t.Errorf("plain error: got %v", errs)
	}
}

// TestREADMEListsTheRegistry keeps the README's probe table (under Fault
// injection) and its list of probe blocks equal to the registry: a probe
// the README names that the registry lacks fails, and so does one the
// registry has that the README misses.
func TestREADMEListsTheRegistry(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, p := range readmeProbeProblems(readme, DefaultRegistry()) {
		t.Error(p)
	}

	// The check itself: a README missing a probe, one naming a probe the
	// registry lacks, one with a block the registry lacks.
	withFakeReg, _ := withFake()
	noNetwork := regexp.MustCompile("(?m)^\\| `network` .*\n").ReplaceAllString(readme, "")
	extraBlock := strings.Replace(readme, "`gpu`, `network`)", "`gpu`, `network`, `fake`)", 1)
	for _, tt := range []struct {
		name   string
		readme string
		reg    Registry
	}{
		{"README misses network", noNetwork, DefaultRegistry()},
		{"README misses fake", readme, withFakeReg},
		{"README names a block the registry lacks", extraBlock, DefaultRegistry()},
	} {
		if len(readmeProbeProblems(tt.readme, tt.reg)) == 0 {
			t.Errorf("%s: no problem found", tt.name)
		}
	}
}

// readmeProbeProblems compares the README's probe table and list of
// blocks with reg.
func readmeProbeProblems(readme string, reg Registry) []string {
	var problems []string
	const header = "| Probe (target) | Config block | Default condition | Default taint |\n|---|---|---|---|\n"
	_, table, ok := strings.Cut(readme, header)
	if !ok {
		return []string{fmt.Sprintf("README.md has no probe table starting %q", header)}
	}
	table, _, _ = strings.Cut(table, "\n\n")
	got := strings.Split(table, "\n")
	var want []string
	for _, s := range reg {
		for _, p := range s.Probes {
			block := "probes." + s.Key
			if p.Field != "" {
				block += "." + p.Field
			}
			want = append(want, fmt.Sprintf("| `%s` | `%s` | `%s` | `%s:%s` |", p.Name, block, p.Condition, p.Taint.Key, p.Taint.Effect))
		}
	}
	if !slices.Equal(got, want) {
		problems = append(problems, fmt.Sprintf("README.md's probe table differs from the registry:\n--- README\n%s\n--- registry\n%s", strings.Join(got, "\n"), strings.Join(want, "\n")))
	}

	m := regexp.MustCompile("(?m)^\\| `probes\\.<p>\\.enabled` \\| `true` \\| [^(]*\\(([^)]*)\\) \\|$").FindStringSubmatch(readme)
	if m == nil {
		return append(problems, "README.md has no probes.<p>.enabled row listing the blocks")
	}
	var keys []string
	for _, s := range reg {
		keys = append(keys, "`"+s.Key+"`")
	}
	if got, want := m[1], strings.Join(keys, ", "); got != want {
		problems = append(problems, fmt.Sprintf("README.md's probes.<p>.enabled row names %s, want the registry's blocks %s", got, want))
	}
	return problems
}
