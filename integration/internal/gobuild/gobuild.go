// Package gobuild builds packages of the viewmux module, for the programs
// under integration/ that measure its binaries (load, memload, hopprobe).
package gobuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoModule is returned when the current directory is outside the
// viewmux module.
var ErrNoModule = errors.New("not inside the viewmux module: run from the repository")

// Root returns the directory of the go.mod the current directory belongs
// to.
func Root(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", ErrNoModule
	}
	return filepath.Dir(gomod), nil
}

// Build builds the package pkg of the module at root (a path such as
// "./cmd/viewmux") into the file out, and returns out.
func Build(ctx context.Context, root, pkg, out string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// BuildHere is Build in the module the current directory belongs to.
func BuildHere(ctx context.Context, pkg, out string) (string, error) {
	root, err := Root(ctx)
	if err != nil {
		return "", err
	}
	return Build(ctx, root, pkg, out)
}
