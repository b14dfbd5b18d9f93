//go:build linux

package bounds

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// slowAnswer is the size of each result in the slow-reader tests: what the
// measurement that found the problem used (24 unread 8 MB calls on /mcp
// took viewmux from 21 to 377 MB; 64 on one websocket, to about 0.9 GB).
const slowAnswer = 8_000_000

// TestSlowReadersAreBounded: a client that sends many calls with large
// answers and reads none of them costs viewmux no more than the README's
// stated bound per session: server.max_pending_bytes, plus the answers of
// the calls it already had in flight when it stopped reading (at most 16),
// each of which viewmux may hold a few copies of until results stream. The
// calls past the bound are refused before they reach the upstream.
func TestSlowReadersAreBounded(t *testing.T) {
	t.Parallel()
	var served atomic.Int64
	srv := server.NewMCPServer("big", "1", server.WithToolCapabilities(false))
	srv.AddTool(mcp.NewTool("big", mcp.WithReadOnlyHintAnnotation(true)), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		served.Add(1)
		return mcp.NewToolResultText(strings.Repeat("x", slowAnswer)), nil
	})
	up := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(up.Close)
	mux := itest.StartMux(t, fmt.Sprintf("[upstreams.up]\nurl = %q\nrequired = true\n", up.URL+"/mcp"))
	call := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"up__big","arguments":{}}}`, id)
	}
	// The bound of one session, with viewmux holding up to three copies of
	// each answer in flight (the upstream's body, the decoded result, the
	// framed answer) and one of what it holds for the client.
	const perCallCopies = 3
	bound := func(inflight int64) int64 { return 8<<20 + inflight*perCallCopies*slowAnswer }

	t.Run("mcp", func(t *testing.T) {
		id := initMCPSession(t, mux.URL())
		resetPeak(t, mux.PID())
		before := itest.ProcBytes(t, mux.PID(), "VmRSS")
		served0 := served.Load()
		for i := range 24 {
			c := rawUnreadPost(t, mux.Addr, id, call(100+i))
			defer c.Close()
			// One after another, as a client pipelining calls would send
			// them; the next goes once this one is answered or refused.
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second)
		calls := served.Load() - served0
		growth := itest.ProcBytes(t, mux.PID(), "VmHWM") - before
		t.Logf("/mcp: 24 unread calls of %d bytes: %d reached the upstream; peak RSS grew %.1f MB (bound %.1f MB)", slowAnswer, calls, mb(growth), mb(bound(calls)))
		if calls >= 24 {
			t.Fatalf("all %d calls reached the upstream: none was refused while the session held unread answers", calls)
		}
		if growth > bound(calls) {
			t.Fatalf("peak RSS grew %.1f MB, over the bound of %.1f MB for %d calls in flight", mb(growth), mb(bound(calls)), calls)
		}
	})

	t.Run("ws", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws://"+mux.Addr+"/ws", &websocket.DialOptions{Subprotocols: []string{"mcp"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		write := func(s string) {
			if err := c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
				t.Fatal(err)
			}
		}
		write(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow","version":"1"}}}`)
		if _, _, err := c.Read(ctx); err != nil {
			t.Fatal(err)
		}
		write(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		resetPeak(t, mux.PID())
		before := itest.ProcBytes(t, mux.PID(), "VmRSS")
		served0 := served.Load()
		for i := range 64 {
			write(call(100 + i))
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second)
		calls := served.Load() - served0
		growth := itest.ProcBytes(t, mux.PID(), "VmHWM") - before
		t.Logf("/ws: 64 unread calls of %d bytes: %d reached the upstream; peak RSS grew %.1f MB (bound %.1f MB)", slowAnswer, calls, mb(growth), mb(bound(calls)))
		if calls >= 64 {
			t.Fatalf("all %d calls reached the upstream: none was refused while the session held unread answers", calls)
		}
		if growth > bound(calls) {
			t.Fatalf("peak RSS grew %.1f MB, over the bound of %.1f MB for %d calls in flight", mb(growth), mb(bound(calls)), calls)
		}
	})
}

func mb(n int64) float64 { return float64(n) / 1e6 }

// initMCPSession opens a legacy /mcp session and returns its id.
func initMCPSession(t *testing.T, url string) string {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, id)
	}
	note, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	note.Header.Set("Content-Type", "application/json")
	note.Header.Set("Accept", "application/json, text/event-stream")
	note.Header.Set("Mcp-Session-Id", id)
	note.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if resp, err := http.DefaultClient.Do(note); err == nil {
		resp.Body.Close()
	}
	return id
}

// rawUnreadPost sends one POST /mcp on its own connection and never reads
// the answer.
func rawUnreadPost(t *testing.T, addr, session, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\n\r\n%s", addr, session, len(body), body)
	return c
}

// resetPeak sets pid's peak RSS (VmHWM) to its current RSS.
func resetPeak(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("resetting the peak RSS of viewmux: %v", err)
	}
}
