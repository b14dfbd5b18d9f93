//go:build unix

package integration

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// SessionScript is one entry of Script.Sessions: a client with its own URL
// and headers (each defaulting to the Script's when empty; headers replace,
// they are not merged) running its own steps concurrently with the others.
// Client i of the Result is session i. Barrier steps (opBarrier) line the
// sessions up with each other.
type SessionScript struct {
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Steps   []Op              `json:"steps"`
}

const methodToolsListChanged = "notifications/tools/list_changed"

// opBarrier waits until every session whose steps contain a barrier named
// name has reached it. It fails when one of them stops before reaching it,
// or after 30 s.
func opBarrier(name string) Op { return Op{Op: "barrier", Name: name} }

// opWaitNotification waits up to timeout for an unconsumed notification of
// method and consumes it.
func opWaitNotification(method string, timeout time.Duration) Op {
	return Op{Op: "waitNotification", Method: method, TimeoutMs: int(timeout / time.Millisecond)}
}

// opExpectNoNotification waits for d and fails as soon as an unconsumed
// notification of method is (or already was) received.
func opExpectNoNotification(method string, d time.Duration) Op {
	return Op{Op: "expectNoNotification", Method: method, Ms: int(d / time.Millisecond)}
}

func opSleep(d time.Duration) Op { return Op{Op: "sleep", Ms: int(d / time.Millisecond)} }

// countNotifications counts the notifications of method a client received.
func countNotifications(c ClientResult, method string) int {
	n := 0
	for _, x := range c.Notifications {
		if x.Method == method {
			n++
		}
	}
	return n
}

// TestDriverSessions checks drive.mjs's per-session scripts, barriers and
// expectNoNotification against the reference server-everything directly,
// with no viewmux in between.
func TestDriverSessions(t *testing.T) {
	requireNode(t)
	url := startEverythingHTTP(t)

	t.Run("own steps, barrier orders them", func(t *testing.T) {
		// Session 1 sleeps before the barrier; session 0 must not run its
		// call before session 1 arrives, which the elapsed time shows.
		start := time.Now()
		res := drive(t, Script{URL: url, Sessions: []SessionScript{
			{Steps: []Op{opBarrier("go"), opCall("echo", map[string]any{"message": "zero"})}},
			{Headers: map[string]string{"X-Test": "1"}, Steps: []Op{
				opSleep(700 * time.Millisecond), opBarrier("go"),
				opCall("get-sum", map[string]any{"a": 1, "b": 1}),
				opExpectNoNotification("notifications/never/sent", 100*time.Millisecond),
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
		res, stderr, err := driveRaw(t, Script{URL: url, Sessions: []SessionScript{
			{Steps: []Op{{Op: "request", Method: "no/such-method"}, opBarrier("b")}},
			{Steps: []Op{opBarrier("b"), opList()}},
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
		res, stderr, err := driveRaw(t, Script{URL: url, Sessions: []SessionScript{{Steps: []Op{
			opCall("toggle-simulated-logging", map[string]any{}),
			opExpectNoNotification("notifications/message", 20*time.Second),
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
			script Script
			stderr string
		}{
			{"barrier twice", Script{URL: url, Sessions: []SessionScript{{Steps: []Op{opBarrier("x"), opBarrier("x")}}}}, "used twice"},
			{"clients with sessions", Script{URL: url, Clients: 2, Sessions: []SessionScript{{Steps: []Op{opList()}}}}, "cannot be combined"},
			{"no url", Script{Sessions: []SessionScript{{Steps: []Op{opList()}}}}, `has no "url"`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				_, stderr, err := driveRaw(t, tt.script)
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr, tt.stderr) {
					t.Fatalf("driver error = %v, stderr %q; want exit status 2 mentioning %q", err, stderr, tt.stderr)
				}
			})
		}
	})
}
