package sessions

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/audit"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/upstream"
)

// call is one routed request in flight. route runs on a goroutine of its
// own; whoever awaits the call (the HTTP handler, or a stream session's
// worker) is its only writer: it writes the frames the call produces as
// they come, then its answer.
//
// A 2026-07-28 client takes no server→client requests, so when the
// upstream of its call (one on an older protocol) asks for input in the
// middle of it, the call is held: the client is answered input_required
// with a requestState naming the held call, and its retry, carrying the
// answer, resumes it. The held call lives with the upstream's connection,
// in this replica; viewmux's own question (approval) is kept in the state
// store instead, and needs no held call (approvals.go).
type call struct {
	frames *frameQueue
	// inline starts a writer for frames when the call runs inline
	// (runInline).
	inline inlineWriter
	run    func() routedAnswer // a call that runs inline, in await
	// done and asks carry a 2026-07-28 call's answer and its requests for
	// input from its goroutine to await; nil for a call that runs inline.
	done chan routedAnswer
	asks chan *ask
	ctx  context.Context // the call's own; ends when it is answered or cancelled
	// abort cancels the call with a cause (nil: cancelled): errShutdown
	// makes its answer shutdownError (drain.go).
	abort  context.CancelCauseFunc
	heldID string // set while the call is held (heldCalls)
	// release gives back the call's slot in its session's backlog (nil:
	// it took none); answer calls it.
	release func()
	// final is set once the call has its last answer (not an
	// input_required that holds it): frames after it are settled.
	final atomic.Bool
	// loan takes back the buffers of a 2026-07-28 call's result once the
	// request that writes its final answer has written it (nil: none; a
	// call before 2026-07-28 uses its request's, see serveRouted).
	loan *upstream.Loan
	// stream is the call's result when it is written as it is read
	// (aggregator.ResultStream), set by answer; its writer closes it.
	stream *aggregator.ResultStream
	modern bool
	method string
	name   string         // the tool or prompt name, or URI, a retry must repeat
	filter *filter.Filter // the retry must come through the same rules (compared by key: a narrowing may be rebuilt after eviction)
	owner  string         // and from the same caller (session, or token or address)
	// who is the caller whose shares the call counts in while it runs
	// (flights) and while it is held (heldCalls): Binding.Who.
	who     string
	profile string // for the audit of a refusal
}

// ask is an upstream's request for input during a held call.
type ask struct {
	method string
	params any
	reply  chan askReply
}

type askReply struct {
	result json.RawMessage
	err    error
}

// queue hands f to the call's writer without blocking. It reports false
// when the session's backlog had no room for it, which ends the session
// (frameQueue), or when the call's writer is gone.
func (c *call) queue(f []byte) bool {
	if !c.frames.put(f) {
		return false
	}
	c.wakeWriter()
	return true
}

// push is queue for a frame whose sender waits for an answer (a
// server→client request): it fails when the frame could not be queued.
func (c *call) push(ctx context.Context, f []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if !c.queue(f) {
		return errSlowClient
	}
	return nil
}

// settle hands the frames a finished call still has, and those its
// upstream sends later, to late, which reports whether it took each one;
// nil lets them go. A call that is held for its client's input is not
// finished: its frames wait for the retry's await.
func (c *call) settle(late func([]byte) bool) {
	if c.final.Load() {
		c.frames.handoff(late)
	}
}

// bound returns ctx ended also when the call ends: an upstream's
// server→client request may carry its transport's ctx, which over stdio
// lives as long as the connection.
func (c *call) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// inlineWriter is the writer of a call that runs inline: started by the
// call's first frame, stopped when the call returns. It lives in the call,
// so that a call without frames before its answer costs nothing more.
type inlineWriter struct {
	mu                sync.Mutex
	write             func([]byte) // set by runInline; nil: the call does not run inline
	started, finished bool
	stop              chan struct{}
	wg                sync.WaitGroup
}

// wakeWriter starts the writer of a call that runs inline, once, unless
// the call has returned already.
func (c *call) wakeWriter() {
	iw := &c.inline
	iw.mu.Lock()
	defer iw.mu.Unlock()
	if iw.write == nil || iw.started || iw.finished {
		return
	}
	iw.started = true
	iw.stop = make(chan struct{})
	write, stop := iw.write, iw.stop
	iw.wg.Go(func() {
		for {
			select {
			case <-c.frames.signal():
				c.frames.drain(write)
			case <-stop:
				c.frames.drain(write)
				return
			}
		}
	})
}

// askClient is the caller's server→client request for a 2026-07-28 call:
// it waits until the client's retry brings the answer.
func (c *call) askClient(ctx context.Context, method string, params any) (json.RawMessage, error) {
	// ctx is the upstream transport's: over stdio it lives as long as the
	// connection, so the call's own ctx bounds the wait as well.
	a := &ask{method: method, params: params, reply: make(chan askReply, 1)}
	select {
	case c.asks <- a:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, c.ctx.Err()
	}
	select {
	case r := <-a.reply:
		return r.result, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, c.ctx.Err()
	}
}

// newCall prepares a call of m; start runs it. Its frames count in held,
// and overflow is called when they take held past its limit (nil held: not
// counted).
func newCall(m *jsonrpc.Message, b grant.Binding, modern bool, owner string, held *backlog, overflow func()) *call {
	name := m.Name
	if m.Method == string(mcp.MethodResourcesRead) {
		name = m.URI
	}
	c := &call{frames: newFrameQueue(held, overflow),
		modern: modern, method: m.Method, name: name, filter: b.Filter, owner: owner, who: b.Who, profile: b.Profile}
	if modern {
		c.done, c.asks = make(chan routedAnswer, 1), make(chan *ask)
	}
	return c
}

// start prepares route for the call. A 2026-07-28 call runs on a
// goroutine of its own and lives on past the request that started it (it
// may be held); await ties it to each request that waits for it. Any other
// call runs inline in await, on the request's own goroutine, and costs no
// goroutine unless it has frames to write before its answer.
func (s *Server) start(parent context.Context, c *call, id string, b grant.Binding, e *filter.Entry, m *jsonrpc.Message, cl *caller) {
	ctx := parent
	if c.modern {
		// It may outlive the request: not the request's loan, but one of
		// its own when the request's door gives loans back.
		if upstream.LoanFrom(parent) != nil {
			c.loan = new(upstream.Loan)
		}
		ctx = upstream.WithLoan(context.WithoutCancel(parent), c.loan)
		cl.ask = c.askClient
	}
	ctx, c.abort = context.WithCancelCause(ctx)
	c.ctx = ctx
	run := func() (a routedAnswer) {
		// Once viewmux is stopping, a call that has not started never
		// does: it is answered at once (drain.go).
		switch err := s.flights.begin(c); {
		case errors.Is(err, errCallerShare):
			s.auditLimit(id, b.Profile, m.Method, m.Name, audit.ReasonBusy)
			return routedAnswer{err: &jsonrpc.Error{Code: errBusyCode, Message: fmt.Sprintf(
				"caller busy: server.max_sessions_per_caller (%d) calls of this caller are in flight; wait for an answer before sending more", s.flights.perCaller)}}
		case err != nil:
			return routedAnswer{err: err}
		}
		defer s.flights.end(c)
		defer func() {
			if v := recover(); v != nil {
				s.log.Error("panic routing a request", "session", id, "method", m.Method, "panic", v, "stack", string(debug.Stack()))
				a = routedAnswer{err: &jsonrpc.Error{Code: mcp.INTERNAL_ERROR, Message: "internal error"}}
			}
		}()
		res, err := s.route(ctx, id, b, e, m, cl)
		return routedAnswer{res, err, cl.stream}
	}
	if !c.modern {
		c.run = run
		return
	}
	go func() {
		a := run()
		if s.held.forget(c) { // a call that ended while held frees its slot now
			// and nobody will await it: what it queued since is let go,
			// and stops counting in its session's backlog.
			c.frames.handoff(nil)
		}
		c.done <- a
	}()
}

// runInline runs a call on the caller's goroutine. A writer goroutine is
// started only when the call has a frame to write before its answer; it
// writes until the call returns, then drains and stops, and only then is
// the answer written, so frames come first.
func (c *call) runInline(write func([]byte)) routedAnswer {
	iw := &c.inline
	iw.mu.Lock()
	iw.write = write
	iw.mu.Unlock()
	a := c.run()
	iw.mu.Lock()
	iw.finished = true
	started := iw.started
	iw.mu.Unlock()
	if started {
		close(iw.stop)
		iw.wg.Wait()
	}
	return a
}

// await writes the call's frames with write until it answers, or, for a
// 2026-07-28 call, asks for input; it returns the answer to m (nil when none
// is due: the client cancelled) and whether it is an error whose code sets
// the HTTP status. When ctx ends first, a 2026-07-28 call is cancelled.
// Shutdown waits for awaits in progress (drain.go).
//
// A frame the upstream sends after the answer has nowhere to go on /mcp
// (the request's stream ends with its answer): it is let go.
func (s *Server) await(ctx context.Context, c *call, m *jsonrpc.Message, write func([]byte)) (answer jsonrpc.Frame, errCode int) {
	defer s.flights.leave() // entered by callFor
	answer, errCode = s.awaitCall(ctx, c, m, write)
	c.settle(nil)
	return answer, errCode
}

// awaitQueued is await for a door whose answers go through write like its
// frames (the stream doors): the answer is handed to write before shutdown
// counts it given, so that the session, ended after that, still sends it.
// Frames the upstream sends after the answer (progress written just after
// a result) go to late, after the answer, in the order they came.
func (s *Server) awaitQueued(ctx context.Context, c *call, m *jsonrpc.Message, write func([]byte), final func(jsonrpc.Frame), late func([]byte) bool) {
	defer s.flights.leave() // entered by callFor
	if answer, _ := s.awaitCall(ctx, c, m, write); !answer.Empty() {
		final(answer)
	}
	c.settle(late)
}

// awaitCall is await without the shutdown bookkeeping.
func (s *Server) awaitCall(ctx context.Context, c *call, m *jsonrpc.Message, write func([]byte)) (answer jsonrpc.Frame, errCode int) {
	if c.modern {
		stop := context.AfterFunc(ctx, func() { c.abort(nil) })
		defer stop()
	}
	drain := func() { c.frames.drain(write) }
	if c.run != nil {
		return s.answer(ctx, c, m, c.runInline(write))
	}
	for {
		select {
		case <-c.frames.signal():
			drain()
		case a := <-c.asks:
			drain()
			state, err := s.held.hold(c, a)
			if err != nil {
				if errors.Is(err, errCallerShare) {
					s.auditLimit(c.owner, c.profile, m.Method, m.Name, audit.ReasonBusy)
				}
				a.reply <- askReply{err: err}
				continue // the upstream gets the error; the call goes on
			}
			b, err := s.inputRequired(a.method, a.params, state)
			if err != nil {
				a.reply <- askReply{err: err}
				continue
			}
			s.metrics.count(m.Method, outcomeOK)
			s.spanOutcome(ctx, outcomeInput, nil)
			return jsonrpc.ResponseFrame(m.ID, b), 0
		case a := <-c.done:
			drain()
			return s.answer(ctx, c, m, a)
		}
	}
}

// answer encodes what the call returned as the answer to m. A call that
// shutdown refused or cancelled is answered shutdownError.
func (s *Server) answer(ctx context.Context, c *call, m *jsonrpc.Message, a routedAnswer) (jsonrpc.Frame, int) {
	c.abort(nil)        // a cause given earlier stays
	c.final.Store(true) // its door settles its later frames (settle)
	if c.release != nil {
		if a.err == nil && a.stream != nil {
			// A result written as it is read holds its slot until it is
			// written: the calls in flight per session bound the streams
			// a client that stops reading can hold open.
			release := c.release
			a.stream.OnEnd(func(bool, error) { release() })
		} else {
			c.release()
		}
	}
	s.spanOutcome(ctx, outcomeFor(a.err), a.err)
	if a.err == nil {
		s.metrics.count(m.Method, outcomeOK)
		if a.stream != nil {
			c.stream = a.stream
			if ctx.Err() != nil {
				return jsonrpc.Frame{}, 0 // nobody to write it to: closed by the writer
			}
			return jsonrpc.ResponseHead(m.ID), 0
		}
		return jsonrpc.ResponseFrame(m.ID, a.result), 0
	}
	s.metrics.count(m.Method, outcomeError)
	var e *jsonrpc.Error
	if errors.Is(a.err, errShutdown) || errors.Is(context.Cause(c.ctx), errShutdown) {
		e = shutdownError()
	} else {
		e = s.errorFor(m, a.err, c.modern)
	}
	if e == nil || ctx.Err() != nil {
		return jsonrpc.Frame{}, 0
	}
	return jsonrpc.Whole(jsonrpc.ErrorResponse(m.ID, e)), e.Code
}

// inputKey names the one input request of viewmux's input_required
// results.
const inputKey = "viewmux"

// inputRequired is the input_required result that asks a 2026-07-28
// client for the one input request method with params, to be answered by
// a retry carrying reqState.
func (s *Server) inputRequired(method string, params any, reqState string) (json.RawMessage, error) {
	return json.Marshal(map[string]any{
		"resultType":    mcp.ResultTypeInputRequired,
		"inputRequests": map[string]any{inputKey: map[string]any{"method": method, "params": params}},
		"requestState":  reqState,
		"_meta":         map[string]any{mcp.MetaKeyServerInfo: mcp.Implementation{Name: "viewmux", Version: s.version}},
	})
}

// resume finds the held call a 2026-07-28 retry names by its requestState,
// hands it the client's answer, and returns it for await. ok is false when
// m's requestState is not one of viewmux's (an upstream's own, which passes
// through).
func (s *Server) resume(m *jsonrpc.Message, b grant.Binding, owner string) (c *call, ok bool, refusal *jsonrpc.Error) {
	var p struct {
		RequestState   string                     `json:"requestState"`
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
	}
	if json.Unmarshal(m.Params, &p) != nil || !strings.HasPrefix(p.RequestState, requestStatePrefix) {
		return nil, false, nil
	}
	h, err := s.held.take(p.RequestState)
	if err != nil {
		return nil, true, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: err.Error()}
	}
	name := m.Name
	if m.Method == string(mcp.MethodResourcesRead) {
		name = m.URI
	}
	if h.call.method != m.Method || h.call.name != name || h.call.filter.Key() != b.Filter.Key() || h.call.owner != owner {
		// The state was spent on the wrong request: the call it named has
		// nobody left to answer, so it ends here rather than at its timeout.
		h.ask.reply <- askReply{err: errors.New("the client retried a different request")}
		h.call.abort(nil)
		return nil, true, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "requestState belongs to another request: retry the same request, with the same profile and credentials"}
	}
	answer, found := p.InputResponses[inputKey]
	if !found {
		h.ask.reply <- askReply{err: errors.New("the client sent no answer")}
		return h.call, true, nil
	}
	h.ask.reply <- askReply{result: answer}
	return h.call, true, nil
}

// requestStatePrefix marks requestState values viewmux minted.
const requestStatePrefix = "viewmux1."

// heldCalls are the 2026-07-28 calls waiting for their client's retry. Its
// zero value is not usable; see newHeldCalls. It is safe for concurrent
// use.
type heldCalls struct {
	key     []byte // signs requestState
	replica string
	wait    time.Duration
	max     int
	callers shares // each caller's share of max (call.who)

	mu    sync.Mutex
	calls map[string]*heldCall
}

type heldCall struct {
	call  *call
	ask   *ask
	timer *time.Timer
}

// Bounds of held calls: how long one waits for its retry, and how many
// may wait at once (past it, the upstream's request is refused). Each
// holds a goroutine and an upstream request open, and a client decides how
// many it starts, so the bound is low. One caller may hold at most the
// smaller of server.max_sessions_per_caller and heldShare of them, so that
// it cannot take every one.
const (
	heldWait  = 5 * time.Minute
	heldMax   = 1024
	heldShare = heldMax / 4
)

// newHeldCalls returns the held calls of a replica, each caller holding
// at most perCaller of them (0 = only the pool's bound).
func newHeldCalls(replica string, perCaller int) *heldCalls {
	key := make([]byte, 32)
	rand.Read(key)
	h := &heldCalls{key: key, replica: replica, wait: heldWait, max: heldMax, calls: make(map[string]*heldCall)}
	h.callers.max = perCaller
	return h
}

// hold records c, waiting on a, and returns the requestState naming it:
// opaque, signed, and naming this replica.
func (h *heldCalls) hold(c *call, a *ask) (string, error) {
	id := rand.Text()
	body := h.replica + "." + id
	mac := hmac.New(sha256.New, h.key)
	mac.Write([]byte(body))
	state := requestStatePrefix + base64.RawURLEncoding.EncodeToString([]byte(body)) + "." +
		base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) >= h.max {
		return "", fmt.Errorf("too many calls (%d) are waiting for a client's input", h.max)
	}
	if !h.callers.take(c.who) {
		return "", fmt.Errorf("%w: server.max_sessions_per_caller: this caller has %d calls waiting for its input, its share", errCallerShare, h.callers.max)
	}
	hc := &heldCall{call: c, ask: a}
	c.heldID = id
	hc.timer = time.AfterFunc(h.wait, func() {
		h.mu.Lock()
		_, still := h.calls[id]
		if still {
			delete(h.calls, id)
			h.callers.give(c.who)
		}
		h.mu.Unlock()
		if still {
			a.reply <- askReply{err: fmt.Errorf("the client did not retry within %s", h.wait)}
			c.abort(nil)
		}
	})
	h.calls[id] = hc
	return state, nil
}

// take removes and returns the held call state names.
func (h *heldCalls) take(state string) (*heldCall, error) {
	rest := strings.TrimPrefix(state, requestStatePrefix)
	enc, sig, ok := strings.Cut(rest, ".")
	body, err1 := base64.RawURLEncoding.DecodeString(enc)
	got, err2 := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err1 != nil || err2 != nil {
		return nil, errors.New("requestState is malformed: call the tool again without it")
	}
	replica, id, _ := strings.Cut(string(body), ".") // neither holds a dot
	mac := hmac.New(sha256.New, h.key)
	mac.Write(body)
	if replica != h.replica {
		return nil, fmt.Errorf("requestState belongs to viewmux replica %q, not this one (%q): send the retry there, or call the tool again", jsonrpc.Printable(replica), h.replica)
	}
	if !hmac.Equal(got, mac.Sum(nil)) {
		return nil, errors.New("requestState was not minted by this viewmux (or it restarted): call the tool again without it")
	}
	h.mu.Lock()
	hc, found := h.calls[id]
	delete(h.calls, id)
	if found {
		hc.call.heldID = ""
		h.callers.give(hc.call.who)
	}
	h.mu.Unlock()
	if !found {
		return nil, errors.New("requestState names a call that has ended or expired: call the tool again without it")
	}
	hc.timer.Stop()
	return hc, nil
}

// forget frees c's slot if c is held (it ended without being retried),
// and reports whether it was: no retry can take it from now on.
func (h *heldCalls) forget(c *call) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.heldID == "" {
		return false
	}
	if hc := h.calls[c.heldID]; hc != nil && hc.call == c {
		hc.timer.Stop()
		delete(h.calls, c.heldID)
		h.callers.give(c.who)
	}
	c.heldID = ""
	return true
}
