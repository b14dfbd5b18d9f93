package aggregator

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/filter"
)

// buildCatalog gives s the filter.Catalog its views filter prompts,
// resources and templates by, upstream by upstream (see
// docs/profiles-and-filters.md): each item with the upstream serving it, and
// the upstreams whose own catalog holds a tool. An upstream whose tools its
// own rules all drop still serves tools: its prompts and resources are then
// shown only where a stage names it.
func (s *Snapshot) buildCatalog(sources []*source) {
	prompts := make([]filter.Served[mcp.Prompt], len(s.Prompts))
	for i, p := range s.Prompts {
		prompts[i] = filter.Served[mcp.Prompt]{Item: p.Prompt, Raw: p.Raw, Upstream: p.Upstream}
	}
	resources := make([]filter.Served[mcp.Resource], len(s.Resources))
	for i, r := range s.Resources {
		resources[i] = filter.Served[mcp.Resource]{Item: r.Resource, Raw: r.Raw, Upstream: r.Upstream}
	}
	templates := make([]filter.Served[mcp.ResourceTemplate], len(s.Templates))
	for i, t := range s.Templates {
		templates[i] = filter.Served[mcp.ResourceTemplate]{Item: t.Template, Raw: t.Raw, Upstream: t.Upstream}
	}
	var withTools []string
	for _, src := range sources {
		if src.catalog != nil && len(src.catalog.Tools) > 0 {
			withTools = append(withTools, src.cfg.Name)
		}
	}
	s.Catalog = filter.NewCatalog(s.Version, prompts, resources, templates, withTools)
}

// pinKey carries a pin (see Pin) in a request's ctx.
type pinKey struct{}

type pin struct {
	upstream string
	notFound error
}

// Pin returns ctx pinned to upstream: a client request routed with it
// (GetPrompt, ReadResource, Complete) that would reach any other upstream
// is answered with notFound instead, and nothing is sent. The front door
// pins the upstream its decision checked ("" when no upstream served the
// target then), so a catalog change or a newly learned resource link
// between the decision and the forwarding cannot redirect the request to
// an upstream the client may not see.
func Pin(ctx context.Context, upstream string, notFound error) context.Context {
	return context.WithValue(ctx, pinKey{}, pin{upstream: upstream, notFound: notFound})
}

// checkPin returns the pin's notFound error when ctx is pinned to an
// upstream other than up, else nil.
func checkPin(ctx context.Context, up string) error {
	if p, ok := ctx.Value(pinKey{}).(pin); ok && p.upstream != up {
		return p.notFound
	}
	return nil
}
