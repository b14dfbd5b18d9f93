// Package h1 is the HTTP/1.1 client of viewmux's streamable HTTP upstreams:
// an http.RoundTripper that writes each request and reads its response on
// the caller's own goroutine, over a keep-alive pool of plain TCP
// connections to one origin.
//
// net/http's Transport gives each connection a reader and a writer
// goroutine and hands every request and response between them and the
// caller over channels. Each hand-off is a goroutine switch, and on a small
// or busy machine often a thread wake-up, on the critical path of the call.
// An MCP call is one request whose body is already in memory and one
// response read by the goroutine that sent it, so neither goroutine is
// needed. Against net/http's Transport tuned alike (a pool as large, no
// compression, HTTP/1.1), measured side by side on a 2-core machine, it
// used about 36 against 57 µs of the client's CPU per small call one at a
// time and 24 against 29 µs at 16 at once (BenchmarkTransport), and
// viewmux built with it added about 15 % less latency to a call at one at
// a time (integration/hopprobe, the two builds alternated: a median of 295
// against 350 µs over 22 runs of each). That is what it earns its place by; it holds every defence
// net/http's client holds, below.
//
// A request is sent once. It is sent again, on a new connection, only
// when none of its bytes reached the connection it was first written to;
// once any did, the upstream may have acted on it, and a failure is the
// caller's to report. A connection is reused only when nothing of the
// last response is left unread, on it or in its buffer, so that no byte
// an upstream sent past one answer can answer the next request. The
// response head, informational responses (1xx) included, is bounded to
// MaxResponseHeaderBytes, and at most Max1xxResponses of those come
// before the final one.
//
// Only that path is here. Plain http:// to the origin the Transport was
// made for, with no proxy, is served on the caller's goroutine; everything
// else (https, which may negotiate HTTP/2; a proxy from the environment;
// another host after a redirect) goes to Fallback unchanged. Requests and
// responses are written and parsed by net/http itself (Request.Write,
// ReadResponse): this package only owns the connections.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of the pool, as http.DefaultTransport has them where it has
// them.
const (
	DefaultMaxIdle     = 64
	DefaultIdleTimeout = 90 * time.Second
	bufferSize         = 4 << 10
)

// Bounds of a response head: the bytes of every head read for one request
// (informational ones included), as net/http's client bounds them, and
// the informational responses before the final one (5, as net/http
// allowed before it came to count their bytes alone).
const (
	MaxResponseHeaderBytes = 10 << 20
	Max1xxResponses        = 5
)

// ErrNotSent marks the error of a request none of whose bytes reached a
// connection: the dial failed, or the connection failed the first write.
// The upstream cannot have acted on it. Every other error of a request
// that was written leaves it unknown whether the upstream did.
var ErrNotSent = errors.New("the request was not sent")

// Transport is an http.RoundTripper for one origin. It is safe for
// concurrent use. The zero value is not usable: make one with New.
type Transport struct {
	// Fallback carries every request this Transport does not serve
	// itself, and dials its connections (Fallback.DialContext). Never nil.
	Fallback *http.Transport
	// MaxIdle bounds the idle connections kept for reuse.
	MaxIdle int
	// IdleTimeout closes a connection left idle longer.
	IdleTimeout time.Duration

	host string // host:port served on the caller's goroutine; "" = none

	mu    sync.Mutex
	idle  []*persistConn // oldest first; reused from the end
	sweep *time.Timer    // closes what stays idle past IdleTimeout; nil when nothing is idle
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport for the origin of endpoint, with fallback for
// what it does not serve itself (nil: a clone of http.DefaultTransport).
// An endpoint that is not plain http, or that fallback's proxy applies to,
// makes every request go to fallback.
func New(endpoint string, fallback *http.Transport) *Transport {
	if fallback == nil {
		fallback = http.DefaultTransport.(*http.Transport).Clone()
	}
	t := &Transport{Fallback: fallback, MaxIdle: DefaultMaxIdle, IdleTimeout: DefaultIdleTimeout}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return t
	}
	if fallback.Proxy != nil {
		// The environment's proxy settings are read once by net/http; the
		// answer for one origin does not change.
		if p, err := fallback.Proxy(&http.Request{Method: http.MethodPost, URL: u}); err != nil || p != nil {
			return t
		}
	}
	t.host = hostPort(u)
	return t
}

// hostPort is u's host with the port http implies when it has none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// serves reports whether req is written on the caller's goroutine.
func (t *Transport) serves(req *http.Request) bool {
	if t.host == "" || req.URL.Scheme != "http" {
		return false
	}
	if req.URL.Host == t.host {
		return true
	}
	return hostPort(req.URL) == t.host
}

// RoundTrip sends req and returns its response. A served request's
// response body must be read to its end or closed, like any other: at its
// end the connection goes back to the pool (when nothing past the
// response was received); closed before, the connection is closed.
//
// A request is sent again only when no byte of it reached the reused
// connection it was written to (the upstream had reset it), on a new one,
// when its body can be read again. One that failed after any byte was
// written is never sent again, as net/http's client never sends a POST
// again: the upstream may have read it and acted on it before the
// connection failed. Its error does not wrap ErrNotSent.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.serves(req) {
		return t.Fallback.RoundTrip(req)
	}
	if err := req.Context().Err(); err != nil {
		closeBody(req)
		return nil, context.Cause(req.Context())
	}
	for retried := false; ; retried = true {
		// A retry dials: the idle connections older than the one that
		// failed are as likely to have been closed.
		pc, reused, err := t.get(req.Context(), !retried)
		if err != nil {
			closeBody(req)
			if req.Context().Err() != nil {
				return nil, context.Cause(req.Context())
			}
			return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		resp, err := pc.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		if !reused || retried || !errors.Is(err, ErrNotSent) || req.Context().Err() != nil {
			closeBody(req)
			return nil, err
		}
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// CloseIdleConnections closes the idle connections, this Transport's and
// Fallback's. A connection in use is not touched: it goes back to the pool
// when its response ends, unless its request was cancelled (viewmux cancels
// every request of an upstream connection it closes).
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	closeConns(idle)
	t.Fallback.CloseIdleConnections()
}

// sweepIdle closes the connections idle past IdleTimeout, and sets the
// timer again for the oldest of the others. Without it, a pool nobody
// uses any more (an idle client session's own upstream connection) would
// keep connections the upstream has closed until the pool itself goes.
func (t *Transport) sweepIdle() {
	t.mu.Lock()
	drop := t.takeStale(time.Now())
	if len(t.idle) == 0 {
		t.sweep = nil
	} else if t.sweep != nil {
		t.sweep.Reset(time.Until(t.idle[0].idleAt.Add(t.IdleTimeout)))
	}
	t.mu.Unlock()
	closeConns(drop)
}

// takeStale removes from the pool the connections idle past IdleTimeout
// at now, and returns them; t.mu must be held.
func (t *Transport) takeStale(now time.Time) []*persistConn {
	n := 0
	for n < len(t.idle) && now.Sub(t.idle[n].idleAt) > t.IdleTimeout {
		n++
	}
	if n == 0 {
		return nil
	}
	stale := append([]*persistConn(nil), t.idle[:n]...)
	t.idle = append(t.idle[:0], t.idle[n:]...)
	return stale
}

// Idle returns how many connections wait in the pool.
func (t *Transport) Idle() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle)
}

// get takes the most recently used idle connection that is still open
// (when idle allows it), or dials one.
func (t *Transport) get(ctx context.Context, idle bool) (pc *persistConn, reused bool, err error) {
	for idle {
		now := time.Now()
		t.mu.Lock()
		stale := t.takeStale(now) // the pool is oldest first: what is left is not stale
		if n := len(t.idle); n > 0 {
			pc = t.idle[n-1]
			t.idle = t.idle[:n-1]
		}
		t.mu.Unlock()
		closeConns(stale)
		if pc == nil {
			break
		}
		// Nothing reads an idle connection, so an upstream's close of it
		// (Node's HTTP server closes one idle for 5 s), or bytes it sent
		// that no request asked for, show only when it is used. Each one
		// is checked first: a request written to a connection the
		// upstream closed a moment ago cannot be sent again, since the
		// close and a crash after reading the request look alike.
		if pc.open() {
			return pc, true, nil
		}
		pc.conn.Close()
		pc = nil
	}
	dial := t.Fallback.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	conn, err := dial(ctx, "tcp", t.host)
	if err != nil {
		return nil, false, err
	}
	pc = &persistConn{t: t, conn: conn, readLimit: math.MaxInt64}
	pc.br = bufio.NewReaderSize(pc, bufferSize)
	pc.bw = bufio.NewWriterSize(pc, bufferSize)
	return pc, false, nil
}

// put returns pc to the pool, or closes it when the pool is full. The
// oldest idle connections past IdleTimeout are closed on the way, and
// the sweep is armed if it is not.
func (t *Transport) put(pc *persistConn) {
	t.mu.Lock()
	now := time.Now() // under the lock, so that the pool stays oldest first
	pc.idleAt = now
	drop := t.takeStale(now)
	if len(t.idle) < t.MaxIdle {
		t.idle = append(t.idle, pc)
		pc = nil
		if t.sweep == nil {
			t.sweep = time.AfterFunc(t.IdleTimeout, t.sweepIdle)
		}
	}
	t.mu.Unlock()
	if pc != nil {
		drop = append(drop, pc)
	}
	closeConns(drop)
}

// closeConns closes connections taken out of the pool.
func closeConns(pcs []*persistConn) {
	for _, pc := range pcs {
		pc.conn.Close()
	}
}

// persistConn is one connection, owned by one request at a time. br and
// bw read and write through it (Read, Write), which count and bound.
type persistConn struct {
	t      *Transport
	conn   net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time

	written   int64 // bytes of the current request written to conn
	readLimit int64 // bytes conn may still be read for the current head

	// The non-blocking peek of open, where there is one.
	raw   syscall.RawConn
	peek  func(fd uintptr) bool
	alive bool
}

// Write writes to the connection, counting what it took.
func (pc *persistConn) Write(p []byte) (int, error) {
	n, err := pc.conn.Write(p)
	pc.written += int64(n)
	return n, err
}

// Read reads from the connection, within readLimit.
func (pc *persistConn) Read(p []byte) (int, error) {
	if pc.readLimit <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > pc.readLimit {
		p = p[:pc.readLimit]
	}
	n, err := pc.conn.Read(p)
	pc.readLimit -= int64(n)
	return n, err
}

// Errors of a response head past its bounds.
var (
	errHeadTooLarge = fmt.Errorf("the upstream's response headers exceed %d bytes", MaxResponseHeaderBytes)
	errToo1xx       = fmt.Errorf("the upstream sent more than %d informational (1xx) responses before its answer", Max1xxResponses)
)

// aLongTimeAgo is a deadline that has passed: set on a connection, it
// fails the read or write blocked on it at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes req and reads its response head. The connection is
// closed on any error.
func (pc *persistConn) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	cancelled := new(atomic.Bool)
	stop := context.AfterFunc(ctx, func() {
		cancelled.Store(true)
		pc.conn.SetDeadline(aLongTimeAgo)
	})
	fail := func(err error) error {
		stop()
		pc.conn.Close()
		if cancelled.Load() {
			return context.Cause(ctx)
		}
		if pc.written == 0 {
			return fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return err
	}
	pc.written = 0
	if err := req.Write(pc.bw); err != nil {
		return nil, fail(err)
	}
	if err := pc.bw.Flush(); err != nil {
		return nil, fail(err)
	}
	pc.readLimit = MaxResponseHeaderBytes
	// The first byte of the answer tells a connection the upstream closed
	// without answering (nothing comes) from one that failed mid-answer
	// (ReadResponse reports both as an unexpected EOF).
	if _, err := pc.br.Peek(1); err != nil {
		if err == io.EOF {
			err = fmt.Errorf("the connection ended before a response: %w", err)
		}
		return nil, fail(err)
	}
	var resp *http.Response
	for informational := 0; ; informational++ {
		var err error
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			if pc.readLimit <= 0 {
				err = errHeadTooLarge
			}
			return nil, fail(err)
		}
		// An informational answer (100 Continue, 103 Early Hints) has no
		// body and is followed by the real one; 101 ends HTTP. All of
		// them share the one bound of the head's bytes.
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if informational == Max1xxResponses {
			return nil, fail(errToo1xx)
		}
	}
	pc.readLimit = math.MaxInt64
	b := &body{pc: pc, rc: resp.Body, ctx: ctx, stop: stop, cancelled: cancelled, reuse: !resp.Close && !req.Close}
	if resp.Body == http.NoBody {
		b.finish(true)
	}
	resp.Body = b
	return resp, nil
}

// body is a response body whose end gives its connection back. Close may
// be called while a Read is blocked (it then fails at once), and more than
// once.
type body struct {
	pc        *persistConn
	rc        io.ReadCloser
	ctx       context.Context
	stop      func() bool
	cancelled *atomic.Bool
	reuse     bool
	once      sync.Once
	eof       atomic.Bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.eof.Load() {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.finish(true)
	case err != nil:
		b.finish(false)
		if b.cancelled.Load() {
			err = context.Cause(b.ctx)
		}
	}
	return n, err
}

func (b *body) Close() error {
	b.finish(false)
	return nil
}

// finish ends the body once: at its end (ok) the connection goes back to
// the pool, unless the response or request said close, the request was
// cancelled, or bytes past the response were read already (a body longer
// than its Content-Length, a 204 with a body, a second response appended
// to the first): the next request would be answered by them. Otherwise
// it is closed.
func (b *body) finish(ok bool) {
	b.once.Do(func() {
		if ok {
			b.eof.Store(true)
		}
		stopped := b.stop() // false: the cancel fired, and set a deadline
		if ok && b.reuse && stopped && b.pc.br.Buffered() == 0 {
			b.pc.t.put(b.pc)
			return
		}
		b.pc.conn.Close()
	})
}
