package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream"
)

// upstreamServer is a real MCP server on a loopback listener with n tools,
// counting the requests it receives.
type upstreamServer struct {
	srv      *server.MCPServer
	http     *httptest.Server
	requests atomic.Int64
}

func newUpstreamServer(tb testing.TB, n int) *upstreamServer {
	tb.Helper()
	u := &upstreamServer{}
	// requests counts what a client's request could make viewmux forward:
	// every MCP request but the handshake and pings, which viewmux's own
	// connection sends on its own schedule (a reconnect for the GET
	// stream, an idle probe) and which tests must not mistake for a
	// refused request that got through.
	hooks := &server.Hooks{}
	hooks.AddBeforeAny(func(_ context.Context, _ any, method mcp.MCPMethod, _ any) {
		if method != mcp.MethodInitialize && method != mcp.MethodPing && method != mcp.MethodServerDiscover {
			u.requests.Add(1)
		}
	})
	u.srv = server.NewMCPServer("bench-upstream", "1.0.0", server.WithToolCapabilities(true), server.WithHooks(hooks))
	tools := make([]server.ServerTool, n)
	for i := range tools {
		ro := i%2 == 0
		tools[i] = server.ServerTool{
			Tool: mcp.NewTool(fmt.Sprintf("tool_%04d", i),
				mcp.WithDescription(fmt.Sprintf("Tool number %d: does a small, well-described thing to its input.", i)),
				mcp.WithString("query", mcp.Required(), mcp.Description("what to look for")),
				mcp.WithNumber("limit", mcp.Description("how many results")),
				mcp.WithReadOnlyHintAnnotation(ro),
			),
			Handler: func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			},
		}
	}
	u.srv.AddTools(tools...)
	h := server.NewStreamableHTTPServer(u.srv)
	u.http = httptest.NewServer(h)
	tb.Cleanup(u.http.Close)
	return u
}

// newBenchServer starts viewmux's aggregator and session server over one
// upstream, with extra config text appended.
func newBenchServer(tb testing.TB, upURL, extra string) *Server {
	tb.Helper()
	return newServerWith(tb, upURL, extra, Options{})
}

// newServerWith is newBenchServer with options.
func newServerWith(tb testing.TB, upURL, extra string, opts Options) *Server {
	tb.Helper()
	text := fmt.Sprintf("[upstreams.up]\nurl = %q\n%s", upURL, extra)
	cfg, err := configs.Parse("bench.toml", []byte(text), nil)
	if err != nil {
		tb.Fatal(err)
	}
	// No idle probe: it comes on its own schedule, and tests that check
	// "nothing reached the upstream" would count it whenever a slow run
	// lasts past a probe interval.
	noProbe := func(*configs.Upstream) upstream.Options { return upstream.Options{ProbeInterval: -1} }
	opts.Aggregator.Upstream = noProbe
	s, err := New(cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	agg := s.Aggregator()
	tb.Cleanup(func() { agg.Close() })
	if err := agg.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	s.MarkStarted()
	tb.Cleanup(func() { s.Shutdown(context.Background()) })
	return s
}

// post sends one JSON-RPC message to h in-process and returns the
// response.
func post(h http.Handler, query, session, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newRequest(query, session, body))
	return rec
}

// newRequest builds a loopback POST /mcp carrying one JSON-RPC message.
func newRequest(query, session, body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp"+query, strings.NewReader(body))
	req.Host = "127.0.0.1"
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set(mcp.HeaderSessionID, session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	return req
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`

// openSession initializes a legacy session and returns its id.
func openSession(tb testing.TB, h http.Handler, query string) string {
	tb.Helper()
	rec := post(h, query, "", initializeBody)
	id := rec.Header().Get(mcp.HeaderSessionID)
	if rec.Code != http.StatusOK || id == "" {
		tb.Fatalf("initialize%s: %d %s", query, rec.Code, rec.Body.String())
	}
	post(h, query, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return id
}

// sink is a ResponseWriter that keeps the first bytes written and counts
// the rest, so benchmarks measure the handler, not a recorder's buffer.
type sink struct {
	header http.Header
	code   int
	head   []byte
	n      int
}

func (s *sink) Header() http.Header { return s.header }
func (s *sink) WriteHeader(c int)   { s.code = c }
func (s *sink) Write(p []byte) (int, error) {
	if len(s.head) < 256 {
		s.head = append(s.head, p[:min(len(p), 256-len(s.head))]...)
	}
	s.n += len(p)
	return len(p), nil
}

// postSink is post with a sink.
func postSink(h http.Handler, query, session, body string) *sink {
	w := &sink{header: make(http.Header), code: http.StatusOK}
	h.ServeHTTP(w, newRequest(query, session, body))
	return w
}

// timeEach runs fn b.N times and reports the p50 and p99 of single runs.
func timeEach(b *testing.B, fn func()) {
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		fn()
		d = append(d, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkToolsList measures tools/list of a 1,000-tool view through
// viewmux's HTTP handler, in-process, against the same listing answered by
// mcp-go directly (the upstream's own MCPServer.HandleMessage).
func BenchmarkToolsList(b *testing.B) {
	up := newUpstreamServer(b, 1000)
	s := newBenchServer(b, up.http.URL, "")
	h := s.Handler()
	sid := openSession(b, h, "")
	body := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if rec := post(h, "", sid, body); !bytes.Contains(rec.Body.Bytes(), []byte(`"up__tool_0999"`)) {
		b.Fatalf("listing lacks the last tool: %.200s", rec.Body.String())
	}
	before := up.requests.Load()
	b.Run("viewmux", func(b *testing.B) {
		timeEach(b, func() {
			if w := postSink(h, "", sid, body); w.code != http.StatusOK || w.n < 100000 {
				b.Fatalf("tools/list: %d, %d bytes: %s", w.code, w.n, w.head)
			}
		})
	})
	if n := up.requests.Load() - before; n != 0 {
		b.Fatalf("tools/list reached the upstream %d times", n)
	}
	b.Run("direct-mcp-go", func(b *testing.B) {
		ctx := context.Background()
		timeEach(b, func() {
			// Include encoding: viewmux's figure includes writing the bytes.
			if err := json.NewEncoder(&sink{header: http.Header{}}).Encode(up.srv.HandleMessage(ctx, []byte(body))); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkDeniedCall measures a tools/call of a hidden tool: answered by
// the gate with -32601 and never sent upstream.
func BenchmarkDeniedCall(b *testing.B) {
	up := newUpstreamServer(b, 1000)
	s := newBenchServer(b, up.http.URL, "[profiles.readonly]\nread_only = true\n")
	h := s.Handler()
	sid := openSession(b, h, "?profile=readonly")
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"x"}}}`
	if rec := post(h, "?profile=readonly", sid, body); !strings.Contains(rec.Body.String(), `"code":-32601`) {
		b.Fatalf("hidden tool not refused: %s", rec.Body.String())
	}
	before := up.requests.Load()
	reportLeftovers(b, func() {
		timeEach(b, func() {
			if w := postSink(h, "?profile=readonly", sid, body); !bytes.Contains(w.head, []byte(`"code":-32601`)) {
				b.Fatalf("hidden tool not refused: %s", w.head)
			}
		})
	})
	if n := up.requests.Load() - before; n != 0 {
		b.Fatalf("denied calls reached the upstream %d times", n)
	}
	b.ReportMetric(0, "upstream-requests")
}

// BenchmarkSessions opens 10,000 sessions over 50 distinct rule sets and
// reports the heap they hold and the number of filter instances.
func BenchmarkSessions(b *testing.B) {
	const sessions, ruleSets = 10000, 50
	up := newUpstreamServer(b, 1000)
	var extra strings.Builder
	for i := range ruleSets {
		fmt.Fprintf(&extra, "[profiles.p%02d]\nallow = [\"up__tool_%02d*\"]\n", i, i)
	}
	for range b.N {
		s := newBenchServer(b, up.http.URL, extra.String())
		h := s.Handler()
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for i := range sessions {
			openSession(b, h, fmt.Sprintf("?profile=p%02d", i%ruleSets))
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		if got := s.Sessions(); got != sessions {
			b.Fatalf("sessions = %d, want %d", got, sessions)
		}
		if got := s.Registry().Instances(); got != ruleSets {
			b.Fatalf("filter instances = %d, want %d", got, ruleSets)
		}
		b.ReportMetric(float64(m1.HeapAlloc)/(1<<20), "heap-MB")
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/(1<<20), "sessions-heap-MB")
		b.ReportMetric(float64(s.Registry().Instances()), "filters")
	}
}

// BenchmarkAllowedCall measures a forwarded tools/call end to end through
// viewmux's handler to a real loopback upstream, for profiling the request
// path (go test -bench AllowedCall -cpuprofile). The upstream's own share
// is in the same process here; integration/load compares against a floor.
func BenchmarkAllowedCall(b *testing.B) {
	up := newUpstreamServer(b, 10)
	s := newBenchServer(b, up.http.URL, "")
	h := s.Handler()
	sid := openSession(b, h, "")
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"x"}}}`
	reportLeftovers(b, func() {
		timeEach(b, func() {
			if w := postSink(h, "", sid, body); !bytes.Contains(w.head, []byte(`"ok"`)) {
				b.Fatalf("call not answered: %s", w.head)
			}
		})
	})
}

// BenchmarkAmbiguousCall measures a tools/call whose arguments hold two
// keys equal under case folding: refused with -32602, never sent upstream,
// and leaving nothing behind however often it is repeated.
func BenchmarkAmbiguousCall(b *testing.B) {
	up := newUpstreamServer(b, 10)
	s := newBenchServer(b, up.http.URL, "")
	h := s.Handler()
	sid := openSession(b, h, "")
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"x","Query":"y"}}}`
	before := up.requests.Load()
	reportLeftovers(b, func() {
		timeEach(b, func() {
			if w := postSink(h, "", sid, body); !bytes.Contains(w.head, []byte(`"code":-32602`)) {
				b.Fatalf("ambiguous call not refused: %s", w.head)
			}
		})
	})
	if n := up.requests.Load() - before; n != 0 {
		b.Fatalf("ambiguous calls reached the upstream %d times", n)
	}
}

// reportLeftovers runs fn and reports what it left behind after a GC:
// heap growth and the goroutines still running. Nothing a request
// allocates should outlive it.
func reportLeftovers(b *testing.B, fn func()) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/1e6, "heap-growth-MB")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
}
