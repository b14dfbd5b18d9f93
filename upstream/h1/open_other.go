//go:build !unix

package h1

// open reports true: without a non-blocking peek, a connection the
// upstream closed shows when it is used, and RoundTrip sends the request
// again on a new one.
func (pc *persistConn) open() bool { return true }
