//go:build unix

package probes_test

import (
	"context"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

// TestRunnerHungSyscallOnOneP: the agent runs on one P (GOMAXPROCS 1), and
// a probe stuck in a system call (a statfs on a hung NFS mount; an NVML cgo
// call enters the runtime the same way, entersyscall) does not stall the
// others: the runtime's sysmon hands the P to another thread. Here a probe
// blocks in a raw read(2) of a pipe no one writes, and another probe of a
// short interval keeps reporting meanwhile.
func TestRunnerHungSyscallOnOneP(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	entered := make(chan struct{})
	var once sync.Once
	hung := probestest.FuncProbe{ProbeName: "hung", Func: func(context.Context) probes.Result {
		once.Do(func() { close(entered) })
		var b [1]byte
		_, _ = syscall.Read(fds[0], b[:]) // blocks in the kernel until the test writes
		return probes.Result{Status: probes.StatusOK, Reason: "Fine"}
	}}
	h := start(t, []probes.Entry{
		{Probe: hung, Interval: time.Hour, Timeout: 59 * time.Minute},
		{Probe: ok("b"), Interval: 10 * time.Millisecond, Timeout: 5 * time.Millisecond},
	}, probes.RunnerOptions{Jitter: -1, Clock: probes.RealClock{}}, nil)
	defer func() {
		h.cancel()
		_, _ = syscall.Write(fds[1], []byte{1}) // lets the hung probe return
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the hung probe did not start in 30 s")
	}
	time.Sleep(10 * time.Millisecond) // into read(2)
	for len(h.results) > 0 {
		<-h.results // count only runs while the other is stuck
	}
	const want = 5
	got := 0
	deadline := time.After(30 * time.Second)
	for got < want {
		select {
		case res := <-h.results:
			if res.Probe == "b" {
				got++
			}
		case <-deadline:
			t.Fatalf("with one P and a probe stuck in a system call, b reported %d runs in 30 s, want %d", got, want)
		}
	}
}
