// Package aggregator owns the merged catalog: namespacing and name
// sanitizing, the routing table from exposed names to upstreams, versioned
// immutable snapshots, and the handlers that route calls to upstreams.
package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-multierror"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/glob"
	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/internal/redact"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// ErrToolNotFound is returned when a call names a tool the current snapshot
// does not have.
var ErrToolNotFound = errors.New("tool not found")

// ErrPromptNotFound and ErrResourceNotFound are returned for prompts and
// resource URIs no upstream claims.
var (
	ErrPromptNotFound   = errors.New("prompt not found")
	ErrResourceNotFound = errors.New("resource not found")
)

// Aggregator merges the catalogs of a config's upstreams into snapshots and
// routes calls to them. Create it with New, then Start; Close stops every
// upstream. Its methods are safe for concurrent use.
type Aggregator struct {
	log     *slog.Logger
	opts    Options
	set     atomic.Pointer[upstreamSet] // replaced whole by Reload
	secrets *redact.Live                // every configured secret value (Redact)

	mu      sync.Mutex // serializes rebuilds, reloads and Hooks.Change calls
	version uint64
	snap    atomic.Pointer[Snapshot]

	relay  *relay
	scoped *sessionConns // connections of scope = "session" upstreams
	users  *userConns    // connections of per-user upstreams (peruser.go)
	// listings are the last listings of per-user upstreams, kept in the
	// state store (first.go).
	listings *listings
	pinMode  string // server.pin at New (pins.go)

	startMu   sync.Mutex
	startErrs map[string]error // upstream → error of its first connection attempt

	closeOnce sync.Once
	// watchOnce starts, and stopWatch stops, the watch of the store for
	// users' logins made through other replicas (watchLogins).
	watchOnce sync.Once
	stopWatch context.CancelFunc
	watchDone chan struct{}
}

// upstreamSet is the configured upstreams at one moment. It is never
// modified: Reload builds a new one.
type upstreamSet struct {
	cfg     *configs.Config
	namer   Namer
	ups     []*upstream.Upstream // sorted by name, like cfg.Upstreams
	sources []*source            // parallel to ups
	byName  map[string]*upstream.Upstream
}

// Options configure an Aggregator. The zero value is usable.
type Options struct {
	Logger *slog.Logger // nil = discard
	// Upstream returns extra options for one upstream (handlers for
	// server→client requests, notification hooks). nil = none.
	Upstream func(cfg *configs.Upstream) upstream.Options
	// ServerInfo is what viewmux calls itself in results to 2026-07-28
	// clients.
	ServerInfo mcp.Implementation
	// Secrets is where the aggregator keeps the set of every configured
	// secret value of its config (configs.Config.SecretValues): New and
	// Reload store it there, so that a logger built on the same Live
	// masks what the config now holds. nil = a Live of its own.
	Secrets *redact.Live
	// Pins is where tool definitions are pinned (server.pin, pins.go);
	// nil = nothing is pinned, whatever server.pin says.
	Pins *pins.Store
	// State is where the gateway keeps what outlives a request besides
	// pins: logins, connect tickets and pending logins. nil = the files
	// engine of server.state_dir, with everything short-lived in this
	// process's memory.
	State state.Store
	// Hooks are what the aggregator tells its owner. They are fixed here,
	// at construction; the zero value ignores every event.
	Hooks Hooks
}

// Hooks are the events an Aggregator reports to its owner (the session
// server). Each is called from the aggregator's own goroutines (an
// upstream's reader, a rebuild) and must not block for long; a nil field
// means the event is ignored.
type Hooks struct {
	// Change is called with the previous and the new snapshot after every
	// change. Calls are serialized and happen in snapshot order. The
	// first snapshot, which New publishes, is reported to nobody: read it
	// with Snapshot.
	Change func(old, new *Snapshot)
	// ResourceUpdated receives the exposed URI of every
	// notifications/resources/updated an upstream sends, and the client
	// session it belongs to: "" when it came over a shared connection (it
	// is then every subscriber's), else the session whose own connection
	// (scope = "session") sent it.
	ResourceUpdated func(session, uri string)
	// Log receives upstream log messages that no client call caused, with
	// the name of the upstream that sent them (params as the upstream sent
	// them), so that they reach only sessions that may see that upstream.
	Log func(upstream string, params map[string]any)
}

// New builds an aggregator for cfg without starting anything.
func New(cfg *configs.Config, opts Options) *Aggregator {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Aggregator{opts: opts, relay: newRelay(), scoped: newSessionConns(), users: newUserConns(), listings: newListings(), secrets: opts.Secrets, pinMode: cfg.Server.Pin}
	if a.secrets == nil {
		a.secrets = &redact.Live{}
	}
	a.secrets.Store(redact.NewSecrets(cfg.SecretValues()...))
	if a.opts.State == nil {
		a.opts.State = state.OpenFiles(cfg.Server.StateDir)
	}
	// The aggregator logs upstreams' errors, and upstreams log through it:
	// mask every configured secret in them, whoever's (Redact).
	a.log = slog.New(redact.NewHandlerFunc(log.Handler(), a.Redact))
	set := &upstreamSet{cfg: cfg, namer: namerOf(cfg), byName: make(map[string]*upstream.Upstream)}
	for _, uc := range cfg.Upstreams {
		set.add(a.newUpstream(uc), newSource(uc))
	}
	a.set.Store(set)
	a.snap.Store(build(0, set.namer, nil))
	return a
}

// State returns the store the aggregator keeps its state in (Options.State).
func (a *Aggregator) State() state.Store { return a.opts.State }

func namerOf(cfg *configs.Config) Namer {
	return Namer{Separator: cfg.Server.Separator, MaxLength: cfg.Server.MaxNameLength}
}

func (s *upstreamSet) add(u *upstream.Upstream, src *source) {
	s.ups = append(s.ups, u)
	s.sources = append(s.sources, src)
	s.byName[u.Name()] = u
}

// newUpstream builds (without starting) the shared connection for uc: the
// one its catalog comes from, and the one every request uses unless uc is
// scope = "session".
func (a *Aggregator) newUpstream(uc *configs.Upstream) *upstream.Upstream {
	return a.newConn(uc, "", a.log, func(*upstream.Upstream) { a.rebuild() })
}

// newConn builds (without starting) a connection for uc: the shared one
// (session ""), or the own connection of one client session. What the
// connection sends back is routed through a connLink naming both.
func (a *Aggregator) newConn(uc *configs.Upstream, session string, log *slog.Logger, onCatalog func(*upstream.Upstream)) *upstream.Upstream {
	return a.newConnFor(uc, session, oauth.Options{}, log, onCatalog)
}

// newConnFor is newConn with the OAuth credentials of one caller of a
// per-user or exchange upstream: user's UserKey (the login of the user
// with that hash) and Source (an exchanged token); none = the gateway's
// login.
func (a *Aggregator) newConnFor(uc *configs.Upstream, session string, user oauth.Options, log *slog.Logger, onCatalog func(*upstream.Upstream)) *upstream.Upstream {
	var uo upstream.Options
	if a.opts.Upstream != nil {
		uo = a.opts.Upstream(uc)
	}
	uo.OAuth.UserKey, uo.OAuth.Source = user.UserKey, user.Source
	uo.OAuth = a.loginOptions(uo.OAuth)
	uo.Logger = log
	uo.OnCatalog = onCatalog
	uo.OAuth.OnSecret = a.secrets.Add // an oauth upstream's tokens are masked like configured secrets
	l := &connLink{name: uc.Name, session: session}
	l.spoofLog.Interval = spoofLogEvery
	uo.OnNotification = func(_ *upstream.Upstream, n mcp.JSONRPCNotification) { a.onNotification(l, n) }
	uo.OnCallNotification = func(ctx context.Context, _ *upstream.Upstream, n mcp.JSONRPCNotification) {
		a.onCallNotification(ctx, l, n)
	}
	h := clientHandler{a: a, l: l}
	uo.OnRequest = h.onRequest
	l.u = upstream.New(uc, uo)
	return l.u
}

// upstream returns the connection named name, or an error naming it.
func (a *Aggregator) upstream(name string) (*upstream.Upstream, error) {
	if u := a.set.Load().byName[name]; u != nil {
		return u, nil
	}
	return nil, fmt.Errorf("upstream %q: %w", name, upstream.ErrDown)
}

func newSource(uc *configs.Upstream) *source {
	src := &source{cfg: uc, rules: filter.MustCompile(uc.Rules), toolsets: make(map[string][]*glob.Glob)}
	for _, p := range uc.ReadOnlyTools {
		src.readOnly = append(src.readOnly, mustGlob(p))
	}
	for set, pats := range uc.Toolsets {
		for _, p := range pats {
			src.toolsets[set] = append(src.toolsets[set], mustGlob(p))
		}
	}
	return src
}

// mustGlob compiles a pattern that config validation already accepted.
func mustGlob(p string) *glob.Glob {
	g, err := glob.Compile(p)
	if err != nil {
		panic(fmt.Sprintf("glob %q passed validation but does not compile: %v", p, err))
	}
	return g
}

// Start connects every upstream in parallel, each within its
// connect_timeout, and publishes the first snapshot. It returns an error
// naming every required upstream that failed; failures of other upstreams are
// logged and those upstreams keep retrying in the background.
func (a *Aggregator) Start(ctx context.Context) error {
	var g multierror.Group
	for _, u := range a.set.Load().ups {
		g.Go(func() error {
			err := u.Start(ctx)
			if err == nil {
				return nil
			}
			a.startMu.Lock()
			if a.startErrs == nil {
				a.startErrs = make(map[string]error)
			}
			a.startErrs[u.Name()] = err
			a.startMu.Unlock()
			if u.Config().Required {
				return fmt.Errorf("required %w", err) // err begins `upstream "name": `
			}
			a.log.Warn("upstream failed to start; retrying in the background", "upstream", u.Name(), "error", err)
			return nil
		})
	}
	err := g.Wait().ErrorOrNil()
	a.openListing()     // per-user upstreams without an operator login (peruser.go)
	a.loadListings(ctx) // and, until one lists, their last listing (first.go)
	if a.hasPerUser() {
		a.watchOnce.Do(a.startWatch)
	}
	a.rebuild()
	return err
}

// Redact returns text with every configured secret value of the current
// config masked (auth token values, every upstream's env and header
// values and URL keys: configs.Config.SecretValues) and its URLs
// redacted: what viewmux prints, logs or answers about upstreams goes
// through it, whoever's secret it is. It is safe for concurrent use.
func (a *Aggregator) Redact(text string) string { return a.secrets.Apply(text) }

// MaskSecrets returns text with every configured secret value of the
// current config masked, and nothing else changed (URLs are kept): for
// text whose URLs are data, such as an audit record's resource URI.
func (a *Aggregator) MaskSecrets(text string) string { return a.secrets.Mask(text) }

// StartError returns the error of the named upstream's first connection
// attempt in Start, or nil.
func (a *Aggregator) StartError(name string) error {
	a.startMu.Lock()
	defer a.startMu.Unlock()
	return a.startErrs[name]
}

// Close stops every upstream, the shared connections and every session's
// own, and waits for them. It is idempotent.
func (a *Aggregator) Close() error {
	var errs *multierror.Error
	a.closeOnce.Do(func() {
		a.watchOnce.Do(func() {}) // a Start after Close watches nothing
		if a.stopWatch != nil {
			a.stopWatch()
			<-a.watchDone
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		wg.Go(func() {
			if err := a.scoped.close(a); err != nil {
				mu.Lock()
				errs = multierror.Append(errs, err)
				mu.Unlock()
			}
		})
		wg.Go(func() {
			if err := a.users.close(a); err != nil {
				mu.Lock()
				errs = multierror.Append(errs, err)
				mu.Unlock()
			}
		})
		for _, u := range a.set.Load().ups {
			wg.Go(func() {
				if err := u.Close(); err != nil {
					mu.Lock()
					errs = multierror.Append(errs, fmt.Errorf("upstream %q: close: %w", u.Name(), err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	})
	return errs.ErrorOrNil()
}

// Snapshot returns the current snapshot. It is never nil.
func (a *Aggregator) Snapshot() *Snapshot { return a.snap.Load() }

// Upstreams returns the upstreams, sorted by name. The slice is shared; do
// not modify it.
func (a *Aggregator) Upstreams() []*upstream.Upstream { return a.set.Load().ups }

// rebuild publishes a new snapshot from the upstreams' current catalogs,
// then keeps the new listings of per-user upstreams in the state store.
func (a *Aggregator) rebuild() {
	a.publish()
	a.saveListings() // first.go
}

// publish publishes a new snapshot from the upstreams' current catalogs.
func (a *Aggregator) publish() {
	a.mu.Lock()
	defer a.mu.Unlock()
	set := a.set.Load()
	for i, u := range set.ups {
		src := set.sources[i]
		src.state = u.State()
		src.catalog = u.Catalog()
		src.placeholder = false
		if src.catalog == nil && u.Config().PerUser() {
			// No operator login: a connected user's listing, if any.
			if cat, st := a.userCatalog(u); cat != nil {
				src.catalog, src.state = cat, st
			}
		}
		if cfg := u.Config(); userListed(cfg) {
			// first.go: the last listing stands in for a live one, and
			// the placeholder for a listing nobody has made yet.
			if src.catalog != nil {
				a.listings.keep(cfg, src.catalog)
			} else if src.catalog = a.listings.get(cfg); src.catalog == nil {
				src.placeholder = true
			}
		}
	}
	a.version++
	round := a.pinRound(set)
	next := build(a.version, set.namer, set.sources)
	next.PinEvents = a.commitPins(round)
	next.keepResting(a.snap.Load(), set.sources)
	for _, c := range next.Conflicts {
		a.log.Error("tool name collision", "tool", c.Name, "upstream", c.Dropped, "error", c.String())
	}
	a.warnUnmatched(a.snap.Load(), next)
	prev := a.snap.Swap(next)
	if fn := a.opts.Hooks.Change; fn != nil {
		fn(prev, next)
	}
	a.retireSessionConns(set)
	a.retireUserConns(set)
}
