package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpmux/mcpmux/configs"
)

// importMark precedes each JSON snippet of docs/clients.md and names the
// file the client keeps it in, which is how import knows its format.
var importMark = regexp.MustCompile(`^<!-- import: (\S+) -->$`)

// TestClientSnippets checks the client snippets of docs/clients.md: each
// is valid JSON, `mcpmux import` of it (the CLI's own import, in-process)
// succeeds, and the TOML it writes loads as an mcpmux config whose
// upstream reaches what the snippet names. Every JSON block of the page
// must be marked, so none goes untested.
func TestClientSnippets(t *testing.T) {
	data, err := os.ReadFile("../../docs/clients.md")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", t.TempDir()) // .mcp.json reads ~/.claude.json
	lines := strings.Split(string(data), "\n")
	n := 0
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```json" {
			continue
		}
		m := []string(nil)
		if i > 0 {
			m = importMark.FindStringSubmatch(strings.TrimSpace(lines[i-1]))
		}
		if m == nil {
			t.Errorf("docs/clients.md:%d: a JSON snippet without an <!-- import: FILE --> line before it", i+1)
			continue
		}
		var body strings.Builder
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body.WriteString(lines[i] + "\n")
		}
		n++
		t.Run(filepath.Base(m[1])+"@"+strings.TrimSpace(string(rune('0'+n))), func(t *testing.T) {
			checkClientSnippet(t, m[1], start, body.String())
		})
	}
	if n < 6 {
		t.Fatalf("found %d client snippets in docs/clients.md, want at least 6", n)
	}
}

func checkClientSnippet(t *testing.T, name string, line int, snippet string) {
	var doc struct {
		MCPServers map[string]map[string]any `json:"mcpServers"`
		Servers    map[string]map[string]any `json:"servers"`
	}
	if err := json.Unmarshal([]byte(snippet), &doc); err != nil {
		t.Fatalf("docs/clients.md:%d: not JSON: %v", line, err)
	}
	servers := doc.MCPServers
	if servers == nil {
		servers = doc.Servers
	}
	if len(servers) == 0 {
		t.Fatalf("docs/clients.md:%d: no server in the snippet", line)
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
		t.Fatalf("docs/clients.md:%d: mcpmux import %s: %v\n%s", line, name, err, stderr.String())
	}
	cfg, err := configs.Parse("imported.toml", stdout.Bytes(), func(string) (string, bool) { return "placeholder", true })
	if err != nil {
		t.Fatalf("docs/clients.md:%d: the imported config does not load: %v\n%s\nstderr:\n%s", line, err, stdout.String(), stderr.String())
	}
	for key, s := range servers {
		u := cfg.Upstream(key)
		if u == nil && len(servers) == 1 && len(cfg.Upstreams) == 1 {
			u = cfg.Upstreams[0] // renamed: "mcpmux" is a reserved prefix
		}
		if u == nil {
			t.Errorf("docs/clients.md:%d: server %q is not an upstream of the imported config:\n%s", line, key, stdout.String())
			continue
		}
		want, _ := s["url"].(string)
		if want == "" {
			want, _ = s["serverUrl"].(string)
		}
		if want != "" && u.URL != want {
			t.Errorf("docs/clients.md:%d: server %q imported with url %q, want %q", line, key, u.URL, want)
		}
		if cmd, _ := s["command"].(string); cmd != "" && u.Command != cmd {
			t.Errorf("docs/clients.md:%d: server %q imported with command %q, want %q", line, key, u.Command, cmd)
		}
	}
}
