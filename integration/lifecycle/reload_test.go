package lifecycle

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestReload edits a live viewmux's config: a valid change is applied as a
// diff while sessions stay connected and get list_changed; an invalid one
// is rejected and the running config keeps serving.
func TestReload(t *testing.T) {
	itest.RequireNode(t)
	base := itest.DemoUpstream(t, "one")
	m := itest.StartMux(t, base)
	path := filepath.Join(m.Dir, "viewmux.toml")

	// reloadWith writes text, triggers a reload (SIGHUP, or just the write
	// for the file watcher), and runs a live session across it.
	live := func(t *testing.T, text string, hup bool, wantAfter []string) itest.ClientResult {
		t.Helper()
		logs := strings.Count(m.Stderr(), "config reloaded")
		type out struct {
			res itest.Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, _, err := itest.DriveRaw(t, itest.Script{URL: m.URL(), Steps: []itest.Op{
				itest.OpList(),
				itest.OpWaitNotification(itest.MethodToolsListChanged, 20*time.Second),
				itest.OpList(),
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
		if err := os.WriteFile(path, []byte(itest.InheritMarker(text)), 0o600); err != nil {
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
		if itest.CountNotifications(c, itest.MethodToolsListChanged) < 1 {
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
		c := live(t, base+itest.DemoUpstream(t, "two"), true, []string{"one__list_notes", "two__list_notes"})
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
		itest.WaitStderr(t, m, "config rejected; keeping the running config", 10*time.Second)
		for _, want := range []string{"viewmux.toml:5", "viewmux.toml:6", `unknown key`} {
			if !strings.Contains(m.Stderr(), want) {
				t.Errorf("rejection does not name %q\n%s", want, m.Stderr())
			}
		}
		res := itest.Drive(t, itest.Script{URL: m.URL(), Steps: []itest.Op{itest.OpList(), itest.OpCall("one__echo", map[string]any{"text": "still here"})}})
		steps := res.Steps(t)
		if !slices.Contains(steps[0].Names, "one__echo") || steps[1].Call(t).Text() != "still here" {
			t.Fatalf("old config not serving after a rejected reload: %+v", steps)
		}
		// Put a valid file back so the cleanup's shutdown is ordinary.
		if err := os.WriteFile(path, []byte(itest.InheritMarker(base)), 0o600); err != nil {
			t.Fatal(err)
		}
	})
}
