package sessions

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// firstContactServer is viewmux with the bench upstream up and a
// per-user upstream lin (one tool, lookup) behind the test authorization
// server, nobody connected; alice and bob may see everything, carol's
// profile shows upstream up only, dave's the toolset lin only, erin's
// read-only tools only, and fred's names lin__lookup alone.
func firstContactServer(t *testing.T) (*Server, *oauthtest.Server) {
	t.Helper()
	mcpSrv := server.NewMCPServer("lin", "1.0.0", server.WithToolCapabilities(true))
	mcpSrv.AddTool(mcp.NewTool("lookup"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("lookup ran"), nil
	})
	return perUserLinServer(t, server.NewStreamableHTTPServer(mcpSrv), `[profiles.p]
[profiles.uponly]
upstreams = ["up"]
[profiles.linonly]
toolsets = ["lin"]
[profiles.ro]
read_only = true
allow = ["up__*", "lin__*"]
[profiles.named]
allow = ["lin__lookup"]
[[auth.tokens]]
token = "tok-alice"
profiles = ["p"]
[[auth.tokens]]
token = "tok-bob"
profiles = ["p"]
[[auth.tokens]]
token = "tok-carol"
profiles = ["uponly"]
[[auth.tokens]]
token = "tok-dave"
profiles = ["linonly"]
[[auth.tokens]]
token = "tok-erin"
profiles = ["ro"]
[[auth.tokens]]
token = "tok-fred"
profiles = ["named"]
`)
}

// peerTools lists the tools p's session sees.
func peerTools(t *testing.T, p reloadPeer) []string {
	t.Helper()
	m, _ := p.ask(t, "tools/list", map[string]any{})
	var r struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if err := json.Unmarshal(m.Result, &r); err != nil {
		t.Fatalf("tools/list: %s (%v)", m.Result, err)
	}
	var names []string
	for _, tl := range r.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// peerCall calls tool on p's session and returns the result's text and
// isError, or the JSON-RPC error's code.
func peerCall(t *testing.T, p reloadPeer, tool string) (text string, isError bool, code int) {
	t.Helper()
	m, _ := p.ask(t, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{}})
	if m.Error != nil {
		return m.Error.Message, false, m.Error.Code
	}
	var r struct {
		IsError bool `json:"isError"`
		Content []struct{ Text string }
	}
	if err := json.Unmarshal(m.Result, &r); err != nil || len(r.Content) == 0 {
		t.Fatalf("tools/call %s: %s (%v)", tool, m.Result, err)
	}
	return r.Content[0].Text, r.IsError, 0
}

// TestConnectFirstContact is the first contact with a per-user upstream
// nobody has connected to: the session lists lin__connect (where its
// profile shows lin at all), whose call gives each user a link of its
// own; following it in a browser connects the account, the session is
// told tools/list_changed, and then lists lin's own tools instead.
func TestConnectFirstContact(t *testing.T) {
	s, _ := firstContactServer(t)
	h := s.Handler()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close) // after the sessions' GET streams close (cleanups run last first)

	alice := openMCPPeer(t, hs, "Bearer tok-alice")
	if names := peerTools(t, alice); !slices.Contains(names, "lin__connect") || slices.Contains(names, "lin__lookup") || !slices.Contains(names, "up__tool_0000") {
		t.Fatalf("alice's tools before anyone connected: %v", names)
	}
	if names := peerTools(t, openMCPPeer(t, hs, "Bearer tok-dave")); !slices.Equal(names, []string{"lin__connect"}) {
		t.Fatalf("a profile of lin's toolset: %v, want its placeholder", names)
	}
	if names := peerTools(t, openMCPPeer(t, hs, "Bearer tok-erin")); !slices.Contains(names, "lin__connect") {
		t.Fatalf("a read-only profile: %v, want the placeholder (it is read-only)", names)
	}
	if names := peerTools(t, openMCPPeer(t, hs, "Bearer tok-fred")); len(names) != 0 {
		t.Fatalf("a profile that names lin__lookup alone: %v, want nothing before lin lists it", names)
	}
	carol := openMCPPeer(t, hs, "Bearer tok-carol")
	if names := peerTools(t, carol); slices.Contains(names, "lin__connect") {
		t.Fatalf("a profile that hides lin lists its placeholder: %v", names)
	}
	if text, _, code := peerCall(t, carol, "lin__connect"); code != mcp.METHOD_NOT_FOUND {
		t.Fatalf("carol calling lin__connect: %d %s, want -32601", code, text)
	}

	text, isError, code := peerCall(t, alice, "lin__connect")
	m := ticketRE.FindStringSubmatch(text)
	if code != 0 || !isError || m == nil {
		t.Fatalf("alice calling lin__connect: %d %v %s", code, isError, text)
	}
	ticket := m[1]
	_, aliceID, ok, err := s.Aggregator().ConnectTicket(ticket)
	if !ok || err != nil || !strings.HasPrefix(aliceID, "token:") {
		t.Fatalf("alice's ticket: %q %v %v", aliceID, ok, err)
	}
	bob := openMCPPeer(t, hs, "Bearer tok-bob")
	text, isError, _ = peerCall(t, bob, "lin__connect")
	mb := ticketRE.FindStringSubmatch(text)
	if !isError || mb == nil || mb[1] == ticket {
		t.Fatalf("bob calling lin__connect: %v %s", isError, text)
	}
	if _, bobID, _, _ := s.Aggregator().ConnectTicket(mb[1]); bobID == aliceID || bobID == "" {
		t.Fatalf("bob's ticket is %q's, alice's %q's", bobID, aliceID)
	}

	// Alice opens her link in a browser, confirms and logs in.
	rec := connectPost(h, ticket, "http://127.0.0.1:8931")
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("confirm: %d %s", rec.Code, rec.Body)
	}
	authURL, _ := url.Parse(rec.Header().Get("Location"))
	q := authURL.Query()
	q.Set(oauthtest.LoginAsParam, "alice")
	authURL.RawQuery = q.Encode()
	cb, err := oauth.AutoApprove(nil)(context.Background(), authURL.String())
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8931"+cb.RequestURI(), nil)
	for _, c := range rec.Result().Cookies() {
		req.AddCookie(c)
	}
	if page := httpDo(h, req); page.Code != http.StatusOK {
		t.Fatalf("callback: %d %s", page.Code, page.Body)
	}

	alice.listChanged(t)
	bob.listChanged(t)
	if names := peerTools(t, alice); slices.Contains(names, "lin__connect") || !slices.Contains(names, "lin__lookup") {
		t.Fatalf("alice's tools once she connected: %v", names)
	}
	if text, isError, _ := peerCall(t, alice, "lin__lookup"); isError || text != "lookup ran" {
		t.Fatalf("alice's call: %v %s", isError, text)
	}
	// Bob lists the tools too, and is still not connected: his call
	// answers with a link of his.
	text, isError, _ = peerCall(t, bob, "lin__lookup")
	if mb := ticketRE.FindStringSubmatch(text); !isError || mb == nil || mb[1] == ticket {
		t.Fatalf("bob's call, not connected: %v %s", isError, text)
	}
}
