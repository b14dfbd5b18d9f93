package aggregator

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// This file applies tool overrides ([upstreams.U.overrides.TOOL])
// to the catalog before the filter pipeline, so every rule, toolset,
// search and pin sees the overridden definition; and injects an
// override's fixed arguments into each call, which the one decision
// (sessions) does before call rules look at them.
//
// What an override changes in a definition's bytes is only what it names:
// name, title, description, and the inputSchema's properties and required
// members when it fixes arguments. Everything else is the upstream's.

// Unmatched is an override naming a tool its upstream does not list (now:
// the upstream may add it later, and the override then applies).
type Unmatched struct {
	Upstream, Tool string
}

// override applies o (non-nil) to the exposed tool e, built from the
// upstream's definition raw, and returns the members to splice into raw
// besides the name. e.Tool is a copy of the catalog's: what it shares with
// the catalog (maps, slices) is replaced, never modified.
func override(o *configs.Override, e *filter.Entry, raw json.RawMessage) []jsonrpc.Member {
	var set []jsonrpc.Member
	if o.Title != "" {
		e.Tool.Title = o.Title
		set = append(set, jsonrpc.Member{Key: "title", Value: jsonString(o.Title)})
	}
	if o.Description != "" {
		e.Tool.Description = o.Description
		set = append(set, jsonrpc.Member{Key: "description", Value: jsonString(o.Description)})
	}
	if len(o.Args) == 0 {
		return set
	}
	fixed := slices.Sorted(maps.Keys(o.Args))
	for _, k := range fixed {
		e.Fixed = append(e.Fixed, jsonrpc.Member{Key: k, Value: o.Args[k]})
	}
	if e.Tool.RawInputSchema != nil {
		e.Tool.RawInputSchema = withoutArgs(e.Tool.RawInputSchema, fixed)
	} else {
		in := e.Tool.InputSchema
		in.Properties = maps.Clone(in.Properties)
		for _, k := range fixed {
			delete(in.Properties, k)
		}
		in.Required = slices.DeleteFunc(slices.Clone(in.Required), func(r string) bool { return slices.Contains(fixed, r) })
		in.PropertyOrder = slices.DeleteFunc(slices.Clone(in.PropertyOrder), func(r string) bool { return slices.Contains(fixed, r) })
		e.Tool.InputSchema = in
	}
	if schema := jsonrpc.Lookup(raw, "inputSchema"); schema != nil {
		set = append(set, jsonrpc.Member{Key: "inputSchema", Value: withoutArgs(schema, fixed)})
	}
	return set
}

// withoutArgs returns the input schema schema without the arguments fixed:
// their members of "properties" and their names in "required" are
// removed, and every other byte is kept. A schema of another shape is
// returned as it is.
func withoutArgs(schema json.RawMessage, fixed []string) json.RawMessage {
	props, req := func() (json.RawMessage, json.RawMessage) {
		f := jsonrpc.Fields(schema, "properties", "required")
		return f[0], f[1]
	}()
	var set []jsonrpc.Member
	if props != nil {
		if p, err := jsonrpc.Without(props, fixed); err == nil {
			set = append(set, jsonrpc.Member{Key: "properties", Value: p})
		}
	}
	if req != nil {
		set = append(set, jsonrpc.Member{Key: "required", Value: withoutNames(req, fixed)})
	}
	if len(set) == 0 {
		return schema
	}
	out, err := jsonrpc.Splice(schema, set, nil, nil)
	if err != nil {
		return schema
	}
	return out
}

// withoutNames returns the JSON array arr without its elements that are
// one of the strings names; other elements keep their bytes.
func withoutNames(arr json.RawMessage, names []string) json.RawMessage {
	if len(arr) == 0 || arr[0] != '[' {
		return arr // not an array: as it was
	}
	out := []byte{'['}
	jsonrpc.Elements(arr, func(elem []byte) {
		var s string
		if json.Unmarshal(elem, &s) == nil && slices.Contains(names, s) {
			return
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, elem...)
	})
	return append(out, ']')
}

// ErrFixedArgument is returned, wrapped, by InjectFixed for a call that
// supplies an argument its tool's override fixes.
var ErrFixedArgument = errors.New("argument fixed by the gateway's configuration")

// InjectFixed returns the params and arguments of a tools/call of e with
// e's fixed arguments injected: the arguments object gets them (created
// when absent or null), and only the "arguments" member of params changes.
// It fails, changing nothing, when the call supplies a fixed argument
// itself, under any spelling a decoder that ignores case would take for it
// (ErrFixedArgument), or when arguments is not an object. For a tool with
// no fixed arguments it returns params and args as given.
func InjectFixed(e *filter.Entry, params, args json.RawMessage) (json.RawMessage, json.RawMessage, error) {
	if len(e.Fixed) == 0 {
		return params, args, nil
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	keys, err := jsonrpc.Keys(args)
	if err != nil {
		return nil, nil, fmt.Errorf("arguments: %w", err)
	}
	for _, k := range keys {
		for _, f := range e.Fixed {
			if jsonrpc.FoldEqual(k, f.Key) {
				return nil, nil, fmt.Errorf("argument %q: %w", jsonrpc.Printable(k), ErrFixedArgument)
			}
		}
	}
	args, err = jsonrpc.Splice(args, e.Fixed, nil, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("arguments: %w", err)
	}
	params, err = jsonrpc.Splice(params, []jsonrpc.Member{{Key: "arguments", Value: args}}, nil, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("params: %w", err)
	}
	return params, args, nil
}

// unmatchedOverrides returns the overrides of src naming no tool of its
// catalog; none while it has no catalog.
func (src *source) unmatchedOverrides() []Unmatched {
	if src.catalog == nil || len(src.cfg.Overrides) == 0 {
		return nil
	}
	var out []Unmatched
	for _, tool := range slices.Sorted(maps.Keys(src.cfg.Overrides)) {
		if !slices.ContainsFunc(src.catalog.Tools, func(t mcp.Tool) bool { return t.Name == tool }) {
			out = append(out, Unmatched{Upstream: src.cfg.Name, Tool: tool})
		}
	}
	return out
}

// warnUnmatched logs each override of next naming a tool its upstream
// does not list, once: not again while later snapshots still have it.
// It is a warning, not an error: the upstream may add the tool later (a
// server that lists tools by the caller's permissions, or a new version),
// and the override then applies.
func (a *Aggregator) warnUnmatched(prev, next *Snapshot) {
	for _, u := range next.Unmatched {
		if prev != nil && slices.Contains(prev.Unmatched, u) {
			continue
		}
		a.log.Warn("override names a tool the upstream does not list; it applies once the upstream lists it",
			"upstream", u.Upstream, "tool", u.Tool)
	}
}
