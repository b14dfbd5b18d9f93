package filter

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
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
// callable through, this filter.
func (f *Filter) Allows(e *Entry) bool {
	for _, s := range f.stages {
		if !s.Match(e.Tool.Name, e.ReadOnly, e.Toolsets) {
			return false
		}
	}
	return true
}

// CheckCall reports whether a call of the allowed tool e with the raw JSON
// arguments passes every stage's call_rules (SPEC §5): in each stage with a
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

	fpOnce sync.Once
	fp     string

	encOnce sync.Once
	enc     []byte
}

// Lookup returns the entry of a tool the view shows, or nil when the tool is
// unknown or hidden: the two cases are deliberately indistinguishable.
func (v *View) Lookup(name string) *Entry { return v.byName[name] }

// Len returns the number of tools in the view.
func (v *View) Len() int { return len(v.Tools) }

// Registry interns filters by key and caches one view per (snapshot
// version, filter key). It is safe for concurrent use.
type Registry struct {
	mu      sync.Mutex
	filters map[string]*Filter
	version uint64
	views   map[string]*viewSlot
}

type viewSlot struct {
	once sync.Once
	view *View
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{filters: make(map[string]*Filter), views: make(map[string]*viewSlot)}
}

// Filter returns the one Filter for the conjunction of stages. nil and empty
// stages are ignored.
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

// Instances returns how many distinct filters exist.
func (r *Registry) Instances() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.filters)
}

// Forget drops every interned filter and cached view, e.g. after a config
// reload recompiled the rules. Filters and views already handed out stay
// valid.
func (r *Registry) Forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.filters = make(map[string]*Filter)
	r.views = make(map[string]*viewSlot)
}

// View returns the cached view of the snapshot (version, entries) through f,
// computing it once. entries must be sorted by name and must be the same for
// the same version. Views of older versions are dropped when a newer version
// is first asked for; a request for an older version is computed uncached.
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
	slot, ok := r.views[f.key]
	if !ok {
		slot = &viewSlot{}
		r.views[f.key] = slot
	}
	r.mu.Unlock()
	slot.once.Do(func() { slot.view = buildView(version, entries, f) })
	return slot.view
}

func buildView(version uint64, entries []*Entry, f *Filter) *View {
	v := &View{Version: version, Filter: f, Tools: []mcp.Tool{}, byName: make(map[string]*Entry)}
	for _, e := range entries {
		if f.Allows(e) {
			v.Tools = append(v.Tools, e.Tool)
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
		enc := json.NewEncoder(h)
		for _, t := range v.Tools {
			if err := enc.Encode(t); err != nil {
				fmt.Fprintf(h, "unencodable %q: %v\n", t.Name, err)
			}
		}
		v.fp = hex.EncodeToString(h.Sum(nil))
	})
	return v.fp
}

// Encoded returns the view's tools/list result, {"tools":[…]}, encoded once
// and shared. Callers must not modify it.
func (v *View) Encoded() []byte {
	v.encOnce.Do(func() {
		b, err := json.Marshal(mcp.ListToolsResult{Tools: v.Tools})
		if err != nil {
			// A tool that cannot be encoded cannot be listed by mcp-go
			// either; answer an empty, valid listing rather than garbage.
			b = []byte(`{"tools":[]}`)
		}
		v.enc = b
	})
	return v.enc
}
