package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

func TestMaintenanceConfig(t *testing.T) {
	pct := intstr.FromString("25%")
	tests := []struct {
		name string
		yaml string
		want fleet.MaintenanceConfig
	}{
		{name: "defaults", want: fleet.MaintenanceConfig{MaxParallel: intstr.FromInt32(1), DefaultDeadline: time.Hour}},
		{name: "counts", yaml: "coordinator:\n  maintenance: {maxParallel: 3, maxParallelPerZone: 1, defaultDeadline: 30m}\n",
			want: fleet.MaintenanceConfig{MaxParallel: intstr.FromInt32(3), MaxParallelPerZone: ptr(intstr.FromInt32(1)), DefaultDeadline: 30 * time.Minute}},
		{name: "percents", yaml: "coordinator:\n  maintenance: {maxParallel: 10%, maxParallelPerZone: 25%}\n",
			want: fleet.MaintenanceConfig{MaxParallel: intstr.FromString("10%"), MaxParallelPerZone: &pct, DefaultDeadline: time.Hour}},
		{name: "zero: no drain starts", yaml: "coordinator:\n  maintenance: {maxParallel: 0}\n",
			want: fleet.MaintenanceConfig{MaxParallel: intstr.FromInt32(0), DefaultDeadline: time.Hour}},
		{name: "the longest deadline", yaml: "coordinator:\n  maintenance: {defaultDeadline: 720h}\n",
			want: fleet.MaintenanceConfig{MaxParallel: intstr.FromInt32(1), DefaultDeadline: fleet.MaxDeadline}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Fleet().Maintenance; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Fleet().Maintenance = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDrainRules(t *testing.T) {
	gpu, mem := DefaultGPUCondition, DefaultMemoryCondition
	tests := []struct {
		name       string
		yaml       string
		wantTaints []string // the taint rules' keys, in order
		wantDrains []taints.DrainRule
		wantWatch  map[corev1.NodeConditionType][]corev1.ConditionStatus
	}{
		{
			name:       "drain instead of a taint",
			yaml:       "rules:\n- condition: SelftaintGPUFailure\n  action: drain\n",
			wantDrains: []taints.DrainRule{{Condition: gpu, Status: corev1.ConditionTrue, Deadline: time.Hour}},
			wantWatch:  map[corev1.NodeConditionType][]corev1.ConditionStatus{gpu: {corev1.ConditionTrue}},
		},
		{
			name: "drain after its taint, settings, Unknown too, the maintenance default deadline",
			yaml: `coordinator:
  maintenance: {defaultDeadline: 2h}
rules:
- condition: SelftaintMemoryPressure
  taint: {key: selftaint.io/memory-pressure, effect: NoSchedule}
- condition: SelftaintGPUFailure
  taintOnUnknown: true
  taint: {key: selftaint.io/gpu-failure, effect: NoSchedule}
  action: drain
  drain: {deadline: 45m, evictUnreplicated: true, deleteEmptyDirData: true, endWhenHealthy: true}
- condition: SelftaintGPUDegraded
  action: drain
  drain: {endWhenHealthy: true}
`,
			wantTaints: []string{"selftaint.io/memory-pressure", "selftaint.io/gpu-failure"},
			wantDrains: []taints.DrainRule{
				{Condition: gpu, Status: corev1.ConditionTrue, OnUnknown: true, Deadline: 45 * time.Minute, EvictUnreplicated: true, DeleteEmptyDirData: true, EndWhenHealthy: true},
				{Condition: DefaultGPUDegradedCondition, Status: corev1.ConditionTrue, Deadline: 2 * time.Hour, EndWhenHealthy: true},
			},
			wantWatch: map[corev1.NodeConditionType][]corev1.ConditionStatus{
				mem: {corev1.ConditionTrue}, gpu: {corev1.ConditionTrue, corev1.ConditionUnknown}, DefaultGPUDegradedCondition: {corev1.ConditionTrue},
			},
		},
		{
			name:       "action taint said outright",
			yaml:       "rules:\n- condition: SelftaintMemoryPressure\n  action: taint\n  taint: {key: selftaint.io/m, effect: NoSchedule}\n",
			wantTaints: []string{"selftaint.io/m"},
			wantWatch:  map[corev1.NodeConditionType][]corev1.ConditionStatus{mem: {corev1.ConditionTrue}},
		},
		{
			name:       "the defaults drain nothing",
			wantTaints: taintKeys(DefaultRules()),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, r := range c.TaintRules() {
				keys = append(keys, r.Taint.Key)
			}
			if !slices.Equal(keys, tt.wantTaints) {
				t.Errorf("taint rules %q, want %q", keys, tt.wantTaints)
			}
			if got := c.DrainRules(); !reflect.DeepEqual(got, tt.wantDrains) {
				t.Errorf("DrainRules =\n  %+v\nwant\n  %+v", got, tt.wantDrains)
			}
			if tt.wantWatch != nil {
				if got := c.Fleet().Watched; !reflect.DeepEqual(got, tt.wantWatch) {
					t.Errorf("Watched = %v, want %v", got, tt.wantWatch)
				}
			}
		})
	}
}

func taintKeys(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.Taint.Key)
	}
	return out
}

func TestDrainConfigErrorsNameTheField(t *testing.T) {
	rule := func(extra string) string {
		return "rules:\n- condition: SelftaintMemoryPressure\n  taint: {key: selftaint.io/m, effect: NoSchedule}\n- condition: SelftaintGPUFailure\n" + extra
	}
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown action", rule("  action: evict\n"), []string{"rules[1].action", `Unsupported value: "evict"`, `"taint", "drain"`}},
		{"drain settings on a taint rule", rule("  taint: {key: selftaint.io/g, effect: NoSchedule}\n  drain: {endWhenHealthy: true}\n"),
			[]string{"rules[1].drain", "action: drain"}},
		{"drain settings on a rule whose action defaults to taint", rule("  drain: {deadline: 1h}\n"),
			[]string{"rules[1].drain", "action: drain", "rules[1].taint.key"}},
		{"drain deadline zero", rule("  action: drain\n  drain: {deadline: 0s}\n"), []string{"rules[1].drain.deadline", "greater than zero"}},
		{"drain deadline negative", rule("  action: drain\n  drain: {deadline: -1m}\n"), []string{"rules[1].drain.deadline", "must not be negative"}},
		{"drain deadline beyond the longest", rule("  action: drain\n  drain: {deadline: 721h}\n"), []string{"rules[1].drain.deadline", "at most 720h0m0s"}},
		{"drain deadline garbage", rule("  action: drain\n  drain: {deadline: soon}\n"), []string{"rules[1].drain.deadline", `"soon"`}},
		{"unknown drain field", rule("  action: drain\n  drain: {endWhenHealty: true}\n"), []string{`unknown field "rules[1].drain.endWhenHealty"`}},
		{"drain rule for an unknown condition", "rules:\n- condition: Nope\n  action: drain\n", []string{"rules[0].condition", "Nope"}},
		{"drain rule without a condition", "rules:\n- action: drain\n", []string{"rules[0].condition", "Required"}},
		{"drain rule bad status", "rules:\n- condition: SelftaintGPUFailure\n  status: Maybe\n  action: drain\n", []string{"rules[0].status", "Maybe"}},
		{"fallback on a drain rule without a taint", rule("  action: drain\n  fallback: NoSchedule\n"), []string{"rules[1].fallback", "no taint"}},
		{"a drain rule's taint is checked where it stands", rule("  action: drain\n  taint: {key: selftaint.io/g}\n"), []string{"rules[1].taint.effect", "Required"}},
		{"a taint rule after a drain rule keeps its index", "rules:\n- condition: SelftaintGPUFailure\n  action: drain\n- condition: SelftaintMemoryPressure\n  taint: {key: selftaint.io/m, effect: NoWay}\n",
			[]string{"rules[1].taint.effect", "NoWay"}},
		{"maxParallel not a percent", "coordinator:\n  maintenance: {maxParallel: lots}\n", []string{"coordinator.maintenance.maxParallel", "lots"}},
		{"maxParallel negative", "coordinator:\n  maintenance: {maxParallel: -1}\n", []string{"coordinator.maintenance.maxParallel", "negative"}},
		{"maxParallelPerZone over 100%", "coordinator:\n  maintenance: {maxParallelPerZone: 120%}\n", []string{"coordinator.maintenance.maxParallelPerZone", "between 0% and 100%"}},
		{"defaultDeadline zero", "coordinator:\n  maintenance: {defaultDeadline: 0s}\n", []string{"coordinator.maintenance.defaultDeadline", "greater than zero"}},
		{"defaultDeadline beyond the longest", "coordinator:\n  maintenance: {defaultDeadline: 1000h}\n", []string{"coordinator.maintenance.defaultDeadline", "at most 720h0m0s"}},
		{"unknown maintenance field", "coordinator:\n  maintenance: {maxParalel: 2}\n", []string{`unknown field "coordinator.maintenance.maxParalel"`}},
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
			if names := goNames(err.Error()); len(names) > 0 {
				t.Errorf("error %q names Go fields %q, want the file's names", err, names)
			}
		})
	}
}
