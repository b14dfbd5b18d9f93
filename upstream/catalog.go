package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// List kinds, as bits, for refetching.
const (
	listTools uint32 = 1 << iota
	listPrompts
	listResources
	listTemplates
)

// advertised returns the list kinds the server's capabilities offer.
func (c *conn) advertised() uint32 {
	var k uint32
	if c.caps.Tools != nil {
		k |= listTools
	}
	if c.caps.Prompts != nil {
		k |= listPrompts
	}
	if c.caps.Resources != nil {
		k |= listResources | listTemplates
	}
	return k
}

// fetch returns a copy of base with the lists named by kinds fetched anew,
// every page. A method-not-found answer counts as an empty list. With strict
// (first connect) any other failure fails the fetch; otherwise (refetch on
// list_changed) it is logged and that list keeps its previous value. A lost
// connection always fails the fetch.
func (c *conn) fetch(ctx context.Context, base *Catalog, kinds uint32, strict bool) (*Catalog, error) {
	next := &Catalog{}
	if base != nil {
		*next = *base // the slices are never modified, so sharing them is safe
	}
	steps := []struct {
		kind   uint32
		method mcp.MCPMethod
		run    func() error
	}{
		{listTools, mcp.MethodToolsList, func() (err error) {
			next.Tools, err = c.fetchTools(ctx)
			return err
		}},
		{listPrompts, mcp.MethodPromptsList, func() error {
			r, err := c.client.ListPrompts(ctx, mcp.ListPromptsRequest{})
			if err == nil {
				next.Prompts = r.Prompts
			}
			return err
		}},
		{listResources, mcp.MethodResourcesList, func() error {
			r, err := c.client.ListResources(ctx, mcp.ListResourcesRequest{})
			if err == nil {
				next.Resources = r.Resources
			}
			return err
		}},
		{listTemplates, mcp.MethodResourcesTemplatesList, func() error {
			r, err := c.client.ListResourceTemplates(ctx, mcp.ListResourceTemplatesRequest{})
			if err == nil {
				next.ResourceTemplates = r.ResourceTemplates
			}
			return err
		}},
	}
	for _, s := range steps {
		if kinds&s.kind == 0 {
			continue
		}
		err := s.run()
		switch {
		case err == nil:
		case c.ctx.Err() != nil:
			return nil, fmt.Errorf("%s: %w (%w)", s.method, err, context.Cause(c.ctx))
		case isConnectionLoss(err):
			return nil, fmt.Errorf("%s: %w", s.method, err)
		case errors.Is(err, mcp.ErrMethodNotFound):
			c.clearList(next, s.kind)
		case strict:
			return nil, fmt.Errorf("%s: %w", s.method, err)
		default:
			c.u.log.Warn("refetch failed; keeping the previous list", "method", string(s.method), "err", err)
		}
	}
	return next, nil
}

func (c *conn) clearList(cat *Catalog, kind uint32) {
	switch kind {
	case listTools:
		cat.Tools = nil
	case listPrompts:
		cat.Prompts = nil
	case listResources:
		cat.Resources = nil
	case listTemplates:
		cat.ResourceTemplates = nil
	}
}

// fetchTools lists every page of tools. mcp-go decodes each page lossily
// (mcp.Tool has no UnmarshalJSON: root oneOf/anyOf/$schema and unknown schema
// keys are dropped), so the transport decorators below capture each page's
// raw result and the exact inputSchema / outputSchema are put back, matched
// by tool name. ListToolsByPage is still used because it also feeds the
// client's cache of tool definitions (x-mcp-header mirroring on 2026-07-28)
// and drops invalid definitions where the protocol requires it.
func (c *conn) fetchTools(ctx context.Context) ([]mcp.Tool, error) {
	var (
		out  []mcp.Tool
		req  mcp.ListToolsRequest
		seen = map[mcp.Cursor]bool{"": true}
	)
	for {
		pageCtx, sink := withRawCapture(ctx)
		page, err := c.client.ListToolsByPage(pageCtx, req)
		if err != nil {
			return nil, err
		}
		raw, err := rawToolSchemas(sink.result)
		if err != nil {
			return nil, fmt.Errorf("decoding tools/list result: %w", err)
		}
		for _, t := range page.Tools {
			s, ok := raw[t.Name]
			if !ok {
				c.u.log.Warn("raw schema of tool not captured; using mcp-go's decoding", "tool", t.Name)
			}
			if isJSONValue(s.Input) {
				t.InputSchema = mcp.ToolInputSchema{}
				t.RawInputSchema = s.Input
			}
			if isJSONValue(s.Output) {
				t.OutputSchema = mcp.ToolOutputSchema{}
				t.RawOutputSchema = s.Output
			}
			if err := mcp.ValidateParamHeaderAnnotations(&t); err != nil {
				c.u.log.Warn("dropping tool with invalid x-mcp-header annotations", "tool", t.Name, "err", err)
				continue
			}
			out = append(out, t)
		}
		if page.NextCursor == "" {
			return out, nil
		}
		if seen[page.NextCursor] {
			return nil, fmt.Errorf("%w: %q", client.ErrRepeatedListCursor, page.NextCursor)
		}
		seen[page.NextCursor] = true
		req.Params.Cursor = page.NextCursor
	}
}

type rawSchemas struct {
	Input  json.RawMessage `json:"inputSchema"`
	Output json.RawMessage `json:"outputSchema"`
}

// rawToolSchemas maps tool name → wire schemas of one tools/list result.
func rawToolSchemas(result json.RawMessage) (map[string]rawSchemas, error) {
	if len(result) == 0 {
		return nil, nil
	}
	var page struct {
		Tools []struct {
			Name string `json:"name"`
			rawSchemas
		} `json:"tools"`
	}
	if err := json.Unmarshal(result, &page); err != nil {
		return nil, err
	}
	m := make(map[string]rawSchemas, len(page.Tools))
	for _, t := range page.Tools {
		m[t.Name] = t.rawSchemas
	}
	return m, nil
}

func isJSONValue(m json.RawMessage) bool { return len(m) > 0 && string(m) != "null" }

// rawCaptureKey keys the *rawCapture of a tools/list request in its ctx.
type rawCaptureKey struct{}

// rawCapture receives the raw result of the tools/list request whose ctx
// carries it. It is written and read by the goroutine making that request
// (SendRequest is synchronous), so it needs no lock.
type rawCapture struct{ result json.RawMessage }

func withRawCapture(ctx context.Context) (context.Context, *rawCapture) {
	sink := &rawCapture{}
	return context.WithValue(ctx, rawCaptureKey{}, sink), sink
}

// capture stores resp's raw result in the request ctx's sink, if any.
func capture(ctx context.Context, req transport.JSONRPCRequest, resp *transport.JSONRPCResponse) {
	if resp == nil || req.Method != string(mcp.MethodToolsList) {
		return
	}
	if sink, ok := ctx.Value(rawCaptureKey{}).(*rawCapture); ok {
		sink.result = resp.Result
	}
}

// The decorators below override only SendRequest and embed the concrete
// transport, so every other method — and with it every optional interface
// mcp-go's client type-asserts (BidirectionalInterface, HTTPConnection,
// SetConnectionLostHandler, RequiresLegacyProtocol, Stderr) — is promoted
// unchanged; the guards after them check it at compile time. One type per
// concrete transport keeps this exact, where a single wrapper over
// transport.Interface would hide those interfaces. (client.GetEndpoint, which
// asserts *transport.SSE, is the one helper that cannot see through them.)

type stdioTransport struct{ *transport.Stdio }

func (t *stdioTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.Stdio.SendRequest(ctx, req)
	if err == nil {
		capture(ctx, req, resp)
	}
	return resp, err
}

type streamableTransport struct{ *transport.StreamableHTTP }

func (t *streamableTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.StreamableHTTP.SendRequest(ctx, req)
	if err == nil {
		capture(ctx, req, resp)
	}
	return resp, err
}

type sseTransport struct{ *transport.SSE }

func (t *sseTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.SSE.SendRequest(ctx, req)
	if err == nil {
		capture(ctx, req, resp)
	}
	return resp, err
}

// websocketTransport is not an HTTPConnection on purpose: mcp-go then sends
// notifications/cancelled when a call's ctx ends.
type websocketTransport struct{ *wsTransport }

func (t *websocketTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.wsTransport.SendRequest(ctx, req)
	if err == nil {
		capture(ctx, req, resp)
	}
	return resp, err
}

// Optional interfaces mcp-go's client looks for by type assertion.
type (
	connectionLostSetter interface{ SetConnectionLostHandler(func(error)) }
	legacyRequirer       interface{ RequiresLegacyProtocol() bool }
	stderrer             interface{ Stderr() io.Reader }
)

var (
	_ transport.BidirectionalInterface = (*stdioTransport)(nil)
	_ stderrer                         = (*stdioTransport)(nil)

	_ transport.BidirectionalInterface = (*streamableTransport)(nil)
	_ transport.HTTPConnection         = (*streamableTransport)(nil)
	_ legacyRequirer                   = (*streamableTransport)(nil)

	_ transport.HTTPConnection = (*sseTransport)(nil)
	_ connectionLostSetter     = (*sseTransport)(nil)

	_ transport.BidirectionalInterface = (*websocketTransport)(nil)
	_ connectionLostSetter             = (*websocketTransport)(nil)
)
