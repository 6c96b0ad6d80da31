//go:build unix && !linux

package testcp

import "syscall"

// sysProcAttr puts a child in its own process group so teardown can signal
// everything it spawned. (Only Linux has Pdeathsig.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
