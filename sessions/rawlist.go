package sessions

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/filter"
	"github.com/mcpmux/mcpmux/internal/jsonrpc"
)

// This file keeps definitions the upstream's bytes on the listing paths
// mcp-go's server still answers (a 2026-07-28 listing, with its result
// decoration, and a listing after a cursor): mcp-go picks, filters and
// decorates the items, and encodes each from its decoded form, which adds
// and drops fields (SPEC §7). encodeListing swaps each item's encoding for
// the bytes the view lists it with. On /mcp these listings are answered
// here rather than by mcp-go's HTTP transport (serveModernListing,
// serveListing); the stream doors call encodeListing themselves.

// encodeListing encodes resp, mcp-go's answer to the listing request m
// (tools/list, prompts/list, resources/list, resources/templates/list),
// with the items of its result replaced by their listed bytes from view
// and listing. Any other answer, an error included, is encoded as it is.
func encodeListing(resp mcp.JSONRPCMessage, m *jsonrpc.Message, view *filter.View, listing *filter.Listing) ([]byte, error) {
	out, err := json.Marshal(resp)
	if err != nil {
		return nil, err
	}
	r, ok := resp.(mcp.JSONRPCResponse)
	if !ok {
		return out, nil
	}
	var key string
	var items []json.RawMessage
	def := func(method, k string, v any) json.RawMessage {
		if raw := listing.Definition(method, k); raw != nil {
			return raw
		}
		b, err := json.Marshal(v)
		if err != nil {
			return json.RawMessage(`{}`)
		}
		return b
	}
	switch res := deref(r.Result).(type) {
	case mcp.ListToolsResult:
		key = "tools"
		for _, t := range res.Tools {
			if e := view.Lookup(t.Name); e != nil {
				items = append(items, e.Definition())
			} else {
				items = append(items, def("", "", t))
			}
		}
	case mcp.ListPromptsResult:
		key = "prompts"
		for _, p := range res.Prompts {
			items = append(items, def(m.Method, p.Name, p))
		}
	case mcp.ListResourcesResult:
		key = "resources"
		for _, x := range res.Resources {
			items = append(items, def(m.Method, x.URI, x))
		}
	case mcp.ListResourceTemplatesResult:
		key = "resourceTemplates"
		for _, x := range res.ResourceTemplates {
			items = append(items, def(m.Method, filter.TemplateString(x), x))
		}
	default:
		return out, nil
	}
	result, err := json.Marshal(r.Result)
	if err != nil {
		return nil, err
	}
	if result, err = jsonrpc.Splice(result, []jsonrpc.Member{{Key: key, Value: joinItems(items)}}, nil, nil); err != nil {
		return nil, err
	}
	return jsonrpc.Splice(out, []jsonrpc.Member{{Key: "result", Value: result}}, nil, nil)
}

// deref returns *v for the pointer results mcp-go may hold.
func deref(v any) any {
	switch r := v.(type) {
	case *mcp.ListToolsResult:
		return *r
	case *mcp.ListPromptsResult:
		return *r
	case *mcp.ListResourcesResult:
		return *r
	case *mcp.ListResourceTemplatesResult:
		return *r
	}
	return v
}

// joinItems returns the JSON array of items.
func joinItems(items []json.RawMessage) json.RawMessage {
	n := 2
	for _, it := range items {
		n += len(it) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, ']')
}

// isListing reports whether method is one of the four listings.
func isListing(method string) bool {
	switch mcp.MCPMethod(method) {
	case mcp.MethodToolsList, mcp.MethodPromptsList, mcp.MethodResourcesList, mcp.MethodResourcesTemplatesList:
		return true
	}
	return false
}

// serveModernListing answers a 2026-07-28 listing on /mcp: the transport
// rules checked as for a routed request (validateModern), then the listing
// made and decorated by mcp-go (serveListing).
func (s *Server) serveModernListing(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, b Binding, view *filter.View, body []byte) {
	if e := validateModern(r, m, view); e != nil {
		writeAnswer(w, httpStatus(e.Code), jsonrpc.ErrorResponse(m.ID, e))
		return
	}
	s.serveListing(withBinding(r.Context(), b), w, m, b, view, body)
}

// serveListing answers a listing on /mcp that mcp-go makes (ctx carries
// the binding, and the session when there is one), with the items written
// as their listed bytes (encodeListing).
func (s *Server) serveListing(ctx context.Context, w http.ResponseWriter, m *jsonrpc.Message, b Binding, view *filter.View, body []byte) {
	resp := s.mcp.HandleMessage(ctx, body)
	out, err := encodeListing(resp, m, view, s.listingOf(view, b))
	if err != nil {
		s.log.Error("response not encodable", "method", m.Method, "error", err)
		writeAnswer(w, http.StatusInternalServerError, errorFrame(m.ID, mcp.INTERNAL_ERROR, "response could not be encoded"))
		return
	}
	status := http.StatusOK
	if e, ok := resp.(mcp.JSONRPCError); ok {
		status = httpStatus(e.Error.Code)
	}
	writeAnswer(w, status, out)
}
