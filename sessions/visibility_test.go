package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// newCatalogUpstream is newUpstreamServer with prompts, resources and a
// template besides n tools: n of each prompt and resource.
func newCatalogUpstream(tb testing.TB, n int) *upstreamServer {
	tb.Helper()
	u := &upstreamServer{srv: server.NewMCPServer("catalog-upstream", "1.0.0",
		server.WithToolCapabilities(true), server.WithPromptCapabilities(true), server.WithResourceCapabilities(true, true))}
	for i := range n {
		u.srv.AddTool(mcp.NewTool(fmt.Sprintf("tool_%04d", i)), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok"), nil
		})
		u.srv.AddPrompt(mcp.NewPrompt(fmt.Sprintf("prompt_%04d", i)), func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return mcp.NewGetPromptResult("p", nil), nil
		})
		uri := fmt.Sprintf("file:///notes/%04d", i)
		u.srv.AddResource(mcp.NewResource(uri, fmt.Sprintf("note %04d", i)), func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, Text: "x"}}, nil
		})
	}
	u.srv.AddResourceTemplate(mcp.NewResourceTemplate("file:///files/{path}", "files"), func(_ context.Context, r mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: r.Params.URI, Text: "x"}}, nil
	})
	h := server.NewStreamableHTTPServer(u.srv)
	u.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	tb.Cleanup(u.http.Close)
	return u
}

// BenchmarkHiddenRead measures a prompts/get and a templated resources/read
// against an upstream a deny = ["*"] profile hides (it serves tools, none
// in the view): answered in-process as nonexistent, with no upstream
// traffic.
func BenchmarkHiddenRead(b *testing.B) {
	up := newCatalogUpstream(b, 100)
	s := newBenchServer(b, up.http.URL, "[profiles.none]\ndeny = [\"*\"]\n")
	h := s.Handler()
	sid := openSession(b, h, "?profile=none")
	for name, tc := range map[string]struct{ body, want string }{
		"prompts/get":    {`{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"up__prompt_0001"}}`, `"Prompt not found: up__prompt_0001"`},
		"resources/read": {`{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///files/secret"}}`, `"Resource not found: file:///files/secret"`},
	} {
		b.Run(strings.ReplaceAll(name, "/", "_"), func(b *testing.B) {
			before := up.requests.Load()
			timeEach(b, func() {
				if w := postSink(h, "?profile=none", sid, tc.body); !bytes.Contains(w.head, []byte(tc.want)) {
					b.Fatalf("hidden target not answered as nonexistent: %s", w.head)
				}
			})
			if n := up.requests.Load() - before; n != 0 {
				b.Fatalf("hidden targets reached the upstream %d times", n)
			}
			b.ReportMetric(0, "upstream-requests")
		})
	}
}

// BenchmarkResourcesList measures resources/list of a 1,000-resource view
// answered from the view's cached listing.
func BenchmarkResourcesList(b *testing.B) {
	up := newCatalogUpstream(b, 1000)
	s := newBenchServer(b, up.http.URL, "")
	h := s.Handler()
	sid := openSession(b, h, "")
	body := `{"jsonrpc":"2.0","id":2,"method":"resources/list"}`
	if rec := post(h, "", sid, body); !bytes.Contains(rec.Body.Bytes(), []byte(`"file:///notes/0999"`)) {
		b.Fatalf("resources/list: %s", rec.Body.String())
	}
	before := up.requests.Load()
	timeEach(b, func() {
		if w := postSink(h, "", sid, body); w.n < 1000*20 {
			b.Fatalf("resources/list answered %d bytes", w.n)
		}
	})
	if n := up.requests.Load() - before; n != 0 {
		b.Fatalf("resources/list reached the upstream %d times", n)
	}
}

// TestHiddenListingsAndReads checks in-process, for a legacy session and a
// stateless 2026-07-28 request, that a deny = ["*"] profile lists none of
// an upstream's prompts, resources and templates and cannot read them,
// while the open profile lists and reads them; and that nothing hidden
// reached the upstream.
func TestHiddenListingsAndReads(t *testing.T) {
	up := newCatalogUpstream(t, 3)
	s := newBenchServer(t, up.http.URL, "[profiles.none]\ndeny = [\"*\"]\n[profiles.open]\nread_only = false\n")
	h := s.Handler()
	modern := func(query, method, params, body string) string {
		req := newRequest(query, "", body)
		req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20260728)
		for k, v := range mcp.StandardHeaders(mcp.ProtocolVersion20260728, mcp.MCPMethod(method), json.RawMessage(params)) {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Body.String()
	}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, profile := range []string{"none", "open"} {
		q := "?profile=" + profile
		sid := openSession(t, h, q)
		legacy := func(body string) string { return post(h, q, sid, body).Body.String() }
		for _, door := range []struct {
			name string
			do   func(method, params string) string
		}{
			{"legacy", func(method, params string) string {
				return legacy(fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":{%s}}`, method, params))
			}},
			{"2026-07-28", func(method, params string) string {
				if params != "" {
					params += ","
				}
				params = "{" + params + meta + "}"
				return modern(q, method, params, fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":%s}`, method, params))
			}},
		} {
			t.Run(profile+"/"+door.name, func(t *testing.T) {
				shown := profile == "open"
				for _, l := range []struct{ method, item string }{
					{"prompts/list", `"up__prompt_0001"`},
					{"resources/list", `"file:///notes/0001"`},
					{"resources/templates/list", `"file:///files/{path}"`},
				} {
					if got := door.do(l.method, ""); !strings.Contains(got, `"result"`) || strings.Contains(got, l.item) != shown {
						t.Errorf("%s (shown %v): %s", l.method, shown, got)
					}
				}
				before := up.requests.Load()
				got := door.do("resources/read", `"uri":"file:///files/a.txt"`)
				if strings.Contains(got, `"text":"x"`) != shown {
					t.Errorf("resources/read of a templated URI (shown %v): %s", shown, got)
				}
				if n := up.requests.Load() - before; !shown && n != 0 {
					t.Errorf("a hidden read reached the upstream %d times", n)
				}
				hidden := door.do("prompts/get", `"name":"up__prompt_0001"`)
				missing := door.do("prompts/get", `"name":"up__prompt_9999"`)
				if !shown && (!strings.Contains(missing, "Prompt not found") || strings.ReplaceAll(hidden, "0001", "9999") != missing) {
					t.Errorf("hidden and nonexistent prompts answer differently:\n%s\n%s", hidden, missing)
				}
			})
		}
	}
}

// TestUpstreamLogsFollowVisibility checks that a log message an upstream
// sends outside any call reaches only sessions that asked for logs and may
// see that upstream: a profile that hides it hears nothing of it.
func TestUpstreamLogsFollowVisibility(t *testing.T) {
	up := newUpstreamServer(t, 2)
	s := newServerWith(t, up.http.URL, "[profiles.all]\n[profiles.blind]\ndeny_upstreams = [\"up\"]\n", Options{})
	h := s.Handler()
	setLevel := `{"jsonrpc":"2.0","id":5,"method":"logging/setLevel","params":{"level":"debug"}}`
	seeing := openSession(t, h, "?profile=all")
	blind := openSession(t, h, "?profile=blind")
	quiet := openSession(t, h, "?profile=all")
	for _, sid := range []string{seeing, blind} {
		if rec := post(h, "", sid, setLevel); !strings.Contains(rec.Body.String(), `"result"`) {
			t.Fatalf("logging/setLevel: %d %s", rec.Code, rec.Body)
		}
	}
	got := s.logRecipients("up", mcp.LoggingLevelError)
	if len(got) != 1 || got[0] != seeing {
		t.Fatalf("recipients of up's log = %v, want only %s (blind %s, quiet %s)", got, seeing, blind, quiet)
	}
	if got := s.logRecipients("up", mcp.LoggingLevelDebug); len(got) != 1 {
		t.Fatalf("recipients at debug = %v, want 1", got)
	}
}

// TestSubscriptionURIBound checks that a subscribe to a URI longer than
// maxSubscriptionURI (which viewmux would keep while subscribed) is refused
// and sent nowhere, on resources/subscribe and subscriptions/listen, while
// a templated URI within the bound still subscribes.
func TestSubscriptionURIBound(t *testing.T) {
	up := newCatalogUpstream(t, 1)
	s := newBenchServer(t, up.http.URL, "")
	h := s.Handler()
	sid := openSession(t, h, "")
	long := "file:///files/" + strings.Repeat("a", maxSubscriptionURI)
	before := up.requests.Load()
	body := post(h, "", sid, `{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"`+long+`"}}`).Body.String()
	if !strings.Contains(body, `"code":-32602`) || !strings.Contains(body, "at most 2048 bytes") {
		t.Fatalf("subscribe to a %d-byte URI: %s", len(long), body)
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("a refused subscribe reached the upstream %d times", n)
	}
	listen := `{"jsonrpc":"2.0","id":4,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["` + long + `"]},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req := newRequest("", "", listen)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20260728)
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), "at most 2048 bytes") {
		t.Fatalf("listen with a %d-byte URI: %d %s", len(long), rec.Code, rec.Body)
	}
	ok := post(h, "", sid, `{"jsonrpc":"2.0","id":5,"method":"resources/subscribe","params":{"uri":"file:///files/short"}}`).Body.String()
	if !strings.Contains(ok, `"result"`) {
		t.Fatalf("subscribe to a short templated URI: %s", ok)
	}
}
