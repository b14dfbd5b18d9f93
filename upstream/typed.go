package upstream

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/mark3labs/mcp-go/mcp"
)

// CallTool is Send for a typed tools/call of the upstream's original tool
// name; reserved _meta keys in req are not sent. viewmux's request path
// forwards raw bytes with Send; this is for callers holding typed requests.
func (u *Upstream) CallTool(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	req.Params.Meta = withoutReservedMeta(req.Params.Meta)
	raw, err := u.sendTyped(ctx, string(mcp.MethodToolsCall), req.Params.Name, req.Params)
	if err != nil {
		return nil, err
	}
	return mcp.ParseCallToolResult(&raw)
}

// GetPrompt is CallTool's twin for prompts/get.
func (u *Upstream) GetPrompt(ctx context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	req.Params.Meta = withoutReservedMeta(req.Params.Meta)
	raw, err := u.sendTyped(ctx, string(mcp.MethodPromptsGet), req.Params.Name, req.Params)
	if err != nil {
		return nil, err
	}
	return mcp.ParseGetPromptResult(&raw)
}

// ReadResource is CallTool's twin for resources/read.
func (u *Upstream) ReadResource(ctx context.Context, req mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	req.Params.Meta = withoutReservedMeta(req.Params.Meta)
	raw, err := u.sendTyped(ctx, string(mcp.MethodResourcesRead), req.Params.URI, req.Params)
	if err != nil {
		return nil, err
	}
	return mcp.ParseReadResourceResult(&raw)
}

func (u *Upstream) sendTyped(ctx context.Context, method, target string, params any) (json.RawMessage, error) {
	b, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	return u.Send(ctx, Request{Method: method, Target: target, Params: b})
}

// withoutReservedMeta returns m without reserved keys, copying only if one
// is present (m itself is never modified).
func withoutReservedMeta(m *mcp.Meta) *mcp.Meta {
	if m == nil {
		return nil
	}
	found := false
	for k := range m.AdditionalFields {
		if IsReservedMeta(k) {
			found = true
			break
		}
	}
	if !found {
		return m
	}
	out := *m
	out.AdditionalFields = maps.Clone(m.AdditionalFields)
	maps.DeleteFunc(out.AdditionalFields, func(k string, _ any) bool { return IsReservedMeta(k) })
	return &out
}
