//go:build unix

package conformance

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// memoryTools are all the tools of server-memory 2026.8.31.
var memoryTools = []string{
	"add_observations",
	"create_entities",
	"create_relations",
	"delete_entities",
	"delete_observations",
	"delete_relations",
	"open_nodes",
	"read_graph",
	"search_nodes",
}

var exposedName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// referenceConfig mounts server-everything over stdio (every), server-memory
// over stdio (memory) and server-everything over streamable HTTP
// (everyhttp). All are required, so /readyz means all their tools are in.
func referenceConfig(t *testing.T, everythingURL string) string {
	memFile := filepath.Join(t.TempDir(), "memory.jsonl")
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.every]
command = %[1]s
args = %[2]s
required = true

[upstreams.memory]
command = %[1]s
args = %[3]s
env = { MEMORY_FILE_PATH = %[4]s }
required = true

[upstreams.everyhttp]
url = %[5]s
required = true
`, itest.TomlString(itest.Harness.Node), itest.TomlArray(itest.EverythingEntry(), "stdio"), itest.TomlArray(itest.MemoryEntry()),
		itest.TomlString(memFile), itest.TomlString(everythingURL))
}

// TestReferenceServers runs the official TypeScript SDK client against
// viewmux mounting the reference servers from npm.
func TestReferenceServers(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	mux := itest.StartMux(t, referenceConfig(t, itest.StartEverythingHTTP(t)))
	const text = "héllo wörld ✓ 日本語"

	t.Run("tools are namespaced", func(t *testing.T) {
		list := itest.Drive(t, itest.Script{URL: mux.URL(), Steps: []itest.Op{itest.OpList()}}).Steps(t)[0]
		byPrefix := map[string][]string{}
		for _, name := range list.Names {
			if !exposedName.MatchString(name) {
				t.Errorf("exposed name %q does not match %s", name, exposedName)
			}
			prefix, orig, ok := strings.Cut(name, "__")
			if !ok {
				t.Errorf("tool %q has no prefix", name)
				continue
			}
			byPrefix[prefix] = append(byPrefix[prefix], orig)
		}
		for prefix := range byPrefix {
			if prefix != "every" && prefix != "memory" && prefix != "everyhttp" {
				t.Errorf("unexpected prefix %q (tools %v)", prefix, byPrefix[prefix])
			}
		}
		for _, prefix := range []string{"every", "everyhttp"} {
			for _, tool := range itest.EverythingTools {
				if !slices.Contains(byPrefix[prefix], tool) {
					t.Errorf("%s__%s is not listed; %s tools: %v", prefix, tool, prefix, byPrefix[prefix])
				}
			}
		}
		got := slices.Sorted(slices.Values(byPrefix["memory"]))
		if !slices.Equal(got, memoryTools) {
			t.Errorf("memory tools = %v, want exactly %v", got, memoryTools)
		}

		// Titles and annotations pass through unchanged.
		hints := []struct {
			tool     string
			title    string
			readOnly bool
		}{
			{"every__echo", "Echo Tool", true},
			{"everyhttp__echo", "Echo Tool", true},
			{"every__get-sum", "Get Sum Tool", true},
			{"memory__create_entities", "Create Entities", false},
			{"memory__read_graph", "Read Graph", true},
		}
		for _, h := range hints {
			tool := list.Tool(h.tool)
			if tool == nil {
				t.Errorf("%s is not listed", h.tool)
				continue
			}
			if tool.Title != h.title {
				t.Errorf("%s title = %q, want %q", h.tool, tool.Title, h.title)
			}
			if tool.Annotations == nil || tool.Annotations.ReadOnlyHint == nil || *tool.Annotations.ReadOnlyHint != h.readOnly {
				t.Errorf("%s annotations = %+v, want readOnlyHint %v", h.tool, tool.Annotations, h.readOnly)
			}
		}
	})

	t.Run("echo keeps non-ASCII text", func(t *testing.T) {
		for _, tool := range []string{"every__echo", "everyhttp__echo"} {
			t.Run(tool, func(t *testing.T) {
				steps := itest.Drive(t, itest.Script{URL: mux.URL(), Steps: []itest.Op{
					itest.OpCall(tool, map[string]any{"message": text}),
				}}).Steps(t)
				r := steps[0].Call(t)
				if got, want := r.Text(), "Echo: "+text; got != want || r.IsError {
					t.Errorf("%s = %q (isError %v), want %q", tool, got, r.IsError, want)
				}
			})
		}
	})

	t.Run("get-sum", func(t *testing.T) {
		tests := []struct {
			a, b any
			want string
		}{
			{2, 40, "The sum of 2 and 40 is 42."},
			{0.5, 0.25, "The sum of 0.5 and 0.25 is 0.75."},
			{-7, 3, "The sum of -7 and 3 is -4."},
		}
		for _, prefix := range []string{"every", "everyhttp"} {
			for _, tt := range tests {
				t.Run(fmt.Sprintf("%s %v+%v", prefix, tt.a, tt.b), func(t *testing.T) {
					steps := itest.Drive(t, itest.Script{URL: mux.URL(), Steps: []itest.Op{
						itest.OpCall(prefix+"__get-sum", map[string]any{"a": tt.a, "b": tt.b}),
					}}).Steps(t)
					if got := steps[0].Call(t).Text(); got != tt.want {
						t.Errorf("got %q, want %q", got, tt.want)
					}
				})
			}
		}
	})

	t.Run("memory is shared across sessions", func(t *testing.T) {
		type graph struct {
			Entities []memEntity `json:"entities"`
		}
		want := memEntity{
			Name:         "viewmux-it-" + itest.RandomHex(t, 6),
			EntityType:   "test",
			Observations: []string{"ünïcode observation ✓", "written by session A"},
		}
		// Session A writes.
		write := itest.Drive(t, itest.Script{URL: mux.URL(), Terminate: true, Steps: []itest.Op{
			itest.OpCall("memory__create_entities", map[string]any{"entities": []memEntity{want}}),
		}})
		var created graph
		if err := json.Unmarshal(write.Steps(t)[0].Call(t).StructuredContent, &created); err != nil {
			t.Fatalf("create_entities structuredContent: %v", err)
		}
		if len(created.Entities) != 1 || !created.Entities[0].equal(want) {
			t.Fatalf("create_entities returned %+v, want [%+v]", created.Entities, want)
		}
		// Session B, a separate process and session, reads.
		read := itest.Drive(t, itest.Script{URL: mux.URL(), Steps: []itest.Op{
			itest.OpCall("memory__search_nodes", map[string]any{"query": want.Name}),
			itest.OpCall("memory__read_graph", map[string]any{}),
		}})
		if a, b := write.Clients[0].SessionID, read.Clients[0].SessionID; a == b {
			t.Fatalf("both drives used session %q; the test needs two sessions", a)
		}
		for i, step := range read.Steps(t) {
			var g graph
			if err := json.Unmarshal(step.Call(t).StructuredContent, &g); err != nil {
				t.Fatalf("%s structuredContent: %v", step.Name, err)
			}
			found := slices.ContainsFunc(g.Entities, want.equal)
			if !found {
				t.Errorf("step %d %s does not return the entity written by the other session; got %+v", i, step.Name, g.Entities)
			}
		}
	})

	t.Run("concurrent clients", func(t *testing.T) {
		const n = 4
		res := itest.Drive(t, itest.Script{URL: mux.URL(), Clients: n, Terminate: true, Steps: []itest.Op{
			itest.OpList(),
			itest.OpCall("every__echo", map[string]any{"message": "client {{client}} " + text}),
			itest.OpCall("everyhttp__echo", map[string]any{"message": "client {{client}} via http"}),
			itest.OpCall("every__get-sum", map[string]any{"a": 1, "b": 2}),
			itest.OpList(),
		}})
		if len(res.Clients) != n {
			t.Fatalf("got %d clients, want %d", len(res.Clients), n)
		}
		sessions := map[string]int{}
		for i, c := range res.Clients {
			if prev, dup := sessions[c.SessionID]; dup {
				t.Errorf("clients %d and %d share session %q", prev, i, c.SessionID)
			}
			sessions[c.SessionID] = i
			s := c.Steps
			if len(s[0].Names) == 0 || !slices.Equal(s[0].Names, s[4].Names) {
				t.Errorf("client %d: tools/list changed between calls: %d then %d tools", i, len(s[0].Names), len(s[4].Names))
			}
			if got, want := s[1].Call(t).Text(), fmt.Sprintf("Echo: client %d %s", i, text); got != want {
				t.Errorf("client %d: every__echo = %q, want %q", i, got, want)
			}
			if got, want := s[2].Call(t).Text(), fmt.Sprintf("Echo: client %d via http", i); got != want {
				t.Errorf("client %d: everyhttp__echo = %q, want %q", i, got, want)
			}
			if got, want := s[3].Call(t).Text(), "The sum of 1 and 2 is 3."; got != want {
				t.Errorf("client %d: get-sum = %q, want %q", i, got, want)
			}
		}
	})

	t.Run("unknown tool", func(t *testing.T) {
		// An unknown prefix and an unknown tool under a real prefix get the
		// same error, from viewmux itself.
		for _, name := range []string{"nope__nothing", "every__nothing", "nothing"} {
			t.Run(name, func(t *testing.T) {
				steps := itest.Drive(t, itest.Script{URL: mux.URL(), Steps: []itest.Op{
					itest.OpCallExpectError(name, map[string]any{}),
				}}).Steps(t)
				e := steps[0].Error
				want := "Tool not found: " + name
				if e == nil || e.Kind != "jsonrpc" || e.Code == nil || *e.Code != -32601 || e.Message != want {
					t.Errorf("call %s: got %v, want jsonrpc error -32601 %q", name, e, want)
				}
			})
		}
	})
}

// memEntity is an entity of server-memory's knowledge graph.
type memEntity struct {
	Name         string   `json:"name"`
	EntityType   string   `json:"entityType"`
	Observations []string `json:"observations"`
}

func (e memEntity) equal(o memEntity) bool {
	return e.Name == o.Name && e.EntityType == o.EntityType && slices.Equal(e.Observations, o.Observations)
}
