//go:build unix

package itest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// EraProgress collects the progress notifications a Go client receives.
type EraProgress struct {
	mu    sync.Mutex
	got   []map[string]any
	First chan struct{} // closed at the first one
	once  sync.Once
}

func NewEraProgress() *EraProgress { return &EraProgress{First: make(chan struct{})} }

func (p *EraProgress) Handle(n mcp.JSONRPCNotification) {
	if n.Method != string(mcp.MethodNotificationProgress) {
		return
	}
	p.mu.Lock()
	p.got = append(p.got, n.Params.AdditionalFields)
	p.mu.Unlock()
	p.once.Do(func() { close(p.First) })
}

// Steps returns "progress/total message" of each notification for token, and
// how many notifications carried another token.
func (p *EraProgress) Steps(token string) (steps []string, others int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.got {
		if f["progressToken"] != token {
			others++
			continue
		}
		steps = append(steps, fmt.Sprintf("%v/%v %v", f["progress"], f["total"], f["message"]))
	}
	return steps, others
}

func (p *EraProgress) Reset() {
	p.mu.Lock()
	p.got = nil
	p.mu.Unlock()
}

// EraConnect connects an mcp-go client to url over streamable HTTP and
// initializes it; it is closed at cleanup.
func EraConnect(t *testing.T, ctx context.Context, url string, opts ...client.ClientOption) (*client.Client, *EraProgress) {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, opts...)
	t.Cleanup(func() { c.Close() })
	progress := NewEraProgress()
	c.OnNotification(progress.Handle)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: "protocol-versions-test", Version: "1.0.0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize %s: %v", url, err)
	}
	return c, progress
}

// EraCall calls name through c and returns the text of its result, failing
// the test on an error or an isError result.
func EraCall(t *testing.T, ctx context.Context, c *client.Client, name string, args map[string]any, token mcp.ProgressToken) string {
	t.Helper()
	res, err := c.CallTool(ctx, EraRequestOf(name, args, token))
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("tools/call %s: isError result %q", name, b.String())
	}
	return b.String()
}

func EraRequestOf(name string, args map[string]any, token mcp.ProgressToken) mcp.CallToolRequest {
	var req mcp.CallToolRequest
	req.Params.Name = name
	req.Params.Arguments = args
	if token != nil {
		req.Params.Meta = &mcp.Meta{ProgressToken: token}
	}
	return req
}
