//go:build unix

package access

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// Tool search (tool_search profiles): the starting view, search_tools and
// call_tool, with the TypeScript and Go SDK clients against the reference
// servers and the demo server, and on every door against the recording
// upstreams, which prove what call_tool never forwards.

// searchTOML: profile agent searches the whole catalog with demo__echo
// pinned; roagent is agent, read-only.
const searchTOML = `
[profiles.agent]
tool_search = true
tool_search_pinned = ["demo__echo"]

[profiles.roagent]
extends = "agent"
read_only = true
`

var searchOwnTools = []string{"viewmux__search_tools", "viewmux__call_tool"}

// foundByName decodes a search_tools result: the names of its
// structuredContent tools, each checked to carry an inputSchema and to be
// named in the text.
func foundByName(t *testing.T, structured json.RawMessage, text string) []string {
	t.Helper()
	var got struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(structured, &got); err != nil {
		t.Fatalf("search_tools structuredContent %s: %v", structured, err)
	}
	var names []string
	for _, tool := range got.Tools {
		if len(tool.InputSchema) == 0 || !strings.Contains(text, tool.Name) {
			t.Errorf("found %s: inputSchema %s, named in the text: %v", tool.Name, tool.InputSchema, strings.Contains(text, tool.Name))
		}
		names = append(names, tool.Name)
	}
	return names
}

// TestToolSearchTypeScriptClient drives a tool_search session with the
// official TypeScript SDK client on /mcp: it starts with the two search
// tools and the pinned one; a search finds the tool a task needs, tells the
// session list_changed and adds the found tools; call_tool calls a tool
// that is not listed, and refuses one the profile hides.
func TestToolSearchTypeScriptClient(t *testing.T) {
	t.Parallel()
	itest.RequireFilesystemServer(t)
	mux := itest.StartMux(t, itest.ProfilesConfig(t, itest.RealTempDir(t), searchTOML))
	res := itest.Drive(t, itest.Script{URL: mux.URL() + "?profile=agent", Steps: []itest.Op{
		itest.OpList(), // 0
		itest.OpCall("viewmux__search_tools", map[string]any{"query": "create a new directory"}), // 1
		itest.OpWaitNotification(itest.MethodToolsListChanged, 10*time.Second),                   // 2
		itest.OpList(), // 3
		itest.OpCall("viewmux__call_tool", map[string]any{"name": "memory__create_entities", "arguments": map[string]any{ // 4
			"entities": []any{map[string]any{"name": "Alice", "entityType": "person", "observations": []string{"works at Acme"}}}}}),
		itest.OpCall("viewmux__call_tool", map[string]any{"name": "memory__read_graph", "arguments": map[string]any{}}), // 5
		itest.OpCall("fs__create_directory", map[string]any{"path": "x"}),                                               // 6: found, so listed; the path is outside the root, an upstream tool error
	}})
	steps := res.Steps(t)
	itest.CheckNames(t, "starting view", steps[0].Names, append(slices.Clone(searchOwnTools), "demo__echo"))
	search := steps[1].Call(t)
	found := foundByName(t, search.StructuredContent, search.Text())
	if len(found) != 5 || found[0] != "fs__create_directory" {
		t.Errorf("search for a directory tool found %q", found)
	}
	for _, name := range found {
		if !slices.Contains(steps[3].Names, name) {
			t.Errorf("%s was found but is not listed after list_changed: %q", name, steps[3].Names)
		}
	}
	if r := steps[4].Call(t); r.IsError {
		t.Errorf("call_tool memory__create_entities: %q", r.Text())
	}
	if r := steps[5].Call(t); r.IsError || !strings.Contains(r.Text(), "Alice") {
		t.Errorf("call_tool memory__read_graph: %q", r.Text())
	}
	if steps[6].Error != nil && steps[6].Error.Kind == "jsonrpc" {
		t.Errorf("a found tool is not callable directly: %v", steps[6].Error)
	}

	ro := itest.Drive(t, itest.Script{URL: mux.URL() + "?profile=roagent", Steps: []itest.Op{
		itest.OpList(),
		itest.OpCall("viewmux__search_tools", map[string]any{"query": "write a file", "limit": 20}),
		itest.OpCallExpectError("viewmux__call_tool", map[string]any{"name": "fs__write_file", "arguments": map[string]any{"path": "a", "content": "b"}}),
	}}).Steps(t)
	relay := ro[0].Tool("viewmux__call_tool")
	if relay == nil || relay.Annotations == nil || !itest.IsTrue(relay.Annotations.ReadOnlyHint) {
		t.Errorf("call_tool over a read-only view: %+v", relay)
	}
	roFound := ro[1].Call(t)
	for _, name := range foundByName(t, roFound.StructuredContent, roFound.Text()) {
		if name == "fs__write_file" || name == "fs__edit_file" || name == "memory__create_entities" {
			t.Errorf("a read-only session's search found %s", name)
		}
	}
	itest.WantToolNotFound(t, ro[2].Error, "fs__write_file")
}

// TestToolSearchGoSDKClient does the same with the official Go SDK client,
// in a session (protocol 2025-11-25: list_changed reaches its handler and
// the found tools are listed) and stateless (its default, 2026-07-28:
// the same tools, and nothing is remembered between requests).
func TestToolSearchGoSDKClient(t *testing.T) {
	t.Parallel()
	itest.RequireFilesystemServer(t)
	mux := itest.StartMux(t, itest.ProfilesConfig(t, itest.RealTempDir(t), searchTOML))
	for _, protocol := range []string{"2025-11-25", ""} {
		stateless := protocol == ""
		name := map[bool]string{false: "session", true: "stateless"}[stateless]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			changed := make(chan struct{}, 4)
			c := gosdk.NewClient(&gosdk.Implementation{Name: "viewmux-search-test", Version: "1"}, &gosdk.ClientOptions{
				ToolListChangedHandler: func(context.Context, *gosdk.ToolListChangedRequest) { changed <- struct{}{} },
			})
			cs, err := c.Connect(ctx, &gosdk.StreamableClientTransport{Endpoint: mux.URL() + "?profile=agent"}, &gosdk.ClientSessionOptions{ProtocolVersion: protocol})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer cs.Close()
			names := func() []string {
				t.Helper()
				tools, err := cs.ListTools(ctx, nil)
				if err != nil {
					t.Fatalf("tools/list: %v", err)
				}
				var out []string
				for _, tl := range tools.Tools {
					out = append(out, tl.Name)
				}
				return out
			}
			starting := append(slices.Clone(searchOwnTools), "demo__echo")
			itest.CheckNames(t, "starting view", names(), starting)
			res, err := cs.CallTool(ctx, &gosdk.CallToolParams{Name: "viewmux__search_tools", Arguments: map[string]any{"query": "remember a new person in the knowledge graph", "limit": 3}})
			if err != nil || res.IsError {
				t.Fatalf("search_tools: %v %+v", err, res)
			}
			structured, _ := json.Marshal(res.StructuredContent)
			found := foundByName(t, structured, res.Content[0].(*gosdk.TextContent).Text)
			if len(found) != 3 || !slices.Contains(found, "memory__create_entities") {
				t.Errorf("found %q", found)
			}
			if stateless {
				itest.CheckNames(t, "tools/list after a stateless search", names(), starting)
			} else {
				select {
				case <-changed:
				case <-time.After(10 * time.Second):
					t.Fatal("no notifications/tools/list_changed after a search")
				}
				if got := names(); !slices.Contains(got, "memory__create_entities") || len(got) != len(starting)+3 {
					t.Errorf("tools/list after the search: %q", got)
				}
			}
			res, err = cs.CallTool(ctx, &gosdk.CallToolParams{Name: "viewmux__call_tool", Arguments: map[string]any{"name": "every__get-sum", "arguments": map[string]any{"a": 17, "b": 25}}})
			if err != nil || res.IsError || !strings.Contains(res.Content[0].(*gosdk.TextContent).Text, "42") {
				t.Fatalf("call_tool every__get-sum: %v %+v", err, res)
			}
			_, err = cs.CallTool(ctx, &gosdk.CallToolParams{Name: "viewmux__call_tool", Arguments: map[string]any{"name": "EVERY__get-sum", "arguments": map[string]any{"a": 1, "b": 2}}})
			if err == nil || !strings.Contains(err.Error(), "Tool not found: EVERY__get-sum") {
				t.Errorf("call_tool of a name variant: %v", err)
			}
		})
	}
}

// searchRecConfig is the recording config with its profile made a
// tool_search profile: run is pinned (the barrier calls it directly),
// secret_tool stays denied.
func searchRecConfig(rec, mod *itest.Recorder) string {
	cfg := itest.RecConfig(rec, mod)
	deny := `deny = ["rec__secret_tool", "mod__secret_tool"]`
	return strings.Replace(cfg, deny, deny+"\ntool_search = true\ntool_search_pinned = [\"rec__run\", \"mod__run\"]", 1)
}

// TestToolSearchEveryDoor runs a tool_search session on every door (a
// session and stateless requests on /mcp, websocket, legacy SSE, stdio)
// against the recording upstreams: the starting view, a search, a
// call_tool that reaches the upstream with exactly the arguments given,
// one its call rule refuses, and call_tool of a hidden tool by every name
// variant of the adversarial tables: none of them reaches an upstream.
func TestToolSearchEveryDoor(t *testing.T) {
	env := &itest.RecEnv{Rec: itest.StartRecorder(t, "rec", false), Mod: itest.StartRecorder(t, "mod", true), Stdio: map[string]*itest.SyncBuffer{}}
	env.Mux = itest.StartMux(t, searchRecConfig(env.Rec, env.Mod))
	env.CfgPath = filepath.Join(env.Mux.Dir, "viewmux.toml")
	var hidden []string
	for _, base := range []string{"rec__secret_tool", "mod__secret_tool", "rec__echo"} {
		hidden = append(hidden, lookAlikes(base)...)
	}
	hidden = append(hidden, "REC__RUN", "rec__Run", "rec__run ", " rec__run", "rec__run\u200b", "rec_run", "rec___run", "rec__ｒun",
		"rec__secret_tool", "mod__secret_tool", "rec__no_such_tool", "secret_tool", "run",
		"rec__secret_tool\u0000", "rec__ru\u0578", "rec__"+strings.Repeat("x", 200), "viewmux__call_tool", "viewmux__search_tools")
	relayParams := func(name, args string) string {
		q, _ := json.Marshal(name)
		return `{"name":"viewmux__call_tool","arguments":{"name":` + string(q) + `,"arguments":` + args + `}}`
	}
	for _, d := range env.Doors() {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			a := c.Do(t, "tools/list", `{}`)
			var listed struct {
				Tools []itest.Tool `json:"tools"`
			}
			if json.Unmarshal(a.Msg.Result, &listed) != nil {
				t.Fatalf("tools/list: %s", a)
			}
			var names []string
			for _, tl := range listed.Tools {
				names = append(names, tl.Name)
			}
			itest.CheckNames(t, "starting view", names, append(slices.Clone(searchOwnTools), "mod__run", "rec__run"))

			a = c.Do(t, "tools/call", `{"name":"viewmux__search_tools","arguments":{"query":"secret tool canned result","limit":20}}`)
			var r itest.CallResult
			if a.Msg.Error != nil || json.Unmarshal(a.Msg.Result, &r) != nil || r.IsError {
				t.Fatalf("search_tools: %s", a)
			}
			found := foundByName(t, r.StructuredContent, r.Text())
			if !slices.Contains(found, "rec__echo") || slices.ContainsFunc(found, func(n string) bool { return strings.Contains(n, "secret") }) {
				t.Errorf("search found %q", found)
			}

			m := env.Marks()
			a = c.Do(t, "tools/call", relayParams("mod__echo", `{"k":"v é","n":12345678901234567890}`))
			if a.Msg.Error != nil || !strings.Contains(string(a.Msg.Result), "structuredContent") {
				t.Fatalf("call_tool mod__echo: %s", a)
			}
			rec, mod := env.Forwarded(m)
			if len(rec) != 0 || len(mod) != 1 || string(mod[0].Params(t)["arguments"]) != `{"k":"v é","n":12345678901234567890}` {
				t.Errorf("call_tool forwarded %d to rec, %d to mod:\n%s", len(rec), len(mod), itest.RecDescribe(append(rec, mod...)))
			}

			m = env.Marks()
			a = c.Do(t, "tools/call", relayParams("rec__run", `{"command":"git status; rm -rf /"}`))
			itest.WantArgsNotAllowed(t, a.DriveError(), "rec__run", "git status; rm -rf /")
			env.CheckNothingForwarded(t, c, m, "rm -rf")

			for i, name := range hidden {
				token := fmt.Sprintf("tok%d%s", i, itest.RandomHex(t, 6))
				m := env.Marks()
				a := c.Do(t, "tools/call", relayParams(name, `{"command":"git status","x":"`+token+`"}`))
				itest.WantToolNotFound(t, a.DriveError(), itest.RecPrintable(name))
				if d.Modern && a.Status != 404 {
					t.Errorf("%s: 2026-07-28 -32601 came with HTTP %d, want 404", strconv.QuoteToASCII(name), a.Status)
				}
				env.CheckNothingForwarded(t, c, m, token)
			}
		})
	}
}

// TestToolSearchTypeScriptEveryDoor drives a tool_search session with the
// official TypeScript SDK client on every door (streamable HTTP, legacy
// SSE by query and by header, websocket, stdio) against the demo server:
// the starting view, a search that tells the session list_changed and
// lists what it found, and call_tool of a tool not listed.
func TestToolSearchTypeScriptEveryDoor(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	mux := itest.StartMux(t, itest.DoorsConfig(t)+searchTOML)
	cfgPath := filepath.Join(mux.Dir, "viewmux.toml")
	doors := append(itest.DoorsFor(mux, cfgPath, mux.Marker, "agent"), itest.Door{Name: "http", Script: func(steps []itest.Op) itest.DoorScript {
		return itest.DoorScript{Script: itest.Script{URL: mux.URL() + "?profile=agent", Steps: steps}}
	}})
	for _, d := range doors {
		t.Run(d.Name, func(t *testing.T) {
			title := "door-" + strings.ReplaceAll(d.Name, " ", "-")
			c := itest.DriveDoor(t, d.Script([]itest.Op{
				itest.OpList(), // 0
				itest.OpCall("viewmux__search_tools", map[string]any{"query": "delete a note", "limit": 2}), // 1
				itest.OpWaitNotification(itest.MethodToolsListChanged, 10*time.Second),                      // 2
				itest.OpList(), // 3
				itest.OpCall("viewmux__call_tool", map[string]any{"name": "demo__write_note", "arguments": map[string]any{"title": title, "text": "via call_tool"}}), // 4
				itest.OpCall("viewmux__call_tool", map[string]any{"name": "demo__read_note", "arguments": map[string]any{"title": title}}),                           // 5
				itest.OpCallExpectError("viewmux__call_tool", map[string]any{"name": "DEMO__read_note", "arguments": map[string]any{"title": title}}),                // 6
			})).Clients[0]
			starting := append(slices.Clone(searchOwnTools), "demo__echo")
			itest.CheckNames(t, "starting view", c.Steps[0].Names, starting)
			r := c.Steps[1].Call(t)
			found := foundByName(t, r.StructuredContent, r.Text())
			if len(found) != 2 || found[0] != "demo__delete_note" {
				t.Errorf("search found %q", found)
			}
			itest.CheckNames(t, "after the search", c.Steps[3].Names, append(starting, found...))
			if r := c.Steps[4].Call(t); r.IsError {
				t.Errorf("call_tool demo__write_note: %q", r.Text())
			}
			if r := c.Steps[5].Call(t); r.IsError || r.Text() != "via call_tool" {
				t.Errorf("call_tool demo__read_note: %q", r.Text())
			}
			itest.WantToolNotFound(t, c.Steps[6].Error, "DEMO__read_note")
			if d.Name == "stdio" {
				itest.CheckStdioExit(t, c)
			}
		})
	}
}
