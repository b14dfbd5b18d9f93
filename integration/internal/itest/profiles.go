//go:build unix

package itest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// End-to-end tests of the filter pipeline and profiles:
// the real viewmux binary mounting the real reference servers and the demo
// server, driven by the official TypeScript SDK client and by raw HTTP.

// profilesTOML is the profiles part of ProfilesConfig.
const profilesTOML = `
[profiles.readonly]
read_only = true

[profiles.readonly2]           # same effective rules as readonly
read_only = true

[profiles.fsonly]
toolsets = ["fs"]

[profiles.fsread]
extends = "fsonly"
read_only = true

[profiles.ci]
tools = ["demo__echo", "demo__write_note"]
[[profiles.ci.call_rules]]
tool = "demo__write_note"
args = { title = ["ci-*"] }
other_args = true  # text is free; the recording tests cover the default (refused)
`

func filesystemEntry() string {
	return NodeModule("@modelcontextprotocol/server-filesystem/dist/index.js")
}

// ProfilesConfig mounts server-everything (every), server-memory (memory,
// storing into a temporary file), server-filesystem (fs, rooted at fsRoot)
// and the demo server (demo), all over stdio and all required, so /readyz
// means every catalog is in; then the profiles of profilesTOML, then extra.
// There is no [filter] and no "default" profile, so a request naming no
// profile sees the whole catalog.
func ProfilesConfig(t *testing.T, fsRoot, extra string) string {
	t.Helper()
	memFile := filepath.Join(t.TempDir(), "memory.jsonl")
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.every]
command = %[1]s
args = %[2]s
required = true

[upstreams.memory]
command = %[1]s
args = %[3]s
env = { MEMORY_FILE_PATH = %[4]s }
required = true

[upstreams.fs]
command = %[1]s
args = %[5]s
required = true

[upstreams.demo]
command = %[6]s
args = ["demo-server", "--name", "demo"]
required = true
%[7]s
%[8]s
`, TomlString(Harness.Node), TomlArray(EverythingEntry(), "stdio"), TomlArray(MemoryEntry()),
		TomlString(memFile), TomlArray(filesystemEntry(), fsRoot), TomlString(MuxBinary(t)),
		profilesTOML, extra)
}

// RealTempDir is t.TempDir() with symlinks resolved, so that paths given
// to server-filesystem are the ones it compares against.
func RealTempDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// RequireFilesystemServer skips or fails like RequireNode when
// server-filesystem is not installed (findNode does not check it).
func RequireFilesystemServer(t *testing.T) {
	t.Helper()
	RequireNode(t)
	if _, err := os.Stat(filesystemEntry()); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and server-filesystem is missing: %v", err)
		}
		t.Skipf("skipping: server-filesystem is missing (run `npm ci` in %s): %v", Harness.Dir, err)
	}
}

// CheckNames fails the test when got (in any order) is not exactly want.
func CheckNames(t testing.TB, what string, got, want []string) {
	t.Helper()
	g := slices.Sorted(slices.Values(got))
	w := slices.Sorted(slices.Values(want))
	if slices.Equal(g, w) {
		return
	}
	var missing, extra []string
	for _, x := range w {
		if !slices.Contains(g, x) {
			missing = append(missing, x)
		}
	}
	for _, x := range g {
		if !slices.Contains(w, x) {
			extra = append(extra, x)
		}
	}
	t.Errorf("%s: got %d tools, want %d\n  missing:    %q\n  unexpected: %q\n  got:  %q\n  want: %q",
		what, len(g), len(w), missing, extra, g, w)
}

// WantToolNotFound fails the test unless e is exactly the JSON-RPC error
// viewmux answers for a hidden or unknown tool: -32601 "Tool not found:
// <name>" without data.
func WantToolNotFound(t testing.TB, e *DriveError, name string) {
	t.Helper()
	want := "Tool not found: " + name
	if e == nil || e.Kind != "jsonrpc" || e.Code == nil || *e.Code != -32601 || e.Message != want || len(e.Data) != 0 {
		data := ""
		if e != nil && len(e.Data) > 0 {
			data = " data " + string(e.Data)
		}
		t.Errorf("call %q: got %v%s, want jsonrpc error -32601 %q without data", name, e, data, want)
	}
}

// WantArgsNotAllowed fails the test unless e is the call_rules refusal.
func WantArgsNotAllowed(t testing.TB, e *DriveError, tool string, args any) {
	t.Helper()
	want := "Arguments not allowed for " + tool
	if e == nil || e.Kind != "jsonrpc" || e.Code == nil || *e.Code != -32602 || e.Message != want {
		t.Errorf("call %s %v: got %v, want jsonrpc error -32602 %q", tool, args, e, want)
	}
}

// MentionsName reports whether text contains name as a whole word (profile
// names may use A-Z a-z 0-9 _ . -).
func MentionsName(text, name string) bool {
	re := regexp.MustCompile(`(?:^|[^A-Za-z0-9_.-])` + regexp.QuoteMeta(name) + `(?:$|[^A-Za-z0-9_.-])`)
	return re.MatchString(text)
}
