package filter

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/internal/glob"
	"github.com/viewmux/viewmux/internal/toolsearch"
)

// This file holds the stage of a tool-search session: the session starts
// with two tools of viewmux's own (search and relay: viewmux__search_tools
// and viewmux__call_tool) and the tools its pinned globs match, and each
// search adds the tools it found. Like the dynamic-toolsets stage it is
// one more Rules after the ceiling, so Allows stays the one decision and
// sessions that found the same tools share one Filter and one View.
//
// The search itself runs over the ceiling's view (View.Search), whose
// index is built once per view: every session whose ceiling has the same
// key shares it, as it shares the view.

// searchStage is the tool-search part of a session's rules.
type searchStage struct {
	pinned      []*glob.Glob
	pinnedSrc   []string
	found       map[string]struct{}
	search      *Entry
	relay       *Entry // its annotations are set per view (weakest)
	foundSorted []string
}

// match reports whether the tool named name passes the stage: found, or
// matched by a pinned glob.
func (d *searchStage) match(name string) bool {
	if _, ok := d.found[name]; ok {
		return true
	}
	for _, g := range d.pinned {
		if g.Match(name) {
			return true
		}
	}
	return false
}

// SearchStage returns the stage of a tool-search session: pinned are the
// globs of the tools always listed (validated config: a bad one is an
// error naming it), found the exposed names of the tools searches found
// so far, and search and relay the entries of viewmux's own two tools,
// which every view through a filter with this stage lists first and
// whose Upstream must be empty. relay's annotations are replaced, in each
// view, by the weakest of the ceiling's tools (see View). The slices are
// copied.
func SearchStage(pinned, found []string, search, relay *Entry) (*Rules, error) {
	d := &searchStage{found: make(map[string]struct{}, len(found)), search: search, relay: relay}
	for _, p := range pinned {
		g, err := glob.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("tool_search_pinned: %w", err)
		}
		d.pinned = append(d.pinned, g)
	}
	d.pinnedSrc = slices.Compact(slices.Sorted(slices.Values(pinned)))
	for _, f := range found {
		d.found[f] = struct{}{}
	}
	d.foundSorted = slices.Compact(slices.Sorted(slices.Values(found)))
	var b strings.Builder
	b.WriteString("tool_search")
	for _, l := range [][]string{d.pinnedSrc, d.foundSorted, {search.Tool.Name, relay.Tool.Name}} {
		enc, _ := json.Marshal(l) // []string cannot fail to marshal
		b.Write(enc)
	}
	b.WriteByte(';')
	return &Rules{key: b.String(), search: d}, nil
}

// searching returns the filter's tool-search stage, or nil.
func (f *Filter) searching() *searchStage {
	for _, s := range f.stages {
		if s.search != nil {
			return s.search
		}
	}
	return nil
}

// Searching reports whether the filter has a tool-search stage.
func (f *Filter) Searching() bool { return f.searching() != nil }

// Found returns the names the filter's tool-search stage lists because a
// search found them, sorted, in a new slice; nil without such a stage.
func (f *Filter) Found() []string {
	d := f.searching()
	if d == nil {
		return nil
	}
	return slices.Clone(d.foundSorted)
}

// WithFound returns the filter of f's ceiling with f's tool-search stage
// changed to list found as well (the names it had, and these): the one
// interned or cached filter of that key (Narrowed), so that sessions that
// found the same tools share it. It returns f itself when f has no
// tool-search stage or already lists every name of found.
func (r *Registry) WithFound(f *Filter, found []string) *Filter {
	d := f.searching()
	if d == nil {
		return f
	}
	all := slices.Clone(d.foundSorted)
	for _, n := range found {
		if _, ok := d.found[n]; !ok {
			all = append(all, n)
		}
	}
	if len(all) == len(d.foundSorted) {
		return f
	}
	stage, err := SearchStage(d.pinnedSrc, all, d.search, d.relay)
	if err != nil {
		return f // d's globs compiled once already; they cannot fail now
	}
	return r.Narrowed(append(f.Ceiling(), stage)...)
}

// weakest returns the annotations of a tool that may do anything the
// entries do: read-only only if every one is; when not, destructive if any
// one may be (a missing destructiveHint means it may) and idempotent only
// if every one that is not read-only is; open-world if any one may be
// (a missing openWorldHint means it may). For no entries, read-only and
// closed-world.
func weakest(entries []*Entry) (mcp.ToolAnnotation, bool) {
	readOnly, destructive, idempotent, open := true, false, true, false
	for _, e := range entries {
		a := e.Tool.Annotations
		open = open || a.OpenWorldHint == nil || *a.OpenWorldHint
		if e.ReadOnly {
			continue
		}
		readOnly = false
		destructive = destructive || a.DestructiveHint == nil || *a.DestructiveHint
		idempotent = idempotent && a.IdempotentHint != nil && *a.IdempotentHint
	}
	out := mcp.ToolAnnotation{ReadOnlyHint: &readOnly, OpenWorldHint: &open}
	if !readOnly {
		out.DestructiveHint, out.IdempotentHint = &destructive, &idempotent
	}
	return out, readOnly
}

// searchOwn returns the own tools of a view through f, whose tool-search
// stage is d, of the snapshot entries: the search tool, and the relay
// with the annotations of the weakest tool f's ceiling shows.
func (f *Filter) searchOwn(d *searchStage, entries []*Entry) []*Entry {
	ceiling := &Filter{stages: f.Ceiling()}
	var inView []*Entry
	for _, e := range entries {
		if e.Upstream != "" && ceiling.Allows(e) {
			inView = append(inView, e)
		}
	}
	relay := *d.relay
	relay.Tool.Annotations, relay.ReadOnly = weakest(inView)
	relay.Tool.Annotations.Title = d.relay.Tool.Annotations.Title
	return []*Entry{d.search, &relay}
}

// searchIndex is the tool-search index of one view: its tools' Docs in
// the order of entries.
type searchIndex struct {
	ix      *toolsearch.Index
	entries []*Entry
}

// viewIndex holds a view's index, built on its first search.
type viewIndex struct {
	once sync.Once
	idx  *searchIndex
}

// Search returns at most limit tools of the view that match query, best
// first, ranked by BM25 (internal/toolsearch) over their names, titles,
// descriptions, argument names and descriptions and upstreams. viewmux's
// own tools are never found. The index is built on the first search of
// the view and shared by every later one, whoever asks. The returned slice
// is new; its entries are the view's.
func (v *View) Search(query string, limit int) []*Entry {
	v.index.once.Do(func() {
		idx := &searchIndex{}
		docs := make([]toolsearch.Doc, 0, len(v.Tools))
		for _, t := range v.Tools {
			e := v.byName[t.Name]
			if e == nil || e.Upstream == "" {
				continue
			}
			idx.entries = append(idx.entries, e)
			docs = append(docs, toolsearch.FromDefinition(e.Definition(), e.Upstream))
		}
		idx.ix = toolsearch.New(docs)
		v.index.idx = idx
	})
	hits := v.index.idx.ix.Search(query, limit)
	out := make([]*Entry, len(hits))
	for i, h := range hits {
		out[i] = v.index.idx.entries[h.Doc]
	}
	return out
}
