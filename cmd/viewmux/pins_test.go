package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// TestPinsUsage: pins refuses what it cannot mean with exit 2, before it
// reads any config or state.
func TestPinsUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pins"}, "want a subcommand: list or approve"},
		{[]string{"pins", "aprove"}, `unknown subcommand "aprove"`},
		{[]string{"pins", "approve"}, "want one of TOOL, --upstream NAME or --all"},
		{[]string{"pins", "approve", "a__t", "--all"}, "want one of TOOL, --upstream NAME or --all"},
		{[]string{"pins", "approve", "a__t", "b__t"}, "want one of TOOL, --upstream NAME or --all"},
		{[]string{"pins", "approve", "--all", "--json"}, "--json is list's"},
		{[]string{"pins", "list", "a__t"}, `list: unexpected argument "a__t"`},
		{[]string{"pins", "list", "--all"}, "--upstream and --all are approve's"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out := runCLI(t, tc.args...)
			if code != exitUsage || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d and %q:\n%s", code, exitUsage, tc.want, out)
			}
		})
	}
}

// TestPinsListEmpty: with nothing pinned yet, list says so and exits 0,
// and a config without pinning gets a note.
func TestPinsListEmpty(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "viewmux.toml")
	if err := os.WriteFile(cfg, []byte("[server]\nstate_dir = "+tomlQuote(filepath.Join(dir, "state"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, "pins", "list", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "no pending changes") || !strings.Contains(out, `server.pin is "off"`) {
		t.Errorf("exit %d:\n%s", code, out)
	}
	code, out = runCLI(t, "pins", "approve", "--all", "--config", cfg)
	if code != exitRuntime || !strings.Contains(out, "no pending change for any tool") {
		t.Errorf("approve --all with nothing pending: exit %d:\n%s", code, out)
	}
}

func tomlQuote(s string) string { return `"` + strings.ReplaceAll(s, `\`, `\\`) + `"` }

// TestPinsOnRedis: with [state] url, `viewmux pins` works on the shared
// store, with no state directory: a change a replica recorded there is
// listed and approved, and the approval is what every replica reads.
func TestPinsOnRedis(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	// A replica records a first sight and then a change, on the store.
	replica := pins.NewOn(srv.Open(t, state.RedisOptions{Prefix: "fleet:"}))
	for _, desc := range []string{"v1", "v2"} {
		r := replica.Round(true)
		r.Upstream("u").Hide("t", "u__t", json.RawMessage(`{"name":"t","description":"`+desc+`","inputSchema":{"type":"object"}}`))
		if _, err := r.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "viewmux.toml")
	body := "[server]\npin = \"quarantine\"\n\n[state]\nurl = \"${TEST_STATE_URL}\"\nkey_prefix = \"fleet:\"\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_STATE_URL", srv.URL())
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "")
	code, out := runCLI(t, "pins", "list", "--config", cfg)
	if code != exitPending || !strings.Contains(out, "u__t") {
		t.Fatalf("pins list on the store: exit %d, want %d and u__t:\n%s", code, exitPending, out)
	}
	code, out = runCLI(t, "pins", "approve", "u__t", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "redis state store at "+srv.Addr()) {
		t.Fatalf("pins approve on the store: exit %d:\n%s", code, out)
	}
	if _, _, err := replica.Refresh(); err != nil {
		t.Fatal(err)
	}
	pending, err := replica.Pending()
	if err != nil || len(pending) != 0 {
		t.Errorf("the replica still has %d pending after the approval (%v)", len(pending), err)
	}
}
