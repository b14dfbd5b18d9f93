package tracing

import (
	"context"
	"encoding/json"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// The _meta keys of the W3C trace context in an MCP request (SEP-414,
// protocol 2026-07-28): the same names and formats as the HTTP headers.
const (
	MetaTraceparent = "traceparent"
	MetaTracestate  = "tracestate"
)

// w3c reads and writes traceparent and tracestate; it holds no state.
var w3c propagation.TraceContext

// FromHeader returns ctx carrying the remote span context of h's
// traceparent and tracestate headers, or ctx itself when h has no valid
// traceparent.
func FromHeader(ctx context.Context, h http.Header) context.Context {
	if h.Get(MetaTraceparent) == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}

// FromMeta returns ctx carrying the remote span context of a request's
// _meta traceparent and tracestate (their raw JSON values), and true; or
// ctx itself and false when meta has no valid traceparent. A malformed
// value is ignored, as W3C asks of a receiver.
func FromMeta(ctx context.Context, meta map[string]json.RawMessage) (context.Context, bool) {
	raw, ok := meta[MetaTraceparent]
	if !ok {
		return ctx, false
	}
	carrier := propagation.MapCarrier{}
	var s string
	if json.Unmarshal(raw, &s) != nil || s == "" {
		return ctx, false
	}
	carrier[MetaTraceparent] = s
	var state string
	if json.Unmarshal(meta[MetaTracestate], &state) == nil && state != "" {
		carrier[MetaTracestate] = state
	}
	out := w3c.Extract(ctx, carrier)
	if !trace.SpanContextFromContext(out).IsRemote() {
		return ctx, false
	}
	return out, true
}

// Active reports whether ctx carries a valid span context: one viewmux's
// requests to an upstream propagate.
func Active(ctx context.Context) bool {
	return trace.SpanContextFromContext(ctx).IsValid()
}

// Inject sets the traceparent and tracestate headers of ctx's span
// context in h; it does nothing when ctx has none.
func Inject(ctx context.Context, h http.Header) {
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
}

// MetaMembers returns ctx's span context as the _meta members traceparent
// and tracestate (the latter only when not empty), for jsonrpc.Splice; nil
// when ctx has none.
func MetaMembers(ctx context.Context) []jsonrpc.Member {
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	tp := carrier[MetaTraceparent]
	if tp == "" {
		return nil
	}
	ms := make([]jsonrpc.Member, 0, 2)
	for _, k := range []string{MetaTraceparent, MetaTracestate} {
		if v := carrier[k]; v != "" {
			b, _ := json.Marshal(v) // a string always encodes
			ms = append(ms, jsonrpc.Member{Key: k, Value: b})
		}
	}
	return ms
}
