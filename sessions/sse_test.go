package sessions

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// ssePeer is a legacy SSE test client: one GET stream, POSTs to the
// endpoint it announced.
type ssePeer struct {
	hs       *httptest.Server
	endpoint string
	hdr      http.Header // sent on every POST
	events   chan sseEvent
	cancel   context.CancelFunc
}

type sseEvent struct {
	name, data string
	err        error
}

// openSSE opens /sse+query with hdr and returns the GET's status and, on
// 200, a peer that has read the endpoint event.
func openSSE(t *testing.T, hs *httptest.Server, query string, hdr http.Header) (int, string, *ssePeer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/sse"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hs.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, string(body), nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	p := &ssePeer{hs: hs, hdr: hdr, events: make(chan sseEvent, 64), cancel: cancel}
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
	})
	go func() {
		r := &sseEvents{r: bufio.NewReader(resp.Body)}
		for {
			name, data, err := r.next()
			p.events <- sseEvent{name, data, err}
			if err != nil {
				return
			}
		}
	}()
	ev := p.next(t)
	if ev.name != "endpoint" || !strings.HasPrefix(ev.data, "/message?sessionId=") || !strings.Contains(ev.data, ".sse-") {
		t.Fatalf("first event = %+v, want the endpoint", ev)
	}
	p.endpoint = ev.data
	return http.StatusOK, "", p
}

func (p *ssePeer) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev := <-p.events:
		if ev.err != nil {
			t.Fatalf("SSE stream: %v", ev.err)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no SSE event within 10s")
		return sseEvent{}
	}
}

// post sends one message to the endpoint with extra headers and returns
// the status and body.
func (p *ssePeer) post(t *testing.T, path, raw string, hdr http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.hs.URL+path, strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := p.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (p *ssePeer) send(t *testing.T, raw string) {
	t.Helper()
	if code, body := p.post(t, p.endpoint, raw, p.hdr); code != http.StatusAccepted {
		t.Fatalf("POST %s: %d %s", p.endpoint, code, body)
	}
}

func (p *ssePeer) recv(t *testing.T) rpcMsg {
	t.Helper()
	ev := p.next(t)
	if ev.name != "message" {
		t.Fatalf("event %q, want message", ev.name)
	}
	var m rpcMsg
	if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
		t.Fatalf("event data is not JSON-RPC: %v: %s", err, ev.data)
	}
	return m
}

func mustOpenSSE(t *testing.T, hs *httptest.Server, query string, hdr http.Header) *ssePeer {
	t.Helper()
	code, body, p := openSSE(t, hs, query, hdr)
	if p == nil {
		t.Fatalf("GET /sse%s: %d %s", query, code, body)
	}
	return p
}

func TestSSE(t *testing.T) {
	s, up, hs := newDoorServer(t, "[server]\nmax_body_bytes = \"2KiB\"\n")

	t.Run("profile from the query", func(t *testing.T) {
		checkDoorBasics(t, up, mustOpenSSE(t, hs, "?profile=readonly", nil))
	})
	t.Run("profile from the header, repeated on posts", func(t *testing.T) {
		checkDoorBasics(t, up, mustOpenSSE(t, hs, "", http.Header{"Mcp-Profile": {"readonly"}}))
	})

	t.Run("post checks", func(t *testing.T) {
		p := mustOpenSSE(t, hs, "?profile=readonly", nil)
		initializeAs(t, p, map[string]any{})
		ping := `{"jsonrpc":"2.0","id":5,"method":"ping"}`
		tests := []struct {
			name   string
			path   string
			body   string
			hdr    http.Header
			status int
			msg    string
		}{
			{"unknown session", "/message?sessionId=sse-NOPE", ping, nil, 404, "unknown or ended session"},
			{"no session", "/message", ping, nil, 404, "unknown or ended session"},
			{"other profile by header", p.endpoint, ping, http.Header{"Mcp-Profile": {"all"}}, 400, `bound to profile "readonly"`},
			{"other profile by query", p.endpoint + "&profile=all", ping, nil, 400, `bound to profile "readonly"`},
			{"unknown profile", p.endpoint + "&profile=nope", ping, nil, 404, "unknown profile"},
			{"narrowing that changes the view", p.endpoint + "&tools=up__tool_0000", ping, nil, 400, "bound to profile"},
			{"too big", p.endpoint, `{"jsonrpc":"2.0","id":6,"method":"ping","params":{"x":"` + strings.Repeat("a", 4096) + `"}}`, nil, 413, "max_body_bytes (2048 bytes)"},
			{"non-loopback Host", p.endpoint, ping, http.Header{"Host": {"evil.example"}}, 403, "loopback"},
			{"disallowed origin", p.endpoint, ping, http.Header{"Origin": {"https://evil.example"}}, 403, "origin"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req, err := http.NewRequest(http.MethodPost, hs.URL+tt.path, strings.NewReader(tt.body))
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range tt.hdr {
					req.Header[k] = v
				}
				if h := tt.hdr.Get("Host"); h != "" {
					req.Host = h
				}
				resp, err := hs.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var e struct{ Error jsonrpc.Error }
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != tt.status || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error.Message, tt.msg) {
					t.Fatalf("POST: %d %s, want %d mentioning %q", resp.StatusCode, body, tt.status, tt.msg)
				}
			})
		}
		// The same profile named again is fine, and nothing refused above
		// reached the session.
		if code, body := p.post(t, p.endpoint+"&profile=readonly", `{"jsonrpc":"2.0","id":7,"method":"ping"}`, nil); code != http.StatusAccepted {
			t.Fatalf("POST naming the same profile: %d %s", code, body)
		}
		if m := p.recv(t); string(m.ID) != "7" {
			t.Fatalf("next message on the stream is %+v, want the answer to 7", m)
		}
	})

	t.Run("stream end ends the session", func(t *testing.T) {
		waitStreams(t, s, 0)
		p := mustOpenSSE(t, hs, "", nil)
		initializeAs(t, p, map[string]any{})
		waitStreams(t, s, 1)
		p.cancel()
		waitStreams(t, s, 0)
		if code, _ := p.post(t, p.endpoint, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, nil); code != http.StatusNotFound {
			t.Fatalf("POST to an ended session: %d, want 404", code)
		}
	})
}

func TestSSECancellation(t *testing.T) {
	su := newSlowUpstream(t)
	s := newBenchServer(t, su.url, "")
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	checkCancellation(t, su, mustOpenSSE(t, hs, "", nil))
}

// TestSSEAuth checks the token rules of both requests: the stream is opened
// like /mcp resolves a request, and every POST must carry the same token.
func TestSSEAuth(t *testing.T) {
	_, _, hs := newDoorServer(t, `
[[auth.tokens]]
token = "tok-ro"
profiles = ["readonly"]
[[auth.tokens]]
token = "tok-ro-2"
profiles = ["readonly"]
[[auth.tokens]]
token = "tok-all"
profiles = ["all", "readonly"]
`)
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	for _, tt := range []struct {
		name   string
		query  string
		hdr    http.Header
		status int
	}{
		{"no token", "", nil, 401},
		{"token in the URL", "?token=tok-ro", nil, 401},
		{"profile outside the token", "?profile=all", bearer("tok-ro"), 403},
		{"unknown profile", "?profile=nope", bearer("tok-all"), 404},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := openSSE(t, hs, tt.query, tt.hdr)
			if code != tt.status {
				t.Fatalf("GET /sse: %d %s, want %d", code, body, tt.status)
			}
		})
	}

	p := mustOpenSSE(t, hs, "", bearer("tok-ro"))
	initializeAs(t, p, map[string]any{})
	if got := strings.Join(toolNames(t, p, 2), ","); got != "up__tool_0000,up__tool_0002,up__tool_0004" {
		t.Fatalf("token default view = %s", got)
	}
	ping := `{"jsonrpc":"2.0","id":9,"method":"ping"}`
	for _, tt := range []struct {
		name   string
		hdr    http.Header
		status int
	}{
		{"post without token", nil, 401},
		{"post with a wrong token", bearer("nope"), 401},
		{"post with another valid token", bearer("tok-ro-2"), 403},
		{"post with a broader token that did not open the stream", bearer("tok-all"), 403},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := p.post(t, p.endpoint, ping, tt.hdr)
			if code != tt.status {
				t.Fatalf("POST: %d %s, want %d", code, body, tt.status)
			}
		})
	}
}

// TestStreamSessionIDNotUsableOnMCP checks that the id of an SSE session
// cannot be presented on /mcp to reach that session's view.
func TestStreamSessionIDNotUsableOnMCP(t *testing.T) {
	_, up, hs := newDoorServer(t, "")
	p := mustOpenSSE(t, hs, "?profile=all", nil)
	initializeAs(t, p, nil)
	id := strings.TrimPrefix(p.endpoint, "/message?sessionId=")
	before := up.requests.Load()
	req, err := http.NewRequest(http.MethodPost, hs.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), "up__tool") {
		t.Fatalf("SSE session id on /mcp: %d %s", resp.StatusCode, body)
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("upstream saw %d requests", n)
	}
}
