package sessions

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcpmux/mcpmux/internal/audit"
	"github.com/mcpmux/mcpmux/internal/jsonrpc"
	"github.com/mcpmux/mcpmux/sessions/grant"
)

// The legacy HTTP+SSE front door (protocol 2024-11-05), for old clients:
// GET /sse opens the event stream and names, in an "endpoint" event, the
// URL the client POSTs its messages to; every answer goes back on the stream
// as a "message" event. It runs on a stream session, so the gate, the
// tools/list fast path and the binding are those of every other door.

const (
	sseKeepaliveInterval = 15 * time.Second
	sseMessagePath       = "/message"
)

// serveSSE opens a legacy SSE stream session.
func (s *Server) serveSSE(w http.ResponseWriter, r *http.Request) {
	b, _, ok := s.openDoor(w, r)
	if !ok {
		return
	}
	if _, ok := w.(http.Flusher); !ok {
		writeJSONError(w, http.StatusInternalServerError, nil, mcp.INTERNAL_ERROR, "streaming is not supported by this connection")
		return
	}
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.writeTimeout}
	ss := s.newStreamSession(r.Context(), "sse", b, sw)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	// Findable before the client can know its id: the endpoint event is
	// still the first, as nothing is sent before the client's first POST.
	if err := s.admit(ss); err != nil {
		ss.close(err)
		writeJSONError(w, http.StatusServiceUnavailable, nil, mcp.INTERNAL_ERROR, err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
	if err := sw.event("endpoint", []byte(sseMessagePath+"?sessionId="+ss.id())); err != nil {
		ss.close(fmt.Errorf("writing the endpoint event: %w", err))
		return
	}
	t := time.NewTicker(sseKeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := sw.comment("keepalive"); err != nil {
				ss.end(fmt.Errorf("writing a keepalive: %w", err))
			}
			continue
		case <-r.Context().Done():
			ss.end(errClientGone)
		case <-ss.done():
		}
		break
	}
	// The writer must be done with w before the handler returns.
	ss.close(errClientGone)
	if cause := ss.endCause(); errors.Is(cause, errConfigChanged) {
		// SSE has no close frame: a comment, which clients ignore, says
		// why the stream ends, for whoever reads it.
		sw.comment("session ended: " + strings.ReplaceAll(cause.Error(), "\n", " "))
	}
	sw.rc.SetWriteDeadline(time.Time{}) // the connection may serve more requests
}

// serveMessage takes one client message for an SSE session and answers
// 202; the answer to the message goes onto the session's stream.
func (s *Server) serveMessage(w http.ResponseWriter, r *http.Request) {
	ss := s.stream(r.URL.Query().Get("sessionId"))
	if ss == nil || ss.sess.kind != "sse" {
		writeJSONError(w, http.StatusNotFound, nil, mcp.INVALID_REQUEST, "unknown or ended session: open a new stream at /sse")
		return
	}
	if !s.postMatchesSession(w, r, ss) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.Server.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.auditLimit(ss.id(), s.profileOf(ss.sess), "", "", audit.ReasonSize)
			writeJSONError(w, http.StatusRequestEntityTooLarge, nil, mcp.INVALID_REQUEST,
				fmt.Sprintf("request body exceeds server.max_body_bytes (%d bytes)", s.cfg.Server.MaxBodyBytes))
			return
		}
		writeJSONError(w, http.StatusBadRequest, nil, mcp.PARSE_ERROR, "reading request body: "+err.Error())
		return
	}
	if !ss.receive(body) {
		writeJSONError(w, http.StatusNotFound, nil, mcp.INVALID_REQUEST, "unknown or ended session: open a new stream at /sse")
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// postMatchesSession checks a POST against the stream it names, as /mcp
// checks a request against its bound session: with auth configured the POST
// must carry the token that opened the stream (401 without a valid one, 403
// with another); a POST that names a profile or narrowing must resolve to
// the stream's own view (else 400). On failure it has answered.
func (s *Server) postMatchesSession(w http.ResponseWriter, r *http.Request, ss *streamSession) bool {
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
	bound, revoked := s.grantOf(ss.sess)
	if revoked != nil {
		ss.end(revoked)
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
	// bounded cache since the stream opened (SPEC §10).
	chk, err := res.Check(probe)
	if err != nil {
		if owner, ok := grant.ExpiredOwner(err); ok && subtle.ConstantTimeCompare(owner[:], ss.sess.owner[:]) == 1 {
			ss.end(grant.ErrTokenExpired)
		}
		writeResolveError(w, err)
		return false
	}
	key := chk.Key()
	if owner := chk.Owner(); res.AuthRequired() && subtle.ConstantTimeCompare(owner[:], ss.sess.owner[:]) != 1 {
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

// sseWriter writes events to one SSE response. The session's writer and the
// handler's keepalives share it; each write is bounded by timeout.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// writeFrame writes a message as one event: on one data line (line breaks
// between its tokens become spaces, jsonrpc.OneLine), from its pieces.
func (sw *sseWriter) writeFrame(frame jsonrpc.Frame) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	if err := writeEvent(sw.w, frame); err != nil {
		return err
	}
	return sw.rc.Flush()
}

// event writes one event; data may span lines.
func (sw *sseWriter) event(name string, data []byte) error {
	var b bytes.Buffer
	b.Grow(len(data) + len(name) + 16)
	b.WriteString("event: ")
	b.WriteString(name)
	b.WriteByte('\n')
	for _, line := range bytes.Split(bytes.TrimRight(data, "\r\n"), []byte("\n")) {
		b.WriteString("data: ")
		b.Write(bytes.TrimSuffix(line, []byte("\r")))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return sw.write(b.Bytes())
}

// comment writes an SSE comment, which clients ignore.
func (sw *sseWriter) comment(text string) error { return sw.write([]byte(": " + text + "\n\n")) }

func (sw *sseWriter) write(p []byte) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	// Not every ResponseWriter supports deadlines (httptest's recorder does
	// not); without one the write is unbounded, as for any handler.
	sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	if _, err := sw.w.Write(p); err != nil {
		return err
	}
	return sw.rc.Flush()
}
