package probestest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/probes"
)

// Want is what CheckResult expects of a probe's Result.
type Want struct {
	Status   probes.Status
	Reason   string
	Message  []string         // substrings the message must contain
	Readings []probes.Reading // the readings, in order; nil: not checked
}

// CheckResult reports, as errors on t, where got differs from want.
func CheckResult(t testing.TB, got probes.Result, want Want) {
	t.Helper()
	if got.Status != want.Status || got.Reason != want.Reason {
		t.Errorf("got %s/%s, want %s/%s (message %q)", got.Status, got.Reason, want.Status, want.Reason, got.Message)
	}
	for _, sub := range want.Message {
		if !strings.Contains(got.Message, sub) {
			t.Errorf("got message %q, want it to contain %q", got.Message, sub)
		}
	}
	if want.Readings == nil {
		return
	}
	if len(got.Readings) != len(want.Readings) {
		t.Errorf("got readings %v, want %v", got.Readings, want.Readings)
		return
	}
	for i := range got.Readings {
		if got.Readings[i] != want.Readings[i] {
			t.Errorf("got reading %d %v, want %v", i, got.Readings[i], want.Readings[i])
		}
	}
}

// SkipUnlessRealHost skips t, saying why, unless it runs on Linux or in CI
// (CI=true), where a test of the real host must run rather than pass
// unnoticed.
func SkipUnlessRealHost(t testing.TB, why string) {
	t.Helper()
	if runtime.GOOS != "linux" && os.Getenv("CI") != "true" {
		t.Skip(why)
	}
}

// RunProbe makes a probe with newProbe(cfg, host), stopping the test if
// that fails, and runs it once.
func RunProbe[C any, P probes.Probe](t testing.TB, newProbe func(C, probes.Host) (P, error), cfg C, host probes.Host) probes.Result {
	t.Helper()
	return mustNew(t, newProbe, cfg, host).Probe(context.Background())
}

// CheckRealHost makes a probe with newProbe(cfg, host root "/") and runs it
// once against the real host: its name must be name and it must tell (OK or
// Problem, not Unknown), or the test stops. It logs the result and returns
// it for the caller to check the readings. Call SkipUnlessRealHost first.
func CheckRealHost[C any, P probes.Probe](t testing.TB, newProbe func(C, probes.Host) (P, error), cfg C, name string) probes.Result {
	t.Helper()
	p := mustNew(t, newProbe, cfg, probes.Host{Root: "/"})
	if got := p.Name(); got != name {
		t.Errorf("Name() = %q, want %q", got, name)
	}
	got := p.Probe(context.Background())
	if got.Status != probes.StatusOK && got.Status != probes.StatusProblem {
		t.Fatalf("got %s/%s %q, want OK or Problem", got.Status, got.Reason, got.Message)
	}
	t.Logf("%s %s: %s %v", got.Status, got.Reason, got.Message, got.Readings)
	return got
}

func mustNew[C any, P probes.Probe](t testing.TB, newProbe func(C, probes.Host) (P, error), cfg C, host probes.Host) P {
	t.Helper()
	p, err := newProbe(cfg, host)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// CheckError reports, as an error on t prefixed with what, an err that is
// not nil where wantErr is empty, or that does not contain wantErr.
func CheckError(t testing.TB, what string, err error, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Errorf("%s: got error %v, want nil", what, err)
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		t.Errorf("%s: got error %v, want one containing %q", what, err, wantErr)
	}
}

// CheckParse runs parse, named name in messages, on in: it must return
// want or, where wantErr is not empty, fail with an error containing wantErr.
func CheckParse[T comparable](t testing.TB, name string, parse func([]byte) (T, error), in string, want T, wantErr string) {
	t.Helper()
	got, err := parse([]byte(in))
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s(%q) error = %v, want one containing %q", name, in, err, wantErr)
		}
		return
	}
	if err != nil || got != want {
		t.Errorf("%s(%q) = %+v, %v, want %+v", name, in, got, err, want)
	}
}

// AddProcFixtures seeds f's corpus with every fixture file
// testdata/*/proc/<name> of the package under test.
func AddProcFixtures(f *testing.F, name string) {
	f.Helper()
	matches, err := filepath.Glob(filepath.Join("testdata", "*", "proc", name))
	if err != nil {
		f.Fatal(err)
	}
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FailOrSkip stops t for want of something the host lacks (root, a kernel
// feature, a command): a failure under CI=true, where such a test must
// run, and a skip elsewhere. msg says what is missing.
func FailOrSkip(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true, so this is a failure, not a skip)", msg)
	}
	t.Skipf("%s (skipping; with CI=true this fails)", msg)
}
