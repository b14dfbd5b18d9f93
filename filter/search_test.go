package filter

import (
	"slices"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
)

func searchOwnEntries() (search, relay *Entry) {
	return &Entry{Tool: mcp.Tool{Name: "viewmux__search_tools"}, ReadOnly: true},
		&Entry{Tool: mcp.Tool{Name: "viewmux__call_tool"}}
}

func searchFilter(t *testing.T, reg *Registry, ceiling configs.RuleSet, pinned, found []string) *Filter {
	t.Helper()
	search, relay := searchOwnEntries()
	stage, err := SearchStage(pinned, found, search, relay)
	if err != nil {
		t.Fatal(err)
	}
	return reg.Narrowed(MustCompile(ceiling), stage)
}

func TestSearchStage(t *testing.T) {
	tests := []struct {
		name    string
		ceiling configs.RuleSet
		pinned  []string
		found   []string
		want    []string
	}{
		{"nothing found, nothing pinned: the two own tools", configs.RuleSet{}, nil, nil,
			[]string{"viewmux__search_tools", "viewmux__call_tool"}},
		{"pinned globs", configs.RuleSet{}, []string{"gh__get_*"}, nil,
			[]string{"viewmux__search_tools", "viewmux__call_tool", "gh__get_me", "gh__get_repo"}},
		{"found names", configs.RuleSet{}, nil, []string{"memory__write", "gh__list_issues"},
			[]string{"viewmux__search_tools", "viewmux__call_tool", "gh__list_issues", "memory__write"}},
		{"never beyond the ceiling", configs.RuleSet{ReadOnly: true}, []string{"gh__*"}, []string{"memory__write", "memory__read_graph"},
			[]string{"viewmux__search_tools", "viewmux__call_tool", "gh__get_me", "gh__get_repo", "gh__list_issues", "memory__read_graph"}},
		{"a deny hides an own tool", configs.RuleSet{Deny: []string{"viewmux__call_tool"}}, nil, nil,
			[]string{"viewmux__search_tools"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := NewRegistry()
			v := reg.View(1, dynamicCatalog(), searchFilter(t, reg, tt.ceiling, tt.pinned, tt.found))
			if got := toolNames(v); !slices.Equal(got, tt.want) {
				t.Fatalf("view lists %q, want %q", got, tt.want)
			}
			for _, e := range dynamicCatalog() {
				if listed := slices.Contains(tt.want, e.Tool.Name); (v.Lookup(e.Tool.Name) != nil) != listed {
					t.Errorf("Lookup(%s) disagrees with the listing (listed %v)", e.Tool.Name, listed)
				}
			}
		})
	}
	if _, err := SearchStage([]string{"gh__["}, nil, &Entry{}, &Entry{}); err == nil {
		t.Error("a bad pinned glob compiled")
	}
}

func TestWithFoundShares(t *testing.T) {
	reg := NewRegistry()
	start := searchFilter(t, reg, configs.RuleSet{}, []string{"gh__get_me"}, nil)
	a := reg.WithFound(start, []string{"memory__write"})
	b := reg.WithFound(start, []string{"memory__write", "memory__write"})
	if a != b {
		t.Error("two sessions that found the same tool got different filters")
	}
	if again := reg.WithFound(a, []string{"memory__write"}); again != a {
		t.Error("finding a tool already found changed the filter")
	}
	both := reg.WithFound(a, []string{"gh__list_issues"})
	if got := both.Found(); !slices.Equal(got, []string{"gh__list_issues", "memory__write"}) {
		t.Errorf("Found = %q", got)
	}
	if both.CeilingKey() != start.CeilingKey() || start.CeilingKey() != reg.Key(MustCompile(configs.RuleSet{})) {
		t.Error("finding tools changed the ceiling key")
	}
	if notSearch := reg.Filter(); reg.WithFound(notSearch, []string{"x"}) != notSearch || notSearch.Searching() || !start.Searching() {
		t.Error("Searching/WithFound on a filter without a search stage")
	}
}

func TestRelayAnnotationsAreTheWeakest(t *testing.T) {
	yes, no := true, false
	ro := func(name string) *Entry {
		e := entry(name, true)
		e.Upstream = "u"
		e.Tool.Annotations = mcp.ToolAnnotation{ReadOnlyHint: &yes, OpenWorldHint: &no}
		return e
	}
	idem := func(name string, destructive bool) *Entry {
		e := entry(name, false)
		e.Upstream = "u"
		e.Tool.Annotations = mcp.ToolAnnotation{DestructiveHint: &destructive, IdempotentHint: &yes, OpenWorldHint: &no}
		return e
	}
	bare := entry("u__bare", false) // no hints: may destroy, may reach the world
	bare.Upstream = "u"
	tests := []struct {
		name                           string
		ceiling                        configs.RuleSet
		entries                        []*Entry
		readOnly, destructive, idempot *bool
		open                           bool
	}{
		{"all read-only", configs.RuleSet{}, []*Entry{ro("u__a"), ro("u__b")}, &yes, nil, nil, false},
		{"one writes", configs.RuleSet{}, []*Entry{ro("u__a"), idem("u__w", false)}, &no, &no, &yes, false},
		{"one destroys", configs.RuleSet{}, []*Entry{idem("u__d", true), idem("u__w", false)}, &no, &yes, &yes, false},
		{"no hints at all", configs.RuleSet{}, []*Entry{bare, ro("u__a")}, &no, &yes, &no, true},
		{"the ceiling hides the weak one", configs.RuleSet{ReadOnly: true}, []*Entry{bare, ro("u__a")}, &yes, nil, nil, false},
		{"an empty view", configs.RuleSet{Tools: []string{"u__none"}}, []*Entry{bare}, &yes, nil, nil, false},
	}
	eq := func(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := NewRegistry()
			entries := slices.SortedFunc(slices.Values(tt.entries), func(a, b *Entry) int {
				return map[bool]int{true: -1, false: 1}[a.Tool.Name < b.Tool.Name]
			})
			v := reg.View(1, entries, searchFilter(t, reg, tt.ceiling, nil, nil))
			relay := v.Lookup("viewmux__call_tool")
			if relay == nil {
				t.Fatal("no relay in the view")
			}
			a := relay.Tool.Annotations
			if !eq(a.ReadOnlyHint, tt.readOnly) || !eq(a.DestructiveHint, tt.destructive) || !eq(a.IdempotentHint, tt.idempot) || a.OpenWorldHint == nil || *a.OpenWorldHint != tt.open || relay.ReadOnly != *tt.readOnly {
				t.Errorf("annotations %+v (ReadOnly %v)", a, relay.ReadOnly)
			}
		})
	}
}

func TestViewSearch(t *testing.T) {
	reg := NewRegistry()
	ceiling := reg.Filter(MustCompile(configs.RuleSet{ReadOnly: true}))
	v := reg.View(1, dynamicCatalog(), ceiling)
	var got []string
	for _, e := range v.Search("issue", 20) {
		got = append(got, e.Tool.Name)
	}
	// gh__create_issue is not read-only: outside the view, never found.
	if !slices.Equal(got, []string{"gh__list_issues"}) {
		t.Errorf("Search(issue) = %q", got)
	}
	if hits := v.Search("write", 5); len(hits) != 0 {
		t.Errorf("a hidden tool was found: %v", hits[0].Tool.Name)
	}
	// The own tools of a search view are never found.
	sv := reg.View(1, dynamicCatalog(), searchFilter(t, reg, configs.RuleSet{}, nil, nil))
	for _, e := range sv.Search("viewmux search tools call tool", 20) {
		if e.Upstream == "" {
			t.Errorf("found own tool %s", e.Tool.Name)
		}
	}
}
