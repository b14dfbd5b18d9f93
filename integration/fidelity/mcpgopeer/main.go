// Command mcpgopeer is the fidelity matrix's mcp-go server
// (integration/fidelity): one tool per cell — progress, logs, sampling,
// elicitation, a big result, a slow call, whoami — plus a prompt, a static
// resource and a template. It runs as a process of its own, built without
// the race detector, like any real upstream: serving 50 MB results from
// inside the race-instrumented test binary cost more CPU than the rest of
// the fidelity tests together.
//
// usage:
//
//	mcpgopeer stdio
//	mcpgopeer http ADDR    streamable HTTP on ADDR, endpoint /mcp
//	mcpgopeer sse ADDR     legacy SSE on ADDR, endpoint /sse
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mcpgopeer:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: mcpgopeer stdio | http ADDR | sse ADDR")
	}
	switch mode := args[0]; {
	case mode == "stdio" && len(args) == 1:
		// Enough workers for the concurrent calls of the log and oversize
		// cells, and a queue that never drops one.
		err := server.ServeStdio(newServer(), server.WithWorkerPoolSize(16), server.WithQueueSize(256))
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case mode == "http" && len(args) == 2:
		return serve(args[1], server.NewStreamableHTTPServer(newServer()))
	case mode == "sse" && len(args) == 2:
		return serve(args[1], server.NewSSEServer(newServer(), server.WithBaseURL("http://"+args[1])))
	default:
		return fmt.Errorf("unknown arguments %q: usage: mcpgopeer stdio | http ADDR | sse ADDR", args)
	}
}

// serve serves h on addr until the process is killed. Streams (SSE,
// standalone GETs) never end by themselves, so there is no graceful stop.
func serve(addr string, h http.Handler) error {
	hs := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(os.Stderr, "mcpgopeer listening on", addr)
	return hs.ListenAndServe()
}

// instructions are the server's instructions, which must reach a
// client through viewmux.
const instructions = "The fidelity mcp-go server: every tool here serves one cell of the matrix. ✓"

// bigText returns n bytes of a pattern a client can check cheaply:
// each 16-byte block is its own offset in 15 hex digits and a dot. The
// last text built is kept: the 50 MB cell asks for the same one each time.
func bigText(n int) string {
	bigCache.Lock()
	defer bigCache.Unlock()
	if len(bigCache.text) == n {
		return bigCache.text
	}
	const hex = "0123456789abcdef"
	b := make([]byte, n+16)
	for off := 0; off < n; off += 16 {
		for i, v := 14, off; i >= 0; i, v = i-1, v>>4 {
			b[off+i] = hex[v&15]
		}
		b[off+15] = '.'
	}
	bigCache.text = string(b[:n])
	return bigCache.text
}

var bigCache struct {
	sync.Mutex
	text string
}

// notify sends one notification with send, waiting while mcp-go's
// per-session queue is full (mcp-go refuses rather than waits, and the
// progress cell sends more than that queue holds).
func notify(ctx context.Context, send func() error) error {
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

// settle gives mcp-go time to write the notifications it has queued
// before the result: its streamable HTTP server may otherwise write the
// result first and end the stream, and the client never sees the last
// notifications, whatever is between them.
func settle() { time.Sleep(100 * time.Millisecond) }

// newServer builds the server. Every connection (HTTP or SSE
// session, stdio process) is its own mcp-go client session.
func newServer() *server.MCPServer {
	srv := server.NewMCPServer("fidelity-mcp-go", "1.0.0",
		server.WithToolCapabilities(true),
		server.WithPromptCapabilities(true),
		server.WithResourceCapabilities(false, true),
		server.WithLogging(),
		server.WithInstructions(instructions),
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
			if err := notify(ctx, func() error {
				return s.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
					"progressToken": token, "progress": i, "total": n,
				})
			}); err != nil {
				return mcp.NewToolResultError(fmt.Sprintf("progress %d: %v", i, err)), nil
			}
		}
		settle()
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
			if err := notify(ctx, func() error {
				return s.SendLogMessageToClient(ctx, mcp.NewLoggingMessageNotification(
					mcp.LoggingLevelInfo, "fidelity", fmt.Sprintf("%s #%d", tag, i)))
			}); err != nil {
				return mcp.NewToolResultError(fmt.Sprintf("log %d: %v", i, err)), nil
			}
		}
		settle()
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
		return mcp.NewToolResultText(bigText(req.GetInt("bytes", 0))), nil
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
