//go:build unix

package fidelity

import (
	"os/exec"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// The mcp-go kinds of the matrix run ./fidelity/mcpgopeer, the fidelity
// mcp-go server, as a process of its own: over stdio as viewmux's child,
// or on a loopback port for streamable HTTP and legacy SSE.

// fidMcpGoPeer returns the built mcpgopeer.
func fidMcpGoPeer(t *testing.T) string {
	t.Helper()
	return itest.Fixture(t, "./fidelity/mcpgopeer")
}

// startFidMcpGo serves mcpgopeer in mode ("http" or "sse") on a free
// loopback port until cleanup and returns that host:port.
func startFidMcpGo(t *testing.T, mode string) string {
	t.Helper()
	bin := fidMcpGoPeer(t)
	return itest.StartLoopbackServer(t, "mcpgopeer "+mode,
		func(addr string) *exec.Cmd { return exec.Command(bin, mode, addr) },
		func(addr string, exited <-chan struct{}) error {
			return itest.WaitAccepting(addr, exited, 20*time.Second)
		})
}

// startFidMcpGoHTTP serves the mcp-go fidelity server over streamable HTTP
// and returns its MCP endpoint.
func startFidMcpGoHTTP(t *testing.T) string {
	t.Helper()
	return "http://" + startFidMcpGo(t, "http") + "/mcp"
}

// startFidMcpGoSSE serves the mcp-go fidelity server over legacy SSE and
// returns its SSE endpoint.
func startFidMcpGoSSE(t *testing.T) string {
	t.Helper()
	return "http://" + startFidMcpGo(t, "sse") + "/sse"
}
