package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
)

// deployedPolicy is deploy/admission-policy.yaml's policy.
func deployedPolicy(t *testing.T) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	b, err := os.ReadFile("../../deploy/admission-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(b), "\n---\n")
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict([]byte(doc), &vap); err != nil {
		t.Fatal(err)
	}
	return &vap
}

// TestPolicyParamsCommand checks `selftaint policy-params` prints, for the
// deployed config, exactly the annotations the deployed policy carries, and
// names an NPD file it cannot read.
func TestPolicyParamsCommand(t *testing.T) {
	b, err := os.ReadFile("../../deploy/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatal(err)
	}
	cfgPath := writeFile(t, cm.Data["config.yaml"])
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"policy-params", "--config", cfgPath}, &stdout, &stderr); code != 0 {
		t.Fatalf("policy-params exited %d: %s", code, stderr.String())
	}
	var printed map[string]string
	if err := yaml.UnmarshalStrict(stdout.Bytes(), &printed); err != nil {
		t.Fatalf("policy-params printed no YAML map: %v\n%s", err, stdout.String())
	}
	vap := deployedPolicy(t)
	for _, k := range config.ParamKeys() {
		if printed[k] != vap.Annotations[k] {
			t.Errorf("policy-params %s = %q, deploy/admission-policy.yaml has %q", k, printed[k], vap.Annotations[k])
		}
	}

	missing := filepath.Join(t.TempDir(), "gone.json")
	stdout.Reset()
	stderr.Reset()
	code := run(context.Background(), []string{"policy-params", "--config", writeFile(t, "checks: {npdConfigs: ["+missing+"]}\n")}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), missing) {
		t.Errorf("policy-params with an unreadable NPD file: exit %d, stderr %q; want 1 naming %s", code, stderr.String(), missing)
	}
}

// fakePolicies answers Get with a policy or an error.
type fakePolicies struct {
	vap *admissionregistrationv1.ValidatingAdmissionPolicy
	err error
}

func (f fakePolicies) Get(context.Context, string, metav1.GetOptions) (*admissionregistrationv1.ValidatingAdmissionPolicy, error) {
	return f.vap, f.err
}

// TestCheckAdmissionPolicy checks the agent's start-up report on the
// policy that confines it: silent when its parameters match the config, a
// warning naming what is missing, a note on extras, a warning when the
// policy is not installed, a note when it cannot be read.
func TestCheckAdmissionPolicy(t *testing.T) {
	own := agent.Ownership{Conditions: []corev1.NodeConditionType{"SelftaintMemoryPressure", "SelftaintGPUFailure"}}
	policy := func(conds string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{config.ParamConditions: conds, config.ParamTaints: ""},
		}}
	}
	gr := schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}
	tests := []struct {
		name     string
		policies fakePolicies
		want     []string // substrings of the log, in order; none: no log line
	}{
		{"match", fakePolicies{vap: policy("SelftaintGPUFailure\nSelftaintMemoryPressure\n")}, nil},
		{"missing", fakePolicies{vap: policy("SelftaintMemoryPressure\n")}, []string{"level=WARN", "will deny", config.ParamConditions + " lacks SelftaintGPUFailure"}},
		{"extra", fakePolicies{vap: policy("SelftaintGPUFailure\nSelftaintMemoryPressure\nReady\n")}, []string{"level=INFO", "allow more", config.ParamConditions + " also allows Ready"}},
		{"not installed", fakePolicies{err: apierrors.NewNotFound(gr, "selftaint-own-node")}, []string{"level=WARN", "not installed", "nothing but RBAC"}},
		{"unreadable", fakePolicies{err: apierrors.NewForbidden(gr, "selftaint-own-node", nil)}, []string{"level=INFO", "could not read the admission policy"}},
	}
	for _, tt := range tests {
		var logs bytes.Buffer
		checkAdmissionPolicy(context.Background(), tt.policies, "selftaint-own-node", own, slog.New(slog.NewTextHandler(&logs, nil)))
		got := logs.String()
		if len(tt.want) == 0 && got != "" {
			t.Errorf("%s: logged %q, want nothing", tt.name, got)
		}
		rest := got
		for _, w := range tt.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%s: log %q lacks %q", tt.name, got, w)
				break
			}
			rest = rest[i+len(w):]
		}
	}
	var logs bytes.Buffer
	checkAdmissionPolicy(context.Background(), fakePolicies{err: apierrors.NewNotFound(gr, "x")}, "", own, slog.New(slog.NewTextHandler(&logs, nil)))
	if logs.Len() > 0 {
		t.Errorf("with no policy name: logged %q, want nothing", logs.String())
	}
}
