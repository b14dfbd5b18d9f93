package sessions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	traceToken  = "tracing-test-token-do-not-leak"
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
)

// newTracedServer is newServerWith with a tracer whose ended spans rec
// keeps.
func newTracedServer(tb testing.TB, upURL, extra string) (*Server, *tracetest.SpanRecorder) {
	tb.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tb.Cleanup(func() { tp.Shutdown(context.Background()) })
	return newServerWith(tb, upURL, extra, Options{Tracer: tp.Tracer("test")}), rec
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// onlySpan returns the one span rec has, or fails.
func onlySpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	return spans[0]
}

// TestTraceSpans: every routed request on /mcp and on the stdio door gets
// one server span, parented by the client's trace context (the _meta
// traceparent before the header), with its method, tool, upstream,
// profile, subject and outcome, and nothing of the token.
func TestTraceSpans(t *testing.T) {
	up := newUpstreamServer(t, 4)
	s, rec := newTracedServer(t, up.http.URL, fmt.Sprintf(`
[profiles.readonly]
read_only = true

[[auth.tokens]]
token = %q
profiles = ["readonly"]
`, traceToken))
	h := s.Handler()
	auth := func(r *http.Request) *http.Request {
		r.Header.Set("Authorization", "Bearer "+traceToken)
		return r
	}
	init := httpDo(h, auth(newRequest("", "", initializeBody)))
	sid := init.Header().Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %d %s", init.Code, init.Body.String())
	}
	httpDo(h, auth(newRequest("", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)))
	sum := sha256.Sum256([]byte(traceToken))
	subject := "token-" + hex.EncodeToString(sum[:4])
	header := "00-" + clientTrace + "-" + clientSpan + "-01"
	const metaSpan = "b7ad6b7169203331"
	metaParent := "00-" + clientTrace + "-" + metaSpan + "-01"

	for _, c := range []struct {
		name     string
		header   string // traceparent header
		params   string
		parent   string // the span's parent span id; "" = a root span
		outcome  string
		spanName string
		tool     bool
	}{
		{name: "allowed, header", header: header, params: `{"name":"up__tool_0000","arguments":{"query":"x"}}`,
			parent: clientSpan, outcome: "ok", spanName: "tools/call up__tool_0000", tool: true},
		{name: "_meta wins over the header", header: header, params: `{"name":"up__tool_0000","arguments":{"query":"x"},"_meta":{"traceparent":"` + metaParent + `"}}`,
			parent: metaSpan, outcome: "ok", spanName: "tools/call up__tool_0000", tool: true},
		{name: "hidden tool, no trace context", params: `{"name":"up__tool_0001","arguments":{"query":"x"}}`,
			outcome: "denied", spanName: "tools/call"},
		{name: "malformed traceparent is ignored", header: "00-zz-zz-01", params: `{"name":"up__tool_0000","arguments":{"query":"x"}}`,
			outcome: "ok", spanName: "tools/call up__tool_0000", tool: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.Reset()
			r := auth(newRequest("", sid, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":`+c.params+`}`))
			if c.header != "" {
				r.Header.Set("traceparent", c.header)
			}
			if w := httpDo(h, r); w.Code != http.StatusOK {
				t.Fatalf("tools/call: %d %s", w.Code, w.Body.String())
			}
			sp := onlySpan(t, rec)
			if sp.SpanKind() != trace.SpanKindServer || sp.Name() != c.spanName {
				t.Errorf("span %q kind %v, want %q server", sp.Name(), sp.SpanKind(), c.spanName)
			}
			if c.parent == "" {
				if sp.Parent().IsValid() {
					t.Errorf("span has parent %v, want a root span", sp.Parent())
				}
			} else if sp.Parent().TraceID().String() != clientTrace || sp.Parent().SpanID().String() != c.parent || !sp.Parent().IsRemote() {
				t.Errorf("span parent %v, want the client's %s/%s", sp.Parent(), clientTrace, c.parent)
			}
			a := attrsOf(sp)
			want := map[attribute.Key]string{attrMethod: "tools/call", attrProfile: "readonly", attrSubject: subject, attrOutcome: c.outcome}
			if c.tool {
				want[attrTool], want[attrUpstream] = "up__tool_0000", "up"
			}
			for k, v := range want {
				if a[k] != v {
					t.Errorf("attribute %s = %q, want %q (all %v)", k, a[k], v, a)
				}
			}
			if !c.tool {
				if _, ok := a[attrTool]; ok {
					t.Errorf("a hidden tool is named: %v", a)
				}
			}
			for k, v := range a {
				if strings.Contains(v, traceToken) {
					t.Errorf("attribute %s holds the token", k)
				}
			}
		})
	}

	t.Run("stdio door, _meta", func(t *testing.T) {
		s2, rec2 := newTracedServer(t, up.http.URL, "")
		inR, inW := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- s2.ServeStdio(context.Background(), "", inR, io.Discard) }()
		send := func(msg string) {
			if _, err := io.WriteString(inW, msg+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		send(initializeBody)
		send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"up__tool_0002","arguments":{"query":"x"},"_meta":{"traceparent":"` + metaParent + `"}}}`)
		callSpans := func() []sdktrace.ReadOnlySpan {
			var out []sdktrace.ReadOnlySpan
			for _, sp := range rec2.Ended() {
				if strings.HasPrefix(sp.Name(), "tools/call") {
					out = append(out, sp)
				}
			}
			return out
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(callSpans()) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		inW.Close()
		if err := <-done; err != nil {
			t.Fatalf("ServeStdio: %v", err)
		}
		// initialize has its span too (the one handler's, traceAnswer).
		var init int
		for _, sp := range rec2.Ended() {
			if sp.Name() == "initialize" && attrsOf(sp)[attrOutcome] == "ok" {
				init++
			}
		}
		calls := callSpans()
		if len(calls) != 1 || init != 1 {
			t.Fatalf("%d tools/call and %d initialize spans, want 1 each", len(calls), init)
		}
		sp := calls[0]
		if sp.Name() != "tools/call up__tool_0002" || sp.Parent().SpanID().String() != metaSpan || attrsOf(sp)[attrOutcome] != "ok" {
			t.Errorf("stdio span %q parent %v attributes %v", sp.Name(), sp.Parent(), attrsOf(sp))
		}
	})
}

// httpDo serves r with h in-process.
func httpDo(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// BenchmarkRoutedTrace measures a forwarded tools/call through the routed
// chain with tracing off (no tracer: the default) and on (a tracer whose
// spans go nowhere), and with a client traceparent header; the ratio
// on/off is reported by comparing the two sub-benchmarks of one run. For
// "off against the code before tracing", run BenchmarkAllowedCall and
// BenchmarkDeniedCall on both commits.
func BenchmarkRoutedTrace(b *testing.B) {
	up := newUpstreamServer(b, 10)
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"x"}}}`
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			var s *Server
			if mode == "on" {
				s, _ = newTracedServer(b, up.http.URL, "")
			} else {
				s = newBenchServer(b, up.http.URL, "")
			}
			h := s.Handler()
			sid := openSession(b, h, "")
			b.ReportAllocs()
			timeEach(b, func() {
				r := newRequest("", sid, body)
				r.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
				w := &sink{header: make(http.Header), code: http.StatusOK}
				h.ServeHTTP(w, r)
				if !bytes.Contains(w.head, []byte(`"ok"`)) {
					b.Fatalf("call not answered: %s", w.head)
				}
			})
		})
	}
}
