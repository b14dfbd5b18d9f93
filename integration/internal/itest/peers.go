//go:build unix

package itest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// StartEverythingHTTP starts the reference server-everything in
// streamableHttp mode on a free port and returns its MCP endpoint
// (http://127.0.0.1:PORT/mcp) once the port accepts connections. The server
// takes its port only from the PORT environment variable (default 3001) and
// listens on all interfaces. It is stopped at cleanup; its output is logged
// if the test failed.
func StartEverythingHTTP(t *testing.T) string {
	t.Helper()
	RequireNode(t)
	addr := StartLoopbackServer(t, "server-everything (streamableHttp)",
		func(addr string) *exec.Cmd {
			_, port, _ := net.SplitHostPort(addr)
			cmd := exec.Command(Harness.Node, EverythingEntry(), "streamableHttp")
			cmd.Env = append(EnvWithout(os.Environ(), "PORT", MarkerEnv), "PORT="+port)
			return cmd
		},
		func(addr string, exited <-chan struct{}) error { return WaitAccepting(addr, exited, 20*time.Second) })
	return "http://" + addr + "/mcp"
}

// WaitAccepting polls until addr accepts a TCP connection, exited is closed,
// or timeout passes.
func WaitAccepting(addr string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("exited before %s accepted connections", addr)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not accept connections within %v: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TomlString quotes s as a TOML basic string. JSON string escapes (\" \\
// \n \uXXXX …) are all valid TOML escapes.
func TomlString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err) // a string always encodes
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// TomlArray quotes ss as a TOML array of basic strings.
func TomlArray(ss ...string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = TomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// ShQuote quotes s for a POSIX shell command line.
func ShQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
