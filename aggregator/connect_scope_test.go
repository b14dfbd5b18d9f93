package aggregator

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// TestConnectLinkAsksForTheScopeWanted: a user whose call was refused
// for scope connects again through a link that asks for the scopes
// granted before and the one wanted (SEP-2350); another user's link asks
// for neither of that user's.
func TestConnectLinkAsksForTheScopeWanted(t *testing.T) {
	s := oauthtest.New(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	a := New(perUserConfig(t, s.URL()), Options{})
	defer a.Close()
	ctx := context.Background()
	begin := func(who string) []string {
		t.Helper()
		link, err := a.ConnectLink("gh", who)
		if err != nil {
			t.Fatal(err)
		}
		lu, _ := url.Parse(link)
		authURL, nonce, err := a.BeginConnect(ctx, "gh", lu.Query().Get("ticket"))
		if err != nil {
			t.Fatal(err)
		}
		au, _ := url.Parse(authURL)
		scopes := strings.Fields(au.Query().Get("scope"))
		if _, _, err := a.FinishConnect(ctx, approveAs(t, authURL, strings.TrimPrefix(who, "oauth:")), nonce); err != nil {
			t.Fatal(err)
		}
		return scopes
	}
	if got := begin("oauth:alice"); !slices.Equal(got, []string{"mcp:tools"}) {
		t.Fatalf("alice's first link asked for %v, want the challenge's mcp:tools", got)
	}
	uc := a.set.Load().byName["gh"].Config()
	// What the upstream's 403 insufficient_scope to alice's call records.
	if err := a.userLogin(uc, "oauth:alice").WantScopes([]string{"mcp:write"}); err != nil {
		t.Fatal(err)
	}
	if got := begin("oauth:alice"); !slices.Contains(got, "mcp:tools") || !slices.Contains(got, "mcp:write") {
		t.Fatalf("alice's link after the refusal asked for %v, want mcp:tools and mcp:write", got)
	}
	if got := a.userLogin(uc, "oauth:alice").MoreScopes(); got != nil {
		t.Fatalf("alice still wants %v after connecting again", got)
	}
	if got := begin("oauth:bob"); slices.Contains(got, "mcp:write") {
		t.Fatalf("bob's link asked for %v: alice's wanted scope", got)
	}
}
