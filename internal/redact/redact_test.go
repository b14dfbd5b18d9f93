package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestURLs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"no url here", "no url here"},
		{`Post "http://127.0.0.1:4000/mcp?api_key=SEKRET": dial tcp: refused`, `Post "http://127.0.0.1:4000/mcp?api_key=REDACTED": dial tcp: refused`},
		{"https://user:pw@example.com/x?a=1&b=2 and ws://h/y?token=t", "https://user:REDACTED@example.com/x?a=REDACTED&b=REDACTED and ws://h/y?token=REDACTED"},
		{"https://tok@example.com/", "https://REDACTED@example.com/"},
		{"https://example.com/plain", "https://example.com/plain"},
		{"bad http://h/%zz?k=SEKRET end", "bad http://h/%zz?REDACTED end"},
	}
	for _, tt := range tests {
		if got := URLs(tt.in); got != tt.want {
			t.Errorf("URLs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewTextHandler(&buf, nil))).With("url", "http://h/mcp?api_key=SEKRET1")
	log.Warn("connect failed to http://h/?k=SEKRET2", "err", errors.New(`Get "http://h/?api_key=SEKRET3": EOF`),
		slog.Group("g", "u", "http://h/?x=SEKRET4"))
	out := buf.String()
	if strings.Contains(out, "SEKRET") || strings.Count(out, Mask) != 4 {
		t.Errorf("log line not redacted: %s", out)
	}
}

// TestHandlerDecodedJSON: arrays and objects decoded from JSON (an
// upstream's JSON stderr line) are redacted too.
func TestHandlerDecodedJSON(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewJSONHandler(&buf, nil)))
	log.Info("stderr", slog.Group("stderr",
		slog.Any("urls", []any{"http://h/?k=SEKRET1", 7.0, map[string]any{"u": "http://h/?k=SEKRET2"}}),
		slog.Any("obj", map[string]any{"list": []any{"ws://h/?t=SEKRET3"}})))
	out := buf.String()
	if strings.Contains(out, "SEKRET") || strings.Count(out, Mask) != 3 || !strings.Contains(out, "7") {
		t.Errorf("log line not redacted: %s", out)
	}
}
