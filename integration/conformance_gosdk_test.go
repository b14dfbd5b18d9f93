//go:build unix

package integration

// The official Go SDK's conformance server (conformance/everything-server of
// module github.com/modelcontextprotocol/go-sdk), one of the upstreams of the
// parity test in conformance_test.go. It is a different module than viewmux,
// so it is not in our go.mod: the test builds it with `go install
// module/pkg@version` (module proxy, module cache) into the test's temporary
// directory, outside any module.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

const (
	goSDKModule  = "github.com/modelcontextprotocol/go-sdk"
	goSDKVersion = "v1.8.0"
	// goSDKBuildTimeout bounds `go install`, which may download the module
	// and its dependencies on a cold cache.
	goSDKBuildTimeout = 3 * time.Minute
)

var goSDKServer struct {
	once sync.Once
	bin  string
	err  error
}

// goSDKServerBinary builds the go-sdk everything-server at goSDKVersion once
// per test run and returns its path.
func goSDKServerBinary(t testing.TB) string {
	t.Helper()
	goSDKServer.once.Do(func() {
		gobin := filepath.Join(harness.tmp, "go-sdk-bin")
		pkg := goSDKModule + "/conformance/everything-server@" + goSDKVersion
		ctx, cancel := context.WithTimeout(context.Background(), goSDKBuildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "install", pkg)
		// Outside our module and any workspace, and without GOFLAGS such as
		// -mod=vendor that `go install pkg@version` rejects.
		cmd.Dir = harness.tmp
		cmd.Env = append(envWithout(os.Environ(), "GOBIN", "GOFLAGS", "GOWORK"), "GOBIN="+gobin, "GOWORK=off")
		out, err := cmd.CombinedOutput()
		switch {
		case ctx.Err() != nil:
			goSDKServer.err = fmt.Errorf("go install %s did not finish within %v\n%s", pkg, goSDKBuildTimeout, out)
		case err != nil:
			goSDKServer.err = fmt.Errorf("go install %s: %w\n%s", pkg, err, out)
		default:
			goSDKServer.bin = filepath.Join(gobin, "everything-server")
		}
	})
	if goSDKServer.err != nil {
		t.Fatal(goSDKServer.err)
	}
	return goSDKServer.bin
}

// startGoSDKServer starts the go-sdk everything-server over streamable HTTP
// on a free loopback port (`-http 127.0.0.1:PORT`; it serves MCP on every
// path) in stateless or stateful mode (`-stateless=true|false`) and returns
// its MCP endpoint once the port accepts connections.
func startGoSDKServer(t *testing.T, label string, stateless bool) string {
	t.Helper()
	bin := goSDKServerBinary(t)
	addr := startLoopbackServer(t, "go-sdk everything-server "+label,
		func(addr string) *exec.Cmd {
			return exec.Command(bin, "-http", addr, "-stateless="+strconv.FormatBool(stateless))
		},
		func(addr string, exited <-chan struct{}) error {
			return waitAccepting(addr, exited, 20*time.Second)
		})
	return "http://" + addr + "/mcp"
}

// goSDKFlakyScenarios are the scenarios measured to fail intermittently
// against the go-sdk everything-server directly, which the parity test would
// retry like mcp-go's: none. Measured with conformance 0.2.0-alpha.12 and
// go-sdk v1.8.0, every selection (each spec version, and none), both modes:
// 20 rounds of the CLI back to back plus 6 whole parity runs with
// VIEWMUX_CONFORMANCE_RETRIES=0 (two upstreams at a time on 2 busy cores),
// 26 runs of each of the 166 (selection, scenario) pairs per mode; every
// pair passed every time or failed every time. Re-measure the same way after
// changing a pin before adding a name here.
func goSDKFlakyScenarios() map[string]bool {
	return nil
}
