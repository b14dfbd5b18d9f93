//go:build unix && !linux

package upstream

import "syscall"

// childProcAttr puts a stdio child in a process group of its own (its id is
// the child's pid, see process.pgid). Only Linux has a parent-death signal:
// elsewhere a child outlives an viewmux that is killed without its shutdown.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
