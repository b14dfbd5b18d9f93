package aggregator

import (
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream"
)

func testSource(name, prefix string, cat *upstream.Catalog, rules configs.RuleSet, readOnly []string, toolsets map[string][]string) *source {
	uc := &configs.Upstream{Name: name, Prefix: prefix, Rules: rules, ReadOnlyTools: readOnly, Toolsets: toolsets}
	src := newSource(uc)
	src.state = upstream.StateUp
	src.catalog = cat
	return src
}

func TestBuildSnapshot(t *testing.T) {
	namer := Namer{Separator: "__", MaxLength: 64}
	ro := true
	catA := &upstream.Catalog{
		Tools: []mcp.Tool{
			{Name: "get_issue", Annotations: mcp.ToolAnnotation{ReadOnlyHint: &ro}},
			{Name: "delete_repo"},
			{Name: "search_code"},
			{Name: "shared"},
		},
		Resources:         []mcp.Resource{{URI: "file:///x", Name: "x"}},
		ResourceTemplates: []mcp.ResourceTemplate{mcp.NewResourceTemplate("doc://{id}", "doc")},
		Prompts:           []mcp.Prompt{{Name: "summarize"}},
		Capabilities: mcp.ServerCapabilities{Resources: &struct {
			Subscribe   bool `json:"subscribe,omitempty"`
			ListChanged bool `json:"listChanged,omitempty"`
		}{}},
	}
	catB := &upstream.Catalog{
		Tools:     []mcp.Tool{{Name: "shared"}, {Name: "other"}},
		Resources: []mcp.Resource{{URI: "file:///x", Name: "x-too"}},
	}
	snap := build(7, namer, []*source{
		testSource("a", "", catA, configs.RuleSet{Deny: []string{"delete_*"}}, []string{"search_*"}, map[string][]string{"issues": {"*issue*"}}),
		testSource("b", "", catB, configs.RuleSet{}, nil, nil),
	})

	t.Run("per-upstream rules drop tools on original names", func(t *testing.T) {
		if snap.Tool("delete_repo") != nil {
			t.Fatal("denied tool in the snapshot")
		}
		if snap.Upstreams[0].Dropped != 1 {
			t.Fatalf("Dropped = %d, want 1", snap.Upstreams[0].Dropped)
		}
	})
	t.Run("collision keeps the earlier upstream and is reported", func(t *testing.T) {
		e := snap.Tool("shared")
		if e == nil || e.Upstream != "a" {
			t.Fatalf("shared = %+v, want upstream a", e)
		}
		if len(snap.Conflicts) != 1 || snap.Conflicts[0].Kept != "a" || snap.Conflicts[0].Dropped != "b" {
			t.Fatalf("Conflicts = %+v", snap.Conflicts)
		}
		if snap.Tool("other") == nil {
			t.Fatal("b's other tools must stay")
		}
	})
	t.Run("read-only from hint or override, toolsets", func(t *testing.T) {
		if !snap.Tool("get_issue").ReadOnly || !snap.Tool("search_code").ReadOnly || snap.Tool("shared").ReadOnly {
			t.Fatal("read-only flags wrong")
		}
		if got := snap.Tool("get_issue").Toolsets; len(got) != 2 || got[0] != "a" || got[1] != "a/issues" {
			t.Fatalf("toolsets = %v", got)
		}
		if m := snap.Tool("get_issue").Tool.Meta.AdditionalFields; m[MetaOriginal] != "get_issue" || m[MetaUpstream] != "a" {
			t.Fatalf("_meta = %v", m)
		}
	})
	t.Run("contested URI rewritten reversibly", func(t *testing.T) {
		if len(snap.Rewrites) != 1 || snap.Rewrites[0].Exposed != "viewmux-b+file:///x" {
			t.Fatalf("Rewrites = %+v", snap.Rewrites)
		}
		up, orig, ok := snap.RouteURI("viewmux-b+file:///x", nil)
		if !ok || up != "b" || orig != "file:///x" {
			t.Fatalf("RouteURI(rewritten) = %q %q %v", up, orig, ok)
		}
		up, orig, ok = snap.RouteURI("file:///x", nil)
		if !ok || up != "a" || orig != "file:///x" {
			t.Fatalf("RouteURI(original) = %q %q %v", up, orig, ok)
		}
	})
	t.Run("templates, links and the sole resource upstream", func(t *testing.T) {
		if up, _, ok := snap.RouteURI("doc://42", nil); !ok || up != "a" {
			t.Fatalf("template route = %q %v", up, ok)
		}
		if up, _, ok := snap.RouteURI("link://z", map[string]string{"link://z": "b"}); !ok || up != "b" {
			t.Fatalf("link route = %q %v", up, ok)
		}
		// Only a declares the resources capability: unknown URIs go there.
		if up, _, ok := snap.RouteURI("unlisted://q", nil); !ok || up != "a" {
			t.Fatalf("sole-upstream route = %q %v", up, ok)
		}
	})
	t.Run("prompts namespaced", func(t *testing.T) {
		if p := snap.Prompt("summarize"); p == nil || p.Original != "summarize" {
			t.Fatalf("prompt = %+v", p)
		}
	})
}
