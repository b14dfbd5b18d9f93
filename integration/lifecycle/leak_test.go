//go:build unix

package lifecycle

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestLeakOnSIGTERM checks that no child or grandchild survives viewmux:
// every stdio upstream is a `sh -c` wrapper that backgrounds the
// real server, so the server is viewmux's grandchild, and one wrapper also
// leaves a grandchild that ignores SIGTERM and holds the upstream's stdout
// open, so only SIGKILL to the process group ends it.
func TestLeakOnSIGTERM(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	itest.RequireProc(t)
	bin := itest.MuxBinary(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	const grace = 2 * time.Second
	muxComm := filepath.Base(bin) // comm is the executable's name, cut to 15 bytes
	if len(muxComm) > 15 {
		muxComm = muxComm[:15]
	}

	for _, tt := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGTERM", syscall.SIGTERM}, {"SIGINT", syscall.SIGINT}} {
		sig := tt.sig
		t.Run(tt.name, func(t *testing.T) {
			marker := itest.RandomHex(t, 12)
			cfg := leakConfig(marker, grace, sh, sleep, bin)
			mux := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Marker: marker})

			t.Run("tree before shutdown", func(t *testing.T) {
				marked := itest.MarkedProcs(marker)
				got := commCounts(marked)
				// viewmux itself and the demo server run the same binary.
				if got["sh"] != 3 || got["node"] != 2 || got["sleep"] != 1 || got[muxComm] < 2 {
					t.Fatalf("marked processes %v, want 3 sh, 2 node, 1 sleep, ≥2 %s:\n%s", got, muxComm, itest.DescribeProcs(marked))
				}
				desc, err := itest.Descendants(mux.PID())
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range marked {
					if p.PID != mux.PID() && !slices.Contains(pids(desc), p.PID) {
						t.Errorf("marked process %d (%s) is not a descendant of viewmux %d", p.PID, p.Comm, mux.PID())
					}
				}
				// Each stdio child runs in its own process group.
				for _, p := range desc {
					if p.PPID == mux.PID() && p.PGID != p.PID {
						t.Errorf("upstream child %d (%s) is in process group %d, want its own (%d)", p.PID, p.Comm, p.PGID, p.PID)
					}
				}
			})

			start := time.Now()
			if err := mux.Signal(sig); err != nil {
				t.Fatalf("signal viewmux: %v", err)
			}
			bound := grace + 8*time.Second
			code, ok := mux.Wait(bound)
			if !ok {
				t.Fatalf("viewmux did not exit within %v of %v (shutdown_grace %v)", bound, sig, grace)
			}
			t.Logf("viewmux exited %v after %v", time.Since(start).Round(time.Millisecond), sig)
			if code != 0 {
				t.Errorf("viewmux exit code after %v = %d, want 0", sig, code)
			}
			if left := itest.WaitNoMarked(marker, time.Second); len(left) > 0 {
				t.Errorf("%d processes survived viewmux:\n%s", len(left), itest.DescribeProcs(left))
			}
		})
	}
}

// leakConfig mounts three stdio upstreams, each a `sh -c` wrapper that
// backgrounds the real server: server-everything, the demo server, and
// server-everything again beside a `sleep` that ignores SIGTERM and holds
// the upstream's stdout open. Each upstream's env carries the marker too, in
// case viewmux does not pass its own environment on.
func leakConfig(marker string, grace time.Duration, sh, sleep, bin string) string {
	// A background job of a non-interactive shell gets /dev/null as stdin, so
	// the wrapper hands the server its own stdin through fd 3.
	background := func(cmd string) string {
		return "exec 3<&0; " + cmd + " <&3 3<&- & wait"
	}
	everything := itest.ShQuote(itest.Harness.Node) + " " + itest.ShQuote(itest.EverythingEntry()) + " stdio"
	demo := itest.ShQuote(bin) + " demo-server --name d"
	stubborn := "trap '' TERM; " + itest.ShQuote(sleep) + " 3600 & " + background(everything)
	env := fmt.Sprintf("{ %s = %s }", itest.MarkerEnv, itest.TomlString(marker))
	return fmt.Sprintf(`[server]
shutdown_grace = %[1]s

[upstreams.wrapped]
command = %[2]s
args = %[3]s
env = %[6]s
required = true

[upstreams.demo]
command = %[2]s
args = %[4]s
env = %[6]s
required = true

[upstreams.stubborn]
command = %[2]s
args = %[5]s
env = %[6]s
required = true
`, itest.TomlString(grace.String()), itest.TomlString(sh),
		itest.TomlArray("-c", background(everything)),
		itest.TomlArray("-c", background(demo)),
		itest.TomlArray("-c", stubborn),
		env)
}
