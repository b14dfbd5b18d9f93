package main

import (
	"debug/elf"
	"debug/macho"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// TestMakeBuildStampsVersion runs `make build` and checks that the binary
// reports the version and commit git describes, as the Makefile promises.
func TestMakeBuildStampsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds viewmux")
	}
	mk := requireTool(t, "make")
	git := requireTool(t, "git")
	bin := filepath.Join(t.TempDir(), "viewmux")
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
		t.Fatalf("viewmux version: %v", err)
	}
	lines := strings.Split(string(out), "\n")
	if lines[0] != "viewmux "+wantVersion {
		t.Errorf("first line %q, want %q", lines[0], "viewmux "+wantVersion)
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

// goreleaser is what TestReleaseTargets reads from .goreleaser.yaml: the
// lists under goos and goarch, and the one ldflags line, env and flags.
type goreleaser struct {
	goos, goarch, env, flags []string
	ldflags                  string
}

// readGoreleaser reads the keys TestReleaseTargets needs from the
// project's .goreleaser.yaml. It knows only that file's own layout: a
// "key:" line followed by "- item" lines.
func readGoreleaser(t *testing.T) goreleaser {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var g goreleaser
	var ldflags []string
	var cur *[]string
	keyRE := regexp.MustCompile(`^\s*([a-z_]+):\s*$`)
	itemRE := regexp.MustCompile(`^\s*- (.+)$`)
	for _, line := range strings.Split(string(data), "\n") {
		if m := keyRE.FindStringSubmatch(line); m != nil {
			switch m[1] {
			case "goos":
				cur = &g.goos
			case "goarch":
				cur = &g.goarch
			case "env":
				cur = &g.env
			case "flags":
				cur = &g.flags
			case "ldflags":
				cur = &ldflags
			default:
				cur = nil
			}
			continue
		}
		if m := itemRE.FindStringSubmatch(line); m != nil && cur != nil {
			*cur = append(*cur, strings.TrimSpace(m[1]))
			continue
		}
		cur = nil
	}
	g.ldflags = strings.Join(ldflags, " ")
	return g
}

// TestReleaseTargets builds every GOOS/GOARCH that .goreleaser.yaml lists,
// with its env, flags and ldflags (templates filled in), and checks each
// binary's format and architecture: the release config cannot name a
// target that does not build.
func TestReleaseTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds viewmux")
	}
	g := readGoreleaser(t)
	wantOS, wantArch := []string{"darwin", "linux"}, []string{"amd64", "arm64"}
	if !sameSet(g.goos, wantOS) || !sameSet(g.goarch, wantArch) {
		t.Fatalf(".goreleaser.yaml targets %v × %v, want %v × %v", g.goos, g.goarch, wantOS, wantArch)
	}
	if !strings.Contains(g.ldflags, "-X main.linkVersion={{.Version}}") || !strings.Contains(g.ldflags, "-X main.linkCommit={{.FullCommit}}") {
		t.Fatalf(".goreleaser.yaml ldflags %q do not stamp the version and commit as make build does", g.ldflags)
	}
	ldflags := strings.NewReplacer("{{.Version}}", "v0.0.0-release-test", "{{.FullCommit}}", "0123456789abcdef").Replace(g.ldflags)
	for _, goos := range g.goos {
		for _, goarch := range g.goarch {
			t.Run(goos+"_"+goarch, func(t *testing.T) {
				bin := filepath.Join(t.TempDir(), "viewmux")
				args := append([]string{"build"}, g.flags...)
				args = append(args, "-ldflags", ldflags, "-o", bin, ".")
				cmd := exec.Command("go", args...)
				cmd.Env = append(os.Environ(), append(g.env, "GOOS="+goos, "GOARCH="+goarch)...)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("go %v: %v\n%s", args, err, out)
				}
				checkBinary(t, bin, goos, goarch)
			})
		}
	}
}

// TestCrossBuildEveryPackage builds every package of the module, tests
// and programs under integration/ included, for the non-Linux systems a
// contributor may work on, so that Linux-only code (Pdeathsig, /proc) stays
// behind its build constraints. Windows is not among them: stdio children
// are ended by process-group signals, which it lacks.
func TestCrossBuildEveryPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds the module")
	}
	// One architecture per operating system: the module has no file of
	// its own that depends on the architecture (archSpecific checks), so
	// darwin/amd64 would vet what darwin/arm64 does. -trimpath keeps the
	// compiled packages' cache keys free of the checkout's path, so that
	// a fresh clone reuses what an earlier one compiled.
	if files := archSpecific(t); len(files) > 0 {
		t.Fatalf("files that depend on the architecture: %v; vet each of their architectures here too", files)
	}
	for _, target := range []string{"darwin/arm64", "freebsd/amd64"} {
		t.Run(strings.ReplaceAll(target, "/", "_"), func(t *testing.T) {
			goos, goarch, _ := strings.Cut(target, "/")
			cmd := exec.Command("go", "vet", "-trimpath", "./...")
			cmd.Dir = filepath.Join("..", "..")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("GOOS=%s GOARCH=%s go vet ./...: %v\n%s", goos, goarch, err, out)
			}
		})
	}
}

// archSpecific returns the module's Go files whose name or build
// constraint names an architecture.
func archSpecific(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", repoRoot, "ls-files", "*.go").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	archs := []string{"386", "amd64", "arm", "arm64", "loong64", "mips", "mips64", "mips64le", "mipsle", "ppc64", "ppc64le", "riscv64", "s390x", "wasm"}
	var found []string
	for _, f := range strings.Fields(string(out)) {
		base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f), ".go"), "_test")
		for _, a := range archs {
			if strings.HasSuffix(base, "_"+a) {
				found = append(found, f)
			}
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		header, _, _ := strings.Cut(string(b), "\npackage ")
		for _, l := range strings.Split(header, "\n") {
			expr, ok := strings.CutPrefix(l, "//go:build ")
			if !ok {
				continue
			}
			for _, w := range strings.FieldsFunc(expr, func(r rune) bool { return strings.ContainsRune("!&|() ", r) }) {
				if slices.Contains(archs, w) {
					found = append(found, f)
				}
			}
		}
	}
	return found
}

func sameSet(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			return false
		}
	}
	return true
}

// checkBinary checks that bin is an executable for goos/goarch.
func checkBinary(t *testing.T, bin, goos, goarch string) {
	t.Helper()
	switch goos {
	case "linux":
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("not ELF: %v", err)
		}
		defer f.Close()
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if f.Machine != want {
			t.Errorf("machine %v, want %v", f.Machine, want)
		}
		if interp := isStatic(t, bin); interp != "" {
			t.Errorf("dynamically linked (%s); CGO_ENABLED=0 should make it static", interp)
		}
	case "darwin":
		f, err := macho.Open(bin)
		if err != nil {
			t.Fatalf("not Mach-O: %v", err)
		}
		defer f.Close()
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if f.Cpu != want {
			t.Errorf("cpu %v, want %v", f.Cpu, want)
		}
	default:
		t.Fatalf("no check for GOOS %s", goos)
	}
}
