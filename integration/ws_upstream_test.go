//go:build unix

package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wsPeerScript serves server-everything over WebSocket (see its header).
func wsPeerScript() string { return filepath.Join(harness.dir, "wspeer", "everything-ws.mjs") }

// requireWSModule skips the test when the `ws` package cannot be imported
// by wspeer/everything-ws.mjs, or fails it when CI=true (like requireNode).
func requireWSModule(t *testing.T) {
	t.Helper()
	requireNode(t)
	cmd := exec.Command(harness.node, "--input-type=module", "-e", `await import("ws")`)
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
	msg := fmt.Sprintf("the ws package cannot be imported from %s: run `npm ci` in %s (%s)", cmd.Dir, harness.dir, why)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and the WebSocket peer cannot run: %s", msg)
	}
	t.Skipf("skipping: %s", msg)
}

// startEverythingWS starts server-everything over WebSocket on a free
// loopback port and returns its ws:// URL. The script binds port 0 itself and
// reports the port, so there is no race for it. It is stopped at cleanup; its
// output is logged if the test failed.
func startEverythingWS(t *testing.T) string {
	t.Helper()
	requireWSModule(t)
	logs := &syncBuffer{}
	cmd := exec.Command(harness.node, wsPeerScript(), "0")
	cmd.Env = envWithout(os.Environ(), "PORT", markerEnv)
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

// TestWebsocketUpstream mounts the reference server-everything over
// WebSocket and drives viewmux with the official TypeScript SDK client.
func TestWebsocketUpstream(t *testing.T) {
	url := startEverythingWS(t)
	if !strings.HasPrefix(url, "ws://127.0.0.1:") {
		t.Fatalf("everything-ws URL = %q, want ws://127.0.0.1:PORT/", url)
	}
	mux := startMux(t, fmt.Sprintf("[upstreams.wsev]\nurl = %s\nrequired = true\n", tomlString(url)))
	const text = "héllo wörld ✓ 日本語 🚀 \u2028"

	steps := drive(t, Script{URL: mux.URL(), Steps: []Op{
		opList(),
		opCall("wsev__echo", map[string]any{"message": text}),
		opCall("wsev__get-sum", map[string]any{"a": 2, "b": 40}),
	}}).Steps(t)

	var listed []string
	for _, name := range steps[0].Names {
		if orig, ok := strings.CutPrefix(name, "wsev__"); ok {
			listed = append(listed, orig)
		}
	}
	for _, tool := range everythingTools {
		if !slices.Contains(listed, tool) {
			t.Errorf("wsev__%s is not listed; wsev tools: %v", tool, listed)
		}
	}
	if tool := steps[0].Tool("wsev__echo"); tool == nil || tool.Title != "Echo Tool" {
		t.Errorf("wsev__echo = %+v, want title %q", tool, "Echo Tool")
	}
	r := steps[1].Call(t)
	if got, want := r.Text(), "Echo: "+text; got != want || r.IsError {
		t.Errorf("wsev__echo = %q (isError %v), want %q", got, r.IsError, want)
	}
	if got, want := steps[2].Call(t).Text(), "The sum of 2 and 40 is 42."; got != want {
		t.Errorf("wsev__get-sum = %q, want %q", got, want)
	}

	t.Run("concurrent clients", func(t *testing.T) {
		const n = 4
		res := drive(t, Script{URL: mux.URL(), Clients: n, Terminate: true, Steps: []Op{
			opCall("wsev__echo", map[string]any{"message": "client {{client}} " + text}),
			opCall("wsev__get-sum", map[string]any{"a": 1, "b": 2}),
		}})
		if len(res.Clients) != n {
			t.Fatalf("got %d clients, want %d", len(res.Clients), n)
		}
		for i, c := range res.Clients {
			if got, want := c.Steps[0].Call(t).Text(), fmt.Sprintf("Echo: client %d %s", i, text); got != want {
				t.Errorf("client %d: wsev__echo = %q, want %q", i, got, want)
			}
			if got, want := c.Steps[1].Call(t).Text(), "The sum of 1 and 2 is 3."; got != want {
				t.Errorf("client %d: wsev__get-sum = %q, want %q", i, got, want)
			}
		}
	})
}
