package aggregator

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// This file holds the connections of credentials = "per-user" upstreams
// (issue 19 §3): one per calling identity and upstream, made with that
// identity's own OAuth login (a token file of its own in the state
// directory), opened on the identity's first call and closed when idle.
// A request on a per-user upstream never goes over the shared connection,
// whose only use is the catalog (with the operator's login, when there is
// one); a caller with no identity, or one that has not connected its
// account, gets an error saying so and nothing is sent upstream.

// ErrNotConnected is returned, wrapped in an *UpstreamError whose Connect
// holds the link to follow, for a call of a caller who has not connected
// its account to a per-user upstream (or whose login the upstream no
// longer takes).
var ErrNotConnected = errors.New("the caller has not connected its account to this upstream")

// ErrNoIdentity is returned, wrapped in an *UpstreamError, for a call on a
// per-user upstream that carries no identity (viewmux has no tokens
// configured): whose credentials to use cannot be told, and nobody's are.
var ErrNoIdentity = errors.New("the call carries no identity")

// userIdleFloor is the least time a per-user connection stays open after
// its last use.
const userIdleFloor = 5 * time.Minute

// userConns are the connections of per-user upstreams, and how their
// logins are sealed. The connect tickets and pending logins of the
// browser step (connect.go) are in the state store, so that any replica
// takes them. It is safe for concurrent use.
type userConns struct {
	mu     sync.Mutex
	conns  map[userKey]*userConn
	byWho  map[string]int // open connections by caller; no zero entries
	closed bool
	seen   *upstreamSet
	errs   *multierror.Error
	wg     sync.WaitGroup

	exchangers map[*upstream.Upstream]*oauth.Exchanger     // of exchange upstreams (exchange.go)
	regs       map[*upstream.Upstream]*oauth.Registrations // clients registered for per-user logins (connect.go)

	// The sealer of logins (logins.go), made once for each config, and
	// the failures to open logins, logged once. Each has a lock of its
	// own: taking a login's sealer must not wait on the connections'.
	sealMu  sync.Mutex
	sealer  *state.Sealer
	sealFor *configs.Config
	keyErrs oauth.KeyErrors

	stop     chan struct{} // closed by close: ends the idle sweep
	sweeping bool          // the idle sweep runs (started with the first connection)
}

type userKey struct{ name, who string }

// userConn is one caller's connection to one per-user upstream.
type userConn struct {
	shared *upstream.Upstream // the upstream's shared connection when this one opened
	u      *upstream.Upstream
	ready  chan struct{} // closed once the first connection attempt ended
	who    string
	last   time.Time       // last use; guarded by userConns.mu
	src    *exchangeSource // the caller's token to exchange (credentials = "exchange"); nil = a stored login
}

func newUserConns() *userConns {
	return &userConns{conns: make(map[userKey]*userConn), byWho: make(map[string]int), stop: make(chan struct{})}
}

// identified reports whether who names an identity (an OAuth subject or
// a static token) rather than a client address or nobody.
func identified(who string) bool {
	return strings.HasPrefix(who, "oauth:") || strings.HasPrefix(who, "token:")
}

// perUser returns the shared connection of the upstream name when it has
// per-user credentials, else nil.
func (a *Aggregator) perUser(name string) *upstream.Upstream {
	if u := a.set.Load().byName[name]; u != nil && u.Config().PerUser() {
		return u
	}
	return nil
}

// loginIdentity is the identity a caller's upstream logins are kept
// under (hashed: oauth.UserKey): a static token's, or an OAuth subject's
// together with [auth.oauth]'s issuer, since a subject is unique only at
// its issuer: a config that trusts another issuer must not hand its
// subjects the logins of the first's.
func (a *Aggregator) loginIdentity(who string) string {
	if sub, ok := strings.CutPrefix(who, "oauth:"); ok {
		issuer := ""
		if o := a.set.Load().cfg.Auth.OAuth; o != nil {
			issuer = o.Issuer
		}
		return "oauth:" + issuer + "\x00" + sub
	}
	return who
}

// userLogin returns who's OAuth client of the upstream uc: only for
// reading its stored login.
func (a *Aggregator) userLogin(uc *configs.Upstream, who string) *oauth.Client {
	return a.newLogin(uc, oauth.Options{User: a.loginIdentity(who)})
}

// notConnected is the error of a call of who on the per-user upstream
// name: the link to connect with (a fresh ticket) is in its Public text
// only, never in what is logged.
func (a *Aggregator) notConnected(name, who, why string) error {
	link, err := a.ConnectLink(name, who)
	e := &UpstreamError{Upstream: name, Err: fmt.Errorf("upstream %q: %w (%s)", name, ErrNotConnected, why)}
	if err != nil {
		e.Err = fmt.Errorf("upstream %q: %w (%s); no connect link: %v", name, ErrNotConnected, why, err)
		link = "(no link: " + err.Error() + ")"
	}
	e.Connect = link
	return e
}

// userConn returns cl's connection to the per-user upstream whose shared
// connection is shared, opening it if there is none: never more than one
// per caller and upstream, never more than server.max_children_per_caller
// of one caller's, nor more than server.max_sessions in all.
func (a *Aggregator) userConn(ctx context.Context, cl Client, shared *upstream.Upstream) (*upstream.Upstream, error) {
	name, who := shared.Name(), cl.Caller()
	if !identified(who) {
		return nil, &UpstreamError{Upstream: name, Anonymous: true, Err: fmt.Errorf("upstream %q: %w", name, ErrNoIdentity)}
	}
	cfg := shared.Config()
	if cfg.Credentials == configs.CredentialsExchange {
		return a.exchangeConn(ctx, who, shared) // exchange.go
	}
	s := a.users
	k := userKey{name, who}
	s.mu.Lock()
	uc := s.conns[k]
	if uc != nil && uc.shared == shared {
		uc.last = time.Now()
		s.mu.Unlock()
		return a.awaitUser(ctx, uc)
	}
	s.mu.Unlock()
	var err error

	// Nothing is opened, and nothing sent upstream, for a caller with no
	// stored login.
	if st, err := a.userLogin(cfg, who).Status(); err != nil || !st.LoggedIn {
		return nil, a.notConnected(name, who, "no stored login")
	}

	uc, err = a.openUserConn(k, oauth.UserKey(a.loginIdentity(who)), nil, shared)
	if err != nil {
		return nil, err
	}
	return a.awaitUser(ctx, uc)
}

// listingPrefix starts the key of a listing connection (userKey.who):
// one made with a stored user login, for the catalog of a per-user
// upstream without an operator login. No caller is named so (identified
// refuses it): no call ever goes over it.
const listingPrefix = "listing:"

// openUserConn returns the connection under k, opening it (without
// waiting for it) with the login of the user whose UserKey is hash. A
// caller's connection counts in its share and the total; a listing
// connection (k.who starts with listingPrefix) in neither.
func (a *Aggregator) openUserConn(k userKey, hash string, src *exchangeSource, shared *upstream.Upstream) (*userConn, error) {
	s := a.users
	name, who := k.name, k.who
	listing := strings.HasPrefix(who, listingPrefix)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("upstream %q: viewmux is shutting down: %w", name, upstream.ErrDown)
	}
	uc := s.conns[k]
	if uc != nil && uc.shared != shared {
		s.closeConn(a, k, uc) // a reload restarted the upstream with another config
		uc = nil
	}
	if uc != nil {
		uc.last = time.Now()
		return uc, nil
	}
	if !listing {
		set := a.set.Load()
		if max := set.cfg.Server.MaxChildrenPerCaller; max > 0 && s.byWho[who] >= max {
			return nil, fmt.Errorf("upstream %q: %w: server.max_children_per_caller (%d) per-user connections of this caller are open; retry later", name, ErrCallerShare, max)
		}
		if max := set.cfg.Server.MaxSessions; max > 0 && len(s.conns) >= max {
			return nil, fmt.Errorf("upstream %q: %w: server.max_sessions (%d) per-user connections are open; retry later", name, upstream.ErrDown, max)
		}
		s.byWho[who]++
	}
	uc = &userConn{shared: shared, ready: make(chan struct{}), who: who, last: time.Now(), src: src}
	user := oauth.Options{UserKey: hash}
	if src != nil {
		user.Source = src.token
	}
	// The link's session is a name of the user's, never a client
	// session's: what the connection sends outside a call (log messages,
	// resource updates) reaches no other caller.
	short := hash[:16]
	uc.u = a.newConnFor(shared.Config(), "user:"+short, user, a.log.With("user", short), func(*upstream.Upstream) { a.rebuild() })
	s.conns[k] = uc
	if !s.sweeping {
		s.sweeping = true
		s.wg.Go(a.sweepLoop)
	}
	s.wg.Go(func() {
		defer close(uc.ready)
		if err := uc.u.Start(context.Background()); err != nil {
			a.log.Warn("per-user connection failed to start; retrying in the background", "upstream", name, "user", short, "error", err)
		}
	})
	if listing {
		a.log.Info("per-user upstream listed with a stored user login (no operator login)", "upstream", name, "user", short)
	} else {
		a.log.Info("per-user connection opened", "upstream", name, "user", short)
	}
	return uc, nil
}

// openListing opens, for each per-user upstream whose shared connection
// has no catalog (no operator login), a listing connection with its most
// recently stored user login, unless one is open (and its login still
// works). Start, reloads and each finished connect call it: the listing
// outlives any user's own connection, which closes when idle.
func (a *Aggregator) openListing() {
	for _, u := range a.set.Load().ups {
		cfg := u.Config()
		if !userListed(cfg) || u.Catalog() != nil {
			continue
		}
		s := a.users
		s.mu.Lock()
		open := false
		for k, uc := range s.conns {
			if k.name != cfg.Name || !strings.HasPrefix(k.who, listingPrefix) {
				continue
			}
			if h := uc.u.Health(); uc.shared != u || h.State != upstream.StateUp && errors.Is(h.LastError, upstream.ErrNeedsLogin) {
				s.closeConn(a, k, uc) // its login no longer works: the newest stored one lists
				continue
			}
			open = true
		}
		s.mu.Unlock()
		if open {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		users, err := a.newLogin(cfg, oauth.Options{}).Store().Users(ctx, cfg.Name)
		cancel()
		if err != nil {
			a.log.Warn("per-user upstream: its stored logins cannot be listed", "upstream", cfg.Name, "error", err)
			continue
		}
		if len(users) == 0 {
			continue
		}
		if _, err := a.openUserConn(userKey{cfg.Name, listingPrefix + users[0]}, users[0], nil, u); err != nil {
			a.log.Warn("per-user upstream: no listing connection", "upstream", cfg.Name, "error", err)
		}
	}
}

// awaitUser waits (within ctx) for uc's first connection attempt. A
// connection down for want of a usable login is closed, and the caller
// told to connect again.
func (a *Aggregator) awaitUser(ctx context.Context, uc *userConn) (*upstream.Upstream, error) {
	select {
	case <-uc.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if h := uc.u.Health(); h.State != upstream.StateUp && errors.Is(h.LastError, upstream.ErrNeedsLogin) {
		a.dropUserConn(uc)
		return nil, a.notConnected(uc.u.Name(), uc.who, "the upstream refused the stored login")
	}
	return uc.u, nil
}

// dropUserConn closes uc if it is still open.
func (a *Aggregator) dropUserConn(uc *userConn) {
	s := a.users
	s.mu.Lock()
	defer s.mu.Unlock()
	k := userKey{uc.u.Name(), uc.who}
	if s.conns[k] == uc {
		s.closeConn(a, k, uc)
	}
}

// closeConn forgets and closes uc (in the background). s.mu is held.
func (s *userConns) closeConn(a *Aggregator, k userKey, uc *userConn) {
	delete(s.conns, k)
	if !strings.HasPrefix(uc.who, listingPrefix) { // a listing connection is not counted
		if n := s.byWho[uc.who] - 1; n > 0 {
			s.byWho[uc.who] = n
		} else {
			delete(s.byWho, uc.who)
		}
	}
	s.wg.Go(func() {
		if err := uc.u.Close(); err != nil {
			a.log.Warn("closing a per-user connection", "upstream", uc.u.Name(), "error", err)
			s.mu.Lock()
			s.errs = multierror.Append(s.errs, fmt.Errorf("upstream %q: close a per-user connection: %w", uc.u.Name(), err))
			s.mu.Unlock()
		}
		a.rebuild() // its catalog may have been the upstream's listing
	})
}

// sweepUsers closes the per-user connections with no call in flight that
// were last used longer ago than the idle timeout.
func (a *Aggregator) sweepUsers(now time.Time) {
	s := a.users
	cfg := a.set.Load().cfg
	idle := max(cfg.Server.SessionIdleTimeout, userIdleFloor)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, uc := range s.conns {
		if strings.HasPrefix(k.who, listingPrefix) {
			continue // the catalog's: kept while the upstream is
		}
		if now.Sub(uc.last) > max(idle, 2*uc.u.Config().CallTimeout) && a.relay.inflightCount(uc.u) == 0 {
			s.closeConn(a, k, uc)
			a.log.Info("per-user connection closed: idle", "upstream", k.name, "user", oauth.UserKey(a.loginIdentity(k.who))[:16])
		}
	}
}

// sweepLoop runs sweepUsers every minute until close.
func (a *Aggregator) sweepLoop() {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-a.users.stop:
			return
		case now := <-t.C:
			a.sweepUsers(now)
		}
	}
}

// retireUserConns closes the per-user connections whose upstream a reload
// removed, restarted with another config, or made shared.
func (a *Aggregator) retireUserConns(set *upstreamSet) {
	s := a.users
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == set {
		return
	}
	s.seen = set
	for k, uc := range s.conns {
		if u := set.byName[k.name]; u == uc.shared && u.Config().PerUser() {
			continue
		}
		s.closeConn(a, k, uc)
	}
}

// userCatalog returns the catalog of the per-user upstream whose shared
// connection is shared from one of its users' connections that is up
// (the most recently used), for an upstream whose shared connection has
// none (no operator login). Connections opened for another config of the
// upstream (before a reload, not yet retired) do not count.
func (a *Aggregator) userCatalog(shared *upstream.Upstream) (*upstream.Catalog, upstream.State) {
	s := a.users
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *userConn
	for k, uc := range s.conns {
		if k.name != shared.Name() || uc.shared != shared || uc.u.Catalog() == nil {
			continue
		}
		if best == nil || uc.last.After(best.last) {
			best = uc
		}
	}
	if best == nil {
		return nil, 0
	}
	return best.u.Catalog(), best.u.State()
}

// UserConns returns how many per-user connections are open (or opening).
func (a *Aggregator) UserConns() int {
	s := a.users
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// close closes every per-user connection and waits for them.
func (s *userConns) close(a *Aggregator) error {
	s.mu.Lock()
	if !s.closed {
		close(s.stop)
	}
	s.closed = true
	for k, uc := range s.conns {
		delete(s.conns, k)
		s.wg.Go(func() {
			if err := uc.u.Close(); err != nil {
				s.mu.Lock()
				s.errs = multierror.Append(s.errs, fmt.Errorf("upstream %q: close a per-user connection: %w", uc.u.Name(), err))
				s.mu.Unlock()
			}
		})
	}
	clear(s.byWho)
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs.ErrorOrNil()
}

// connectPath is where a user connects its account to a per-user
// upstream (the front door serves it; sessions/connect.go).
const connectPath = "/oauth/connect/"

// ConnectLink returns the link a caller who follows it in a browser
// connects its account to the per-user upstream name with: the public
// URL's /oauth/connect/NAME with a fresh ticket, good once and for ten
// minutes, bound to who, kept in the state store (any replica takes it).
func (a *Aggregator) ConnectLink(name, who string) (string, error) {
	base, ok := a.set.Load().cfg.PublicBase()
	if !ok {
		return "", errors.New("no public URL: set server.public_url")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t := state.NewKey()
	if err := a.State().PutOnce(ctx, ticketNS, who, t, []byte(name), connectLimits); err != nil {
		return "", fmt.Errorf("connect ticket: %w", err)
	}
	return base + connectPath + url.PathEscape(name) + "?ticket=" + url.QueryEscape(t), nil
}
