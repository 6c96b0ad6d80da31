package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
)

// TestPolicyParamsCommand checks `selftaint policy-params` prints, for the
// deployed config, exactly the entries deploy/configmap.yaml carries, and
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
	for _, k := range config.ParamKeys {
		if printed[k] != cm.Data[k] {
			t.Errorf("policy-params %s = %q, deploy/configmap.yaml has %q", k, printed[k], cm.Data[k])
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

// TestCheckPolicyParamsBeside checks the agent's start-up warning: silent
// when the parameters mounted beside the config match it, a warning naming
// what is missing when they do not, a note when there are none.
func TestCheckPolicyParamsBeside(t *testing.T) {
	own := agent.Ownership{Conditions: []corev1.NodeConditionType{"SelftaintMemoryPressure", "SelftaintGPUFailure"}}
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings of the log, in order; none: no log line
	}{
		{"match", map[string]string{config.ParamConditions: "SelftaintGPUFailure\nSelftaintMemoryPressure\n", config.ParamTaints: ""}, nil},
		{"missing", map[string]string{config.ParamConditions: "SelftaintMemoryPressure\n"}, []string{"level=WARN", "will deny", "ownedConditions lacks SelftaintGPUFailure"}},
		{"extra", map[string]string{config.ParamConditions: "SelftaintGPUFailure\nSelftaintMemoryPressure\nReady\n"}, []string{"level=INFO", "allow more", "ownedConditions also allows Ready"}},
		{"none mounted", nil, nil},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		for k, v := range tt.files {
			if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var logs bytes.Buffer
		checkPolicyParamsBeside(filepath.Join(dir, "config.yaml"), own, slog.New(slog.NewTextHandler(&logs, nil)))
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
}
