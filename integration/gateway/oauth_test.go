//go:build unix

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/viewmux/viewmux/integration/internal/itest"
	"github.com/viewmux/viewmux/internal/oauth/hydratest"
)

// TestOAuthDoors: the real binary as an OAuth resource server for tokens a
// real OpenID provider (Ory Hydra) issues. The official TypeScript SDK
// client holding a token reaches exactly its grant's profile on /mcp and
// /sse; the SDK's websocket client cannot send headers, so /ws is driven
// with a Go websocket client holding the same token.
func TestOAuthDoors(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	h := hydratest.Start(t, 0)
	const audience = "http://mcp.test"
	id, secret := h.Client(t, "mcp:tools mcp:all", audience)
	mux := itest.StartMux(t, itest.DoorsConfig(t)+fmt.Sprintf(`
[profiles.full]

[auth.oauth]
issuer = %q
audience = %q
scopes_supported = ["mcp:tools", "mcp:all"]

[[auth.oauth.grants]]
claim = "scope"
value = "mcp:all"
profiles = ["full", "readonly"]

[[auth.oauth.grants]]
claim = "scope"
value = "mcp:tools"
profiles = ["readonly"]
`, h.Issuer, audience))
	tools := h.Token(t, id, secret, "mcp:tools", audience)
	all := h.Token(t, id, secret, "mcp:all", audience)
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	full := itest.DriveDoor(t, itest.DoorScript{Script: itest.Script{URL: "http://" + mux.Addr + "/mcp", Headers: bearer(all), Steps: []itest.Op{itest.OpList()}}}).Clients[0].Steps[0].Names
	readonly := itest.DriveDoor(t, itest.DoorScript{Script: itest.Script{URL: "http://" + mux.Addr + "/mcp", Headers: bearer(tools), Steps: []itest.Op{itest.OpList()}}}).Clients[0].Steps[0].Names
	if len(readonly) == 0 || len(readonly) >= len(full) || !slices.Contains(full, "demo__write_note") || slices.Contains(readonly, "demo__write_note") {
		t.Fatalf("mcp:all lists %v, mcp:tools %v: want the read-only subset for mcp:tools", full, readonly)
	}
	t.Run("sse", func(t *testing.T) {
		for tok, want := range map[string][]string{all: full, tools: readonly} {
			got := itest.DriveDoor(t, itest.DoorScript{Transport: "sse", Script: itest.Script{URL: "http://" + mux.Addr + "/sse", Headers: bearer(tok), Steps: []itest.Op{itest.OpList()}}}).Clients[0].Steps[0].Names
			if !slices.Equal(got, want) {
				t.Errorf("/sse lists %v, want %v", got, want)
			}
		}
	})
	t.Run("ws", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws://"+mux.Addr+"/ws", &websocket.DialOptions{Subprotocols: []string{"mcp"},
			HTTPHeader: http.Header{"Authorization": {"Bearer " + tools}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		c.SetReadLimit(16 << 20)
		roundTrip := func(msg string) map[string]any {
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var m map[string]any
				json.Unmarshal(data, &m)
				if m["id"] != nil {
					return m
				}
			}
		}
		roundTrip(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		c.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
		res := roundTrip(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		var names []string
		if r, ok := res["result"].(map[string]any); ok {
			for _, tl := range r["tools"].([]any) {
				names = append(names, tl.(map[string]any)["name"].(string))
			}
		}
		slices.Sort(names)
		want := slices.Sorted(slices.Values(readonly))
		if !slices.Equal(names, want) {
			t.Errorf("/ws lists %v, want %v", names, want)
		}
	})
	t.Run("401 and metadata", func(t *testing.T) {
		for _, door := range []string{"/mcp", "/sse", "/ws"} {
			resp, err := http.Get("http://" + mux.Addr + door)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != 401 || !strings.Contains(got, `resource_metadata="http://mcp.test/.well-known/oauth-protected-resource"`) {
				t.Errorf("GET %s without a token: %d %q", door, resp.StatusCode, got)
			}
		}
		resp, err := http.Get("http://" + mux.Addr + "/.well-known/oauth-protected-resource/mcp")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var doc struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
		}
		if json.Unmarshal(body, &doc) != nil || doc.Resource != audience || !slices.Equal(doc.AuthorizationServers, []string{h.Issuer}) {
			t.Errorf("metadata: %d %s", resp.StatusCode, body)
		}
		// The SDK client with a token for a profile its grant lacks.
		r := itest.RawInitialize(t, "http://"+mux.Addr+"/mcp?profile=full", bearer(tools))
		if r.Status != 403 || !strings.Contains(r.Header.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
			t.Errorf("profile full with mcp:tools: %s", r)
		}
	})
}

// TestOAuthSDKDiscovery: the official TypeScript SDK client, given only
// client credentials, finds the identity provider through viewmux's 401
// and Protected Resource Metadata, gets a token from it and reaches its
// grant's profile, on /mcp and /sse. The audience is left to its default,
// the address viewmux listens on (--listen), which is what the SDK checks
// the metadata's resource against.
func TestOAuthSDKDiscovery(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	h := hydratest.Start(t, 0)
	mux := itest.StartMux(t, itest.DoorsConfig(t)+fmt.Sprintf(`
[auth.oauth]
issuer = %q
scopes_supported = ["mcp:tools"]

[[auth.oauth.grants]]
claim = "scope"
value = "mcp:tools"
profiles = ["readonly"]
`, h.Issuer))
	audience := "http://" + mux.Addr
	id, secret := h.Client(t, "mcp:tools", audience)
	// What a token of this grant lists, through a header.
	want := itest.DriveDoor(t, itest.DoorScript{Script: itest.Script{URL: mux.URL(), Headers: map[string]string{"Authorization": "Bearer " + h.Token(t, id, secret, "mcp:tools", audience)},
		Steps: []itest.Op{itest.OpList()}}}).Clients[0].Steps[0].Names
	slices.Sort(want)
	if len(want) == 0 || slices.Contains(want, "demo__write_note") {
		t.Fatalf("the readonly grant lists %v", want)
	}
	for _, door := range []struct{ transport, path string }{{"http", "/mcp"}, {"sse", "/sse"}} {
		t.Run(door.transport, func(t *testing.T) {
			in, _ := json.Marshal(map[string]string{"url": audience + door.path, "transport": door.transport, "clientId": id, "clientSecret": secret,
				"scope": "mcp:tools", "issuer": h.Issuer, "audience": audience})
			stdout, stderr, err := itest.RunNodeScript(t, "oauth.mjs", in)
			var res struct {
				OK       bool     `json:"ok"`
				Error    string   `json:"error"`
				Tools    []string `json:"tools"`
				GotToken bool     `json:"gotToken"`
			}
			if json.Unmarshal(stdout, &res) != nil || err != nil || !res.OK {
				t.Fatalf("oauth.mjs: %v\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			if !res.GotToken || !slices.Equal(res.Tools, want) {
				t.Errorf("the SDK (token %v) lists %v, want %v", res.GotToken, res.Tools, want)
			}
		})
	}
}
