//go:build !unix

package h1

// open reports true: without a non-blocking peek, a connection the
// upstream closed shows when it is used. A request written to it fails,
// and is not sent again, unless the connection refused its first write.
func (pc *persistConn) open() bool { return true }
