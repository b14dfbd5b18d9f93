package oauth_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// These tests keep logins on a real redis-server, each Client on its own
// handle of it, as replicas of one gateway are.

func sealer(t *testing.T, b byte, old ...byte) *state.Sealer {
	t.Helper()
	k := bytes.Repeat([]byte{b}, 32)
	var olds [][]byte
	for _, o := range old {
		olds = append(olds, bytes.Repeat([]byte{o}, 32))
	}
	s, err := state.NewSealer(k, olds...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// replica is one Client of upstream "lin" on its own handle of srv.
func replica(t *testing.T, srv *statetest.Redis, s *oauthtest.Server, sl *state.Sealer, o oauth.Options) *oauth.Client {
	t.Helper()
	o.State = srv.Open(t, state.RedisOptions{Timeout: 300 * time.Millisecond})
	o.Sealer = sl
	if o.PollInterval == 0 {
		o.PollInterval = 10 * time.Millisecond
	}
	return oauth.New("lin", s.URL(), configs.UpstreamOAuth{}, o)
}

// countLog counts the records of a level.
type countLog struct {
	mu   sync.Mutex
	n    int
	msgs []string
}

func (c *countLog) Enabled(context.Context, slog.Level) bool { return true }
func (c *countLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		c.mu.Lock()
		c.n++
		r.Attrs(func(a slog.Attr) bool { c.msgs = append(c.msgs, r.Message+" "+a.Value.String()); return true })
		c.mu.Unlock()
	}
	return nil
}
func (c *countLog) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *countLog) WithGroup(string) slog.Handler      { return c }
func (c *countLog) errors() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, append([]string(nil), c.msgs...)
}

// TestRedisOneLoginForTheFleet: a login made through one replica is the
// login of another; a logout on one is seen by the other; the store
// holds no token, verifier or secret in plain text.
func TestRedisOneLoginForTheFleet(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	s := oauthtest.New(t, okHandler)
	sl := sealer(t, 1)
	a, b := replica(t, srv, s, sl, oauth.Options{}), replica(t, srv, s, sl, oauth.Options{})
	if _, err := b.Token(context.Background()); !errors.Is(err, oauth.ErrNeedsLogin) {
		t.Fatalf("before any login: %v", err)
	}
	rec := login(t, a)
	eventually(t, "replica b uses a's login", func() bool {
		tok, err := b.Token(context.Background())
		return err == nil && tok == rec.AccessToken
	})
	if resp, err := post(t, b, s, `{"jsonrpc":"2.0","id":1,"method":"ping"}`); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a call through b: %v %v", resp, err)
	}

	dump, err := srv.Dump(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for k, vs := range dump {
		for _, v := range vs {
			for _, secret := range []string{rec.AccessToken, rec.RefreshToken, `"access_token"`} {
				if strings.Contains(v, secret) || strings.Contains(k, secret) {
					t.Errorf("the store's key %s holds %q in plain text", k, secret)
				}
			}
			if strings.HasPrefix(v, "vmx1.") {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("no sealed value in the store: %v", dump)
	}

	if removed, err := b.Logout(); !removed || err != nil {
		t.Fatalf("logout through b: %v %v", removed, err)
	}
	eventually(t, "replica a sees the logout", func() bool {
		_, err := a.Token(context.Background())
		return errors.Is(err, oauth.ErrNeedsLogin)
	})
}

// TestRedisRefreshOnce: two replicas whose shared token is about to
// expire refresh it once between them, under the store's lock, and both
// use the new token.
func TestRedisRefreshOnce(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	s := oauthtest.New(t, okHandler)
	sl := sealer(t, 1)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a, b := replica(t, srv, s, sl, oauth.Options{Now: clock}), replica(t, srv, s, sl, oauth.Options{Now: clock})
	first := login(t, a)
	for _, c := range []*oauth.Client{a, b} {
		if tok, err := c.Token(context.Background()); err != nil || tok != first.AccessToken {
			t.Fatalf("before expiry: %v", err)
		}
	}
	s.Lock()
	s.ExpiresIn = 100_000 // the refreshed token is not refreshed again
	s.Unlock()
	mu.Lock()
	now = now.Add(3590 * time.Second) // within a minute of the first token's expiry
	mu.Unlock()

	var wg sync.WaitGroup
	toks := make([]string, 2)
	errs := make([]error, 2)
	for i, c := range []*oauth.Client{a, b} {
		wg.Go(func() { toks[i], errs[i] = c.Token(context.Background()) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("Token: %v, %v", errs[0], errs[1])
	}
	if toks[0] != toks[1] || toks[0] == first.AccessToken {
		t.Fatalf("tokens after the refresh: equal %v, the first one %v; want one new token for both", toks[0] == toks[1], toks[0] == first.AccessToken)
	}
	s.Lock()
	refreshes := 0
	for _, f := range s.TokenForms {
		if f.Get("grant_type") == "refresh_token" {
			refreshes++
		}
	}
	s.Unlock()
	if refreshes != 1 {
		t.Fatalf("%d refreshes for two replicas, want 1", refreshes)
	}
}

// TestRedisOtherKeyIsNotConnected: a replica configured with another
// encryption key opens no login: its user is not connected, nothing
// reaches the upstream in their name, and one error is logged for any
// number of requests and Clients, naming key ids and no key. A replica
// given the first key as an old key opens it.
func TestRedisOtherKeyIsNotConnected(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	s := oauthtest.New(t, okHandler)
	login(t, replica(t, srv, s, sealer(t, 1), oauth.Options{}))
	s.Lock()
	before := s.Authorized + s.Unauthenticated
	s.Unlock()

	logs := &countLog{}
	shared := &oauth.KeyErrors{}
	for range 2 { // two Clients of one gateway
		c := replica(t, srv, s, sealer(t, 2), oauth.Options{Logger: slog.New(logs), KeyErrors: shared})
		for range 20 {
			if _, err := post(t, c, s, `{}`); !errors.Is(err, oauth.ErrNeedsLogin) || !strings.Contains(err.Error(), "another encryption key") {
				t.Fatalf("a request with another key: %v; want needs login, saying why", err)
			}
			time.Sleep(time.Millisecond) // past the poll interval now and then
		}
		if st, err := c.Status(); st.LoggedIn || err == nil {
			t.Fatalf("Status with another key: %+v %v", st, err)
		}
	}
	s.Lock()
	after := s.Authorized + s.Unauthenticated
	s.Unlock()
	if after != before {
		t.Fatalf("%d requests reached the upstream from a replica that cannot open the login", after-before)
	}
	n, msgs := logs.errors()
	if n != 1 {
		t.Fatalf("%d errors logged, want 1: %q", n, msgs)
	}
	if id1, id2 := sealer(t, 1).ID(), sealer(t, 2).ID(); !strings.Contains(strings.Join(msgs, " "), id1) || !strings.Contains(strings.Join(msgs, " "), id2) {
		t.Errorf("the error %q does not name the key ids %s and %s", msgs, id1, id2)
	}

	rotated := replica(t, srv, s, sealer(t, 2, 1), oauth.Options{})
	if _, err := rotated.Token(context.Background()); err != nil {
		t.Fatalf("with the first key as an old key: %v", err)
	}
}

// TestRedisOutage: with the store stopped, a login held in memory keeps
// working, while a new login fails naming the store; when the store is
// back, a login works again without a new Client or store handle.
func TestRedisOutage(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	s := oauthtest.New(t, okHandler)
	sl := sealer(t, 1)
	a := replica(t, srv, s, sl, oauth.Options{})
	rec := login(t, a)
	fresh := oauth.New("lin", s.URL(), configs.UpstreamOAuth{}, oauth.Options{State: srv.Open(t, state.RedisOptions{Timeout: 300 * time.Millisecond}), Sealer: sl, UserKey: oauth.UserKey("bob")})

	srv.Stop()
	for range 5 {
		if tok, err := a.Token(context.Background()); err != nil || tok != rec.AccessToken {
			t.Fatalf("the login in memory with the store down: %v", err)
		}
		time.Sleep(15 * time.Millisecond) // past the poll interval: a read behind fails
	}
	if resp, err := post(t, a, s, `{"jsonrpc":"2.0","id":1,"method":"ping"}`); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a call with the store down: %v %v", resp, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := fresh.Login(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/callback", Authorize: oauth.AutoApprove(nil)})
	if !state.IsDown(err) || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("a new login with the store down: %v; want an error naming the store", err)
	}
	if _, err := fresh.Token(context.Background()); !errors.Is(err, oauth.ErrNeedsLogin) {
		t.Fatalf("a user with no login in memory, store down: %v; want needs login", err)
	}

	srv.Start()
	eventually(t, "a login once the store is back", func() bool {
		_, err := fresh.Login(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/callback", Authorize: oauth.AutoApprove(nil)})
		return err == nil
	})
	if _, err := fresh.Token(context.Background()); err != nil {
		t.Fatalf("after the store came back: %v", err)
	}
}

// TestPendingCrossesReplicas: a login begun on one replica is finished on
// another from its marshalled form, and a damaged form is refused.
func TestPendingCrossesReplicas(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	s := oauthtest.New(t, okHandler)
	sl := sealer(t, 1)
	a, b := replica(t, srv, s, sl, oauth.Options{}), replica(t, srv, s, sl, oauth.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, authURL, err := a.Begin(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/callback"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := oauth.MarshalPending(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := oauth.UnmarshalPending(raw)
	if err != nil || back.State() != p.State() {
		t.Fatalf("UnmarshalPending: %v", err)
	}
	cb, err := oauth.AutoApprove(nil)(ctx, authURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Finish(ctx, back, cb); err != nil {
		t.Fatalf("Finish on the other replica: %v", err)
	}
	if _, err := a.Token(ctx); err != nil {
		t.Fatalf("the first replica after the login: %v", err)
	}
	for _, bad := range [][]byte{nil, []byte("{"), []byte(`{"v":1}`), bytes.Replace(raw, []byte(`"v":1`), []byte(`"v":9`), 1)} {
		if _, err := oauth.UnmarshalPending(bad); err == nil {
			t.Errorf("UnmarshalPending(%q) took it", bad)
		}
	}
}

// TestResealLogin moves a login between stores: a plain file's login is
// sealed for a shared store, a sealed one opens with the old key and is
// sealed with the new, and nothing is written plain to a shared store.
func TestResealLogin(t *testing.T) {
	key := oauth.DocKey("lin.user-" + oauth.UserKey("alice"))
	plain := []byte(`{"upstream":"lin","access_token":"secret-at"}`)
	k1, k2 := sealer(t, 1), sealer(t, 2)
	for _, tt := range []struct {
		name     string
		key      string
		in       []byte
		from, to *state.Sealer
		toFiles  bool
		want     string // "" = ok
	}{
		{"plain to sealed", key, plain, nil, k1, false, ""},
		{"sealed to another key", key, k1.Seal(key, plain), k1, k2, false, ""},
		{"sealed to plain files", key, k1.Seal(key, plain), k1, nil, true, ""},
		{"plain to a shared store unsealed", key, plain, nil, nil, false, "encryption_key"},
		{"sealed with a key not given", key, k1.Seal(key, plain), k2, k2, false, "another encryption key"},
		{"sealed under another key name", key, k1.Seal(oauth.DocKey("lin"), plain), k1, k2, false, "does not open"},
		{"not a login", "pins.json", plain, nil, k1, false, "not the key of a login"},
		{"not JSON", key, []byte("xx"), nil, k1, false, "not valid JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := oauth.ResealLogin(tt.key, tt.in, tt.from, tt.to, tt.toFiles)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				if strings.Contains(err.Error(), "secret-at") {
					t.Fatalf("the error quotes the value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.to == nil {
				if !bytes.Equal(out, plain) {
					t.Fatalf("plain out = %q", out)
				}
				return
			}
			if bytes.Contains(out, []byte("secret-at")) {
				t.Fatal("the resealed value holds the token in plain text")
			}
			if got, err := tt.to.Open(tt.key, out); err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("the resealed value opens to %q, %v", got, err)
			}
		})
	}
	for k, want := range map[string]bool{"oauth-lin.json": true, key: true, "oauth-.json": false, "pins.json": false, "oauth-lin": false} {
		if oauth.IsLoginKey(k) != want {
			t.Errorf("IsLoginKey(%q) = %v", k, !want)
		}
	}
}

// eventually waits, polling, for cond within 15 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRedisRefreshWithTheStoreDown: a token that must be refreshed while
// the store is down is not refreshed (nothing is spent at the
// authorization server) and the error names the store; once the store is
// back the refresh happens.
func TestRedisRefreshWithTheStoreDown(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{AOF: true})
	s := oauthtest.New(t, okHandler)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a := replica(t, srv, s, sealer(t, 1), oauth.Options{Now: clock})
	login(t, a)
	s.Lock()
	s.ExpiresIn = 100_000
	forms := len(s.TokenForms)
	s.Unlock()
	mu.Lock()
	now = now.Add(2 * time.Hour) // expired
	mu.Unlock()

	srv.Stop()
	_, err := a.Token(context.Background())
	if err == nil || !strings.Contains(err.Error(), srv.Addr()) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("a refresh with the store down: %v; want an error naming the store", err)
	}
	s.Lock()
	if len(s.TokenForms) != forms {
		t.Errorf("%d token requests with the store down, want 0", len(s.TokenForms)-forms)
	}
	s.Unlock()
	srv.Start()
	eventually(t, "the refresh once the store is back", func() bool {
		_, err := a.Token(context.Background())
		return err == nil
	})
}
