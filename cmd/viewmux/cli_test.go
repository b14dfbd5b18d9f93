package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name.golden, or rewrites the file
// with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update to accept it)\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// runCLI runs viewmux with args and returns the exit code and a transcript
// of both streams, with the Go version and platform made neutral.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	neutral := strings.NewReplacer(runtime.Version(), "GOVERSION", runtime.GOOS+"/"+runtime.GOARCH, "GOOS/GOARCH")
	transcript := fmt.Sprintf("$ viewmux %s\nexit %d\n--- stdout\n%s--- stderr\n%s",
		strings.Join(args, " "), code, neutral.Replace(stdout.String()), neutral.Replace(stderr.String()))
	return code, transcript
}

// TestCLIGolden pins the text of help, version and usage errors.
func TestCLIGolden(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"help", []string{"--help"}, exitOK},
		{"help_short", []string{"-h"}, exitOK},
		{"help_command", []string{"help"}, exitOK},
		{"help_serve", []string{"help", "serve"}, exitOK},
		{"serve_help", []string{"serve", "--help"}, exitOK},
		{"check_help", []string{"check", "-h"}, exitOK},
		{"tools_help", []string{"tools", "--help"}, exitOK},
		{"import_help", []string{"import", "--help"}, exitOK},
		{"init_help", []string{"init", "--help"}, exitOK},
		{"version_help", []string{"version", "--help"}, exitOK},
		{"version", []string{"version"}, exitOK},
		{"version_flag", []string{"--version"}, exitOK},
		{"unknown_command", []string{"bogus"}, exitUsage},
		{"unknown_command_typo", []string{"chekc"}, exitUsage},
		{"unknown_flag_bare", []string{"--verbose"}, exitUsage},
		{"unknown_flag_serve", []string{"serve", "--verbose"}, exitUsage},
		{"unknown_flag_check", []string{"check", "--version"}, exitUsage},
		{"flag_without_value", []string{"check", "--config"}, exitUsage},
		{"bad_log_format", []string{"serve", "--log-format", "xml"}, exitUsage},
		{"bad_log_level", []string{"check", "--log-level", "loud"}, exitUsage},
		{"stray_argument", []string{"tools", "extra"}, exitUsage},
		{"help_unknown", []string{"help", "nope"}, exitUsage},
		{"stdio_and_listen", []string{"serve", "--stdio", "--listen", "127.0.0.1:0"}, exitUsage},
		{"import_no_file", []string{"import"}, exitUsage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCLI(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, out)
			}
			golden(t, tc.name, out)
		})
	}
}

// TestHelpListsEveryCommand: top-level help names every command that is
// not hidden, and each has its own help.
func TestHelpListsEveryCommand(t *testing.T) {
	_, top := runCLI(t, "--help")
	for _, c := range commands() {
		listed := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.name) + ` +\S`).MatchString(top)
		if listed == c.hidden {
			t.Errorf("command %q: listed in --help = %v, hidden = %v", c.name, listed, c.hidden)
		}
		code, out := runCLI(t, c.name, "--help")
		if code != exitOK || !strings.Contains(out, "Usage: ") {
			t.Errorf("viewmux %s --help: exit %d\n%s", c.name, code, out)
		}
	}
}

// TestVersionFromBuildInfo covers the ways viewmux gets built.
func TestVersionFromBuildInfo(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	platform := settings("GOOS", "linux", "GOARCH", "arm64")
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		link string
	}{
		{"go install at a tag", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.0"}, Settings: platform}, true, ""},
		{"go install at a commit", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v0.0.0-20261122183000-c54cf60abcde"}, Settings: platform}, true, ""},
		{"go build in a clean checkout", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.1-0.20261122183000-c54cf60abcde"},
			Settings: append(settings("vcs.revision", "c54cf60abcdef0123456789abcdef0123456789a", "vcs.time", "2026-11-22T18:30:00Z", "vcs.modified", "false"), platform...)}, true, ""},
		{"go build with uncommitted changes", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v0.0.0-20261122183000-c54cf60abcde+dirty"},
			Settings: append(settings("vcs.revision", "c54cf60abcdef0123456789abcdef0123456789a", "vcs.time", "2026-11-22T18:30:00Z", "vcs.modified", "true"), platform...)}, true, ""},
		{"go run or go build without VCS", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: platform}, true, ""},
		{"version set at link time", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"},
			Settings: append(settings("vcs.revision", "c54cf60abcdef0123456789abcdef0123456789a"), platform...)}, true, "v2.0.0-rc1"},
	}
	var all strings.Builder
	for _, tc := range cases {
		fmt.Fprintf(&all, "== %s\n%s", tc.name, readBuildInfo(tc.bi, tc.ok, tc.link))
	}
	golden(t, "version_buildinfo", all.String())
}

// TestVersionOfARealBuild builds viewmux from this checkout with VCS
// stamping and checks that `--version` names the checked-out commit.
func TestVersionOfARealBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds viewmux")
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			t.Skipf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	// Go reads VCS data only from a .git directory; a git worktree's .git
	// is a file, and go build there records none. make build's link-time
	// stamp covers that case (TestMakeBuildStampsVersion).
	if top := git("rev-parse", "--show-toplevel"); top != "" {
		if fi, err := os.Stat(filepath.Join(top, ".git")); err == nil && !fi.IsDir() {
			t.Skip("a git worktree: go build records no VCS data here")
		}
	}
	before := git("rev-parse", "HEAD")
	bin := filepath.Join(t.TempDir(), "viewmux")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	after := git("rev-parse", "HEAD") // others may commit meanwhile
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("viewmux --version: %v", err)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "viewmux v") {
		t.Errorf("first line %q: want the module version stamped from VCS", lines[0])
	}
	if !strings.HasPrefix(lines[1], "commit "+before) && !strings.HasPrefix(lines[1], "commit "+after) {
		t.Errorf("second line %q: want commit %s", lines[1], after)
	}
	if !strings.HasPrefix(lines[2], runtime.Version()+" ") {
		t.Errorf("third line %q: want the Go version", lines[2])
	}
}

func TestSummary(t *testing.T) {
	cases := []struct{ desc, want string }{
		{"Reads a file.", "Reads a file."},
		{"\nReads a file.\n\nMore detail.", "Reads a file."},
		{"\n   \n\t  Indented first line  \nsecond", "Indented first line"},
		{"", ""},
		{strings.Repeat("é", 80), strings.Repeat("é", 69) + "..."},
	}
	for _, tc := range cases {
		if got := summary(tc.desc, maxDescription); got != tc.want {
			t.Errorf("summary(%q) = %q, want %q", tc.desc, got, tc.want)
		}
	}
}
