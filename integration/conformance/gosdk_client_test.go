package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestGoSDKClientThroughViewmux connects the official Go SDK's client to the
// Go SDK everything-server, directly and through viewmux, stateful and
// stateless, and calls a tool each way: what works directly must work
// through viewmux. The stateful server answers server/discover without
// 2026-07-28 among its supported versions; viewmux once sent the Go SDK
// client's requests to it as 2026-07-28 requests anyway, and every
// tools/call failed with -32022.
func TestGoSDKClientThroughViewmux(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		name := "stateful"
		if stateless {
			name = "stateless"
		}
		t.Run(name, func(t *testing.T) {
			upURL := itest.StartGoSDKServer(t, "go-sdk client "+name, stateless)
			mux := itest.StartMux(t, fmt.Sprintf("[upstreams.ev]\nurl = %q\nrequired = true\n", upURL))
			for _, side := range []struct {
				label, url, tool string
			}{
				{"direct", upURL, "test_simple_text"},
				{"viewmux", mux.URL(), "ev__test_simple_text"},
			} {
				t.Run(side.label, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					c := gosdk.NewClient(&gosdk.Implementation{Name: "viewmux-test", Version: "1"}, nil)
					cs, err := c.Connect(ctx, &gosdk.StreamableClientTransport{Endpoint: side.url}, nil)
					if err != nil {
						t.Fatalf("connect %s: %v", side.url, err)
					}
					defer cs.Close()
					tools, err := cs.ListTools(ctx, nil)
					if err != nil {
						t.Fatalf("tools/list: %v", err)
					}
					found := false
					for _, tl := range tools.Tools {
						found = found || tl.Name == side.tool
					}
					if !found {
						t.Fatalf("tools/list has no %s (%d tools)", side.tool, len(tools.Tools))
					}
					res, err := cs.CallTool(ctx, &gosdk.CallToolParams{Name: side.tool})
					if err != nil {
						t.Fatalf("tools/call %s: %v\nviewmux stderr:\n%s", side.tool, err, mux.Stderr())
					}
					if res.IsError || len(res.Content) != 1 {
						t.Fatalf("tools/call %s: unexpected result %+v", side.tool, res)
					}
					text, ok := res.Content[0].(*gosdk.TextContent)
					if !ok || !strings.Contains(text.Text, "simple text") {
						t.Fatalf("tools/call %s: want the server's simple text, got %#v", side.tool, res.Content[0])
					}
				})
			}
		})
	}
}
