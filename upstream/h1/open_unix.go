//go:build unix

package h1

import "syscall"

// open reports whether the connection is still open for reading, without
// blocking: an idle connection has nothing to read, so data, an end of
// file or an error all mean it cannot carry a request.
func (pc *persistConn) open() bool {
	sc, ok := pc.conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = n < 0 && (rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK)
		return true // never wait
	})
	return err == nil && alive
}
