package bounds

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestOversizeResultBesideAnotherSession: on a shared upstream, a
// result over max_message_bytes fails only the call it answers, telling
// its client the result is too large, while another session's call in
// flight on the same connection succeeds and the connection stays up.
func TestOversizeResultBesideAnotherSession(t *testing.T) {
	t.Run("stdio", func(t *testing.T) {
		oversizeBesideAnotherSession(t, itest.DemoUpstream(t, "st")+"max_message_bytes = 65536\n")
	})
	// The same on a shared streamable HTTP upstream (an mcp-go server):
	// before viewmux spoke HTTP itself, the call failed with mcp-go's
	// decoding error, not "too large".
	t.Run("streamable HTTP", func(t *testing.T) {
		srv := server.NewMCPServer("st", "1", server.WithToolCapabilities(false))
		srv.AddTool(mcp.NewTool("echo", mcp.WithString("text")), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(req.GetString("text", "")), nil
		})
		srv.AddTool(mcp.NewTool("slow_count", mcp.WithNumber("count"), mcp.WithNumber("interval_ms")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-time.After(time.Duration(req.GetFloat("count", 1)*req.GetFloat("interval_ms", 100)) * time.Millisecond):
				return mcp.NewToolResultText("counted"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		up := httptest.NewServer(server.NewStreamableHTTPServer(srv))
		t.Cleanup(up.Close)
		oversizeBesideAnotherSession(t, fmt.Sprintf("[upstreams.st]\nurl = %q\nmax_message_bytes = 65536\n", up.URL+"/mcp"))
	})
}

func oversizeBesideAnotherSession(t *testing.T, cfg string) {
	m := itest.StartMux(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, _ := itest.EraConnect(t, ctx, m.URL())
	b, _ := itest.EraConnect(t, ctx, m.URL())
	for {
		list, err := a.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Tools) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	itest.EraCall(t, ctx, a, "st__echo", map[string]any{"text": "small"}, nil)

	other := make(chan string, 1)
	go func() {
		res, err := b.CallTool(ctx, itest.EraRequestOf("st__slow_count", map[string]any{"count": 5, "interval_ms": 100}, nil))
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

	res, err := a.CallTool(ctx, itest.EraRequestOf("st__echo", map[string]any{"text": strings.Repeat("z", 100_000)}, nil))
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
	if !strings.Contains(msg, "too large") || !strings.Contains(msg, "st") || !strings.Contains(msg, "65536") {
		t.Errorf("the oversize call failed with %q, want it to say the result is too large, naming the upstream and the limit", msg)
	}
	if got := <-other; got != "" {
		t.Errorf("the other session's call failed: %s", got)
	}
	if got := itest.EraCall(t, ctx, a, "st__echo", map[string]any{"text": "after"}, nil); got != "after" {
		t.Errorf("echo after the oversize result = %q", got)
	}
	if s := m.Stderr(); strings.Contains(s, "upstream down") {
		t.Errorf("the connection went down:\n%s", s)
	}
}
