package oauth_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// TestLoginProbeGetsTheChallengeAfterAnOpenInitialize: a server that lets
// anyone initialize and challenges only what follows still has its 401's
// scope asked for, not nothing (or everything its metadata lists).
func TestLoginProbeGetsTheChallengeAfterAnOpenInitialize(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	s.Lock()
	s.OpenInitialize = true
	s.Scopes = []string{"mcp:basic"}
	s.Unlock()
	rec := login(t, newClient(t, s, t.TempDir()))
	if !slices.Contains(rec.Scopes, "mcp:basic") {
		t.Fatalf("the login asked for %v, want the challenge's mcp:basic", rec.Scopes)
	}
}

// TestStepUpOnlyForANewScope: with a login that needs no person, a 403
// for a scope the login asked for already starts no login (it would end
// in the same refusal), so an upstream, or authorization server, that
// never lets the request through cannot make the client loop; each
// request fails with the refusal.
func TestStepUpOnlyForANewScope(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	s.Lock()
	s.Scopes = []string{"mcp:tools", "mcp:write"}
	s.ToolScope = "mcp:write"
	s.NeverGrant = "mcp:write" // asked for, never in a token
	s.Unlock()
	c := newClient(t, s, t.TempDir())
	login(t, c)
	hc, logins := stepUpClient(c)
	for i := range 3 {
		resp, err := hc.Post(s.URL(), "application/json", strings.NewReader(`{"method":"tools/call"}`))
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, oauth.ErrInsufficientScope) || !strings.Contains(err.Error(), "mcp:write") {
			t.Fatalf("request %d: %v, want insufficient scope naming mcp:write", i, err)
		}
	}
	if *logins != 0 {
		t.Fatalf("%d logins for a scope already asked for, want none", *logins)
	}
}

// TestMoreScopesAreThoseNotGranted: a refusal records what the login must
// add; the next login asks for it with the scopes granted, and clears it.
func TestMoreScopesAreThoseNotGranted(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	s.Lock()
	s.ToolScope = "mcp:write"
	s.Unlock()
	c := newClient(t, s, t.TempDir())
	login(t, c)
	if _, err := post(t, c, s, `{"method":"tools/call"}`); !errors.Is(err, oauth.ErrInsufficientScope) {
		t.Fatalf("tools/call: %v", err)
	}
	st, err := c.Status()
	if err != nil || !slices.Equal(c.MoreScopes(), []string{"mcp:write"}) || !slices.Equal(st.MoreScopes, []string{"mcp:write"}) {
		t.Fatalf("MoreScopes %v, Status %+v %v: want mcp:write", c.MoreScopes(), st, err)
	}
	if got := c.Scopes(); !slices.Equal(got, []string{"mcp:tools", "mcp:write"}) {
		t.Fatalf("Scopes() = %v, want mcp:tools (granted) and mcp:write (wanted)", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := c.Login(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil), Scopes: c.Scopes()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rec.Granted, "mcp:write") || c.MoreScopes() != nil {
		t.Fatalf("after the login: granted %v, MoreScopes %v", rec.Granted, c.MoreScopes())
	}
	if resp, err := post(t, c, s, `{"method":"tools/call"}`); err != nil || resp.StatusCode != 200 {
		t.Fatalf("tools/call after the login: %v %v", resp, err)
	}
}

// TestWantScopesRefusesAHostileChallenge: scopes that are not scope
// tokens, or too many beyond those granted, are an error naming the
// upstream, and nothing is recorded.
func TestWantScopesRefusesAHostileChallenge(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = "s" + strings.Repeat("x", i)
	}
	for _, tc := range []struct {
		name   string
		scopes []string
		want   string
	}{
		{"too long", []string{strings.Repeat("x", 300)}, "a scope of 300 bytes"},
		{"not a scope token", []string{"a\x1b[31mb"}, "not an RFC 6749 scope-token"},
		{"a quote", []string{`a"b`}, "not an RFC 6749 scope-token"},
		{"too many", many, "40 scopes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := oauthtest.New(t, okHandler)
			c := newClient(t, s, t.TempDir())
			login(t, c)
			err := c.WantScopes(tc.scopes)
			if err == nil || !strings.Contains(err.Error(), `upstream "lin"`) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("WantScopes = %v, want an error naming the upstream and %q", err, tc.want)
			}
			if c.MoreScopes() != nil {
				t.Fatalf("recorded %v", c.MoreScopes())
			}
		})
	}
	t.Run("too many in all", func(t *testing.T) {
		s := oauthtest.New(t, okHandler)
		c := newClient(t, s, t.TempDir())
		login(t, c)
		if err := c.WantScopes(many[:30]); err != nil {
			t.Fatal(err)
		}
		if err := c.WantScopes(many[30:]); err == nil || !strings.Contains(err.Error(), "more than 32") {
			t.Fatalf("WantScopes past the bound = %v", err)
		}
		if got := c.MoreScopes(); len(got) != 30 {
			t.Fatalf("recorded %d scopes, want the 30 within the bound", len(got))
		}
	})
}

// TestStepUpsEndForAnUpstreamNamingNewScopes: an upstream that names a
// new scope at every refusal (and whose authorization server never
// grants it) gets a bounded number of step-up logins, then plain
// refusals.
func TestStepUpsEndForAnUpstreamNamingNewScopes(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	c := newClient(t, s, t.TempDir())
	login(t, c)
	hc, logins := stepUpClient(c)
	n := 0
	for range 100 {
		n++
		s.Lock()
		s.ToolScope = fmt.Sprintf("scope-%d", n) // never the one just granted
		s.NeverGrant = s.ToolScope
		s.Unlock()
		resp, err := hc.Post(s.URL(), "application/json", strings.NewReader(`{"method":"tools/call"}`))
		if err == nil {
			resp.Body.Close()
		}
	}
	if *logins != 8 {
		t.Fatalf("%d step-up logins for 100 new scopes, want 8", *logins)
	}
}
