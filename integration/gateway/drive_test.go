//go:build unix

package gateway

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestDriver checks client/drive.mjs itself against the reference
// server-everything over streamable HTTP, with no viewmux in between: it
// proves the driver before the viewmux tests trust it.
func TestDriver(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	url := itest.StartEverythingHTTP(t)
	const text = "héllo wörld ✓ 日本語"

	t.Run("steps", func(t *testing.T) {
		res := itest.Drive(t, itest.Script{URL: url, Steps: []itest.Op{
			itest.OpList(),
			itest.OpCall("echo", map[string]any{"message": text}),
			itest.OpCall("get-sum", map[string]any{"a": 2, "b": 40}),
			{Op: "request", Method: "no/such-method", ExpectError: true},
			{Op: "listPrompts"},
			{Op: "listResources"},
			{Op: "ping"},
		}})
		if !res.OK || len(res.Clients) != 1 {
			t.Fatalf("ok=%v clients=%d, want ok with 1 client", res.OK, len(res.Clients))
		}
		c := res.Clients[0]
		if c.SessionID == "" || c.ProtocolVersion == "" {
			t.Errorf("sessionId=%q protocolVersion=%q, want both set", c.SessionID, c.ProtocolVersion)
		}
		steps := c.Steps
		if len(steps) != 7 {
			t.Fatalf("got %d step results, want 7", len(steps))
		}
		for _, name := range itest.EverythingTools {
			if !slices.Contains(steps[0].Names, name) {
				t.Errorf("tools/list lacks %q; got %v", name, steps[0].Names)
			}
		}
		if echo := steps[0].Tool("echo"); echo == nil || echo.Annotations == nil || !itest.IsTrue(echo.Annotations.ReadOnlyHint) {
			t.Errorf("echo should be listed with readOnlyHint true; got %+v", echo)
		}
		if got, want := steps[1].Call(t).Text(), "Echo: "+text; got != want {
			t.Errorf("echo = %q, want %q", got, want)
		}
		if got, want := steps[2].Call(t).Text(), "The sum of 2 and 40 is 42."; got != want {
			t.Errorf("get-sum = %q, want %q", got, want)
		}
		e := steps[3].Error
		if !steps[3].OK || e == nil || e.Kind != "jsonrpc" || e.Code == nil || *e.Code != -32601 || e.Message != "Method not found" {
			t.Errorf("unknown method: ok=%v error %v, want jsonrpc -32601 \"Method not found\"", steps[3].OK, e)
		}
		if len(steps[4].Names) == 0 || len(steps[5].URIs) == 0 {
			t.Errorf("prompts %v, resources %v: want both non-empty", steps[4].Names, steps[5].URIs)
		}
	})

	t.Run("concurrent clients", func(t *testing.T) {
		const n = 4
		res := itest.Drive(t, itest.Script{URL: url, Clients: n, Terminate: true, Steps: []itest.Op{
			itest.OpList(),
			itest.OpCall("echo", map[string]any{"message": "client {{client}} " + text}),
		}})
		if len(res.Clients) != n {
			t.Fatalf("got %d clients, want %d", len(res.Clients), n)
		}
		seen := map[string]bool{}
		for i, c := range res.Clients {
			if c.Index != i {
				t.Errorf("client %d reports index %d", i, c.Index)
			}
			if seen[c.SessionID] {
				t.Errorf("client %d reuses session %q", i, c.SessionID)
			}
			seen[c.SessionID] = true
			if got, want := c.Steps[1].Call(t).Text(), fmt.Sprintf("Echo: client %d %s", i, text); got != want {
				t.Errorf("client %d echo = %q, want %q", i, got, want)
			}
		}
	})

	t.Run("unexpected outcomes fail the run", func(t *testing.T) {
		tests := []struct {
			name    string
			steps   []itest.Op
			stderr  string
			stopped int // step results recorded before the client stopped
		}{
			{"expected error did not come", []itest.Op{itest.OpCallExpectError("echo", map[string]any{"message": "x"}), itest.OpList()},
				"expected an error, got a result", 1},
			{"unexpected error", []itest.Op{{Op: "request", Method: "no/such-method"}, itest.OpList()},
				"Method not found", 1},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res, stderr, err := itest.DriveRaw(t, itest.Script{URL: url, Steps: tt.steps})
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 1 {
					t.Fatalf("driver error = %v, want exit status 1", err)
				}
				if res.OK || len(res.Clients) != 1 || res.Clients[0].Error == nil {
					t.Fatalf("result ok=%v, want not ok with the client's error set: %+v", res.OK, res)
				}
				if got := len(res.Clients[0].Steps); got != tt.stopped {
					t.Errorf("client recorded %d steps, want %d (it must stop at the failure)", got, tt.stopped)
				}
				if !strings.Contains(stderr, tt.stderr) {
					t.Errorf("stderr %q does not mention %q", stderr, tt.stderr)
				}
			})
		}
	})

	t.Run("unusable script", func(t *testing.T) {
		_, stderr, err := itest.DriveRaw(t, itest.Script{URL: url, Steps: []itest.Op{{Op: "teleport"}}})
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("driver error = %v, want exit status 2", err)
		}
		if !strings.Contains(stderr, `unknown op "teleport"`) {
			t.Errorf("stderr %q does not name the bad op", stderr)
		}
	})

	t.Run("connection refused", func(t *testing.T) {
		res, stderr, err := itest.DriveRaw(t, itest.Script{URL: "http://" + itest.FreeAddr(t) + "/mcp", Steps: []itest.Op{itest.OpList()}})
		if err == nil || res.OK {
			t.Fatalf("driving a closed port succeeded: %+v", res)
		}
		if c := res.Clients; len(c) != 1 || c[0].Error == nil || c[0].Error.Stage != "connect" {
			t.Errorf("want the client's error at stage connect, got %+v (stderr %q)", res.Clients, stderr)
		}
	})
}
