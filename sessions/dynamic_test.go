package sessions

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/viewmux/viewmux/configs"
)

// dynamicConfig gives the one upstream "up" (30 tools, tool_0000 …
// tool_0029, the even ones read-only) three toolsets — a = tool_000*,
// b = tool_001*, odd = two tools that are not read-only — leaving
// tool_002* outside every toolset; and profiles dyn (dynamic_toolsets) and
// rodyn (extends dyn, read_only).
const dynamicConfig = `
[upstreams.up.toolsets]
a = ["tool_000*"]
b = ["tool_001*"]
odd = ["tool_0001", "tool_0003"]

[profiles.dyn]
dynamic_toolsets = true

[profiles.rodyn]
extends = "dyn"
read_only = true

[profiles.static]
`

// mcpAnswer posts body on session sid and returns every message of the
// response (one JSON body, or an event stream), the answer last.
func mcpAnswer(t *testing.T, s *Server, query, sid, body string) []rpcMsg {
	t.Helper()
	rec := post(s.Handler(), query, sid, body)
	if rec.Code != 200 {
		t.Fatalf("%s: HTTP %d %s", body, rec.Code, rec.Body.String())
	}
	var out []rpcMsg
	if !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
		var m rpcMsg
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s: answer is not JSON-RPC: %v: %s", body, err, rec.Body.String())
		}
		return append(out, m)
	}
	sc := bufio.NewScanner(strings.NewReader(rec.Body.String()))
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m rpcMsg
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			out = append(out, m)
		}
	}
	return out
}

func listedNames(t *testing.T, m rpcMsg) []string {
	t.Helper()
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
		t.Fatalf("tools/list: %+v %s", m.Error, m.Result)
	}
	var out []string
	for _, t := range res.Tools {
		out = append(out, t.Name)
	}
	return out
}

func listTools(t *testing.T, s *Server, query, sid string) []string {
	t.Helper()
	ms := mcpAnswer(t, s, query, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	return listedNames(t, ms[len(ms)-1])
}

// callResult is a tools/call result as the tests read it.
type callResult struct {
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func (r callResult) text() string {
	if len(r.Content) == 0 {
		return ""
	}
	return r.Content[0].Text
}

// callTool calls name with args on session sid and returns the
// notifications before the answer, and the answer.
func callTool(t *testing.T, s *Server, query, sid, name string, args any) ([]rpcMsg, rpcMsg) {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, name, mustMarshal(args))
	ms := mcpAnswer(t, s, query, sid, body)
	return ms[:len(ms)-1], ms[len(ms)-1]
}

func resultOf(t *testing.T, m rpcMsg) callResult {
	t.Helper()
	var r callResult
	if m.Error != nil || json.Unmarshal(m.Result, &r) != nil {
		t.Fatalf("tools/call: error %+v, result %s", m.Error, m.Result)
	}
	return r
}

func toolRange(from, to int, step int) []string {
	var out []string
	for i := from; i <= to; i += step {
		out = append(out, fmt.Sprintf("up__tool_%04d", i))
	}
	return out
}

var ownNames = []string{"viewmux__list_toolsets", "viewmux__get_toolset_tools", "viewmux__enable_toolset"}

func TestDynamicToolsetsOnMCP(t *testing.T) {
	up := newUpstreamServer(t, 30)
	audited := &syncBuf{}
	s := newServerWith(t, up.http.URL, dynamicConfig, Options{Audit: audited})
	sid := openSession(t, s.Handler(), "?profile=dyn")
	other := openSession(t, s.Handler(), "?profile=dyn")
	initial := append(slices.Clone(ownNames), toolRange(20, 29, 1)...)

	t.Run("initial view: own tools and tools outside every toolset", func(t *testing.T) {
		if got := listTools(t, s, "?profile=dyn", sid); !slices.Equal(got, initial) {
			t.Fatalf("tools/list = %q, want %q", got, initial)
		}
	})
	t.Run("a tool not yet enabled is unknown, and nothing is sent upstream", func(t *testing.T) {
		before := up.requests.Load()
		_, m := callTool(t, s, "", sid, "up__tool_0005", map[string]any{"query": "x"})
		if m.Error == nil || m.Error.Code != -32601 || m.Error.Message != "Tool not found: up__tool_0005" {
			t.Fatalf("call of a disabled tool: %+v %s", m.Error, m.Result)
		}
		if n := up.requests.Load() - before; n != 0 {
			t.Fatalf("the upstream got %d requests", n)
		}
	})
	t.Run("list_toolsets", func(t *testing.T) {
		_, m := callTool(t, s, "", sid, "viewmux__list_toolsets", map[string]any{})
		r := resultOf(t, m)
		var got struct {
			Toolsets []toolsetInfo `json:"toolsets"`
		}
		if err := json.Unmarshal(r.StructuredContent, &got); err != nil || r.IsError {
			t.Fatalf("structuredContent %s: %v", r.StructuredContent, err)
		}
		var text struct {
			Toolsets []toolsetInfo `json:"toolsets"`
		}
		if err := json.Unmarshal([]byte(r.text()), &text); err != nil || !slices.Equal(text.Toolsets, got.Toolsets) {
			t.Fatalf("text %q does not hold the structured content: %v", r.text(), err)
		}
		want := []string{"up/a:10:false", "up/b:10:false", "up/odd:2:false"}
		var have []string
		for _, ts := range got.Toolsets {
			have = append(have, fmt.Sprintf("%s:%d:%v", ts.Name, ts.ToolCount, ts.Enabled))
			if !strings.Contains(ts.Description, "of upstream up") {
				t.Errorf("description %q", ts.Description)
			}
		}
		if !slices.Equal(have, want) {
			t.Fatalf("toolsets %q, want %q", have, want)
		}
	})
	t.Run("get_toolset_tools", func(t *testing.T) {
		_, m := callTool(t, s, "", sid, "viewmux__get_toolset_tools", map[string]any{"toolset": "up/odd"})
		r := resultOf(t, m)
		if r.IsError || !strings.Contains(r.text(), `"name":"up__tool_0001"`) || !strings.Contains(r.text(), `"name":"up__tool_0003"`) || !strings.Contains(r.text(), "Tool number 1:") {
			t.Fatalf("get_toolset_tools: %q", r.text())
		}
	})
	t.Run("an unknown toolset is a tool error naming the valid ones", func(t *testing.T) {
		for _, args := range []any{map[string]any{"toolset": "up/zzz"}, map[string]any{}, map[string]any{"toolset": 3}} {
			notes, m := callTool(t, s, "", sid, "viewmux__enable_toolset", args)
			r := resultOf(t, m)
			if !r.IsError || !strings.Contains(r.text(), "valid toolsets: up/a, up/b, up/odd") || len(notes) != 0 {
				t.Fatalf("enable %s: %q (isError %v), notifications %v", mustMarshal(args), r.text(), r.IsError, notes)
			}
		}
	})
	t.Run("enable sends list_changed to this session and adds the toolset", func(t *testing.T) {
		notes, m := callTool(t, s, "", sid, "viewmux__enable_toolset", map[string]any{"toolset": "up/a"})
		r := resultOf(t, m)
		if r.IsError || !strings.Contains(r.text(), "up__tool_0009") {
			t.Fatalf("enable: %q", r.text())
		}
		if len(notes) != 1 || notes[0].Method != "notifications/tools/list_changed" {
			t.Fatalf("notifications before the answer: %+v", notes)
		}
		want := slices.Concat(ownNames, toolRange(0, 9, 1), toolRange(20, 29, 1))
		if got := listTools(t, s, "", sid); !slices.Equal(got, want) {
			t.Fatalf("tools/list after enable = %q, want %q", got, want)
		}
		if _, m := callTool(t, s, "", sid, "up__tool_0005", map[string]any{"query": "x"}); resultOf(t, m).text() != "ok" {
			t.Fatalf("enabled tool call: %s", m.Result)
		}
	})
	t.Run("a request naming the profile again is still the session's", func(t *testing.T) {
		if got := listTools(t, s, "?profile=dyn", sid); len(got) != 23 {
			t.Fatalf("tools/list with the profile named again = %q", got)
		}
	})
	t.Run("the other session is unaffected", func(t *testing.T) {
		if got := listTools(t, s, "", other); !slices.Equal(got, initial) {
			t.Fatalf("other session's tools/list = %q", got)
		}
	})
	t.Run("enabling again changes nothing and sends nothing", func(t *testing.T) {
		notes, m := callTool(t, s, "", sid, "viewmux__enable_toolset", map[string]any{"toolset": "up/a"})
		if r := resultOf(t, m); r.IsError || !strings.Contains(r.text(), "already enabled") || len(notes) != 0 {
			t.Fatalf("second enable: %q, notifications %v", r.text(), notes)
		}
	})
	t.Run("sessions with the same toolsets share one filter", func(t *testing.T) {
		callTool(t, s, "", other, "viewmux__enable_toolset", map[string]any{"toolset": "up/b"})
		callTool(t, s, "", sid, "viewmux__enable_toolset", map[string]any{"toolset": "up/b"})
		callTool(t, s, "", other, "viewmux__enable_toolset", map[string]any{"toolset": "up/a"})
		s.mu.Lock()
		a, b := s.sessions[sid].binding.Filter, s.sessions[other].binding.Filter
		s.mu.Unlock()
		if a != b {
			t.Fatalf("two sessions with up/a and up/b on hold distinct filters: %q, %q", a.Key(), b.Key())
		}
		if !slices.Equal(a.Enabled(), []string{"up/a", "up/b"}) {
			t.Fatalf("Enabled() = %q", a.Enabled())
		}
	})
	t.Run("own calls are audited", func(t *testing.T) {
		n := 0
		for _, r := range audited.records(t) {
			if r.Tool == "viewmux__enable_toolset" && r.Upstream == "viewmux" && r.Session == sid {
				n++
			}
		}
		if n < 3 {
			t.Fatalf("%d audit records of enable_toolset for the session", n)
		}
	})
	t.Run("a static profile has no own tools", func(t *testing.T) {
		st := openSession(t, s.Handler(), "?profile=static")
		if got := listTools(t, s, "", st); len(got) != 30 || slices.Contains(got, ownNames[0]) {
			t.Fatalf("static tools/list = %q", got)
		}
		if _, m := callTool(t, s, "", st, "viewmux__list_toolsets", map[string]any{}); m.Error == nil || m.Error.Code != -32601 {
			t.Fatalf("own tool on a static profile: %+v", m)
		}
	})
	t.Run("GitHub's all and default name no toolset: still dynamic", func(t *testing.T) {
		req := newRequest("?profile=dyn", "", initializeBody)
		req.Header.Set("X-MCP-Toolsets", "default")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		st := rec.Header().Get("Mcp-Session-Id")
		if st == "" {
			t.Fatalf("initialize with X-MCP-Toolsets: default: %d %s", rec.Code, rec.Body.String())
		}
		if got := listTools(t, s, "", st); !slices.Equal(got, initial) {
			t.Fatalf("tools/list = %q, want the initial view", got)
		}
	})
	t.Run("naming toolsets in the request turns dynamic off", func(t *testing.T) {
		st := openSession(t, s.Handler(), "?profile=dyn&toolsets=up/b")
		if got := listTools(t, s, "", st); !slices.Equal(got, toolRange(10, 19, 1)) {
			t.Fatalf("tools/list = %q", got)
		}
	})
	t.Run("a reload keeps the enabled toolsets that still exist", func(t *testing.T) {
		text := fmt.Sprintf("[upstreams.up]\nurl = %q\n%s", up.http.URL, strings.Replace(dynamicConfig, `b = ["tool_001*"]`, `c = ["tool_001*"]`, 1))
		cfg, err := configs.Parse("reload.toml", []byte(text), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		s.agg.Reload(context.Background(), cfg)
		want := slices.Concat(ownNames, toolRange(0, 9, 1), toolRange(20, 29, 1))
		if got := listTools(t, s, "", sid); !slices.Equal(got, want) {
			t.Fatalf("tools/list after reload = %q, want %q", got, want)
		}
	})
}

// TestDynamicToolsetsCeiling checks that a read-only dynamic profile lists
// only toolsets with a read-only tool, refuses one whose tools are all
// writes, and adds only the read-only tools of one that mixes both.
func TestDynamicToolsetsCeiling(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, dynamicConfig)
	sid := openSession(t, s.Handler(), "?profile=rodyn")
	if got := listTools(t, s, "", sid); !slices.Equal(got, slices.Concat(ownNames, toolRange(20, 28, 2))) {
		t.Fatalf("initial tools/list = %q", got)
	}
	_, m := callTool(t, s, "", sid, "viewmux__list_toolsets", map[string]any{})
	if r := resultOf(t, m); strings.Contains(r.text(), "up/odd") || !strings.Contains(r.text(), `"name":"up/a","description":"5 tools`) {
		t.Fatalf("list_toolsets: %q", r.text())
	}
	notes, m := callTool(t, s, "", sid, "viewmux__enable_toolset", map[string]any{"toolset": "up/odd"})
	if r := resultOf(t, m); !r.IsError || !strings.Contains(r.text(), `unknown toolset "up/odd"; valid toolsets: up/a, up/b`) || len(notes) != 0 {
		t.Fatalf("enable outside the ceiling: %q", r.text())
	}
	callTool(t, s, "", sid, "viewmux__enable_toolset", map[string]any{"toolset": "up/a"})
	if got := listTools(t, s, "", sid); !slices.Equal(got, slices.Concat(ownNames, toolRange(0, 8, 2), toolRange(20, 28, 2))) {
		t.Fatalf("tools/list after enabling up/a = %q", got)
	}
	if _, m := callTool(t, s, "", sid, "up__tool_0001", map[string]any{"query": "x"}); m.Error == nil || m.Error.Code != -32601 {
		t.Fatalf("a write tool of an enabled toolset under a read-only ceiling: %+v %s", m.Error, m.Result)
	}
}

// TestDynamicToolsetsOnStdio enables a toolset over stdio: the session's
// one writer sends list_changed, then the answer.
func TestDynamicToolsetsOnStdio(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, dynamicConfig)
	p := startStdio(t, s, context.Background(), "dyn")
	initializeAs(t, p, map[string]any{})
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if got := listedNames(t, rpc(t, p, 2, "tools/list", nil)); len(got) != 13 {
		t.Fatalf("initial tools/list = %q", got)
	}
	var seen []rpcMsg
	p.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"viewmux__enable_toolset","arguments":{"toolset":"up/b"}}}`)
	m := await(t, p, 3, &seen)
	if r := resultOf(t, m); r.IsError {
		t.Fatalf("enable: %q", r.text())
	}
	if len(seen) != 1 || seen[0].Method != "notifications/tools/list_changed" {
		t.Fatalf("before the answer: %+v", seen)
	}
	if got := listedNames(t, rpc(t, p, 4, "tools/list", nil)); !slices.Equal(got, slices.Concat(ownNames, toolRange(10, 29, 1))) {
		t.Fatalf("tools/list after enable = %q", got)
	}
}

// TestDynamicToolsetsStateless checks stateless (2026-07-28) requests to
// a dynamic profile: they are served the initial view, enable_toolset is a
// tool error pointing to Mcp-Toolsets, and a request naming toolsets gets
// those toolsets' tools without viewmux's own.
func TestDynamicToolsetsStateless(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, dynamicConfig)
	h := s.Handler()
	modern := func(query, method, name, params string) rpcMsg { return postModern(t, h, query, method, name, params) }
	if got := listedNames(t, modern("?profile=dyn", "tools/list", "", "")); !slices.Equal(got, append(slices.Clone(ownNames), toolRange(20, 29, 1)...)) {
		t.Fatalf("stateless tools/list = %q", got)
	}
	m := modern("?profile=dyn", "tools/call", "viewmux__enable_toolset", `"name":"viewmux__enable_toolset","arguments":{"toolset":"up/a"},`)
	if r := resultOf(t, m); !r.IsError || !strings.Contains(r.text(), "Mcp-Toolsets: up/a") {
		t.Fatalf("stateless enable_toolset: isError %v %q", r.IsError, r.text())
	}
	m = modern("?profile=dyn", "tools/call", "viewmux__list_toolsets", `"name":"viewmux__list_toolsets","arguments":{},`)
	if r := resultOf(t, m); r.IsError || !strings.Contains(r.text(), `"name":"up/a"`) {
		t.Fatalf("stateless list_toolsets: %q", r.text())
	}
	if got := listedNames(t, modern("?profile=dyn&toolsets=up/a", "tools/list", "", "")); !slices.Equal(got, toolRange(0, 9, 1)) {
		t.Fatalf("stateless tools/list naming up/a = %q", got)
	}
}

// TestDynamicToolsetsConcurrentEnable enables every toolset of one session
// at once while other requests list and call on it (run with -race): each
// enable lands, and the session ends with all of them on.
func TestDynamicToolsetsConcurrentEnable(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, dynamicConfig)
	sid := openSession(t, s.Handler(), "?profile=dyn")
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for _, ts := range []string{"up/a", "up/b", "up/odd", "up/a"} {
		wg.Go(func() {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"viewmux__enable_toolset","arguments":{"toolset":%q}}}`, ts)
			if rec := post(s.Handler(), "?profile=dyn", sid, body); rec.Code != 200 || strings.Contains(rec.Body.String(), `"isError":true`) {
				errs <- fmt.Sprintf("enable %s: %d %s", ts, rec.Code, rec.Body.String())
			}
		})
		wg.Go(func() {
			if rec := post(s.Handler(), "", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); rec.Code != 200 {
				errs <- fmt.Sprintf("tools/list: %d", rec.Code)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := listTools(t, s, "", sid); !slices.Equal(got, slices.Concat(ownNames, toolRange(0, 29, 1))) {
		t.Fatalf("tools/list after enabling every toolset = %q", got)
	}
}

// TestDynamicToolsetsHiddenLikeMissing checks that a toolset of an
// upstream the profile hides answers get_toolset_tools and enable_toolset
// exactly as a toolset that does not exist, without naming the hidden
// upstream's prefix.
func TestDynamicToolsetsHiddenLikeMissing(t *testing.T) {
	up := newUpstreamServer(t, 30)
	other := newUpstreamServer(t, 3)
	extra := fmt.Sprintf("[upstreams.secretive]\nurl = %q\nprefix = \"hush\"\n[upstreams.secretive.toolsets]\nadmin = [\"tool_*\"]\n%s\n[profiles.uponly]\nupstreams = [\"up\"]\ndynamic_toolsets = true\n",
		other.http.URL, dynamicConfig)
	s := newServerWith(t, up.http.URL, extra, Options{})
	sid := openSession(t, s.Handler(), "?profile=uponly")
	for _, tool := range []string{"viewmux__get_toolset_tools", "viewmux__enable_toolset"} {
		answer := func(name string) string {
			_, m := callTool(t, s, "", sid, tool, map[string]any{"toolset": name})
			r := resultOf(t, m)
			if !r.IsError {
				t.Fatalf("%s %q: not an error: %q", tool, name, r.text())
			}
			return strings.ReplaceAll(r.text(), name, "NAME")
		}
		hidden, missing := answer("secretive/admin"), answer("nosuch/admin")
		if hidden != missing || strings.Contains(hidden, "hush") {
			t.Fatalf("%s: a hidden toolset answers %q, a missing one %q", tool, hidden, missing)
		}
		if h, m := answer("hush/admin"), answer("nope/admin"); h != m {
			t.Fatalf("%s by prefix: a hidden toolset answers %q, a missing one %q", tool, h, m)
		}
	}
}

// TestDynamicToolsetsReloadWithoutProfile checks that a dynamic session
// whose profile a reload removed ends (docs/operations.md, Reload): it
// does not get the whole ceiling, nor keep a profile the config no longer
// has.
func TestDynamicToolsetsReloadWithoutProfile(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, dynamicConfig)
	sid := openSession(t, s.Handler(), "?profile=dyn")
	initial := append(slices.Clone(ownNames), toolRange(20, 29, 1)...)
	if got := listTools(t, s, "", sid); !slices.Equal(got, initial) {
		t.Fatalf("tools/list = %q, want %q", got, initial)
	}
	renamed := strings.Replace(dynamicConfig, "[profiles.dyn]", "[profiles.dyn2]", 1)
	renamed = strings.Replace(renamed, `extends = "dyn"`, `extends = "dyn2"`, 1)
	cfg, err := configs.Parse("reload.toml", []byte(fmt.Sprintf("[upstreams.up]\nurl = %q\n%s", up.http.URL, renamed)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	before := up.requests.Load()
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__tool_0005","arguments":{"query":"x"}}}`,
	} {
		if rec := post(s.Handler(), "", sid, body); rec.Code != http.StatusNotFound {
			t.Fatalf("%s on a session whose profile was removed: %d %s, want 404", body, rec.Code, rec.Body.String())
		}
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

// postModern posts a stateless 2026-07-28 request for method (params: its
// params' members before _meta, each followed by a comma) to h with the
// headers that era requires (Mcp-Name when name is set), and decodes the
// answer.
func postModern(t *testing.T, h http.Handler, query, method, name, params string) rpcMsg {
	t.Helper()
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":%q,"params":{%s%s}}`, method, params, meta)
	req := newRequest(query, "", body)
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var m rpcMsg
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("%s: %d %s", method, rec.Code, rec.Body.String())
	}
	return m
}
