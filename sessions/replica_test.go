package sessions

import (
	"net/http"
	"strings"
	"testing"
)

// TestSessionIDsNameTheReplica checks every door that mints ids: each id
// starts with server.replica_id and a dot, and an id minted by another
// replica is answered 404, as an unknown one, so that its client
// initializes again.
func TestSessionIDsNameTheReplica(t *testing.T) {
	s, _, hs := newDoorServer(t, "[server]\nreplica_id = \"eu-1\"\n")
	const prefix = "eu-1."

	t.Run("/mcp", func(t *testing.T) {
		id := openSession(t, s.Handler(), "")
		if !strings.HasPrefix(id, prefix) || len(id) < len(prefix)+26 {
			t.Fatalf("session id %q, want %q and at least 26 random characters", id, prefix)
		}
		if other := openSession(t, s.Handler(), ""); other == id {
			t.Fatalf("two sessions got the same id %q", id)
		}
		foreign := "eu-2" + strings.TrimPrefix(id, "eu-1")
		for _, body := range []string{
			`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__tool_0000","arguments":{"query":"q"}}}`,
		} {
			if w := post(s.Handler(), "", foreign, body); w.Code != http.StatusNotFound {
				t.Errorf("%s with another replica's id: %d %s, want 404", body, w.Code, w.Body)
			}
		}
		if w := post(s.Handler(), "", id, `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`); w.Code != http.StatusOK {
			t.Errorf("tools/list on its own session: %d %s", w.Code, w.Body)
		}
	})
	t.Run("/sse", func(t *testing.T) {
		code, body, p := openSSE(t, hs, "", nil)
		if p == nil {
			t.Fatalf("GET /sse: %d %s", code, body)
		}
		id := strings.TrimPrefix(p.endpoint, "/message?sessionId=")
		if !strings.HasPrefix(id, prefix+"sse-") {
			t.Fatalf("endpoint %q: session id %q, want it to start with %q", p.endpoint, id, prefix+"sse-")
		}
		foreign := "/message" + "?sessionId=eu-2" + strings.TrimPrefix(id, "eu-1")
		if code, body := p.post(t, foreign, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil); code != http.StatusNotFound {
			t.Errorf("POST %s: %d %s, want 404", foreign, code, body)
		}
	})
	t.Run("/ws", func(t *testing.T) {
		p := dialWSPeer(t, hs, "", nil)
		initializeAs(t, p, map[string]any{})
		var ws []string
		for _, ss := range allStreams(s) {
			if ss.kind == doorWS {
				ws = append(ws, ss.ID())
			}
		}
		if len(ws) != 1 || !strings.HasPrefix(ws[0], prefix+"ws-") {
			t.Fatalf("websocket session ids %q, want one starting with %q", ws, prefix+"ws-")
		}
	})
}

// TestRequestStateNamesTheReplica checks that a held call's requestState
// names the replica that holds it, and that a retry reaching another
// replica is told where the call is rather than that it does not exist.
func TestRequestStateNamesTheReplica(t *testing.T) {
	here, there := newHeldCalls("eu-1", 0), newHeldCalls("eu-2", 0)
	state, err := here.hold(&call{}, &ask{reply: make(chan askReply, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := there.take(state); err == nil || !strings.Contains(err.Error(), `belongs to viewmux replica "eu-1", not this one ("eu-2")`) {
		t.Fatalf("retry on another replica: %v, want it to name replica eu-1", err)
	}
	hc, err := here.take(state)
	if err != nil || hc == nil {
		t.Fatalf("retry on its own replica: %v", err)
	}
	if _, err := here.take(state); err == nil || !strings.Contains(err.Error(), "ended or expired") {
		t.Fatalf("second retry: %v, want ended or expired", err)
	}
}
