//go:build unix

package access

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// Finding 4 of issue 17 through the built binary: every pool has a share
// per caller (server.max_sessions_per_caller, and
// server.max_children_per_caller for scope = "session" children), so that
// one guest token cannot cost another token a session.

const (
	shareGuest = "guest-token-5f1c"
	shareAdmin = "admin-token-9a2e"
)

// sharesTokens are the guest's and the admin's tokens, each its own caller.
var sharesTokens = fmt.Sprintf(`
[profiles.default]

[[auth.tokens]]
token = %q
profiles = ["default"]

[[auth.tokens]]
token = %q
profiles = ["default"]
`, shareGuest, shareAdmin)

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// shareStream opens one stream of kind ("ws": an idle websocket, "sse": a
// legacy SSE stream, "get": the GET stream of the /mcp session sid) with
// token, and returns the HTTP status, the body of a refusal, and what ends
// an open stream.
func shareStream(t *testing.T, mux *itest.Mux, kind, token, sid string) (int, string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := http.Header{"Authorization": {"Bearer " + token}}
	if kind == "ws" {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		defer dcancel()
		c, resp, err := websocket.Dial(dctx, "ws://"+mux.Addr+"/ws", &websocket.DialOptions{Subprotocols: []string{"mcp"}, HTTPHeader: h})
		if err != nil {
			cancel()
			if resp == nil {
				t.Fatalf("websocket: %v", err)
			}
			return resp.StatusCode, err.Error(), func() {}
		}
		return http.StatusSwitchingProtocols, "", func() { c.CloseNow(); cancel() }
	}
	url := "http://" + mux.Addr + "/sse"
	if kind == "get" {
		url = mux.URL()
		h.Set("Mcp-Session-Id", sid)
		h.Set("Mcp-Protocol-Version", itest.RawProtocolVersion)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, string(b), func() {}
	}
	return resp.StatusCode, "", func() { cancel(); resp.Body.Close() }
}

// wantShareRefusal checks a refusal over the guest's share: 503 and a
// JSON-RPC error naming server.max_sessions_per_caller (a websocket is
// refused before its upgrade, with the status alone).
func wantShareRefusal(t *testing.T, what string, status int, body string, ws bool) {
	t.Helper()
	if status != http.StatusServiceUnavailable || !ws && (!strings.Contains(body, "server.max_sessions_per_caller (4)") || !strings.Contains(body, `"code":-32000`)) {
		t.Errorf("%s over the guest's share: %d %s; want 503 with a JSON-RPC error naming server.max_sessions_per_caller", what, status, body)
	}
}

// TestSharesPerCallerDoors: under max_sessions = 16 (so a share of 4 by
// default), the guest token fills its share with idle websockets, SSE
// streams, or /mcp sessions with their GET streams; every door then
// refuses it one more, while the admin token still opens a session. The
// audit log records each refusal as busy.
func TestSharesPerCallerDoors(t *testing.T) {
	dir := t.TempDir()
	audit := filepath.Join(dir, "audit.jsonl")
	cfg := fmt.Sprintf(`[server]
max_sessions = 16

[upstreams.demo]
command = %s
args = ["demo-server", "--name", "demo"]
required = true

[audit]
path = %s
`, itest.TomlString(itest.MuxBinary(t)), itest.TomlString(audit)) + sharesTokens
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Dir: dir})
	url := mux.URL()

	for _, kind := range []string{"ws", "sse", "get"} {
		t.Run(kind, func(t *testing.T) {
			var closers []func()
			var sessions []*itest.RawSession
			defer func() {
				for _, c := range closers {
					c()
				}
				for _, s := range sessions {
					itest.DeleteSession(t, s)
				}
			}()
			for i := 0; i < 4; i++ {
				if kind == "get" && i%2 == 0 {
					sessions = append(sessions, itest.OpenRawSession(t, url, bearer(shareGuest)))
					continue
				}
				sid := ""
				if kind == "get" {
					sid = sessions[len(sessions)-1].ID
				}
				status, body, end := shareStream(t, mux, kind, shareGuest, sid)
				if status != http.StatusOK && status != http.StatusSwitchingProtocols {
					t.Fatalf("the guest's %s %d within its share: %d %s", kind, i+1, status, body)
				}
				closers = append(closers, end)
			}
			r := itest.RawInitialize(t, url, bearer(shareGuest))
			wantShareRefusal(t, "initialize", r.Status, string(r.Body), false)
			status, body, _ := shareStream(t, mux, "ws", shareGuest, "")
			wantShareRefusal(t, "a websocket", status, body, true)
			status, body, _ = shareStream(t, mux, "sse", shareGuest, "")
			wantShareRefusal(t, "an SSE stream", status, body, false)
			if kind == "get" {
				status, body, _ = shareStream(t, mux, "get", shareGuest, sessions[0].ID)
				wantShareRefusal(t, "a GET stream", status, body, false)
			}
			admin := itest.OpenRawSession(t, url, bearer(shareAdmin))
			itest.DeleteSession(t, admin)
		})
		// The guest's places come back once its streams end.
		open := -1
		itest.WaitUntil(t, 30*time.Second, "every session and stream to end", func() bool {
			var st struct {
				Open int `json:"open_sessions"`
			}
			if json.Unmarshal([]byte(itest.GetWithToken(t, "http://"+mux.Addr+"/status.json", shareAdmin)), &st) != nil {
				return false
			}
			if st.Open != open {
				open = st.Open
				t.Logf("after %s: %d sessions and streams open", kind, open)
			}
			return open == 0
		})
	}
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"reason":"busy"`); n < 9 {
		t.Errorf("the audit log has %d busy lines for at least 9 refusals:\n%s", n, b)
	}
}

// TestSharesPerCallerChildren: with two scope = "session" stdio upstreams
// and max_children_per_caller = 3, the guest's sessions start three
// children; the call that needs a fourth, none of them busy, stops the
// guest's least recently used child and starts its own, so the guest
// still has three. The session whose child was stopped keeps working: its
// next call starts a new one, in the place of the next least recently
// used. The admin's child is never stopped for the guest.
func TestSharesPerCallerChildren(t *testing.T) {
	itest.RequireProc(t)
	bin := itest.MuxBinary(t)
	cfg := fmt.Sprintf(`[server]
max_children_per_caller = 3

[upstreams.one]
command = %[1]s
args = ["demo-server", "--name", "one"]
scope = "session"
required = true

[upstreams.two]
command = %[1]s
args = ["demo-server", "--name", "two"]
scope = "session"
required = true
`, itest.TomlString(bin)) + sharesTokens
	mux := itest.StartMux(t, cfg)
	url := mux.URL()
	// children returns the PIDs of the demo servers viewmux runs.
	children := func() map[int]bool {
		ps, err := itest.Descendants(mux.PID())
		if err != nil {
			t.Fatal(err)
		}
		pids := map[int]bool{}
		for _, p := range ps {
			if strings.Contains(itest.Cmdline(p.PID), "demo-server") {
				pids[p.PID] = true
			}
		}
		return pids
	}
	shared := len(children()) // the shared connections, where the catalogs come from
	call := func(s *itest.RawSession, id int, tool string) {
		t.Helper()
		if r := s.Post(t, "", nil, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, id, tool)); r.Status != http.StatusOK || r.Msg == nil || r.Msg.Error != nil {
			t.Fatalf("call %d (%s): %s", id, tool, r)
		}
	}
	// newChild makes a call that starts a child, and returns its PID once
	// viewmux runs want children in all.
	newChild := func(s *itest.RawSession, id int, tool string, want int) int {
		t.Helper()
		before := children()
		call(s, id, tool)
		born := 0
		itest.WaitUntil(t, 30*time.Second, fmt.Sprintf("%d children after call %d", want, id), func() bool {
			now := children()
			for pid := range now {
				if !before[pid] {
					born = pid
				}
			}
			return born != 0 && len(now) == want
		})
		return born
	}
	admin := itest.OpenRawSession(t, url, bearer(shareAdmin))
	adminChild := newChild(admin, 1, "two__list_notes", shared+1) // the oldest of all, idle
	a := itest.OpenRawSession(t, url, bearer(shareGuest))
	b := itest.OpenRawSession(t, url, bearer(shareGuest))
	aOne := newChild(a, 10, "one__list_notes", shared+2)
	newChild(a, 11, "two__list_notes", shared+3)
	newChild(b, 12, "one__list_notes", shared+4)

	// Over the share: a's "one", the guest's least recently used, stops.
	newChild(b, 20, "two__list_notes", shared+4)
	if children()[aOne] {
		t.Errorf("the guest's least recently used child %d still runs", aOne)
	}
	// a keeps working: its next call to "one" starts a child again.
	newChild(a, 21, "one__list_notes", shared+4)
	if !children()[adminChild] {
		t.Errorf("the admin's child %d was stopped for the guest", adminChild)
	}
	call(admin, 2, "two__list_notes")
	for _, s := range []*itest.RawSession{a, b, admin} {
		itest.DeleteSession(t, s)
	}
}
