package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestServeBadTraceConfig: an OTEL_* variable viewmux cannot honour stops
// `serve` at start with a usage error naming the variable, before it
// listens or starts an upstream.
func TestServeBadTraceConfig(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"OTEL_TRACES_EXPORTER", "console"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
			t.Setenv(c.name, c.value)
			path := writeConfig(t, "[server]\nshutdown_grace = \"1s\"\n")
			stderr := &lockedBuffer{}
			err := cmdServe(context.Background(), []string{"--config", path, "--listen", "127.0.0.1:0"}, io.Discard, stderr, false)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("cmdServe = %v, want a usage error naming %s\n--- stderr ---\n%s", err, c.name, stderr)
			}
			if strings.Contains(stderr.String(), "listening") {
				t.Errorf("viewmux listened before refusing the trace config:\n%s", stderr)
			}
		})
	}
}
