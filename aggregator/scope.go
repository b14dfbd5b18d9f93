package aggregator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// This file holds the connections of scope = "session" upstreams: one per
// client session and upstream (one child process for stdio), opened on the
// session's first request to that upstream and closed when the session ends
// or viewmux shuts down. The catalog still comes from the upstream's shared
// connection, and a request outside any session (a 2026-07-28 stateless one)
// uses that. Because every call on a session's connection is that session's,
// a server→client request arriving on it (sampling, elicitation, roots) has
// exactly one possible owner, whatever the transport (relay.owner).
//
// A caller's sessions hold at most server.max_children_per_caller of these
// connections. A caller at its share that needs one more gives up its own
// least recently used idle one: no request using it and no resource
// subscribed on it. That session keeps working: its next request to the
// upstream opens a new connection, as its first did. Only when every one is
// busy is the request refused (ErrCallerShare). Another caller's
// connections are never touched, so one caller's share costs nobody else.

// ErrCallerShare is returned, wrapped and naming the upstream and the
// limit, for a request that would open a scope = "session" connection
// past its caller's share (server.max_children_per_caller) when none of
// that caller's connections is idle, so none can be reclaimed.
var ErrCallerShare = errors.New("over this caller's share")

// errSessionEnded is returned for a request of a session that ended while
// the request was on its way to a scope = "session" upstream.
var errSessionEnded = errors.New("the client session has ended")

// Bounds of the record of ended sessions, which keeps a request racing
// with its session's end from opening a connection nobody would close: an
// entry is kept for endedTTL (far longer than a request takes from the
// session check to its upstream), and at most maxEnded entries are kept.
const (
	endedTTL = time.Minute
	maxEnded = 1 << 14
)

// sessionConns are the connections of scope = "session" upstreams. It is
// safe for concurrent use.
type sessionConns struct {
	mu     sync.Mutex
	conns  map[string]map[string]*sessionConn   // session → upstream name → its connection
	ended  map[string]struct{}                  // sessions that ended recently
	order  []endedSession                       // the same, oldest first
	closed bool                                 // viewmux is shutting down: no new connection
	seen   *upstreamSet                         // the upstreams retire last checked against
	errs   *multierror.Error                    // of closes, reported by close
	byWho  map[string]map[*sessionConn]struct{} // open connections by sessionConn.who; no empty sets
	clock  uint64                               // counts uses, for sessionConn.used
	// reclaimed counts the idle connections closed for another of their
	// caller's sessions (reclaimLocked).
	reclaimed uint64

	wg sync.WaitGroup // starts and closes in progress; Add only under mu, before closed
}

type endedSession struct {
	id string
	at time.Time
}

// sessionConn is one session's connection to one upstream.
type sessionConn struct {
	// shared is the upstream's shared connection when this one was opened;
	// a reload that replaced it (a changed config) makes this one stale.
	shared  *upstream.Upstream
	u       *upstream.Upstream
	ready   chan struct{} // closed once the first connection attempt ended
	who     string        // the caller whose share it counts in (Client.Caller)
	session string        // the client session it belongs to

	// Guarded by sessionConns.mu: what keeps it from being reclaimed, and
	// when it was last used.
	busy int    // requests holding it (sessionConn … release)
	subs int    // resources subscribed on it (Subscribe, Unsubscribe)
	used uint64 // sessionConns.clock when it was last taken or released
}

func newSessionConns() *sessionConns {
	return &sessionConns{conns: make(map[string]map[string]*sessionConn), ended: make(map[string]struct{}), byWho: make(map[string]map[*sessionConn]struct{})}
}

// connFor returns the connection a request of cl to the upstream name goes
// over: the session's own for a scope = "session" upstream, opened on its
// first use, else the shared one. The request calls done once it no longer
// uses the connection (its result passed): until then a session's own
// connection is busy and never reclaimed. done is never nil when err is.
func (a *Aggregator) connFor(ctx context.Context, cl Client, name string) (u *upstream.Upstream, done func(), err error) {
	if shared := a.sessionScoped(cl.Session(), name); shared != nil {
		sc, err := a.sessionConn(ctx, cl.Session(), cl.Caller(), shared)
		if err != nil {
			return nil, nil, err
		}
		return sc.u, func() { a.scoped.release(sc) }, nil
	}
	if shared := a.perUser(name); shared != nil {
		u, err = a.userConn(ctx, cl, shared) // peruser.go
	} else {
		u, err = a.upstream(name)
	}
	if err != nil {
		return nil, nil, err
	}
	return u, func() {}, nil
}

// sessionScoped returns the shared connection of the upstream name when a
// request of session to it goes over a connection of the session's own:
// the upstream is scope = "session" and session is not "". Else nil.
func (a *Aggregator) sessionScoped(session, name string) *upstream.Upstream {
	if session == "" {
		return nil
	}
	if u := a.set.Load().byName[name]; u != nil && u.Config().Scope == configs.ScopeSession {
		return u
	}
	return nil
}

// openSessionConn returns session's open connection to the upstream name,
// taken as sessionConn takes it (release it), or nil when it has none; it
// never opens one.
func (a *Aggregator) openSessionConn(session, name string) *sessionConn {
	s := a.scoped
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.conns[session][name]
	if sc != nil {
		s.takeLocked(sc)
	}
	return sc
}

// sessionConn returns session's connection beside shared, opening it if
// it has none: never more than one per session and upstream, and never
// more than server.max_children_per_caller for the sessions of who. At
// that share it first closes who's least recently used idle connection
// (reclaimLocked), and fails with ErrCallerShare only when every one is
// busy. The connection is returned taken: it counts as busy until the
// caller releases it. It waits (within ctx) for the connection's first
// attempt; when that failed, the connection keeps retrying in the
// background and requests meanwhile get the upstream's temporary error.
func (a *Aggregator) sessionConn(ctx context.Context, session, who string, shared *upstream.Upstream) (*sessionConn, error) {
	s := a.scoped
	name := shared.Name()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("upstream %q: viewmux is shutting down: %w", name, upstream.ErrDown)
	}
	if _, gone := s.ended[session]; gone {
		s.mu.Unlock()
		return nil, fmt.Errorf("upstream %q: %w", name, errSessionEnded)
	}
	m := s.conns[session]
	sc := m[name]
	if sc != nil && sc.shared != shared {
		// A reload restarted the upstream with another config: so does the
		// session's connection.
		s.closeConn(a, sc)
		sc = nil
	}
	if sc == nil {
		if max := a.set.Load().cfg.Server.MaxChildrenPerCaller; who != "" && max > 0 && len(s.byWho[who]) >= max {
			if !s.reclaimLocked(a, who, session) {
				s.mu.Unlock()
				return nil, fmt.Errorf("upstream %q: %w: server.max_children_per_caller (%d) scope = \"session\" connections of this caller's sessions are open, each with a request in flight or a resource subscribed; end a session or retry later", name, ErrCallerShare, max)
			}
		}
		if m == nil {
			m = make(map[string]*sessionConn)
			s.conns[session] = m
		}
		sc = &sessionConn{shared: shared, ready: make(chan struct{}), who: who, session: session}
		if who != "" {
			if s.byWho[who] == nil {
				s.byWho[who] = make(map[*sessionConn]struct{})
			}
			s.byWho[who][sc] = struct{}{}
		}
		sc.u = a.newConn(shared.Config(), session, a.log.With("session", session), nil)
		m[name] = sc
		s.wg.Go(func() {
			defer close(sc.ready)
			// Start's ctx bounds only the first attempt, which is bounded
			// by connect_timeout and ended by Close already; a request that
			// gives up waiting must not fail it for the others.
			if err := sc.u.Start(context.Background()); err != nil {
				a.log.Warn("session connection failed to start; retrying in the background", "upstream", name, "session", session, "error", err)
			}
		})
		a.log.Info("session connection opened", "upstream", name, "session", session)
	}
	s.takeLocked(sc)
	s.mu.Unlock()
	select {
	case <-sc.ready:
		return sc, nil
	case <-ctx.Done():
		s.release(sc)
		return nil, ctx.Err()
	}
}

// takeLocked marks sc in use by one more request. The caller holds s.mu.
func (s *sessionConns) takeLocked(sc *sessionConn) {
	sc.busy++
	s.clock++
	sc.used = s.clock
}

// release ends one request's use of sc (sessionConn, openSessionConn). A
// connection closed meanwhile (its session ended) is only counted down.
func (s *sessionConns) release(sc *sessionConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc.busy--
	s.clock++
	sc.used = s.clock
}

// subscribed counts a resource subscribed on sc (delta 1) or no longer
// (-1): a connection with a subscription is never reclaimed, since its
// session would silently stop getting that resource's updates.
func (s *sessionConns) subscribed(sc *sessionConn, delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc.subs = max(0, sc.subs+delta)
}

// reclaimLocked closes who's least recently used idle connection (no
// request holds it, no resource is subscribed on it), one of session's
// own included, so that session may open another within who's share. It
// reports false, closing nothing, when every one of who's connections is
// busy. It looks only at who's connections, at most its share of them.
// The caller holds s.mu.
func (s *sessionConns) reclaimLocked(a *Aggregator, who, session string) bool {
	var lru *sessionConn
	for sc := range s.byWho[who] {
		if sc.busy == 0 && sc.subs == 0 && (lru == nil || sc.used < lru.used) {
			lru = sc
		}
	}
	if lru == nil {
		return false
	}
	name := lru.u.Name()
	if m := s.conns[lru.session]; m[name] == lru {
		delete(m, name)
		if len(m) == 0 {
			delete(s.conns, lru.session)
		}
	}
	s.closeConn(a, lru)
	s.reclaimed++
	a.log.Info("session connection closed: its caller's sessions hold their share of scope = \"session\" connections, and it was their least recently used idle one",
		"upstream", name, "session", lru.session, "caller", a.callerKey(who), "for_session", session)
	return true
}

// callerKey names the caller who in logs without disclosing it: the
// hash prefix its per-user connections are logged under too (userConn).
func (a *Aggregator) callerKey(who string) string {
	return oauth.UserKey(a.loginIdentity(who))[:16]
}

// ReclaimedSessionConns returns how many scope = "session" connections
// have been closed so far to make room for another of their caller's
// sessions (server.max_children_per_caller).
func (a *Aggregator) ReclaimedSessionConns() uint64 {
	s := a.scoped
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reclaimed
}

// closeConn closes sc in the background (a stdio child may take the
// shutdown steps, seconds), and gives back its place in its caller's
// share. The caller holds s.mu and forgets sc.
func (s *sessionConns) closeConn(a *Aggregator, sc *sessionConn) {
	if set := s.byWho[sc.who]; set != nil {
		delete(set, sc)
		if len(set) == 0 {
			delete(s.byWho, sc.who)
		}
	}
	s.wg.Go(func() {
		if err := sc.u.Close(); err != nil {
			a.log.Warn("closing a session's connection", "upstream", sc.u.Name(), "error", err)
			s.mu.Lock()
			s.errs = multierror.Append(s.errs, fmt.Errorf("upstream %q: close a session's connection: %w", sc.u.Name(), err))
			s.mu.Unlock()
		}
	})
}

// retireSessionConns closes the session connections whose upstream a
// reload removed, restarted with another config, or made shared: their
// sessions open new ones on next use, as the config now says. It scans
// only when the set of upstreams changed.
func (a *Aggregator) retireSessionConns(set *upstreamSet) {
	s := a.scoped
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == set {
		return
	}
	s.seen = set
	for id, m := range s.conns {
		for name, sc := range m {
			if u := set.byName[name]; u == sc.shared && u.Config().Scope == configs.ScopeSession {
				continue
			}
			s.closeConn(a, sc)
			delete(m, name)
			a.log.Info("session connection closed: its upstream changed", "upstream", name, "session", id)
		}
		if len(m) == 0 {
			delete(s.conns, id)
		}
	}
}

// EndSession closes the connections the client session id opened to scope
// = "session" upstreams (their children are shut down in the background),
// and keeps the session from opening new ones. The front doors call it
// when a session ends, however it ends; calling it again, or for a session
// that opened none, is harmless.
func (a *Aggregator) EndSession(id string) {
	s := a.scoped
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.conns[id]
	delete(s.conns, id)
	for _, sc := range m {
		s.closeConn(a, sc)
		a.log.Info("session connection closed", "upstream", sc.u.Name(), "session", id)
	}
	if !s.closed && (m != nil || a.hasSessionScope()) {
		s.remember(id, time.Now())
	}
}

// remember records that the session id ended, forgetting records older
// than endedTTL and the oldest past maxEnded. The caller holds s.mu.
func (s *sessionConns) remember(id string, now time.Time) {
	for len(s.order) > 0 && (now.Sub(s.order[0].at) > endedTTL || len(s.order) >= maxEnded) {
		delete(s.ended, s.order[0].id)
		s.order = s.order[1:]
	}
	if _, ok := s.ended[id]; ok {
		return
	}
	s.ended[id] = struct{}{}
	s.order = append(s.order, endedSession{id: id, at: now})
}

// hasSessionScope reports whether any configured upstream is scope =
// "session": only then can a session's end race with opening a connection.
func (a *Aggregator) hasSessionScope() bool {
	for _, uc := range a.set.Load().cfg.Upstreams {
		if uc.Scope == configs.ScopeSession {
			return true
		}
	}
	return false
}

// SessionConns returns how many session connections are open (or opening).
func (a *Aggregator) SessionConns() int {
	s := a.scoped
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.conns {
		n += len(m)
	}
	return n
}

// close closes every session's connections and waits for them and for
// the closes EndSession started. No connection opens afterwards.
func (s *sessionConns) close(a *Aggregator) error {
	s.mu.Lock()
	s.closed = true
	for _, m := range s.conns {
		for _, sc := range m {
			s.closeConn(a, sc)
		}
	}
	s.conns = make(map[string]map[string]*sessionConn)
	s.ended, s.order = make(map[string]struct{}), nil
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs.ErrorOrNil()
}
