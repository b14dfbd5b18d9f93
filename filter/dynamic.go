package filter

import (
	"encoding/json"
	"slices"
	"strings"
)

// This file holds the stage of a dynamic-toolsets session: the
// session starts with its toolsets off and enables them one by one. The
// stage is one more Rules in the session's Filter, after the profile's
// ceiling (global, profile chain, request narrowing), so that Allows stays
// the one decision: a tool passes it when it lies in an enabled toolset, or
// in no toolset of an upstream that declares toolsets. Sessions with the
// same enabled toolsets get the same filter key, and so one shared Filter
// and one cached View per snapshot (Registry.WithToolsets).

// dynamicStage is the toolset part of a dynamic session's rules.
type dynamicStage struct {
	// enabled holds the toolset selectors turned on, by upstream name:
	// "<upstream>/<set>" for a declared set, "<upstream>" for an upstream
	// that declares none.
	enabled map[string]struct{}
	// outside holds the upstreams that declare toolsets: their tools in no
	// set always pass.
	outside map[string]struct{}
	// own are viewmux's own tools, listed first in every view through the
	// filter and answered by viewmux itself. Their entries have no Upstream.
	own []*Entry
}

// match reports whether a tool selected by toolsets (Entry.Toolsets) passes
// the stage.
func (d *dynamicStage) match(toolsets []string) bool {
	inSet := false
	for _, ts := range toolsets {
		if _, ok := d.enabled[ts]; ok {
			return true
		}
		inSet = inSet || strings.Contains(ts, "/")
	}
	if inSet {
		return false
	}
	for _, ts := range toolsets {
		if _, ok := d.outside[ts]; ok {
			return true
		}
	}
	return false
}

// DynamicStage returns the stage of a dynamic-toolsets session: enabled are
// the toolset selectors on, by upstream name ("<upstream>/<set>", or
// "<upstream>" for an upstream that declares no toolsets); outside names the
// upstreams that declare toolsets, whose tools in none of them always pass;
// own are viewmux's own tools, which every view through a filter with this
// stage lists first, whatever the other stages say, and whose entries must
// have an empty Upstream. The stage's key is never empty, even with nothing
// enabled. The slices are copied.
func DynamicStage(enabled, outside []string, own []*Entry) *Rules {
	d := &dynamicStage{enabled: make(map[string]struct{}, len(enabled)), outside: make(map[string]struct{}, len(outside)), own: slices.Clone(own)}
	for _, e := range enabled {
		d.enabled[e] = struct{}{}
	}
	for _, o := range outside {
		d.outside[o] = struct{}{}
	}
	names := make([]string, len(own))
	for i, e := range own {
		names[i] = e.Tool.Name
	}
	var b strings.Builder
	b.WriteString("dynamic_toolsets")
	for _, l := range [][]string{enabled, outside, names} {
		enc, _ := json.Marshal(slices.Compact(slices.Sorted(slices.Values(l)))) // []string cannot fail to marshal
		b.Write(enc)
	}
	b.WriteByte(';')
	return &Rules{key: b.String(), dynamic: d}
}

// dynamic returns the filter's dynamic stage, or nil.
func (f *Filter) dynamic() *dynamicStage {
	for _, s := range f.stages {
		if s.dynamic != nil {
			return s.dynamic
		}
	}
	return nil
}

// Dynamic reports whether the filter has a dynamic-toolsets stage.
func (f *Filter) Dynamic() bool { return f.dynamic() != nil }

// Enabled returns the toolset selectors the filter's dynamic stage has on,
// sorted, in a new slice; nil when it has no dynamic stage.
func (f *Filter) Enabled() []string {
	d := f.dynamic()
	if d == nil {
		return nil
	}
	out := make([]string, 0, len(d.enabled))
	for e := range d.enabled {
		out = append(out, e)
	}
	slices.Sort(out)
	return out
}

// Ceiling returns the filter's stages without its dynamic or tool-search
// stage: what a dynamic or tool-search session can never go beyond. The
// slice is new.
func (f *Filter) Ceiling() []*Rules {
	return slices.DeleteFunc(slices.Clone(f.stages), func(r *Rules) bool { return r.dynamic != nil || r.search != nil })
}

// CeilingKey returns the key of the filter's stages without its dynamic
// or tool-search stage: Key for a filter without one. A bound session
// compares it with a later request's key, which toolsets it enabled or
// tools it found since do not change.
func (f *Filter) CeilingKey() string {
	if f.dynamic() == nil && f.searching() == nil {
		return f.key
	}
	key, _ := filterKey(f.Ceiling())
	return key
}

// ownTools returns the entries of viewmux's own tools a view through f of
// the snapshot entries lists first, or nil.
//
// A stage that denies one of them by name (a profile's deny or deny_regex,
// X-MCP-Exclude-Tools) hides it: denying only narrows. Positive selectors
// and read_only do not hide them, since they select upstream tools and
// the own tools are read-only, or (viewmux__call_tool) no stronger than
// the tools they reach.
func (f *Filter) ownTools(entries []*Entry) []*Entry {
	var own []*Entry
	if d := f.dynamic(); d != nil {
		own = d.own
	} else if s := f.searching(); s != nil {
		own = f.searchOwn(s, entries)
	} else {
		return nil
	}
	denied := func(e *Entry) bool {
		return slices.ContainsFunc(f.stages, func(r *Rules) bool { return r.denies(e.Tool.Name) })
	}
	if !slices.ContainsFunc(own, denied) {
		return own
	}
	return slices.DeleteFunc(slices.Clone(own), denied)
}

// WithToolsets returns the filter of f's ceiling with a dynamic stage that
// has enabled on, outside and own as DynamicStage takes them: the one
// interned or cached filter of that key (Narrowed), so that sessions with
// the same toolsets on share it.
func (r *Registry) WithToolsets(f *Filter, enabled, outside []string, own []*Entry) *Filter {
	return r.Narrowed(append(f.Ceiling(), DynamicStage(enabled, outside, own))...)
}

// EnableToolsets returns the filter of f's ceiling with f's dynamic stage
// changed to have exactly enabled on (see WithToolsets); f itself when it
// has no dynamic stage.
func (r *Registry) EnableToolsets(f *Filter, enabled []string) *Filter {
	d := f.dynamic()
	if d == nil {
		return f
	}
	outside := make([]string, 0, len(d.outside))
	for o := range d.outside {
		outside = append(outside, o)
	}
	return r.WithToolsets(f, enabled, outside, d.own)
}
