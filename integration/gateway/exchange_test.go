//go:build unix

package gateway

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/integration/internal/itest"
	"github.com/viewmux/viewmux/internal/oauth"
)

// The exchange tests run against a real OpenID provider that implements
// OAuth 2.0 Token Exchange (RFC 8693): zitadel/oidc v3's example provider
// (integration/zitadelop, a module of its own, from the Go module proxy).
// Ory Hydra v2.3, the provider of the other OAuth tests, has no token
// exchange.

// zop is a running zitadelop with one web client.
type zop struct {
	Issuer, ClientID, Secret string
}

const zopRedirect = "http://127.0.0.1:9/callback"

func startZitadelOP(t *testing.T, clientID, secret string) *zop {
	t.Helper()
	cmd := exec.Command(moduleBinary(t, "zitadelop", "the OpenID provider"), "-client-id", clientID, "-client-secret", secret, "-redirect", zopRedirect)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // closing it stops the provider
	if err != nil {
		t.Fatal(err)
	}
	var stderr itest.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("zitadelop printed no issuer: %v\n%s", err, stderr.String())
	}
	return &zop{Issuer: strings.TrimSpace(line), ClientID: clientID, Secret: secret}
}

// token logs in as user through the provider's login page (the
// authorization code flow with PKCE) and returns the access token, a
// JWT whose aud is the client's id.
func (z *zop) token(t *testing.T, user string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(r.URL.String(), zopRedirect) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	verifier := strings.Repeat("v", 50)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"client_id": {z.ClientID}, "redirect_uri": {zopRedirect}, "response_type": {"code"}, "scope": {"openid"},
		"state": {"s"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
	resp, err := hc.Get(z.Issuer + "/auth?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Request.URL.Query().Get("authRequestID")
	resp, err = hc.PostForm(z.Issuer+"/login/username", url.Values{"username": {user}, "password": {"verysecure"}, "id": {id}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("login of %s: %d %v", user, resp.StatusCode, loc)
	}
	return z.post(t, url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
		"redirect_uri": {zopRedirect}, "code_verifier": {verifier}})
}

// exchange trades tok for one for audience, as a test's own client.
func (z *zop) exchange(t *testing.T, tok, audience string) string {
	t.Helper()
	return z.post(t, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"}, "subject_token": {tok},
		"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"}, "audience": {audience}})
}

func (z *zop) post(t *testing.T, form url.Values) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, z.Issuer+"/oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(z.ClientID), url.QueryEscape(z.Secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		AccessToken string `json:"access_token"`
	}
	b, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(b, &r); resp.StatusCode != http.StatusOK || r.AccessToken == "" {
		t.Fatalf("token endpoint (%s): %d", form.Get("grant_type"), resp.StatusCode)
	}
	return r.AccessToken
}

// exchangeRS is an MCP server that takes only JWTs of the provider whose
// aud is its own URL, and records what each request carried.
type exchangeRS struct {
	URL string

	mu    sync.Mutex
	seen  []string    // every bearer token sent, valid or not
	calls [][2]string // tools/call: subject, token
}

func startExchangeRS(t *testing.T, issuer string, mcp http.Handler) *exchangeRS {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := &exchangeRS{URL: "http://" + ln.Addr().String() + "/mcp"}
	v := oauth.New(oauth.Options{Issuer: issuer, Audience: rs.URL})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		rs.mu.Lock()
		rs.seen = append(rs.seen, tok)
		rs.mu.Unlock()
		claims, err := v.Validate(r.Context(), tok)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "invalid token", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if strings.Contains(string(body), `"tools/call"`) {
			rs.mu.Lock()
			rs.calls = append(rs.calls, [2]string{claims.Subject, tok})
			rs.mu.Unlock()
		}
		mcp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return rs
}

// TestExchangeCredentialsRealProvider is credentials = "exchange" end to
// end: a caller holding the provider's JWT for viewmux calls a tool of an
// exchange upstream through /mcp; viewmux exchanges the caller's token at
// the provider (RFC 8693) and the upstream, which takes only tokens for
// itself, gets the call as that caller's subject with the exchanged
// token, never the caller's own. A caller the provider will not exchange
// for (the example's non-admin user, without impersonation permission)
// gets an error saying the exchange failed; a static-token caller a tool
// error; nothing of theirs reaches the upstream.
func TestExchangeCredentialsRealProvider(t *testing.T) {
	t.Parallel()
	const audience, secret = "http://mcp.test", "mux-client-secret-1"
	z := startZitadelOP(t, audience, secret)
	rug := itest.StartRug(t)
	rs := startExchangeRS(t, z.Issuer, server.NewStreamableHTTPServer(rug.Srv))

	alice := z.token(t, "test-user@127.0.0.1") // id1, admin: may be exchanged for
	bob := z.token(t, "test-user2")            // id2: may not
	// The operator's login, which lists the upstream's tools (what `viewmux
	// auth login wiki` would store): a token for the upstream.
	operator := z.exchange(t, alice, rs.URL)

	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]any{"upstream": "wiki", "server_url": rs.URL, "issuer": z.Issuer,
		"token_endpoint": z.Issuer + "/oauth/token", "client_id": audience, "auth_method": "client_secret_basic",
		"access_token": operator, "token_type": "Bearer", "logged_in_at": time.Now().UTC()})
	if err := os.WriteFile(filepath.Join(state, "oauth-wiki.json"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`[server]
state_dir = %s

[auth.oauth]
issuer = %q
audience = %q
[[auth.oauth.grants]]
claim = "sub"
value = "id1"
profiles = ["agent"]
[[auth.oauth.grants]]
claim = "sub"
value = "id2"
profiles = ["agent"]

[[auth.tokens]]
token = "static-token-of-carol-1"
profiles = ["agent"]

[profiles.agent]

[upstreams.wiki]
url = %q
credentials = "exchange"
[upstreams.wiki.oauth]
client_id = %q
client_secret = %q
`, itest.TomlString(state), z.Issuer, audience, rs.URL, audience, secret)
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Dir: dir})
	puAwaitTool(t, mux, alice, "wiki__lookup")

	text, isErr := puCallTool(t, puSession(t, mux, alice), "wiki__lookup")
	if isErr || text != "lookup ran" {
		t.Fatalf("alice: %v %s\n%s", isErr, text, mux.Stderr())
	}
	a := puSession(t, mux, bob).Do(t, "tools/call", `{"name":"wiki__lookup","arguments":{"word":"x"}}`)
	// zitadel's example answers this refusal with HTTP 500, which viewmux
	// cannot tell from an outage: the error says the exchange failed.
	if a.Msg.Error == nil || !strings.Contains(a.Msg.Error.Message, "could not be exchanged") {
		t.Fatalf("bob: %s", a.Raw)
	}
	if text, isErr := puCallTool(t, puSession(t, mux, "static-token-of-carol-1"), "wiki__lookup"); !isErr || !strings.Contains(text, "static token") {
		t.Fatalf("a static token's call: %v %s", isErr, text)
	}

	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.calls) != 1 || rs.calls[0][0] != "id1" || rs.calls[0][1] == operator {
		t.Fatalf("the upstream's calls: %d, first as %v (operator's token: %v)", len(rs.calls), rs.calls, len(rs.calls) > 0 && rs.calls[0][1] == operator)
	}
	for _, tok := range rs.seen {
		for who, down := range map[string]string{"alice": alice, "bob": bob, "carol": "static-token-of-carol-1"} {
			if tok == down {
				t.Fatalf("%s's own token reached the upstream", who)
			}
		}
	}
	if strings.Contains(mux.Stderr(), rs.calls[0][1]) || strings.Contains(mux.Stderr(), alice) {
		t.Fatal("viewmux's log shows a token")
	}
}
