package testcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBin writes an executable shell script called name into dir.
func fakeBin(t *testing.T, dir, name, script string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeBins points ETCD_BIN and KUBE_BIN_DIR at scripts: etcd runs etcdScript,
// the Kubernetes components sleep.
func fakeBins(t *testing.T, etcdScript string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs /bin/sh (CI=true, so this is a failure, not a skip)")
		}
		t.Skip("needs /bin/sh")
	}
	dir := t.TempDir()
	t.Setenv("ETCD_BIN", fakeBin(t, dir, "etcd", etcdScript))
	for _, n := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		fakeBin(t, dir, n, "exec sleep 60")
	}
	t.Setenv("KUBE_BIN_DIR", dir)
}

// privateTmp points $TMPDIR at an empty directory of the test's, and returns
// a function that lists what is in it, to check that New leaves nothing
// behind.
func privateTmp(t *testing.T) func() []string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	return func() []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

func TestMissingBinaryError(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "plain")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       string
	}{
		{"missing file", filepath.Join(dir, "nope"), "nope: no such file"},
		{"directory", dir, "is not an executable file"},
		{"not executable", notExec, "is not an executable file"},
		{"not on PATH", "", "executable file not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := lookBinary("testcp-no-such-binary", tt.path, "get it somewhere")
			var mb *MissingBinaryError
			if !errors.As(err, &mb) {
				t.Fatalf("lookBinary error = %v (%T), want a *MissingBinaryError", err, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "testcp-no-such-binary not available: ") || !strings.Contains(msg, tt.want) || !strings.HasSuffix(msg, "; get it somewhere") {
				t.Errorf("error = %q, want the binary, %q and the hint", msg, tt.want)
			}
			if mb.Unwrap() == nil {
				t.Errorf("Unwrap() = nil")
			}
		})
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := lookBinary("self", self, ""); err != nil || !filepath.IsAbs(got) {
		t.Errorf("lookBinary(an executable) = %q, %v; want its absolute path", got, err)
	}
}

func TestComponentError(t *testing.T) {
	dir := t.TempDir()
	c := &component{name: "kube-apiserver", logPath: filepath.Join(dir, "kube-apiserver.log")}
	var log strings.Builder
	for i := range 100 {
		fmt.Fprintf(&log, "I1127 10:00:00.000000    4242 x.go:1] line %d\n", i)
	}
	log.WriteString("E1127 10:00:01.000000    4242 run.go:72] \"command failed\" err=\"bad flag\"\n")
	log.WriteString("I1127 10:00:01.000000    4242 x.go:1] bye\n")
	if err := os.WriteFile(c.logPath, []byte(log.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("boom")
	err := c.failure(cause, []ComponentTime{{"etcd", 1200 * time.Millisecond}}, 3*time.Second, true)
	var ce *ComponentError
	if !errors.As(err, &ce) || !errors.Is(err, cause) {
		t.Fatalf("failure() = %v, want a *ComponentError wrapping the cause", err)
	}
	if !c.reported {
		t.Errorf("the log is not marked as reported")
	}
	// The error is one line: the component, why, the log's reason, the
	// components ready before it, the log's path; no log lines.
	msg := err.Error()
	want := `testcp: kube-apiserver: boom (its log says: "command failed" err="bad flag"); ready before it: etcd 1.2s; log: ` + c.logPath
	if msg != want {
		t.Errorf("error\n%s\nwant\n%s", msg, want)
	}
	if got := ce.Times(); !slices.Equal(got, []ComponentTime{{"etcd", 1200 * time.Millisecond}, {"kube-apiserver", 3 * time.Second}}) {
		t.Errorf("Times() = %v", got)
	}
	// A test's failure message quotes the last 40 lines.
	report := failureReport(err)
	for _, want := range []string{msg + "\n", "last 40 lines of " + c.logPath, "line 62\n", "line 99", "bye"} {
		if !strings.Contains(report, want) {
			t.Errorf("failure report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "line 61\n") {
		t.Errorf("failure report quotes more than 40 lines:\n%s", report)
	}
}

func TestLogReason(t *testing.T) {
	tests := []struct {
		name, tail string
		anyLine    bool
		want       string
	}{
		{"klog error line, header cut", "I1127 10:00:00.000000    7 a.go:1] up\nE1127 10:00:00.000001    7 run.go:72] \"command failed\" err=\"x\"\nI1127 10:00:00.000002    7 a.go:2] bye", true, `"command failed" err="x"`},
		{"klog fatal", "F1127 10:00:00.000000 7 a.go:1] cannot bind", false, "cannot bind"},
		{"cobra's Error line", "Error: unknown flag: --bogus\nUsage:\n  kube-apiserver [flags]", false, "Error: unknown flag: --bogus"},
		{"etcd's zap fatal", `{"level":"info","msg":"a"}` + "\n" + `{"level":"fatal","msg":"listen tcp: address already in use"}`, false, `{"level":"fatal","msg":"listen tcp: address already in use"}`},
		{"no error line: the last line for an exit", "=== testcp 2026: etcd\nsays goodbye\n\n", true, "says goodbye"},
		{"no error line: nothing for a timeout", "I1127 10:00:00.000000    7 a.go:1] waiting\n", false, ""},
		{"only testcp's own header", "=== testcp 2026: /bin/etcd --x\n", true, ""},
		{"long lines shortened", "Error: " + strings.Repeat("x", 300), false, "Error: " + strings.Repeat("x", 192) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := logReason(tt.tail, tt.anyLine); got != tt.want {
				t.Errorf("logReason = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDescribeCheck(t *testing.T) {
	readyz := "[+]ping ok\n[-]etcd failed: reason withheld\n[+]log ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	refused := getOK(plainClient(), "http://"+closed+"/readyz", "", "")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"failing readyz checks", &checkError{path: "/readyz", status: "500 Internal Server Error", body: []byte(readyz)}, "/readyz 500 Internal Server Error: failing etcd, poststarthook/rbac/bootstrap-roles"},
		{"another answer", &checkError{path: "/health", status: "503 Service Unavailable", body: []byte(`{"health":"false","reason":"RAFT NO LEADER"}`)}, `/health 503 Service Unavailable: {"health":"false","reason":"RAFT NO LEADER"}`},
		{"nothing listening", refused, "/readyz: nothing listening yet (connection refused)"},
		{"none", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describeCheck("/readyz", tt.err); got != tt.want {
				t.Errorf("describeCheck(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestProgressString(t *testing.T) {
	p := Progress{
		Ready: []ComponentTime{{"etcd", 1940 * time.Millisecond}}, Waiting: "kube-apiserver", Check: "/readyz",
		Waited: 10120 * time.Millisecond, LastAnswer: "/readyz: nothing listening yet (connection refused)",
		Elapsed: 12060 * time.Millisecond, Limit: 3 * time.Minute,
	}
	want := "12.1s of 3m0s: waiting for kube-apiserver (/readyz) for 10.1s: /readyz: nothing listening yet (connection refused); ready: etcd 1.9s"
	if got := p.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
	if got := Slowest([]ComponentTime{{"etcd", time.Second}, {"kube-apiserver", 90 * time.Second}, {"kube-scheduler", 2 * time.Second}}); got != "kube-apiserver" {
		t.Errorf("Slowest = %q, want kube-apiserver", got)
	}
}

func TestStartTimeoutFromEnv(t *testing.T) {
	t.Setenv(StartTimeoutEnv, "5m")
	if o, err := startTimeoutFromEnv(Options{}); err != nil || o.StartTimeout != 5*time.Minute {
		t.Errorf("from $%s=5m: %v, %v; want 5m", StartTimeoutEnv, o.StartTimeout, err)
	}
	if o, err := startTimeoutFromEnv(Options{StartTimeout: time.Second}); err != nil || o.StartTimeout != time.Second {
		t.Errorf("the option's own: %v, %v; want 1s", o.StartTimeout, err)
	}
	t.Setenv(StartTimeoutEnv, "soon")
	if _, err := startTimeoutFromEnv(Options{}); err == nil || !strings.Contains(err.Error(), StartTimeoutEnv) {
		t.Errorf("a bad value: %v, want an error naming $%s", err, StartTimeoutEnv)
	}
	if (Options{}).startTimeout() != DefaultStartTimeout {
		t.Errorf("default limit %v, want %v", (Options{}).startTimeout(), DefaultStartTimeout)
	}
}

// A start slower than its limit: progress on the way, naming the component
// awaited and its check; then a *ComponentError for it whose cause is
// ErrStartTimeout, with how long it was waited for.
func TestNewStartTimeout(t *testing.T) {
	left := privateTmp(t)
	fakeBins(t, "exec sleep 60")
	var mu sync.Mutex
	var progress []Progress
	_, err := New(t.Context(), Options{
		StartTimeout: 2 * time.Second, ProgressInterval: 300 * time.Millisecond,
		Progress: func(p Progress) { mu.Lock(); progress = append(progress, p); mu.Unlock() },
	})
	var ce *ComponentError
	if !errors.As(err, &ce) || ce.Component != "etcd" || !errors.Is(err, ErrStartTimeout) {
		t.Fatalf("New = %v, want a *ComponentError for etcd caused by ErrStartTimeout", err)
	}
	if ce.Waited <= 0 || !strings.Contains(ce.LastAnswer, "nothing listening yet") || !strings.Contains(err.Error(), "not ready after") || !strings.Contains(err.Error(), "(2s) (last answer: /health: nothing listening yet") {
		t.Errorf("error %q (waited %v): want how long, the limit and the last answer", err, ce.Waited)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) == 0 {
		t.Fatalf("no progress reported")
	}
	p := progress[0]
	if p.Waiting != "etcd" || p.Check != "/health" || p.Limit != 2*time.Second || p.Waited <= 0 || !strings.Contains(p.LastAnswer, "nothing listening yet") {
		t.Errorf("progress %+v, want etcd's /health awaited, nothing listening", p)
	}
	if l := left(); len(l) != 0 {
		t.Errorf("New left %v behind", l)
	}
}

// With KeepLogs, a failed start leaves the logs (and only them) for the
// caller; the error's LogPath is one of them.
func TestNewKeepLogs(t *testing.T) {
	left := privateTmp(t)
	fakeBins(t, "echo etcd says goodbye >&2; exit 3")
	_, err := New(t.Context(), Options{KeepLogs: true})
	var ce *ComponentError
	if !errors.As(err, &ce) || ce.Component != "etcd" {
		t.Fatalf("New = %v, want a *ComponentError for etcd", err)
	}
	if ce.LogLine != "etcd says goodbye" || !strings.Contains(ce.Err.Error(), "exit status 3") {
		t.Errorf("LogLine %q, Err %v; want its last line and exit", ce.LogLine, ce.Err)
	}
	b, err := os.ReadFile(ce.LogPath)
	if err != nil || !strings.Contains(string(b), "etcd says goodbye") {
		t.Fatalf("the kept log: %v, %q", err, b)
	}
	dirs := left()
	if len(dirs) != 1 || dirs[0] != filepath.Dir(ce.LogPath) {
		t.Fatalf("left %v, want only the log's directory", dirs)
	}
	entries, err := os.ReadDir(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") {
			t.Errorf("kept %s besides the logs", e.Name())
		}
	}
}

func TestNewMissingBinary(t *testing.T) {
	left := privateTmp(t)
	fakeBins(t, "exit 1")
	t.Setenv("ETCD_BIN", filepath.Join(t.TempDir(), "no-etcd"))
	cp, err := New(t.Context(), Options{})
	var mb *MissingBinaryError
	if cp != nil || !errors.As(err, &mb) || mb.Name != "etcd" {
		t.Fatalf("New = %v, %v; want nil and a *MissingBinaryError for etcd", cp, err)
	}
	if l := left(); len(l) != 0 {
		t.Errorf("New left %v behind", l)
	}

	// Only the components asked for are looked for.
	fakeBins(t, "exit 1")
	if err := os.Remove(filepath.Join(os.Getenv("KUBE_BIN_DIR"), "kube-scheduler")); err != nil {
		t.Fatal(err)
	}
	_, err = New(t.Context(), Options{ControllerManager: true, Scheduler: true})
	if !errors.As(err, &mb) || mb.Name != "kube-scheduler" {
		t.Errorf("New with no kube-scheduler = %v, want a *MissingBinaryError for it", err)
	}
}

func TestNewComponentFails(t *testing.T) {
	left := privateTmp(t)
	fakeBins(t, "echo etcd says goodbye >&2; exit 3")
	cp, err := New(t.Context(), Options{})
	var ce *ComponentError
	if cp != nil || !errors.As(err, &ce) {
		t.Fatalf("New = %v, %v; want nil and a *ComponentError", cp, err)
	}
	if ce.Component != "etcd" || !strings.Contains(ce.Err.Error(), "exited before it was ready") || !strings.Contains(ce.LogTail, "etcd says goodbye") {
		t.Errorf("error = %+v, want etcd exiting, with its log", ce)
	}
	if l := left(); len(l) != 0 {
		t.Errorf("New left %v behind", l)
	}
}

func TestNewCancelled(t *testing.T) {
	fakeBins(t, "exec sleep 60")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := New(ctx, Options{})
	var ce *ComponentError
	if !errors.As(err, &ce) || ce.Component != "etcd" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("New = %v, want a *ComponentError for etcd wrapping the context's end", err)
	}
	if d := time.Since(began); d > stopGrace {
		t.Errorf("New took %v to give up", d)
	}
}

// fakeT is a T whose Fatalf and Skipf end the goroutine, as testing's do.
type fakeT struct {
	dir              string
	fatal, skip      string
	logs             []string
	cleanups         []func()
	failed, finished bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.fatal, f.failed = fmt.Sprintf(format, args...), true
	runtime.Goexit()
}
func (f *fakeT) Skipf(format string, args ...any) {
	f.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeT) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) TempDir() string   { return f.dir }
func (f *fakeT) Failed() bool      { return f.failed }

// runStart runs Start with a fakeT, then its cleanups, last first.
func runStart(t *testing.T, opts Options) *fakeT {
	ft := &fakeT{dir: t.TempDir()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(ft, opts)
		ft.finished = true
	}()
	<-done
	for i := len(ft.cleanups) - 1; i >= 0; i-- {
		ft.cleanups[i]()
	}
	return ft
}

func TestStartOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		ci         string
		etcd       string // script; "" for a missing etcd
		wantFatal  string
		wantSkip   string
		wantLogged string
	}{
		{"missing binary, CI", "true", "", "(CI=true, so this is a failure, not a skip)", "", ""},
		{"missing binary, local", "", "", "", "(skipping; with CI=true this fails)", ""},
		{"component fails, local", "", "echo bad flag >&2; exit 2", "etcd: exited before it was ready", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			fakeBins(t, tt.etcd)
			if tt.etcd == "" {
				t.Setenv("ETCD_BIN", filepath.Join(t.TempDir(), "no-etcd"))
			}
			ft := runStart(t, Options{})
			if ft.finished {
				t.Fatalf("Start returned")
			}
			if tt.wantFatal != "" && !strings.Contains(ft.fatal, tt.wantFatal) || tt.wantFatal == "" && ft.fatal != "" {
				t.Errorf("Fatalf(%q), want %q", ft.fatal, tt.wantFatal)
			}
			if tt.wantSkip != "" && !strings.Contains(ft.skip, tt.wantSkip) || tt.wantSkip == "" && ft.skip != "" {
				t.Errorf("Skipf(%q), want %q", ft.skip, tt.wantSkip)
			}
			if tt.etcd == "" && !strings.Contains(ft.fatal+ft.skip, "etcd not available: ") {
				t.Errorf("message %q does not name etcd", ft.fatal+ft.skip)
			}
			if tt.etcd != "" && !strings.Contains(ft.fatal, "bad flag") {
				t.Errorf("Fatalf(%q) does not quote etcd's log", ft.fatal)
			}
			// The failing component's log is quoted once, not again at
			// teardown.
			if len(ft.logs) != 0 {
				t.Errorf("logged at teardown: %q", ft.logs)
			}
		})
	}
}

func TestNewClose(t *testing.T) {
	SkipIfShort(t, "starts a control plane")
	cp, err := New(t.Context(), Options{})
	if mb := (*MissingBinaryError)(nil); errors.As(err, &mb) {
		skipOrFail(t, mb)
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = cp.Close() })
	checkVersion(t, cp.Client())
	if _, err := os.Stat(cp.KubeconfigPath); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}
	procs := []*component{cp.etcd, cp.apiserver}
	if err := cp.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, c := range procs {
		if c.running() {
			t.Errorf("%s still running after Close", c.name)
		}
	}
	if _, err := os.Stat(cp.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Dir after Close: %v, want it removed", err)
	}
	if err := cp.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
