package custom

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// TestNPDConfigEndToEnd loads NPD's custom-plugin-monitor.json unchanged,
// with its plugin where its relative path says, and runs it: the path is
// resolved against the working directory, as NPD resolves it, the
// permanent rule feeds NTPProblem and the temporary rule (the same
// plugin) makes an Event whenever it does not exit 0.
func TestNPDConfigEndToEnd(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "config", "plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "ntp-state")
	writeScript(t, filepath.Join(dir, "config", "plugin"), "check_ntp.sh", fmt.Sprintf(`case "$(cat %s)" in
up) echo 'NTP is synchronised'; exit 0 ;;
down) echo 'NTP service is not running'; exit 1 ;;
*) echo 'cannot ask ntpd'; exit 2 ;;
esac
`, state))
	config := filepath.Join(dir, "config", "custom-plugin-monitor.json")
	if err := os.WriteFile(config, readNPD(t, "custom-plugin-monitor.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)

	cfg, err := LoadNPDConfig(config, NPDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("got warnings %q, want none", cfg.Warnings)
	}
	clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	opts := cfg.Options()
	opts.Clock = clock
	g, err := NewGroup(opts)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := g.NewProbes(cfg.Conditions)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Name() != "custom-NTPProblem" || ps[0].Condition() != "NTPProblem" {
		t.Fatalf("got probes %v, want one for NTPProblem", ps)
	}
	if e := ps[0].Entry(); e.Interval != 30*time.Second || e.Timeout != 27*time.Second {
		t.Errorf("Entry() every %v within %v, want every 30s within 27s", e.Interval, e.Timeout)
	}
	for _, step := range []struct {
		state      string
		want       probestest.Want
		wantEvents []probes.Event
	}{
		// OK reports the condition's own reason and message, as NPD does.
		{"up", probestest.Want{Status: probes.StatusOK, Reason: "NTPIsUp", Message: []string{"ntp service is up"}}, nil},
		{"down", probestest.Want{Status: probes.StatusProblem, Reason: "NTPIsDown", Message: []string{"NTP service is not running"}},
			[]probes.Event{{Reason: "NTPIsDown", Message: "NTP service is not running"}}},
		{"?", probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginUnknown, Message: []string{"./config/plugin/check_ntp.sh could not tell (exit status 2): cannot ask ntpd"}},
			[]probes.Event{{Reason: "NTPIsDown", Message: "./config/plugin/check_ntp.sh could not tell (exit status 2): cannot ask ntpd"}}},
		{"up", probestest.Want{Status: probes.StatusOK, Reason: "NTPIsUp", Message: []string{"ntp service is up"}}, nil},
	} {
		if err := os.WriteFile(state, []byte(step.state), 0o644); err != nil {
			t.Fatal(err)
		}
		got := ps[0].Probe(context.Background())
		probestest.CheckResult(t, got, step.want)
		if fmt.Sprint(got.Events) != fmt.Sprint(step.wantEvents) {
			t.Errorf("%s: got events %v, want %v", step.state, got.Events, step.wantEvents)
		}
		clock.Step(30 * time.Second)
	}
}

// TestNPDEventsOnlyFiles loads NPD's files of temporary rules only,
// unchanged, with their plugins where their relative paths say, and runs
// them as NPD does: the file's events-only probe runs every rule, reports
// OK (ReasonEventsOnly) whatever they find, feeds no condition, and turns
// every exit status but 0 into an Event with the rule's reason.
func TestNPDEventsOnlyFiles(t *testing.T) {
	requireLinux(t)
	tests := []struct {
		file    string
		name    string
		plugins map[string]string // plugin under config/plugin -> the reason of its rule
	}{
		{"iptables-mode-monitor.json", "custom-npd:iptables-mode-monitor", map[string]string{"iptables_mode.sh": "IPTablesVersionsMismatch"}},
		{"network-problem-monitor.json", "custom-npd:network-problem-monitor", map[string]string{"network_problem.sh": "ConntrackFull", "dns_problem.sh": "DNSUnreachable"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			p, set, clock := eventsOnlyProbe(t, tt.file, tt.plugins)
			if p.Name() != tt.name || p.Condition() != "" || p.MessageUpdates() {
				t.Fatalf("got probe %s for condition %q, want %s, feeding no condition", p.Name(), p.Condition(), tt.name)
			}
			for _, exit := range []int{0, 1, 2, 0} {
				var want []probes.Event
				for plugin, reason := range tt.plugins {
					set[plugin](exit, fmt.Sprintf("exit %d", exit))
					switch exit {
					case 1:
						want = append(want, probes.Event{Reason: reason, Message: "exit 1"})
					case 2:
						want = append(want, probes.Event{Reason: reason, Message: "./config/plugin/" + plugin + " could not tell (exit status 2): exit 2"})
					}
				}
				got := p.Probe(context.Background())
				probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusOK, Reason: ReasonEventsOnly, Message: []string{"no condition"}})
				if len(got.Readings) != len(tt.plugins) {
					t.Errorf("exit %d: got readings %v, want one per rule", exit, got.Readings)
				}
				byReason := func(a, b probes.Event) int { return strings.Compare(a.Reason, b.Reason) }
				slices.SortFunc(want, byReason)
				slices.SortFunc(got.Events, byReason)
				if fmt.Sprint(got.Events) != fmt.Sprint(want) {
					t.Errorf("exit %d: got events %v, want %v", exit, got.Events, want)
				}
				// Past the longest interval (iptables-mode-monitor.json:
				// a day): every rule is due again.
				clock.Step(24 * time.Hour)
			}
		})
	}
}

// eventsOnlyProbe writes the shipped NPD file, unchanged, to a new
// directory, with a state script (see stateScript) at each of its plugins'
// relative paths (config/plugin/<name>, the map's keys), changes into the
// directory, loads the file and returns its one probe, the scripts'
// setters by plugin and the group's clock. The file must have no condition
// and load without warnings.
func eventsOnlyProbe(t *testing.T, file string, plugins map[string]string) (*Probe, map[string]func(int, string), *probestest.FakeClock) {
	t.Helper()
	dir := t.TempDir()
	pluginDir := filepath.Join(dir, "config", "plugin")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	set := map[string]func(int, string){}
	for plugin := range plugins {
		base := strings.TrimSuffix(plugin, ".sh")
		var script string
		script, set[plugin] = stateScript(t, dir, base)
		writeScript(t, pluginDir, plugin, fmt.Sprintf("exec %s\n", script))
	}
	config := filepath.Join(dir, "config", file)
	if err := os.WriteFile(config, readNPD(t, file), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	cfg, err := LoadNPDConfig(config, NPDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 0 || len(cfg.Conditions) != 0 || cfg.EventsOnly == nil {
		t.Fatalf("got warnings %q, conditions %v, events-only %v; want no warning, no condition, an events-only condition", cfg.Warnings, cfg.Conditions, cfg.EventsOnly)
	}
	clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	opts := cfg.Options()
	opts.Clock = clock
	g, err := NewGroup(opts)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := g.NewProbes(cfg.ProbeConditions())
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Fatalf("got probes %v, want one", ps)
	}
	return ps[0], set, clock
}

// TestRuleTimeoutAboveInterval runs a rule the way NPD's health checkers
// are configured (timeout far above the interval) through the real runner
// with the probe's Entry: the runner takes it, a run is never overlapped
// by the next, a long run is not killed before its own timeout and counts
// once it ends, the next run starts soon after, and a run past its timeout
// is killed.
func TestRuleTimeoutAboveInterval(t *testing.T) {
	requireLinux(t)
	tests := []struct {
		name    string
		sleep   string        // how long each run takes
		timeout time.Duration // the rule's
		want    probestest.Want
		wantMin int // runs ended at least, in runFor
	}{
		{
			name: "slow run counts", sleep: "2.5", timeout: 10 * time.Second,
			want:    probestest.Want{Status: probes.StatusProblem, Reason: "KubeletUnhealthy", Message: []string{"kubelet is unhealthy"}},
			wantMin: 2,
		},
		{
			name: "hung run killed at its timeout", sleep: "1000", timeout: 2 * time.Second,
			want:    probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginTimeout, Message: []string{"did not finish within its timeout of 2s and was killed"}},
			wantMin: 0,
		},
	}
	const interval, runFor = time.Second, 6 * time.Second
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			// dir/running holds the process ID of the run going on: a run
			// killed at its timeout leaves it, but not alive.
			path := writeScript(t, dir, "health-checker", fmt.Sprintf(`if [ -e %[1]s/running ] && kill -0 "$(cat %[1]s/running)" 2>/dev/null; then echo overlap >> %[1]s/log; fi
echo $$ > %[1]s/running
echo start >> %[1]s/log
sleep %[2]s
echo end >> %[1]s/log
echo 'kubelet is unhealthy'
exit 1
`, dir, tt.sleep))
			alive := func() bool {
				pid, err := os.ReadFile(filepath.Join(dir, "running"))
				return err == nil && exec.Command("kill", "-0", strings.TrimSpace(string(pid))).Run() == nil
			}
			p := newTestProbe(t, Options{Concurrency: 1}, Condition{Type: "KubeletUnhealthy", Reason: "KubeletIsHealthy", NPD: true, Rules: []Rule{
				{Reason: "KubeletUnhealthy", Path: path, Interval: interval, Timeout: tt.timeout},
			}})
			e := p.Entry()
			if e.Interval != interval || e.Timeout >= interval {
				t.Fatalf("Entry every %v within %v, want every %v within less", e.Interval, e.Timeout, interval)
			}
			r, err := probes.NewRunner([]probes.Entry{e}, probes.RunnerOptions{Jitter: -1})
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu      sync.Mutex
				results []probes.Result
			)
			ctx, cancel := context.WithTimeout(context.Background(), runFor)
			defer cancel()
			r.Run(ctx, func(res probes.Result) {
				mu.Lock()
				defer mu.Unlock()
				results = append(results, res)
			})
			// Let a run left in the background end before the directory goes.
			deadline := time.Now().Add(tt.timeout + 5*time.Second)
			for alive() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			data, _ := os.ReadFile(filepath.Join(dir, "log"))
			log := string(data)
			if strings.Contains(log, "overlap") {
				t.Errorf("a run started while the previous one ran: log %q", log)
			}
			if got := strings.Count(log, "end"); got < tt.wantMin {
				t.Errorf("%d runs ended, want at least %d: log %q", got, tt.wantMin, log)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(results) < int(runFor/interval)/2 {
				t.Errorf("got %d results in %v, want about one every %v", len(results), runFor, interval)
			}
			sawWant := false
			for i, res := range results {
				switch {
				case res.Reason == probes.ReasonProbeTimeout:
					t.Errorf("result %d: the runner timed the probe out: %q", i, res.Message)
				case res.Reason == ReasonPluginRunning:
					if sawWant {
						t.Errorf("result %d: %s after the first run ended", i, res.Reason)
					}
				case res.Status == tt.want.Status && res.Reason == tt.want.Reason:
					sawWant = true
					probestest.CheckResult(t, res, tt.want)
				default:
					t.Errorf("result %d: got %s/%s %q, want %s or %s/%s", i, res.Status, res.Reason, res.Message, ReasonPluginRunning, tt.want.Status, tt.want.Reason)
				}
			}
			if !sawWant || results[0].Reason != ReasonPluginRunning {
				t.Errorf("got results %v, want %s first, then %s/%s", results, ReasonPluginRunning, tt.want.Status, tt.want.Reason)
			}
			t.Logf("%d results, log %q", len(results), log)
		})
	}
}

// stateScript writes a plugin that prints the first line of dir/name.msg
// and exits with the status in dir/name.exit.
func stateScript(t *testing.T, dir, name string) (path string, set func(exit int, msg string)) {
	t.Helper()
	base := filepath.Join(dir, name)
	path = writeScript(t, dir, name+".sh", fmt.Sprintf("head -n 1 %[1]s.msg\nexit $(cat %[1]s.exit)\n", base))
	set = func(exit int, msg string) {
		t.Helper()
		if err := os.WriteFile(base+".msg", []byte(msg+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(base+".exit", []byte(fmt.Sprint(exit)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set(0, "fine")
	return path, set
}

// TestNPDConditionUpdates: while an NPD condition stays in a problem, NPD
// updates it (and records an Event saying so) when the reason changes, and
// when the message changes only with
// enable_message_change_based_condition_update; otherwise it keeps the
// message the problem started with.
func TestNPDConditionUpdates(t *testing.T) {
	requireLinux(t)
	type step struct {
		a, b      int    // exit statuses of rules A and B
		msg       string // both print it
		wantMsg   string
		wantEvent string // the update Event's message; empty: none
	}
	updated := func(reason, msg string) string {
		return fmt.Sprintf("Node condition C is now: True, reason: %s, message: %q", reason, msg)
	}
	tests := []struct {
		name           string
		npd, msgUpdate bool
		steps          []step
	}{
		{
			name: "NPD, message updates", npd: true, msgUpdate: true,
			steps: []step{
				{a: 1, msg: "m1", wantMsg: "m1"}, // a new problem: the agent tells it (ConditionChanged)
				{a: 1, msg: "m2", wantMsg: "m2", wantEvent: updated("RA", "m2")},
				{a: 1, msg: "m2", wantMsg: "m2"},
				{b: 1, msg: "m3", wantMsg: "m3", wantEvent: updated("RB", "m3")},
				{msg: "ok", wantMsg: "up"},
				{a: 1, msg: "m4", wantMsg: "m4"},
			},
		},
		{
			name: "NPD, no message updates", npd: true,
			steps: []step{
				{a: 1, msg: "m1", wantMsg: "m1"},
				{a: 1, msg: "m2", wantMsg: "m1"},
				{a: 1, msg: "m3", wantMsg: "m1"},
				{b: 1, msg: "m4", wantMsg: "m4", wantEvent: updated("RB", "m4")},
				{msg: "ok", wantMsg: "up"},
				{a: 1, msg: "m5", wantMsg: "m5"},
			},
		},
		{
			name: "selftaint's own checks: the latest message, no events",
			steps: []step{
				{a: 1, msg: "m1", wantMsg: "m1"},
				{a: 1, msg: "m2", wantMsg: "m2"},
				{b: 1, msg: "m3", wantMsg: "m3"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			a, setA := stateScript(t, dir, "a")
			b, setB := stateScript(t, dir, "b")
			clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			p := newTestProbe(t, Options{Clock: clock}, Condition{Type: "C", Reason: "Up", Message: "up", NPD: tt.npd, MessageUpdates: tt.msgUpdate, Rules: []Rule{
				{Reason: "RA", Path: a, Interval: time.Second, Timeout: 5 * time.Second},
				{Reason: "RB", Path: b, Interval: time.Second, Timeout: 5 * time.Second},
			}})
			for i, s := range tt.steps {
				setA(s.a, s.msg)
				setB(s.b, s.msg)
				got := p.Probe(context.Background())
				if got.Message != s.wantMsg {
					t.Errorf("step %d: got message %q, want %q", i, got.Message, s.wantMsg)
				}
				var want []probes.Event
				if s.wantEvent != "" {
					want = []probes.Event{{Reason: got.Reason, Message: s.wantEvent}}
				}
				if fmt.Sprint(got.Events) != fmt.Sprint(want) {
					t.Errorf("step %d: got events %v, want %v", i, got.Events, want)
				}
				clock.Step(time.Second)
			}
		})
	}
}

// TestEventsRuleEveryRun: an events rule's every failing run is an event,
// a flood included: the probe holds none back (the agent paces Events, and
// counts what it holds back). Another reason has its own.
func TestEventsRuleEveryRun(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	ok := writeScript(t, dir, "ok.sh", "exit 0\n")
	flaky, setFlaky := stateScript(t, dir, "flaky")
	other, setOther := stateScript(t, dir, "other")
	clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	p := newTestProbe(t, Options{Clock: clock}, Condition{Type: "C", Reason: "Up", NPD: true,
		Rules: []Rule{{Reason: "Down", Path: ok, Interval: time.Second, Timeout: 5 * time.Second}},
		Events: []Rule{
			{Reason: "Flaky", Path: flaky, Interval: time.Second, Timeout: 5 * time.Second},
			{Reason: "Other", Path: other, Interval: time.Second, Timeout: 5 * time.Second},
		},
	})
	probe := func() []probes.Event {
		t.Helper()
		res := p.Probe(context.Background())
		if res.Status != probes.StatusOK {
			t.Errorf("got %s %q, want OK: events rules do not feed the condition", res.Status, res.Message)
		}
		clock.Step(time.Second)
		return res.Events
	}
	count := func(evs []probes.Event, reason string) int {
		n := 0
		for _, e := range evs {
			if e.Reason == reason {
				n++
			}
		}
		return n
	}
	if evs := probe(); len(evs) != 0 {
		t.Errorf("all passing: got events %v, want none", evs)
	}
	setFlaky(1, "conntrack table full")
	const runs = 15
	var flood []probes.Event
	for range runs {
		flood = append(flood, probe()...)
	}
	if got := count(flood, "Flaky"); got != runs || flood[0].Message != "conntrack table full" {
		t.Errorf("a flood of %d failing runs: got %d events (%v), want %d", runs, got, flood, runs)
	}
	setOther(2, "cannot tell")
	if evs := probe(); count(evs, "Other") != 1 || count(evs, "Flaky") != 1 {
		t.Errorf("another reason: got events %v, want one Other and one Flaky", evs)
	}
}

// TestEventsOnlyOnceARunEnds: the events of a run that outlasted its probe
// run are reported by the probe run after it ends, once, beside those of
// the run that probe run starts (the rule is due again).
func TestEventsOnlyOnceARunEnds(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	ok := writeScript(t, dir, "ok.sh", "exit 0\n")
	slow := writeScript(t, dir, "slow.sh", fmt.Sprintf("n=$(($(cat %[1]s/n 2>/dev/null || echo 0) + 1))\necho $n > %[1]s/n\nwhile [ ! -e %[1]s/go ]; do sleep 0.01; done\necho \"found it in run $n\"\nexit 1\n", dir))
	clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	p := newTestProbe(t, Options{Clock: clock}, Condition{Type: "C", Reason: "Up", NPD: true,
		Rules:  []Rule{{Reason: "Down", Path: ok, Interval: time.Second, Timeout: 5 * time.Second}},
		Events: []Rule{{Reason: "Slow", Path: slow, Interval: time.Second, Timeout: time.Hour}},
	})
	done := make(chan probes.Result)
	go func() { done <- p.Probe(context.Background()) }()
	clock.BlockUntilWaiters(1) // the probe waits for its runs
	waitFor(t, p, "the condition's rule to end", func() bool { return p.state[0].last.status != "" })
	clock.Step(time.Second) // past its wait: the slow run goes on alone
	if res := <-done; res.Status != probes.StatusOK || len(res.Events) != 0 {
		t.Errorf("while the run goes on: got %s with events %v, want OK without", res.Status, res.Events)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "the slow run to end", func() bool { return p.state[1].running == nil })
	evs := p.Probe(context.Background()).Events
	if want := []probes.Event{{Reason: "Slow", Message: "found it in run 1"}, {Reason: "Slow", Message: "found it in run 2"}}; fmt.Sprint(evs) != fmt.Sprint(want) {
		t.Errorf("got events %v, want %v", evs, want)
	}
	if res := p.Probe(context.Background()); len(res.Events) != 0 {
		t.Errorf("the next run (the rule not due): got events %v, want none", res.Events)
	}
}

// waitFor waits until ok, called with p.mu held, holds.
func waitFor(t *testing.T, p *Probe, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	holds := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return ok()
	}
	for !holds() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
