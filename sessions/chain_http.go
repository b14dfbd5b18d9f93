package sessions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/audit"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/door"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/upstream"
)

// callFrames bounds the notifications and server→client requests queued
// for one request's writer, which drains them as they come; past it a
// notification is dropped (and logged), never the upstream connection's
// reader blocked.
const callFrames = 64

// routedAnswer is what route returned.
type routedAnswer struct {
	result json.RawMessage
	err    error
	// stream, when set, is the result, written as it is read (result is
	// then nil).
	stream *aggregator.ResultStream
}

// serveRouted answers a routed request on /mcp: the chain after the
// binding. sess is the bound legacy session, or nil for a 2026-07-28
// request. The handler goroutine is the request's only writer: frames the
// call produces (progress, log messages, server→client requests) are
// written as they come, on an event stream, and the answer last, so what
// an upstream sent before its result reaches the client before it.
func (s *Server) serveRouted(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, sel grant.Selection, b grant.Binding, view *filter.View, id string, sess *session) {
	modern := sess == nil
	if modern {
		if e := validateModern(r, m, view); e != nil {
			writeAnswer(w, httpStatus(e.Code), jsonrpc.ErrorResponse(m.ID, e))
			return
		}
		// A stateless request has no session: whatever Mcp-Session-Id it
		// carries is the client's to choose, so it must not key the rate
		// limit (a new value each time would escape it, and grow the
		// limiter without bound). It is keyed by who is asking instead.
		id = statelessKey(r, sel, b)
	}
	ctx, e, refusal := s.decideTraced(r.Context(), r.Header, id, b, view, m)
	defer s.endSpan(ctx)
	if refusal != nil {
		status := http.StatusOK
		if modern {
			status = httpStatus(refusal.Code)
		}
		writeAnswer(w, status, jsonrpc.ErrorResponse(m.ID, refusal))
		return
	}
	var held *backlog // the session's: the call's slot, frames and answer count in it
	overflow := func() {}
	if sess != nil {
		held = sess.held
		overflow = func() { s.stalled(id, errSlowClient) }
	}
	out := s.newEventWriter(w, held)
	if sess == nil {
		// A request of no session: its answer counts in its caller's
		// total while it is written. Its call's frames do not (a
		// 2026-07-28 call may be held, and outlive the request); they
		// are written as they come.
		out.held = s.newBacklog(b.Who, 0, 0)
	}
	defer out.done()
	// A call's answer is written here, after which nothing refers to its
	// result: the buffers the result was read and rewritten into go back
	// to the pool (upstream.Loan). A call before 2026-07-28 runs inline,
	// under this request's loan; a 2026-07-28 call may outlive the request
	// and has a loan of its own (start), given back by the request that
	// writes its final answer.
	loan := new(upstream.Loan)
	if !modern {
		// A large result of a call that runs inline, on this request's
		// goroutine, is written to the client as it is read
		// (aggregator.ResultStream); a 2026-07-28 call may outlive its
		// request and is read whole.
		loan.AllowTail(upstream.StreamThreshold)
	}
	ctx = upstream.WithLoan(ctx, loan)
	if sess != nil && !s.takesLateFrames(sess, m) {
		// Nothing the upstream sends after the answer could reach this
		// client before it: the answer goes out first, and the end of
		// the upstream's stream is awaited after (upstream.Loan).
		loan.AnswerFirst()
		defer loan.Settle()
	}
	c, refusal := s.callFor(ctx, m, b, e, id, held, overflow, func(c *call, logf func(string, ...any)) *caller {
		if modern {
			return modernCaller(m, c.queue, logf)
		}
		return s.sessionCaller(sess, c, logf)
	})
	if refusal != nil {
		writeAnswer(w, httpStatus(refusal.Code), jsonrpc.ErrorResponse(m.ID, refusal))
		return
	}
	if sess != nil {
		// notifications/cancelled naming m cancels the call. Until await,
		// nothing of it has run (it runs inline).
		defer sess.inflight.remove(sess.inflight.add(m.ID, c.abort))
	}
	answer, code := s.await(ctx, c, m, out.event)
	if c.stream != nil {
		defer c.stream.Close()
	}
	if answer.Empty() {
		return
	}
	status := http.StatusOK
	if modern && code != 0 {
		status = httpStatus(code)
	}
	if c.stream != nil {
		if err := out.finalStream(ctx, answer, c.stream); err != nil {
			// Part of the result went out: the response must not end
			// as if it were whole (abort it: the client sees its
			// connection or stream cut, never a truncated JSON that
			// parses).
			s.log.Warn("result aborted while it was written", "session", id, "upstream", c.stream.Upstream(), "method", m.Method, "tool", m.Name, "err", err)
			c.stream.Close()
			panic(http.ErrAbortHandler)
		}
	} else {
		// It holds the buffers it was read and rewritten into until it
		// is written: they count as what waits for the client.
		if out.final(status, m.ID, answer, loan.Size()+c.loan.Size()) != nil {
			s.auditLimit(id, b.Profile, m.Method, m.Name, audit.ReasonBusy)
		}
	}
	if loan.Pending() {
		out.flush() // the client has its answer while Settle waits
	}
	if !out.broken || r.ProtoMajor == 1 {
		// Written in full, or given up by an HTTP/1 connection, whose
		// failed write returned holding nothing of it: no writer holds
		// any of it, and its buffers serve the next answers instead of
		// waiting for the collector (a failed write may leave an HTTP/2
		// frame writer holding it, so then it is left to the garbage
		// collector).
		loan.Release()
		if c.final.Load() { // not an input_required answer of a held call, which goes on
			c.loan.Release()
		}
	}
	if out.stalled && sess != nil {
		s.stalled(id, fmt.Errorf("writing to the client: %w", out.err))
	}
}

// stalled ends the /mcp session id, whose client stopped reading: its
// next request gets 404, so it starts a new session.
func (s *Server) stalled(id string, cause error) {
	s.log.Warn("session ended", "session", id, "reason", cause.Error())
	go s.expire(id) // not on the writer's goroutine: expiring waits for nothing of it, but stays off its path
}

// callFor starts the call m asks for, or, for a 2026-07-28 retry that
// names a held call, resumes that one. newCaller makes the request's
// aggregator.Client for a new call. held is the session's backlog (nil for
// a stateless request): a new call takes one of its slots, or is refused
// as busy, and its frames count in it; overflow ends the session when
// they go past its limit. Unless it refuses, the caller must await the
// call (await or awaitQueued), which ends what callFor began.
func (s *Server) callFor(ctx context.Context, m *jsonrpc.Message, b grant.Binding, e *filter.Entry, id string,
	held *backlog, overflow func(), newCaller func(*call, func(string, ...any)) *caller) (*call, *jsonrpc.Error) {
	modern := isModern(m)
	if modern {
		if c, ok, refusal := s.resume(m, b, id); ok {
			if refusal == nil {
				s.flights.enter() // left by await
			}
			return c, refusal
		}
	}
	refusal := s.unread.admit(b.Who)
	var release func()
	if refusal == nil {
		release, refusal = held.admit()
	}
	if refusal != nil {
		s.metrics.count(m.Method, outcomeError)
		s.auditLimit(id, b.Profile, m.Method, m.Name, audit.ReasonBusy)
		return nil, refusal
	}
	// The request counts as waiting for its answer before the call can
	// start, so that a shutdown in between cannot see it settled (await
	// leaves it).
	s.flights.enter()
	c := newCall(m, b, modern, id, held, overflow)
	c.release = release
	logf := func(msg string, args ...any) { s.log.Debug(msg, append(args, "session", id, "method", m.Method)...) }
	cl := newCaller(c, logf)
	cl.who = b.Who
	if !modern {
		cl.session = id // a stateless request's id is only its rate-limit key
	}
	s.start(ctx, c, id, b, e, m, cl)
	return c, nil
}

// statelessKey names the caller of a stateless request for rate limits,
// logs and audit, so that dropping the session escapes no limit: its token
// and profile, or without a token its client address and profile. A token
// appears only as 8 hex digits of its hash.
func statelessKey(r *http.Request, sel grant.Selection, b grant.Binding) string {
	who := r.RemoteAddr
	if host, _, err := net.SplitHostPort(who); err == nil {
		who = host
	}
	if sel.HasToken {
		sum := sha256.Sum256([]byte(sel.Token))
		who = "token-" + hex.EncodeToString(sum[:4])
	}
	return "stateless/" + b.Profile + "/" + who
}

// eventWriter answers one HTTP request with a single JSON body, or, once
// a frame has to go before the answer, with an event stream. Each write
// must finish within the server's write timeout: a client that stops reading fails
// it, which stalled reports. The answer counts in held while it is
// written.
type eventWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	held    *backlog // nil: not counted
	stream  bool
	broken  bool
	stalled bool  // a write failed or timed out
	err     error // why
	timed   bool  // a write deadline was set
	timeout time.Duration
}

// newEventWriter returns the writer of one answer on w, counting it in held
// (nil: not counted).
func (s *Server) newEventWriter(w http.ResponseWriter, held *backlog) *eventWriter {
	return &eventWriter{w: w, rc: http.NewResponseController(w), held: held, timeout: s.writeTimeout}
}

// deadline bounds the next write.
func (o *eventWriter) deadline() {
	if o.rc.SetWriteDeadline(time.Now().Add(o.timeout)) == nil {
		o.timed = true
	}
}

// fail records a failed write.
func (o *eventWriter) fail(err error) {
	o.broken, o.stalled, o.err = true, true, err
}

func (o *eventWriter) event(frame []byte) { o.eventFrame(jsonrpc.Whole(frame)) }

// eventFrame writes frame as the next event, opening the stream first.
func (o *eventWriter) eventFrame(frame jsonrpc.Frame) {
	if o.broken {
		return
	}
	o.deadline()
	if !o.stream {
		o.stream = true
		h := o.w.Header()
		h["Content-Type"] = contentTypeEvents
		h["Cache-Control"] = noCache
		o.w.WriteHeader(http.StatusOK)
	}
	if err := door.WriteEvent(o.w, frame); err != nil {
		o.fail(err)
		return
	}
	if err := o.rc.Flush(); err != nil {
		o.fail(err)
	}
}

// final writes the answer frame to the request id, which holds lent
// bytes of buffers (its own among them) until it is written. When its
// caller's share has no room for it (backlog.holdAnswer), the busy error
// is written in its place and returned.
func (o *eventWriter) final(status int, id json.RawMessage, frame jsonrpc.Frame, lent int) (refused *jsonrpc.Error) {
	held := max(frame.Len(), lent)
	if refused = o.held.holdAnswer(held); refused != nil {
		frame = jsonrpc.Whole(jsonrpc.ErrorResponse(id, refused))
		held = frame.Len()
		o.held.hold(held)
	}
	defer o.held.written(held)
	if o.stream {
		o.eventFrame(frame)
		return refused
	}
	o.deadline()
	h := o.w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Content-Length"] = []string{strconv.Itoa(frame.Len())} // not chunked: written as it is
	o.w.WriteHeader(status)
	if _, err := frame.WriteTo(o.w); err != nil {
		o.fail(err)
	}
	return refused
}

// streamHeld is what a streamed result counts in its session's backlog
// while it is written: the buffers it passes through (a read chunk and a
// write buffer), not the whole result, which viewmux never holds.
const streamHeld = 96 << 10

// finalStream writes the answer head (the envelope up to "result":), then
// rs as it is read, then the envelope's end. An error from rs means the
// answer is not whole: the caller aborts the response. A write that fails
// is recorded as final's is (the client stopped reading), and is no error
// of rs's.
func (o *eventWriter) finalStream(ctx context.Context, head jsonrpc.Frame, rs *aggregator.ResultStream) error {
	o.held.hold(streamHeld)
	defer o.held.written(streamHeld)
	stop := context.AfterFunc(ctx, rs.Abort) // a client gone stops the upstream's read too
	defer stop()
	var w io.Writer = deadlineWriter{o}
	if o.stream {
		o.deadline()
		if _, err := io.WriteString(o.w, "event: message\ndata: "); err != nil {
			o.fail(err)
			return nil
		}
		w = oneLineWriter{w}
	} else {
		h := o.w.Header()
		h.Set("Content-Type", "application/json")
		o.w.WriteHeader(http.StatusOK) // chunked: its length is known at its end
	}
	if _, err := w.Write(head[0]); err != nil {
		o.fail(err)
		return nil
	}
	if _, err := rs.WriteTo(w); err != nil {
		if o.broken {
			return nil // the client's write failed: recorded
		}
		return err
	}
	end := "}"
	if o.stream {
		end = "}\n\n"
	}
	if _, err := io.WriteString(w, end); err != nil {
		o.fail(err)
		return nil
	}
	if o.stream {
		o.flush()
	}
	return nil
}

// deadlineWriter writes to the client, each write within the write
// timeout; a failed write is recorded (fail).
type deadlineWriter struct{ o *eventWriter }

func (d deadlineWriter) Write(p []byte) (int, error) {
	d.o.deadline()
	n, err := d.o.w.Write(p)
	if err != nil {
		d.o.fail(err)
	}
	return n, err
}

// oneLineWriter writes p with every line break replaced by a space
// (jsonrpc.OneLine), for an event's data line.
type oneLineWriter struct{ w io.Writer }

func (o oneLineWriter) Write(p []byte) (int, error) {
	if _, err := o.w.Write(jsonrpc.OneLine(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush sends what was written to the client now. A writer that cannot
// flush (ErrNotSupported) sends it when the handler returns, as before.
func (o *eventWriter) flush() {
	if !o.broken {
		if err := o.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			o.fail(err)
		}
	}
}

// takesLateFrames reports whether frames an upstream sends just after the
// answer to m would still reach the client of sess, before that answer:
// progress, when m asked for it, and log messages, when the session set
// a level.
func (s *Server) takesLateFrames(sess *session, m *jsonrpc.Message) bool {
	if tok, ok := m.Meta["progressToken"]; ok && string(tok) != "null" {
		return true
	}
	return sess.level() != ""
}

// done lifts the write deadline, so that a keep-alive connection's next
// request does not inherit it.
func (o *eventWriter) done() {
	if o.timed {
		o.rc.SetWriteDeadline(time.Time{})
	}
}

// Header values of every answer, shared: net/http only reads them.
var (
	contentTypeJSON   = []string{"application/json"}
	contentTypeEvents = []string{"text/event-stream"}
	noCache           = []string{"no-cache"}
)

func writeAnswer(w http.ResponseWriter, status int, frame []byte) {
	w.Header()["Content-Type"] = contentTypeJSON
	w.WriteHeader(status)
	w.Write(frame)
}

// httpStatus is the HTTP status 2026-07-28 prescribes for an error code.
func httpStatus(code int) int {
	switch code {
	case mcp.METHOD_NOT_FOUND:
		return http.StatusNotFound
	case mcp.HEADER_MISMATCH, mcp.MISSING_REQUIRED_CLIENT_CAPABILITY, mcp.UNSUPPORTED_PROTOCOL_VERSION,
		mcp.INVALID_REQUEST, mcp.INVALID_PARAMS, mcp.PARSE_ERROR:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// validateTransport applies the transport rules 2026-07-28 sets for
// every POST of that era: the protocol version in the header and in _meta,
// present, equal and supported, and no Last-Event-ID.
func validateTransport(r *http.Request, m *jsonrpc.Message) *jsonrpc.Error {
	h := r.Header
	header := h.Get(mcp.HeaderProtocolVersion)
	meta := m.MetaString(mcp.MetaKeyProtocolVersion)
	switch {
	case h.Get(mcp.HeaderLastEventID) != "":
		return &jsonrpc.Error{Code: mcp.HEADER_MISMATCH, Message: "Last-Event-ID is not supported in protocol version " + mcp.ProtocolVersion20260728 +
			": streams are not resumable, re-issue the request with a new ID"}
	case header == "":
		return &jsonrpc.Error{Code: mcp.HEADER_MISMATCH, Message: mcp.HeaderProtocolVersion + " header is required for requests carrying " + mcp.MetaKeyProtocolVersion}
	case meta == "":
		return &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "missing or invalid _meta field " + mcp.MetaKeyProtocolVersion}
	case header != meta:
		return &jsonrpc.Error{Code: mcp.HEADER_MISMATCH, Message: mcp.HeaderProtocolVersion + " header " + header + " does not match request " + mcp.MetaKeyProtocolVersion + " " + meta}
	case !mcp.IsValidProtocolVersion(meta):
		e := mcp.UnsupportedProtocolVersionError{Version: meta, Supported: mcp.ValidProtocolVersions}.JSONRPCError().Error
		data, _ := json.Marshal(e.Data)
		return &jsonrpc.Error{Code: e.Code, Message: e.Message, Data: data}
	}
	return nil
}

// validateModern applies the rules 2026-07-28 sets for a POSTed request:
// validateTransport's; client capabilities in _meta; Mcp-Method, Mcp-Name
// and the tool's Mcp-Param-* headers equal to the body.
func validateModern(r *http.Request, m *jsonrpc.Message, view *filter.View) *jsonrpc.Error {
	if e := validateTransport(r, m); e != nil {
		return e
	}
	h := r.Header
	meta := m.MetaString(mcp.MetaKeyProtocolVersion)
	var caps mcp.ClientCapabilities
	if raw, ok := m.Meta[mcp.MetaKeyClientCapabilities]; !ok || json.Unmarshal(raw, &caps) != nil {
		return &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "missing or invalid _meta field " + mcp.MetaKeyClientCapabilities}
	}
	if err := mcp.ValidateStandardHeaders(h.Get, meta, mcp.MCPMethod(m.Method), m.Params); err != nil {
		return protocolError(err)
	}
	if m.Method == string(mcp.MethodToolsCall) {
		if e := view.Lookup(m.Name); e != nil {
			lookup := func(name string) (string, bool) {
				v := h.Values(name)
				if len(v) == 0 {
					return "", false
				}
				return v[0], true
			}
			if err := mcp.ValidateParamHeadersLookup(lookup, &e.Tool, m.Params); err != nil {
				return protocolError(err)
			}
		}
	}
	return nil
}

// protocolError maps a header validation error as mcp-go's server does.
func protocolError(err error) *jsonrpc.Error {
	var mismatch mcp.HeaderMismatchError
	if errors.As(err, &mismatch) {
		return &jsonrpc.Error{Code: mcp.HEADER_MISMATCH, Message: mismatch.Error()}
	}
	return &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: err.Error()}
}

// sessionCaller is the caller of a request on a bound /mcp session: its
// capabilities from initialize, its log level, and server→client requests
// sent on the request's own event stream, answered by a POST that
// serveMCP hands to deliver.
func (s *Server) sessionCaller(sess *session, call *call, logf func(string, ...any)) *caller {
	c := &caller{queue: call.queue, log: logf}
	c.caps = sess.capabilities()
	c.level = sess.level
	c.ask = func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		// A request of the call's own ends with the call. One of the
		// session's as a whole (aggregator.SessionWide) is awaited while
		// the session lasts: the client answers it by POST whichever of
		// the session's streams carried it, and one that comes after
		// this call ended goes on the session's GET stream.
		wide := aggregator.SessionWide(ctx)
		if !wide {
			var done func()
			ctx, done = call.bound(ctx)
			defer done()
		}
		id, reply := sess.pending.open()
		defer sess.pending.close(id)
		frame, err := jsonrpc.Request(jsonrpc.StringID(id), method, params)
		if err != nil {
			return nil, err
		}
		if err := call.push(ctx, frame); err != nil && (!wide || !s.push(sess, frame)) {
			return nil, err
		}
		select {
		case r := <-reply:
			if ce, ok := r.err.(*ClientError); ok {
				ce.Method = method
			}
			return r.result, r.err
		case <-ctx.Done():
			if !wide && call.ctx.Err() == nil {
				// Withdrawn while the call goes on (an approval that
				// timed out): the client is told, on the call's stream,
				// before the call's answer, as the stream doors do.
				if f, err := cancelledFrame(id, ctx); err == nil {
					call.queue(f)
				}
			}
			return nil, ctx.Err()
		}
	}
	return c
}

// pendingSet is the server→client requests of one session, of any door,
// waiting for the client's answer. Its zero value is ready; it is safe for concurrent use.
type pendingSet struct {
	mu     sync.Mutex
	next   uint64
	wait   map[string]chan pendingReply
	closed bool // the session ended (fail)
}

func (p *pendingSet) open() (string, <-chan pendingReply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wait == nil {
		p.wait = make(map[string]chan pendingReply)
	}
	p.next++
	id := fmt.Sprintf("viewmux-%d", p.next)
	ch := make(chan pendingReply, 1)
	if p.closed {
		ch <- pendingReply{err: ErrSessionClosed}
		return id, ch
	}
	p.wait[id] = ch
	return id, ch
}

// fail answers every request still waiting with ErrSessionClosed, and
// those opened later at once: the session ended.
func (p *pendingSet) fail() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for id, ch := range p.wait {
		select {
		case ch <- pendingReply{err: ErrSessionClosed}:
		default:
		}
		delete(p.wait, id)
	}
}

func (p *pendingSet) close(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.wait, id)
}

// deliver hands a client's answer to the request waiting for it and
// reports whether one was.
func (p *pendingSet) deliver(m *jsonrpc.Message) bool {
	var id string
	if json.Unmarshal(m.ID, &id) != nil {
		return false
	}
	p.mu.Lock()
	ch, ok := p.wait[id]
	p.mu.Unlock()
	if !ok {
		return false
	}
	var r pendingReply
	if len(m.Error) > 0 {
		ce := &ClientError{}
		if err := json.Unmarshal(m.Error, ce); err != nil {
			ce.Code, ce.Message = mcp.INTERNAL_ERROR, "the client answered with an unreadable error object"
		}
		r.err = ce
	} else {
		r.result = m.Result
	}
	select {
	case ch <- r:
	default:
	}
	return true
}
