package sessions

import (
	"net/http"
	"sync"
	"time"

	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/door"
	"github.com/viewmux/viewmux/sessions/grant"
)

// standaloneQueue bounds the frames waiting for a GET stream's writer; past
// it a frame is dropped, and logged, rather than anything waiting on a
// client that does not read.
const standaloneQueue = 64

// standalone is the open GET stream of a /mcp session: the one writer of
// what belongs to none of the session's calls (list_changed, resource
// updates, log messages no call caused). A session has at most one; a new
// GET replaces the one before, which ends. It is safe for concurrent use.
type standalone struct {
	frames chan []byte
	held   *backlog // the session's: frames count in it until written
	once   sync.Once
	done   chan struct{}
}

// offer queues frame without waiting; it reports whether it did.
func (g *standalone) offer(frame []byte) bool {
	select {
	case <-g.done:
		return false
	default:
	}
	if !g.held.hold(len(frame)) {
		g.held.written(len(frame))
		return false
	}
	select {
	case g.frames <- frame:
		return true
	default:
		g.held.written(len(frame))
		return false
	}
}

// close ends the stream; its handler returns.
func (g *standalone) close() { g.once.Do(func() { close(g.done) }) }

// serveGET serves the GET stream of the /mcp session id until the client
// goes away, the session ends, or another GET replaces it. The stream
// holds a server.max_sessions slot while it is open (limits.go), counted
// in its session's caller's share too, and each
// write must finish within the write timeout: a client that stops reading
// loses its stream, not its session.
//
// A stream opened with an OAuth access token ends when that token expires
// (ends, zero for none): what the session is told after that needs a
// fresh token, which the client's next GET brings.
func (s *Server) serveGET(w http.ResponseWriter, r *http.Request, id string, sess *session, ends time.Time) {
	if err := s.takeSlot(sess.who); err != nil {
		s.refuseSession(w, nil, "", sess.binding.Profile, err)
		return
	}
	defer s.giveSlot(sess.who)
	rc := http.NewResponseController(w)
	g := &standalone{frames: make(chan []byte, standaloneQueue), held: sess.held, done: make(chan struct{})}
	s.mu.Lock()
	if s.sessions[id] != sess {
		s.mu.Unlock()
		writeJSONError(w, http.StatusNotFound, nil, -32600, "unknown session")
		return
	}
	old := sess.get
	sess.get = g
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	defer func() {
		s.mu.Lock()
		if sess.get == g {
			sess.get = nil
		}
		s.mu.Unlock()
		g.close()
		for { // what is left was never written
			select {
			case f := <-g.frames:
				g.held.written(len(f))
			default:
				return
			}
		}
	}()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	defer rc.SetWriteDeadline(time.Time{})
	var expired <-chan time.Time
	if !ends.IsZero() {
		t := time.NewTimer(time.Until(ends))
		defer t.Stop()
		expired = t.C
	}
	for {
		select {
		case <-expired:
			s.log.Info("GET stream closed", "session", id, "reason", grant.ErrTokenExpired.Error())
			return
		case f := <-g.frames:
			rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
			err := door.WriteEvent(w, jsonrpc.Whole(f))
			if err == nil {
				err = rc.Flush()
			}
			g.held.written(len(f))
			if err != nil {
				s.log.Info("GET stream closed", "session", id, "reason", err.Error())
				return
			}
		case <-g.done:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// closeSessions ends every /mcp session, for shutdown: their GET streams
// close.
func (s *Server) closeSessions() {
	s.mu.Lock()
	var ids []string
	for id, sess := range s.sessions {
		if sess.conn == nil {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.unbind(id)
	}
}
