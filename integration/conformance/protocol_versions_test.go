//go:build unix

package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// eraUpstream is an mcp-go streamable HTTP server in the test process that
// serves only some protocol versions and records what it was sent. Tools:
// echo {text} → "<name>: <text>"; count {n, interval_ms} → n progress
// notifications interval_ms apart (when the call has a progress token), then
// after interval_ms more "counted to n"; a count whose context ends early is
// reported on cancelled.
type eraUpstream struct {
	name      string
	URL       string
	cancelled chan int // the step a cancelled count had reached

	mu   sync.Mutex
	seen []eraRequest
}

// eraRequest is one POSTed JSON-RPC message as the upstream received it.
type eraRequest struct {
	Method      string // JSON-RPC method ("" for a response)
	Header      string // Mcp-Protocol-Version
	Meta        string // _meta io.modelcontextprotocol/protocolVersion
	InitVersion string // params.protocolVersion of initialize
}

func (r eraRequest) String() string {
	return fmt.Sprintf("%s (header %q, _meta %q, initialize %q)", r.Method, r.Header, r.Meta, r.InitVersion)
}

// startEraUpstream starts the server, serving versions only. With
// refuseInitialize, initialize is answered as a server that only speaks
// 2026-07-28 answers a method that version removed: -32601 Method not found,
// HTTP 404. (mcp-go itself still accepts initialize when restricted to
// 2026-07-28, so this is what makes the server truly modern-only.)
func startEraUpstream(t *testing.T, name string, versions []string, refuseInitialize bool) *eraUpstream {
	t.Helper()
	u := &eraUpstream{name: name, cancelled: make(chan int, 8)}
	srv := server.NewMCPServer(name, "1.0.0", server.WithToolCapabilities(true))
	srv.AddTool(mcp.NewTool("echo", mcp.WithString("text", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(name + ": " + req.GetString("text", "")), nil
		})
	srv.AddTool(mcp.NewTool("count", mcp.WithNumber("n"), mcp.WithNumber("interval_ms")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n, interval := req.GetInt("n", 3), time.Duration(req.GetInt("interval_ms", 20))*time.Millisecond
			var token mcp.ProgressToken
			if req.Params.Meta != nil {
				token = req.Params.Meta.ProgressToken
			}
			for i := 1; i <= n; i++ {
				select {
				case <-ctx.Done():
					u.cancelled <- i - 1
					return nil, ctx.Err()
				case <-time.After(interval):
				}
				if token == nil {
					continue
				}
				err := srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), map[string]any{
					"progressToken": token, "progress": i, "total": n, "message": fmt.Sprintf("step %d of %d", i, n),
				})
				if err != nil {
					t.Errorf("upstream %s: progress %d: %v", name, i, err)
				}
			}
			// mcp-go's streamable HTTP server can let a notification queued
			// right before the handler returns fall behind the result, so the
			// tool waits once more: this upstream then delivers every step
			// before its result (the "direct" cases prove it).
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
			return mcp.NewToolResultText(fmt.Sprintf("counted to %d", n)), nil
		})
	h := server.NewStreamableHTTPServer(srv, server.WithStreamableHTTPProtocolVersions(versions...))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					ProtocolVersion string         `json:"protocolVersion"`
					Meta            map[string]any `json:"_meta"`
				} `json:"params"`
			}
			_ = json.Unmarshal(body, &msg)
			meta, _ := msg.Params.Meta[mcp.MetaKeyProtocolVersion].(string)
			u.mu.Lock()
			u.seen = append(u.seen, eraRequest{Method: msg.Method, Header: r.Header.Get(mcp.HeaderProtocolVersion), Meta: meta, InitVersion: msg.Params.ProtocolVersion})
			u.mu.Unlock()
			if refuseInitialize && msg.Method == string(mcp.MethodInitialize) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`, msg.ID)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	u.URL = ts.URL + "/mcp"
	return u
}

// requests returns what the upstream has been sent so far.
func (u *eraUpstream) requests() []eraRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

// countMsg is the progress message of the era upstreams' count tool.
func countMsg(n int) func(int) string {
	return func(i int) string { return fmt.Sprintf("step %d of %d", i, n) }
}

// eraSteps is what EraProgress.steps returns for n steps whose messages are
// produced by msg.
func eraSteps(n int, msg func(i int) string) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("%d/%d %s", i, n, msg(i)))
	}
	return out
}

func eraToolNames(tools []mcp.Tool) []string {
	var out []string
	for _, tl := range tools {
		out = append(out, tl.Name)
	}
	return out
}

// eraCheckProgress calls tool (a counting tool: n steps of progress, then
// "counted to n") with a progress token and checks that exactly the n steps
// arrived, in order, before the result. Steps that arrive later are named.
func eraCheckProgress(t *testing.T, ctx context.Context, c *client.Client, progress *itest.EraProgress, tool string, args map[string]any, n int, msg func(i int) string) {
	t.Helper()
	token := "tok-" + tool
	progress.Reset()
	got := itest.EraCall(t, ctx, c, tool, args, token)
	steps, others := progress.Steps(token)
	want := eraSteps(n, msg)
	if got == fmt.Sprintf("counted to %d", n) && slices.Equal(steps, want) && others == 0 {
		return
	}
	time.Sleep(500 * time.Millisecond)
	later, _ := progress.Steps(token)
	t.Errorf("%s = %q with progress %q (+%d other) before it, want \"counted to %d\" with %q before it; within 500ms after the result: %q",
		tool, got, steps, others, n, want, later[len(steps):])
}

// eraWaitStderr waits until viewmux's stderr matches re.
func eraWaitStderr(mux *itest.Mux, re *regexp.Regexp, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !re.MatchString(mux.Stderr()) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// TestProtocolVersions runs mcp-go clients of one protocol era through
// viewmux to upstreams of the other: a stateless 2026-07-28 client to legacy
// upstreams, and a 2025-11-25 client to a 2026-07-28-only upstream.
func TestProtocolVersions(t *testing.T) {
	t.Run("modern client, legacy upstreams", func(t *testing.T) {
		legacy := startEraUpstream(t, "legacy", mcp.LegacyProtocolVersions(), false)
		mux := itest.StartMux(t, fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.legacy]
url = %s
required = true

[upstreams.d]
command = %s
args = ["demo-server", "--name", "d"]
protocol = "2025-11-25"
required = true
`, itest.TomlString(legacy.URL), itest.TomlString(itest.MuxBinary(t))))
		if !regexp.MustCompile(`msg="upstream up" upstream=d transport=stdio protocol=2025-11-25 `).MatchString(mux.Stderr()) {
			t.Errorf("viewmux did not report upstream d up on protocol 2025-11-25")
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := client.NewStreamableHttpClient(mux.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		progress := itest.NewEraProgress()
		c.OnNotification(progress.Handle)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var init mcp.InitializeRequest
		init.Params.ClientInfo = mcp.Implementation{Name: "protocol-versions-test", Version: "1.0.0"}
		res, err := c.Initialize(ctx, init)
		if err != nil {
			t.Fatalf("initialize: %v", err)
		}
		if c.ProtocolVersion() != mcp.ProtocolVersion20260728 || res.ProtocolVersion != mcp.ProtocolVersion20260728 {
			t.Fatalf("negotiated %q (result %q), want %s via server/discover", c.ProtocolVersion(), res.ProtocolVersion, mcp.ProtocolVersion20260728)
		}
		if id := c.GetSessionId(); id != "" {
			t.Errorf("stateless client got session id %q", id)
		}

		tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		names := eraToolNames(tools.Tools)
		for _, want := range []string{"legacy__echo", "legacy__count", "d__echo", "d__slow_count"} {
			if !slices.Contains(names, want) {
				t.Errorf("tools/list lacks %s; got %v", want, names)
			}
		}

		if got := itest.EraCall(t, ctx, c, "legacy__echo", map[string]any{"text": "héllo ✓"}, nil); got != "legacy: héllo ✓" {
			t.Errorf("legacy__echo = %q", got)
		}
		if got := itest.EraCall(t, ctx, c, "d__echo", map[string]any{"text": "héllo ✓"}, nil); got != "héllo ✓" {
			t.Errorf("d__echo = %q", got)
		}

		t.Run("progress", func(t *testing.T) {
			t.Run("direct", func(t *testing.T) {
				// The oracle: the upstream itself, to a client of its era.
				d, progress := itest.EraConnect(t, ctx, legacy.URL, client.WithProtocolVersion(mcp.ProtocolVersion20251125))
				eraCheckProgress(t, ctx, d, progress, "count", map[string]any{"n": 4, "interval_ms": 30}, 4, countMsg(4))
			})
			eraCheckProgress(t, ctx, c, progress, "legacy__count", map[string]any{"n": 4, "interval_ms": 30}, 4, countMsg(4))
			// The demo server sends its last step right before its result,
			// and mcp-go's stdio server sometimes writes that result first
			// (seen with an mcp-go client on the demo server directly), so
			// only the steps before the last are certain to come first.
			progress.Reset()
			got := itest.EraCall(t, ctx, c, "d__slow_count", map[string]any{"count": 3, "interval_ms": 30}, "tok-d")
			steps, others := progress.Steps("tok-d")
			want := eraSteps(3, func(i int) string { return fmt.Sprintf("%d/3", i) })
			if got != "counted to 3" || len(steps) < 2 || !slices.Equal(steps, want[:len(steps)]) || others != 0 {
				t.Errorf("d__slow_count = %q with progress %q (+%d other) before it, want \"counted to 3\" after %q (the last may lag)", got, steps, others, want)
			}
		})

		t.Run("cancellation reaches the stdio upstream", func(t *testing.T) {
			// Closing the request's stream is a 2026-07-28 client's
			// cancellation; viewmux must turn it into notifications/cancelled
			// for the stdio upstream, whose slow_count logs when it stops.
			progress := itest.NewEraProgress()
			c2, err := client.NewStreamableHttpClient(mux.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			c2.OnNotification(progress.Handle)
			if err := c2.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c2.Initialize(ctx, init); err != nil {
				t.Fatal(err)
			}
			callCtx, stop := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() {
				_, err := c2.CallTool(callCtx, itest.EraRequestOf("d__slow_count", map[string]any{"count": 100, "interval_ms": 100}, "tok-cancel"))
				errc <- err
			}()
			select {
			case <-progress.First:
			case err := <-errc:
				stop()
				t.Fatalf("slow_count ended before any progress: %v", err)
			case <-time.After(10 * time.Second):
				stop()
				t.Fatal("no progress from d__slow_count within 10s")
			}
			stop()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled call returned %v, want context.Canceled", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the cancelled call did not return within 2s")
			}
			if !eraWaitStderr(mux, regexp.MustCompile(`upstream=d stderr=".*tool call cancelled.*slow_count`), 5*time.Second) {
				t.Errorf("upstream d never logged that slow_count was cancelled")
			}
			if got := itest.EraCall(t, ctx, c2, "d__echo", map[string]any{"text": "after"}, nil); got != "after" {
				t.Errorf("d__echo after the cancellation = %q", got)
			}
		})

		t.Run("the legacy upstream was spoken to in 2025-11-25", func(t *testing.T) {
			initialized, calls := false, 0
			for _, r := range legacy.requests() {
				switch {
				case r.Method == string(mcp.MethodServerDiscover):
					// viewmux's probe, which the server refuses
				case r.Method == string(mcp.MethodInitialize):
					if r.InitVersion != mcp.ProtocolVersion20251125 {
						t.Errorf("initialize asked for %q, want %s", r.InitVersion, mcp.ProtocolVersion20251125)
					}
					initialized = true
				case r.Meta != "" || r.Header != mcp.ProtocolVersion20251125:
					t.Errorf("request %v is not a 2025-11-25 one", r)
				}
				if r.Method == string(mcp.MethodToolsCall) {
					calls++
				}
			}
			if !initialized || calls < 2 {
				t.Errorf("upstream saw initialize=%v and %d tools/call, want initialize and ≥ 2 calls: %v", initialized, calls, legacy.requests())
			}
		})
	})

	// A 2026-07-28-only upstream must work as configured by default, and
	// with its version pinned.
	for _, pin := range []string{"", mcp.ProtocolVersion20260728} {
		name := "legacy client, modern upstream"
		if pin != "" {
			name += ", protocol pinned"
		}
		t.Run(name, func(t *testing.T) { testLegacyClientModernUpstream(t, pin) })
	}
}

// testLegacyClientModernUpstream runs a 2025-11-25 mcp-go client through
// viewmux to a 2026-07-28-only upstream, configured with protocol = pin
// ("" = none).
func testLegacyClientModernUpstream(t *testing.T, pin string) {
	modern := startEraUpstream(t, "modern", []string{mcp.ProtocolVersion20260728}, true)
	protocol := ""
	if pin != "" {
		protocol = "protocol = " + itest.TomlString(pin) + "\n"
	}
	mux := itest.StartMux(t, fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.modern]
url = %s
required = true
%s`, itest.TomlString(modern.URL), protocol))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := transport.NewStreamableHTTP(mux.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, client.WithProtocolVersion(mcp.ProtocolVersion20251125))
	defer c.Close()
	progress := itest.NewEraProgress()
	c.OnNotification(progress.Handle)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: "protocol-versions-test", Version: "1.0.0"}
	res, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if c.ProtocolVersion() != mcp.ProtocolVersion20251125 || res.ProtocolVersion != mcp.ProtocolVersion20251125 {
		t.Fatalf("negotiated %q (result %q), want %s", c.ProtocolVersion(), res.ProtocolVersion, mcp.ProtocolVersion20251125)
	}
	if c.GetSessionId() == "" {
		t.Errorf("legacy client got no session id")
	}

	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	if names := slices.Sorted(slices.Values(eraToolNames(tools.Tools))); !slices.Equal(names, []string{"modern__count", "modern__echo"}) {
		t.Errorf("tools/list = %v, want [modern__count modern__echo]", names)
	}
	if got := itest.EraCall(t, ctx, c, "modern__echo", map[string]any{"text": "héllo ✓"}, nil); got != "modern: héllo ✓" {
		t.Errorf("modern__echo = %q", got)
	}

	t.Run("progress", func(t *testing.T) {
		t.Run("direct", func(t *testing.T) {
			d, progress := itest.EraConnect(t, ctx, modern.URL)
			if d.ProtocolVersion() != mcp.ProtocolVersion20260728 {
				t.Fatalf("direct client negotiated %q", d.ProtocolVersion())
			}
			eraCheckProgress(t, ctx, d, progress, "count", map[string]any{"n": 4, "interval_ms": 30}, 4, countMsg(4))
		})
		eraCheckProgress(t, ctx, c, progress, "modern__count", map[string]any{"n": 4, "interval_ms": 30}, 4, countMsg(4))
	})

	t.Run("cancellation reaches the modern upstream", func(t *testing.T) {
		progress.Reset()
		first := itest.NewEraProgress()
		c.OnNotification(first.Handle)
		callCtx, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := c.CallTool(callCtx, itest.EraRequestOf("modern__count", map[string]any{"n": 100, "interval_ms": 100}, "tok-cancel"))
			errc <- err
		}()
		select {
		case <-first.First:
		case err := <-errc:
			stop()
			t.Fatalf("count ended before any progress: %v", err)
		case <-time.After(10 * time.Second):
			stop()
			t.Fatal("no progress from modern__count within 10s")
		}
		stop()
		select {
		case <-errc:
		case <-time.After(2 * time.Second):
			t.Fatal("the cancelled call did not return within 2s")
		}
		select {
		case step := <-modern.cancelled:
			if step >= 100 {
				t.Errorf("count ran to the end")
			}
		case <-time.After(5 * time.Second):
			t.Errorf("the upstream's count was not cancelled within 5s")
		}
		if got := itest.EraCall(t, ctx, c, "modern__echo", map[string]any{"text": "after"}, nil); got != "modern: after" {
			t.Errorf("modern__echo after the cancellation = %q", got)
		}
	})

	t.Run("the upstream was spoken to in 2026-07-28 only", func(t *testing.T) {
		// viewmux first offers 2025-11-25 (see README, "Upstream protocol
		// versions"): a modern-only upstream refuses that one initialize,
		// and everything after it must be 2026-07-28.
		calls, inits := 0, 0
		for _, r := range modern.requests() {
			if r.Method == string(mcp.MethodInitialize) {
				inits++
				continue
			}
			if r.Header != mcp.ProtocolVersion20260728 || r.Meta != mcp.ProtocolVersion20260728 {
				t.Errorf("request %v is not a 2026-07-28 one", r)
			}
			if r.Method == string(mcp.MethodToolsCall) {
				calls++
			}
		}
		if calls < 3 {
			t.Errorf("upstream saw %d tools/call, want ≥ 3: %v", calls, modern.requests())
		}
		if inits > 1 {
			t.Errorf("upstream was sent %d initialize requests; one refused probe is expected", inits)
		}
	})
}
