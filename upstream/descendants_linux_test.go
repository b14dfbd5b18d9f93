//go:build linux

package upstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
)

// sidMarkerEnv marks the processes a test's upstream starts, so the test
// finds them wherever they were reparented.
const sidMarkerEnv = "VIEWMUX_UPSTREAM_TEST_SID"

// markedSleeps returns the live sleep processes carrying sidMarkerEnv=marker.
func markedSleeps(marker string) []procStat {
	want := []byte(sidMarkerEnv + "=" + marker)
	var out []procStat
	for pid, st := range scanProcs() {
		if st.state == 'Z' || !hasEnvEntry(pid, want) {
			continue
		}
		if comm := readComm(pid); comm == "sleep" {
			out = append(out, st)
		}
	}
	return out
}

func readComm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// setsidConfig is a stdio upstream whose sh wrapper first starts a
// grandchild that leaves the process group with setsid and ignores SIGTERM
// and SIGHUP, then execs the test server.
func setsidConfig(t *testing.T, marker string) *configs.Upstream {
	cfg := stdioConfig(t, "sid", "serve")
	cfg.Env[sidMarkerEnv] = marker
	cfg.Command, cfg.Args = "sh", []string{"-c",
		`setsid sh -c 'trap "" TERM HUP; exec sleep 1000' & exec "$0"`, selfPath(t)}
	return cfg
}

// waitSleep waits for the one marked setsid grandchild.
func waitSleep(t *testing.T, marker string) procStat {
	t.Helper()
	var got []procStat
	waitFor(t, 10*time.Second, "the setsid grandchild", func() bool {
		got = markedSleeps(marker)
		return len(got) == 1
	})
	return got[0]
}

func randomMarker(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestSetsidGrandchildEnded checks that a grandchild that left the child's
// process group with setsid and ignores SIGTERM is ended with the child,
// whether the upstream is closed or its child crashes and is restarted.
// (This test process is no subreaper: the orphan goes to init, and is found
// by its marker.)
func TestSetsidGrandchildEnded(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		marker := randomMarker(t)
		u := New(setsidConfig(t, marker), fastOptions(&logSink{}))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := u.Start(ctx); err != nil {
			u.Close()
			t.Fatalf("Start: %v", err)
		}
		sleep := waitSleep(t, marker)
		if st, err := readStat(sleep.pid); err != nil || st.ppid == syscall.Getpid() {
			t.Fatalf("grandchild %d: %+v, %v", sleep.pid, st, err)
		}
		if err := u.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if alive(sleep) {
			t.Fatalf("the setsid grandchild %d is still running after Close", sleep.pid)
		}
	})

	t.Run("child crashes and restarts", func(t *testing.T) {
		marker := randomMarker(t)
		u := New(setsidConfig(t, marker), fastOptions(&logSink{}))
		startUpstream(t, u)
		sleep := waitSleep(t, marker)
		before := whoami(t, u)
		if err := syscall.Kill(before.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The old connection is torn down before the new one is dialed, so
		// once the restarted child has its own grandchild, the old one has
		// had its turn.
		waitFor(t, 15*time.Second, "the restarted child's grandchild", func() bool {
			for _, st := range markedSleeps(marker) {
				if st.pid != sleep.pid {
					return true
				}
			}
			return false
		})
		if alive(sleep) {
			t.Fatalf("the crashed child's setsid grandchild %d is still running after the restart", sleep.pid)
		}
		if got := markedSleeps(marker); len(got) != 1 {
			t.Fatalf("%d marked grandchildren run, want the restarted child's one", len(got))
		}
		waitFor(t, 15*time.Second, "the restarted upstream up", func() bool { return u.State() == StateUp })
		if after := whoami(t, u); after.Pid == before.Pid {
			t.Fatalf("still talking to pid %d", after.Pid)
		}
	})
}
