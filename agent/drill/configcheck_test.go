package drill

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// drillWithConfig is a drill file whose cluster.config is config, given as
// the value of "config:" (a literal block "|\n..." or an inline scalar).
func drillWithConfig(config string) string {
	return `apiVersion: selftaint.io/v1alpha1
kind: Drill
name: cfg
cluster:
  pools:
  - name: vn
    count: 1
  config: ` + config + `
workloads:
- manifest: |
    apiVersion: v1
    kind: Pod
    metadata: {name: app}
    spec:
      containers: [{name: app, image: registry.invalid/app}]
steps:
- name: memory
  fault: {nodes: [vn-1], condition: MemoryPressure, for: 5s}
expect:
- noExecute: {atMost: 0}
timeout: 1m
`
}

// CheckConfig reports every error of cluster.config at its line of the
// drill file (line 8 is "  config: ..."; a literal block's first line is
// line 9), with its full path.
func TestCheckConfig(t *testing.T) {
	tests := []struct {
		name   string
		config string
		want   []ConfigFieldError
	}{
		{
			name:   "valid",
			config: "|\n    rules:\n    - condition: SelftaintMemoryPressure\n      taint: {key: selftaint.io/memory-pressure, effect: NoExecute}\n",
		},
		{
			name:   "unknown fields, each at its line",
			config: "|\n    rules:\n    - condition: SelftaintMemoryPressure\n      taint: {key: selftaint.io/memory-pressure, effect: NoExecute}\n    - condition: SelftaintDiskPressure\n      taint: {key: selftaint.io/disk-pressure, effect: NoSchedule}\n      fallbak: NoSchedule\n    heartbeatPeriodd: 1m\n",
			want: []ConfigFieldError{
				{Line: 15, Path: "cluster.config.heartbeatPeriodd", Msg: "unknown field"},
				{Line: 14, Path: "cluster.config.rules[1].fallbak", Msg: "unknown field"},
			},
		},
		{
			name:   "a value the validation refuses",
			config: "|\n    rules:\n    - condition: SelftaintMemoryPressure\n      taint:\n        key: selftaint.io/memory-pressure\n        effect: NoExecuteNow\n",
			want:   []ConfigFieldError{{Line: 13, Path: "cluster.config.rules[0].taint.effect", Msg: "Unsupported value"}},
		},
		{
			name:   "a type error, found in a list without its index",
			config: "|\n    rules:\n    - condition: SelftaintMemoryPressure\n      taint: {key: selftaint.io/memory-pressure, effect: NoExecute}\n    - condition: SelftaintDiskPressure\n      taint: [NoSchedule]\n",
			want:   []ConfigFieldError{{Line: 13, Path: "cluster.config.rules[1].taint", Msg: "an array where an object belongs"}},
		},
		{
			name:   "a YAML syntax error at its line",
			config: "|\n    rules:\n    - condition: SelftaintMemoryPressure\n      taint: {key: selftaint.io/memory-pressure, effect: NoExecute\n    heartbeatPeriod: 1m\n",
			want:   []ConfigFieldError{{Line: 0, Path: "cluster.config", Msg: "YAML syntax: did not find expected"}},
		},
		{
			name:   "not a literal block: cluster.config's own line",
			config: `"{heartbeatPeriodd: 1m}"`,
			want:   []ConfigFieldError{{Line: 8, Path: "cluster.config.heartbeatPeriodd", Msg: "unknown field"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "cfg.yaml")
			text := drillWithConfig(tt.config)
			if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := tdrill.Load(file)
			if err != nil {
				t.Fatalf("the drill file does not load: %v", err)
			}
			err = CheckConfig(s, file)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("CheckConfig = %v, want nil", err)
				}
				return
			}
			var ce *ConfigFileError
			if !errors.As(err, &ce) || ce.File != file {
				t.Fatalf("CheckConfig = %v (%T), want a *ConfigFileError for %s", err, err, file)
			}
			got := slices.Clone(ce.Errs)
			slices.SortFunc(got, func(a, b ConfigFieldError) int { return strings.Compare(a.Path, b.Path) })
			if len(got) != len(tt.want) {
				t.Fatalf("errors %+v, want %+v", got, tt.want)
			}
			lines := strings.Split(text, "\n")
			for i, w := range tt.want {
				g := got[i]
				wantLine := w.Line
				if tt.name == "a YAML syntax error at its line" {
					// The parser names the line after the unclosed
					// flow mapping; wherever it is, it is in the block.
					wantLine = g.Line
					if g.Line < 9 || g.Line > 12 {
						t.Errorf("syntax error at line %d, want one of the block's (9-12)", g.Line)
					}
				}
				if g.Line != wantLine || g.Path != w.Path || !strings.HasPrefix(g.Msg, w.Msg) {
					t.Errorf("error %d = %+v, want line %d, path %s, message beginning %q", i, g, wantLine, w.Path, w.Msg)
				}
				if g.Line > 0 && tt.config[0] == '|' {
					// The line named is the field's own.
					last := g.Path[strings.LastIndexAny(g.Path, ".]")+1:]
					if last != "config" && !strings.Contains(lines[g.Line-1], last) {
						t.Errorf("line %d is %q, which does not hold %s", g.Line, lines[g.Line-1], last)
					}
				}
			}
			msg := err.Error()
			if n := strings.Count(msg, "\n") + 1; n != len(tt.want) {
				t.Errorf("error has %d lines, want %d:\n%s", n, len(tt.want), msg)
			}
			if !strings.HasPrefix(msg, file+":") || strings.Contains(msg, os.TempDir()+"/selftaint-drill-") {
				t.Errorf("error %q does not begin with the drill file, or names a temporary file", msg)
			}
		})
	}
}

// Run refuses a drill whose cluster.config is wrong as a bad file (exit 2)
// before it starts anything, and its view shows no cleanup.
func TestRunRefusesABadConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := os.WriteFile(file, []byte(drillWithConfig("|\n    heartbeatPeriodd: 1m\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := tdrill.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	o := Run(t.Context(), Options{Scenario: s, File: file, Out: &out, KubeBinDir: t.TempDir()})
	if o.Code != tdrill.ExitBadFile {
		t.Fatalf("exit %d (%s), want %d", o.Code, o.Report.Error, tdrill.ExitBadFile)
	}
	if want := file + ":9: cluster.config.heartbeatPeriodd: unknown field"; !strings.HasPrefix(o.Report.Error, want) {
		t.Errorf("error %q, want it to begin %q", o.Report.Error, want)
	}
	if out.String() != "" {
		t.Errorf("the view shows %q, want nothing (nothing ran)", out.String())
	}
}
