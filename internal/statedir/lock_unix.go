//go:build unix

package statedir

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Lock takes an exclusive advisory lock on the file named name (created
// 0600 if missing), waiting for another holder, process or goroutine, to
// let go. Hold it around a read-modify-write of a state file that more
// than one process writes; call the returned func to release it.
func (d Dir) Lock(name string) (unlock func(), err error) {
	if err := d.Ensure(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(d.File(name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock %s: %w", d.File(name), err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("state lock %s: %w", d.File(name), err)
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}
