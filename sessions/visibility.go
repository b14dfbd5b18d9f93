package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file applies upstream-level visibility (see
// docs/profiles-and-filters.md) on every door: listings of prompts,
// resources and templates come from the view's filter.Listing, and a get,
// read, subscribe or completion against an upstream the view hides answers
// exactly as one against nothing does, before anything is sent upstream
// (decide, with targetOf). The decision itself is
// filter.Filter.ShowsUpstream. What decide checked is what route forwards
// to: the request is pinned to that upstream (pin).

// listing returns what b's view of the current snapshot lists besides
// tools, cached per view.
func (s *Server) listing(b grant.Binding) *filter.Listing { return s.listingOf(nil, b) }

// listingOf is listing for a request that already holds its view: that
// view's listing when it is of the current snapshot.
func (s *Server) listingOf(view *filter.View, b grant.Binding) *filter.Listing {
	snap := s.agg.Snapshot()
	if view == nil || view.Version != snap.Version {
		view = s.View(b)
		if view.Version != snap.Version { // a new snapshot between the two loads
			snap = s.agg.Snapshot()
		}
	}
	return view.Listing(snap.Catalog)
}

// targetOf resolves the prompt, resource or completion ref m names
// (prompts/get, resources/read, resources/subscribe, completion/complete)
// to the upstream serving it, "" when none does, by the same lookups the
// aggregator routes with. ok is false for the other methods.
// resources/unsubscribe is not among them: without a subscription it
// answers alike for every URI and sends nothing, and with one (made while
// the upstream was shown) it must be able to release it.
func (s *Server) targetOf(m *jsonrpc.Message) (up string, ok bool) {
	switch m.Method {
	case string(mcp.MethodPromptsGet):
		if p := s.agg.Snapshot().Prompt(m.Name); p != nil {
			up = p.Upstream
		}
	case string(mcp.MethodResourcesRead), string(mcp.MethodResourcesSubscribe):
		up, _, _ = s.agg.RouteURI(m.URI)
	case string(mcp.MethodCompletionComplete):
		up, _, _ = s.agg.CompletionUpstream(m.Params)
	default:
		return "", false
	}
	return up, true
}

// notFoundFor is the error a target of m that no upstream serves gets
// (the error route answers for it), for errorFor.
func notFoundFor(m *jsonrpc.Message) error {
	switch m.Method {
	case string(mcp.MethodPromptsGet):
		return &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "Prompt not found: " + jsonrpc.Printable(m.Name)}
	case string(mcp.MethodCompletionComplete):
		// Read as the aggregator reads the ref (CompletionUpstream).
		var p struct {
			Ref struct {
				Type string `json:"type"`
			} `json:"ref"`
		}
		if json.Unmarshal(m.Params, &p) == nil && p.Ref.Type == "ref/prompt" {
			return fmt.Errorf("completion/complete: %w", aggregator.ErrPromptNotFound)
		}
	}
	return fmt.Errorf("resource %q: %w", m.URI, aggregator.ErrResourceNotFound)
}

// pin pins ctx to the upstream decide checked for m's target (e.Upstream,
// "" when none served it), so that route reaches that upstream or none
// (aggregator.Pin).
func pin(ctx context.Context, e *filter.Entry, m *jsonrpc.Message) context.Context {
	up := ""
	if e != nil {
		up = e.Upstream
	}
	return aggregator.Pin(ctx, up, notFoundFor(m))
}

// shownURI reports whether b's view shows the upstream that serves uri. A
// URI no upstream serves is not shown.
func (s *Server) shownURI(b grant.Binding, uri string) bool {
	up, _, ok := s.agg.RouteURI(uri)
	return ok && s.listing(b).Shows(up)
}

// listed returns the pre-encoded result of m when it is a prompts/list,
// resources/list or resources/templates/list request without a cursor
// from a client before 2026-07-28, else nil: the doors answer it from the
// view's Listing as they answer tools/list, in pieces, without copying it.
func (s *Server) listed(b grant.Binding, view *filter.View, m *jsonrpc.Message) []byte {
	switch mcp.MCPMethod(m.Method) {
	case mcp.MethodPromptsList, mcp.MethodResourcesList, mcp.MethodResourcesTemplatesList:
		if m.IsRequest() && m.Cursor == nil && !isModern(m) {
			return s.listingOf(view, b).Encoded(m.Method)
		}
	}
	return nil
}

// writeResult writes a JSON-RPC answer whose result is pre-encoded, with a
// trailing newline.
func writeResult(w io.Writer, id json.RawMessage, result []byte) error {
	for _, part := range [][]byte{[]byte(`{"jsonrpc":"2.0","id":`), id, []byte(`,"result":`), result, []byte("}\n")} {
		if _, err := w.Write(part); err != nil {
			return err
		}
	}
	return nil
}
