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
			u, err := a.connFor(ctx, &testClient{session: "A"}, "s")
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
	b, err := a.connFor(ctx, &testClient{session: "B"}, "s")
	if err != nil || b == got[0] || b == shared {
		t.Fatalf("session B's connection = %p, %v; A's is %p, shared %p", b, err, got[0], shared)
	}
	if u, err := a.connFor(ctx, &testClient{}, "s"); err != nil || u != shared {
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
	if u, err := a.connFor(ctx, &testClient{session: "A"}, "s"); !errors.Is(err, errSessionEnded) {
		t.Errorf("a request of the ended session A got %p, %v; want errSessionEnded", u, err)
	}

	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if st := b.State(); st != upstream.StateClosed {
		t.Errorf("B's connection is %s after Close, want closed", st)
	}
	if _, err := a.connFor(ctx, &testClient{session: "C"}, "s"); !errors.Is(err, upstream.ErrDown) {
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
		if u, err := a.connFor(context.Background(), &testClient{session: s}, "s"); err != nil || u != shared {
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
		u, err := a.connFor(ctx, &testClient{session: session}, "s")
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
// upstream; past it connFor fails with ErrCallerShare naming the limit and
// opens nothing, another caller still opens one, and a session's end gives
// its connections back.
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
	for _, name := range []string{"s", "t"} {
		if _, err := a.connFor(ctx, guest("A"), name); err != nil {
			t.Fatalf("connFor A %s: %v", name, err)
		}
	}
	_, err := a.connFor(ctx, guest("B"), "s")
	if !errors.Is(err, ErrCallerShare) || !strings.Contains(err.Error(), "server.max_children_per_caller (2)") {
		t.Fatalf("a third connection of the guest's sessions: %v; want ErrCallerShare naming the limit", err)
	}
	if n := a.SessionConns(); n != 2 {
		t.Fatalf("SessionConns = %d after a refusal, want 2", n)
	}
	if _, err := a.connFor(ctx, &testClient{session: "C", caller: "token:admin"}, "s"); err != nil {
		t.Fatalf("another caller's connection: %v", err)
	}
	a.EndSession("A")
	if _, err := a.connFor(ctx, guest("B"), "s"); err != nil {
		t.Fatalf("the guest's connection after its session ended: %v", err)
	}
}
