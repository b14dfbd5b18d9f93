//go:build unix

package itest

import (
	"time"
)

// SessionScript is one entry of Script.Sessions: a client with its own URL
// and headers (each defaulting to the Script's when empty; headers replace,
// they are not merged) running its own steps concurrently with the others.
// Client i of the Result is session i. Barrier steps (OpBarrier) line the
// sessions up with each other.
type SessionScript struct {
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Steps   []Op              `json:"steps"`
}

const MethodToolsListChanged = "notifications/tools/list_changed"

// OpBarrier waits until every session whose steps contain a barrier named
// name has reached it. It fails when one of them stops before reaching it,
// or after 30 s.
func OpBarrier(name string) Op { return Op{Op: "barrier", Name: name} }

// OpWaitNotification waits up to timeout for an unconsumed notification of
// method and consumes it.
func OpWaitNotification(method string, timeout time.Duration) Op {
	return Op{Op: "waitNotification", Method: method, TimeoutMs: int(timeout / time.Millisecond)}
}

// OpExpectNoNotification waits for d and fails as soon as an unconsumed
// notification of method is (or already was) received.
func OpExpectNoNotification(method string, d time.Duration) Op {
	return Op{Op: "expectNoNotification", Method: method, Ms: int(d / time.Millisecond)}
}

func OpSleep(d time.Duration) Op { return Op{Op: "sleep", Ms: int(d / time.Millisecond)} }

// CountNotifications counts the notifications of method a client received.
func CountNotifications(c ClientResult, method string) int {
	n := 0
	for _, x := range c.Notifications {
		if x.Method == method {
			n++
		}
	}
	return n
}
