package sessions

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/sessions/door"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file holds the one session model: the session type every door
// shares, and the one registry (Server.sessions) it enters, binds in and
// leaves, whatever its door.

// session is one legacy (initialize-based) session, of any door: the one
// registry list_changed, logs, resource updates, reloads and shutdown go
// through, and the one copy of what a session is, whatever its wire. A
// stream door's session (/ws, /sse, stdio) is made when its client
// connects and bound when it initializes; a /mcp session is made and bound
// by its initialize. What belongs to a stream's wire (its writer, its
// queue of frames, its workers) is in conn.
type session struct {
	id string
	// owner is the sum of the bearer token that opened the session (zero
	// without one): a request carrying another token is answered as if the
	// session did not exist, DELETE included.
	owner [32]byte
	// who is the caller whose shares the session's slot, streams and
	// calls count in (Binding.Who when it connected); it never changes.
	who string
	srv *Server
	// conn is the wire half of a /ws, /sse or stdio session (its frame
	// writer, its ordered queue of frames, its workers; stream.go); nil
	// for a /mcp session, whose ids must not be usable on /mcp. The
	// methods of stream.go and stream_request.go are for sessions with a
	// conn.
	conn *door.Conn

	// binding is the session's grant, decided once when it connected or
	// initialized: re-derived by a reload (reload.go), narrowed by what
	// the session turns on (dynamic.go, search.go). Under Server.mu, as
	// are the fields down to revoked.
	binding grant.Binding
	// bound is true once it initialized (Server.bind): from then on it is
	// told list_changed, logs and resource updates.
	bound bool
	// kind is its door. It never changes; it is here, beside bound, as a
	// string would take the session's struct past its size class.
	kind doorKind
	subs map[string]bool // resource URIs this session subscribed to
	// get is the open GET stream of a /mcp session, where what belongs to
	// no call of it goes; nil when none is open.
	get *standalone
	// listed is the fingerprint of the view the session last had; a catalog
	// change notifies the session only when it differs. listedPrompts and
	// listedResources are the same for its prompts, and its resources and
	// templates (filter.Listing.Fingerprints).
	listed                         string
	listedPrompts, listedResources string
	// revoked is why a reload ended the session (reload.go): from then on
	// it is refused, until it is gone. nil while its grant holds.
	revoked error

	// logLevel is what the session set with logging/setLevel; nil = it
	// asked for no log messages.
	logLevel atomic.Pointer[mcp.LoggingLevel]
	// caps are the capabilities the client declared at initialize; nil
	// before.
	caps atomic.Pointer[mcp.ClientCapabilities]
	// pending are the session's server→client requests waiting for the
	// client, on whichever of its streams they went out.
	pending pendingSet
	// inflight are the session's routed requests queued or in progress,
	// for notifications/cancelled.
	inflight inflight
	// life expires the session when idle; set when it enters the
	// registry, and never for stdio's (whose one client launched viewmux).
	life *sessionLife
	// held is what viewmux holds for the session's client: the bytes of
	// its unread frames and answers, and on /mcp its calls in flight
	// (backlog.go).
	held *backlog
}

// doorKind is the front door a session came through.
type doorKind uint8

const (
	doorMCP doorKind = iota
	doorWS
	doorSSE
	doorStdio
)

// doorNames are the names of the doorKinds: in ids, logs and the status
// page.
var doorNames = [...]string{doorMCP: "mcp", doorWS: "ws", doorSSE: "sse", doorStdio: "stdio"}

func (k doorKind) String() string { return doorNames[k] }

// doorNamed returns the stream door named name, as package door names it.
func doorNamed(name string) (doorKind, bool) {
	for k, n := range doorNames {
		if n == name && doorKind(k) != doorMCP {
			return doorKind(k), true
		}
	}
	return 0, false
}

// newSession makes the session id of door kind, for b, opened by owner.
// It is in no registry yet.
func (s *Server) newSession(id string, kind doorKind, b grant.Binding, owner [32]byte, held *backlog) *session {
	return &session{srv: s, id: id, kind: kind, owner: owner, who: b.Who, binding: b, held: held}
}

// level returns the session's log level, "" for none.
func (sess *session) level() mcp.LoggingLevel {
	if l := sess.logLevel.Load(); l != nil {
		return *l
	}
	return ""
}

// capabilities returns what the client declared at initialize.
func (sess *session) capabilities() mcp.ClientCapabilities {
	if c := sess.caps.Load(); c != nil {
		return *c
	}
	return mcp.ClientCapabilities{}
}

// boundLocked returns the session id once it initialized, or nil; s.mu
// must be held.
func (s *Server) boundLocked(id string) *session {
	if sess := s.sessions[id]; sess != nil && sess.bound {
		return sess
	}
	return nil
}

// profileOf returns the profile sess is bound to.
func (s *Server) profileOf(sess *session) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sess.binding.Profile
}

// bind binds sess, which has just initialized with hs: from now on it is
// told list_changed, logs and resource updates. A /mcp session enters the
// registry here, holding the max_sessions slot its initialize took, and
// expires when idle (limits.go); a stream session is in it since it
// connected, and one that ended since is not bound. When a reload came
// since the session's grant was resolved, the grant is re-derived here, as
// the reload did for every session it saw (reload.go); one the reload ends
// is bound ended, and revoked says why. A /mcp session is then ended here;
// a stream session ends itself (session.register).
func (s *Server) bind(sess *session, hs *handshake) (revoked error) {
	caps := hs.caps // a copy: a pointer into hs would keep all of hs
	sess.caps.Store(&caps)
	s.mu.Lock()
	if sess.conn != nil && s.sessions[sess.id] != sess {
		s.mu.Unlock()
		return nil // it ended before it bound
	}
	b, revoked := sess.binding, sess.revoked
	if res := s.Resolver(); revoked == nil && b.Granter != nil && b.Granter != res {
		if nb, err := s.regrant(res, b); err != nil {
			revoked = fmt.Errorf("%w: %w", errConfigChanged, err)
			sess.revoked = revoked
		} else {
			b = nb
			sess.binding = b
		}
	}
	lp, lr := s.listing(b).Fingerprints()
	sess.listed, sess.listedPrompts, sess.listedResources = s.View(b).Fingerprint(), lp, lr
	sess.bound = true
	s.nbound++
	if sess.conn == nil {
		s.startLife(sess)
		s.sessions[sess.id] = sess
	}
	s.mu.Unlock()
	s.log.Info("session started", "session", sess.id, "profile", b.Profile)
	if revoked != nil && sess.conn == nil {
		s.endSession(sess.id, b.Profile, false, revoked)
	}
	return revoked
}

// unbind ends the /mcp session id (release).
func (s *Server) unbind(id string) {
	s.mu.Lock()
	sess := s.sessions[id]
	s.mu.Unlock()
	if sess != nil {
		s.release(sess)
	}
}

// release forgets sess, which ended, of whatever door: it leaves the
// registry and gives its slot back, its calls are cancelled, its
// server→client requests fail, its GET stream closes, its limiter bucket
// and scope = "session" connections are released, and its resource
// subscriptions given up. A stream session is released by its end.
func (s *Server) release(sess *session) {
	id := sess.id
	s.mu.Lock()
	var subs []string
	if s.sessions[id] == sess {
		delete(s.sessions, id)
		if sess.bound {
			s.nbound--
		}
		if sess.life != nil {
			sess.life.stop()
		}
		s.giveSlot(sess.who)
		if sess.get != nil {
			sess.get.close()
			sess.get = nil
		}
		subs = make([]string, 0, len(sess.subs))
		for uri := range sess.subs {
			subs = append(subs, uri)
		}
	}
	s.mu.Unlock()
	sess.inflight.cancelAll()
	sess.pending.fail() // its server→client requests get no answer now
	s.limits.Forget(id)
	s.agg.EndSession(id) // closes its scope = "session" connections
	for _, uri := range subs {
		if err := s.agg.Unsubscribe(context.Background(), id, uri); err != nil {
			s.log.Debug("resource subscription not released", "session", id, "error", err)
		}
	}
}

// Sessions returns the number of bound legacy sessions, of every door.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nbound
}

// admit adds the stream session ss to the registry and takes its
// max_sessions slot. Every stream session but stdio's ends once it has
// been idle for server.session_idle_timeout (read_timeout before it
// initialized), by the same sessionLife as a /mcp session's. admit fails
// once the server is shutting down, when every slot is taken
// (errTooManySessions), or when ss has already ended (its end ran before
// admit, so nothing would remove it).
func (s *Server) admit(ss *session) error {
	if err := s.takeSlot(ss.who); err != nil {
		return err
	}
	return s.admitTaken(ss)
}

// admitTaken is admit for sess whose slot its door has taken already (the
// websocket door takes it before the upgrade, so that a client never
// sees its connection accepted and then closed for want of one). On
// failure it gives the slot back.
func (s *Server) admitTaken(sess *session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := func(err error) error {
		s.giveSlot(sess.who)
		return err
	}
	if s.closing {
		return fail(errServerShutdown)
	}
	if sess.conn.Ended() {
		return fail(ErrSessionClosed)
	}
	if sess.kind != doorStdio { // the one client that launched viewmux
		sess.life = s.newLife(func(time.Duration) { sess.End(errSessionIdle) })
	}
	s.sessions[sess.id] = sess
	return nil
}

// errSessionIdle ends a stream session that was idle too long.
var errSessionIdle = errors.New("session idle for longer than server.session_idle_timeout")

// stream returns the live stream session with id, or nil.
func (s *Server) stream(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess := s.sessions[id]; sess != nil && sess.conn != nil {
		return sess
	}
	return nil
}

// streams returns the live stream sessions, in a new slice.
func (s *Server) streams() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streamsLocked()
}

// streamsLocked is streams with s.mu held.
func (s *Server) streamsLocked() []*session {
	var out []*session
	for _, sess := range s.sessions {
		if sess.conn != nil {
			out = append(out, sess)
		}
	}
	return out
}

// shutdownStreams refuses new stream sessions and ends every live one.
// Each front door's handler then closes its connection (websocket: 1001
// going away) and returns.
func (s *Server) shutdownStreams() {
	s.mu.Lock()
	s.closing = true
	live := s.streamsLocked()
	s.mu.Unlock()
	for _, ss := range live {
		ss.End(errServerShutdown)
	}
}
