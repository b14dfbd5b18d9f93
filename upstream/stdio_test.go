package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
)

func whoami(t *testing.T, u *Upstream) ident {
	t.Helper()
	var id ident
	if err := json.Unmarshal([]byte(callText(t, u, "whoami", nil)), &id); err != nil {
		t.Fatal(err)
	}
	return id
}

// liveGroupMembers lists the processes of group pgid that are not zombies
// (an orphaned zombie is gone in every sense but init's bookkeeping).
func liveGroupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp …; comm may contain spaces.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) < 3 || fields[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			out = append(out, pid)
		}
	}
	return out
}

func TestShutdownKillsWholeProcessGroup(t *testing.T) {
	cases := []struct {
		name    string
		mode    string
		wrapped bool // run as sh -c '<self> & wait', so the server is a grandchild
	}{
		{"direct child exits on stdin close", "serve", false},
		{"direct child ignores SIGTERM", "stubborn", false},
		{"sh wrapper, grandchild exits on stdin close", "serve", true},
		{"sh wrapper, grandchild needs SIGTERM", "linger", true},
		{"sh wrapper, grandchild needs SIGKILL", "stubborn", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := stdioConfig(t, "grp", tc.mode)
			if tc.wrapped {
				// sh gives a background job /dev/null as stdin unless it
				// is redirected explicitly, from a descriptor saved first.
				cfg.Command, cfg.Args = "sh", []string{"-c", `exec 3<&0; "$0" <&3 3<&- & wait`, selfPath(t)}
			}
			u := New(cfg, fastOptions(&logSink{}))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := u.Start(ctx); err != nil {
				u.Close()
				t.Fatalf("Start: %v", err)
			}
			id := whoami(t, u)
			if tc.wrapped == (id.Pid == id.Pgid) {
				t.Fatalf("server pid %d, group %d: wrapped=%v does not hold", id.Pid, id.Pgid, tc.wrapped)
			}
			if err := syscall.Kill(-id.Pgid, 0); err != nil {
				t.Fatalf("group %d not alive before Close: %v", id.Pgid, err)
			}

			begin := time.Now()
			if err := u.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			t.Logf("Close took %s", time.Since(begin).Round(time.Millisecond))
			if live := liveGroupMembers(t, id.Pgid); len(live) > 0 {
				t.Fatalf("after Close, group %d still has live processes %v", id.Pgid, live)
			}
			// Orphaned zombies are reaped by init, on its own schedule.
			waitFor(t, 10*time.Second, "kill(-pgid, 0) == ESRCH", func() bool {
				return errors.Is(syscall.Kill(-id.Pgid, 0), syscall.ESRCH)
			})
			waitFor(t, 10*time.Second, "server pid gone", func() bool {
				return errors.Is(syscall.Kill(id.Pid, 0), syscall.ESRCH)
			})
			if err := u.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if got := u.State(); got != StateClosed {
				t.Errorf("State after Close = %v", got)
			}
		})
	}
}

func TestKilledChildFailsCallPromptlyAndReconnects(t *testing.T) {
	rec := &catalogRecorder{}
	opts := fastOptions(&logSink{})
	opts.OnCatalog = rec.onCatalog
	u := New(stdioConfig(t, "crashy", "serve"), opts)
	startUpstream(t, u)
	before := whoami(t, u)

	errc := make(chan error, 1)
	go func() {
		var req mcp.CallToolRequest
		req.Params.Name = "slow"
		req.Params.Arguments = map[string]any{"ms": 60000}
		_, err := u.CallTool(context.Background(), req)
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond) // let the call reach the child
	killed := time.Now()
	if err := syscall.Kill(before.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		took := time.Since(killed)
		if took > time.Second {
			t.Errorf("call returned %s after the kill, want < 1s", took)
		}
		if !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), `upstream "crashy": tools/call "slow"`) {
			t.Errorf("error = %v, want ErrDown naming upstream and tool", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("in-flight call did not return after the child was killed")
	}

	waitFor(t, 5*time.Second, "OnCatalog observing the upstream down", rec.sawDown)
	waitFor(t, 15*time.Second, "reconnect", func() bool {
		s := rec.snapshot()
		return s[len(s)-1] != nil && u.State() == StateUp
	})
	checkFullCatalog(t, u.Catalog())
	if after := whoami(t, u); after.Pid == before.Pid {
		t.Errorf("still talking to pid %d", after.Pid)
	}
}

func TestCallWhileDown(t *testing.T) {
	cfg := stdioConfig(t, "never", "serve")
	cfg.Command = filepath.Join(t.TempDir(), "does-not-exist")
	u := New(cfg, fastOptions(&logSink{}))
	t.Cleanup(func() { u.Close() })
	err := u.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), `upstream "never"`) {
		t.Fatalf("Start = %v, want an error naming the upstream", err)
	}
	if u.Catalog() != nil || u.current() != nil || u.State() == StateUp {
		t.Errorf("after a failed Start: catalog %v, client %v, state %v", u.Catalog(), u.current(), u.State())
	}
	var req mcp.CallToolRequest
	req.Params.Name = "echo"
	_, err = u.CallTool(context.Background(), req)
	if !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), `upstream "never": tools/call "echo"`) {
		t.Errorf("CallTool while down = %v", err)
	}
}

func TestConnectTimeout(t *testing.T) {
	cfg := stdioConfig(t, "mute", "silent")
	cfg.ConnectTimeout = 700 * time.Millisecond
	u := New(cfg, fastOptions(&logSink{}))
	t.Cleanup(func() { u.Close() })
	begin := time.Now()
	err := u.Start(context.Background())
	took := time.Since(begin)
	if err == nil {
		t.Fatal("Start succeeded against a server that never answers")
	}
	if !strings.Contains(err.Error(), `upstream "mute"`) || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("error = %v, want it to name the upstream and the timeout", err)
	}
	if took < cfg.ConnectTimeout || took > cfg.ConnectTimeout+time.Second {
		t.Errorf("Start took %s, want about %s", took, cfg.ConnectTimeout)
	}
	if u.State() == StateUp {
		t.Error("state up after a failed Start")
	}
}

func TestStartCtxBoundsOnlyTheFirstAttempt(t *testing.T) {
	u := New(stdioConfig(t, "ctx", "serve"), fastOptions(&logSink{}))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { u.Close() })
	if err := u.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(200 * time.Millisecond)
	if u.State() != StateUp {
		t.Fatalf("State = %v after Start's ctx ended", u.State())
	}
	callText(t, u, "echo", map[string]any{})
}

func TestStderrIsLoggedLineByLine(t *testing.T) {
	logs := &logSink{}
	cfg := stdioConfig(t, "noisy", "serve")
	cfg.Env[envStderr] = "1"
	u := New(cfg, fastOptions(logs))
	startUpstream(t, u)
	stderrLine := func(match func(string) bool) func() bool {
		return func() bool {
			return len(logs.find(func(r map[string]string) bool {
				return r["msg"] == "stderr" && r["upstream"] == "noisy" && match(r["stderr"])
			})) > 0
		}
	}
	waitFor(t, 5*time.Second, "first stderr line", stderrLine(func(s string) bool { return s == "hello from stderr" }))
	waitFor(t, 5*time.Second, "truncated long line", stderrLine(func(s string) bool {
		return len(s) == maxStderrLine && strings.Trim(s, "x") == ""
	}))
	waitFor(t, 5*time.Second, "line after the long one", stderrLine(func(s string) bool { return s == "after the long line" }))
}

// TestMessageTooLarge: an answer over max_message_bytes fails only its own
// call, with an error saying it is too large and naming the upstream and
// the limit, while another call in flight on the same connection
// succeeds; the connection stays up (no restart).
func TestMessageTooLarge(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(t *testing.T) *configs.Upstream
	}{
		{"stdio", func(t *testing.T) *configs.Upstream { return stdioConfig(t, "bulky", "serve") }},
		{"streamable http", func(t *testing.T) *configs.Upstream { return httpConfig(t, "bulky") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logSink{}
			rec := &catalogRecorder{}
			cfg := tc.cfg(t)
			cfg.MaxMessageBytes = 16 << 10
			opts := fastOptions(logs)
			opts.OnCatalog = rec.onCatalog
			u := New(cfg, opts)
			startUpstream(t, u)
			callText(t, u, "big", map[string]any{"n": 1000}) // well under the limit
			before := u.Health()

			// Another call in flight on the same connection meanwhile.
			other := make(chan error, 1)
			go func() {
				var req mcp.CallToolRequest
				req.Params.Name = "slow"
				req.Params.Arguments = map[string]any{"ms": 300}
				res, err := u.CallTool(context.Background(), req)
				if err == nil && (len(res.Content) != 1 || res.Content[0].(mcp.TextContent).Text != "done") {
					err = fmt.Errorf("result %+v", res)
				}
				other <- err
			}()

			var req mcp.CallToolRequest
			req.Params.Name = "big"
			req.Params.Arguments = map[string]any{"n": 64 << 10}
			_, err := u.CallTool(context.Background(), req)
			if err == nil || !strings.Contains(err.Error(), `upstream "bulky": tools/call "big"`) ||
				!strings.Contains(err.Error(), "exceeds max_message_bytes (16384 bytes)") {
				t.Fatalf("oversized result: err = %v", err)
			}
			if errors.Is(err, ErrDown) {
				t.Errorf("oversized result reported as the upstream being down: %v", err)
			}
			if tc.name != "sse" && !errors.Is(err, ErrTooLarge) {
				t.Errorf("errors.Is(err, ErrTooLarge) = false: %v", err)
			}
			if err := <-other; err != nil {
				t.Errorf("the other call on the connection failed: %v", err)
			}
			if len(logs.find(func(r map[string]string) bool {
				return r["upstream"] == "bulky" && strings.Contains(r["err"], "exceeds max_message_bytes")
			})) == 0 {
				t.Error("no log naming the upstream and the size limit")
			}
			callText(t, u, "big", map[string]any{"n": 1000})
			after := u.Health()
			if after.Restarts != before.Restarts || after.Connects != before.Connects || u.State() != StateUp || rec.sawDown() {
				t.Errorf("the connection did not stay up: before %+v, after %+v", before, after)
			}
		})
	}
}

func TestCallTimeout(t *testing.T) {
	cfg := stdioConfig(t, "patient", "serve")
	cfg.CallTimeout = 300 * time.Millisecond
	u := New(cfg, fastOptions(&logSink{}))
	startUpstream(t, u)
	var req mcp.CallToolRequest
	req.Params.Name = "slow"
	req.Params.Arguments = map[string]any{"ms": 5000}
	begin := time.Now()
	_, err := u.CallTool(context.Background(), req)
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("call took %s with a 300ms call timeout", took)
	}
	if err == nil || !strings.Contains(err.Error(), `upstream "patient": tools/call "slow": timed out after 300ms`) ||
		!errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrDown) {
		t.Errorf("err = %v", err)
	}
	if u.State() != StateUp {
		t.Errorf("State = %v after a timed-out call", u.State())
	}
	callText(t, u, "echo", map[string]any{})
}

func TestCloseWithoutStart(t *testing.T) {
	u := New(stdioConfig(t, "idle", "serve"), Options{})
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if err := u.Start(context.Background()); err == nil {
		t.Error("Start after Close succeeded")
	}
	if u.State() != StateClosed {
		t.Errorf("State = %v", u.State())
	}
}

func TestWithoutReservedMeta(t *testing.T) {
	orig := &mcp.Meta{ProgressToken: "p", AdditionalFields: map[string]any{
		"io.modelcontextprotocol/protocolVersion": "2026-07-28", "traceparent": "00-abc",
	}}
	got := withoutReservedMeta(orig)
	if _, ok := got.AdditionalFields["io.modelcontextprotocol/protocolVersion"]; ok {
		t.Error("reserved key kept")
	}
	if got.AdditionalFields["traceparent"] != "00-abc" || got.ProgressToken != "p" {
		t.Errorf("other fields lost: %+v", got)
	}
	if len(orig.AdditionalFields) != 2 {
		t.Error("the caller's map was modified")
	}
	plain := &mcp.Meta{AdditionalFields: map[string]any{"traceparent": "x"}}
	if withoutReservedMeta(plain) != plain || withoutReservedMeta(nil) != nil {
		t.Error("copied without need")
	}
}

func TestCloseDuringFirstAttempt(t *testing.T) {
	cfg := stdioConfig(t, "slowpoke", "silent")
	u := New(cfg, fastOptions(&logSink{}))
	errc := make(chan error, 1)
	go func() { errc <- u.Start(context.Background()) }()
	time.Sleep(300 * time.Millisecond)
	begin := time.Now()
	if err := u.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), `upstream "slowpoke"`) {
			t.Errorf("Start = %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Start still blocked after Close")
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("Close took %s", took)
	}
}

func TestNoGoroutineOutlivesClose(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(t *testing.T) *configs.Upstream
	}{
		{"stdio", func(t *testing.T) *configs.Upstream { return stdioConfig(t, "g", "serve") }},
		{"streamable http", func(t *testing.T) *configs.Upstream { return httpConfig(t, "g") }},
		{"sse", func(t *testing.T) *configs.Upstream { return sseConfig(t, "g", configs.TransportSSE) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg(t)
			time.Sleep(100 * time.Millisecond)
			before := runtime.NumGoroutine()
			u := New(cfg, fastOptions(&logSink{}))
			if err := u.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			callText(t, u, "echo", map[string]any{})
			callText(t, u, "add_tool", map[string]any{"name": "extra"})
			if err := u.Close(); err != nil {
				t.Fatal(err)
			}
			var now int
			deadline := time.Now().Add(5 * time.Second)
			for now = runtime.NumGoroutine(); now > before && time.Now().Before(deadline); now = runtime.NumGoroutine() {
				time.Sleep(20 * time.Millisecond)
			}
			if now > before {
				buf := make([]byte, 1<<20)
				t.Fatalf("%d goroutines before, %d after Close:\n%s", before, now, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}
