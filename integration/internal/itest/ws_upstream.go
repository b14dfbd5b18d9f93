//go:build unix

package itest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wsPeerScript serves server-everything over WebSocket (see its header).
func wsPeerScript() string { return filepath.Join(Harness.Dir, "wspeer", "everything-ws.mjs") }

// RequireWSModule skips the test when the `ws` package cannot be imported
// by wspeer/everything-ws.mjs, or fails it when CI=true (like RequireNode).
func RequireWSModule(t *testing.T) {
	t.Helper()
	RequireNode(t)
	cmd := exec.Command(Harness.Node, "--input-type=module", "-e", `await import("ws")`)
	cmd.Dir = filepath.Dir(wsPeerScript())
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	// Node prints a source excerpt first; the line naming the error is enough.
	why := err.Error()
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "Error") {
			why = strings.TrimSpace(line)
			break
		}
	}
	msg := fmt.Sprintf("the ws package cannot be imported from %s: run `npm ci` in %s (%s)", cmd.Dir, Harness.Dir, why)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and the WebSocket peer cannot run: %s", msg)
	}
	t.Skipf("skipping: %s", msg)
}

// StartEverythingWS starts server-everything over WebSocket on a free
// loopback port and returns its ws:// URL. The script binds port 0 itself and
// reports the port, so there is no race for it. It is stopped at cleanup; its
// output is logged if the test failed.
func StartEverythingWS(t *testing.T) string {
	t.Helper()
	RequireWSModule(t)
	logs := &SyncBuffer{}
	cmd := exec.Command(Harness.Node, wsPeerScript(), "0")
	cmd.Env = EnvWithout(os.Environ(), "PORT", MarkerEnv)
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", wsPeerScript(), err)
	}
	done := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			var hello struct {
				URL string `json:"url"`
			}
			if json.Unmarshal(sc.Bytes(), &hello) == nil {
				ready <- hello.URL
			} else {
				fmt.Fprintf(logs, "unexpected first stdout line: %s\n", sc.Text())
			}
		}
		for sc.Scan() {
			fmt.Fprintf(logs, "stdout: %s\n", sc.Text())
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("--- everything-ws output ---\n%s", logs.String())
		}
	})
	select {
	case url := <-ready:
		return url
	case <-done:
		t.Fatalf("everything-ws exited before listening\n--- output ---\n%s", logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("everything-ws did not report its port within 20s\n--- output ---\n%s", logs.String())
	}
	return ""
}
