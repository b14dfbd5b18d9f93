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

	"github.com/mcpmux/mcpmux/aggregator"
	"github.com/mcpmux/mcpmux/filter"
	"github.com/mcpmux/mcpmux/internal/audit"
	"github.com/mcpmux/mcpmux/internal/jsonrpc"
	"github.com/mcpmux/mcpmux/sessions/door"
	"github.com/mcpmux/mcpmux/sessions/grant"
)

// This file holds what the message-stream front doors (websocket, legacy
// SSE, stdio) share: streamSession, one client's session (the one type
// every door shares, session.go) with its wire half (door.Conn), and
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
	// frameWriteTimeout is the default of Options.WriteTimeout: it bounds
	// one write to a client that stopped reading.
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

// streamSession is a session of a message-stream door (/ws, /sse,
// stdio): the session, the one type every door shares (its grant, log
// level, capabilities, pending server→client requests, requests in flight,
// expiry and backlog), with its wire half, conn (the frame writer, the
// ordered queue of what goes out and its one writer goroutine, and the
// pool of workers its requests run on). It is safe for concurrent use.
type streamSession struct {
	srv  *Server
	sess *session // the session; its ss is this
	// conn is a field, not a pointer, so that an idle session is one
	// allocation fewer.
	conn door.Conn
}

var _ door.Owner = (*streamSession)(nil)

type pendingReply struct {
	result json.RawMessage
	err    error
}

// newStreamSession starts a session of door kind for b, writing through
// w, opened by b.Caller (a static token's sum, or an OAuth subject's). It
// is in the registry once its door admits it (Server.admit). The session
// lives until End is called or parent is done; its writer runs from now
// on, but nothing is sent before the client's first message.
func (s *Server) newStreamSession(parent context.Context, kind string, b grant.Binding, w door.FrameWriter) *streamSession {
	id := replicaPrefix(s.cfg) + kind + "-" + rand.Text()
	// The worker pool bounds its calls.
	sess := s.newSession(id, kind, b, b.Caller, newBacklog(s.cfg.Server.MaxPendingBytes, 0))
	ss := &streamSession{srv: s, sess: sess}
	sess.ss = ss
	ss.conn.Start(parent, w, ss)
	s.log.Info("session connected", "session", id, "profile", b.Profile)
	return ss
}

// ID returns the session's ID.
func (ss *streamSession) ID() string { return ss.sess.id }

// ctx returns the session's context, done once it has ended.
func (ss *streamSession) ctx() context.Context { return ss.conn.Context() }

// Done returns a channel closed when the session has ended.
func (ss *streamSession) Done() <-chan struct{} { return ss.conn.Done() }

// End stops the session: no new requests, in-flight handlers and pending
// server→client requests are cancelled, and it leaves the registry
// (Ended). Frames already queued are still written. It does not wait; the
// first cause wins. It is idempotent.
func (ss *streamSession) End(cause error) { ss.conn.End(cause) }

// Ended is called once, by conn, when the session ends (door.Owner).
func (ss *streamSession) Ended(cause error) {
	if pe, ok := cause.(*door.PanicError); ok {
		ss.srv.log.Error("panic in session writer", "session", ss.ID(), "panic", pe.Value, "stack", string(pe.Stack))
	}
	// Out of the registry, whether it bound or not; its limiter bucket
	// and scope = "session" connections too, as it may have called tools
	// before it initialized.
	ss.srv.release(ss.sess)
	level := slogLevelFor(cause)
	ss.srv.log.Log(context.Background(), level, "session ended", "session", ss.ID(), "profile", ss.srv.profileOf(ss.sess), "reason", causeText(cause))
}

// Wait waits until the session's workers and writer have stopped, or ctx
// is done. Call it after End.
func (ss *streamSession) Wait(ctx context.Context) error { return ss.conn.Wait(ctx) }

// Close ends the session and waits for it.
func (ss *streamSession) Close(cause error) { ss.conn.Close(cause) }

// Cause returns why the session ended (nil while it runs or when it ended
// normally).
func (ss *streamSession) Cause() error { return ss.conn.Cause() }

// Hold counts n bytes of a frame waiting for the client in the session's
// backlog (door.Owner).
func (ss *streamSession) Hold(n int) bool { return ss.sess.held.hold(n) }

// Written counts n bytes held as written or given up (door.Owner).
func (ss *streamSession) Written(n int) { ss.sess.held.written(n) }

// --- receiving ---

// Receive takes one message from the client. Responses and notifications
// are handled on the caller's goroutine (so notifications/cancelled is never
// stuck behind running calls); requests go to the worker pool. It must be
// called from one goroutine at a time, the transport's reader. It reports
// false once the session has ended.
func (ss *streamSession) Receive(raw []byte) bool {
	ctx := ss.ctx()
	if ctx.Err() != nil {
		return false
	}
	if l := ss.sess.life; l != nil { // set when it was admitted, before its door read from it
		l.saw()
	}
	m, err := jsonrpc.Parse(raw)
	if err != nil {
		resp, _, _ := ss.srv.respond(grant.Binding{}, nil, nil, err)
		ss.send(ctx, resp)
		return true
	}
	switch {
	case m.IsResponse():
		ss.deliver(m)
	case m.IsRequest():
		ss.enqueue(raw, m)
	default:
		if m.Method == string(mcp.MethodNotificationCancelled) {
			ss.sess.inflight.cancelNamed(m.Params)
		}
		if resp := ss.srv.handle(ctx, ss, raw, m); resp != nil {
			ss.send(ctx, resp)
		}
	}
	return true
}

// enqueue queues a request for the worker pool. A full queue answers the
// request at once.
func (ss *streamSession) enqueue(raw []byte, m *jsonrpc.Message) {
	// Tracked from now on, so that a notifications/cancelled cancels it even
	// while it is queued.
	ctx, cancel := ss.sess.inflight.track(ss.ctx(), m.ID)
	job := &door.Job{Ctx: ctx, Cancel: cancel, Raw: raw, Msg: m}
	if l := ss.sess.life; l != nil {
		job.Done = l.enter() // not idle while it is queued or runs
	}
	err := ss.conn.Enqueue(job)
	if err == nil {
		return
	}
	cancel()
	if job.Done != nil {
		job.Done()
	}
	if errors.Is(err, door.ErrBusy) {
		ss.srv.metrics.count(m.Method, outcomeError)
		ss.srv.auditLimit(ss.ID(), ss.srv.profileOf(ss.sess), m.Method, m.Name, audit.ReasonBusy)
		ss.send(ss.ctx(), errorFrame(m.ID, errBusyCode,
			fmt.Sprintf("too many requests in flight on this session (limit %d)", streamWorkers+streamQueue)))
	}
}

// Serve runs the dispatch path for job on one of conn's workers, turning a
// panic into an internal error answer (door.Owner).
func (ss *streamSession) Serve(job *door.Job) (resp []byte) {
	defer func() {
		if v := recover(); v != nil {
			ss.srv.log.Error("panic handling a request", "session", ss.ID(), "method", job.Msg.Method, "panic", v, "stack", string(debug.Stack()))
			resp = errorFrame(job.Msg.ID, mcp.INTERNAL_ERROR, "internal error")
		}
	}()
	return ss.srv.handle(job.Ctx, ss, job.Raw, job.Msg)
}

// --- sending ---

// send queues a frame for the writer. It gives up when ctx or the session
// ends.
func (ss *streamSession) send(ctx context.Context, frame []byte) error {
	return ss.conn.Send(ctx, frame)
}

// sendFrame is send for a frame in pieces (an answer around an upstream's
// result, which is written out without being joined first).
func (ss *streamSession) sendFrame(ctx context.Context, frame jsonrpc.Frame) error {
	return ss.conn.SendFrame(ctx, frame)
}

// offer queues frame for the writer if there is room now.
func (ss *streamSession) offer(frame jsonrpc.Frame) bool { return ss.conn.Offer(frame) }

// trySend queues a frame for the writer if there is room now; it reports
// whether it did. It is for frames that must not wait: those an upstream's
// reader delivers after their call was answered, and those that belong to
// no call (Server.notify).
func (ss *streamSession) trySend(frame []byte) bool {
	err := ss.conn.TrySend(frame)
	if errors.Is(err, door.ErrBusy) {
		ss.srv.log.Warn("frame to the client dropped: the session's queue is full", "session", ss.ID())
	}
	return err == nil
}

// register binds the session (Server.bind: list_changed fan-out, logs,
// the session count) once it has initialized with hs. A session that has
// ended is not bound; one a reload ended (before, or while it bound) ends
// now.
func (ss *streamSession) register(hs *handshake) {
	if l := ss.sess.life; l != nil {
		l.ready.Store(true)
	}
	_, revoked := ss.srv.grantOf(ss.sess)
	if revoked == nil {
		revoked = ss.srv.bind(ss.sess, hs)
		if revoked == nil {
			_, revoked = ss.srv.grantOf(ss.sess)
		}
	}
	if revoked != nil {
		ss.End(revoked)
	}
}

// --- the one message path ---

// dispatch answers one JSON-RPC message from a stream session: the same
// path for every stream front door. It returns the encoded answer, or nil
// for notifications, for responses to server→client requests, and for
// routed calls, which queue their answers themselves (handleRouted).
func (s *Server) dispatch(ctx context.Context, sess *streamSession, raw []byte) []byte {
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
func (s *Server) handle(ctx context.Context, sess *streamSession, raw []byte, m *jsonrpc.Message) []byte {
	b, revoked := s.grantOf(sess.sess)
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
func (s *Server) handleRouted(ctx context.Context, sess *streamSession, b grant.Binding, view *filter.View, m *jsonrpc.Message) []byte {
	ctx, e, refusal := s.decideTraced(ctx, nil, sess.ID(), b, view, m)
	defer s.endSpan(ctx)
	if refusal != nil {
		return jsonrpc.ErrorResponse(m.ID, refusal)
	}
	c, refusal := s.callFor(ctx, m, b, e, sess.ID(), sess.sess.held, func() { sess.End(errSlowClient) }, func(c *call, logf func(string, ...any)) *caller {
		if isModern(m) {
			return modernCaller(m, c.queue, logf)
		}
		return &caller{caps: sess.sess.capabilities(), queue: c.queue, log: logf, level: sess.sess.level,
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
	// The answer is queued here rather than by runJob, so that shutdown
	// knows it is on its way (drain.go).
	s.awaitQueued(ctx, c, m, func(f []byte) { sess.send(ctx, f) }, func(f jsonrpc.Frame) { sess.sendFrame(ctx, f) }, sess.trySend)
	return nil
}

// oversizeAnswer is the answer to a message of ss over
// server.max_body_bytes, which it audits; id is the message's id when the
// transport could find it, else null.
func (s *Server) oversizeAnswer(ss *streamSession, id json.RawMessage) []byte {
	s.metrics.count("", outcomeError)
	s.auditLimit(ss.ID(), s.profileOf(ss.sess), "", "", audit.ReasonSize)
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
