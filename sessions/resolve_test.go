package sessions

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/grant"
)

func TestHTTPResolution(t *testing.T) {
	up := newUpstreamServer(t, 6) // tool_0000..tool_0005; even ones read-only
	sum := sha256.Sum256([]byte("tok-ci"))
	s := newBenchServer(t, up.http.URL, `
[profiles.readonly]
read_only = true
[profiles.first]
tools = ["up__tool_0000", "up__tool_0001"]
[profiles.narrow]
extends = "first"
read_only = true
[[auth.tokens]]
token = "tok-ro"
profiles = ["readonly"]
[[auth.tokens]]
token_sha256 = "`+hex.EncodeToString(sum[:])+`"
profiles = ["first", "readonly"]
`)
	h := s.Handler()
	tests := []struct {
		name    string
		query   string
		headers map[string]string
		status  int
		tools   string // comma-separated listing when status is 200
		body    string // substring of the error body otherwise
	}{
		{"no token", "", nil, 401, "", "missing or invalid bearer token"},
		{"wrong token", "", map[string]string{"Authorization": "Bearer nope"}, 401, "", "missing or invalid"},
		{"token in URL is ignored", "?token=tok-ro&access_token=tok-ro", nil, 401, "", "missing or invalid"},
		{"token default profile", "", map[string]string{"Authorization": "Bearer tok-ro"}, 200, "up__tool_0000,up__tool_0002,up__tool_0004", ""},
		{"hashed token default is its first profile", "", map[string]string{"Authorization": "Bearer tok-ci"}, 200, "up__tool_0000,up__tool_0001", ""},
		{"header selects an allowed profile", "", map[string]string{"Authorization": "Bearer tok-ci", "Mcp-Profile": "readonly"}, 200, "up__tool_0000,up__tool_0002,up__tool_0004", ""},
		{"header beats query", "?profile=first", map[string]string{"Authorization": "Bearer tok-ci", "Mcp-Profile": "readonly"}, 200, "up__tool_0000,up__tool_0002,up__tool_0004", ""},
		{"profile outside the token is 403", "?profile=first", map[string]string{"Authorization": "Bearer tok-ro"}, 403, "", `"first"`},
		{"unknown profile is 404 naming only the token's profiles", "?profile=nope", map[string]string{"Authorization": "Bearer tok-ci"}, 404, "", "known: first, readonly"},
		{"narrowing never widens", "?tools=up__tool_0003", map[string]string{"Authorization": "Bearer tok-ci"}, 200, "", ""},
		{"toolsets and tools add up inside the profile", "?toolsets=up&tools=up__tool_0003", map[string]string{"Authorization": "Bearer tok-ci"}, 200, "up__tool_0000,up__tool_0001", ""},
		{"tools narrowing", "?tools=up__tool_0001,up__tool_0005", map[string]string{"Authorization": "Bearer tok-ci"}, 200, "up__tool_0001", ""},
		{"read_only narrowing", "?read_only=true", map[string]string{"Authorization": "Bearer tok-ci"}, 200, "up__tool_0000", ""},
		{"bad read_only", "?read_only=maybe", map[string]string{"Authorization": "Bearer tok-ci"}, 400, "", "not a boolean"},
		{"unknown toolset", "?toolsets=nope", map[string]string{"Authorization": "Bearer tok-ci"}, 400, "", `unknown toolset "nope"`},
		{"disallowed origin", "", map[string]string{"Authorization": "Bearer tok-ci", "Origin": "https://evil.example"}, 403, "", "origin"},
		{"allowed origin", "", map[string]string{"Authorization": "Bearer tok-ci", "Origin": "http://localhost:3000"}, 200, "up__tool_0000,up__tool_0001", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			do := func(session, body string) (int, http.Header, string) {
				req := newRequest(tt.query, session, body)
				for k, v := range tt.headers {
					req.Header.Set(k, v)
				}
				w := &sink{header: make(http.Header), code: 200}
				w.head = make([]byte, 0, 1<<16)
				h.ServeHTTP(&fullSink{w}, req)
				return w.code, w.header, string(w.head)
			}
			code, hdr, body := do("", initializeBody)
			if code != tt.status {
				t.Fatalf("initialize: status %d, want %d: %s", code, tt.status, body)
			}
			if code == 401 && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without WWW-Authenticate: Bearer (got %q)", hdr.Get("WWW-Authenticate"))
			}
			if code != 200 {
				var e struct{ Error jsonrpc.Error }
				if err := json.Unmarshal([]byte(body), &e); err != nil {
					t.Fatalf("error body is not JSON-RPC: %v: %s", err, body)
				}
				if !strings.Contains(e.Error.Message, tt.body) {
					t.Fatalf("body %q lacks %q", body, tt.body)
				}
				return
			}
			sid := hdr.Get("Mcp-Session-Id")
			_, _, list := do(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
			var resp struct {
				Result struct {
					Tools []struct{ Name string } `json:"tools"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(list), &resp); err != nil {
				t.Fatalf("tools/list: %v: %s", err, list)
			}
			var names []string
			for _, tl := range resp.Result.Tools {
				names = append(names, tl.Name)
			}
			if got := strings.Join(names, ","); got != tt.tools {
				t.Fatalf("tools = %q, want %q", got, tt.tools)
			}
		})
	}
}

// fullSink keeps everything written, for small test responses.
type fullSink struct{ *sink }

func (f *fullSink) Write(p []byte) (int, error) {
	f.head = append(f.head, p...)
	f.n += len(p)
	return len(p), nil
}

func TestBoundSessionRejectsOtherProfile(t *testing.T) {
	up := newUpstreamServer(t, 4)
	s := newBenchServer(t, up.http.URL, "[profiles.readonly]\nread_only = true\n[profiles.all]\n")
	h := s.Handler()
	sid := openSession(t, h, "?profile=readonly")
	call := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"x"}}}`
	// Same session, no profile named: the bound readonly view applies.
	if rec := post(h, "", sid, call); !strings.Contains(rec.Body.String(), `"code":-32601`) || !strings.Contains(rec.Body.String(), "Tool not found: up__tool_0001") {
		t.Fatalf("bound session reached a hidden tool: %s", rec.Body.String())
	}
	// Same session naming another profile: rejected.
	if rec := post(h, "?profile=all", sid, call); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `bound to profile \"readonly\"`) {
		t.Fatalf("switching profile on a bound session: %d %s", rec.Code, rec.Body.String())
	}
	if n := up.requests.Load(); n > 4 { // the aggregator's own initialize and lists
		t.Fatalf("refused calls reached the upstream (%d requests)", n)
	}
}

func TestBodyLimit(t *testing.T) {
	up := newUpstreamServer(t, 1)
	s := newBenchServer(t, up.http.URL, "[server]\nmax_body_bytes = \"1KiB\"\n")
	rec := post(s.Handler(), "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"`+strings.Repeat("a", 2048)+`"}}`)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "max_body_bytes (1024 bytes)") {
		t.Fatalf("oversized body: %d %s", rec.Code, rec.Body.String())
	}
}

func TestSafeName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"fs__read", "fs__read"},
		{"a\nb\tc", "a?b?c"},
		{"\u200bfs\u200d__x\ufeff", "?fs?__x?"},
		{"bidi\u202etxt", "bidi?txt"},
		{"héllo 日本", "héllo 日本"},
		{"bad\xffutf8", "bad?utf8"},
		{strings.Repeat("é", 100), strings.Repeat("é", 64)},
	}
	for _, tt := range tests {
		if got := jsonrpc.Printable(tt.in); got != tt.want {
			t.Errorf("jsonrpc.Printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if len(jsonrpc.Printable(tt.in)) > 128 {
			t.Errorf("jsonrpc.Printable(%q) longer than 128 bytes", tt.in)
		}
	}
}

func TestSessionOfAnotherToken(t *testing.T) {
	up := newUpstreamServer(t, 4)
	s := newBenchServer(t, up.http.URL, `
[profiles.readonly]
read_only = true
[profiles.all]
[[auth.tokens]]
token = "tok-all"
profiles = ["all"]
[[auth.tokens]]
token = "tok-ro"
profiles = ["readonly"]
[[auth.tokens]]
token = "tok-all-2"
profiles = ["all"]
`)
	h := s.Handler()
	req := newRequest("", "", initializeBody)
	req.Header.Set("Authorization", "Bearer tok-all")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	sid := rec.Header().Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %d %s", rec.Code, rec.Body.String())
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"x"}}}`
	for _, tt := range []struct {
		name, auth string
		status     int
	}{
		{"no token on a bound session", "", http.StatusUnauthorized},
		{"other token naming no profile", "Bearer tok-ro", http.StatusNotFound},
		{"other token allowed the same profile", "Bearer tok-all-2", http.StatusNotFound},
		{"unknown token", "Bearer nope", http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := up.requests.Load()
			req := newRequest("", sid, call)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body.String())
			}
			if n := up.requests.Load() - before; n != 0 {
				t.Fatalf("refused request reached the upstream %d times", n)
			}
		})
	}
}

// TestSessionDeleteByAnotherToken checks that a token allowed the same
// profile can neither end nor listen on a session it did not open: both
// are 404, and the owner's session keeps working.
func TestSessionDeleteByAnotherToken(t *testing.T) {
	up := newUpstreamServer(t, 2)
	s := newBenchServer(t, up.http.URL, `
[profiles.all]
[[auth.tokens]]
token = "tok-a"
profiles = ["all"]
[[auth.tokens]]
token = "tok-b"
profiles = ["all"]
`)
	h := s.Handler()
	do := func(method, sid, token, body string) *httptest.ResponseRecorder {
		req := newRequest("", sid, body)
		req.Method = method
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := do(http.MethodPost, "", "tok-a", initializeBody)
	sid := rec.Header().Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %d %s", rec.Code, rec.Body)
	}
	if rec := do(http.MethodDelete, sid, "tok-b", ""); rec.Code != http.StatusNotFound {
		t.Fatalf("DELETE with another token: %d %s, want 404", rec.Code, rec.Body)
	}
	if rec := do(http.MethodGet, sid, "tok-b", ""); rec.Code != http.StatusNotFound {
		t.Fatalf("GET with another token: %d %s, want 404", rec.Code, rec.Body)
	}
	list := `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`
	if rec := do(http.MethodPost, sid, "tok-a", list); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "up__tool_0001") {
		t.Fatalf("the owner's session after another token's DELETE: %d %s", rec.Code, rec.Body)
	}
	if rec := do(http.MethodDelete, sid, "tok-a", ""); rec.Code != http.StatusOK {
		t.Fatalf("DELETE by the owner: %d %s", rec.Code, rec.Body)
	}
}

// TestGuardEveryPath checks the Host and Origin rules on every path of a
// real loopback listener, the /mcp fast path of a valid session included,
// and that /metrics needs a token once tokens are configured.
func TestGuardEveryPath(t *testing.T) {
	up := newUpstreamServer(t, 2)
	s := newBenchServer(t, up.http.URL, `
[profiles.all]
[[auth.tokens]]
token = "tok-a"
profiles = ["all"]
`)
	s.MarkStarted()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	do := func(method, path, sid, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer tok-a")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sb strings.Builder
		_, _ = io.Copy(&sb, resp.Body)
		if sid == "" && path == "/mcp" && method == http.MethodPost {
			return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
		}
		return resp.StatusCode, sb.String()
	}
	code, sid := do(http.MethodPost, "/mcp", "", initializeBody, nil)
	if code != 200 || sid == "" {
		t.Fatalf("initialize: %d", code)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if code, body := do(http.MethodPost, "/mcp", sid, list, nil); code != 200 || !strings.Contains(body, "up__tool_0001") {
		t.Fatalf("tools/list on the session: %d %s", code, body)
	}
	evilHost := map[string]string{"Host": "evil.example"}
	evilOrigin := map[string]string{"Origin": "https://evil.example"}
	for _, tt := range []struct {
		name, method, path, sid, body string
		hdr                           map[string]string
	}{
		{"tools/list fast path, Host", http.MethodPost, "/mcp", sid, list, evilHost},
		{"tools/list fast path, Origin", http.MethodPost, "/mcp", sid, list, evilOrigin},
		{"metrics, Host", http.MethodGet, "/metrics", "", "", evilHost},
		{"metrics, Origin", http.MethodGet, "/metrics", "", "", evilOrigin},
		{"healthz, Host", http.MethodGet, "/healthz", "", "", evilHost},
		{"healthz, Origin", http.MethodGet, "/healthz", "", "", evilOrigin},
		{"readyz, Host", http.MethodGet, "/readyz", "", "", evilHost},
		{"readyz, Origin", http.MethodGet, "/readyz", "", "", evilOrigin},
		{"message, Host", http.MethodPost, "/message?sessionId=x", "", list, evilHost},
	} {
		if code, body := do(tt.method, tt.path, tt.sid, tt.body, tt.hdr); code != http.StatusForbidden || strings.Contains(body, "up__tool") || strings.Contains(body, "viewmux_") {
			t.Errorf("%s: %d %.200s, want 403", tt.name, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := do(http.MethodGet, path, "", "", map[string]string{"Host": "localhost"}); code != 200 {
			t.Errorf("%s with Host localhost: %d, want 200", path, code)
		}
	}
	if code, body := do(http.MethodGet, "/metrics", "", "", nil); code != 200 || !strings.Contains(body, "viewmux_") {
		t.Errorf("/metrics with a token: %d", code)
	}
	for _, auth := range []string{"", "Bearer nope"} {
		if code, body := do(http.MethodGet, "/metrics", "", "", map[string]string{"Authorization": auth}); code != http.StatusUnauthorized || strings.Contains(body, "viewmux_") {
			t.Errorf("/metrics with Authorization %q: %d, want 401", auth, code)
		}
	}
}

// TestHiddenToolsetLikeUnknown checks that naming a toolset of an upstream
// the profile hides (upstreams, deny_upstreams) is refused exactly like
// naming one that does not exist, by every source of narrowing, so that a
// request cannot learn which upstreams exist behind its profile.
func TestHiddenToolsetLikeUnknown(t *testing.T) {
	cfg, err := configs.Parse("hidden.toml", []byte(`
[upstreams.up]
url = "http://127.0.0.1:1/mcp"
[upstreams.secretive]
url = "http://127.0.0.1:2/mcp"
prefix = "hush"
[upstreams.secretive.toolsets]
admin = ["*"]
[profiles.uponly]
upstreams = ["up"]
[profiles.notsecret]
deny_upstreams = ["secretive"]
[profiles.all]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := grant.NewResolver(cfg, filter.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]func(profile, toolset string) grant.Selection{
		"Mcp-Toolsets": func(p, ts string) grant.Selection {
			return grant.Selection{Profile: p, Toolsets: []string{ts}, Narrowing: true}
		},
		"X-MCP-Toolsets": func(p, ts string) grant.Selection {
			return grant.Selection{Profile: p, Alias: grant.Narrowing{Toolsets: []string{ts}}, Narrowing: true}
		},
		"/x/{toolsets}": func(p, ts string) grant.Selection {
			return grant.Selection{Profile: p, Path: grant.Narrowing{Toolsets: []string{ts}}, Narrowing: true}
		},
	}
	for from, sel := range sources {
		refusal := func(profile, toolset string) string {
			_, err := res.Resolve(sel(profile, toolset))
			if err == nil {
				return ""
			}
			if !errors.Is(err, grant.ErrBadNarrowing) {
				t.Fatalf("%s: profile %s, toolset %s: %v", from, profile, toolset, err)
			}
			return strings.ReplaceAll(err.Error(), toolset, "NAME")
		}
		for _, profile := range []string{"uponly", "notsecret"} {
			missing := refusal(profile, "nosuch/admin")
			if missing == "" {
				t.Fatalf("%s: profile %s: a toolset that does not exist was accepted", from, profile)
			}
			for _, ts := range []string{"secretive", "hush", "secretive/admin", "hush/admin"} {
				if got := refusal(profile, ts); got != missing {
					t.Errorf("%s: profile %s: toolset %q of a hidden upstream answers %q, a missing one %q", from, profile, ts, got, missing)
				}
			}
		}
		if got := refusal("all", "hush/admin"); got != "" {
			t.Errorf("%s: profile all: a visible upstream's toolset was refused: %s", from, got)
		}
	}
}
