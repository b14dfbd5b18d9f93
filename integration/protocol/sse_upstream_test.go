//go:build unix

package protocol

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

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
`, itest.TomlString(url))
}

// TestProtocolRootsSSE is TestProtocolRoots through an SSE upstream: two
// clients with different roots call get-roots-list at the same time, and
// each is asked for, and gets, its own roots.
func TestProtocolRootsSSE(t *testing.T) {
	itest.RequireNode(t)
	mux := itest.StartMux(t, protoConfig(protoEverySSEPerSession(itest.StartEverythingSSE(t))))
	itest.WaitForTools(t, mux.URL(), nil, []string{"everysse__get-roots-list"}, 30*time.Second)

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

// TestOversizeResultBesideAnotherSessionSSE: on a shared SSE upstream
// (server-everything), a result over max_message_bytes fails only the
// call it answers, telling its client the result is too large, while
// another session's call in flight on the same connection succeeds and
// the connection stays up.
func TestOversizeResultBesideAnotherSessionSSE(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	m := itest.StartMux(t, protoConfig(fmt.Sprintf(`
[upstreams.everysse]
transport = "sse"
url = %s
required = true
max_message_bytes = 65536
`, itest.TomlString(itest.StartEverythingSSE(t)))))
	itest.WaitForTools(t, m.URL(), nil, []string{"everysse__echo", "everysse__trigger-long-running-operation"}, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, _ := itest.EraConnect(t, ctx, m.URL())
	b, _ := itest.EraConnect(t, ctx, m.URL())
	if got := itest.EraCall(t, ctx, a, "everysse__echo", map[string]any{"message": "small"}, nil); got != "Echo: small" {
		t.Fatalf("echo = %q", got)
	}

	other := make(chan string, 1)
	go func() {
		res, err := b.CallTool(ctx, itest.EraRequestOf("everysse__trigger-long-running-operation", map[string]any{"duration": 1, "steps": 5}, nil))
		switch {
		case err != nil:
			other <- err.Error()
		case res.IsError:
			other <- "isError result"
		default:
			other <- ""
		}
	}()
	time.Sleep(100 * time.Millisecond) // let b's call reach the upstream

	res, err := a.CallTool(ctx, itest.EraRequestOf("everysse__echo", map[string]any{"message": strings.Repeat("z", 200_000)}, nil))
	var msg string
	switch {
	case err != nil:
		msg = err.Error()
	case res.IsError && len(res.Content) > 0:
		if tc, ok := mcp.AsTextContent(res.Content[0]); ok {
			msg = tc.Text
		}
	default:
		t.Fatal("the oversize result was delivered")
	}
	if !strings.Contains(msg, "too large") || !strings.Contains(msg, "everysse") || !strings.Contains(msg, "65536") {
		t.Errorf("the oversize call failed with %q, want it to say the result is too large, naming the upstream and the limit", msg)
	}
	if got := <-other; got != "" {
		t.Errorf("the other session's call failed: %s", got)
	}
	if got := itest.EraCall(t, ctx, a, "everysse__echo", map[string]any{"message": "after"}, nil); got != "Echo: after" {
		t.Errorf("echo after the oversize result = %q", got)
	}
	if s := m.Stderr(); strings.Contains(s, "upstream down") {
		t.Errorf("the connection went down:\n%s", s)
	}
}
