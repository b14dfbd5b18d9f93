package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/upstream/oauth"
)

// tokenServer is an identity provider's metadata and token endpoint;
// answer writes the token endpoint's answer to the form it got.
func tokenServer(t *testing.T, grants []string, answer func(w http.ResponseWriter, r *http.Request)) *httptest.Server {
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"issuer": srv.URL, "authorization_endpoint": srv.URL + "/authorize",
				"token_endpoint": srv.URL + "/token", "code_challenge_methods_supported": []string{"S256"},
				"grant_types_supported": grants, "token_endpoint_auth_methods_supported": []string{"client_secret_post"}})
		case "/token":
			r.ParseForm()
			answer(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestExchanger(t *testing.T) {
	var got url.Values
	srv := tokenServer(t, []string{oauth.GrantTokenExchange}, func(w http.ResponseWriter, r *http.Request) {
		got = r.PostForm
		w.Header().Set("Content-Type", "application/json")
		switch r.PostForm.Get("subject_token") {
		case "good":
			w.Write([]byte(`{"access_token":"exchanged","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":60}`))
		case "id-token":
			w.Write([]byte(`{"access_token":"x","issued_token_type":"urn:ietf:params:oauth:token-type:id_token","token_type":"N_A"}`))
		default:
			w.WriteHeader(400)
			w.Write([]byte(`{"error":"invalid_grant","error_description":"token ` + r.PostForm.Get("subject_token") + `"}`))
		}
	})
	var masked []string
	ex := &oauth.Exchanger{Issuer: srv.URL, ClientID: "mux", ClientSecret: "s3cret", Resource: "https://up.example/mcp",
		Scopes: []string{"a", "b"}, OnSecret: func(v ...string) { masked = append(masked, v...) }}
	ctx := context.Background()
	tok, exp, err := ex.Exchange(ctx, "good")
	if err != nil || tok != "exchanged" || exp.IsZero() {
		t.Fatalf("Exchange: %q %v %v", tok, exp, err)
	}
	want := url.Values{"grant_type": {oauth.GrantTokenExchange}, "subject_token": {"good"}, "subject_token_type": {oauth.TokenTypeAccessToken},
		"requested_token_type": {oauth.TokenTypeAccessToken}, "resource": {"https://up.example/mcp"}, "audience": {"https://up.example/mcp"}, "scope": {"a b"},
		"client_id": {"mux"}, "client_secret": {"s3cret"}}
	for k, v := range want {
		if got.Get(k) != v[0] {
			t.Errorf("%s = %q, want %q", k, got.Get(k), v[0])
		}
	}
	if len(masked) != 1 || masked[0] != "exchanged" {
		t.Errorf("masked %v", masked)
	}
	if _, _, err := ex.Exchange(ctx, "stolen-secret-token"); !errors.Is(err, oauth.ErrExchangeRefused) || strings.Contains(err.Error(), "stolen-secret-token") {
		t.Fatalf("refused: %v", err)
	}
	if _, _, err := ex.Exchange(ctx, "id-token"); err == nil || !strings.Contains(err.Error(), "not an access token") {
		t.Fatalf("an id token issued: %v", err)
	}
	if _, _, err := ex.Exchange(ctx, ""); err == nil {
		t.Fatal("an empty subject token was exchanged")
	}

	// A provider whose metadata lists no token exchange is not asked.
	asked := false
	none := tokenServer(t, []string{"authorization_code"}, func(http.ResponseWriter, *http.Request) { asked = true })
	if _, _, err := (&oauth.Exchanger{Issuer: none.URL, ClientID: "mux"}).Exchange(ctx, "good"); !errors.Is(err, oauth.ErrNoExchange) || asked {
		t.Fatalf("no exchange offered: %v (asked %v)", err, asked)
	}
}
