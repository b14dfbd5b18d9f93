package aggregator

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream"
)

// scopeConfig is one stdio upstream of the given scope whose command does
// not exist: every connection attempt fails at once, which is all the
// bookkeeping tests need (the integration tests run real children).
func scopeConfig(t *testing.T, scope string) *configs.Config {
	uc := &configs.Upstream{Name: "s", Prefix: "s", Transport: configs.TransportStdio,
		Command: filepath.Join(t.TempDir(), "no-such-server"), Scope: scope,
		ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second}
	return &configs.Config{Upstreams: []*configs.Upstream{uc}}
}

// TestSessionConnections checks the connections of a scope = "session"
// upstream: one per session however many requests race to open it, none
// for a request outside any session or for a shared upstream, closed by
// EndSession, never reopened by a request racing with the session's end,
// and all closed by Close.
func TestSessionConnections(t *testing.T) {
	a := New(scopeConfig(t, configs.ScopeSession), Options{})
	defer a.Close()
	shared, _ := a.upstream("s")
	ctx := context.Background()

	var wg sync.WaitGroup
	got := make([]*upstream.Upstream, 8)
	for i := range got {
		wg.Go(func() {
			u, _, err := a.connFor(ctx, &testClient{session: "A"}, "s")
			if err != nil {
				t.Errorf("connFor A: %v", err)
			}
			got[i] = u
		})
	}
	wg.Wait()
	for _, u := range got {
		if u != got[0] || u == shared {
			t.Fatalf("session A's requests went over %p, %p, … (shared %p): want one connection of its own", got[0], u, shared)
		}
	}
	b, _, err := a.connFor(ctx, &testClient{session: "B"}, "s")
	if err != nil || b == got[0] || b == shared {
		t.Fatalf("session B's connection = %p, %v; A's is %p, shared %p", b, err, got[0], shared)
	}
	if u, _, err := a.connFor(ctx, &testClient{}, "s"); err != nil || u != shared {
		t.Errorf("a request outside any session went over %p, %v; want the shared %p", u, err, shared)
	}
	if n := a.SessionConns(); n != 2 {
		t.Errorf("SessionConns = %d, want 2", n)
	}

	a.EndSession("A")
	a.EndSession("A") // again: harmless
	if n := a.SessionConns(); n != 1 {
		t.Errorf("SessionConns after A ended = %d, want 1", n)
	}
	if st := got[0].State(); st != upstream.StateClosed {
		// EndSession closes in the background; Close below waits for it.
		a.scoped.wg.Wait()
		if st := got[0].State(); st != upstream.StateClosed {
			t.Errorf("A's connection is %s after its session ended, want closed", st)
		}
	}
	if u, _, err := a.connFor(ctx, &testClient{session: "A"}, "s"); !errors.Is(err, errSessionEnded) {
		t.Errorf("a request of the ended session A got %p, %v; want errSessionEnded", u, err)
	}

	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if st := b.State(); st != upstream.StateClosed {
		t.Errorf("B's connection is %s after Close, want closed", st)
	}
	if _, _, err := a.connFor(ctx, &testClient{session: "C"}, "s"); !errors.Is(err, upstream.ErrDown) {
		t.Errorf("a new session's request after Close: %v, want ErrDown", err)
	}
}

// TestSharedScopeOpensNothing checks that a shared upstream serves every
// session over its one connection, and that ending sessions then records
// nothing.
func TestSharedScopeOpensNothing(t *testing.T) {
	a := New(scopeConfig(t, configs.ScopeShared), Options{})
	defer a.Close()
	shared, _ := a.upstream("s")
	for _, s := range []string{"A", "B"} {
		if u, _, err := a.connFor(context.Background(), &testClient{session: s}, "s"); err != nil || u != shared {
			t.Errorf("session %s: %p, %v; want the shared %p", s, u, err, shared)
		}
	}
	for range 1000 {
		a.EndSession("A")
		a.EndSession(randomID())
	}
	if n := a.SessionConns(); n != 0 || len(a.scoped.ended) != 0 {
		t.Errorf("SessionConns = %d, ended sessions kept = %d: want 0, 0", n, len(a.scoped.ended))
	}
}

// TestEndedSessionsBounded checks that the record of ended sessions stays
// within maxEnded however many sessions end.
func TestEndedSessionsBounded(t *testing.T) {
	a := New(scopeConfig(t, configs.ScopeSession), Options{})
	defer a.Close()
	for range 3 * maxEnded {
		a.EndSession(randomID())
	}
	if n, q := len(a.scoped.ended), len(a.scoped.order); n > maxEnded || q != n {
		t.Errorf("ended sessions kept: %d (queue %d), want at most %d", n, q, maxEnded)
	}
}

var idSeq atomic.Int64

// randomID returns a session id no other call returned.
func randomID() string { return "session-" + strconv.FormatInt(idSeq.Add(1), 10) }

// TestReloadRetiresSessionConnections checks that a reload that changes a
// scope = "session" upstream's config, or removes it, closes the sessions'
// connections to it: they are not left running the old config.
func TestReloadRetiresSessionConnections(t *testing.T) {
	cfg := scopeConfig(t, configs.ScopeSession)
	a := New(cfg, Options{})
	defer a.Close()
	ctx := context.Background()
	open := func(session string) *upstream.Upstream {
		u, _, err := a.connFor(ctx, &testClient{session: session}, "s")
		if err != nil {
			t.Fatalf("connFor %s: %v", session, err)
		}
		return u
	}
	first := open("A")
	a.Reload(ctx, cfg) // the same config: nothing changes
	if n := a.SessionConns(); n != 1 || open("A") != first {
		t.Fatalf("after a reload that changed nothing: %d connections, A's replaced: %v", n, open("A") != first)
	}

	changed := *cfg.Upstreams[0]
	changed.CallTimeout = 7 * time.Second
	a.Reload(ctx, &configs.Config{Upstreams: []*configs.Upstream{&changed}})
	if n := a.SessionConns(); n != 0 {
		t.Errorf("after the upstream's config changed, %d session connections are left, want 0", n)
	}
	a.scoped.wg.Wait()
	if st := first.State(); st != upstream.StateClosed {
		t.Errorf("A's old connection is %s, want closed", st)
	}
	second := open("A")
	if second == first || second.Config().CallTimeout != 7*time.Second {
		t.Errorf("A's new connection: %p (old %p), call_timeout %s: want a new one with the new config", second, first, second.Config().CallTimeout)
	}

	a.Reload(ctx, &configs.Config{})
	if n := a.SessionConns(); n != 0 {
		t.Errorf("after the upstream was removed, %d session connections are left, want 0", n)
	}
}

// TestSessionConnectionShare: the sessions of one caller hold at most
// server.max_children_per_caller scope = "session" connections, over every
// upstream. At its share a new one first closes the caller's least recently
// used idle connection (no request holds it, no resource is subscribed on
// it); only when every one is busy does connFor fail with ErrCallerShare
// naming the limit, opening nothing. Another caller's connections, idle or
// not, are never reclaimed, and a session's end gives its connections back.
func TestSessionConnectionShare(t *testing.T) {
	cfg := scopeConfig(t, configs.ScopeSession)
	second := *cfg.Upstreams[0]
	second.Name, second.Prefix = "t", "t"
	cfg.Upstreams = append(cfg.Upstreams, &second)
	cfg.Server.MaxChildrenPerCaller = 2
	a := New(cfg, Options{})
	defer a.Close()
	ctx := context.Background()
	guest := func(session string) Client { return &testClient{session: session, caller: "token:guest"} }
	open := func(cl Client, name string) (*upstream.Upstream, func()) {
		t.Helper()
		u, done, err := a.connFor(ctx, cl, name)
		if err != nil {
			t.Fatalf("connFor %s %s: %v", cl.Session(), name, err)
		}
		return u, done
	}
	// The admin's connection is the least recently used of all, and idle.
	admin, adminDone := open(&testClient{session: "Z", caller: "token:admin"}, "s")
	adminDone()

	as, asDone := open(guest("A"), "s")
	at, atDone := open(guest("A"), "t")
	_, _, err := a.connFor(ctx, guest("B"), "s")
	if !errors.Is(err, ErrCallerShare) || !strings.Contains(err.Error(), "server.max_children_per_caller (2)") {
		t.Fatalf("a third connection of the guest's sessions while both are busy: %v; want ErrCallerShare naming the limit", err)
	}
	if n := a.SessionConns(); n != 3 {
		t.Fatalf("SessionConns = %d after a refusal, want 3", n)
	}

	// Both idle, A's "s" the least recently used: B takes its place.
	asDone()
	atDone()
	_, atDone = open(guest("A"), "t") // used again: now the most recent
	atDone()
	bs, bsDone := open(guest("B"), "s")
	a.scoped.wg.Wait()
	if st := as.State(); st != upstream.StateClosed {
		t.Errorf("A's least recently used idle connection is %s, want closed (reclaimed)", st)
	}
	if st := at.State(); st == upstream.StateClosed {
		t.Error("A's more recently used connection was closed; want only the least recently used one")
	}
	if a.openSessionConn("A", "s") != nil {
		t.Error("A's reclaimed connection is still listed as A's")
	}
	if got := a.ReclaimedSessionConns(); got != 1 {
		t.Errorf("ReclaimedSessionConns = %d, want 1", got)
	}

	// A resource subscribed on A's "t" keeps it: with B's busy, A's next
	// connection to "s" is refused rather than end that subscription.
	sc := a.openSessionConn("A", "t")
	a.scoped.subscribed(sc, 1)
	a.scoped.release(sc)
	if _, _, err := a.connFor(ctx, guest("A"), "s"); !errors.Is(err, ErrCallerShare) {
		t.Fatalf("a connection past the share whose idle one has a subscription: %v; want ErrCallerShare", err)
	}
	bsDone()
	// B's is idle now: A reopens its own "s" in B's place, within the share.
	reopened, done := open(guest("A"), "s")
	done()
	a.scoped.wg.Wait()
	if reopened == as || bs.State() != upstream.StateClosed || at.State() == upstream.StateClosed {
		t.Errorf("A's reopened connection: new %v; B's is %s (want closed), A's subscribed one %s (want open)", reopened != as, bs.State(), at.State())
	}
	if st := admin.State(); st == upstream.StateClosed {
		t.Error("the admin's idle connection was reclaimed for the guest")
	}

	a.EndSession("A")
	if _, done := open(guest("B"), "s"); done == nil {
		t.Fatal("connFor returned no done func")
	}
}
