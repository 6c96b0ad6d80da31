package main

import "runtime"

// defaultAgentMaxProcs is the agent's GOMAXPROCS unless the operator sets
// $GOMAXPROCS: one P. The agent's work is small and mostly waiting (reads
// of /proc and /sys, the kernel log, API calls); with more than one P,
// every goroutine made runnable while the only running one is busy wakes
// another thread to run it (the runtime's wakep, a spinning M), so the
// probes due at one instant and the client's goroutines cost a handful of
// thread switches each round for no gain. With one P they run one after
// another on one thread. A blocking syscall or cgo call (a statfs on a
// hung NFS mount, an NVML call) still hands the P off to another thread
// (at once for a cgo call; within sysmon's 20 µs-10 ms for a syscall), so
// one stuck probe does not stall the rest. The cost: CPU work that would
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

// setAgentMaxProcs applies agentMaxProcs and returns what undoes it: the
// agent runs in tests' processes too (run "agent"), which get their
// GOMAXPROCS back when it returns.
func setAgentMaxProcs(getenv func(string) string) (restore func()) {
	n, ok := agentMaxProcs(getenv)
	if !ok {
		return func() {}
	}
	prev := runtime.GOMAXPROCS(n)
	return func() { runtime.GOMAXPROCS(prev) }
}
