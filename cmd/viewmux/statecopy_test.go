package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// TestStateCopy moves a state directory into a Redis store and back with
// `viewmux state copy`: the pins as they are, the login sealed in the
// store (no token in any value) and readable again on the way back, files
// that are not shared state left alone, and a second copy finds
// everything there already.
func TestStateCopy(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	ctx := context.Background()
	key := strings.Repeat("5a", 32)
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "viewmux.toml")
	body := "[server]\npin = \"quarantine\"\nstate_dir = \"${TEST_STATE_DIR}\"\n\n[state]\nencryption_key = \"" + key + "\"\nkey_prefix = \"copy:\"\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_STATE_DIR", stateDir)

	// A state directory as a single replica left it: pins, a plain login
	// (written before any key was set), and a file that is not state.
	files := state.OpenFiles(stateDir)
	r := pins.NewOn(files).Round(true)
	r.Upstream("u").Hide("t", "u__t", json.RawMessage(`{"name":"t","description":"v1","inputSchema":{"type":"object"}}`))
	if _, err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	const access, refresh = "at-SECRET-access-0123456789", "rt-SECRET-refresh-0123456789"
	rec := &oauth.Record{Upstream: "gh", ServerURL: "https://gh.example/mcp", Issuer: "https://gh.example", TokenEndpoint: "https://gh.example/token",
		ClientID: "c", AuthMethod: "none", AccessToken: access, RefreshToken: refresh}
	if _, err := (oauth.Store{State: files}).Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	pinsDoc, err := files.Get(ctx, pins.FileName)
	if err != nil || pinsDoc == nil {
		t.Fatalf("pins document: %q, %v", pinsDoc, err)
	}

	code, out := runCLI(t, "state", "copy", "--config", cfg, "--to", srv.URL())
	if code != exitOK {
		t.Fatalf("state copy --to: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"copied      pins.json (pins)", "copied      oauth-gh.json (login)", "left alone  notes.txt", "2 copied, 0 already there, 0 skipped, 1 left alone"} {
		if !strings.Contains(out, want) {
			t.Errorf("state copy --to does not say %q:\n%s", want, out)
		}
	}
	dump, err := srv.Dump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for k, vals := range dump {
		for _, v := range vals {
			if strings.Contains(v, access) || strings.Contains(v, refresh) {
				t.Errorf("the store's %s holds a token in plain text", k)
			}
			if strings.Contains(v, "vmx1.") {
				found++
			}
		}
		if strings.Contains(k, "notes.txt") {
			t.Errorf("a file that is not state reached the store: %s", k)
		}
	}
	if found != 1 {
		t.Errorf("%d sealed values in the store; want the one login", found)
	}
	remote := srv.Open(t, state.RedisOptions{Prefix: "copy:"})
	if got, err := remote.Get(ctx, pins.FileName); err != nil || string(got) != string(pinsDoc) {
		t.Errorf("the store's pins differ from the directory's (%v)", err)
	}

	code, out = runCLI(t, "state", "copy", "--config", cfg, "--to", srv.URL())
	if code != exitOK || !strings.Contains(out, "0 copied, 2 already there") {
		t.Errorf("a second copy: exit %d, want everything already there:\n%s", code, out)
	}

	// Back into an empty directory: the login opens with the key.
	t.Setenv("TEST_STATE_DIR", filepath.Join(dir, "back"))
	code, out = runCLI(t, "state", "copy", "--config", cfg, "--from", srv.URL())
	if code != exitOK || !strings.Contains(out, "2 copied") {
		t.Fatalf("state copy --from: exit %d:\n%s", code, out)
	}
	sealer, err := state.NewSealer([]byte(strings.Repeat("\x5a", 32)))
	if err != nil {
		t.Fatal(err)
	}
	back := state.OpenFiles(filepath.Join(dir, "back"))
	got, _, err := (oauth.Store{State: back, Sealer: sealer}).Load(ctx, "gh")
	if err != nil || got == nil || got.AccessToken != access || got.RefreshToken != refresh {
		t.Fatalf("the login copied back: %v, %v", got, err)
	}
	if b, _ := back.Get(ctx, pins.FileName); string(b) != string(pinsDoc) {
		t.Errorf("the pins copied back differ")
	}

	// A destination holding another version is kept, and said so.
	if err := remote.Update(ctx, pins.FileName, func([]byte) ([]byte, error) { return []byte(`{"version":1}`), nil }); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_STATE_DIR", stateDir)
	code, out = runCLI(t, "state", "copy", "--config", cfg, "--to", srv.URL())
	if code != 1 || !strings.Contains(out, "skipped     pins.json (pins): the destination holds another version; --overwrite replaces it") {
		t.Errorf("copy onto another version: exit %d, want 1 and the skip named:\n%s", code, out)
	}
	code, out = runCLI(t, "state", "copy", "--config", cfg, "--to", srv.URL(), "--overwrite")
	if code != exitOK || !strings.Contains(out, "replaced    pins.json (pins)") {
		t.Errorf("copy --overwrite: exit %d:\n%s", code, out)
	}
}

// TestStateCopyNeedsKey: logins never reach a shared store unsealed.
func TestStateCopyNeedsKey(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "viewmux.toml")
	if err := os.WriteFile(cfg, []byte("[server]\nstate_dir = \""+dir+"/state\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &oauth.Record{Upstream: "gh", ServerURL: "https://gh.example/mcp", AccessToken: "at-plain-0123456789"}
	if _, err := (oauth.Store{State: state.OpenFiles(dir + "/state")}).Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, "state", "copy", "--config", cfg, "--to", srv.URL())
	if code == exitOK || !strings.Contains(out, "oauth-gh.json") || !strings.Contains(out, "encryption_key") {
		t.Errorf("copying a login without a key: exit %d; want an error naming the login and encryption_key:\n%s", code, out)
	}
	dump, _ := srv.Dump(ctx)
	for k, vals := range dump {
		for _, v := range vals {
			if strings.Contains(v, "at-plain-0123456789") {
				t.Errorf("the token reached the store unsealed under %s", k)
			}
		}
	}
}

// TestStateCopyUsage: the command's usage errors.
func TestStateCopyUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"state"}, "want a subcommand: copy"},
		{[]string{"state", "move"}, `unknown subcommand "move"`},
		{[]string{"state", "copy"}, "want one of --to URL or --from URL"},
		{[]string{"state", "copy", "--to", "redis://a", "--from", "redis://b"}, "want one of --to URL or --from URL"},
		{[]string{"state", "copy", "--to", "http://a"}, "redis"},
	} {
		code, out := runCLI(t, tc.args...)
		if code == exitOK || !strings.Contains(out, tc.want) {
			t.Errorf("viewmux %s: exit %d, want an error with %q:\n%s", strings.Join(tc.args, " "), code, tc.want, out)
		}
	}
}
