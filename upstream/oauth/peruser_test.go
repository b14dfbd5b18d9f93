package oauth_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// approveAs follows authURL at s's authorization server logged in as sub
// and returns the callback URL it redirects to.
func approveAs(t *testing.T, authURL, sub string) *url.URL {
	t.Helper()
	u, err := url.Parse(authURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(oauthtest.LoginAsParam, sub)
	u.RawQuery = q.Encode()
	cb, err := oauth.AutoApprove(nil)(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	return cb
}

// TestPerUserLogins: each user's login (Begin, then Finish with the
// callback) lands in a token file of its own, keyed by a hash of the
// identity (which never appears in the name), 0600; each user's Client
// hands out that user's token only, and the gateway's login is apart.
func TestPerUserLogins(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	dir := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tokens := map[string]string{}
	for _, who := range []string{"oauth:alice", "oauth:bob"} {
		c := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{User: who})
		p, authURL, err := c.Begin(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/oauth/callback"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(authURL, "code_challenge_method=S256") || !strings.Contains(authURL, "resource=") {
			t.Fatalf("authorization URL lacks PKCE or resource: %s", authURL)
		}
		rec, err := c.Finish(ctx, p, approveAs(t, authURL, strings.TrimPrefix(who, "oauth:")))
		if err != nil {
			t.Fatal(err)
		}
		if rec.User != oauth.UserKey(who) || rec.User == "" {
			t.Fatalf("record user %q", rec.User)
		}
		fi, err := os.Stat(filepath.Join(dir, "oauth-lin.user-"+oauth.UserKey(who)+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("token file mode %v", fi.Mode().Perm())
		}
		// A fresh Client (a restart) reads the same login.
		tok, err := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{User: who}).Token(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sub, ok := s.SubjectOf(tok); !ok || "oauth:"+sub != who {
			t.Fatalf("%s's token was issued to %q (valid %v)", who, sub, ok)
		}
		tokens[who] = tok
	}
	if tokens["oauth:alice"] == tokens["oauth:bob"] {
		t.Fatal("both users got one token")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), "alice") || strings.Contains(e.Name(), "bob") {
			t.Errorf("a file name shows an identity: %s", e.Name())
		}
	}
	// The gateway's own login is not any user's.
	if _, err := newClient(t, s, dir).Token(ctx); err == nil {
		t.Fatal("the gateway's Client found a token though only users logged in")
	}
	// A user who never logged in has none, and the error does not say to
	// run `viewmux auth login`.
	_, err := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{User: "oauth:carol"}).Token(ctx)
	if err == nil || strings.Contains(err.Error(), "auth login") {
		t.Fatalf("carol: %v", err)
	}
}

// TestFinishChecksTheCallback: a callback with another login's state, or
// an iss that is not the issuer's, stores nothing.
func TestFinishChecksTheCallback(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	dir := t.TempDir()
	ctx := context.Background()
	c := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{User: "oauth:alice"})
	p1, _, err := c.Begin(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb"})
	if err != nil {
		t.Fatal(err)
	}
	_, url2, err := c.Begin(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Finish(ctx, p1, approveAs(t, url2, "mallory")); err == nil || !strings.Contains(err.Error(), "state") {
		t.Fatalf("another login's callback: %v", err)
	}
	cb := approveAs(t, url2, "alice")
	q := cb.Query()
	q.Set("state", p1.State())
	q.Set("iss", "http://127.0.0.1:1")
	cb.RawQuery = q.Encode()
	if _, err := c.Finish(ctx, p1, cb); err == nil || !strings.Contains(err.Error(), "iss") {
		t.Fatalf("a foreign iss: %v", err)
	}
	if st, _ := c.Status(); st.LoggedIn {
		t.Fatal("a refused callback stored a login")
	}
}

// TestRegistrationsReused: logins sharing Registrations register one
// client with the authorization server, however many users log in or
// how often a login is begun; without them, each login registers.
func TestRegistrationsReused(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	dir := t.TempDir()
	ctx := context.Background()
	regs := &oauth.Registrations{}
	for i, who := range []string{"oauth:a", "oauth:b", "oauth:a"} {
		c := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{User: who})
		p, authURL, err := c.Begin(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/oauth/callback", Registrations: regs})
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if _, err := c.Finish(ctx, p, approveAs(t, authURL, who)); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Lock()
	n := s.Registered
	s.Unlock()
	if n != 1 {
		t.Fatalf("%d registrations for three logins sharing Registrations", n)
	}
	c := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{User: "oauth:c"})
	if _, _, err := c.Begin(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/oauth/callback"}); err != nil {
		t.Fatal(err)
	}
	s.Lock()
	n = s.Registered
	s.Unlock()
	if n != 2 {
		t.Fatalf("%d registrations, want a second one for a login without Registrations", n)
	}
}
