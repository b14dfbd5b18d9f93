//go:build unix

package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// The trace tests run viewmux with OTEL_EXPORTER_OTLP_ENDPOINT pointed at a
// real OTLP receiver, the OpenTelemetry Collector's otlpreceiver built
// from the Go module proxy (integration/otlpsink, a module of its own),
// and check that one trace joins client → viewmux → upstream.

// sinkSpan is one span the receiver got, as otlpsink prints it.
type sinkSpan struct {
	Service    string         `json:"service"`
	Name       string         `json:"name"`
	Kind       string         `json:"kind"`
	TraceID    string         `json:"traceId"`
	SpanID     string         `json:"spanId"`
	ParentID   string         `json:"parentSpanId"`
	Status     string         `json:"status"`
	Attributes map[string]any `json:"attributes"`
}

// otlpSink is a running otlpsink.
type otlpSink struct {
	HTTP, GRPC string // host:port of its listeners

	mu    sync.Mutex
	spans []sinkSpan
}

// moduleBinary builds the test tool in integration/DIR, a Go module of
// its own (the build cache makes later builds quick), naming it what in
// messages. Without the module proxy or a module cache that holds its
// dependencies, the test skips, or fails under CI=true: .ci/run builds
// each such tool first.
func moduleBinary(t *testing.T, dir, what string) string {
	t.Helper()
	bin := filepath.Join(itest.Harness.Tmp, dir)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("go", "-C", filepath.Join(itest.Harness.Dir, dir), "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s (integration/%s) cannot be built: %v\n%s", what, dir, err, out)
		}
		t.Skipf("skipping: %s (integration/%s) cannot be built: %v\n%s", what, dir, err, out)
	}
	return bin
}

// startOTLPSink runs the receiver on free loopback ports until the test
// ends.
func startOTLPSink(t *testing.T) *otlpSink {
	t.Helper()
	bin := moduleBinary(t, "otlpsink", "the OTLP receiver")
	for attempt := 1; ; attempt++ {
		s := &otlpSink{HTTP: itest.FreeAddr(t), GRPC: itest.FreeAddr(t)}
		cmd := exec.Command(bin, "-http", s.HTTP, "-grpc", s.GRPC)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdin, err := cmd.StdinPipe() // closing it stops the sink
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			for sc.Scan() {
				var sp sinkSpan
				if err := json.Unmarshal(sc.Bytes(), &sp); err != nil {
					t.Errorf("otlpsink printed a line that is not a span: %q", sc.Text())
					continue
				}
				s.mu.Lock()
				s.spans = append(s.spans, sp)
				s.mu.Unlock()
			}
		}()
		ready := make(chan string, 1)
		var logs itest.SyncBuffer
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				line := sc.Text()
				logs.Write([]byte(line + "\n"))
				if strings.HasPrefix(line, "ready ") {
					ready <- line
				}
			}
			close(ready)
		}()
		stop := func() {
			stdin.Close()
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			select {
			case <-waited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-waited
			}
			<-done
		}
		select {
		case _, ok := <-ready:
			if ok {
				t.Cleanup(stop)
				return s
			}
		case <-time.After(30 * time.Second):
		}
		stop()
		if attempt < 3 && strings.Contains(logs.String(), "address already in use") {
			continue
		}
		t.Fatalf("otlpsink did not start:\n%s", logs.String())
	}
}

// waitSpan waits up to timeout for a span that match accepts.
func (s *otlpSink) waitSpan(t *testing.T, timeout time.Duration, what string, match func(sinkSpan) bool) sinkSpan {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		for _, sp := range s.spans {
			if match(sp) {
				s.mu.Unlock()
				return sp
			}
		}
		all := fmt.Sprint(s.spans)
		s.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the receiver got no span %s within %v; it got: %s", what, timeout, all)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// traceparentOf splits a W3C traceparent into its trace and span ids.
func traceparentOf(t *testing.T, tp string) (traceID, spanID string) {
	t.Helper()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 {
		t.Fatalf("not a W3C traceparent: %q", tp)
	}
	return parts[1], parts[2]
}

// upstreamTrace returns the traceparent the upstream got with the tools/call
// r, in its header and in its _meta; they must agree.
func upstreamTrace(t *testing.T, r itest.RecRequest) string {
	t.Helper()
	header := r.Header.Get("Traceparent")
	var meta struct {
		Traceparent string `json:"traceparent"`
	}
	if raw, ok := r.Params(t)["_meta"]; ok {
		json.Unmarshal(raw, &meta)
	}
	if header == "" || header != meta.Traceparent {
		t.Fatalf("the upstream got traceparent header %q and _meta.traceparent %q; want both, equal\n%s", header, meta.Traceparent, r.Body)
	}
	return header
}

// startTracedMux starts viewmux over the recorders rec (legacy) and mod
// (2026-07-28), exporting traces to sink with protocol ("http/protobuf" or
// "grpc").
func startTracedMux(t *testing.T, sink *otlpSink, protocol string, rec, mod *itest.Recorder) *itest.Mux {
	t.Helper()
	endpoint := sink.HTTP
	if protocol == "grpc" {
		endpoint = sink.GRPC
	}
	mux := itest.StartMuxWith(t, itest.MuxOptions{
		Config: fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.rec]
url = %s
required = true

[upstreams.mod]
url = %s
protocol = "2026-07-28"
required = true
`, itest.TomlString(rec.URL), itest.TomlString(mod.URL)),
		Env: []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + endpoint,
			"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
			"OTEL_SERVICE_NAME=viewmux-trace-test",
			"OTEL_BSP_SCHEDULE_DELAY=100",
		},
	})
	if !strings.Contains(mux.Stderr(), "exporting traces") || !strings.Contains(mux.Stderr(), protocol) {
		t.Errorf("viewmux did not log that it exports traces with %s:\n%s", protocol, mux.Stderr())
	}
	return mux
}

func TestTraceJoinsClientMuxUpstream(t *testing.T) {
	t.Parallel()
	sink := startOTLPSink(t)
	rec := itest.StartRecorder(t, "rec", false)
	mod := itest.StartRecorder(t, "mod", true)
	mux := startTracedMux(t, sink, "http/protobuf", rec, mod)

	// checkJoined checks that the span under the client's clientSpan in
	// trace traceID reached the receiver as viewmux's, and that the
	// upstream's parent is that span.
	checkJoined := func(t *testing.T, r itest.RecRequest, traceID, clientSpan, up string) {
		t.Helper()
		upTrace, upParent := traceparentOf(t, upstreamTrace(t, r))
		if upTrace != traceID {
			t.Errorf("the upstream got trace %s, want the client's %s", upTrace, traceID)
		}
		if upParent == clientSpan {
			t.Errorf("the upstream's parent is the client's span %s, want viewmux's", clientSpan)
		}
		sp := sink.waitSpan(t, 20*time.Second, "in trace "+traceID, func(sp sinkSpan) bool { return sp.TraceID == traceID })
		if sp.ParentID != clientSpan {
			t.Errorf("viewmux's span has parent %q, want the client's span %s", sp.ParentID, clientSpan)
		}
		if sp.SpanID != upParent {
			t.Errorf("viewmux's span is %s, but the upstream's parent is %s", sp.SpanID, upParent)
		}
		tool := up + "__echo"
		if sp.Service != "viewmux-trace-test" || sp.Kind != "Server" || sp.Name != "tools/call "+tool {
			t.Errorf("span: service %q kind %q name %q; want viewmux-trace-test, Server, tools/call %s", sp.Service, sp.Kind, sp.Name, tool)
		}
		for k, want := range map[string]any{
			"mcp.method.name": "tools/call", "gen_ai.tool.name": tool,
			"viewmux.upstream": up, "viewmux.outcome": "ok",
		} {
			if got := sp.Attributes[k]; got != want {
				t.Errorf("span attribute %s = %v, want %v (all: %v)", k, got, want, sp.Attributes)
			}
		}
	}

	t.Run("traceparent header on /mcp", func(t *testing.T) {
		const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		s := itest.OpenRawSession(t, "http://"+mux.Addr+"/mcp", nil)
		mark := rec.Mark()
		r := s.Post(t, "", map[string]*string{"traceparent": itest.Ptr("00-" + traceID + "-" + clientSpan + "-01")},
			itest.ToolsCallBody(t, 2, "rec__echo", map[string]any{}))
		if r.Msg == nil || r.Msg.Error != nil || r.Msg.Result == nil {
			t.Fatalf("tools/call: %s", r)
		}
		calls := rec.Since(mark)
		if len(calls) != 1 {
			t.Fatalf("the upstream got %d routed requests, want 1", len(calls))
		}
		checkJoined(t, calls[0], traceID, clientSpan, "rec")
	})

	t.Run("2026-07-28 upstream", func(t *testing.T) {
		const traceID, clientSpan = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
		s := itest.OpenRawSession(t, "http://"+mux.Addr+"/mcp", nil)
		mark := mod.Mark()
		r := s.Post(t, "", map[string]*string{"traceparent": itest.Ptr("00-" + traceID + "-" + clientSpan + "-01")},
			itest.ToolsCallBody(t, 2, "mod__echo", map[string]any{}))
		if r.Msg == nil || r.Msg.Error != nil || r.Msg.Result == nil {
			t.Fatalf("tools/call: %s", r)
		}
		calls := mod.Since(mark)
		if len(calls) != 1 {
			t.Fatalf("the upstream got %d routed requests, want 1", len(calls))
		}
		checkJoined(t, calls[0], traceID, clientSpan, "mod")
	})

	t.Run("_meta traceparent on the websocket door", func(t *testing.T) {
		// _meta is the trace context of a stream door's request; the
		// upstream's _meta.traceparent is viewmux's span, not the client's.
		const traceID, clientSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
		c := itest.OpenRecWS(t, "ws://"+mux.Addr+"/ws")
		mark := rec.Mark()
		a := c.Do(t, "tools/call", `{"name":"rec__echo","arguments":{},"_meta":{"traceparent":"00-`+traceID+`-`+clientSpan+`-01","tracestate":"vendor=x"}}`)
		if a.Msg.Error != nil || a.Msg.Result == nil {
			t.Fatalf("tools/call: %s", a)
		}
		calls := rec.Since(mark)
		if len(calls) != 1 {
			t.Fatalf("the upstream got %d routed requests, want 1", len(calls))
		}
		checkJoined(t, calls[0], traceID, clientSpan, "rec")
		if got := calls[0].Header.Get("Tracestate"); got != "vendor=x" {
			t.Errorf("the upstream got tracestate %q, want the client's vendor=x", got)
		}
	})

	t.Run("a denied call has a span", func(t *testing.T) {
		const traceID, clientSpan = "11111111111111111111111111111111", "2222222222222222"
		s := itest.OpenRawSession(t, "http://"+mux.Addr+"/mcp", nil)
		r := s.Post(t, "", map[string]*string{"traceparent": itest.Ptr("00-" + traceID + "-" + clientSpan + "-01")},
			itest.ToolsCallBody(t, 2, "rec__nope", map[string]any{}))
		if r.Msg == nil || r.Msg.Error == nil {
			t.Fatalf("tools/call of an unknown tool: %s", r)
		}
		sp := sink.waitSpan(t, 20*time.Second, "in trace "+traceID, func(sp sinkSpan) bool { return sp.TraceID == traceID })
		if sp.ParentID != clientSpan || sp.Attributes["viewmux.outcome"] != "denied" || sp.Name != "tools/call" {
			t.Errorf("denied call's span: parent %s name %q attributes %v; want parent %s, name tools/call, outcome denied", sp.ParentID, sp.Name, sp.Attributes, clientSpan)
		}
		if _, ok := sp.Attributes["gen_ai.tool.name"]; ok {
			t.Errorf("a tool the view does not show named the span's tool: %v", sp.Attributes)
		}
	})
}

// TestTraceOverGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL=grpc viewmux exports
// to the receiver's gRPC listener.
func TestTraceOverGRPC(t *testing.T) {
	sink := startOTLPSink(t)
	rec := itest.StartRecorder(t, "rec", false)
	mod := itest.StartRecorder(t, "mod", true)
	mux := startTracedMux(t, sink, "grpc", rec, mod)
	const traceID, clientSpan = "6bf92f3577b34da6a3ce929d0e0e4736", "20f067aa0ba902b7"
	s := itest.OpenRawSession(t, "http://"+mux.Addr+"/mcp", nil)
	r := s.Post(t, "", map[string]*string{"traceparent": itest.Ptr("00-" + traceID + "-" + clientSpan + "-01")},
		itest.ToolsCallBody(t, 2, "rec__echo", map[string]any{}))
	if r.Msg == nil || r.Msg.Error != nil || r.Msg.Result == nil {
		t.Fatalf("tools/call: %s", r)
	}
	sp := sink.waitSpan(t, 20*time.Second, "in trace "+traceID, func(sp sinkSpan) bool { return sp.TraceID == traceID })
	if sp.ParentID != clientSpan || sp.Name != "tools/call rec__echo" {
		t.Errorf("span over gRPC: parent %s name %q, want %s, tools/call rec__echo", sp.ParentID, sp.Name, clientSpan)
	}
}
