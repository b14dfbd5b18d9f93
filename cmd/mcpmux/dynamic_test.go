package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestCheckReportsDynamicProfiles runs `mcpmux check` and `mcpmux tools`
// over a real demo server: a dynamic profile's line gives its initial
// tools/list (mcpmux's three tools, the demo's tools outside its one
// toolset) against the full one.
func TestCheckReportsDynamicProfiles(t *testing.T) {
	path := writeConfig(t, demoUpstream(t, "demo", "demo-server", "--name", "demo")+`
[upstreams.demo.toolsets]
notes = ["*_note", "list_notes"]

[profiles.dyn]
dynamic_toolsets = true

[profiles.static]
`)
	line := regexp.MustCompile(`profile "dyn" is dynamic: initial (\d+) tools ~(\d+) tokens, full (\d+) tools ~(\d+) tokens`)
	for _, args := range [][]string{{"check", "--config", path}, {"tools", "--config", path, "--profile", "dyn"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s%s", args[0], code, stdout.String(), stderr.String())
		}
		m := line.FindStringSubmatch(stdout.String())
		if m == nil || strings.Contains(stdout.String(), `profile "static" is dynamic`) {
			t.Fatalf("%s: no dynamic line for dyn alone:\n%s", args[0], stdout.String())
		}
		n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
		// The demo has 7 tools, 4 of them notes tools. (With so few tools
		// the initial list costs more than the full one: see README.)
		if n(1) != 3+3 || n(3) != 7 || n(2) <= 0 || n(4) <= 0 || n(2) == n(4) {
			t.Fatalf("%s: %q", args[0], m[0])
		}
	}
}
