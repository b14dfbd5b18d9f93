package aggregator

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/upstream"
)

// TestExposedBytes checks that the snapshot's definitions, and the
// listings views encode from them, are the upstream's bytes with only the
// name and viewmux's _meta changed: nothing added, not even a title.
func TestExposedBytes(t *testing.T) {
	rawTools := []string{
		`{"name":"plain","inputSchema":{"type":"object","oneOf":[{"required":["a"]}],"x-vendor":1.50}}`,
		`{"name":"titled","title":"Titled","annotations":{"readOnlyHint":true},"_meta":{"up/k":[1]},"x-extra":{"a":null}}`,
	}
	rawPrompts := []string{`{"name":"p","arguments":[{"name":"a","required":false}],"x-p":true}`}
	rawResources := []string{`{"uri":"file:///x","name":"x","x-r":"<&>"}`}
	rawTemplates := []string{`{"uriTemplate":"doc://{id}","name":"doc","x-t":[]}`}
	cat := &upstream.Catalog{Capabilities: mcp.ServerCapabilities{}}
	for _, r := range rawTools {
		var tool mcp.Tool
		if err := json.Unmarshal([]byte(r), &tool); err != nil {
			t.Fatal(err)
		}
		cat.Tools = append(cat.Tools, tool)
		cat.RawTools = append(cat.RawTools, json.RawMessage(r))
	}
	var p mcp.Prompt
	json.Unmarshal([]byte(rawPrompts[0]), &p)
	cat.Prompts, cat.RawPrompts = []mcp.Prompt{p}, []json.RawMessage{json.RawMessage(rawPrompts[0])}
	var res mcp.Resource
	json.Unmarshal([]byte(rawResources[0]), &res)
	cat.Resources, cat.RawResources = []mcp.Resource{res}, []json.RawMessage{json.RawMessage(rawResources[0])}
	cat.ResourceTemplates = []mcp.ResourceTemplate{mcp.NewResourceTemplate("doc://{id}", "doc")}
	cat.RawTemplates = []json.RawMessage{json.RawMessage(rawTemplates[0])}
	// A second upstream claims the same resource URI: its copy is
	// rewritten, and only its uri member changes.
	other := &upstream.Catalog{Resources: []mcp.Resource{res}, RawResources: []json.RawMessage{json.RawMessage(rawResources[0])}}

	snap := build(1, Namer{Separator: "__", MaxLength: 64}, []*source{
		testSource("gh", "", cat, configs.RuleSet{}, nil, nil),
		testSource("zz", "", other, configs.RuleSet{}, nil, nil),
	})
	want := map[string]string{
		"plain":  `{"name":"plain","inputSchema":{"type":"object","oneOf":[{"required":["a"]}],"x-vendor":1.50},"_meta":{"viewmux/upstream":"gh","viewmux/original":"plain"}}`,
		"titled": `{"name":"titled","title":"Titled","annotations":{"readOnlyHint":true},"_meta":{"up/k":[1],"viewmux/upstream":"gh","viewmux/original":"titled"},"x-extra":{"a":null}}`,
	}
	for name, w := range want {
		e := snap.Tool(name)
		if e == nil {
			t.Fatalf("%s not in the snapshot", name)
		}
		if string(e.Raw) != w {
			t.Errorf("%s:\n got  %s\n want %s", name, e.Raw, w)
		}
	}
	if got := string(snap.Prompts[0].Raw); got != rawPrompts[0] {
		t.Errorf("prompt: %s", got)
	}
	if got := string(snap.Resources[0].Raw); got != rawResources[0] {
		t.Errorf("resource: %s", got)
	}
	if got := string(snap.Resources[1].Raw); got != `{"uri":"viewmux-zz+file:///x","name":"x","x-r":"<&>"}` {
		t.Errorf("rewritten resource: %s", got)
	}
	if got := string(snap.Templates[0].Raw); got != rawTemplates[0] {
		t.Errorf("template: %s", got)
	}

	// What clients are sent: the listings of a view are those bytes.
	reg := filter.NewRegistry()
	v := reg.View(snap.Version, snap.Tools, reg.Filter())
	if got, w := string(v.Encoded()), `{"tools":[`+want["plain"]+`,`+want["titled"]+`]}`; got != w {
		t.Errorf("tools/list:\n got  %s\n want %s", got, w)
	}
	l := v.Listing(snap.Catalog)
	if got := string(l.Encoded("prompts/list")); !strings.Contains(got, `"required":false`) || !strings.Contains(got, `"x-p":true`) {
		t.Errorf("prompts/list: %s", got)
	}
	if got := string(l.Encoded("resources/templates/list")); got != `{"resourceTemplates":[`+rawTemplates[0]+`]}` {
		t.Errorf("resources/templates/list: %s", got)
	}
}
