//go:build unix

package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// fakeMuxEnv makes the test binary, re-executed, act as a minimal stand-in
// for `viewmux serve`, so the harness's own machinery (startMux, readiness,
// cleanup, marker propagation) is tested without the real binary. Its value
// is the mode: "clean" kills its child's process group on SIGTERM, "leaky"
// does not.
const fakeMuxEnv = "VIEWMUX_INTEGRATION_FAKE_MUX"

// fakeMux serves GET /readyz on --listen, starts `sh -c 'sleep 300 & wait'`
// in its own process group, and exits 0 on SIGTERM or SIGINT.
func fakeMux(mode string, args []string) int {
	var listen string
	for i, a := range args {
		if a == "--listen" && i+1 < len(args) {
			listen = args[i+1]
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	child := exec.Command("sh", "-c", "sleep 300 & wait")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "fake viewmux:", err)
		return 1
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake viewmux:", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintln(os.Stderr, "fake viewmux: ready on", listen)
	<-ctx.Done()
	_ = srv.Close()
	if mode == "clean" {
		_ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL)
		_ = child.Wait()
	}
	fmt.Fprintln(os.Stderr, "fake viewmux: bye")
	return 0
}

// TestMuxHarness runs startMuxWith against the fake: it must wait for
// readiness, hand the marker down to grandchildren, and notice a leak.
func TestMuxHarness(t *testing.T) {
	requireProc(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("clean", func(t *testing.T) {
		m := startMuxWith(t, muxOptions{Bin: exe, Config: "# unused\n", Env: []string{fakeMuxEnv + "=clean"}})
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
			got = commCounts(markedProcs(m.Marker))
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
		m := startMuxWith(t, muxOptions{Bin: exe, Config: "# unused\n", Env: []string{fakeMuxEnv + "=leaky"}})
		if err := m.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, ok := m.Wait(10 * time.Second); !ok || code != 0 {
			t.Fatalf("fake exit = %d (exited %v), want 0", code, ok)
		}
		left := markedProcs(m.Marker)
		if got := commCounts(left); got["sh"] != 1 || got["sleep"] != 1 {
			t.Fatalf("after the leaky fake exited, marked processes = %v, want its orphaned sh and sleep:\n%s", got, describeProcs(left))
		}
		// Clean up here, or the harness's cleanup would rightly fail the test.
		killMarked(m.Marker)
		if left := waitNoMarked(m.Marker, 5*time.Second); len(left) > 0 {
			t.Fatalf("killMarked left:\n%s", describeProcs(left))
		}
	})
}
