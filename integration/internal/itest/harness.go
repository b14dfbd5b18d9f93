//go:build unix

// Package itest is the harness of viewmux's end-to-end tests, which live
// in the packages beside it under integration/ (one per subject, so that
// `go test` runs them side by side). The tests run the real viewmux binary
// as a child process and talk to it with real peers — the official MCP
// TypeScript SDK client (client/drive.mjs) and the reference servers from
// npm — over real loopback sockets.
//
// The Node side is installed by `npm ci` in integration/ (the Makefile does
// it). Without Node or node_modules the tests skip, except under CI=true,
// where they fail: CI must never pass by running nothing.
//
// Each test package's TestMain calls RunTests.
package itest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// MarkerEnv is set to a random value in the environment of every viewmux the
// tests start. Its children get it through the inherit_env StartMuxWith adds
// to every stdio upstream (InheritMarker; some tests put it in an upstream's
// env table instead), and their descendants inherit it. So after viewmux
// exits, any process on the machine whose environ still carries the value
// is a leak, however it was reparented or whatever process group it moved
// to.
const MarkerEnv = "VIEWMUX_TEST_MARKER"

// Harness is what TestMain learns once for all tests. It is written before
// m.Run and only read afterwards, except mux*, which muxOnce guards.
var Harness struct {
	Dir     string // absolute path of integration/
	Tmp     string // removed when the tests end
	Node    string // absolute path of node, "" when missing
	missing string // why the Node peers cannot run; "" when they can

	muxOnce     sync.Once
	Mux         string // the built viewmux binary
	muxBuildErr error
}

// RunTests is the body of every test package's TestMain: it finds
// integration/, makes the run's temporary directory, looks for Node, runs
// the tests, and cleans up. A binary re-executed as the fake viewmux of
// fakemux.go does that instead.
func RunTests(m *testing.M) int {
	if mode := os.Getenv(FakeMuxEnv); mode != "" {
		return fakeMux(mode, os.Args[1:]) // re-executed as a stand-in for viewmux
	}
	dir, err := integrationDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	Harness.Dir = dir
	Harness.Tmp, err = os.MkdirTemp("", "viewmux-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(Harness.Tmp)
	Harness.Node, Harness.missing = findNode(dir)
	return m.Run()
}

// integrationDir returns the absolute path of integration/: the nearest
// directory at or above the working directory (go test runs each package in
// its own directory) that holds package-lock.json and client/drive.mjs.
func integrationDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		_, errLock := os.Stat(filepath.Join(d, "package-lock.json"))
		_, errDrive := os.Stat(filepath.Join(d, "client", "drive.mjs"))
		if errLock == nil && errDrive == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no integration/ directory (package-lock.json and client/drive.mjs) at or above %s", wd)
		}
	}
}

// findNode reports the node binary and, when the peers cannot run, why.
func findNode(dir string) (node, missing string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "node is not on PATH (Node 20 or newer is needed for the integration peers)"
	}
	for _, pkg := range []string{"sdk", "server-everything", "server-memory"} {
		p := filepath.Join(dir, "node_modules", "@modelcontextprotocol", pkg, "package.json")
		if _, err := os.Stat(p); err != nil {
			return node, fmt.Sprintf("%s is missing: run `npm ci` in %s (the Makefile does it)", p, dir)
		}
	}
	return node, ""
}

// RequireNode skips the test when Node or integration/node_modules is missing,
// or fails it when CI=true.
func RequireNode(t testing.TB) {
	t.Helper()
	if Harness.missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and the integration peers cannot run: %s", Harness.missing)
	}
	t.Skipf("skipping: %s", Harness.missing)
}

// MuxBinary returns the viewmux binary, building it on first use (once per
// test run), or fails the test with the build output. VIEWMUX_BIN names a
// prebuilt binary instead.
func MuxBinary(t testing.TB) string {
	t.Helper()
	Harness.muxOnce.Do(func() {
		if bin := os.Getenv("VIEWMUX_BIN"); bin != "" {
			Harness.Mux, Harness.muxBuildErr = filepath.Abs(bin)
			return
		}
		Harness.Mux = filepath.Join(Harness.Tmp, "viewmux")
		cmd := exec.Command("go", "build", "-o", Harness.Mux, "../cmd/viewmux")
		cmd.Dir = Harness.Dir
		if out, err := cmd.CombinedOutput(); err != nil {
			Harness.muxBuildErr = fmt.Errorf("go build ../cmd/viewmux: %w\n%s", err, out)
		}
	})
	if Harness.muxBuildErr != nil {
		t.Fatalf("cannot build viewmux: %v", Harness.muxBuildErr)
	}
	return Harness.Mux
}

// fixtures holds the programs Fixture has built in this test run.
var fixtures struct {
	mu    sync.Mutex
	built map[string]*fixture
}

type fixture struct {
	once sync.Once
	bin  string
	err  error
}

// Fixture returns the program pkg (a path relative to integration/, such
// as "./hostile"), building it on first use: once per test run, without
// the race detector, as the peers it stands for would be. A build failure
// fails the test with the compiler's output.
func Fixture(t testing.TB, pkg string) string {
	t.Helper()
	fixtures.mu.Lock()
	if fixtures.built == nil {
		fixtures.built = map[string]*fixture{}
	}
	f := fixtures.built[pkg]
	if f == nil {
		f = &fixture{}
		fixtures.built[pkg] = f
	}
	fixtures.mu.Unlock()
	f.once.Do(func() {
		// Named after the package ("./typedrec/child" is typedrec-child):
		// some tests find the fixture's processes by that name.
		f.bin = filepath.Join(Harness.Tmp, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "-"))
		cmd := exec.Command("go", "build", "-o", f.bin, pkg)
		cmd.Dir = Harness.Dir
		if out, err := cmd.CombinedOutput(); err != nil {
			f.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.bin
}

// NodeModule returns the absolute path of a file inside node_modules.
func NodeModule(rel string) string {
	return filepath.Join(Harness.Dir, "node_modules", filepath.FromSlash(rel))
}

// Entry points of the reference servers (see README.md).
func EverythingEntry() string {
	return NodeModule("@modelcontextprotocol/server-everything/dist/index.js")
}

func MemoryEntry() string {
	return NodeModule("@modelcontextprotocol/server-memory/dist/index.js")
}

// RandomHex returns n random bytes as hex.
func RandomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// FreeAddr returns a loopback address that was free a moment ago. Another
// process may take it before it is used; callers retry on "address in use".
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// SyncBuffer is a bytes.Buffer safe for one writer and many readers.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// EnvWithout returns env minus the variables named in drop.
func EnvWithout(env []string, drop ...string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, d := range drop {
			if k == d {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// Mux is one running viewmux process started by StartMux. Its methods are
// safe for concurrent use.
type Mux struct {
	Addr   string // host:port it listens on
	Marker string // value of MarkerEnv in its environment
	Dir    string // its working directory

	cmd    *exec.Cmd
	stderr *SyncBuffer
	stdout *SyncBuffer
	done   chan struct{} // closed once the process has been reaped
	state  *os.ProcessState
}

// MuxOptions tunes StartMuxWith. The zero value runs `viewmux serve --listen
// ADDR` in an empty temporary directory.
type MuxOptions struct {
	Config string   // TOML written to <Dir>/viewmux.toml and passed as --config; "" passes none
	Args   []string // extra arguments after `serve --listen ADDR`
	Dir    string   // working directory; "" = a new t.TempDir()
	Env    []string // KEY=VALUE added to the environment (after VIEWMUX_CONFIG is removed)
	Marker string   // value of MarkerEnv; "" = random
	Bin    string   // the binary to run; "" = the viewmux built by MuxBinary
	// StopTimeout bounds the wait after SIGTERM at cleanup; 0 = 20s.
	StopTimeout time.Duration
}

// URL returns the streamable HTTP endpoint.
func (m *Mux) URL() string { return "http://" + m.Addr + "/mcp" }

// PID returns the process id of viewmux.
func (m *Mux) PID() int { return m.cmd.Process.Pid }

// Stderr returns everything viewmux has written to stderr so far.
func (m *Mux) Stderr() string { return m.stderr.String() }

// Exited reports whether the process has exited.
func (m *Mux) Exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to viewmux (not to its process group: shutting down its
// children is viewmux's job, and the tests check that it does it).
func (m *Mux) Signal(sig syscall.Signal) error {
	return m.cmd.Process.Signal(sig)
}

// Wait waits up to timeout for viewmux to exit and returns its exit code (-1
// when killed by a signal). ok is false on timeout.
func (m *Mux) Wait(timeout time.Duration) (code int, ok bool) {
	select {
	case <-m.done:
		return m.state.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// kill SIGKILLs viewmux's process group and every process carrying its
// marker, then waits for viewmux to be reaped. It is the last resort of
// cleanup, never part of an assertion.
func (m *Mux) kill() {
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	KillMarked(m.Marker)
	<-m.done
}

// StartMux starts `viewmux serve --config F --listen ADDR` with configTOML as
// F and waits until GET /readyz answers 200. At cleanup it SIGTERMs viewmux,
// asserts a clean exit (code 0) and that no process it started survives, and
// on failure logs its stderr.
func StartMux(t *testing.T, configTOML string) *Mux {
	t.Helper()
	return StartMuxWith(t, MuxOptions{Config: configTOML})
}

// StartMuxWith is StartMux with options.
func StartMuxWith(t *testing.T, opts MuxOptions) *Mux {
	t.Helper()
	bin := opts.Bin
	if bin == "" {
		bin = MuxBinary(t)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	var cfgArgs []string
	if opts.Config != "" {
		path := filepath.Join(opts.Dir, "viewmux.toml")
		if err := os.WriteFile(path, []byte(InheritMarker(opts.Config)), 0o600); err != nil {
			t.Fatal(err)
		}
		cfgArgs = []string{"--config", path}
	}
	// The port may be taken between FreeAddr and viewmux's listen: retry.
	for attempt := 1; ; attempt++ {
		addr := FreeAddr(t)
		args := append([]string{"serve"}, cfgArgs...)
		args = append(args, "--listen", addr)
		args = append(args, opts.Args...)
		m, err := LaunchMux(t, bin, args, opts)
		if err != nil {
			t.Fatal(err)
		}
		m.Addr = addr
		err = m.WaitReady(30 * time.Second)
		if err == nil {
			return m
		}
		if attempt < 3 && m.Exited() && strings.Contains(m.Stderr(), "address already in use") {
			continue
		}
		m.kill()
		t.Fatalf("viewmux %s: %v\n--- viewmux stderr ---\n%s", strings.Join(args, " "), err, m.Stderr())
	}
}

// upstreamHeader matches the header of one [upstreams.NAME] table.
var upstreamHeader = regexp.MustCompile(`^\[upstreams\.[^.\]]+\]\s*(#.*)?$`)

// InheritMarker adds inherit_env = [MarkerEnv] to every stdio upstream
// table of configTOML that sets no inherit_env of its own. viewmux passes a
// child only the variables named there (and a few fixed ones), and the
// leak checks find children by MarkerEnv in their environment.
func InheritMarker(configTOML string) string {
	lines := strings.Split(configTOML, "\n")
	var out []string
	table := false  // inside an [upstreams.NAME] table
	commandAt := -1 // index in out of its command line
	hasInherit := false
	flush := func() {
		if table && commandAt >= 0 && !hasInherit {
			out = slices.Insert(out, commandAt+1, "inherit_env = ["+strconv.Quote(MarkerEnv)+"]")
		}
		table, commandAt, hasInherit = false, -1, false
	}
	for _, l := range lines {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "[") {
			flush()
			table = upstreamHeader.MatchString(trimmed)
		}
		if table && strings.HasPrefix(trimmed, "command") && strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(trimmed, "command")), "=") {
			commandAt = len(out)
		}
		if table && strings.HasPrefix(trimmed, "inherit_env") {
			hasInherit = true
		}
		out = append(out, l)
	}
	flush()
	return strings.Join(out, "\n")
}

// LaunchMux starts the process and registers its cleanup.
func LaunchMux(t *testing.T, bin string, args []string, opts MuxOptions) (*Mux, error) {
	t.Helper()
	if opts.Marker == "" {
		opts.Marker = RandomHex(t, 12)
	}
	m := &Mux{
		Marker: opts.Marker,
		Dir:    opts.Dir,
		stderr: &SyncBuffer{},
		stdout: &SyncBuffer{},
		done:   make(chan struct{}),
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = opts.Dir
	cmd.Env = append(EnvWithout(os.Environ(), "VIEWMUX_CONFIG", MarkerEnv), MarkerEnv+"="+m.Marker)
	cmd.Env = append(cmd.Env, opts.Env...)
	cmd.Stdout = m.stdout
	cmd.Stderr = m.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Upstream children that keep stderr open must not keep Wait from
	// returning once viewmux itself has exited.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	m.cmd = cmd
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		m.state = cmd.ProcessState
		close(m.done)
	}()

	stopTimeout := opts.StopTimeout
	if stopTimeout == 0 {
		stopTimeout = 20 * time.Second
	}
	// Registered first, so it runs last: the dump includes shutdown logs.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- viewmux %s stderr ---\n%s", strings.Join(args, " "), m.Stderr())
			if out := m.stdout.String(); out != "" {
				t.Logf("--- viewmux stdout ---\n%s", out)
			}
		}
	})
	t.Cleanup(func() {
		if !m.Exited() {
			if err := m.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("SIGTERM viewmux: %v", err)
			}
			code, ok := m.Wait(stopTimeout)
			switch {
			case !ok:
				t.Errorf("viewmux did not exit within %v of SIGTERM; killing it", stopTimeout)
				m.kill()
				return
			case code != 0:
				t.Errorf("viewmux exited with code %d after SIGTERM, want 0", code)
			}
		}
		if survivors := WaitNoMarked(m.Marker, 2*time.Second); len(survivors) > 0 {
			t.Errorf("processes started by viewmux survived it:\n%s", DescribeProcs(survivors))
			KillMarked(m.Marker)
		}
	})
	return m, nil
}

// WaitReady polls GET /readyz until it answers 200, the process exits, or
// timeout passes.
func (m *Mux) WaitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + m.Addr + "/readyz"
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		if m.Exited() {
			return fmt.Errorf("exited with code %d before %s answered 200 (last: %s)", m.state.ExitCode(), url, last)
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %v (last: %s)", url, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RunMux runs the viewmux binary to completion (bounded by timeout) in dir
// with extra env, and returns its exit code, stdout and stderr. A run that
// does not finish in time fails the test.
func RunMux(t *testing.T, timeout time.Duration, dir string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, MuxBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(EnvWithout(os.Environ(), "VIEWMUX_CONFIG"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("viewmux %s did not finish within %v\n--- stderr ---\n%s", strings.Join(args, " "), timeout, errb.String())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		code = 0
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("viewmux %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}

// nodeScriptTimeout bounds one run of a Node client script.
const nodeScriptTimeout = 2 * time.Minute

// RunNodeScript runs the Node script client/<name> with args, input on its
// stdin, in its own process group (killed whole on timeout), without the
// test marker in its environment. It returns its stdout and stderr, and an
// error when it failed to run, exited non-zero, or timed out.
func RunNodeScript(t testing.TB, name string, input []byte, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	RequireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), nodeScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Harness.Node, append([]string{filepath.Join(Harness.Dir, "client", name)}, args...)...)
	cmd.Dir = Harness.Dir
	cmd.Env = EnvWithout(os.Environ(), MarkerEnv)
	cmd.Stdin = bytes.NewReader(input)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within %s", name, nodeScriptTimeout)
	}
	return out.Bytes(), errOut.Bytes(), err
}

// StartLoopbackServer starts the command that command(addr) returns, for a
// free loopback addr, in its own process group, and returns addr once
// ready(addr, exited) returns nil. A server that loses the port to another
// process ("address already in use") is retried on a new one. It is stopped
// (SIGTERM, then SIGKILL after 5s) at cleanup; its output is logged if the
// test failed.
func StartLoopbackServer(t *testing.T, label string, command func(addr string) *exec.Cmd, ready func(addr string, exited <-chan struct{}) error) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addr := FreeAddr(t)
		out := &SyncBuffer{}
		cmd := command(addr)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", label, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
		}
		err := ready(addr, done)
		if err == nil {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("--- %s (%s) output ---\n%s", label, addr, out.String())
				}
			})
			return addr
		}
		stop()
		if attempt < 3 && strings.Contains(strings.ToLower(out.String()), "address already in use") { // nginx capitalizes it
			continue
		}
		t.Fatalf("%s on %s: %v\n--- output ---\n%s", label, addr, err, out.String())
	}
}
