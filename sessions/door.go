package sessions

import (
	"net/http"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/sessions/grant"
)

// This file holds what the connection-oriented HTTP front doors (/ws, /sse
// and /message) check before they take a client, and the hook that ends
// their sessions when the HTTP server shuts down. How a stream door's
// session enters and leaves the one registry is in session.go.

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
