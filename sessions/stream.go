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
	"sync"
	"sync/atomic"
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
// SSE, stdio) share: streamSession, the wire half of one client's session
// (its session is the one type every door shares, session.go), and
// Server.dispatch, the single path every message from those clients takes.
// The transports (package door) only move frames: they read messages and
// hand them to Receive, and give the session a door.FrameWriter for what
// goes back.

// Limits of one stream session.
const (
	// streamWorkers bounds the requests of one session handled at once.
	// Notifications and responses are handled on the reading goroutine, so
	// notifications/cancelled is read while calls run.
	streamWorkers = 16
	// streamQueue bounds the requests waiting for a worker; beyond it a
	// request is answered with errBusyCode at once.
	streamQueue = 64
	// outBuffer is the number of responses and server→client requests
	// queued for the writer before the workers wait for it.
	outBuffer = 256
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
	ErrSessionClosed = errors.New("client session closed")

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

// streamSession is the wire half of a session of a message-stream door
// (/ws, /sse, stdio): the frame writer, the ordered queue of what goes
// out and its one writer goroutine, and the pool of workers its requests
// run on. What the session is, whatever its wire (its grant, log level,
// capabilities, pending server→client requests, requests in flight,
// expiry and backlog), is in sess, the one session type. It is safe for
// concurrent use.
type streamSession struct {
	srv  *Server
	sess *session // the session; its ss is this
	w    door.FrameWriter

	ctx    context.Context // done once the session ends
	cancel context.CancelFunc

	out outQueue // everything the session sends, in order
	// queued counts the frames in out and the one the writer took but has
	// not written; wmu is held while a frame is written. A frame is
	// written at once, without the writer goroutine, only when nothing is
	// queued (sendFrame): whatever a goroutine queued earlier is written
	// before what it sends next.
	queued atomic.Int64
	wmu    sync.Mutex
	queue  chan *streamJob // requests waiting for a worker
	wg     sync.WaitGroup  // workers
	wrote  chan struct{}   // closed when the writer has stopped

	// mu is a leaf lock: nothing else is locked while it is held.
	mu      sync.Mutex
	ended   bool
	cause   error
	workers int // running workers
}

// streamJob is one client request waiting for or running on a worker.
type streamJob struct {
	ctx    context.Context
	cancel context.CancelFunc
	raw    []byte
	msg    *jsonrpc.Message
	done   func() // records its end in the session's life
}

type pendingReply struct {
	result json.RawMessage
	err    error
}

// newStreamSession starts a session of door kind for b, writing through
// w, opened by b.Caller (a static token's sum, or an OAuth subject's). It
// is in the registry once its door admits it (Server.admit). The session
// lives until end is called or parent is done; its writer runs from now
// on, but nothing is sent before the client's first message.
func (s *Server) newStreamSession(parent context.Context, kind string, b grant.Binding, w door.FrameWriter) *streamSession {
	id := replicaPrefix(s.cfg) + kind + "-" + rand.Text()
	// The worker pool bounds its calls.
	sess := s.newSession(id, kind, b, b.Caller, newBacklog(s.cfg.Server.MaxPendingBytes, 0))
	ss := &streamSession{
		srv:   s,
		sess:  sess,
		w:     w,
		out:   newOutQueue(),
		queue: make(chan *streamJob, streamQueue),
		wrote: make(chan struct{}),
	}
	sess.ss = ss
	ss.ctx, ss.cancel = context.WithCancel(parent)
	context.AfterFunc(ss.ctx, func() { ss.End(context.Cause(parent)) })
	go ss.writeLoop()
	s.log.Info("session connected", "session", id, "profile", b.Profile)
	return ss
}

// ID returns the session's ID.
func (ss *streamSession) ID() string { return ss.sess.id }

// Done returns a channel closed when the session has ended.
func (ss *streamSession) Done() <-chan struct{} { return ss.ctx.Done() }

// End stops the session: no new requests, in-flight handlers and pending
// server→client requests are cancelled, and it leaves the registry
// (Server.release). Frames already queued are still written.
// It does not wait; the first cause wins. It is idempotent.
func (ss *streamSession) End(cause error) {
	ss.mu.Lock()
	if ss.ended {
		ss.mu.Unlock()
		return
	}
	ss.ended = true
	ss.cause = cause
	ss.mu.Unlock()
	ss.cancel()
	// Out of the registry, whether it bound or not; its limiter bucket
	// and scope = "session" connections too, as it may have called tools
	// before it initialized.
	ss.srv.release(ss.sess)
	level := slogLevelFor(cause)
	ss.srv.log.Log(context.Background(), level, "session ended", "session", ss.ID(), "profile", ss.srv.profileOf(ss.sess), "reason", causeText(cause))
}

// Wait waits until the session's workers and writer have stopped, or ctx
// is done. Call it after end.
func (ss *streamSession) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		ss.wg.Wait()
		<-ss.wrote
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close ends the session and waits for it.
func (ss *streamSession) Close(cause error) {
	ss.End(cause)
	ss.Wait(context.Background())
}

// Cause returns why the session ended (nil while it runs or when it ended
// normally).
func (ss *streamSession) Cause() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.cause
}

// idle waits until no request is queued or running, or ctx is done. The
// caller must have stopped calling receive.
func (ss *streamSession) idle(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		ss.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// --- receiving ---

// Receive takes one message from the client. Responses and notifications
// are handled on the caller's goroutine (so notifications/cancelled is never
// stuck behind running calls); requests go to the worker pool. It must be
// called from one goroutine at a time, the transport's reader. It reports
// false once the session has ended.
func (ss *streamSession) Receive(raw []byte) bool {
	if ss.ctx.Err() != nil {
		return false
	}
	if l := ss.sess.life; l != nil { // set when it was admitted, before its door read from it
		l.saw()
	}
	m, err := jsonrpc.Parse(raw)
	if err != nil {
		resp, _, _ := ss.srv.respond(grant.Binding{}, nil, nil, err)
		ss.send(ss.ctx, resp)
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
		if resp := ss.srv.handle(ss.ctx, ss, raw, m); resp != nil {
			ss.send(ss.ctx, resp)
		}
	}
	return true
}

// enqueue queues a request for the worker pool, starting a worker if fewer
// than streamWorkers run. A full queue answers the request at once.
func (ss *streamSession) enqueue(raw []byte, m *jsonrpc.Message) {
	// Tracked from now on, so that a notifications/cancelled cancels it even
	// while it is queued.
	ctx, cancel := ss.sess.inflight.track(ss.ctx, m.ID)
	job := &streamJob{ctx: ctx, cancel: cancel, raw: raw, msg: m}
	ss.mu.Lock()
	if ss.ended {
		ss.mu.Unlock()
		cancel()
		return
	}
	job.done = func() {}
	if l := ss.sess.life; l != nil {
		job.done = l.enter() // not idle while it is queued or runs
	}
	select {
	case ss.queue <- job:
	default:
		ss.mu.Unlock()
		cancel()
		job.done()
		ss.srv.metrics.count(m.Method, outcomeError)
		ss.srv.auditLimit(ss.ID(), ss.srv.profileOf(ss.sess), m.Method, m.Name, audit.ReasonBusy)
		ss.send(ss.ctx, errorFrame(m.ID, errBusyCode,
			fmt.Sprintf("too many requests in flight on this session (limit %d)", streamWorkers+streamQueue)))
		return
	}
	if ss.workers < streamWorkers {
		ss.workers++
		ss.wg.Add(1)
		go ss.work()
	}
	ss.mu.Unlock()
}

// work runs queued requests until the queue is empty.
func (ss *streamSession) work() {
	defer ss.wg.Done()
	for {
		var job *streamJob
		select {
		case job = <-ss.queue:
		default:
			ss.mu.Lock()
			if len(ss.queue) == 0 {
				ss.workers--
				ss.mu.Unlock()
				return
			}
			ss.mu.Unlock()
			continue
		}
		ss.runJob(job)
	}
}

// runJob answers one request. A request cancelled by the client (or by the
// end of the session) before it finishes gets no answer, as the protocol
// asks.
func (ss *streamSession) runJob(job *streamJob) {
	defer func() {
		job.cancel() // forgets it too
		job.done()
	}()
	if job.ctx.Err() != nil {
		return
	}
	resp := ss.safeHandle(job)
	if resp == nil || job.ctx.Err() != nil {
		return
	}
	ss.send(ss.ctx, resp)
}

// safeHandle runs the dispatch path for job, turning a panic into an
// internal error answer.
func (ss *streamSession) safeHandle(job *streamJob) (resp []byte) {
	defer func() {
		if v := recover(); v != nil {
			ss.srv.log.Error("panic handling a request", "session", ss.ID(), "method", job.msg.Method, "panic", v, "stack", string(debug.Stack()))
			resp = errorFrame(job.msg.ID, mcp.INTERNAL_ERROR, "internal error")
		}
	}()
	return ss.srv.handle(job.ctx, ss, job.raw, job.msg)
}

// --- sending ---

// send queues a frame for the writer. It gives up when ctx or the session
// ends.
func (ss *streamSession) send(ctx context.Context, frame []byte) error {
	return ss.sendFrame(ctx, jsonrpc.Whole(frame))
}

// sendFrame is send for a frame in pieces (an answer around an upstream's
// result, which is written out without being joined first).
func (ss *streamSession) sendFrame(ctx context.Context, frame jsonrpc.Frame) error {
	n := frame.Len()
	ss.sess.held.hold(n) // until the writer has written it
	if ss.queued.Load() == 0 && ss.wmu.TryLock() {
		// Nothing waits before it: written here, which spares a wake-up
		// of the writer per answer (the stdio door's latency).
		if ss.queued.Load() == 0 && ss.ctx.Err() == nil {
			err := ss.w.WriteFrame(frame)
			ss.wmu.Unlock()
			ss.sess.held.written(n)
			if err != nil {
				ss.End(fmt.Errorf("writing to the client: %w", err))
				return ErrSessionClosed
			}
			return nil
		}
		ss.wmu.Unlock()
	}
	ss.queued.Add(1)
	for !ss.out.tryPut(frame) {
		select {
		case <-ss.out.room:
		case <-ctx.Done():
			ss.queued.Add(-1)
			ss.sess.held.written(n)
			return ctx.Err()
		case <-ss.ctx.Done():
			ss.queued.Add(-1)
			ss.sess.held.written(n)
			return ErrSessionClosed
		}
	}
	return nil
}

// offer queues frame for the writer if there is room now.
func (ss *streamSession) offer(frame jsonrpc.Frame) bool {
	ss.queued.Add(1)
	if ss.out.tryPut(frame) {
		return true
	}
	ss.queued.Add(-1)
	return false
}

// trySend queues a frame for the writer if there is room now; it reports
// whether it did. It is for frames that must not wait: those an upstream's
// reader delivers after their call was answered, and those that belong to
// no call (Server.notify).
func (ss *streamSession) trySend(frame []byte) bool {
	if ss.ctx.Err() != nil {
		return false
	}
	ss.sess.held.hold(len(frame))
	if ss.offer(jsonrpc.Whole(frame)) {
		return true
	}
	ss.sess.held.written(len(frame))
	ss.srv.log.Warn("frame to the client dropped: the session's queue is full", "session", ss.ID())
	return false
}

// writeLoop is the session's only writer, in the order frames were
// queued, so a call's progress precedes its result. When the session ends,
// what is queued is flushed, then it stops.
func (ss *streamSession) writeLoop() {
	defer close(ss.wrote)
	defer func() {
		if v := recover(); v != nil {
			ss.srv.log.Error("panic in session writer", "session", ss.ID(), "panic", v, "stack", string(debug.Stack()))
			ss.End(fmt.Errorf("writer panic: %v", v))
		}
	}()
	for {
		frame, ok := ss.out.take()
		if !ok {
			select {
			case <-ss.out.ready:
			case <-ss.ctx.Done():
				ss.flush()
				return
			}
			continue
		}
		ss.wmu.Lock()
		err := ss.w.WriteFrame(frame)
		ss.wmu.Unlock()
		ss.queued.Add(-1)
		ss.sess.held.written(frame.Len())
		if err != nil {
			ss.End(fmt.Errorf("writing to the client: %w", err))
			return
		}
	}
}

// flush writes whatever is queued when the session ends, without waiting
// for more.
func (ss *streamSession) flush() {
	for {
		frame, ok := ss.out.take()
		if !ok {
			return
		}
		ss.sess.held.written(frame.Len())
		ss.wmu.Lock()
		err := ss.w.WriteFrame(frame)
		ss.wmu.Unlock()
		ss.queued.Add(-1)
		if err != nil {
			return
		}
	}
}

// outQueue is a stream session's queue of frames for its writer: at most
// outBuffer of them, in order. Its room is taken only while frames wait,
// so an idle session holds none of it (a channel of outBuffer frames was
// most of an idle stream session's memory). Safe for concurrent use by
// producers and one writer.
type outQueue struct {
	mu     sync.Mutex
	frames []jsonrpc.Frame
	head   int           // frames[head:] wait
	ready  chan struct{} // capacity 1: a frame was queued since the writer looked
	room   chan struct{} // capacity 1: a frame was taken since a producer found the queue full
}

func newOutQueue() outQueue {
	return outQueue{ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// tryPut queues f unless outBuffer frames wait already.
func (q *outQueue) tryPut(f jsonrpc.Frame) bool {
	q.mu.Lock()
	n := len(q.frames) - q.head
	if n >= outBuffer {
		q.mu.Unlock()
		return false
	}
	if q.head > 0 && len(q.frames) == cap(q.frames) {
		copy(q.frames, q.frames[q.head:]) // reuse the room taken frames left
		clear(q.frames[n:])
		q.frames, q.head = q.frames[:n], 0
	}
	q.frames = append(q.frames, f)
	more := n+1 < outBuffer
	q.mu.Unlock()
	signal(q.ready)
	if more {
		signal(q.room) // another producer waiting for room may go on too
	}
	return true
}

// take returns the oldest waiting frame, if any.
func (q *outQueue) take() (jsonrpc.Frame, bool) {
	q.mu.Lock()
	if q.head == len(q.frames) {
		q.mu.Unlock()
		return jsonrpc.Frame{}, false
	}
	f := q.frames[q.head]
	q.frames[q.head] = jsonrpc.Frame{}
	q.head++
	if q.head == len(q.frames) {
		q.head = 0
		q.frames = q.frames[:0]
		if cap(q.frames) > 16 {
			q.frames = nil // a burst's room goes back
		}
	}
	q.mu.Unlock()
	signal(q.room)
	return f, true
}

// signal sends on a channel of capacity 1 without waiting.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
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
