package upstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// CallTool calls the tool named req.Params.Name (the upstream's original
// name). Arguments are forwarded as given: json.RawMessage arguments or
// req.Params.RawArguments reach the upstream byte for byte. The call is
// bounded by ctx and cfg.CallTimeout; if the connection is lost meanwhile it
// returns promptly with an error wrapping ErrDown. Reserved
// io.modelcontextprotocol/* keys are removed from _meta (PROTOCOL §7.10).
// Safe for concurrent use.
func (u *Upstream) CallTool(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return forward(ctx, u, "tools/call", req.Params.Name, &req.Params.Meta,
		func(ctx context.Context, cl *client.Client) (*mcp.CallToolResult, error) {
			return cl.CallTool(ctx, req)
		})
}

// GetPrompt gets the prompt named req.Params.Name (the upstream's original
// name), like CallTool in every other respect. Safe for concurrent use.
func (u *Upstream) GetPrompt(ctx context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	return forward(ctx, u, "prompts/get", req.Params.Name, &req.Params.Meta,
		func(ctx context.Context, cl *client.Client) (*mcp.GetPromptResult, error) {
			return cl.GetPrompt(ctx, req)
		})
}

// ReadResource reads the resource at req.Params.URI (the upstream's original
// URI), like CallTool in every other respect. Safe for concurrent use.
func (u *Upstream) ReadResource(ctx context.Context, req mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	return forward(ctx, u, "resources/read", req.Params.URI, &req.Params.Meta,
		func(ctx context.Context, cl *client.Client) (*mcp.ReadResourceResult, error) {
			return cl.ReadResource(ctx, req)
		})
}

// forward is the one way a request reaches the upstream: on the current
// connection (ErrDown when there is none), with reserved _meta keys removed
// from *meta (which the caller's call func sends), bounded by callContext,
// and with errors naming the upstream, the method and target.
func forward[T any](ctx context.Context, u *Upstream, method, target string, meta **mcp.Meta,
	call func(context.Context, *client.Client) (T, error)) (T, error) {
	var zero T
	c := u.current()
	if c == nil {
		return zero, u.downErr(method, target)
	}
	*meta = withoutReservedMeta(*meta)
	ctx, done := c.callContext(ctx)
	defer done()
	res, err := call(ctx, c.client)
	if err != nil {
		return zero, c.callErr(ctx, method, target, err)
	}
	return res, nil
}

// errCallTimeout is the cause of a call's ctx when CallTimeout elapsed.
var errCallTimeout = errors.New("call timeout")

func (u *Upstream) downErr(method, target string) error {
	return fmt.Errorf("upstream %q: %s %q: %w", u.cfg.Name, method, target, ErrDown)
}

// callContext derives a call's ctx from parent: it also ends at CallTimeout
// and as soon as the connection is lost, so that no call waits on a dead
// connection (stdio notices EOF by itself, SSE would wait up to its own 60s
// response timeout).
func (c *conn) callContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(c.ctx, func() { cancel(context.Cause(c.ctx)) })
	cancelTimeout := context.CancelFunc(func() {})
	if d := c.u.cfg.CallTimeout; d > 0 {
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, d, errCallTimeout)
	}
	return ctx, func() {
		stop()
		cancelTimeout()
		cancel(nil)
	}
}

// callErr wraps err from a call made on c with the upstream, method and
// target, marking the connection lost when err says so.
func (c *conn) callErr(ctx context.Context, method, target string, err error) error {
	name := c.u.cfg.Name
	switch {
	case c.ctx.Err() != nil:
		return fmt.Errorf("upstream %q: %s %q: %w: %w", name, method, target, ErrDown, context.Cause(c.ctx))
	case isConnectionLoss(err):
		c.lost(err)
		return fmt.Errorf("upstream %q: %s %q: %w: %w", name, method, target, ErrDown, err)
	case errors.Is(context.Cause(ctx), errCallTimeout):
		return fmt.Errorf("upstream %q: %s %q: timed out after %s: %w", name, method, target, c.u.cfg.CallTimeout.Round(time.Millisecond), err)
	}
	return fmt.Errorf("upstream %q: %s %q: %w", name, method, target, err)
}

// reservedMetaPrefix marks _meta keys that belong to the protocol itself.
// A downstream's values must not travel upstream: mcp-go classifies a request
// by them (PROTOCOL §7.10); the client sets its own where needed.
const reservedMetaPrefix = "io.modelcontextprotocol/"

// withoutReservedMeta returns m without reserved keys, copying only if one
// is present (m itself is never modified).
func withoutReservedMeta(m *mcp.Meta) *mcp.Meta {
	if m == nil {
		return nil
	}
	found := false
	for k := range m.AdditionalFields {
		if strings.HasPrefix(k, reservedMetaPrefix) {
			found = true
			break
		}
	}
	if !found {
		return m
	}
	out := *m
	out.AdditionalFields = maps.Clone(m.AdditionalFields)
	maps.DeleteFunc(out.AdditionalFields, func(k string, _ any) bool {
		return strings.HasPrefix(k, reservedMetaPrefix)
	})
	return &out
}
