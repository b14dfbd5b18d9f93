//go:build unix

package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// startEverythingSSE starts the reference server-everything in its legacy
// HTTP+SSE mode (protocol 2024-11-05: GET /sse, POST /message) on a free
// port and returns its SSE URL (http://127.0.0.1:PORT/sse) once the port
// accepts connections. Like the streamable HTTP mode it takes its port from
// PORT only.
func startEverythingSSE(t *testing.T) string {
	t.Helper()
	requireNode(t)
	addr := startLoopbackServer(t, "server-everything (sse)",
		func(addr string) *exec.Cmd {
			_, port, _ := net.SplitHostPort(addr)
			cmd := exec.Command(harness.node, everythingEntry(), "sse")
			cmd.Env = append(envWithout(os.Environ(), "PORT", markerEnv), "PORT="+port)
			return cmd
		},
		func(addr string, exited <-chan struct{}) error { return waitAccepting(addr, exited, 20*time.Second) })
	return "http://" + addr + "/sse"
}

// protoEverySSEPerSession mounts server-everything over legacy HTTP+SSE
// (at url) as "everysse", one connection per client session: on the one
// event stream nothing ties a server→client request to a call.
func protoEverySSEPerSession(url string) string {
	return fmt.Sprintf(`
[upstreams.everysse]
transport = "sse"
url = %s
required = true
scope = "session"
`, tomlString(url))
}

// TestProtocolRootsSSE is TestProtocolRoots through an SSE upstream: two
// clients with different roots call get-roots-list at the same time, and
// each is asked for, and gets, its own roots.
func TestProtocolRootsSSE(t *testing.T) {
	requireNode(t)
	mux := startMux(t, protoConfig(protoEverySSEPerSession(startEverythingSSE(t))))
	waitForTools(t, mux.URL(), nil, []string{"everysse__get-roots-list"}, 30*time.Second)

	roots := [][]map[string]any{
		{{"uri": "file:///work/alpha-project", "name": "Alpha"}},
		{{"uri": "file:///srv/beta-data", "name": "Beta"}, {"uri": "file:///srv/beta-logs", "name": "Beta logs"}},
	}
	var clients []any
	for _, r := range roots {
		clients = append(clients, map[string]any{"prefix": "everysse__", "tool": "get-roots-list", "roots": r})
	}
	var res struct{ Calls []protoCall }
	out := runProtocol(t, "calls", map[string]any{"url": mux.URL(), "clients": clients}, &res)
	for i, r := range roots {
		text := res.Calls[i].call(t, fmt.Sprintf("client %d", i)).Text()
		var lines []string
		for j, root := range r {
			lines = append(lines, fmt.Sprintf("%d. %s\n   URI: %s", j+1, root["name"], root["uri"]))
		}
		want := fmt.Sprintf("Current MCP Roots (%d total):\n\n%s\n\n", len(r), strings.Join(lines, "\n\n"))
		if !strings.HasPrefix(text, want) {
			t.Errorf("client %d got %q, want its own roots: %q…", i, text, want)
		}
		if got := protoOf(out.Clients[i].Requests, "roots/list"); len(got) == 0 {
			t.Errorf("client %d was never asked for its roots", i)
		}
	}
}
