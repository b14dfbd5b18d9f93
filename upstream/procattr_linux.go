package upstream

import "syscall"

// childProcAttr puts a stdio child in a process group of its own (its id is
// the child's pid, see process.pgid) and has the kernel SIGKILL it if viewmux
// dies first (Pdeathsig; strictly, if the thread that forked it exits, which
// the Go runtime does not do to threads it did not lock).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
