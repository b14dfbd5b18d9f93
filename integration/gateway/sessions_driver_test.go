//go:build unix

package gateway

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestDriverSessions checks drive.mjs's per-session scripts, barriers and
// expectNoNotification against the reference server-everything directly,
// with no viewmux in between.
func TestDriverSessions(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	url := itest.StartEverythingHTTP(t)

	t.Run("own steps, barrier orders them", func(t *testing.T) {
		// Session 1 sleeps before the barrier; session 0 must not run its
		// call before session 1 arrives, which the elapsed time shows.
		start := time.Now()
		res := itest.Drive(t, itest.Script{URL: url, Sessions: []itest.SessionScript{
			{Steps: []itest.Op{itest.OpBarrier("go"), itest.OpCall("echo", map[string]any{"message": "zero"})}},
			{Headers: map[string]string{"X-Test": "1"}, Steps: []itest.Op{
				itest.OpSleep(700 * time.Millisecond), itest.OpBarrier("go"),
				itest.OpCall("get-sum", map[string]any{"a": 1, "b": 1}),
				itest.OpExpectNoNotification("notifications/never/sent", 100*time.Millisecond),
			}},
		}})
		if len(res.Clients) != 2 {
			t.Fatalf("got %d clients, want 2", len(res.Clients))
		}
		if got := res.Clients[0].Steps[1].Call(t).Text(); got != "Echo: zero" {
			t.Errorf("session 0 echo = %q", got)
		}
		if got := res.Clients[1].Steps[2].Call(t).Text(); got != "The sum of 1 and 1 is 2." {
			t.Errorf("session 1 get-sum = %q", got)
		}
		if res.Clients[0].SessionID == res.Clients[1].SessionID {
			t.Errorf("both sessions have id %q", res.Clients[0].SessionID)
		}
		if d := time.Since(start); d < 700*time.Millisecond {
			t.Errorf("run took %v, less than session 1's sleep before the barrier", d)
		}
	})

	t.Run("a client stopping breaks its barriers", func(t *testing.T) {
		start := time.Now()
		res, stderr, err := itest.DriveRaw(t, itest.Script{URL: url, Sessions: []itest.SessionScript{
			{Steps: []itest.Op{{Op: "request", Method: "no/such-method"}, itest.OpBarrier("b")}},
			{Steps: []itest.Op{itest.OpBarrier("b"), itest.OpList()}},
		}})
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("driver error = %v, want exit status 1 (stderr %s)", err, stderr)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("broken barrier took %v to fail; it must fail at once", d)
		}
		if len(res.Clients) != 2 || res.Clients[1].Error == nil || !strings.Contains(res.Clients[1].Error.Message, "broken") {
			t.Fatalf("session 1 should fail at the broken barrier: %+v", res.Clients)
		}
	})

	t.Run("expectNoNotification fails on a notification", func(t *testing.T) {
		// toggle-simulated-logging makes server-everything send log
		// notifications every few seconds from then on.
		res, stderr, err := itest.DriveRaw(t, itest.Script{URL: url, Sessions: []itest.SessionScript{{Steps: []itest.Op{
			itest.OpCall("toggle-simulated-logging", map[string]any{}),
			itest.OpExpectNoNotification("notifications/message", 20*time.Second),
		}}}})
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("driver error = %v, want exit status 1 (stderr %s)", err, stderr)
		}
		if c := res.Clients; len(c) != 1 || c[0].Error == nil || !strings.Contains(c[0].Error.Message, "unexpected notifications/message") {
			t.Fatalf("want the step to fail on the log notification, got %+v", res.Clients)
		}
	})

	t.Run("bad scripts", func(t *testing.T) {
		for _, tt := range []struct {
			name   string
			script itest.Script
			stderr string
		}{
			{"barrier twice", itest.Script{URL: url, Sessions: []itest.SessionScript{{Steps: []itest.Op{itest.OpBarrier("x"), itest.OpBarrier("x")}}}}, "used twice"},
			{"clients with sessions", itest.Script{URL: url, Clients: 2, Sessions: []itest.SessionScript{{Steps: []itest.Op{itest.OpList()}}}}, "cannot be combined"},
			{"no url", itest.Script{Sessions: []itest.SessionScript{{Steps: []itest.Op{itest.OpList()}}}}, `has no "url"`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				_, stderr, err := itest.DriveRaw(t, tt.script)
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr, tt.stderr) {
					t.Fatalf("driver error = %v, stderr %q; want exit status 2 mentioning %q", err, stderr, tt.stderr)
				}
			})
		}
	})
}
