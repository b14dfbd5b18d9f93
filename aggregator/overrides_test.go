package aggregator

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/upstream"
)

// rawCatalog is a catalog of tools as an upstream listed them: the bytes
// kept, the schemas raw (as upstream's decoder keeps them).
func rawCatalog(t *testing.T, raws ...string) *upstream.Catalog {
	t.Helper()
	cat := &upstream.Catalog{}
	for _, r := range raws {
		var tool mcp.Tool
		if err := json.Unmarshal([]byte(r), &tool); err != nil {
			t.Fatalf("tool %s: %v", r, err)
		}
		tool.InputSchema = mcp.ToolInputSchema{}
		tool.RawInputSchema = json.RawMessage(jsonrpc.Lookup([]byte(r), "inputSchema"))
		cat.Tools = append(cat.Tools, tool)
		cat.RawTools = append(cat.RawTools, json.RawMessage(r))
	}
	return cat
}

const createIssue = `{"name":"create_issue","description":"Create an issue","inputSchema":{"type":"object",` +
	`"properties":{"owner":{"type":"string"},"title":{"type":"string","description":"the title"},"repo":{"type":"string"}},` +
	`"required":["owner","title","repo"],"additionalProperties":false},"annotations":{"destructiveHint":false},"x-extra":{"keep":[1,2.50]}}`

func acmeOverride() *configs.Override {
	return &configs.Override{Name: "new_issue", Title: "Open an issue", Description: "Open an issue in acme/web.",
		Args: map[string]json.RawMessage{"owner": json.RawMessage(`"acme"`), "repo": json.RawMessage(`"web"`)}}
}

func overrideSource(t *testing.T, rules configs.RuleSet, readOnly []string, toolsets map[string][]string, overrides map[string]*configs.Override, raws ...string) *source {
	t.Helper()
	src := testSource("github", "gh", rawCatalog(t, raws...), rules, readOnly, toolsets)
	src.cfg.Overrides = overrides
	return src
}

// TestOverrideDefinition checks the exposed bytes of an overridden tool:
// the upstream's, with only the name, title, description, the fixed
// arguments' members of the schema and viewmux's _meta changed, in their
// places; and that the catalog it was built from is left as it was.
func TestOverrideDefinition(t *testing.T) {
	namer := Namer{Separator: "__", MaxLength: 64}
	other := `{"name":"get_issue","inputSchema":{"type":"object"}}`
	src := overrideSource(t, configs.RuleSet{}, nil, nil, map[string]*configs.Override{"create_issue": acmeOverride()}, createIssue, other)
	snap := build(1, namer, []*source{src})

	e := snap.Tool("gh__new_issue")
	if e == nil {
		t.Fatalf("gh__new_issue is not in the snapshot; tools: %v", names(snap))
	}
	if snap.Tool("gh__create_issue") != nil {
		t.Fatal("the tool is also exposed under the upstream's name")
	}
	want := `{"name":"gh__new_issue","description":"Open an issue in acme/web.","inputSchema":{"type":"object",` +
		`"properties":{"title":{"type":"string","description":"the title"}},` +
		`"required":["title"],"additionalProperties":false},"annotations":{"destructiveHint":false},"x-extra":{"keep":[1,2.50]},` +
		`"title":"Open an issue","_meta":{"viewmux/upstream":"github","viewmux/original":"create_issue"}}`
	if string(e.Raw) != want {
		t.Errorf("exposed bytes:\n got %s\nwant %s", e.Raw, want)
	}
	if got, want := string(e.Tool.RawInputSchema), `{"type":"object","properties":{"title":{"type":"string","description":"the title"}},"required":["title"],"additionalProperties":false}`; got != want {
		t.Errorf("decoded schema:\n got %s\nwant %s", got, want)
	}
	if e.Original != "create_issue" || e.Tool.Title != "Open an issue" || e.Tool.Description != "Open an issue in acme/web." {
		t.Errorf("entry: original %q, title %q, description %q", e.Original, e.Tool.Title, e.Tool.Description)
	}
	if m := e.Tool.Meta.AdditionalFields; m[MetaOriginal] != "create_issue" || m[MetaUpstream] != "github" {
		t.Errorf("_meta = %v", m)
	}
	if len(e.Fixed) != 2 || e.Fixed[0].Key != "owner" || string(e.Fixed[0].Value) != `"acme"` || e.Fixed[1].Key != "repo" {
		t.Errorf("Fixed = %v", e.Fixed)
	}
	if g := snap.Tool("gh__get_issue"); g == nil || string(g.Raw) != `{"name":"gh__get_issue","inputSchema":{"type":"object"},"_meta":{"viewmux/upstream":"github","viewmux/original":"get_issue"}}` || g.Fixed != nil {
		t.Errorf("a tool without override: %+v", g)
	}
	if string(src.catalog.RawTools[0]) != createIssue || src.catalog.Tools[0].Name != "create_issue" ||
		!strings.Contains(string(src.catalog.Tools[0].RawInputSchema), `"owner"`) {
		t.Error("building the snapshot changed the upstream's catalog")
	}
}

func names(s *Snapshot) []string {
	var out []string
	for _, e := range s.Tools {
		out = append(out, e.Tool.Name)
	}
	return out
}

// TestOverrideSchemaShapes checks fixed arguments against schemas that
// lack what they remove, and a catalog built by hand (no bytes).
func TestOverrideSchemaShapes(t *testing.T) {
	namer := Namer{Separator: "__", MaxLength: 64}
	fix := map[string]*configs.Override{"t": {Args: map[string]json.RawMessage{"a": json.RawMessage(`1`)}}}
	for _, tc := range []struct{ name, tool, want string }{
		{"no properties", `{"name":"t","inputSchema":{"type":"object"}}`,
			`{"name":"gh__t","inputSchema":{"type":"object"},"_meta":{"viewmux/upstream":"github","viewmux/original":"t"}}`},
		{"only the fixed argument", `{"name":"t","inputSchema":{"type":"object","properties":{"a":{}},"required":["a"]}}`,
			`{"name":"gh__t","inputSchema":{"type":"object","properties":{},"required":[]},"_meta":{"viewmux/upstream":"github","viewmux/original":"t"}}`},
		{"required lists another", `{"name":"t","inputSchema":{"required":["b","a"],"properties":{"b":{},"a":{}}}}`,
			`{"name":"gh__t","inputSchema":{"required":["b"],"properties":{"b":{}}},"_meta":{"viewmux/upstream":"github","viewmux/original":"t"}}`},
		{"no schema", `{"name":"t"}`,
			`{"name":"gh__t","_meta":{"viewmux/upstream":"github","viewmux/original":"t"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := build(1, namer, []*source{overrideSource(t, configs.RuleSet{}, nil, nil, fix, tc.tool)})
			if e := snap.Tool("gh__t"); e == nil || string(e.Raw) != tc.want {
				t.Errorf("got %s\nwant %s", e.Raw, tc.want)
			}
		})
	}
	t.Run("decoded schema only", func(t *testing.T) {
		cat := &upstream.Catalog{Tools: []mcp.Tool{{Name: "t", InputSchema: mcp.ToolInputSchema{Type: "object",
			Properties: map[string]any{"a": map[string]any{}, "b": map[string]any{}}, Required: []string{"a", "b"}}}}}
		src := testSource("github", "gh", cat, configs.RuleSet{}, nil, nil)
		src.cfg.Overrides = fix
		e := build(1, namer, []*source{src}).Tool("gh__t")
		if e == nil || len(e.Tool.InputSchema.Properties) != 1 || e.Tool.InputSchema.Required[0] != "b" || len(e.Tool.InputSchema.Required) != 1 {
			t.Fatalf("entry %+v", e)
		}
		if len(cat.Tools[0].InputSchema.Properties) != 2 || len(cat.Tools[0].InputSchema.Required) != 2 {
			t.Error("the catalog's schema was changed")
		}
	})
}

// TestOverrideSeenByUpstreamRules checks that the upstream's own rules,
// read_only_tools and toolsets see the overridden name, like every later
// stage of the pipeline.
func TestOverrideSeenByUpstreamRules(t *testing.T) {
	namer := Namer{Separator: "__", MaxLength: 64}
	over := map[string]*configs.Override{"create_issue": acmeOverride()}
	snap := build(1, namer, []*source{overrideSource(t, configs.RuleSet{Allow: []string{"new_*"}}, []string{"new_issue"},
		map[string][]string{"issues": {"new_*"}}, over, createIssue, `{"name":"create_pr"}`)})
	e := snap.Tool("gh__new_issue")
	if e == nil {
		t.Fatalf("allow = [\"new_*\"] dropped the renamed tool; tools: %v", names(snap))
	}
	if snap.Tool("gh__create_pr") != nil {
		t.Error("allow = [\"new_*\"] kept create_pr")
	}
	if !e.ReadOnly {
		t.Error("read_only_tools = [\"new_issue\"] did not apply")
	}
	if strings.Join(e.Toolsets, ",") != "gh,gh/issues,github,github/issues" {
		t.Errorf("toolsets = %v", e.Toolsets)
	}
	snap = build(1, namer, []*source{overrideSource(t, configs.RuleSet{Deny: []string{"new_issue"}}, nil, nil, over, createIssue)})
	if len(snap.Tools) != 0 {
		t.Errorf("deny = [\"new_issue\"] kept %v", names(snap))
	}
}

// TestOverrideCollision checks that a rename onto a name the upstream
// gives another tool leaves the renamed tool out, whatever the catalog's
// order, and that the conflict names both sources.
func TestOverrideCollision(t *testing.T) {
	namer := Namer{Separator: "__", MaxLength: 64}
	over := map[string]*configs.Override{"create_issue": {Name: "list_issues"}, "ghost": {Title: "nobody"}}
	list := `{"name":"list_issues","description":"the upstream's own"}`
	for _, order := range [][]string{{createIssue, list}, {list, createIssue}} {
		snap := build(1, namer, []*source{overrideSource(t, configs.RuleSet{}, nil, nil, over, order...)})
		e := snap.Tool("gh__list_issues")
		if e == nil || e.Original != "list_issues" {
			t.Fatalf("gh__list_issues = %+v, want the upstream's own list_issues", e)
		}
		if len(snap.Conflicts) != 1 {
			t.Fatalf("conflicts = %+v", snap.Conflicts)
		}
		msg := snap.Conflicts[0].String()
		for _, want := range []string{`upstream "github" (tool "list_issues")`, `upstream "github" (tool "create_issue", renamed by [upstreams.github.overrides.create_issue])`} {
			if !strings.Contains(msg, want) {
				t.Errorf("conflict %q does not name %s", msg, want)
			}
		}
		if len(snap.Unmatched) != 1 || snap.Unmatched[0] != (Unmatched{Upstream: "github", Tool: "ghost"}) {
			t.Errorf("Unmatched = %v", snap.Unmatched)
		}
	}
}

// TestInjectFixed checks the forwarded params of a call of a tool with
// fixed arguments, and the calls refused for sending one.
func TestInjectFixed(t *testing.T) {
	e := &filter.Entry{Fixed: []jsonrpc.Member{{Key: "owner", Value: json.RawMessage(`"acme"`)}, {Key: "repo", Value: json.RawMessage(`"web"`)}}}
	for _, tc := range []struct {
		name, params, want string
		fixed              bool // refused with ErrFixedArgument
		fails              bool
	}{
		{name: "added after the client's", params: `{"name":"gh__new_issue","arguments":{"title":"x \u00e9"},"_meta":{"progressToken":1}}`,
			want: `{"name":"gh__new_issue","arguments":{"title":"x \u00e9","owner":"acme","repo":"web"},"_meta":{"progressToken":1}}`},
		{name: "no arguments", params: `{"name":"gh__new_issue"}`,
			want: `{"name":"gh__new_issue","arguments":{"owner":"acme","repo":"web"}}`},
		{name: "null arguments", params: `{"name":"gh__new_issue","arguments":null}`,
			want: `{"name":"gh__new_issue","arguments":{"owner":"acme","repo":"web"}}`},
		{name: "the fixed argument", params: `{"name":"gh__new_issue","arguments":{"owner":"evil"}}`, fixed: true},
		{name: "in another case", params: `{"name":"gh__new_issue","arguments":{"Owner":"evil"}}`, fixed: true},
		{name: "all capitals", params: `{"name":"gh__new_issue","arguments":{"title":"x","REPO":"evil"}}`, fixed: true},
		{name: "spelled with an escape", params: `{"name":"gh__new_issue","arguments":{"\u006fwner":"evil"}}`, fixed: true},
		{name: "the same value", params: `{"name":"gh__new_issue","arguments":{"owner":"acme"}}`, fixed: true},
		{name: "arguments not an object", params: `{"name":"gh__new_issue","arguments":["owner"]}`, fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + tc.params + `}`))
			if err != nil {
				t.Fatal(err)
			}
			params, args, err := InjectFixed(e, m.Params, m.Arguments)
			switch {
			case tc.fixed:
				if !errors.Is(err, ErrFixedArgument) {
					t.Errorf("err = %v, want ErrFixedArgument", err)
				}
			case tc.fails:
				if err == nil || errors.Is(err, ErrFixedArgument) {
					t.Errorf("err = %v, want an error of the arguments' shape", err)
				}
			case err != nil:
				t.Errorf("err = %v", err)
			case string(params) != tc.want:
				t.Errorf("params:\n got %s\nwant %s", params, tc.want)
			case string(args) != string(jsonrpc.Lookup(params, "arguments")):
				t.Errorf("arguments %s are not the forwarded params' %s", args, params)
			}
		})
	}
	t.Run("a tool without fixed arguments", func(t *testing.T) {
		p, a := json.RawMessage(`{"name":"x","arguments":{"owner":1}}`), json.RawMessage(`{"owner":1}`)
		params, args, err := InjectFixed(&filter.Entry{}, p, a)
		if err != nil || string(params) != string(p) || string(args) != string(a) {
			t.Errorf("changed: %s %s %v", params, args, err)
		}
	})
}
