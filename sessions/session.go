package sessions

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/sessions/grant"
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
// queue of frames, its workers) is in ss.
type session struct {
	id string
	// kind is its door: "mcp", "ws", "sse" or "stdio".
	kind string
	// owner is the sum of the bearer token that opened the session (zero
	// without one): a request carrying another token is answered as if the
	// session did not exist (SPEC §6).
	owner [32]byte
	// who is the caller whose shares the session's slot, streams and
	// calls count in (Binding.Who when it connected); it never changes.
	who string
	// ss is the wire half of a /ws, /sse or stdio session; nil for a /mcp
	// session. Its ids must not be usable on /mcp.
	ss *streamSession

	// binding is the session's grant, decided once when it connected or
	// initialized: re-derived by a reload (reload.go), narrowed by what
	// the session turns on (dynamic.go, search.go). Under Server.mu, as
	// are the fields down to revoked.
	binding grant.Binding
	// bound is true once it initialized (Server.bind): from then on it is
	// told list_changed, logs and resource updates.
	bound bool
	subs  map[string]bool // resource URIs this session subscribed to
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
	// registry, and never for stdio's (whose one client launched mcpmux).
	life *sessionLife
	// held is what mcpmux holds for the session's client: the bytes of
	// its unread frames and answers, and on /mcp its calls in flight
	// (backlog.go).
	held *backlog
}

// newSession makes the session id of door kind, for b, opened by owner.
// It is in no registry yet.
func (s *Server) newSession(id, kind string, b grant.Binding, owner [32]byte, held *backlog) *session {
	return &session{id: id, kind: kind, owner: owner, who: b.Who, binding: b, held: held}
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
// a stream session ends itself (streamSession.register).
func (s *Server) bind(sess *session, hs *handshake) (revoked error) {
	caps := hs.caps // a copy: a pointer into hs would keep all of hs
	sess.caps.Store(&caps)
	s.mu.Lock()
	if sess.ss != nil && s.sessions[sess.id] != sess {
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
	if sess.ss == nil {
		s.startLife(sess)
		s.sessions[sess.id] = sess
	}
	s.mu.Unlock()
	s.log.Info("session started", "session", sess.id, "profile", b.Profile)
	if revoked != nil && sess.ss == nil {
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
func (s *Server) admit(ss *streamSession) error {
	if err := s.takeSlot(ss.sess.who); err != nil {
		return err
	}
	return s.admitTaken(ss)
}

// admitTaken is admit for ss whose slot its door has taken already (the
// websocket door takes it before the upgrade, so that a client never
// sees its connection accepted and then closed for want of one). On
// failure it gives the slot back.
func (s *Server) admitTaken(ss *streamSession) error {
	sess := ss.sess
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := func(err error) error {
		s.giveSlot(sess.who)
		return err
	}
	if s.closing {
		return fail(errServerShutdown)
	}
	if ss.conn.Ended() {
		return fail(ErrSessionClosed)
	}
	if sess.kind != "stdio" { // the one client that launched mcpmux
		sess.life = s.newLife(func(time.Duration) { ss.End(errSessionIdle) })
	}
	s.sessions[sess.id] = sess
	return nil
}

// errSessionIdle ends a stream session that was idle too long.
var errSessionIdle = errors.New("session idle for longer than server.session_idle_timeout")

// stream returns the live stream session with id, or nil.
func (s *Server) stream(id string) *streamSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess := s.sessions[id]; sess != nil {
		return sess.ss
	}
	return nil
}

// streams returns the live stream sessions, in a new slice.
func (s *Server) streams() []*streamSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streamsLocked()
}

// streamsLocked is streams with s.mu held.
func (s *Server) streamsLocked() []*streamSession {
	var out []*streamSession
	for _, sess := range s.sessions {
		if sess.ss != nil {
			out = append(out, sess.ss)
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
