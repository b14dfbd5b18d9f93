package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/viewmux/viewmux/upstream/wire"
)

// wsSubprotocol is the websocket subprotocol MCP is spoken under: the
// TypeScript SDK's WebSocketClientTransport asks for it and the SEP-1288
// draft keeps it.
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
	// ReadLimit is the largest message accepted from the server, in bytes.
	// A larger one is read to its end without being kept and fails only
	// the call it answers (wire.ReadMessage); the connection stays up. It
	// must be positive.
	ReadLimit int64
	// PingInterval is how often a ping frame checks that the server is
	// still there; <= 0 disables keepalive.
	PingInterval time.Duration
	// PingTimeout is how long a pong may take before the connection is
	// considered dead and closed.
	PingTimeout time.Duration
	Logger      *slog.Logger // nil discards
}

// wsTransport is the websocket framing of viewmux's engine (wire.Transport)
// over one connection, as SDKs speak it: subprotocol "mcp", one JSON-RPC
// message per UTF-8 text frame, no newline framing, no batches.
//
// Every read, write and ping runs under the connection's lifetime context,
// never a caller's: cancelling a context passed to the websocket library
// closes the whole connection. Close waits for every goroutine the
// transport started (the keepalive); the engine owns the reader.
type wsTransport struct {
	url  string
	opts wsOptions
	log  *slog.Logger

	life context.Context // ends when Close is called
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex // guards the fields below
	conn    *websocket.Conn
	raw     []net.Conn // TCP connections dialed for the handshake
	cause   error      // why the keepalive gave up, reported by the next read
	started bool
	closing bool

	closeOnce sync.Once
}

var _ wire.Transport = (*wsTransport)(nil)

// newWSTransport returns a transport for url; nothing is dialed until Start.
func newWSTransport(url string, opts wsOptions) *wsTransport {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	t := &wsTransport{url: url, opts: opts, log: opts.Logger}
	t.life, t.stop = context.WithCancel(context.Background())
	return t
}

// Start dials the server, bounded by ctx (which bounds only the handshake,
// never the connection), and requires it to select the "mcp" subprotocol.
// It then starts the keepalive, if configured.
func (t *wsTransport) Start(ctx context.Context) error {
	t.mu.Lock()
	switch {
	case t.closing:
		t.mu.Unlock()
		return wire.ErrClosed
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
	conn.SetReadLimit(-1) // ReadFrame bounds each message itself

	t.mu.Lock()
	if t.closing { // Close ran during the handshake
		t.mu.Unlock()
		t.closeConn(conn, websocket.StatusGoingAway, "")
		return wire.ErrClosed
	}
	t.conn = conn
	keepalive := t.opts.PingInterval > 0
	if keepalive {
		// Counted under mu, before Close can wait: see the closing check above.
		t.wg.Add(1)
	}
	t.mu.Unlock()
	if keepalive {
		go func() {
			defer t.wg.Done()
			t.pingLoop()
		}()
	}
	return nil
}

// httpClient returns the handshake's HTTP client: a transport of its own
// whose dialer remembers the TCP connection, so that a close can be forced,
// and which sends the configured headers only to the URL's origin.
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
	return &http.Client{Transport: base, CheckRedirect: keepToOrigin(headerNames(t.opts.Header))}
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

// ReadFrame implements wire.Transport: one text frame is one message, read
// up to ReadLimit; the rest of a longer one is scanned for its id and
// dropped. A binary frame ends the connection (status 1003).
func (t *wsTransport) ReadFrame() (wire.Frame, error) {
	t.mu.Lock()
	conn := t.conn
	t.mu.Unlock()
	if conn == nil {
		return wire.Frame{}, errors.New("websocket transport not started")
	}
	typ, r, err := conn.Reader(t.life)
	if err != nil {
		return wire.Frame{}, t.readErr(err)
	}
	if typ != websocket.MessageText {
		t.log.Error("closing the websocket connection", "err", errBinaryFrame)
		t.closeConn(conn, websocket.StatusUnsupportedData, "binary frames are not supported")
		return wire.Frame{}, errBinaryFrame
	}
	f, err := wire.ReadMessage(r, t.opts.ReadLimit)
	if err != nil {
		return wire.Frame{}, t.readErr(err)
	}
	return f, nil
}

// readErr turns an error of a read into the connection's cause; a
// keepalive that gave up is the cause of the read error it provoked.
func (t *wsTransport) readErr(err error) error {
	t.mu.Lock()
	cause := t.cause
	t.mu.Unlock()
	if cause != nil {
		return cause
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return fmt.Errorf("server closed the websocket (status %d %q)", int(ce.Code), ce.Reason)
	}
	return fmt.Errorf("websocket read: %w", err)
}

// WriteFrame implements wire.Transport: msg as one text frame, under the
// connection's lifetime (cancelling a write's own context would close the
// connection); a write stuck on a peer that stopped reading ends when the
// keepalive gives up on it.
func (t *wsTransport) WriteFrame(_ context.Context, msg []byte) error {
	t.mu.Lock()
	conn := t.conn
	t.mu.Unlock()
	if conn == nil {
		return errors.New("websocket transport not started")
	}
	if err := conn.Write(t.life, websocket.MessageText, msg); err != nil {
		return fmt.Errorf("websocket write: %w", err)
	}
	return nil
}

// Close closes the connection with status 1000 (forcing it after
// wsCloseGrace) and waits for the keepalive. It is idempotent, works
// whether or not Start was called or succeeded, and returns nil: a failed
// close handshake still closes the connection.
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
	})
	return nil
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
	if !t.closing {
		t.cause = cause // the read error it provokes would only say "closed"
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
