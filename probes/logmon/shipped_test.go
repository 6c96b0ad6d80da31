package logmon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// TestShippedConfigsRun: every Linux system-log-monitor file NPD ships
// (testdata/npd) runs unchanged from its own source — a kmsg stand-in, a
// file under the host root, a journal written by systemd-journal-remote —
// and a line of one of its rules, logged within lookback, sets that rule's
// condition (permanent) or records its Event (temporary), while a line of
// another source or format does nothing. disk-log-message-filelog.json
// runs and reads its lines but never matches: its pluginConfig.message
// keeps only the text from "Currently unreadable" on, and its rule wants
// the count before it, so NPD never matches it either (the message is the
// last submatch in both).
func TestShippedConfigsRun(t *testing.T) {
	syslog := func(msg string) string {
		return t0.Add(-time.Minute).Format("Jan _2 15:04:05") + " node1 " + msg + "\n"
	}
	dockerLog := func(msg string) string {
		return `time="` + t0.Add(-time.Minute).Format("2006-01-02T15:04:05.000000000-07:00") + `" level=error msg="` + msg + "\"\n"
	}
	const corruptImage = "Error trying v2 registry: failed to register layer: rename /var/lib/docker/image/a /var/lib/docker/image/b: directory not empty."
	type shipped struct {
		file string
		// kmsg, filelog (the file's text) or journal (entries of this
		// boot, by identifier): what the source holds.
		kmsg    []string
		filelog string
		journal [][2]string
		// cond is the condition a permanent rule sets ("" for an Event);
		// reason the rule's; "" with neither: no match expected.
		cond, reason string
		// read is the "lines read" reading once the source has read all.
		read string
	}
	tests := []shipped{
		{file: "kernel-monitor.json", kmsg: []string{rec(1, time.Minute, "eth0: link up"), rec(2, time.Minute, hungDocker)},
			cond: "KernelDeadlock", reason: "DockerHung", read: "2"},
		{file: "readonly-monitor.json", kmsg: []string{rec(1, time.Minute, "EXT4-fs error (device sda1): Remounting filesystem read-only")},
			cond: "ReadonlyFilesystem", reason: "FilesystemIsReadOnly", read: "1"},
		{file: "kernel-monitor-filelog.json", filelog: syslog("systemd[1]: "+hungDocker) + syslog("kernel: [3599.0] "+hungDocker),
			cond: "KernelDeadlock", reason: "DockerHung", read: "1"},
		{file: "docker-monitor-filelog.json", filelog: "not a docker line\n" + dockerLog(corruptImage),
			reason: "CorruptDockerImage", read: "1"},
		{file: "disk-log-message-filelog.json", filelog: syslog("smartd[1]: Device: /dev/sda [SAT], 100 Currently unreadable (pending) sectors"), read: "1"},
		{file: "systemd-monitor.json", journal: [][2]string{{"kubelet", "Started kubelet.service."}, {"systemd", "Started kubelet.service - Kubernetes kubelet."}},
			reason: "KubeletStart", read: "1"},
		{file: "docker-monitor.json", journal: [][2]string{{"dockerd", "handler for GET /containers returned error: readlink /var/lib/docker/overlay2/l: invalid argument"}},
			cond: "CorruptDockerOverlay2", reason: "CorruptDockerOverlay2", read: "1"},
		{file: "abrt-adaptor.json", journal: [][2]string{{"systemd", "Process 42 (python3) crashed in main()"}, {"abrt-notification", "Process 42 (python3) crashed in main()"}},
			reason: "CCPPCrash", read: "1"},
	}
	files, err := filepath.Glob("testdata/npd/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.ContainsFunc(tests, func(tt shipped) bool { return tt.file == filepath.Base(f) }) {
			t.Errorf("%s is not run here", f)
		}
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			cfg := mustLoad(t, "testdata/npd/"+tt.file)
			host := fixtureHost(t, thisBoot)
			opts := Options{Host: host, Now: func() time.Time { return t0 }, Location: time.UTC, Poll: 5 * time.Millisecond}
			switch cfg.Plugin {
			case PluginKmsg:
				opts.Path = filepath.Join(t.TempDir(), "kmsg")
				if err := os.WriteFile(opts.Path, []byte(strings.Join(tt.kmsg, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			case PluginFilelog:
				path := host.Path(cfg.LogPath)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tt.filelog), 0o644); err != nil {
					t.Fatal(err)
				}
			case PluginJournald:
				requireLibsystemd(t)
				var entries []probestest.JournalEntry
				for _, e := range tt.journal {
					entries = append(entries, entry(time.Minute, thisBoot, e[0], e[1]))
				}
				probestest.WriteJournal(t, hostJournal(host), entries...)
			default:
				t.Fatalf("plugin %q", cfg.Plugin)
			}
			mon, err := New(cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mon.Close() })
			ps := mon.Probes()
			var events []probes.Event
			res := waitFor(t, ps[0], tt.read+" lines read", func(r probes.Result) bool {
				events = append(events, r.Events...)
				return r.Status == probes.StatusUnknown || r.Readings[1].Value == tt.read
			})
			if res.Status == probes.StatusUnknown {
				t.Fatalf("%s %s: %s", res.Status, res.Reason, res.Message)
			}
			if tt.cond != "" {
				p := byCondition(ps)[tt.cond]
				if p == nil {
					t.Fatalf("no probe of condition %s", tt.cond)
				}
				got := waitFor(t, p, tt.cond+" set", func(r probes.Result) bool { return r.Status == probes.StatusProblem })
				if got.Reason != tt.reason {
					t.Errorf("%s: reason %s, want %s", tt.cond, got.Reason, tt.reason)
				}
				return
			}
			if tt.reason != "" {
				waitFor(t, ps[0], "the "+tt.reason+" Event", func(r probes.Result) bool {
					events = append(events, r.Events...)
					return len(events) > 0
				})
			}
			var reasons []string
			for _, e := range events {
				reasons = append(reasons, e.Reason)
			}
			want := []string{tt.reason}
			if tt.reason == "" {
				want = nil
			}
			if !slices.Equal(reasons, want) {
				t.Errorf("Events %v, want %v", reasons, want)
			}
			for _, p := range ps {
				if r := p.Probe(context.Background()); r.Status != probes.StatusOK {
					t.Errorf("%s: %s %s: %s, want OK", p.Name(), r.Status, r.Reason, r.Message)
				}
			}
		})
	}
}
