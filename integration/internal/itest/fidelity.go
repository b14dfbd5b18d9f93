//go:build unix

package itest

import (
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// StartEverythingSSE starts server-everything in legacy SSE mode on a
// free port and returns its SSE endpoint.
func StartEverythingSSE(t *testing.T) string {
	t.Helper()
	RequireNode(t)
	addr := StartLoopbackServer(t, "server-everything (sse)",
		func(addr string) *exec.Cmd {
			_, port, _ := net.SplitHostPort(addr)
			cmd := exec.Command(Harness.Node, EverythingEntry(), "sse")
			cmd.Env = append(EnvWithout(os.Environ(), "PORT", MarkerEnv), "PORT="+port)
			return cmd
		},
		func(addr string, exited <-chan struct{}) error { return WaitAccepting(addr, exited, 20*time.Second) })
	return "http://" + addr + "/sse"
}
