package custom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// execPlugin runs spec.path with spec.args in a process group of its own,
// reads at most spec.maxBytes of its stdout and of its stderr and discards
// the rest (so a chatty plugin never blocks on a full pipe, nor fills
// memory), and returns once it has exited and been reaped. When its
// timeout passes, counted from the moment the process started (so the
// time a loaded machine takes to fork and exec it is not the plugin's), or
// when ctx ends first, the whole group is killed with SIGKILL. Processes
// the plugin left behind in its group are killed when it exits, so a check
// never outlives its run.
//
// The group is signalled only while the plugin itself is unreaped (alive
// or a zombie), so its process ID, which is the group's ID, cannot have
// been reused by an unrelated process group.
func execPlugin(ctx context.Context, spec execSpec) (execResult, error) {
	if err := ctx.Err(); err != nil {
		return execResult{}, err
	}
	called := time.Now()
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return execResult{}, err
	}
	defer stdoutR.Close()
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutW.Close()
		return execResult{}, err
	}
	defer stderrR.Close()

	cmd := exec.Command(spec.path, spec.args...)
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW // stdin is /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if spec.beforeStart != nil {
		spec.beforeStart()
	}
	err = cmd.Start()
	stdoutW.Close() // the plugin has its own copies now
	stderrW.Close()
	if err != nil {
		return execResult{}, err
	}
	pid := cmd.Process.Pid
	res := execResult{started: time.Now()}
	res.startTook = res.started.Sub(called)
	timeout := time.NewTimer(spec.timeout)
	defer timeout.Stop()

	var wg sync.WaitGroup
	wg.Go(func() { res.stdout = readCapped(stdoutR, spec.maxBytes) })
	wg.Go(func() { res.stderr = readCapped(stderrR, spec.maxBytes) })

	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitExited(pid)
	}()
	select {
	case <-exited:
		res.ran = time.Since(res.started)
	case <-timeout.C:
		res.ran = time.Since(res.started)
		res.timedOut = true
		// Read before the kill, while the process is still there.
		res.cpuWait = runQueueWait(pid)
		_ = unix.Kill(-pid, unix.SIGKILL)
		<-exited
	case <-ctx.Done():
		res.ran = time.Since(res.started)
		res.killed = true
		_ = unix.Kill(-pid, unix.SIGKILL)
		<-exited
	}
	// Whatever is left of the group (background children) goes too.
	_ = unix.Kill(-pid, unix.SIGKILL)

	readsDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(readsDone)
	}()
	select {
	case <-readsDone:
	case <-time.After(pipeGrace):
		// Something outside the group holds the pipes open: stop reading.
		_ = stdoutR.SetReadDeadline(time.Now())
		_ = stderrR.SetReadDeadline(time.Now())
		<-readsDone
	}

	err = cmd.Wait() // reaps the plugin
	reapGroup(pid)
	res.state = cmd.ProcessState
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return res, err
	}
	return res, nil
}

// reapGroup reaps what the plugin left in its process group once those
// processes are ours to reap: killed, they are re-parented to PID 1, and in
// a container selftaint is PID 1; without this they would stay zombies.
// Where we are not their reaper, Wait4 answers ECHILD at once.
func reapGroup(pgid int) {
	deadline := time.Now().Add(time.Second)
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-pgid, &ws, unix.WNOHANG, nil)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return // ECHILD: nothing of the group is ours
		case wpid > 0:
			continue // reaped one; look for more
		case time.Now().After(deadline):
			return
		}
		time.Sleep(10 * time.Millisecond) // still dying
	}
}

// runQueueWait returns how long process pid has waited on a run queue
// for a CPU, or 0 when that cannot be read (a kernel without schedstats,
// the process gone).
func runQueueWait(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0
	}
	return runDelay(data)
}

// waitExited blocks until process pid has exited, leaving it unreaped.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			// Any other error (ECHILD) means there is nothing to wait for.
			return
		}
	}
}

// readCapped returns the first max bytes r yields and discards the rest
// until EOF or a read error.
func readCapped(r io.Reader, max int) []byte {
	data, err := io.ReadAll(io.LimitReader(r, int64(max)))
	if err == nil {
		_, _ = io.Copy(io.Discard, r)
	}
	return data
}
