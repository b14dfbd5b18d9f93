package filter

import (
	"slices"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
)

// dynamicCatalog is a catalog of two upstreams: github (prefix gh) with
// toolsets issues and repos and one tool in neither, and memory, which
// declares no toolsets. Sorted by name.
func dynamicCatalog() []*Entry {
	es := []*Entry{
		entry("gh__create_issue", false, "gh", "gh/issues", "github", "github/issues"),
		entry("gh__get_me", true, "gh", "github"),
		entry("gh__get_repo", true, "gh", "gh/repos", "github", "github/repos"),
		entry("gh__list_issues", true, "gh", "gh/issues", "github", "github/issues"),
		entry("memory__read_graph", true, "memory"),
		entry("memory__write", false, "memory"),
	}
	for _, e := range es {
		if e.Toolsets[0] == "memory" {
			e.Upstream = "memory"
		} else {
			e.Upstream = "github"
		}
	}
	return es
}

func ownEntries() []*Entry {
	return []*Entry{
		{Tool: mcp.Tool{Name: "viewmux__list_toolsets"}, ReadOnly: true},
		{Tool: mcp.Tool{Name: "viewmux__enable_toolset"}, ReadOnly: true},
	}
}

func toolNames(v *View) []string {
	var out []string
	for _, t := range v.Tools {
		out = append(out, t.Name)
	}
	return out
}

func TestDynamicStage(t *testing.T) {
	outside := []string{"github"}
	tests := []struct {
		name    string
		ceiling configs.RuleSet
		enabled []string
		want    []string
	}{
		{"nothing enabled: own tools and tools outside every toolset", configs.RuleSet{}, nil,
			[]string{"viewmux__list_toolsets", "viewmux__enable_toolset", "gh__get_me"}},
		{"a declared set", configs.RuleSet{}, []string{"github/issues"},
			[]string{"viewmux__list_toolsets", "viewmux__enable_toolset", "gh__create_issue", "gh__get_me", "gh__list_issues"}},
		{"an upstream without toolsets is one toolset", configs.RuleSet{}, []string{"memory"},
			[]string{"viewmux__list_toolsets", "viewmux__enable_toolset", "gh__get_me", "memory__read_graph", "memory__write"}},
		{"enabling never goes beyond the ceiling", configs.RuleSet{ReadOnly: true}, []string{"github/issues", "memory"},
			[]string{"viewmux__list_toolsets", "viewmux__enable_toolset", "gh__get_me", "gh__list_issues", "memory__read_graph"}},
		{"the ceiling hides an outside tool too; own tools stay", configs.RuleSet{Deny: []string{"gh__get_me"}, Tools: []string{"gh__get_repo"}}, []string{"github/repos"},
			[]string{"viewmux__list_toolsets", "viewmux__enable_toolset", "gh__get_repo"}},
		{"a selector by prefix selects the same set", configs.RuleSet{}, []string{"gh/issues"},
			[]string{"viewmux__list_toolsets", "viewmux__enable_toolset", "gh__create_issue", "gh__get_me", "gh__list_issues"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := NewRegistry()
			ceiling := reg.Filter(MustCompile(tt.ceiling))
			f := reg.WithToolsets(ceiling, tt.enabled, outside, ownEntries())
			v := reg.View(1, dynamicCatalog(), f)
			if got := toolNames(v); !slices.Equal(got, tt.want) {
				t.Fatalf("view lists %q, want %q", got, tt.want)
			}
			// Listed and callable are one decision: every hidden tool
			// is unknown to Lookup.
			for _, e := range dynamicCatalog() {
				if (v.Lookup(e.Tool.Name) != nil) != slices.Contains(tt.want, e.Tool.Name) {
					t.Errorf("Lookup(%q) disagrees with the listing", e.Tool.Name)
				}
			}
			if f.CeilingKey() != ceiling.Key() {
				t.Errorf("CeilingKey() = %q, want the ceiling's key %q", f.CeilingKey(), ceiling.Key())
			}
			if !f.Dynamic() || ceiling.Dynamic() {
				t.Error("Dynamic() is wrong")
			}
		})
	}
}

// TestDynamicFiltersAreShared checks that two sessions with the same
// toolsets on, enabled in any order, hold one Filter and one View, and that
// enabling keeps the ceiling and the stage's other parts.
func TestDynamicFiltersAreShared(t *testing.T) {
	reg := NewRegistry()
	ceiling := reg.Filter(MustCompile(configs.RuleSet{ReadOnly: true}))
	initial := reg.WithToolsets(ceiling, nil, []string{"github"}, ownEntries())
	if again := reg.WithToolsets(ceiling, nil, []string{"github"}, ownEntries()); again != initial {
		t.Fatal("two initial dynamic filters of one ceiling are distinct instances")
	}
	if initial.Key() == ceiling.Key() || initial.Key() == "" {
		t.Fatalf("the dynamic stage left the key unchanged: %q", initial.Key())
	}
	a := reg.EnableToolsets(reg.EnableToolsets(initial, []string{"memory"}), []string{"memory", "github/issues"})
	b := reg.EnableToolsets(reg.EnableToolsets(initial, []string{"github/issues"}), []string{"github/issues", "memory"})
	if a != b {
		t.Fatal("sessions with the same toolsets enabled in another order hold distinct filters")
	}
	if reg.View(1, dynamicCatalog(), a) != reg.View(1, dynamicCatalog(), b) {
		t.Fatal("sessions with the same toolsets enabled have distinct views")
	}
	if got := a.Enabled(); !slices.Equal(got, []string{"github/issues", "memory"}) {
		t.Fatalf("Enabled() = %q", got)
	}
	if a.CeilingKey() != ceiling.Key() {
		t.Fatal("enabling changed the ceiling")
	}
	v := reg.View(1, dynamicCatalog(), a)
	if v.Lookup("memory__write") != nil || v.Lookup("gh__create_issue") != nil {
		t.Fatal("a read-only ceiling let an enabled toolset's write tool through")
	}
	if v.Lookup("viewmux__enable_toolset") == nil {
		t.Fatal("a read-only ceiling hid viewmux's own tools")
	}
	if reg.EnableToolsets(ceiling, []string{"memory"}) != ceiling {
		t.Fatal("EnableToolsets changed a filter without a dynamic stage")
	}
}

// TestDynamicOwnToolShadowsUpstreamTool checks that an unprefixed
// upstream's tool named like one of viewmux's own is neither listed nor
// reachable in a dynamic view.
func TestDynamicOwnToolShadowsUpstreamTool(t *testing.T) {
	reg := NewRegistry()
	up := entry("viewmux__list_toolsets", true, "flat")
	up.Upstream = "flat"
	f := reg.WithToolsets(reg.Filter(), []string{"flat"}, nil, ownEntries())
	v := reg.View(1, []*Entry{up}, f)
	if v.Len() != 2 {
		t.Fatalf("view lists %q, want only viewmux's two tools", toolNames(v))
	}
	if e := v.Lookup("viewmux__list_toolsets"); e == nil || e.Upstream != "" {
		t.Fatal("the upstream's tool shadows viewmux's own")
	}
}

// TestDynamicOwnToolsDeniedByName checks that a stage denying one of
// viewmux's own tools by name (a profile's deny, X-MCP-Exclude-Tools) hides
// it from the view and from Lookup, while positive selectors and read_only
// leave the own tools listed.
func TestDynamicOwnToolsDeniedByName(t *testing.T) {
	tests := []struct {
		name  string
		rules configs.RuleSet
		want  []string
	}{
		{"deny by exact name", configs.RuleSet{Deny: []string{"viewmux__enable_toolset"}}, []string{"viewmux__list_toolsets", "gh__get_me"}},
		{"deny_regex", configs.RuleSet{DenyRegex: []string{"^viewmux__"}}, []string{"gh__get_me"}},
		{"tools and read_only do not hide them", configs.RuleSet{Tools: []string{"gh__get_me"}, ReadOnly: true}, []string{"viewmux__list_toolsets", "viewmux__enable_toolset", "gh__get_me"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := NewRegistry()
			f := reg.WithToolsets(reg.Filter(MustCompile(tt.rules)), nil, []string{"github"}, ownEntries())
			v := reg.View(1, dynamicCatalog(), f)
			if got := toolNames(v); !slices.Equal(got, tt.want) {
				t.Fatalf("view = %q, want %q", got, tt.want)
			}
			for _, e := range ownEntries() {
				if listed := slices.Contains(tt.want, e.Tool.Name); (v.Lookup(e.Tool.Name) != nil) != listed {
					t.Errorf("Lookup(%s) disagrees with the listing (listed %v)", e.Tool.Name, listed)
				}
			}
		})
	}
}
