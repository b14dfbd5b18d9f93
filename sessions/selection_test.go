package sessions

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/sessions/grant"
)

// The selection a request makes by path and by GitHub's X-MCP-* headers: how
// it is read, that it means what the equivalent profile or Mcp-* narrowing
// means, and that it can never widen a view.

// selectionConfig is one upstream of six tools (up__tool_0000..0005, the
// even ones read-only) with two toolsets, and profiles.
const selectionConfig = `
[upstreams.up.toolsets]
low = ["tool_0000", "tool_0001", "tool_0002"]
odd = ["tool_0001", "tool_0003", "tool_0005"]

[profiles.readonly]
read_only = true
[profiles.all]
[profiles.low]
toolsets = ["up/low"]

[[auth.tokens]]
token = "tok-ro"
profiles = ["readonly"]
[[auth.tokens]]
token = "tok-all"
profiles = ["all", "readonly", "low"]
admin = true # sees all of /metrics (TestSelectionPathsAreNoLabels)
`

// selReq builds a POST of body to target with headers.
func selReq(target, session, body string, hdr map[string]string) *http.Request {
	req := newRequest("", session, body)
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = "", "", ""
	u, err := req.URL.Parse(target)
	if err != nil {
		panic(err)
	}
	req.URL, req.RequestURI = u, u.RequestURI()
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

// listVia initializes a session at target with hdr and lists its tools; on
// a refused initialize it returns the status and body.
func listVia(t *testing.T, h http.Handler, target string, hdr map[string]string) (int, []string, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, selReq(target, "", initializeBody, hdr))
	sid := rec.Header().Get(mcp.HeaderSessionID)
	if rec.Code != http.StatusOK || sid == "" {
		return rec.Code, nil, rec.Body.String(), ""
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, selReq(target, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, hdr))
	var resp struct {
		Result struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("tools/list at %s: %d %s", target, rec.Code, rec.Body.String())
	}
	names := []string{}
	for _, tl := range resp.Result.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return rec.Code, names, rec.Body.String(), sid
}

// tools returns up__tool_000N for each n.
func tools(ns ...int) []string {
	out := []string{}
	for _, n := range ns {
		out = append(out, fmt.Sprintf("up__tool_%04d", n))
	}
	return out
}

func TestSelectionViews(t *testing.T) {
	up := newUpstreamServer(t, 6)
	s := newBenchServer(t, up.http.URL, selectionConfig)
	h := s.Handler()
	all := map[string]string{"Authorization": "Bearer tok-all"}
	ro := map[string]string{"Authorization": "Bearer tok-ro"}
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name   string
		target string
		hdr    map[string]string
		status int
		want   []string
		equiv  string // the same view by ?query (Mcp-* form), compared too
		body   string // substring of the error body
	}{
		{"no narrowing", "/mcp", all, 200, tools(0, 1, 2, 3, 4, 5), "", ""},
		{"GitHub's /mcp/", "/mcp/", all, 200, tools(0, 1, 2, 3, 4, 5), "", ""},
		{"/mcp/readonly", "/mcp/readonly", all, 200, tools(0, 2, 4), "?read_only=true", ""},
		{"/mcp/x/up/odd", "/mcp/x/up/odd", all, 200, tools(1, 3, 5), "?toolsets=up/odd", ""},
		{"/mcp/x/up/low/readonly", "/mcp/x/up/low/readonly", all, 200, tools(0, 2), "?toolsets=up/low&read_only=true", ""},
		{"/mcp/x/ list", "/mcp/x/up%2Flow,up/odd", all, 200, tools(0, 1, 2, 3, 5), "?toolsets=up/low,up/odd", ""},
		{"/mcp/x/up", "/mcp/x/up", all, 200, tools(0, 1, 2, 3, 4, 5), "?toolsets=up", ""},
		{"/mcp/x/all", "/mcp/x/all", all, 200, tools(0, 1, 2, 3, 4, 5), "", ""},
		{"/mcp/x/all/readonly", "/mcp/x/all/readonly", all, 200, tools(0, 2, 4), "?read_only=true", ""},
		{"/mcp/x/default,up/odd", "/mcp/x/default,up/odd", all, 200, tools(0, 1, 2, 3, 4, 5), "", ""},
		{"/mcp/p/readonly", "/mcp/p/readonly", all, 200, tools(0, 2, 4), "?profile=readonly", ""},
		{"/mcp/p/low/x/up/odd", "/mcp/p/low/x/up/odd", all, 200, tools(1), "?profile=low&toolsets=up/odd", ""},
		{"/mcp/p/all/x/up/low/readonly", "/mcp/p/all/x/up/low/readonly", all, 200, tools(0, 2), "?profile=all&toolsets=up/low&read_only=true", ""},
		{"X-MCP-Toolsets", "/mcp", with(all, "X-MCP-Toolsets", "up/low"), 200, tools(0, 1, 2), "?toolsets=up/low", ""},
		{"X-MCP-Readonly", "/mcp", with(all, "X-MCP-Readonly", "true"), 200, tools(0, 2, 4), "?read_only=true", ""},
		{"X-MCP-Readonly false", "/mcp", with(all, "X-MCP-Readonly", "false"), 200, tools(0, 1, 2, 3, 4, 5), "", ""},
		{"X-MCP-Tools", "/mcp", with(all, "X-MCP-Tools", "up__tool_0001,up__tool_0004"), 200, tools(1, 4), "?tools=up__tool_0001,up__tool_0004", ""},
		{"X-MCP-Tools and X-MCP-Toolsets add up", "/mcp", with(all, "X-MCP-Toolsets", "up/low", "X-MCP-Tools", "up__tool_0005"), 200, tools(0, 1, 2, 5), "?toolsets=up/low&tools=up__tool_0005", ""},
		{"X-MCP-Exclude-Tools", "/mcp", with(all, "X-MCP-Exclude-Tools", "up__tool_0001,up__tool_0004"), 200, tools(0, 2, 3, 5), "", ""},
		{"X-MCP-Exclude-Tools names, not globs", "/mcp", with(all, "X-MCP-Exclude-Tools", "up__tool_000*,up__tool_000?,up__tool_000[0-5]"), 200, tools(0, 1, 2, 3, 4, 5), "", ""},
		{"X-MCP-* all together", "/mcp", with(all, "X-MCP-Toolsets", "up/low", "X-MCP-Readonly", "1", "X-MCP-Exclude-Tools", "up__tool_0002"), 200, tools(0), "", ""},
		{"Mcp-Toolsets and X-MCP-Toolsets intersect", "/mcp", with(all, "Mcp-Toolsets", "up/low", "X-MCP-Toolsets", "up/odd"), 200, tools(1), "", ""},
		{"X-MCP-Readonly false cannot undo Mcp-Read-Only", "/mcp", with(all, "Mcp-Read-Only", "true", "X-MCP-Readonly", "false"), 200, tools(0, 2, 4), "", ""},
		{"X-MCP-Readonly false cannot undo /readonly", "/mcp/readonly", with(all, "X-MCP-Readonly", "false"), 200, tools(0, 2, 4), "", ""},
		{"Mcp-Toolsets cannot undo the path", "/mcp/x/up/low", with(all, "Mcp-Toolsets", "up"), 200, tools(0, 1, 2), "", ""},
		{"?toolsets cannot undo the path", "/mcp/x/up/odd?toolsets=up", all, 200, tools(1, 3, 5), "", ""},
		{"header profile beats the path's", "/mcp/p/all", with(all, "Mcp-Profile", "readonly"), 200, tools(0, 2, 4), "", ""},
		{"path profile beats the query's", "/mcp/p/all?profile=readonly", all, 200, tools(0, 1, 2, 3, 4, 5), "", ""},
		{"unknown toolset in X-MCP-Toolsets", "/mcp", with(all, "X-MCP-Toolsets", "repos"), 400, nil, "", `unknown toolset \"repos\"`},
		{"unknown toolset in the path", "/mcp/x/up/nope", all, 400, nil, "", `unknown toolset \"up/nope\"`},
		{"a toolset named readonly", "/mcp/x/readonly", all, 400, nil, "", `unknown toolset \"readonly\"`},
		{"unknown profile in the path", "/mcp/p/nope", all, 404, nil, "", "known: all, low, readonly"},
		{"unknown path", "/mcp/nope", all, 404, nil, "", "/mcp/x/{toolsets}"},
		{"unknown path before auth", "/mcp/nope", nil, 404, nil, "", "unknown path"},
		{"path without a token", "/mcp/readonly", nil, 401, nil, "", "missing or invalid bearer token"},

		// A token bound to readonly can narrow, never widen.
		{"tok-ro", "/mcp", ro, 200, tools(0, 2, 4), "", ""},
		{"tok-ro /mcp/p/all", "/mcp/p/all", ro, 403, nil, "", `\"all\" (allowed: readonly)`},
		{"tok-ro /mcp/p/low/readonly", "/mcp/p/low/readonly", ro, 403, nil, "", "allowed: readonly"},
		{"tok-ro Mcp-Profile all over /mcp/p/readonly", "/mcp/p/readonly", with(ro, "Mcp-Profile", "all"), 403, nil, "", "allowed: readonly"},
		{"tok-ro /mcp/p/readonly", "/mcp/p/readonly", ro, 200, tools(0, 2, 4), "", ""},
		{"tok-ro X-MCP-Readonly false", "/mcp", with(ro, "X-MCP-Readonly", "false"), 200, tools(0, 2, 4), "", ""},
		{"tok-ro X-MCP-Toolsets everything", "/mcp", with(ro, "X-MCP-Toolsets", "up,up/low,up/odd,all"), 200, tools(0, 2, 4), "", ""},
		{"tok-ro X-MCP-Tools a hidden tool", "/mcp", with(ro, "X-MCP-Tools", "up__tool_0001,up__tool_0002"), 200, tools(2), "", ""},
		{"tok-ro /mcp/x/all", "/mcp/x/all", ro, 200, tools(0, 2, 4), "", ""},
		{"tok-ro /mcp/x/up/odd", "/mcp/x/up/odd", ro, 200, []string{}, "", ""},
		{"tok-ro /mcp/x/up", "/mcp/x/up", ro, 200, tools(0, 2, 4), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, got, body, _ := listVia(t, h, tt.target, tt.hdr)
			if code != tt.status {
				t.Fatalf("initialize at %s (headers %v): %d, want %d: %s", tt.target, tt.hdr, code, tt.status, body)
			}
			if code != 200 {
				var e struct {
					Error struct {
						Code    int
						Message string
					}
				}
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == 0 || !strings.Contains(body, tt.body) {
					t.Fatalf("error body %s: want a JSON-RPC error containing %q (%v)", body, tt.body, err)
				}
				return
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("tools = %q, want %q", got, tt.want)
			}
			if tt.equiv == "" {
				return
			}
			_, eq, _, _ := listVia(t, h, "/mcp"+tt.equiv, all)
			if !slices.Equal(eq, got) {
				t.Fatalf("the Mcp-* form %s lists %q, this form %q", tt.equiv, eq, got)
			}
		})
	}
}

// TestSelectionSharesFilters: a path or X-MCP-* narrowing has the same
// filter key as the Mcp-* narrowing it stands for, so it shares that
// narrowing's filter and view.
func TestSelectionSharesFilters(t *testing.T) {
	up := newUpstreamServer(t, 6)
	s := newBenchServer(t, up.http.URL, selectionConfig)
	key := func(target string, hdr map[string]string) string {
		t.Helper()
		sel, err := grant.SelectionFromRequest(selReq(target, "", "", hdr))
		if err != nil {
			t.Fatal(err)
		}
		sel.Token, sel.HasToken = "tok-all", true
		_, k, err := s.Resolver().Probe(sel)
		if err != nil {
			t.Fatalf("%s %v: %v", target, hdr, err)
		}
		return k
	}
	for _, group := range [][]struct {
		target string
		hdr    map[string]string
	}{
		{{"/mcp?toolsets=up/low&read_only=true", nil}, {"/mcp/x/up/low/readonly", nil}, {"/sse/x/up/low/readonly", nil},
			{"/mcp", map[string]string{"X-MCP-Toolsets": "up/low", "X-MCP-Readonly": "true"}},
			{"/mcp", map[string]string{"Mcp-Toolsets": "up/low", "Mcp-Read-Only": "true"}}},
		{{"/mcp/p/readonly", nil}, {"/mcp?profile=readonly", nil}, {"/ws/p/readonly", nil}},
		{{"/mcp/x/all", nil}, {"/mcp", nil}, {"/mcp", map[string]string{"X-MCP-Toolsets": "default"}}},
	} {
		want := key(group[0].target, group[0].hdr)
		for _, c := range group[1:] {
			if got := key(c.target, c.hdr); got != want {
				t.Errorf("%s %v: key %q, want %q (as %s)", c.target, c.hdr, got, want, group[0].target)
			}
		}
	}
}

// TestBoundSessionPathNarrowing: a session opened under a path narrowing
// keeps it; a later request on it that narrows otherwise, by path or
// header, is refused, and one that says nothing gets the bound view.
func TestBoundSessionPathNarrowing(t *testing.T) {
	up := newUpstreamServer(t, 6)
	s := newBenchServer(t, up.http.URL, selectionConfig)
	h := s.Handler()
	all := map[string]string{"Authorization": "Bearer tok-all"}
	_, got, _, sid := listVia(t, h, "/mcp/x/up/low", all)
	if !slices.Equal(got, tools(0, 1, 2)) {
		t.Fatalf("tools = %q", got)
	}
	list := `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`
	before := up.requests.Load()
	for _, c := range []struct {
		target string
		hdr    map[string]string
		status int
	}{
		{"/mcp/x/up/low", all, 200},
		{"/mcp/x/up/low/", all, 200},
		{"/mcp", all, 200},
		{"/mcp/readonly", all, 400},
		{"/mcp/x/up/odd", all, 400},
		{"/mcp/x/up", all, 400},
		{"/mcp/p/readonly", all, 400},
		{"/mcp/x/up/low", map[string]string{"Authorization": "Bearer tok-all", "X-MCP-Readonly": "true"}, 400},
		{"/mcp/x/up/low", map[string]string{"Authorization": "Bearer tok-all", "X-MCP-Exclude-Tools": "up__tool_0001"}, 400},
		{"/mcp/x/up/low", map[string]string{"Authorization": "Bearer tok-ro"}, 404},
		{"/mcp/nope", all, 404},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, selReq(c.target, sid, list, c.hdr))
		if rec.Code != c.status {
			t.Errorf("%s %v on the session: %d, want %d: %s", c.target, c.hdr, rec.Code, c.status, rec.Body.String())
			continue
		}
		if c.status == 200 && (!strings.Contains(rec.Body.String(), "up__tool_0002") || strings.Contains(rec.Body.String(), "up__tool_0003")) {
			t.Errorf("%s on the session lists %s, want the bound view", c.target, rec.Body.String())
		}
		if c.status == 400 && !strings.Contains(rec.Body.String(), "start a new session") {
			t.Errorf("%s: %s", c.target, rec.Body.String())
		}
	}
	// A hidden tool is refused at the gate: nothing reaches the upstream.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, selReq("/mcp/x/up/low", sid, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"up__tool_0003","arguments":{"query":"x"}}}`, all))
	if !strings.Contains(rec.Body.String(), `"code":-32601`) || !strings.Contains(rec.Body.String(), "Tool not found: up__tool_0003") {
		t.Fatalf("a call outside the path's view: %s", rec.Body.String())
	}
	if n := up.requests.Load(); n != before {
		t.Fatalf("the upstream got %d requests from refused or listed ones", n-before)
	}
}

// TestStreamDoorPaths: /sse and /ws take the path forms at connect; the
// SSE endpoint stays /message, which keeps the stream's view.
func TestStreamDoorPaths(t *testing.T) {
	up := newUpstreamServer(t, 6)
	s := newBenchServer(t, up.http.URL, selectionConfig)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	auth := http.Header{"Authorization": {"Bearer tok-all"}}

	p := mustOpenSSE(t, hs, "/x/up/low/readonly", auth)
	initializeAs(t, p, nil)
	if got := toolNames(t, p, 2); !slices.Equal(got, tools(0, 2)) {
		t.Errorf("/sse/x/up/low/readonly lists %q", got)
	}
	if m := rpc(t, p, 3, "tools/call", map[string]any{"name": "up__tool_0001", "arguments": map[string]any{"query": "x"}}); m.Error == nil || m.Error.Code != -32601 {
		t.Errorf("a call outside the view on /sse: %+v", m)
	}
	// A POST naming another narrowing is refused; one naming none works.
	if code, body := p.post(t, p.endpoint, `{"jsonrpc":"2.0","id":4,"method":"ping"}`, http.Header{"Authorization": {"Bearer tok-all"}, "X-Mcp-Readonly": {"false"}}); code != http.StatusAccepted {
		t.Errorf("POST with X-MCP-Readonly false (narrows nothing): %d %s", code, body)
	}
	if code, body := p.post(t, p.endpoint, `{"jsonrpc":"2.0","id":5,"method":"ping"}`, http.Header{"Authorization": {"Bearer tok-all"}, "X-Mcp-Toolsets": {"up"}}); code != http.StatusBadRequest {
		t.Errorf("POST with another narrowing: %d %s, want 400", code, body)
	}

	// A stream opened with a path or query and headers: its client sends
	// the same headers with every POST to /message, whose URL has neither
	// the path nor the query. Those POSTs are the stream's own.
	for _, open := range []struct {
		target string
		hdr    http.Header
	}{
		{"/x/up/low", http.Header{"Authorization": {"Bearer tok-all"}, "X-Mcp-Readonly": {"true"}}},
		{"?toolsets=up/low", http.Header{"Authorization": {"Bearer tok-all"}, "Mcp-Read-Only": {"true"}}},
		{"/p/all/readonly?profile=low", http.Header{"Authorization": {"Bearer tok-all"}, "X-Mcp-Toolsets": {"up/low"}, "Mcp-Tools": {"up__tool_0000,up__tool_0002,up__tool_0004"}}},
	} {
		p := mustOpenSSE(t, hs, open.target, open.hdr)
		initializeAs(t, p, nil)
		want := tools(0, 2)
		if got := toolNames(t, p, 2); !slices.Equal(got, want) {
			t.Errorf("/sse%s %v lists %q, want %q", open.target, open.hdr, got, want)
		}
		other := open.hdr.Clone()
		other.Set("X-Mcp-Exclude-Tools", "up__tool_0000")
		if code, body := p.post(t, p.endpoint, `{"jsonrpc":"2.0","id":9,"method":"ping"}`, other); code != http.StatusBadRequest {
			t.Errorf("/sse%s: a POST that narrows further: %d %s, want 400", open.target, code, body)
		}
	}

	w := dialWSPeer(t, hs, "/p/low/x/up/odd", auth)
	initializeAs(t, w, nil)
	if got := toolNames(t, w, 2); !slices.Equal(got, tools(1)) {
		t.Errorf("/ws/p/low/x/up/odd lists %q", got)
	}

	for _, c := range []struct {
		path   string
		hdr    http.Header
		status int
	}{
		{"/sse/nope", auth, 404},
		{"/sse/p/nope", auth, 404},
		{"/sse/x/up/nope", auth, 400},
		{"/sse/readonly", http.Header{"Authorization": {"Bearer tok-ro"}, "Mcp-Profile": {"all"}}, 403},
		{"/ws/nope", auth, 404},
		{"/ws/p/all", http.Header{"Authorization": {"Bearer tok-ro"}}, 403},
		{"/ws/x/", auth, 400},
	} {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+c.path, nil)
		req.Header = c.hdr.Clone()
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(body), `"error"`) {
			t.Errorf("GET %s: %d %s, want %d with a JSON-RPC error", c.path, resp.StatusCode, body, c.status)
		}
	}
}

// TestSelectionPathsAreNoLabels: requests under the path forms, known
// and unknown, count under their JSON-RPC method; no path becomes a
// label value of /metrics.
func TestSelectionPathsAreNoLabels(t *testing.T) {
	up := newUpstreamServer(t, 2)
	s := newBenchServer(t, up.http.URL, selectionConfig)
	h := s.Handler()
	all := map[string]string{"Authorization": "Bearer tok-all"}
	for i := range 50 {
		listVia(t, h, fmt.Sprintf("/mcp/x/up/low,zz%d", i), all) // unknown toolsets: 400
		listVia(t, h, fmt.Sprintf("/mcp/nope%d", i), all)        // 404
	}
	if code, got, body, _ := listVia(t, h, "/mcp/x/up/low/readonly", all); code != 200 || !slices.Equal(got, tools(0)) {
		t.Fatalf("/mcp/x/up/low/readonly: %d %q %s", code, got, body)
	}
	rec := httptest.NewRecorder()
	req := selReq("/metrics", "", "", all)
	req.Method = http.MethodGet
	h.ServeHTTP(rec, req)
	body := rec.Body.String()
	if rec.Code != 200 || !strings.Contains(body, `viewmux_requests_total{method="tools/list"`) {
		t.Fatalf("/metrics: %d %.300s", rec.Code, body)
	}
	for _, bad := range []string{"zz1", "nope1", "/x/", "up/low"} {
		if strings.Contains(body, bad) {
			t.Errorf("/metrics holds %q, from a request path", bad)
		}
	}
}

// TestGuardCoversSelectionPaths: Host and Origin are checked on the path
// forms as on /mcp, before anything else.
func TestGuardCoversSelectionPaths(t *testing.T) {
	up := newUpstreamServer(t, 2)
	s := newBenchServer(t, up.http.URL, selectionConfig)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	for _, path := range []string{"/mcp/readonly", "/mcp/x/up", "/mcp/p/all", "/mcp/nope", "/sse/x/up", "/ws/readonly", "/sse/nope"} {
		for _, bad := range []map[string]string{{"Host": "evil.example"}, {"Origin": "https://evil.example"}} {
			method := http.MethodGet
			if strings.HasPrefix(path, "/mcp") {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(initializeBody))
			req.Header.Set("Authorization", "Bearer tok-all")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if h, ok := bad["Host"]; ok {
				req.Host = h
			} else {
				req.Header.Set("Origin", bad["Origin"])
			}
			resp, err := hs.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "up__tool") || strings.Contains(string(body), "unknown path") {
				t.Errorf("%s %s with %v: %d %s, want 403", method, path, bad, resp.StatusCode, body)
			}
		}
	}
}

// TestHugePathRefusedEarly: a 100 KB path is refused by the HTTP server
// (http.Server.MaxHeaderBytes counts the request line) before any handler
// parses it, and the server keeps serving.
func TestHugePathRefusedEarly(t *testing.T) {
	up := newUpstreamServer(t, 2)
	s := newBenchServer(t, up.http.URL, selectionConfig)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	for _, path := range []string{"/mcp/x/" + strings.Repeat("a,", 50<<10), "/mcp/p/" + strings.Repeat("p", 100<<10)} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n", path)
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || !strings.Contains(line, " 431 ") {
			t.Errorf("a %d-byte path: %q %v, want 431", len(path), line, err)
		}
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz after the huge paths: %d", resp.StatusCode)
	}
}
