package config

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/gpu"
)

// xidSink records the kernel Xids handed to the GPU probe.
type xidSink struct {
	mu  sync.Mutex // guards got
	got []gpu.KernelXid
}

func (s *xidSink) KernelXid(x gpu.KernelXid) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, x)
}

func (s *xidSink) xids() []gpu.KernelXid {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]gpu.KernelXid(nil), s.got...)
}

// kmsgHost is a host root booted an hour ago whose dev/kmsg is a regular
// file (absent when kmsg is false).
func kmsgHost(t *testing.T, kmsg bool) probes.Host {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{"proc/sys/kernel/random/boot_id": "boot-1\n", "proc/uptime": "3600.00 1.00\n"}
	if kmsg {
		files["dev/kmsg"] = ""
	}
	for p, data := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return probes.Host{Root: root}
}

// TestGPUKernelLogFeed: the GPU probe takes the kernel's NVRM Xid lines
// from the one kmsg log monitor reading the kernel log (never two: two
// kmsg files read the same lines), else, with kernelLog true, from a
// reader of its own (an events-only probe), and unset from none; with
// kernelLog false, or on another log, from none of them.
func TestGPUKernelLogFeed(t *testing.T) {
	npd := func(name string) string {
		p, err := filepath.Abs(filepath.Join("../../probes/logmon/testdata/npd", name))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := filepath.Join(t.TempDir(), "other-kmsg.json")
	if err := os.WriteFile(other, []byte(`{"plugin": "kmsg", "logPath": "/var/log/other", "source": "other", "rules": [{"type": "temporary", "reason": "R", "pattern": "x"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, config string
		wantOwn      bool // the GPU probe's own reader runs
		wantXids     int
	}{
		{"two kmsg monitors: one feeds", fmt.Sprintf("checks:\n  npdLogConfigs: [%s, %s]\n", npd("kernel-monitor.json"), npd("readonly-monitor.json")), false, 1},
		{"kernelLog true, two kmsg monitors: one feeds", fmt.Sprintf("probes:\n  gpu: {kernelLog: true}\nchecks:\n  npdLogConfigs: [%s, %s]\n", npd("kernel-monitor.json"), npd("readonly-monitor.json")), false, 1},
		{"no log monitor: none", "", false, 0},
		{"kernelLog true, no log monitor: its own reader", "probes:\n  gpu: {kernelLog: true}\n", true, 1},
		{"kernelLog true, a filelog monitor only: its own reader", fmt.Sprintf("probes:\n  gpu: {kernelLog: true}\nchecks:\n  npdLogConfigs: [%s]\n", npd("kernel-monitor-filelog.json")), true, 1},
		{"a filelog monitor only: none", fmt.Sprintf("checks:\n  npdLogConfigs: [%s]\n", npd("kernel-monitor-filelog.json")), false, 0},
		{"kernelLog true, a kmsg monitor of another log: its own reader", fmt.Sprintf("probes:\n  gpu: {kernelLog: true}\nchecks:\n  npdLogConfigs: [%s]\n", other), true, 1},
		{"kernelLog false", fmt.Sprintf("probes:\n  gpu: {kernelLog: false}\nchecks:\n  npdLogConfigs: [%s]\n", npd("kernel-monitor.json")), false, 0},
		{"kernelLog false, no log monitor", "probes:\n  gpu: {kernelLog: false}\n", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := kmsgHost(t, true)
			if err := os.MkdirAll(host.Path("/var/log"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(host.Path("/var/log/other"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse([]byte(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			checks, logs, err := cfg.CheckProbeSpecsOn(host, slog.Default())
			if err != nil {
				t.Fatalf("CheckProbeSpecsOn: %v", err)
			}
			t.Cleanup(func() { _ = logs.Close() })
			sink := &xidSink{}
			var own agent.ProbeSpec
			if kl := cfg.Probes.GPU.KernelLog; kl == nil || *kl {
				spec, reader, err := logs.feedGPU(sink, kl != nil)
				if err != nil {
					t.Fatalf("feedGPU: %v", err)
				}
				if got := reader != nil; got != tc.wantOwn {
					t.Fatalf("own reader %v, want %v", got, tc.wantOwn)
				}
				if reader != nil {
					t.Cleanup(func() { _ = reader.Close() })
					if got, want := spec.Entry.Probe.Name(), "logmon-"+GPUKernelLogName; got != want || !spec.EventsOnly() {
						t.Errorf("own reader's spec %s (events only %v), want events-only %s", got, spec.EventsOnly(), want)
					}
					own = spec
				}
			}
			for _, s := range append(checks, own) { // start every source
				if s.Entry.Probe != nil {
					s.Entry.Probe.Probe(context.Background())
				}
			}
			line := func(seq int, msg string) string {
				return fmt.Sprintf("3,%d,%d,-;%s\n", seq, (time.Hour + time.Second).Microseconds(), msg)
			} // after the readers started
			appendFile(t, host.Path("/dev/kmsg"), line(1, "NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.")+line(2, "eth0: link up"))
			appendFile(t, host.Path("/var/log/other"), line(1, "NVRM: Xid (PCI:0000:0f:00): 79, pid=1, name=x, GPU has fallen off the bus."))
			deadline := time.Now().Add(10 * time.Second)
			for len(sink.xids()) < tc.wantXids && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond) // a second copy, were there one, comes as fast
			got := sink.xids()
			if len(got) != tc.wantXids {
				t.Fatalf("kernel Xids %+v, want %d", got, tc.wantXids)
			}
			for _, x := range got {
				if x.Xid != 79 || x.PCIBusID != "0000:07:00.0" || x.Time.IsZero() {
					t.Errorf("kernel Xid %+v, want 79 on 0000:07:00.0 with the line's time", x)
				}
			}
		})
	}
}

// TestGPUKernelLogUnreadable: without a kernel log to read, the GPU
// probe's own reader says so on its events-only probe (Unknown,
// LogReadError, naming the file) while its Watch goes on (the reader
// tries the log again); building it does not fail.
func TestGPUKernelLogUnreadable(t *testing.T) {
	host := kmsgHost(t, false)
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, logs, err := cfg.CheckProbeSpecsOn(host, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	spec, reader, err := logs.feedGPU(&xidSink{}, true)
	if err != nil || reader == nil {
		t.Fatalf("feedGPU: reader %v, err %v; want a reader", reader, err)
	}
	defer reader.Close()
	w, ok := spec.Entry.Probe.(probes.Waker)
	if !ok {
		t.Fatalf("the reader's probe %T is no Waker", spec.Entry.Probe)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx, func() {}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v, want nil once stopped", err)
		}
	}()
	var res probes.Result
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if res = spec.Entry.Probe.Probe(context.Background()); res.Status == probes.StatusUnknown {
			break
		}
	}
	if len(done) > 0 {
		t.Errorf("Watch ended while the log cannot be read, want it to go on")
	}
	if res.Status != probes.StatusUnknown || res.Reason != "LogReadError" || !strings.Contains(res.Message, "dev/kmsg") {
		t.Errorf("probe: %s %s %q, want Unknown LogReadError naming dev/kmsg", res.Status, res.Reason, res.Message)
	}
}

func appendFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

// TestRulesOnNPDFileConditions: a rule may follow a condition only an NPD
// file feeds (a log monitor's or a custom plugin's): the config takes it on
// trust while it names NPD files, and building the checks refuses it, naming
// the rule, when none of them feeds it; without NPD files it is refused at
// once, as before.
func TestRulesOnNPDFileConditions(t *testing.T) {
	kernelMonitor, err := filepath.Abs("../../probes/logmon/testdata/npd/kernel-monitor.json")
	if err != nil {
		t.Fatal(err)
	}
	rule := func(cond string) string {
		return fmt.Sprintf("rules:\n- condition: %s\n  taint: {key: selftaint.io/kernel, effect: NoSchedule}\n", cond)
	}
	files := fmt.Sprintf("checks:\n  npdLogConfigs: [%s]\n", kernelMonitor)
	for _, tc := range []struct {
		name, config        string
		wantParse, wantSpec string // "" for no error, else a part of it
	}{
		{"a log monitor's condition", files + rule("KernelDeadlock"), "", ""},
		{"a condition no file feeds", files + rule("KernelDeadlok"), "", `rules[0].condition: condition "KernelDeadlok" is fed by no probe, check or NPD file`},
		{"no NPD files", rule("KernelDeadlock"), `rules[0].condition: Unsupported value: "KernelDeadlock"`, ""},
		{"a kubelet condition, NPD files or not", files + rule("MemoryPressure"), `rules[0].condition: Unsupported value: "MemoryPressure"`, ""},
		{"a built-in condition", files + rule("SelftaintMemoryPressure"), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.config))
			if tc.wantParse != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantParse) {
					t.Fatalf("Parse: %v, want an error containing %q", err, tc.wantParse)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			_, logs, err := cfg.CheckProbeSpecsOn(kmsgHost(t, true), slog.Default())
			if err == nil {
				defer logs.Close()
			}
			switch {
			case tc.wantSpec == "" && err != nil:
				t.Fatalf("CheckProbeSpecsOn: %v", err)
			case tc.wantSpec != "" && (err == nil || !strings.Contains(err.Error(), tc.wantSpec)):
				t.Fatalf("CheckProbeSpecsOn: %v, want an error containing %q", err, tc.wantSpec)
			case tc.wantSpec == "":
				if rs := cfg.TaintRules(); len(rs) != 1 || rs[0].Taint.Key != "selftaint.io/kernel" {
					t.Errorf("taint rules %+v, want the one rule", rs)
				}
			}
		})
	}
}
