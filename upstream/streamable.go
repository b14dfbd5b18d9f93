package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/internal/tracing"
	"github.com/viewmux/viewmux/upstream/h1"
	"github.com/viewmux/viewmux/upstream/wire"
)

// Streamable HTTP through viewmux's own code: each request is one POST of
// its bytes, answered inline by a JSON body or by an event stream that
// belongs to that request. Whatever else such a stream carries (progress,
// log messages, sampling, elicitation, roots requests) is handed to the
// engine tied to the request, so it reaches exactly the call that caused
// it. The stream is read to its end after the answer, so that the
// keep-alive connection goes back to the pool. Messages outside any call
// arrive on the GET stream of a session (before 2026-07-28) or on the
// subscriptions/listen request (2026-07-28, see listenLoop).

// HTTP header names of the streamable HTTP transport.
const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "MCP-Protocol-Version"
)

// drainAfterAnswer bounds how long a call's event stream is read after its
// answer arrived (for progress written just after the result); a server
// that keeps the stream open longer loses that TCP connection.
const drainAfterAnswer = 30 * time.Second

// streamEndGrace is how long a call waits, after its answer, for the end
// of its event stream before returning. A server that ends the stream with
// the answer, as the protocol asks, costs nothing here; only one that keeps
// it open waits this long. On a loaded machine the stream's last bytes can
// take a few milliseconds to be read: 20 ms lost the connection about once
// in ten runs of TestHTTPKeepAliveAfterNotification.
var streamEndGrace = 50 * time.Millisecond // a var for tests

// closeSessionTimeout bounds the DELETE that ends a session.
const closeSessionTimeout = 2 * time.Second

// errSessionEnded is the cause of a connection whose session the upstream
// ended (it answered 404 to a request carrying the session id).
var errSessionEnded = errors.New("the upstream ended the session (HTTP 404 to its Mcp-Session-Id)")

// errLegacyEndpoint is the error of an initialize POST answered with a
// 4xx. The 2025-03-26 backwards-compatibility rules then try the legacy
// HTTP+SSE transport at the same URL (dialHTTP), but a 4xx alone is no
// evidence of a legacy server: a wrong URL answers 404 too.
var errLegacyEndpoint = errors.New("the endpoint refused the POST")

// errUnauthorized is the error of a request answered with 401.
var errUnauthorized = errors.New("unauthorized (401)")

// unansweredError is ErrOutcomeUnknown for one upstream, in the words
// its client is told.
type unansweredError struct{ upstream string }

func (e *unansweredError) Error() string {
	return fmt.Sprintf("upstream %q closed the connection after receiving the call; it may or may not have run", e.upstream)
}

func (e *unansweredError) Unwrap() error { return ErrOutcomeUnknown }

// connectionEnded reports whether err, from a request or from reading its
// answer, is the connection failing under it rather than a refusal of
// what the upstream sent (too large, malformed).
func connectionEnded(err error) bool {
	var op *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) || errors.As(err, &op)
}

// httpPeer is one streamable HTTP connection: an optional session, the
// engine that answers the upstream's requests, and the calls in flight.
type httpPeer struct {
	c     *conn
	w     *wire.Conn
	hc    *http.Client
	limit int64
	seq   atomic.Uint64
	// version is the protocol of every request (the 2026-07-28 side);
	// "" = the connection's (c.version).
	version string

	mu            sync.Mutex
	session       string                     // Mcp-Session-Id; "" = none
	sessionHeader []string                   // session as a header value, made once
	protoHeader   atomic.Pointer[[]string]   // the version header last sent
	calls         map[string]context.Context // ctx of each call in flight, by id

	done      chan struct{} // closed by close: the engine's reader ends
	closeOnce sync.Once
	wg        sync.WaitGroup // streams read after their answer
}

// httpTransport is the engine's side of an httpPeer: the engine writes its
// answers to the upstream's requests (and its cancel notices) through it,
// each one POST. Frames are not read from it: each stream's reader hands
// them to the engine (Dispatch), so ReadFrame only waits for the end.
type httpTransport struct{ p *httpPeer }

func (t httpTransport) ReadFrame() (wire.Frame, error) {
	<-t.p.done
	return wire.Frame{}, wire.ErrClosed
}

func (t httpTransport) WriteFrame(ctx context.Context, msg []byte) error {
	if err := t.p.post(ctx, msg); err != nil {
		t.p.c.u.log.Warn("message to upstream not delivered", "err", err)
	}
	return nil // one failed POST does not end the connection
}

func (t httpTransport) Close() error { return nil }

// openStreamable dials a streamable HTTP connection and performs the
// handshake (handshake.go). A legacy session gets its GET stream.
func (u *Upstream) openStreamable(ctx context.Context) (*conn, *mcp.InitializeResult, error) {
	c := u.newConn(configs.TransportHTTP)
	c.httpc = u.httpClient() // its pool carries every request of the connection
	disarm := context.AfterFunc(ctx, func() { c.lost(context.Cause(ctx)) })
	defer disarm()
	p := c.newHTTPPeer("")
	c.peer = p

	init, err := c.handshake(ctx)
	if err != nil {
		if cause := context.Cause(c.ctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		return c, nil, fmt.Errorf("initialize: %w", err)
	}
	c.caps = init.Capabilities
	c.modern = mcp.IsModernProtocol(c.version)
	if !c.modern {
		c.spawn("GET stream", p.listen)
	}
	return c, init, nil
}

// newHTTPPeer returns a started httpPeer of c's endpoint over c's pool.
// version, when set, is the protocol version its requests are sent with
// (the 2026-07-28 side); "" follows c.version.
func (c *conn) newHTTPPeer(version string) *httpPeer {
	p := &httpPeer{
		c:       c,
		hc:      &http.Client{Transport: c.u.withOAuth(c.httpc.Transport.(*limitTransport).base), CheckRedirect: c.httpc.CheckRedirect}, // one keep-alive pool, one redirect policy
		limit:   c.u.maxMessage(),
		version: version,
		calls:   make(map[string]context.Context),
		done:    make(chan struct{}),
	}
	p.w = wire.New(httpTransport{p}, wire.Options{
		Name:           c.u.cfg.Name,
		Limit:          p.limit,
		Logger:         c.u.log,
		OnNotification: p.onNotification,
		OnRequest:      p.onRequest,
	})
	p.w.Start()
	return p
}

// protocol is the version p's requests are sent with ("" before the
// handshake settled one).
func (p *httpPeer) protocol() string {
	if p.version != "" {
		return p.version
	}
	return p.c.version
}

// onNotification hands a notification from the upstream on. One that
// arrived on the stream of a call in flight goes to OnCallNotification
// with that call's ctx, when it is set.
func (p *httpPeer) onNotification(tied, method string, params json.RawMessage) {
	c := p.c
	cb := c.u.opts.OnCallNotification
	var callCtx context.Context
	if tied != "" && cb != nil && !strings.HasSuffix(method, "/list_changed") &&
		method != string(mcp.MethodNotificationSubscriptionsAcknowledged) { // handleNotification's own
		p.mu.Lock()
		callCtx = p.calls[tied]
		p.mu.Unlock()
	}
	if callCtx == nil {
		c.wireNotification(tied, method, params)
		return
	}
	if !c.admit(method) {
		return
	}
	n := mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION}
	n.Method = method
	if len(params) > 0 {
		if err := json.Unmarshal(params, &n.Params); err != nil {
			c.u.log.Warn("dropping a notification from upstream with malformed params", "method", method, "err", err)
			return
		}
	}
	c.u.guard("OnCallNotification", func() { cb(callCtx, c.u, n) })
}

// onRequest answers a request from the upstream. One that arrived on a
// call's own stream runs with that call's ctx (its values say whose call
// it is), ending also when the engine ends it.
func (p *httpPeer) onRequest(ctx context.Context, tied, method string, params json.RawMessage) (json.RawMessage, error) {
	if tied != "" {
		p.mu.Lock()
		callCtx := p.calls[tied]
		p.mu.Unlock()
		if callCtx != nil {
			merged, cancel := context.WithCancel(callCtx)
			defer cancel()
			stop := context.AfterFunc(ctx, cancel)
			defer stop()
			ctx = merged
		}
	}
	return p.c.wireRequest(ctx, tied, method, params)
}

// call implements peer: it POSTs the request and reads its answer.
func (p *httpPeer) call(ctx context.Context, method string, params json.RawMessage, header http.Header) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if tracing.Active(ctx) {
		header = header.Clone()
		if header == nil {
			header = http.Header{}
		}
		tracing.Inject(ctx, header)
	}
	id := "viewmux-" + strconv.FormatUint(p.seq.Add(1), 10)
	p.mu.Lock()
	p.calls[id] = ctx
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.calls, id)
		p.mu.Unlock()
	}()

	// The request's own ctx outlives the call's: after the answer the
	// stream is still read to its end.
	reqCtx, cancelReq := context.WithCancel(p.c.ctx)
	stop := context.AfterFunc(ctx, cancelReq)
	var loan *Loan
	var tailAbove int64
	if lendable(method) {
		loan = LoanFrom(ctx)
		if ctx.Value(tailKey{}) != nil && p.limit > WholeLimit {
			tailAbove = loan.tailLimit()
		}
	}
	res, rest, tail, err := p.exchange(reqCtx, loan, tailAbove, id, method, params, header)
	stop()
	if tail != nil {
		// The result is read by whoever takes it from the loan, after
		// this call returned: the request lives until the Tail is closed,
		// or until the call's timeout.
		tail.cancel = cancelReq
		if dl, ok := ctx.Deadline(); ok {
			tail.timer = time.AfterFunc(time.Until(dl), func() {
				tail.timedOut.Store(true)
				cancelReq()
			})
		}
		if !loan.setTail(tail) {
			tail.Close()
			return nil, errLoanReleased
		}
		return nil, nil
	}
	if rest != nil {
		drained := make(chan struct{})
		p.wg.Go(func() {
			defer close(drained)
			defer cancelReq()
			t := time.AfterFunc(drainAfterAnswer, cancelReq)
			defer t.Stop()
			p.readStream(rest, id)
		})
		// A server closes the stream right after the answer: waiting a
		// moment for that end puts the connection back in the pool before
		// the caller's next request, which would otherwise open another.
		// A caller that allows it waits after writing the answer instead.
		if !loan.deferEnd(drained) {
			t := time.NewTimer(streamEndGrace)
			select {
			case <-drained:
			case <-t.C:
			}
			t.Stop()
		}
	} else {
		cancelReq()
	}
	if err != nil && ctx.Err() != nil {
		// Ending a 2026-07-28 request's stream is its cancellation; a
		// session before that is told.
		if !mcp.IsModernProtocol(p.protocol()) && p.c.ctx.Err() == nil && method != string(mcp.MethodInitialize) {
			p.cancelNotice(id)
		}
		return nil, ctx.Err()
	}
	return res, err
}

// eventStream is an event stream being read: its reader, which may hold
// bytes already read from body.
type eventStream struct {
	br   *bufio.Reader
	body io.Closer
	// under are readers br reads through (replay), given back with it.
	under []*bufio.Reader
}

// readerPool holds the readers of event streams: every call answered as a
// stream would otherwise allocate one.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

func newEventStream(body io.ReadCloser) *eventStream {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(body)
	return &eventStream{br: br, body: body}
}

// close closes the stream's body and gives its reader back.
func (s *eventStream) close() {
	s.body.Close()
	for _, br := range append(s.under, s.br) {
		br.Reset(nil)
		readerPool.Put(br)
	}
	s.br, s.under = nil, nil
}

// exchange POSTs one request and reads the answer. rest, when not nil, is
// the remainder of the answer's event stream, which the caller reads (and
// closes). A JSON answer is read under loan (nil: none).
//
// With tailAbove > 0, a JSON answer whose result is larger than
// tailAbove bytes is not read: tail is the result, positioned at its first
// byte, for the caller to read and close.
//
// A request whose bytes may have left (its headers were written) and
// whose connection failed before the answer came whole fails with
// ErrOutcomeUnknown; one whose connection failed before that (the dial)
// fails as it did.
func (p *httpPeer) exchange(ctx context.Context, loan *Loan, tailAbove int64, id, method string, params json.RawMessage, header http.Header) (_ json.RawMessage, _ *eventStream, tail *Tail, err error) {
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	defer func() {
		if err != nil && ctx.Err() == nil && wrote.Load() && !errors.Is(err, h1.ErrNotSent) && connectionEnded(err) {
			p.c.u.log.Warn("the upstream closed the connection after receiving a call; it is not sent again", "method", method, "err", err)
			err = &unansweredError{upstream: p.c.u.cfg.Name}
		}
	}()
	resp, err := p.send(ctx, http.MethodPost, requestBytes(id, method, params), header, method)
	if err != nil {
		return nil, nil, nil, err
	}
	if method == string(mcp.MethodInitialize) && resp.StatusCode/100 == 2 {
		if s := resp.Header.Get(headerSessionID); s != "" {
			p.mu.Lock()
			p.session, p.sessionHeader = s, []string{s}
			p.mu.Unlock()
		}
	}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusOK && mediaType == "text/event-stream":
		rest := newEventStream(resp.Body)
		res, tail, err, more := p.readAnswer(loan, rest, tailAbove, id)
		if tail != nil {
			return nil, nil, tail, nil
		}
		if more {
			return res, rest, nil, err
		}
		rest.close()
		return res, nil, nil, err
	case resp.StatusCode/100 == 2 && resp.StatusCode != http.StatusAccepted:
		if resp.ContentLength > p.limit {
			// Refused before its first byte is read: the connection to
			// the upstream (not its session) is given up with the body.
			resp.Body.Close()
			return nil, nil, nil, p.tooLarge()
		}
		if tailAbove > 0 && (resp.ContentLength < 0 || resp.ContentLength > tailAbove) {
			res, tail, err := p.readJSONTail(loan, resp.Body, tailAbove, id)
			if tail == nil {
				resp.Body.Close()
			}
			return res, nil, tail, err
		}
		defer resp.Body.Close()
		res, _, err := p.readJSON(loan, resp.Body, resp.ContentLength, id)
		return res, nil, nil, err
	case resp.StatusCode == http.StatusAccepted:
		resp.Body.Close()
		return nil, nil, nil, errors.New("the upstream answered the request with 202 Accepted and no result")
	}
	defer resp.Body.Close()
	return nil, nil, nil, p.refusal(resp, id, method)
}

// tooLarge is the error of an answer past max_message_bytes, logged.
func (p *httpPeer) tooLarge() error {
	tooLarge := &wire.TooLargeError{Limit: p.limit}
	p.c.u.log.Warn("failing the call the upstream's answer is too large for; the connection stays up", "err", tooLarge)
	return tooLarge
}

// unreadable is the error of an answer that does not parse, logged.
func (p *httpPeer) unreadable(reason error) error {
	err := &wire.UnreadableError{Reason: reason}
	p.c.u.log.Warn("failing the call whose answer viewmux cannot read; the connection stays up", "err", err)
	return err
}

// readJSONTail reads a JSON body of unknown or large size answering
// request id: up to above bytes of it, then, when it goes on, a Tail of
// the rest (the caller closes body unless tail is returned). An answer
// that does not begin as a plain result to id (envelopeHead) is read whole.
func (p *httpPeer) readJSONTail(loan *Loan, body io.Reader, above int64, id string) (_ json.RawMessage, tail *Tail, _ error) {
	data, buf, err := readAll(body, -1, min(above, p.limit)+1, loan != nil)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer: %w", err)
	}
	if int64(len(data)) > p.limit {
		return nil, nil, p.tooLarge()
	}
	if int64(len(data)) <= above {
		return p.answerJSON(loan, data, buf, id) // read whole already
	}
	if at, ok := envelopeHead(data, id); ok {
		return nil, &Tail{p: p, id: id, head: data[:at], first: data[at:], buf: buf, body: body.(io.ReadCloser),
			read: int64(len(data)), limit: p.limit}, nil
	}
	rest, _, err := readAll(body, -1, p.limit+1-int64(len(data)), false)
	whole := append(append(make([]byte, 0, len(data)+len(rest)), data...), rest...)
	if buf != nil {
		putBuffer(buf)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer: %w", err)
	}
	if int64(len(whole)) > p.limit {
		return nil, nil, p.tooLarge()
	}
	return p.answerJSON(nil, whole, nil, id)
}

// refusal is the error of a request answered with an HTTP error status:
// the JSON-RPC error the body holds, if any, else the status and the start
// of the body.
func (p *httpPeer) refusal(resp *http.Response, id, method string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, min(p.limit, 1<<20)))
	var base error
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		base = errUnauthorized
	case method == string(mcp.MethodInitialize) && resp.StatusCode/100 == 4:
		base = errLegacyEndpoint
	default:
		// A JSON-RPC error in the body is the answer, as sent.
		if m, err := jsonrpc.ParseUpstream(body); err == nil && m.Method == "" && id != "" && idIs(m.ID, id) {
			var rpc *RPCError
			if _, err := answerOf(m); errors.As(err, &rpc) {
				return rpc
			}
		}
		base = errors.New("the upstream refused the request")
	}
	var text string
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/html" {
		text = strings.Join(strings.Fields(string(body[:min(len(body), maxRefusalBody)])), " ")
	}
	err := fmt.Errorf("%w (the endpoint answered HTTP %s: %q)", base, resp.Status, text)
	if text == "" {
		err = fmt.Errorf("%w (the endpoint answered HTTP %s)", base, resp.Status)
	}
	return &statusError{code: resp.StatusCode, err: err}
}

// statusError is a refusal with the HTTP status it was answered with.
type statusError struct {
	code int
	err  error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// urlNotFound reports whether err is a refusal with 404 Not Found or 405
// Method Not Allowed: the URL serves no such endpoint.
func urlNotFound(err error) bool {
	var se *statusError
	return errors.As(err, &se) && (se.code == http.StatusNotFound || se.code == http.StatusMethodNotAllowed)
}

// readJSON reads a JSON body of size bytes (-1: unknown) answering
// request id. With loan, an answer to id is read into a pooled buffer the
// loan takes back.
func (p *httpPeer) readJSON(loan *Loan, body io.Reader, size int64, id string) (json.RawMessage, *eventStream, error) {
	data, buf, err := readAll(body, size, p.limit+1, loan != nil)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer: %w", err)
	}
	if int64(len(data)) > p.limit {
		return nil, nil, p.tooLarge()
	}
	res, _, err := p.answerJSON(loan, data, buf, id)
	return res, nil, err
}

// answerJSON is the answer to request id that data, a whole JSON body,
// holds; buf is the pooled buffer data is in (nil: none), lent to loan
// when data is that answer.
func (p *httpPeer) answerJSON(loan *Loan, data []byte, buf *[]byte, id string) (json.RawMessage, *Tail, error) {
	m, err := jsonrpc.ParseUpstream(data)
	if err != nil {
		return nil, nil, p.unreadable(err) // the body answers the request, whatever its id
	}
	if m.Method != "" || !idIs(m.ID, id) {
		p.w.Dispatch(wire.Frame{Data: data}, id) // not lent: the engine may keep it
		return nil, nil, errors.New("the upstream's JSON answer is not the answer to the request")
	}
	res, err := answerOf(m)
	if buf != nil && err == nil && !loan.lend(buf) {
		return nil, nil, errLoanReleased
	}
	return res, nil, err
}

// errLoanReleased is the error of a result read under a loan its caller
// had released already: that caller has answered and gone.
var errLoanReleased = errors.New("the caller no longer waits for the answer (its loan was released)")

// readAnswer reads a call's event stream up to its answer; every other
// message on it is handed to the engine tied to the call. more reports
// that the stream may hold more (the caller reads the rest). With loan, a
// large message is read into a pooled buffer, which the loan takes back
// if the message is the answer (any other is left to the collector: the
// engine may keep it).
//
// With above > 0, an event larger than above bytes that is the answer is
// not read: tail is its result (eventTail), which reads on the stream.
func (p *httpPeer) readAnswer(loan *Loan, s *eventStream, above int64, id string) (res json.RawMessage, tail *Tail, err error, more bool) {
	var buf *[]byte // the pooled buffer of the last message read, if any
	var dst func(n int) []byte
	if loan != nil {
		dst = func(n int) []byte {
			if buf = getBuffer(n); buf == nil {
				return nil
			}
			return (*buf)[:0:n]
		}
	}
	for {
		buf = nil
		if above > 0 {
			if t := p.eventTail(s, above, id); t != nil {
				return nil, t, nil, true
			}
		}
		f, err := wire.ReadEventInto(s.br, p.limit, dst)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the upstream's event stream ended without an answer")
			}
			return nil, nil, fmt.Errorf("reading the answer: %w", err), false
		}
		if f.Oversize {
			if !f.Method && idIs(f.ID, id) {
				return nil, nil, p.tooLarge(), true
			}
			p.w.Dispatch(f, id)
			continue
		}
		m, perr := jsonrpc.ParseUpstream(f.Data)
		if perr != nil {
			if raw, method := jsonrpc.TopLevelID(f.Data); !method && idIs(raw, id) {
				return nil, nil, p.unreadable(perr), true
			}
		}
		if perr == nil && m.Method == "" && idIs(m.ID, id) {
			res, err := answerOf(m)
			if buf != nil && err == nil && len(f.Data) > 0 && &f.Data[0] == &(*buf)[0] && !loan.lend(buf) {
				return nil, nil, errLoanReleased, true
			}
			return res, nil, err, true
		}
		p.w.Dispatch(f, id)
	}
}

// readStream hands every message of an event stream to the engine, tied
// to the call id ("" for the GET stream), until the stream ends, then
// closes it.
func (p *httpPeer) readStream(s *eventStream, tied string) error {
	defer s.close()
	for {
		f, err := wire.ReadEvent(s.br, p.limit)
		if err != nil {
			return err
		}
		if f.Oversize && !f.Method && tied != "" && idIs(f.ID, tied) {
			continue // a second answer to an answered call
		}
		p.w.Dispatch(f, tied)
	}
}

// answerOf is the result of an answer, or its JSON-RPC error as sent.
func answerOf(m *jsonrpc.Message) (json.RawMessage, error) {
	switch {
	case len(m.Error) > 0 && string(m.Error) != "null":
		e := &RPCError{}
		if err := json.Unmarshal(m.Error, e); err != nil {
			return nil, fmt.Errorf("the upstream's error answer is malformed: %w", err)
		}
		return nil, e
	case len(m.Result) > 0:
		return m.Result, nil
	}
	return nil, errNoResult
}

// idIs reports whether raw is the JSON string id.
func idIs(raw json.RawMessage, id string) bool {
	if len(raw) == len(id)+2 && raw[0] == '"' {
		return string(raw[1:len(raw)-1]) == id
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == id
}

// send makes one HTTP request to the endpoint with the connection's
// headers. A 404 to a request carrying the session id ends the
// connection: the upstream ended the session.
func (p *httpPeer) send(ctx context.Context, verb string, body []byte, header http.Header, method string) (*http.Response, error) {
	p.mu.Lock()
	session, sessionHeader := p.session, p.sessionHeader
	p.mu.Unlock()
	req, err := p.newRequest(ctx, verb, body, header, method, sessionHeader)
	if err != nil {
		return nil, err
	}
	// Straight to the transport: http.Client would copy the headers of
	// every request for redirects that an MCP endpoint does not send. A
	// redirect is sent again through the client, whose policy follows it
	// (keepToOrigin).
	resp, err := p.hc.Transport.RoundTrip(req)
	if err == nil && isRedirect(resp.StatusCode) {
		resp.Body.Close()
		if req, err = p.newRequest(ctx, verb, body, header, method, sessionHeader); err != nil {
			return nil, err
		}
		resp, err = p.hc.Do(req)
	}
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound && session != "" && verb != http.MethodGet {
		resp.Body.Close()
		p.c.lost(errSessionEnded)
		return nil, fmt.Errorf("%w: %w", wire.ErrClosed, errSessionEnded)
	}
	return resp, nil
}

// isRedirect reports whether status is one http.Client follows.
func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// Header values every request carries, shared (net/http only reads them).
var (
	canonicalProtocolVersion = http.CanonicalHeaderKey(headerProtocolVersion)
	canonicalSessionID       = http.CanonicalHeaderKey(headerSessionID)
	contentTypeJSON          = []string{"application/json"}
	acceptPost               = []string{"application/json, text/event-stream"}
	acceptGet                = []string{"text/event-stream"}
)

// newRequest builds one request to the endpoint.
func (p *httpPeer) newRequest(ctx context.Context, verb string, body []byte, header http.Header, method string, session []string) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, verb, p.c.u.cfg.URL, rd)
	if err != nil {
		return nil, err
	}
	h := req.Header
	for k, v := range p.c.u.cfg.Headers {
		h.Set(k, v)
	}
	for k, vs := range header {
		h[k] = vs
	}
	switch verb {
	case http.MethodPost:
		h["Content-Type"] = contentTypeJSON
		h["Accept"] = acceptPost
	case http.MethodGet:
		h["Accept"] = acceptGet
	}
	if session != nil {
		h[canonicalSessionID] = session
	}
	if v := p.protocol(); v != "" && method != string(mcp.MethodInitialize) {
		h[canonicalProtocolVersion] = p.versionHeader(v)
	}
	return req, nil
}

// versionHeader returns v as a header value, made once per version.
func (p *httpPeer) versionHeader(v string) []string {
	if h := p.protoHeader.Load(); h != nil && (*h)[0] == v {
		return *h
	}
	h := []string{v}
	p.protoHeader.Store(&h)
	return h
}

// post sends a notification or an answer to one of the upstream's
// requests; the upstream acknowledges it with 202 (or any 2xx).
func (p *httpPeer) post(ctx context.Context, msg []byte) error {
	resp, err := p.send(ctx, http.MethodPost, msg, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return p.refusal(resp, "", "")
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

func (p *httpPeer) notify(ctx context.Context, method string, params json.RawMessage) error {
	return p.post(ctx, notificationBytes(method, params))
}

// cancelNotice tells the upstream, off the caller's path, to stop working
// on request id.
func (p *httpPeer) cancelNotice(id string) {
	params, _ := json.Marshal(map[string]string{"requestId": id, "reason": "the client cancelled the request"})
	c := p.c
	c.spawn("cancel notice", func() {
		ctx, cancel := context.WithTimeout(c.ctx, cancelNoticeTimeout)
		defer cancel()
		if err := p.notify(ctx, string(mcp.MethodNotificationCancelled), params); err != nil {
			c.u.log.Debug("notifications/cancelled not sent", "err", err)
		}
	})
}

// listen keeps the GET stream of a session open: list_changed and the
// upstream's requests outside any call arrive on it. An endpoint that
// offers none (405, or any other refusal) is left alone.
func (p *httpPeer) listen() {
	c := p.c
	delay := minBackoff
	for c.ctx.Err() == nil {
		began := time.Now()
		resp, err := p.send(c.ctx, http.MethodGet, nil, nil, "")
		if err == nil {
			mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			if resp.StatusCode != http.StatusOK || mediaType != "text/event-stream" {
				resp.Body.Close()
				c.u.log.Debug("upstream offers no GET stream; list_changed may not arrive", "status", resp.Status)
				return
			}
			err = p.readStream(newEventStream(resp.Body), "")
		}
		if c.ctx.Err() != nil {
			return
		}
		c.u.log.Debug("GET stream ended; reopening", "err", err, "retry_in", delay)
		if time.Since(began) >= stableAfter {
			delay = minBackoff
		}
		if !sleepCtx(c.ctx, jitter(delay)) {
			return
		}
		delay = min(2*delay, maxBackoff)
		c.markDirty(c.advertised())
	}
}

// close ends the session (DELETE) and the engine.
func (p *httpPeer) close() error {
	var err error
	p.closeOnce.Do(func() {
		p.mu.Lock()
		session := p.session
		p.mu.Unlock()
		if session != "" {
			ctx, cancel := context.WithTimeout(context.Background(), closeSessionTimeout)
			resp, derr := p.send(ctx, http.MethodDelete, nil, nil, "")
			if derr == nil {
				resp.Body.Close()
			} else {
				err = fmt.Errorf("ending the session: %w", derr)
			}
			cancel()
		}
		close(p.done)
		p.w.Close()
	})
	return err
}

func (p *httpPeer) wait() {
	p.w.Wait()
	p.wg.Wait()
}

// requestBytes encodes a request with params spliced in as bytes.
func requestBytes(id, method string, params json.RawMessage) []byte {
	b := make([]byte, 0, len(params)+len(method)+len(id)+64)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendQuote(b, id)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

func notificationBytes(method string, params json.RawMessage) []byte {
	b := make([]byte, 0, len(params)+len(method)+64)
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = appendJSONString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// readFull reads r into b until b is full or r fails. Unlike io.ReadFull
// it returns r's own error, io.EOF for an end before b is full: an
// io.ErrUnexpectedEOF is then the body's (cut short before its announced
// length or its last chunk), never a body shorter than b.
func readFull(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// chunkPool holds the buffers readAll reads bodies of unknown length into.
var chunkPool = sync.Pool{New: func() any { return new([64 << 10]byte) }}

// readAll reads r to its end, at most max bytes, into one slice: of size
// bytes when the length is known (size ≥ 0), else read in pooled chunks
// and joined once, so that a large body is copied once rather than at
// every doubling of a growing buffer. With pooled, the slice is in a
// buffer from the pool when it is large enough to be pooled; buf is that
// buffer (nil: none).
func readAll(r io.Reader, size, max int64, pooled bool) (data []byte, buf *[]byte, err error) {
	r = io.LimitReader(r, max)
	if size >= 0 && size < max {
		if pooled {
			buf = getBuffer(int(size) + 1)
		}
		var b []byte
		if buf != nil {
			b = (*buf)[: size : size+1]
		} else {
			b = make([]byte, size, size+1)
		}
		n, err := readFull(r, b)
		if err == io.EOF {
			return b[:n:n], buf, nil
		}
		if err != nil {
			return b[:n:n], buf, err
		}
		var one [1]byte // a body longer than it said: read on
		if m, _ := r.Read(one[:]); m == 0 {
			return b[:size:size], buf, nil
		}
		rest, _, err := readAll(r, -1, max-size-1, false)
		return append(append(b, one[0]), rest...), nil, err // a copy: not in buf
	}
	var chunks []*[64 << 10]byte
	defer func() {
		for _, c := range chunks {
			chunkPool.Put(c)
		}
	}()
	total, last := 0, 0
	for {
		c := chunkPool.Get().(*[64 << 10]byte)
		chunks = append(chunks, c)
		n := 0
		n, err = readFull(r, c[:])
		total, last = total+n, n
		if err != nil {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	parts := make([][]byte, len(chunks), len(chunks)+1)
	for i, c := range chunks {
		parts[i] = c[:]
	}
	parts[len(parts)-1] = parts[len(parts)-1][:last]
	if pooled {
		buf = getBuffer(total)
	}
	if buf != nil {
		data = (*buf)[:0:total]
		for _, p := range parts {
			data = append(data, p...)
		}
		return data, buf, err
	}
	if len(parts) == 1 {
		parts = append(parts, nil) // bytes.Join copies without zeroing first only for two or more
	}
	return bytes.Join(parts, nil), nil, err
}
