package sessions

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
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

// This file holds what the message-stream front doors (websocket, legacy
// SSE, stdio) share: the methods of a session (the one type every door
// shares, session.go) that has a wire half (door.Conn), and
// Server.dispatch, the single path every message from those clients takes.
// The transports (package door) only move frames: they read messages and
// hand them to Receive, and give the session a door.FrameWriter for what
// goes back.

// Limits of one stream session: its wire half's (door.Conn).
const (
	// streamWorkers bounds the requests of one session handled at once.
	streamWorkers = door.Workers
	// streamQueue bounds the requests waiting for a worker; beyond it a
	// request is answered with errBusyCode at once.
	streamQueue = door.QueueLen
	// frameWriteTimeout bounds one write to a client that stopped reading
	// when neither Options.WriteTimeout nor server.write_timeout says.
	frameWriteTimeout = 30 * time.Second
)

// errBusyCode is the JSON-RPC error for a request refused because its
// session already has streamWorkers+streamQueue requests outstanding.
const errBusyCode = -32000

// Sentinel errors of stream sessions.
var (
	// ErrSessionClosed is returned by a server→client request whose session
	// ended before the client answered.
	ErrSessionClosed = door.ErrClosed

	// Causes a session can end with that come from its wire; the doors
	// map them to their close.
	errServerShutdown = door.ErrServerShutdown
	errClientGone     = door.ErrClientGone
)

// ClientError is a JSON-RPC error a client answered a server→client request
// (sampling, elicitation, roots) with.
type ClientError struct {
	Method  string
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *ClientError) Error() string {
	return fmt.Sprintf("client answered %s with error %d: %s", e.Method, e.Code, e.Message)
}

var _ door.Owner = (*session)(nil)

type pendingReply struct {
	result json.RawMessage
	err    error
}

// newStreamSession starts a session of door kind for b, writing through
// w, opened by b.Caller (a static token's sum, or an OAuth subject's). It
// is in the registry once its door admits it (Server.admit). The session
// lives until End is called or parent is done; its writer runs from now
// on, but nothing is sent before the client's first message.
func (s *Server) newStreamSession(parent context.Context, kind doorKind, b grant.Binding, w door.FrameWriter) *session {
	id := replicaPrefix(s.cfg) + kind.String() + "-" + rand.Text()
	// The worker pool bounds its calls.
	sess := s.newSession(id, kind, b, b.Caller, s.newBacklog(b.Who, s.cfg.Server.MaxPendingBytes, 0))
	sess.conn = door.NewConn(parent, w, sess)
	s.log.Info("session connected", "session", id, "profile", b.Profile)
	return sess
}

// ID returns the session's ID.
func (sess *session) ID() string { return sess.id }

// ctx returns the session's context, done once it has ended.
func (sess *session) ctx() context.Context { return sess.conn.Context() }

// Done returns a channel closed when the session has ended.
func (sess *session) Done() <-chan struct{} { return sess.conn.Done() }

// End stops the session: no new requests, in-flight handlers and pending
// server→client requests are cancelled, and it leaves the registry
// (Ended). Frames already queued are still written. It does not wait; the
// first cause wins. It is idempotent.
func (sess *session) End(cause error) { sess.conn.End(cause) }

// Ended is called once, by conn, when the session ends (door.Owner).
func (sess *session) Ended(cause error) {
	if pe, ok := cause.(*door.PanicError); ok {
		sess.srv.log.Error("panic in session writer", "session", sess.ID(), "panic", pe.Value, "stack", string(pe.Stack))
	}
	// Out of the registry, whether it bound or not; its limiter bucket
	// and scope = "session" connections too, as it may have called tools
	// before it initialized.
	sess.srv.release(sess)
	if errors.Is(cause, door.ErrWrite) {
		// A client that stopped reading: what its session held is
		// garbage now, which an idle process would keep for minutes.
		sess.srv.reclaim.kick()
	}
	level := slogLevelFor(cause)
	sess.srv.log.Log(context.Background(), level, "session ended", "session", sess.ID(), "profile", sess.srv.profileOf(sess), "reason", causeText(cause))
}

// Wait waits until the session's workers and writer have stopped, or ctx
// is done. Call it after End.
func (sess *session) Wait(ctx context.Context) error { return sess.conn.Wait(ctx) }

// Close ends the session and waits for it.
func (sess *session) Close(cause error) { sess.conn.Close(cause) }

// Cause returns why the session ended (nil while it runs or when it ended
// normally).
func (sess *session) Cause() error { return sess.conn.Cause() }

// Hold counts n bytes of a frame waiting for the client in the session's
// backlog (door.Owner).
func (sess *session) Hold(n int) bool { return sess.held.hold(n) }

// Written counts n bytes held as written or given up (door.Owner).
func (sess *session) Written(n int) { sess.held.written(n) }

// --- receiving ---

// Receive takes one message from the client. Responses and notifications
// are handled on the caller's goroutine (so notifications/cancelled is never
// stuck behind running calls); requests go to the worker pool. It must be
// called from one goroutine at a time, the transport's reader. It reports
// false once the session has ended.
func (sess *session) Receive(raw []byte) bool {
	ctx := sess.ctx()
	if ctx.Err() != nil {
		return false
	}
	if l := sess.life; l != nil { // set when it was admitted, before its door read from it
		l.saw()
	}
	m, err := jsonrpc.Parse(raw)
	if err != nil {
		resp, _, _ := sess.srv.respond(grant.Binding{}, nil, nil, err)
		sess.send(ctx, resp)
		return true
	}
	switch {
	case m.IsResponse():
		sess.deliver(m)
	case m.IsRequest():
		sess.enqueue(raw, m)
	default:
		if m.Method == string(mcp.MethodNotificationCancelled) {
			sess.inflight.cancelNamed(m.Params)
		}
		if resp := sess.srv.handle(ctx, sess, raw, m); resp != nil {
			sess.send(ctx, resp)
		}
	}
	return true
}

// enqueue queues a request for the worker pool. A full queue answers the
// request at once.
func (sess *session) enqueue(raw []byte, m *jsonrpc.Message) {
	// Tracked from now on, so that a notifications/cancelled cancels it even
	// while it is queued.
	ctx, cancel := sess.inflight.track(sess.ctx(), m.ID)
	job := &door.Job{Ctx: ctx, Cancel: cancel, Raw: raw, Msg: m}
	if l := sess.life; l != nil {
		job.Done = l.enter() // not idle while it is queued or runs
	}
	err := sess.conn.Enqueue(job)
	if err == nil {
		return
	}
	cancel()
	if job.Done != nil {
		job.Done()
	}
	if errors.Is(err, door.ErrBusy) {
		sess.srv.metrics.count(m.Method, outcomeError)
		sess.srv.auditLimit(sess.ID(), sess.srv.profileOf(sess), m.Method, m.Name, audit.ReasonBusy)
		sess.send(sess.ctx(), errorFrame(m.ID, errBusyCode,
			fmt.Sprintf("too many requests in flight on this session (limit %d)", streamWorkers+streamQueue)))
	}
}

// Serve runs the dispatch path for job on one of conn's workers, turning a
// panic into an internal error answer (door.Owner).
func (sess *session) Serve(job *door.Job) (resp []byte) {
	defer func() {
		if v := recover(); v != nil {
			sess.srv.log.Error("panic handling a request", "session", sess.ID(), "method", job.Msg.Method, "panic", v, "stack", string(debug.Stack()))
			resp = errorFrame(job.Msg.ID, mcp.INTERNAL_ERROR, "internal error")
		}
	}()
	return sess.srv.handle(job.Ctx, sess, job.Raw, job.Msg)
}

// --- sending ---

// send queues a frame for the writer. It gives up when ctx or the session
// ends.
func (sess *session) send(ctx context.Context, frame []byte) error {
	return sess.conn.Send(ctx, frame)
}

// sendFrame is send for a frame in pieces (an answer around an upstream's
// result, which is written out without being joined first).
func (sess *session) sendFrame(ctx context.Context, frame jsonrpc.Frame) error {
	return sess.conn.SendFrame(ctx, frame)
}

// offer queues frame for the writer if there is room now.
func (sess *session) offer(frame jsonrpc.Frame) bool { return sess.conn.Offer(frame) }

// trySend queues a frame for the writer if there is room now; it reports
// whether it did. It is for frames that must not wait: those an upstream's
// reader delivers after their call was answered, and those that belong to
// no call (Server.notify).
func (sess *session) trySend(frame []byte) bool {
	err := sess.conn.TrySend(frame)
	if errors.Is(err, door.ErrBusy) {
		sess.srv.log.Warn("frame to the client dropped: the session's queue is full", "session", sess.ID())
	}
	return err == nil
}

// register binds the session (Server.bind: list_changed fan-out, logs,
// the session count) once it has initialized with hs. A session that has
// ended is not bound; one a reload ended (before, or while it bound) ends
// now.
func (sess *session) register(hs *handshake) {
	if l := sess.life; l != nil {
		l.ready.Store(true)
	}
	_, revoked := sess.srv.grantOf(sess)
	if revoked == nil {
		revoked = sess.srv.bind(sess, hs)
		if revoked == nil {
			_, revoked = sess.srv.grantOf(sess)
		}
	}
	if revoked != nil {
		sess.End(revoked)
	}
}

// --- the one message path ---

// dispatch answers one JSON-RPC message from a stream session: the same
// path for every stream front door. It returns the encoded answer, or nil
// for notifications, for responses to server→client requests, and for
// routed calls, which queue their answers themselves (handleRouted).
func (s *Server) dispatch(ctx context.Context, sess *session, raw []byte) []byte {
	m, err := jsonrpc.Parse(raw)
	if err != nil {
		resp, _, _ := s.respond(grant.Binding{}, nil, nil, err)
		return resp
	}
	if m.IsResponse() {
		sess.deliver(m)
		return nil
	}
	return s.handle(ctx, sess, raw, m)
}

// handle is dispatch for a message already parsed into m: routed requests
// through the chain (chain.go), everything else through the one handler
// (handler.go).
func (s *Server) handle(ctx context.Context, sess *session, raw []byte, m *jsonrpc.Message) []byte {
	b, revoked := s.grantOf(sess)
	if revoked != nil {
		sess.End(revoked) // the session's connection closes, saying why
		return nil
	}
	start := time.Now()
	if m.IsRequest() {
		defer func() { s.metrics.observeLatency(m.Method, time.Since(start)) }()
	}
	if m.Ambiguous != nil && !isRouted(m, true) {
		// As on /mcp: decoders would disagree on what it says.
		s.metrics.count(m.Method, outcomeDenied)
		if m.ID == nil && strings.HasPrefix(m.Method, "notifications/") {
			return nil // a notification gets no answer; a request whose id is misspelled does, with id null
		}
		return errorFrame(m.ID, mcp.INVALID_REQUEST, "Invalid request: "+m.Ambiguous.Error())
	}
	view := s.View(b)
	if isRouted(m, true) {
		return s.handleRouted(ctx, sess, b, view, m)
	}
	if m.IsRequest() && m.Method == string(mcp.MethodSubscriptionsListen) && isModern(m) {
		return s.listenStream(ctx, sess, b, view, m)
	}
	resp, hs, code := s.respond(b, view, m, nil)
	s.traceAnswer(ctx, nil, b, m, start, code)
	if hs != nil {
		sess.register(hs)
	}
	return resp
}

// handleRouted runs the chain for a routed request of a stream session.
// Its frames (progress, log messages, server→client requests) and then its
// answer go through the session's one writer, in that order; it returns
// only a refusal, having queued any other answer itself.
func (s *Server) handleRouted(ctx context.Context, sess *session, b grant.Binding, view *filter.View, m *jsonrpc.Message) []byte {
	ctx, e, refusal := s.decideTraced(ctx, nil, sess.ID(), b, view, m)
	defer s.endSpan(ctx)
	if refusal != nil {
		return jsonrpc.ErrorResponse(m.ID, refusal)
	}
	// The result is read into buffers lent to the call (upstream.Loan),
	// which go back once the session's writer has written its answer or
	// given it up: the next answers reuse them, so that a client that
	// does not read leaves no garbage the size of its answers behind. A
	// 2026-07-28 call may outlive its answer (held): it takes no loan.
	// Nor does the stdio door's one client, which has no caller share
	// and whose answers are written at once (SendFrame).
	var loan *upstream.Loan
	if !isModern(m) && sess.kind != doorStdio {
		loan = new(upstream.Loan)
		ctx = upstream.WithLoan(ctx, loan)
	}
	c, refusal := s.callFor(ctx, m, b, e, sess.ID(), sess.held, func() { sess.End(errSlowClient) }, func(c *call, logf func(string, ...any)) *caller {
		if isModern(m) {
			return modernCaller(m, c.queue, logf)
		}
		return &caller{caps: sess.capabilities(), queue: c.queue, log: logf, level: sess.level,
			ask: func(ctx context.Context, method string, params any) (json.RawMessage, error) {
				if aggregator.SessionWide(ctx) {
					// The session's as a whole: sent by the session's
					// writer and awaited while the session lasts, not
					// only while this call does.
					return sess.requestVia(ctx, mcp.MCPMethod(method), params, sess.send)
				}
				ctx, done := c.bound(ctx)
				defer done()
				return sess.requestVia(ctx, mcp.MCPMethod(method), params, c.push)
			}}
	})
	if refusal != nil {
		return jsonrpc.ErrorResponse(m.ID, refusal)
	}
	// The answer is queued here rather than by the worker (door.Conn), so
	// that shutdown knows it is on its way (drain.go).
	//
	// An answer its caller's share has no room for is not queued: the busy
	// error goes in its place (backlog.holdAnswer). Its reservation is
	// given back once the writer counts the frame itself.
	refuse := func(refused *jsonrpc.Error) {
		s.auditLimit(sess.ID(), b.Profile, m.Method, m.Name, audit.ReasonBusy)
		sess.sendFrame(ctx, jsonrpc.Whole(jsonrpc.ErrorResponse(m.ID, refused)))
	}
	final := func(f jsonrpc.Frame) {
		if refused := sess.held.holdAnswer(f.Len()); refused != nil {
			refuse(refused)
			return
		}
		sess.sendFrame(ctx, f)
		sess.held.written(f.Len())
	}
	queued := false
	if loan != nil {
		final = func(f jsonrpc.Frame) {
			queued = true
			// Until then it holds the buffers lent, not only its own
			// bytes (which the writer counts): the rest waits for the
			// client too.
			rest := max(0, loan.Size()-f.Len())
			if refused := sess.held.holdAnswer(rest + f.Len()); refused != nil {
				loan.Release() // nothing refers to the answer any more
				refuse(refused)
				return
			}
			sess.conn.SendFrameThen(ctx, f, func() {
				loan.Release()
				sess.held.written(rest)
			})
			sess.held.written(f.Len())
		}
	}
	s.awaitQueued(ctx, c, m, func(f []byte) { sess.send(ctx, f) }, final, sess.trySend)
	if !queued { // no answer is due: nothing refers to the result
		loan.Release()
	}
	return nil
}

// oversizeAnswer is the answer to a message of ss over
// server.max_body_bytes, which it audits; id is the message's id when the
// transport could find it, else null.
func (s *Server) oversizeAnswer(ss *session, id json.RawMessage) []byte {
	s.metrics.count("", outcomeError)
	s.auditLimit(ss.ID(), s.profileOf(ss), "", "", audit.ReasonSize)
	return errorFrame(id, mcp.INVALID_REQUEST,
		fmt.Sprintf("message exceeds server.max_body_bytes (%d bytes)", s.cfg.Server.MaxBodyBytes))
}

// causeText renders why a session ended, for its log line.
func causeText(cause error) string {
	if cause == nil || errors.Is(cause, context.Canceled) {
		return "closed"
	}
	return cause.Error()
}

// slogLevelFor is the level a session's end is logged at: info for the
// ordinary ways a session ends, warn for the rest.
func slogLevelFor(cause error) slog.Level {
	switch {
	case cause == nil, errors.Is(cause, context.Canceled), errors.Is(cause, errClientGone), errors.Is(cause, errServerShutdown):
		return slog.LevelInfo
	}
	return slog.LevelWarn
}
