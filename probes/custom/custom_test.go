package custom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// requireLinux skips the plugin tests off Linux, where custom checks do not
// run; under CI=true it fails instead.
func requireLinux(t *testing.T) {
	t.Helper()
	if runtime.GOOS == "linux" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("custom checks run on Linux only (CI=true, so this is a failure, not a skip)")
	}
	t.Skip("custom checks run on Linux only")
}

// writeScript writes an executable shell script and returns its path.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// testRule is a rule that runs path with a long interval and timeout.
func testRule(path string, args ...string) Rule {
	return Rule{Reason: "ThingIsDown", Path: path, Args: args, Interval: time.Minute, Timeout: 20 * time.Second}
}

func newTestProbe(t *testing.T, opts Options, c Condition) *Probe {
	t.Helper()
	g, err := NewGroup(opts)
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	p, err := g.NewProbe(c)
	if err != nil {
		t.Fatalf("NewProbe: %v", err)
	}
	return p
}

// runRule runs a condition with the single rule r once.
func runRule(t *testing.T, r Rule) probes.Result {
	t.Helper()
	p := newTestProbe(t, Options{}, Condition{Type: "ThingProblem", Reason: "ThingIsUp", Rules: []Rule{r}})
	res := p.Probe(context.Background())
	t.Logf("%s %s: %q %v", res.Status, res.Reason, res.Message, res.Readings)
	return res
}

func TestPluginVerdicts(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	long := strings.Repeat("x", 200)
	tests := []struct {
		name        string
		body        string
		want        probestest.Want
		wantReading string
	}{
		{
			name: "ok with message", body: "echo 'thing is fine'\nexit 0\n",
			want: probestest.Want{Status: probes.StatusOK, Reason: "ThingIsUp", Message: []string{"thing is fine"}}, wantReading: "OK: thing is fine",
		},
		{
			name: "ok without output", body: "exit 0\n",
			want: probestest.Want{Status: probes.StatusOK, Reason: "ThingIsUp", Message: []string{"passed"}}, wantReading: "OK",
		},
		{
			name: "problem: first line is the message", body: "echo 'thing is down'\necho 'details nobody reads'\nexit 1\n",
			want: probestest.Want{Status: probes.StatusProblem, Reason: "ThingIsDown", Message: []string{"thing is down"}}, wantReading: "Problem: thing is down",
		},
		{
			name: "problem without output", body: "exit 1\n",
			want: probestest.Want{Status: probes.StatusProblem, Reason: "ThingIsDown", Message: []string{"reported a problem without a message"}},
		},
		{
			name: "leading blank lines and spaces skipped", body: "printf '\\n  \\n\\t thing is down  \\r\\nmore'\nexit 1\n",
			want: probestest.Want{Status: probes.StatusProblem, Reason: "ThingIsDown", Message: []string{"thing is down"}},
		},
		{
			name: "unknown: exit 2", body: "echo 'cannot reach ntpd'\nexit 2\n",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginUnknown, Message: []string{"could not tell (exit status 2): cannot reach ntpd"}}, wantReading: "Unknown: exit status 2",
		},
		{
			name: "unknown: exit 3", body: "echo 'strange'\nexit 3\n",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginUnknown, Message: []string{"could not tell (exit status 3): strange"}},
		},
		{
			name: "unknown: stderr says why", body: "echo 'sh: ntpq: not found' >&2\nexit 127\n",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginUnknown, Message: []string{"(exit status 127): sh: ntpq: not found"}},
		},
		{
			name: "killed by a signal", body: "echo 'about to die'\nkill -TERM $$\nsleep 5\n",
			want: probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginError, Message: []string{"was killed (signal: terminated): about to die"}},
		},
		{
			name: "long line cut at 80 bytes", body: "echo " + long + "\nexit 1\n",
			want: probestest.Want{Status: probes.StatusProblem, Reason: "ThingIsDown", Message: []string{long[:80]}}, wantReading: "Problem: " + long[:80],
		},
		{
			name: "megabytes of output", body: "yes | head -c 5000000\nexit 1\n",
			want: probestest.Want{Status: probes.StatusProblem, Reason: "ThingIsDown", Message: []string{"y"}},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runRule(t, testRule(writeScript(t, dir, fmt.Sprintf("plugin-%d.sh", i), tt.body)))
			probestest.CheckResult(t, got, tt.want)
			if tt.wantReading != "" && got.Readings[0].Value != tt.wantReading {
				t.Errorf("got reading %q, want %q", got.Readings[0].Value, tt.wantReading)
			}
		})
	}
}

func TestGarbageOutput(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	for _, tt := range []struct{ name, body string }{
		{"binary bytes without newline", `printf '\377\376\000\001\033[31mred\200\300 tab\there'` + "\nexit 1\n"},
		{"megabytes of zeros without newline", "head -c 5000000 /dev/zero\nexit 1\n"},
		{"long multibyte line", "i=0; while [ $i -lt 100 ]; do printf 'é'; i=$((i+1)); done\nexit 1\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := runRule(t, testRule(writeScript(t, dir, strings.ReplaceAll(tt.name, " ", "-")+".sh", tt.body)))
			probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusProblem, Reason: "ThingIsDown"})
			if !utf8.ValidString(got.Message) || got.Message == "" || len(got.Message) > DefaultMaxOutputLength {
				t.Errorf("got message %q (%d bytes), want valid UTF-8 of 1 to %d bytes", got.Message, len(got.Message), DefaultMaxOutputLength)
			}
			for _, r := range got.Message {
				if r < ' ' || r == 0x7f {
					t.Errorf("got message %q with control character %U", got.Message, r)
				}
			}
		})
	}
}

func TestMegabytesOfOutputStayBounded(t *testing.T) {
	requireLinux(t)
	path := writeScript(t, t.TempDir(), "chatty.sh", "head -c 20000000 /dev/zero\necho >&2\nhead -c 20000000 /dev/zero >&2\nexit 0\n")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got := runRule(t, testRule(path))
	runtime.ReadMemStats(&after)
	probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusOK, Reason: "ThingIsUp"})
	// 40 MB went through the pipes; only the first 4 KiB of each stream
	// may be kept.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("running a plugin that printed 40 MB allocated %d bytes, want under 4 MiB", alloc)
	}
}

func TestUnrunnablePlugins(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.sh")
	notExec := filepath.Join(dir, "not-executable.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want []string
	}{
		{"missing", missing, []string{missing + ": cannot run", missing + ": no such file or directory"}},
		{"not executable", notExec, []string{notExec + ": permission denied"}},
		{"directory", dir, []string{dir + ": permission denied"}},
		{"bare name not in PATH", "selftaint-no-such-plugin", []string{`"selftaint-no-such-plugin": executable file not found in $PATH`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runRule(t, testRule(tt.path))
			probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginError, Message: tt.want})
			if v := got.Readings[0].Value; v != "Unknown: cannot run" {
				t.Errorf("got reading %q, want %q", v, "Unknown: cannot run")
			}
		})
	}
}

// readPID reads a process ID a script wrote to path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// processState returns pid's state letter from /proc ("S", "Z", ...) and
// its parent, or "" when it does not exist.
func processState(pid int) (state string, ppid int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 2 {
		return "?", 0
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid
}

// waitDead waits until pid has exited: gone, or a zombie that its new
// parent (init or a subreaper, not this process) has yet to reap.
func waitDead(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, ppid := processState(pid)
		if state == "" || (state == "Z" && ppid != os.Getpid()) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) is still there: state %s, parent %d", what, pid, state, ppid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkReaped fails unless the plugin process pid is gone altogether: not
// running, and not left a zombie of this process.
func checkReaped(t *testing.T, pid int) {
	t.Helper()
	if state, ppid := processState(pid); state != "" {
		t.Errorf("plugin (pid %d) is still there after its run: state %s, parent %d (this process %d)", pid, state, ppid, os.Getpid())
	}
}

func TestTimeoutKillsProcessGroup(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	path := writeScript(t, dir, "hang.sh", fmt.Sprintf(`sleep 1000 &
echo $! > %[1]s/child.pid
echo $$ > %[1]s/plugin.pid
echo 'started, now hanging'
sleep 1000
`, dir))
	r := testRule(path)
	r.Timeout = 300 * time.Millisecond
	start := time.Now()
	got := runRule(t, r)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a plugin with a 300ms timeout took %v to report", took)
	}
	probestest.CheckResult(t, got, probestest.Want{
		Status: probes.StatusUnknown, Reason: ReasonPluginTimeout,
		Message: []string{path + " did not finish within its timeout of 300ms and was killed: started, now hanging"},
	})
	checkReaped(t, readPID(t, filepath.Join(dir, "plugin.pid")))
	waitDead(t, readPID(t, filepath.Join(dir, "child.pid")), "the plugin's background child")
}

func TestChildrenLeftBehindAreKilled(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	// The background child keeps stdout open: without killing the group
	// when the plugin exits, reading would last until the timeout.
	path := writeScript(t, dir, "leaves-child.sh", fmt.Sprintf(`sleep 1000 &
echo $! > %[1]s/child.pid
echo $$ > %[1]s/plugin.pid
echo 'all fine'
exit 0
`, dir))
	start := time.Now()
	got := runRule(t, testRule(path))
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a plugin that exits at once took %v to report", took)
	}
	probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusOK, Reason: "ThingIsUp", Message: []string{"all fine"}})
	checkReaped(t, readPID(t, filepath.Join(dir, "plugin.pid")))
	waitDead(t, readPID(t, filepath.Join(dir, "child.pid")), "the plugin's background child")
}

func TestEscapedChildDoesNotHang(t *testing.T) {
	requireLinux(t)
	if _, err := exec.LookPath("setsid"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("setsid (Debian package util-linux) is missing (CI=true, so this is a failure, not a skip)")
		}
		t.Skip("needs setsid (util-linux)")
	}
	dir := t.TempDir()
	// A child in a session of its own survives the group kill and holds
	// stdout open for good.
	path := writeScript(t, dir, "escapes.sh", fmt.Sprintf(`setsid sleep 1000 &
echo $! > %[1]s/escaped.pid
echo 'all fine'
exit 0
`, dir))
	start := time.Now()
	got := runRule(t, testRule(path))
	took := time.Since(start)
	pidFile := filepath.Join(dir, "escaped.pid")
	if pid := readPID(t, pidFile); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusOK, Reason: "ThingIsUp", Message: []string{"all fine"}})
	if took > 10*time.Second {
		t.Errorf("a plugin whose escaped child holds stdout took %v to report, want about %v", took, pipeGrace)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	requireLinux(t)
	const limit, checks = 2, 5
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	// Each run marks itself running, records how many runs it sees, and
	// holds its slot until the test releases it.
	path := writeScript(t, dir, "slot.sh", fmt.Sprintf(`touch %[1]s/running.$$
ls %[1]s | grep -c '^running\.' >> %[2]s/counts
while [ ! -e %[2]s/release ]; do sleep 0.01; done
rm %[1]s/running.$$
echo done
`, work, dir))
	g, err := NewGroup(Options{Concurrency: limit})
	if err != nil {
		t.Fatal(err)
	}
	var ps []*Probe
	for i := range checks {
		p, err := g.NewProbe(Condition{Type: fmt.Sprintf("Slot%d", i), Reason: "Free", Rules: []Rule{testRule(path)}})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results := make([]probes.Result, checks)
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { results[i] = p.Probe(ctx) })
	}
	running := func() int {
		entries, err := os.ReadDir(work)
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	// The limit is reached...
	deadline := time.Now().Add(30 * time.Second)
	for running() < limit {
		if time.Now().After(deadline) {
			t.Fatalf("only %d plugins ever ran at once, want %d", running(), limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// ...and not passed while the slots are held.
	time.Sleep(300 * time.Millisecond)
	if n := running(); n != limit {
		t.Errorf("%d plugins running at once with a limit of %d", n, limit)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, res := range results {
		if res.Status != probes.StatusOK || res.Message != "done" {
			t.Errorf("check %d: got %s %q, want OK %q", i, res.Status, res.Message, "done")
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "counts"))
	if err != nil {
		t.Fatal(err)
	}
	counts := strings.Fields(string(data))
	if len(counts) != checks {
		t.Errorf("got %d runs recorded (%q), want %d", len(counts), counts, checks)
	}
	for _, c := range counts {
		if n, err := strconv.Atoi(c); err != nil || n > limit {
			t.Errorf("a run saw %s runs at once, want at most %d", c, limit)
		}
	}
}

func TestRulesOfOneCondition(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	ok := writeScript(t, dir, "ok.sh", "echo fine\nexit 0\n")
	okToo := writeScript(t, dir, "ok-too.sh", "echo also fine\nexit 0\n")
	bad := writeScript(t, dir, "bad.sh", "echo 'disk is read-only'\nexit 1\n")
	worse := writeScript(t, dir, "worse.sh", "echo 'disk is gone'\nexit 1\n")
	unsure := writeScript(t, dir, "unsure.sh", "echo 'cannot tell'\nexit 2\n")
	rule := func(path, reason string) Rule {
		r := testRule(path)
		r.Reason = reason
		return r
	}
	tests := []struct {
		name         string
		message      string // the condition's OK message
		rules        []Rule
		want         probestest.Want
		wantReadings []probes.Reading
	}{
		{
			name: "all pass, default message", message: "disks are fine",
			rules: []Rule{rule(ok, "A"), rule(okToo, "B")},
			want:  probestest.Want{Status: probes.StatusOK, Reason: "DisksOK", Message: []string{"disks are fine"}},
			wantReadings: []probes.Reading{
				{Name: ok, Value: "OK: fine"}, {Name: okToo, Value: "OK: also fine"},
			},
		},
		{
			name:  "all pass, plugins' messages",
			rules: []Rule{rule(ok, "A"), rule(okToo, "B")},
			want:  probestest.Want{Status: probes.StatusOK, Reason: "DisksOK", Message: []string{"fine; also fine"}},
		},
		{
			name:  "one problem wins over unknown",
			rules: []Rule{rule(unsure, "A"), rule(ok, "B"), rule(bad, "ReadOnly")},
			want:  probestest.Want{Status: probes.StatusProblem, Reason: "ReadOnly", Message: []string{"disk is read-only"}},
			wantReadings: []probes.Reading{
				{Name: unsure, Value: "Unknown: exit status 2"}, {Name: ok, Value: "OK: fine"}, {Name: bad, Value: "Problem: disk is read-only"},
			},
		},
		{
			name:  "first failing rule gives reason and message",
			rules: []Rule{rule(ok, "A"), rule(worse, "Gone"), rule(bad, "ReadOnly")},
			want:  probestest.Want{Status: probes.StatusProblem, Reason: "Gone", Message: []string{"disk is gone"}},
		},
		{
			name:  "unknown when no problem",
			rules: []Rule{rule(ok, "A"), rule(unsure, "B")},
			want:  probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginUnknown, Message: []string{unsure + " could not tell (exit status 2): cannot tell"}},
		},
		{
			name:  "same plugin, different arguments",
			rules: []Rule{rule(ok, "A"), {Name: "named", Reason: "B", Path: ok, Args: []string{"--x"}, Interval: time.Minute, Timeout: time.Second}},
			want: probestest.Want{Status: probes.StatusOK, Reason: "DisksOK", Readings: []probes.Reading{
				{Name: ok, Value: "OK: fine"}, {Name: "named", Value: "OK: fine"},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProbe(t, Options{}, Condition{Type: "DiskProblem", Reason: "DisksOK", Message: tt.message, Rules: tt.rules})
			want := tt.want
			if tt.wantReadings != nil {
				want.Readings = tt.wantReadings
			}
			probestest.CheckResult(t, p.Probe(context.Background()), want)
		})
	}
}

func TestRuleIntervals(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	fast := writeScript(t, dir, "fast.sh", fmt.Sprintf("echo run >> %s/fast\n", dir))
	slow := writeScript(t, dir, "slow.sh", fmt.Sprintf("echo run >> %s/slow\n", dir))
	clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	p := newTestProbe(t, Options{Clock: clock}, Condition{Type: "Clock", Reason: "Fine", Rules: []Rule{
		{Reason: "Fast", Path: fast, Interval: 10 * time.Second, Timeout: 2 * time.Second},
		{Reason: "Slow", Path: slow, Interval: 30 * time.Second, Timeout: 5 * time.Second},
	}})
	e := p.Entry()
	if e.Probe != p || e.Interval != 10*time.Second || e.Timeout != 9*time.Second {
		t.Errorf("Entry() = %v every %v within %v, want the probe every 10s within 9s", e.Probe, e.Interval, e.Timeout)
	}
	if got, want := p.Name(), "custom-Clock"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
	if got, want := p.Condition(), "Clock"; got != want {
		t.Errorf("Condition() = %q, want %q", got, want)
	}
	count := func(name string) int {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.Count(string(data), "run")
	}
	// The runner starts runs about every 10s; a little early or late must
	// not matter.
	steps := []struct {
		step             time.Duration
		wantFast, wantSl int
	}{
		{0, 1, 1},
		{10 * time.Second, 2, 1},
		{9500 * time.Millisecond, 3, 1},
		{10500 * time.Millisecond, 4, 2}, // 30s since slow's first run
		{10 * time.Second, 5, 2},
		{10 * time.Second, 6, 2},
		{10 * time.Second, 7, 3},
	}
	for i, s := range steps {
		clock.Step(s.step)
		if res := p.Probe(context.Background()); res.Status != probes.StatusOK {
			t.Fatalf("step %d: got %s %q, want OK", i, res.Status, res.Message)
		}
		if f, sl := count("fast"), count("slow"); f != s.wantFast || sl != s.wantSl {
			t.Errorf("step %d: fast ran %d times, slow %d, want %d and %d", i, f, sl, s.wantFast, s.wantSl)
		}
	}
}

func TestCanceledRunIsNotKept(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	// Hangs the first time, answers at once after.
	path := writeScript(t, dir, "once.sh", fmt.Sprintf(`if [ -e %[1]s/ran ]; then echo fine; exit 0; fi
touch %[1]s/ran
sleep 1000
`, dir))
	clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	p := newTestProbe(t, Options{Clock: clock}, Condition{Type: "Once", Reason: "Fine", Rules: []Rule{testRule(path)}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	first := p.Probe(ctx)
	probestest.CheckResult(t, first, probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginTimeout, Message: []string{"was killed: context canceled"}})
	// The clock has not moved, but the cut-short run does not count.
	probestest.CheckResult(t, p.Probe(context.Background()), probestest.Want{Status: probes.StatusOK, Reason: "Fine", Message: []string{"fine"}})
}

func TestWaitingForASlotEndsWithTheContext(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	hang := writeScript(t, dir, "hang.sh", "sleep 1000\n")
	g, err := NewGroup(Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := g.NewProbe(Condition{Type: "Holder", Reason: "Fine", Rules: []Rule{testRule(hang)}})
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := g.NewProbe(Condition{Type: "Waiter", Reason: "Fine", Rules: []Rule{testRule(hang)}})
	if err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithCancel(context.Background())
	held := make(chan probes.Result)
	go func() { held <- holder.Probe(hctx) }()
	// Wait until the holder's plugin has the only slot.
	deadline := time.Now().Add(30 * time.Second)
	for len(g.slots) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first plugin never took the slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	got := waiter.Probe(ctx)
	probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginTimeout, Message: []string{"did not start: all 1 slots stayed busy"}})
	hcancel()
	<-held
}

func TestNewProbeValidates(t *testing.T) {
	ok := Rule{Reason: "Down", Path: "/bin/true", Interval: time.Minute, Timeout: time.Second}
	with := func(f func(*Rule)) []Rule {
		r := ok
		f(&r)
		return []Rule{r}
	}
	tests := []struct {
		name    string
		cond    Condition
		wantErr string // empty: valid
	}{
		{"valid", Condition{Type: "NTPProblem", Reason: "NTPIsUp", Rules: []Rule{ok}}, ""},
		{"no type: events-only, not a condition", Condition{Reason: "Up", Rules: []Rule{ok}},
			"custom events-only probe \"\": Name: an events-only condition (no Type) needs a name\nRules: an events-only condition (no Type) has no condition to feed\nEvents: an events-only condition (no Type) needs at least one events rule"},
		{"events-only", Condition{Name: "npd:iptables-mode-monitor", Events: []Rule{ok}}, ""},
		{"events-only without a name", Condition{Events: []Rule{ok}}, `custom events-only probe "": Name: an events-only condition (no Type) needs a name`},
		{"events-only with rules", Condition{Name: "npd:x", Rules: []Rule{ok}, Events: []Rule{ok}}, `custom events-only probe "npd:x": Rules: an events-only condition (no Type) has no condition to feed`},
		{"events-only without events", Condition{Name: "npd:x"}, "Events: an events-only condition (no Type) needs at least one events rule"},
		{"events-only rules checked", Condition{Name: "npd:x", Events: with(func(r *Rule) { r.Timeout = 0 })}, "Events[0].Timeout: 0s must be positive"},
		{"a condition with a name", Condition{Type: "T", Name: "npd:x", Reason: "Up", Rules: []Rule{ok}}, `custom condition "T": Name: "npd:x" names events-only probes; a condition's probe is named after its Type`},
		{"type with space", Condition{Type: "NTP Problem", Reason: "Up", Rules: []Rule{ok}}, `Type: "NTP Problem" is not a condition type`},
		{"no reason", Condition{Type: "T", Rules: []Rule{ok}}, "Reason: must not be empty"},
		{"no rules", Condition{Type: "T", Reason: "Up"}, "Rules: a condition needs at least one rule"},
		{"no path", Condition{Type: "T", Reason: "Up", Rules: with(func(r *Rule) { r.Path = "" })}, "Rules[0].Path: must not be empty"},
		{"no rule reason", Condition{Type: "T", Reason: "Up", Rules: with(func(r *Rule) { r.Reason = "" })}, "Rules[0].Reason: must not be empty"},
		{"no interval", Condition{Type: "T", Reason: "Up", Rules: with(func(r *Rule) { r.Interval = 0 })}, "Rules[0].Interval: 0s must be positive"},
		{"no timeout", Condition{Type: "T", Reason: "Up", Rules: with(func(r *Rule) { r.Timeout = 0 })}, "Rules[0].Timeout: 0s must be positive"},
		{"timeout above interval", Condition{Type: "T", Reason: "Up", Rules: with(func(r *Rule) { r.Timeout = 3 * time.Minute })}, ""},
		{"timeout above another rule's interval", Condition{Type: "T", Reason: "Up", Rules: []Rule{ok, {Reason: "R", Path: "/bin/true", Interval: 20 * time.Second, Timeout: 30 * time.Second}}}, ""},
		{"events rule", Condition{Type: "T", Reason: "Up", Rules: []Rule{ok}, Events: with(func(r *Rule) { r.Reason = "Flaky" })}, ""},
		{"events rule checked", Condition{Type: "T", Reason: "Up", Rules: []Rule{ok}, Events: with(func(r *Rule) { r.Path, r.Reason, r.Interval, r.Timeout = "", "", 0, 0 })},
			"Events[0].Path: must not be empty\nEvents[0].Reason: must not be empty\nEvents[0].Interval: 0s must be positive\nEvents[0].Timeout: 0s must be positive"},
		{"events rules alone", Condition{Type: "T", Reason: "Up", Events: []Rule{ok}}, "Rules: a condition needs at least one rule"},
	}
	g, err := NewGroup(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		_, err := g.NewProbe(tt.cond)
		probestest.CheckError(t, tt.name, err, tt.wantErr)
	}
	_, err = g.NewProbes([]Condition{{Type: "A", Reason: "Up", Rules: []Rule{ok}}, {Type: "A", Reason: "Up", Rules: []Rule{ok}}})
	probestest.CheckError(t, "duplicate conditions", err, `custom condition "A" is defined twice`)
	ps, err := g.NewProbes([]Condition{{Type: "A", Reason: "Up", Rules: []Rule{ok}}, {Type: "B", Reason: "Up", Rules: []Rule{ok}}})
	if err != nil || len(ps) != 2 || ps[1].Name() != "custom-B" {
		t.Errorf("NewProbes = %v, %v, want probes custom-A and custom-B", ps, err)
	}
	_, err = g.NewProbes([]Condition{{Name: "npd:x", Events: []Rule{ok}}, {Name: "npd:x", Events: []Rule{ok}}})
	probestest.CheckError(t, "duplicate events-only probes", err, `custom events-only probe "npd:x" is defined twice`)
	// Events-only probes have no condition type: two of them are not a
	// condition defined twice.
	ps, err = g.NewProbes([]Condition{{Name: "npd:x", Events: []Rule{ok}}, {Name: "npd:y", Events: []Rule{ok}}, {Type: "npd", Reason: "Up", Rules: []Rule{ok}}})
	if err != nil {
		t.Fatalf("two events-only probes and a condition: %v", err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Name()+"="+p.Condition())
	}
	if want := []string{"custom-npd:x=", "custom-npd:y=", "custom-npd=npd"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got probes %q, want %q", got, want)
	}
}

func TestNewGroupValidates(t *testing.T) {
	_, err := NewGroup(Options{Concurrency: -1, MaxOutputBytes: -2})
	probestest.CheckError(t, "negative", err, "custom check options: Concurrency: -1 must not be negative\nMaxOutputBytes: -2 must not be negative")
	g, err := NewGroup(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cap(g.slots) != DefaultConcurrency || g.opts.MaxOutputLength != DefaultMaxOutputLength || g.opts.MaxOutputBytes != DefaultMaxOutputBytes {
		t.Errorf("NewGroup(Options{}) = %d slots, %+v, want the defaults", cap(g.slots), g.opts)
	}
}

func TestOutputLimits(t *testing.T) {
	requireLinux(t)
	path := writeScript(t, t.TempDir(), "says.sh", "echo 'ünïcödé message that is long'\nexit 1\n")
	p := newTestProbe(t, Options{MaxOutputLength: 4, MaxOutputBytes: 64}, Condition{Type: "T", Reason: "Up", Rules: []Rule{testRule(path)}})
	// "ünï" is 5 bytes: a cut at 4 must not split the "ï".
	probestest.CheckResult(t, p.Probe(context.Background()), probestest.Want{Status: probes.StatusProblem, Reason: "ThingIsDown", Message: []string{"ün"}})

	p = newTestProbe(t, Options{MaxOutputBytes: 3}, Condition{Type: "T", Reason: "Up", Rules: []Rule{testRule(path)}})
	if got := p.Probe(context.Background()); got.Message != "ün" {
		t.Errorf("with 3 bytes read, got message %q, want %q", got.Message, "ün")
	}
}

func TestFirstLine(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"hello\nworld\n", 80, "hello"},
		{"\n\n  hello world  \r\n", 80, "hello world"},
		{"a\tb", 80, "a b"},
		{"bad \xff\xfe byte", 80, "bad \uFFFD byte"},
		{"nul\x00 and esc\x1b", 80, "nul\uFFFD and esc\uFFFD"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},
		{"", 80, ""},
		{"   \n\n", 80, ""},
	}
	for _, tt := range tests {
		if got := firstLine([]byte(tt.in), tt.max); got != tt.want {
			t.Errorf("firstLine(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

func TestConditionsFromChecks(t *testing.T) {
	checks := []Check{
		{Name: "ntp", Condition: "NTPProblem", Path: "/usr/lib/checks/ntp", Args: []string{"-q"}},
		{Name: "nfs", Condition: "MountProblem", Reason: "NFSHung", Path: "/usr/lib/checks/nfs", Interval: 10 * time.Second, Timeout: 3 * time.Second},
		{Name: "chrony", Condition: "NTPProblem", Reason: "ChronyDown", Path: "chronyc-check", Interval: time.Minute},
	}
	got, err := ConditionsFromChecks(checks)
	if err != nil {
		t.Fatal(err)
	}
	want := []Condition{
		{Type: "NTPProblem", Reason: ReasonChecksPassed, Rules: []Rule{
			{Name: "ntp", Reason: ReasonCheckFailed, Path: "/usr/lib/checks/ntp", Args: []string{"-q"}, Interval: DefaultInterval, Timeout: DefaultTimeout},
			{Name: "chrony", Reason: "ChronyDown", Path: "chronyc-check", Interval: time.Minute, Timeout: DefaultTimeout},
		}},
		{Type: "MountProblem", Reason: ReasonChecksPassed, Rules: []Rule{
			{Name: "nfs", Reason: "NFSHung", Path: "/usr/lib/checks/nfs", Interval: 10 * time.Second, Timeout: 3 * time.Second},
		}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ConditionsFromChecks =\n%+v\nwant\n%+v", got, want)
	}
	g, _ := NewGroup(Options{})
	if _, err := g.NewProbes(got); err != nil {
		t.Errorf("NewProbes of ConditionsFromChecks: %v", err)
	}

	tests := []struct {
		name    string
		checks  []Check
		wantErr string
	}{
		{"no name", []Check{{Condition: "C", Path: "/x"}}, "custom checks: Checks[0].Name: must not be empty"},
		{"duplicate name", []Check{{Name: "a", Condition: "C", Path: "/x"}, {Name: "a", Condition: "D", Path: "/y"}}, `Checks[1].Name: "a" is the name of Checks[0] too`},
		{"no condition", []Check{{Name: "a", Path: "/x"}}, `Checks[0].Condition: "" is not a condition type`},
		{"no path", []Check{{Name: "a", Condition: "C"}}, "Checks[0].Path: must not be empty"},
		{"negative interval", []Check{{Name: "a", Condition: "C", Path: "/x", Interval: -1}}, "Checks[0].Interval: -1ns must not be negative"},
		{"timeout above interval", []Check{{Name: "a", Condition: "C", Path: "/x", Interval: time.Second}}, "Checks[0].Timeout: 5s must be below its interval 1s"},
		{
			"timeout above another check's interval",
			[]Check{{Name: "a", Condition: "C", Path: "/x", Interval: 6 * time.Second, Timeout: time.Second}, {Name: "b", Condition: "C", Path: "/y", Timeout: 8 * time.Second}},
			`Checks[1].Timeout: 8s must be below 6s, the shortest interval of the checks of condition "C"`,
		},
	}
	for _, tt := range tests {
		_, err := ConditionsFromChecks(tt.checks)
		probestest.CheckError(t, tt.name, err, tt.wantErr)
	}
}

// TestProbeUnderRunner runs a check the way the agent does, through the
// runner with the probe's Entry, to show the two timeouts agree.
func TestProbeUnderRunner(t *testing.T) {
	requireLinux(t)
	path := writeScript(t, t.TempDir(), "hang.sh", "echo stuck\nsleep 1000\n")
	r := testRule(path)
	r.Interval, r.Timeout = 2*time.Second, 200*time.Millisecond
	p := newTestProbe(t, Options{}, Condition{Type: "T", Reason: "Up", Rules: []Rule{r}})
	e := p.Entry()
	got := probes.RunOnce(context.Background(), e.Probe, e.Timeout, nil)
	probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginTimeout, Message: []string{"within its timeout of 200ms and was killed: stuck"}})
	if got.Probe != "custom-T" {
		t.Errorf("got result of probe %q, want custom-T", got.Probe)
	}
	if _, err := probes.NewRunner([]probes.Entry{e}, probes.RunnerOptions{}); err != nil {
		t.Errorf("NewRunner rejects the probe's Entry: %v", err)
	}
}

func TestCheckFieldErrors(t *testing.T) {
	tests := []struct {
		name  string
		check Check
		want  string
	}{
		{"fine", Check{Condition: "C", Path: "/x"}, ""},
		{"space in condition", Check{Condition: "Bad Type", Path: "/x"}, `Checks[3].Condition: "Bad Type" is not a condition type`},
		{"negative timeout", Check{Condition: "C", Path: "/x", Timeout: -time.Second}, "Checks[3].Timeout: -1s must not be negative"},
		{"timeout equal to interval", Check{Condition: "C", Path: "/x", Interval: 5 * time.Second}, "Checks[3].Timeout: 5s must be below its interval 5s"},
		{"all at once", Check{Interval: -time.Second}, `Checks[3].Condition: "" is not a condition type` + "\n" +
			"Checks[3].Path: must not be empty\nChecks[3].Interval: -1s must not be negative"},
	}
	for _, tt := range tests {
		got := ""
		if err := errors.Join(tt.check.fieldErrors("Checks[3]", tt.check.rule())...); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestTimeoutReportedByALaterProbeRun reproduces issue 28's log line "own
// did not finish within its timeout of 400ms and was killed" with
// duration=264.639µs. That duration was not the plugin's: it was the
// duration of the probe run that reported the plugin's outcome. A rule
// whose timeout (400ms) is longer than its probe's wait (seven tenths of
// its 500ms interval, 350ms) goes on in the background once the probe run
// that started it has reported; the next probe run finds it in flight (or
// just ended) and reports its outcome as soon as it ends, however short
// that probe run is itself, and the runner logs that probe run's
// duration. Here the runner's clock stands still, so the reporting run
// takes 0s, while the plugin really ran out its 400ms. The report must say
// the plugin's own run: when it started and how long it ran before it was
// killed.
func TestTimeoutReportedByALaterProbeRun(t *testing.T) {
	requireLinux(t)
	path := writeScript(t, t.TempDir(), "hang.sh", "sleep 1000\n")
	clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	p := newTestProbe(t, Options{Clock: clock}, Condition{Type: "OwnMessages", Reason: "Fine", Rules: []Rule{
		{Name: "own", Reason: "OwnBroken", Path: path, Interval: 500 * time.Millisecond, Timeout: 400 * time.Millisecond},
	}})
	e := p.Entry()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The first probe run starts the plugin and gives up waiting for it
	// after 350ms: the plugin goes on in the background.
	first := make(chan probes.Result, 1)
	go func() { first <- probes.RunOnce(ctx, p, e.Timeout, clock) }()
	// RunOnce's timeout and the probe's wait.
	if err := clock.BlockUntilWaitersContext(ctx, 2); err != nil {
		t.Fatalf("the first probe run never waited for its plugin: %v", err)
	}
	clock.Step(350 * time.Millisecond)
	got := <-first
	t.Logf("first probe run, %v: %s %s %q", got.Duration, got.Status, got.Reason, got.Message)

	// The next probe run reports the plugin's timeout without taking any
	// time of its own.
	got = probes.RunOnce(ctx, p, e.Timeout, clock)
	t.Logf("second probe run, %v: %s %s %q", got.Duration, got.Status, got.Reason, got.Message)
	probestest.CheckResult(t, got, probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginTimeout,
		Message: []string{"own did not finish within its timeout of 400ms and was killed"}})
	if got.Duration != 0 {
		t.Errorf("the reporting probe run took %v on a clock that stood still", got.Duration)
	}
	m := regexp.MustCompile(`its run started at (\d\d:\d\d:\d\d\.\d{3}Z) and was killed after ([^ ;)]+)`).FindStringSubmatch(got.Message)
	if m == nil {
		t.Fatalf("the message %q does not say when the plugin's own run started and how long it ran", got.Message)
	}
	if ran, err := time.ParseDuration(m[2]); err != nil || ran < 400*time.Millisecond {
		t.Errorf("the plugin's own run lasted %q, want at least its timeout of 400ms (%v)", m[2], err)
	}
}

// TestTimeoutCountsFromTheProcessStart: a plugin's timeout is its own
// run's, counted from the moment its process started. On a loaded machine
// fork and exec can take most of a short timeout; a timeout counted from
// before them would kill a plugin as soon as it started, its deadline
// already spent. Here starting the process takes longer than the rule's
// timeout (a slow start stands for the load): 5.5s against 5s, a plugin
// that answers at once passes; 300ms against 200ms, one that hangs is
// killed with a message that says how long starting it took.
func TestTimeoutCountsFromTheProcessStart(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	quick := writeScript(t, dir, "quick.sh", "echo fine\n")
	hang := writeScript(t, dir, "hang.sh", "echo stuck\nsleep 1000\n")
	// Each rule's process starts later than its timeout after the run
	// began. The quick script's timeout is long enough for it to finish
	// on a loaded machine once started; only the hung one's is short, as
	// it must fire.
	for _, tt := range []struct {
		path           string
		timeout, delay time.Duration
		want           probestest.Want
	}{
		{quick, 5 * time.Second, 5500 * time.Millisecond, probestest.Want{Status: probes.StatusOK, Reason: "Fine", Message: []string{"fine"}}},
		{hang, 200 * time.Millisecond, 300 * time.Millisecond, probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginTimeout, Message: []string{
			hang + " did not finish within its timeout of 200ms and was killed: stuck (its run started at ",
			"; the machine is loaded: starting its process took ",
		}}},
	} {
		g, err := NewGroup(Options{})
		if err != nil {
			t.Fatal(err)
		}
		g.beforeStart = func() { time.Sleep(tt.delay) }
		r := testRule(tt.path)
		r.Timeout = tt.timeout
		p, err := g.NewProbe(Condition{Type: "Slow", Reason: "Fine", Rules: []Rule{r}})
		if err != nil {
			t.Fatal(err)
		}
		got := p.Probe(context.Background())
		t.Logf("%s: %s %s %q", filepath.Base(tt.path), got.Status, got.Reason, got.Message)
		probestest.CheckResult(t, got, tt.want)
	}
}

func TestTimingSaysWhenTheMachineWasLoaded(t *testing.T) {
	started := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	for _, tt := range []struct {
		name string
		res  execResult
		want string
	}{
		{"quiet", execResult{started: started, ran: 400 * time.Millisecond, startTook: 2 * time.Millisecond, cpuWait: 5 * time.Millisecond},
			"its run started at 12:00:00.123Z and was killed after 400ms"},
		{"slow start", execResult{started: started, ran: 401 * time.Millisecond, startTook: 100 * time.Millisecond},
			"its run started at 12:00:00.123Z and was killed after 401ms; the machine is loaded: starting its process took 100ms before that"},
		{"waiting for a CPU", execResult{started: started, ran: 400 * time.Millisecond, cpuWait: 390 * time.Millisecond},
			"its run started at 12:00:00.123Z and was killed after 400ms; the machine is loaded: it waited 390ms of its run for a CPU"},
		{"both", execResult{started: started, ran: 400 * time.Millisecond, startTook: time.Second, cpuWait: 300 * time.Millisecond},
			"its run started at 12:00:00.123Z and was killed after 400ms; the machine is loaded: starting its process took 1s before that and it waited 300ms of its run for a CPU"},
	} {
		if got := tt.res.timing(400 * time.Millisecond); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRunDelay(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"4213374 391000000 12\n", 391 * time.Millisecond},
		{"0 0 0", 0},
		{"", 0},
		{"4213374 -5 12", 0},
		{"4213374 lots 12", 0},
		{"1 2", 0},
	} {
		if got := runDelay([]byte(tt.in)); got != tt.want {
			t.Errorf("runDelay(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestEveryFailingEventsRunIsReported: a run of an events rule that ends
// after its probe run stopped waiting for it, and before the next probe
// run, whose own run of the rule ends at once, still gives its Event: the
// later run's outcome does not replace the earlier one unreported.
func TestEveryFailingEventsRunIsReported(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	// The first run waits for release; every later run ends at once.
	path := writeScript(t, dir, "conntrack.sh", fmt.Sprintf(`if [ -e %[1]s/ran ]; then echo second run failed; exit 1; fi
touch %[1]s/ran
while [ ! -e %[2]s ]; do sleep 0.01; done
echo first run failed
exit 1
`, dir, release))
	clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	r := testRule(path)
	r.Reason = "ConntrackFull"
	r.Interval = 10 * time.Second
	p := newTestProbe(t, Options{Clock: clock}, Condition{Name: "events", Events: []Rule{r}})

	// The first probe run stops waiting (at 7s) while the first run goes on.
	done := make(chan probes.Result)
	go func() { done <- p.Probe(context.Background()) }()
	clock.BlockUntilWaiters(1)
	clock.Step(p.wait)
	if first := <-done; len(first.Events) != 0 {
		t.Fatalf("the first probe run, whose rule run had not ended, reported events %v", first.Events)
	}
	// The rule's run ends between probe runs.
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		p.mu.Lock()
		running := p.state[0].running != nil
		p.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run of the rule did not end within 30s of its release")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The next probe run starts the rule again (it is due), and that run
	// ends within the wait.
	clock.Step(r.Interval - p.wait)
	second := p.Probe(context.Background())
	var msgs []string
	for _, e := range second.Events {
		if e.Reason != "ConntrackFull" {
			t.Errorf("event %+v, want reason ConntrackFull", e)
		}
		msgs = append(msgs, e.Message)
	}
	if want := []string{"first run failed", "second run failed"}; !slices.Equal(msgs, want) {
		t.Errorf("the second probe run reported events %q, want both runs' %q", msgs, want)
	}
}

// TestUnreportedBeyondTheBurstCounted: an events rule's failing runs
// beyond the maxUnreported kept while probe runs lag are counted on the
// last Event reported (probes.Event.HeldBack), so the agent counts them
// as held back, once: the next report starts from zero.
func TestUnreportedBeyondTheBurstCounted(t *testing.T) {
	r := testRule("/bin/false")
	r.Reason = "ConntrackFull"
	p := newTestProbe(t, Options{}, Condition{Name: "events", Events: []Rule{r}})
	fail := outcome{status: probes.StatusProblem, message: "failed", reading: "failed"}
	for _, tt := range []struct {
		runs         int
		events, held int
	}{{maxUnreported + 3, maxUnreported, 3}, {1, 1, 0}} {
		p.mu.Lock()
		for range tt.runs {
			p.state[0].keepUnreported(fail)
		}
		p.mu.Unlock()
		res := p.report()
		held := 0
		for _, e := range res.Events {
			held += e.HeldBack
		}
		if len(res.Events) != tt.events || held != tt.held || (held > 0 && res.Events[len(res.Events)-1].HeldBack != held) {
			t.Errorf("%d failing runs unreported: %d Events holding back %d (%+v), want %d holding back %d on the last", tt.runs, len(res.Events), held, res.Events, tt.events, tt.held)
		}
	}
}
