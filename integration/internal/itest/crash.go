package itest

import (
	"strings"
	"testing"
	"time"
)

// DemoChild returns the pid of the live demo server named name carrying
// marker, waiting up to timeout for one to exist (it may be restarting).
// logs is the mux's log, shown on failure.
func DemoChild(t *testing.T, marker string, logs func() string, name string, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ps, err := ProcsWhere(func(p Proc) bool {
			return p.State != 'Z' && HasEnv(p.PID, MarkerEnv, marker) &&
				strings.Contains(Cmdline(p.PID), "demo-server --name "+name)
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) == 1 {
			return ps[0].PID
		}
		if time.Now().After(deadline) {
			t.Fatalf("want one live demo server %q, found %d:\n%s\n--- stderr ---\n%s", name, len(ps), DescribeProcs(ps), logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
