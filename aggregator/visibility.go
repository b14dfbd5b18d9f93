package aggregator

import (
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/filter"
)

// buildCatalog gives s the filter.Catalog its views filter prompts,
// resources and templates by (SPEC §5): each item with the upstream serving
// it, and the upstreams whose own catalog holds a tool. An upstream whose
// tools its own rules all drop still serves tools: its prompts and
// resources are then shown only where a stage names it.
func (s *Snapshot) buildCatalog(sources []*source) {
	prompts := make([]filter.Served[mcp.Prompt], len(s.Prompts))
	for i, p := range s.Prompts {
		prompts[i] = filter.Served[mcp.Prompt]{Item: p.Prompt, Upstream: p.Upstream}
	}
	resources := make([]filter.Served[mcp.Resource], len(s.Resources))
	for i, r := range s.Resources {
		resources[i] = filter.Served[mcp.Resource]{Item: r.Resource, Upstream: r.Upstream}
	}
	templates := make([]filter.Served[mcp.ResourceTemplate], len(s.Templates))
	for i, t := range s.Templates {
		templates[i] = filter.Served[mcp.ResourceTemplate]{Item: t.Template, Upstream: t.Upstream}
	}
	var withTools []string
	for _, src := range sources {
		if src.catalog != nil && len(src.catalog.Tools) > 0 {
			withTools = append(withTools, src.cfg.Name)
		}
	}
	s.Catalog = filter.NewCatalog(s.Version, prompts, resources, templates, withTools)
}
