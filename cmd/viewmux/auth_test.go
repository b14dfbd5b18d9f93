package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// TestAuthUsage: auth refuses what it cannot mean with exit 2.
func TestAuthUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"auth"}, "want a subcommand: login, status or logout"},
		{[]string{"auth", "logn"}, `unknown subcommand "logn"`},
		{[]string{"auth", "login"}, "login: want one UPSTREAM"},
		{[]string{"auth", "logout", "a", "b"}, "logout: want one UPSTREAM"},
		{[]string{"auth", "status", "a"}, `status: unexpected argument "a"`},
		{[]string{"auth", "login", "--port", "70000", "a"}, "--port 70000 is not a port"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out := runCLI(t, tc.args...)
			if code != exitUsage || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d and %q:\n%s", code, exitUsage, tc.want, out)
			}
		})
	}
}

// syncBuf is a bytes.Buffer safe for one writer and one reader.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var authURLLine = regexp.MustCompile(`(?m)^  (http://\S+)$`)

// TestAuthLoginStatusLogout: a login through the loopback callback stores
// the tokens; status shows the login without a token; logout removes it.
func TestAuthLoginStatusLogout(t *testing.T) {
	s := oauthtest.New(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	}))
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "viewmux.toml")
	text := "[server]\nstate_dir = " + tomlQuote(state) + "\n[upstreams.lin]\nurl = " + tomlQuote(s.URL()) + "\noauth = true\n" +
		"[upstreams.plain]\nurl = \"http://127.0.0.1:1/mcp\"\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}

	code, out := runCLI(t, "auth", "status", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "lin: needs login: run `viewmux auth login lin`") || strings.Contains(out, "plain") {
		t.Fatalf("status before login: exit %d\n%s", code, out)
	}
	code, out = runCLI(t, "auth", "login", "plain", "--config", cfg)
	if code != exitUsage || !strings.Contains(out, `upstream "plain" has no oauth = true`) {
		t.Fatalf("login to a plain upstream: exit %d\n%s", code, out)
	}

	var stdout, stderr syncBuf
	done := make(chan int)
	go func() {
		done <- run([]string{"auth", "login", "--no-browser", "--config", cfg, "lin"}, &stdout, &stderr)
	}()
	var authURL string
	deadline := time.Now().Add(20 * time.Second)
	for authURL == "" {
		if m := authURLLine.FindStringSubmatch(stdout.String()); m != nil {
			authURL = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no authorization URL printed:\n%s\n%s", stdout.String(), stderr.String())
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The test authorization server approves at once and redirects to the
	// loopback callback, which answers once the login is stored.
	resp, err := http.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if code := <-done; code != exitOK {
		t.Fatalf("login: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(string(page), "Logged in") || !strings.Contains(stdout.String(), "Logged in to lin at "+s.AS.URL) {
		t.Fatalf("page %q\nstdout:\n%s", page, stdout.String())
	}
	raw, err := os.ReadFile(filepath.Join(state, "oauth-lin.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.AccessToken == "" || rec.RefreshToken == "" {
		t.Fatalf("token file without tokens")
	}
	secrets := []string{rec.AccessToken, rec.RefreshToken}
	noSecret := func(what, text string) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(text, sec) {
				t.Errorf("%s shows a token:\n%s", what, text)
			}
		}
	}
	noSecret("login output", stdout.String()+stderr.String()+string(page))

	code, out = runCLI(t, "auth", "status", "--config", cfg)
	if code != exitOK || !regexp.MustCompile(`lin: logged in at http://127\.0\.0\.1:\d+; expires \d{4}-\d\d-\d\dT[0-9:]+Z; refresh token stored; scopes mcp:tools\n`).MatchString(out) {
		t.Fatalf("status after login: exit %d\n%s", code, out)
	}
	noSecret("status", out)
	code, out = runCLI(t, "auth", "status", "--json", "--config", cfg)
	if code != exitOK || !strings.Contains(out, `"logged_in": true`) || !strings.Contains(out, `"refresh_token": true`) {
		t.Fatalf("status --json: exit %d\n%s", code, out)
	}
	noSecret("status --json", out)

	code, out = runCLI(t, "auth", "logout", "lin", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "Logged out of lin") || !strings.Contains(out, "revoked at the authorization server") {
		t.Fatalf("logout: exit %d\n%s", code, out)
	}
	if _, valid := s.SubjectOf(rec.AccessToken); valid {
		t.Fatal("logout left the access token valid at the authorization server")
	}
	noSecret("logout", out)
	if _, err := os.Stat(filepath.Join(state, "oauth-lin.json")); !os.IsNotExist(err) {
		t.Fatalf("token file still there: %v", err)
	}
	code, out = runCLI(t, "auth", "status", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "lin: needs login") {
		t.Fatalf("status after logout: exit %d\n%s", code, out)
	}
}

// TestCheckNeedsLogin: check shows an oauth upstream without a token as
// "needs login" with the command to run, sends it nothing, and exits 1.
func TestCheckNeedsLogin(t *testing.T) {
	s := oauthtest.New(t, http.NotFoundHandler())
	dir := t.TempDir()
	cfg := filepath.Join(dir, "viewmux.toml")
	text := "[server]\nstate_dir = " + tomlQuote(filepath.Join(dir, "state")) + "\n[upstreams.lin]\nurl = " + tomlQuote(s.URL()) + "\noauth = true\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, "check", "--config", cfg)
	if code != exitRuntime || !regexp.MustCompile(`lin\s+http\s+needs login\s+0\s+0\s+run .viewmux auth login lin.`).MatchString(out) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	s.Lock()
	defer s.Unlock()
	if s.Unauthenticated+s.Authorized != 0 {
		t.Fatalf("check sent %d requests without a token", s.Unauthenticated+s.Authorized)
	}
}

// TestAuthCallbackWantsTheLoginsState: a request to the loopback callback
// without the login's state (another local program's guess) is refused
// and the login keeps waiting for the real one.
func TestAuthCallbackWantsTheLoginsState(t *testing.T) {
	cb := newCallback()
	cb.expect("the-state")
	for _, target := range []string{"/callback?code=evil", "/callback?code=evil&state=other", "/other?state=the-state"} {
		rec := httptest.NewRecorder()
		cb.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		if rec.Code == http.StatusOK {
			t.Errorf("%s answered 200", target)
		}
	}
	select {
	case u := <-cb.got:
		t.Fatalf("a forged callback was taken: %s", u)
	default:
	}
	go cb.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/callback?code=c&state=the-state", nil))
	select {
	case u := <-cb.got:
		if u.Query().Get("code") != "c" {
			t.Fatalf("got %s", u)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the real callback was not taken")
	}
	cb.finish(nil)
}

// TestAuthStatusPerUser: status says an upstream is per-user and how
// many users have connected (stored logins), naming none.
func TestAuthStatusPerUser(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "viewmux.toml")
	text := "[server]\nstate_dir = " + tomlQuote(state) + "\n[upstreams.gh]\nurl = \"http://127.0.0.1:1/mcp\"\noauth = true\ncredentials = \"per-user\"\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"token:aa", "oauth:x\x00bob"} {
		rec := `{"upstream":"gh","access_token":"secret-token-of-a-user","server_url":"http://127.0.0.1:1/mcp"}`
		if err := os.WriteFile(filepath.Join(state, "oauth-gh.user-"+oauth.UserKey(who)+".json"), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, out := runCLI(t, "auth", "status", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "gh: per-user credentials: 2 user(s) connected through /oauth/connect/gh") ||
		strings.Contains(out, "secret-token") || strings.Contains(out, "bob") {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
}

// TestAuthStatusMoreScope: a login a call was refused for scope after
// shows as needs login with the scope the next login adds, in text and
// JSON; a hostile scope cannot reach the terminal as control bytes.
func TestAuthStatusMoreScope(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "viewmux.toml")
	text := "[server]\nstate_dir = " + tomlQuote(state) + "\n[upstreams.lin]\nurl = \"http://127.0.0.1:1/mcp\"\noauth = true\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	rec := `{"upstream":"lin","access_token":"secret-token","server_url":"http://127.0.0.1:1/mcp","issuer":"http://127.0.0.1:2",` +
		`"scopes":["mcp:basic"],"granted":["mcp:basic"],"want_scopes":["mcp:write","x\u001b[2J"]}`
	if err := os.WriteFile(filepath.Join(state, "oauth-lin.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, "auth", "status", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "lin: needs login (more scope: mcp:write x") || !strings.Contains(out, "run `viewmux auth login lin`") ||
		!strings.Contains(out, "lin: logged in at") || strings.Contains(out, "\x1b") || strings.Contains(out, "secret-token") {
		t.Fatalf("status: exit %d\n%q", code, out)
	}
	var stdout, stderr bytes.Buffer
	code = run([]string{"auth", "status", "--json", "--config", cfg}, &stdout, &stderr)
	var rows []authStatusRow
	if err := json.Unmarshal(stdout.Bytes(), &rows); code != exitOK || err != nil || len(rows) != 1 || len(rows[0].MoreScope) != 2 || rows[0].MoreScope[0] != "mcp:write" {
		t.Fatalf("status --json: exit %d %v\n%s%s", code, err, stdout.String(), stderr.String())
	}
}

// TestCheckNeedsMoreScope: an upstream that refuses its tool list for a
// scope the login was not granted is "needs login (more scope: …)" in
// check, with the command to run.
func TestCheckNeedsMoreScope(t *testing.T) {
	s := oauthtest.New(t, server.NewStreamableHTTPServer(server.NewMCPServer("admin-only", "1", server.WithToolCapabilities(false))))
	s.Lock()
	s.ListScope = "mcp:admin"
	s.Unlock()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if _, err := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: state}, oauth.Options{}).Login(context.Background(),
		oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil)}); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "viewmux.toml")
	text := "[server]\nstate_dir = " + tomlQuote(state) + "\n[upstreams.lin]\nurl = " + tomlQuote(s.URL()) + "\noauth = true\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, "check", "--config", cfg)
	if code != exitRuntime || !regexp.MustCompile(`lin\s+http\s+needs login \(more scope: mcp:admin\)\s+0\s+0\s+run .viewmux auth login lin.`).MatchString(out) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
