//go:build unix

package protocol

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestMRTR checks multi-round-trip input in all four combinations of a
// client and an upstream before and from 2026-07-28: a modern
// upstream's input_required reaches a modern client unchanged and its retry
// reaches the upstream unchanged; for a legacy client viewmux asks with a
// real elicitation; a legacy upstream's mid-call elicitation reaches a
// legacy client as is, and a modern client as input_required whose retry
// resumes the held call.
func TestMRTR(t *testing.T) {
	for _, up := range []struct {
		name     string
		versions []string // the server's; nil = every one
		protocol string   // viewmux's pin; "" = its default
	}{
		// viewmux connects with 2025-11-25; a 2026-07-28 client's call
		// cannot go any other way, so its input is asked through a held
		// call.
		{"legacy-only upstream", mcp.LegacyProtocolVersions(), ""},
		// viewmux connects with 2025-11-25, and sends a 2026-07-28 client's
		// requests as 2026-07-28 requests to the same endpoint.
		{"both-era upstream", nil, ""},
		{"upstream pinned to 2026-07-28", nil, mcp.ProtocolVersion20260728},
	} {
		url, calls := itest.MrtrUpstream(t, up.versions...)
		pin := ""
		if up.protocol != "" {
			pin = fmt.Sprintf("protocol = %q\n", up.protocol)
		}
		mux := itest.StartMux(t, fmt.Sprintf("[upstreams.m]\nurl = %q\nrequired = true\n%s", url, pin))
		for _, cl := range []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
			t.Run(fmt.Sprintf("%s, client %s", up.name, cl), func(t *testing.T) {
				defer func() {
					// Which way a 2026-07-28 client's call went.
					refused := strings.Contains(mux.Stderr(), "does not take 2026-07-28 requests")
					if want := up.versions != nil; cl == mcp.ProtocolVersion20260728 && refused != want {
						t.Errorf("the endpoint refused 2026-07-28 requests: %v, want %v", refused, want)
					}
				}()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				answer := &itest.ElicitAnswer{}
				c, _ := itest.EraConnect(t, ctx, mux.URL(), client.WithProtocolVersion(cl), client.WithElicitationHandler(answer))
				before := calls.Load()
				var req mcp.CallToolRequest
				req.Params.Name = "m__greet"
				res, err := c.CallTool(ctx, req)
				if err != nil {
					t.Fatalf("tools/call: %v", err)
				}
				if got := itest.EraText(res); got != "hello Ada" || res.IsError {
					t.Errorf("result = %q (isError %v), want %q", got, res.IsError, "hello Ada")
				}
				if n := answer.N.Load(); n != 1 {
					t.Errorf("the client was asked %d times, want once", n)
				}
				if n := calls.Load() - before; n != 2 {
					t.Errorf("the upstream handler ran %d times, want 2 (the call and its retry)", n)
				}
			})
		}
	}
}
