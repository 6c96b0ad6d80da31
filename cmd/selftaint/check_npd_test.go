package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/custom"
)

// TestCheckNPDTemporaryOnlyFile runs `selftaint check` with NPD's
// iptables-mode-monitor.json, a file of temporary rules only, unchanged,
// its plugin a failing stub at the relative path the file gives: its
// events-only probe shows its Event and no condition, and adds no taint.
func TestCheckNPDTemporaryOnlyFile(t *testing.T) {
	cfg, host := iptablesCheckConfig(t, "echo 'iptables modes differ'\nexit 1\n")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"check", "--host-root=" + host, "--config=" + cfg, "--output=json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep checkReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("json output: %v\n%s", err, stdout.String())
	}
	i := slices.IndexFunc(rep.Probes, func(r checkRow) bool { return r.Probe == "custom-npd:iptables-mode-monitor" })
	if i < 0 {
		t.Fatalf("no row for the file's probe in %s", stdout.String())
	}
	row := rep.Probes[i]
	want := []probes.Event{{Reason: "IPTablesVersionsMismatch", Message: "iptables modes differ"}}
	if row.Condition != "" || row.ConditionStatus != "" || row.Reason != custom.ReasonEventsOnly || fmt.Sprint(row.Events) != fmt.Sprint(want) {
		t.Errorf("row %+v: want no condition, reason %s, events %v", row, custom.ReasonEventsOnly, want)
	}
	if strings.Contains(stdout.String(), `"condition": ""`) {
		t.Errorf("json output names an empty condition:\n%s", stdout.String())
	}
	if len(rep.Taints) != 0 {
		t.Errorf("taints %v, want none", rep.Taints)
	}

	stdout.Reset()
	if code := run(context.Background(), []string{"check", "--host-root=" + host, "--config=" + cfg}, &stdout, &stderr); code != 0 {
		t.Fatalf("table: exit %d: %s", code, stderr.String())
	}
	var got string // the probe's row, its first five columns
	for _, l := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(l); len(f) >= 5 && f[0] == "custom-npd:iptables-mode-monitor" {
			got = strings.Join(f[:5], " ")
		}
	}
	if want := "custom-npd:iptables-mode-monitor OK - - EventsOnly"; got != want {
		t.Errorf("table row %q, want %q (no condition, no status):\n%s", got, want, stdout.String())
	}
	if w := "custom-npd:iptables-mode-monitor: event IPTablesVersionsMismatch: iptables modes differ"; !strings.Contains(stdout.String(), w) {
		t.Errorf("table output does not contain %q:\n%s", w, stdout.String())
	}
}

// iptablesCheckConfig writes a config naming NPD's iptables-mode-monitor.json
// (unchanged) with only the pid and network probes beside it, and its
// plugin with body at the relative path the file gives, and changes into
// the plugin's directory. It returns the config's path and the fixture
// host's.
func iptablesCheckConfig(t *testing.T, body string) (cfg, host string) {
	t.Helper()
	npd, err := filepath.Abs("../../probes/custom/testdata/npd/iptables-mode-monitor.json")
	if err != nil {
		t.Fatal(err)
	}
	host, err = filepath.Abs("testdata/lowmem")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plugin := filepath.Join(dir, "config", "plugin", "iptables_mode.sh")
	if err := os.MkdirAll(filepath.Dir(plugin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg = writeFile(t, "probes:\n  memory:\n    enabled: false\n  disk:\n    enabled: false\nchecks:\n  npdConfigs: ["+npd+"]\n")
	t.Chdir(dir)
	return cfg, host
}
