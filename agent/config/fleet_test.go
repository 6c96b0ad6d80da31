package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

func TestFleetDefaults(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Limiter(), (taints.LimiterConfig{Burst: 3, Refill: 5 * time.Minute, CoolDown: 5 * time.Minute}); got != want {
		t.Errorf("Limiter = %+v, want %+v", got, want)
	}
	f := c.Fleet()
	if f.MaxNoExecute != intstr.FromString("10%") || f.RatePerMinute != 6 || f.GrantTTL != time.Minute {
		t.Errorf("budget = %v, %d/min, TTL %s; want 10%%, 6/min, 1m", f.MaxNoExecute.String(), f.RatePerMinute, f.GrantTTL)
	}
	if want := (fleet.GuardConfig{Threshold: 55, ResetMargin: 10, CoolDown: 5 * time.Minute, MinNodes: 3, RenewEvery: 30 * time.Second}); f.Guard != want {
		t.Errorf("guard = %+v, want %+v", f.Guard, want)
	}
	if got := f.Watched[DefaultMemoryCondition]; !reflect.DeepEqual(got, []corev1.ConditionStatus{corev1.ConditionTrue}) {
		t.Errorf("watched statuses of %s = %v, want [True]", DefaultMemoryCondition, got)
	}
	ne := c.NoExecuteOptions(nil, "ns")
	if ne.Namespace != "ns" || ne.GuardName != fleet.DefaultGuardName || ne.GrantTTL != time.Minute || ne.GuardStaleAfter != 2*time.Minute {
		t.Errorf("NoExecuteOptions = %+v", ne)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("the defaults have no NoExecute rule, got warnings %q", w)
	}
	if c.Coordinator.Fleet != "real" || f.Members != fleet.MembersReal {
		t.Errorf("fleet = %q (members %q), want real: virtual nodes never count in a real fleet by default", c.Coordinator.Fleet, f.Members)
	}
}

func TestFleetOverrides(t *testing.T) {
	c, err := Parse([]byte(`
changeLimiter: {enabled: false}
coordinator:
  namespace: selftaint
  fleet: virtual
  maxNoExecute: 10
  ratePerMinute: 2
  grantTTL: 30s
  guard: {threshold: "70%", resetMargin: 20, coolDown: 0s, minNodes: 10, renewEvery: 10s, staleAfter: 20s}
rules:
- condition: SelftaintMemoryPressure
  taintOnUnknown: true
  taint: {key: selftaint.io/memory-pressure, effect: NoExecute}
  fallback: PreferNoSchedule
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Limiter(); got.Burst != 0 {
		t.Errorf("disabled limiter = %+v, want Burst 0 (off)", got)
	}
	f := c.Fleet()
	if f.MaxNoExecute != intstr.FromInt32(10) || f.RatePerMinute != 2 || f.GrantTTL != 30*time.Second {
		t.Errorf("budget = %v, %d/min, TTL %s", f.MaxNoExecute.String(), f.RatePerMinute, f.GrantTTL)
	}
	if want := (fleet.GuardConfig{Threshold: 70, ResetMargin: 20, MinNodes: 10, RenewEvery: 10 * time.Second}); f.Guard != want {
		t.Errorf("guard = %+v, want %+v", f.Guard, want)
	}
	if got := f.Watched[DefaultMemoryCondition]; !reflect.DeepEqual(got, []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionUnknown}) {
		t.Errorf("watched statuses = %v, want [True Unknown]", got)
	}
	if got := c.TaintRules()[0].Fallback; got != corev1.TaintEffectPreferNoSchedule {
		t.Errorf("fallback = %q, want PreferNoSchedule", got)
	}
	if f.Members != fleet.MembersVirtual {
		t.Errorf("members = %q, want virtual", f.Members)
	}
	if got := c.Coordinator.NamespaceOr("pod-ns"); got != "selftaint" {
		t.Errorf("NamespaceOr = %q, want the config's", got)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("a NoExecute rule with a fallback warns: %q", w)
	}
}

func TestNamespaceOr(t *testing.T) {
	for _, tt := range []struct{ config, pod, want string }{
		{"", "", "selftaint"}, {"", "pod-ns", "pod-ns"}, {"cfg", "pod-ns", "cfg"},
	} {
		if got := (Coordinator{Namespace: tt.config}).NamespaceOr(tt.pod); got != tt.want {
			t.Errorf("NamespaceOr(config %q, pod %q) = %q, want %q", tt.config, tt.pod, got, tt.want)
		}
	}
}

func TestNoExecuteRuleWithoutFallbackWarns(t *testing.T) {
	c, err := Parse([]byte("rules:\n- condition: SelftaintGPUFailure\n  taint: {key: selftaint.io/gpu, effect: NoExecute}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.TaintRules()[0].Fallback; got != corev1.TaintEffectNoSchedule {
		t.Errorf("default fallback = %q, want NoSchedule", got)
	}
	w := c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "rules[0].fallback") || !strings.Contains(w[0], "running pods stay") {
		t.Errorf("warnings = %q, want one naming rules[0].fallback and the risk", w)
	}
}

func TestFleetErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"burst below two", "changeLimiter: {burst: 1}", []string{"changeLimiter.burst", "two tokens"}},
		{"zero refill", "changeLimiter: {refill: 0s}", []string{"changeLimiter.refill", "greater than zero"}},
		{"unknown limiter field", "changeLimiter: {brust: 3}", []string{`unknown field "changeLimiter.brust"`}},
		{"bad namespace", "coordinator: {namespace: Kube_System}", []string{"coordinator.namespace"}},
		{"unknown fleet", "coordinator: {fleet: fake}", []string{"coordinator.fleet", `Unsupported value: "fake"`, `"real", "virtual", "all"`}},
		{"percent over 100", "coordinator: {maxNoExecute: 150%}", []string{"coordinator.maxNoExecute", "between 0% and 100%"}},
		{"not a percent", "coordinator: {maxNoExecute: lots}", []string{"coordinator.maxNoExecute", "lots"}},
		{"negative count", "coordinator: {maxNoExecute: -1}", []string{"coordinator.maxNoExecute", "negative"}},
		{"rate zero", "coordinator: {ratePerMinute: -1}", []string{"coordinator.ratePerMinute", "at least 1"}},
		{"short TTL", "coordinator: {grantTTL: 5s}", []string{"coordinator.grantTTL", "at least 15s"}},
		{"fractional TTL", "coordinator: {grantTTL: 20500ms}", []string{"coordinator.grantTTL", "whole seconds"}},
		{"threshold garbage", "coordinator: {guard: {threshold: most}}", []string{"coordinator.guard.threshold", "percent"}},
		{"threshold zero", "coordinator: {guard: {threshold: 0%}}", []string{"coordinator.guard.threshold", "between 1% and 100%"}},
		{"margin above threshold", "coordinator: {guard: {threshold: 20%, resetMargin: 30%}}", []string{"coordinator.guard.resetMargin", "must not exceed threshold"}},
		{"min nodes", "coordinator: {guard: {minNodes: -2}}", []string{"coordinator.guard.minNodes"}},
		{"stale below twice renew", "coordinator: {guard: {renewEvery: 1m, staleAfter: 90s}}", []string{"coordinator.guard.staleAfter", "twice renewEvery"}},
		{"bad guard name", "coordinator: {guard: {name: Guard!}}", []string{"coordinator.guard.name"}},
		{"unknown guard field", "coordinator: {guard: {treshold: 50%}}", []string{`unknown field "coordinator.guard.treshold"`}},
		{"fallback on a NoSchedule rule", "rules:\n- condition: SelftaintMemoryPressure\n  taint: {key: selftaint.io/x, effect: NoSchedule}\n  fallback: PreferNoSchedule\n",
			[]string{"rules[0].fallback", "only a NoExecute rule"}},
		{"fallback NoExecute", "rules:\n- condition: SelftaintMemoryPressure\n  taint: {key: selftaint.io/x, effect: NoExecute}\n  fallback: NoExecute\n",
			[]string{"rules[0].fallback", "NoSchedule"}},
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
		})
	}
}
