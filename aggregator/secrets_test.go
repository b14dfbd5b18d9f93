package aggregator

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/redact"
)

// TestRedactEverySecret: Redact masks one set of every configured secret
// value (an auth token, one upstream's env value, another's header and URL
// key), the logger built on the same Live masks them in every record, and a
// reload replaces the set.
func TestRedactEverySecret(t *testing.T) {
	cfg := &configs.Config{
		Auth: configs.Auth{Tokens: []configs.Token{{Token: "admin-token-1", Profiles: []string{"p"}}}},
		Upstreams: []*configs.Upstream{
			{Name: "a", Transport: "stdio", Command: "true", Env: map[string]string{"KEY": "a-env-secret"}},
			{Name: "b", Transport: "http", URL: "http://127.0.0.1:1/mcp?key=b-query-secret", Headers: map[string]string{"X-Api-Key": "b-header-secret"}},
		},
	}
	live := &redact.Live{}
	var out bytes.Buffer
	log := slog.New(redact.NewHandlerFunc(slog.NewTextHandler(&out, nil), live.Apply))
	a := New(cfg, Options{Secrets: live})
	text := "admin-token-1 a-env-secret b-header-secret b-query-secret"
	if got := a.Redact(text); got != "REDACTED REDACTED REDACTED REDACTED" {
		t.Errorf("Redact = %q", got)
	}
	log.Info(text, "stderr", text)
	if strings.Contains(out.String(), "secret") || strings.Contains(out.String(), "admin-token-1") {
		t.Errorf("the log shows a secret: %s", out.String())
	}

	next := &configs.Config{Auth: configs.Auth{Tokens: []configs.Token{{Token: "rotated-token-2", Profiles: []string{"p"}}}}}
	a.Reload(context.Background(), next)
	defer a.Close()
	if got := a.Redact("rotated-token-2"); got != "REDACTED" {
		t.Errorf("after a reload, Redact(new token) = %q", got)
	}
	if got := live.Apply("rotated-token-2 admin-token-1"); got != "REDACTED admin-token-1" {
		t.Errorf("after a reload, the log's set masks %q", got)
	}
}
