package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		name     string
		vars     map[string]string
		on       bool
		protocol string
		err      string // substring; "" = no error
	}{
		{name: "nothing set", vars: nil},
		{name: "service name alone", vars: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{name: "endpoint", vars: map[string]string{envEndpoint: "http://127.0.0.1:4318"}, on: true, protocol: "http/protobuf"},
		{name: "traces endpoint", vars: map[string]string{envTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}, on: true, protocol: "http/protobuf"},
		{name: "exporter otlp alone", vars: map[string]string{envExporter: "otlp"}, on: true, protocol: "http/protobuf"},
		{name: "exporter none wins over an endpoint", vars: map[string]string{envExporter: "none", envEndpoint: "http://x:4318"}},
		{name: "a list with otlp", vars: map[string]string{envExporter: "none, OTLP"}, on: true, protocol: "http/protobuf"},
		{name: "sdk disabled wins", vars: map[string]string{envDisabled: "TRUE", envExporter: "otlp", envEndpoint: "http://x:4318"}},
		{name: "sdk disabled false", vars: map[string]string{envDisabled: "false", envExporter: "otlp"}, on: true, protocol: "http/protobuf"},
		{name: "grpc", vars: map[string]string{envEndpoint: "http://x:4317", envProtocol: "grpc"}, on: true, protocol: "grpc"},
		{name: "traces protocol wins", vars: map[string]string{envEndpoint: "http://x:4317", envProtocol: "grpc", envTracesProtocol: "http/protobuf"}, on: true, protocol: "http/protobuf"},
		{name: "console exporter", vars: map[string]string{envExporter: "console"}, err: `OTEL_TRACES_EXPORTER="console"`},
		{name: "zipkin in a list", vars: map[string]string{envExporter: "otlp,zipkin"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "http/json", vars: map[string]string{envEndpoint: "http://x:4318", envProtocol: "http/json"}, err: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`},
		{name: "bad traces protocol", vars: map[string]string{envExporter: "otlp", envTracesProtocol: "udp"}, err: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{name: "a bad protocol with tracing off is no error", vars: map[string]string{envProtocol: "udp"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			on, protocol, err := Enabled(env(c.vars))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v, want ErrConfig naming %q", err, c.err)
				}
				return
			}
			if err != nil || on != c.on || protocol != c.protocol {
				t.Fatalf("Enabled = %v, %q, %v; want %v, %q", on, protocol, err, c.on, c.protocol)
			}
		})
	}
}

func TestNewOffIsNil(t *testing.T) {
	p, err := New(context.Background(), env(nil), "v")
	if err != nil || p != nil {
		t.Fatalf("New with nothing set = %v, %v; want nil, nil", p, err)
	}
	if p.Tracer() != nil || p.Shutdown(context.Background()) != nil {
		t.Fatal("a nil Provider must have no tracer and shut down without error")
	}
}

func TestNewOn(t *testing.T) {
	// The exporter connects lazily: nothing listens on the endpoint.
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			p, err := New(context.Background(), env(map[string]string{envExporter: "otlp", envProtocol: protocol}), "v")
			if err != nil || p == nil || p.Tracer() == nil || p.Protocol != protocol {
				t.Fatalf("New = %+v, %v", p, err)
			}
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatalf("Shutdown with no span: %v", err)
			}
		})
	}
}

const (
	tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
)

func TestFromMeta(t *testing.T) {
	for _, c := range []struct {
		name  string
		meta  string
		ok    bool
		trace string
		state string
	}{
		{name: "none", meta: `{}`},
		{name: "valid", meta: `{"traceparent":"` + tp1 + `"}`, ok: true, trace: "4bf92f3577b34da6a3ce929d0e0e4736"},
		{name: "with tracestate", meta: `{"traceparent":"` + tp1 + `","tracestate":"a=1,b=2"}`, ok: true, trace: "4bf92f3577b34da6a3ce929d0e0e4736", state: "a=1,b=2"},
		{name: "tracestate not a string", meta: `{"traceparent":"` + tp1 + `","tracestate":7}`, ok: true, trace: "4bf92f3577b34da6a3ce929d0e0e4736"},
		{name: "not a string", meta: `{"traceparent":12}`},
		{name: "empty", meta: `{"traceparent":""}`},
		{name: "malformed", meta: `{"traceparent":"00-xyz-00f067aa0ba902b7-01"}`},
		{name: "zero trace id", meta: `{"traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}`},
		{name: "version ff", meta: `{"traceparent":"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`},
		{name: "huge", meta: `{"traceparent":"` + strings.Repeat("0", 1<<16) + `"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var meta map[string]json.RawMessage
			if err := json.Unmarshal([]byte(c.meta), &meta); err != nil {
				t.Fatal(err)
			}
			ctx, ok := FromMeta(context.Background(), meta)
			sc := trace.SpanContextFromContext(ctx)
			if ok != c.ok || (ok && (!sc.IsRemote() || sc.TraceID().String() != c.trace || sc.TraceState().String() != c.state)) {
				t.Fatalf("FromMeta = %v, %v (state %q); want ok %v trace %s state %q", sc.TraceID(), ok, sc.TraceState().String(), c.ok, c.trace, c.state)
			}
			if !ok && sc.IsValid() {
				t.Fatal("a rejected _meta put a span context in ctx")
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	h := http.Header{}
	h.Set("Traceparent", tp2)
	h.Set("Tracestate", "v=1")
	ctx := FromHeader(context.Background(), h)
	if !Active(ctx) {
		t.Fatal("a valid traceparent header gave no span context")
	}
	out := http.Header{}
	Inject(ctx, out)
	if out.Get("traceparent") != tp2 || out.Get("tracestate") != "v=1" {
		t.Fatalf("Inject wrote %v", out)
	}
	ms := MetaMembers(ctx)
	if len(ms) != 2 || ms[0].Key != MetaTraceparent || string(ms[0].Value) != `"`+tp2+`"` || ms[1].Key != MetaTracestate || string(ms[1].Value) != `"v=1"` {
		t.Fatalf("MetaMembers = %v", ms)
	}
	if MetaMembers(context.Background()) != nil || Active(context.Background()) {
		t.Fatal("a ctx without a span context must give nothing")
	}
	if Active(FromHeader(context.Background(), http.Header{"Traceparent": {"garbage"}})) {
		t.Fatal("a malformed header gave a span context")
	}
}
