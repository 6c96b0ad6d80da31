package main

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
)

// defaultAgentMaxProcs is the agent's GOMAXPROCS unless the operator sets
// $GOMAXPROCS: one P. The agent's work is small and mostly waiting (reads
// of /proc and /sys, the kernel log, API calls); with more than one P,
// every goroutine made runnable while the only running one is busy wakes
// another thread to run it (the runtime's wakep, a spinning M), so the
// probes due at one instant and the client's goroutines cost a handful of
// thread switches each round for no gain. With one P they run one after
// another on one thread. A blocking syscall or cgo call (a statfs on a
// hung NFS mount, an NVML call) still hands the P off to another thread
// (a cgo call enters the runtime as a syscall does, entersyscall, and
// sysmon, woken by it, retakes the P within 20 µs-10 ms), so one stuck
// probe does not stall the rest (probes TestRunnerHungSyscallOnOneP). The cost: CPU work that would
// have run in parallel (a burst of kernel lines matched while an API
// response is decoded, the garbage collector's background worker) shares
// one core. See README "Idle CPU" for the figures.
const defaultAgentMaxProcs = 1

// agentMaxProcs returns the GOMAXPROCS the agent sets at start-up, and
// whether to set one: only when the environment (getenv) does not set
// GOMAXPROCS, which is the operator's (the runtime has applied it already).
func agentMaxProcs(getenv func(string) string) (int, bool) {
	if getenv("GOMAXPROCS") != "" {
		return 0, false
	}
	return defaultAgentMaxProcs, true
}

// tuneKey marks a context whose agent may tune the process's Go runtime.
type tuneKey struct{}

// withRuntimeTuning marks ctx: main's, where the agent is the whole
// process. Tests that run the agent in their own process (run "agent")
// leave it out, so the agent never changes their GOMAXPROCS or GC percent,
// which are the whole process's and which agents running side by side in
// one test process could not each restore.
func withRuntimeTuning(ctx context.Context) context.Context {
	return context.WithValue(ctx, tuneKey{}, true)
}

// tuneAgentRuntime sets the agent's GOMAXPROCS (agentMaxProcs) and GC
// percent (agentGCPercent) where ctx allows it (withRuntimeTuning) and the
// operator's environment does not set them.
func tuneAgentRuntime(ctx context.Context) {
	if tune, _ := ctx.Value(tuneKey{}).(bool); !tune {
		return
	}
	if n, ok := agentMaxProcs(os.Getenv); ok {
		runtime.GOMAXPROCS(n)
	}
	if pct, ok := agentGCPercent(os.Getenv); ok {
		debug.SetGCPercent(pct)
	}
}
