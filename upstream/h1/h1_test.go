package h1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server is a loopback HTTP/1.1 server that counts the connections it
// accepted and closed.
type server struct {
	*httptest.Server
	opened, closed atomic.Int64
}

func newServer(t *testing.T, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.opened.Add(1)
		case http.StateClosed:
			s.closed.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func newTransport(t *testing.T, url string) *Transport {
	t.Helper()
	tr := New(url, nil)
	if tr.host == "" {
		t.Fatalf("New(%q) serves nothing itself", url)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func post(t *testing.T, ctx context.Context, rt http.RoundTripper, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return rt.RoundTrip(req)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	resp.Body.Close()
	return string(b)
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("still not so after 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"method":%q,"path":%q,"type":%q,"body":%q}`, r.Method, r.URL.Path, r.Header.Get("Content-Type"), b)
}

func TestKeepAliveReuse(t *testing.T) {
	s := newServer(t, echo)
	tr := newTransport(t, s.URL+"/mcp")
	for i := range 20 {
		resp, err := post(t, context.Background(), tr, s.URL+"/mcp", fmt.Sprintf(`{"n":%d}`, i))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		want := fmt.Sprintf(`{"method":"POST","path":"/mcp","type":"application/json","body":"{\"n\":%d}"}`, i)
		if got := readAll(t, resp); got != want {
			t.Fatalf("call %d: body %s, want %s", i, got, want)
		}
	}
	if n := s.opened.Load(); n != 1 {
		t.Fatalf("20 calls one after another opened %d connections, want 1", n)
	}
	if n := tr.Idle(); n != 1 {
		t.Fatalf("%d idle connections, want 1", n)
	}
}

// TestStreamedBody reads an event stream as the server writes it: each
// event arrives before the next is written, and the connection is reused
// once the stream ends.
func TestStreamedBody(t *testing.T) {
	next := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			<-next
		}
	})
	tr := newTransport(t, s.URL)
	resp, err := post(t, context.Background(), tr, s.URL+"/mcp", "{}")
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength != -1 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("length %d, type %q: want a chunked event stream", resp.ContentLength, resp.Header.Get("Content-Type"))
	}
	buf := make([]byte, 64)
	for i := range 3 {
		n, err := io.ReadAtLeast(resp.Body, buf, len("data: 0\n\n"))
		if err != nil || string(buf[:n]) != fmt.Sprintf("data: %d\n\n", i) {
			t.Fatalf("event %d: %q, %v", i, buf[:n], err)
		}
		if i < 2 {
			next <- struct{}{}
		}
	}
	close(next) // this handler ends, and a later one does not wait
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after the last event: %q, %v", rest, err)
	}
	resp.Body.Close()
	if tr.Idle() != 1 {
		t.Fatalf("the stream ended and %d connections are idle, want 1", tr.Idle())
	}
	resp, err = post(t, context.Background(), tr, s.URL+"/mcp", "{}")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if n := s.opened.Load(); n != 1 {
		t.Fatalf("opened %d connections, want 1", n)
	}
}

// TestCancel: a cancelled call fails at once with its context's cause,
// whether it waits for the response head or reads the body, and its
// connection is closed, never reused.
func TestCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that the server watches for the client's close
		if r.URL.Path == "/body" {
			w.Write([]byte("partial"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	tr := newTransport(t, s.URL)
	cause := errors.New("the client went away")

	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
	if _, err := post(t, ctx, tr, s.URL+"/head", "{}"); !errors.Is(err, cause) {
		t.Fatalf("waiting for the head: err %v, want the cause", err)
	}

	ctx, cancel = context.WithCancelCause(context.Background())
	resp, err := post(t, ctx, tr, s.URL+"/body", "{}")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, cause) {
		t.Fatalf("reading the body: err %v, want the cause", err)
	}
	resp.Body.Close()
	if tr.Idle() != 0 {
		t.Fatalf("%d idle connections after two cancelled calls, want 0", tr.Idle())
	}
	eventually(t, "the server saw both connections closed", func() bool { return s.closed.Load() == 2 })

	if _, err := post(t, ctx, tr, s.URL+"/head", "{}"); !errors.Is(err, cause) {
		t.Fatalf("a call whose context already ended: err %v, want the cause", err)
	}
}

// TestCloseBeforeEnd: closing a body before its end closes the connection
// (it cannot carry another response), also while a Read is blocked on it.
func TestCloseBeforeEnd(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("data: 1\n\n"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	tr := newTransport(t, s.URL)
	resp, err := post(t, context.Background(), tr, s.URL, "{}")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(buf)
		read <- err
	}()
	time.Sleep(20 * time.Millisecond)
	resp.Body.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("the blocked Read returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock the Read")
	}
	resp.Body.Close() // twice is fine
	if tr.Idle() != 0 {
		t.Fatalf("%d idle connections, want 0", tr.Idle())
	}
	eventually(t, "the server saw the connection closed", func() bool { return s.closed.Load() == 1 })
}

// TestRetryClosedIdle: the upstream closes an idle connection; the next
// call, whose body can be read again, goes out once more on a new one.
func TestRetryClosedIdle(t *testing.T) {
	var calls atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		echo(w, r)
	})
	tr := newTransport(t, s.URL)
	for i := range 2 {
		resp, err := post(t, context.Background(), tr, s.URL, "{}")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		readAll(t, resp)
		s.CloseClientConnections() // as an upstream's idle timeout does
		eventually(t, "the server closed the connection", func() bool { return s.closed.Load() == int64(i+1) })
	}
	if calls.Load() != 2 || s.opened.Load() != 2 {
		t.Fatalf("%d calls handled on %d connections, want 2 on 2", calls.Load(), s.opened.Load())
	}

}

func TestConnectionClose(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Write([]byte("{}"))
	})
	tr := newTransport(t, s.URL)
	for range 2 {
		resp, err := post(t, context.Background(), tr, s.URL, "{}")
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	if tr.Idle() != 0 || s.opened.Load() != 2 {
		t.Fatalf("Connection: close: %d idle, %d opened; want 0 and 2", tr.Idle(), s.opened.Load())
	}
}

func TestInformational(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Write([]byte("ok"))
	})
	tr := newTransport(t, s.URL)
	resp, err := post(t, context.Background(), tr, s.URL, "{}")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || readAll(t, resp) != "ok" {
		t.Fatalf("status %d: want the 200 after the 103", resp.StatusCode)
	}
}

func TestAccepted(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	tr := newTransport(t, s.URL)
	for range 3 {
		resp, err := post(t, context.Background(), tr, s.URL, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // never read: nothing is left to read
	}
	if s.opened.Load() != 1 {
		t.Fatalf("3 bodiless answers opened %d connections, want 1", s.opened.Load())
	}
}

func TestIdleBounds(t *testing.T) {
	s := newServer(t, echo)
	tr := newTransport(t, s.URL)
	tr.MaxIdle = 2
	var wg sync.WaitGroup
	start := make(chan struct{})
	responses := make(chan *http.Response, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := post(t, context.Background(), tr, s.URL, "{}")
			if err != nil {
				t.Error(err)
				return
			}
			responses <- resp
		}()
	}
	close(start)
	wg.Wait()
	close(responses)
	for resp := range responses {
		readAll(t, resp)
	}
	if s.opened.Load() != 4 || tr.Idle() != 2 {
		t.Fatalf("4 calls at once: %d opened, %d idle; want 4 and MaxIdle (2)", s.opened.Load(), tr.Idle())
	}
	eventually(t, "the 2 connections past MaxIdle closed", func() bool { return s.closed.Load() == 2 })

	tr.IdleTimeout = time.Millisecond
	time.Sleep(5 * time.Millisecond)
	resp, err := post(t, context.Background(), tr, s.URL, "{}")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if s.opened.Load() != 5 {
		t.Fatalf("after the idle timeout: %d opened, want a new one (5)", s.opened.Load())
	}
	eventually(t, "the idle connections past IdleTimeout closed", func() bool { return s.closed.Load() == 4 })
	tr.CloseIdleConnections()
	eventually(t, "CloseIdleConnections closed the last", func() bool { return s.closed.Load() == 5 })
}

// TestFallback: https, and another host than the Transport's, go through
// Fallback.
func TestFallback(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(echo))
	defer tlsSrv.Close()
	fb := tlsSrv.Client().Transport.(*http.Transport).Clone()
	tr := New(tlsSrv.URL, fb)
	if tr.host != "" {
		t.Fatalf("an https endpoint is served itself (%q)", tr.host)
	}
	resp, err := post(t, context.Background(), tr, tlsSrv.URL, "{}")
	if err != nil {
		t.Fatal(err)
	}
	if resp.TLS == nil {
		t.Fatal("the https call did not go through the fallback's TLS")
	}
	readAll(t, resp)

	s := newServer(t, echo)
	other := newServer(t, echo)
	tr = newTransport(t, s.URL)
	resp, err = post(t, context.Background(), tr, other.URL, "{}")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if tr.Idle() != 0 || other.opened.Load() != 1 {
		t.Fatalf("another host: %d idle here, %d opened there; want 0 and 1 (the fallback's pool)", tr.Idle(), other.opened.Load())
	}

	proxied := http.DefaultTransport.(*http.Transport).Clone()
	proxied.Proxy = func(*http.Request) (*url.URL, error) { return url.Parse("http://127.0.0.1:1") }
	if New(s.URL, proxied).host != "" {
		t.Fatal("an endpoint the proxy applies to is served itself")
	}
}

// idleConns leaves n idle connections in tr's pool.
func idleConns(t *testing.T, tr *Transport, url string, n int) {
	t.Helper()
	var resps []*http.Response
	for range n { // held open together, so that each takes a connection of its own
		resp, err := post(t, context.Background(), tr, url, "{}")
		if err != nil {
			t.Fatal(err)
		}
		resps = append(resps, resp)
	}
	for _, resp := range resps {
		readAll(t, resp)
	}
	if tr.Idle() != n {
		t.Fatalf("%d idle connections, want %d", tr.Idle(), n)
	}
}

// TestRetryDials: when every idle connection was closed by the upstream,
// the retry dials instead of taking the next dead one.
func TestRetryDials(t *testing.T) {
	s := newServer(t, echo)
	tr := newTransport(t, s.URL)
	idleConns(t, tr, s.URL, 3)
	s.CloseClientConnections()
	eventually(t, "the server closed the connections", func() bool { return s.closed.Load() == 3 })
	resp, err := post(t, context.Background(), tr, s.URL, "{}")
	if err != nil {
		t.Fatalf("with 3 dead idle connections: %v", err)
	}
	readAll(t, resp)
}

// TestIdleChecked: an idle connection is checked before use, so that a
// request (which is never sent twice once written) does not land on one
// the upstream closed.
func TestIdleChecked(t *testing.T) {
	s := newServer(t, echo)
	tr := newTransport(t, s.URL)
	idleConns(t, tr, s.URL, 2)
	s.CloseClientConnections()
	eventually(t, "the server closed the connections", func() bool { return s.closed.Load() == 2 })
	req, _ := http.NewRequest(http.MethodPost, s.URL, io.NopCloser(strings.NewReader("{}")))
	req.ContentLength = 2
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("after the idle connections were closed: %v", err)
	}
	readAll(t, resp)
	if tr.Idle() != 1 || s.opened.Load() != 3 {
		t.Fatalf("%d idle, %d opened: want the dead ones dropped and 1 new", tr.Idle(), s.opened.Load())
	}
}

// TestIdleSwept: connections left idle past IdleTimeout are closed even
// when no call comes any more.
func TestIdleSwept(t *testing.T) {
	s := newServer(t, echo)
	tr := newTransport(t, s.URL)
	tr.IdleTimeout = 50 * time.Millisecond
	idleConns(t, tr, s.URL, 2)
	eventually(t, "the idle connections were closed with no call", func() bool { return s.closed.Load() == 2 && tr.Idle() == 0 })
	// The pool works on after a sweep emptied it, and sweeps again.
	idleConns(t, tr, s.URL, 1)
	eventually(t, "the next idle connection was closed too", func() bool { return s.closed.Load() == 3 && tr.Idle() == 0 })
}
