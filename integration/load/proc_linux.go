package main

import "syscall"

// childAttr makes the kernel kill viewmux if this program dies without
// running its cleanup (a crash, SIGKILL).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
