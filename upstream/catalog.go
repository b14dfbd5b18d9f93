package upstream

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/client"
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
		{listPrompts, mcp.MethodPromptsList, func() (err error) {
			next.Prompts, err = listAll[mcp.Prompt](ctx, c, mcp.MethodPromptsList, "prompts")
			return err
		}},
		{listResources, mcp.MethodResourcesList, func() (err error) {
			next.Resources, err = listAll[mcp.Resource](ctx, c, mcp.MethodResourcesList, "resources")
			return err
		}},
		{listTemplates, mcp.MethodResourcesTemplatesList, func() (err error) {
			next.ResourceTemplates, err = listAll[mcp.ResourceTemplate](ctx, c, mcp.MethodResourcesTemplatesList, "resourceTemplates")
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
		case isMethodNotFound(err):
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

// listAll fetches every page of a list through rawRequest, decoding the
// items under key.
func listAll[T any](ctx context.Context, c *conn, method mcp.MCPMethod, key string) ([]T, error) {
	var out []T
	err := c.pages(ctx, method, func(result json.RawMessage) error {
		var page map[string]json.RawMessage
		if err := json.Unmarshal(result, &page); err != nil {
			return err
		}
		var items []T
		if raw, ok := page[key]; ok {
			if err := json.Unmarshal(raw, &items); err != nil {
				return err
			}
		}
		out = append(out, items...)
		return nil
	})
	return out, err
}

// pages requests method page by page, handing each result to f, until a
// page has no nextCursor. A cursor seen before fails the fetch.
func (c *conn) pages(ctx context.Context, method mcp.MCPMethod, f func(json.RawMessage) error) error {
	seen := map[string]bool{"": true}
	var params json.RawMessage
	for {
		result, err := c.rawRequest(ctx, string(method), params)
		if err != nil {
			return err
		}
		if err := f(result); err != nil {
			return fmt.Errorf("decoding %s result: %w", method, err)
		}
		var page struct {
			NextCursor string `json:"nextCursor"`
		}
		if err := json.Unmarshal(result, &page); err != nil {
			return fmt.Errorf("decoding %s result: %w", method, err)
		}
		if page.NextCursor == "" {
			return nil
		}
		if seen[page.NextCursor] {
			return fmt.Errorf("%w: %q", client.ErrRepeatedListCursor, page.NextCursor)
		}
		seen[page.NextCursor] = true
		params, _ = json.Marshal(map[string]string{"cursor": page.NextCursor})
	}
}

// fetchTools lists every page of tools. mcp.Tool's decoder is lossy (it has
// no UnmarshalJSON: root oneOf/anyOf/$schema and unknown schema keys are
// dropped), so the exact inputSchema / outputSchema are put back from each
// page's bytes, matched by tool name. Tools with invalid x-mcp-header
// annotations are dropped, as the protocol requires.
func (c *conn) fetchTools(ctx context.Context) ([]mcp.Tool, error) {
	var out []mcp.Tool
	err := c.pages(ctx, mcp.MethodToolsList, func(result json.RawMessage) error {
		var page struct {
			Tools []mcp.Tool `json:"tools"`
		}
		if err := json.Unmarshal(result, &page); err != nil {
			return err
		}
		raw, err := rawToolSchemas(result)
		if err != nil {
			return err
		}
		for _, t := range page.Tools {
			s := raw[t.Name]
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
		return nil
	})
	return out, err
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
