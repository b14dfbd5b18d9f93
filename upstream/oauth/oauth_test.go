package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// okHandler stands for the MCP endpoint behind the bearer check.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
})

func newClient(t *testing.T, s *oauthtest.Server, dir string) *oauth.Client {
	t.Helper()
	return oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{PollInterval: 10 * time.Millisecond})
}

func login(t *testing.T, c *oauth.Client) *oauth.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := c.Login(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/callback", Authorize: oauth.AutoApprove(nil)})
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	return rec
}

// post sends one request through a Transport of c.
func post(t *testing.T, c *oauth.Client, s *oauthtest.Server, body string) (*http.Response, error) {
	t.Helper()
	hc := &http.Client{Transport: &oauth.Transport{Client: c}}
	req, _ := http.NewRequest(http.MethodPost, s.URL(), strings.NewReader(body))
	resp, err := hc.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// stepUpClient is an HTTP client through a Transport of c that logs in
// again, approved at once, whenever a request needs it; *logins counts
// those logins.
func stepUpClient(c *oauth.Client) (hc *http.Client, logins *int) {
	logins = new(int)
	tr := &oauth.Transport{Client: c, Login: func(ctx context.Context, ch oauth.Challenge, scopes []string) error {
		*logins++
		_, err := c.Login(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil), Challenge: &ch, Scopes: scopes})
		return err
	}}
	return &http.Client{Transport: tr}, logins
}

func TestLoginStoresTokensPrivately(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	dir := filepath.Join(t.TempDir(), "state")
	c := newClient(t, s, dir)
	rec := login(t, c)
	if rec.AccessToken == "" || rec.RefreshToken == "" || rec.Issuer != s.AS.URL || rec.Resource != s.URL() {
		t.Fatalf("record: issuer %q resource %q, tokens set: %v %v", rec.Issuer, rec.Resource, rec.AccessToken != "", rec.RefreshToken != "")
	}
	fi, err := os.Stat(filepath.Join(dir, "oauth-lin.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %v, want 0700", di.Mode().Perm())
	}
	s.Lock()
	forms := s.TokenForms
	s.Unlock()
	if len(forms) != 1 || forms[0].Get("resource") != s.URL() || forms[0].Get("code_verifier") == "" {
		t.Fatalf("token request %v: want resource and code_verifier", forms)
	}
	// The record's own formatting never shows a token.
	for _, shown := range []string{rec.String(), strings.TrimSpace(fmtV(rec))} {
		if strings.Contains(shown, rec.AccessToken) || strings.Contains(shown, rec.RefreshToken) {
			t.Errorf("record formatting shows a token: %s", shown)
		}
	}
}

func fmtV(r *oauth.Record) string { return strings.ReplaceAll(r.GoString(), "\n", " ") }

func TestNoTokenIsNeedsLoginAndSendsNothing(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	c := newClient(t, s, t.TempDir())
	_, err := post(t, c, s, `{}`)
	if !errors.Is(err, oauth.ErrNeedsLogin) || !strings.Contains(err.Error(), "viewmux auth login lin") {
		t.Fatalf("err = %v, want needs login naming the command", err)
	}
	s.Lock()
	defer s.Unlock()
	if s.Unauthenticated+s.Authorized != 0 {
		t.Fatalf("%d requests reached the upstream without a token", s.Unauthenticated+s.Authorized)
	}
}

func TestRefreshOn401(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	c := newClient(t, s, t.TempDir())
	first := login(t, c)
	s.RevokeAccess()
	resp, err := post(t, c, s, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after revocation: %v %v, want a refresh and 200", resp, err)
	}
	s.Lock()
	forms := s.TokenForms
	s.Unlock()
	if len(forms) != 2 || forms[1].Get("grant_type") != "refresh_token" || forms[1].Get("refresh_token") != first.RefreshToken {
		t.Fatalf("token requests %v: want a refresh with the stored refresh token", forms)
	}
	if forms[1].Get("resource") != s.URL() {
		t.Errorf("refresh without the resource indicator: %v", forms[1])
	}
	st, err := c.Status()
	if err != nil || !st.LoggedIn {
		t.Fatalf("status after refresh: %+v %v", st, err)
	}
}

func TestRefreshBeforeExpiry(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	s.Lock()
	s.ExpiresIn = 30 // inside the minute before expiry: refreshed at once
	s.Unlock()
	c := newClient(t, s, t.TempDir())
	login(t, c)
	s.Lock()
	probes := s.Unauthenticated // the login's probe for the challenge
	s.Unlock()
	if _, err := post(t, c, s, `{}`); err != nil {
		t.Fatal(err)
	}
	s.Lock()
	defer s.Unlock()
	if len(s.TokenForms) != 2 || s.TokenForms[1].Get("grant_type") != "refresh_token" || s.Unauthenticated != probes {
		t.Fatalf("token requests %d (want the login and one refresh), unauthenticated %d", len(s.TokenForms), s.Unauthenticated)
	}
}

func TestRefusedRefreshIsNeedsLoginWithoutTheToken(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	c := newClient(t, s, t.TempDir())
	rec := login(t, c)
	s.RevokeAll() // the token endpoint's error quotes the refresh token
	_, err := post(t, c, s, `{}`)
	if !errors.Is(err, oauth.ErrNeedsLogin) {
		t.Fatalf("err = %v, want needs login", err)
	}
	if strings.Contains(err.Error(), rec.RefreshToken) || strings.Contains(err.Error(), rec.AccessToken) {
		t.Fatalf("error shows a token: %v", err)
	}
	// The refused token is not sent again.
	s.Lock()
	before := s.Unauthenticated
	s.Unlock()
	if _, err := post(t, c, s, `{}`); !errors.Is(err, oauth.ErrNeedsLogin) {
		t.Fatalf("second request: %v", err)
	}
	s.Lock()
	defer s.Unlock()
	if s.Unauthenticated != before {
		t.Fatal("a refused token was sent again")
	}
}

func TestInsufficientScopeWithoutLogin(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	s.Lock()
	s.ToolScope = "mcp:write"
	s.Unlock()
	dir := t.TempDir()
	c := newClient(t, s, dir)
	login(t, c)
	if resp, err := post(t, c, s, `{"method":"tools/list"}`); err != nil || resp.StatusCode != 200 {
		t.Fatalf("tools/list: %v %v", resp, err)
	}
	_, err := post(t, c, s, `{"method":"tools/call"}`)
	if !errors.Is(err, oauth.ErrInsufficientScope) || !strings.Contains(err.Error(), "mcp:write") || !strings.Contains(err.Error(), "viewmux auth login lin") {
		t.Fatalf("err = %v, want insufficient scope naming it and the command", err)
	}
	if got := c.Scopes(); !contains(got, "mcp:write") || !contains(got, "mcp:tools") {
		t.Fatalf("Scopes() = %v: the next login should ask for mcp:tools and mcp:write", got)
	}
}

func TestStepUpWithLoginOncePerRequest(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	s.Lock()
	s.ToolScope = "mcp:write"
	s.Unlock()
	c := newClient(t, s, t.TempDir())
	hc, logins := stepUpClient(c)
	resp, err := hc.Post(s.URL(), "application/json", strings.NewReader(`{"method":"tools/call"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("tools/call: %v %v", resp, err)
	}
	resp.Body.Close()
	if *logins != 2 { // the 401, then the step-up
		t.Fatalf("%d logins, want 2", *logins)
	}
	s.Lock()
	last := s.TokenForms[len(s.TokenForms)-1]
	s.Unlock()
	if sc := strings.Fields(strings.TrimPrefix(last.Get("code"), "code:")); !contains(sc, "mcp:tools") || !contains(sc, "mcp:write") {
		t.Fatalf("step-up asked for %v, want the union of mcp:tools and mcp:write", sc)
	}
	// A server that never accepts the wider scope gets one more try per request, not a loop.
	s.Lock()
	s.ToolScope = "mcp:never"
	s.NeverGrant = "mcp:never"
	s.Unlock()
	*logins = 0
	resp, err = hc.Post(s.URL(), "application/json", strings.NewReader(`{"method":"tools/call"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || *logins != 1 {
		t.Fatalf("status %d after %d logins, want 403 after one", resp.StatusCode, *logins)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestTokenFileReplacedAtomically(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	dir := t.TempDir()
	c := newClient(t, s, dir)
	rec := login(t, c)
	store := oauth.Store{}
	store.Dir.Path = dir
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := *rec
			r.AccessToken = strings.Repeat("x", 1000+i%5000)
			if _, err := store.Save(context.Background(), &r); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 300 {
		b, err := os.ReadFile(store.Path("lin"))
		if err != nil {
			t.Fatal(err)
		}
		var r oauth.Record
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("a reader saw a partial file: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

func TestLogoutAndWaitLogin(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	dir := t.TempDir()
	c := newClient(t, s, dir)
	login(t, c)
	if removed, err := c.Logout(); !removed || err != nil {
		t.Fatalf("Logout = %v, %v", removed, err)
	}
	if _, err := c.Token(context.Background()); !errors.Is(err, oauth.ErrNeedsLogin) {
		t.Fatalf("after logout: %v", err)
	}
	// A login by another client of the same file (another process) ends
	// the wait and is used.
	done := make(chan bool)
	go func() { done <- c.WaitLogin(context.Background(), time.Minute) }()
	time.Sleep(50 * time.Millisecond)
	login(t, newClient(t, s, dir))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("WaitLogin did not see the new login")
	}
	if _, err := c.Token(context.Background()); err != nil {
		t.Fatalf("after the other login: %v", err)
	}
}

func TestCallbackChecks(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	for _, tt := range []struct {
		name string
		edit func(q url.Values)
		want string
	}{
		{"wrong state", func(q url.Values) { q.Set("state", "other") }, "state does not match"},
		{"wrong iss", func(q url.Values) { q.Set("iss", "https://evil.example.com") }, "iss is not the issuer"},
		{"normalized iss", func(q url.Values) { q.Set("iss", q.Get("iss")+"/") }, "iss is not the issuer"},
		{"missing iss", func(q url.Values) { q.Del("iss") }, "has no iss"},
		{"error", func(q url.Values) { q.Del("code"); q.Set("error", "access_denied") }, "access_denied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, s, t.TempDir())
			auto := oauth.AutoApprove(nil)
			_, err := c.Login(context.Background(), oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb",
				Authorize: func(ctx context.Context, u string) (*url.URL, error) {
					cb, err := auto(ctx, u)
					if err == nil {
						q := cb.Query()
						tt.edit(q)
						cb.RawQuery = q.Encode()
					}
					return cb, err
				}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if st, _ := c.Status(); st.LoggedIn {
				t.Fatal("a refused callback left a login")
			}
		})
	}
}

func TestParseChallenge(t *testing.T) {
	ch, ok := oauth.ParseChallenge([]string{`Basic realm="x"`, `Bearer error="insufficient_scope", scope="a b", resource_metadata="https://h/.well-known/oauth-protected-resource/mcp"`})
	if !ok || ch.Error != "insufficient_scope" || len(ch.Scope) != 2 || ch.ResourceMetadata != "https://h/.well-known/oauth-protected-resource/mcp" {
		t.Fatalf("got %+v %v", ch, ok)
	}
	if _, ok := oauth.ParseChallenge([]string{`Basic realm="bearer"`}); ok {
		t.Fatal("a Basic challenge parsed as Bearer")
	}
}

// TestTokenNeverLeavesTheOrigin: a redirect to another origin is followed
// without the token.
func TestTokenNeverLeavesTheOrigin(t *testing.T) {
	var got []string
	var mu sync.Mutex
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	t.Cleanup(other.Close)
	s := oauthtest.New(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/elsewhere", http.StatusTemporaryRedirect)
	}))
	c := newClient(t, s, t.TempDir())
	login(t, c)
	hc := &http.Client{Transport: &oauth.Transport{Client: c}}
	resp, err := hc.Get(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "" {
		t.Fatalf("the other origin got Authorization %q", got)
	}
}

// TestRefreshFailingForNowIsNotNeedsLogin: a token endpoint that cannot
// answer now (503) leaves the login in place; the next request refreshes.
func TestRefreshFailingForNowIsNotNeedsLogin(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	c := newClient(t, s, t.TempDir())
	login(t, c)
	s.RevokeAccess()
	s.Lock()
	s.TokenDown = true
	s.Unlock()
	_, err := post(t, c, s, `{}`)
	if err == nil || errors.Is(err, oauth.ErrNeedsLogin) {
		t.Fatalf("err = %v, want a failure that is not needs login", err)
	}
	s.Lock()
	s.TokenDown = false
	s.Unlock()
	if resp, err := post(t, c, s, `{}`); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the token endpoint came back: %v %v", resp, err)
	}
}

// TestFreshTokenRefusedIsNeedsLogin: an upstream that refuses even a
// freshly refreshed token makes the client need a login, and the token is
// not sent again.
func TestFreshTokenRefusedIsNeedsLogin(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	c := newClient(t, s, t.TempDir())
	login(t, c)
	// Every token the server issues from now on is refused at once.
	hc := &http.Client{Transport: &oauth.Transport{Client: c, Base: revokeBefore{s}}}
	resp, err := hc.Post(s.URL(), "application/json", strings.NewReader(`{}`))
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, oauth.ErrNeedsLogin) || !strings.Contains(err.Error(), "refused a fresh token") {
		t.Fatalf("err = %v, want needs login after a fresh token was refused", err)
	}
	s.Lock()
	before := s.Unauthenticated
	s.Unlock()
	if _, err := post(t, c, s, `{}`); !errors.Is(err, oauth.ErrNeedsLogin) {
		t.Fatalf("next request: %v", err)
	}
	s.Lock()
	defer s.Unlock()
	if s.Unauthenticated != before {
		t.Fatal("the refused token was sent again")
	}
}

// revokeBefore revokes every access token before sending a request to
// the resource (token requests go through the client's own HTTP client).
type revokeBefore struct{ s *oauthtest.Server }

func (r revokeBefore) RoundTrip(req *http.Request) (*http.Response, error) {
	r.s.RevokeAccess()
	return http.DefaultTransport.RoundTrip(req)
}

// TestPlainHTTPAuthorizationServerRefused: an authorization server on
// plain http that is not loopback is refused before anything is sent to
// it.
func TestPlainHTTPAuthorizationServerRefused(t *testing.T) {
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/.well-known/oauth-protected-resource") {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"resource":"http://`+r.Host+`/mcp","authorization_servers":["http://auth.example.com"]}`)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(rs.Close)
	c := oauth.New("x", rs.URL+"/mcp", configs.UpstreamOAuth{StateDir: t.TempDir()}, oauth.Options{})
	_, err := c.Login(context.Background(), oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil)})
	if err == nil || !strings.Contains(err.Error(), "not an https URL") {
		t.Fatalf("err = %v, want the plain-http authorization server refused", err)
	}
}
