package aggregator

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// changes returns Options whose Change hook signals each new snapshot,
// and a wait until the current snapshot satisfies cond, checked at each
// signal: the test waits on the aggregator's events, not on time. (A
// snapshot published before the wait began must not satisfy it: only the
// current one is looked at.)
func changes(t *testing.T, opts Options) (Options, func(what string, a *Aggregator, cond func(*Snapshot) bool)) {
	t.Helper()
	ch := make(chan struct{}, 1)
	opts.Hooks.Change = func(_, _ *Snapshot) {
		select {
		case ch <- struct{}{}:
		default: // a signal is pending already
		}
	}
	return opts, func(what string, a *Aggregator, cond func(*Snapshot) bool) {
		t.Helper()
		if cond(a.Snapshot()) {
			return
		}
		stop := time.After(20 * time.Second) // a hang, not a timing assertion
		for {
			select {
			case <-ch:
				if cond(a.Snapshot()) {
					return
				}
			case <-stop:
				t.Fatalf("no snapshot where %s", what)
			}
		}
	}
}

// startPerUser starts an aggregator on perUserConfig for the upstream at
// upURL, its state in dir, closed when the test ends; it returns the
// aggregator, its config, and changes' wait.
func startPerUser(t *testing.T, upURL, dir string) (*Aggregator, *configs.Config, func(what string, a *Aggregator, cond func(*Snapshot) bool)) {
	t.Helper()
	cfg := perUserConfig(t, upURL)
	cfg.Server.StateDir = dir
	opts, wait := changes(t, Options{})
	a := New(cfg, opts)
	t.Cleanup(func() { a.Close() })
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a, cfg, wait
}

// toolNames returns the exposed names of s's tools.
func toolNames(s *Snapshot) []string {
	var names []string
	for _, e := range s.Tools {
		names = append(names, e.Tool.Name)
	}
	return names
}

// listsOnly reports whether s lists exactly the tools named.
func listsOnly(names ...string) func(*Snapshot) bool {
	return func(s *Snapshot) bool { return strings.Join(toolNames(s), " ") == strings.Join(names, " ") }
}

// connectAs follows link (a connect link) as sub at the test
// authorization server, through a.
func connectAs(t *testing.T, a *Aggregator, link, sub string) {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	authURL, nonce, err := a.BeginConnect(ctx, "gh", u.Query().Get("ticket"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.FinishConnect(ctx, approveAs(t, authURL, sub), nonce); err != nil {
		t.Fatal(err)
	}
}

// callText calls e as cl and returns the result's first text, and
// isError.
func callText(t *testing.T, a *Aggregator, cl Client, e *filter.Entry) (string, bool) {
	t.Helper()
	res, isError, err := a.CallTool(context.Background(), cl, e, json.RawMessage(`{"name":"`+e.Tool.Name+`","arguments":{}}`))
	if err != nil {
		t.Fatalf("calling %s as %s: %v", e.Tool.Name, cl.Caller(), err)
	}
	var r struct {
		Content []struct{ Text string }
	}
	if err := json.Unmarshal(res, &r); err != nil || len(r.Content) == 0 {
		t.Fatalf("calling %s: result %s (%v)", e.Tool.Name, res, err)
	}
	return r.Content[0].Text, isError
}

// linkIn returns the connect link in text, and the identity its ticket
// belongs to.
func linkIn(t *testing.T, a *Aggregator, text string) (link, who string) {
	t.Helper()
	i := strings.Index(text, "http://127.0.0.1:8931/oauth/connect/gh?ticket=")
	if i < 0 {
		t.Fatalf("no connect link in %q", text)
	}
	link = strings.Fields(text[i:])[0]
	up, who, ok, err := a.ConnectTicket(ticketOf(t, link))
	if !ok || err != nil || up != "gh" {
		t.Fatalf("the link's ticket: %q %q %v %v", up, who, ok, err)
	}
	return link, who
}

// TestPlaceholderUntilListed: a per-user upstream without an operator
// login that nobody has connected to shows one tool, gh__connect, whose
// call answers each caller with a link of its own (a caller without an
// identity with no link), sending nothing upstream. Once a user connects
// through that link, a new snapshot lists the upstream's tools instead,
// and the placeholder, called by a connected user, says so.
func TestPlaceholderUntilListed(t *testing.T) {
	rs := lookupUpstream(t)
	a, _, wait := startPerUser(t, rs.URL(), t.TempDir())
	snap := a.Snapshot()
	if !listsOnly("gh__connect")(snap) {
		t.Fatalf("before anyone connected: %v, want the placeholder only", toolNames(snap))
	}
	ph := snap.Tool("gh__connect")
	var def struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		InputSchema struct {
			Type string `json:"type"`
		} `json:"inputSchema"`
		Annotations struct {
			ReadOnly *bool `json:"readOnlyHint"`
		} `json:"annotations"`
	}
	if err := json.Unmarshal(ph.Definition(), &def); err != nil || def.Name != "gh__connect" || def.InputSchema.Type != "object" ||
		!strings.Contains(def.Description, "Connect your account to gh") || def.Annotations.ReadOnly == nil || !*def.Annotations.ReadOnly {
		t.Fatalf("the placeholder's definition: %s (%v)", ph.Definition(), err)
	}
	if !ph.Placeholder || ph.Upstream != "gh" || snap.Upstreams[0].Tools != 0 {
		t.Fatalf("placeholder entry %+v, upstream status %+v", ph, snap.Upstreams[0])
	}

	alice := &testClient{session: "S1", caller: "oauth:alice"}
	text, isError := callText(t, a, alice, ph)
	aliceLink, who := linkIn(t, a, text)
	if !isError || who != "oauth:alice" || !strings.Contains(text, "not connected") {
		t.Fatalf("alice's call of the placeholder: isError %v, ticket of %q: %s", isError, who, text)
	}
	text, isError = callText(t, a, &testClient{session: "S2", caller: "oauth:bob"}, ph)
	bobLink, who := linkIn(t, a, text)
	if !isError || who != "oauth:bob" || bobLink == aliceLink || strings.Contains(text, ticketOf(t, aliceLink)) {
		t.Fatalf("bob's call of the placeholder: isError %v, ticket of %q: %s", isError, who, text)
	}
	if text, isError := callText(t, a, &testClient{session: "S3", caller: "address:127.0.0.1"}, ph); !isError || !strings.Contains(text, "no identity") || strings.Contains(text, "ticket=") {
		t.Fatalf("a call without identity: isError %v: %s", isError, text)
	}
	rs.Lock()
	calls := len(rs.Calls)
	rs.Unlock()
	if calls != 0 || a.UserConns() != 0 {
		t.Fatalf("the placeholder's calls sent %d calls upstream and opened %d connections", calls, a.UserConns())
	}

	connectAs(t, a, aliceLink, "alice")
	wait("the upstream's tools replace the placeholder", a, listsOnly("gh__lookup"))
	if text, isError := callText(t, a, alice, ph); isError || !strings.Contains(text, "is connected") {
		t.Fatalf("alice calling the placeholder of an older snapshot once connected: isError %v: %s", isError, text)
	}
	rs.Lock()
	calls = len(rs.Calls)
	rs.Unlock()
	if calls != 0 {
		t.Fatalf("a call of the placeholder was sent upstream (%d calls)", calls)
	}
}

// TestListingKeptInStore: the listing a user's connection made is kept
// in the state store, tool definitions only (nothing of the user's), and
// a gateway started on that store lists the upstream's tools at once,
// though no login is left to list them with; calling one without being
// connected answers with the caller's own connect link, as ever.
func TestListingKeptInStore(t *testing.T) {
	rs := lookupUpstream(t)
	dir := t.TempDir()
	a, cfg, wait := startPerUser(t, rs.URL(), dir)
	link, err := a.ConnectLink("gh", "oauth:alice")
	if err != nil {
		t.Fatal(err)
	}
	connectAs(t, a, link, "alice")
	wait("the tools listed after alice connected", a, listsOnly("gh__lookup"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	stored, err := os.ReadFile(filepath.Join(dir, listingKey("gh")))
	if err != nil {
		t.Fatalf("no listing kept: %v", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(stored, &doc); err != nil || len(doc) != 2 || !strings.Contains(string(doc["tools"]), `"name":"lookup"`) {
		t.Fatalf("stored listing: %s (%v)", stored, err)
	}
	hash := oauth.UserKey(a.loginIdentity("oauth:alice"))
	for _, secret := range []string{"alice", hash, hash[:16], "access_token", ticketOf(t, link), rs.URL()} {
		if strings.Contains(string(stored), secret) {
			t.Fatalf("the stored listing holds %q: %s", secret, stored)
		}
	}

	// No login is left: only the stored listing can list the tools.
	logins, _ := filepath.Glob(filepath.Join(dir, "oauth-gh.user-*"))
	if len(logins) == 0 {
		t.Fatal("no stored login to remove")
	}
	for _, f := range logins {
		os.Remove(f)
	}
	b := New(cfg, Options{})
	defer b.Close()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !listsOnly("gh__lookup")(b.Snapshot()) {
		t.Fatalf("restarted with the stored listing: %v, want gh__lookup", toolNames(b.Snapshot()))
	}
	for _, who := range []string{"oauth:alice", "oauth:bob"} {
		text, isError := callText(t, b, &testClient{session: "S", caller: who}, b.Snapshot().Tool("gh__lookup"))
		if _, owner := linkIn(t, b, text); !isError || owner != who {
			t.Fatalf("%s, not connected, calling a stored tool: isError %v, link of %q: %s", who, isError, owner, text)
		}
	}
	rs.Lock()
	calls := len(rs.Calls)
	rs.Unlock()
	if calls != 0 {
		t.Fatalf("calls of callers not connected reached the upstream: %d", calls)
	}

	// A listing of another url is not that upstream's.
	moved := *cfg
	up := *cfg.Upstreams[0]
	up.URL += "/elsewhere"
	moved.Upstreams = append(moved.Upstreams[:0:0], &up)
	c := New(&moved, Options{})
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !listsOnly("gh__connect")(c.Snapshot()) {
		t.Fatalf("the upstream at another url: %v, want the placeholder", toolNames(c.Snapshot()))
	}
}

// TestPlaceholderNamedLikeATool: an upstream that has a tool named
// connect. Before any listing gh__connect is the placeholder; once
// listed it is the upstream's own tool: a connected caller's call
// reaches the upstream, and one not connected still gets its link.
func TestPlaceholderNamedLikeATool(t *testing.T) {
	mcpSrv := server.NewMCPServer("up", "1.0.0", server.WithToolCapabilities(true))
	mcpSrv.AddTool(mcp.NewTool("connect", mcp.WithDescription("Connects two widgets.")), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("widgets connected"), nil
	})
	rs := oauthtest.New(t, server.NewStreamableHTTPServer(mcpSrv))
	a, _, wait := startPerUser(t, rs.URL(), t.TempDir())
	if e := a.Snapshot().Tool("gh__connect"); e == nil || !e.Placeholder {
		t.Fatalf("before any listing: %+v", e)
	}
	link, _ := a.ConnectLink("gh", "oauth:alice")
	connectAs(t, a, link, "alice")
	wait("the upstream's own connect listed", a, func(s *Snapshot) bool {
		e := s.Tool("gh__connect")
		return e != nil && !e.Placeholder
	})
	e := a.Snapshot().Tool("gh__connect")
	if e.Original != "connect" || e.Tool.Description != "Connects two widgets." || len(a.Snapshot().Tools) != 1 {
		t.Fatalf("listed: %+v", e)
	}
	if text, isError := callText(t, a, &testClient{session: "S1", caller: "oauth:alice"}, e); isError || text != "widgets connected" {
		t.Fatalf("alice's call of the upstream's connect: isError %v: %s", isError, text)
	}
	text, isError := callText(t, a, &testClient{session: "S2", caller: "oauth:bob"}, e)
	if _, who := linkIn(t, a, text); !isError || who != "oauth:bob" {
		t.Fatalf("bob's call of the upstream's connect: isError %v: %s", isError, text)
	}
	rs.Lock()
	calls := append([]oauthtest.Call(nil), rs.Calls...)
	rs.Unlock()
	if len(calls) != 1 || calls[0].Subject != "alice" {
		t.Fatalf("the upstream's calls: %+v", calls)
	}
}

// TestPlaceholderGivesWay: the placeholder of an unprefixed per-user
// upstream is named connect, and gives way to another upstream's tool of
// that name, whichever upstream comes first, with no collision reported;
// it passes none of its upstream's rules, nor counts among its tools.
func TestPlaceholderGivesWay(t *testing.T) {
	namer := Namer{Separator: "__", MaxLength: 64}
	placeholder := func(name, prefix string, rules configs.RuleSet) *source {
		src := testSource(name, prefix, nil, rules, nil, map[string][]string{"issues": {"*issue*"}})
		src.placeholder = true
		return src
	}
	other := testSource("b", "", &upstream.Catalog{Tools: []mcp.Tool{{Name: "connect"}}}, configs.RuleSet{}, nil, nil)
	snap := build(1, namer, []*source{placeholder("a", "", configs.RuleSet{}), other})
	if e := snap.Tool("connect"); e == nil || e.Placeholder || e.Upstream != "b" || len(snap.Conflicts) != 0 || len(snap.Tools) != 1 {
		t.Fatalf("connect is %+v, conflicts %v", e, snap.Conflicts)
	}
	snap = build(1, namer, []*source{placeholder("gh", "gh", configs.RuleSet{Allow: []string{"search_*"}})})
	e := snap.Tool("gh__connect")
	if e == nil || !e.Placeholder || snap.Upstreams[0].Tools != 0 || strings.Join(e.Toolsets, ",") != "gh,gh/issues" {
		t.Fatalf("the placeholder of an upstream whose rules allow search_* only: %+v, status %+v", e, snap.Upstreams[0])
	}
}

// TestPlaceholderByElicitation: a client that takes URL elicitation,
// calling the placeholder, is asked to open its own connect link; once
// the user has connected the call answers that the account is connected,
// and the upstream's tools replace the placeholder.
func TestPlaceholderByElicitation(t *testing.T) {
	rs := lookupUpstream(t)
	a, _, wait := startPerUser(t, rs.URL(), t.TempDir())
	ph := a.Snapshot().Tool("gh__connect")
	if ph == nil || !ph.Placeholder {
		t.Fatalf("no placeholder: %v", toolNames(a.Snapshot()))
	}
	cl := &elicitClient{testClient: testClient{session: "S", caller: "oauth:alice"}}
	cl.answer = func(p mcp.ElicitationParams) string {
		if _, who := linkIn(t, a, p.URL); p.Mode != mcp.ElicitationModeURL || who != "oauth:alice" {
			t.Errorf("elicitation %+v for %q", p, who)
			return "cancel"
		}
		connectAs(t, a, p.URL, "alice")
		return "accept"
	}
	if text, isError := callText(t, a, cl, ph); isError || !strings.Contains(text, "is connected") || len(cl.asked) != 1 {
		t.Fatalf("after connecting through the elicitation: isError %v, asked %d: %s", isError, len(cl.asked), text)
	}
	wait("the upstream's tools replace the placeholder", a, listsOnly("gh__lookup"))
}

// TestListingFollowsURL: a reload that moves the upstream to another url
// shows the placeholder again (the kept listing is of the old url), and
// the listing made there is kept under the new url, though its tools are
// the same.
func TestListingFollowsURL(t *testing.T) {
	rs := lookupUpstream(t)
	dir := t.TempDir()
	a, cfg, wait := startPerUser(t, rs.URL(), dir)
	ctx := context.Background()
	link, _ := a.ConnectLink("gh", "oauth:alice")
	connectAs(t, a, link, "alice")
	wait("the tools listed", a, listsOnly("gh__lookup"))

	moved := *cfg
	up := *cfg.Upstreams[0]
	up.URL += "?v=2"
	moved.Upstreams = []*configs.Upstream{&up}
	a.Reload(ctx, &moved)
	wait("the placeholder of the moved upstream", a, listsOnly("gh__connect"))
	link, _ = a.ConnectLink("gh", "oauth:alice")
	connectAs(t, a, link, "alice")
	wait("the tools listed at the new url", a, listsOnly("gh__lookup"))
	if err := a.Close(); err != nil { // and whatever it was writing written
		t.Fatal(err)
	}
	stored := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, listingKey("gh")))
		var sd storedListing
		json.Unmarshal(b, &sd)
		return sd.Source
	}
	if got := stored(); got != listingSource(&up) {
		t.Fatalf("the kept listing is of %s, want the new url's %s", got, listingSource(&up))
	}
}
