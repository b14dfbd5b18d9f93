// Command otlpsink is a real OTLP trace receiver for viewmux's integration
// tests: the OpenTelemetry Collector's own otlpreceiver, embedded, with a
// consumer that prints every span it receives as one JSON line on stdout.
//
// It is a module of its own, so that the collector's dependencies stay out
// of viewmux's go.mod; integration/gateway/trace_test.go builds and runs it.
//
//	otlpsink -http 127.0.0.1:4318 -grpc 127.0.0.1:4317
//
// Once both listeners are up it prints "ready http=ADDR grpc=ADDR" on
// stderr. It runs until stdin closes or it is signalled.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// span is what the sink prints for each span received.
type span struct {
	Service    string         `json:"service"`
	Name       string         `json:"name"`
	Kind       string         `json:"kind"`
	TraceID    string         `json:"traceId"`
	SpanID     string         `json:"spanId"`
	ParentID   string         `json:"parentSpanId"`
	Status     string         `json:"status"`
	Attributes map[string]any `json:"attributes"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "otlpsink:", err)
		os.Exit(1)
	}
}

func run() error {
	httpAddr := flag.String("http", "127.0.0.1:4318", "`ADDR` of the OTLP/HTTP listener")
	grpcAddr := flag.String("grpc", "127.0.0.1:4317", "`ADDR` of the OTLP/gRPC listener")
	flag.Parse()

	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = *grpcAddr
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = *httpAddr

	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	print := func(_ context.Context, td ptrace.Traces) error {
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range td.ResourceSpans().All() {
			service := ""
			if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
				service = v.AsString()
			}
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					out := span{Service: service, Name: s.Name(), Kind: s.Kind().String(),
						TraceID: hexOf(s.TraceID()), SpanID: hexOf(s.SpanID()), ParentID: hexOf(s.ParentSpanID()),
						Status: s.Status().Code().String(), Attributes: s.Attributes().AsRaw()}
					if err := enc.Encode(out); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	sink, err := consumer.NewTraces(print)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := f.CreateTraces(ctx, receivertest.NewNopSettings(f.Type()), cfg, sink)
	if err != nil {
		return err
	}
	if err := r.Start(ctx, componenttest.NewNopHost()); err != nil {
		return err
	}
	defer r.Shutdown(context.Background())
	fmt.Fprintf(os.Stderr, "ready http=%s grpc=%s\n", *httpAddr, *grpcAddr)

	stdin := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stdin)
	}()
	select {
	case <-ctx.Done():
	case <-stdin:
	}
	return nil
}

// hexOf renders a trace or span id; an empty one (no parent) is "".
func hexOf[T pcommon.TraceID | pcommon.SpanID](id T) string {
	var zero T
	if id == zero {
		return ""
	}
	switch v := any(id).(type) {
	case pcommon.TraceID:
		return hex.EncodeToString(v[:])
	case pcommon.SpanID:
		return hex.EncodeToString(v[:])
	}
	return ""
}
