package sessions

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

func TestCallerBytes(t *testing.T) {
	crossed := 0
	cb := &callerBytes{max: 100, crossed: func() { crossed++ }}
	cb.add("a", 60)
	if crossed != 0 {
		t.Fatalf("a caller under its share crossed it")
	}
	cb.add("a", 40)
	if crossed != 1 {
		t.Fatalf("reaching the share: crossed %d times, want 1", crossed)
	}
	cb.add("b", 10)
	cb.add("", 1000) // nobody's: the stdio door's client
	if e := cb.admit("a"); e == nil || e.Code != errBusyCode || !strings.Contains(e.Message, "server.max_pending_bytes_per_caller is 100") {
		t.Fatalf("a holds 100 of 100: %+v, want busy naming server.max_pending_bytes_per_caller", e)
	}
	for _, who := range []string{"b", ""} {
		if e := cb.admit(who); e != nil {
			t.Fatalf("caller %q was refused with a's bytes: %v", who, e.Message)
		}
	}
	cb.add("a", -1)
	if e := cb.admit("a"); e != nil {
		t.Fatalf("a holds 99 of 100: refused: %v", e.Message)
	}
	if crossed != 2 {
		t.Fatalf("falling under the share: crossed %d times in all, want 2", crossed)
	}
	cb.add("a", -99)
	cb.add("b", -10)
	if crossed != 3 {
		t.Fatalf("a, having filled its share, holds nothing; b never filled its: crossed %d times in all, want 3", crossed)
	}
	if len(cb.held) != 0 {
		t.Fatalf("callers holding nothing are still counted: %v", cb.held)
	}
	// An answer let go for want of room refuses new calls until the
	// caller holds at most half its share.
	cb.add("a", 60)
	if ok, held := cb.reserve("a", 50); ok || held != 60 {
		t.Fatalf("a holds 60 of 100 and reserves 50: ok %v, held %d; want refused, 60", ok, held)
	}
	if e := cb.admit("a"); e == nil {
		t.Fatal("a had an answer let go: a new call was admitted")
	}
	if ok, _ := cb.reserve("a", 40); !ok {
		t.Fatal("a holds 60 of 100 and reserves 40: refused")
	}
	cb.add("a", -45)
	if e := cb.admit("a"); e == nil {
		t.Fatal("a holds 55 of 100, over half, since its answer was let go: a new call was admitted")
	}
	cb.add("a", -55)
	if e := cb.admit("a"); e != nil || len(cb.held) != 0 {
		t.Fatalf("a holds nothing: %v, %v", e, cb.held)
	}
	if ok, _ := cb.reserve("a", 1000); !ok {
		t.Fatal("a caller holding nothing was refused one answer larger than its share")
	}
	cb.add("a", -1000)
	var none *callerBytes
	none.add("a", 1)
	if e := none.admit("a"); e != nil || none.of("a") != 0 {
		t.Fatal("a nil callerBytes counted or refused")
	}
}

// slowCallerConfig gives two tokens, one caller each, a share of 2 MiB of
// unread answers, with sessions of 1 MiB.
const slowCallerConfig = `max_message_bytes = "64MiB"
[server]
max_pending_bytes = "1MiB"
max_pending_bytes_per_caller = "2MiB"
[profiles.all]
[[auth.tokens]]
token = "tok-a"
profiles = ["all"]
[[auth.tokens]]
token = "tok-b"
profiles = ["all"]
`

// tokenCaller is who a static token's requests are, for the shares
// (callerOf).
func tokenCaller(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "token:" + hex.EncodeToString(sum[:])
}

// modernCallBody is a stateless 2026-07-28 tools/call of up__tool.
func modernCallBody(id int, tool, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"up__%s","arguments":%s,`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, id, tool, args)
}

// rawModernPost sends a stateless tools/call of tool as token with
// rawSend, on a connection of its own, and never reads the answer.
func rawModernPost(t *testing.T, hs *httptest.Server, token, tool, args string) net.Conn {
	t.Helper()
	return rawSend(t, hs, fmt.Sprintf("Authorization: Bearer %s\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: up__%s\r\n", token, tool),
		modernCallBody(2, tool, args))
}

// postAs is one POST /mcp as token over the network, answered in full;
// session "" with a 2026-07-28 body is a stateless request.
func postAs(t *testing.T, hs *httptest.Server, token, session, body string) (int, http.Header, string) {
	t.Helper()
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+token)
	if session != "" {
		hdr.Set(mcp.HeaderSessionID, session)
		hdr.Set("Mcp-Protocol-Version", "2025-11-25")
	} else if strings.Contains(body, "2026-07-28") {
		hdr.Set("Mcp-Protocol-Version", "2026-07-28")
		hdr.Set("Mcp-Method", "tools/call")
		hdr.Set("Mcp-Name", "up__quick")
	}
	return postMCP(t, hs, hdr, body)
}

// TestSlowCallerIsBounded: what one caller leaves unread counts over all
// its sessions and requests, on every door. While a stateless request of
// caller A's holds an unread answer larger than
// server.max_pending_bytes_per_caller, A's new calls are refused as busy,
// naming the limit, before they reach the upstream: stateless, on a /mcp
// session and on a websocket alike. Caller B's calls go on. At the write
// deadline the stalled answer is let go, and A's calls are served again:
// the count comes back to nothing.
func TestSlowCallerIsBounded(t *testing.T) {
	bu := newBigUpstream(t)
	var audit syncBuf
	s := newServerWith(t, bu.url, slowCallerConfig, Options{WriteTimeout: 2 * time.Second, Audit: &audit})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	a, b := tokenCaller("tok-a"), tokenCaller("tok-b")
	quick := modernCallBody(3, "quick", "{}")
	served := func(body string) bool { return strings.Contains(body, `"text":"quick"`) }

	code, hdr, body := postAs(t, hs, "tok-a", "", initializeBody)
	sessA := hdr.Get(mcp.HeaderSessionID)
	if code != http.StatusOK || sessA == "" {
		t.Fatalf("initialize as a: %d %s", code, body)
	}
	postAs(t, hs, "tok-a", sessA, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	wsA := dialWSPeer(t, hs, "", http.Header{"Authorization": {"Bearer tok-a"}})
	initializeAs(t, wsA, map[string]any{})

	rawModernPost(t, hs, "tok-a", "big", fmt.Sprintf(`{"bytes":%d}`, bigAnswer))
	waitLong(t, func() bool { return s.unread.of(a) > 2<<20 }, "a's unread answer counts against a")

	refused := func(door, body string) {
		t.Helper()
		if !strings.Contains(body, `"code":-32000`) || !strings.Contains(body, "server.max_pending_bytes_per_caller is 2097152") {
			t.Errorf("%s: a call of a's while a holds %d unread bytes: %s; want a -32000 busy error naming server.max_pending_bytes_per_caller", door, s.unread.of(a), body)
		}
	}
	_, _, body = postAs(t, hs, "tok-a", "", quick)
	refused("a stateless request", body)
	_, _, body = postAs(t, hs, "tok-a", sessA, callBody(4, "quick", "{}"))
	refused("a /mcp session", body)
	wsA.send(t, callBody(5, "quick", "{}"))
	if m := wsA.recv(t); m.Error == nil {
		t.Errorf("/ws: a call of a's while a holds %d unread bytes was answered: %s", s.unread.of(a), m.Result)
	} else {
		refused("/ws", fmt.Sprintf(`"code":%d %s`, m.Error.Code, m.Error.Message))
	}
	if n := bu.count("quick"); n != 0 {
		t.Fatalf("a's refused calls reached the upstream %d times", n)
	}
	if !strings.Contains(audit.String(), `"reason":"busy"`) {
		t.Errorf("the refusals were not audited as busy:\n%s", audit.String())
	}

	if _, _, body := postAs(t, hs, "tok-b", "", quick); !served(body) {
		t.Fatalf("b's call while a holds its share: %s; want it served", body)
	}
	if s.unread.of(b) != 0 {
		t.Fatalf("b's answered call left %d bytes counted against b", s.unread.of(b))
	}

	waitLong(t, func() bool { return s.unread.of(a) == 0 }, "the stalled answer is let go at the write deadline")
	if _, _, body := postAs(t, hs, "tok-a", "", quick); !served(body) {
		t.Fatalf("a's call once its unread answer was let go: %s; want it served", body)
	}
	wsA.send(t, callBody(6, "quick", "{}"))
	if m := wsA.recv(t); m.Error != nil {
		t.Fatalf("/ws: a's call once its unread answer was let go: %+v", m.Error)
	}
	s.unread.mu.Lock()
	defer s.unread.mu.Unlock()
	if len(s.unread.held) != 0 {
		t.Fatalf("callers holding nothing are still counted: %v", s.unread.held)
	}
}

// TestCallsSentAtOnceAreBounded: caller A sends its calls all at once,
// so each is admitted while A holds nothing, and reads none of the
// answers, which then come together. One answer is held for A (a caller
// that holds nothing is always let one through); each of the others
// finds A's share full and is let go, answered by the busy error that
// says the call ran. What A holds stays within one answer, and comes back
// to nothing at the write deadline (long enough that a loaded machine
// delivers every answer before it).
func TestCallsSentAtOnceAreBounded(t *testing.T) {
	bu := newBigUpstream(t)
	s := newServerWith(t, bu.url, slowCallerConfig, Options{WriteTimeout: 10 * time.Second})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	a := tokenCaller("tok-a")
	const calls = 5
	var conns []net.Conn
	for range calls {
		conns = append(conns, rawModernPost(t, hs, "tok-a", "gated", fmt.Sprintf(`{"bytes":%d}`, bigAnswer)))
	}
	waitLong(t, func() bool { return bu.count("gated") == calls }, "every call reaches the upstream before any is answered")
	close(bu.gate)

	answered, letGo := 0, 0
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if resp.ContentLength > 64<<10 {
			answered++ // left unread
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"code":-32000`) || !strings.Contains(string(b), "the call ran, but its answer") ||
			!strings.Contains(string(b), "server.max_pending_bytes_per_caller is 2097152") {
			t.Fatalf("call %d: %s; want the busy error saying the call ran and naming server.max_pending_bytes_per_caller", i, b)
		}
		letGo++
	}
	held := s.unread.of(a)
	t.Logf("%d calls sent at once: %d answers held for the caller, %d let go; it holds %d bytes", calls, answered, letGo, held)
	if answered != 1 || letGo != calls-1 {
		t.Fatalf("%d answers held and %d let go, of %d calls; want 1 and %d", answered, letGo, calls, calls-1)
	}
	// One answer holds the buffers it was read and rewritten into (two,
	// each up to a quarter larger than what it holds: upstream.Loan).
	if limit := int64(5 * bigAnswer / 2); held > limit {
		t.Fatalf("the caller holds %d bytes, more than one answer of %d bytes and its buffers (%d)", held, bigAnswer, limit)
	}
	waitLong(t, func() bool { return s.unread.of(a) == 0 }, "the unread answer is let go at the write deadline")
}

// TestForgetHeldCall: forget reports whether a call was held and not
// retried, whether or not its wait ran out first, so that the call's
// frames are let go (and stop counting against its session and caller)
// exactly when nobody will await it.
func TestForgetHeldCall(t *testing.T) {
	h := newHeldCalls("r", 0)
	hold := func() (*call, *ask, string) {
		c, a := &call{abort: func(error) {}}, &ask{reply: make(chan askReply, 1)}
		state, err := h.hold(c, a)
		if err != nil {
			t.Fatal(err)
		}
		return c, a, state
	}
	if h.forget(&call{}) {
		t.Error("forget reported a call that was never held")
	}
	c, _, _ := hold()
	if !h.forget(c) || h.forget(c) {
		t.Error("a held call that ended unretried: forget must report it once")
	}
	c, _, state := hold()
	if _, err := h.take(state); err != nil {
		t.Fatal(err)
	}
	if h.forget(c) {
		t.Error("forget reported a call its retry took: its retry awaits it")
	}
	h.wait = time.Nanosecond
	c, a, _ := hold()
	<-a.reply // its wait ran out: the upstream was told
	if !h.forget(c) {
		t.Error("a held call whose wait ran out: forget did not report it")
	}
}
