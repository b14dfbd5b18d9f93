package sessions

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// waitCall is a tools/call of the slow upstream's tool that runs until it
// is cancelled.
func waitCall(id int) string { return waitCallWith(id, nil) }

// waitCallWith is waitCall with params._meta.
func waitCallWith(id int, meta map[string]any) string {
	params := map[string]any{"name": "up__wait", "arguments": map[string]any{}}
	if meta != nil {
		params["_meta"] = meta
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	return string(b)
}

// wantShutdownError fails unless m is the JSON-RPC error of a call cut off
// by shutdown.
func wantShutdownError(t *testing.T, door string, m rpcMsg) {
	t.Helper()
	if m.Error == nil || m.Error.Code != -32603 || !strings.Contains(m.Error.Message, "shutting down") {
		t.Errorf("%s: call in flight at shutdown answered %+v %s, want -32603 \"…shutting down…\"", door, m.Error, m.Result)
	}
}

// upstreamSaw waits for one signal of the slow upstream.
func upstreamSaw(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("the upstream never saw the call %s", what)
	}
}

// TestShutdownAnswersCallsInFlight: once Shutdown's ctx is done, the calls
// still running are cancelled upstream and each is answered with a
// JSON-RPC error on its own door, before its connection closes.
func TestShutdownAnswersCallsInFlight(t *testing.T) {
	su := newSlowUpstream(t)
	s := newBenchServer(t, su.url, "")
	h := s.Handler()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	// A call on a /mcp session.
	sid := post(h, "", "", initializeBody).Header().Get(mcp.HeaderSessionID)
	if sid == "" {
		t.Fatal("initialize on /mcp gave no session id")
	}
	post(h, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	onMCP := make(chan *httptest.ResponseRecorder, 1)
	go func() { onMCP <- post(h, "", sid, waitCall(7)) }()
	upstreamSaw(t, su.started, "on /mcp start")

	// A call on a websocket session.
	p := dialWSPeer(t, hs, "", nil)
	initializeAs(t, p, map[string]any{})
	p.send(t, waitCall(8))
	upstreamSaw(t, su.started, "on /ws start")

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the grace is over at once
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()

	wantShutdownError(t, "/ws", await(t, p, 8, nil))
	select {
	case rec := <-onMCP:
		var m rpcMsg
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("/mcp: answer %q: %v", rec.Body.String(), err)
		}
		wantShutdownError(t, "/mcp", m)
	case <-time.After(10 * time.Second):
		t.Fatal("/mcp: the call in flight was not answered")
	}
	upstreamSaw(t, su.cancelled, "on /mcp cancelled")
	upstreamSaw(t, su.cancelled, "on /ws cancelled")
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}

// TestStdioAnswersWhatItRead: when stdin ends or ctx is done with a call
// in flight that outlasts server.shutdown_grace, the call is cancelled
// upstream and answered with a JSON-RPC error before ServeStdio returns.
// A stateless (2026-07-28) call, which runs on a goroutine of its own, is
// answered alike.
func TestStdioAnswersWhatItRead(t *testing.T) {
	closeStdin := func(p *stdioPeer, _ context.CancelFunc) { p.in.Close() }
	cancelCtx := func(_ *stdioPeer, cancel context.CancelFunc) { cancel() }
	modern := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}
	for _, tt := range []struct {
		name string
		end  func(p *stdioPeer, cancel context.CancelFunc)
		meta map[string]any // the call's _meta; nil = a legacy session's call
	}{
		{"stdin closed", closeStdin, nil},
		{"context done", cancelCtx, nil},
		{"stateless call, stdin closed", closeStdin, modern},
		{"stateless call, context done", cancelCtx, modern},
	} {
		t.Run(tt.name, func(t *testing.T) {
			su := newSlowUpstream(t)
			s := newBenchServer(t, su.url, "[server]\nshutdown_grace = \"50ms\"\n")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := startStdio(t, s, ctx, "")
			if tt.meta == nil {
				initializeAs(t, p, map[string]any{})
			}
			p.send(t, waitCallWith(7, tt.meta))
			upstreamSaw(t, su.started, "start")
			tt.end(p, cancel)
			wantShutdownError(t, "stdio", await(t, p, 7, nil))
			upstreamSaw(t, su.cancelled, "cancelled")
			select {
			case err := <-p.done:
				p.done <- err // for the cleanup
				if err != nil {
					t.Fatalf("ServeStdio = %v, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("ServeStdio did not return")
			}
		})
	}
}
