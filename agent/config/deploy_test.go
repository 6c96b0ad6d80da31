package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// deployedConfigMap is deploy/configmap.yaml, decoded strictly.
func deployedConfigMap(t *testing.T) corev1.ConfigMap {
	t.Helper()
	b, err := os.ReadFile("../../deploy/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatalf("deploy/configmap.yaml: %v", err)
	}
	return cm
}

// TestDeployConfigMapIsTheDefaults keeps deploy/configmap.yaml honest: it
// must parse, and since it documents the defaults, it must equal them.
func TestDeployConfigMapIsTheDefaults(t *testing.T) {
	cm := deployedConfigMap(t)
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

// TestDeployPolicyParams keeps the admission policy's parameters (its own
// annotations, deploy/admission-policy.yaml) equal to what the deployed
// config (deploy/configmap.yaml) lets the agent own: a missing entry would
// get the agent's writes denied, an extra one would let a stolen token
// change more than the agent needs.
func TestDeployPolicyParams(t *testing.T) {
	cm := deployedConfigMap(t)
	cfg, err := Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../deploy/admission-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policyDoc, _, _ := strings.Cut(string(b), "\n---\n")
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict([]byte(policyDoc), &vap); err != nil {
		t.Fatalf("deploy/admission-policy.yaml: %v", err)
	}
	want := PolicyParams(cfg.Ownership(nil))
	missing, extra := CheckPolicyParams(want, vap.Annotations)
	if len(missing)+len(extra) > 0 {
		t.Errorf("the policy's parameters differ from the deployed config: missing %q, extra %q; regenerate them with selftaint policy-params", missing, extra)
	}
	for _, k := range ParamKeys() {
		if got, ok := vap.Annotations[k]; !ok || got != want[k] {
			t.Errorf("annotation %s = %q (present %v), want exactly %q (the form selftaint policy-params prints)", k, got, ok, want[k])
		}
	}
}
