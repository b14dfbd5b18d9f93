package upstream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/h1"
)

// hostileHTTP is a streamable HTTP upstream on a raw socket, written by
// hand so that every byte it answers is the test's choice: initialize,
// the listings and pings are answered as a well-behaved server does
// (sessionless, 2025-11-25, JSON bodies, no GET stream), and each
// tools/call is answered by onCall, which writes any bytes to the
// connection and returns false to close it (initialize too by onInit,
// when set). It counts the calls of each tool it received.
type hostileHTTP struct {
	url            string
	ln             net.Listener
	onInit, onCall func(conn net.Conn, tool, id string) bool

	mu    sync.Mutex
	calls map[string]int
	conns []net.Conn
	wg    sync.WaitGroup
}

func serveHostileHTTP(t *testing.T, onCall func(conn net.Conn, tool, id string) bool) *hostileHTTP {
	t.Helper()
	return serveHostileInit(t, nil, onCall)
}

// serveHostileInit is serveHostileHTTP with initialize answered by
// onInit (nil: as a well-behaved server does).
func serveHostileInit(t *testing.T, onInit, onCall func(conn net.Conn, tool, id string) bool) *hostileHTTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &hostileHTTP{url: "http://" + ln.Addr().String() + "/mcp", ln: ln, onInit: onInit, onCall: onCall, calls: map[string]int{}}
	s.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, conn)
			s.mu.Unlock()
			s.wg.Go(func() { s.serve(conn) })
		}
	})
	t.Cleanup(func() {
		s.stop()
		s.wg.Wait()
	})
	return s
}

// stop closes the listener and every connection: the upstream is gone.
func (s *hostileHTTP) stop() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

func (s *hostileHTTP) callsOf(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[tool]
}

// jsonAnswer is a whole HTTP response carrying one JSON-RPC result.
func jsonAnswer(id, result string) string {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":%s}`, id, result)
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// textResult is a tools/call result of one text.
func textResult(text string) string {
	return fmt.Sprintf(`{"content":[{"type":"text","text":%q}]}`, text)
}

func (s *hostileHTTP) serve(conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		if req.Method != http.MethodPost {
			io.WriteString(conn, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
			continue
		}
		var m struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		json.Unmarshal(body, &m)
		id, _ := m.ID.(string)
		switch m.Method {
		case "initialize":
			if s.onInit != nil {
				if !s.onInit(conn, "", id) {
					return
				}
				continue
			}
			io.WriteString(conn, jsonAnswer(id, `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1"}}`))
		case "tools/list":
			io.WriteString(conn, jsonAnswer(id, `{"tools":[{"name":"charge","inputSchema":{"type":"object"}},{"name":"echo","inputSchema":{"type":"object"}}]}`))
		case "tools/call":
			s.mu.Lock()
			s.calls[m.Params.Name]++
			s.mu.Unlock()
			if m.Params.Name == "echo" {
				io.WriteString(conn, jsonAnswer(id, textResult("echo "+id)))
				continue
			}
			if !s.onCall(conn, m.Params.Name, id) {
				return
			}
		case "":
			io.WriteString(conn, "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
		default:
			io.WriteString(conn, jsonAnswer(id, `{}`))
		}
	}
}

// startHostile connects an upstream named name to s.
func startHostile(t *testing.T, name string, s *hostileHTTP) *Upstream {
	t.Helper()
	cfg := &configs.Upstream{Name: name, Transport: configs.TransportHTTP, URL: s.url, Protocol: "2025-11-25",
		ConnectTimeout: 10 * time.Second, CallTimeout: 30 * time.Second, MaxMessageBytes: 16 << 20}
	opts := fastOptions(&logSink{})
	opts.ProbeInterval = -1
	u := New(cfg, opts)
	startUpstream(t, u)
	return u
}

// call calls tool on u and returns its text, or its error.
func call(u *Upstream, tool string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := u.Send(ctx, Request{Method: "tools/call", Target: tool, Params: json.RawMessage(`{"name":"` + tool + `"}`)})
	if err != nil {
		return "", err
	}
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(res, &r); err != nil || len(r.Content) != 1 {
		return "", fmt.Errorf("result %s: %v", res, err)
	}
	return r.Content[0].Text, nil
}

// nextID is the id of the request after id ("viewmux-N"): ids are
// sequential, so an upstream can forge the answer to the next one.
func nextID(id string) string {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "viewmux-"))
	return "viewmux-" + strconv.Itoa(n+1)
}

// TestHTTPCallNotReplayed: the upstream reads a tools/call of charge on a
// reused keep-alive connection, acts on it, and drops the connection
// before its answer came whole, as a crash, a proxy's idle reset or a
// load balancer's drain does. The call reaches it once, and fails with an
// error saying the outcome is unknown; the upstream stays up for the next
// call.
func TestHTTPCallNotReplayed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		written func(id string) string // before the connection is closed
	}{
		{"before any answer", func(string) string { return "" }},
		{"within the head", func(string) string { return "HTTP/1.1 200 OK\r\nContent-Type: appl" }},
		{"within a JSON body", func(id string) string {
			whole := jsonAnswer(id, textResult("charged"))
			return whole[:len(whole)-10]
		}},
		{"within an event stream", func(id string) string {
			return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"20\r\nevent: message\r\ndata: {\"jsonrpc\"\r\n"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := serveHostileHTTP(t, func(conn net.Conn, tool, id string) bool {
				io.WriteString(conn, c.written(id))
				return false
			})
			u := startHostile(t, "pay", s)
			if _, err := call(u, "echo"); err != nil { // the connection is a reused one from here
				t.Fatal(err)
			}
			_, err := call(u, "charge")
			const want = `upstream "pay" closed the connection after receiving the call; it may or may not have run`
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrOutcomeUnknown) {
				t.Errorf("dropped call: error %v, want ErrOutcomeUnknown saying %q", err, want)
			}
			if n := s.callsOf("charge"); n != 1 {
				t.Fatalf("the upstream received the call of charge %d times, want once", n)
			}
			if _, err := call(u, "echo"); err != nil {
				t.Fatalf("the call after: %v", err)
			}
		})
	}
}

// TestHTTPNotSentNotUnknown: a call whose connection could not be made
// (the upstream is gone: its idle connection closed, nothing listens)
// fails as the upstream being down, and as not sent: it is not one whose
// outcome is unknown.
func TestHTTPNotSentNotUnknown(t *testing.T) {
	t.Parallel()
	s := serveHostileHTTP(t, func(conn net.Conn, tool, id string) bool { return false })
	u := startHostile(t, "gone", s)
	if _, err := call(u, "echo"); err != nil {
		t.Fatal(err)
	}
	s.stop()
	s.wg.Wait() // every connection closed on the upstream's side
	_, err := call(u, "charge")
	if err == nil || !errors.Is(err, ErrDown) || !errors.Is(err, h1.ErrNotSent) || errors.Is(err, ErrOutcomeUnknown) ||
		!strings.Contains(err.Error(), `upstream "gone"`) || strings.Contains(err.Error(), "may or may not have run") {
		t.Fatalf("a call to an upstream that is gone: error %v, want ErrDown and ErrNotSent, naming it, not ErrOutcomeUnknown", err)
	}
	if n := s.callsOf("charge"); n != 0 {
		t.Fatalf("the upstream received the call %d times, want none", n)
	}
}

// TestHTTPUnreadBytesNeverAnswer: bytes an upstream sends past one call's
// answer (a forged answer to the next id) never answer the next call,
// which may be another client session's.
func TestHTTPUnreadBytesNeverAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		first func(id string) string
		ok    bool // the first call itself is answered
	}{
		{"second response appended", func(id string) string {
			return jsonAnswer(id, textResult("a")) + jsonAnswer(nextID(id), textResult("forged"))
		}, true},
		{"body longer than Content-Length", func(id string) string {
			return jsonAnswer(id, textResult("a")) + `{"jsonrpc":"2.0","id":"` + nextID(id) + `","result":` + textResult("forged") + `}`
		}, true},
		{"204 with a body", func(id string) string {
			return "HTTP/1.1 204 No Content\r\n\r\n" + jsonAnswer(nextID(id), textResult("forged"))
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := serveHostileHTTP(t, func(conn net.Conn, tool, id string) bool {
				io.WriteString(conn, c.first(id))
				return true
			})
			u := startHostile(t, "forger", s)
			got, err := call(u, "charge")
			if c.ok && (err != nil || got != "a") {
				t.Fatalf("the first call: %q, %v", got, err)
			}
			got, err = call(u, "echo")
			if err != nil || !strings.HasPrefix(got, "echo ") {
				t.Fatalf("the next call was answered %q, %v; want its own answer", got, err)
			}
		})
	}
}

// bigHead answers with a header line of line bytes, streamed, then the
// rest of an answer of result; it sends what it wrote to sent.
func bigHead(line int64, result string, sent chan<- int64) func(conn net.Conn, tool, id string) bool {
	return func(conn net.Conn, tool, id string) bool {
		var n int64
		defer func() {
			select {
			case sent <- n:
			default: // a reconnect's: the test reads the first
			}
		}()
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nX-Big: ")
		chunk := []byte(strings.Repeat("a", 64<<10))
		for n < line {
			m, err := conn.Write(chunk)
			n += int64(m)
			if err != nil {
				return false
			}
		}
		io.WriteString(conn, "\r\n"+strings.TrimPrefix(jsonAnswer(id, result), "HTTP/1.1 200 OK\r\n"))
		return true
	}
}

// TestHTTPHeaderBound: a response head past 10 MB (a header line the
// upstream streams without end) fails the call with an error naming the
// upstream and the bound, without reading it all.
func TestHTTPHeaderBound(t *testing.T) {
	t.Parallel()
	const line = 64 << 20
	sent := make(chan int64, 1)
	s := serveHostileHTTP(t, bigHead(line, textResult("big"), sent))
	u := startHostile(t, "bighead", s)
	_, err := call(u, "charge")
	if err == nil || !strings.Contains(err.Error(), `upstream "bighead"`) || !strings.Contains(err.Error(), "headers exceed 10485760 bytes") {
		t.Fatalf("a %d-byte header line: error %v, want one naming the upstream and the bound", line, err)
	}
	if n := <-sent; n >= line {
		t.Fatalf("the upstream wrote all %d bytes of its header line: it was read past the bound", n)
	}
	if n := s.callsOf("charge"); n != 1 {
		t.Fatalf("the call reached the upstream %d times, want once", n)
	}
}

// TestHTTPInformationalBound: an upstream that answers a call with 103
// Early Hints without end fails the call after 5 of them.
func TestHTTPInformationalBound(t *testing.T) {
	t.Parallel()
	const flood = 1_000_000
	sent := make(chan int, 1)
	s := serveHostileHTTP(t, func(conn net.Conn, tool, id string) bool {
		n := 0
		defer func() {
			select {
			case sent <- n:
			default:
			}
		}()
		bw := bufio.NewWriter(conn)
		for ; n < flood; n++ {
			if _, err := bw.WriteString("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"); err != nil {
				return false
			}
		}
		bw.WriteString(jsonAnswer(id, textResult("hinted")))
		return bw.Flush() == nil
	})
	u := startHostile(t, "hints", s)
	_, err := call(u, "charge")
	if err == nil || !strings.Contains(err.Error(), `upstream "hints"`) || !strings.Contains(err.Error(), "more than 5 informational (1xx) responses") {
		t.Fatalf("%d 103 responses: error %v, want one naming the upstream and the bound", flood, err)
	}
	if n := <-sent; n == flood {
		t.Fatalf("the upstream wrote all %d 103 responses: they were read past the bound", flood)
	}
}

// TestHTTPHeaderBoundAtConnect: the bound holds for initialize too, so an
// upstream cannot grow viewmux by its answer to the handshake: the connect
// fails with an error naming the upstream and the bound.
func TestHTTPHeaderBoundAtConnect(t *testing.T) {
	t.Parallel()
	const line = 64 << 20
	sent := make(chan int64, 1)
	s := serveHostileInit(t, bigHead(line, `{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"h","version":"1"}}`, sent), nil)
	cfg := &configs.Upstream{Name: "bighello", Transport: configs.TransportHTTP, URL: s.url, Protocol: "2025-11-25",
		ConnectTimeout: 10 * time.Second, CallTimeout: 30 * time.Second, MaxMessageBytes: 16 << 20}
	u := New(cfg, fastOptions(&logSink{}))
	t.Cleanup(func() { u.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := u.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), `upstream "bighello"`) || !strings.Contains(err.Error(), "headers exceed 10485760 bytes") {
		t.Fatalf("a %d-byte header line answering initialize: Start = %v, want an error naming the upstream and the bound", line, err)
	}
	if n := <-sent; n >= line {
		t.Fatalf("the upstream wrote all %d bytes of its header line: it was read past the bound", n)
	}
}

// TestHTTPRedirectedCallNotReplayed: a call redirected to another origin
// goes through Go's own Transport (h1 serves only the upstream's origin),
// and holds the same rule there: the other origin reads it on a reused
// connection and drops it; it reaches that origin once, and the call's
// outcome is told as unknown.
func TestHTTPRedirectedCallNotReplayed(t *testing.T) {
	t.Parallel()
	other := serveHostileHTTP(t, func(conn net.Conn, tool, id string) bool {
		if tool == "warm" {
			io.WriteString(conn, jsonAnswer(id, textResult("warm")))
			return true
		}
		return false
	})
	s := serveHostileHTTP(t, func(conn net.Conn, tool, id string) bool {
		io.WriteString(conn, "HTTP/1.1 307 Temporary Redirect\r\nLocation: "+other.url+"\r\nContent-Length: 0\r\n\r\n")
		return true
	})
	u := startHostile(t, "moved", s)
	if got, err := call(u, "warm"); err != nil || got != "warm" { // the other origin's connection is reused from here
		t.Fatalf("a redirected call: %q, %v", got, err)
	}
	_, err := call(u, "charge")
	const want = `upstream "moved" closed the connection after receiving the call; it may or may not have run`
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("dropped redirected call: error %v, want ErrOutcomeUnknown saying %q", err, want)
	}
	if n := other.callsOf("charge"); n != 1 {
		t.Fatalf("the other origin received the call of charge %d times, want once", n)
	}
}
