package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/configs"
)

// httpConfig serves a fresh test server over streamable HTTP on loopback.
func httpConfig(t *testing.T, name string, opts ...server.StreamableHTTPOption) *configs.Upstream {
	ts := httptest.NewServer(server.NewStreamableHTTPServer(newTestServer(), opts...))
	t.Cleanup(ts.Close) // registered before the Upstream's Close, so it runs after it
	return &configs.Upstream{
		Name:            name,
		Transport:       configs.TransportHTTP,
		URL:             ts.URL + "/mcp",
		ConnectTimeout:  10 * time.Second,
		CallTimeout:     30 * time.Second,
		MaxMessageBytes: 16 << 20,
	}
}

// sseConfig serves a fresh test server over legacy HTTP+SSE only; transport
// is the configured (or inferred) transport name.
func sseConfig(t *testing.T, name, transport string) *configs.Upstream {
	ts := httptest.NewServer(server.NewSSEServer(newTestServer()))
	t.Cleanup(ts.Close)
	return &configs.Upstream{
		Name:            name,
		Transport:       transport,
		URL:             ts.URL + "/sse",
		ConnectTimeout:  10 * time.Second,
		CallTimeout:     30 * time.Second,
		MaxMessageBytes: 16 << 20,
	}
}

// catalogRecorder records the catalogs OnCatalog observes.
type catalogRecorder struct {
	mu   sync.Mutex
	seen []*Catalog // nil entries: the upstream went down
}

func (r *catalogRecorder) onCatalog(u *Upstream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, u.Catalog())
}

func (r *catalogRecorder) snapshot() []*Catalog {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

func (r *catalogRecorder) sawTool(name string) bool {
	for _, c := range r.snapshot() {
		if c != nil && slices.Contains(toolNames(c), name) {
			return true
		}
	}
	return false
}

func (r *catalogRecorder) sawDown() bool { return slices.Contains(r.snapshot(), nil) }

func TestTransports(t *testing.T) {
	cases := []struct {
		name         string
		cfg          func(t *testing.T) *configs.Upstream
		wantKind     string // transport actually in use
		wantProtocol string
		wantLog      string // a log message proving the path taken
	}{
		{
			name:         "stdio",
			cfg:          func(t *testing.T) *configs.Upstream { return stdioConfig(t, "st", "serve") },
			wantKind:     configs.TransportStdio,
			wantProtocol: mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		},
		{
			name: "stdio pinned to 2026-07-28",
			cfg: func(t *testing.T) *configs.Upstream {
				c := stdioConfig(t, "st", "serve")
				c.Protocol = mcp.LATEST_PROTOCOL_VERSION
				return c
			},
			wantKind:     configs.TransportStdio,
			wantProtocol: mcp.LATEST_PROTOCOL_VERSION,
		},
		{
			name: "stdio pinned to legacy protocol",
			cfg: func(t *testing.T) *configs.Upstream {
				c := stdioConfig(t, "st", "serve")
				c.Protocol = "2025-06-18"
				return c
			},
			wantKind:     configs.TransportStdio,
			wantProtocol: "2025-06-18",
		},
		{
			name:         "streamable http",
			cfg:          func(t *testing.T) *configs.Upstream { return httpConfig(t, "web") },
			wantKind:     configs.TransportHTTP,
			wantProtocol: mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		},
		{
			name: "streamable http pinned to 2026-07-28",
			cfg: func(t *testing.T) *configs.Upstream {
				c := httpConfig(t, "web")
				c.Protocol = mcp.LATEST_PROTOCOL_VERSION
				return c
			},
			wantKind:     configs.TransportHTTP,
			wantProtocol: mcp.LATEST_PROTOCOL_VERSION,
		},
		{
			name:         "stdio server refusing initialize falls back to discovery",
			cfg:          func(t *testing.T) *configs.Upstream { return stdioConfig(t, "st", "modernonly") },
			wantKind:     configs.TransportStdio,
			wantProtocol: mcp.LATEST_PROTOCOL_VERSION,
			wantLog:      "rejected the 2025-11-25 handshake",
		},
		{
			name:         "streamable http pinned to legacy protocol",
			cfg:          func(t *testing.T) *configs.Upstream { c := httpConfig(t, "web"); c.Protocol = "2025-11-25"; return c },
			wantKind:     configs.TransportHTTP,
			wantProtocol: "2025-11-25",
		},
		{
			name: "streamable http server without 2026-07-28",
			cfg: func(t *testing.T) *configs.Upstream {
				return httpConfig(t, "web", server.WithStreamableHTTPProtocolVersions(mcp.LegacyProtocolVersions()...))
			},
			wantKind:     configs.TransportHTTP,
			wantProtocol: mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		},
		{
			name:         "sse-only endpoint configured as http falls back to sse",
			cfg:          func(t *testing.T) *configs.Upstream { return sseConfig(t, "old", configs.TransportHTTP) },
			wantKind:     configs.TransportSSE,
			wantProtocol: mcp.LATEST_LEGACY_PROTOCOL_VERSION,
			wantLog:      "falling back to the legacy SSE transport",
		},
		{
			name:         "sse",
			cfg:          func(t *testing.T) *configs.Upstream { return sseConfig(t, "old", configs.TransportSSE) },
			wantKind:     configs.TransportSSE,
			wantProtocol: mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		},
		{
			name:         "websocket",
			cfg:          func(t *testing.T) *configs.Upstream { return wsPeerConfig(t, "sock") },
			wantKind:     configs.TransportWebsocket,
			wantProtocol: mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		},
		{
			name: "websocket pinned to 2026-07-28",
			cfg: func(t *testing.T) *configs.Upstream {
				c := wsPeerConfig(t, "sock")
				c.Protocol = mcp.LATEST_PROTOCOL_VERSION
				return c
			},
			wantKind:     configs.TransportWebsocket,
			wantProtocol: mcp.LATEST_PROTOCOL_VERSION,
		},
		{
			name: "websocket pinned to legacy protocol",
			cfg: func(t *testing.T) *configs.Upstream {
				c := wsPeerConfig(t, "sock")
				c.Protocol = mcp.LATEST_LEGACY_PROTOCOL_VERSION
				return c
			},
			wantKind:     configs.TransportWebsocket,
			wantProtocol: mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg(t)
			logs := &logSink{}
			rec := &catalogRecorder{}
			opts := fastOptions(logs)
			opts.OnCatalog = rec.onCatalog
			var notes sync.Map // method → true
			opts.OnNotification = func(_ *Upstream, n mcp.JSONRPCNotification) { notes.Store(n.Method, true) }
			u := New(cfg, opts)
			startUpstream(t, u)

			if got := u.State(); got != StateUp {
				t.Fatalf("State = %v, want up", got)
			}
			if c := u.current(); c == nil || c.kind != tc.wantKind {
				t.Fatalf("transport in use = %v, want %s", c, tc.wantKind)
			}
			if tc.wantLog != "" && len(logs.find(func(r map[string]string) bool {
				return strings.Contains(r["msg"], tc.wantLog) && r["upstream"] == cfg.Name
			})) == 0 {
				t.Errorf("no log %q", tc.wantLog)
			}
			cat := u.Catalog()
			checkFullCatalog(t, cat)
			if cat.ProtocolVersion != tc.wantProtocol {
				t.Errorf("ProtocolVersion = %q, want %q", cat.ProtocolVersion, tc.wantProtocol)
			}
			checkRawSchemas(t, cat)

			const args = `{"big":9007199254740993,"nested":{"list":[1,2.50,"x"]},"s":"é\u2028"}`
			if got := callText(t, u, "echo", json.RawMessage(args)); got != args {
				t.Errorf("echo of raw arguments:\n got  %s\n want %s", got, args)
			}
			checkPromptAndResource(t, u)
			callText(t, u, "notify", nil)
			waitFor(t, 5*time.Second, "OnNotification", func() bool {
				_, ok := notes.Load("notifications/message")
				return ok
			})

			// list_changed: the server adds a tool; the new catalog must be
			// published and announced through OnCatalog.
			callText(t, u, "add_tool", map[string]any{"name": "zeta"})
			waitFor(t, 10*time.Second, "OnCatalog with the added tool", func() bool { return rec.sawTool("zeta") })
			if !slices.Contains(toolNames(u.Catalog()), "zeta") {
				t.Errorf("published catalog lacks the added tool: %v", toolNames(u.Catalog()))
			}
			if got := callText(t, u, "zeta", nil); got != "zeta" {
				t.Errorf("calling the added tool = %q", got)
			}
			if _, ok := notes.Load(mcp.MethodNotificationToolsListChanged); ok {
				t.Error("list_changed was passed to OnNotification")
			}
		})
	}
}

// checkFullCatalog checks that every page of every list arrived.
func checkFullCatalog(t *testing.T, cat *Catalog) {
	t.Helper()
	if cat == nil {
		t.Fatal("Catalog() = nil while up")
	}
	if got := toolNames(cat); !slices.Equal(got, testToolNames) {
		t.Errorf("tools = %v, want %v (all pages)", got, testToolNames)
	}
	var prompts, resources, templates []string
	for _, p := range cat.Prompts {
		prompts = append(prompts, p.Name)
	}
	for _, r := range cat.Resources {
		resources = append(resources, r.URI)
	}
	for _, r := range cat.ResourceTemplates {
		templates = append(templates, r.URITemplate.Raw())
	}
	for _, l := range []struct {
		what      string
		got, want []string
	}{{"prompts", prompts, testPromptNames}, {"resources", resources, testResourceURIs}, {"templates", templates, testTemplateURIs}} {
		slices.Sort(l.got)
		if !slices.Equal(l.got, l.want) {
			t.Errorf("%s = %v, want %v (all pages)", l.what, l.got, l.want)
		}
	}
	if cat.ServerInfo.Name != "testsrv" || cat.ServerInfo.Version != testServerVersion {
		t.Errorf("ServerInfo = %+v", cat.ServerInfo)
	}
	if cat.Instructions != "test instructions" {
		t.Errorf("Instructions = %q", cat.Instructions)
	}
	if cat.Capabilities.Tools == nil || !cat.Capabilities.Tools.ListChanged {
		t.Errorf("Capabilities.Tools = %+v", cat.Capabilities.Tools)
	}
}

// checkRawSchemas checks that the complex tool's schemas survived exactly,
// and that mcp-go's own decoding would not have kept them (else this check
// could not fail).
func checkRawSchemas(t *testing.T, cat *Catalog) {
	t.Helper()
	i := slices.IndexFunc(cat.Tools, func(tool mcp.Tool) bool { return tool.Name == "complex" })
	if i < 0 {
		t.Fatal("no complex tool")
	}
	tool := cat.Tools[i]
	assertSameJSON(t, "RawInputSchema", tool.RawInputSchema, complexSchema)
	assertSameJSON(t, "RawOutputSchema", tool.RawOutputSchema, complexOutputSchema)
	out, err := json.Marshal(tool)
	if err != nil {
		t.Fatalf("re-encoding the tool: %v", err)
	}
	var back struct {
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema"`
	}
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, "re-encoded inputSchema", back.InputSchema, complexSchema)
	assertSameJSON(t, "re-encoded outputSchema", back.OutputSchema, complexOutputSchema)

	// The control: the lossy path drops the root oneOf.
	var lossy mcp.Tool
	if err := json.Unmarshal([]byte(`{"name":"complex","inputSchema":`+complexSchema+`}`), &lossy); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(lossy); strings.Contains(string(b), "oneOf") {
		t.Fatal("mcp.Tool now keeps oneOf: this check no longer proves anything")
	}
}

func assertSameJSON(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v in %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got  %s\n want %s", what, got, want)
	}
}

func checkPromptAndResource(t *testing.T, u *Upstream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var preq mcp.GetPromptRequest
	preq.Params.Name = "p3"
	pres, err := u.GetPrompt(ctx, preq)
	if err != nil {
		t.Fatalf("GetPrompt: %v", err)
	}
	if tc, ok := mcp.AsTextContent(pres.Messages[0].Content); !ok || tc.Text != "hello from p3" {
		t.Errorf("GetPrompt = %+v", pres)
	}
	var rreq mcp.ReadResourceRequest
	rreq.Params.URI = "test://r2"
	rres, err := u.ReadResource(ctx, rreq)
	if err != nil {
		t.Fatalf("ReadResource: %v", err)
	}
	if tc, ok := mcp.AsTextResourceContents(rres.Contents[0]); !ok || tc.Text != "content of test://r2" {
		t.Errorf("ReadResource = %+v", rres)
	}
}

func TestCallToolArguments(t *testing.T) {
	u := New(stdioConfig(t, "args", "serve"), fastOptions(&logSink{}))
	startUpstream(t, u)
	const big = `{"n":123456789012345678901234567890,"id":9007199254740993,"s":"\u00e9"}`
	cases := []struct {
		name string
		set  func(*mcp.CallToolRequest)
		want string
	}{
		{"json.RawMessage arguments", func(r *mcp.CallToolRequest) { r.Params.Arguments = json.RawMessage(big) }, big},
		{"RawArguments from a decoded request", func(r *mcp.CallToolRequest) {
			if err := json.Unmarshal([]byte(`{"name":"echo","arguments":`+big+`}`), &r.Params); err != nil {
				t.Fatal(err)
			}
		}, big},
		{"map arguments", func(r *mcp.CallToolRequest) { r.Params.Arguments = map[string]any{"a": "b"} }, `{"a":"b"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var req mcp.CallToolRequest
			tc.set(&req)
			req.Params.Name = "echo"
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := u.CallTool(ctx, req)
			if err != nil {
				t.Fatalf("CallTool: %v", err)
			}
			if got := resultText(t, res); got != tc.want {
				t.Errorf("upstream saw %s, want %s", got, tc.want)
			}
		})
	}
}

// TestHTTPServerRestart stops the server under an idle connection and starts
// a new one (which knows nothing of the old session) on the same address.
func TestHTTPServerRestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) *http.Server {
		srv := &http.Server{Handler: server.NewStreamableHTTPServer(newTestServer())}
		go srv.Serve(ln)
		return srv
	}
	first := serve(ln)

	rec := &catalogRecorder{}
	opts := fastOptions(&logSink{})
	opts.OnCatalog = rec.onCatalog
	opts.ProbeInterval = 200 * time.Millisecond
	u := New(&configs.Upstream{Name: "web", Transport: configs.TransportHTTP, URL: "http://" + addr + "/mcp",
		ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second, MaxMessageBytes: 1 << 20}, opts)
	startUpstream(t, u)
	callText(t, u, "echo", map[string]any{})

	first.Close()
	waitFor(t, 5*time.Second, "the upstream to be seen down", rec.sawDown)
	if u.Catalog() != nil && u.State() == StateUp {
		t.Error("still up with the server gone")
	}

	var second *http.Server
	waitFor(t, 5*time.Second, "listening again on "+addr, func() bool {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			second = serve(ln)
		}
		return err == nil
	})
	t.Cleanup(func() { second.Close() })
	waitFor(t, 15*time.Second, "reconnect", func() bool {
		s := rec.snapshot()
		return s[len(s)-1] != nil && u.State() == StateUp
	})
	callText(t, u, "echo", map[string]any{})
}

// TestHandwrittenToolsList checks the raw capture against bytes no mcp-go
// server produced, and the dropping of invalid x-mcp-header annotations.
func TestHandwrittenToolsList(t *testing.T) {
	logs := &logSink{}
	u := New(stdioConfig(t, "hand", "handmade"), fastOptions(logs))
	startUpstream(t, u)
	cat := u.Catalog()
	if got := toolNames(cat); !slices.Equal(got, []string{"good"}) {
		t.Fatalf("tools = %v, want [good]", got)
	}
	var page struct {
		Tools []struct {
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(handmadeTools), &page); err != nil {
		t.Fatal(err)
	}
	if got, want := string(cat.Tools[0].RawInputSchema), string(page.Tools[0].InputSchema); got != want {
		t.Errorf("RawInputSchema not byte-identical:\n got  %s\n want %s", got, want)
	}
	if len(logs.find(func(r map[string]string) bool {
		return r["upstream"] == "hand" && r["tool"] == "bad" && strings.Contains(r["msg"], "x-mcp-header")
	})) == 0 {
		t.Error("dropping the invalid tool was not logged with its name")
	}
	if cat.Resources != nil || cat.ResourceTemplates != nil {
		t.Error("lists fetched that the server did not advertise")
	}
	// Every item is kept as the bytes the upstream listed, every page.
	if got := string(cat.RawTools[0]); !strings.HasPrefix(handmadeTools, `{"tools":[`+got+`,`) {
		t.Errorf("RawTools[0] is not the upstream's bytes: %s", got)
	}
	if len(cat.RawTools) != len(cat.Tools) || len(cat.RawPrompts) != 2 || len(cat.Prompts) != 2 {
		t.Fatalf("raw slices out of step: %d tools, %d raw; %d prompts, %d raw", len(cat.Tools), len(cat.RawTools), len(cat.Prompts), len(cat.RawPrompts))
	}
	for i, want := range handmadePrompts {
		if got := string(cat.RawPrompts[i]); got != want {
			t.Errorf("RawPrompts[%d]:\n got  %s\n want %s", i, got, want)
		}
	}
}

// TestRepeatedListCursor checks that a listing whose next cursor repeats
// fails the connection attempt instead of looping.
func TestRepeatedListCursor(t *testing.T) {
	u := New(stdioConfig(t, "loop", "handmadeloop"), fastOptions(&logSink{}))
	t.Cleanup(func() { u.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := u.Start(ctx)
	if !errors.Is(err, errRepeatedListCursor) {
		t.Fatalf("Start = %v, want errRepeatedListCursor", err)
	}
}

// TestParamHeadersFromCatalog checks x-mcp-header mirroring on 2026-07-28
// HTTP with the definition the catalog holds (the listing no longer goes
// through mcp-go's client, whose tool cache Send never used): the call is
// sent with Mcp-Param-Region, which the server checks against the body.
func TestParamHeadersFromCatalog(t *testing.T) {
	s := server.NewMCPServer("hdr", "1", server.WithToolCapabilities(false))
	schema := json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}},"required":["region"]}`)
	s.AddTool(mcp.NewToolWithRawSchema("where", "echoes the region", schema),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(req.GetString("region", "")), nil
		})
	var mu sync.Mutex
	var got []string
	h := server.NewStreamableHTTPServer(s)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("Mcp-Param-Region"); v != "" {
			mu.Lock()
			got = append(got, v)
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	u := New(&configs.Upstream{Name: "hdr", Transport: configs.TransportHTTP, URL: ts.URL + "/mcp", Protocol: mcp.LATEST_PROTOCOL_VERSION,
		ConnectTimeout: 10 * time.Second, CallTimeout: 10 * time.Second, MaxMessageBytes: 1 << 20}, fastOptions(&logSink{}))
	startUpstream(t, u)
	cat := u.Catalog()
	if len(cat.Tools) != 1 || string(cat.RawTools[0]) == "" {
		t.Fatalf("catalog = %+v", cat.Tools)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := u.Send(ctx, Request{Method: string(mcp.MethodToolsCall), Target: "where",
		Params: json.RawMessage(`{"name":"where","arguments":{"region":"eu-west"}}`), Tool: &cat.Tools[0]})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if !strings.Contains(string(res), "eu-west") {
		t.Errorf("result = %s", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(got, "eu-west") {
		t.Errorf("Mcp-Param-Region headers seen: %q, want eu-west", got)
	}
}
