//go:build unix

package lifecycle

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestFrontDoors checks that SSE, websocket and stdio serve the same view
// as streamable HTTP for the same profile, answer calls through it, and
// refuse hidden tools with the same -32601 — all driven by the official
// TypeScript SDK client.
func TestFrontDoors(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	cfg := itest.DoorsConfig(t)
	mux := itest.StartMux(t, cfg)
	cfgPath := filepath.Join(mux.Dir, "viewmux.toml")
	const text = "héllo wörld ✓ 日本語"

	for _, profile := range []string{"readonly", ""} {
		// The reference: what streamable HTTP lists for this profile.
		url := mux.URL()
		if profile != "" {
			url += "?profile=" + profile
		}
		want := itest.Drive(t, itest.Script{URL: url, Steps: []itest.Op{itest.OpList()}}).Steps(t)[0].Names
		if len(want) == 0 || slices.Contains(want, "demo__write_note") != (profile == "") {
			t.Fatalf("profile %q over HTTP lists %v", profile, want)
		}
		for _, d := range itest.DoorsFor(mux, cfgPath, mux.Marker, profile) {
			t.Run(fmt.Sprintf("%s profile=%q", d.Name, profile), func(t *testing.T) {
				steps := []itest.Op{
					itest.OpList(),
					itest.OpCall("demo__echo", map[string]any{"text": text}),
					itest.OpCallExpectError("demo__no_such_tool", map[string]any{}),
				}
				if profile != "" {
					steps = append(steps, itest.OpCallExpectError("demo__write_note", map[string]any{"title": "t", "body": "b"}))
				}
				res := itest.DriveDoor(t, d.Script(steps))
				c := res.Clients[0]
				if !slices.Equal(c.Steps[0].Names, want) {
					t.Errorf("lists %v, want what HTTP lists: %v", c.Steps[0].Names, want)
				}
				if got := c.Steps[1].Call(t).Text(); got != text {
					t.Errorf("echo = %q, want %q", got, text)
				}
				for _, s := range c.Steps[2:] {
					itest.WantToolNotFound(t, s.Error, s.Name)
				}
				if d.Name == "stdio" {
					itest.CheckStdioExit(t, c)
				}
			})
		}
	}

	// Catalog changes reach sessions of every door: the client that adds a
	// tool is told tools/list_changed and lists it.
	for _, d := range itest.DoorsFor(mux, cfgPath, mux.Marker, "") {
		t.Run("list_changed "+d.Name, func(t *testing.T) {
			tool := "extra_" + strings.ReplaceAll(d.Name, " ", "_")
			res := itest.DriveDoor(t, d.Script([]itest.Op{
				itest.OpList(),
				itest.OpCall("demo__add_tool", map[string]any{"name": tool, "read_only": true}),
				itest.OpWaitNotification(itest.MethodToolsListChanged, 10*time.Second),
				itest.OpList(),
			}))
			c := res.Clients[0]
			if slices.Contains(c.Steps[0].Names, "demo__"+tool) || !slices.Contains(c.Steps[3].Names, "demo__"+tool) {
				t.Errorf("before %v, after %v: want demo__%s only after", c.Steps[0].Names, c.Steps[3].Names, tool)
			}
		})
	}
}

// TestStdioDoor runs `viewmux serve --stdio` directly: stdout carries
// nothing but JSON-RPC (logs go to stderr), --profile selects the view, and
// closing stdin ends the process with status 0 and no child left behind.
func TestStdioDoor(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "viewmux.toml")
	if err := os.WriteFile(cfgPath, []byte(itest.DoorsConfig(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	marker := itest.RandomHex(t, 12)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, itest.MuxBinary(t), "serve", "--stdio", "--profile", "readonly", "--config", cfgPath, "--log-level", "debug")
	cmd.Dir = dir
	cmd.Env = append(itest.EnvWithout(os.Environ(), "VIEWMUX_CONFIG", itest.MarkerEnv), itest.MarkerEnv+"="+marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr itest.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if survivors := itest.WaitNoMarked(marker, 2*time.Second); len(survivors) > 0 {
			t.Errorf("processes started by viewmux --stdio survived it:\n%s", itest.DescribeProcs(survivors))
			itest.KillMarked(marker)
		}
		if t.Failed() {
			t.Logf("--- viewmux stderr ---\n%s", stderr.String())
		}
	})

	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdoutPipe)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() map[string]json.RawMessage {
		t.Helper()
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("stdout closed early")
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(line), &m); err != nil || string(m["jsonrpc"]) != `"2.0"` {
				t.Fatalf("stdout line is not a JSON-RPC message: %q", line)
			}
			return m
		case <-ctx.Done():
			t.Fatal("no answer on stdout")
			return nil
		}
	}
	send := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(stdin, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := next(); string(m["id"]) != "1" || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if m := next(); string(m["id"]) != "2" || json.Unmarshal(m["result"], &list) != nil {
		t.Fatalf("tools/list: %v", m)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	if want := []string{"demo__echo", "demo__list_notes", "demo__read_note", "demo__slow_count"}; !slices.Equal(names, want) {
		t.Fatalf("--profile readonly lists %v, want %v", names, want)
	}
	// The last request goes out together with the end of stdin: it is
	// still answered before the process exits.
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo__write_note","arguments":{"title":"t","body":"b"}}}`)
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"last"}}}`)
	stdin.Close()
	got := map[string]map[string]json.RawMessage{}
	for range 2 {
		m := next()
		got[string(m["id"])] = m
	}
	if e := string(got["3"]["error"]); !strings.Contains(e, `"code":-32601`) || !strings.Contains(e, "Tool not found: demo__write_note") {
		t.Errorf("hidden tool over stdio: %v", got["3"])
	}
	if r := string(got["4"]["result"]); !strings.Contains(r, `"last"`) {
		t.Errorf("call sent before EOF: %v", got["4"])
	}
	for line := range lines {
		t.Errorf("extra output on stdout after the answers: %q", line)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("viewmux --stdio after stdin closed: %v, want exit status 0", err)
	}
	if !strings.Contains(stderr.String(), "ready on stdio") {
		t.Errorf("stderr lacks the logs: %q", stderr.String())
	}
}

// TestStdioUsage checks the flag combinations `serve --stdio` refuses, with
// exit status 2 and the reason, before it starts anything.
func TestStdioUsage(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "viewmux.toml")
	if err := os.WriteFile(cfgPath, []byte(itest.DoorsConfig(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"unknown profile", []string{"serve", "--stdio", "--config", cfgPath, "--profile", "nope"}, "known: readonly"},
		{"with --listen", []string{"serve", "--stdio", "--listen", "127.0.0.1:0", "--config", cfgPath}, "--stdio and --listen"},
		{"--profile without --stdio", []string{"serve", "--profile", "readonly", "--config", cfgPath}, "--profile needs --stdio"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := itest.RunMux(t, 30*time.Second, dir, nil, tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.msg) || stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q: want 2, nothing on stdout, stderr mentioning %q", code, stdout, stderr, tt.msg)
			}
		})
	}
}
