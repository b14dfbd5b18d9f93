//go:build unix

package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/integration/internal/itest"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// TestOAuthUpstreamLoginReachesRunningServer is issue 19's "a remote OAuth
// MCP server can be mounted with oauth = true and one viewmux auth login":
// viewmux serves with an oauth upstream it has no token for (needs login,
// no tools from it, nothing sent to it, the server up anyway); the real
// `viewmux auth login --no-browser` against the same state_dir logs in
// through its loopback callback (the test authorization server approves
// by itself); the running server then connects and serves the upstream's
// tools, and calls reach the upstream with the token. No token appears in
// the server's log or on its status page.
func TestOAuthUpstreamLoginReachesRunningServer(t *testing.T) {
	rug := itest.StartRug(t) // its MCP server, served here behind the bearer check
	as := oauthtest.New(t, server.NewStreamableHTTPServer(rug.Srv))
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "viewmux.toml")
	cfg := "[server]\nstate_dir = " + itest.TomlString(filepath.Join(dir, "state")) + "\n\n" +
		"[upstreams.lin]\nurl = " + itest.TomlString(as.URL()) + "\noauth = true\n\n[profiles.agent]\n"
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Dir: dir})

	if row, err := itest.FidStatus(mux, "lin"); err != nil || row.State != "needs login" {
		t.Fatalf("lin before login: %+v %v\n%s", row, err, mux.Stderr())
	}
	env := &itest.PinsEnv{Mux: mux}
	if got := env.Listed(t); len(got) != 0 {
		t.Fatalf("tools before login: %v", got)
	}
	as.Lock()
	sent := as.Unauthenticated + as.Authorized
	as.Unlock()
	if sent != 0 {
		t.Fatalf("%d requests reached the upstream before any login", sent)
	}

	_, loginOutput := itest.AuthLogin(t, itest.MuxBinary(t), dir, cfgPath, "lin")

	got := env.Await(t, "lin's tools after the login", func(m map[string]string) bool { return m["lin__lookup"] != "" })
	if got["lin__lookup"] != itest.RugHonest {
		t.Fatalf("lin__lookup = %q", got["lin__lookup"])
	}
	c := &itest.RecHTTP{S: itest.OpenRawSession(t, mux.URL()+"?profile=agent", nil)}
	if a := c.Do(t, "tools/call", `{"name":"lin__lookup","arguments":{"word":"x"}}`); a.Msg.Error != nil || !strings.Contains(string(a.Msg.Result), "lookup ran") {
		t.Fatalf("tools/call: %s", a.Raw)
	}
	if rug.Called("lookup") != 1 {
		t.Fatalf("the upstream saw %d calls of lookup, want 1", rug.Called("lookup"))
	}

	raw, err := os.ReadFile(filepath.Join(dir, "state", "oauth-lin.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.AccessToken == "" {
		t.Fatalf("token file: %v", err)
	}
	page := fetchText(t, "http://"+mux.Addr+"/status.json") + fetchText(t, "http://"+mux.Addr+"/")
	for _, tok := range []string{rec.AccessToken, rec.RefreshToken} {
		for what, text := range map[string]string{"viewmux's log": mux.Stderr(), "the status page": page, "auth login's output": loginOutput} {
			if strings.Contains(text, tok) {
				t.Errorf("%s shows a token", what)
			}
		}
	}
	if row, err := itest.FidStatus(mux, "lin"); err != nil || row.State != "up" {
		t.Fatalf("lin after login: %+v %v", row, err)
	}
}

// fetchText GETs u and returns its body.
func fetchText(t *testing.T, u string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
