//go:build unix

package lifecycle

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestEarlyRequestWaitsForUpstreams checks that a request that arrives
// while the upstreams are still making their first connection waits for
// them instead of seeing a partial catalog. The upstream takes a second to
// start (a shell sleeps before it runs the demo server); the session is
// opened as soon as viewmux answers /healthz, and its first tools/list must
// already hold the upstream's tools.
func TestEarlyRequestWaitsForUpstreams(t *testing.T) {
	dir := t.TempDir()
	cfg := fmt.Sprintf(`[upstreams.slow]
command = "sh"
args = ["-c", "sleep 1; exec %s demo-server --name slow"]
`, itest.MuxBinary(t))
	path := filepath.Join(dir, "viewmux.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := itest.FreeAddr(t)
	m, err := itest.LaunchMux(t, itest.MuxBinary(t), []string{"serve", "--config", path, "--listen", addr}, itest.MuxOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	m.Addr = addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never answered: %v\n%s", err, m.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before the upstream is up: %s; the test did not catch viewmux early", resp.Status)
	}
	s := itest.OpenRawSession(t, m.URL(), nil)
	names := s.Post(t, "", nil, itest.ToolsListBody(2)).ToolNames(t)
	if !slices.Contains(names, "slow__echo") {
		t.Fatalf("first tools/list = %v, want the slow upstream's tools (the request should have waited)\n%s", names, m.Stderr())
	}
}
