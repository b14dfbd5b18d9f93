//go:build unix

package h1

import "syscall"

// open reports whether the connection is still open for reading, without
// blocking: an idle connection has nothing to read, so data, an end of
// file or an error all mean it cannot carry a request.
func (pc *persistConn) open() bool {
	if pc.raw == nil {
		sc, ok := pc.conn.(syscall.Conn)
		if !ok {
			return true
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		pc.raw, pc.peek = raw, pc.peekFD // made once: open runs before every reuse
	}
	pc.alive = false
	return pc.raw.Read(pc.peek) == nil && pc.alive
}

// peekFD sets pc.alive to whether fd has nothing to read yet; it never
// waits.
func (pc *persistConn) peekFD(fd uintptr) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	pc.alive = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
	return true
}
