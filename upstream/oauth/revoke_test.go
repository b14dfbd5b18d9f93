package oauth_test

import (
	"context"
	"errors"
	"testing"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// TestRevoke: Revoke sends the refresh token and then the access token
// to the revocation endpoint (RFC 7009) with their hints and the
// client's id, after which the authorization server no longer takes
// them; a server with no revocation endpoint is not asked.
func TestRevoke(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	dir := t.TempDir()
	c := newClient(t, s, dir)
	rec := login(t, c)
	revoked, err := c.Revoke(context.Background())
	if err != nil || !revoked {
		t.Fatalf("Revoke: %v %v", revoked, err)
	}
	s.Lock()
	forms := s.RevokeForms
	s.Unlock()
	if len(forms) != 2 || forms[0].Get("token") != rec.RefreshToken || forms[0].Get("token_type_hint") != "refresh_token" ||
		forms[1].Get("token") != rec.AccessToken || forms[1].Get("token_type_hint") != "access_token" || forms[1].Get("client_id") != rec.ClientID {
		t.Fatalf("revocation requests: %v", forms)
	}
	if _, ok := s.SubjectOf(rec.AccessToken); ok {
		t.Fatal("the access token is still valid after revocation")
	}

	s2 := oauthtest.New(t, okHandler)
	s2.Lock()
	s2.NoRevocation = true
	s2.Unlock()
	c2 := newClient(t, s2, t.TempDir())
	login(t, c2)
	if revoked, err := c2.Revoke(context.Background()); !errors.Is(err, oauth.ErrNoRevocation) || revoked {
		t.Fatalf("no revocation endpoint: %v %v", revoked, err)
	}
}

// TestLoginProbeSendsHeaders: the login's probe of the upstream carries
// the upstream's configured headers (a gateway in front of it may want
// its key before it answers with its challenge), but never a configured
// Authorization.
func TestLoginProbeSendsHeaders(t *testing.T) {
	s := oauthtest.New(t, okHandler)
	c := oauth.New("lin", s.URL(), configs.UpstreamOAuth{StateDir: t.TempDir()},
		oauth.Options{Headers: map[string]string{"X-Api-Key": "k-123", "Authorization": "Bearer static"}})
	login(t, c)
	s.Lock()
	h := s.LastUnauthenticated
	s.Unlock()
	if h.Get("X-Api-Key") != "k-123" || h.Get("Authorization") != "" {
		t.Fatalf("probe headers: %v", h)
	}
}
