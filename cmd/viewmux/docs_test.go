package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/configs"
)

// importMark precedes each JSON snippet of docs/clients.md and names the
// file the client keeps it in, which is how import knows its format.
var importMark = regexp.MustCompile(`^<!-- import: (\S+) -->$`)

// TestClientSnippets checks the client snippets of docs/clients.md: each
// is valid JSON, `viewmux import` of it (the CLI's own import, in-process)
// succeeds, and the TOML it writes loads as an viewmux config whose
// upstream reaches what the snippet names. Every JSON block of the page
// must be marked, so none goes untested.
func TestClientSnippets(t *testing.T) {
	pages, _ := filepath.Glob("../../docs/*.md")
	t.Setenv("HOME", t.TempDir()) // .mcp.json reads ~/.claude.json
	n := 0
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		doc := "docs/" + filepath.Base(page)
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```json" {
				continue
			}
			m := []string(nil)
			if i > 0 {
				m = importMark.FindStringSubmatch(strings.TrimSpace(lines[i-1]))
			}
			if m == nil {
				t.Errorf("%s:%d: a JSON snippet without an <!-- import: FILE --> line before it", doc, i+1)
				continue
			}
			var body strings.Builder
			start := i + 1
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				body.WriteString(lines[i] + "\n")
			}
			n++
			t.Run(fmt.Sprintf("%s:%d", filepath.Base(page), start), func(t *testing.T) {
				checkClientSnippet(t, doc, m[1], start, body.String())
			})
		}
	}
	if n < 7 {
		t.Fatalf("found %d client snippets in docs/, want at least 7", n)
	}
}

func checkClientSnippet(t *testing.T, doc, name string, line int, snippet string) {
	var parsed struct {
		MCPServers map[string]map[string]any `json:"mcpServers"`
		Servers    map[string]map[string]any `json:"servers"`
	}
	if err := json.Unmarshal([]byte(snippet), &parsed); err != nil {
		t.Fatalf("%s:%d: not JSON: %v", doc, line, err)
	}
	servers := parsed.MCPServers
	if servers == nil {
		servers = parsed.Servers
	}
	if len(servers) == 0 {
		t.Fatalf("%s:%d: no server in the snippet", doc, line)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(snippet), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := cmdImport([]string{path}, &stdout, &stderr); err != nil {
		t.Fatalf("%s:%d: viewmux import %s: %v\n%s", doc, line, name, err, stderr.String())
	}
	cfg, err := configs.Parse("imported.toml", stdout.Bytes(), func(string) (string, bool) { return "placeholder", true })
	if err != nil {
		t.Fatalf("%s:%d: the imported config does not load: %v\n%s\nstderr:\n%s", doc, line, err, stdout.String(), stderr.String())
	}
	for key, s := range servers {
		u := cfg.Upstream(key)
		if u == nil && key == configs.ReservedPrefix {
			u = cfg.Upstream(key + "-2") // the prefix viewmux is reserved: import renames it
		}
		if u == nil {
			t.Errorf("%s:%d: server %q is not an upstream of the imported config:\n%s", doc, line, key, stdout.String())
			continue
		}
		want, _ := s["url"].(string)
		if want == "" {
			want, _ = s["serverUrl"].(string)
		}
		if want != "" && u.URL != want {
			t.Errorf("%s:%d: server %q imported with url %q, want %q", doc, line, key, u.URL, want)
		}
		if cmd, _ := s["command"].(string); cmd != "" && u.Command != cmd {
			t.Errorf("%s:%d: server %q imported with command %q, want %q", doc, line, key, u.Command, cmd)
		}
	}
}
