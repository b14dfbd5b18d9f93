package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// exchangeIdP is a small in-test identity provider with an RFC 8693
// token endpoint: it knows the access tokens it "issued" to callers
// (subject token → subject) and, for the client mux:mux-secret, exchanges
// them for tokens the upstream rs accepts as that subject: a stand-in
// whose requests the test can read. integration/gateway/exchange_test.go runs
// a real provider (zitadel/oidc's example; Ory Hydra v2.3 has no token
// exchange).
type exchangeIdP struct {
	srv   *httptest.Server
	rs    *oauthtest.Server
	users map[string]string

	mu    sync.Mutex
	forms []url.Values
	n     int
}

func newExchangeIdP(t *testing.T, rs *oauthtest.Server) *exchangeIdP {
	idp := &exchangeIdP{rs: rs, users: map[string]string{"alice-downstream-token": "alice", "bob-downstream-token": "bob"}}
	idp.srv = httptest.NewServer(http.HandlerFunc(idp.serve))
	t.Cleanup(idp.srv.Close)
	return idp
}

func (idp *exchangeIdP) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/.well-known/oauth-authorization-server":
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": idp.srv.URL, "authorization_endpoint": idp.srv.URL + "/authorize", "token_endpoint": idp.srv.URL + "/token",
			"code_challenge_methods_supported":      []string{"S256"},
			"grant_types_supported":                 []string{"authorization_code", oauth.GrantTokenExchange},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic"},
		})
	case "/token":
		r.ParseForm()
		idp.mu.Lock()
		idp.forms = append(idp.forms, r.PostForm)
		idp.n++
		n := idp.n
		idp.mu.Unlock()
		id, secret, ok := r.BasicAuth()
		sub, known := idp.users[r.PostForm.Get("subject_token")]
		switch {
		case !ok || id != "mux" || secret != "mux-secret":
			w.WriteHeader(401)
			w.Write([]byte(`{"error":"invalid_client"}`))
		case r.PostForm.Get("grant_type") != oauth.GrantTokenExchange || !known:
			w.WriteHeader(400)
			w.Write([]byte(`{"error":"invalid_grant","error_description":"subject token ` + r.PostForm.Get("subject_token") + ` unknown"}`))
		default:
			tok := fmt.Sprintf("exchanged-%s-%d", sub, n)
			idp.rs.Issue(tok, sub)
			json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "issued_token_type": oauth.TokenTypeAccessToken, "token_type": "Bearer", "expires_in": 3600})
		}
	default:
		http.NotFound(w, r)
	}
}

// TestExchangeCredentials: on a credentials = "exchange" upstream, each
// OAuth caller's calls arrive with a token the identity provider
// exchanged from that caller's own (RFC 8693: subject token, token types,
// resource, the client's authentication); the caller's token never
// reaches the upstream; a static-token caller, a call without a token
// and a token the provider refuses get errors, and nothing is sent.
func TestExchangeCredentials(t *testing.T) {
	rs := lookupUpstream(t)
	idp := newExchangeIdP(t, rs)
	cfg := perUserConfig(t, rs.URL())
	uc := cfg.Upstreams[0]
	uc.Credentials = configs.CredentialsExchange
	uc.OAuth.ClientID, uc.OAuth.ClientSecret, uc.OAuth.Audience = "mux", "mux-secret", "gh-api"
	cfg.Auth.OAuth = &configs.OAuth{Issuer: idp.srv.URL}
	a := New(cfg, Options{})
	defer a.Close()

	call := func(who, token string) (json.RawMessage, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if token != "" {
			ctx = WithSubjectToken(ctx, token)
		}
		res, _, err := a.route(ctx, &testClient{session: "S-" + who, caller: who}, "gh", "tools/call", "lookup", json.RawMessage(`{"name":"lookup","arguments":{}}`), map[string]any{"name": "lookup"}, nil, false)
		return res, err
	}
	for _, c := range []struct{ who, token string }{
		{"token:0123abcd", "static-token-value"},
		{"oauth:alice", ""},
	} {
		_, err := call(c.who, c.token)
		var ue *UpstreamError
		if !errors.As(err, &ue) || !ue.NoOAuth || !strings.Contains(string(userErrorResult(err)), `"isError":true`) {
			t.Fatalf("%s: %v", c.who, err)
		}
	}
	_, err := call("oauth:mallory", "mallory-downstream-token")
	var ue *UpstreamError
	if !errors.Is(err, oauth.ErrExchangeRefused) || !errors.As(err, &ue) || !strings.Contains(ue.Public(), "refused to exchange") {
		t.Fatalf("a token the provider refuses: %v", err)
	}
	rs.Lock()
	sent := rs.Authorized + rs.Unauthenticated
	rs.Unlock()
	if sent != 0 {
		t.Fatalf("%d requests reached the upstream before any exchange succeeded", sent)
	}

	for _, who := range []string{"alice", "bob", "alice"} {
		res, err := call("oauth:"+who, who+"-downstream-token")
		if err != nil || !strings.Contains(string(res), "lookup ran") {
			t.Fatalf("%s: %s %v", who, res, err)
		}
	}
	rs.Lock()
	calls := append([]oauthtest.Call(nil), rs.Calls...)
	unauth := rs.Unauthenticated
	rs.Unlock()
	if len(calls) != 3 || calls[0].Subject != "alice" || calls[1].Subject != "bob" || calls[2].Subject != "alice" || unauth != 0 {
		t.Fatalf("calls %+v, %d unauthenticated", calls, unauth)
	}
	for _, c := range calls {
		if !strings.HasPrefix(c.Token, "exchanged-"+c.Subject+"-") {
			t.Fatalf("a call carried %q", c.Token)
		}
	}
	if calls[0].Token != calls[2].Token {
		t.Fatal("alice's exchanged token was not reused while valid")
	}
	idp.mu.Lock()
	forms := idp.forms
	idp.mu.Unlock()
	f := forms[len(forms)-1]
	if f.Get("subject_token_type") != oauth.TokenTypeAccessToken || f.Get("requested_token_type") != oauth.TokenTypeAccessToken ||
		f.Get("resource") != rs.URL() || f.Get("audience") != "gh-api" || f.Get("client_secret") != "" {
		t.Fatalf("exchange request: %v", f)
	}
	if a.UserConns() != 2 {
		t.Fatalf("%d connections, want one per caller", a.UserConns())
	}

	// Idle connections close; the next call opens one again.
	a.sweepUsers(time.Now().Add(time.Hour))
	if n := a.UserConns(); n != 0 {
		t.Fatalf("%d connections after the idle sweep", n)
	}
	if _, err := call("oauth:alice", "alice-downstream-token"); err != nil {
		t.Fatal(err)
	}
	// A reload that makes the upstream shared closes the callers'
	// connections: their calls go over the shared one now.
	next := *cfg
	shared := *uc
	shared.Credentials = configs.CredentialsShared
	next.Upstreams = []*configs.Upstream{&shared}
	a.Reload(context.Background(), &next)
	if n := a.UserConns(); n != 0 {
		t.Fatalf("%d connections after the upstream became shared", n)
	}
}
