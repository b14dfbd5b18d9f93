package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// demoUpstream is config text mounting the built-in demo server.
func demoUpstream(t *testing.T, name string) string {
	return fmt.Sprintf("[upstreams.%s]\ncommand = %q\nargs = [\"demo-server\", \"--name\", %q]\n", name, muxBinary(t), name)
}

// waitStderr waits until viewmux's stderr contains s.
func waitStderr(t *testing.T, m *Mux, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(m.Stderr(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("viewmux never logged %q\n--- stderr ---\n%s", s, m.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReload edits a live viewmux's config: a valid change is applied as a
// diff while sessions stay connected and get list_changed; an invalid one
// is rejected and the running config keeps serving.
func TestReload(t *testing.T) {
	requireNode(t)
	base := demoUpstream(t, "one")
	m := startMux(t, base)
	path := filepath.Join(m.Dir, "viewmux.toml")

	// reloadWith writes text, triggers a reload (SIGHUP, or just the write
	// for the file watcher), and runs a live session across it.
	live := func(t *testing.T, text string, hup bool, wantAfter []string) ClientResult {
		t.Helper()
		logs := strings.Count(m.Stderr(), "config reloaded")
		type out struct {
			res Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, _, err := driveRaw(t, Script{URL: m.URL(), Steps: []Op{
				opList(),
				opWaitNotification(methodToolsListChanged, 20*time.Second),
				opList(),
			}})
			done <- out{res, err}
		}()
		// The session exists once viewmux logged it.
		sessions := strings.Count(m.Stderr(), "session started")
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(m.Stderr(), "session started") == sessions && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // let the client finish its first list
		if err := os.WriteFile(path, []byte(inheritMarker(text)), 0o600); err != nil {
			t.Fatal(err)
		}
		if hup {
			if err := m.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		deadline = time.Now().Add(15 * time.Second)
		for strings.Count(m.Stderr(), "config reloaded") == logs {
			if time.Now().After(deadline) {
				t.Fatalf("no reload logged\n--- stderr ---\n%s", m.Stderr())
			}
			time.Sleep(20 * time.Millisecond)
		}
		o := <-done
		if o.err != nil {
			t.Fatalf("live session across the reload: %v\n--- stderr ---\n%s", o.err, m.Stderr())
		}
		c := o.res.Clients[0]
		if countNotifications(c, methodToolsListChanged) < 1 {
			t.Fatalf("session got no tools/list_changed")
		}
		after := c.Steps[2].Names
		for _, w := range wantAfter {
			if !slices.Contains(after, w) {
				t.Fatalf("after reload the session lists %v, missing %s", after, w)
			}
		}
		return c
	}

	t.Run("SIGHUP adds an upstream to a live session", func(t *testing.T) {
		c := live(t, base+demoUpstream(t, "two"), true, []string{"one__list_notes", "two__list_notes"})
		if slices.Contains(c.Steps[0].Names, "two__list_notes") {
			t.Fatal("two__ listed before the reload")
		}
		if !strings.Contains(m.Stderr(), "added=[two]") {
			t.Fatalf("reload did not report the added upstream\n%s", m.Stderr())
		}
	})

	t.Run("file change removes an upstream without SIGHUP", func(t *testing.T) {
		c := live(t, base, false, []string{"one__list_notes"})
		if slices.Contains(c.Steps[2].Names, "two__list_notes") {
			t.Fatalf("two__ still listed after removal: %v", c.Steps[2].Names)
		}
	})

	t.Run("broken config is rejected and the old one keeps serving", func(t *testing.T) {
		broken := base + "[profiles.bad]\nallow_regex = [\"(\"]\nnope = 1\n"
		if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := m.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitStderr(t, m, "config rejected; keeping the running config", 10*time.Second)
		for _, want := range []string{"viewmux.toml:5", "viewmux.toml:6", `unknown key`} {
			if !strings.Contains(m.Stderr(), want) {
				t.Errorf("rejection does not name %q\n%s", want, m.Stderr())
			}
		}
		res := drive(t, Script{URL: m.URL(), Steps: []Op{opList(), opCall("one__echo", map[string]any{"text": "still here"})}})
		steps := res.Steps(t)
		if !slices.Contains(steps[0].Names, "one__echo") || steps[1].Call(t).Text() != "still here" {
			t.Fatalf("old config not serving after a rejected reload: %+v", steps)
		}
		// Put a valid file back so the cleanup's shutdown is ordinary.
		if err := os.WriteFile(path, []byte(inheritMarker(base)), 0o600); err != nil {
			t.Fatal(err)
		}
	})
}
