package conformance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// minNode is the oldest Node.js major the docs promise (docs/contributing
// and package.json's engines say "20 or later").
const minNode = 20

// nodeWarnings are the locked packages whose engines leave out minNode, so
// that `npm ci` on that Node prints an EBADENGINE warning for each. Each is
// named in CONTRIBUTING.md with why it does not matter.
var nodeWarnings = []string{
	// Through @modelcontextprotocol/conformance → @octokit/rest: only the
	// suite's GitHub commands (tier-check, triage) load it, and no test runs
	// them. It loads and parses on Node 20 too.
	"node_modules/@octokit/request/node_modules/content-type",
}

// TestNodeEngines keeps the Node version the docs state honest: every
// locked package's engines range admits minNode, except the few listed in
// nodeWarnings (and CONTRIBUTING.md), and those still exist.
func TestNodeEngines(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(itest.Harness.Dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct {
			Engines json.RawMessage `json:"engines"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		t.Fatal(err)
	}
	var excluding []string
	for name, p := range lock.Packages {
		var engines struct {
			Node string `json:"node"`
		}
		if len(p.Engines) == 0 || json.Unmarshal(p.Engines, &engines) != nil || engines.Node == "" {
			continue // no engines, or the old array form: npm does not check it
		}
		if !admits(engines.Node, minNode) {
			excluding = append(excluding, name)
		}
	}
	slices.Sort(excluding)
	if !slices.Equal(excluding, nodeWarnings) {
		t.Errorf("packages whose engines leave out Node %d: %v\nlisted as known (nodeWarnings, CONTRIBUTING.md): %v", minNode, excluding, nodeWarnings)
	}
	contributing, err := os.ReadFile(filepath.Join(itest.Harness.Dir, "..", "CONTRIBUTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range nodeWarnings {
		pkg := name[strings.LastIndex(name, "node_modules/")+len("node_modules/"):]
		if !strings.Contains(string(contributing), pkg) {
			t.Errorf("CONTRIBUTING.md does not name %s, which npm ci warns about on Node %d", pkg, minNode)
		}
	}
}

// admits reports whether an engines range admits Node major. It reads the
// forms package-lock.json holds: "||" alternatives of "N", "N.x", ">=N[.m.p]",
// "^N[.m.p]" and "*"; anything else counts as admitting (the test then
// cannot catch it, and says nothing wrong).
func admits(r string, major int) bool {
	for _, alt := range strings.Split(r, "||") {
		alt = strings.TrimSpace(alt)
		op := ""
		for _, o := range []string{">=", "^", ">", "="} {
			if rest, ok := strings.CutPrefix(alt, o); ok {
				op, alt = o, strings.TrimSpace(rest)
				break
			}
		}
		if alt == "*" || alt == "" {
			return true
		}
		first, _, _ := strings.Cut(strings.Fields(alt)[0], ".")
		n, err := strconv.Atoi(first)
		if err != nil {
			return true
		}
		switch {
		case op == ">=" && major >= n, op == ">" && major > n, (op == "" || op == "=" || op == "^") && major == n:
			return true
		}
	}
	return false
}
