package config

import (
	"os"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestDeployConfigMapIsTheDefaults keeps deploy/configmap.yaml honest: it
// must parse, and since it documents the defaults, it must equal them.
func TestDeployConfigMapIsTheDefaults(t *testing.T) {
	b, err := os.ReadFile("../../deploy/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatalf("deploy/configmap.yaml: %v", err)
	}
	got, err := Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("deploy/configmap.yaml config.yaml: %v", err)
	}
	want, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	gj, _ := yaml.Marshal(got)
	wj, _ := yaml.Marshal(want)
	if !reflect.DeepEqual(gj, wj) {
		t.Errorf("deploy/configmap.yaml differs from the defaults:\n--- configmap\n%s\n--- defaults\n%s", gj, wj)
	}
}

// TestDeployConfigMapPolicyParams keeps the admission policy's parameters
// in deploy/configmap.yaml equal to what its config.yaml lets the agent own:
// a missing entry would get the agent's writes denied, an extra one would
// let a stolen token change more than the agent needs.
func TestDeployConfigMapPolicyParams(t *testing.T) {
	b, err := os.ReadFile("../../deploy/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatalf("deploy/configmap.yaml: %v", err)
	}
	cfg, err := Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	want := PolicyParams(cfg.Ownership(nil))
	for _, k := range ParamKeys {
		if _, ok := cm.Data[k]; !ok {
			t.Errorf("deploy/configmap.yaml has no %s", k)
		}
	}
	missing, extra := CheckPolicyParams(want, cm.Data)
	if len(missing)+len(extra) > 0 {
		t.Errorf("deploy/configmap.yaml's policy parameters differ from its config: missing %q, extra %q; regenerate them with selftaint policy-params", missing, extra)
	}
	for _, k := range ParamKeys {
		if got := cm.Data[k]; got != want[k] {
			t.Errorf("%s = %q, want exactly %q (the form selftaint policy-params prints)", k, got, want[k])
		}
	}
}
