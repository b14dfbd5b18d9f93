package sessions

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/internal/tracing"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/upstream"
)

// This file is the routed chain's OpenTelemetry span (Options.Tracer;
// docs/operations.md, "Traces"). Every door's routed request gets one
// server span, from its decision to its answer:
//
//	decideTraced (the door, in place of decide) → spanOutcome (answer,
//	awaitCall) → endSpan (the door, when it is done with the request)
//
// Its parent is the client's W3C trace context: the request's _meta
// traceparent, else, on /mcp, the request's traceparent header. The span
// rides in the request's ctx, so route's upstream request carries it
// (upstream.Send propagates it as a header and in _meta). Without a tracer
// none of this runs: each function returns at its first line.

// Span attribute keys. The MCP ones follow OpenTelemetry's semantic
// conventions for MCP; the others are viewmux's own.
const (
	attrMethod    = attribute.Key("mcp.method.name")
	attrTool      = attribute.Key("gen_ai.tool.name")
	attrErrorCode = attribute.Key("rpc.jsonrpc.error_code")
	attrUpstream  = attribute.Key("viewmux.upstream")
	attrProfile   = attribute.Key("viewmux.profile")
	attrOutcome   = attribute.Key("viewmux.outcome")
	// attrSubject is who is calling: a token appears only as "token-" and
	// 8 hex digits of its hash, as in the logs.
	attrSubject = attribute.Key("viewmux.subject")
)

// outcomeInput is the outcome of a 2026-07-28 request answered
// input_required: its call is held for the client's retry.
const outcomeInput = "input_required"

// routedSpan is the span of one routed request and its outcome, which the
// chain records when it decides it ("" until then). Only the goroutine
// serving the request (the door's, through decide, await and answer)
// touches it.
type routedSpan struct {
	span    trace.Span
	outcome string
}

// spanKey is the ctx key of a routed request's *routedSpan.
type spanKey struct{}

// decideTraced is decide under a new span for the routed request m, which
// it returns in ctx; the door ends it with endSpan. header is the HTTP
// request's (nil on a stream door): its traceparent is the span's parent
// when m's _meta has none. Without a tracer it is decide.
func (s *Server) decideTraced(ctx context.Context, header http.Header, id string, b grant.Binding, view *filter.View, m *jsonrpc.Message) (context.Context, *filter.Entry, *jsonrpc.Error) {
	if s.tracer == nil {
		e, refusal := s.decide(id, b, view, m)
		return ctx, e, refusal
	}
	parent, ok := tracing.FromMeta(ctx, m.Meta)
	if !ok && header != nil {
		parent = tracing.FromHeader(ctx, header)
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attrMethod.String(m.Method))
	if b.Profile != "" {
		attrs = append(attrs, attrProfile.String(b.Profile))
	}
	if b.Authed {
		attrs = append(attrs, attrSubject.String(traceSubject(b)))
	}
	ctx, span := s.tracer.Start(parent, m.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	rs := &routedSpan{span: span}
	ctx = context.WithValue(ctx, spanKey{}, rs)
	e, refusal := s.decide(id, b, view, m)
	switch {
	case refusal != nil:
		rs.outcome = outcomeDenied
		span.SetAttributes(attrErrorCode.Int(refusal.Code))
	case e != nil:
		if e.Upstream != "" {
			span.SetAttributes(attrUpstream.String(e.Upstream))
		}
		if m.Method == string(mcp.MethodToolsCall) {
			// The name of a tool the view shows: one of a bounded set,
			// unlike whatever a client may ask for.
			span.SetName(m.Method + " " + e.Tool.Name)
			span.SetAttributes(attrTool.String(e.Tool.Name))
		}
	}
	return ctx, e, refusal
}

// spanOutcome records what a routed request was answered: outcome, and
// err, the call's error (nil for a result). It does nothing without a
// span in ctx.
func (s *Server) spanOutcome(ctx context.Context, outcome string, err error) {
	if s.tracer == nil {
		return
	}
	rs, _ := ctx.Value(spanKey{}).(*routedSpan)
	if rs == nil {
		return
	}
	rs.outcome = outcome
	var rpc *upstream.RPCError
	var own *jsonrpc.Error
	switch {
	case errors.As(err, &rpc):
		rs.span.SetAttributes(attrErrorCode.Int(rpc.Code))
	case errors.As(err, &own):
		rs.span.SetAttributes(attrErrorCode.Int(own.Code))
	}
}

// outcomeFor is the outcome of a call that returned err.
func outcomeFor(err error) string {
	if err != nil {
		return outcomeError
	}
	return outcomeOK
}

// endSpan ends the span decideTraced started for ctx's request, with its
// outcome: error when none was recorded (refused after the decision, or
// cancelled). It does nothing without a span in ctx.
func (s *Server) endSpan(ctx context.Context) {
	if s.tracer == nil {
		return
	}
	rs, _ := ctx.Value(spanKey{}).(*routedSpan)
	if rs == nil {
		return
	}
	if rs.outcome == "" {
		rs.outcome = outcomeError
	}
	rs.span.SetAttributes(attrOutcome.String(rs.outcome))
	if rs.outcome == outcomeError {
		rs.span.SetStatus(codes.Error, "")
	}
	rs.span.End()
}

// traceAnswer records the span of a request the one handler answered
// (handler.go: the handshake, ping, listings) or refused before any
// decision: from start until now, with the JSON-RPC error code it was
// answered with (0: a result). header is as for decideTraced. It does
// nothing without a tracer, or for a message that is not a request.
func (s *Server) traceAnswer(ctx context.Context, header http.Header, b grant.Binding, m *jsonrpc.Message, start time.Time, code int) {
	if s.tracer == nil || !m.IsRequest() {
		return
	}
	parent, ok := tracing.FromMeta(ctx, m.Meta)
	if !ok && header != nil {
		parent = tracing.FromHeader(ctx, header)
	}
	method := m.Method
	if !knownMethods[method] { // metrics.go's bounded set
		method = "unknown" // a name the client chose: never a span name
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, attrMethod.String(method))
	if b.Profile != "" {
		attrs = append(attrs, attrProfile.String(b.Profile))
	}
	if b.Authed {
		attrs = append(attrs, attrSubject.String(traceSubject(b)))
	}
	outcome := outcomeOK
	if code != 0 {
		outcome = outcomeError
		attrs = append(attrs, attrErrorCode.Int(code))
	}
	attrs = append(attrs, attrOutcome.String(outcome))
	_, span := s.tracer.Start(parent, method, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if code != 0 {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// traceSubject is a span's subject: an OAuth token's sub, or "token-" and
// 8 hex digits of a static token's sha256.
func traceSubject(b grant.Binding) string {
	if b.Claims != nil {
		return b.Subject
	}
	return "token-" + hex.EncodeToString(b.Caller[:4])
}
