//go:build !unix

package testcp

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup kills p; without process groups there is no gentler option.
func signalGroup(p *os.Process, _ syscall.Signal) { _ = p.Kill() }

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)
