package sessions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// wsPeer is a websocket test client speaking raw frames.
type wsPeer struct{ c *websocket.Conn }

func (p *wsPeer) send(t *testing.T, raw string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.c.Write(ctx, websocket.MessageText, []byte(raw)); err != nil {
		t.Fatalf("websocket write: %v", err)
	}
}

func (p *wsPeer) recv(t *testing.T) rpcMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, data, err := p.c.Read(ctx)
	if err != nil {
		t.Fatalf("websocket read: %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("server sent a %v frame", typ)
	}
	var m rpcMsg
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("server frame is not JSON-RPC: %v: %s", err, data)
	}
	return m
}

func wsURL(hs *httptest.Server, query string) string {
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws" + query
}

// dialWSPeer connects to /ws with subprotocol mcp, failing the test on error.
func dialWSPeer(t *testing.T, hs *httptest.Server, query string, hdr http.Header) *wsPeer {
	t.Helper()
	c, _, err := dialWS(hs, query, hdr, []string{"mcp"})
	if err != nil {
		t.Fatalf("dial %s: %v", query, err)
	}
	if c.Subprotocol() != "mcp" {
		t.Fatalf("subprotocol = %q, want mcp", c.Subprotocol())
	}
	c.SetReadLimit(16 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &wsPeer{c: c}
}

func dialWS(hs *httptest.Server, query string, hdr http.Header, protos []string) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return websocket.Dial(ctx, wsURL(hs, query), &websocket.DialOptions{Subprotocols: protos, HTTPHeader: hdr})
}

func TestWebSocket(t *testing.T) {
	s, up, hs := newDoorServer(t, "[server]\nmax_body_bytes = \"2KiB\"\n")

	t.Run("profile from the query", func(t *testing.T) {
		checkDoorBasics(t, up, dialWSPeer(t, hs, "?profile=readonly", nil))
	})
	t.Run("profile from the header", func(t *testing.T) {
		checkDoorBasics(t, up, dialWSPeer(t, hs, "?profile=all", http.Header{"Mcp-Profile": {"readonly"}}))
	})
	t.Run("narrowing", func(t *testing.T) {
		p := dialWSPeer(t, hs, "?profile=all&tools=up__tool_0003,up__tool_0004", nil)
		initializeAs(t, p, map[string]any{})
		if got := strings.Join(toolNames(t, p, 2), ","); got != "up__tool_0003,up__tool_0004" {
			t.Fatalf("narrowed view = %s", got)
		}
	})

	t.Run("oversized message answered, connection survives", func(t *testing.T) {
		p := dialWSPeer(t, hs, "?profile=readonly", nil)
		initializeAs(t, p, map[string]any{})
		big := `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"up__tool_0000","arguments":{"query":"` + strings.Repeat("x", 8<<10) + `"}},"id":41}`
		p.send(t, big)
		m := await(t, p, 41, nil)
		if m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "max_body_bytes (2048 bytes)") {
			t.Fatalf("oversized: %+v", m.Error)
		}
		if m := rpc(t, p, 42, "ping", nil); m.Error != nil {
			t.Fatalf("ping after oversized message: %+v", m.Error)
		}
	})

	t.Run("binary frame closes with 1003", func(t *testing.T) {
		p := dialWSPeer(t, hs, "", nil)
		initializeAs(t, p, map[string]any{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.c.Write(ctx, websocket.MessageBinary, []byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)); err != nil {
			t.Fatal(err)
		}
		_, _, err := p.c.Read(ctx)
		if got := websocket.CloseStatus(err); got != websocket.StatusUnsupportedData {
			t.Fatalf("read after binary frame: %v (status %d), want close 1003", err, got)
		}
	})

	t.Run("malformed JSON is answered", func(t *testing.T) {
		p := dialWSPeer(t, hs, "", nil)
		p.send(t, `{"jsonrpc":"2.0","id":`)
		if m := p.recv(t); m.Error == nil || m.Error.Code != -32700 {
			t.Fatalf("malformed: %+v", m)
		}
		initializeAs(t, p, map[string]any{})
	})

	t.Run("session registered at initialize, gone at close", func(t *testing.T) {
		waitStreams(t, s, 0)
		before := s.Sessions()
		p := dialWSPeer(t, hs, "?profile=readonly", nil)
		waitStreams(t, s, 1)
		if got := s.Sessions(); got != before {
			t.Fatalf("bound sessions = %d before initialize, want %d", got, before)
		}
		initializeAs(t, p, map[string]any{})
		if got := s.Sessions(); got != before+1 {
			t.Fatalf("bound sessions = %d after initialize, want %d", got, before+1)
		}
		p.c.Close(websocket.StatusNormalClosure, "")
		waitStreams(t, s, 0)
		if got := s.Sessions(); got != before {
			t.Fatalf("bound sessions = %d after close, want %d", got, before)
		}
	})

}

// TestWebSocketShutdown checks that the HTTP server's Shutdown ends live
// websocket sessions with 1001 instead of leaving hijacked connections open.
func TestWebSocketShutdown(t *testing.T) {
	up := newUpstreamServer(t, 2)
	s := newBenchServer(t, up.http.URL, "")
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.Start()
	p := dialWSPeer(t, hs, "", nil)
	initializeAs(t, p, map[string]any{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Config.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	_, _, err := p.c.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusGoingAway {
		t.Fatalf("read after shutdown: %v, want close 1001", err)
	}
	waitStreams(t, s, 0)
	hs.Close()
}

func TestWebSocketCancellation(t *testing.T) {
	su := newSlowUpstream(t)
	s := newBenchServer(t, su.url, "")
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	checkCancellation(t, su, dialWSPeer(t, hs, "", nil))
}

// TestWebSocketUpgradeRefusals checks the HTTP answers given before any
// upgrade: the same resolution as /mcp, plus the websocket requirements.
func TestWebSocketUpgradeRefusals(t *testing.T) {
	sum := sha256.Sum256([]byte("tok-all"))
	_, _, hs := newDoorServer(t, `
[[auth.tokens]]
token = "tok-ro"
profiles = ["readonly"]
[[auth.tokens]]
token_sha256 = "`+hex.EncodeToString(sum[:])+`"
profiles = ["all", "readonly"]
`)
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	tests := []struct {
		name   string
		query  string
		hdr    http.Header
		protos []string
		status int
		body   string
	}{
		{"no token", "", nil, []string{"mcp"}, 401, "missing or invalid bearer token"},
		{"wrong token", "", bearer("nope"), []string{"mcp"}, 401, "missing or invalid"},
		{"token in the URL is not accepted", "?access_token=tok-ro&token=tok-ro", nil, []string{"mcp"}, 401, "missing or invalid"},
		{"profile outside the token", "?profile=all", bearer("tok-ro"), []string{"mcp"}, 403, `"all"`},
		{"unknown profile", "?profile=nope", bearer("tok-all"), []string{"mcp"}, 404, "known: all, readonly"},
		{"bad narrowing", "?read_only=maybe", bearer("tok-all"), []string{"mcp"}, 400, "not a boolean"},
		{"no mcp subprotocol", "", bearer("tok-all"), []string{"chat"}, 400, `"mcp" subprotocol`},
		{"no subprotocol at all", "", bearer("tok-all"), nil, 400, `"mcp" subprotocol`},
		{"disallowed origin", "", http.Header{"Authorization": {"Bearer tok-all"}, "Origin": {"https://evil.example"}}, []string{"mcp"}, 403, "origin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, resp, err := dialWS(hs, tt.query, tt.hdr, tt.protos)
			if err == nil {
				c.CloseNow()
				t.Fatalf("upgrade succeeded, want %d", tt.status)
			}
			if resp == nil || resp.StatusCode != tt.status {
				t.Fatalf("dial error %v, response %v, want status %d", err, resp, tt.status)
			}
			body, _ := io.ReadAll(resp.Body)
			var e struct{ Error jsonrpc.Error }
			if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Error.Message, tt.body) {
				t.Fatalf("body %q: want a JSON-RPC error mentioning %q", body, tt.body)
			}
			if tt.status == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without WWW-Authenticate: Bearer")
			}
		})
	}

	t.Run("allowed origin and token", func(t *testing.T) {
		hdr := bearer("tok-all")
		hdr.Set("Origin", "http://localhost:3000")
		p := dialWSPeer(t, hs, "", hdr)
		initializeAs(t, p, map[string]any{})
		if got := len(toolNames(t, p, 2)); got != 6 {
			t.Fatalf("token default profile (all) lists %d tools, want 6", got)
		}
	})

	t.Run("non-loopback Host", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, resp, err := websocket.Dial(ctx, wsURL(hs, ""), &websocket.DialOptions{Subprotocols: []string{"mcp"}, HTTPHeader: bearer("tok-all"), Host: "evil.example"})
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("dial with Host evil.example: %v %v, want 403", err, resp)
		}
	})

	t.Run("plain GET", func(t *testing.T) {
		code, hdr, body := getStatus(t, hs.URL+"/ws", bearer("tok-all"))
		if code != http.StatusUpgradeRequired || hdr.Get("Upgrade") != "websocket" || !strings.Contains(body, "websocket") {
			t.Fatalf("GET /ws without upgrade: %d %q", code, body)
		}
	})
}

// TestStreamReload checks that a reload re-resolves a live stream session
// like an /mcp session: it is told tools/list_changed and then lists, and is
// gated by, the new rules.
func TestStreamReload(t *testing.T) {
	s, up, hs := newDoorServer(t, "")
	p := dialWSPeer(t, hs, "?profile=readonly", nil)
	initializeAs(t, p, map[string]any{})
	text := fmt.Sprintf("[upstreams.up]\nurl = %q\n[profiles.readonly]\ntools = [\"up__tool_0000\"]\n[profiles.all]\n", up.http.URL)
	cfg, err := configs.Parse("reload.toml", []byte(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if m := p.recv(t); m.Method != "notifications/tools/list_changed" {
		t.Fatalf("after reload the client got %+v, want tools/list_changed", m)
	}
	if got := strings.Join(toolNames(t, p, 2), ","); got != "up__tool_0000" {
		t.Fatalf("after reload lists %s, want up__tool_0000", got)
	}
	m := rpc(t, p, 3, "tools/call", map[string]any{"name": "up__tool_0002", "arguments": map[string]any{"query": "x"}})
	if m.Error == nil || m.Error.Code != -32601 {
		t.Fatalf("tool dropped by the reload: %+v %s, want -32601", m.Error, m.Result)
	}
}
