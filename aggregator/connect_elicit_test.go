package aggregator

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// elicitClient is a legacy client that takes URL elicitation: it
// records what it is asked and told, and answers with answer.
type elicitClient struct {
	testClient
	answer func(params mcp.ElicitationParams) string

	mu     sync.Mutex
	asked  []mcp.ElicitationParams
	notice []string
}

func (c *elicitClient) Capabilities() mcp.ClientCapabilities {
	return mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{URL: &struct{}{}}}
}

func (c *elicitClient) Request(_ context.Context, method string, params any) (json.RawMessage, error) {
	p, _ := params.(mcp.ElicitationParams)
	c.mu.Lock()
	c.asked = append(c.asked, p)
	c.mu.Unlock()
	return json.RawMessage(`{"action":"` + c.answer(p) + `"}`), nil
}

func (c *elicitClient) Notify(method string, params any) {
	c.mu.Lock()
	c.notice = append(c.notice, method)
	c.mu.Unlock()
}

// TestConnectByElicitation: a client that takes URL elicitation is asked
// to open the connect link instead of getting the tool error; once the
// user has connected (here, while the request is open), the call goes on
// and reaches the upstream as that user. A declined request gets the
// tool error, and nothing is sent.
func TestConnectByElicitation(t *testing.T) {
	rs := lookupUpstream(t)
	a := New(perUserConfig(t, rs.URL()), Options{})
	defer a.Close()
	ctx := context.Background()
	e := &filter.Entry{Tool: mcp.Tool{Name: "gh__lookup"}, Upstream: "gh", Original: "lookup"}

	declines := &elicitClient{testClient: testClient{session: "S1", caller: "oauth:bob"}, answer: func(mcp.ElicitationParams) string { return "decline" }}
	res, isError, err := a.CallTool(ctx, declines, e, json.RawMessage(`{"name":"gh__lookup","arguments":{}}`))
	if err != nil || !isError || !strings.Contains(string(res), `"isError":true`) || len(declines.asked) != 1 {
		t.Fatalf("declined: %s %v (asked %d)", res, err, len(declines.asked))
	}

	accepts := &elicitClient{testClient: testClient{session: "S2", caller: "oauth:alice"}}
	accepts.answer = func(p mcp.ElicitationParams) string {
		// The user opens the link and logs in before answering.
		if p.Mode != mcp.ElicitationModeURL || p.ElicitationID == "" || !strings.Contains(p.URL, "/oauth/connect/gh?ticket=") {
			t.Errorf("elicitation: %+v", p)
			return "cancel"
		}
		u, _ := url.Parse(p.URL)
		authURL, nonce, err := a.BeginConnect(ctx, "gh", u.Query().Get("ticket"))
		if err != nil {
			t.Error(err)
			return "cancel"
		}
		if _, _, err := a.FinishConnect(ctx, approveAs(t, authURL, "alice"), nonce); err != nil {
			t.Error(err)
		}
		return "accept"
	}
	res, isError, err = a.CallTool(ctx, accepts, e, json.RawMessage(`{"name":"gh__lookup","arguments":{}}`))
	if err != nil || isError || !strings.Contains(string(res), "lookup ran") {
		t.Fatalf("after connecting: %s %v", res, err)
	}
	rs.Lock()
	calls := rs.Calls
	rs.Unlock()
	if len(calls) != 1 || calls[0].Subject != "alice" {
		t.Fatalf("the upstream's calls: %+v", calls)
	}
	if len(accepts.notice) != 1 || accepts.notice[0] != string(mcp.MethodNotificationElicitationComplete) {
		t.Fatalf("notifications: %v", accepts.notice)
	}
}

// TestListingOutlivesIdleUsers: with no operator login, the tools of a
// per-user upstream are listed from a stored user login once a user has
// connected, and stay listed when that user's own connection closes for
// idleness.
func TestListingOutlivesIdleUsers(t *testing.T) {
	rs := lookupUpstream(t)
	a := New(perUserConfig(t, rs.URL()), Options{})
	defer a.Close()
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !listsOnly("gh__connect")(a.Snapshot()) {
		t.Fatalf("before anyone connected: %v, want the placeholder only", toolNames(a.Snapshot()))
	}
	link, _ := a.ConnectLink("gh", "oauth:alice")
	u, _ := url.Parse(link)
	authURL, nonce, err := a.BeginConnect(ctx, "gh", u.Query().Get("ticket"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.FinishConnect(ctx, approveAs(t, authURL, "alice"), nonce); err != nil {
		t.Fatal(err)
	}
	listed := func() bool { return listsOnly("gh__lookup")(a.Snapshot()) }
	waitFor(t, "the tools listed after alice connected", listed)
	// Alice's own connection may list first; the listing connection, opened
	// beside it, must be up before hers closes.
	waitFor(t, "the listing connection's catalog", func() bool {
		a.users.mu.Lock()
		defer a.users.mu.Unlock()
		for k, uc := range a.users.conns {
			if strings.HasPrefix(k.who, listingPrefix) && uc.u.Catalog() != nil {
				return true
			}
		}
		return false
	})
	a.sweepUsers(time.Now().Add(time.Hour))
	a.rebuild()
	if !listed() {
		t.Fatal("the tools vanished when alice's own connection closed")
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lookupUpstream is an OAuth-protected MCP server (oauthtest) with one
// tool, "lookup", answering "lookup ran"; it records each call's subject.
func lookupUpstream(t *testing.T) *oauthtest.Server {
	t.Helper()
	mcpSrv := server.NewMCPServer("up", "1.0.0", server.WithToolCapabilities(true))
	mcpSrv.AddTool(mcp.NewTool("lookup"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("lookup ran"), nil
	})
	return oauthtest.New(t, server.NewStreamableHTTPServer(mcpSrv))
}
