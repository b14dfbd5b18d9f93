package upstream

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// TestOAuthCatalogRefusedForScope: an upstream that refuses its tool list
// with 403 insufficient_scope fails to connect with ErrInsufficientScope,
// at 2025-11-25 and at a pinned 2026-07-28; its login wants the scope;
// and the operator's next login, asking for it, brings the upstream up
// as soon as it lands, not after the reconnect backoff (a minute here).
func TestOAuthCatalogRefusedForScope(t *testing.T) {
	for _, protocol := range []string{"", "2026-07-28"} {
		t.Run("protocol="+protocol, func(t *testing.T) {
			s := oauthtest.New(t, server.NewStreamableHTTPServer(newTestServer()))
			s.Lock()
			s.ListScope = "mcp:admin"
			s.Unlock()
			dir := t.TempDir()
			c := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := c.Login(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil)}); err != nil {
				t.Fatal(err)
			}
			cfg := &configs.Upstream{Name: "lin", Transport: configs.TransportHTTP, URL: s.URL(), Protocol: protocol,
				OAuth: &configs.UpstreamOAuth{StateDir: dir}, ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second}
			opts := fastOptions(&logSink{})
			opts.MinBackoff = time.Minute
			opts.OAuth = oauth.Options{PollInterval: 10 * time.Millisecond}
			up := make(chan struct{}, 1)
			opts.OnCatalog = func(*Upstream) {
				select {
				case up <- struct{}{}:
				default:
				}
			}
			u := New(cfg, opts)
			t.Cleanup(func() { u.Close() })
			u.Start(ctx) // fails: the catalog is refused
			if h := u.Health(); u.State() == StateUp || !errors.Is(h.LastError, ErrInsufficientScope) {
				t.Fatalf("state %v, last error %v: want down for insufficient scope", u.State(), h.LastError)
			}
			if got := u.OAuth().MoreScopes(); !slices.Equal(got, []string{"mcp:admin"}) {
				t.Fatalf("MoreScopes = %v, want mcp:admin", got)
			}
			// The operator's next login, as auth login makes it.
			if _, err := c.Login(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil), Scopes: c.Scopes()}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-up:
			case <-ctx.Done():
				t.Fatalf("still %v after the login: %v", u.State(), u.Health().LastError)
			}
			if u.OAuth().MoreScopes() != nil {
				t.Fatalf("MoreScopes after the login = %v", u.OAuth().MoreScopes())
			}
		})
	}
}
