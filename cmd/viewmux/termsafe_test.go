package main

import (
	"bytes"
	"strings"
	"testing"
)

// hostileStderrUpstream is a stdio upstream that writes an OSC 52
// clipboard write, a clear screen and a carriage-return overwrite to
// stderr, then fails at start (issue 17, finding 9).
const hostileStderrUpstream = `[upstreams.evil]
command = "sh"
args = ["-c", "printf '\\033]52;c;cm0gLXJmIH4=\\007\\033[2J\\033[Hall good\\rFAKE\\n' >&2; exit 1"]
required = true
`

// TestTerminalEscapesAreShownEscaped runs check and serve against the
// child: neither what they print nor their text log may hold a raw ESC,
// BEL or CR, and the sequence must still be visible, escaped.
func TestTerminalEscapesAreShownEscaped(t *testing.T) {
	path := writeConfig(t, hostileStderrUpstream)
	for _, args := range [][]string{
		{"check", "--config", path, "--log-level", "debug"},
		{"serve", "--config", path, "--listen", "127.0.0.1:0", "--log-level", "debug"},
	} {
		t.Run(args[0], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code == exitOK {
				t.Fatalf("exit 0, want a failure\n--- stdout ---\n%s\n--- stderr ---\n%s", stdout.String(), stderr.String())
			}
			for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
				if strings.ContainsAny(out, "\x1b\x07\r") {
					t.Errorf("%s holds a raw control character:\n%q", name, out)
				}
			}
			all := stdout.String() + stderr.String()
			if !strings.Contains(all, `\x1b]52;c;cm0gLXJmIH4=`) {
				t.Errorf("the child's stderr line is not shown escaped:\n%s", all)
			}
		})
	}
}
