package probestest

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/selftaint/selftaint/probes"
)

// recorder is a testing.TB that records errors and fatal errors instead of
// failing; Fatalf ends the calling goroutine, as testing.T's does. Run the
// code under test with record.
type recorder struct {
	testing.TB
	errs  []string
	fatal bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.fatal = true
	runtime.Goexit()
}

// record runs f with a recorder on a goroutine of its own and returns the
// recorder once f returns or calls Fatalf.
func record(t *testing.T, f func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func checkErrs(t *testing.T, what string, r *recorder, wantFatal bool, want ...string) {
	t.Helper()
	if r.fatal != wantFatal || len(r.errs) != len(want) {
		t.Errorf("%s: errors %q (fatal %v), want %q (fatal %v)", what, r.errs, r.fatal, want, wantFatal)
		return
	}
	for i := range want {
		if r.errs[i] != want[i] {
			t.Errorf("%s: error %d %q, want %q", what, i, r.errs[i], want[i])
		}
	}
}

func TestCheckResult(t *testing.T) {
	got := probes.Result{Status: probes.StatusOK, Reason: "Fine", Message: "all fine", Readings: []probes.Reading{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}}}
	tests := []struct {
		name string
		want Want
		errs []string
	}{
		{"match", Want{Status: probes.StatusOK, Reason: "Fine", Message: []string{"all", "fine"}, Readings: got.Readings}, nil},
		{"readings not checked", Want{Status: probes.StatusOK, Reason: "Fine"}, nil},
		{"status", Want{Status: probes.StatusProblem, Reason: "Fine"}, []string{`got OK/Fine, want Problem/Fine (message "all fine")`}},
		{"reason", Want{Status: probes.StatusOK, Reason: "Bad"}, []string{`got OK/Fine, want OK/Bad (message "all fine")`}},
		{"message", Want{Status: probes.StatusOK, Reason: "Fine", Message: []string{"all", "not"}}, []string{`got message "all fine", want it to contain "not"`}},
		{
			"reading count", Want{Status: probes.StatusOK, Reason: "Fine", Readings: []probes.Reading{}},
			[]string{"got readings [{a 1} {b 2}], want []"},
		},
		{
			"reading value", Want{Status: probes.StatusOK, Reason: "Fine", Readings: []probes.Reading{{Name: "a", Value: "1"}, {Name: "b", Value: "3"}}},
			[]string{"got reading 1 {b 2}, want {b 3}"},
		},
	}
	for _, tt := range tests {
		r := record(t, func(tb testing.TB) { CheckResult(tb, got, tt.want) })
		checkErrs(t, tt.name, r, false, tt.errs...)
	}
}

func TestCheckError(t *testing.T) {
	boom := errors.New("boom: bad value")
	tests := []struct {
		name    string
		err     error
		wantErr string
		errs    []string
	}{
		{"nil wanted", nil, "", nil},
		{"contains", boom, "bad value", nil},
		{"unwanted", boom, "", []string{"unwanted: got error boom: bad value, want nil"}},
		{"missing", nil, "bad", []string{`missing: got error <nil>, want one containing "bad"`}},
		{"other", boom, "good", []string{`other: got error boom: bad value, want one containing "good"`}},
	}
	for _, tt := range tests {
		r := record(t, func(tb testing.TB) { CheckError(tb, tt.name, tt.err, tt.wantErr) })
		checkErrs(t, tt.name, r, false, tt.errs...)
	}
}

func TestCheckParse(t *testing.T) {
	parse := func(b []byte) (int, error) { return strconv.Atoi(string(b)) }
	tests := []struct {
		in      string
		want    int
		wantErr string
		errs    []string
	}{
		{"12", 12, "", nil},
		{"x", 0, "invalid syntax", nil},
		{"12", 13, "", []string{`atoi("12") = 12, <nil>, want 13`}},
		{"x", 0, "", []string{`atoi("x") = 0, strconv.Atoi: parsing "x": invalid syntax, want 0`}},
		{"12", 0, "invalid", []string{`atoi("12") error = <nil>, want one containing "invalid"`}},
	}
	for _, tt := range tests {
		r := record(t, func(tb testing.TB) { CheckParse(tb, "atoi", parse, tt.in, tt.want, tt.wantErr) })
		checkErrs(t, tt.in, r, false, tt.errs...)
	}
}

type cfg struct {
	result  probes.Result
	failNew bool
}

func newStatic(c cfg, host probes.Host) (StaticProbe, error) {
	if c.failNew {
		return StaticProbe{}, errors.New("bad config")
	}
	res := c.result
	res.Message += " at " + host.Root
	return StaticProbe{ProbeName: "static", Result: res}, nil
}

func TestRunProbe(t *testing.T) {
	var got probes.Result
	r := record(t, func(tb testing.TB) {
		got = RunProbe(tb, newStatic, cfg{result: probes.Result{Status: probes.StatusOK, Message: "fine"}}, probes.Host{Root: "testdata/x"})
	})
	checkErrs(t, "RunProbe", r, false)
	if got.Status != probes.StatusOK || got.Message != "fine at testdata/x" {
		t.Errorf("RunProbe = %+v, want OK, fine at testdata/x", got)
	}
	r = record(t, func(tb testing.TB) { RunProbe(tb, newStatic, cfg{failNew: true}, probes.Host{}) })
	checkErrs(t, "RunProbe, New fails", r, true, "New: bad config")
}

func TestCheckRealHost(t *testing.T) {
	ok := probes.Result{Status: probes.StatusProblem, Reason: "Low", Message: "low", Readings: []probes.Reading{{Name: "a", Value: "1"}}}
	var got probes.Result
	r := record(t, func(tb testing.TB) { got = CheckRealHost(tb, newStatic, cfg{result: ok}, "static") })
	checkErrs(t, "CheckRealHost", r, false)
	if got.Message != "low at /" || len(got.Readings) != 1 {
		t.Errorf("CheckRealHost = %+v, want the result read at /", got)
	}
	r = record(t, func(tb testing.TB) { CheckRealHost(tb, newStatic, cfg{result: ok}, "other") })
	checkErrs(t, "wrong name", r, false, `Name() = "static", want "other"`)
	unknown := probes.Result{Status: probes.StatusUnknown, Reason: "ReadError", Message: "no file"}
	r = record(t, func(tb testing.TB) { CheckRealHost(tb, newStatic, cfg{result: unknown}, "static") })
	checkErrs(t, "unknown", r, true, `got Unknown/ReadError "no file at /", want OK or Problem`)
	r = record(t, func(tb testing.TB) { CheckRealHost(tb, newStatic, cfg{failNew: true}, "static") })
	checkErrs(t, "New fails", r, true, "New: bad config")
}
