package sessions

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/sessions/grant"
)

// sharesConfig has a guest and an admin token, each its own caller, under
// max_sessions = 10 and max_sessions_per_caller = 2.
const sharesConfig = `
[server]
max_sessions = 10
max_sessions_per_caller = 2
[profiles.all]
[[auth.tokens]]
token = "tok-guest"
profiles = ["all"]
[[auth.tokens]]
token = "tok-admin"
profiles = ["all"]
`

func withToken(req *http.Request, token string) *http.Request {
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// openAs opens a legacy /mcp session on h as token and returns its id.
func openAs(t *testing.T, h http.Handler, token string) string {
	t.Helper()
	rec := httptestDo(h, withToken(newRequest("", "", initializeBody), token))
	sid := rec.Header().Get(mcp.HeaderSessionID)
	if sid == "" {
		t.Fatalf("initialize: %d %s", rec.Code, rec.Body)
	}
	httptestDo(h, withToken(newRequest("", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`), token))
	return sid
}

// TestSessionShareEveryDoor: a guest token holding its share (an /mcp
// session and an SSE stream) is refused one more on every door (/mcp
// initialize, its session's GET stream, /sse, /ws) with 503 and a JSON-RPC
// error naming server.max_sessions_per_caller, while another token still
// opens a session; a stream that ends gives its place back.
func TestSessionShareEveryDoor(t *testing.T) {
	up := newUpstreamServer(t, 6)
	s := newBenchServer(t, up.http.URL, sharesConfig)
	h := s.Handler()
	guest := func(req *http.Request) *http.Request { return withToken(req, "tok-guest") }
	initGuest := func() (int, string, string) {
		rec := httptestDo(h, guest(newRequest("", "", initializeBody)))
		return rec.Code, rec.Body.String(), rec.Header().Get(mcp.HeaderSessionID)
	}
	code, body, sid := initGuest()
	if code != http.StatusOK || sid == "" {
		t.Fatalf("guest initialize: %d %s", code, body)
	}
	hs := newTestHTTP(t, h)
	hdr := http.Header{"Authorization": {"Bearer tok-guest"}}
	sse := mustOpenSSE(t, hs, "", hdr)
	wantShare := func(what string, code int, body string) {
		t.Helper()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "server.max_sessions_per_caller (2)") || !strings.Contains(body, `"code":-32000`) {
			t.Errorf("%s over the guest's share: %d %s; want 503 with a JSON-RPC error naming server.max_sessions_per_caller", what, code, body)
		}
	}
	code, body, extra := initGuest()
	wantShare("initialize", code, body)
	if extra != "" {
		t.Errorf("a refused initialize got session %q", extra)
	}
	code, body = getStreamWith(t, hs, sid, "tok-guest")
	wantShare("GET /mcp", code, body)
	code, body, _ = openSSE(t, hs, "", hdr)
	wantShare("/sse", code, body)
	if _, resp, err := dialWS(hs, "", hdr, []string{"mcp"}); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("websocket over the guest's share: %v %v; want 503 before the upgrade", resp, err)
	}
	if rec := httptestDo(h, withToken(newRequest("", "", initializeBody), "tok-admin")); rec.Code != http.StatusOK || rec.Header().Get(mcp.HeaderSessionID) == "" {
		t.Fatalf("admin initialize while the guest holds its share: %d %s", rec.Code, rec.Body)
	}
	sse.cancel()
	waitFor(t, func() bool { return !s.slots.callers.full(callerOfToken("tok-guest")) }, "the guest's SSE stream to give its place back")
	if code, body, _ := initGuest(); code != http.StatusOK {
		t.Fatalf("guest initialize after a stream ended: %d %s", code, body)
	}
}

// TestCallShare: one caller may have max_sessions_per_caller calls in
// flight; the next is answered -32000 naming the limit and never reaches
// the upstream, while another caller's call runs.
func TestCallShare(t *testing.T) {
	su := newSlowUpstream(t)
	s := newBenchServer(t, su.url, sharesConfig)
	h := s.Handler()
	a, b := openAs(t, h, "tok-guest"), openAs(t, h, "tok-guest")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, sid := range []string{a, b} {
		req := withToken(newRequest("", sid, waitCall(10+i)), "tok-guest").WithContext(ctx)
		go httptestDo(h, req)
		upstreamSaw(t, su.started, "a guest call to start")
	}
	rec := httptestDo(h, withToken(newRequest("", a, waitCall(20)), "tok-guest"))
	if !strings.Contains(rec.Body.String(), `"code":-32000`) || !strings.Contains(rec.Body.String(), "server.max_sessions_per_caller (2)") {
		t.Fatalf("a third guest call: %d %s; want -32000 naming server.max_sessions_per_caller", rec.Code, rec.Body)
	}
	select {
	case <-su.started:
		t.Fatal("the refused call reached the upstream")
	default:
	}
	admin := openAs(t, h, "tok-admin")
	go httptestDo(h, withToken(newRequest("", admin, waitCall(30)), "tok-admin").WithContext(ctx))
	upstreamSaw(t, su.started, "the admin's call to start")
}

func httptestDo(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func newTestHTTP(t *testing.T, h http.Handler) *httptest.Server {
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs
}

// callerOfToken is callerOf for a request with the bearer token token.
func callerOfToken(token string) string {
	return callerOf(&http.Request{}, grant.Binding{Authed: true, Caller: sha256.Sum256([]byte(token))})
}

// getStreamWith opens the GET stream of session with a bearer token and
// returns the status and body of a refusal (a stream that opens is closed
// at cleanup).
func getStreamWith(t *testing.T, hs *httptest.Server, session, token string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(mcp.HeaderSessionID, session)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	return resp.StatusCode, ""
}

// TestHeldCallShare: one caller may hold perCaller 2026-07-28 calls
// waiting for its input; past it the upstream's request is refused naming
// the limit, another caller still gets one, and a call that ends gives its
// place back.
func TestHeldCallShare(t *testing.T) {
	h := newHeldCalls("r1", 2)
	newHeld := func(who string) *call {
		c := &call{who: who}
		c.abort = func(error) {}
		return c
	}
	ask := func() *ask { return &ask{reply: make(chan askReply, 1)} }
	first, second := newHeld("token:a"), newHeld("token:a")
	for _, c := range []*call{first, second} {
		if _, err := h.hold(c, ask()); err != nil {
			t.Fatalf("hold within the share: %v", err)
		}
	}
	if _, err := h.hold(newHeld("token:a"), ask()); !errors.Is(err, errCallerShare) || !strings.Contains(err.Error(), "server.max_sessions_per_caller") {
		t.Fatalf("hold past the share = %v, want errCallerShare naming server.max_sessions_per_caller", err)
	}
	if _, err := h.hold(newHeld("token:b"), ask()); err != nil {
		t.Fatalf("another caller's hold: %v", err)
	}
	h.forget(first)
	state, err := h.hold(newHeld("token:a"), ask())
	if err != nil {
		t.Fatalf("hold after one ended: %v", err)
	}
	if _, err := h.take(state); err != nil {
		t.Fatal(err)
	}
	if _, err := h.hold(newHeld("token:a"), ask()); err != nil {
		t.Fatalf("hold after a retry took one: %v", err)
	}
}
