package aggregator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/filter"
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

// TestPerUserCallRefusedForScope: a user's call the upstream refuses for
// a scope their login lacks is a tool error with a link to connect again
// (never offered by URL elicitation: the user is connected); the login
// the link starts asks for the scope too, and the call then goes
// through, as that user.
func TestPerUserCallRefusedForScope(t *testing.T) {
	rs := lookupUpstream(t)
	rs.Lock()
	rs.ToolScope = "mcp:write"
	rs.Unlock()
	a := New(perUserConfig(t, rs.URL()), Options{})
	defer a.Close()
	ctx := context.Background()
	connect := func(link string) []string {
		t.Helper()
		lu, _ := url.Parse(link)
		authURL, nonce, err := a.BeginConnect(ctx, "gh", lu.Query().Get("ticket"))
		if err != nil {
			t.Fatal(err)
		}
		au, _ := url.Parse(authURL)
		if _, _, err := a.FinishConnect(ctx, approveAs(t, authURL, "alice"), nonce); err != nil {
			t.Fatal(err)
		}
		return strings.Fields(au.Query().Get("scope"))
	}
	link, err := a.ConnectLink("gh", "oauth:alice")
	if err != nil {
		t.Fatal(err)
	}
	connect(link)

	alice := &elicitClient{testClient: testClient{session: "S", caller: "oauth:alice"}, answer: func(mcp.ElicitationParams) string { return "accept" }}
	e := &filter.Entry{Tool: mcp.Tool{Name: "gh__lookup"}, Upstream: "gh", Original: "lookup"}
	res, isError, err := a.CallTool(ctx, alice, e, json.RawMessage(`{"name":"gh__lookup","arguments":{}}`))
	var out struct {
		Content []struct{ Text string }
	}
	json.Unmarshal(res, &out)
	if err != nil || !isError || len(out.Content) != 1 || !strings.Contains(out.Content[0].Text, "needs more access from your account") ||
		!strings.Contains(out.Content[0].Text, "scope mcp:write") || !strings.Contains(out.Content[0].Text, "/oauth/connect/gh?ticket=") {
		t.Fatalf("refused call: %s %v %v", res, isError, err)
	}
	if len(alice.asked) != 0 {
		t.Fatalf("asked by elicitation %d times, want none: the user is connected", len(alice.asked))
	}
	text := out.Content[0].Text
	link = text[strings.Index(text, "http://"):]
	link = link[:strings.IndexByte(link, ' ')]
	if got := connect(link); !slices.Contains(got, "mcp:tools") || !slices.Contains(got, "mcp:write") {
		t.Fatalf("the link's login asked for %v, want mcp:tools and mcp:write", got)
	}
	res, isError, err = a.CallTool(ctx, alice, e, json.RawMessage(`{"name":"gh__lookup","arguments":{}}`))
	if err != nil || isError || !strings.Contains(string(res), "lookup ran") {
		t.Fatalf("after connecting again: %s %v %v", res, isError, err)
	}
	rs.Lock()
	defer rs.Unlock()
	if len(rs.Calls) != 1 || rs.Calls[0].Subject != "alice" {
		t.Fatalf("the upstream's calls: %+v", rs.Calls)
	}
}
