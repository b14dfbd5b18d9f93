// Package tracing owns viewmux's OpenTelemetry traces: the exporter and
// tracer provider configured from the standard OTEL_* environment
// variables (off unless they ask for it), and the W3C trace context that
// crosses viewmux, read from and written to HTTP headers and a request's
// _meta.
//
// Nothing here is global: New returns a Provider whose Tracer is handed to
// whoever makes spans (sessions.Options.Tracer); the propagation helpers
// only read and write the context they are given.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of viewmux's spans.
const Scope = "github.com/viewmux/viewmux"

// The environment variables New reads itself. The exporter reads the rest
// of OTEL_EXPORTER_OTLP_* (headers, timeout, compression, certificates),
// and the SDK OTEL_TRACES_SAMPLER, OTEL_BSP_* and OTEL_RESOURCE_ATTRIBUTES.
const (
	envDisabled       = "OTEL_SDK_DISABLED"
	envExporter       = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// ErrConfig is wrapped by New's errors about the OTEL_* variables.
var ErrConfig = errors.New("invalid OpenTelemetry configuration")

// Provider is a running trace pipeline: a tracer provider whose spans are
// batched to an OTLP exporter. A nil *Provider is tracing switched off:
// its Tracer is nil and its Shutdown does nothing. It is safe for
// concurrent use.
type Provider struct {
	tp *sdktrace.TracerProvider
	// Protocol is the OTLP protocol spans are exported with
	// ("http/protobuf" or "grpc").
	Protocol string
}

// Enabled reports whether the OTEL_* variables (read with getenv) ask for
// traces, and with which OTLP protocol. Traces are off unless
// OTEL_TRACES_EXPORTER says otlp, or an OTLP endpoint is set and
// OTEL_TRACES_EXPORTER does not say none; OTEL_SDK_DISABLED=true turns
// them off whatever else is set. An exporter other than otlp or none, or a
// protocol other than http/protobuf or grpc, is an error naming the
// variable.
func Enabled(getenv func(string) string) (on bool, protocol string, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv(envDisabled)), "true") {
		return false, "", nil
	}
	exporter := ""
	for _, e := range strings.Split(getenv(envExporter), ",") {
		switch e = strings.ToLower(strings.TrimSpace(e)); e {
		case "":
		case "otlp", "none":
			if exporter != "otlp" {
				exporter = e
			}
		default:
			return false, "", fmt.Errorf("%w: %s=%q: viewmux exports traces only with otlp (or none)", ErrConfig, envExporter, getenv(envExporter))
		}
	}
	switch {
	case exporter == "none":
		return false, "", nil
	case exporter == "" && getenv(envEndpoint) == "" && getenv(envTracesEndpoint) == "":
		return false, "", nil
	}
	name := envTracesProtocol
	protocol = strings.TrimSpace(getenv(name))
	if protocol == "" {
		name = envProtocol
		protocol = strings.TrimSpace(getenv(name))
	}
	switch protocol {
	case "":
		protocol = "http/protobuf"
	case "http/protobuf", "grpc":
	default:
		return false, "", fmt.Errorf("%w: %s=%q: viewmux exports traces with http/protobuf or grpc", ErrConfig, name, protocol)
	}
	return true, protocol, nil
}

// New starts the trace pipeline the OTEL_* variables ask for (read with
// getenv; the exporter and SDK read theirs from the process environment),
// or returns nil when they ask for none. version is viewmux's, for the
// service.version resource attribute; service.name is "viewmux" unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. New does
// not connect: an unreachable endpoint shows as export errors later, in
// the OpenTelemetry SDK's log.
func New(ctx context.Context, getenv func(string) string, version string) (*Provider, error) {
	on, protocol, err := Enabled(getenv)
	if err != nil || !on {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: OTLP exporter (%s): %w", ErrConfig, protocol, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "viewmux"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		exp.Shutdown(ctx)
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{tp: tp, Protocol: protocol}, nil
}

// Tracer returns the tracer viewmux's spans are made with, or nil when p is
// nil (tracing off).
func (p *Provider) Tracer() trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tp.Tracer(Scope)
}

// Shutdown exports the spans still batched and stops the exporter, within
// ctx. It does nothing on a nil Provider; a second call returns an error
// from the SDK.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}
