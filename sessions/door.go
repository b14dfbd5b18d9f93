package sessions

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcpmux/mcpmux/sessions/grant"
)

// This file holds what the connection-oriented HTTP front doors (/ws, /sse
// and /message) check before they take a client, and how a stream door's
// session enters and leaves the one registry (Server.sessions).

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
	ss.mu.Lock()
	ended := ss.ended
	ss.mu.Unlock()
	if ended {
		return fail(ErrSessionClosed)
	}
	if sess.kind != "stdio" { // the one client that launched mcpmux
		sess.life = s.newLife(func(time.Duration) { ss.end(errSessionIdle) })
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
		ss.end(errServerShutdown)
	}
}

// shutdownHooks are the http.Servers whose Shutdown ends every stream
// session (watchShutdown). Its zero value is ready to use; it is safe for
// concurrent use.
type shutdownHooks struct {
	mu     sync.Mutex
	hooked map[*http.Server]bool
}

// watchShutdown makes the Shutdown of the http.Server serving r end every
// stream session, once per http.Server. Shutdown neither waits for hijacked
// (websocket) connections nor ends long-lived SSE responses by itself;
// RegisterOnShutdown is its hook for exactly that.
func (s *Server) watchShutdown(r *http.Request) {
	hs, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok || hs == nil {
		return
	}
	h := &s.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hooked[hs] {
		return
	}
	if h.hooked == nil {
		h.hooked = make(map[*http.Server]bool)
	}
	h.hooked[hs] = true
	hs.RegisterOnShutdown(s.shutdownStreams)
}

// openDoor runs the checks a connection-oriented front door makes before it
// takes a client: the profile, narrowing and bearer token of r, resolved
// exactly as /mcp resolves them (Host and Origin were checked by
// httpd.Guard, for every path). On failure it has answered r and returns
// false.
func (s *Server) openDoor(w http.ResponseWriter, r *http.Request) (grant.Binding, grant.Selection, bool) {
	s.waitStarted(r.Context())
	sel, err := grant.SelectionFromRequest(r)
	var b grant.Binding
	if err == nil {
		b, err = s.Resolver().Resolve(sel)
	}
	if err != nil {
		writeResolveError(w, err)
		return grant.Binding{}, grant.Selection{}, false
	}
	b.Who = callerOf(r, b)
	// Refused before the upgrade or the stream's first byte; the door
	// takes the slot itself (admit, or takeSlot before a
	// websocket's upgrade).
	if err := s.slotsFull(b.Who); err != nil {
		s.refuseSession(w, nil, "", b.Profile, err)
		return grant.Binding{}, grant.Selection{}, false
	}
	s.watchShutdown(r)
	return b, sel, true
}

// writeResolveError answers a request whose selection did not resolve, with
// the status of its sentinel; a refused token's answer carries its
// WWW-Authenticate challenge (auth.go).
func writeResolveError(w http.ResponseWriter, err error) {
	if c := grant.ChallengeOf(err); c != "" {
		w.Header().Set("WWW-Authenticate", c)
	}
	writeJSONError(w, grant.StatusOf(err), nil, mcp.INVALID_REQUEST, err.Error())
}
