package sessions

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/sessions/grant"
)

// TestNarrowingBounds: a narrowing over MaxNarrowNames names, or with a
// name over MaxNarrowNameLength bytes, is refused with 400 naming the
// header or parameter and the limit, before anything is compiled for it;
// narrowings at the limits pass.
func TestNarrowingBounds(t *testing.T) {
	names := func(n, size int) string {
		var out []string
		for i := range n {
			s := fmt.Sprintf("n%d_", i)
			out = append(out, s+strings.Repeat("x", size-len(s)))
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		name   string
		query  string
		header http.Header
		want   string // "" = accepted
	}{
		{"256 names of 128 bytes", "?tools=" + names(256, 128), nil, ""},
		{"257 names", "?tools=" + names(257, 8), nil, "?tools= lists 257 names; at most 256 are allowed"},
		{"a 129-byte name", "?toolsets=" + names(1, 129), nil, "?toolsets= holds a name of 129 bytes; at most 128 are allowed"},
		{"header over the count", "", http.Header{"Mcp-Tools": {names(300, 8)}}, "Mcp-Tools header lists 300 names"},
		{"header name too long", "", http.Header{"Mcp-Toolsets": {"a," + strings.Repeat("y", 500)}}, "Mcp-Toolsets header holds a name of 500 bytes"},
		{"profile name too long", "?profile=" + strings.Repeat("p", 200), nil, "the profile name is 200 bytes long; at most 128"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp"+tt.query, nil)
			for k, v := range tt.header {
				r.Header[k] = v
			}
			sel, err := grant.SelectionFromRequest(r)
			if tt.want == "" {
				if err != nil || len(sel.Tools) != 256 {
					t.Fatalf("err = %v, %d tools; want accepted with 256", err, len(sel.Tools))
				}
				return
			}
			if !errors.Is(err, grant.ErrBadNarrowing) || !strings.Contains(err.Error(), tt.want) || grant.StatusOf(err) != http.StatusBadRequest {
				t.Fatalf("err = %v, want ErrBadNarrowing (400) containing %q", err, tt.want)
			}
		})
	}
}

// TestStreamDoorsCountAgainstMaxSessions: with max_sessions = 2, two SSE
// streams take every slot; a third /sse and a websocket are refused with
// 503 and a JSON-RPC error naming the limit, the websocket before it is
// upgraded; once a stream ends its slot serves a new one.
func TestStreamDoorsCountAgainstMaxSessions(t *testing.T) {
	s, _, hs := newDoorServer(t, "[server]\nmax_sessions = 2\nmax_sessions_per_caller = 2\n")
	first := mustOpenSSE(t, hs, "?profile=all", nil)
	mustOpenSSE(t, hs, "?profile=all", nil)
	if n := s.slots.live(); n != 2 {
		t.Fatalf("%d slots taken by two streams, want 2", n)
	}
	code, body, _ := openSSE(t, hs, "?profile=all", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "server.max_sessions (2)") || !strings.Contains(body, `"code":-32000`) {
		t.Fatalf("third /sse: %d %s; want 503 with a JSON-RPC error naming server.max_sessions", code, body)
	}
	_, resp, err := dialWS(hs, "?profile=all", nil, []string{"mcp"})
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("websocket over the limit: err %v, response %v; want 503 before the upgrade", err, resp)
	}
	first.cancel()
	waitFor(t, func() bool { return s.slots.live() == 1 }, "the closed stream's slot to come back")
	p := dialWSPeer(t, hs, "?profile=all", nil)
	initializeAs(t, p, map[string]any{})
	if n := s.slots.live(); n != 2 {
		t.Fatalf("%d slots taken, want 2", n)
	}
}

// TestStreamSessionsExpire drives the idle check of stream sessions
// directly, with the client's last message moved into the past (no
// waiting): a stream that never initialized ends after read_timeout, an
// initialized one only after session_idle_timeout.
func TestStreamSessionsExpire(t *testing.T) {
	s, _, hs := newDoorServer(t, "[server]\nread_timeout = \"30s\"\nsession_idle_timeout = \"10m\"\n")
	open := func() (*ssePeer, *session) {
		p := mustOpenSSE(t, hs, "?profile=all", nil)
		_, id, _ := strings.Cut(p.endpoint, "sessionId=")
		ss := s.stream(id)
		if ss == nil {
			t.Fatalf("no stream session %q", id)
		}
		return p, ss
	}
	ago := func(ss *session, d time.Duration) { ss.life.seen.Store(time.Now().Add(-d).UnixNano()) }

	_, fresh := open()
	ago(fresh, 20*time.Second)
	s.checkIdle(fresh.life)
	if fresh.ctx().Err() != nil {
		t.Fatal("a stream idle for less than read_timeout was ended")
	}
	ago(fresh, 31*time.Second)
	s.checkIdle(fresh.life)
	if !errors.Is(fresh.Cause(), errSessionIdle) {
		t.Fatalf("a stream that never initialized, idle past read_timeout: cause %v, want errSessionIdle", fresh.Cause())
	}

	p, ready := open()
	initializeAs(t, p, map[string]any{})
	waitFor(t, func() bool {
		return ready.life.ready.Load() && ready.life.busy.Load() == 0
	}, "the session to be initialized, with its initialize done")
	ago(ready, 5*time.Minute)
	s.checkIdle(ready.life)
	if ready.ctx().Err() != nil {
		t.Fatal("an initialized stream idle for less than session_idle_timeout was ended")
	}
	ago(ready, 11*time.Minute)
	s.checkIdle(ready.life)
	if !errors.Is(ready.Cause(), errSessionIdle) {
		t.Fatalf("an initialized stream idle past session_idle_timeout: cause %v", ready.Cause())
	}
	waitFor(t, func() bool { return s.slots.live() == 0 && len(s.streams()) == 0 }, "the expired streams' slots to come back")
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// getStream opens GET /mcp (a standalone stream) on h, with the session id
// when not "", and returns its status once the handler answers or, for a
// stream, once it has started; cancel ends the stream.
func getStream(t *testing.T, hs *httptest.Server, session string) (int, string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if session != "" {
		req.Header.Set(mcp.HeaderSessionID, session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, string(body), func() {}
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return resp.StatusCode, "", func() { cancel(); resp.Body.Close() }
}

// TestMCPSessionsCountAgainstMaxSessions: with max_sessions = 3, three
// initialize requests take every slot; a fourth, a standalone GET stream
// and a websocket get 503 with a JSON-RPC error naming the limit; a
// refused or failed initialize leaves no session id behind; DELETE gives
// a slot back.
func TestMCPSessionsCountAgainstMaxSessions(t *testing.T) {
	s, _, hs := newDoorServer(t, "[server]\nmax_sessions = 3\nmax_sessions_per_caller = 3\n")
	h := s.Handler()
	var ids []string
	for range 3 {
		ids = append(ids, openSession(t, h, ""))
	}
	if n := s.slots.live(); n != 3 {
		t.Fatalf("%d slots taken by 3 sessions", n)
	}
	rec := post(h, "", "", initializeBody)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "server.max_sessions (3)") ||
		!strings.Contains(rec.Body.String(), `"id":1`) || rec.Header().Get(mcp.HeaderSessionID) != "" {
		t.Fatalf("4th initialize: %d %s %v; want 503 answering id 1, naming server.max_sessions, no session", rec.Code, rec.Body, rec.Header())
	}
	if code, body, _ := getStream(t, hs, ids[2]); code != http.StatusServiceUnavailable || !strings.Contains(body, "max_sessions") {
		t.Fatalf("GET /mcp over the limit: %d %s", code, body)
	}
	if _, resp, err := dialWS(hs, "", nil, []string{"mcp"}); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("websocket over the limit: %v %v", resp, err)
	}
	if n := s.Sessions(); n != 3 {
		t.Fatalf("%d session ids known with 3 sessions open", n)
	}

	del := newRequest("", ids[0], "")
	del.Method = http.MethodDelete
	w := httptest.NewRecorder()
	h.ServeHTTP(w, del)
	if w.Code != http.StatusOK || s.slots.live() != 2 || s.Sessions() != 2 {
		t.Fatalf("DELETE: %d; %d slots, %d ids left; want 200, 2, 2", w.Code, s.slots.live(), s.Sessions())
	}
	// mcp-go opens a session even for an initialize it answers with an
	// error; that session holds a slot like any other, and ends like any.
	bad := post(h, "", "", `{"jsonrpc":"2.0","id":5,"method":"initialize","params":7}`)
	if s.slots.live() != s.Sessions() || s.Sessions() != s.Sessions() {
		t.Fatalf("a failed initialize (%d %s) left %d slots, %d ids, %d sessions; want them equal", bad.Code, bad.Body, s.slots.live(), s.Sessions(), s.Sessions())
	}
	if id := bad.Header().Get(mcp.HeaderSessionID); id != "" {
		del := newRequest("", id, "")
		del.Method = http.MethodDelete
		h.ServeHTTP(httptest.NewRecorder(), del)
	}
	if s.slots.live() != 2 || s.Sessions() != 2 || s.Sessions() != 2 {
		t.Fatalf("%d slots, %d ids, %d sessions; want 2 each", s.slots.live(), s.Sessions(), s.Sessions())
	}
	// A standalone stream holds a slot while open.
	code, _, stop := getStream(t, hs, ids[1])
	if code != http.StatusOK {
		t.Fatalf("GET /mcp on a session: %d", code)
	}
	waitFor(t, func() bool { return s.slots.live() == 3 }, "the GET stream to take a slot")
	stop()
	waitFor(t, func() bool { return s.slots.live() == 2 }, "the GET stream's slot to come back")
	openSession(t, h, "")
}

// TestMCPSessionsExpire drives a /mcp session's idle check directly, with
// its last request moved into the past (no waiting): a session that sent
// nothing after its initialize ends after read_timeout, one that did only
// after session_idle_timeout, and one with a request in flight never.
func TestMCPSessionsExpire(t *testing.T) {
	up := newUpstreamServer(t, 2)
	s := newBenchServer(t, up.http.URL, "[server]\nread_timeout = \"30s\"\nsession_idle_timeout = \"10m\"\n")
	h := s.Handler()
	life := func(id string) *sessionLife {
		s.mu.Lock()
		defer s.mu.Unlock()
		if sess := s.sessions[id]; sess != nil {
			return sess.life
		}
		return nil
	}
	ago := func(l *sessionLife, d time.Duration) { l.seen.Store(time.Now().Add(-d).UnixNano()) }
	gone := func(id string) bool {
		w := post(h, "", id, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`)
		return w.Code == http.StatusNotFound && life(id) == nil
	}

	rec := post(h, "", "", initializeBody) // and nothing after it
	fresh := rec.Header().Get(mcp.HeaderSessionID)
	l := life(fresh)
	if l == nil {
		t.Fatal("an initialized /mcp session has no expiry")
	}
	ago(l, 20*time.Second)
	s.checkIdle(l)
	if life(fresh) == nil {
		t.Fatal("a session idle for less than read_timeout expired")
	}
	ago(l, 31*time.Second)
	s.checkIdle(l)
	if !gone(fresh) {
		t.Fatal("a session that never sent anything after initialize outlived read_timeout")
	}

	ready := openSession(t, h, "")
	post(h, "", ready, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	l = life(ready)
	ago(l, 5*time.Minute)
	s.checkIdle(l)
	if life(ready) == nil {
		t.Fatal("an initialized session idle for less than session_idle_timeout expired")
	}
	s.mu.Lock()
	sess := s.sessions[ready]
	s.mu.Unlock()
	done := s.touch(sess) // a request in flight, such as a GET stream
	ago(l, time.Hour)
	s.checkIdle(l)
	if life(ready) == nil {
		t.Fatal("a session with a request in flight expired")
	}
	done()
	ago(l, 11*time.Minute)
	s.checkIdle(l)
	if !gone(ready) {
		t.Fatal("an initialized session outlived session_idle_timeout")
	}
	if s.slots.live() != 0 || s.Sessions() != 0 {
		t.Fatalf("expired sessions left %d slots, %d sessions", s.slots.live(), s.Sessions())
	}
}

// TestUnknownSessionIDsCostNothing sends 1,000 requests of each kind with
// session ids viewmux never gave, each with its own narrowing, on a
// rate-limited profile: all are 404, and none leaves a limiter bucket, a
// session id, a slot or a filter behind: limits are checked only after the
// session is, so unknown session ids cost nothing.
func TestUnknownSessionIDsCostNothing(t *testing.T) {
	up := newUpstreamServer(t, 4)
	s := newBenchServer(t, up.http.URL, "[server]\ndefault_profile = \"limited\"\n[profiles.limited]\n[profiles.limited.rate]\ncalls_per_minute = 3\n")
	h := s.Handler()
	filters := s.Registry().Instances()
	before := up.requests.Load()
	for i := range 1000 {
		id := "mcp-session-" + rand.Text()
		query := fmt.Sprintf("?tools=up__tool_%04d,x%d", i%4, i)
		for _, body := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"q"}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		} {
			if w := post(h, query, id, body); w.Code != http.StatusNotFound {
				t.Fatalf("%s on unknown session %s: %d %s, want 404", body, id, w.Code, w.Body)
			}
		}
		method := http.MethodDelete
		if i%100 == 0 {
			// A GET that is not refused opens a stream: bound its wait.
			method = http.MethodGet
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req := newRequest(query, id, "").WithContext(ctx)
		req.Method = method
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		cancel()
		if w.Code != http.StatusNotFound {
			t.Fatalf("%s on unknown session %s: %d %s, want 404", method, id, w.Code, w.Body)
		}
	}
	if n := s.limits.Len(); n != 0 {
		t.Fatalf("unknown session ids left %d limiter buckets", n)
	}
	if n := s.Registry().Instances(); n != filters {
		t.Fatalf("unknown session ids made %d filters (had %d)", n, filters)
	}
	if s.Sessions() != 0 || s.slots.live() != 0 || s.Sessions() != 0 {
		t.Fatalf("unknown session ids left %d sessions, %d slots, %d ids", s.Sessions(), s.slots.live(), s.Sessions())
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("unknown session ids reached the upstream %d times", n)
	}
}

// TestNarrowedSessionAfterEviction: a session opened with a narrowing
// keeps working when later requests repeat that narrowing after its filter
// left the bounded cache (300 other narrowings in between), on /mcp and on
// an SSE session's POSTs: the session's rules are compared by key, not by
// which filter instance a request got.
func TestNarrowedSessionAfterEviction(t *testing.T) {
	s, _, hs := newDoorServer(t, "")
	h := s.Handler()
	const narrow = "?profile=all&tools=up__tool_0001"
	id := openSession(t, h, narrow)
	p := mustOpenSSE(t, hs, narrow, nil)
	initializeAs(t, p, map[string]any{})
	for i := range 300 {
		sel := grant.Selection{Profile: "all", Tools: []string{fmt.Sprint("x", i)}, Narrowing: true}
		if _, err := s.Resolver().Resolve(sel); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := p.post(t, p.endpoint, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, http.Header{"Mcp-Profile": {"all"}, "Mcp-Tools": {"up__tool_0001"}}); code != http.StatusAccepted {
		t.Fatalf("SSE POST repeating the stream's own narrowing: %d %s", code, body)
	}
	if w := post(h, narrow, id, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "up__tool_0001") {
		t.Fatalf("/mcp session repeating its own narrowing: %d %s", w.Code, w.Body)
	}
	if code, body := p.post(t, p.endpoint, `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`, http.Header{"Mcp-Profile": {"all"}, "Mcp-Tools": {"up__tool_0002"}}); code != http.StatusBadRequest {
		t.Fatalf("SSE POST with another narrowing: %d %s, want 400", code, body)
	}
}

// TestSessionsCannotSkipTheirSlot checks the ways a session could be opened
// past max_sessions by a message viewmux and mcp-go read differently: a
// misspelled "Method" or a second "_meta" spelling (mcp-go folds case), and
// a GET with no session id, which mcp-go answers with a stream of a new
// session. None opens a session; each is refused with a JSON-RPC error.
func TestSessionsCannotSkipTheirSlot(t *testing.T) {
	s, _, hs := newDoorServer(t, "[server]\nmax_sessions = 1\n")
	h := s.Handler()
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"Method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"_Meta":{}}}`,
		`{"jsonrpc":"2.0","ID":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
	} {
		for range 3 {
			rec := post(h, "", "", body)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"code":-32600`) || rec.Header().Get(mcp.HeaderSessionID) != "" {
				t.Fatalf("%s: %d %s %v; want 400 -32600 and no session", body, rec.Code, rec.Body, rec.Header())
			}
		}
	}
	if code, body, _ := getStream(t, hs, ""); code != http.StatusBadRequest || !strings.Contains(body, "Mcp-Session-Id") {
		t.Fatalf("GET /mcp without a session id: %d %s", code, body)
	}
	if n, live := s.Sessions(), s.slots.live(); n != 0 || live != 0 {
		t.Fatalf("%d sessions and %d slots after refused messages, want 0", n, live)
	}
	openSession(t, h, "") // the one slot is still free
}
