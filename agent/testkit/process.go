package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a program a benchmark runs beside the test (an agent binary,
// node-problem-detector), stopped and started again as it needs, its
// output in a log file of each start.
type Process struct {
	// Name names its logs (Dir/Name-N.log) and its failures.
	Name string
	// Argv is the command and its arguments.
	Argv []string
	// Dir is where its logs go.
	Dir string

	cmd     *exec.Cmd
	exited  chan struct{}
	starts  int
	logPath string
	cleanup bool
}

// Start runs the process; the end of the test stops it.
func (p *Process) Start(t testing.TB) {
	t.Helper()
	p.starts++
	p.logPath = filepath.Join(p.Dir, p.Name+"-"+strconv.Itoa(p.starts)+".log")
	f, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with the test binary should it die without its cleanups
	// (a change of user, as setpriv makes, drops this).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("starting %s (%s): %v", p.Name, p.Argv[0], err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	if !p.cleanup {
		p.cleanup = true
		t.Cleanup(p.Stop)
	}
}

// Stop ends the process (SIGTERM, SIGKILL after 10 s); a no-op for one
// already stopped.
func (p *Process) Stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// Restart stops the process and starts it again.
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	p.Stop()
	p.Start(t)
}

// Pid is the running process's id (of the program it ends up running:
// unshare, sh and setpriv exec it in the same process).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Alive is nil while the process runs, else an error with how it ended
// and the end of its log.
func (p *Process) Alive() error {
	if p.cmd == nil {
		return fmt.Errorf("%s is stopped", p.Name)
	}
	select {
	case <-p.exited:
		out, _ := os.ReadFile(p.logPath)
		return fmt.Errorf("%s exited (%v); the end of its log (%s):\n%s", p.Name, p.cmd.ProcessState, p.logPath, Tail(string(out), 4000))
	default:
		return nil
	}
}

// Log is what the current start wrote so far.
func (p *Process) Log() string {
	out, _ := os.ReadFile(p.logPath)
	return string(out)
}

// ProcUsage is what a process used so far, all its threads, from /proc.
type ProcUsage struct {
	// Threads is each thread's run time (the first field of
	// /proc/PID/task/TID/schedstat, nanoseconds), by thread id.
	Threads map[string]time.Duration
	// Voluntary and Involuntary are each thread's context switches
	// (/proc/PID/task/TID/status), by thread id.
	Voluntary, Involuntary map[string]int64
	// StatSeconds is utime + stime of /proc/PID/stat (1/100 s ticks).
	StatSeconds float64
}

// ReadUsage reads pid's ProcUsage. A thread that ends while it reads is
// left out.
func ReadUsage(pid int) (ProcUsage, error) {
	proc := "/proc/" + strconv.Itoa(pid)
	tasks, err := os.ReadDir(proc + "/task")
	if err != nil {
		return ProcUsage{}, err
	}
	u := ProcUsage{Threads: map[string]time.Duration{}, Voluntary: map[string]int64{}, Involuntary: map[string]int64{}}
	for _, t := range tasks {
		raw, err := os.ReadFile(proc + "/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(raw))
		if len(f) != 3 {
			return ProcUsage{}, fmt.Errorf("unexpected schedstat %q", raw)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return ProcUsage{}, fmt.Errorf("unexpected schedstat %q", raw)
		}
		u.Threads[t.Name()] = time.Duration(ns)
		st, err := statusFields(proc + "/task/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		u.Voluntary[t.Name()] = st["voluntary_ctxt_switches"]
		u.Involuntary[t.Name()] = st["nonvoluntary_ctxt_switches"]
	}
	raw, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return ProcUsage{}, err
	}
	stat := string(raw)
	// The fields after the command name, which may hold spaces: state is
	// the first, utime the 12th, stime the 13th.
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) < 13 {
		return ProcUsage{}, fmt.Errorf("unexpected /proc/PID/stat %q", stat)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return ProcUsage{}, fmt.Errorf("unexpected /proc/PID/stat %q", stat)
	}
	const userHZ = 100 // USER_HZ on every Linux architecture Go supports
	u.StatSeconds = (utime + stime) / userHZ
	return u, nil
}

// UsageDelta is what a process used between two readings.
type UsageDelta struct {
	// CPU is the threads' run time (a thread started between the two
	// counts from 0; one that ended is lost: Go runtimes keep theirs).
	CPU time.Duration
	// StatSeconds is the same from /proc/PID/stat, to 1/100 s.
	StatSeconds float64
	// Voluntary and Involuntary are the context switches.
	Voluntary, Involuntary int64
}

// Since is what the process used from before to u.
func (u ProcUsage) Since(before ProcUsage) UsageDelta {
	var d UsageDelta
	for tid, ns := range u.Threads {
		d.CPU += ns - before.Threads[tid]
	}
	for tid, n := range u.Voluntary {
		d.Voluntary += n - before.Voluntary[tid]
	}
	for tid, n := range u.Involuntary {
		d.Involuntary += n - before.Involuntary[tid]
	}
	d.StatSeconds = u.StatSeconds - before.StatSeconds
	return d
}

// ReadMemory is /proc/PID/status's memory lines in KiB (VmRSS, RssAnon,
// RssFile, RssShmem, VmHWM...), by name.
func ReadMemory(pid int) (map[string]int64, error) {
	return statusFields("/proc/" + strconv.Itoa(pid) + "/status")
}

// statusFields are the numeric fields of a /proc status file (for sizes,
// the number of KiB).
func statusFields(path string) (map[string]int64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}
