package sessions

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpmux/mcpmux/internal/audit"
)

// This file holds the bounds that keep one client from growing mcpmux
// (SPEC §10): the max_sessions count every door shares, the expiry of idle
// and never-initialized /mcp sessions, the session ids mcp-go checks, and
// the read deadline of request bodies.

// sessionSlots counts the live sessions and streams of every door against
// server.max_sessions: /mcp sessions, GET /mcp streams, 2026-07-28 listen
// streams, and /ws, /sse and stdio sessions. Its zero value has no limit;
// it is safe for concurrent use.
type sessionSlots struct {
	max int64 // 0 = no limit
	n   atomic.Int64
}

// take claims a slot; it reports false when all are taken.
func (sl *sessionSlots) take() bool {
	for {
		n := sl.n.Load()
		if sl.max > 0 && n >= sl.max {
			return false
		}
		if sl.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// give returns a slot take claimed.
func (sl *sessionSlots) give() { sl.n.Add(-1) }

// full reports whether take would fail now.
func (sl *sessionSlots) full() bool { return sl.max > 0 && sl.n.Load() >= sl.max }

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
// server.max_sessions: 503 with a JSON-RPC error naming the limit, audited
// as busy.
func (s *Server) refuseSession(w http.ResponseWriter, id json.RawMessage, method, profile string) {
	s.metrics.count(method, outcomeError)
	s.auditLimit("", profile, method, "", audit.ReasonBusy)
	w.Header().Set("Retry-After", "1")
	writeJSONError(w, http.StatusServiceUnavailable, id, errBusyCode, s.tooManySessions().Error())
}

// --- /mcp sessions ---

// slotTicket travels in the context of a /mcp request that may make mcp-go
// open a session (initialize, GET): it holds the request's max_sessions
// slot and the session id mcp-go minted for it, if any. onRegister claims
// it for a session opened by initialize; otherwise the request gives it
// back when it ends (releaseTicket).
type slotTicket struct {
	keep    bool   // an initialize: the session it opens keeps the slot
	id      string // minted by sessionIDs for this request
	claimed bool   // the session was registered and holds the slot
}

type ticketKey struct{}

func withTicket(ctx context.Context, t *slotTicket) context.Context {
	return context.WithValue(ctx, ticketKey{}, t)
}

func ticketFrom(ctx context.Context) *slotTicket {
	t, _ := ctx.Value(ticketKey{}).(*slotTicket)
	return t
}

// releaseTicket ends the request t was taken for: unless a session claimed
// them, the slot is given back and the id it minted forgotten.
func (s *Server) releaseTicket(t *slotTicket) {
	if t.claimed {
		return
	}
	if t.id != "" {
		s.ids.forget(t.id)
	}
	s.slots.give()
}

// sessionLife is what expires an idle /mcp session opened by initialize:
// one timer, which fires at the earliest moment the session could be idle
// for too long and then checks.
type sessionLife struct {
	seen  atomic.Int64 // unix nanoseconds of its last request's start or end
	ready atomic.Bool  // it sent something after its initialize
	busy  atomic.Int32 // its requests in flight, a GET stream included
	timer *time.Timer  // under Server.mu
}

// initTTL is how long a session may stay without a message after its
// initialize (no notifications/initialized, no request): read_timeout.
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

// startLife starts the expiry of the session id; s.mu must be held.
func (s *Server) startLife(id string, sess *session) {
	l := &sessionLife{}
	l.seen.Store(time.Now().UnixNano())
	sess.life = l
	l.timer = time.AfterFunc(s.initTTL(), func() { s.checkIdle(id, l) })
}

// endLife stops the expiry of the session id, which ended, forgets its id
// and gives its slot back; s.mu must be held.
func (s *Server) endLife(id string, sess *session) {
	if sess.life == nil {
		return
	}
	sess.life.timer.Stop()
	sess.life = nil
	s.ids.forget(id)
	s.slots.give()
}

// touch records a request of sess (any message after initialize makes it
// initialized); the returned func records its end.
func (s *Server) touch(sess *session) func() {
	s.mu.Lock()
	l := sess.life
	s.mu.Unlock()
	if l == nil {
		return func() {}
	}
	l.seen.Store(time.Now().UnixNano())
	l.ready.Store(true)
	l.busy.Add(1)
	return func() {
		l.seen.Store(time.Now().UnixNano())
		l.busy.Add(-1)
	}
}

// checkIdle expires the session id when it has been idle for its TTL with
// nothing in flight; otherwise it sets the timer for the next check.
func (s *Server) checkIdle(id string, l *sessionLife) {
	ttl := s.ttlOf(l)
	if ttl <= 0 {
		return // no session_idle_timeout: it lives until closed
	}
	idle := time.Since(time.Unix(0, l.seen.Load()))
	busy := l.busy.Load() > 0
	if !busy && idle >= ttl {
		s.log.Info("session expired", "session", id, "idle", idle.Round(time.Second), "initialized", l.ready.Load())
		s.expire(id)
		return
	}
	next := ttl - idle
	if busy {
		next = ttl
	}
	s.mu.Lock()
	if sess := s.bound[id]; sess != nil && sess.life == l {
		l.timer.Reset(max(next, time.Second))
	}
	s.mu.Unlock()
}

// expire closes the /mcp session id as a DELETE from its client would:
// mcp-go drops its state and unregisters it, which frees mcpmux's.
func (s *Server) expire(id string) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodDelete, "/mcp", nil)
	if err != nil {
		return
	}
	req.Header.Set(server.HeaderKeySessionID, id)
	s.http.ServeHTTP(discardWriter{h: make(http.Header)}, req)
}

// discardWriter is the ResponseWriter of the DELETE expire sends itself.
type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d discardWriter) WriteHeader(int)             {}

// sessionIDs mints and checks the ids of /mcp sessions for mcp-go. It
// knows an id from the initialize that minted it until the session ends;
// an id it does not know is answered 404 by mcp-go, as a terminated one
// would be. Unlike mcp-go's InsecureStatefulSessionIdManager, it keeps no
// record of ended sessions, so opening and closing sessions forever costs
// nothing. It is safe for concurrent use.
type sessionIDs struct {
	prefix string // replicaPrefix: starts every id (SPEC §12)
	mu     sync.Mutex
	live   map[string]struct{}
}

var _ server.SessionIdManagerResolver = (*sessionIDs)(nil)

// ResolveSessionIdManager returns the manager for one request: ids minted
// for it are recorded in its ticket, so that the request can forget them
// when no session took them.
func (ids *sessionIDs) ResolveSessionIdManager(r *http.Request) server.SessionIdManager {
	var t *slotTicket
	if r != nil {
		t = ticketFrom(r.Context())
	}
	return requestIDs{ids: ids, t: t}
}

func (ids *sessionIDs) forget(id string) {
	ids.mu.Lock()
	delete(ids.live, id)
	ids.mu.Unlock()
}

func (ids *sessionIDs) known(id string) bool {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	_, ok := ids.live[id]
	return ok
}

// requestIDs is sessionIDs seen from one request.
type requestIDs struct {
	ids *sessionIDs
	t   *slotTicket // nil outside a request that may open a session
}

// sessionIDPrefix starts every /mcp session id, as in mcp-go.
const sessionIDPrefix = "mcp-session-"

func (m requestIDs) Generate() string {
	id := m.ids.prefix + sessionIDPrefix + rand.Text()
	m.ids.mu.Lock()
	if m.ids.live == nil {
		m.ids.live = make(map[string]struct{})
	}
	m.ids.live[id] = struct{}{}
	m.ids.mu.Unlock()
	if m.t != nil {
		m.t.id = id
	}
	return id
}

func (m requestIDs) Validate(id string) (bool, error) {
	if !m.ids.known(id) {
		return false, fmt.Errorf("unknown session %q", id)
	}
	return false, nil
}

func (m requestIDs) Terminate(id string) (bool, error) {
	m.ids.forget(id)
	return false, nil
}

// --- request bodies ---

// withReadTimeout bounds the time a request's body may take to arrive to d
// from the start of the request (server.read_timeout, SPEC §10), so that a
// client trickling a body cannot hold a connection forever. It is a
// per-request read deadline, lifted once the body has been read to its
// end, rather than http.Server.ReadTimeout: that one also ends the
// connection's background read, which cancels long-lived responses (GET
// /mcp, /sse, listen streams) d after they start. A body that is still
// incomplete at the deadline fails to read, and the connection closes.
func withReadTimeout(d time.Duration, next http.Handler) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the connection's read deadline when the body has been
// read to its end; a body that failed keeps it, so the connection closes.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// maxHeaderBytes bounds a request's header (http.Server.MaxHeaderBytes): a
// client may not make mcpmux hold more for one request's narrowing, token
// and profile.
const maxHeaderBytes = 64 << 10
