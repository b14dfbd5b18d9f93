package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

func perUserConfig(t *testing.T, url string) *configs.Config {
	uc := &configs.Upstream{Name: "gh", Prefix: "gh", Transport: configs.TransportHTTP, URL: url,
		OAuth: &configs.UpstreamOAuth{StateDir: t.TempDir()}, Credentials: configs.CredentialsPerUser,
		Scope: configs.ScopeShared, ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second,
		MaxMessageBytes: 1 << 20, MaxCatalogItems: 100, MaxCatalogBytes: 1 << 20}
	return &configs.Config{Server: configs.Server{Listen: "127.0.0.1:8931", MaxChildrenPerCaller: 2, MaxSessions: 10, Separator: "__", MaxNameLength: 64},
		Upstreams: []*configs.Upstream{uc}}
}

// TestPerUserRefusesWithoutLogin: on a per-user upstream, a call with no
// identity and a call of an identity that has not connected are refused
// with a tool error (the second with a connect link for that identity),
// and nothing reaches the upstream; nobody's token stands in.
func TestPerUserRefusesWithoutLogin(t *testing.T) {
	s := oauthtest.New(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	a := New(perUserConfig(t, s.URL()), Options{})
	defer a.Close()
	ctx := context.Background()

	for _, who := range []string{"", "address:127.0.0.1"} {
		_, _, err := a.connFor(ctx, &testClient{session: "S", caller: who}, "gh")
		var ue *UpstreamError
		if !errors.As(err, &ue) || !ue.Anonymous || !errors.Is(err, ErrNoIdentity) {
			t.Fatalf("caller %q: %v", who, err)
		}
		if r := userErrorResult(err); !strings.Contains(string(r), `"isError":true`) || !strings.Contains(string(r), "no identity") {
			t.Fatalf("caller %q: result %s", who, r)
		}
	}

	_, _, err := a.connFor(ctx, &testClient{session: "S", caller: "oauth:alice"}, "gh")
	var ue *UpstreamError
	if !errors.As(err, &ue) || !errors.Is(err, ErrNotConnected) {
		t.Fatalf("alice: %v", err)
	}
	const prefix = "http://127.0.0.1:8931/oauth/connect/gh?ticket="
	if !strings.HasPrefix(ue.Connect, prefix) || !strings.Contains(ue.Public(), ue.Connect) {
		t.Fatalf("connect link %q, public %q", ue.Connect, ue.Public())
	}
	ticket, _ := url.QueryUnescape(strings.TrimPrefix(ue.Connect, prefix))
	if strings.Contains(ue.Error(), ticket) {
		t.Fatal("the logged error shows the ticket")
	}
	var res struct {
		IsError bool `json:"isError"`
		Content []struct{ Text string }
	}
	if err := json.Unmarshal(userErrorResult(err), &res); err != nil || !res.IsError || !strings.Contains(res.Content[0].Text, ue.Connect) {
		t.Fatalf("tool error: %+v %v", res, err)
	}
	s.Lock()
	sent := s.Authorized + s.Unauthenticated
	s.Unlock()
	if sent != 0 || a.UserConns() != 0 {
		t.Fatalf("%d requests reached the upstream, %d connections opened, for callers without a login", sent, a.UserConns())
	}

	// The ticket names alice and gh, is good once, and only for gh.
	if up, who, ok, err := a.ConnectTicket(ticket); !ok || err != nil || up != "gh" || who != "oauth:alice" {
		t.Fatalf("ticket: %q %q %v %v", up, who, ok, err)
	}
	if _, _, err := a.BeginConnect(ctx, "other", ticket); !errors.Is(err, ErrBadConnect) {
		t.Fatalf("ticket for another upstream: %v", err)
	}
	if _, _, err := a.BeginConnect(ctx, "gh", ticket); !errors.Is(err, ErrBadConnect) {
		t.Fatalf("a used ticket: %v", err)
	}

	// A callback without the nonce of the browser that began it is
	// refused, and the login it belonged to is gone.
	link, _ := a.ConnectLink("gh", "oauth:alice")
	ticket, _ = url.QueryUnescape(strings.TrimPrefix(link, prefix))
	authURL, nonce, err := a.BeginConnect(ctx, "gh", ticket)
	if err != nil {
		t.Fatal(err)
	}
	cb := approveAs(t, authURL, "alice")
	if _, _, err := a.FinishConnect(ctx, cb, "not-the-nonce"); !errors.Is(err, ErrBadConnect) {
		t.Fatalf("foreign browser: %v", err)
	}
	if _, _, err := a.FinishConnect(ctx, cb, nonce); !errors.Is(err, ErrBadConnect) {
		t.Fatalf("replayed callback: %v", err)
	}

	// The whole step stores alice's login, and hers only.
	link, _ = a.ConnectLink("gh", "oauth:alice")
	ticket, _ = url.QueryUnescape(strings.TrimPrefix(link, prefix))
	if authURL, nonce, err = a.BeginConnect(ctx, "gh", ticket); err != nil {
		t.Fatal(err)
	}
	if up, who, err := a.FinishConnect(ctx, approveAs(t, authURL, "alice"), nonce); err != nil || up != "gh" || who != "oauth:alice" {
		t.Fatalf("FinishConnect: %q %q %v", up, who, err)
	}
	uc := a.set.Load().byName["gh"].Config()
	if st, _ := a.userLogin(uc, "oauth:alice").Status(); !st.LoggedIn {
		t.Fatal("alice's login was not stored")
	}
	if st, _ := a.userLogin(uc, "oauth:bob").Status(); st.LoggedIn {
		t.Fatal("bob has alice's login")
	}
}

// approveAs follows authURL logged in at the test authorization server
// as sub, and returns the callback URL.
func approveAs(t *testing.T, authURL, sub string) *url.URL {
	t.Helper()
	u, _ := url.Parse(authURL)
	q := u.Query()
	q.Set(oauthtest.LoginAsParam, sub)
	u.RawQuery = q.Encode()
	cb, err := oauth.AutoApprove(nil)(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	return cb
}

// TestPerUserLoginsAreIssuers: an OAuth subject's stored login is kept
// under its issuer too: a config trusting another issuer does not give
// its subject of the same name the first's login.
func TestPerUserLoginsAreIssuers(t *testing.T) {
	s := oauthtest.New(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	cfg := perUserConfig(t, s.URL())
	cfg.Auth.OAuth = &configs.OAuth{Issuer: "https://idp-one.example"}
	a := New(cfg, Options{})
	defer a.Close()
	ctx := context.Background()
	link, _ := a.ConnectLink("gh", "oauth:alice")
	ticket, _ := url.QueryUnescape(link[strings.Index(link, "ticket=")+len("ticket="):])
	authURL, nonce, err := a.BeginConnect(ctx, "gh", ticket)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.FinishConnect(ctx, approveAs(t, authURL, "alice"), nonce); err != nil {
		t.Fatal(err)
	}
	uc := cfg.Upstreams[0]
	if st, _ := a.userLogin(uc, "oauth:alice").Status(); !st.LoggedIn {
		t.Fatal("alice's login is not found under her issuer")
	}
	other := *cfg
	other.Auth.OAuth = &configs.OAuth{Issuer: "https://idp-two.example"}
	b := New(&other, Options{})
	defer b.Close()
	if st, _ := b.userLogin(uc, "oauth:alice").Status(); st.LoggedIn {
		t.Fatal("another issuer's alice got the first's login")
	}
	if _, _, err := b.connFor(ctx, &testClient{session: "S", caller: "oauth:alice"}, "gh"); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("another issuer's alice: %v", err)
	}
}
