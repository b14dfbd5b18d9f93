//go:build unix

package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/integration/internal/itest"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// Static tokens of the per-user test: two users and an admin (for the
// status page).
const (
	puAlice = "alice-static-token-0001"
	puBob   = "bob-static-token-000002"
	puAdmin = "admin-static-token-0003"
)

// puConfig is viewmux with upstream lin behind the test authorization
// server, with per-user credentials.
func puConfig(dir, upstreamURL string) string {
	return "[server]\nstate_dir = " + itest.TomlString(filepath.Join(dir, "state")) + "\n\n" +
		"[[auth.tokens]]\ntoken = \"" + puAlice + "\"\nprofiles = [\"agent\"]\n\n" +
		"[[auth.tokens]]\ntoken = \"" + puBob + "\"\nprofiles = [\"agent\"]\n\n" +
		"[[auth.tokens]]\ntoken = \"" + puAdmin + "\"\nprofiles = [\"agent\"]\nadmin = true\n\n" +
		"[upstreams.lin]\nurl = " + itest.TomlString(upstreamURL) + "\noauth = true\ncredentials = \"per-user\"\n\n[profiles.agent]\n"
}

// puSession is a /mcp session of the holder of a static token.
func puSession(t *testing.T, mux *itest.Mux, token string) *itest.RecHTTP {
	t.Helper()
	return &itest.RecHTTP{S: itest.OpenRawSession(t, mux.URL(), map[string]string{"Authorization": "Bearer " + token})}
}

// puCall calls lin__lookup and returns the result's text and isError.
func puCall(t *testing.T, c *itest.RecHTTP) (string, bool) {
	t.Helper()
	return puCallTool(t, c, "lin__lookup")
}

// puCallTool calls tool and returns the result's text and isError.
func puCallTool(t *testing.T, c *itest.RecHTTP, tool string) (string, bool) {
	t.Helper()
	a := c.Do(t, "tools/call", `{"name":"`+tool+`","arguments":{"word":"x"}}`)
	if a.Msg.Error != nil {
		t.Fatalf("tools/call: %s", a.Raw)
	}
	var r struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(a.Msg.Result, &r); err != nil || len(r.Content) == 0 {
		t.Fatalf("tools/call result: %s (%v)", a.Raw, err)
	}
	return r.Content[0].Text, r.IsError
}

// puTools lists the tools the holder of token sees.
func puTools(t *testing.T, mux *itest.Mux, token string) []string {
	t.Helper()
	a := puSession(t, mux, token).Do(t, "tools/list", `{}`)
	var r struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	json.Unmarshal(a.Msg.Result, &r)
	var names []string
	for _, tl := range r.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// puAwaitTools waits until the holder of token sees lin__lookup.
func puAwaitTools(t *testing.T, mux *itest.Mux, token string) {
	t.Helper()
	puAwaitTool(t, mux, token, "lin__lookup")
}

// puAwaitTool waits until the holder of token sees tool.
func puAwaitTool(t *testing.T, mux *itest.Mux, token, tool string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		names := puTools(t, mux, token)
		if strings.Contains(strings.Join(names, " "), tool) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listed (tools %v)\n%s", tool, names, mux.Stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// puGet GETs u with headers, following no redirect.
func puGet(t *testing.T, hc *http.Client, u string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// puBrowser is a browser: cookies kept, redirects shown, not followed.
func puBrowser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// puConnect takes a browser through the connect link as sub logging in
// at the authorization server: the confirmation page (which must name
// identity and the upstream), its form, the authorization server, the
// callback. It returns the callback URL, for replay checks.
func puConnect(t *testing.T, b *http.Client, mux *itest.Mux, link, identity, sub string) string {
	t.Helper()
	resp, page := puGet(t, b, link, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, identity) || !strings.Contains(page, "upstream lin") {
		t.Fatalf("confirmation page: %d\n%s", resp.StatusCode, page)
	}
	lu, _ := url.Parse(link)
	ticket := lu.Query().Get("ticket")
	// Only the form uses the ticket: the page did not.
	req, _ := http.NewRequest(http.MethodPost, "http://"+mux.Addr+"/oauth/connect/lin", strings.NewReader(url.Values{"ticket": {ticket}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+mux.Addr)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirm: %d %s\n%s", resp.StatusCode, body, mux.Stderr())
	}
	au, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	if q := au.Query(); q.Get("code_challenge_method") != "S256" || q.Get("resource") == "" || q.Get("redirect_uri") != "http://"+mux.Addr+"/oauth/callback" {
		t.Fatalf("authorization URL: %s", au)
	}
	q := au.Query()
	q.Set(oauthtest.LoginAsParam, sub)
	au.RawQuery = q.Encode()
	resp, _ = puGet(t, b, au.String(), nil)
	cb, err := resp.Location()
	if err != nil {
		t.Fatalf("authorization server: %d", resp.StatusCode)
	}
	resp, page = puGet(t, b, cb.String(), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Connected") {
		t.Fatalf("callback: %d\n%s\n%s", resp.StatusCode, page, mux.Stderr())
	}
	// A second POST of the ticket is refused: it was good once.
	req, _ = http.NewRequest(http.MethodPost, "http://"+mux.Addr+"/oauth/connect/lin", strings.NewReader(url.Values{"ticket": {ticket}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err = b.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a used ticket: %d", resp.StatusCode)
	}
	return cb.String()
}

// puLink returns the link a tool error gives.
var puLink = regexp.MustCompile(`http://\S+/oauth/connect/lin\?ticket=[A-Za-z0-9_-]+`)

// puTokenFile reads the access token of a user's token file.
func puTokenFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.AccessToken == "" || rec.RefreshToken == "" {
		t.Fatalf("token file %s: %v", path, err)
	}
	return rec.AccessToken + "\n" + rec.RefreshToken
}

// TestPerUserCredentials is issue 19 §3's "two users through per-user":
// a test upstream that checks its tokens and records the subject of each
// call. Each user's calls arrive with that user's token only; a user who
// has not connected gets a tool error with the connect link and nothing
// is sent; a restart keeps the stored tokens. The token files are 0600,
// replaced atomically, and their tokens appear nowhere: not in the log,
// the status page, check or any answer.
func TestPerUserCredentials(t *testing.T) {
	rug := itest.StartRug(t)
	as := oauthtest.New(t, server.NewStreamableHTTPServer(rug.Srv))
	dir := t.TempDir()
	cfg := puConfig(dir, as.URL())
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Dir: dir})
	admin := map[string]string{"Authorization": "Bearer " + puAdmin}
	plain := &http.Client{Timeout: 10 * time.Second}

	// No operator login and no user: listed as per-user, its placeholder
	// the only tool, and nothing sent upstream.
	resp, st := puGet(t, plain, "http://"+mux.Addr+"/status.json", admin)
	var status struct {
		Upstreams []struct {
			Name        string `json:"name"`
			State       string `json:"state"`
			Credentials string `json:"credentials"`
		} `json:"upstreams"`
	}
	json.Unmarshal([]byte(st), &status)
	if resp.StatusCode != http.StatusOK || len(status.Upstreams) != 1 || status.Upstreams[0].State != "per-user" || status.Upstreams[0].Credentials != "per-user" {
		t.Fatalf("status before any login: %d %s", resp.StatusCode, st)
	}
	if names := puTools(t, mux, puAlice); len(names) != 1 || names[0] != "lin__connect" {
		t.Fatalf("tools before any login: %v, want the placeholder lin__connect", names)
	}

	// Asking for a link needs a token; with one, the link is that
	// identity's.
	if resp, _ := puGet(t, plain, "http://"+mux.Addr+"/oauth/connect/lin", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("connect without a token: %d", resp.StatusCode)
	}
	resp, body := puGet(t, plain, "http://"+mux.Addr+"/oauth/connect/lin", map[string]string{"Authorization": "Bearer " + puAlice})
	link := puLink.FindString(body)
	if resp.StatusCode != http.StatusOK || link == "" {
		t.Fatalf("connect link for alice: %d %s", resp.StatusCode, body)
	}
	short := func(tok string) string {
		s := sha256.Sum256([]byte(tok))
		return "token:" + hex.EncodeToString(s[:])[:8]
	}
	aliceCB := puConnect(t, puBrowser(t), mux, link, short(puAlice), "alice")
	puAwaitTools(t, mux, puBob) // listed through alice's connection: there is no operator login

	// Bob has not connected: a tool error with his link, nothing sent.
	as.Lock()
	before, unauth := len(as.Calls), as.Unauthenticated
	as.Unlock()
	bob := puSession(t, mux, puBob)
	text, isErr := puCall(t, bob)
	bobLink := puLink.FindString(text)
	if !isErr || bobLink == "" || !strings.Contains(text, "not connected") {
		t.Fatalf("bob before connecting: isError %v: %s", isErr, text)
	}
	as.Lock()
	after, unauth2 := len(as.Calls), as.Unauthenticated
	as.Unlock()
	if after != before || unauth2 != unauth || rug.Called("lookup") != 0 {
		t.Fatalf("bob's unconnected call reached the upstream (%d→%d calls, %d→%d unauthenticated)", before, after, unauth, unauth2)
	}

	alice := puSession(t, mux, puAlice)
	for range 2 {
		if text, isErr := puCall(t, alice); isErr || text != "lookup ran" {
			t.Fatalf("alice's call: %v %s", isErr, text)
		}
	}
	// The link in bob's tool error is bob's: connecting through it
	// connects bob.
	puConnect(t, puBrowser(t), mux, bobLink, short(puBob), "bob")
	if text, isErr := puCall(t, bob); isErr || text != "lookup ran" {
		t.Fatalf("bob's call after connecting: %v %s", isErr, text)
	}
	if text, isErr := puCall(t, alice); isErr || text != "lookup ran" {
		t.Fatalf("alice's third call: %v %s", isErr, text)
	}
	want := []string{"alice", "alice", "bob", "alice"}
	as.Lock()
	calls := append([]oauthtest.Call(nil), as.Calls...)
	as.Unlock()
	if len(calls) != len(want) {
		t.Fatalf("the upstream saw %d calls, want %d: %+v", len(calls), len(want), calls)
	}
	tokenOf := map[string]string{}
	for i, c := range calls {
		if c.Subject != want[i] {
			t.Fatalf("call %d arrived as %q, want %q", i, c.Subject, want[i])
		}
		if prev, ok := tokenOf[c.Subject]; ok && prev != c.Token {
			t.Logf("%s's token changed (refresh)", c.Subject)
		}
		tokenOf[c.Subject] = c.Token
		for _, down := range []string{puAlice, puBob, puAdmin} {
			if c.Token == down {
				t.Fatal("a downstream token was sent upstream")
			}
		}
	}

	// A callback replayed (same browser or another) finishes nothing.
	if resp, _ := puGet(t, puBrowser(t), aliceCB, nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a replayed callback: %d", resp.StatusCode)
	}

	// Token files: one per user, 0600, named by a hash.
	state := filepath.Join(dir, "state")
	files, _ := filepath.Glob(filepath.Join(state, "oauth-lin.user-*.json"))
	if len(files) != 2 {
		t.Fatalf("token files: %v", files)
	}
	var secrets []string
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", f, fi.Mode().Perm())
		}
		secrets = append(secrets, strings.Split(puTokenFile(t, f), "\n")...)
	}
	if tmp, _ := filepath.Glob(filepath.Join(state, ".*tmp")); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}

	// Restart: the stored logins are used; nobody logs in again.
	countCodes := func() int {
		as.Lock()
		defer as.Unlock()
		n := 0
		for _, f := range as.TokenForms {
			if f.Get("grant_type") == "authorization_code" {
				n++
			}
		}
		return n
	}
	codes := countCodes()
	logs := mux.Stderr()
	mux.Signal(syscall.SIGTERM)
	if _, ok := mux.Wait(20 * time.Second); !ok {
		t.Fatal("viewmux did not stop")
	}
	mux = itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Dir: dir})
	puAwaitTools(t, mux, puAlice) // listed with a stored user login
	if text, isErr := puCall(t, puSession(t, mux, puBob)); isErr || text != "lookup ran" {
		t.Fatalf("bob after the restart: %v %s", isErr, text)
	}
	if text, isErr := puCall(t, puSession(t, mux, puAlice)); isErr || text != "lookup ran" {
		t.Fatalf("alice after the restart: %v %s", isErr, text)
	}
	as.Lock()
	calls = append([]oauthtest.Call(nil), as.Calls...)
	as.Unlock()
	if n := len(calls); n < 2 || calls[n-2].Subject != "bob" || calls[n-1].Subject != "alice" {
		t.Fatalf("calls after the restart: %+v", calls)
	}
	if countCodes() != codes {
		t.Fatal("a user had to log in again after the restart")
	}

	// Alice connects again: her file is replaced by a rename (a new
	// inode), and her next call uses the new token.
	aliceFile := filepath.Join(state, "oauth-lin.user-"+puUserKey("token:"+fullHash(puAlice))+".json")
	oldFI, err := os.Stat(aliceFile)
	if err != nil {
		t.Fatal(err)
	}
	resp, body = puGet(t, plain, "http://"+mux.Addr+"/oauth/connect/lin", map[string]string{"Authorization": "Bearer " + puAlice})
	puConnect(t, puBrowser(t), mux, puLink.FindString(body), short(puAlice), "alice")
	newFI, err := os.Stat(aliceFile)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(oldFI, newFI) {
		t.Fatal("alice's token file was rewritten in place, not replaced")
	}
	fresh := strings.Split(puTokenFile(t, aliceFile), "\n")
	secrets = append(secrets, fresh...)
	if text, isErr := puCall(t, puSession(t, mux, puAlice)); isErr || text != "lookup ran" {
		t.Fatalf("alice after reconnecting: %v %s", isErr, text)
	}
	as.Lock()
	last := as.Calls[len(as.Calls)-1]
	as.Unlock()
	if last.Subject != "alice" || last.Token != fresh[0] {
		t.Fatalf("alice's call after reconnecting went as %q with the old token: %v", last.Subject, last.Token != fresh[0])
	}

	// The tokens appear nowhere.
	_, st = puGet(t, plain, "http://"+mux.Addr+"/status.json", admin)
	_, page := puGet(t, plain, "http://"+mux.Addr+"/", admin)
	check := exec.Command(itest.MuxBinary(t), "check", "--config", filepath.Join(dir, "viewmux.toml"))
	check.Dir = dir
	checkOut, _ := check.CombinedOutput()
	if !strings.Contains(string(checkOut), "per-user") {
		t.Errorf("check does not show lin as per-user:\n%s", checkOut)
	}
	for _, tok := range secrets {
		for what, text := range map[string]string{"viewmux's log": logs + mux.Stderr(), "/status.json": st, "the status page": page, "check": string(checkOut), "a tool error": text} {
			if strings.Contains(text, tok) {
				t.Errorf("%s shows a stored token", what)
			}
		}
	}
}

func fullHash(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }

// puUserKey is oauth.UserKey, written out: the file name is part of the
// state directory's format.
func puUserKey(identity string) string {
	s := sha256.Sum256([]byte("viewmux upstream user\x00" + identity))
	return hex.EncodeToString(s[:])
}
