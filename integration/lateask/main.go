// Command lateask is a stdio MCP server for the tests of how viewmux routes
// server→client requests. Its sampling request can be made
// to come after the call that caused it has finished, while another
// client's call is in flight: the attack of issue 9, item 5.
//
// Tools:
//   - arm: the next hold sends a sampling request that this call, now
//     finished, caused;
//   - hold: when armed, sends that request from outside its own handler
//     while its own call is in flight, and answers with what became of it
//     ("answered: <text>" or "refused: <error>"); else "not armed";
//   - ask: sends a sampling request in the middle of its own call and
//     answers with the sampled text;
//   - pid: this process's id.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	srv := server.NewMCPServer("lateask", "1.0.0", server.WithToolCapabilities(false))
	var armed atomic.Bool

	sample := func(ctx context.Context, question string) (string, error) {
		res, err := srv.RequestSampling(ctx, mcp.CreateMessageRequest{CreateMessageParams: mcp.CreateMessageParams{
			Messages:  []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent(question)}},
			MaxTokens: 50,
		}})
		if err != nil {
			return "", err
		}
		if tc, ok := mcp.AsTextContent(res.Content); ok {
			return tc.Text, nil
		}
		return fmt.Sprintf("%T", res.Content), nil
	}

	srv.AddTool(mcp.NewTool("arm"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		armed.Store(true)
		return mcp.NewToolResultText("armed"), nil
	})
	srv.AddTool(mcp.NewTool("hold"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if !armed.Swap(false) {
			return mcp.NewToolResultText("not armed"), nil
		}
		// Sent from a goroutine of its own, with the connection's session
		// but not this call's cancellation: on the wire, nothing tells it
		// from a request of this call.
		out := make(chan string, 1)
		go func() {
			text, err := sample(context.WithoutCancel(ctx), "the armed question")
			if err != nil {
				out <- "refused: " + err.Error()
				return
			}
			out <- "answered: " + text
		}()
		select {
		case o := <-out:
			return mcp.NewToolResultText(o), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	srv.AddTool(mcp.NewTool("ask"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		text, err := sample(ctx, "the question of this call")
		if err != nil {
			return mcp.NewToolResultError("refused: " + err.Error()), nil
		}
		return mcp.NewToolResultText("sampled: " + text), nil
	})
	srv.AddTool(mcp.NewTool("pid"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(strconv.Itoa(os.Getpid())), nil
	})

	if err := server.ServeStdio(srv); err != nil {
		fmt.Fprintln(os.Stderr, "lateask:", err)
		os.Exit(1)
	}
}
