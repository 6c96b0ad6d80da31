package probes_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// probeFunc is a probe made of a function.
type probeFunc struct {
	name string
	f    func(context.Context) probes.Result
}

func (p probeFunc) Name() string                            { return p.name }
func (p probeFunc) Probe(ctx context.Context) probes.Result { return p.f(ctx) }

// TestFailureKinds runs probes that fail in each way through RunOnce and
// checks the kind Failure gives the result.
func TestFailureKinds(t *testing.T) {
	tests := []struct {
		name string
		f    func(context.Context) probes.Result
		want probes.FailureKind
	}{
		{"ok", func(context.Context) probes.Result { return probes.Result{Status: probes.StatusOK} }, probes.FailureNone},
		{"problem", func(context.Context) probes.Result { return probes.Result{Status: probes.StatusProblem} }, probes.FailureNone},
		{"panic", func(context.Context) probes.Result { panic("boom") }, probes.FailurePanic},
		{"timeout", func(ctx context.Context) probes.Result {
			<-ctx.Done()
			return probes.Result{Status: probes.StatusUnknown, Reason: "Gave up"}
		}, probes.FailureTimeout},
		{"no status", func(context.Context) probes.Result { return probes.Result{} }, probes.FailureInvalid},
		{"invalid status", func(context.Context) probes.Result { return probes.Result{Status: "Maybe"} }, probes.FailureInvalid},
		{"read error", func(context.Context) probes.Result {
			return probes.Result{Status: probes.StatusUnknown, Reason: probes.ReasonReadError}
		}, probes.FailureRead},
		{"own unknown", func(context.Context) probes.Result {
			return probes.Result{Status: probes.StatusUnknown, Reason: "NVMLError"}
		}, probes.FailureOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := probes.RunOnce(context.Background(), probeFunc{tt.name, tt.f}, 50*time.Millisecond, probes.RealClock{})
			if got := probes.Failure(res); got != tt.want {
				t.Errorf("Failure(%+v) = %q, want %q", res, got, tt.want)
			}
		})
	}
}

// observed records ProbeRan calls.
type observed struct {
	mu   sync.Mutex
	runs map[string][]probes.FailureKind
}

func (o *observed) ProbeRan(probe string, d time.Duration, failure probes.FailureKind) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.runs[probe] = append(o.runs[probe], failure)
}

// TestRunnerObserver checks that the runner tells its Observer about every
// result, with the failure kind, and the duration the result carries.
func TestRunnerObserver(t *testing.T) {
	obs := &observed{runs: map[string][]probes.FailureKind{}}
	panicky := probeFunc{"panicky", func(context.Context) probes.Result { panic("boom") }}
	r, err := probes.NewRunner([]probes.Entry{
		{Probe: ok("fine"), Interval: time.Hour, Timeout: time.Minute},
		{Probe: panicky, Interval: time.Hour, Timeout: time.Minute},
	}, probes.RunnerOptions{Jitter: -1, Observer: obs, Clock: probestest.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	results := make(chan probes.Result, 2)
	done := make(chan struct{})
	go func() { r.Run(ctx, func(res probes.Result) { results <- res }); close(done) }()
	for range 2 {
		select {
		case <-results:
		case <-time.After(failAfter):
			t.Fatal("no result")
		}
	}
	cancel()
	<-done
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if got := obs.runs["fine"]; len(got) != 1 || got[0] != probes.FailureNone {
		t.Errorf("fine: observed %v, want one run without failure", got)
	}
	if got := obs.runs["panicky"]; len(got) != 1 || got[0] != probes.FailurePanic {
		t.Errorf("panicky: observed %v, want one panic", got)
	}
}
