package door

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// The websocket front door, /ws: subprotocol "mcp", one JSON-RPC message per
// UTF-8 text frame (SEP-1288 draft; what the TypeScript SDK's
// WebSocketClientTransport speaks). The profile, narrowing and token come
// from the upgrade request, once, for the life of the connection.

const (
	wsSubprotocol  = "mcp"
	wsPingInterval = 30 * time.Second
	wsPingTimeout  = 15 * time.Second
)

// ServeWS upgrades a request to a websocket stream session.
func (d *Doors) ServeWS(w http.ResponseWriter, r *http.Request) {
	// The slot is taken before the upgrade: once the client has its 101,
	// a request it sends next must find the slot taken, and the
	// connection must not be closed for want of one.
	adm, ok := d.cfg.Host.Admit(w, r)
	if !ok {
		return
	}
	if !isWebSocketUpgrade(r) {
		adm.Cancel()
		w.Header().Set("Upgrade", "websocket")
		writeJSONError(w, http.StatusUpgradeRequired, mcp.INVALID_REQUEST, "/ws serves websocket connections only (Upgrade: websocket)")
		return
	}
	if !offersSubprotocol(r, wsSubprotocol) {
		adm.Cancel()
		writeJSONError(w, http.StatusBadRequest, mcp.INVALID_REQUEST,
			`websocket clients must offer the "mcp" subprotocol (Sec-WebSocket-Protocol: mcp)`)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{wsSubprotocol},
		// Origin was checked against server.allowed_origins by the route's
		// checkOrigin, the same rule as /mcp; coder/websocket's own check
		// (same host, or OriginPatterns on the host alone) would refuse
		// allowed cross-port origins such as http://localhost:3000.
		InsecureSkipVerify: true,
	})
	if err != nil {
		adm.Cancel()
		d.log.Debug("websocket upgrade failed", "error", err) // Accept has answered
		return
	}
	// The per-message limit is applied by ReadMessage, so an oversized
	// message is answered with a JSON-RPC error and the connection survives;
	// coder/websocket's own limit would close it (1009).
	c.SetReadLimit(-1)

	st, err := adm.Start(r.Context(), "ws", &wsWriter{c: c, timeout: d.cfg.WriteTimeout})
	if err != nil { // the session is closed, its slot given back
		c.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	exp := adm.Expiry()
	if !exp.IsZero() {
		// A websocket cannot bring a fresh token: what the session is
		// sent stops when the one it opened with expires, not at the
		// client's next message.
		stop := time.AfterFunc(time.Until(exp), func() { st.End(d.cfg.Expired) })
		defer stop.Stop()
	}
	var wg sync.WaitGroup
	wg.Go(func() { d.closeWSWhenDone(st, c) })
	wg.Go(func() { keepalive(st, c) })
	d.readWS(r.Context(), st, c, exp)
	st.Close(ErrClientGone)
	wg.Wait()
}

// readWS reads the client's frames into the session until the connection
// or the session ends, or the token it was opened with expires (exp; zero
// for none).
func (d *Doors) readWS(ctx context.Context, st Stream, c *websocket.Conn, exp time.Time) {
	defer func() {
		if v := recover(); v != nil {
			d.log.Error("panic reading a websocket", "session", st.ID(), "panic", v)
			st.End(fmt.Errorf("reader panic: %v", v))
		}
	}()
	for {
		typ, rd, err := c.Reader(ctx)
		if err != nil {
			st.End(wsReadCause(err))
			return
		}
		if typ != websocket.MessageText {
			st.End(ErrUnsupportedFrame)
			return
		}
		data, id, over, err := ReadMessage(rd, d.cfg.MaxMessageBytes)
		if err != nil {
			st.End(wsReadCause(err))
			return
		}
		if over {
			st.Send(st.Oversize(id))
			continue
		}
		if !exp.IsZero() && time.Now().After(exp) {
			// The OAuth token the connection was opened with expired:
			// the client reconnects with a fresh one.
			st.End(d.cfg.Expired)
			return
		}
		if !st.Receive(data) {
			return
		}
	}
}

// wsReadCause classifies a read error: a close from the client is an
// ordinary end.
func wsReadCause(err error) error {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway, websocket.StatusNoStatusRcvd:
		return ErrClientGone
	}
	return fmt.Errorf("reading from the client: %w", err)
}

// closeWSWhenDone closes the connection once the session has ended and its
// queued frames are written, with the close code its cause calls for. It is
// the only place that closes c, so the reader sees the close and stops.
func (d *Doors) closeWSWhenDone(st Stream, c *websocket.Conn) {
	<-st.Done()
	st.Wait(context.Background())
	code, reason := websocket.StatusNormalClosure, ""
	switch cause := st.Cause(); {
	case errors.Is(cause, ErrUnsupportedFrame):
		code, reason = websocket.StatusUnsupportedData, ErrUnsupportedFrame.Error()
	case errors.Is(cause, ErrServerShutdown):
		code, reason = websocket.StatusGoingAway, "server shutting down"
	case d.cfg.Expired != nil && errors.Is(cause, d.cfg.Expired):
		code, reason = websocket.StatusPolicyViolation, d.cfg.Expired.Error()
	case d.cfg.Revoked != nil && errors.Is(cause, d.cfg.Revoked):
		// The grant this connection was opened with no longer holds: a
		// new connection is checked against the new config.
		code, reason = websocket.StatusPolicyViolation, closeReason("session ended: "+cause.Error())
	case errors.Is(cause, ErrClientGone):
	case cause != nil && !errors.Is(cause, context.Canceled):
		code, reason = websocket.StatusInternalError, "session ended"
	}
	if err := c.Close(code, reason); err != nil {
		d.log.Debug("websocket close", "session", st.ID(), "error", err)
	}
}

// maxCloseReason is the longest reason a websocket close frame carries
// (RFC 6455 §5.5: a control frame's payload is at most 125 bytes, two of
// them the code).
const maxCloseReason = 123

// closeReason is text cut to maxCloseReason bytes, on a rune boundary.
func closeReason(text string) string {
	if len(text) <= maxCloseReason {
		return text
	}
	cut := maxCloseReason - len("…")
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}

// keepalive pings the client every wsPingInterval and ends the session when
// a pong does not come within wsPingTimeout.
func keepalive(st Stream, c *websocket.Conn) {
	t := time.NewTicker(wsPingInterval)
	defer t.Stop()
	for {
		select {
		case <-st.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), wsPingTimeout)
		err := c.Ping(ctx)
		cancel()
		if err != nil {
			st.End(fmt.Errorf("websocket keepalive: %w", err))
			return
		}
	}
}

// wsWriter writes one text frame per message, each within timeout.
type wsWriter struct {
	c       *websocket.Conn
	timeout time.Duration
}

func (w *wsWriter) WriteFrame(frame jsonrpc.Frame) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	if frame = frame.Joined(); len(frame[1]) == 0 && len(frame[2]) == 0 {
		return w.c.Write(ctx, websocket.MessageText, frame[0])
	}
	// One message from its pieces, not joined first.
	mw, err := w.c.Writer(ctx, websocket.MessageText)
	if err != nil {
		return err
	}
	if _, err := frame.WriteTo(mw); err != nil {
		mw.Close()
		return err
	}
	return mw.Close()
}

// isWebSocketUpgrade reports whether r asks for a websocket upgrade.
func isWebSocketUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

// offersSubprotocol reports whether r offers the websocket subprotocol p.
func offersSubprotocol(r *http.Request, p string) bool {
	return headerHasToken(r.Header, "Sec-WebSocket-Protocol", p)
}

// headerHasToken reports whether any comma-separated element of header name
// equals token, ignoring case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
