package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/logmon"
)

// TestLogReportFormat: a log monitor's view and check's rows become its
// report (the conditions as the rows have them, the last five matches of
// both kinds of rule) and its table, exactly.
func TestLogReportFormat(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 4, 0, 0, 0, time.FixedZone("CET", 3600))
	line := func(s int, msg string) logmon.Line {
		return logmon.Line{Time: t0.Add(time.Duration(s) * time.Second), Message: msg}
	}
	hung := logmon.Match{Reason: "DockerHung", Permanent: true, Condition: "KernelDeadlock", Lines: []logmon.Line{line(9, "INFO: task docker:1 blocked for more than 120 seconds.")}}
	oops := logmon.Match{Reason: "KernelOops", Lines: []logmon.Line{line(1, "BUG: unable to handle kernel NULL pointer dereference at 0"), line(2, "IP: [<ffffffff>] foo")}}
	view := logmon.View{Config: "/etc/selftaint/kernel-monitor.json", Source: "kernel-monitor", Plugin: "kmsg", Log: "/dev/kmsg", Started: true, LinesRead: 12,
		Conditions: []logmon.ConditionState{
			{Type: "KernelDeadlock", Problem: true, Reason: "DockerHung", Message: "INFO: task docker:1 blocked for more than 120 seconds.", Since: t0.Add(9 * time.Second)},
			{Type: "XfsShutdown", Reason: "XfsHasNotShutDown", Message: "XFS has not shutdown", Since: t0},
		},
		Recent: []logmon.Match{
			{Reason: "OOMKilling", Lines: []logmon.Line{line(0, "too old to show")}},
			oops,
			{Reason: "OOMKilling", Lines: []logmon.Line{line(3, "Out of memory: Killed process 7 (a)")}},
			{Reason: "TaskHung", Lines: []logmon.Line{line(4, "task b")}},
			{Reason: "TaskHung", Lines: []logmon.Line{line(5, "task c")}},
			hung,
		},
	}
	rows := []checkRow{
		{Result: probes.Result{Probe: "logmon-KernelDeadlock", Status: probes.StatusProblem, Reason: "DockerHung", Message: "INFO: task docker:1 blocked for more than 120 seconds."},
			Condition: "KernelDeadlock", ConditionStatus: corev1.ConditionTrue},
		{Result: probes.Result{Probe: "logmon-XfsShutdown", Status: probes.StatusOK, Reason: "XfsHasNotShutDown", Message: "XFS has not shutdown; 3 kernel log records lost"},
			Condition: "XfsShutdown", ConditionStatus: corev1.ConditionFalse},
		{Result: probes.Result{Probe: "memory", Status: probes.StatusOK}, Condition: "XfsShutdown", ConditionStatus: corev1.ConditionUnknown},
	}
	for _, tt := range []struct {
		name  string
		view  logmon.View
		rows  []checkRow
		table string
	}{
		{"conditions and matches", view, rows, `Log monitors (checks.npdLogConfigs):
  /etc/selftaint/kernel-monitor.json: kmsg log /dev/kmsg, 12 lines read
    CONDITION       STATUS  REASON             SINCE                     MESSAGE
    KernelDeadlock  True    DockerHung         2026-11-27T03:00:09.000Z  INFO: task docker:1 blocked for more than 120 seconds.
    XfsShutdown     False   XfsHasNotShutDown  2026-11-27T03:00:00.000Z  XFS has not shutdown; 3 kernel log records lost
    The last 5 lines rules matched, oldest first:
    TIME                      RULE        KIND                      LINE
    2026-11-27T03:00:01.000Z  KernelOops  temporary                 BUG: unable to handle kernel NULL pointer dereference at 0
    2026-11-27T03:00:02.000Z                                        IP: [<ffffffff>] foo
    2026-11-27T03:00:03.000Z  OOMKilling  temporary                 Out of memory: Killed process 7 (a)
    2026-11-27T03:00:04.000Z  TaskHung    temporary                 task b
    2026-11-27T03:00:05.000Z  TaskHung    temporary                 task c
    2026-11-27T03:00:09.000Z  DockerHung  permanent KernelDeadlock  INFO: task docker:1 blocked for more than 120 seconds.

`},
		{"unreadable, multi-line condition message, no rows", logmon.View{Config: "/r.json", Plugin: "kmsg", Log: "/dev/kmsg", Err: "opening the kernel log: permission denied",
			Conditions: []logmon.ConditionState{{Type: "ReadonlyFilesystem", Problem: true, Reason: "FilesystemIsReadOnly", Message: "a\nb", Since: t0}}}, nil,
			`Log monitors (checks.npdLogConfigs):
  /r.json: kmsg log /dev/kmsg, 0 lines read
    cannot read it: opening the kernel log: permission denied
    CONDITION           STATUS  REASON                SINCE                     MESSAGE
    ReadonlyFilesystem  True    FilesystemIsReadOnly  2026-11-27T03:00:00.000Z  a | b
    no line matched a rule

`},
		{"events only", logmon.View{Config: "/e.json", Plugin: "filelog", Log: "/host/var/log/kern.log", LinesRead: 1,
			Recent: []logmon.Match{{Reason: "OOMKilling", Lines: []logmon.Line{line(1, "oom")}}, {Reason: "TaskHung", Reported: true, Lines: []logmon.Line{line(2, "hung")}}}}, nil,
			`Log monitors (checks.npdLogConfigs):
  /e.json: filelog log /host/var/log/kern.log, 1 lines read
    The last 5 lines rules matched, oldest first:
    TIME                      RULE        KIND                                         LINE
    2026-11-27T03:00:01.000Z  OOMKilling  temporary                                    oom
    2026-11-27T03:00:02.000Z  TaskHung    temporary (Event recorded before a restart)  hung

`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printLogMonitors(&b, []logMonitorReport{logReport(tt.view, tt.rows)}); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tt.table {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.table)
			}
		})
	}
	r := logReport(view, rows)
	if len(r.Matches) != logMatchesShown || r.Matches[0].Rule != "KernelOops" || r.Matches[4].Kind != "permanent" || r.Matches[4].Condition != "KernelDeadlock" {
		t.Errorf("matches %+v, want the last %d, the permanent one naming its condition", r.Matches, logMatchesShown)
	}
	if c := r.Conditions[1]; c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, "lost") {
		t.Errorf("XfsShutdown %+v, want the row's status and message (not the memory row's)", c)
	}
	var b bytes.Buffer
	if err := printLogMonitors(&b, nil); err != nil || b.Len() != 0 {
		t.Errorf("no log monitors: %q, %v; want nothing", b.String(), err)
	}
}

// TestCheckLogMonitors runs `selftaint check` with NPD's kernel-monitor.json
// and readonly-monitor.json, unchanged, on a host whose /dev/kmsg stands in
// as a file holding a hung task, an OOM kill and a read-only remount: the
// table and the JSON show the conditions they set and the lines each rule
// matched, permanent and temporary, with their rule; the taint-free
// defaults add no taint for NPD's conditions.
func TestCheckLogMonitors(t *testing.T) {
	const (
		hung = "INFO: task docker:1234 blocked for more than 120 seconds."
		oom  = "Out of memory: Killed process 4242 (stress) total-vm:1048576kB, anon-rss:1000000kB, file-rss:0kB, shmem-rss:0kB"
		ro   = "EXT4-fs (sda1): Remounting filesystem read-only"
	)
	root := t.TempDir()
	rec := func(seq int, ago time.Duration, msg string) string {
		return fmt.Sprintf("6,%d,%d,-;%s\n", seq, (time.Hour - ago).Microseconds(), msg)
	}
	for path, data := range map[string]string{
		"proc/sys/kernel/random/boot_id": "boot-1\n",
		"proc/uptime":                    "3600.00 100.00\n", // booted an hour ago
		"dev/kmsg":                       rec(1, 3*time.Second, hung) + rec(2, 2*time.Second, "eth0: link up") + rec(3, 2*time.Second, oom) + rec(4, time.Second, ro),
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var files []string
	for _, f := range []string{"kernel-monitor.json", "readonly-monitor.json"} {
		p, err := filepath.Abs(filepath.Join("../../probes/logmon/testdata/npd", f))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	cfg := writeFile(t, noNVML+"probes:\n  memory: {enabled: false}\n  disk: {enabled: false}\n  pid: {enabled: false}\n  network: {enabled: false}\n"+
		"checks:\n  npdLogConfigs: ["+strings.Join(files, ", ")+"]\n")
	// A quiet second: the file is read in well under that even on a
	// loaded machine.
	args := []string{"check", "--host-root=" + root, "--config=" + cfg, "--log-quiet=1s", "--log-wait=30s"}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append(args, "--output=json"), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep checkReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("json output: %v\n%s", err, stdout.String())
	}
	if len(rep.LogMonitors) != 2 {
		t.Fatalf("%d log monitors in the JSON, want 2:\n%s", len(rep.LogMonitors), stdout.String())
	}
	type match struct{ rule, kind, cond, line string }
	var got []match
	status := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	for _, m := range rep.LogMonitors {
		if m.LinesRead != 4 || m.Error != "" || m.Log != filepath.Join(root, "dev/kmsg") {
			t.Errorf("%s: %d lines read from %s, error %q; want 4 from the host's dev/kmsg and none", m.Config, m.LinesRead, m.Log, m.Error)
		}
		for _, c := range m.Conditions {
			status[c.Type] = c.Status
		}
		for _, x := range m.Matches {
			for _, l := range x.Lines {
				if l.Time.IsZero() {
					t.Errorf("%s: line %q without its time", x.Rule, l.Message)
				}
				got = append(got, match{x.Rule, x.Kind, x.Condition, l.Message})
			}
		}
	}
	want := []match{
		{"TaskHung", "temporary", "", hung}, {"DockerHung", "permanent", "KernelDeadlock", hung}, {"OOMKilling", "temporary", "", oom},
		{"FilesystemIsReadOnly", "permanent", "ReadonlyFilesystem", ro},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("matches:\n got %v\nwant %v", got, want)
	}
	for c, s := range map[corev1.NodeConditionType]corev1.ConditionStatus{"KernelDeadlock": "True", "XfsShutdown": "False", "ReadonlyFilesystem": "True"} {
		if status[c] != s {
			t.Errorf("condition %s: %s, want %s", c, status[c], s)
		}
	}

	stdout.Reset()
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("table: exit %d: %s", code, stderr.String())
	}
	// Each line with its columns' padding collapsed to one space.
	var lines []string
	for _, l := range strings.Split(stdout.String(), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	out := strings.Join(lines, "\n")
	for _, w := range []string{
		"Log monitors (checks.npdLogConfigs):",
		"KernelDeadlock True DockerHung",
		"ReadonlyFilesystem True FilesystemIsReadOnly",
		" TaskHung temporary " + hung,
		" DockerHung permanent KernelDeadlock " + hung,
		" OOMKilling temporary " + oom,
		" FilesystemIsReadOnly permanent ReadonlyFilesystem " + ro,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("table output does not contain %q:\n%s", w, stdout.String())
		}
	}
}
