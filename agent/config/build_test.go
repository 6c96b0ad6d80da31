package config

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckProbeSpecs builds the specs of checks sections: NPD files of
// temporary rules only are events-only specs, named after the file, as
// many as there are files; NPD conditions with
// enable_message_change_based_condition_update carry MessageUpdates,
// other conditions not.
func TestCheckProbeSpecs(t *testing.T) {
	npd := func(name string) string {
		path, err := filepath.Abs(filepath.Join("../../probes/custom/testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	logs := func(name string) string {
		path, err := filepath.Abs(filepath.Join("../../probes/logmon/testdata/npd", name))
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	broken := filepath.Join(t.TempDir(), "broken-monitor.json")
	if err := os.WriteFile(broken, []byte(`{"plugin": "kmsg", "conditions": [], "rules": [{"type": "permanent", "condition": "Nope", "reason": "R", "pattern": "x"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The same file under a second directory: the same base name.
	again := filepath.Join(t.TempDir(), "iptables-mode-monitor.json")
	data, err := os.ReadFile(npd("npd/iptables-mode-monitor.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(again, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		checks  string
		want    []string // probe=condition, with " messageUpdates" where set
		wantErr string
	}{
		{
			name:   "files of temporary rules only: one events-only spec each",
			checks: fmt.Sprintf("npdConfigs: [%s, %s, %s]", npd("npd/iptables-mode-monitor.json"), npd("npd/network-problem-monitor.json"), npd("npd/windows-defender-monitor.json")),
			want:   []string{"custom-npd:iptables-mode-monitor=", "custom-npd:network-problem-monitor=", "custom-npd:windows-defender-monitor="},
		},
		{
			name:   "beside conditions and custom checks",
			checks: fmt.Sprintf("custom: [{name: ntp, condition: NTPProblem, path: /bin/true}]\n  npdConfigs: [%s, %s]", npd("npd/health-checker-kubelet.json"), npd("npd/iptables-mode-monitor.json")),
			want:   []string{"custom-NTPProblem=NTPProblem", "custom-KubeletUnhealthy=KubeletUnhealthy", "custom-npd:iptables-mode-monitor="},
		},
		{
			name:   "enable_message_change_based_condition_update",
			checks: fmt.Sprintf("npdConfigs: [%s]", npd("network-problems.json")),
			want:   []string{"custom-ConntrackFull=ConntrackFull messageUpdates", "custom-DNSProblem=DNSProblem messageUpdates"},
		},
		{
			name:   "NPD system-log-monitor files: a probe per condition",
			checks: fmt.Sprintf("npdLogConfigs: [%s, %s]", logs("kernel-monitor.json"), logs("readonly-monitor.json")),
			want: []string{"logmon-KernelDeadlock=KernelDeadlock", "logmon-XfsShutdown=XfsShutdown",
				"logmon-CperHardwareErrorFatal=CperHardwareErrorFatal", "logmon-ReadonlyFilesystem=ReadonlyFilesystem"},
		},
		{
			name:   "a filelog file",
			checks: fmt.Sprintf("npdLogConfigs: [%s]", logs("kernel-monitor-filelog.json")),
			want:   []string{"logmon-KernelDeadlock=KernelDeadlock"},
		},
		{
			name:    "a log monitor's condition also fed by a custom check",
			checks:  fmt.Sprintf("custom: [{name: ro, condition: ReadonlyFilesystem, path: /bin/true}]\n  npdLogConfigs: [%s]", logs("readonly-monitor.json")),
			wantErr: "checks.npdLogConfigs[0] (" + logs("readonly-monitor.json") + "): condition ReadonlyFilesystem is also fed by checks.custom",
		},
		{
			name:    "a broken log monitor file: the file and its field named",
			checks:  fmt.Sprintf("npdLogConfigs: [%s]", broken),
			wantErr: "checks.npdLogConfigs[0] (" + broken + "): NPD log config " + broken + ": rules[0].condition",
		},
		{
			name:   "journald files: a probe per condition, or one events-only probe",
			checks: fmt.Sprintf("npdLogConfigs: [%s, %s]", logs("docker-monitor.json"), logs("systemd-monitor.json")),
			want:   []string{"logmon-CorruptDockerOverlay2=CorruptDockerOverlay2", "logmon-systemd-monitor="},
		},
		{
			name:    "NPD's kernel-monitor.json given as a custom-plugin-monitor file: where it goes",
			checks:  fmt.Sprintf("npdConfigs: [%s]", logs("kernel-monitor.json")),
			wantErr: "checks.npdConfigs[0] (" + logs("kernel-monitor.json") + "): NPD config " + logs("kernel-monitor.json") + `: this is an NPD system-log-monitor file (plugin "kmsg"; logPath, lookback, bufferSize), not a custom-plugin-monitor file: put it under checks.npdLogConfigs`,
		},
		{
			name:    "two files of temporary rules only with one base name",
			checks:  fmt.Sprintf("npdConfigs: [%s, %s]", npd("npd/iptables-mode-monitor.json"), again),
			wantErr: "checks.npdConfigs[1] (" + again + "): its events-only probe custom-npd:iptables-mode-monitor, named after the file, is also checks.npdConfigs[0] (" + npd("npd/iptables-mode-monitor.json") + ")'s",
		},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range tests {
		cfg, err := Parse([]byte("checks:\n  " + tt.checks + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		specs, err := cfg.CheckProbeSpecs(log)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: got error %v, want one containing %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var got []string
		for _, s := range specs {
			g := s.Entry.Probe.Name() + "=" + string(s.Condition)
			if s.MessageUpdates {
				g += " messageUpdates"
			}
			if s.EventsOnly() != (s.Condition == "") {
				t.Errorf("%s: %s: EventsOnly() %v with condition %q", tt.name, g, s.EventsOnly(), s.Condition)
			}
			got = append(got, g)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: got specs %q, want %q", tt.name, got, tt.want)
		}
		conds, err := cfg.CheckConditions(log)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range conds {
			if c == "" {
				t.Errorf("%s: CheckConditions %q names an empty condition", tt.name, conds)
			}
		}
	}
}
