package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
