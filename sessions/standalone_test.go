package sessions

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// openGET opens the GET stream of the /mcp session id and returns a
// channel of the data lines it carries; the channel closes when the stream
// ends.
func openGET(t *testing.T, hs *httptest.Server, id string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(mcp.HeaderSessionID, id)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /mcp: %d %v", resp.StatusCode, resp.Header)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines <- data
			}
		}
	}()
	return lines
}

// next returns the next data line of a GET stream, or fails.
func next(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("the GET stream ended")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("nothing on the GET stream")
	}
	return ""
}

// ended reports whether a GET stream ends within 10 seconds.
func ended(lines <-chan string) bool {
	for {
		select {
		case _, ok := <-lines:
			if !ok {
				return true
			}
		case <-time.After(10 * time.Second):
			return false
		}
	}
}

// TestStandaloneStream: what belongs to none of a /mcp session's calls
// goes to that session's GET stream and nowhere else; a second GET
// replaces the first, which ends; a DELETE ends the session's stream, and
// its slot and id with it.
func TestStandaloneStream(t *testing.T) {
	s, _, hs := newDoorServer(t, "")
	h := s.Handler()
	a, b := openSession(t, h, ""), openSession(t, h, "")
	ga, gb := openGET(t, hs, a), openGET(t, hs, b)
	waitFor(t, func() bool { return s.slots.live() == 4 }, "two sessions and two streams to hold their slots")

	s.notify([]string{a}, string(mcp.MethodNotificationToolsListChanged), nil)
	if got := next(t, ga); got != `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` {
		t.Fatalf("session a's stream got %s", got)
	}
	s.upstreamLog("up", map[string]any{"level": "error", "data": "for b only"})
	post(h, "", b, `{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"info"}}`)
	s.upstreamLog("up", map[string]any{"level": "error", "data": "for b only"})
	if got := next(t, gb); !strings.Contains(got, `"for b only"`) || !strings.Contains(got, `"notifications/message"`) {
		t.Fatalf("session b's stream got %s, want its log message", got)
	}
	select {
	case got := <-ga:
		t.Fatalf("session a, which set no log level, got %s", got)
	case <-time.After(200 * time.Millisecond):
	}

	again := openGET(t, hs, a)
	if !ended(ga) {
		t.Fatal("a second GET did not end the first")
	}
	s.notify([]string{a}, string(mcp.MethodNotificationPromptsListChanged), nil)
	if got := next(t, again); !strings.Contains(got, "prompts/list_changed") {
		t.Fatalf("the new stream got %s", got)
	}

	del := newRequest("", a, "")
	del.Method = http.MethodDelete
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, del)
	if rec.Code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
	}
	if !ended(again) {
		t.Fatal("DELETE did not end the session's GET stream")
	}
	waitFor(t, func() bool { return s.slots.live() == 2 && s.Sessions() == 1 }, "the deleted session's slots back")
	if rec := post(h, "", a, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); rec.Code != http.StatusNotFound {
		t.Fatalf("ping on the deleted session: %d %s", rec.Code, rec.Body)
	}
}

// TestStandaloneStreamDropsForASlowReader: a GET stream whose client does
// not read holds at most standaloneQueue frames; what comes past it is
// dropped, not queued without bound, and the session's calls still work.
func TestStandaloneStreamDropsForASlowReader(t *testing.T) {
	s, _, hs := newDoorServer(t, "")
	h := s.Handler()
	a := openSession(t, h, "")
	openGETUnread(t, hs, a)
	waitFor(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.sessions[a].get != nil
	}, "the GET stream to open")
	big := map[string]any{"level": "error", "data": strings.Repeat("x", 64<<10)}
	post(h, "", a, `{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}`)
	for range 2000 {
		s.upstreamLog("up", big) // 125 MB if nothing were dropped
	}
	s.mu.Lock()
	held := s.sessions[a].held.held()
	s.mu.Unlock()
	if held > int64(standaloneQueue+2)*(66<<10) {
		t.Fatalf("%d bytes held for a client that does not read its GET stream", held)
	}
	if rec := post(h, "", a, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"tools"`) {
		t.Fatalf("tools/list beside a stalled GET stream: %d %.200s", rec.Code, rec.Body)
	}
}

// openGETUnread opens a GET stream and never reads it.
func openGETUnread(t *testing.T, hs *httptest.Server, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/mcp", nil)
	req.Header.Set(mcp.HeaderSessionID, id)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
}
