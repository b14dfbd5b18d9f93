package sessions

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/viewmux/viewmux/internal/audit"
)

// This file holds the bounds that keep one client from growing viewmux: the
// max_sessions count every door shares, the expiry of idle and
// never-initialized /mcp sessions, and the read deadline of request bodies.

// sessionSlots counts the live sessions and streams of every door against
// server.max_sessions, and each caller's against its share,
// server.max_sessions_per_caller: /mcp sessions, GET /mcp streams,
// 2026-07-28 listen streams, and /ws, /sse and stdio sessions. Its zero
// value has no limit; it is safe for concurrent use.
type sessionSlots struct {
	max     int64 // 0 = no limit
	n       atomic.Int64
	callers shares // per caller (callerOf)
}

// takeSlot claims a slot for who (callerOf; "" = nobody's share); it fails
// when all are taken (tooManySessions) or who holds its share (overShare).
func (s *Server) takeSlot(who string) error {
	sl := &s.slots
	if sl.max > 0 && sl.n.Load() >= sl.max {
		return s.tooManySessions() // named first when both are reached
	}
	if !sl.callers.take(who) {
		return s.overShare()
	}
	for {
		n := sl.n.Load()
		if sl.max > 0 && n >= sl.max {
			sl.callers.give(who)
			return s.tooManySessions()
		}
		if sl.n.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// giveSlot returns a slot takeSlot claimed for who.
func (s *Server) giveSlot(who string) {
	s.slots.n.Add(-1)
	s.slots.callers.give(who)
}

// live returns the number of slots taken.
func (sl *sessionSlots) live() int { return int(sl.n.Load()) }

// errTooManySessions is why a session or stream was refused: every
// server.max_sessions slot is taken.
var errTooManySessions = errors.New("too many sessions")

// tooManySessions is that refusal, naming the limit.
func (s *Server) tooManySessions() error {
	return fmt.Errorf("%w: server.max_sessions (%d) sessions and streams are open; close one or retry later", errTooManySessions, s.cfg.Server.MaxSessions)
}

// refuseSession answers a request that would open a session or stream over
// server.max_sessions or its caller's share: 503 with a JSON-RPC error
// naming the limit (why, from takeSlot), audited as busy.
func (s *Server) refuseSession(w http.ResponseWriter, id json.RawMessage, method, profile string, why error) {
	s.metrics.count(method, outcomeError)
	s.auditLimit("", profile, method, "", audit.ReasonBusy)
	w.Header().Set("Retry-After", "1")
	writeJSONError(w, http.StatusServiceUnavailable, id, errBusyCode, why.Error())
}

// --- /mcp sessions ---

// sessionLife is what expires an idle session, of any door but stdio's
// (whose one client launched viewmux): one timer, which fires at the
// earliest moment the session could be idle for too long and then checks.
// A session is idle while none of its requests or streams is in flight;
// until it has initialized, its TTL is read_timeout rather than
// server.session_idle_timeout.
type sessionLife struct {
	seen  atomic.Int64 // unix nanoseconds of its last message, or of a request's start or end
	ready atomic.Bool  // it initialized (on /mcp: it sent something after its initialize)
	busy  atomic.Int32 // its requests in flight, a GET stream included
	// expire ends the session; it is given how long the session was idle.
	expire func(idle time.Duration)

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// initTTL is how long a session may stay without a message before it
// initialized (or, on /mcp, after its initialize): read_timeout.
func (s *Server) initTTL() time.Duration {
	if d := s.cfg.Server.ReadTimeout; d > 0 {
		return d
	}
	return 30 * time.Second
}

// ttlOf is how long l may stay idle.
func (s *Server) ttlOf(l *sessionLife) time.Duration {
	if !l.ready.Load() {
		return s.initTTL()
	}
	return s.cfg.Server.SessionIdleTimeout
}

// newLife starts the expiry of a session, which expire ends.
func (s *Server) newLife(expire func(idle time.Duration)) *sessionLife {
	l := &sessionLife{expire: expire}
	l.seen.Store(time.Now().UnixNano())
	l.mu.Lock()
	l.timer = time.AfterFunc(s.initTTL(), func() { s.checkIdle(l) })
	l.mu.Unlock()
	return l
}

// stop ends the expiry of a session that ended.
func (l *sessionLife) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
	}
}

// saw records a message from the session's client.
func (l *sessionLife) saw() { l.seen.Store(time.Now().UnixNano()) }

// enter records a request of the session that is now in flight; the
// returned func records its end.
func (l *sessionLife) enter() func() {
	l.saw()
	l.busy.Add(1)
	return func() {
		l.saw()
		l.busy.Add(-1)
	}
}

// startLife starts the expiry of the /mcp session sess, which ends as a
// DELETE would end it; s.mu must be held.
func (s *Server) startLife(sess *session) {
	id := sess.id
	sess.life = s.newLife(func(idle time.Duration) {
		s.log.Info("session expired", "session", id, "idle", idle.Round(time.Second))
		s.expire(id)
	})
}

// touch records a request of the /mcp session sess (any message after
// initialize makes it initialized); the returned func records its end.
func (s *Server) touch(sess *session) func() {
	l := sess.life // set before sess entered the registry, and never again
	if l == nil {
		return func() {}
	}
	l.ready.Store(true)
	return l.enter()
}

// checkIdle expires l's session when it has been idle for its TTL with
// nothing in flight; otherwise it sets the timer for the next check.
func (s *Server) checkIdle(l *sessionLife) {
	ttl := s.ttlOf(l)
	if ttl <= 0 {
		return // no session_idle_timeout: it lives until closed
	}
	idle := time.Since(time.Unix(0, l.seen.Load()))
	busy := l.busy.Load() > 0
	if !busy && idle >= ttl {
		l.expire(idle)
		return
	}
	next := ttl - idle
	if busy {
		next = ttl
	}
	l.mu.Lock()
	if !l.stopped {
		l.timer.Reset(max(next, time.Second))
	}
	l.mu.Unlock()
}

// expire ends the /mcp session id, as a DELETE from its client would.
func (s *Server) expire(id string) { s.unbind(id) }
