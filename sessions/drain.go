package sessions

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// This file is how viewmux stops without dropping calls: from the moment it
// is told to stop, no new call starts (each is answered at once with
// errShutdown's JSON-RPC error); the calls in flight get until
// server.shutdown_grace to finish with their real results; the ones still
// running then are cancelled upstream and answered with that error; only
// then do connections close.

// errShutdown is the cause a call is cancelled with, or refused for, when
// viewmux shuts down before it could finish it.
var errShutdown = errors.New("viewmux is shutting down")

// shutdownError is the JSON-RPC error a client gets for such a call. It is
// temporary: the same call, retried once viewmux (or another replica) is
// back, may succeed.
func shutdownError() *jsonrpc.Error {
	return &jsonrpc.Error{Code: mcp.INTERNAL_ERROR, Message: "viewmux is shutting down; retry the request"}
}

// answerWait bounds how long shutdown waits, once it has cancelled the
// calls still running at the end of the grace, for their error answers to
// be handed to their connections. Cancelled calls return at once; this is
// a backstop for one that does not.
const answerWait = time.Second

// flights is the routed calls of a Server: the ones running (to cancel at
// the end of the grace) and how many requests are waiting for an answer
// (what the grace waits for; a call held for its client's input waits for
// nobody). Its zero value is ready to use; it is safe for concurrent use.
type flights struct {
	// perCaller is how many calls one caller (call.who) may have running
	// at once, server.max_sessions_per_caller; 0 = no bound.
	perCaller int

	mu       sync.Mutex
	stopping bool            // no new call starts, of any caller
	closed   map[string]bool // callers (call.owner) whose new calls no longer start
	running  map[*call]struct{}
	byWho    map[string]int // running calls by call.who; no zero entries
	awaits   int
	// quiet is closed, and set to nil, when awaits drops to zero; nil
	// until someone waits for that.
	quiet chan struct{}
}

// begin records c as running. It fails, recording nothing, with
// errShutdown when viewmux is stopping or c's caller was closed, and with
// errCallerShare when c's caller has its share of calls running: c must
// not start.
func (f *flights) begin(c *call) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping || f.closed[c.owner] {
		return errShutdown
	}
	if c.who != "" && f.perCaller > 0 {
		if f.byWho[c.who] >= f.perCaller {
			return errCallerShare
		}
		if f.byWho == nil {
			f.byWho = make(map[string]int)
		}
		f.byWho[c.who]++
	}
	if f.running == nil {
		f.running = make(map[*call]struct{})
	}
	f.running[c] = struct{}{}
	return nil
}

// end forgets c, whose route has returned.
func (f *flights) end(c *call) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.running[c]; !ok {
		return
	}
	delete(f.running, c)
	if c.who != "" && f.perCaller > 0 {
		if n := f.byWho[c.who] - 1; n > 0 {
			f.byWho[c.who] = n
		} else {
			delete(f.byWho, c.who)
		}
	}
}

// enter records a request waiting for a call's answer; leave, that it has
// it.
func (f *flights) enter() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.awaits++
}

func (f *flights) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.awaits--
	if f.awaits == 0 && f.quiet != nil {
		close(f.quiet)
		f.quiet = nil
	}
}

// stop makes every call that starts from now on fail with errShutdown. It
// returns how many requests wait for a call's answer.
func (f *flights) stop() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopping = true
	return f.awaits
}

// close makes the new calls of one caller fail with errShutdown; forget
// undoes it once the caller is gone.
func (f *flights) close(owner string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed == nil {
		f.closed = make(map[string]bool)
	}
	f.closed[owner] = true
}

func (f *flights) forget(owner string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.closed, owner)
}

// abort cancels the running calls of owner ("" = of everyone) with
// errShutdown and returns how many it cancelled. Each still answers its
// waiting request, with shutdownError.
func (f *flights) abort(owner string) int {
	f.mu.Lock()
	var cancel []*call
	for c := range f.running {
		if owner == "" || c.owner == owner {
			cancel = append(cancel, c)
		}
	}
	f.mu.Unlock()
	for _, c := range cancel {
		c.abort(errShutdown)
	}
	return len(cancel)
}

// settled waits until no request waits for a call's answer, or ctx is
// done; it reports which.
func (f *flights) settled(ctx context.Context) bool {
	f.mu.Lock()
	if f.awaits == 0 {
		f.mu.Unlock()
		return true
	}
	if f.quiet == nil {
		f.quiet = make(chan struct{})
	}
	quiet := f.quiet
	f.mu.Unlock()
	select {
	case <-quiet:
		return true
	case <-ctx.Done():
		return false
	}
}

// drainCalls stops new calls and gives the calls in flight until ctx is
// done to finish; then it cancels the rest, which are answered with
// shutdownError, and waits (at most answerWait) until every request has its
// answer. The answers of /mcp requests are then being written by their
// handlers; those of stream sessions are queued on the sessions (see
// awaitQueued and closeStreams).
func (s *Server) drainCalls(ctx context.Context) {
	if n := s.flights.stop(); n > 0 {
		s.log.Info("shutting down: calls in flight get server.shutdown_grace to finish", "calls", n, "duration", s.cfg.Server.ShutdownGrace)
	}
	if s.flights.settled(ctx) {
		return
	}
	n := s.flights.abort("")
	s.log.Info("calls still running at the end of server.shutdown_grace are answered with an error", "calls", n, "duration", s.cfg.Server.ShutdownGrace)
	actx, cancel := context.WithTimeout(context.Background(), answerWait)
	defer cancel()
	if !s.flights.settled(actx) {
		s.log.Warn("some cancelled calls did not return; their clients get no answer", "duration", answerWait)
	}
}

// closeStreams ends every stream session, then waits, at most until ctx
// is done, for the sessions to write what they queued: after drainCalls,
// the answers of their calls (see awaitQueued).
func (s *Server) closeStreams(ctx context.Context) {
	live := s.streams()
	s.shutdownStreams()
	for _, ss := range live {
		ss.Wait(ctx)
	}
}
