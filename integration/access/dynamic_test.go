//go:build unix

package access

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// dynamicTOML gives the demo server one toolset, notes (its four notes
// tools, read-only and destructive), leaving add_tool, echo and slow_count
// outside every toolset; every, memory and fs declare none, so each is one
// toolset. Profile dyn has dynamic_toolsets; rodyn inherits it, read-only.
const dynamicTOML = `
[upstreams.demo.toolsets]
notes = ["*_note", "list_notes"]

[profiles.dyn]
dynamic_toolsets = true

[profiles.rodyn]
extends = "dyn"
read_only = true
`

var (
	ownTools     = []string{"viewmux__list_toolsets", "viewmux__get_toolset_tools", "viewmux__enable_toolset"}
	demoNotes    = []string{"demo__delete_note", "demo__list_notes", "demo__read_note", "demo__write_note"}
	demoOutside  = []string{"demo__add_tool", "demo__echo", "demo__slow_count"}
	dynamicWaits = struct{ notify, quiet time.Duration }{10 * time.Second, 1500 * time.Millisecond}
)

// toolsetsOf decodes a list_toolsets result (its structured content, and
// checks that its text holds the same).
func toolsetsOf(t *testing.T, r itest.CallResult) map[string]int {
	t.Helper()
	type info struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		ToolCount   int    `json:"toolCount"`
		Enabled     bool   `json:"enabled"`
	}
	var structured, text struct {
		Toolsets []info `json:"toolsets"`
	}
	if r.IsError || json.Unmarshal(r.StructuredContent, &structured) != nil || json.Unmarshal([]byte(r.Text()), &text) != nil {
		t.Fatalf("list_toolsets: isError %v, structured %s, text %q", r.IsError, r.StructuredContent, r.Text())
	}
	if !slices.Equal(structured.Toolsets, text.Toolsets) {
		t.Fatalf("list_toolsets: text %q differs from structuredContent %s", r.Text(), r.StructuredContent)
	}
	out := map[string]int{}
	for _, ts := range structured.Toolsets {
		if ts.Enabled || ts.Description == "" {
			t.Errorf("toolset %+v: enabled before any enable_toolset, or no description", ts)
		}
		out[ts.Name] = ts.ToolCount
	}
	return out
}

// TestDynamicToolsets drives dynamic sessions with the official TypeScript
// SDK client over streamable HTTP against server-everything,
// server-memory, server-filesystem and the demo server: a
// session starts with viewmux's three tools and the tools outside every
// toolset; enabling a toolset tells that session list_changed and adds the
// toolset's tools (never beyond a read-only ceiling); a concurrent session
// of the same profile sees nothing change.
func TestDynamicToolsets(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	mux := itest.StartMux(t, itest.ProfilesConfig(t, itest.RealTempDir(t), dynamicTOML))
	url := mux.URL()
	full := itest.Drive(t, itest.Script{URL: url, Steps: []itest.Op{itest.OpList()}}).Steps(t)[0].Names
	var everyTools []string
	for _, n := range full {
		if strings.HasPrefix(n, "every__") {
			everyTools = append(everyTools, n)
		}
	}
	if len(everyTools) < 5 {
		t.Fatalf("server-everything lists %v", everyTools)
	}
	initial := slices.Concat(ownTools, demoOutside)

	res := itest.Drive(t, itest.Script{URL: url + "?profile=dyn", Sessions: []itest.SessionScript{
		{Steps: []itest.Op{ // A
			itest.OpList(), // 0
			itest.OpCall("viewmux__list_toolsets", map[string]any{}),                               // 1
			itest.OpCall("viewmux__get_toolset_tools", map[string]any{"toolset": "demo/notes"}),    // 2
			itest.OpCallExpectError("demo__write_note", map[string]any{"title": "t", "text": "x"}), // 3: not enabled yet
			itest.OpBarrier("ready"),
			itest.OpCall("viewmux__enable_toolset", map[string]any{"toolset": "demo/notes"}), // 5
			itest.OpWaitNotification(itest.MethodToolsListChanged, dynamicWaits.notify),
			itest.OpList(), // 7
			itest.OpCall("demo__write_note", map[string]any{"title": "dyn", "text": "written"}), // 8
			itest.OpCall("viewmux__enable_toolset", map[string]any{"toolset": "every"}),         // 9
			itest.OpWaitNotification(itest.MethodToolsListChanged, dynamicWaits.notify),
			itest.OpList(), // 11
			itest.OpCall("every__echo", map[string]any{"message": "hi"}),                // 12
			itest.OpCall("viewmux__enable_toolset", map[string]any{"toolset": "every"}), // 13: already on
			itest.OpCall("viewmux__enable_toolset", map[string]any{"toolset": "nope"}),  // 14
			itest.OpExpectNoNotification(itest.MethodToolsListChanged, dynamicWaits.quiet),
			itest.OpBarrier("done"),
		}},
		{Steps: []itest.Op{ // B: same profile, never enables
			itest.OpList(), // 0
			itest.OpBarrier("ready"),
			itest.OpBarrier("done"),
			itest.OpExpectNoNotification(itest.MethodToolsListChanged, dynamicWaits.quiet),
			itest.OpList(), // 4
			itest.OpCallExpectError("demo__write_note", map[string]any{"title": "b", "text": "x"}), // 5
		}},
		{URL: url + "?profile=rodyn", Steps: []itest.Op{ // C: read-only ceiling
			itest.OpList(), // 0
			itest.OpCall("viewmux__list_toolsets", map[string]any{}),                         // 1
			itest.OpCall("viewmux__enable_toolset", map[string]any{"toolset": "demo/notes"}), // 2
			itest.OpWaitNotification(itest.MethodToolsListChanged, dynamicWaits.notify),
			itest.OpList(), // 4
			itest.OpCallExpectError("demo__write_note", map[string]any{"title": "c", "text": "x"}), // 5
			itest.OpCall("demo__list_notes", map[string]any{}),                                     // 6: a read-only tool of the enabled toolset
		}},
	}})
	a, b, c := res.Clients[0], res.Clients[1], res.Clients[2]

	t.Run("initial view", func(t *testing.T) {
		itest.CheckNames(t, "A's first listing", a.Steps[0].Names, initial)
		itest.CheckNames(t, "B's first listing", b.Steps[0].Names, initial)
		if got := a.Steps[0].Names[:3]; !slices.Equal(got, ownTools) {
			t.Errorf("viewmux's tools are not listed first: %v", got)
		}
		for _, name := range ownTools {
			tool := a.Steps[0].Tool(name)
			if tool == nil || tool.Annotations == nil || !itest.IsTrue(tool.Annotations.ReadOnlyHint) || len(tool.InputSchema) == 0 || tool.Description == "" {
				t.Errorf("tool %s: %+v", name, tool)
			}
		}
		if err := a.Steps[3].Error; err == nil || err.Code == nil || *err.Code != -32601 || err.Message != "Tool not found: demo__write_note" {
			t.Errorf("a tool not enabled yet: %v", err)
		}
	})
	t.Run("list_toolsets and get_toolset_tools", func(t *testing.T) {
		sets := toolsetsOf(t, a.Steps[1].Call(t))
		if sets["demo/notes"] != 4 || sets["every"] != len(everyTools) || sets["memory"] == 0 || sets["fs"] == 0 || len(sets) != 4 {
			t.Errorf("toolsets %v", sets)
		}
		got := a.Steps[2].Call(t)
		for _, n := range demoNotes {
			if !strings.Contains(got.Text(), `"name":"`+n+`"`) {
				t.Errorf("get_toolset_tools demo/notes: %q lacks %s", got.Text(), n)
			}
		}
		ro := toolsetsOf(t, c.Steps[1].Call(t))
		if ro["demo/notes"] != 2 || ro["every"] == 0 || ro["every"] >= len(everyTools) {
			t.Errorf("read-only toolsets %v", ro)
		}
	})
	t.Run("enable", func(t *testing.T) {
		if r := a.Steps[5].Call(t); r.IsError || !strings.Contains(r.Text(), "demo__write_note") {
			t.Errorf("enable demo/notes: %q", r.Text())
		}
		itest.CheckNames(t, "A's listing after enabling demo/notes", a.Steps[7].Names, slices.Concat(initial, demoNotes))
		if r := a.Steps[8].Call(t); r.IsError {
			t.Errorf("write_note once enabled: %q", r.Text())
		}
		itest.CheckNames(t, "A's listing after enabling every", a.Steps[11].Names, slices.Concat(initial, demoNotes, everyTools))
		if r := a.Steps[12].Call(t); r.Text() != "Echo: hi" {
			t.Errorf("every__echo: %q", r.Text())
		}
		if r := a.Steps[13].Call(t); r.IsError || !strings.Contains(r.Text(), "already enabled") {
			t.Errorf("enabling again: %q", r.Text())
		}
		if r := a.Steps[14].Call(t); !r.IsError || !strings.Contains(r.Text(), `unknown toolset "nope"`) || !strings.Contains(r.Text(), "demo/notes") {
			t.Errorf("enabling an unknown toolset: isError %v %q", r.IsError, r.Text())
		}
		if n := itest.CountNotifications(a, itest.MethodToolsListChanged); n != 2 {
			t.Errorf("A got %d list_changed, want 2 (one per toolset enabled)", n)
		}
	})
	t.Run("the other session is unaffected", func(t *testing.T) {
		itest.CheckNames(t, "B's last listing", b.Steps[4].Names, initial)
		if n := itest.CountNotifications(b, itest.MethodToolsListChanged); n != 0 {
			t.Errorf("B got %d list_changed", n)
		}
	})
	t.Run("read-only ceiling", func(t *testing.T) {
		itest.CheckNames(t, "C's first listing", c.Steps[0].Names, slices.Concat(ownTools, []string{"demo__echo", "demo__slow_count"}))
		itest.CheckNames(t, "C's listing after enabling demo/notes", c.Steps[4].Names,
			slices.Concat(ownTools, []string{"demo__echo", "demo__slow_count", "demo__list_notes", "demo__read_note"}))
		if err := c.Steps[5].Error; err == nil || err.Code == nil || *err.Code != -32601 {
			t.Errorf("a destructive tool of an enabled toolset under read_only: %v", err)
		}
		if r := c.Steps[6].Call(t); r.IsError {
			t.Errorf("list_notes under read_only: %q", r.Text())
		}
	})
}

// TestDynamicToolsetsOnWebsocket enables a toolset over /ws, with a second
// websocket session of the same profile open: only the first is told.
func TestDynamicToolsetsOnWebsocket(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	mux := itest.StartMux(t, itest.ProfilesConfig(t, itest.RealTempDir(t), dynamicTOML))
	ws := fmt.Sprintf("ws://%s/ws?profile=dyn", mux.Addr)
	res := itest.DriveDoor(t, itest.DoorScript{Transport: "ws", Script: itest.Script{URL: ws, Sessions: []itest.SessionScript{
		{Steps: []itest.Op{
			itest.OpList(),
			itest.OpBarrier("ready"),
			itest.OpCall("viewmux__enable_toolset", map[string]any{"toolset": "demo/notes"}),
			itest.OpWaitNotification(itest.MethodToolsListChanged, dynamicWaits.notify),
			itest.OpList(), // 4
			itest.OpCall("demo__list_notes", map[string]any{}),
			itest.OpBarrier("done"),
		}},
		{Steps: []itest.Op{
			itest.OpList(),
			itest.OpBarrier("ready"),
			itest.OpBarrier("done"),
			itest.OpExpectNoNotification(itest.MethodToolsListChanged, dynamicWaits.quiet),
			itest.OpList(), // 4
		}},
	}}})
	a, b := res.Clients[0], res.Clients[1]
	initial := slices.Concat(ownTools, demoOutside)
	itest.CheckNames(t, "first listing", a.Steps[0].Names, initial)
	itest.CheckNames(t, "listing after enabling demo/notes", a.Steps[4].Names, slices.Concat(initial, demoNotes))
	itest.CheckNames(t, "the other session's last listing", b.Steps[4].Names, initial)
	if n := itest.CountNotifications(a.ClientResult, itest.MethodToolsListChanged); n != 1 {
		t.Errorf("the enabling session got %d list_changed, want 1", n)
	}
	if n := itest.CountNotifications(b.ClientResult, itest.MethodToolsListChanged); n != 0 {
		t.Errorf("the other session got %d list_changed", n)
	}
}

// TestDynamicToolsetsOnSSE enables a toolset over legacy HTTP+SSE with the
// profile in a header the client repeats on every POST /message: enabling
// changes the session's filter, not the selection its POSTs are checked
// against.
func TestDynamicToolsetsOnSSE(t *testing.T) {
	itest.RequireNode(t)
	mux := itest.StartMux(t, itest.ProfilesConfig(t, itest.RealTempDir(t), dynamicTOML))
	res := itest.DriveDoor(t, itest.DoorScript{Transport: "sse", Script: itest.Script{
		URL:     fmt.Sprintf("http://%s/sse", mux.Addr),
		Headers: map[string]string{"Mcp-Profile": "dyn"},
		Steps: []itest.Op{
			itest.OpList(),
			itest.OpCall("viewmux__enable_toolset", map[string]any{"toolset": "memory"}),
			itest.OpWaitNotification(itest.MethodToolsListChanged, dynamicWaits.notify),
			itest.OpList(), // 3
			itest.OpCall("memory__read_graph", map[string]any{}),
		},
	}})
	steps := res.Clients[0].Steps
	initial := slices.Concat(ownTools, demoOutside)
	itest.CheckNames(t, "first listing", steps[0].Names, initial)
	var memory []string
	for _, n := range steps[3].Names {
		if strings.HasPrefix(n, "memory__") {
			memory = append(memory, n)
		}
	}
	if len(memory) == 0 {
		t.Fatalf("no memory tool after enabling memory: %v", steps[3].Names)
	}
	itest.CheckNames(t, "listing after enabling memory", steps[3].Names, slices.Concat(initial, memory))
	if r := steps[4].Call(t); r.IsError {
		t.Errorf("memory__read_graph: %q", r.Text())
	}
}
