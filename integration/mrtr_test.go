//go:build unix

package integration

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// mrtrUpstream is an mcp-go server whose tool "greet" asks the client for
// a name before it answers, the 2026-07-28 way: an input_required result
// whose retry carries the answer. mcp-go serves the same handler to a
// client on an older protocol by sending it a real elicitation/create in
// the middle of the call. calls counts the handler's invocations.
func mrtrUpstream(t *testing.T, versions ...string) (url string, calls *atomic.Int32) {
	t.Helper()
	calls = new(atomic.Int32)
	srv := server.NewMCPServer("mrtr", "1.0.0", server.WithToolCapabilities(true))
	srv.AddTool(mcp.NewTool("greet"), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls.Add(1)
		resp, ok := req.Params.InputResponses["who"]
		if !ok {
			return server.NewInputRequestBuilder("asked-for-name").Elicit("who", mcp.ElicitationParams{
				Message:         "Who is there?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}},
			}).ToolResult(), nil
		}
		if req.Params.RequestState != "asked-for-name" {
			return mcp.NewToolResultError(fmt.Sprintf("requestState %q did not come back unchanged", req.Params.RequestState)), nil
		}
		if err := resp.DecodeFor(mcp.MethodElicitationCreate); err != nil || resp.Elicitation == nil {
			return mcp.NewToolResultError(fmt.Sprintf("input response: %v", err)), nil
		}
		return mcp.NewToolResultText(fmt.Sprintf("hello %v", resp.Elicitation.Content.(map[string]any)["name"])), nil
	})
	var opts []server.StreamableHTTPOption
	if len(versions) > 0 {
		opts = append(opts, server.WithStreamableHTTPProtocolVersions(versions...))
	}
	ts := httptest.NewServer(server.NewStreamableHTTPServer(srv, opts...))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp", calls
}

// elicitAnswer answers every elicitation with the name "Ada" and counts
// them.
type elicitAnswer struct{ n atomic.Int32 }

func (e *elicitAnswer) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	e.n.Add(1)
	if req.Params.Message != "Who is there?" {
		return nil, fmt.Errorf("elicitation message %q, want the upstream's", req.Params.Message)
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
		Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"name": "Ada"}}}, nil
}

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
		url, calls := mrtrUpstream(t, up.versions...)
		pin := ""
		if up.protocol != "" {
			pin = fmt.Sprintf("protocol = %q\n", up.protocol)
		}
		mux := startMux(t, fmt.Sprintf("[upstreams.m]\nurl = %q\nrequired = true\n%s", url, pin))
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
				answer := &elicitAnswer{}
				c, _ := eraConnect(t, ctx, mux.URL(), client.WithProtocolVersion(cl), client.WithElicitationHandler(answer))
				before := calls.Load()
				var req mcp.CallToolRequest
				req.Params.Name = "m__greet"
				res, err := c.CallTool(ctx, req)
				if err != nil {
					t.Fatalf("tools/call: %v", err)
				}
				if got := eraText(res); got != "hello Ada" || res.IsError {
					t.Errorf("result = %q (isError %v), want %q", got, res.IsError, "hello Ada")
				}
				if n := answer.n.Load(); n != 1 {
					t.Errorf("the client was asked %d times, want once", n)
				}
				if n := calls.Load() - before; n != 2 {
					t.Errorf("the upstream handler ran %d times, want 2 (the call and its retry)", n)
				}
			})
		}
	}
}

// eraText returns the text of a tool result's first content block.
func eraText(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := mcp.AsTextContent(res.Content[0]); ok {
		return tc.Text
	}
	return fmt.Sprintf("%T", res.Content[0])
}
