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
		// A single quote does not end a URL: a password or a query value
		// may hold one.
		{"target http://user:ab'cd-PASSWORD-TAIL@127.0.0.1:1/mcp failed", "target http://user:REDACTED@127.0.0.1:1/mcp failed"},
		{"http://127.0.0.1:1/mcp?key=ab'cd-QUERYTAIL: refused", "http://127.0.0.1:1/mcp?key=REDACTED refused"},
		{"'http://h/x?k=SEKRET' quoted", "'http://h/x?k=REDACTED' quoted"},
		// A URL that does not parse keeps neither its password nor its query.
		{"https://user:pa%zz@host/x", "https://user:REDACTED@host/x"},
		{"https://tok%zz@host/", "https://REDACTED@host/"},
		{"https://user:pa%zz@host/x?k=SEKRET", "https://user:REDACTED@host/x?REDACTED"},
		{"http://user:ab?cd%zz@host", "http://user:REDACTED"},
		{"http://h/%zz?k=SEK@RET", "http://REDACTED"},
		{"http://h/%zz", "http://h/%zz"},
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

func TestSecretsMask(t *testing.T) {
	s := NewSecrets("hunter2-env-secret", "1", "true", "sk-ak-PATHSECRET", "abcdef", "defghi", "hunter2-env-secret", "")
	if s.Len() != 4 {
		t.Errorf("Len = %d, want 4 (short and repeated values dropped)", s.Len())
	}
	tests := []struct{ in, want string }{
		{"starting with token hunter2-env-secret", "starting with token REDACTED"},
		{"true 1 x", "true 1 x"},
		{"GET /mcp/sk-ak-PATHSECRET/sse and /sk-ak-PATHSECRET", "GET /mcp/REDACTED/sse and /REDACTED"},
		{"overlap abcdefghi end", "overlap REDACTED end"},  // two values overlapping: no byte of either left
		{"touch abcdefdefghi end", "touch REDACTED end"},   // adjacent occurrences
		{"twice abcdefabcdef", "twice REDACTED"},           // adjacent occurrences of one value
		{"http://h/?k=abcdef x", "http://h/?k=REDACTED x"}, // Mask alone does not parse URLs
	}
	for _, tt := range tests {
		if got := s.Mask(tt.in); got != tt.want {
			t.Errorf("Mask(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := s.Apply("hunter2-env-secret at http://u:pw@h/?q=v"); got != "REDACTED at http://u:REDACTED@h/?q=REDACTED" {
		t.Errorf("Apply = %q", got)
	}
	var none *Secrets
	if NewSecrets("a", "true") != nil || none.Mask("abcdefgh") != "abcdefgh" || none.Apply("http://h/?k=SEKRET") != "http://h/?k=REDACTED" {
		t.Error("nil Secrets: want no masking but URL redaction")
	}
}

// TestSecretsHandler: a log line carrying a value, in its message, a
// string, an error, a group or decoded JSON, is masked.
func TestSecretsHandler(t *testing.T) {
	var buf bytes.Buffer
	s := NewSecrets("SEKRET-VALUE")
	log := slog.New(s.Handler(slog.NewJSONHandler(&buf, nil))).With("a", "x SEKRET-VALUE")
	log.Info("m SEKRET-VALUE", "err", errors.New("e SEKRET-VALUE"), slog.Group("g", "s", "SEKRET-VALUE"),
		slog.Any("j", map[string]any{"l": []any{"SEKRET-VALUE"}}), "u", "http://h/?k=q")
	out := buf.String()
	if strings.Contains(out, "SEKRET") || strings.Count(out, Mask) != 6 {
		t.Errorf("log line not masked: %s", out)
	}
}

func TestLive(t *testing.T) {
	var l Live
	if got := l.Apply("secret-one http://h/?k=v"); got != "secret-one http://h/?k=REDACTED" {
		t.Errorf("zero Live: %q", got)
	}
	one := NewSecrets("secret-one")
	l.Store(one.Union(NewSecrets("secret-two")))
	if got := l.Mask("secret-one secret-two"); got != "REDACTED REDACTED" {
		t.Errorf("union: %q", got)
	}
	l.Store(one)
	if got := l.Mask("secret-one secret-two"); got != "REDACTED secret-two" {
		t.Errorf("after Store: %q", got)
	}
	var nilLive *Live
	if got := nilLive.Mask("secret-one"); got != "secret-one" {
		t.Errorf("nil Live: %q", got)
	}
}

// TestLiveAdd: values added at run time are masked beside the
// configuration's, and survive a reload's Store.
func TestLiveAdd(t *testing.T) {
	l := NewLive(NewSecrets("config-secret"))
	l.Add("access-token-1234", "short")
	got := l.Apply("a config-secret and access-token-1234 and short")
	if want := "a REDACTED and REDACTED and short"; got != want {
		t.Fatalf("Apply = %q, want %q", got, want)
	}
	l.Store(NewSecrets("new-config-secret"))
	if got := l.Mask("access-token-1234 config-secret new-config-secret"); got != "REDACTED config-secret REDACTED" {
		t.Fatalf("after Store: %q", got)
	}
	var zero Live
	zero.Add("access-token-5678")
	if got := zero.Mask("x access-token-5678"); got != "x REDACTED" {
		t.Fatalf("zero Live: %q", got)
	}
	var nilLive *Live
	nilLive.Add("access-token-5678") // no panic
}
