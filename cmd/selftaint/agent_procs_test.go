package main

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestAgentMaxProcs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    map[string]string
		want   int
		wantOK bool
	}{
		{name: "unset: one P", env: nil, want: 1, wantOK: true},
		{name: "operator's GOMAXPROCS wins", env: map[string]string{"GOMAXPROCS": "4"}, want: 0, wantOK: false},
		{name: "operator's GOMAXPROCS=1 is theirs too", env: map[string]string{"GOMAXPROCS": "1"}, want: 0, wantOK: false},
		{name: "GOGC is not GOMAXPROCS", env: map[string]string{"GOGC": "100"}, want: 1, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := agentMaxProcs(func(k string) string { return tc.env[k] })
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("agentMaxProcs() = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestTuneAgentRuntimeOnlyInMain: the agent sets GOMAXPROCS and the GC
// percent only in a process of its own (main's context), never in a test
// process that runs it with run("agent").
func TestTuneAgentRuntimeOnlyInMain(t *testing.T) {
	for _, k := range []string{"GOMAXPROCS", "GOGC", "GOMEMLIMIT"} {
		t.Setenv(k, "")
	}
	prevProcs := runtime.GOMAXPROCS(2)
	prevGC := debug.SetGCPercent(100)
	t.Cleanup(func() {
		runtime.GOMAXPROCS(prevProcs)
		debug.SetGCPercent(prevGC)
	})

	tuneAgentRuntime(context.Background())
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Errorf("without main's mark: GOMAXPROCS %d, want it left at 2", got)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("without main's mark: GC percent %d, want it left at 100", got)
	}

	tuneAgentRuntime(withRuntimeTuning(context.Background()))
	if got := runtime.GOMAXPROCS(0); got != defaultAgentMaxProcs {
		t.Errorf("in main: GOMAXPROCS %d, want %d", got, defaultAgentMaxProcs)
	}
	if got := debug.SetGCPercent(100); got != defaultAgentGCPercent {
		t.Errorf("in main: GC percent %d, want %d", got, defaultAgentGCPercent)
	}
}
