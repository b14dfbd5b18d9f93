//go:build unix

package lifecycle

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// brokenConfig has four independent mistakes, none of them a TOML syntax
// error, so a strict decoder and validator can find them all in one run.
const brokenConfig = `# four mistakes, all to be reported together
[server]
listen_addr = "127.0.0.1:0"

[upstreams.alpha]
command = "true"
connect_timeout = 30

[filter]
allow_regex = ["(unclosed"]

[profiles.child]
extends = "missing-parent"
`

// brokenConfigErrors lists each mistake by a text unique to its line and the
// words, one of which its error message must contain.
var brokenConfigErrors = []struct {
	line  string // unique text of the offending line
	words []string
}{
	{`listen_addr =`, []string{"listen_addr"}},                 // unknown key
	{`connect_timeout = 30`, []string{"connect_timeout"}},      // a bare number is not a duration
	{`allow_regex =`, []string{"allow_regex", "(unclosed"}},    // invalid RE2
	{`extends = "missing-parent"`, []string{"missing-parent"}}, // unknown parent profile
}

// lineOf returns the 1-based line of text that contains sub.
func lineOf(t *testing.T, text, sub string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			return i + 1
		}
	}
	t.Fatalf("%q not in config", sub)
	return 0
}

// TestBrokenConfig checks that `check` and `serve` reject an invalid config
// with exit code 2 and report every error with its file:line in one run.
func TestBrokenConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "broken.toml")
	if err := os.WriteFile(path, []byte(brokenConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "--config", path},
		{"serve", "--config", path, "--listen", itest.FreeAddr(t)},
	} {
		t.Run(args[0], func(t *testing.T) {
			code, _, stderr := itest.RunMux(t, 20*time.Second, dir, nil, args...)
			if code != 2 {
				t.Errorf("viewmux %s exit code = %d, want 2\n--- stderr ---\n%s", strings.Join(args, " "), code, stderr)
			}
			lines := strings.Split(stderr, "\n")
			for _, e := range brokenConfigErrors {
				n := lineOf(t, brokenConfig, e.line)
				// "broken.toml:7" not followed by a digit: matches file:line,
				// file:line:col and "…, at file:line".
				pos := regexp.MustCompile(regexp.QuoteMeta(filepath.Base(path)+":"+fmt.Sprint(n)) + `(\D|$)`)
				found := false
				for _, l := range lines {
					if !pos.MatchString(l) {
						continue
					}
					for _, w := range e.words {
						if strings.Contains(l, w) {
							found = true
						}
					}
				}
				if !found {
					t.Errorf("no stderr line has %s:%d and one of %q (the error for %q)\n--- stderr ---\n%s",
						filepath.Base(path), n, e.words, e.line, stderr)
				}
			}
		})
	}
}
