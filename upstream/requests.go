package upstream

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// requestHook puts Options.OnRequest behind mcp-go's handler interfaces,
// for the connections that still use mcp-go's client (streamable HTTP):
// the hook sees the same method and params bytes as on stdio and
// websocket, and its result is decoded into the type mcp-go answers with.
type requestHook struct{ c *conn }

var (
	_ client.SamplingHandler    = requestHook{}
	_ client.ElicitationHandler = requestHook{}
	_ client.RootsHandler       = requestHook{}
)

// options returns the client options that install the hook, or none when
// no hook is set.
func (h requestHook) options() []client.ClientOption {
	if h.c.u.opts.OnRequest == nil {
		return nil
	}
	return []client.ClientOption{client.WithSamplingHandler(h), client.WithElicitationHandler(h), client.WithRootsHandler(h)}
}

func (h requestHook) ask(ctx context.Context, method string, params, out any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	res, err := h.c.u.opts.OnRequest(ctx, h.c.u, method, b)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(res, out); err != nil {
		return fmt.Errorf("%s: the client's result: %w", method, err)
	}
	return nil
}

// CreateMessage relays sampling/createMessage.
func (h requestHook) CreateMessage(ctx context.Context, req mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	var res mcp.CreateMessageResult
	if err := h.ask(ctx, string(mcp.MethodSamplingCreateMessage), req.CreateMessageParams, &res); err != nil {
		return nil, err
	}
	content, err := mcp.ParseSamplingContent(res.Content)
	if err != nil {
		return nil, fmt.Errorf("sampling/createMessage: the client's result: %w", err)
	}
	res.Content = content
	return &res, nil
}

// Elicit relays elicitation/create.
func (h requestHook) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	var res mcp.ElicitationResult
	if err := h.ask(ctx, string(mcp.MethodElicitationCreate), req.Params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ListRoots relays roots/list.
func (h requestHook) ListRoots(ctx context.Context, req mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	var res mcp.ListRootsResult
	if err := h.ask(ctx, string(mcp.MethodListRoots), req.Params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
