package filter

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
)

// Filter is an effective rule set: the conjunction of every pipeline stage
// that applies to a session ([filter], the profile and its extends chain,
// request narrowing). Every stage only narrows. A Filter is immutable and safe
// for concurrent use; get one from Registry.Filter so that equal effective
// rules share one instance.
type Filter struct {
	key    string
	stages []*Rules
}

// Key returns the filter's canonical key: the sorted, deduplicated keys of
// its non-empty stages. The filter that passes everything has key "".
func (f *Filter) Key() string { return f.key }

// Allows is the decision function: it reports whether e is listed in, and
// callable through, this filter. A tool passes when every stage matches it
// (Rules.Match) and admits its upstream (upstreams, deny_upstreams).
func (f *Filter) Allows(e *Entry) bool {
	for _, s := range f.stages {
		if !s.Match(e.Tool.Name, e.ReadOnly, e.Toolsets) || !s.AdmitsUpstream(e.Upstream) {
			return false
		}
	}
	return true
}

// CheckCall reports whether a call of the allowed tool e with the raw JSON
// arguments passes every stage's call_rules: in each stage with a
// rule for the tool, every argument the rule names is present and is a
// string matching one of its patterns, and, unless the rule sets other_args,
// no other argument is present. Absent arguments are the empty object. It
// returns nil or an error wrapping ErrArgumentsNotAllowed that names the
// argument at fault, never its value.
func (f *Filter) CheckCall(e *Entry, args json.RawMessage) error {
	var (
		decoded map[string]json.RawMessage
		done    bool // decoded holds the arguments, decoded once for every stage
	)
	for _, s := range f.stages {
		rule := s.ruleFor(e.Tool.Name)
		if rule == nil {
			continue
		}
		if !done {
			var err error
			if decoded, err = decodeArguments(args); err != nil {
				return fmt.Errorf("tool %q: %w: %v", e.Tool.Name, ErrArgumentsNotAllowed, err)
			}
			done = true
		}
		if err := rule.check(decoded); err != nil {
			return fmt.Errorf("tool %q: %w: %v", e.Tool.Name, ErrArgumentsNotAllowed, err)
		}
	}
	return nil
}

// Approval reports whether a call of the allowed tool e needs a person's
// approval first, and how long to wait for it: it does when any stage's
// approve glob matches the tool's exposed name, so a stage can add
// approval and never take it away. The wait is the shortest
// approve_timeout any stage sets (like every rule, a stage can only make
// it stricter), else configs.DefaultApproveTimeout. viewmux's own tools
// (no upstream) never need it: what they reach is decided again for
// itself.
func (f *Filter) Approval(e *Entry) (need bool, timeout time.Duration) {
	if e.Upstream == "" {
		return false, 0
	}
	for _, s := range f.stages {
		for _, g := range s.approve {
			if g.Match(e.Tool.Name) {
				need = true
				break
			}
		}
	}
	if !need {
		return false, 0
	}
	for _, s := range f.stages {
		if t := s.approveTimeout; t > 0 && (timeout == 0 || t < timeout) {
			timeout = t
		}
	}
	if timeout == 0 {
		timeout = configs.DefaultApproveTimeout
	}
	return true, timeout
}

// filterKey builds the canonical key of a conjunction of stages.
func filterKey(stages []*Rules) (string, []*Rules) {
	kept := make([]*Rules, 0, len(stages))
	for _, s := range stages {
		if s != nil && !s.Empty() {
			kept = append(kept, s)
		}
	}
	slices.SortFunc(kept, func(a, b *Rules) int { return strings.Compare(a.key, b.key) })
	kept = slices.CompactFunc(kept, func(a, b *Rules) bool { return a.key == b.key })
	keys := make([]string, len(kept))
	for i, s := range kept {
		keys[i] = s.key
	}
	return strings.Join(keys, "&"), kept
}

// View is what one filter shows of one catalog snapshot. It is immutable and
// shared by every session whose rules have the view's key.
type View struct {
	Version uint64 // the snapshot's version
	Filter  *Filter
	// Tools is the listing, sorted by name. Callers must not modify it.
	Tools  []mcp.Tool
	byName map[string]*Entry
	// raws[i] is the listed bytes of Tools[i] (Entry.Definition).
	raws []json.RawMessage

	fpOnce sync.Once
	fp     string

	encOnce sync.Once
	enc     []byte

	// listing is what the view shows besides tools (upstreams.go),
	// computed once from the snapshot's Catalog.
	listingOnce sync.Once
	listing     *Listing

	// index is the view's tool-search index (search.go), built on its
	// first search.
	index viewIndex
}

// Lookup returns the entry of a tool the view shows, or nil when the tool is
// unknown or hidden: the two cases are deliberately indistinguishable.
func (v *View) Lookup(name string) *Entry { return v.byName[name] }

// Len returns the number of tools in the view.
func (v *View) Len() int { return len(v.Tools) }

// Registry interns filters by key and caches one view per (snapshot
// version, filter key). Profiles' filters (Filter) are interned until
// Forget; request narrowings' filters (Narrowed) are held, with their views,
// in a cache bounded by NarrowedCap entries and NarrowedBudget bytes of keys,
// least recently used dropped first, so no number of distinct narrowings a
// client sends grows the registry past that bound. It is safe for
// concurrent use.
type Registry struct {
	mu      sync.Mutex
	filters map[string]*Filter
	version uint64
	views   map[string]*viewSlot // views of interned filters, for version
	// narrowed is the bounded cache: its elements hold *narrowedEntry,
	// most recently used first; byKey indexes them.
	narrowed list.List
	byKey    map[string]*list.Element
	bytes    int // the sum of the cached entries' key lengths
}

// Bounds of the narrowed-filter cache.
const (
	// NarrowedCap is the most request-narrowing filters a Registry holds.
	NarrowedCap = 256
	// NarrowedBudget bounds the summed length of their keys (a filter's
	// memory grows with its key, which spells out every name it lists).
	NarrowedBudget = 1 << 20
)

type viewSlot struct {
	once sync.Once
	view *View
}

// narrowedEntry is one cached narrowing filter and its view of the
// registry's current snapshot version (slot is nil until asked for).
type narrowedEntry struct {
	f       *Filter
	version uint64
	slot    *viewSlot
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{filters: make(map[string]*Filter), views: make(map[string]*viewSlot), byKey: make(map[string]*list.Element)}
}

// Filter returns the one interned Filter for the conjunction of stages, for
// rules from the config. nil and empty stages are ignored.
func (r *Registry) Filter(stages ...*Rules) *Filter {
	key, kept := filterKey(stages)
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.filters[key]; ok {
		return f
	}
	f := &Filter{key: key, stages: kept}
	r.filters[key] = f
	return f
}

// Narrowed returns a Filter for the conjunction of stages, for rules that
// include a client's request narrowing: the interned filter when one has
// the same key, else the cached one, else a new one, which joins the
// bounded cache and may push the least recently used out of it. A filter
// pushed out stays valid for whoever holds it; equal narrowings asked for
// later get a new instance.
func (r *Registry) Narrowed(stages ...*Rules) *Filter {
	key, kept := filterKey(stages)
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.filters[key]; ok {
		return f
	}
	if el, ok := r.byKey[key]; ok {
		r.narrowed.MoveToFront(el)
		return el.Value.(*narrowedEntry).f
	}
	f := &Filter{key: key, stages: kept}
	r.cache(f)
	return f
}

// Key returns the key of the filter Filter or Narrowed would return for
// stages, without creating or caching anything.
func (r *Registry) Key(stages ...*Rules) string {
	key, _ := filterKey(stages)
	return key
}

// cache adds f to the front of the narrowed cache and trims its back to
// the bounds, keeping at least f. r.mu must be held.
func (r *Registry) cache(f *Filter) *narrowedEntry {
	e := &narrowedEntry{f: f}
	r.byKey[f.key] = r.narrowed.PushFront(e)
	r.bytes += len(f.key)
	for r.narrowed.Len() > 1 && (r.narrowed.Len() > NarrowedCap || r.bytes > NarrowedBudget) {
		old := r.narrowed.Remove(r.narrowed.Back()).(*narrowedEntry)
		delete(r.byKey, old.f.key)
		r.bytes -= len(old.f.key)
	}
	return e
}

// Instances returns how many distinct filters the registry holds: the
// interned ones and the cached narrowings.
func (r *Registry) Instances() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.filters) + r.narrowed.Len()
}

// Forget drops every interned and cached filter and every cached view,
// e.g. after a config reload recompiled the rules. Filters and views
// already handed out stay valid.
func (r *Registry) Forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.filters = make(map[string]*Filter)
	r.views = make(map[string]*viewSlot)
	r.narrowed.Init()
	r.byKey = make(map[string]*list.Element)
	r.bytes = 0
}

// View returns the cached view of the snapshot (version, entries) through f,
// computing it once. entries must be sorted by name and must be the same for
// the same version. Views of older versions are dropped when a newer version
// is first asked for; a request for an older version is computed uncached.
// A filter that is neither interned nor cached (one pushed out of the
// narrowed cache, or kept across Forget) joins the narrowed cache, so its
// view is bounded like every narrowing's.
func (r *Registry) View(version uint64, entries []*Entry, f *Filter) *View {
	r.mu.Lock()
	switch {
	case version > r.version:
		r.version = version
		r.views = make(map[string]*viewSlot)
	case version < r.version:
		r.mu.Unlock()
		return buildView(version, entries, f)
	}
	var slot *viewSlot
	if _, interned := r.filters[f.key]; interned {
		slot = r.views[f.key]
		if slot == nil {
			slot = &viewSlot{}
			r.views[f.key] = slot
		}
	} else {
		var e *narrowedEntry
		if el, ok := r.byKey[f.key]; ok {
			r.narrowed.MoveToFront(el)
			e = el.Value.(*narrowedEntry)
		} else {
			e = r.cache(f)
		}
		if e.slot == nil || e.version != version {
			e.slot, e.version = &viewSlot{}, version
		}
		slot = e.slot
	}
	r.mu.Unlock()
	slot.once.Do(func() { slot.view = buildView(version, entries, f) })
	return slot.view
}

func buildView(version uint64, entries []*Entry, f *Filter) *View {
	v := &View{Version: version, Filter: f, Tools: []mcp.Tool{}, byName: make(map[string]*Entry)}
	own := f.ownTools(entries) // viewmux's own tools come first (dynamic.go, search.go)
	for _, e := range own {
		v.Tools = append(v.Tools, e.Tool)
		v.raws = append(v.raws, e.Definition())
		v.byName[e.Tool.Name] = e
	}
	for _, e := range entries {
		if _, taken := v.byName[e.Tool.Name]; taken && len(own) > 0 {
			continue // an unprefixed upstream's tool of the same name stays hidden
		}
		if f.Allows(e) {
			v.Tools = append(v.Tools, e.Tool)
			v.raws = append(v.raws, e.Definition())
			v.byName[e.Tool.Name] = e
		}
	}
	return v
}

// Fingerprint returns a digest of what the view lists, computed once. Two
// views with equal fingerprints list the same tools with the same
// definitions.
func (v *View) Fingerprint() string {
	v.fpOnce.Do(func() {
		h := sha256.New()
		for _, raw := range v.raws {
			fmt.Fprintf(h, "%d:", len(raw))
			h.Write(raw)
		}
		v.fp = hex.EncodeToString(h.Sum(nil))
	})
	return v.fp
}

// Encoded returns the view's tools/list result, {"tools":[…]}, encoded once
// and shared: each tool's listed bytes (Entry.Definition), so that a
// definition reaches the client as its upstream sent it. Callers must not
// modify it.
func (v *View) Encoded() []byte {
	v.encOnce.Do(func() { v.enc = encodeList("tools", v.raws) })
	return v.enc
}

// Definition returns the tool's definition as listed: Raw, or, for an
// entry without bytes of its own, Tool encoded (an empty object if it
// cannot be, which no client can call).
func (e *Entry) Definition() json.RawMessage {
	if e.Raw != nil {
		return e.Raw
	}
	return encodeItem(e.Tool)
}

// encodeItem encodes a definition viewmux holds only decoded; what cannot
// be encoded cannot be listed by mcp-go either, so it becomes {}.
func encodeItem(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// encodeList returns {"<key>":[items…]}, the items' bytes joined as they
// are.
func encodeList(key string, items []json.RawMessage) []byte {
	n := len(key) + 8
	for _, it := range items {
		n += len(it) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"`...)
	b = append(b, key...)
	b = append(b, `":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, "]}"...)
}
