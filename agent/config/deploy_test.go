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
