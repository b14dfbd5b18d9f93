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
)

// This file holds the connections of scope = "session" upstreams: one per
// client session and upstream (one child process for stdio), opened on the
// session's first request to that upstream and closed when the session ends
// or viewmux shuts down. The catalog still comes from the upstream's shared
// connection, and a request outside any session (a 2026-07-28 stateless one)
// uses that. Because every call on a session's connection is that session's,
// a server→client request arriving on it (sampling, elicitation, roots) has
// exactly one possible owner, whatever the transport (relay.owner).

// ErrCallerShare is returned, wrapped and naming the upstream and the
// limit, for a request that would open a scope = "session" connection
// past its caller's share (server.max_children_per_caller).
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
	conns  map[string]map[string]*sessionConn // session → upstream name → its connection
	ended  map[string]struct{}                // sessions that ended recently
	order  []endedSession                     // the same, oldest first
	closed bool                               // viewmux is shutting down: no new connection
	seen   *upstreamSet                       // the upstreams retire last checked against
	errs   *multierror.Error                  // of closes, reported by close
	byWho  map[string]int                     // open connections by sessionConn.who; no zero entries

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
	shared *upstream.Upstream
	u      *upstream.Upstream
	ready  chan struct{} // closed once the first connection attempt ended
	who    string        // the caller whose share it counts in (Client.Caller)
}

func newSessionConns() *sessionConns {
	return &sessionConns{conns: make(map[string]map[string]*sessionConn), ended: make(map[string]struct{}), byWho: make(map[string]int)}
}

// connFor returns the connection a request of cl to the upstream name goes
// over: the session's own for a scope = "session" upstream, opened on its
// first use, else the shared one.
func (a *Aggregator) connFor(ctx context.Context, cl Client, name string) (*upstream.Upstream, error) {
	if shared := a.sessionScoped(cl.Session(), name); shared != nil {
		return a.sessionConn(ctx, cl.Session(), cl.Caller(), shared)
	}
	if shared := a.perUser(name); shared != nil {
		return a.userConn(ctx, cl, shared) // peruser.go
	}
	return a.upstream(name)
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
// or nil when it has none; it never opens one.
func (a *Aggregator) openSessionConn(session, name string) *upstream.Upstream {
	s := a.scoped
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc := s.conns[session][name]; sc != nil {
		return sc.u
	}
	return nil
}

// sessionConn returns session's connection beside shared, opening it if
// it has none: never more than one per session and upstream, and never
// more than server.max_children_per_caller for the sessions of who
// (ErrCallerShare). It waits
// (within ctx) for the connection's first attempt; when that failed, the
// connection keeps retrying in the background and requests meanwhile get
// the upstream's temporary error.
func (a *Aggregator) sessionConn(ctx context.Context, session, who string, shared *upstream.Upstream) (*upstream.Upstream, error) {
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
		if max := a.set.Load().cfg.Server.MaxChildrenPerCaller; who != "" && max > 0 && s.byWho[who] >= max {
			s.mu.Unlock()
			return nil, fmt.Errorf("upstream %q: %w: server.max_children_per_caller (%d) scope = \"session\" connections of this caller's sessions are open; end a session or retry later", name, ErrCallerShare, max)
		}
		if m == nil {
			m = make(map[string]*sessionConn)
			s.conns[session] = m
		}
		sc = &sessionConn{shared: shared, ready: make(chan struct{}), who: who}
		if who != "" {
			s.byWho[who]++
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
	s.mu.Unlock()
	select {
	case <-sc.ready:
		return sc.u, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// closeConn closes sc in the background (a stdio child may take the
// shutdown steps, seconds), and gives back its place in its caller's
// share. The caller holds s.mu and forgets sc.
func (s *sessionConns) closeConn(a *Aggregator, sc *sessionConn) {
	if sc.who != "" {
		if n := s.byWho[sc.who] - 1; n > 0 {
			s.byWho[sc.who] = n
		} else {
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
