package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// wsSubprotocol is the websocket subprotocol MCP is spoken under: the
// TypeScript SDK's WebSocketClientTransport asks for it and the SEP-1288
// draft keeps it (PROTOCOL §4).
const wsSubprotocol = "mcp"

// wsCloseGrace bounds a close handshake: after it the TCP connection is
// closed under the websocket library, whose own waits are 5s each.
const wsCloseGrace = time.Second

// errBinaryFrame is the cause of a connection the server sent a binary frame
// on: MCP over websocket is UTF-8 text frames only.
var errBinaryFrame = errors.New("server sent a binary frame; MCP over websocket allows only text frames")

// wsOptions configure a wsTransport.
type wsOptions struct {
	Header http.Header // sent with the handshake; nil = none
	// ReadLimit is the largest message accepted from the server, in bytes;
	// a larger one closes the connection with status 1009. It must be
	// positive (the library's default of 32 KiB is never used).
	ReadLimit int64
	// PingInterval is how often a ping frame checks that the server is
	// still there; <= 0 disables keepalive.
	PingInterval time.Duration
	// PingTimeout is how long a pong may take before the connection is
	// considered dead and closed.
	PingTimeout time.Duration
	Logger      *slog.Logger // nil discards
	// Observe, when non-nil, is shown every message received, before it
	// is decoded.
	Observe func([]byte)
}

// wsTransport is an mcp-go client transport over one websocket connection
// (PROTOCOL §4): subprotocol "mcp", one JSON-RPC message per UTF-8 text frame,
// no newline framing, no batches.
//
// One reader goroutine receives every frame and routes it: responses to the
// SendRequest waiting under the same id, server requests to the request
// handler (each on its own goroutine), notifications to the notification
// handler (inline, so they keep their order). Every read, write and ping runs
// under the connection's lifetime context, never a caller's: cancelling a
// context passed to the websocket library closes the whole connection.
//
// It implements transport.BidirectionalInterface and
// SetConnectionLostHandler, and deliberately not transport.HTTPConnection,
// so that mcp-go sends notifications/cancelled when a call's ctx ends.
// Close waits for every goroutine the transport started. All methods are
// safe for concurrent use.
type wsTransport struct {
	url  string
	opts wsOptions
	log  *slog.Logger

	life context.Context // ends when the connection does (or Close is called)
	stop context.CancelFunc
	done chan struct{} // closed once the connection is gone; cause is then set
	wg   sync.WaitGroup

	mu             sync.Mutex // guards the fields below
	conn           *websocket.Conn
	raw            []net.Conn // TCP connections dialed for the handshake
	pending        map[string]chan *transport.JSONRPCResponse
	onNotification func(mcp.JSONRPCNotification)
	onRequest      transport.RequestHandler
	onLost         func(error)
	cause          error // why the connection ended; nil while it lives or after Close
	started        bool
	finished       bool // done is closed
	closing        bool // Close was called: a loss is no longer reported

	closeOnce sync.Once
}

// newWSTransport returns a transport for url; nothing is dialed until Start.
func newWSTransport(url string, opts wsOptions) *wsTransport {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	t := &wsTransport{
		url:     url,
		opts:    opts,
		log:     opts.Logger,
		done:    make(chan struct{}),
		pending: make(map[string]chan *transport.JSONRPCResponse),
	}
	t.life, t.stop = context.WithCancel(context.Background())
	return t
}

// Start dials the server, bounded by ctx (which bounds only the handshake,
// never the connection), and requires it to select the "mcp" subprotocol.
// It then starts the reader and, if configured, the keepalive.
func (t *wsTransport) Start(ctx context.Context) error {
	t.mu.Lock()
	switch {
	case t.closing:
		t.mu.Unlock()
		return transport.ErrTransportClosed
	case t.started:
		t.mu.Unlock()
		return errors.New("websocket transport already started")
	}
	t.started = true
	t.mu.Unlock()

	conn, _, err := websocket.Dial(ctx, t.url, &websocket.DialOptions{
		HTTPClient:   t.httpClient(),
		HTTPHeader:   t.opts.Header,
		Subprotocols: []string{wsSubprotocol},
	})
	if err != nil {
		t.closeRaw()
		return fmt.Errorf("websocket handshake: %w", err)
	}
	if got := conn.Subprotocol(); got != wsSubprotocol {
		t.closeConn(conn, websocket.StatusProtocolError, "the mcp subprotocol is required")
		if got == "" {
			return fmt.Errorf("websocket server selected no subprotocol; MCP needs %q", wsSubprotocol)
		}
		return fmt.Errorf("websocket server selected subprotocol %q; MCP needs %q", got, wsSubprotocol)
	}
	conn.SetReadLimit(t.opts.ReadLimit)

	t.mu.Lock()
	if t.closing { // Close ran during the handshake
		t.mu.Unlock()
		t.closeConn(conn, websocket.StatusGoingAway, "")
		return transport.ErrTransportClosed
	}
	t.conn = conn
	keepalive := t.opts.PingInterval > 0
	// Counted under mu, before Close can wait: see the closing check above.
	t.wg.Add(1)
	if keepalive {
		t.wg.Add(1)
	}
	t.mu.Unlock()
	go t.readLoop()
	if keepalive {
		go func() {
			defer t.wg.Done()
			t.pingLoop()
		}()
	}
	return nil
}

// httpClient returns the handshake's HTTP client: a transport of its own
// whose dialer remembers the TCP connection, so that a close can be forced.
func (t *wsTransport) httpClient() *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	dial := base.DialContext
	base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			t.mu.Lock()
			t.raw = append(t.raw, c)
			t.mu.Unlock()
		}
		return c, err
	}
	return &http.Client{Transport: base}
}

// closeRaw closes the TCP connections under the websocket, unblocking any
// read or write of the library at once.
func (t *wsTransport) closeRaw() {
	t.mu.Lock()
	raw := slices.Clone(t.raw)
	t.mu.Unlock()
	for _, c := range raw {
		c.Close() // an error only says it was closed already
	}
}

// closeConn performs the close handshake with code, giving up after
// wsCloseGrace by closing the TCP connection.
func (t *wsTransport) closeConn(conn *websocket.Conn, code websocket.StatusCode, reason string) {
	timer := time.AfterFunc(wsCloseGrace, t.closeRaw)
	defer timer.Stop()
	if err := conn.Close(code, reason); err != nil {
		t.log.Debug("websocket close handshake", "err", err)
	}
}

// SendRequest writes req and waits for the response with the same id, until
// ctx ends or the connection is lost (then the error wraps
// transport.ErrTransportClosed and names the cause).
func (t *wsTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding %s request: %w", req.Method, err)
	}
	key := req.ID.String()
	ch := make(chan *transport.JSONRPCResponse, 1)
	t.mu.Lock()
	switch {
	case t.conn == nil && !t.finished:
		t.mu.Unlock()
		return nil, errors.New("websocket transport not started")
	case t.finished:
		t.mu.Unlock()
		return nil, t.closedErr()
	case t.pending[key] != nil:
		t.mu.Unlock()
		return nil, fmt.Errorf("request id %s is already in flight", key)
	}
	t.pending[key] = ch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.pending, key)
		t.mu.Unlock()
	}()

	if err := t.write(b); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.done:
		select {
		case resp := <-ch: // answered just before the connection ended
			return resp, nil
		default:
		}
		return nil, t.closedErr()
	}
}

// SendNotification writes n. ctx is checked first but never bounds the
// write itself (PROTOCOL §4); a write stuck on a peer that stopped reading
// ends when the keepalive gives up on it.
func (t *wsTransport) SendNotification(ctx context.Context, n mcp.JSONRPCNotification) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("encoding %s notification: %w", n.Method, err)
	}
	return t.write(b)
}

// write sends one message as one text frame under the connection's
// lifetime. Any failure means the connection is gone.
func (t *wsTransport) write(b []byte) error {
	t.mu.Lock()
	conn, finished := t.conn, t.finished
	t.mu.Unlock()
	switch {
	case finished:
		return t.closedErr()
	case conn == nil:
		return errors.New("websocket transport not started")
	}
	if err := conn.Write(t.life, websocket.MessageText, b); err != nil {
		select {
		case <-t.done:
			return t.closedErr()
		default:
		}
		return fmt.Errorf("%w: websocket write: %v", transport.ErrTransportClosed, err)
	}
	return nil
}

// closedErr is the error of an operation on a connection that is gone. The
// cause is formatted with %v, not wrapped: it may be a context error, which
// must not make the loss look like a cancellation.
func (t *wsTransport) closedErr() error {
	t.mu.Lock()
	cause := t.cause
	t.mu.Unlock()
	if cause == nil {
		return transport.ErrTransportClosed
	}
	return fmt.Errorf("%w: %v", transport.ErrTransportClosed, cause)
}

// SetNotificationHandler sets the handler of server notifications. It is
// called on the reader goroutine, so it must not block; nil drops them.
func (t *wsTransport) SetNotificationHandler(h func(mcp.JSONRPCNotification)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onNotification = h
}

// SetRequestHandler sets the handler of server requests (sampling,
// elicitation, roots/list, ping). Each runs on its own goroutine with a ctx
// that ends with the connection; nil answers them with method not found.
func (t *wsTransport) SetRequestHandler(h transport.RequestHandler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onRequest = h
}

// SetConnectionLostHandler sets the function called, once and from the
// reader goroutine, when the connection ends other than through Close.
// mcp-go's Client.OnConnectionLost finds it by type assertion.
func (t *wsTransport) SetConnectionLostHandler(h func(error)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onLost = h
}

// GetSessionId returns "": a websocket connection is its own session.
func (t *wsTransport) GetSessionId() string { return "" }

// Close closes the connection with status 1000 (forcing it after
// wsCloseGrace), fails pending requests, and waits for every goroutine the
// transport started. It is idempotent, works whether or not Start was
// called or succeeded, and returns nil: a failed close handshake still
// closes the connection.
func (t *wsTransport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closing = true
		conn := t.conn
		t.mu.Unlock()
		if conn != nil {
			t.closeConn(conn, websocket.StatusNormalClosure, "")
		}
		t.stop()
		t.closeRaw()
		t.wg.Wait()
		t.finish(nil) // when the reader never ran
	})
	return nil
}

// finish records that the connection is gone (a cause recorded earlier
// wins), ends its lifetime, and returns whether this call did it and the
// cause.
func (t *wsTransport) finish(cause error) (first bool, final error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return false, t.cause
	}
	t.finished = true
	if !t.closing && t.cause == nil {
		t.cause = cause
	}
	t.stop()
	close(t.done)
	return true, t.cause
}

// readLoop is the only reader of the connection. When it returns, the
// connection is gone: pending requests fail and the loss is reported.
func (t *wsTransport) readLoop() {
	defer t.wg.Done()
	var cause error
	defer func() {
		if r := recover(); r != nil {
			t.log.Error("panic in websocket reader", "panic", r, "stack", string(debug.Stack()))
			cause = fmt.Errorf("panic in websocket reader: %v", r)
			t.closeRaw()
		}
		t.mu.Lock()
		closing, lost := t.closing, t.onLost
		t.mu.Unlock()
		if first, cause := t.finish(cause); first && !closing && lost != nil {
			lost(cause)
		}
	}()
	for {
		typ, data, err := t.conn.Read(t.life)
		if err != nil {
			cause = t.readErr(err)
			return
		}
		if typ != websocket.MessageText {
			cause = errBinaryFrame
			t.log.Error("closing the websocket connection", "err", cause)
			t.closeConn(t.conn, websocket.StatusUnsupportedData, "binary frames are not supported")
			return
		}
		t.dispatch(data)
	}
}

// readErr turns an error of the reader into the connection's cause.
func (t *wsTransport) readErr(err error) error {
	var ce websocket.CloseError
	switch {
	case errors.Is(err, websocket.ErrMessageTooBig):
		err = tooLarge(t.opts.ReadLimit)
		t.log.Error("message from upstream too large; closing the connection", "err", err)
		// The library has sent close 1009; do not wait for the rest.
		t.closeRaw()
		return err
	case errors.As(err, &ce):
		return fmt.Errorf("server closed the websocket (status %d %q)", int(ce.Code), ce.Reason)
	}
	return fmt.Errorf("websocket read: %w", err)
}

// wsHead is what routing needs of a message. ID stays raw so that a server
// request's id is echoed back byte for byte (mcp.RequestId goes through
// float64, PROTOCOL §7.8).
type wsHead struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

func (h wsHead) hasID() bool { return len(h.ID) > 0 && string(h.ID) != "null" }

// dispatch routes one message from the server.
func (t *wsTransport) dispatch(data []byte) {
	var head wsHead
	if err := json.Unmarshal(data, &head); err != nil {
		// Batches (arrays) land here too: they were removed in 2025-06-18.
		t.log.Warn("dropping a message from upstream that is not a JSON-RPC object", "err", err)
		return
	}
	switch {
	case head.Method != "" && head.hasID():
		var req transport.JSONRPCRequest
		if err := json.Unmarshal(data, &req); err != nil {
			t.log.Warn("dropping a malformed request from upstream", "method", head.Method, "err", err)
			return
		}
		t.handleRequest(head.ID, req)
	case head.Method != "":
		var n mcp.JSONRPCNotification
		if err := json.Unmarshal(data, &n); err != nil {
			t.log.Warn("dropping a malformed notification from upstream", "method", head.Method, "err", err)
			return
		}
		t.mu.Lock()
		h := t.onNotification
		t.mu.Unlock()
		if h != nil {
			h(n)
		}
	case head.hasID():
		if t.opts.Observe != nil {
			t.opts.Observe(data)
		}
		var resp transport.JSONRPCResponse
		if err := json.Unmarshal(data, &resp); err != nil {
			t.log.Warn("dropping a malformed response from upstream", "err", err)
			return
		}
		t.mu.Lock()
		ch := t.pending[resp.ID.String()]
		delete(t.pending, resp.ID.String())
		t.mu.Unlock()
		if ch == nil {
			t.log.Debug("dropping a response nobody waits for", "id", string(head.ID))
			return
		}
		ch <- &resp // buffered, and the id was removed: never blocks
	default:
		t.log.Warn("dropping a message from upstream with neither method nor id")
	}
}

// handleRequest answers a server request on its own goroutine, so that a
// handler waiting on the downstream client never stalls the reader.
func (t *wsTransport) handleRequest(rawID json.RawMessage, req transport.JSONRPCRequest) {
	t.mu.Lock()
	h := t.onRequest
	t.mu.Unlock()
	if h == nil {
		t.respond(rawID, transport.NewJSONRPCErrorResponse(req.ID, mcp.METHOD_NOT_FOUND, "no request handler configured", nil))
		return
	}
	t.wg.Go(func() { // the reader holds a count, so this never races wg.Wait
		var resp *transport.JSONRPCResponse
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.log.Error("panic in upstream request handler", "method", req.Method, "panic", r, "stack", string(debug.Stack()))
					resp = transport.NewJSONRPCErrorResponse(req.ID, mcp.INTERNAL_ERROR, "internal error", nil)
				}
			}()
			var err error
			resp, err = h(t.life, req)
			if err != nil {
				resp = transport.NewJSONRPCErrorResponse(req.ID, mcp.INTERNAL_ERROR, err.Error(), nil)
			}
		}()
		if resp != nil {
			t.respond(rawID, resp)
		}
	})
}

// respond writes resp with the request's id exactly as the server sent it.
func (t *wsTransport) respond(rawID json.RawMessage, resp *transport.JSONRPCResponse) {
	b, err := json.Marshal(struct {
		JSONRPC string                   `json:"jsonrpc"`
		ID      json.RawMessage          `json:"id"`
		Result  json.RawMessage          `json:"result,omitempty"`
		Error   *mcp.JSONRPCErrorDetails `json:"error,omitempty"`
	}{mcp.JSONRPC_VERSION, rawID, resp.Result, resp.Error})
	if err != nil {
		t.log.Error("encoding a response to upstream", "err", err)
		return
	}
	if err := t.write(b); err != nil {
		t.log.Debug("writing a response to upstream", "err", err)
	}
}

// pingLoop sends a ping every PingInterval; a pong that does not come within
// PingTimeout (or a failed ping) ends the connection.
func (t *wsTransport) pingLoop() {
	tick := time.NewTicker(t.opts.PingInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.life.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(t.life, t.opts.PingTimeout)
		err := t.conn.Ping(ctx)
		cancel()
		if err != nil && t.life.Err() == nil {
			t.keepaliveFailed(fmt.Errorf("keepalive: no pong within %s: %w", t.opts.PingTimeout, err))
			return
		}
	}
}

// keepaliveFailed ends a connection whose server stopped answering: there is
// no point in a close handshake.
func (t *wsTransport) keepaliveFailed(cause error) {
	t.log.Warn("closing an unresponsive websocket connection", "err", cause)
	t.mu.Lock()
	if !t.finished && !t.closing {
		t.cause = cause // finish keeps it: the reader's own error would only say "closed"
	}
	t.mu.Unlock()
	t.closeRaw()
}

// wsHeader converts configured headers into an http.Header.
func wsHeader(h map[string]string) http.Header {
	out := make(http.Header, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		out.Set(k, h[k])
	}
	return out
}
