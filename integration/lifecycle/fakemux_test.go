//go:build unix

package lifecycle

import (
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestMuxHarness runs StartMuxWith against the fake: it must wait for
// readiness, hand the marker down to grandchildren, and notice a leak.
func TestMuxHarness(t *testing.T) {
	itest.RequireProc(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("clean", func(t *testing.T) {
		m := itest.StartMuxWith(t, itest.MuxOptions{Bin: exe, Config: "# unused\n", Env: []string{itest.FakeMuxEnv + "=clean"}})
		resp, err := http.Get("http://" + m.Addr + "/readyz")
		if err != nil {
			t.Fatalf("startMux returned before /readyz answered: %v", err)
		}
		resp.Body.Close()
		if got, want := m.URL(), "http://"+m.Addr+"/mcp"; got != want {
			t.Errorf("URL() = %q, want %q", got, want)
		}
		// sh and sleep inherit the marker from the fake's environment.
		// sh execs sleep after the fake is ready, so wait (bounded) for it.
		var got map[string]int
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got = commCounts(itest.MarkedProcs(m.Marker))
			if got["sh"] == 1 && got["sleep"] == 1 || time.Now().After(deadline) {
				break
			}
		}
		if got["sh"] != 1 || got["sleep"] != 1 {
			t.Errorf("marked processes %v, want the fake's sh and sleep", got)
		}
		// Cleanup SIGTERMs it, asserts exit 0 and that nothing is left.
	})

	t.Run("leaky", func(t *testing.T) {
		m := itest.StartMuxWith(t, itest.MuxOptions{Bin: exe, Config: "# unused\n", Env: []string{itest.FakeMuxEnv + "=leaky"}})
		if err := m.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, ok := m.Wait(10 * time.Second); !ok || code != 0 {
			t.Fatalf("fake exit = %d (exited %v), want 0", code, ok)
		}
		left := itest.MarkedProcs(m.Marker)
		if got := commCounts(left); got["sh"] != 1 || got["sleep"] != 1 {
			t.Fatalf("after the leaky fake exited, marked processes = %v, want its orphaned sh and sleep:\n%s", got, itest.DescribeProcs(left))
		}
		// Clean up here, or the harness's cleanup would rightly fail the test.
		itest.KillMarked(m.Marker)
		if left := itest.WaitNoMarked(m.Marker, 5*time.Second); len(left) > 0 {
			t.Fatalf("killMarked left:\n%s", itest.DescribeProcs(left))
		}
	})
}
