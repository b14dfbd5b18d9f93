// Package layout holds tests of the repository's package structure.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMCPGoServerAndClientStayOffThePath: viewmux speaks MCP on the wire
// itself at both ends, so no package of it imports mcp-go's server or
// client packages. Only the built-in demo server (internal/demo), which is
// an upstream, and the test peers under integration/ (upstreams and
// clients viewmux is measured against) may.
func TestMCPGoServerAndClientStayOffThePath(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/viewmux/viewmux/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/viewmux/viewmux/"
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg := fields[0]
		if strings.HasPrefix(pkg, mod+"internal/demo") || strings.HasPrefix(pkg, mod+"integration") {
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, "github.com/mark3labs/mcp-go/server") || strings.HasPrefix(imp, "github.com/mark3labs/mcp-go/client") {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
	if checked < 8 {
		t.Fatalf("only %d packages checked; go list said:\n%s", checked, out)
	}
}
