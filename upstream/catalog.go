package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
// every page. Each list is requested with rawRequest and each item kept as
// the bytes the upstream sent (Catalog's Raw slices); only what decisions
// need is decoded from them. A method-not-found answer counts as an empty
// list. With strict (first connect) any other failure fails the fetch;
// otherwise (refetch on list_changed) it is logged and that list keeps its
// previous value. A lost connection always fails the fetch, and so does a
// catalog past the upstream's bounds (ErrCatalogBound): the lists kept
// from base count towards them.
func (c *conn) fetch(ctx context.Context, base *Catalog, kinds uint32, strict bool) (*Catalog, error) {
	next := &Catalog{}
	if base != nil {
		*next = *base // the slices are never modified, so sharing them is safe
	}
	steps := []struct {
		kind   uint32
		method mcp.MCPMethod
		key    string // the result member that holds the items
		keep   func(items []json.RawMessage)
	}{
		{listTools, mcp.MethodToolsList, "tools", func(items []json.RawMessage) {
			next.Tools, next.RawTools = decodeItems(c, "tool", items, decodeTool)
		}},
		{listPrompts, mcp.MethodPromptsList, "prompts", func(items []json.RawMessage) {
			next.Prompts, next.RawPrompts = decodeItems(c, "prompt", items, decodeAs[mcp.Prompt])
		}},
		{listResources, mcp.MethodResourcesList, "resources", func(items []json.RawMessage) {
			next.Resources, next.RawResources = decodeItems(c, "resource", items, decodeAs[mcp.Resource])
		}},
		{listTemplates, mcp.MethodResourcesTemplatesList, "resourceTemplates", func(items []json.RawMessage) {
			next.ResourceTemplates, next.RawTemplates = decodeItems(c, "resource template", items, decodeAs[mcp.ResourceTemplate])
		}},
	}
	budget := c.newBudget(base, kinds)
	for _, s := range steps {
		if kinds&s.kind == 0 {
			continue
		}
		items, err := c.listAll(ctx, string(s.method), s.key, budget)
		var rpcErr *RPCError
		switch {
		case err == nil:
			s.keep(items)
		case errors.Is(err, ErrCatalogBound):
			return nil, err // refetch too: the upstream is broken, not one list
		case c.ctx.Err() != nil:
			return nil, fmt.Errorf("%s: %w (%w)", s.method, err, context.Cause(c.ctx))
		case isConnectionLoss(err):
			return nil, fmt.Errorf("%s: %w", s.method, err)
		case errors.As(err, &rpcErr) && rpcErr.Code == mcp.METHOD_NOT_FOUND:
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
		cat.Tools, cat.RawTools = nil, nil
	case listPrompts:
		cat.Prompts, cat.RawPrompts = nil, nil
	case listResources:
		cat.Resources, cat.RawResources = nil, nil
	case listTemplates:
		cat.ResourceTemplates, cat.RawTemplates = nil, nil
	}
}

// listAll requests every page of the listing method and returns the items
// of the result member key, each compacted but otherwise the upstream's
// bytes. Pages are followed only while budget lasts (ErrCatalogBound),
// and a cursor the upstream already gave fails the listing
// (errRepeatedListCursor), so a looping server cannot hold it.
func (c *conn) listAll(ctx context.Context, method, key string, budget *catalogBudget) ([]json.RawMessage, error) {
	var (
		out    []json.RawMessage
		params json.RawMessage
		seen   = map[string]bool{"": true}
	)
	for {
		res, err := c.rawRequest(ctx, method, params)
		if err != nil {
			return nil, err
		}
		items, cursor, err := decodePage(res, key, budget)
		if errors.Is(err, ErrCatalogBound) {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		if err != nil {
			return nil, fmt.Errorf("decoding %s result: %w", method, err)
		}
		out = append(out, items...)
		if cursor == "" {
			return out, nil
		}
		if seen[cursor] {
			return nil, fmt.Errorf("%s: %w: %q", method, errRepeatedListCursor, cursor)
		}
		seen[cursor] = true
		params, _ = json.Marshal(map[string]string{"cursor": cursor})
	}
}

// decodeItems decodes each raw item with decode, for the decisions made on
// it, and returns the items kept with their raw bytes, index for index.
// An item decode refuses is left out and logged, naming what kind it is.
func decodeItems[T any](c *conn, kind string, items []json.RawMessage, decode func(json.RawMessage) (T, error)) ([]T, []json.RawMessage) {
	out := make([]T, 0, len(items))
	raws := make([]json.RawMessage, 0, len(items))
	for i, raw := range items {
		var v T
		var err error
		if len(raw) == 0 || raw[0] != '{' { // compacted: no leading space
			err = errNotObject
		} else {
			v, err = decode(raw)
		}
		if err != nil {
			var id struct {
				Name string `json:"name"`
			}
			json.Unmarshal(raw, &id) // best effort, for the log line
			nameKey := "name"
			if kind == "tool" {
				nameKey = "tool"
			}
			msg := "leaving out a definition the upstream listed that cannot be used"
			if errors.Is(err, errHeaderAnnotations) {
				msg = "dropping tool with invalid x-mcp-header annotations"
			}
			c.u.log.Warn(msg, "kind", kind, nameKey, id.Name, "index", i, "err", err)
			continue
		}
		out = append(out, v)
		raws = append(raws, raw)
	}
	return out, raws
}

func decodeAs[T any](raw json.RawMessage) (T, error) {
	var v T
	err := json.Unmarshal(raw, &v)
	return v, err
}

// decodeTool decodes a tool definition. mcp.Tool's own decoding is lossy
// (root oneOf/anyOf/$schema and unknown schema keys are dropped), so the
// schemas are kept as the upstream's bytes in RawInputSchema and
// RawOutputSchema, which is what schema decisions read. A tool failing
// mcp.ValidateParamHeaderAnnotations is refused: mcp-go's server panics
// registering one.
func decodeTool(raw json.RawMessage) (mcp.Tool, error) {
	t, err := decodeAs[mcp.Tool](raw)
	if err != nil {
		return t, err
	}
	var s struct {
		Input  json.RawMessage `json:"inputSchema"`
		Output json.RawMessage `json:"outputSchema"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return t, err
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
		return t, fmt.Errorf("tool %q: %w: %w", t.Name, errHeaderAnnotations, err)
	}
	return t, nil
}

// DecodeTool decodes one tool definition as a listing does (decodeTool):
// for definitions kept from an earlier listing, such as the last listing
// of a per-user upstream that the gateway keeps in its state store.
func DecodeTool(raw json.RawMessage) (mcp.Tool, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return mcp.Tool{}, errNotObject
	}
	return decodeTool(raw)
}

// errRepeatedListCursor fails a listing whose next cursor is one the
// upstream already gave: paging would never end.
var errRepeatedListCursor = errors.New("list cursor did not advance")

// errNotObject is the error of a listed item that is not a JSON object
// (null decodes into a zero item without complaint).
var errNotObject = errors.New("not a JSON object")

// errHeaderAnnotations marks a tool refused for its x-mcp-header
// annotations.
var errHeaderAnnotations = errors.New("invalid x-mcp-header annotations")

func isJSONValue(m json.RawMessage) bool { return len(m) > 0 && string(m) != "null" }
