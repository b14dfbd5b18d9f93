package itest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// DemoUpstream is config text mounting the built-in demo server.
func DemoUpstream(t *testing.T, name string) string {
	return fmt.Sprintf("[upstreams.%s]\ncommand = %q\nargs = [\"demo-server\", \"--name\", %q]\n", name, MuxBinary(t), name)
}

// WaitStderr waits until viewmux's stderr contains s.
func WaitStderr(t *testing.T, m *Mux, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(m.Stderr(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("viewmux never logged %q\n--- stderr ---\n%s", s, m.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
