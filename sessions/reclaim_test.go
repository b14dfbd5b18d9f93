package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// reclaimUpstream is a real MCP server on a loopback listener, mounted
// with scope = "session": each tools/call of whoami answers the id of the
// upstream session it came on (one per viewmux connection), hold blocks
// until the test releases it, and the server records which of its
// sessions viewmux ended (DELETE) and how many it began.
type reclaimUpstream struct {
	url     string
	started chan struct{} // a hold call began
	release chan struct{} // closed: every hold call returns
	inits   atomic.Int64  // initialize requests

	mu    sync.Mutex
	ended []string // upstream sessions ended, in order
}

func newReclaimUpstream(t *testing.T) *reclaimUpstream {
	t.Helper()
	ru := &reclaimUpstream{started: make(chan struct{}, 8), release: make(chan struct{})}
	hooks := &server.Hooks{}
	hooks.AddBeforeInitialize(func(context.Context, any, *mcp.InitializeRequest) { ru.inits.Add(1) })
	srv := server.NewMCPServer("reclaim", "1", server.WithToolCapabilities(true), server.WithHooks(hooks))
	srv.AddTool(mcp.NewTool("whoami", mcp.WithReadOnlyHintAnnotation(true)), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(server.ClientSessionFromContext(ctx).SessionID()), nil
	})
	srv.AddTool(mcp.NewTool("hold", mcp.WithReadOnlyHintAnnotation(true)), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ru.started <- struct{}{}
		select {
		case <-ru.release:
			return mcp.NewToolResultText("released"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	mcpHandler := server.NewStreamableHTTPServer(srv)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			ru.mu.Lock()
			ru.ended = append(ru.ended, r.Header.Get(mcp.HeaderSessionID))
			ru.mu.Unlock()
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(ru.free)
	ru.url = hs.URL
	return ru
}

// free lets every hold call return; calling it again is harmless.
func (ru *reclaimUpstream) free() {
	select {
	case <-ru.release:
	default:
		close(ru.release)
	}
}

// endedSessions returns the upstream sessions ended so far, sorted.
func (ru *reclaimUpstream) endedSessions() []string {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	return slices.Sorted(slices.Values(ru.ended))
}

// reclaimConfig mounts the upstream with one connection per client
// session, and gives each of two tokens a share of 2 such connections; the
// admin's sees /metrics whole.
const reclaimConfig = `scope = "session"
[server]
max_sessions_per_caller = 16
max_children_per_caller = 2
[profiles.all]
[[auth.tokens]]
token = "tok-guest"
profiles = ["all"]
[[auth.tokens]]
token = "tok-admin"
profiles = ["all"]
admin = true
`

// TestChildShareReclaims: a caller at its share of scope = "session"
// connections (server.max_children_per_caller) that opens one more loses
// its least recently used idle one (the upstream sees that session
// ended), and the session whose connection it was keeps working: its next
// call opens a new one. Only when every one of the caller's connections
// has a call in flight is the call refused with -32000 naming the limit,
// opening nothing. Another caller's connection, idle and the oldest of
// all, is never touched.
func TestChildShareReclaims(t *testing.T) {
	ru := newReclaimUpstream(t)
	s := newServerWith(t, ru.url, reclaimConfig, Options{})
	h := s.Handler()
	ids := 100
	call := func(token, sid, tool string) rpcMsg {
		t.Helper()
		ids++
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"up__%s","arguments":{}}}`, ids, tool)
		rec := httptestDo(h, withToken(newRequest("", sid, body), token))
		var m rpcMsg
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("tools/call %s: %d %q: %v", tool, rec.Code, rec.Body, err)
		}
		return m
	}
	// whoami returns the upstream session the call of sid came on.
	whoami := func(token, sid string) string {
		t.Helper()
		m := call(token, sid, "whoami")
		var res mcp.CallToolResult
		if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || len(res.Content) != 1 {
			t.Fatalf("whoami of %s: error %+v, result %s", sid, m.Error, m.Result)
		}
		text, _ := res.Content[0].(mcp.TextContent)
		if text.Text == "" {
			t.Fatalf("whoami of %s: no upstream session in %s", sid, m.Result)
		}
		return text.Text
	}
	ended := func(want ...string) {
		t.Helper()
		want = slices.Sorted(slices.Values(want))
		waitFor(t, func() bool { return slices.Equal(ru.endedSessions(), want) }, fmt.Sprintf("the upstream sessions %v to be ended", want))
	}

	// The admin's connection is the oldest of all, and stays idle.
	admin := openAs(t, h, "tok-admin")
	adminUp := whoami("tok-admin", admin)

	// The guest opens its share and three more sessions, none ended, each
	// calling the upstream: every call succeeds, each past the share ending
	// the guest's least recently used connection.
	var guest, up []string
	for i := range 5 {
		guest = append(guest, openAs(t, h, "tok-guest"))
		up = append(up, whoami("tok-guest", guest[i]))
		if i >= 2 {
			ended(up[:i-1]...)
		}
	}
	if n := s.Aggregator().SessionConns(); n != 3 {
		t.Errorf("SessionConns = %d, want 3: the guest's share and the admin's", n)
	}

	// Least recently used, not first opened: guest 3 calls again (on its
	// connection), so guest 0's next call, which opens one anew, ends guest
	// 4's.
	if got := whoami("tok-guest", guest[3]); got != up[3] {
		t.Fatalf("guest 3's call came on upstream session %s, want its own %s", got, up[3])
	}
	again := whoami("tok-guest", guest[0])
	if again == up[0] || slices.Contains(up, again) {
		t.Fatalf("guest 0's call after its connection was reclaimed came on %s; want a new upstream session", again)
	}
	ended(up[0], up[1], up[2], up[4])

	// Both of the guest's connections busy: a third is refused, and nothing
	// is ended or opened upstream.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var held sync.WaitGroup
	for i, sid := range []string{guest[3], guest[0]} {
		req := withToken(newRequest("", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"up__hold","arguments":{}}}`, 10+i)), "tok-guest").WithContext(ctx)
		held.Go(func() { httptestDo(h, req) })
		upstreamSaw(t, ru.started, "hold to start")
	}
	inits := ru.inits.Load()
	m := call("tok-guest", guest[1], "whoami")
	if m.Error == nil || m.Error.Code != -32000 || !strings.Contains(m.Error.Message, "server.max_children_per_caller (2)") {
		t.Fatalf("the guest's call past its share, every connection busy: %+v %s; want -32000 naming server.max_children_per_caller", m.Error, m.Result)
	}
	if n := ru.inits.Load(); n != inits {
		t.Errorf("the refused call opened %d upstream sessions, want none", n-inits)
	}
	if got, want := ru.endedSessions(), slices.Sorted(slices.Values([]string{up[0], up[1], up[2], up[4]})); !slices.Equal(got, want) {
		t.Errorf("upstream sessions ended while every connection was busy: %v, want still %v", got, want)
	}

	// The other caller is untouched: its connection is the one it had,
	// and it opens another of its share while the guest is at its own.
	if got := whoami("tok-admin", admin); got != adminUp {
		t.Errorf("the admin's call came on upstream session %s, want its own %s", got, adminUp)
	}
	whoami("tok-admin", openAs(t, h, "tok-admin"))

	// Once the holds return, the guest's next call reclaims again.
	ru.free()
	held.Wait()
	whoami("tok-guest", guest[1])
	waitFor(t, func() bool { return len(ru.endedSessions()) == 5 }, "a fifth of the guest's upstream sessions to be ended")
	if got := ru.endedSessions(); slices.Contains(got, adminUp) {
		t.Errorf("upstream sessions ended: %v; want the guest's only, never the admin's %s", got, adminUp)
	}
	_, metrics := fetchStatus(t, newTestHTTP(t, h), http.MethodGet, "/metrics", map[string]string{"Authorization": "Bearer tok-admin"})
	if !strings.Contains(metrics, "\nviewmux_session_connections_reclaimed_total 5\n") {
		t.Errorf("/metrics does not count the five reclaimed connections:\n%s", metrics)
	}
}
