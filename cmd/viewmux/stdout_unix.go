//go:build unix

package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// takeStdout returns the process's stdout for the caller's exclusive use
// and points file descriptor 1 (and so os.Stdout) at stderr. The returned
// descriptor is close-on-exec, so upstream children never hold the client's
// pipe open.
func takeStdout() (*os.File, error) {
	fd, err := unix.FcntlInt(uintptr(unix.Stdout), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("stdio: duplicating stdout: %w", err)
	}
	if err := unix.Dup2(unix.Stderr, unix.Stdout); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stdio: redirecting stdout to stderr: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/stdout"), nil
}
