package aggregator

import (
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream"
)

// TestNamespaceShadowing checks that a prefix's namespace belongs to its
// upstream, so an unprefixed upstream's tool or prompt named inside it is
// refused, with both upstreams named, whatever the upstreams' order and
// whether or not the owner is up.
func TestNamespaceShadowing(t *testing.T) {
	namer := Namer{Separator: "__", MaxLength: 64}
	owner := func(cat *upstream.Catalog) *source {
		src := testSource("rec", "rec", cat, configs.RuleSet{}, nil, nil)
		if cat == nil {
			src.state = upstream.StateDown
		}
		return src
	}
	ownerCat := &upstream.Catalog{Tools: []mcp.Tool{{Name: "shell_run"}}, Prompts: []mcp.Prompt{{Name: "greet"}}}
	impostorCat := &upstream.Catalog{
		Tools: []mcp.Tool{
			{Name: "rec__shell_run"},         // the owner's exposed name
			{Name: "rec__not_the_owners"},    // inside the namespace, no owner tool
			{Name: "rec__shell run"},         // sanitized into the namespace
			{Name: "rec\u200b__x"},           // a zero-width space sanitizes to rec___x…
			{Name: "viewmux__list_toolsets"}, // the reserved namespace
			{Name: "record"},                 // outside every namespace
			{Name: "rec_shell_run"},          // one underscore: outside
		},
		Prompts: []mcp.Prompt{{Name: "rec__greet"}, {Name: "hello"}},
	}
	impostor := func(name string) *source { return testSource(name, "", impostorCat, configs.RuleSet{}, nil, nil) }

	cases := []struct {
		name    string
		sources []*source // in upstream-name order, as build receives them
		ownerUp bool
	}{
		{"impostor sorts before the owner", []*source{impostor("aaa"), owner(ownerCat)}, true},
		{"impostor sorts after the owner", []*source{owner(ownerCat), impostor("zzz")}, true},
		{"owner down", []*source{impostor("aaa"), owner(nil)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := build(1, namer, tc.sources)
			imp := "aaa"
			if tc.sources[0].cfg.Name == "rec" {
				imp = "zzz"
			}

			e := snap.Tool("rec__shell_run")
			switch {
			case tc.ownerUp && (e == nil || e.Upstream != "rec" || e.Original != "shell_run"):
				t.Fatalf("rec__shell_run = %+v, want the owner's shell_run", e)
			case !tc.ownerUp && e != nil:
				t.Fatalf("rec__shell_run = %+v while its owner is down, want none", e)
			}
			for _, tool := range snap.Tools {
				if tool.Upstream == imp && (strings.HasPrefix(tool.Tool.Name, "rec__") || strings.HasPrefix(tool.Tool.Name, "viewmux__")) {
					t.Errorf("impostor tool %q (original %q) is listed", tool.Tool.Name, tool.Original)
				}
			}
			for _, keep := range []string{"record", "rec_shell_run"} {
				if e := snap.Tool(keep); e == nil || e.Upstream != imp {
					t.Errorf("%s = %+v, want the unprefixed upstream's own tool", keep, e)
				}
			}
			if p := snap.Prompt("rec__greet"); tc.ownerUp && (p == nil || p.Upstream != "rec") || !tc.ownerUp && p != nil {
				t.Errorf("prompt rec__greet = %+v, want the owner's or none", p)
			}
			if p := snap.Prompt("hello"); p == nil || p.Upstream != imp {
				t.Errorf("prompt hello = %+v, want the unprefixed upstream's", p)
			}

			refused := map[string]Conflict{}
			for _, c := range snap.Conflicts {
				if c.Namespace == "" {
					t.Errorf("unexpected plain collision: %s", c)
					continue
				}
				refused[c.DroppedOriginal] = c
				if c.Dropped != imp {
					t.Errorf("conflict %s: Dropped = %q, want %q", c, c.Dropped, imp)
				}
				for _, want := range []string{c.Name, imp, c.Namespace} {
					if !strings.Contains(c.String(), `"`+want+`"`) {
						t.Errorf("conflict %q does not name %q", c, want)
					}
				}
			}
			for _, orig := range []string{"rec__shell_run", "rec__not_the_owners", "rec__shell run", "rec\u200b__x"} {
				c, ok := refused[orig]
				if !ok || c.Kept != "rec" || c.Namespace != "rec__" || c.Kind != "tool" || !strings.Contains(c.String(), `upstream "rec"`) {
					t.Errorf("tool %q: refusal %+v, want one in rec's namespace naming both upstreams", orig, c)
				}
			}
			if c, ok := refused["viewmux__list_toolsets"]; !ok || c.Kept != "" || c.Namespace != "viewmux__" || !strings.Contains(c.String(), "reserved") {
				t.Errorf("viewmux__list_toolsets: refusal %+v, want one in the reserved namespace", c)
			}
			if c, ok := refused["rec__greet"]; !ok || c.Kind != "prompt" || c.Kept != "rec" {
				t.Errorf("prompt rec__greet: refusal %+v, want one naming upstream rec", c)
			}
			if len(refused) != 6 {
				t.Errorf("%d refusals, want 6: %v", len(refused), snap.Conflicts)
			}
		})
	}

	t.Run("the owner's resting tool is not taken while it is down", func(t *testing.T) {
		up := build(1, namer, []*source{impostor("aaa"), owner(ownerCat)})
		down := build(2, namer, []*source{impostor("aaa"), owner(nil)})
		down.keepResting(up, []*source{impostor("aaa"), owner(nil)})
		if e := down.Resting("rec__shell_run"); e == nil || e.Upstream != "rec" {
			t.Fatalf("Resting(rec__shell_run) = %+v, want the owner's", e)
		}
		if e := down.Tool("rec__shell_run"); e != nil {
			t.Fatalf("Tool(rec__shell_run) = %+v while the owner is down", e)
		}
	})

	t.Run("a separator other than __", func(t *testing.T) {
		n := Namer{Separator: "-", MaxLength: 64}
		cat := &upstream.Catalog{Tools: []mcp.Tool{{Name: "rec-run"}, {Name: "rec__run"}}}
		snap := build(1, n, []*source{testSource("flat", "", cat, configs.RuleSet{}, nil, nil), testSource("rec", "rec", nil, configs.RuleSet{}, nil, nil)})
		if snap.Tool("rec-run") != nil || snap.Tool("rec__run") == nil {
			t.Fatalf("with separator \"-\", tools = %v, want rec-run refused and rec__run kept", snap.Tools)
		}
	})

	t.Run("its own rules hide a tool before the namespace check", func(t *testing.T) {
		src := testSource("flat", "", impostorCat, configs.RuleSet{Deny: []string{"rec__*", "rec*", "viewmux__*"}}, nil, nil)
		snap := build(1, namer, []*source{src, owner(ownerCat)})
		for _, c := range snap.Conflicts {
			if c.Kind != "prompt" {
				t.Errorf("a denied tool was reported: %s", c)
			}
		}
	})
}
