package door

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/internal/jsonrpc"
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

// ServeSSE opens a legacy SSE stream session.
func (d *Doors) ServeSSE(w http.ResponseWriter, r *http.Request) {
	adm, ok := d.cfg.Host.Admit(w, r)
	if !ok {
		return
	}
	if _, ok := w.(http.Flusher); !ok {
		adm.Cancel()
		writeJSONError(w, http.StatusInternalServerError, mcp.INTERNAL_ERROR, "streaming is not supported by this connection")
		return
	}
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: d.cfg.WriteTimeout}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	// Findable before the client can know its id: the endpoint event is
	// still the first, as nothing is sent before the client's first POST.
	st, err := adm.Start(r.Context(), "sse", sw)
	if err != nil {
		writeJSONError(w, http.StatusServiceUnavailable, mcp.INTERNAL_ERROR, err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
	if err := sw.event("endpoint", []byte(sseMessagePath+"?sessionId="+st.ID())); err != nil {
		st.Close(fmt.Errorf("writing the endpoint event: %w", err))
		return
	}
	t := time.NewTicker(sseKeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := sw.comment("keepalive"); err != nil {
				st.End(fmt.Errorf("writing a keepalive: %w", err))
			}
			continue
		case <-r.Context().Done():
			st.End(ErrClientGone)
		case <-st.Done():
		}
		break
	}
	// The writer must be done with w before the handler returns.
	st.Close(ErrClientGone)
	if cause := st.Cause(); d.cfg.Revoked != nil && errors.Is(cause, d.cfg.Revoked) {
		// SSE has no close frame: a comment, which clients ignore, says
		// why the stream ends, for whoever reads it.
		sw.comment("session ended: " + strings.ReplaceAll(cause.Error(), "\n", " "))
	}
	sw.rc.SetWriteDeadline(time.Time{}) // the connection may serve more requests
}

// ServeMessage takes one client message for an SSE session and answers
// 202; the answer to the message goes onto the session's stream.
func (d *Doors) ServeMessage(w http.ResponseWriter, r *http.Request) {
	st, ok := d.cfg.Host.Post(w, r, r.URL.Query().Get("sessionId"))
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, d.cfg.MaxMessageBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			st.Oversize(nil) // recorded; the answer is this 413
			writeJSONError(w, http.StatusRequestEntityTooLarge, mcp.INVALID_REQUEST,
				fmt.Sprintf("request body exceeds server.max_body_bytes (%d bytes)", d.cfg.MaxMessageBytes))
			return
		}
		writeJSONError(w, http.StatusBadRequest, mcp.PARSE_ERROR, "reading request body: "+err.Error())
		return
	}
	if !st.Receive(body) {
		writeJSONError(w, http.StatusNotFound, mcp.INVALID_REQUEST, "unknown or ended session: open a new stream at /sse")
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// sseWriter writes events to one SSE response. The session's writer and the
// handler's keepalives share it; each write is bounded by timeout.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// WriteFrame writes a message as one event: on one data line (line breaks
// between its tokens become spaces, jsonrpc.OneLine), from its pieces.
func (sw *sseWriter) WriteFrame(frame jsonrpc.Frame) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	if err := WriteEvent(sw.w, frame); err != nil {
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

// WriteEvent writes frame as one server-sent event, in pieces: a large
// answer is not copied again on its way out. /mcp's event streams write
// their events with it too.
func WriteEvent(w io.Writer, frame jsonrpc.Frame) error {
	frame = frame.OneLine() // a line break would end the data line early
	if _, err := io.WriteString(w, "event: message\ndata: "); err != nil {
		return err
	}
	if _, err := frame.WriteTo(w); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n\n")
	return err
}
