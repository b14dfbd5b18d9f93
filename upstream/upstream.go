// Package upstream owns one connection to one upstream MCP server: spawning
// (stdio) or dialing (streamable HTTP, legacy SSE, websocket) it, initializing it,
// fetching its whole catalog, keeping that catalog current on list_changed,
// forwarding calls to it, and reconnecting with backoff whenever the
// connection is lost. Stdio children run in their own process group and are
// shut down by stages (stdin closed, SIGTERM, SIGKILL, reaped), so that no
// descendant outlives viewmux.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// Catalog is everything one upstream offers, fetched in full (every page).
// It is immutable once published: a change makes a new Catalog, so it may be
// read from any goroutine without locking. Callers must not modify it.
type Catalog struct {
	// Tools carry RawInputSchema / RawOutputSchema exactly as the upstream
	// sent them (mcp.Tool's own decoder drops a root oneOf, anyOf, $schema
	// and unknown keys); InputSchema / OutputSchema are then zero. Tools
	// failing mcp.ValidateParamHeaderAnnotations are dropped (mcp-go's
	// server panics registering them).
	Tools             []mcp.Tool
	Prompts           []mcp.Prompt
	Resources         []mcp.Resource
	ResourceTemplates []mcp.ResourceTemplate
	// RawTools[i] is the definition of Tools[i] exactly as the upstream
	// listed it (compacted); RawPrompts, RawResources and RawTemplates
	// likewise. Definitions are forwarded as these bytes, so nothing is
	// added or dropped; the decoded items are for decisions. A catalog built
	// by hand may leave them short or nil: its items are then encoded from
	// their decoded form.
	RawTools, RawPrompts, RawResources, RawTemplates []json.RawMessage
	ServerInfo                                       mcp.Implementation
	Capabilities                                     mcp.ServerCapabilities
	Instructions                                     string
	ProtocolVersion                                  string
}

// State is the connection state of an Upstream.
type State int32

// The states of an Upstream. The zero value is StateConnecting, which is also
// the state of an Upstream that has not been started.
const (
	StateConnecting State = iota // an attempt is in progress (or not started yet)
	StateUp                      // connected, initialized, catalog published
	StateDown                    // not connected; waiting to retry
	StateClosed                  // Close was called
)

// String returns the state's lowercase name.
func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateUp:
		return "up"
	case StateDown:
		return "down"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// ErrDown is returned, wrapped and naming the upstream, by calls made while the
// upstream is not connected and by calls whose connection was lost mid-call.
var ErrDown = errors.New("upstream is down")

// Defaults for Options fields left zero.
const (
	defaultStdinCloseWait = 2 * time.Second
	defaultTermWait       = 3 * time.Second
	defaultProbeInterval  = 30 * time.Second

	// minBackoff is the default of Options.MinBackoff, and the first delay
	// before a subscriptions/listen stream is reopened.
	minBackoff = time.Second
	maxBackoff = 60 * time.Second
	// stableAfter is how long a subscriptions/listen stream must stay up
	// for its reopening to start again from minBackoff.
	stableAfter = maxBackoff
)

// Options are the hooks and knobs of an Upstream. The zero value is usable.
type Options struct {
	// Logger receives the upstream's logs, with key "upstream" = name. nil
	// discards them.
	Logger *slog.Logger

	// OnCatalog is called after each change of the published catalog (first
	// connect, refetch after a */list_changed notification, reconnect) and
	// when the upstream goes down (Catalog() then returns nil). It is called
	// from a goroutine owned by the Upstream, never concurrently for one
	// Upstream, and not after Close has begun. Bursts are coalesced: the
	// callback should read u.Catalog() for the current state. It must not
	// call u.Close (Close waits for it). nil = ignored.
	OnCatalog func(u *Upstream)

	// OnNotification receives the upstream's other notifications (progress,
	// message, resources/updated, …). It is called synchronously on the
	// transport's reader goroutine, so it must not block. nil = ignored.
	OnNotification func(u *Upstream, n mcp.JSONRPCNotification)

	// OnCallNotification, when set, receives instead of OnNotification
	// each notification (other than list_changed) that arrived on the
	// response stream of a call in flight (streamable HTTP): ctx is the
	// ctx that call was sent with, so it says whose call the notification
	// belongs to. Same rules as OnNotification; nil = OnNotification.
	OnCallNotification func(ctx context.Context, u *Upstream, n mcp.JSONRPCNotification)

	// OnRequest answers the upstream's requests to viewmux (sampling,
	// elicitation, roots; ping is answered without it), on every
	// transport. It runs on a goroutine of its own; its ctx ends when the
	// upstream cancels the request or the connection ends (on streamable
	// HTTP it is derived from the ctx of the call whose stream carried the
	// request). params are the request's params bytes (nil when absent).
	// On stdio and websocket an error that is (or wraps) *RPCError is sent
	// back as that JSON-RPC error, any other as an internal error with its
	// text. nil answers with method not found. Setting it declares the
	// sampling, elicitation and roots capabilities.
	OnRequest func(ctx context.Context, u *Upstream, method string, params json.RawMessage) (json.RawMessage, error)

	// ClientVersion is the clientInfo.version advertised; "" = "dev".
	ClientVersion string

	// StdinCloseWait is how long a stdio child gets to exit after its stdin
	// is closed before its process group is sent SIGTERM; 0 = 2s.
	StdinCloseWait time.Duration
	// TermWait is how long the process group gets after SIGTERM before it
	// is sent SIGKILL; 0 = 3s.
	TermWait time.Duration

	// ProbeInterval is how often an HTTP or SSE connection is probed (ping,
	// or server/discover on 2026-07-28), and a websocket connection sent a
	// ping frame, to notice a server that went away while idle; 0 = 30s,
	// negative disables. A websocket pong may take up to ConnectTimeout.
	// Stdio needs no probe: EOF and the child's exit are observed directly.
	ProbeInterval time.Duration

	// MinBackoff is the first delay before reconnecting a lost or failed
	// connection; consecutive failures double it up to 60s. 0 = 1s; it is
	// capped at 60s.
	MinBackoff time.Duration

	// OAuthLogin, for an upstream with oauth set, logs in without a
	// person when a request has no usable token or is refused for lack
	// of scope (oauth.Transport.Login): the conformance client and tests
	// set it. nil (viewmux serve): the upstream waits for `viewmux auth
	// login` and is "needs login" until then.
	OAuthLogin func(ctx context.Context, c *oauth.Client, ch oauth.Challenge, scopes []string) error
	// OAuth tunes the upstream's OAuth client (oauth.New); its zero
	// value is usable.
	OAuth oauth.Options
}

// ErrNeedsLogin is returned, wrapped with the command to run, by the
// connection attempts and calls of an oauth upstream that has no usable
// token (Health.LastError then says so).
var ErrNeedsLogin = oauth.ErrNeedsLogin

// ErrInsufficientScope is returned, wrapped with the scope wanted and the
// command to run, by a call an oauth upstream refused with 403
// insufficient_scope.
var ErrInsufficientScope = oauth.ErrInsufficientScope

// Upstream is one connection to one upstream MCP server, kept alive by a
// supervisor goroutine. All methods are safe for concurrent use.
type Upstream struct {
	cfg  *configs.Upstream
	opts Options
	log  *slog.Logger

	state   atomic.Int32
	catalog atomic.Pointer[Catalog]

	mu      sync.Mutex // guards conn, started, closed
	conn    *conn      // the published connection, nil while not up
	started bool
	closed  bool

	// negotiate is set once the upstream rejected a 2025-11-25 handshake:
	// later handshakes use 2026-07-28 discovery (see dial).
	negotiate atomic.Bool

	life     context.Context // the supervisor's lifetime; ended by Close
	stop     context.CancelFunc
	procLife context.Context // backstop for stdio children; ended after Close's graceful shutdown
	procStop context.CancelFunc

	hist history // counters and the newest error, for Health (health.go)

	stderrs stderrRepeats // a failing child's stderr, logged once (stderr_repeat.go); supervisor only

	oauth *oauth.Client // nil = cfg.OAuth is unset

	catalogKick chan struct{} // capacity 1: an OnCatalog call is pending
	wg          sync.WaitGroup
	closeOnce   sync.Once
	closeErr    error // set by the supervisor's last teardown, read after wg.Wait
}

// New returns an Upstream for cfg. It has no side effects: nothing is spawned
// or dialed until Start. cfg must not be modified afterwards.
func New(cfg *configs.Upstream, opts Options) *Upstream {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.StdinCloseWait <= 0 {
		opts.StdinCloseWait = defaultStdinCloseWait
	}
	if opts.TermWait <= 0 {
		opts.TermWait = defaultTermWait
	}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = defaultProbeInterval
	}
	if opts.ClientVersion == "" {
		opts.ClientVersion = "dev"
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = minBackoff
	}
	opts.MinBackoff = min(opts.MinBackoff, maxBackoff)
	u := &Upstream{
		cfg:         cfg,
		opts:        opts,
		catalogKick: make(chan struct{}, 1),
	}
	// Everything the upstream logs (its errors quote URLs, a child's output
	// may repeat its env) goes out with its configured secrets masked.
	u.log = slog.New(u.secrets().Handler(logger.Handler())).With("upstream", cfg.Name)
	if cfg.OAuth != nil {
		oo := opts.OAuth
		oo.Headers = cfg.Headers // a login's probe carries them too
		u.oauth = oauth.New(cfg.Name, cfg.URL, *cfg.OAuth, oo)
	}
	u.life, u.stop = context.WithCancel(context.Background())
	u.procLife, u.procStop = context.WithCancel(context.Background())
	return u
}

// Name returns the upstream's configured name.
func (u *Upstream) Name() string { return u.cfg.Name }

// OAuth returns the upstream's OAuth client; nil when cfg.OAuth is unset.
func (u *Upstream) OAuth() *oauth.Client { return u.oauth }

// Config returns the upstream's configuration; callers must not modify it.
func (u *Upstream) Config() *configs.Upstream { return u.cfg }

// State returns the current connection state.
func (u *Upstream) State() State { return State(u.state.Load()) }

// Catalog returns the published catalog, or nil while the upstream is not up.
// The returned Catalog is immutable and shared: do not modify it.
func (u *Upstream) Catalog() *Catalog { return u.catalog.Load() }

// Start connects, initializes and fetches the whole catalog, all within
// cfg.ConnectTimeout and ctx, and returns an error naming the upstream on
// failure. Whether or not it succeeds, it leaves a supervisor goroutine
// running until Close, which reconnects with exponential backoff
// (Options.MinBackoff, 1s by default, doubling to 60s, ±20% jitter) whenever
// the connection is down. ctx bounds only this first attempt, never the
// lifetime of the connection or of a stdio child.
func (u *Upstream) Start(ctx context.Context) error {
	u.mu.Lock()
	switch {
	case u.closed:
		u.mu.Unlock()
		return fmt.Errorf("upstream %q: start: already closed", u.cfg.Name)
	case u.started:
		u.mu.Unlock()
		return fmt.Errorf("upstream %q: start: already started", u.cfg.Name)
	}
	u.started = true
	u.wg.Add(2)
	u.mu.Unlock()

	go u.notifyLoop()
	first := make(chan error, 1)
	go u.supervise(ctx, first)
	return <-first
}

// Close stops the supervisor, closes the connection (for stdio, the full
// shutdown of the child's process group) and waits for every goroutine the
// Upstream started. It is idempotent and works whether or not Start was
// called or succeeded. OnCatalog is not called once Close has begun.
func (u *Upstream) Close() error {
	u.closeOnce.Do(func() {
		u.mu.Lock()
		u.closed = true
		u.mu.Unlock()
		u.stop()
		u.wg.Wait()
		u.procStop() // every child has been reaped; this only disarms the backstop
		u.mu.Lock()
		u.conn = nil
		u.mu.Unlock()
		u.catalog.Store(nil)
		u.state.Store(int32(StateClosed))
	})
	return u.closeErr
}

// current returns the published connection, or nil.
func (u *Upstream) current() *conn {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conn
}

// supervise runs the connect / wait-for-loss / backoff loop until Close. The
// first attempt is bounded by startCtx and its result is sent on first.
func (u *Upstream) supervise(startCtx context.Context, first chan<- error) {
	defer u.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			u.log.Error("panic in supervisor; upstream stays down", "panic", r, "stack", string(debug.Stack()))
			u.state.Store(int32(StateDown))
			if first != nil {
				first <- fmt.Errorf("upstream %q: supervisor panic: %v", u.cfg.Name, r)
			}
		}
	}()

	delay := u.opts.MinBackoff
	parent := startCtx
	for {
		u.state.Store(int32(StateConnecting))
		u.hist.attempted()
		c, err := u.attempt(parent)
		parent = u.life
		if err != nil && u.life.Err() == nil {
			u.hist.failed(err, nil)
		}
		var se *StderrError
		if !errors.As(err, &se) {
			se = &StderrError{}
		}
		sameStderr := u.stderrs.repeated(se.Stderr)
		if first != nil {
			first <- err
			first = nil
		} else if err != nil && u.life.Err() == nil {
			if sameStderr {
				// Logged in full before; Health keeps the whole text.
				u.log.Warn("connect failed", "err", se.Err, "stderr", "the same lines as the attempt before", "retry_in", delay)
			} else {
				u.log.Warn("connect failed", "err", err, "retry_in", delay)
			}
		}
		var lost error // why the published connection was lost
		if err == nil {
			select {
			case <-c.ctx.Done():
			case <-u.life.Done():
			}
			u.down(c)
			if u.life.Err() == nil {
				lost = u.lossCause(c)
			}
			// Backoff grows with consecutive failed attempts. A connection
			// that initialized and served its catalog was a success, so its
			// loss is retried after MinBackoff: by default at most about one
			// restart a second for a server that keeps crashing. One lost
			// for a catalog past its bounds was not: it keeps backing off,
			// like a connect that fails for it.
			if !errors.Is(lost, ErrCatalogBound) {
				delay = u.opts.MinBackoff
			}
		}
		if c != nil {
			if terr := c.teardown(); terr != nil {
				u.log.Warn("shutdown incomplete", "err", terr)
				if u.life.Err() != nil {
					u.closeErr = fmt.Errorf("upstream %q: close: %w", u.cfg.Name, terr)
				}
			}
			if lost != nil {
				u.recordLoss(c, lost) // after teardown: the child's last stderr lines are read
			}
		}
		if u.life.Err() != nil {
			return
		}
		u.state.Store(int32(StateDown))
		if (errors.Is(err, ErrNeedsLogin) || errors.Is(err, ErrInsufficientScope)) && u.oauth != nil {
			// A login by `viewmux auth login` (another process) lands in
			// the token file: try again as soon as it changes. A catalog
			// refused for scope waits for it too (or for the backoff:
			// the upstream may grant it meanwhile), rather than asking
			// again at once for what was refused.
			if !u.oauth.WaitLogin(u.life, jitter(delay)) {
				return
			}
		} else if !sleepCtx(u.life, jitter(delay)) {
			return
		}
		delay = min(2*delay, maxBackoff)
	}
}

// attempt makes one connection attempt bounded by parent and ConnectTimeout.
// On success the connection is published (state up, catalog stored, OnCatalog
// scheduled). The returned conn is non-nil whenever resources were acquired,
// also on failure: the caller tears it down.
func (u *Upstream) attempt(parent context.Context) (*conn, error) {
	timeout := u.connectTimeout()
	errTimeout := fmt.Errorf("connect timed out after %s", timeout)
	ctx, cancel := context.WithTimeoutCause(parent, timeout, errTimeout)
	defer cancel()
	defer context.AfterFunc(u.life, cancel)() // Close aborts a first attempt bounded by Start's ctx

	c, cat, err := u.dial(ctx)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		err = fmt.Errorf("upstream %q: connect: %w", u.cfg.Name, err)
		if c != nil && c.proc != nil {
			err = withStderr(err, c.proc.lastStderr())
		}
		u.stderrs.failed()
		return c, err
	}

	u.mu.Lock()
	if u.life.Err() != nil {
		u.mu.Unlock()
		return c, fmt.Errorf("upstream %q: connect: upstream closed", u.cfg.Name)
	}
	if c.ctx.Err() != nil {
		u.mu.Unlock()
		err := fmt.Errorf("upstream %q: connect: connection lost while connecting: %w", u.cfg.Name, context.Cause(c.ctx))
		if c.proc != nil {
			err = withStderr(err, c.proc.lastStderr())
		}
		u.stderrs.failed()
		return c, err
	}
	u.stderrs.succeeded()
	u.conn = c
	c.last.Store(cat)
	u.catalog.Store(cat)
	u.hist.up(c.kind)
	u.state.Store(int32(StateUp))
	u.mu.Unlock()

	u.log.Info("upstream up", "transport", c.kind, "protocol", cat.ProtocolVersion,
		"tools", len(cat.Tools), "prompts", len(cat.Prompts), "resources", len(cat.Resources),
		"resource_templates", len(cat.ResourceTemplates))
	c.startBackground()
	u.kickCatalog()
	return c, nil
}

// down unpublishes c after it was lost or closed.
func (u *Upstream) down(c *conn) {
	closing := u.life.Err() != nil
	u.mu.Lock()
	if u.conn == c {
		u.conn = nil
	}
	u.catalog.Store(nil)
	if closing {
		u.state.Store(int32(StateClosed))
	} else {
		u.state.Store(int32(StateDown))
	}
	u.mu.Unlock()
	if !closing {
		u.log.Warn("upstream down", "err", context.Cause(c.ctx))
		u.kickCatalog()
	}
}

// publish replaces the catalog with cat if c is still the published
// connection, and schedules OnCatalog.
func (u *Upstream) publish(c *conn, cat *Catalog) {
	u.mu.Lock()
	if u.conn != c || c.ctx.Err() != nil {
		u.mu.Unlock()
		return
	}
	c.last.Store(cat)
	u.catalog.Store(cat)
	u.mu.Unlock()
	u.kickCatalog()
}

func (u *Upstream) kickCatalog() {
	select {
	case u.catalogKick <- struct{}{}:
	default: // one call is already pending; it will read the newest catalog
	}
}

// notifyLoop delivers OnCatalog calls, one at a time, until Close.
func (u *Upstream) notifyLoop() {
	defer u.wg.Done()
	for {
		select {
		case <-u.life.Done():
			return
		case <-u.catalogKick:
		}
		if u.life.Err() != nil {
			return
		}
		if cb := u.opts.OnCatalog; cb != nil {
			u.guard("OnCatalog", func() { cb(u) })
		}
	}
}

// guard runs f, logging (and swallowing) a panic with the upstream's name.
// It reports whether f returned normally.
func (u *Upstream) guard(what string, f func()) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			u.log.Error("panic recovered", "in", what, "panic", r, "stack", string(debug.Stack()))
			ok = false
		}
	}()
	f()
	return true
}

// jitter spreads d by ±20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// sleepCtx waits for d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
