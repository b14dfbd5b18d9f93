//go:build unix

package itest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// FakeMuxEnv makes the test binary, re-executed, act as a minimal stand-in
// for `viewmux serve`, so the harness's own machinery (StartMux, readiness,
// cleanup, marker propagation) is tested without the real binary. Its value
// is the mode: "clean" kills its child's process group on SIGTERM, "leaky"
// does not.
const FakeMuxEnv = "VIEWMUX_INTEGRATION_FAKE_MUX"

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
