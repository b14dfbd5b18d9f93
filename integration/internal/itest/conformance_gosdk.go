//go:build unix

package itest

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

// GoSDKServerBinary builds the go-sdk everything-server at goSDKVersion once
// per test run and returns its path.
func GoSDKServerBinary(t testing.TB) string {
	t.Helper()
	goSDKServer.once.Do(func() {
		gobin := filepath.Join(Harness.Tmp, "go-sdk-bin")
		pkg := goSDKModule + "/conformance/everything-server@" + goSDKVersion
		ctx, cancel := context.WithTimeout(context.Background(), goSDKBuildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "install", pkg)
		// Outside our module and any workspace, and without GOFLAGS such as
		// -mod=vendor that `go install pkg@version` rejects.
		cmd.Dir = Harness.Tmp
		cmd.Env = append(EnvWithout(os.Environ(), "GOBIN", "GOFLAGS", "GOWORK"), "GOBIN="+gobin, "GOWORK=off")
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

// StartGoSDKServer starts the go-sdk everything-server over streamable HTTP
// on a free loopback port (`-http 127.0.0.1:PORT`; it serves MCP on every
// path) in stateless or stateful mode (`-stateless=true|false`) and returns
// its MCP endpoint once the port accepts connections.
func StartGoSDKServer(t *testing.T, label string, stateless bool) string {
	t.Helper()
	bin := GoSDKServerBinary(t)
	addr := StartLoopbackServer(t, "go-sdk everything-server "+label,
		func(addr string) *exec.Cmd {
			return exec.Command(bin, "-http", addr, "-stateless="+strconv.FormatBool(stateless))
		},
		func(addr string, exited <-chan struct{}) error {
			return WaitAccepting(addr, exited, 20*time.Second)
		})
	return "http://" + addr + "/mcp"
}
