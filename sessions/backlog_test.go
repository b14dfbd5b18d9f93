package sessions

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func TestBacklogAdmit(t *testing.T) {
	b := newBacklog(100, 2)
	done1, e := b.admit()
	if e != nil {
		t.Fatalf("first call refused: %v", e.Message)
	}
	done2, e := b.admit()
	if e != nil {
		t.Fatalf("second call refused: %v", e.Message)
	}
	if _, e := b.admit(); e == nil || e.Code != errBusyCode || !strings.Contains(e.Message, "2 calls in flight") {
		t.Fatalf("third call in flight: %+v, want busy naming the limit of 2", e)
	}
	done1()
	done1() // twice is once
	if _, e := b.admit(); e != nil {
		t.Fatalf("a slot given back was not reusable: %v", e.Message)
	}
	done2()
	b.hold(100)
	if _, e := b.admit(); e == nil || e.Code != errBusyCode || !strings.Contains(e.Message, "max_pending_bytes is 100") {
		t.Fatalf("with 100 bytes unread: %+v, want busy naming server.max_pending_bytes", e)
	}
	b.written(1)
	if done, e := b.admit(); e != nil {
		t.Fatalf("with 99 bytes unread: refused: %v", e.Message)
	} else {
		done()
	}
	var none *backlog
	if done, e := none.admit(); e != nil {
		t.Fatal("a nil backlog refused a call")
	} else {
		done()
	}
}

func TestFrameQueue(t *testing.T) {
	b := newBacklog(10, 0)
	overflows := 0
	q := newFrameQueue(b, func() { overflows++ })
	if !q.put([]byte("abcd")) || !q.put([]byte("efgh")) {
		t.Fatal("frames within the limit were refused")
	}
	if b.held() != 8 {
		t.Fatalf("held %d bytes, want 8", b.held())
	}
	var got []string
	q.drain(func(f []byte) { got = append(got, string(f)) })
	if strings.Join(got, ",") != "abcd,efgh" || b.held() != 0 {
		t.Fatalf("drained %v with %d held, want abcd,efgh in order and 0 held", got, b.held())
	}
	q.put([]byte("123456"))
	if q.put([]byte("7890X")) {
		t.Fatal("a frame past the limit was queued")
	}
	if overflows != 1 || b.held() != 6 {
		t.Fatalf("overflow called %d times with %d held, want once with the first frame's 6", overflows, b.held())
	}
	if q.put([]byte("y")) || overflows != 1 {
		t.Fatal("the queue took frames after it overflowed, or called overflow again")
	}
	q.handoff(nil)
	if b.held() != 0 {
		t.Fatalf("a handoff to nothing left %d bytes counted", b.held())
	}
}

// TestFrameQueueHandoff: a settled call's frames, queued and later, go to
// its late sink in order, uncounted once handed over.
func TestFrameQueueHandoff(t *testing.T) {
	b := newBacklog(100, 0)
	q := newFrameQueue(b, nil)
	q.put([]byte("a"))
	q.put([]byte("b"))
	var got []string
	q.handoff(func(f []byte) bool { got = append(got, string(f)); return true })
	if !q.put([]byte("c")) {
		t.Fatal("a frame after the handoff was refused")
	}
	if strings.Join(got, "") != "abc" || b.held() != 0 {
		t.Fatalf("late frames %q with %d bytes held, want abc and 0", strings.Join(got, ""), b.held())
	}
	q2 := newFrameQueue(b, nil)
	q2.handoff(nil)
	if q2.put([]byte("x")) || b.held() != 0 {
		t.Fatal("a queue handed off to nothing took a frame")
	}
}

// bigUpstream is a real MCP server whose "big" tool answers a text of
// "bytes" bytes, whose "gated" tool does the same once gate is closed,
// and whose "wait" tool blocks until cancelled. It counts
// the tools/call requests it receives by tool name.
type bigUpstream struct {
	url   string
	mu    sync.Mutex
	calls map[string]int
	waits chan struct{}
	gate  chan struct{} // "gated" answers once it is closed
}

func newBigUpstream(t *testing.T) *bigUpstream {
	t.Helper()
	bu := &bigUpstream{calls: make(map[string]int), waits: make(chan struct{}, 64), gate: make(chan struct{})}
	count := func(name string) {
		bu.mu.Lock()
		bu.calls[name]++
		bu.mu.Unlock()
	}
	srv := server.NewMCPServer("big", "1", server.WithToolCapabilities(true))
	srv.AddTool(mcp.NewTool("big", mcp.WithNumber("bytes"), mcp.WithReadOnlyHintAnnotation(true)), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		count("big")
		return mcp.NewToolResultText(strings.Repeat("x", req.GetInt("bytes", 0))), nil
	})
	srv.AddTool(mcp.NewTool("wait", mcp.WithReadOnlyHintAnnotation(true)), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		count("wait")
		bu.waits <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	srv.AddTool(mcp.NewTool("gated", mcp.WithNumber("bytes"), mcp.WithReadOnlyHintAnnotation(true)), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		count("gated")
		select {
		case <-bu.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return mcp.NewToolResultText(strings.Repeat("x", req.GetInt("bytes", 0))), nil
	})
	srv.AddTool(mcp.NewTool("quick", mcp.WithReadOnlyHintAnnotation(true)), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		count("quick")
		return mcp.NewToolResultText("quick"), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(hs.Close)
	bu.url = hs.URL
	return bu
}

func (bu *bigUpstream) count(name string) int {
	bu.mu.Lock()
	defer bu.mu.Unlock()
	return bu.calls[name]
}

// bigAnswer is larger than what loopback socket buffers absorb (a send
// buffer grows to 4 MiB; the client's receive buffer is kept small), so a
// client that does not read leaves it in viewmux.
const bigAnswer = 12 << 20

const bigConfig = "max_message_bytes = \"64MiB\"\n[server]\nmax_pending_bytes = \"1MiB\"\n"

// rawSend sends one POST /mcp with the header lines head (each ending
// in CRLF) and body on a connection of its own and never reads the
// answer: a client that stopped reading.
func rawSend(t *testing.T, hs *httptest.Server, head, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096) // keep what the kernel absorbs small
	}
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n%sContent-Length: %d\r\n\r\n%s", head, len(body), body)
	return c
}

// rawPost sends one POST /mcp on session with rawSend: a client that
// stopped reading.
func rawPost(t *testing.T, hs *httptest.Server, session, body string) net.Conn {
	t.Helper()
	return rawSend(t, hs, "Mcp-Session-Id: "+session+"\r\nMcp-Protocol-Version: 2025-11-25\r\n", body)
}

// postMCP is one POST /mcp over the network with the headers hdr,
// answered in full.
func postMCP(t *testing.T, hs *httptest.Server, hdr http.Header, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, hs.URL+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr.Clone()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// postHTTP is one POST /mcp over the network, answered in full.
func postHTTP(t *testing.T, hs *httptest.Server, session, body string) (int, string) {
	t.Helper()
	hdr := http.Header{}
	hdr.Set("Mcp-Protocol-Version", "2025-11-25")
	if session != "" {
		hdr.Set(mcp.HeaderSessionID, session)
	}
	code, _, answer := postMCP(t, hs, hdr, body)
	return code, answer
}

func callBody(id int, tool string, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"up__%s","arguments":%s}}`, id, tool, args)
}

// TestSlowReaderOnMCP: a /mcp client that stops reading a large answer
// leaves in viewmux's backlog only what the answer's stream holds (a large
// result is written as it is read, never held whole); past
// server.max_pending_bytes its next calls are refused as busy (and
// audited), with nothing sent upstream; the stalled write fails at the
// write deadline, which ends the session: its id then gets 404, and what
// it held is let go.
func TestSlowReaderOnMCP(t *testing.T) {
	bu := newBigUpstream(t)
	var audit syncBuf
	const config = "max_message_bytes = \"64MiB\"\n[server]\nmax_pending_bytes = \"64KiB\"\n"
	s := newServerWith(t, bu.url, config, Options{WriteTimeout: 2 * time.Second, Audit: &audit})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	id := openSession(t, s.Handler(), "")
	held := func() int64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		if sess := s.sessions[id]; sess != nil {
			return sess.held.held()
		}
		return -1
	}

	rawPost(t, hs, id, callBody(2, "big", fmt.Sprintf(`{"bytes":%d}`, bigAnswer)))
	waitLong(t, func() bool { return held() > 64<<10 }, "the unread answer is held")
	if n := held(); n > streamHeld {
		t.Fatalf("a streamed answer the client does not read holds %d bytes, more than its stream's %d", n, streamHeld)
	}

	code, body := postHTTP(t, hs, id, callBody(3, "quick", "{}"))
	if code != http.StatusOK || !strings.Contains(body, `"code":-32000`) || !strings.Contains(body, "max_pending_bytes") {
		t.Fatalf("a call while the session holds %d unread bytes: %d %s; want a -32000 busy error naming server.max_pending_bytes", held(), code, body)
	}
	if n := bu.count("quick"); n != 0 {
		t.Fatalf("the refused call reached the upstream %d times", n)
	}
	if !strings.Contains(audit.String(), `"reason":"busy"`) {
		t.Fatalf("the refusal was not audited as busy:\n%s", audit.String())
	}

	waitLong(t, func() bool { return held() == -1 }, "the stalled session is ended")
	code, body = postHTTP(t, hs, id, callBody(4, "quick", "{}"))
	if code != http.StatusNotFound {
		t.Fatalf("the ended session's id: %d %s, want 404", code, body)
	}
}

// TestMCPCallsInFlightCap: one /mcp session may have maxCallsPerSession
// routed calls in flight; the next is refused as busy before it reaches
// the upstream, and a slot comes back when a call ends.
func TestMCPCallsInFlightCap(t *testing.T) {
	bu := newBigUpstream(t)
	s := newServerWith(t, bu.url, bigConfig, Options{})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	id := openSession(t, s.Handler(), "")
	var conns []net.Conn
	for i := range maxCallsPerSession {
		conns = append(conns, rawPost(t, hs, id, callBody(10+i, "wait", "{}")))
	}
	for range maxCallsPerSession {
		select {
		case <-bu.waits:
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of %d calls reached the upstream", bu.count("wait"), maxCallsPerSession)
		}
	}
	code, body := postHTTP(t, hs, id, callBody(99, "quick", "{}"))
	if code != http.StatusOK || !strings.Contains(body, `"code":-32000`) || !strings.Contains(body, fmt.Sprintf("%d calls in flight", maxCallsPerSession)) {
		t.Fatalf("call number %d: %d %s, want a -32000 busy error naming the limit", maxCallsPerSession+1, code, body)
	}
	if n := bu.count("quick"); n != 0 {
		t.Fatalf("the refused call reached the upstream %d times", n)
	}
	conns[0].Close() // the client went away: that call is cancelled, its slot freed
	waitFor(t, func() bool {
		code, body := postHTTP(t, hs, id, callBody(100, "quick", "{}"))
		return code == http.StatusOK && strings.Contains(body, `"text":"quick"`)
	}, "a slot comes back")
}

// TestSlowReaderOnWebsocket: a websocket client that stops reading leaves
// a large answer with viewmux; its further calls are refused as busy without
// reaching the upstream, and the stalled write ends the session at the
// write deadline.
func TestSlowReaderOnWebsocket(t *testing.T) {
	bu := newBigUpstream(t)
	s := newServerWith(t, bu.url, bigConfig, Options{WriteTimeout: 2 * time.Second})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	p := dialWSPeer(t, hs, "", nil)
	initializeAs(t, p, map[string]any{})
	var ss *session
	waitFor(t, func() bool {
		for _, x := range s.streams() {
			ss = x
		}
		return ss != nil
	}, "the session is listed")
	p.send(t, callBody(2, "big", fmt.Sprintf(`{"bytes":%d}`, bigAnswer)))
	waitLong(t, func() bool { return ss.held.held() > 1<<20 }, "the unread answer is held")
	for i := range 5 {
		p.send(t, callBody(3+i, "quick", "{}"))
	}
	waitLong(t, func() bool { return ss.ctx().Err() != nil }, "the stalled session ends")
	if n := bu.count("quick"); n != 0 {
		t.Fatalf("calls sent while the session held %d unread bytes reached the upstream %d times", ss.held.held(), n)
	}
}

// waitLong is waitFor for what takes a large answer through a loaded
// machine under the race detector: it gives up after a minute.
func waitLong(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
