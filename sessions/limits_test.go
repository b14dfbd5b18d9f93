package sessions

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
			sel, err := SelectionFromRequest(r)
			if tt.want == "" {
				if err != nil || len(sel.Tools) != 256 {
					t.Fatalf("err = %v, %d tools; want accepted with 256", err, len(sel.Tools))
				}
				return
			}
			if !errors.Is(err, ErrBadNarrowing) || !strings.Contains(err.Error(), tt.want) || statusOf(err) != http.StatusBadRequest {
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
	s, _, hs := newDoorServer(t, "[server]\nmax_sessions = 2\n")
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
	open := func() (*ssePeer, *streamSession) {
		p := mustOpenSSE(t, hs, "?profile=all", nil)
		_, id, _ := strings.Cut(p.endpoint, "sessionId=")
		ss := s.streams.get(id)
		if ss == nil {
			t.Fatalf("no stream session %q", id)
		}
		return p, ss
	}
	ago := func(ss *streamSession, d time.Duration) { ss.seen.Store(time.Now().Add(-d).UnixNano()) }

	_, fresh := open()
	ago(fresh, 20*time.Second)
	s.streams.checkIdle(fresh)
	if fresh.ctx.Err() != nil {
		t.Fatal("a stream idle for less than read_timeout was ended")
	}
	ago(fresh, 31*time.Second)
	s.streams.checkIdle(fresh)
	if !errors.Is(fresh.endCause(), errSessionIdle) {
		t.Fatalf("a stream that never initialized, idle past read_timeout: cause %v, want errSessionIdle", fresh.endCause())
	}

	p, ready := open()
	initializeAs(t, p, map[string]any{})
	waitFor(t, func() bool {
		ready.mu.Lock()
		defer ready.mu.Unlock()
		return ready.Initialized() && len(ready.inflight) == 0
	}, "the session to be initialized, with its initialize done")
	ago(ready, 5*time.Minute)
	s.streams.checkIdle(ready)
	if ready.ctx.Err() != nil {
		t.Fatal("an initialized stream idle for less than session_idle_timeout was ended")
	}
	ago(ready, 11*time.Minute)
	s.streams.checkIdle(ready)
	if !errors.Is(ready.endCause(), errSessionIdle) {
		t.Fatalf("an initialized stream idle past session_idle_timeout: cause %v", ready.endCause())
	}
	waitFor(t, func() bool { return s.slots.live() == 0 && s.streams.len() == 0 }, "the expired streams' slots to come back")
}

// TestReadTimeout serves a handler behind withReadTimeout on a real
// loopback server: a body trickled slower than the deadline fails to read
// and the connection is closed, while a response streamed for longer than
// the deadline, after its body was read, is not cut.
func TestReadTimeout(t *testing.T) {
	const d = 300 * time.Millisecond
	h := withReadTimeout(d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 5 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(d):
			}
		}
	}))
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	t.Run("a long response after the body is whole", func(t *testing.T) {
		resp, err := http.Post(hs.URL, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || strings.Count(string(body), "data:") != 5 {
			t.Fatalf("streamed answer cut short: %q, %v", body, err)
		}
	})
	t.Run("a body that does not arrive", func(t *testing.T) {
		c, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
		c.SetReadDeadline(time.Now().Add(30 * time.Second)) // far beyond d: only a hang fails
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a trickled body: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "timeout") {
			t.Fatalf("trickled body: %d %s, want 400 naming the timeout", resp.StatusCode, body)
		}
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("the connection stayed open after the body timed out: %v", err)
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
