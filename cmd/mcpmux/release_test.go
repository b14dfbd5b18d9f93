package main

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// TestMakeBuildStampsVersion runs `make build` and checks that the binary
// reports the version and commit git describes, as the Makefile promises.
func TestMakeBuildStampsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mcpmux")
	}
	mk := requireTool(t, "make")
	git := requireTool(t, "git")
	bin := filepath.Join(t.TempDir(), "mcpmux")
	describe := func() (string, string) {
		d, err := exec.Command(git, "-C", repoRoot, "describe", "--tags", "--always", "--dirty").Output()
		if err != nil {
			t.Skipf("git describe: %v", err)
		}
		c, _ := exec.Command(git, "-C", repoRoot, "rev-parse", "HEAD").Output()
		return strings.TrimSpace(string(d)), strings.TrimSpace(string(c))
	}
	wantVersion, wantCommit := describe()
	cmd := exec.Command(mk, "-s", "-C", repoRoot, "build", "BIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	if v, c := describe(); v != wantVersion || c != wantCommit {
		t.Skip("the tree changed during the build") // another helper committed
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("mcpmux version: %v", err)
	}
	lines := strings.Split(string(out), "\n")
	if lines[0] != "mcpmux "+wantVersion {
		t.Errorf("first line %q, want %q", lines[0], "mcpmux "+wantVersion)
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "commit "+wantCommit) {
		t.Errorf("second line %q, want commit %s", lines[1], wantCommit)
	}
	if isStatic(t, bin) != "" {
		t.Errorf("make build wrote a dynamically linked binary: %s", isStatic(t, bin))
	}
}

// isStatic returns "" when the ELF binary at path has no program
// interpreter (it is statically linked), else the interpreter.
func isStatic(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			p.ReadAt(b, 0)
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}
