package upstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// An oauth upstream without a token is "needs login", sends nothing, and
// comes up without a restart once a login (by another process: another
// Client on the same state directory) lands; a token the upstream later
// refuses is refreshed, and no token reaches a log line.
func TestOAuthNeedsLoginThenUp(t *testing.T) {
	s := oauthtest.New(t, server.NewStreamableHTTPServer(newTestServer()))
	dir := t.TempDir()
	cfg := &configs.Upstream{Name: "lin", Transport: configs.TransportHTTP, URL: s.URL(),
		OAuth: &configs.UpstreamOAuth{StateDir: dir}, ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second}
	logs := &logSink{}
	opts := fastOptions(logs)
	opts.MinBackoff = 50 * time.Millisecond
	opts.OAuth = oauth.Options{PollInterval: 10 * time.Millisecond}
	u := New(cfg, opts)
	t.Cleanup(func() { u.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := u.Start(ctx)
	if !errors.Is(err, ErrNeedsLogin) || !strings.Contains(err.Error(), "viewmux auth login lin") {
		t.Fatalf("Start = %v, want needs login naming the command", err)
	}
	if h := u.Health(); !errors.Is(h.LastError, ErrNeedsLogin) || u.Catalog() != nil {
		t.Fatalf("health %+v, catalog %v", h, u.Catalog())
	}
	s.Lock()
	sent := s.Unauthenticated + s.Authorized
	s.Unlock()
	if sent != 0 {
		t.Fatalf("%d requests reached the upstream without a token", sent)
	}

	other := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{})
	rec, err := other.Login(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the upstream up after the login", func() bool { return u.State() == StateUp })
	if got := callText(t, u, "echo", map[string]any{"a": 1}); got != `{"a":1}` {
		t.Fatalf("echo = %q", got)
	}

	s.RevokeAccess()
	if got := callText(t, u, "echo", map[string]any{"b": 2}); got != `{"b":2}` {
		t.Fatalf("echo after revocation = %q", got)
	}
	s.Lock()
	refreshed := s.TokenForms[len(s.TokenForms)-1].Get("grant_type") == "refresh_token"
	s.Unlock()
	if !refreshed {
		t.Fatal("no refresh after the upstream refused the token")
	}
	for _, r := range logs.find(func(map[string]string) bool { return true }) {
		for k, v := range r {
			if strings.Contains(v, rec.AccessToken) || strings.Contains(v, rec.RefreshToken) || strings.Contains(v, "-secret") {
				t.Errorf("log %s=%q shows a token", k, v)
			}
		}
	}
}

// TestOAuthLegacySSE: a legacy HTTP+SSE upstream behind OAuth gets the
// token on its GET stream and on every POST, and a refused token is
// refreshed.
func TestOAuthLegacySSE(t *testing.T) {
	s := oauthtest.New(t, server.NewSSEServer(newTestServer()))
	dir := t.TempDir()
	url := s.RS.URL + "/sse"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := oauth.New("leg", url, configs.UpstreamOAuth{StateDir: dir}, oauth.Options{}).Login(ctx,
		oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil)}); err != nil {
		t.Fatal(err)
	}
	cfg := &configs.Upstream{Name: "leg", Transport: configs.TransportSSE, URL: url,
		OAuth: &configs.UpstreamOAuth{StateDir: dir}, ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second}
	u := New(cfg, fastOptions(&logSink{}))
	startUpstream(t, u)
	if got := callText(t, u, "echo", map[string]any{"a": 1}); got != `{"a":1}` {
		t.Fatalf("echo = %q", got)
	}
	s.RevokeAccess()
	if got := callText(t, u, "echo", map[string]any{"b": 2}); got != `{"b":2}` {
		t.Fatalf("echo after revocation = %q", got)
	}
	s.Lock()
	defer s.Unlock()
	if last := s.TokenForms[len(s.TokenForms)-1]; last.Get("grant_type") != "refresh_token" || last.Get("resource") != url {
		t.Fatalf("last token request %v: want a refresh for %s", last, url)
	}
}

// TestOAuthInsufficientScopeFailsOnlyTheCall: a tools/call the upstream
// refuses with 403 insufficient_scope fails with ErrInsufficientScope
// naming the scope and the command; the connection stays up.
func TestOAuthInsufficientScopeFailsOnlyTheCall(t *testing.T) {
	s := oauthtest.New(t, server.NewStreamableHTTPServer(newTestServer()))
	s.Lock()
	s.ToolScope = "mcp:write"
	s.Unlock()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{}).Login(ctx,
		oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil)}); err != nil {
		t.Fatal(err)
	}
	cfg := &configs.Upstream{Name: "lin", Transport: configs.TransportHTTP, URL: s.URL(),
		OAuth: &configs.UpstreamOAuth{StateDir: dir}, ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second}
	u := New(cfg, fastOptions(&logSink{}))
	startUpstream(t, u)
	var req mcp.CallToolRequest
	req.Params.Name = "echo"
	_, err := u.CallTool(ctx, req)
	if !errors.Is(err, ErrInsufficientScope) || !strings.Contains(err.Error(), "mcp:write") || !strings.Contains(err.Error(), "viewmux auth login lin") {
		t.Fatalf("CallTool = %v, want insufficient scope naming mcp:write and the command", err)
	}
	if u.State() != StateUp || u.Catalog() == nil {
		t.Fatalf("state %v after a refused call, want up with its catalog", u.State())
	}
}
