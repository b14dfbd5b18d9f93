package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/wire"
)

// rootsHook is an Options.OnRequest answering roots/list with roots.
func rootsHook(roots string) func(context.Context, *Upstream, string, json.RawMessage) (json.RawMessage, error) {
	return func(_ context.Context, _ *Upstream, method string, _ json.RawMessage) (json.RawMessage, error) {
		if method != string(mcp.MethodListRoots) {
			return nil, &RPCError{Code: mcp.METHOD_NOT_FOUND, Message: method}
		}
		return json.RawMessage(roots), nil
	}
}

func TestWebsocketSession(t *testing.T) {
	for _, protocol := range []string{"", mcp.LATEST_LEGACY_PROTOCOL_VERSION} {
		name := "negotiated"
		if protocol != "" {
			name = "pinned " + protocol
		}
		t.Run(name, func(t *testing.T) {
			peer := newWSPeer(newWSTestServer())
			cfg := wsConfig("sock", peer.listen(t))
			cfg.Protocol = protocol
			opts := fastOptions(&logSink{})
			const root = "file:///wsroot/é"
			opts.OnRequest = rootsHook(`{"roots":[{"uri":"` + root + `","name":"ws root"}]}`)
			u := New(cfg, opts)
			startUpstream(t, u)

			t.Run("handshake headers", func(t *testing.T) {
				headers, _, _ := peer.snapshot()
				if len(headers) != 1 {
					t.Fatalf("%d handshakes, want 1", len(headers))
				}
				if got := headers[0].Get("X-Test-Header"); got != "from-config" {
					t.Errorf("X-Test-Header = %q, want from-config", got)
				}
				if got := headers[0].Get("Sec-WebSocket-Protocol"); got != wsSubprotocol {
					t.Errorf("Sec-WebSocket-Protocol = %q, want %q", got, wsSubprotocol)
				}
			})

			t.Run("server to client request", func(t *testing.T) {
				var resp struct {
					ID     string              `json:"id"`
					Result mcp.ListRootsResult `json:"result"`
					Error  json.RawMessage     `json:"error"`
				}
				raw := callText(t, u, "roots", nil)
				if err := json.Unmarshal([]byte(raw), &resp); err != nil {
					t.Fatalf("roots/list response %s: %v", raw, err)
				}
				if resp.Error != nil || len(resp.Result.Roots) != 1 || resp.Result.Roots[0].URI != root {
					t.Errorf("roots/list response = %s, want the root %q", raw, root)
				}
				if !strings.HasPrefix(resp.ID, "srv-") {
					t.Errorf("response id %q does not echo the server's string id", resp.ID)
				}
			})

			t.Run("cancellation is sent upstream", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				var req mcp.CallToolRequest
				req.Params.Name = "slow"
				req.Params.Arguments = map[string]any{"ms": 30000}
				if _, err := u.CallTool(ctx, req); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("CallTool = %v, want a deadline error", err)
				}
				waitFor(t, 5*time.Second, "notifications/cancelled at the server", func() bool {
					_, _, cancels := peer.snapshot()
					return len(cancels) > 0
				})
				if u.State() != StateUp {
					t.Errorf("State = %v after a cancelled call, want up", u.State())
				}
				callText(t, u, "echo", map[string]any{})
			})

			t.Run("concurrent calls", func(t *testing.T) {
				const n = 20
				errs := make(chan error, n)
				for i := range n {
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						var req mcp.CallToolRequest
						req.Params.Name = "echo"
						want := fmt.Sprintf(`{"i":%d,"s":"ü"}`, i)
						req.Params.Arguments = json.RawMessage(want)
						res, err := u.CallTool(ctx, req)
						if err == nil {
							if tc, ok := mcp.AsTextContent(res.Content[0]); !ok || tc.Text != want {
								err = fmt.Errorf("call %d answered %+v", i, res.Content)
							}
						}
						errs <- err
					}()
				}
				for range n {
					if err := <-errs; err != nil {
						t.Error(err)
					}
				}
			})
		})
	}
}

// TestWebsocketConnectErrors checks that a server that is not an MCP
// websocket server fails Start with an error naming the upstream and saying
// what is wrong.
func TestWebsocketConnectErrors(t *testing.T) {
	cases := []struct {
		name  string
		url   func(t *testing.T) string
		wants []string
	}{
		{
			name: "server selects no subprotocol",
			url: func(t *testing.T) string {
				peer := newWSPeer(newTestServer())
				peer.subprotocols = nil
				return peer.listen(t)
			},
			wants: []string{`upstream "sock"`, `selected no subprotocol; MCP needs "mcp"`},
		},
		{
			name: "not a websocket endpoint",
			url: func(t *testing.T) string {
				ts := httptest.NewServer(http.NotFoundHandler())
				t.Cleanup(ts.Close)
				return "ws" + strings.TrimPrefix(ts.URL, "http") + "/mcp"
			},
			wants: []string{`upstream "sock"`, "websocket handshake", "101", "404"},
		},
		{
			name: "nothing listening",
			url: func(t *testing.T) string {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := ln.Addr().String()
				ln.Close()
				return "ws://" + addr + "/mcp"
			},
			wants: []string{`upstream "sock"`, "websocket handshake", "connection refused"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := wsConfig("sock", tc.url(t))
			cfg.ConnectTimeout = 5 * time.Second
			u := New(cfg, fastOptions(&logSink{}))
			t.Cleanup(func() { u.Close() })
			err := u.Start(context.Background())
			if err == nil {
				t.Fatal("Start succeeded")
			}
			for _, want := range tc.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Start error %q does not contain %q", err, want)
				}
			}
			if u.State() == StateUp {
				t.Error("State = up")
			}
		})
	}
}

// TestWebsocketConnectionFailures breaks a live connection in different
// ways (a message over max_message_bytes is not one: TestWebsocketTooLarge). Each time the call in flight must fail promptly with the reason,
// the server must see the right close status, and the supervisor must
// reconnect (a new handshake) and serve calls again.
func TestWebsocketConnectionFailures(t *testing.T) {
	cases := []struct {
		name      string
		tune      func(cfg *configs.Upstream, opts *Options)
		before    func(t *testing.T, u *Upstream) // runs first, on the healthy connection
		tool      string
		args      any
		wantErr   string
		wantClose int // close status the server receives; 0 = none (no handshake)
		wantLog   string
	}{
		{
			name:      "binary frame",
			tool:      "binary",
			wantErr:   "binary frame",
			wantClose: 1003,
			wantLog:   "closing the websocket connection",
		},
		{
			name: "server stops answering pings",
			tune: func(cfg *configs.Upstream, opts *Options) {
				cfg.ConnectTimeout = time.Second // also the pong timeout
				opts.ProbeInterval = 100 * time.Millisecond
			},
			tool:    "freeze",
			wantErr: "keepalive: no pong within 1s",
			wantLog: "closing an unresponsive websocket connection",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			peer := newWSPeer(newWSTestServer())
			cfg := wsConfig("sock", peer.listen(t))
			logs := &logSink{}
			opts := fastOptions(logs)
			rec := &catalogRecorder{}
			opts.OnCatalog = rec.onCatalog
			if tc.tune != nil {
				tc.tune(cfg, &opts)
			}
			u := New(cfg, opts)
			startUpstream(t, u)
			if tc.before != nil {
				tc.before(t, u)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var req mcp.CallToolRequest
			req.Params.Name = tc.tool
			req.Params.Arguments = tc.args
			_, err := u.CallTool(ctx, req)
			if err == nil {
				t.Fatal("CallTool succeeded")
			}
			if !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `upstream "sock"`) {
				t.Errorf("CallTool error = %v, want ErrDown naming the upstream and %q", err, tc.wantErr)
			}
			if !hasLog(logs, "sock", tc.wantLog, "") {
				t.Errorf("no log %q", tc.wantLog)
			}
			if tc.wantClose != 0 {
				waitFor(t, 5*time.Second, fmt.Sprintf("close status %d at the server", tc.wantClose), func() bool {
					_, codes, _ := peer.snapshot()
					return slices.Contains(codes, tc.wantClose)
				})
			}

			waitFor(t, 10*time.Second, "reconnect", func() bool {
				headers, _, _ := peer.snapshot()
				s := rec.snapshot()
				return len(headers) >= 2 && rec.sawDown() && s[len(s)-1] != nil && u.State() == StateUp
			})
			if got := callText(t, u, "echo", map[string]any{"after": "reconnect"}); got != `{"after":"reconnect"}` {
				t.Errorf("echo after reconnect = %q", got)
			}
		})
	}
}

// TestWebsocketServerKilledMidCall drops the server's sockets (as the
// kernel does when the server process dies) while a call is in flight: the
// call must fail within a second, and once a server listens again on the
// same address the supervisor must reconnect.
func TestWebsocketServerKilledMidCall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first := newWSPeer(newTestServer())
	firstHTTP := first.serve(t, ln)

	rec := &catalogRecorder{}
	opts := fastOptions(&logSink{})
	opts.OnCatalog = rec.onCatalog
	u := New(wsConfig("sock", "ws://"+addr+"/mcp"), opts)
	startUpstream(t, u)
	callText(t, u, "echo", map[string]any{})

	type outcome struct {
		err error
		at  time.Time
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var req mcp.CallToolRequest
		req.Params.Name = "slow"
		req.Params.Arguments = map[string]any{"ms": 20000}
		_, err := u.CallTool(ctx, req)
		done <- outcome{err, time.Now()}
	}()
	time.Sleep(200 * time.Millisecond) // let the call reach the server

	killed := time.Now()
	firstHTTP.Close() // stop accepting
	first.Close()     // drop every connection
	var got outcome
	select {
	case got = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight did not fail within 5s of the server dying")
	}
	if d := got.at.Sub(killed); d > time.Second {
		t.Errorf("the call failed %s after the server died, want < 1s", d)
	}
	if !errors.Is(got.err, ErrDown) || !strings.Contains(got.err.Error(), `upstream "sock"`) {
		t.Errorf("CallTool error = %v, want ErrDown naming the upstream", got.err)
	}
	waitFor(t, 5*time.Second, "the upstream to be seen down", rec.sawDown)

	second := newWSPeer(newTestServer())
	waitFor(t, 5*time.Second, "listening again on "+addr, func() bool {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			second.serve(t, ln)
		}
		return err == nil
	})
	waitFor(t, 15*time.Second, "reconnect", func() bool {
		s := rec.snapshot()
		return s[len(s)-1] != nil && u.State() == StateUp
	})
	callText(t, u, "echo", map[string]any{})
	if headers, _, _ := second.snapshot(); len(headers) != 1 {
		t.Errorf("second server saw %d handshakes, want 1", len(headers))
	}
}

// TestWebsocketCloseWaitsForGoroutines checks that Close leaves no goroutine
// of the transport behind, also after a failed handshake.
func TestWebsocketCloseWaitsForGoroutines(t *testing.T) {
	ours := func() []string {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var out []string
		for g := range strings.SplitSeq(string(buf), "\n\n") {
			if strings.Contains(g, "upstream.(*wsTransport)") {
				out = append(out, g)
			}
		}
		return out
	}
	peer := newWSPeer(newWSTestServer())
	opts := fastOptions(&logSink{})
	opts.ProbeInterval = 50 * time.Millisecond
	opts.OnRequest = rootsHook(`{"roots":[]}`)
	u := New(wsConfig("sock", peer.listen(t)), opts)
	if err := u.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	callText(t, u, "roots", nil)
	time.Sleep(120 * time.Millisecond) // a ping or two
	if len(ours()) == 0 {
		t.Fatal("no transport goroutine found while connected: this check proves nothing")
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if left := ours(); len(left) > 0 {
		t.Fatalf("goroutines of the transport survive Close:\n%s", strings.Join(left, "\n\n"))
	}

	noSub := newWSPeer(newTestServer())
	noSub.subprotocols = nil
	u = New(wsConfig("sock", noSub.listen(t)), fastOptions(&logSink{}))
	if err := u.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded without the mcp subprotocol")
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if left := ours(); len(left) > 0 {
		t.Fatalf("goroutines of the transport survive a failed Start and Close:\n%s", strings.Join(left, "\n\n"))
	}
}

// TestWebsocketStartCtxBoundsOnlyTheHandshake checks that ending Start's ctx
// afterwards leaves the connection working (the library's Read and Write
// would close it).
func TestWebsocketStartCtxBoundsOnlyTheHandshake(t *testing.T) {
	tr := newWSTransport(newWSPeer(newTestServer()).listen(t), wsOptions{ReadLimit: 1 << 20})
	ctx, cancel := context.WithCancel(context.Background())
	if err := tr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	w := wire.New(tr, wire.Options{Name: "sock"})
	w.Start()
	t.Cleanup(func() {
		w.Close()
		w.Wait()
	})
	cancel()
	time.Sleep(50 * time.Millisecond)
	reqCtx, reqCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer reqCancel()
	if _, err := w.Call(reqCtx, string(mcp.MethodPing), nil); err != nil {
		t.Fatalf("ping after Start's ctx ended: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Call(reqCtx, string(mcp.MethodPing), nil); !errors.Is(err, wire.ErrClosed) {
		t.Errorf("Call after Close = %v, want wire.ErrClosed", err)
	}
}

// TestWebsocketTooLarge: an answer over max_message_bytes fails only its
// own call, saying it is too large and naming the upstream and the limit,
// while another call in flight on the same connection succeeds; the
// connection stays up (no close, no new handshake).
func TestWebsocketTooLarge(t *testing.T) {
	peer := newWSPeer(newWSTestServer())
	cfg := wsConfig("sock", peer.listen(t))
	cfg.MaxMessageBytes = 64 << 10
	logs := &logSink{}
	opts := fastOptions(logs)
	rec := &catalogRecorder{}
	opts.OnCatalog = rec.onCatalog
	u := New(cfg, opts)
	startUpstream(t, u)
	// Over the library's default 32 KiB, under the configured limit.
	if got := callText(t, u, "big", map[string]any{"n": 50_000}); len(got) != 50_000 {
		t.Fatalf("big 50000 returned %d bytes", len(got))
	}
	before := u.Health()

	other := make(chan error, 1)
	go func() {
		var req mcp.CallToolRequest
		req.Params.Name = "slow"
		req.Params.Arguments = map[string]any{"ms": 300}
		_, err := u.CallTool(context.Background(), req)
		other <- err
	}()
	var req mcp.CallToolRequest
	req.Params.Name = "big"
	req.Params.Arguments = map[string]any{"n": 100_000}
	_, err := u.CallTool(context.Background(), req)
	if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrDown) || !strings.Contains(err.Error(), `upstream "sock": tools/call "big"`) ||
		!strings.Contains(err.Error(), "exceeds max_message_bytes (65536 bytes)") {
		t.Fatalf("oversized result: err = %v", err)
	}
	if err := <-other; err != nil {
		t.Errorf("the other call on the connection failed: %v", err)
	}
	if got := callText(t, u, "echo", map[string]any{"after": "big"}); got != `{"after":"big"}` {
		t.Errorf("echo after the big answer = %q", got)
	}
	headers, codes, _ := peer.snapshot()
	after := u.Health()
	if len(headers) != 1 || len(codes) != 0 || after.Restarts != before.Restarts || after.Connects != before.Connects || rec.sawDown() {
		t.Errorf("the connection did not stay up: %d handshakes, close codes %v, health before %+v after %+v", len(headers), codes, before, after)
	}
}
