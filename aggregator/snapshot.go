package aggregator

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/glob"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/upstream"
)

// Keys under which an exposed tool's _meta records where it came from.
const (
	MetaUpstream = "viewmux/upstream"
	MetaOriginal = "viewmux/original"
)

// Snapshot is one immutable version of the merged catalog. Every field is
// read-only once the snapshot is published; share it freely.
type Snapshot struct {
	Version uint64
	// Tools is every exposed tool, sorted by exposed name.
	Tools  []*filter.Entry
	byName map[string]*filter.Entry
	// Upstreams is the state of every configured upstream, sorted by name.
	Upstreams []UpstreamStatus
	// Conflicts lists exposed names that two upstreams both produced (the
	// tool of the later upstream, by name, is left out), and tools and
	// prompts of unprefixed upstreams refused because they fall in another
	// upstream's namespace (see Conflict.Namespace).
	Conflicts []Conflict
	// Unmatched lists overrides naming a tool their upstream does not
	// list, by upstream; the override applies once it does.
	Unmatched []Unmatched

	// Prompts, sorted by exposed name; Resources and Templates in upstream
	// order. Rewrites lists resource URIs rewritten because two upstreams
	// claimed them.
	Prompts   []*Prompt
	Resources []*Resource
	Templates []*Template
	Rewrites  []Rewrite

	prompts   map[string]*Prompt
	resources map[string]*Resource
	templates map[string]*Template

	// soleResourceUpstream is the only upstream that offers resources, if
	// exactly one does; unlisted URIs are routed to it.
	soleResourceUpstream string

	// resting holds, by exposed name, the tools of upstreams that are down
	// or reconnecting, as they were when last up: a call of one is
	// answered with a temporary "restarting, retry" error, never "not
	// found".
	resting map[string]*filter.Entry

	// PromptsKey and ResourcesKey change exactly when the listed prompts,
	// or resources and templates, change.
	PromptsKey, ResourcesKey string

	// Catalog is what views filter prompts, resources and templates by
	// (filter.View.Listing); never nil in a built snapshot.
	Catalog *filter.Catalog

	// PinEvents are the changes to pinned definitions this snapshot's
	// build found, each reported once (pins.go).
	PinEvents []pins.Event
}

// UpstreamStatus is an upstream's state when a snapshot was taken.
type UpstreamStatus struct {
	Name     string
	Required bool
	State    upstream.State
	Tools    int // tools it contributed to the snapshot
	Dropped  int // tools removed by its own rules (deny, allow, …)
	// Quarantined counts its tools hidden as changed or new since they
	// were pinned, until approved (server.pin = "quarantine").
	Quarantined int
}

// Conflict is an exposed name claimed by two upstreams, or by an
// unprefixed upstream inside another's namespace.
type Conflict struct {
	Name            string
	Kind            string // "tool" or "prompt"; "" = "tool"
	Kept, Dropped   string // upstream names; Kept is "" for viewmux's reserved namespace
	KeptOriginal    string // "" for a namespace refusal
	DroppedOriginal string
	// KeptRenamed and DroppedRenamed say that the tool has its name from
	// an override ([upstreams.U.overrides.TOOL] name), not its upstream.
	KeptRenamed, DroppedRenamed bool
	// Namespace is set when the unprefixed upstream Dropped was refused
	// a name inside "<prefix><separator>" of upstream Kept (or of viewmux
	// itself), whether or not Kept is up or has such a tool: a prefix's
	// names belong to its upstream, so no other may shadow them.
	Namespace string
}

func (c Conflict) String() string {
	kind := c.Kind
	if kind == "" {
		kind = "tool"
	}
	switch {
	case c.Namespace != "" && c.Kept == "":
		return fmt.Sprintf("%s %q of unprefixed upstream %q is in the namespace %q, which is reserved for viewmux's own tools; it is left out",
			kind, c.Name, c.Dropped, c.Namespace)
	case c.Namespace != "":
		return fmt.Sprintf("%s %q of unprefixed upstream %q is in the namespace %q of upstream %q; it is left out (give upstream %q a prefix, or deny its %s %q)",
			kind, c.Name, c.Dropped, c.Namespace, c.Kept, c.Dropped, kind, c.DroppedOriginal)
	}
	return fmt.Sprintf("%s name %q: %s collides with %s; the latter is left out",
		kind, c.Name, c.source(c.Kept, c.KeptOriginal, c.KeptRenamed), c.source(c.Dropped, c.DroppedOriginal, c.DroppedRenamed))
}

// source names one side of a collision.
func (c Conflict) source(up, original string, renamed bool) string {
	kind := c.Kind
	if kind == "" {
		kind = "tool"
	}
	if renamed {
		return fmt.Sprintf("upstream %q (%s %q, renamed by [upstreams.%s.overrides.%s])", up, kind, original, up, original)
	}
	return fmt.Sprintf("upstream %q (%s %q)", up, kind, original)
}

// shadowing returns the refusal of exposed name of kind from src, or false
// when src has a prefix of its own or the name is outside every namespace.
func (src *source) shadowing(ns namespaces, kind, original, exposed string) (Conflict, bool) {
	if src.cfg.Prefix != "" {
		return Conflict{}, false
	}
	n, in := ns.owner(original, exposed)
	if !in {
		return Conflict{}, false
	}
	return Conflict{Name: exposed, Kind: kind, Kept: n.owner, Dropped: src.cfg.Name, DroppedOriginal: original, Namespace: n.lead}, true
}

// Tool returns the exposed tool named name, or nil.
func (s *Snapshot) Tool(name string) *filter.Entry { return s.byName[name] }

// Resting returns the tool named name of an upstream that is down or
// reconnecting, as it was when that upstream was last up, or nil.
func (s *Snapshot) Resting(name string) *filter.Entry { return s.resting[name] }

// keepResting carries the tools of upstreams that are not up (no catalog
// now) over from prev, where they were listed or resting already. An
// upstream removed from the config leaves nothing behind.
func (s *Snapshot) keepResting(prev *Snapshot, sources []*source) {
	if prev == nil {
		return
	}
	down := make(map[string]bool)
	for _, src := range sources {
		if src.catalog == nil {
			down[src.cfg.Name] = true
		}
	}
	if len(down) == 0 {
		return
	}
	carry := func(e *filter.Entry) {
		if down[e.Upstream] && s.byName[e.Tool.Name] == nil {
			if s.resting == nil {
				s.resting = make(map[string]*filter.Entry)
			}
			s.resting[e.Tool.Name] = e
		}
	}
	for _, e := range prev.Tools {
		carry(e)
	}
	for _, e := range prev.resting {
		carry(e)
	}
}

// source is what a snapshot is built from for one upstream.
type source struct {
	cfg      *configs.Upstream
	state    upstream.State
	catalog  *upstream.Catalog // nil while down
	rules    *filter.Rules     // per-upstream rules on original names
	readOnly []*glob.Glob      // read_only_tools
	toolsets map[string][]*glob.Glob
	pins     *pins.Check // set for each rebuild (pins.go); nil = nothing pinned
	// placeholder is set, with catalog nil, for a per-user upstream that
	// nothing has listed yet: it shows its placeholder (first.go).
	placeholder bool
}

// build merges the catalogs of sources (sorted by upstream name) into a new
// snapshot. A tool of an unprefixed upstream inside another upstream's
// namespace is refused before names are claimed, so the owner keeps the name
// whatever order upstreams connect in, and even while it is down.
func build(version uint64, namer Namer, sources []*source) *Snapshot {
	s := &Snapshot{Version: version, byName: make(map[string]*filter.Entry)}
	ns := namespacesOf(namer, sources)
	type candidate struct {
		e     *filter.Entry
		local string // the name the upstream's rules see: its own, or an override's
		st    *UpstreamStatus
		src   *source
	}
	// A placeholder (first.go) is not one of the upstream's tools: its
	// rules, which select among those, do not see it, nor does it count
	// among its tools, and it claims its name after every tool, renamed
	// or not, giving way to any that has it.
	var placeholders []candidate
	// Tools an override renames claim their names after every tool that
	// has its name from its upstream: a rename never takes a name away.
	var renamed []candidate
	wasRenamed := map[*filter.Entry]bool{}
	claim := func(c candidate) {
		if !c.e.Placeholder && !c.src.rules.Match(c.local, c.e.ReadOnly, nil) {
			c.st.Dropped++
			return
		}
		if cf, refused := c.src.shadowing(ns, "tool", c.local, c.e.Tool.Name); refused {
			s.Conflicts = append(s.Conflicts, cf)
			return
		}
		if prev, dup := s.byName[c.e.Tool.Name]; dup {
			s.Conflicts = append(s.Conflicts, Conflict{
				Name: c.e.Tool.Name, Kept: prev.Upstream, KeptOriginal: prev.Original,
				Dropped: c.e.Upstream, DroppedOriginal: c.e.Original,
				KeptRenamed: wasRenamed[prev], DroppedRenamed: c.local != c.e.Original,
			})
			return
		}
		if c.local != c.e.Original {
			wasRenamed[c.e] = true
		}
		s.byName[c.e.Tool.Name] = c.e
		s.Tools = append(s.Tools, c.e)
		if !c.e.Placeholder {
			c.st.Tools++
		}
	}
	s.Upstreams = make([]UpstreamStatus, len(sources))
	for i, src := range sources {
		st := &s.Upstreams[i]
		*st = UpstreamStatus{Name: src.cfg.Name, Required: src.cfg.Required, State: src.state}
		if src.placeholder {
			placeholders = append(placeholders, candidate{e: src.placeholderEntry(namer), local: placeholderName, st: st, src: src})
		}
		if src.catalog == nil {
			continue
		}
		for j := range src.catalog.Tools {
			e, local := src.entry(namer, &src.catalog.Tools[j], rawAt(src.catalog.RawTools, j))
			if src.quarantined(e) { // as overridden: pins see what clients would
				st.Quarantined++
				continue
			}
			c := candidate{e: e, local: local, st: st, src: src}
			if local != e.Original {
				renamed = append(renamed, c)
				continue
			}
			claim(c)
		}
		s.Unmatched = append(s.Unmatched, src.unmatchedOverrides()...)
	}
	for _, c := range renamed {
		claim(c)
	}
	for _, c := range placeholders {
		if s.byName[c.e.Tool.Name] == nil {
			claim(c)
		}
	}
	slices.SortFunc(s.Tools, func(a, b *filter.Entry) int { return strings.Compare(a.Tool.Name, b.Tool.Name) })
	s.buildResources(namer, ns, sources)
	s.buildCatalog(sources)
	s.PromptsKey, s.ResourcesKey = s.listFingerprint()
	return s
}

// entry builds the exposed form of one upstream tool, with its override
// applied; raw is the upstream's definition (nil when the catalog holds
// none), from which the exposed bytes are spliced (exposedRaw). local is
// the tool's name as the upstream's own rules, toolsets and
// read_only_tools see it: the override's name, or the upstream's.
func (src *source) entry(namer Namer, t *mcp.Tool, raw json.RawMessage) (e *filter.Entry, local string) {
	cfg := src.cfg
	o := cfg.Overrides[t.Name]
	local = o.Exposed(t.Name)
	e = &filter.Entry{Tool: *t, Upstream: cfg.Name, Original: t.Name}
	e.Tool.Name = namer.Expose(cfg.Prefix, local)
	meta := &mcp.Meta{AdditionalFields: map[string]any{MetaUpstream: cfg.Name, MetaOriginal: t.Name}}
	if t.Meta != nil {
		meta.ProgressToken = t.Meta.ProgressToken
		maps.Copy(meta.AdditionalFields, t.Meta.AdditionalFields)
		meta.AdditionalFields[MetaUpstream] = cfg.Name
		meta.AdditionalFields[MetaOriginal] = t.Name
	}
	e.Tool.Meta = meta
	set := []jsonrpc.Member{{Key: "name", Value: jsonString(e.Tool.Name)}}
	if o != nil {
		set = append(set, override(o, e, raw)...)
	}
	e.Raw = splicedRaw(raw, set,
		[]jsonrpc.Member{{Key: MetaUpstream, Value: jsonString(cfg.Name)}, {Key: MetaOriginal, Value: jsonString(t.Name)}})
	e.ReadOnly = t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint
	if !e.ReadOnly {
		e.ReadOnly = slices.ContainsFunc(src.readOnly, func(g *glob.Glob) bool { return g.Match(local) })
	}
	e.Toolsets = append(e.Toolsets, cfg.Name)
	if cfg.Prefix != "" && cfg.Prefix != cfg.Name {
		e.Toolsets = append(e.Toolsets, cfg.Prefix)
	}
	for set, globs := range src.toolsets {
		if slices.ContainsFunc(globs, func(g *glob.Glob) bool { return g.Match(local) }) {
			e.Toolsets = append(e.Toolsets, cfg.Name+"/"+set)
			if cfg.Prefix != "" && cfg.Prefix != cfg.Name {
				e.Toolsets = append(e.Toolsets, cfg.Prefix+"/"+set)
			}
		}
	}
	slices.Sort(e.Toolsets)
	return e, local
}
