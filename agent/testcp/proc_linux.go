//go:build linux

package testcp

import "syscall"

// sysProcAttr puts a child in its own process group, so teardown can signal
// everything it spawned, and has the kernel kill it if the test binary dies
// without running its cleanups (a panic, a timeout, kill -9).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
