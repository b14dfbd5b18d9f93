//go:build unix

package fidelity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// fidMcpGoEnv, set to "stdio" in the environment of this test binary, makes
// it serve the fidelity mcp-go server on stdin/stdout instead of running
// tests. viewmux starts it that way as a stdio upstream.
const fidMcpGoEnv = "VIEWMUX_FIDELITY_MCPGO"

func init() {
	if os.Getenv(fidMcpGoEnv) != "stdio" {
		return
	}
	// Enough workers for the concurrent calls of the log and oversize
	// cells, and a queue that never drops one.
	err := server.ServeStdio(newFidMcpGoServer(), server.WithWorkerPoolSize(16), server.WithQueueSize(256))
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "fidelity mcp-go stdio server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// fidMcpGoInstructions are the server's instructions, which must reach a
// client through viewmux.
const fidMcpGoInstructions = "The fidelity mcp-go server: every tool here serves one cell of the matrix. ✓"

// fidBigText returns n bytes of a pattern a client can check cheaply:
// each 16-byte block is its own offset in 15 hex digits and a dot. The
// last text built is kept: the 50 MB cell asks for the same one each time.
func fidBigText(n int) string {
	fidBigCache.Lock()
	defer fidBigCache.Unlock()
	if len(fidBigCache.text) == n {
		return fidBigCache.text
	}
	const hex = "0123456789abcdef"
	b := make([]byte, n+16)
	for off := 0; off < n; off += 16 {
		for i, v := 14, off; i >= 0; i, v = i-1, v>>4 {
			b[off+i] = hex[v&15]
		}
		b[off+15] = '.'
	}
	fidBigCache.text = string(b[:n])
	return fidBigCache.text
}

var fidBigCache struct {
	sync.Mutex
	text string
}

// fidNotify sends one notification with send, waiting while mcp-go's
// per-session queue is full (mcp-go refuses rather than waits, and the
// progress cell sends more than that queue holds).
func fidNotify(ctx context.Context, send func() error) error {
	for {
		err := send()
		if !errors.Is(err, server.ErrNotificationChannelBlocked) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fidSettle gives mcp-go time to write the notifications it has queued
// before the result: its streamable HTTP server may otherwise write the
// result first and end the stream, and the client never sees the last
// notifications, whatever is between them.
func fidSettle() { time.Sleep(100 * time.Millisecond) }

// newFidMcpGoServer builds the server. Every connection (HTTP or SSE
// session, stdio process) is its own mcp-go client session.
func newFidMcpGoServer() *server.MCPServer {
	srv := server.NewMCPServer("fidelity-mcp-go", "1.0.0",
		server.WithToolCapabilities(true),
		server.WithPromptCapabilities(true),
		server.WithResourceCapabilities(false, true),
		server.WithLogging(),
		server.WithInstructions(fidMcpGoInstructions),
	)

	srv.AddTool(mcp.NewTool("progress",
		mcp.WithDescription("Sends n progress notifications, as fast as it can, then answers."),
		mcp.WithNumber("n", mcp.Required()),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := req.GetInt("n", 0)
		var token any
		if req.Params.Meta != nil {
			token = req.Params.Meta.ProgressToken
		}
		if token == nil {
			return mcp.NewToolResultError("no progress token"), nil
		}
		s := server.ServerFromContext(ctx)
		for i := 1; i <= n; i++ {
			if err := fidNotify(ctx, func() error {
				return s.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
					"progressToken": token, "progress": i, "total": n,
				})
			}); err != nil {
				return mcp.NewToolResultError(fmt.Sprintf("progress %d: %v", i, err)), nil
			}
		}
		fidSettle()
		return mcp.NewToolResultText(fmt.Sprintf("sent %d progress notifications", n)), nil
	})

	srv.AddTool(mcp.NewTool("log",
		mcp.WithDescription("Sends three log messages naming tag, 100 ms apart, then answers."),
		mcp.WithString("tag", mcp.Required()),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		tag := req.GetString("tag", "")
		s := server.ServerFromContext(ctx)
		for i := 1; i <= 3; i++ {
			if i > 1 {
				time.Sleep(100 * time.Millisecond)
			}
			if err := fidNotify(ctx, func() error {
				return s.SendLogMessageToClient(ctx, mcp.NewLoggingMessageNotification(
					mcp.LoggingLevelInfo, "fidelity", fmt.Sprintf("%s #%d", tag, i)))
			}); err != nil {
				return mcp.NewToolResultError(fmt.Sprintf("log %d: %v", i, err)), nil
			}
		}
		fidSettle()
		return mcp.NewToolResultText("logged " + tag), nil
	})

	srv.AddTool(mcp.NewTool("sample",
		mcp.WithDescription("Asks the client for sampling with prompt and answers with its reply."),
		mcp.WithString("prompt", mcp.Required()),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var cm mcp.CreateMessageRequest
		cm.Messages = []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent(req.GetString("prompt", ""))}}
		cm.MaxTokens = 50
		res, err := server.ServerFromContext(ctx).RequestSampling(ctx, cm)
		if err != nil {
			return mcp.NewToolResultError("sampling failed: " + err.Error()), nil
		}
		text := ""
		if tc, ok := mcp.AsTextContent(res.Content); ok {
			text = tc.Text
		}
		return mcp.NewToolResultText("sampled: " + text), nil
	})

	srv.AddTool(mcp.NewTool("elicit",
		mcp.WithDescription("Asks the client for a name by elicitation and answers with it."),
		mcp.WithString("message", mcp.Required()),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var el mcp.ElicitationRequest
		el.Params.Message = req.GetString("message", "")
		el.Params.RequestedSchema = map[string]any{
			"type":       "object",
			"properties": map[string]any{"name": map[string]any{"type": "string", "description": "Your name"}},
			"required":   []string{"name"},
		}
		res, err := server.ServerFromContext(ctx).RequestElicitation(ctx, el)
		if err != nil {
			return mcp.NewToolResultError("elicitation failed: " + err.Error()), nil
		}
		content, _ := json.Marshal(res.Content)
		return mcp.NewToolResultText(fmt.Sprintf("elicited: action=%s content=%s", res.Action, content)), nil
	})

	srv.AddTool(mcp.NewTool("big",
		mcp.WithDescription("Answers with a text of the given number of bytes."),
		mcp.WithNumber("bytes", mcp.Required()),
	), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(fidBigText(req.GetInt("bytes", 0))), nil
	})

	srv.AddTool(mcp.NewTool("slow",
		mcp.WithDescription("Answers after ms milliseconds."),
		mcp.WithNumber("ms", mcp.Required()),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-time.After(time.Duration(req.GetInt("ms", 0)) * time.Millisecond):
			return mcp.NewToolResultText("slept"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})

	srv.AddTool(mcp.NewTool("whoami",
		mcp.WithDescription("Names this server process and the mcp-go session of the caller's connection."),
	), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		id := ""
		if cs := server.ClientSessionFromContext(ctx); cs != nil {
			id = cs.SessionID()
		}
		return mcp.NewToolResultText(fmt.Sprintf("pid %d session %s", os.Getpid(), id)), nil
	})

	// A tool whose schema is spelled by hand, with members mcp-go's own
	// types would not produce, for the catalog cell.
	srv.AddTool(mcp.NewToolWithRawSchema("raw-schema", "A hand-written schema: \u2028 ✓ <b>&amp;</b>",
		json.RawMessage(`{"type":"object","properties":{"q":{"type":"string","description":"query","x-order":1},"n":{"type":"integer","minimum":0,"default":3}},"required":["q"],"additionalProperties":false}`)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("raw"), nil
		})

	srv.AddPrompt(mcp.NewPrompt("greet",
		mcp.WithPromptDescription("Greets someone."),
		mcp.WithArgument("who", mcp.ArgumentDescription("whom to greet"), mcp.RequiredArgument()),
		mcp.WithArgument("how", mcp.ArgumentDescription("in what tone")),
	), func(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return mcp.NewGetPromptResult("greeting", []mcp.PromptMessage{
			mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent("Hello, "+req.Params.Arguments["who"])),
		}), nil
	})
	srv.AddResource(mcp.NewResource("fid://static/readme", "readme",
		mcp.WithResourceDescription("A static text."), mcp.WithMIMEType("text/plain")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: "fid://static/readme", MIMEType: "text/plain", Text: "read me"}}, nil
		})
	srv.AddResourceTemplate(mcp.NewResourceTemplate("fid://item/{id}", "item",
		mcp.WithTemplateDescription("An item by id."), mcp.WithTemplateMIMEType("text/plain")),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "text/plain", Text: "item"}}, nil
		})
	return srv
}

// serveFidMcpGo serves handler on a loopback listener until cleanup and
// returns its base URL (http://127.0.0.1:PORT). newHandler gets that base
// URL, which the SSE server needs for its endpoint event.
func serveFidMcpGo(t *testing.T, newHandler func(base string) http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.Addr().String()
	hs := &http.Server{Handler: newHandler(base), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(l)
	}()
	t.Cleanup(func() {
		// Streams (SSE, standalone GETs) never end by themselves: close
		// them rather than wait for them.
		_ = hs.Close()
		<-done
	})
	return base
}

// startFidMcpGoHTTP serves the mcp-go fidelity server over streamable HTTP
// and returns its MCP endpoint.
func startFidMcpGoHTTP(t *testing.T) string {
	t.Helper()
	base := serveFidMcpGo(t, func(string) http.Handler {
		return server.NewStreamableHTTPServer(newFidMcpGoServer())
	})
	return base + "/mcp"
}

// startFidMcpGoSSE serves the mcp-go fidelity server over legacy SSE and
// returns its SSE endpoint.
func startFidMcpGoSSE(t *testing.T) string {
	t.Helper()
	base := serveFidMcpGo(t, func(base string) http.Handler {
		return server.NewSSEServer(newFidMcpGoServer(), server.WithBaseURL(base))
	})
	return base + "/sse"
}
