//go:build unix

package bounds

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// The bounds of docs/operations.md#limits against the real binary, asserted by structure,
// not by timing: sessions never exceed max_sessions, distinct narrowings
// keep at most the cache's filters, an oversized header is refused, and
// slow bodies and idle connections are closed. integration/memload
// measures what they cost.

// limitsConfig is one recorder upstream under small bounds.
func limitsConfig(rec *itest.Recorder) string {
	return fmt.Sprintf(`[server]
max_sessions = 4
max_sessions_per_caller = 4 # every client here is one loopback caller
read_timeout = "1s"

[upstreams.rec]
url = %s
`, itest.TomlString(rec.URL))
}

// TestLimits is not parallel: its read_timeout is 1s, and beside the
// slow-reader test's floods a raw session's notifications/initialized once
// came after it, so the session had expired.
func TestLimits(t *testing.T) {
	rec := itest.StartRecorder(t, "rec", false)
	mux := itest.StartMux(t, limitsConfig(rec))
	url := mux.URL()

	t.Run("max_sessions", func(t *testing.T) {
		var open []*itest.RawSession
		for range 4 {
			open = append(open, itest.OpenRawSession(t, url, nil))
		}
		if n := itest.Scrape(t, mux).Gauge(t, "viewmux_open_sessions"); n != 4 {
			t.Fatalf("viewmux_open_sessions = %v with 4 sessions open", n)
		}
		for i := range 3 {
			r := itest.RawInitialize(t, url, nil)
			if r.Status != http.StatusServiceUnavailable || r.Msg == nil || r.Msg.Error == nil ||
				!strings.Contains(r.Msg.Error.Message, "server.max_sessions (4)") || string(r.Msg.ID) != "1" {
				t.Fatalf("initialize %d over max_sessions: %s; want 503 with a JSON-RPC error naming server.max_sessions", i+5, r)
			}
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				t.Fatalf("a refused initialize got session %q", id)
			}
		}
		// The other doors share the count.
		ws, resp, err := dialRecWS(mux)
		if err == nil {
			ws.CloseNow()
			t.Fatal("a websocket was accepted over max_sessions")
		}
		if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("websocket over max_sessions: %v, %v; want 503 before the upgrade", resp, err)
		}
		if code, body := rawGet(t, "http://"+mux.Addr+"/sse"); code != http.StatusServiceUnavailable || !strings.Contains(body, "max_sessions") {
			t.Fatalf("/sse over max_sessions: %d %s", code, body)
		}
		if n := itest.Scrape(t, mux).Gauge(t, "viewmux_open_sessions"); n != 4 {
			t.Fatalf("viewmux_open_sessions = %v after the refusals, want 4", n)
		}
		// A session that ends gives its slot back.
		del, err := http.NewRequest(http.MethodDelete, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		del.Header.Set("Mcp-Session-Id", open[0].ID)
		del.Header.Set("Mcp-Protocol-Version", itest.RawProtocolVersion)
		dr, err := itest.RawClient.Do(del)
		if err != nil {
			t.Fatal(err)
		}
		dr.Body.Close()
		if dr.StatusCode != http.StatusOK {
			t.Fatalf("DELETE of a session: HTTP %d", dr.StatusCode)
		}
		s := itest.OpenRawSession(t, url, nil)
		for _, s := range append(open[1:], s) {
			if r := s.Post(t, "", nil, itest.ToolsListBody(2)); r.Status != http.StatusOK || r.Msg == nil || r.Msg.Error != nil {
				t.Fatalf("tools/list on a live session: %s", r)
			}
		}
		for _, s := range append(open[1:], s) {
			itest.DeleteSession(t, s)
		}
	})

	t.Run("a session that never initializes expires after read_timeout", func(t *testing.T) {
		r := itest.RawInitialize(t, url, nil)
		id := r.Header.Get("Mcp-Session-Id")
		if r.Status != http.StatusOK || id == "" {
			t.Fatalf("initialize: %s", r)
		}
		itest.WaitUntil(t, 30*time.Second, "the uninitialized session to expire", func() bool {
			return itest.Scrape(t, mux).Gauge(t, "viewmux_open_sessions") == 0
		})
		s := &itest.RawSession{URL: url, ID: id}
		if r := s.Post(t, "", nil, itest.ToolsListBody(2)); r.Status != http.StatusNotFound {
			t.Fatalf("tools/list on the expired session: %s, want 404", r)
		}
	})

	t.Run("distinct narrowings keep at most the cache's filters", func(t *testing.T) {
		const n = 600
		refused := 0
		for i := range n {
			params := itest.WithModernMeta(`{"name":"rec__nope","arguments":{}}`)
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + params + `}`
			h := map[string]string{mcp.HeaderProtocolVersion: mcp.ProtocolVersion20260728}
			for k, v := range mcp.StandardHeaders(mcp.ProtocolVersion20260728, mcp.MethodToolsCall, json.RawMessage(params)) {
				h[k] = v
			}
			r := itest.RawPost(t, fmt.Sprintf("%s?tools=t%d", url, i), h, body)
			if r.Msg != nil && r.Msg.Error != nil && strings.Contains(r.Msg.Error.Message, "Tool not found") {
				refused++
			}
		}
		if refused != n {
			t.Fatalf("%d of %d calls of an unknown tool were answered Tool not found", refused, n)
		}
		// 256 cached narrowings (filter.NarrowedCap) plus the default view's.
		if got := itest.Scrape(t, mux).Gauge(t, "viewmux_filter_instances"); got > 257 {
			t.Fatalf("viewmux_filter_instances = %v after %d distinct ?tools=, want at most 257", got, n)
		}
	})

	t.Run("a 500 KB narrowing header is refused", func(t *testing.T) {
		c, err := net.Dial("tcp", mux.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		go func() {
			fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nMcp-Tools: %s\r\nContent-Length: %d\r\n\r\n%s",
				mux.Addr, strings.Repeat("a", 500_000), len(itest.InitializeBody()), itest.InitializeBody())
		}()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a 500 KB header: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge && resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("500 KB Mcp-Tools header: HTTP %d, want 431 or 400", resp.StatusCode)
		}
	})

	t.Run("a slow body and an idle connection are closed", func(t *testing.T) {
		for _, slow := range []bool{true, false} {
			c, err := net.Dial("tcp", mux.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if slow {
				fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", mux.Addr)
			} else {
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", mux.Addr)
			}
			// read_timeout is 1s; only a connection held open this long fails.
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("slow body %v: viewmux still held the connection 20s later (read_timeout = 1s)", slow)
			}
		}
	})
}

// dialRecWS opens a websocket to mux's /ws with subprotocol mcp.
func dialRecWS(mux *itest.Mux) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return websocket.Dial(ctx, "ws://"+mux.Addr+"/ws", &websocket.DialOptions{Subprotocols: []string{"mcp"}})
}

// rawGet GETs url and returns the status and body.
func rawGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := itest.RawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}
