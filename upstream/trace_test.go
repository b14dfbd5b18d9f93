package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/trace"

	"github.com/viewmux/viewmux/configs"
)

// traceSeen is what an upstream got with one tools/call: its traceparent
// header and its params' _meta traceparent.
type traceSeen struct {
	header, meta string
}

// traceRecorder wraps an upstream's handler and records the trace context
// of each tools/call POSTed to it.
type traceRecorder struct {
	next http.Handler
	mu   sync.Mutex
	seen []traceSeen
}

func (rec *traceRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			Method string `json:"method"`
			Params struct {
				Meta struct {
					Traceparent string `json:"traceparent"`
				} `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &m) == nil && m.Method == "tools/call" {
			rec.mu.Lock()
			rec.seen = append(rec.seen, traceSeen{header: r.Header.Get("traceparent"), meta: m.Params.Meta.Traceparent})
			rec.mu.Unlock()
		}
	}
	rec.next.ServeHTTP(w, r)
}

func (rec *traceRecorder) last(t *testing.T) traceSeen {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) == 0 {
		t.Fatal("the upstream got no tools/call")
	}
	return rec.seen[len(rec.seen)-1]
}

// TestTracePropagation: a request whose ctx carries a span context (viewmux's
// span of the routed request) reaches an HTTP and a legacy SSE upstream
// with that span as the traceparent header and as _meta.traceparent,
// replacing the client's own _meta traceparent; without one, nothing is
// added and the client's _meta passes unchanged.
func TestTracePropagation(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	span := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	const mine = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const clients = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

	streamable := &traceRecorder{next: server.NewStreamableHTTPServer(newTestServer())}
	ts := httptest.NewServer(streamable)
	t.Cleanup(ts.Close)
	sse := &traceRecorder{next: newSSEBridge()}
	ts2 := httptest.NewServer(sse)
	t.Cleanup(ts2.Close)
	sseCfg := &configs.Upstream{Name: "sse", Transport: configs.TransportSSE, URL: ts2.URL + "/sse",
		ConnectTimeout: 10 * time.Second, CallTimeout: 30 * time.Second, MaxMessageBytes: scriptedLimit}

	for _, c := range []struct {
		name string
		cfg  *configs.Upstream
		rec  *traceRecorder
		tool string
	}{
		{"streamable HTTP", &configs.Upstream{Name: "http", Transport: configs.TransportHTTP, URL: ts.URL + "/mcp",
			ConnectTimeout: 10 * time.Second, CallTimeout: 30 * time.Second, MaxMessageBytes: 16 << 20}, streamable, "echo"},
		{"legacy SSE", sseCfg, sse, "last_cancel"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := fastOptions(&logSink{})
			opts.ProbeInterval = -1
			u := New(c.cfg, opts)
			startUpstream(t, u)
			send := func(ctx context.Context, params string) {
				t.Helper()
				if _, err := u.Send(ctx, Request{Method: "tools/call", Target: c.tool, Params: json.RawMessage(params)}); err != nil {
					t.Fatalf("tools/call: %v", err)
				}
			}
			traced := trace.ContextWithSpanContext(context.Background(), span)

			send(traced, `{"name":"`+c.tool+`","arguments":{}}`)
			if got := c.rec.last(t); got.header != mine || got.meta != mine {
				t.Errorf("traced call: upstream got header %q, _meta %q; want both %q", got.header, got.meta, mine)
			}
			send(traced, `{"name":"`+c.tool+`","arguments":{},"_meta":{"traceparent":"`+clients+`"}}`)
			if got := c.rec.last(t); got.header != mine || got.meta != mine {
				t.Errorf("traced call with the client's _meta: upstream got header %q, _meta %q; want both viewmux's %q", got.header, got.meta, mine)
			}
			send(context.Background(), `{"name":"`+c.tool+`","arguments":{},"_meta":{"traceparent":"`+clients+`"}}`)
			if got := c.rec.last(t); got.header != "" || got.meta != clients {
				t.Errorf("untraced call: upstream got header %q, _meta %q; want none and the client's %q", got.header, got.meta, clients)
			}
			send(context.Background(), `{"name":"`+c.tool+`","arguments":{}}`)
			if got := c.rec.last(t); got.header != "" || got.meta != "" {
				t.Errorf("untraced call: upstream got header %q, _meta %q; want neither", got.header, got.meta)
			}
		})
	}
}
