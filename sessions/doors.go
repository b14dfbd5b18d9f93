package sessions

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/sessions/door"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file is the host of the stream doors of package door (/ws, and /sse
// with /message; stdio's own part is in stdio.go): it checks who may open
// a session, admits it into the one registry once its wire is up, finds an
// SSE session for a POST to /message, and ends every stream session when
// the HTTP server shuts down. The doors only move frames.

// newDoors builds the stream doors of s.
func (s *Server) newDoors() *door.Doors {
	return door.New(door.Config{
		Host:            doorHost{s},
		MaxMessageBytes: s.cfg.Server.MaxBodyBytes,
		WriteTimeout:    s.writeTimeout,
		Expired:         grant.ErrTokenExpired,
		Revoked:         errConfigChanged,
		AnswerWait:      answerWait,
		Log:             s.log,
	})
}

// doorHost is the door.Host of a Server.
type doorHost struct{ s *Server }

var _ door.Host = doorHost{}

// Admit runs the checks a connection-oriented front door makes before it
// takes a client: the profile, narrowing and bearer token of r, resolved
// exactly as /mcp resolves them (Host and Origin were checked by
// httpd.Guard, for every path), and a max_sessions slot, taken now (before
// a websocket's upgrade or an event stream's first byte). On failure it has
// answered r and returns false.
func (h doorHost) Admit(w http.ResponseWriter, r *http.Request) (door.Admission, bool) {
	s := h.s
	s.waitStarted(r.Context())
	sel, err := grant.SelectionFromRequest(r)
	var b grant.Binding
	if err == nil {
		b, err = s.Resolver().Resolve(sel)
	}
	if err != nil {
		writeResolveError(w, err)
		return nil, false
	}
	b.Who = callerOf(r, b)
	if err := s.takeSlot(b.Who); err != nil {
		s.refuseSession(w, nil, "", b.Profile, err)
		return nil, false
	}
	s.watchShutdown(r)
	a := &admission{s: s, b: b}
	if !b.Expiry.IsZero() {
		a.exp = b.Expiry.Add(s.Resolver().ClockSkew())
	}
	return a, true
}

// Post finds the SSE session id for a POST to /message and checks r
// against it (postMatchesSession).
func (h doorHost) Post(w http.ResponseWriter, r *http.Request, id string) (door.Stream, bool) {
	ss := h.s.stream(id)
	if ss == nil || ss.kind != doorSSE {
		writeJSONError(w, http.StatusNotFound, nil, mcp.INVALID_REQUEST, "unknown or ended session: open a new stream at /sse")
		return nil, false
	}
	if !h.s.postMatchesSession(w, r, ss) {
		return nil, false
	}
	return ss, true
}

// admission is a stream session doorHost.Admit let in, holding its slot
// until Start admits the session or Cancel gives it back.
type admission struct {
	s   *Server
	b   grant.Binding
	exp time.Time
}

var (
	_ door.Admission = (*admission)(nil)
	_ door.Stream    = (*session)(nil)
)

// Expiry is when the session's token stops being accepted; zero for none.
func (a *admission) Expiry() time.Time { return a.exp }

// Cancel gives back the slot Admit took.
func (a *admission) Cancel() { a.s.giveSlot(a.b.Who) }

// Start makes the stream session, under the grant Admit resolved, and
// admits it into the registry with the slot Admit took.
func (a *admission) Start(ctx context.Context, name string, fw door.FrameWriter) (door.Stream, error) {
	kind, ok := doorNamed(name)
	if !ok {
		a.Cancel()
		return nil, fmt.Errorf("no stream door is named %q", name)
	}
	ss := a.s.newStreamSession(ctx, kind, a.b, fw)
	if err := a.s.admitTaken(ss); err != nil { // gives the slot back
		ss.Close(err)
		return nil, err
	}
	return ss, nil
}

// Send queues frame for the client (door.Stream).
func (sess *session) Send(frame []byte) { sess.send(sess.ctx(), frame) }

// Oversize is the answer to a message of sess over server.max_body_bytes,
// which it audits (door.Stream).
func (sess *session) Oversize(id json.RawMessage) []byte { return sess.srv.oversizeAnswer(sess, id) }

// postMatchesSession checks a POST against the stream it names, as /mcp
// checks a request against its bound session: with auth configured the POST
// must carry the token that opened the stream (401 without a valid one, 403
// with another); a POST that names a profile or narrowing must resolve to
// the stream's own view (else 400). On failure it has answered.
func (s *Server) postMatchesSession(w http.ResponseWriter, r *http.Request, sess *session) bool {
	sel, err := grant.SelectionFromRequest(r)
	if err != nil {
		writeResolveError(w, err)
		return false
	}
	res := s.Resolver()
	explicit := sel.Profile != "" || sel.Narrowing
	if !res.AuthRequired() && !explicit {
		return true
	}
	bound, revoked := s.grantOf(sess)
	if revoked != nil {
		sess.End(revoked)
		writeJSONError(w, http.StatusNotFound, nil, mcp.INVALID_REQUEST, "unknown or ended session: open a new stream at /sse")
		return false
	}
	// The endpoint's URL carries neither the stream's path nor its query:
	// what the POST does not say is the stream's.
	probe := sel.Over(bound.Selection)
	if probe.Profile == "" {
		probe.Profile = bound.Profile
	}
	// Checked by key, building nothing: a narrowed filter may have left the
	// bounded cache since the stream opened.
	chk, err := res.Check(probe)
	if err != nil {
		if owner, ok := grant.ExpiredOwner(err); ok && subtle.ConstantTimeCompare(owner[:], sess.owner[:]) == 1 {
			sess.End(grant.ErrTokenExpired)
		}
		writeResolveError(w, err)
		return false
	}
	key := chk.Key()
	if owner := chk.Owner(); res.AuthRequired() && subtle.ConstantTimeCompare(owner[:], sess.owner[:]) != 1 {
		writeJSONError(w, http.StatusForbidden, nil, mcp.INVALID_REQUEST, "this token did not open the session")
		return false
	}
	if explicit && key != bound.Requested {
		writeJSONError(w, http.StatusBadRequest, nil, mcp.INVALID_REQUEST,
			fmt.Sprintf("session is bound to profile %q; start a new session to use another", bound.Profile))
		return false
	}
	return true
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

// writeResolveError answers a request whose selection did not resolve, with
// the status of its sentinel; a refused token's answer carries its
// WWW-Authenticate challenge (auth.go).
func writeResolveError(w http.ResponseWriter, err error) {
	if c := grant.ChallengeOf(err); c != "" {
		w.Header().Set("WWW-Authenticate", c)
	}
	writeJSONError(w, grant.StatusOf(err), nil, mcp.INVALID_REQUEST, err.Error())
}
