package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// rawServer is a loopback upstream that speaks HTTP/1.1 by hand: serve
// gets each request as net/http parsed it (read to its end), and writes
// whatever bytes it likes to the connection. It counts requests.
type rawServer struct {
	url      string
	requests atomic.Int64
	conns    atomic.Int64
}

// serveRaw starts a rawServer. serve is called for the nth request
// (from 1, over all connections) and the ith on its connection (from 1);
// returning false closes the connection.
func serveRaw(t *testing.T, serve func(conn net.Conn, n, i int64) bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{url: "http://" + ln.Addr().String() + "/mcp"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			mu.Lock()
			open = append(open, conn)
			mu.Unlock()
			wg.Go(func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for i := int64(1); ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if !serve(conn, s.requests.Add(1), i) {
						return
					}
				}
			})
		}
	})
	return s
}

// answer is a whole response of body text.
func answer(text string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(text), text)
}

// TestNoReplayAfterWrite: an upstream reads a call on a reused
// keep-alive connection and closes it without answering, as a crash, a
// proxy's idle reset or a load balancer's drain does. The call is not
// sent again: the upstream may have acted on it.
func TestNoReplayAfterWrite(t *testing.T) {
	t.Parallel()
	s := serveRaw(t, func(conn net.Conn, n, i int64) bool {
		if n == 1 {
			io.WriteString(conn, answer(`{"ok":1}`))
			return true
		}
		return false // read the call, then gone
	})
	tr := newTransport(t, s.url)
	resp, err := post(t, context.Background(), tr, s.url, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	_, err = post(t, context.Background(), tr, s.url, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge"}}`)
	if err == nil {
		t.Fatal("a call the upstream never answered succeeded")
	}
	if errors.Is(err, ErrNotSent) {
		t.Errorf("error %v says the call was not sent; the upstream read it", err)
	}
	if n, c := s.requests.Load(), s.conns.Load(); n != 2 || c != 1 {
		t.Fatalf("the upstream received %d requests on %d connections, want 2 on 1: the dropped call was sent again", n, c)
	}
}

// TestNotSentOnDialFailure: a request whose connection could not be made
// fails with ErrNotSent: none of its bytes left.
func TestNotSentOnDialFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/mcp"
	ln.Close() // nothing listens there now
	tr := newTransport(t, url)
	_, err = post(t, context.Background(), tr, url, "{}")
	if !errors.Is(err, ErrNotSent) {
		t.Fatalf("a refused dial: error %v, want ErrNotSent", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("a refused dial: error %v does not carry the dial's", err)
	}
}

// TestUnreadBytesNotReused: bytes an upstream sent past an answer never
// answer the next request, whether a forged second response, a body
// longer than its Content-Length or a 204 with a body: the connection
// they came on is closed, and the next request gets its own answer.
func TestUnreadBytesNotReused(t *testing.T) {
	t.Parallel()
	forged := answer(`{"forged":true}`)
	for _, c := range []struct {
		name, first, want string
	}{
		{"second response appended", answer(`{"real":1}`) + forged, `{"real":1}`},
		{"body longer than Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"real\":1}" + `{"extra":"bytes"}` + forged, `{"real":1}`},
		{"204 with a body", "HTTP/1.1 204 No Content\r\n\r\n" + forged, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := serveRaw(t, func(conn net.Conn, n, i int64) bool {
				if n == 1 { // the first answer carries the extra bytes
					io.WriteString(conn, c.first)
					return true
				}
				io.WriteString(conn, answer(fmt.Sprintf(`{"real":%d}`, n)))
				return true
			})
			tr := newTransport(t, s.url)
			resp, err := post(t, context.Background(), tr, s.url, "{}")
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); got != c.want {
				t.Fatalf("first answer %q, want %q", got, c.want)
			}
			resp, err = post(t, context.Background(), tr, s.url, "{}")
			if err != nil {
				t.Fatalf("the next call: %v", err)
			}
			got := readAll(t, resp)
			if got != `{"real":2}` {
				t.Fatalf("the next call was answered %q, want its own answer {\"real\":2}", got)
			}
		})
	}
}

// TestHeaderBound: a response head past MaxResponseHeaderBytes fails the
// request with an error saying so, and its connection is closed: the
// upstream's writes fail long before it sent all it meant to.
func TestHeaderBound(t *testing.T) {
	t.Parallel()
	const line = 64 << 20 // past the bound and every socket buffer between the two
	written := make(chan int64, 1)
	s := serveRaw(t, func(conn net.Conn, n, i int64) bool {
		var sent int64
		defer func() { written <- sent }()
		if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nX-Big: "); err != nil {
			return false
		}
		chunk := []byte(strings.Repeat("a", 64<<10))
		for sent < line {
			m, err := conn.Write(chunk)
			sent += int64(m)
			if err != nil {
				return false
			}
		}
		io.WriteString(conn, "\r\n"+answer("{}")[len("HTTP/1.1 200 OK\r\n"):])
		return true
	})
	tr := newTransport(t, s.url)
	_, err := post(t, context.Background(), tr, s.url, "{}")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("headers exceed %d bytes", MaxResponseHeaderBytes)) {
		t.Fatalf("a %d-byte header line: error %v, want the header bound's", line, err)
	}
	if sent := <-written; sent >= line {
		t.Fatalf("the upstream wrote the whole %d-byte header line: the client read on past the bound", sent)
	}
}

// TestInformationalBound: an upstream that sends 1xx responses without
// end fails the request after Max1xxResponses of them.
func TestInformationalBound(t *testing.T) {
	t.Parallel()
	const flood = 1_000_000
	written := make(chan int, 1)
	s := serveRaw(t, func(conn net.Conn, n, i int64) bool {
		sent := 0
		defer func() { written <- sent }()
		bw := bufio.NewWriter(conn)
		for ; sent < flood; sent++ {
			if _, err := bw.WriteString("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"); err != nil {
				return false
			}
		}
		bw.WriteString(answer("{}"))
		return bw.Flush() == nil
	})
	tr := newTransport(t, s.url)
	_, err := post(t, context.Background(), tr, s.url, "{}")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d informational (1xx) responses", Max1xxResponses)) {
		t.Fatalf("%d 103 responses: error %v, want the 1xx bound's", flood, err)
	}
	if sent := <-written; sent == flood {
		t.Fatalf("the upstream wrote all %d 103 responses: the client read on past the bound", flood)
	}
}

// TestRetryNothingWritten: a request whose reused connection takes none
// of its bytes (here the client's own side was shut for writing, a state
// the idle check cannot see) is sent again on a new connection, once:
// that is the one failure after which the upstream provably never saw it.
func TestRetryNothingWritten(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/mcp"
	var requests atomic.Int64
	hold := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		close(hold)
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						<-hold // keep the connection open: the client sees no close
						return
					}
					io.Copy(io.Discard, req.Body)
					io.WriteString(conn, answer(fmt.Sprintf(`{"n":%d}`, requests.Add(1))))
				}
			})
		}
	})
	var mu sync.Mutex
	var dialed []*net.TCPConn
	fallback := http.DefaultTransport.(*http.Transport).Clone()
	fallback.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			dialed = append(dialed, c.(*net.TCPConn))
			mu.Unlock()
		}
		return c, err
	}
	tr := New(url, fallback)
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := post(t, context.Background(), tr, url, "{}")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	mu.Lock()
	dialed[0].CloseWrite()
	mu.Unlock()
	resp, err = post(t, context.Background(), tr, url, "{}")
	if err != nil {
		t.Fatalf("a request its reused connection took nothing of: %v, want it sent again", err)
	}
	if got := readAll(t, resp); got != `{"n":2}` {
		t.Fatalf("answered %q, want {\"n\":2}", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := requests.Load(); n != 2 || len(dialed) != 2 {
		t.Fatalf("%d requests on %d connections, want 2 on 2", n, len(dialed))
	}
}
