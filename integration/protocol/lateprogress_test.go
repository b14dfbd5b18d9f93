package protocol

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// lineClient speaks newline-delimited JSON-RPC to a child process.
type lineClient struct {
	in    io.WriteCloser
	lines chan []byte
}

func startLineClient(t *testing.T, name string, args ...string) *lineClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	cmd.Env = append(os.Environ(), "VIEWMUX_CONFIG=")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cancel()
		cmd.Wait()
	})
	c := &lineClient{in: in, lines: make(chan []byte, 4096)}
	go func() {
		r := bufio.NewReaderSize(out, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				close(c.lines)
				return
			}
			c.lines <- line
		}
	}()
	return c
}

func (c *lineClient) send(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(c.in, msg+"\n"); err != nil {
		t.Fatal(err)
	}
}

// next returns the next message, or nil after wait with none.
func (c *lineClient) next(t *testing.T, wait time.Duration) map[string]json.RawMessage {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			t.Fatal("the server closed its stdout")
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("not JSON: %s", line)
		}
		return m
	case <-time.After(wait):
		return nil
	}
}

// progressOf calls tool with a progress token and counts the progress
// notifications for it that arrive before its result and in the 500 ms
// after it.
func (c *lineClient) progressOf(t *testing.T, id int, tool string, args string) (before, after int) {
	t.Helper()
	tok := fmt.Sprintf(`"tok-%d"`, id)
	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s,"_meta":{"progressToken":%s}}}`, id, tool, args, tok))
	answered := false
	deadline := time.Now().Add(30 * time.Second)
	for {
		wait := time.Until(deadline)
		if answered {
			wait = 500 * time.Millisecond
		}
		m := c.next(t, wait)
		if m == nil {
			if !answered {
				t.Fatalf("tools/call %s: no answer", tool)
			}
			return before, after
		}
		if string(m["id"]) == fmt.Sprint(id) {
			answered = true
			continue
		}
		var p struct {
			Token json.RawMessage `json:"progressToken"`
		}
		if string(m["method"]) == `"notifications/progress"` && json.Unmarshal(m["params"], &p) == nil && string(p.Token) == tok {
			if answered {
				after++
			} else {
				before++
			}
		}
	}
}

// TestLateProgressReachesStdioClient: progress an upstream writes just
// after its result still reaches a client of a stream door, after the
// result, as it reaches a client of the upstream directly. The demo
// server's slow_count with no interval sends its progress from mcp-go's
// notification queue, so some of it comes after the result.
func TestLateProgressReachesStdioClient(t *testing.T) {
	t.Parallel()
	bin := itest.MuxBinary(t)
	cfg := filepath.Join(t.TempDir(), "viewmux.toml")
	if err := os.WriteFile(cfg, []byte(itest.DemoUpstream(t, "d")), 0o600); err != nil {
		t.Fatal(err)
	}
	direct := startLineClient(t, bin, "demo-server", "--name", "d")
	mux := startLineClient(t, bin, "serve", "--stdio", "--config", cfg)
	const calls, count = 20, 100
	for _, side := range []struct {
		label, tool string
		c           *lineClient
	}{{"direct", "slow_count", direct}, {"viewmux", "d__slow_count", mux}} {
		side.c.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"late","version":"1"}}}`)
		if m := side.c.next(t, 30*time.Second); m == nil || m["result"] == nil {
			t.Fatalf("%s: initialize: %v", side.label, m)
		}
		side.c.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		var before, after int
		for i := range calls {
			b, a := side.c.progressOf(t, 10+i, side.tool, fmt.Sprintf(`{"count":%d,"interval_ms":0}`, count))
			before, after = before+b, after+a
		}
		t.Logf("%s: %d calls of %d progress each: %d before their result, %d after", side.label, calls, count, before, after)
		if before+after != calls*count {
			t.Errorf("%s: %d of %d progress notifications arrived", side.label, before+after, calls*count)
		}
	}
}
