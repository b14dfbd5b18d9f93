package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// toolWant is what tools/list must say about one built-in tool.
type toolWant struct {
	readOnly, destructive, idempotent bool
	required                          []string
}

// wantTools is the demo server's complete built-in tool list.
var wantTools = map[string]toolWant{
	"list_notes":  {readOnly: true, idempotent: true},
	"read_note":   {readOnly: true, idempotent: true, required: []string{"title"}},
	"write_note":  {idempotent: true, required: []string{"title", "text"}},
	"delete_note": {destructive: true, idempotent: true, required: []string{"title"}},
	"slow_count":  {readOnly: true, idempotent: true},
	"add_tool":    {required: []string{"name"}},
	"echo":        {readOnly: true, idempotent: true, required: []string{"text"}},
}

// hint dereferences an annotation, failing the test when it is missing.
func hint(t *testing.T, tool, which string, v *bool) bool {
	t.Helper()
	if v == nil {
		t.Errorf("%s: %s missing", tool, which)
		return false
	}
	return *v
}

func listTools(t *testing.T, p *peer) map[string]mcp.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := p.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	tools := make(map[string]mcp.Tool, len(res.Tools))
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	return tools
}

func TestListTools(t *testing.T) {
	for _, mode := range protocolModes {
		t.Run(mode.name, func(t *testing.T) {
			p := startPipe(t, "tools", mode.modern, mode.opts...)
			tools := listTools(t, p)
			if len(tools) != len(wantTools) {
				t.Errorf("got %d tools, want %d", len(tools), len(wantTools))
			}
			for name, want := range wantTools {
				t.Run(name, func(t *testing.T) {
					tool, ok := tools[name]
					if !ok {
						t.Fatalf("tool %s not listed", name)
					}
					a := tool.Annotations
					if got := hint(t, name, "readOnlyHint", a.ReadOnlyHint); got != want.readOnly {
						t.Errorf("readOnlyHint = %v, want %v", got, want.readOnly)
					}
					if got := hint(t, name, "destructiveHint", a.DestructiveHint); got != want.destructive {
						t.Errorf("destructiveHint = %v, want %v", got, want.destructive)
					}
					if got := hint(t, name, "idempotentHint", a.IdempotentHint); got != want.idempotent {
						t.Errorf("idempotentHint = %v, want %v", got, want.idempotent)
					}
					if hint(t, name, "openWorldHint", a.OpenWorldHint) {
						t.Errorf("openWorldHint = true, want false")
					}
					got := slices.Sorted(slices.Values(tool.InputSchema.Required))
					if !slices.Equal(got, slices.Sorted(slices.Values(want.required))) {
						t.Errorf("required = %v, want %v", got, want.required)
					}
					if tool.Description == "" {
						t.Errorf("no description")
					}
				})
			}

			out := tools["list_notes"].OutputSchema
			titles, _ := out.Properties["titles"].(map[string]any)
			if out.Type != "object" || titles["type"] != "array" || !slices.Contains(out.Required, "titles") {
				t.Errorf("list_notes outputSchema = %+v, want an object requiring a titles array", out)
			}
		})
	}
}

// structuredTitles decodes list_notes' structuredContent.
func structuredTitles(t *testing.T, res *mcp.CallToolResult) []string {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Titles []string `json:"titles"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Titles == nil {
		t.Fatalf("structuredContent %s is not {\"titles\": [...]}: %v", b, err)
	}
	return out.Titles
}

func TestNotesRoundTrip(t *testing.T) {
	steps := []struct {
		name     string
		tool     string
		args     map[string]any
		wantText string
		wantErr  bool
		titles   []string // for list_notes: the structured titles
	}{
		{name: "seeded", tool: "list_notes", wantText: "welcome", titles: []string{"welcome"}},
		{name: "read seed", tool: "read_note", args: map[string]any{"title": "welcome"}, wantText: welcomeText},
		{name: "create", tool: "write_note", args: map[string]any{"title": "shopping list", "text": "eggs\nmilk"}, wantText: `created note "shopping list"`},
		{name: "read created", tool: "read_note", args: map[string]any{"title": "shopping list"}, wantText: "eggs\nmilk"},
		{name: "overwrite", tool: "write_note", args: map[string]any{"title": "shopping list", "text": "bread"}, wantText: `updated note "shopping list"`},
		{name: "read overwritten", tool: "read_note", args: map[string]any{"title": "shopping list"}, wantText: "bread"},
		{name: "empty text", tool: "write_note", args: map[string]any{"title": "a/b", "text": ""}, wantText: `created note "a/b"`},
		{name: "list sorted", tool: "list_notes", wantText: "a/b\nshopping list\nwelcome", titles: []string{"a/b", "shopping list", "welcome"}},
		{name: "delete", tool: "delete_note", args: map[string]any{"title": "shopping list"}, wantText: `deleted note "shopping list"`},
		{name: "read deleted", tool: "read_note", args: map[string]any{"title": "shopping list"}, wantText: `note "shopping list" not found`, wantErr: true},
		{name: "delete again", tool: "delete_note", args: map[string]any{"title": "shopping list"}, wantText: `note "shopping list" not found`, wantErr: true},
		{name: "list after delete", tool: "list_notes", wantText: "a/b\nwelcome", titles: []string{"a/b", "welcome"}},
	}
	for _, mode := range protocolModes {
		t.Run(mode.name, func(t *testing.T) {
			p := startPipe(t, "notes", mode.modern, mode.opts...)
			for _, st := range steps {
				ok := t.Run(st.name, func(t *testing.T) {
					res := p.callTool(t, st.tool, st.args)
					if res.IsError != st.wantErr {
						t.Errorf("isError = %v, want %v (%s)", res.IsError, st.wantErr, resultText(res))
					}
					if got := resultText(res); got != st.wantText {
						t.Errorf("text = %q, want %q", got, st.wantText)
					}
					if st.titles != nil {
						if got := structuredTitles(t, res); !slices.Equal(got, st.titles) {
							t.Errorf("structured titles = %v, want %v", got, st.titles)
						}
					}
				})
				if !ok {
					t.FailNow() // later steps depend on this one
				}
			}
		})
	}
}

func TestToolErrors(t *testing.T) {
	tests := []struct {
		name string
		tool string
		args map[string]any
		want string // substring of the error text
	}{
		{name: "read unknown", tool: "read_note", args: map[string]any{"title": "nope"}, want: `note "nope" not found`},
		{name: "read without title", tool: "read_note", args: map[string]any{}, want: "title"},
		{name: "read title not a string", tool: "read_note", args: map[string]any{"title": 3}, want: "title"},
		{name: "delete unknown", tool: "delete_note", args: map[string]any{"title": "nope"}, want: `note "nope" not found`},
		{name: "write empty title", tool: "write_note", args: map[string]any{"title": "", "text": "x"}, want: "title must not be empty"},
		{name: "write long title", tool: "write_note", args: map[string]any{"title": strings.Repeat("t", maxTitleBytes+1), "text": "x"}, want: "title is 257 bytes"},
		{name: "write without text", tool: "write_note", args: map[string]any{"title": "x"}, want: "text"},
		{name: "count zero", tool: "slow_count", args: map[string]any{"count": 0}, want: `"count" must be an integer from 1 to 1000`},
		{name: "count too big", tool: "slow_count", args: map[string]any{"count": 1001}, want: `"count" must be an integer from 1 to 1000`},
		{name: "count fractional", tool: "slow_count", args: map[string]any{"count": 2.5}, want: `"count" must be an integer`},
		{name: "count a string", tool: "slow_count", args: map[string]any{"count": "3"}, want: `"count" must be an integer`},
		{name: "interval negative", tool: "slow_count", args: map[string]any{"interval_ms": -1}, want: `"interval_ms" must be an integer from 0 to 10000`},
		{name: "interval too long", tool: "slow_count", args: map[string]any{"interval_ms": 10001}, want: `"interval_ms" must be an integer from 0 to 10000`},
		{name: "echo without text", tool: "echo", args: map[string]any{}, want: "text"},
		{name: "add_tool read_only not bool", tool: "add_tool", args: map[string]any{"name": "x", "read_only": "yes"}, want: `"read_only" must be a boolean`},
	}
	p := startPipe(t, "errors", true)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := p.callTool(t, tt.tool, tt.args)
			if !res.IsError {
				t.Fatalf("isError = false, want true (%s)", resultText(res))
			}
			if got := resultText(res); !strings.Contains(got, tt.want) {
				t.Errorf("error text = %q, want it to contain %q", got, tt.want)
			}
		})
	}
}

func TestSlowCountProgress(t *testing.T) {
	tests := []struct {
		name  string
		token mcp.ProgressToken // nil: no progress wanted
		count int
	}{
		{name: "string token", token: "tok-string", count: 3},
		{name: "integer token", token: 7, count: 2},
		{name: "no token", count: 3},
	}
	for _, mode := range protocolModes {
		t.Run(mode.name, func(t *testing.T) {
			p := startPipe(t, "progress", mode.modern, mode.opts...)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					req := mcp.CallToolRequest{Params: mcp.CallToolParams{
						Name:      "slow_count",
						Arguments: map[string]any{"count": tt.count, "interval_ms": 5},
					}}
					if tt.token != nil {
						req.Params.Meta = &mcp.Meta{ProgressToken: tt.token}
					}
					before := len(p.rec.matching(isMethod("notifications/progress")))
					ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
					defer cancel()
					res, err := p.CallTool(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					if got, want := resultText(res), fmt.Sprintf("counted to %d", tt.count); got != want {
						t.Errorf("result = %q, want %q", got, want)
					}
					// After a flush every notification of the call has arrived.
					p.flush(t)
					if tt.token == nil {
						// Only the flush's own progress is new.
						if got := len(p.rec.matching(isMethod("notifications/progress"))) - before; got != 1 {
							t.Errorf("%d progress notifications without a token, want none", got-1)
						}
						return
					}
					got := p.rec.matching(isProgressFor(tt.token))
					if len(got) != tt.count {
						t.Fatalf("got %d progress notifications, want %d: %v", len(got), tt.count, got)
					}
					for i, n := range got {
						f := n.Params.AdditionalFields
						step := i + 1
						if f["progress"] != float64(step) || f["total"] != float64(tt.count) ||
							f["message"] != fmt.Sprintf("%d/%d", step, tt.count) {
							t.Errorf("notification %d = %v, want progress %d of %d", step, f, step, tt.count)
						}
						if _, isString := tt.token.(string); isString && f["progressToken"] != tt.token {
							t.Errorf("token = %#v, want %#v", f["progressToken"], tt.token)
						}
					}
				})
			}
		})
	}
}

func TestSlowCountCancel(t *testing.T) {
	for _, mode := range protocolModes {
		t.Run(mode.name, func(t *testing.T) {
			p := startPipe(t, "cancel", mode.modern, mode.opts...)
			tok := p.token("cancel")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				_, err := p.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{
					Name:      "slow_count",
					Arguments: map[string]any{"count": 1000, "interval_ms": 20},
					Meta:      &mcp.Meta{ProgressToken: tok},
				}})
				errc <- err
			}()
			p.rec.waitFor(t, 2, isProgressFor(tok)) // it is running
			cancel()
			cancelledAt := time.Now()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled call = %v, want context.Canceled", err)
				}
			case <-time.After(time.Second):
				t.Fatal("cancelled call did not return within 1s")
			}

			// The server got notifications/cancelled and its handler
			// returned: it logs that when it sees ctx done.
			for !strings.Contains(p.logs.String(), "tool call cancelled") {
				if time.Since(cancelledAt) > time.Second {
					t.Fatalf("server handler still running 1s after cancel; log:\n%s", p.logs)
				}
				time.Sleep(5 * time.Millisecond)
			}
			p.flush(t)
			stopped := len(p.rec.matching(isProgressFor(tok)))
			if stopped >= 1000 {
				t.Fatalf("slow_count ran to the end despite cancellation")
			}

			// The server stays usable, and the cancelled call sends nothing more.
			if got := resultText(p.callTool(t, "echo", map[string]any{"text": "alive"})); got != "alive" {
				t.Errorf("echo after cancel = %q", got)
			}
			if got := resultText(p.callTool(t, "slow_count", map[string]any{"count": 2, "interval_ms": 1})); got != "counted to 2" {
				t.Errorf("slow_count after cancel = %q", got)
			}
			p.flush(t)
			if got := len(p.rec.matching(isProgressFor(tok))); got != stopped {
				t.Errorf("progress for the cancelled call went from %d to %d", stopped, got)
			}
		})
	}
}

func TestAddTool(t *testing.T) {
	tests := []struct {
		name         string
		args         map[string]any
		wantReadOnly bool
	}{
		{name: "read_only true", args: map[string]any{"name": "ro_tool", "read_only": true}, wantReadOnly: true},
		{name: "read_only false", args: map[string]any{"name": "rw-tool", "read_only": false}},
		{name: "read_only absent", args: map[string]any{"name": "Default9"}},
	}
	for _, mode := range protocolModes {
		t.Run(mode.name, func(t *testing.T) {
			p := startPipe(t, "adder", mode.modern, mode.opts...)
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					name := tt.args["name"].(string)
					res := p.callTool(t, "add_tool", tt.args)
					if res.IsError || resultText(res) != "added "+name {
						t.Fatalf("add_tool = %q (isError %v), want %q", resultText(res), res.IsError, "added "+name)
					}
					p.rec.waitFor(t, i+1, isMethod("notifications/tools/list_changed"))

					tool, ok := listTools(t, p)[name]
					if !ok {
						t.Fatalf("%s not listed after add_tool", name)
					}
					if got := hint(t, name, "readOnlyHint", tool.Annotations.ReadOnlyHint); got != tt.wantReadOnly {
						t.Errorf("readOnlyHint = %v, want %v", got, tt.wantReadOnly)
					}

					// The new tool echoes its arguments, byte for byte.
					const raw = `{"b":2,"a":[1,2.5,"x"],"nested":{"k":null}}`
					ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
					defer cancel()
					echoed, err := p.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{
						Name: name, RawArguments: json.RawMessage(raw),
					}})
					if err != nil {
						t.Fatal(err)
					}
					if got := resultText(echoed); got != raw {
						t.Errorf("%s echoed %s, want %s", name, got, raw)
					}
				})
			}
			if n := len(listTools(t, p)); n != len(wantTools)+len(tests) {
				t.Errorf("%d tools listed, want %d", n, len(wantTools)+len(tests))
			}
		})
	}
}

func TestAddToolRejects(t *testing.T) {
	tests := []struct {
		name string
		tool string
		want string
	}{
		{name: "empty", tool: "", want: "must match"},
		{name: "space", tool: "has space", want: "must match"},
		{name: "slash", tool: "a/b", want: "must match"},
		{name: "dot", tool: "a.b", want: "must match"},
		{name: "non-ascii", tool: "tööl", want: "must match"},
		{name: "65 characters", tool: strings.Repeat("x", 65), want: "must match"},
		{name: "built-in", tool: "echo", want: `tool "echo" already exists`},
		{name: "added twice", tool: "twice", want: `tool "twice" already exists`},
	}
	p := startPipe(t, "rejects", true)
	if res := p.callTool(t, "add_tool", map[string]any{"name": "twice"}); res.IsError {
		t.Fatalf("first add_tool twice: %s", resultText(res))
	}
	p.rec.waitFor(t, 1, isMethod("notifications/tools/list_changed"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := p.callTool(t, "add_tool", map[string]any{"name": tt.tool})
			if !res.IsError {
				t.Fatalf("add_tool %q succeeded: %s", tt.tool, resultText(res))
			}
			if got := resultText(res); !strings.Contains(got, tt.want) {
				t.Errorf("error = %q, want it to contain %q", got, tt.want)
			}
		})
	}
	// Nothing was registered or announced.
	p.flush(t)
	if n := len(p.rec.matching(isMethod("notifications/tools/list_changed"))); n != 1 {
		t.Errorf("%d tools/list_changed notifications, want 1 (for twice only)", n)
	}
	if n := len(listTools(t, p)); n != len(wantTools)+1 {
		t.Errorf("%d tools listed, want %d", n, len(wantTools)+1)
	}
}
