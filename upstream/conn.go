package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/wire"
)

// errTornDown is the cause of a connection that was closed on purpose.
var errTornDown = errors.New("connection closed")

// refreshCoalesce is how long the refresher waits after a list_changed
// before refetching, so that a burst of notifications costs one refetch.
// While list_changed keeps coming right after each refetch (a flood), the
// wait doubles up to refreshMaxDelay; once the upstream has been quiet for
// twice the current wait, it starts again from refreshCoalesce.
const (
	refreshCoalesce = 50 * time.Millisecond
	refreshMaxDelay = 30 * time.Second
)

// conn is one connection attempt's resources: what carries its messages
// (viewmux's engine, or httpPeer on streamable HTTP) and, for stdio,
// the child process. It lives until teardown; ctx ends (with a cause)
// as soon as the connection is lost, which also aborts in-flight calls.
type conn struct {
	u      *Upstream
	kind   string // transport actually used: stdio, http, sse, websocket
	ctx    context.Context
	cancel context.CancelCauseFunc

	// peer carries the connection's messages (peer.go).
	peer    peer
	version string       // the protocol version negotiated
	proc    *process     // stdio only
	httpc   *http.Client // http/sse only
	caps    mcp.ServerCapabilities
	modern  bool // protocol 2026-07-28 or later (stateless)

	side modernSide // 2026-07-28 requests to a legacy HTTP connection's endpoint (modern.go)

	last  atomic.Pointer[Catalog] // the newest catalog this connection built
	dirty atomic.Uint32           // list kinds awaiting a refetch
	kick  chan struct{}           // capacity 1: wakes the refresher
	notes notifyBudget            // bounds the upstream's notifications (bounds.go)

	wg           sync.WaitGroup // every goroutine this conn started
	teardownOnce sync.Once
	teardownErr  error
}

func (u *Upstream) newConn(kind string) *conn {
	ctx, cancel := context.WithCancelCause(u.life)
	return &conn{u: u, kind: kind, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1)}
}

// lost records that the connection is gone; the first cause wins. The
// supervisor notices through ctx and tears the connection down.
func (c *conn) lost(cause error) { c.cancel(cause) }

// spawn starts f on a goroutine owned by c, recovering a panic as a lost
// connection so the supervisor reconnects.
func (c *conn) spawn(what string, f func()) {
	c.wg.Go(func() {
		if !c.u.guard(what, f) {
			c.lost(fmt.Errorf("panic in %s", what))
		}
	})
}

// dial connects, initializes, and fetches the catalog, all bounded by ctx.
// Without a configured protocol it first pins the latest initialize-based
// version (2025-11-25): on that version an upstream may send sampling,
// elicitation and roots requests in the middle of a call, which servers
// supporting both eras refuse on 2026-07-28 (they expect multi round-trip
// results instead), so viewmux can relay the most. When the server rejects
// that handshake, the attempt is repeated once with 2026-07-28 discovery, and
// the choice is remembered for reconnects.
func (u *Upstream) dial(ctx context.Context) (*conn, *Catalog, error) {
	c, cat, err := u.dialTransport(ctx)
	if err == nil || u.cfg.Protocol != "" || u.negotiate.Load() || ctx.Err() != nil {
		return c, cat, err
	}
	switch {
	case u.cfg.Transport == configs.TransportHTTP:
		return c, cat, err // dialHTTP tries discovery itself, before SSE
	case errors.Is(err, ErrCatalogBound) || errors.Is(err, errRepeatedListCursor):
		return c, cat, err // the handshake went through: its catalog is at fault
	case u.cfg.Transport == configs.TransportStdio && (c == nil || c.ctx.Err() != nil || isConnectionLoss(err)):
		// The child died or hung: not a version disagreement. Its
		// connection's ctx ends only once the exit is noticed, which may
		// come after the handshake saw stdout close, so a closed
		// transport counts too; otherwise a dying child was started twice.
		return c, cat, err
	}
	if c != nil {
		if terr := c.teardown(); terr != nil {
			u.log.Warn("closing the 2025-11-25 attempt", "err", terr)
		}
	}
	u.negotiate.Store(true)
	c2, cat2, err2 := u.dialTransport(ctx)
	if err2 != nil {
		u.negotiate.Store(false)
		return c2, nil, attempts{{"", err}, {"with 2026-07-28 discovery", err2}}.err()
	}
	u.log.Info("upstream rejected the 2025-11-25 handshake; using protocol discovery", "protocol", cat2.ProtocolVersion, "err", err)
	return c2, cat2, nil
}

// pinnedVersion is the protocol version the next handshake pins, or "" to
// negotiate (2026-07-28 discovery, falling back to initialize).
func (u *Upstream) pinnedVersion() string {
	switch {
	case u.cfg.Protocol != "":
		return u.cfg.Protocol
	case u.negotiate.Load():
		return ""
	default:
		return mcp.LATEST_LEGACY_PROTOCOL_VERSION
	}
}

// dialTransport makes one connection attempt with the configured transport.
func (u *Upstream) dialTransport(ctx context.Context) (*conn, *Catalog, error) {
	switch u.cfg.Transport {
	case configs.TransportStdio:
		return u.dialStdio(ctx)
	case configs.TransportHTTP:
		return u.dialHTTP(ctx)
	case configs.TransportSSE:
		return u.dialSSE(ctx)
	case configs.TransportWebsocket:
		return u.dialWebsocket(ctx)
	}
	return nil, nil, fmt.Errorf("unknown transport %q", u.cfg.Transport)
}

func (u *Upstream) dialStdio(ctx context.Context) (*conn, *Catalog, error) {
	c := u.newConn(configs.TransportStdio)
	p, err := startProcess(u.procLife, u.cfg, slog.New(u.stderrs.child(u.log.Handler())), u.secrets(), c.spawn, c.lost)
	if err != nil {
		return c, nil, err
	}
	c.proc = p
	init, err := c.openWire(ctx, wire.NewLines(p.stdout, p.stdin, p.stdin, u.maxMessage()))
	if err != nil {
		return c, nil, err
	}
	return c.finish(ctx, init)
}

// dialHTTP uses streamable HTTP through viewmux's own code (streamable.go).
// An endpoint that answers the initialize POST with a 4xx (404, 405, 400,
// …) is taken to be a legacy HTTP+SSE server, as the 2025-03-26
// backwards-compatibility rules say, and is dialed again with the SSE
// transport at the same URL.
func (u *Upstream) dialHTTP(ctx context.Context) (*conn, *Catalog, error) {
	c, init, err := u.openStreamable(ctx)
	if errors.Is(err, errLegacyEndpoint) {
		if terr := c.teardown(); terr != nil {
			u.log.Warn("closing streamable HTTP attempt", "err", terr)
		}
		// A 4xx to a 2025-11-25 initialize means either an old HTTP+SSE
		// server or one that speaks only 2026-07-28: try discovery first,
		// since the SSE attempt waits out the whole connect timeout.
		tried := attempts{{"streamable HTTP", err}}
		if u.cfg.Protocol == "" && !u.negotiate.Load() {
			u.negotiate.Store(true)
			c2, init2, err2 := u.openStreamable(ctx)
			if err2 == nil {
				u.log.Info("upstream rejected the 2025-11-25 handshake; using protocol discovery", "protocol", c2.version, "err", err)
				return c2.finish(ctx, init2)
			}
			u.negotiate.Store(false)
			if c2 != nil {
				if terr := c2.teardown(); terr != nil {
					u.log.Warn("closing streamable HTTP discovery attempt", "err", terr)
				}
			}
			tried = append(tried, attempt{"streamable HTTP with 2026-07-28 discovery", err2})
		}
		u.log.Info("endpoint rejected the streamable HTTP initialize POST; falling back to the legacy SSE transport", "err", err)
		c3, cat3, err3 := u.dialSSE(ctx)
		if err3 != nil {
			// Each attempt's own error: the SSE fallback's alone would
			// hide why the streamable HTTP endpoint refused us.
			notSSE := errors.Is(err3, errNoEventStream)
			err3 = append(tried, attempt{"legacy SSE fallback", err3}).err()
			if notSSE && urlNotFound(err) {
				// Not found as either: nothing says this is a legacy
				// server, everything that the URL is wrong.
				err3 = fmt.Errorf("%w; %s serves neither streamable HTTP nor legacy SSE: check the url of [upstreams.%s]", err3, shownURL(u.cfg.URL), u.cfg.Name)
			}
			return c3, nil, err3
		}
		return c3, cat3, nil
	}
	if err != nil {
		return c, nil, err
	}
	return c.finish(ctx, init)
}

// shownURL is raw without its userinfo, query and fragment, for an error
// that names the URL (what is left passes through Redact like every error).
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the url"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// dialSSE uses legacy HTTP+SSE (2024-11-05) through viewmux's own engine
// (sse.go): the connect timeout bounds the GET and the endpoint event.
func (u *Upstream) dialSSE(ctx context.Context) (*conn, *Catalog, error) {
	c := u.newConn(configs.TransportSSE)
	c.httpc = sseHTTPClient(u.cfg.Headers)
	c.httpc.Transport = u.withOAuth(c.httpc.Transport)
	t, err := newSSETransport(u.cfg.URL, sseOptions{
		Header: u.cfg.Headers,
		Client: c.httpc,
		Limit:  u.maxMessage(),
		Logger: u.log,
		Redact: u.Redact,
	})
	if err != nil {
		return c, nil, err
	}
	start, cancel := context.WithTimeout(ctx, u.connectTimeout())
	err = t.Start(start)
	cancel()
	if err != nil {
		t.Close()
		return c, nil, fmt.Errorf("start sse transport: %w", err)
	}
	init, err := c.openWire(ctx, t)
	if err != nil {
		return c, nil, err
	}
	return c.finish(ctx, init)
}

// dialWebsocket uses one websocket connection (subprotocol "mcp", one
// message per text frame) through viewmux's own engine. Messages are read
// up to MaxMessageBytes, and ProbeInterval paces websocket pings (the
// connection itself shows a server that went away, so no MCP-level probe
// is needed).
func (u *Upstream) dialWebsocket(ctx context.Context) (*conn, *Catalog, error) {
	c := u.newConn(configs.TransportWebsocket)
	t := newWSTransport(u.cfg.URL, wsOptions{
		Header:       wsHeader(u.cfg.Headers),
		ReadLimit:    u.maxMessage(),
		PingInterval: u.opts.ProbeInterval,
		PingTimeout:  u.connectTimeout(),
		Logger:       u.log,
	})
	if err := t.Start(ctx); err != nil {
		t.Close()
		return c, nil, fmt.Errorf("start websocket transport: %w", err)
	}
	init, err := c.openWire(ctx, t)
	if err != nil {
		return c, nil, err
	}
	return c.finish(ctx, init)
}

// finish fetches the catalog. The connection must still be alive afterwards.
func (c *conn) finish(ctx context.Context, init *mcp.InitializeResult) (*conn, *Catalog, error) {
	disarm := context.AfterFunc(ctx, func() { c.lost(context.Cause(ctx)) })
	defer disarm()
	version := c.version
	if version == "" {
		version = init.ProtocolVersion
	}
	base := &Catalog{
		ServerInfo:      init.ServerInfo,
		Capabilities:    init.Capabilities,
		Instructions:    init.Instructions,
		ProtocolVersion: version,
	}
	cat, err := c.fetch(ctx, base, c.advertised(), true)
	if err != nil {
		return c, nil, err
	}
	c.askForAllLogs(ctx)
	if c.ctx.Err() != nil {
		return c, nil, context.Cause(c.ctx)
	}
	return c, cat, nil
}

// askForAllLogs sets the log level of a session before 2026-07-28 to
// debug. The session is shared by every client, and each client wants its
// own level (a 2026-07-28 client names one per request); viewmux filters the
// messages per client, so the upstream must send everything it has. Without
// it a server that logs only once a level is set (the Go SDK's) would send
// nothing to a client whose level no client had forwarded yet. A 2026-07-28
// connection carries the level in each request instead.
func (c *conn) askForAllLogs(ctx context.Context) {
	if c.modern || c.caps.Logging == nil {
		return
	}
	params, _ := json.Marshal(mcp.SetLevelParams{Level: mcp.LoggingLevelDebug})
	_, err := c.rawRequest(ctx, string(mcp.MethodSetLogLevel), params)
	var refused *RPCError
	switch {
	case errors.As(err, &refused):
		c.u.log.Warn("upstream refused logging/setLevel debug; log messages may be missing", "err", refused.Message)
	case err != nil:
		c.u.log.Warn("logging/setLevel debug not sent; log messages may be missing", "err", err)
	}
}

// startBackground starts the goroutines of a published connection.
func (c *conn) startBackground() {
	c.spawn("refresher", c.refreshLoop)
	if c.modern {
		if f := c.listenFilter(); !f.IsEmpty() {
			c.spawn("listener", func() { c.listenLoop(f) })
		}
	}
	if (c.kind == configs.TransportHTTP || c.kind == configs.TransportSSE) && c.u.opts.ProbeInterval > 0 {
		c.spawn("prober", c.probeLoop)
	}
}

// teardown ends the connection: in-flight calls fail, background goroutines
// stop, the client closes and, for stdio, the child's process group is shut
// down (process.shutdown). It waits for everything the connection started.
func (c *conn) teardown() error {
	c.teardownOnce.Do(func() {
		c.lost(errTornDown)
		c.closeSide()
		if c.peer != nil {
			// For stdio this closes the child's stdin, the first step of
			// the shutdown; for HTTP it ends the session (DELETE).
			if err := c.peer.close(); err != nil {
				c.u.log.Debug("closing the connection", "err", err)
			}
		}
		if c.proc != nil {
			c.teardownErr = c.proc.shutdown(c.u.opts.StdinCloseWait, c.u.opts.TermWait)
		}
		if c.peer != nil {
			c.peer.wait() // the reader ends once the child's stdout has
		}
		if c.httpc != nil {
			c.httpc.CloseIdleConnections()
		}
		c.wg.Wait()
	})
	return c.teardownErr
}

// handleNotification runs on the transport's reader goroutine: list_changed
// is handed to the refresher, everything else to OnNotification.
func (c *conn) handleNotification(n mcp.JSONRPCNotification) {
	switch n.Method {
	case mcp.MethodNotificationToolsListChanged:
		c.markDirty(listTools)
	case mcp.MethodNotificationPromptsListChanged:
		c.markDirty(listPrompts)
	case mcp.MethodNotificationResourcesListChanged:
		c.markDirty(listResources | listTemplates)
	case mcp.MethodNotificationSubscriptionsAcknowledged:
		// bookkeeping of our own subscriptions/listen stream
	default:
		if cb := c.u.opts.OnNotification; cb != nil {
			c.u.guard("OnNotification", func() { cb(c.u, n) })
		}
	}
}

func (c *conn) markDirty(kinds uint32) {
	c.dirty.Or(kinds)
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// refreshLoop refetches the lists named by list_changed notifications, off
// the transport's reader goroutine: one refetch at a time, coalescing
// bursts, and backing off while the notifications keep coming (see
// refreshCoalesce), so a flood costs a refetch every refreshMaxDelay at
// most, not one per notification.
func (c *conn) refreshLoop() {
	delay := refreshCoalesce
	var last time.Time // end of the previous refetch
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		}
		switch {
		case last.IsZero() || time.Since(last) > 2*delay:
			delay = refreshCoalesce
		default:
			if delay < time.Second && 2*delay >= time.Second {
				c.u.log.Warn("list_changed keeps coming from upstream; backing off its catalog refetches, to one every "+refreshMaxDelay.String()+" at most",
					"method", "notifications/list_changed")
			}
			delay = min(2*delay, refreshMaxDelay)
		}
		if !sleepCtx(c.ctx, delay) {
			return
		}
		kinds := c.dirty.Swap(0) & c.advertised()
		if kinds == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.u.connectTimeout())
		next, err := c.fetch(ctx, c.last.Load(), kinds, false)
		cancel()
		last = time.Now()
		if err != nil { // a lost connection or a catalog past its bounds; per-list errors were logged
			c.lost(err)
			return
		}
		c.u.publish(c, next)
	}
}

// listenLoop keeps a subscriptions/listen stream open on a 2026-07-28
// connection so that list_changed notifications are delivered (they are
// opt-in there). When the stream ends it is reopened after a backoff, and
// every list is refetched in case a notification was missed.
func (c *conn) listenLoop(filter mcp.SubscriptionFilter) {
	delay := minBackoff
	for {
		began := time.Now()
		params, _ := json.Marshal(mcp.SubscriptionsListenParams{Notifications: filter})
		_, err := c.rawRequest(c.ctx, string(mcp.MethodSubscriptionsListen), params)
		switch {
		case c.ctx.Err() != nil:
			return
		case isConnectionLoss(err):
			c.lost(fmt.Errorf("subscriptions/listen: %w", err))
			return
		case isMethodNotFound(err):
			c.u.log.Info("upstream does not support subscriptions/listen; list_changed may not arrive", "err", err)
			return
		}
		c.u.log.Debug("subscriptions/listen ended; reopening", "err", err, "retry_in", delay)
		if time.Since(began) >= stableAfter {
			delay = minBackoff
		}
		if !sleepCtx(c.ctx, jitter(delay)) {
			return
		}
		delay = min(2*delay, maxBackoff)
		c.markDirty(c.advertised())
	}
}

// probeLoop notices an HTTP or SSE server that went away while idle.
func (c *conn) probeLoop() {
	t := time.NewTicker(c.u.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.u.connectTimeout())
		method := mcp.MethodPing
		if c.modern {
			method = mcp.MethodServerDiscover // ping is a no-op on 2026-07-28
		}
		_, err := c.rawRequest(ctx, string(method), nil)
		cancel()
		switch {
		case err == nil || c.ctx.Err() != nil:
		case isConnectionLoss(err):
			c.lost(fmt.Errorf("probe: %w", err))
			return
		default:
			c.u.log.Warn("probe failed", "err", err)
		}
	}
}

func (c *conn) listenFilter() mcp.SubscriptionFilter {
	var f mcp.SubscriptionFilter
	if t := c.caps.Tools; t != nil && t.ListChanged {
		f.ToolsListChanged = true
	}
	if p := c.caps.Prompts; p != nil && p.ListChanged {
		f.PromptsListChanged = true
	}
	if r := c.caps.Resources; r != nil && r.ListChanged {
		f.ResourcesListChanged = true
	}
	return f
}

// isConnectionLoss reports whether err from a peer's call means the
// connection itself is gone (rather than the request failing, timing out or
// being answered with a JSON-RPC error): the engine's wire.ErrClosed (which
// httpPeer also wraps around a session the upstream ended), a stream cut
// short, or a network error.
func isConnectionLoss(err error) bool {
	if errors.Is(err, wire.ErrClosed) {
		// Whatever closed it: a keepalive's unanswered ping closes the
		// wire with a cause that wraps context.DeadlineExceeded, and the
		// call must still be told the connection is down.
		return true
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var opErr *net.OpError
	return errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.As(err, &opErr)
}

func (u *Upstream) connectTimeout() time.Duration {
	if u.cfg.ConnectTimeout > 0 {
		return u.cfg.ConnectTimeout
	}
	return 10 * time.Second
}

func (u *Upstream) maxMessage() int64 {
	if u.cfg.MaxMessageBytes > 0 {
		return u.cfg.MaxMessageBytes
	}
	return 16 << 20
}
