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
// and /message) check before they take a client, and the set of live stream
// sessions they share.

// streamSet is the live stream sessions of one Server: a POST to /message
// finds its SSE session here, and the HTTP server's shutdown ends them all.
// Each holds a server.max_sessions slot, and each but stdio's ends once it
// has been idle for server.session_idle_timeout (read_timeout before it
// initialized), by the same sessionLife as a /mcp session's. Its zero
// value is ready to use; it is safe for concurrent use. Lock order:
// streamSet.mu before streamSession.mu.
type streamSet struct {
	mu      sync.Mutex
	byID    map[string]*streamSession
	closing bool
	hooked  map[*http.Server]bool
}

// add records ss and takes its max_sessions slot. It fails once the server
// is shutting down, when every slot is taken (errTooManySessions), or when
// ss has already ended (its end ran before add, so nothing would remove
// it).
func (set *streamSet) add(ss *streamSession) error {
	if err := ss.srv.takeSlot(ss.binding.Who); err != nil {
		return err
	}
	return set.addTaken(ss)
}

// addTaken is add for ss whose slot its door has taken already (the
// websocket door takes it before the upgrade, so that a client never
// sees its connection accepted and then closed for want of one). On
// failure it gives the slot back.
func (set *streamSet) addTaken(ss *streamSession) error {
	set.mu.Lock()
	defer set.mu.Unlock()
	fail := func(err error) error {
		ss.srv.giveSlot(ss.binding.Who)
		return err
	}
	if set.closing {
		return fail(errServerShutdown)
	}
	ss.mu.Lock()
	ended := ss.ended
	ss.mu.Unlock()
	if ended {
		return fail(ErrSessionClosed)
	}
	if set.byID == nil {
		set.byID = make(map[string]*streamSession)
	}
	set.byID[ss.id] = ss
	if ss.kind != "stdio" { // the one client that launched mcpmux
		ss.life.Store(ss.srv.newLife(func(time.Duration) { ss.end(errSessionIdle) }))
	}
	return nil
}

// remove forgets ss and gives its slot back (end calls it).
func (set *streamSet) remove(ss *streamSession) {
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.byID[ss.id] == ss {
		delete(set.byID, ss.id)
		if l := ss.life.Load(); l != nil {
			l.stop()
		}
		ss.srv.giveSlot(ss.binding.Who)
	}
}

// errSessionIdle ends a stream session that was idle too long.
var errSessionIdle = errors.New("session idle for longer than server.session_idle_timeout")

// get returns the live session with id, or nil.
func (set *streamSet) get(id string) *streamSession {
	set.mu.Lock()
	defer set.mu.Unlock()
	return set.byID[id]
}

// list returns the live stream sessions, in a new slice.
func (set *streamSet) list() []*streamSession {
	set.mu.Lock()
	defer set.mu.Unlock()
	out := make([]*streamSession, 0, len(set.byID))
	for _, ss := range set.byID {
		out = append(out, ss)
	}
	return out
}

// len returns the number of live stream sessions.
func (set *streamSet) len() int {
	set.mu.Lock()
	defer set.mu.Unlock()
	return len(set.byID)
}

// shutdown refuses new sessions and ends every live one. Each front door's
// handler then closes its connection (websocket: 1001 going away) and
// returns.
func (set *streamSet) shutdown() {
	set.mu.Lock()
	set.closing = true
	live := make([]*streamSession, 0, len(set.byID))
	for _, ss := range set.byID {
		live = append(live, ss)
	}
	set.mu.Unlock()
	for _, ss := range live {
		ss.end(errServerShutdown)
	}
}

// watchShutdown makes the Shutdown of the http.Server serving r end every
// stream session, once per http.Server. Shutdown neither waits for hijacked
// (websocket) connections nor ends long-lived SSE responses by itself;
// RegisterOnShutdown is its hook for exactly that.
func (set *streamSet) watchShutdown(r *http.Request) {
	hs, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok || hs == nil {
		return
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.hooked[hs] {
		return
	}
	if set.hooked == nil {
		set.hooked = make(map[*http.Server]bool)
	}
	set.hooked[hs] = true
	hs.RegisterOnShutdown(set.shutdown)
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
	// takes the slot itself (streamSet.add, or takeSlot before a
	// websocket's upgrade).
	if err := s.slotsFull(b.Who); err != nil {
		s.refuseSession(w, nil, "", b.Profile, err)
		return grant.Binding{}, grant.Selection{}, false
	}
	s.streams.watchShutdown(r)
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
