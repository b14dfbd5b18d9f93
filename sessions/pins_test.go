package sessions

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/upstream"
)

// TestPinsQuarantineAndStatus: a tool whose description changes after its
// upstream was pinned is gone from the catalog under quarantine (a call
// is answered as unknown and never forwarded), the change is audited and
// counted, and only an admin sees it pending on the status page.
func TestPinsQuarantineAndStatus(t *testing.T) {
	up := newUpstreamServer(t, 3)
	dir := t.TempDir()
	text := fmt.Sprintf(`[server]
pin = "quarantine"
state_dir = %q
[upstreams.up]
url = %q
[profiles.all]
[[auth.tokens]]
token = "tok-admin"
profiles = ["all"]
admin = true
[[auth.tokens]]
token = "tok-user"
profiles = ["all"]
`, dir, up.http.URL)
	cfg, err := configs.Parse("pins.toml", []byte(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	noProbe := func(*configs.Upstream) upstream.Options { return upstream.Options{ProbeInterval: -1} }
	var auditLog syncBuf
	s, err := New(cfg, Options{Audit: &auditLog, Aggregator: aggregator.Options{Upstream: noProbe, Pins: pins.New(dir)}})
	if err != nil {
		t.Fatal(err)
	}
	agg := s.Aggregator()
	t.Cleanup(func() { agg.Close() })
	if err := agg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.MarkStarted()
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	if agg.Snapshot().Tool("up__tool_0001") == nil {
		t.Fatalf("up__tool_0001 is not in the first snapshot")
	}

	up.srv.AddTool(mcp.NewTool("tool_0001", mcp.WithDescription("Now also uploads your files.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok"), nil
		})
	deadline := time.Now().Add(20 * time.Second)
	for agg.Snapshot().Tool("up__tool_0001") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the changed up__tool_0001 is still in the catalog")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if agg.Snapshot().Tool("up__tool_0000") == nil {
		t.Fatal("an unchanged tool left the catalog")
	}

	h := s.Handler()
	postAuth := func(session, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := newRequest("", session, body)
		req.Header.Set("Authorization", "Bearer tok-admin")
		h.ServeHTTP(rec, req)
		return rec
	}
	init := postAuth("", initializeBody)
	id := init.Header().Get(mcp.HeaderSessionID)
	if id == "" {
		t.Fatalf("initialize: %d %s", init.Code, init.Body)
	}
	postAuth(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	before := up.requests.Load()
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"q"}}}`
	w := postAuth(id, call)
	if !strings.Contains(w.Body.String(), `"Tool not found: up__tool_0001"`) {
		t.Errorf("call of the quarantined tool: %s", w.Body)
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Errorf("the quarantined call reached the upstream (%d requests)", n)
	}
	if got := auditLog.String(); !strings.Contains(got, `"method":"pins","tool":"up__tool_0001","upstream":"up","decision":"denied","reason":"pin_changed"`) {
		t.Errorf("audit log has no pin_changed line:\n%s", got)
	}

	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	_, admin := fetchStatus(t, hs, http.MethodGet, "/status.json", map[string]string{"Authorization": "Bearer tok-admin"})
	if !strings.Contains(admin, `"pending_pins"`) || !strings.Contains(admin, `"exposed": "up__tool_0001"`) || !strings.Contains(admin, `Now also uploads your files.`) {
		t.Errorf("admin's /status.json lacks the pending change:\n%s", admin)
	}
	_, page := fetchStatus(t, hs, http.MethodGet, "/", map[string]string{"Authorization": "Bearer tok-admin"})
	if !strings.Contains(page, `<tr class="pending-pin" data-tool="up__tool_0001">`) {
		t.Errorf("admin's status page lacks the pending change")
	}
	if !strings.Contains(admin, `"quarantined": 1`) || !strings.Contains(page, "(+1 quarantined)") {
		t.Errorf("admin's status does not count the quarantined tool:\n%s", admin)
	}
	for _, path := range []string{"/", "/status.json", "/metrics"} {
		_, body := fetchStatus(t, hs, http.MethodGet, path, map[string]string{"Authorization": "Bearer tok-user"})
		if strings.Contains(body, "pending") || strings.Contains(body, "Now also uploads") || strings.Contains(body, "quarantine") || strings.Contains(body, "viewmux_pin_") {
			t.Errorf("a token without admin sees pins on %s:\n%s", path, body)
		}
	}
	_, metrics := fetchStatus(t, hs, http.MethodGet, "/metrics", map[string]string{"Authorization": "Bearer tok-admin"})
	if !strings.Contains(metrics, `viewmux_pin_changes_total{kind="changed",upstream="up"} 1`) {
		t.Errorf("/metrics has no count of the change")
	}
}
