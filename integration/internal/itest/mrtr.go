//go:build unix

package itest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// MrtrUpstream is an mcp-go server whose tool "greet" asks the client for
// a name before it answers, the 2026-07-28 way: an input_required result
// whose retry carries the answer. mcp-go serves the same handler to a
// client on an older protocol by sending it a real elicitation/create in
// the middle of the call. calls counts the handler's invocations.
func MrtrUpstream(t *testing.T, versions ...string) (url string, calls *atomic.Int32) {
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

// ElicitAnswer answers every elicitation with the name "Ada" and counts
// them.
type ElicitAnswer struct{ N atomic.Int32 }

func (e *ElicitAnswer) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	e.N.Add(1)
	if req.Params.Message != "Who is there?" {
		return nil, fmt.Errorf("elicitation message %q, want the upstream's", req.Params.Message)
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
		Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"name": "Ada"}}}, nil
}

// EraText returns the text of a tool result's first content block.
func EraText(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := mcp.AsTextContent(res.Content[0]); ok {
		return tc.Text
	}
	return fmt.Sprintf("%T", res.Content[0])
}
