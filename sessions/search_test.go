package sessions

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/sessions/status"
)

// searchConfig gives the one upstream "up" (30 tools, tool_0000 …
// tool_0029, the even ones read-only) profiles agent (tool_search, with
// tool_0000 pinned and a call rule on tool_0002), roagent (extends agent,
// read_only) and limited (tool_search, two calls a minute).
const searchConfig = `
[profiles.agent]
tool_search = true
tool_search_pinned = ["up__tool_0000"]
[[profiles.agent.call_rules]]
tool = "up__tool_0002"
args = { query = ["ok*"] }
other_args = true

[profiles.roagent]
extends = "agent"
read_only = true

[profiles.limited]
tool_search = true
rate = { calls_per_minute = 2 }
`

var searchOwn = []string{"viewmux__search_tools", "viewmux__call_tool"}

// foundTools decodes a search_tools result's structured content.
func foundTools(t *testing.T, m rpcMsg) []map[string]json.RawMessage {
	t.Helper()
	r := resultOf(t, m)
	var got struct {
		Tools []map[string]json.RawMessage `json:"tools"`
	}
	if r.IsError || json.Unmarshal(r.StructuredContent, &got) != nil {
		t.Fatalf("search_tools: isError %v, structuredContent %s, text %q", r.IsError, r.StructuredContent, r.text())
	}
	for _, tool := range got.Tools {
		var name string
		json.Unmarshal(tool["name"], &name)
		if !strings.Contains(r.text(), name) {
			t.Errorf("the text does not name %s: %q", name, r.text())
		}
	}
	return got.Tools
}

func foundNames(t *testing.T, m rpcMsg) []string {
	var out []string
	for _, tool := range foundTools(t, m) {
		var name string
		json.Unmarshal(tool["name"], &name)
		out = append(out, name)
	}
	return out
}

// listedTool returns the listing's definition of name, decoded.
func listedTool(t *testing.T, s *Server, sid, name string) map[string]json.RawMessage {
	t.Helper()
	ms := mcpAnswer(t, s, "", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	var res struct {
		Tools []map[string]json.RawMessage `json:"tools"`
	}
	json.Unmarshal(ms[len(ms)-1].Result, &res)
	for _, tool := range res.Tools {
		if string(tool["name"]) == `"`+name+`"` {
			return tool
		}
	}
	t.Fatalf("%s is not listed", name)
	return nil
}

func TestToolSearchOnMCP(t *testing.T) {
	up := newUpstreamServer(t, 30)
	audited := &syncBuf{}
	s := newServerWith(t, up.http.URL, searchConfig, Options{Audit: audited})
	sid := openSession(t, s.Handler(), "?profile=agent")
	other := openSession(t, s.Handler(), "?profile=agent")
	initial := append(slices.Clone(searchOwn), "up__tool_0000")

	t.Run("starting view: the two search tools and the pinned tool", func(t *testing.T) {
		if got := listTools(t, s, "", sid); !slices.Equal(got, initial) {
			t.Fatalf("tools/list = %q, want %q", got, initial)
		}
		search := listedTool(t, s, sid, "viewmux__search_tools")
		if !strings.Contains(string(search["annotations"]), `"readOnlyHint":true`) || len(search["inputSchema"]) == 0 {
			t.Errorf("search_tools: %s", mustMarshal(search))
		}
		// Half the tools write: call_tool is not read-only.
		relay := listedTool(t, s, sid, "viewmux__call_tool")
		if !strings.Contains(string(relay["annotations"]), `"readOnlyHint":false`) || !strings.Contains(string(relay["annotations"]), `"destructiveHint":true`) {
			t.Errorf("call_tool annotations: %s", relay["annotations"])
		}
	})
	t.Run("a tool not found yet is not callable directly", func(t *testing.T) {
		before := up.requests.Load()
		_, m := callTool(t, s, "", sid, "up__tool_0005", map[string]any{"query": "x"})
		if m.Error == nil || m.Error.Code != -32601 || up.requests.Load() != before {
			t.Fatalf("direct call of a tool not found yet: %+v %s", m.Error, m.Result)
		}
	})
	t.Run("search returns full definitions and adds them, with list_changed", func(t *testing.T) {
		notes, m := callTool(t, s, "", sid, "viewmux__search_tools", map[string]any{"query": "tool 0005"})
		tools := foundTools(t, m)
		if len(tools) != 5 || string(tools[0]["name"]) != `"up__tool_0005"` || len(tools[0]["inputSchema"]) == 0 ||
			len(tools[0]["description"]) == 0 || len(tools[0]["annotations"]) == 0 || tools[0]["_meta"] != nil {
			t.Fatalf("found %s", mustMarshal(tools))
		}
		if len(notes) != 1 || notes[0].Method != "notifications/tools/list_changed" {
			t.Fatalf("notifications before the answer: %+v", notes)
		}
		want := slices.Clone(initial)
		for _, tool := range tools {
			var name string
			json.Unmarshal(tool["name"], &name)
			if !slices.Contains(want, name) {
				want = append(want, name)
			}
		}
		slices.Sort(want[2:])
		if got := listTools(t, s, "", sid); !slices.Equal(got, want) {
			t.Fatalf("tools/list after the search = %q, want %q", got, want)
		}
		if _, m := callTool(t, s, "", sid, "up__tool_0005", map[string]any{"query": "x"}); resultOf(t, m).text() != "ok" {
			t.Fatalf("a found tool's direct call: %s", m.Result)
		}
	})
	t.Run("the other session is unaffected", func(t *testing.T) {
		if got := listTools(t, s, "", other); !slices.Equal(got, initial) {
			t.Fatalf("other session's tools/list = %q", got)
		}
	})
	t.Run("the same search again sends nothing; limit is honoured", func(t *testing.T) {
		notes, m := callTool(t, s, "", sid, "viewmux__search_tools", map[string]any{"query": "tool 0005", "limit": 2})
		if got := foundNames(t, m); len(got) != 2 || got[0] != "up__tool_0005" || len(notes) != 0 {
			t.Fatalf("found %q, notifications %v", got, notes)
		}
	})
	t.Run("call_tool calls a tool of the view that is not listed", func(t *testing.T) {
		before := up.requests.Load()
		_, m := callTool(t, s, "", other, "viewmux__call_tool", map[string]any{"name": "up__tool_0007", "arguments": map[string]any{"query": "x"}})
		if r := resultOf(t, m); r.IsError || r.text() != "ok" || up.requests.Load() != before+1 {
			t.Fatalf("call_tool: %q (isError %v)", r.text(), r.IsError)
		}
		if got := listTools(t, s, "", other); !slices.Equal(got, initial) {
			t.Fatalf("call_tool changed the listing: %q", got)
		}
	})
	t.Run("call_tool goes through the call rules", func(t *testing.T) {
		before := up.requests.Load()
		_, m := callTool(t, s, "", other, "viewmux__call_tool", map[string]any{"name": "up__tool_0002", "arguments": map[string]any{"query": "no"}})
		if m.Error == nil || m.Error.Code != -32602 || m.Error.Message != "Arguments not allowed for up__tool_0002" || up.requests.Load() != before {
			t.Fatalf("call_tool past a call rule: %+v %s", m.Error, m.Result)
		}
		_, m = callTool(t, s, "", other, "viewmux__call_tool", map[string]any{"name": "up__tool_0002", "arguments": map[string]any{"query": "okay"}})
		if r := resultOf(t, m); r.text() != "ok" {
			t.Fatalf("call_tool within the call rule: %q", r.text())
		}
	})
	t.Run("call_tool refuses what a direct call refuses: ambiguous arguments", func(t *testing.T) {
		before := up.requests.Load()
		body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"viewmux__call_tool","arguments":{"name":"up__tool_0002","arguments":{"query":"okay","Query":"no"}}}}`
		ms := mcpAnswer(t, s, "", other, body)
		if m := ms[len(ms)-1]; m.Error == nil || m.Error.Code != -32602 || up.requests.Load() != before {
			t.Fatalf("case-folded duplicate keys through call_tool: %+v %s", m.Error, m.Result)
		}
	})
	t.Run("bad arguments are tool errors naming the argument", func(t *testing.T) {
		for _, tc := range []struct {
			tool string
			args any
			want string
		}{
			{"viewmux__call_tool", map[string]any{}, "the argument name"},
			{"viewmux__call_tool", map[string]any{"name": 3}, "the argument name"},
			{"viewmux__call_tool", map[string]any{"name": "up__tool_0007", "arguments": []int{1}}, "the argument arguments must be an object"},
			{"viewmux__call_tool", map[string]any{"name": "up__tool_0007", "extra": 1}, `unknown argument "extra"`},
			{"viewmux__search_tools", map[string]any{}, "the argument query"},
			{"viewmux__search_tools", map[string]any{"query": "  "}, "the argument query"},
			{"viewmux__search_tools", map[string]any{"query": "x", "limit": 21}, "the argument limit must be an integer from 1 to 20"},
			{"viewmux__search_tools", map[string]any{"query": "x", "limit": 0}, "the argument limit"},
			{"viewmux__search_tools", map[string]any{"query": "x", "limit": 2.5}, "the argument limit"},
			{"viewmux__search_tools", map[string]any{"query": "x", "limit": "3"}, "the argument limit"},
			{"viewmux__search_tools", map[string]any{"query": strings.Repeat("x", 2000)}, "the argument query is 2000 bytes"},
			{"viewmux__search_tools", map[string]any{"query": "x", "q": 1}, `unknown argument "q"`},
		} {
			before := up.requests.Load()
			_, m := callTool(t, s, "", other, tc.tool, tc.args)
			if r := resultOf(t, m); !r.IsError || !strings.Contains(r.text(), tc.want) || up.requests.Load() != before {
				t.Errorf("%s %s: isError %v %q, want %q", tc.tool, mustMarshal(tc.args), r.IsError, r.text(), tc.want)
			}
		}
	})
	t.Run("sessions that found the same tools share one filter", func(t *testing.T) {
		callTool(t, s, "", other, "viewmux__search_tools", map[string]any{"query": "tool 0005"})
		s.mu.Lock()
		a, b := s.sessions[sid].binding.Filter, s.sessions[other].binding.Filter
		s.mu.Unlock()
		if a != b || len(a.Found()) == 0 {
			t.Fatalf("filters %q and %q", a.Key(), b.Key())
		}
	})
	t.Run("relayed calls are audited as the tool they call", func(t *testing.T) {
		found := false
		for _, r := range audited.records(t) {
			if r.Tool == "up__tool_0007" && r.Upstream == "up" && r.Session == other && r.Decision == "allowed" {
				found = true
			}
			if r.Tool == "viewmux__call_tool" && r.Reason != "tool_error" {
				t.Errorf("call_tool audited itself: %+v", r)
			}
		}
		if !found {
			t.Error("no audit record of the relayed call of up__tool_0007")
		}
	})
}

// TestToolSearchHiddenTools checks that under a read-only ceiling the
// tools that write are never found and never callable through call_tool,
// by any spelling of their names, and that nothing reaches the upstream;
// and that call_tool is read-only there.
func TestToolSearchHiddenTools(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, searchConfig)
	sid := openSession(t, s.Handler(), "?profile=roagent")
	relay := listedTool(t, s, sid, "viewmux__call_tool")
	if !strings.Contains(string(relay["annotations"]), `"readOnlyHint":true`) {
		t.Errorf("call_tool over a read-only view: %s", relay["annotations"])
	}
	_, m := callTool(t, s, "", sid, "viewmux__search_tools", map[string]any{"query": "tool 0001 0003 0005 0007", "limit": 20})
	for _, name := range foundNames(t, m) {
		var n int
		fmt.Sscanf(name, "up__tool_%d", &n)
		if n%2 == 1 {
			t.Errorf("search found hidden %s", name)
		}
	}
	before := up.requests.Load()
	for _, name := range []string{
		"up__tool_0001", "UP__TOOL_0001", "Up__Tool_0001", "up_tool_0001", "up-tool_0001", "up--tool_0001", "up__tool-0001",
		"up.tool_0001", "up/tool_0001", "tool_0001", "up__tool_0001 ", " up__tool_0001", "up__tool_0001\x00",
		"up__tool_０００１", "up\u200b__tool_0001", "uр__tool_0001", "up__tooI_0001", "up＿＿tool_0001",
		"viewmux__call_tool", "viewmux__search_tools",
	} {
		_, m := callTool(t, s, "", sid, "viewmux__call_tool", map[string]any{"name": name, "arguments": map[string]any{"query": "x"}})
		if m.Error == nil || m.Error.Code != -32601 || !strings.HasPrefix(m.Error.Message, "Tool not found: ") {
			t.Errorf("call_tool %q: %+v %s", name, m.Error, m.Result)
		}
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("hidden tools reached the upstream %d times", n)
	}
}

// TestToolSearchRateCountsOnce checks that a call through call_tool
// counts once against the profile's rate, as the call it relays.
func TestToolSearchRateCountsOnce(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, searchConfig)
	sid := openSession(t, s.Handler(), "?profile=limited")
	for i := range 2 {
		_, m := callTool(t, s, "", sid, "viewmux__call_tool", map[string]any{"name": "up__tool_0004", "arguments": map[string]any{"query": "x"}})
		if r := resultOf(t, m); r.text() != "ok" {
			t.Fatalf("call %d: %q", i, r.text())
		}
	}
	before := up.requests.Load()
	_, m := callTool(t, s, "", sid, "viewmux__call_tool", map[string]any{"name": "up__tool_0004", "arguments": map[string]any{"query": "x"}})
	if m.Error == nil || m.Error.Code != rateLimited || up.requests.Load() != before {
		t.Fatalf("third call in a minute of two: %+v %s", m.Error, m.Result)
	}
}

// TestToolSearchStateless checks stateless (2026-07-28) requests: they get
// the starting view, search finds tools without remembering them, and
// call_tool calls them.
func TestToolSearchStateless(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, searchConfig)
	h := s.Handler()
	modern := func(method, name, params string) rpcMsg {
		return postModern(t, h, "?profile=agent", method, name, params)
	}
	initial := append(slices.Clone(searchOwn), "up__tool_0000")
	if got := listedNames(t, modern("tools/list", "", "")); !slices.Equal(got, initial) {
		t.Fatalf("stateless tools/list = %q", got)
	}
	m := modern("tools/call", "viewmux__search_tools", `"name":"viewmux__search_tools","arguments":{"query":"tool 0009"},`)
	if got := foundNames(t, m); len(got) == 0 || got[0] != "up__tool_0009" || !strings.Contains(resultOf(t, m).text(), "call them with viewmux__call_tool") {
		t.Fatalf("stateless search: %q", got)
	}
	if got := listedNames(t, modern("tools/list", "", "")); !slices.Equal(got, initial) {
		t.Fatalf("a stateless search was remembered: %q", got)
	}
	m = modern("tools/call", "viewmux__call_tool", `"name":"viewmux__call_tool","arguments":{"name":"up__tool_0009","arguments":{"query":"x"}},`)
	if r := resultOf(t, m); r.IsError || r.text() != "ok" {
		t.Fatalf("stateless call_tool: %q", r.text())
	}
}

// TestToolSearchConcurrent searches and relays on one session from many
// goroutines (run with -race): every search lands in the session's view.
func TestToolSearchConcurrent(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, searchConfig)
	sid := openSession(t, s.Handler(), "?profile=agent")
	var wg sync.WaitGroup
	// 14 calls at once: under the 16 a session may have in flight.
	for i := 10; i < 17; i++ {
		wg.Go(func() {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"viewmux__search_tools","arguments":{"query":"tool_%04d","limit":1}}}`, i)
			if rec := post(s.Handler(), "", sid, body); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"structuredContent"`) {
				t.Errorf("search %d: %d %s", i, rec.Code, rec.Body.String())
			}
		})
		wg.Go(func() {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"viewmux__call_tool","arguments":{"name":"up__tool_%04d","arguments":{"query":"x"}}}}`, i)
			if rec := post(s.Handler(), "", sid, body); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"ok"`) {
				t.Errorf("call_tool %d: %d %s", i, rec.Code, rec.Body.String())
			}
		})
	}
	wg.Wait()
	got := listTools(t, s, "", sid)
	if want := append(append(slices.Clone(searchOwn), "up__tool_0000"), toolRange(10, 16, 1)...); !slices.Equal(got, want) {
		t.Fatalf("tools/list = %q, want %q", got, want)
	}
}

// TestToolSearchStatusAndNarrowing checks that the status page shows a
// tool_search profile's starting view, and that a request choosing tools
// itself gets that narrowing without the search tools.
func TestToolSearchStatusAndNarrowing(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, searchConfig)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	_, body := fetchStatus(t, hs, "GET", "/status.json", nil)
	var st struct {
		Profiles []status.ProfileRow `json:"profiles"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("status.json: %v", err)
	}
	for _, row := range st.Profiles {
		switch row.Name {
		case "agent", "roagent":
			if !row.Search || row.Dynamic || row.InitialTools != 3 || row.InitialTokens <= 0 || row.InitialTokens >= row.Tokens {
				t.Errorf("profile %s: %+v", row.Name, row)
			}
		case "limited":
			if !row.Search || row.InitialTools != 2 {
				t.Errorf("profile limited: %+v", row)
			}
		}
	}
	_, page := fetchStatus(t, hs, "GET", "/", nil)
	if !strings.Contains(page, "tool search: a session starts with 3 tools, ~") {
		t.Errorf("the status page does not show agent's starting view:\n%s", page)
	}
	sid := openSession(t, s.Handler(), "?profile=agent&tools=up__tool_0004,up__tool_0006")
	if got := listTools(t, s, "", sid); !slices.Equal(got, []string{"up__tool_0004", "up__tool_0006"}) {
		t.Errorf("a session that named its tools lists %q", got)
	}
}

// TestToolSearchReload checks that a session keeps what it found across a
// reload, within its rules as the reload narrows them, and is told
// list_changed when that changed its view.
func TestToolSearchReload(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, searchConfig)
	sid := openSession(t, s.Handler(), "?profile=agent")
	callTool(t, s, "", sid, "viewmux__search_tools", map[string]any{"query": "tool_0004 tool_0005", "limit": 2})
	want := append(slices.Clone(searchOwn), "up__tool_0000", "up__tool_0004", "up__tool_0005")
	if got := listTools(t, s, "", sid); !slices.Equal(got, want) {
		t.Fatalf("tools/list after the search = %q, want %q", got, want)
	}
	// The reload makes agent read-only: tool_0005 writes.
	reloadWith(t, s, up, strings.Replace(searchConfig, "tool_search_pinned", "read_only = true\ntool_search_pinned", 1))
	want = append(slices.Clone(searchOwn), "up__tool_0000", "up__tool_0004")
	if got := listTools(t, s, "", sid); !slices.Equal(got, want) {
		t.Fatalf("tools/list after the reload = %q, want %q", got, want)
	}
	_, m := callTool(t, s, "", sid, "viewmux__call_tool", map[string]any{"name": "up__tool_0005", "arguments": map[string]any{"query": "x"}})
	if m.Error == nil || m.Error.Code != -32601 {
		t.Fatalf("call_tool of a tool the reload hid: %+v %s", m.Error, m.Result)
	}
}

// BenchmarkSearchTools10k measures viewmux__search_tools over a view of
// 10,000 tools through viewmux's HTTP handler, in-process: stateless
// (2026-07-28, nothing added), in a session (the found tools are added; the
// queries repeat, so after the first round the session's filter stops
// changing), and, as the baseline, the search of the view's index alone.
// The first search of a view builds its index; it is made before timing.
func BenchmarkSearchTools10k(b *testing.B) {
	up := newUpstreamServer(b, 10000)
	s := newBenchServer(b, up.http.URL, searchConfig)
	h := s.Handler()
	queries := make([]string, 20)
	for i := range queries {
		queries[i] = fmt.Sprintf("tool %04d small thing", i*497)
	}
	search := func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"viewmux__search_tools","arguments":{"query":%q}%%s}}`, queries[i%len(queries)])
	}
	meta := `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	sid := openSession(b, h, "?profile=agent")
	if rec := post(h, "", sid, fmt.Sprintf(search(0), "")); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"structuredContent"`) {
		b.Fatalf("search: %d %.300s", rec.Code, rec.Body.String())
	}
	b.Run("index", func(b *testing.B) {
		v := s.ceilingView(s.effective(mustBinding(b, s, "agent")))
		i := 0
		timeEach(b, func() {
			if len(v.Search(queries[i%len(queries)], 5)) != 5 {
				b.Fatal("fewer than 5 hits")
			}
			i++
		})
	})
	b.Run("stateless", func(b *testing.B) {
		i := 0
		timeEach(b, func() {
			req := newRequest("?profile=agent", "", fmt.Sprintf(search(i), meta))
			req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
			req.Header.Set("Mcp-Method", "tools/call")
			req.Header.Set("Mcp-Name", "viewmux__search_tools")
			w := &sink{header: make(http.Header), code: http.StatusOK}
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK || w.n < 1000 {
				b.Fatalf("stateless search: %d %s", w.code, w.head)
			}
			i++
		})
	})
	b.Run("session", func(b *testing.B) {
		i := 0
		timeEach(b, func() {
			// A recorder, not a sink: the answer may be an event stream
			// (list_changed first), which needs a Flusher.
			if rec := post(h, "", sid, fmt.Sprintf(search(i), "")); rec.Code != http.StatusOK || rec.Body.Len() < 1000 {
				b.Fatalf("search: %d %.300s", rec.Code, rec.Body.String())
			}
			i++
		})
	})
}

// mustBinding resolves profile as a request naming it would.
func mustBinding(tb testing.TB, s *Server, profile string) grant.Binding {
	tb.Helper()
	b, err := s.Resolver().ResolveLocal(grant.Selection{Profile: profile})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestToolSearchOverrides checks that search and call_tool see the
// catalog as overrides left it: the overridden name and description are
// what is found, and call_tool goes through the fixed arguments' check
// like a direct call (a client's own value for one is refused, nothing
// forwarded).
func TestToolSearchOverrides(t *testing.T) {
	up := newUpstreamServer(t, 30)
	s := newBenchServer(t, up.http.URL, `
[upstreams.up.overrides.tool_0004]
name = "renamed_tool"
description = "Translate a sentence into Klingon."
args = { limit = 7 }
`+searchConfig)
	sid := openSession(t, s.Handler(), "?profile=agent")
	_, m := callTool(t, s, "", sid, "viewmux__search_tools", map[string]any{"query": "klingon translation", "limit": 1})
	tools := foundTools(t, m)
	if len(tools) != 1 || string(tools[0]["name"]) != `"up__renamed_tool"` || strings.Contains(string(tools[0]["inputSchema"]), "limit") {
		t.Fatalf("found %s", mustMarshal(tools))
	}
	before := up.requests.Load()
	_, m = callTool(t, s, "", sid, "viewmux__call_tool", map[string]any{"name": "up__renamed_tool", "arguments": map[string]any{"query": "x", "limit": 1}})
	if m.Error == nil || m.Error.Code != -32602 || up.requests.Load() != before {
		t.Fatalf("call_tool sending a fixed argument: %+v %s", m.Error, m.Result)
	}
	_, m = callTool(t, s, "", sid, "viewmux__call_tool", map[string]any{"name": "up__renamed_tool", "arguments": map[string]any{"query": "x"}})
	if r := resultOf(t, m); r.IsError || r.text() != "ok" || up.requests.Load() != before+1 {
		t.Fatalf("call_tool of an overridden tool: %q", r.text())
	}
	_, m = callTool(t, s, "", sid, "viewmux__call_tool", map[string]any{"name": "up__tool_0004", "arguments": map[string]any{"query": "x"}})
	if m.Error == nil || m.Error.Code != -32601 {
		t.Fatalf("call_tool by the upstream's own name: %+v %s", m.Error, m.Result)
	}
}
