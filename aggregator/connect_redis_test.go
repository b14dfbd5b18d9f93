package aggregator

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// fleet returns n aggregators of one per-user config, each on its own
// handle of one redis-server, as replicas of one gateway are.
func fleet(t *testing.T, srv *statetest.Redis, upstreamURL string, n int) []*Aggregator {
	t.Helper()
	cfg := perUserConfig(t, upstreamURL)
	cfg.State.URL = srv.URL()
	cfg.State.EncryptionKey = bytes.Repeat([]byte{7}, 32)
	var as []*Aggregator
	for range n {
		a := New(cfg, Options{State: srv.Open(t, state.RedisOptions{Timeout: 300 * time.Millisecond})})
		t.Cleanup(func() { a.Close() })
		as = append(as, a)
	}
	return as
}

func ticketOf(t *testing.T, link string) string {
	t.Helper()
	tk, err := url.QueryUnescape(link[strings.Index(link, "ticket=")+len("ticket="):])
	if err != nil || tk == "" {
		t.Fatalf("link %q: no ticket", link)
	}
	return tk
}

// TestConnectAcrossReplicas: the link is minted on A, its page read on B,
// confirmed on B, and the callback lands on C; the ticket and the pending
// login are each taken once in the fleet, and every replica then has the
// user's login. The store holds the pending login sealed.
func TestConnectAcrossReplicas(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	s := oauthtest.New(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	rs := fleet(t, srv, s.URL(), 3)
	a, b, c := rs[0], rs[1], rs[2]
	ctx := context.Background()

	link, err := a.ConnectLink("gh", "oauth:alice")
	if err != nil {
		t.Fatal(err)
	}
	ticket := ticketOf(t, link)
	if up, who, ok, err := b.ConnectTicket(ticket); !ok || err != nil || up != "gh" || who != "oauth:alice" {
		t.Fatalf("the ticket read on another replica: %q %q %v %v", up, who, ok, err)
	}
	authURL, nonce, err := b.BeginConnect(ctx, "gh", ticket)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.BeginConnect(ctx, "gh", ticket); !errors.Is(err, ErrBadConnect) {
		t.Fatalf("the ticket taken again on another replica: %v", err)
	}

	dump, err := srv.Dump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sealed := 0
	for k, vs := range dump {
		for _, v := range vs {
			if strings.Contains(v, "verifier") || strings.Contains(v, nonce) {
				t.Errorf("key %s holds the pending login in plain text", k)
			}
			if strings.HasPrefix(v, "vmx1.") {
				sealed++
			}
		}
	}
	if sealed == 0 {
		t.Fatalf("no sealed pending login in the store: %v", dump)
	}

	cb := approveAs(t, authURL, "alice")
	if up, who, err := c.FinishConnect(ctx, cb, nonce); err != nil || up != "gh" || who != "oauth:alice" {
		t.Fatalf("the callback on a third replica: %q %q %v", up, who, err)
	}
	if _, _, err := a.FinishConnect(ctx, cb, nonce); !errors.Is(err, ErrBadConnect) {
		t.Fatalf("the callback replayed on another replica: %v", err)
	}
	uc := a.set.Load().byName["gh"].Config()
	for i, r := range rs {
		if st, err := r.userLogin(uc, "oauth:alice").Status(); !st.LoggedIn {
			t.Fatalf("replica %d does not see alice's login: %v", i, err)
		}
		if st, _ := r.userLogin(uc, "oauth:bob").Status(); st.LoggedIn {
			t.Fatalf("replica %d: bob has alice's login", i)
		}
	}
	dump, _ = srv.Dump(ctx)
	for k, vs := range dump {
		for _, v := range vs {
			if strings.Contains(v, "access_token") {
				t.Errorf("key %s holds a login in plain text", k)
			}
		}
	}
}

// TestConnectBoundsAcrossReplicas: an identity holds 4 tickets in the
// whole fleet, whichever replicas minted them; with the store down a
// link cannot be had, nor a login begun, and the error says the store is
// down; once it is back, links work again.
func TestConnectBoundsAcrossReplicas(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	s := oauthtest.New(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	rs := fleet(t, srv, s.URL(), 2)
	var tickets []string
	for i := range 6 {
		link, err := rs[i%2].ConnectLink("gh", "oauth:alice")
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, ticketOf(t, link))
	}
	for i, tk := range tickets {
		_, _, ok, err := rs[(i+1)%2].ConnectTicket(tk)
		if want := i >= 2; ok != want || err != nil {
			t.Fatalf("ticket %d of 6: held %v (%v), want %v: 4 per identity in the fleet", i, ok, err, want)
		}
	}
	if _, err := rs[0].ConnectLink("gh", "oauth:bob"); err != nil {
		t.Fatalf("another identity's ticket: %v", err)
	}

	srv.Stop()
	if _, err := rs[0].ConnectLink("gh", "oauth:alice"); !state.IsDown(err) {
		t.Fatalf("a link with the store down: %v; want the store named down", err)
	}
	if _, _, _, err := rs[1].ConnectTicket(tickets[5]); !state.IsDown(err) {
		t.Fatalf("reading a ticket with the store down: %v", err)
	}
	if _, _, err := rs[1].BeginConnect(context.Background(), "gh", tickets[5]); !state.IsDown(err) {
		t.Fatalf("confirming with the store down: %v", err)
	}
	srv.Start() // without persistence: the tickets are gone, the store is not
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := rs[0].ConnectLink("gh", "oauth:alice")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no link after the store came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestListingAcrossReplicas: with no operator login, a per-user
// upstream's tools are listed on every replica once a user has connected
// through any one of them: B lists them from the login alice made
// through A, without a connect of its own.
func TestListingAcrossReplicas(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	rs := lookupUpstream(t)
	as := fleet(t, srv, rs.URL(), 2)
	a, b := as[0], as[1]
	ctx := context.Background()
	for _, r := range as {
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if !listsOnly("gh__connect")(r.Snapshot()) {
			t.Fatalf("before anyone connected: %v, want the placeholder only", toolNames(r.Snapshot()))
		}
	}
	link, err := a.ConnectLink("gh", "oauth:alice")
	if err != nil {
		t.Fatal(err)
	}
	authURL, nonce, err := a.BeginConnect(ctx, "gh", ticketOf(t, link))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.FinishConnect(ctx, approveAs(t, authURL, "alice"), nonce); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the tools listed on A, where alice connected", func() bool { return listsOnly("gh__lookup")(a.Snapshot()) })
	waitFor(t, "the tools listed on B, from the login in the store", func() bool { return listsOnly("gh__lookup")(b.Snapshot()) })
}

// TestListingKeptAcrossReplicas: the listing alice's connection made
// through A is kept in the fleet's store, sealed; a replica started
// afterwards lists the upstream's tools at once, though no user's login
// is left in the store to list them with. A plain listing written in the
// store by someone without the key is refused.
func TestListingKeptAcrossReplicas(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	rs := lookupUpstream(t)
	as := fleet(t, srv, rs.URL(), 3)
	a, c, d := as[0], as[1], as[2]
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	link, err := a.ConnectLink("gh", "oauth:alice")
	if err != nil {
		t.Fatal(err)
	}
	connectAs(t, a, link, "alice")
	waitFor(t, "the tools listed on A", func() bool { return listsOnly("gh__lookup")(a.Snapshot()) })
	var kept []string
	waitFor(t, "the listing kept in the store", func() bool {
		dump, err := srv.Dump(ctx)
		kept = dump["viewmux:doc:"+listingKey("gh")]
		return err == nil && kept != nil
	})
	if v := strings.Join(kept, " "); !strings.Contains(v, "vmx1.") || strings.Contains(v, "lookup") {
		t.Fatalf("the stored listing is not sealed: %q", kept)
	}
	dump, _ := srv.Dump(ctx)
	for k := range dump {
		if strings.HasPrefix(k, "viewmux:doc:oauth-gh.user-") {
			if _, err := srv.Do(ctx, "DEL", k); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !listsOnly("gh__lookup")(c.Snapshot()) {
		t.Fatalf("a replica started after: %v, want gh__lookup from the stored listing", toolNames(c.Snapshot()))
	}

	forged := `{"source":"` + listingSource(c.set.Load().byName["gh"].Config()) + `","tools":[{"name":"forged","inputSchema":{"type":"object"}}]}`
	if _, err := srv.Do(ctx, "HSET", "viewmux:doc:"+listingKey("gh"), "v", forged); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !listsOnly("gh__connect")(d.Snapshot()) {
		t.Fatalf("a replica started on a forged plain listing: %v, want the placeholder", toolNames(d.Snapshot()))
	}
}
