package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerfiles are the images this repository builds: the static one and the
// one with Node for npm-based stdio upstreams.
var dockerfiles = []string{"Dockerfile", "Dockerfile.node"}

// dockerfileLines returns a Dockerfile's instructions, continuation lines
// joined and comments dropped.
func dockerfileLines(t *testing.T, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	cur := ""
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cur += s
			continue
		}
		if cur += l; strings.TrimSpace(cur) != "" {
			out = append(out, strings.TrimSpace(cur))
		}
		cur = ""
	}
	return out
}

// goBuildLine returns the RUN instruction's command that runs go build.
func goBuildLine(t *testing.T, lines []string) string {
	t.Helper()
	for _, l := range lines {
		if cmd, ok := strings.CutPrefix(l, "RUN "); ok && strings.Contains(cmd, "go build") {
			return cmd
		}
	}
	t.Fatal("no RUN … go build line")
	return ""
}

// TestDockerfiles checks what each image promises: a multi-stage build
// whose final stage runs as a non-root user and has CA certificates, and
// one go build line, the same in both files, with make build's flags.
func TestDockerfiles(t *testing.T) {
	var build string
	for _, name := range dockerfiles {
		lines := dockerfileLines(t, name)
		var froms []int
		for i, l := range lines {
			if strings.HasPrefix(l, "FROM ") {
				froms = append(froms, i)
			}
		}
		if len(froms) < 2 {
			t.Errorf("%s: not a multi-stage build", name)
			continue
		}
		final := lines[froms[len(froms)-1]:]
		user := ""
		certs := false
		for _, l := range final {
			if u, ok := strings.CutPrefix(l, "USER "); ok {
				user = u
			}
			certs = certs || strings.Contains(l, "ca-certificates")
		}
		if uid, _, _ := strings.Cut(user, ":"); !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(uid) {
			t.Errorf("%s: the final stage's USER is %q; want a numeric non-root uid (Kubernetes runAsNonRoot verifies only numbers)", name, user)
		}
		if !certs {
			t.Errorf("%s: the final stage has no CA certificates", name)
		}
		line := goBuildLine(t, lines)
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.linkVersion=${VERSION}", "-X main.linkCommit=${COMMIT}"} {
			if !strings.Contains(line, want) {
				t.Errorf("%s: the go build line lacks %s: %s", name, want, line)
			}
		}
		if build != "" && line != build {
			t.Errorf("%s's go build line differs from Dockerfile's:\n%s\n%s", name, line, build)
		}
		build = line
	}
}

// TestDockerfileBuildsStaticBinary runs the Dockerfile's own go build line
// here (the image itself needs a registry to pull its base images from;
// TestImageBuild builds it where one is reachable) and checks that the
// binary is static, carries the version, and validates the quickstart.
func TestDockerfileBuildsStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds viewmux")
	}
	sh := requireTool(t, "sh")
	out := filepath.Join(t.TempDir(), "viewmux")
	line := goBuildLine(t, dockerfileLines(t, "Dockerfile"))
	line = strings.NewReplacer("${VERSION}", "v0.0.0-image-test", "${COMMIT}", "0123456789abcdef", "/out/viewmux", out).Replace(line)
	cmd := exec.Command(sh, "-c", line)
	cmd.Dir = repoRoot // WORKDIR /src holds the repository
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, msg)
	}
	if interp := isStatic(t, out); interp != "" {
		t.Errorf("the Dockerfile's build line links dynamically (%s): it cannot run FROM scratch", interp)
	}
	if file, err := exec.LookPath("file"); err == nil {
		if desc, _ := exec.Command(file, out).Output(); !strings.Contains(string(desc), "statically linked") {
			t.Errorf("file says: %s", desc)
		}
	}
	version, err := exec.Command(out, "--version").Output()
	if err != nil || !strings.HasPrefix(string(version), "viewmux v0.0.0-image-test\ncommit 0123456789abcdef") {
		t.Errorf("--version: %v\n%s", err, version)
	}
	check := exec.Command(out, "check", "--no-connect")
	check.Dir = t.TempDir() // no ./viewmux.toml: the embedded quickstart
	check.Env = append(os.Environ(), "VIEWMUX_CONFIG=", "XDG_CONFIG_HOME="+check.Dir)
	if msg, err := check.CombinedOutput(); err != nil || !strings.Contains(string(msg), "config embedded quickstart: valid") {
		t.Errorf("check --no-connect: %v\n%s", err, msg)
	}
}

// TestImageBuild builds both images with podman and runs --version and
// check --no-connect in each. It needs a registry to pull the base images
// from and a podman that can run containers, so it runs only with
// VIEWMUX_IMAGE_TEST=1.
func TestImageBuild(t *testing.T) {
	if os.Getenv("VIEWMUX_IMAGE_TEST") != "1" {
		t.Skip("set VIEWMUX_IMAGE_TEST=1 to build the images with podman (needs registry access)")
	}
	podman := requireTool(t, "podman")
	for _, name := range dockerfiles {
		t.Run(name, func(t *testing.T) {
			tag := "localhost/viewmux-image-test:" + strings.ToLower(strings.ReplaceAll(name, ".", "-"))
			build := exec.Command(podman, "build", "--build-arg", "VERSION=v0.0.0-image-test", "-t", tag, "-f", name, ".")
			build.Dir = repoRoot
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("podman build -f %s: %v\n%s", name, err, out)
			}
			defer exec.Command(podman, "rmi", "-f", tag).Run()
			for _, args := range [][]string{{"--version"}, {"check", "--no-connect"}} {
				out, err := exec.Command(podman, append([]string{"run", "--rm", tag}, args...)...).CombinedOutput()
				if err != nil {
					t.Errorf("podman run %s %v: %v\n%s", tag, args, err, out)
				}
			}
		})
	}
}
