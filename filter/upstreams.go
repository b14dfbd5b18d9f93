package filter

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
)

// This file holds upstream-level visibility: prompts, resources
// and resource templates are filtered by the upstream that serves them.
// Filter.ShowsUpstream is the one decision; a View's Listing applies it to
// a snapshot's Catalog once and keeps the result.

// ShowsUpstream is the decision function for upstream visibility: it
// reports whether a session with this filter sees the prompts, resources
// and templates of the named upstream, and may get, read, subscribe to and
// complete against them. The upstream must pass every stage: it is not in
// any stage's deny_upstreams, it is named by every stage that names
// upstreams, and, when no stage names upstreams, hasVisibleTool (one of its
// tools passes Allows) or !servesTools (it serves no tool at all).
func (f *Filter) ShowsUpstream(name string, hasVisibleTool, servesTools bool) bool {
	named := false
	for _, s := range f.stages {
		if !s.AdmitsUpstream(name) {
			return false
		}
		named = named || s.upstreams != nil
	}
	return named || hasVisibleTool || !servesTools
}

// Served is one prompt, resource or resource template of a catalog
// snapshot, with the upstream (by config name) that serves it.
type Served[T any] struct {
	Item T
	// Raw is the item's definition as listed: the upstream's bytes with
	// only what viewmux changes spliced in; nil = encode Item.
	Raw      json.RawMessage
	Upstream string
}

// definition returns the item's bytes as listed.
func (s Served[T]) definition() json.RawMessage {
	if s.Raw != nil {
		return s.Raw
	}
	return encodeItem(s.Item)
}

// Catalog is the part of a catalog snapshot that is filtered by upstream:
// every prompt, resource and template as exposed, and which upstreams serve
// tools. The aggregator builds one per snapshot with NewCatalog; it is
// immutable and safe for concurrent use.
type Catalog struct {
	Version uint64 // the snapshot's version
	// Prompts, Resources and Templates are sorted by name, the order
	// they are listed and paged in. Callers must not modify them.
	Prompts   []Served[mcp.Prompt]
	Resources []Served[mcp.Resource]
	Templates []Served[mcp.ResourceTemplate]

	servesTools map[string]bool
	// every item, for the listings that show them all (and share these).
	allPrompts   []mcp.Prompt
	allResources []mcp.Resource
	allTemplates []mcp.ResourceTemplate
	allRaws      [3][]json.RawMessage // their listed bytes, by listing kind
	// defs holds the listed bytes by the same keys, by listing kind.
	defs [3]map[string]json.RawMessage
}

// NewCatalog builds the Catalog of snapshot version from its exposed
// prompts, resources and templates (each sorted here, stably, by name) and
// the names of the upstreams whose own catalog holds at least one tool,
// before any rule. It takes ownership of the slices.
func NewCatalog(version uint64, prompts []Served[mcp.Prompt], resources []Served[mcp.Resource],
	templates []Served[mcp.ResourceTemplate], toolUpstreams []string) *Catalog {
	c := &Catalog{Version: version, Prompts: prompts, Resources: resources, Templates: templates,
		servesTools: make(map[string]bool, len(toolUpstreams)),
	}
	slices.SortStableFunc(c.Prompts, func(a, b Served[mcp.Prompt]) int { return cmp.Compare(a.Item.Name, b.Item.Name) })
	slices.SortStableFunc(c.Resources, func(a, b Served[mcp.Resource]) int { return cmp.Compare(a.Item.Name, b.Item.Name) })
	slices.SortStableFunc(c.Templates, func(a, b Served[mcp.ResourceTemplate]) int { return cmp.Compare(a.Item.Name, b.Item.Name) })
	for _, u := range toolUpstreams {
		c.servesTools[u] = true
	}
	for i := range c.defs {
		c.defs[i] = make(map[string]json.RawMessage)
	}
	c.allPrompts = make([]mcp.Prompt, len(c.Prompts))
	c.allRaws[encPrompts] = make([]json.RawMessage, len(c.Prompts))
	for i, p := range c.Prompts {
		c.allPrompts[i], c.allRaws[encPrompts][i] = p.Item, p.definition()
		c.defs[encPrompts][p.Item.Name] = c.allRaws[encPrompts][i]
	}
	c.allResources = make([]mcp.Resource, len(c.Resources))
	c.allRaws[encResources] = make([]json.RawMessage, len(c.Resources))
	for i, r := range c.Resources {
		c.allResources[i], c.allRaws[encResources][i] = r.Item, r.definition()
		c.defs[encResources][r.Item.URI] = c.allRaws[encResources][i]
	}
	c.allTemplates = make([]mcp.ResourceTemplate, len(c.Templates))
	c.allRaws[encTemplates] = make([]json.RawMessage, len(c.Templates))
	for i, t := range c.Templates {
		c.allTemplates[i], c.allRaws[encTemplates][i] = t.Item, t.definition()
		c.defs[encTemplates][TemplateString(t.Item)] = c.allRaws[encTemplates][i]
	}
	return c
}

// Definition returns the listed bytes of the item that the listing method
// (prompts/list, resources/list, resources/templates/list) names by key:
// its exposed name, URI or URI template. It returns nil when the catalog
// holds no such item.
func (c *Catalog) Definition(method, key string) json.RawMessage {
	i, ok := listKind(method)
	if !ok || c.defs[i] == nil {
		return nil
	}
	return c.defs[i][key]
}

// listKind returns the listing kind of a listing method.
func listKind(method string) (int, bool) {
	switch mcp.MCPMethod(method) {
	case mcp.MethodPromptsList:
		return encPrompts, true
	case mcp.MethodResourcesList:
		return encResources, true
	case mcp.MethodResourcesTemplatesList:
		return encTemplates, true
	}
	return 0, false
}

// TemplateString returns a template's URI template as written, or "".
func TemplateString(t mcp.ResourceTemplate) string {
	if t.URITemplate == nil || t.URITemplate.Template == nil {
		return ""
	}
	return t.URITemplate.Raw()
}

// Listing is what one View shows of a Catalog: the prompts, resources and
// templates of the upstreams it shows, in the catalog's order, with their
// encoded listings and fingerprints computed once. It is immutable and
// safe for concurrent use.
type Listing struct {
	Version uint64
	// Prompts, Resources and Templates are the listings. Callers must not
	// modify them.
	Prompts   []mcp.Prompt
	Resources []mcp.Resource
	Templates []mcp.ResourceTemplate

	filter   *Filter
	catalog  *Catalog
	hasTools map[string]bool // upstreams with a tool in the view

	// raws are the listed bytes of Prompts, Resources and Templates, by
	// listing kind, index for index.
	raws [3][]json.RawMessage

	encOnce [3]sync.Once
	enc     [3][]byte

	fpOnce                 sync.Once
	fpPrompts, fpResources string
}

// Listing returns what the view shows of c, the catalog of the view's
// snapshot version, computed once per view. A nil c, or one of another
// version, is computed afresh and not kept.
func (v *View) Listing(c *Catalog) *Listing {
	if c == nil {
		return newListing(v, &Catalog{Version: v.Version})
	}
	if c.Version != v.Version {
		return newListing(v, c)
	}
	v.listingOnce.Do(func() { v.listing = newListing(v, c) })
	return v.listing
}

func newListing(v *View, c *Catalog) *Listing {
	l := &Listing{Version: c.Version, filter: v.Filter, catalog: c, hasTools: make(map[string]bool)}
	for _, e := range v.byName {
		l.hasTools[e.Upstream] = true
	}
	l.Prompts, l.raws[encPrompts] = shown(l, c.Prompts, c.allPrompts, c.allRaws[encPrompts])
	l.Resources, l.raws[encResources] = shown(l, c.Resources, c.allResources, c.allRaws[encResources])
	l.Templates, l.raws[encTemplates] = shown(l, c.Templates, c.allTemplates, c.allRaws[encTemplates])
	return l
}

// shown returns the items of served whose upstream l shows, and their
// listed bytes: all and allRaws, the catalog's own slices, when it shows
// every one (views without upstream rules share one copy), else new
// slices, never nil.
func shown[T any](l *Listing, served []Served[T], all []T, allRaws []json.RawMessage) ([]T, []json.RawMessage) {
	if !slices.ContainsFunc(served, func(s Served[T]) bool { return !l.Shows(s.Upstream) }) {
		if all == nil {
			return []T{}, nil
		}
		return all, allRaws
	}
	out := make([]T, 0, len(served))
	raws := make([]json.RawMessage, 0, len(served))
	for i, s := range served {
		if l.Shows(s.Upstream) {
			out = append(out, s.Item)
			raws = append(raws, allRaws[i])
		}
	}
	return out, raws
}

// Shows reports whether the view shows the named upstream's prompts,
// resources and templates (Filter.ShowsUpstream). It answers for any name,
// including upstreams that list nothing.
func (l *Listing) Shows(upstream string) bool {
	return l.filter.ShowsUpstream(upstream, l.hasTools[upstream], l.catalog.servesTools[upstream])
}

// Definition is Catalog.Definition for the listing's catalog. The item need
// not be one the listing shows: callers ask for items they already kept.
func (l *Listing) Definition(method, key string) json.RawMessage {
	return l.catalog.Definition(method, key)
}

// Listing kinds, the index of each pre-encoded result.
const (
	encPrompts = iota
	encResources
	encTemplates
)

// Encoded returns the pre-encoded result of a prompts/list,
// resources/list or resources/templates/list request that names no
// cursor ({"prompts":[…]} and so on): each item's listed bytes, joined
// once and shared; nil for any other method. Callers must not modify it.
func (l *Listing) Encoded(method string) []byte {
	var i int
	var key string
	switch mcp.MCPMethod(method) {
	case mcp.MethodPromptsList:
		i, key = encPrompts, "prompts"
	case mcp.MethodResourcesList:
		i, key = encResources, "resources"
	case mcp.MethodResourcesTemplatesList:
		i, key = encTemplates, "resourceTemplates"
	default:
		return nil
	}
	l.encOnce[i].Do(func() { l.enc[i] = encodeList(key, l.raws[i]) })
	return l.enc[i]
}

// Fingerprints returns digests of what the listing shows: prompts, and
// resources with templates. Equal digests mean equal listings, so a
// session is told list_changed only when its own listing changed.
func (l *Listing) Fingerprints() (prompts, resources string) {
	l.fpOnce.Do(func() {
		h := sha256.Sum256(l.Encoded(string(mcp.MethodPromptsList)))
		l.fpPrompts = hex.EncodeToString(h[:])
		r := sha256.New()
		r.Write(l.Encoded(string(mcp.MethodResourcesList)))
		r.Write([]byte{0})
		r.Write(l.Encoded(string(mcp.MethodResourcesTemplatesList)))
		l.fpResources = hex.EncodeToString(r.Sum(nil))
	})
	return l.fpPrompts, l.fpResources
}
