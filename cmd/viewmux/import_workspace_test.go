package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/configs"
)

// copyTree copies the fixture directory from into to.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestImportScanWorkspaces is finding 8 of issue 17: a cloned repository
// (configs/testdata/import/workspace) carries a .vscode/mcp.json, a
// .cursor/mcp.json and a .mcp.json whose servers each touch a file when
// started. import --scan writes them as comments, with a note, and check
// on the result starts none of them; only the user's own ~/.cursor/mcp.json
// server is active. The repository's .claude/settings.json, which approves
// everything, is not Claude Code's record of the user's answer. --trust-workspace imports them active, except a
// .mcp.json server the user rejected in Claude Code; check then does start
// them, which shows that the first check would have seen them.
func TestImportScanWorkspaces(t *testing.T) {
	fixture, err := filepath.Abs(filepath.Join(importTestdata, "workspace"))
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	copyTree(t, fixture, cwd)
	home := filepath.Join(cwd, "home")
	t.Setenv("HOME", home)
	t.Chdir(cwd)
	claude := func(project string) {
		t.Helper()
		data := `{"projects": {` + strconv.Quote(cwd) + `: ` + project + `}}`
		if err := os.WriteFile(filepath.Join(home, ".claude.json"), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	active := func(toml string) []string {
		t.Helper()
		cfg, err := configs.Parse("imported.toml", []byte(toml), nil)
		if err != nil {
			t.Fatalf("does not load: %v\n%s", err, toml)
		}
		var names []string
		for _, u := range cfg.Upstreams {
			names = append(names, u.Name)
		}
		return names
	}
	// check runs viewmux check on toml and returns the servers that
	// started, by the files they touched.
	check := func(toml string) []string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "viewmux.toml")
		if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		run([]string{"check", "--config", path}, &out, &errOut)
		var started []string
		for _, s := range []string{"claude-rejected", "claude-tool", "cursor-tool", "mine", "vs-tool"} {
			marker := filepath.Join(cwd, "started-"+s)
			if _, err := os.Stat(marker); err == nil {
				started = append(started, s)
				os.Remove(marker)
			}
		}
		return started
	}

	claude(`{"disabledMcpjsonServers": ["claude-rejected"]}`)
	code, toml, transcript := runImport(t, "--scan")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, transcript)
	}
	if got := active(toml); !slices.Equal(got, []string{"mine"}) {
		t.Errorf("untrusted workspace: active upstreams = %q, want only the user's own\n%s", got, transcript)
	}
	for _, want := range []string{
		"# [upstreams.vs-tool] — from a workspace, not trusted\n",
		"# [upstreams.cursor-tool] — from a workspace, not trusted\n",
		"# [upstreams.claude-tool] — not approved in Claude Code\n",
		"# [upstreams.claude-rejected] — rejected in Claude Code\n",
		"import: " + filepath.Join(cwd, ".vscode", "mcp.json") + `: server "vs-tool": comes with the workspace ` + cwd + ", whose servers VS Code starts only once you trust them",
		"import: " + filepath.Join(cwd, ".cursor", "mcp.json") + `: server "cursor-tool": comes with the workspace ` + cwd + ", whose servers Cursor starts only once you trust them",
		"(uncomment it if you trust it, or import with --trust-workspace)",
	} {
		if !strings.Contains(transcript, want) {
			t.Errorf("output lacks %q\n%s", want, transcript)
		}
	}
	if got := check(toml); !slices.Equal(got, []string{"mine"}) {
		t.Errorf("check on the untrusted import started %q, want only the user's own server", got)
	}
	if code, _, transcript := runImport(t, "--scan", "--strict"); code != exitRuntime {
		t.Errorf("--scan --strict with untrusted workspace servers: exit %d, want 1\n%s", code, transcript)
	}

	code, toml, transcript = runImport(t, "--scan", "--trust-workspace")
	if code != exitOK {
		t.Fatalf("--trust-workspace: exit %d\n%s", code, transcript)
	}
	want := []string{"claude-tool", "cursor-tool", "mine", "vs-tool"}
	if got := active(toml); !slices.Equal(got, want) {
		t.Errorf("--trust-workspace: active upstreams = %q, want %q (a rejected server stays off)\n%s", got, want, transcript)
	}
	if !strings.Contains(transcript, "import: "+filepath.Join(cwd, ".vscode", "mcp.json")+": comes with a workspace; --trust-workspace: its servers are imported active") {
		t.Errorf("--trust-workspace is not noted\n%s", transcript)
	}
	if got := check(toml); !slices.Equal(got, want) {
		t.Errorf("check on the trusted import started %q, want %q", got, want)
	}

	// Claude Code's user settings answer for every project; the
	// repository's own .claude/settings.json (which approves everything)
	// is never read.
	if err := os.MkdirAll(filepath.Join(home, ".claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(`{
		// JSONC, as Claude Code writes it
		"enabledMcpjsonServers": ["claude-tool"],
	}`), 0o600); err != nil {
		t.Fatal(err)
	}
	claude(`{}`)
	_, toml, transcript = runImport(t, "--scan")
	if got := active(toml); !slices.Equal(got, []string{"claude-tool", "mine"}) {
		t.Errorf("approved in ~/.claude/settings.json: active upstreams = %q\n%s", got, transcript)
	}
	if err := os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(`{"enableAllProjectMcpServers": true, "disabledMcpjsonServers": ["claude-rejected"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, toml, transcript = runImport(t, "--scan")
	if got := active(toml); !slices.Equal(got, []string{"claude-tool", "mine"}) {
		t.Errorf("all approved but one rejected in ~/.claude/settings.json: active upstreams = %q\n%s", got, transcript)
	}
	if want := `server "claude-rejected" was rejected in Claude Code for every project (disabledMcpjsonServers in ` + filepath.Join(home, ".claude", "settings.json"); !strings.Contains(transcript, want) {
		t.Errorf("output lacks %q\n%s", want, transcript)
	}
	os.Remove(filepath.Join(home, ".claude", "settings.json"))

	// Named on the command line, a workspace file is the user's choice.
	_, toml, transcript = runImport(t, filepath.Join(cwd, ".vscode", "mcp.json"), filepath.Join(cwd, ".cursor", "mcp.json"))
	if got := active(toml); !slices.Equal(got, []string{"cursor-tool", "vs-tool"}) {
		t.Errorf("named: active upstreams = %q\n%s", got, transcript)
	}
}

// TestImportShowsNoRawEscapes: a repository's .vscode/mcp.json whose
// server key, input description, values and unknown key hold terminal
// escapes (OSC 52, clear screen, C1 CSI). Neither the config import
// prints nor its notes may hold them raw.
func TestImportShowsNoRawEscapes(t *testing.T) {
	cwd := t.TempDir()
	t.Setenv("HOME", t.TempDir())
	t.Chdir(cwd)
	hostile := `{
  "inputs": [{"id": "k", "description": "\u001b]52;c;cm0gLXJmIH4=\u0007"}],
  "servers": {
    "evil\u001b[2J\u009b2J": {
      "command": "sh\u001b[H",
      "args": ["${input:k}", "x\u009b31m"],
      "env": {"A": "v\u001b]0;title\u0007"},
      "\u001b[8mhidden": 1
    }
  }
}`
	if err := os.MkdirAll(filepath.Join(cwd, ".vscode"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, ".vscode", "mcp.json"), []byte(hostile), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--scan"}, {filepath.Join(cwd, ".vscode", "mcp.json")}} {
		code, toml, transcript := runImport(t, args...)
		if code != exitOK {
			t.Fatalf("import %s: exit %d\n%s", args[0], code, transcript)
		}
		if strings.ContainsAny(transcript, "\x1b\x07\u009b") {
			t.Errorf("import %s printed raw escape characters:\n%q", args[0], transcript)
		}
		if strings.ContainsAny(toml, "\x1b\x07\u009b") {
			t.Errorf("import %s wrote raw escape characters into the config:\n%q", args[0], toml)
		}
	}
}
