//go:build unix

package oauthclient

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestConformanceOAuthClient runs the conformance suite's auth/* client
// scenarios with viewmux's upstream OAuth client (the hidden `viewmux
// oauth-client URL`). It has a package of its own so that it runs beside
// the parity test (integration/conformance) instead of after it.
func TestConformanceOAuthClient(t *testing.T) {
	itest.RequireConformance(t)
	bin := itest.MuxBinary(t)
	if strings.ContainsAny(bin, " \t") {
		t.Fatalf("the conformance CLI splits --command at spaces, and the viewmux binary's path %q has one", bin)
	}
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		out, err := itest.RunConformanceQuiet(30*time.Second, "list", "--client", "--requirements", version)
		if err != nil {
			t.Fatalf("conformance list --client --requirements %s: %v\n%s", version, err, out)
		}
		var scenarios []string
		for _, line := range strings.Split(out, "\n") {
			// The required scenarios are "  - NAME"; the extensions listed
			// below them are indented further and tagged "[client]".
			if name, ok := strings.CutPrefix(line, "  - "); ok && strings.HasPrefix(name, "auth/") {
				scenarios = append(scenarios, strings.TrimSpace(name))
			}
		}
		if len(scenarios) == 0 {
			t.Fatalf("conformance lists no auth/* client scenario for %s:\n%s", version, out)
		}
		for _, sc := range scenarios {
			t.Run(version+"/"+sc, func(t *testing.T) {
				dir := t.TempDir()
				out, err := itest.RunConformanceQuiet(2*time.Minute, "client", "--command", bin+" oauth-client",
					"--scenario", sc, "--spec-version", version, "--output-dir", dir)
				checks := readClientChecks(t, dir, sc)
				failed, warned := 0, 0
				for _, c := range checks {
					switch c.Status {
					case "FAILURE":
						failed++
						t.Errorf("check %s: %s %s", c.ID, c.Description, c.ErrorMessage)
					case "WARNING":
						warned++
						t.Logf("warning %s: %s", c.ID, c.Description)
					}
				}
				if err != nil || failed > 0 || len(checks) == 0 {
					t.Fatalf("%s at %s: %d checks, %d failed (%v)\n%s", sc, version, len(checks), failed, err, itest.Tail(out, 4000))
				}
				t.Logf("%s at %s: %d checks passed, %d warnings", sc, version, len(checks), warned)
			})
		}
	}
}

// readClientChecks reads the checks.json a client scenario left under dir
// (DIR/auth/NAME-TIMESTAMP/checks.json).
func readClientChecks(t *testing.T, dir, scenario string) []itest.ConformanceCheck {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dir, filepath.FromSlash(scenario)+"-*", "checks.json"))
	if len(matches) != 1 {
		t.Fatalf("scenario %s left %d checks.json files under %s", scenario, len(matches), dir)
	}
	data, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	var checks []itest.ConformanceCheck
	if err := json.Unmarshal(data, &checks); err != nil {
		t.Fatalf("%s: %v", matches[0], err)
	}
	return checks
}
