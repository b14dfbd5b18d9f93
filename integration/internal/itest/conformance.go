//go:build unix

package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The official conformance CLI, run with Node (20 needs the globSync shim in
// conformance/globsync-shim.mjs), for the conformance parity test and the
// OAuth client scenarios.

// ConformanceEntry is the conformance CLI (bin `conformance`).
func ConformanceEntry() string {
	return NodeModule("@modelcontextprotocol/conformance/dist/index.js")
}

// GlobSyncShim is the preload that lets the CLI run on Node 20 (see the
// comment at the top of conformance/globsync-shim.mjs).
func GlobSyncShim() string {
	return filepath.Join(Harness.Dir, "conformance", "globsync-shim.mjs")
}

// RequireConformance is RequireNode plus the conformance package, the
// `glob` package its Node 20 shim needs, and the Go toolchain that builds the
// upstream conformance servers. Under CI=true a missing piece fails the test.
func RequireConformance(t testing.TB) {
	t.Helper()
	RequireNode(t)
	missing := func(msg string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the conformance suite cannot run: %s", msg)
		}
		t.Skipf("skipping: %s", msg)
	}
	for _, p := range []string{ConformanceEntry(), NodeModule("glob/package.json"), GlobSyncShim()} {
		if _, err := os.Stat(p); err != nil {
			missing(fmt.Sprintf("%s is missing: run `npm ci` in %s (the Makefile does it)", p, Harness.Dir))
		}
	}
	if _, err := exec.LookPath("go"); err != nil {
		missing("the go command is not on PATH: it builds the upstream conformance servers")
	}
}

// ConformanceCheck is one entry of a scenario's checks.json.
type ConformanceCheck struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	Status       string          `json:"status"` // SUCCESS, FAILURE, WARNING, INFO, …
	ErrorMessage string          `json:"errorMessage"`
	Details      json.RawMessage `json:"details"`
}

// ConformanceCmd returns `node --import <shim> <cli> args...` in its own
// process group, killed with the group when ctx ends.
func ConformanceCmd(ctx context.Context, args ...string) *exec.Cmd {
	shim := (&url.URL{Scheme: "file", Path: GlobSyncShim()}).String()
	cmd := exec.CommandContext(ctx, Harness.Node, append([]string{"--import", shim, ConformanceEntry()}, args...)...)
	cmd.Dir = Harness.Dir
	cmd.Env = EnvWithout(os.Environ(), "NODE_OPTIONS")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// RunConformanceQuiet runs the CLI with args, bounded by timeout, and returns
// its combined output.
func RunConformanceQuiet(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := ConformanceCmd(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("did not finish within %v", timeout)
	}
	return out.String(), err
}

// Tail returns the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
